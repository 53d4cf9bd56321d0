/* Link classes, the default matrix, node numbering and the SWY_TOPO_FILE
 * override, on fabricated rank descriptions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "topo/topo.h"
#include "util/config.h"
#include "util/status.h"

static int close_to(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fabs(b);
}

/* 2 hosts x 2 NUMA nodes x 2 ranks: rank r on host r / 4, NUMA node
 * (r / 2) % 2. */
static void make_cluster(swy_topo_local_t ranks[8])
{
    memset(ranks, 0, 8 * sizeof(ranks[0]));
    for (int r = 0; r < 8; r++) {
        snprintf(ranks[r].hostname, sizeof(ranks[r].hostname), "host%d",
                 r / 4);
        snprintf(ranks[r].host_id, sizeof(ranks[r].host_id),
                 "host%d:0f0e0d0c-0000-4000-8000-00000000000%d", r / 4,
                 r / 4);
        ranks[r].n_packages = 2;
        ranks[r].n_numa = 2;
        ranks[r].n_cores = 8;
        ranks[r].n_pus = 16;
        ranks[r].numa = (r / 2) % 2;
        ranks[r].package = (r / 2) % 2;
        snprintf(ranks[r].source, sizeof(ranks[r].source), "synthetic");
    }
}

static void write_file(char *path, const char *text)
{
    int fd = mkstemp(path);

    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

static void test_names(void)
{
    CHECK(swy_topo_link_class_parse("self") == SWY_LINK_SELF);
    CHECK(swy_topo_link_class_parse("same_numa") == SWY_LINK_SAME_NUMA);
    CHECK(swy_topo_link_class_parse("same_node") == SWY_LINK_SAME_NODE);
    CHECK(swy_topo_link_class_parse("cross_node") == SWY_LINK_CROSS_NODE);
    CHECK(swy_topo_link_class_parse("crossnode") == -1);
    CHECK(swy_topo_link_class_parse(NULL) == -1);
    CHECK(strcmp(swy_topo_link_class_name(SWY_LINK_SAME_NODE),
                 "same_node") == 0);
    CHECK(strcmp(swy_topo_link_class_name(SWY_LINK_NCLASSES), "unknown") ==
          0);
}

static void test_classes_and_defaults(void)
{
    /* Expected class of each pair, written out: rows are ranks 0..7. */
    static const swy_link_class_t expected[8][8] = {
#define S SWY_LINK_SELF
#define N SWY_LINK_SAME_NUMA
#define H SWY_LINK_SAME_NODE
#define X SWY_LINK_CROSS_NODE
        {S, N, H, H, X, X, X, X}, {N, S, H, H, X, X, X, X},
        {H, H, S, N, X, X, X, X}, {H, H, N, S, X, X, X, X},
        {X, X, X, X, S, N, H, H}, {X, X, X, X, N, S, H, H},
        {X, X, X, X, H, H, S, N}, {X, X, X, X, H, H, N, S},
#undef S
#undef N
#undef H
#undef X
    };
    /* Defaults from the brief: B/s and s per class. */
    static const double bandwidth[SWY_LINK_NCLASSES] = {20e9, 20e9, 12e9,
                                                        12.5e9};
    static const double latency[SWY_LINK_NCLASSES] = {0.2e-6, 0.3e-6,
                                                      0.5e-6, 2e-6};
    swy_topo_local_t ranks[8];
    swy_topo_t *topo = NULL;

    make_cluster(ranks);
    CHECK(swy_topo_build(ranks, 8, 3, &topo) == SWY_OK);
    if (topo == NULL)
        return;
    CHECK(swy_topo_nranks(topo) == 8);
    CHECK(swy_topo_myrank(topo) == 3);
    CHECK(swy_topo_nnodes(topo) == 2);
    for (int a = 0; a < 8; a++) {
        CHECK(swy_topo_node_of(topo, a) == a / 4);
        CHECK(strcmp(swy_topo_rank_info(topo, a)->host_id,
                     ranks[a].host_id) == 0);
        for (int b = 0; b < 8; b++) {
            swy_link_class_t cls = swy_topo_link_class(topo, a, b);

            CHECK(cls == expected[a][b]);
            CHECK(close_to(swy_topo_bandwidth(topo, a, b),
                           bandwidth[expected[a][b]]));
            CHECK(close_to(swy_topo_latency(topo, a, b),
                           latency[expected[a][b]]));
        }
    }
    for (int cls = 0; cls < SWY_LINK_NCLASSES; cls++) {
        CHECK(close_to(swy_topo_default_bandwidth(cls), bandwidth[cls]));
        CHECK(close_to(swy_topo_default_latency(cls), latency[cls]));
    }
    CHECK(swy_topo_node_of(topo, 8) == -1);
    CHECK(swy_topo_rank_info(topo, -1) == NULL);

    swy_topo_set_link(topo, 1, 6, 1e9, 5e-6);
    CHECK(close_to(swy_topo_bandwidth(topo, 1, 6), 1e9));
    CHECK(close_to(swy_topo_latency(topo, 1, 6), 5e-6));
    CHECK(close_to(swy_topo_bandwidth(topo, 6, 1), 12.5e9));
    swy_topo_destroy(topo);
    swy_topo_destroy(NULL);
}

/* Unbound ranks (numa -1) on one host are SAME_NODE, never SAME_NUMA;
 * nodes are numbered by first appearance. */
static void test_unbound_and_numbering(void)
{
    swy_topo_local_t ranks[8];
    swy_topo_t *topo = NULL;
    /* host of each rank: B A B C A C */
    static const int host[6] = {1, 0, 1, 2, 0, 2};
    static const int node[6] = {0, 1, 0, 2, 1, 2};

    memset(ranks, 0, sizeof(ranks));
    for (int r = 0; r < 6; r++) {
        snprintf(ranks[r].host_id, sizeof(ranks[r].host_id), "h%d:boot",
                 host[r]);
        ranks[r].numa = -1;
    }
    ranks[3].numa = 0;
    ranks[5].numa = 0;
    CHECK(swy_topo_build(ranks, 6, 0, &topo) == SWY_OK);
    if (topo == NULL)
        return;
    CHECK(swy_topo_nnodes(topo) == 3);
    for (int r = 0; r < 6; r++)
        CHECK(swy_topo_node_of(topo, r) == node[r]);
    CHECK(swy_topo_link_class(topo, 0, 2) == SWY_LINK_SAME_NODE);
    CHECK(swy_topo_link_class(topo, 1, 4) == SWY_LINK_SAME_NODE);
    CHECK(swy_topo_link_class(topo, 3, 5) == SWY_LINK_SAME_NUMA);
    CHECK(swy_topo_link_class(topo, 0, 1) == SWY_LINK_CROSS_NODE);
    CHECK(swy_topo_link_class(topo, 4, 4) == SWY_LINK_SELF);
    swy_topo_destroy(topo);

    CHECK(swy_topo_build(ranks, 0, 0, &topo) == SWY_ERR_INVALID_ARG);
    CHECK(swy_topo_build(ranks, 6, 6, &topo) == SWY_ERR_INVALID_ARG);
    CHECK(swy_topo_build(NULL, 6, 0, &topo) == SWY_ERR_INVALID_ARG);
}

static void test_file(void)
{
    char path[] = "/tmp/swy-topo-file-XXXXXX";
    /* The pair line comes before the class line on purpose: pair lines
     * win whatever the order. */
    const char *text = "# measured on the test bed\n"
                       "\n"
                       "1 6  0.5 7.25   # one slow pair\n"
                       "cross_node 1.25 10\n"
                       "\tsame_numa 30 0.125\n"
                       "2 2 40 0.05\n";
    swy_topo_local_t ranks[8];
    swy_topo_t *topo = NULL;

    make_cluster(ranks);
    write_file(path, text);
    setenv("SWY_TOPO_FILE", path, 1);
    swy_config_reload();
    CHECK(swy_topo_build(ranks, 8, 0, &topo) == SWY_OK);
    unsetenv("SWY_TOPO_FILE");
    swy_config_reload();
    if (topo == NULL) {
        fprintf(stderr, "build: %s\n", swy_err_last());
        unlink(path);
        return;
    }
    CHECK(close_to(swy_topo_bandwidth(topo, 1, 6), 0.5e9));
    CHECK(close_to(swy_topo_latency(topo, 1, 6), 7.25e-6));
    CHECK(close_to(swy_topo_bandwidth(topo, 6, 1), 0.5e9));
    CHECK(close_to(swy_topo_latency(topo, 6, 1), 7.25e-6));
    CHECK(close_to(swy_topo_bandwidth(topo, 0, 7), 1.25e9));
    CHECK(close_to(swy_topo_latency(topo, 0, 7), 10e-6));
    CHECK(close_to(swy_topo_bandwidth(topo, 4, 5), 30e9));
    CHECK(close_to(swy_topo_latency(topo, 4, 5), 0.125e-6));
    CHECK(close_to(swy_topo_bandwidth(topo, 2, 2), 40e9));
    CHECK(close_to(swy_topo_latency(topo, 2, 2), 0.05e-6));
    /* Untouched classes keep their defaults. */
    CHECK(close_to(swy_topo_bandwidth(topo, 3, 3), 20e9));
    CHECK(close_to(swy_topo_bandwidth(topo, 0, 2), 12e9));
    CHECK(close_to(swy_topo_latency(topo, 0, 2), 0.5e-6));
    CHECK(swy_topo_link_class(topo, 1, 6) == SWY_LINK_CROSS_NODE);
    unlink(path);
    swy_topo_destroy(topo);
}

/* Each malformed file fails with SWY_ERR_INVALID_ARG, the message naming
 * "path:line", and leaves the matrix as it was. */
static void test_file_errors(void)
{
    static const struct {
        const char *text;
        int line;
        const char *detail;
    } cases[] = {
        {"self 10 1\n# fine\nsame_numa 10\n", 3, "fields"},
        {"warp_speed 10 1\n", 1, "warp_speed"},
        {"cross_node 1 1\n0 9 1 1\n", 2, "0 9"},
        {"0 1 fast 1\n", 1, "fast"},
        {"\n\n0 1 2 -1\n", 3, "-1"},
        {"same_node 0 1\n", 1, "'0'"},
        {"0 1 2 3 4\n", 1, "fields"},
        {"1.5 2 3 4\n", 1, "1.5 2"},
    };
    swy_topo_local_t ranks[8];
    swy_topo_t *topo = NULL;

    make_cluster(ranks);
    CHECK(swy_topo_build(ranks, 8, 0, &topo) == SWY_OK);
    if (topo == NULL)
        return;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char path[] = "/tmp/swy-topo-bad-XXXXXX";
        char where[64];

        write_file(path, cases[i].text);
        snprintf(where, sizeof(where), "%s:%d:", path, cases[i].line);
        CHECK(swy_topo_load_file(topo, path) == SWY_ERR_INVALID_ARG);
        if (strstr(swy_err_last(), where) == NULL ||
            strstr(swy_err_last(), cases[i].detail) == NULL) {
            fprintf(stderr, "case %zu: message '%s' lacks '%s' or '%s'\n", i,
                    swy_err_last(), where, cases[i].detail);
            check_failures++;
        }
        unlink(path);
    }
    /* Nothing of the failed files was applied (case 0 had a good line 1,
     * case 2 a good line 1). */
    CHECK(close_to(swy_topo_bandwidth(topo, 0, 0), 20e9));
    CHECK(close_to(swy_topo_bandwidth(topo, 0, 7), 12.5e9));

    CHECK(swy_topo_load_file(topo, "/nonexistent/swy-topo-file") ==
          SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "/nonexistent/swy-topo-file") != NULL);

    /* Bounded reading: special files are refused by name (/dev/zero was
     * once read until memory ran out, a FIFO would block), as is a line
     * longer than any real one. */
    CHECK(swy_topo_load_file(topo, "/dev/zero") == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "'/dev/zero' is a character device") !=
          NULL);
    char fifo[] = "/tmp/swy-topo-fifo-XXXXXX";
    int fifo_fd = mkstemp(fifo);
    CHECK(fifo_fd >= 0);
    close(fifo_fd);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(swy_topo_load_file(topo, fifo) == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "is a FIFO") != NULL);
    unlink(fifo);
    CHECK(swy_topo_load_file(topo, "/tmp") == SWY_ERR_INVALID_ARG);
    CHECK(strstr(swy_err_last(), "is a directory") != NULL);
    {
        char long_path[] = "/tmp/swy-topo-long-XXXXXX";
        int fd = mkstemp(long_path);
        CHECK(fd >= 0);
        char line[3000];
        memset(line, ' ', sizeof(line));
        memcpy(line, "self 20 0.5", 11);
        line[sizeof(line) - 1] = '\n';
        CHECK(write(fd, "same_node 9 1\n", 14) == 14);
        CHECK(write(fd, line, sizeof(line)) == (ssize_t)sizeof(line));
        close(fd);
        CHECK(swy_topo_load_file(topo, long_path) == SWY_ERR_INVALID_ARG);
        char where[64];
        snprintf(where, sizeof(where), "%s:2: line of 2999 bytes",
                 long_path);
        CHECK(strstr(swy_err_last(), where) != NULL);
        unlink(long_path);
    }

    /* A bad SWY_TOPO_FILE makes the build fail. */
    setenv("SWY_TOPO_FILE", "/nonexistent/swy-topo-file", 1);
    swy_config_reload();
    swy_topo_destroy(topo);
    topo = (swy_topo_t *)&check_failures; /* must stay untouched on failure */
    CHECK(swy_topo_build(ranks, 8, 0, &topo) == SWY_ERR_INVALID_ARG);
    CHECK(topo == (swy_topo_t *)&check_failures);
    unsetenv("SWY_TOPO_FILE");
    swy_config_reload();
}

int main(void)
{
    unsetenv("SWY_TOPO_FILE");
    swy_config_reload();
    test_names();
    test_classes_and_defaults();
    test_unbound_and_numbering();
    test_file();
    test_file_errors();
    if (check_failures != 0)
        fprintf(stderr, "%d failure(s)\n", check_failures);
    return check_failures != 0;
}
