/* The plugin loader: broken plugins are rejected with a message that says
 * what is wrong, a missing one names the directories searched, and the
 * real ucx plugin loads through SWY_PLUGIN_PATH. The search is
 * SWY_PLUGIN_PATH, then "switchyard" beside the binary that holds the
 * loader (this test links it statically), and nothing compiled in: the
 * install directory is not searched by name.
 * argv: <dir of the broken test plugins> <the loader's own plugin dir>
 *       <ucx plugin path> <install dir> */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/transport.h"

#include "../unit/transport/transport_test.h"


static const char *test_dir;

/* Open <test_dir>/swy-transport-<name>.so; expect status and a message
 * containing text. */
static void expect_rejected(const char *name, swy_status_t expected,
                            const char *text)
{
    char path[4096], why[2048] = "";
    snprintf(path, sizeof(path), "%s/swy-transport-%s.so", test_dir, name);
    const swy_transport_v1_t *ops = NULL;
    void *handle = NULL;
    swy_transport_v1_t table;
    swy_status_t status = swy_transport_plugin_open(path, &table, &ops,
                                                    &handle, why, sizeof(why));
    printf("%-8s -> %s: %s\n", name, swy_status_string(status), why);
    CHECK(status == expected);
    CHECK(strstr(why, text) != NULL);
    CHECK(strstr(why, path) != NULL); /* names the file */
    CHECK(ops == NULL && handle == NULL); /* outputs only on success */
}

/* The send-hints table of <test_dir>/swy-transport-<name>.so (or of
 * path): expect status, a message containing text (NULL: no message) and
 * a table only on success. */
static void expect_hints(const char *name, const char *path_in,
                         swy_status_t expected, const char *text, int table)
{
    char path[4096], why[2048] = "";
    if (path_in != NULL)
        snprintf(path, sizeof(path), "%s", path_in);
    else
        snprintf(path, sizeof(path), "%s/swy-transport-%s.so", test_dir,
                 name);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(handle != NULL);
    if (handle == NULL)
        return;
    const swy_send_hints_v1_t *hints = (const void *)&hints; /* poison */
    swy_send_hints_v1_t copy;
    swy_status_t status = swy_send_hints_plugin_symbol(handle, path, &copy,
                                                       &hints, why,
                                                       sizeof(why));
    printf("hints %-9s -> %s: %s\n", name, swy_status_string(status), why);
    CHECK(status == expected);
    CHECK(text == NULL || strstr(why, text) != NULL);
    CHECK(text == NULL || strstr(why, path) != NULL);
    CHECK(table ? hints != NULL && hints->isend_hinted != NULL
                : hints == NULL);
    dlclose(handle);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s TEST_PLUGIN_DIR OWN_PLUGIN_DIR UCX_PLUGIN "
                "INSTALL_DIR\n", argv[0]);
        return 2;
    }
    test_dir = argv[1];
    const char *own_dir = argv[2], *install_dir = argv[4];

    expect_rejected("badabi", SWY_ERR_INVALID_ARG,
                    "wrong ABI version 99 of swy_transport_plugin_v1 "
                    "(expected 1)");
    expect_rejected("nosym", SWY_ERR_INVALID_ARG,
                    "no symbol swy_transport_plugin_v1");
    /* Below the table's first release: refused (a larger one is a later
     * release's, read up to this host's sizeof). */
    expect_rejected("badsize", SWY_ERR_INVALID_ARG,
                    "of its first release");
    expect_rejected("nullfn", SWY_ERR_INVALID_ARG, "init is NULL");
    expect_rejected("absent", SWY_ERR_UNSUPPORTED, "not found");

    /* The optional send-hints table: absent is fine, broken is named. */
    expect_hints("badabi", NULL, SWY_OK, NULL, 0);
    expect_hints("hintsabi", NULL, SWY_ERR_INVALID_ARG,
                 "wrong ABI version 7 of swy_send_hints_plugin_v1", 0);
    expect_hints("hintsnewer", NULL, SWY_OK, NULL, 1);
    expect_hints("hintsnull", NULL, SWY_ERR_INVALID_ARG,
                 "isend_hinted is NULL", 0);
    expect_hints("ucx", argv[3], SWY_OK, NULL, 1);

    /* A file that is no shared object. */
    char junk[] = "/tmp/swy-transport-junkXXXXXX";
    int fd = mkstemp(junk);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, "not ELF\n", 8) == 8);
        close(fd);
        char why[2048] = "";
        const swy_transport_v1_t *ops = NULL;
        void *handle = NULL;
        swy_transport_v1_t table;
        CHECK(swy_transport_plugin_open(junk, &table, &ops, &handle, why,
                                        sizeof(why)) == SWY_ERR_INVALID_ARG);
        printf("junk     -> %s\n", why);
        CHECK(strstr(why, "cannot load") != NULL);
        unlink(junk);
    }

    /* A name found nowhere: the message lists every directory tried, the
     * SWY_PLUGIN_PATH ones first. */
    char path[4096], why[8192] = "";
    swy_status_t status = swy_transport_plugin_find("nosuchplugin", path,
                                                    sizeof(path), why,
                                                    sizeof(why));
    printf("find nosuchplugin -> %s: %s\n", swy_status_string(status), why);
    CHECK(status == SWY_ERR_UNSUPPORTED);
    CHECK(strstr(why, "swy-transport-nosuchplugin.so not found in: ") !=
          NULL);
    const char *test_dir_at = strstr(why, test_dir);
    const char *own_at = strstr(why, own_dir);
    CHECK(test_dir_at != NULL && own_at != NULL && test_dir_at < own_at);
    CHECK(strstr(why, install_dir) == NULL);

    /* SWY_PLUGIN_PATH finds the test plugins, and opening still checks. */
    CHECK(swy_transport_plugin_find("badabi", path, sizeof(path), why,
                                    sizeof(why)) == SWY_OK);
    CHECK(strncmp(path, test_dir, strlen(test_dir)) == 0);

    /* The real plugin: found through SWY_PLUGIN_PATH, opens, is ucx. */
    status = swy_transport_plugin_find("ucx", path, sizeof(path), why,
                                       sizeof(why));
    printf("find ucx -> %s: %s\n", swy_status_string(status),
           status == SWY_OK ? path : why);
    CHECK(status == SWY_OK);
    if (status == SWY_OK) {
        char *want = realpath(argv[3], NULL), *got = realpath(path, NULL);
        CHECK(want != NULL && got != NULL && strcmp(want, got) == 0);
        free(want);
        free(got);
        const swy_transport_v1_t *ops = NULL;
        void *handle = NULL;
        swy_transport_v1_t table;
        CHECK(swy_transport_plugin_open(path, &table, &ops, &handle, why,
                                        sizeof(why)) == SWY_OK);
        CHECK(ops != NULL && strcmp(ops->name, "ucx") == 0);
        CHECK(ops != NULL && ops->abi_version == SWY_TRANSPORT_ABI_V1);
        /* Only the ABI symbol is exported. */
        CHECK(handle != NULL && dlsym(handle, "ucx_init") == NULL);
        if (handle != NULL)
            dlclose(handle);
    }

    if (check_failures != 0) {
        fprintf(stderr, "%d checks failed\n", check_failures);
        return 1;
    }
    printf("plugin loader: all checks passed\n");
    return 0;
}
