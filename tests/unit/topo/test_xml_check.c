/* Damaged topology XML (SWY_TOPO_XML) ends in SWY_ERR_INVALID_ARG naming
 * the file, the line and the reason, never in a crash inside hwloc's
 * import: one mutation of a good file per rule of lib/topo/xml_check.c
 * (several crash hwloc 2.9 when they reach it), and every regression
 * input the fuzzer found (tests/fuzz/corpus/topo_xml/regress_*). The good
 * files of that corpus still load.
 *   test_topo_xml_check CORPUS_DIR */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "topo/topo.h"
#include "util/status.h"

static char good_text[8192];

static int read_file(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        return -1;
    n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0 && n < len - 1 ? 0 : -1;
}

/* Load text as an XML file: the status, the message in msg. */
static swy_status_t load_text(const char *text, char *path, size_t path_len,
                              char *msg, size_t msg_len)
{
    swy_topo_local_t local;
    swy_status_t status;
    int fd;

    snprintf(path, path_len, "/tmp/swy-xml-check-XXXXXX");
    fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    close(fd);
    status = swy_topo_discover_from(path, NULL, &local);
    snprintf(msg, msg_len, "%s", status != SWY_OK ? swy_err_last() : "");
    unlink(path);
    return status;
}

/* good_text with the first `from` replaced by `to`: refused, the message
 * names the file, "line N" and `reason`. */
static void expect_refused(const char *from, const char *to, int line,
                           const char *reason)
{
    static char text[16384];
    char path[64], msg[1024], where[32];
    const char *at = strstr(good_text, from);

    if (at == NULL) {
        fprintf(stderr, "case '%s': '%s' not in the good file\n", reason,
                from);
        check_failures++;
        return;
    }
    snprintf(text, sizeof(text), "%.*s%s%s", (int)(at - good_text),
             good_text, to, at + strlen(from));
    snprintf(where, sizeof(where), "line %d:", line);
    CHECK(load_text(text, path, sizeof(path), msg, sizeof(msg)) ==
          SWY_ERR_INVALID_ARG);
    if (strstr(msg, path) == NULL || strstr(msg, where) == NULL ||
        strstr(msg, reason) == NULL) {
        fprintf(stderr, "case '%s' (line %d): got \"%s\"\n", reason, line,
                msg);
        check_failures++;
    }
}

static void test_rules(void)
{
    /* hwloc 2.9: SIGSEGV in hwloc_bitmap_set (inserting a PU). */
    expect_refused(" complete_cpuset=\"0x00000003\" allowed_cpuset",
                   " allowed_cpuset", 4,
                   "Machine object without complete_cpuset");
    /* hwloc 2.9: SIGSEGV in hwloc_bitmap_or (propagating nodesets). */
    expect_refused("complete_nodeset=\"0x00000001\" gp_index=\"7\"",
                   "gp_index=\"7\"", 10,
                   "NUMANode object without complete_nodeset");
    expect_refused(" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" "
                   "allowed_nodeset",
                   " complete_nodeset=\"0x00000001\" allowed_nodeset", 4,
                   "Machine object without nodeset");
    /* hwloc 2.9: the object keeps type HWLOC_OBJ_TYPE_MAX. */
    expect_refused("<object type=\"Core\" os_index=\"0\"",
                   "<object os_index=\"0\"", 13,
                   "without a type as its first attribute");
    expect_refused("<object type=\"Core\" os_index=\"0\"",
                   "<object os_index=\"0\" type=\"Core\"", 13,
                   "without a type as its first attribute");
    expect_refused("<object type=\"Core\" os_index=\"0\"",
                   "<object type=\"Cor\" os_index=\"0\"", 13,
                   "unknown object type \"Cor\"");
    expect_refused("<object type=\"Machine\"", "<object type=\"Package\"", 4,
                   "the root object is a Package, not a Machine");
    /* hwloc 2.9: assertion (abort) in hwloc_bitmap_sscanf. */
    expect_refused("<object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\"",
                   "<object type=\"PU\" os_index=\"0\" cpuset=\",0x1,0x1\"",
                   14, "cpuset=\",0x1,0x1\" is not an hwloc bitmap");
    expect_refused("<object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\"",
                   "<object type=\"PU\" os_index=\"0\" cpuset=\"0x1 \"", 14,
                   "is not an hwloc bitmap");
    expect_refused("<object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\"",
                   "<object type=\"PU\" os_index=\"0\" cpuset=\"0x1,\"", 14,
                   "is not an hwloc bitmap");
    /* A 512 MiB bitmap in hwloc for one bit. */
    expect_refused("<object type=\"PU\" os_index=\"0\"",
                   "<object type=\"PU\" os_index=\"4000000000\"", 14,
                   "os_index=\"4000000000\" is not a decimal of at most "
                   "1048575");
    expect_refused("<object type=\"PU\" os_index=\"0\"",
                   "<object type=\"PU\" os_index=\"-1\"", 14,
                   "os_index=\"-1\"");
    expect_refused("gp_index=\"2\"", "gp_index=\"2x\"", 14,
                   "gp_index=\"2x\" is not a decimal");
    /* hwloc allocates nbobjs^2 values before reading them. */
    expect_refused("  <support name=\"discovery.pu\"/>",
                   "  <distances2 type=\"PU\" nbobjs=\"65536\" kind=\"5\" "
                   "indexing=\"os\">\n  </distances2>",
                   21, "nbobjs=\"65536\" is not a decimal whose matrix "
                       "fits in the file");
    /* hwloc 2.9: assertion (abort) in hwloc_internal_memattr_set_value. */
    expect_refused("  <support name=\"discovery.pu\"/>",
                   "  <memattr name=\"Capacity\" flags=\"1\">\n"
                   "    <memattr_value target_obj_type=\"NUMANode\" "
                   "target_obj_gp_index=\"7\" value=\"5\"/>\n"
                   "  </memattr>",
                   21, "memory attribute Capacity is computed by hwloc");
    /* hwloc 2.9 leaks the object when a child fails its import. */
    expect_refused("<page_type size", "<page_typo size", 11,
                   "unknown element <page_typo> inside <object>");
    expect_refused("<info name=\"Backend\"", "<info nam=\"Backend\"", 5,
                   "unknown attribute nam of <info>");
    expect_refused("        <object type=\"PU\" os_index=\"0\"",
                   "        <userdata length=\"5\">abc</userdata>\n"
                   "        <object type=\"PU\" os_index=\"0\"",
                   14, "<userdata> content is not 5 plain bytes");
    expect_refused("<topology version=\"2.0\">", "<topology>", 3,
                   "not a hwloc 2 topology");
    expect_refused("        <object type=\"PU\" os_index=\"0\"",
                   "t>\n        <object type=\"PU\" os_index=\"0\"", 14,
                   "text inside <object>");
    expect_refused("value=\"pack:1 core:2 pu:1\"",
                   "value=\"pack:1 core:2 pu:1 >\"", 6,
                   "'>' in the value of attribute value");
    expect_refused("        <page_type", "\r        <page_type", 11,
                   "a carriage return inside <object>");
    /* Well-formedness and limits. */
    expect_refused("</topology>", "</topolog>", 25,
                   "</topolog> closes <topology>");
    expect_refused("  </object>\n  <support", "  </objet>\n  <support", 20,
                   "</objet> closes <object>");
    expect_refused("</topology>", "", 26, "end of file inside <topology>");
    expect_refused("<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">",
                   "<!DOCTYPE topology [<!ENTITY a \"b\">]>", 2,
                   "internal subset");
    /* hwloc 2.9: SIGSEGV in strcmp (libxml2 import, no system id). */
    expect_refused("<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">",
                   "<!DOCTYPE topology>", 2, "DOCTYPE is not");
    expect_refused("<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">",
                   "<!DOCTYPE topology SYSTEM \"\">", 2, "DOCTYPE is not");
    expect_refused("encoding=\"UTF-8\"", "encoding=\"UTF-16\"", 1,
                   "an encoding other than UTF-8");
    expect_refused("value=\"Synthetic\"", "value=\"Synth&etic;\"", 5,
                   "unknown entity reference in attribute value");
    expect_refused("gp_index=\"1\"", "gp_index=\"1\" gp_index=\"1\"", 4,
                   "attribute gp_index given twice");
    expect_refused("</topology>", "</topology>\n<topology/>", 26,
                   "content after </topology>");
    /* hwloc 2.9: SIGSEGV in hwloc_topology_load (no NUMA node, a root
     * cpuset outside its allowed cpuset; regress_crash_no_numanode). */
    expect_refused("      <object type=\"NUMANode\" os_index=\"0\" "
                   "cpuset=\"0x00000003\" complete_cpuset=\"0x00000003\" "
                   "nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" "
                   "gp_index=\"7\" local_memory=\"1073741824\">\n"
                   "        <page_type size=\"4096\" count=\"262144\"/>\n"
                   "      </object>\n",
                   "", 22, "<topology> without a NUMANode object");
}

/* A topology with a NUMA node and no PU: refused by the check, not by
 * hwloc. */
static void test_no_pu(void)
{
    char path[64], msg[1024];
    const char *text =
        "<topology version=\"2.0\">\n"
        "<object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\" "
        "complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\">\n"
        "<object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x1\" "
        "complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\"/>\n"
        "</object>\n"
        "</topology>\n";
    CHECK(load_text(text, path, sizeof(path), msg, sizeof(msg)) ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(msg, "line 5: <topology> without a PU object") != NULL);
}

/* Nesting deeper than the limit, each level a valid object. */
static void test_depth(void)
{
    static char text[65536];
    char path[64], msg[1024];
    size_t n = 0;

    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "<topology version=\"2.0\">\n");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "<object type=\"Machine\" cpuset=\"0x1\" "
                              "complete_cpuset=\"0x1\" nodeset=\"0x1\" "
                              "complete_nodeset=\"0x1\">\n");
    CHECK(load_text(text, path, sizeof(path), msg, sizeof(msg)) ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(msg, "line 65: elements nested more than 64 deep") !=
          NULL);
}

/* The good files load; every regression input is refused cleanly. */
static void test_corpus(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int good = 0, regress = 0;

    CHECK(d != NULL);
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        swy_topo_local_t local;
        swy_status_t status;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        status = swy_topo_discover_from(path, NULL, &local);
        if (strncmp(e->d_name, "regress_", 8) == 0) {
            regress++;
            if (status != SWY_ERR_INVALID_ARG ||
                strstr(swy_err_last(), path) == NULL) {
                fprintf(stderr, "%s: status %d, \"%s\"\n", e->d_name,
                        (int)status, swy_err_last());
                check_failures++;
            }
        } else {
            good++;
            if (status != SWY_OK || local.n_pus < 1) {
                fprintf(stderr, "%s: status %d, \"%s\"\n", e->d_name,
                        (int)status, swy_err_last());
                check_failures++;
            }
        }
    }
    closedir(d);
    CHECK(good >= 2);
    CHECK(regress >= 1);
    printf("corpus: %d good files loaded, %d regression inputs refused\n",
           good, regress);
}

int main(int argc, char **argv)
{
    char path[4096];

    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/synthetic_2core.xml", argv[1]);
    if (read_file(path, good_text, sizeof(good_text)) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    setenv("SWY_LOG_LEVEL", "error", 1);

    test_rules();
    test_no_pu();
    test_depth();
    test_corpus(argv[1]);
    if (check_failures != 0)
        fprintf(stderr, "%d failure(s)\n", (int)check_failures);
    return check_failures != 0;
}
