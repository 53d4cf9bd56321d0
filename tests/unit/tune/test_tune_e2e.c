/* swy-tune end to end: a small grid measured by swy-bench interference on
 * 2 local ranks under swy-run must end in a choice, and the choice must be
 * the one its own CSV proves: recomputed here from the measured columns
 * (every verdict against 90% of fair's allreduce at the same partition,
 * then the fastest loaded all-to-all among the feasible rows, ties within
 * 2% to the higher allreduce throughput); the config it writes must load
 * and name that row. Skips (77) when this swy-bench has no interference
 * benchmark.
 * Usage: test_tune_e2e SWY_TUNE SWY_RUN SWY_BENCH */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/config.h"

static int run(char *const argv[], int quiet)
{
    int status;
    pid_t pid = fork();

    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (quiet) {
            FILE *null = freopen("/dev/null", "w", stdout);
            (void)null;
            null = freopen("/dev/null", "w", stderr);
            (void)null;
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (waitpid(pid, &status, 0) < 0)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

typedef struct {
    int chosen;
    char policy[64], credit[64], verdict[32];
    unsigned long long partition;
    double a2a_loaded_ms, allreduce_MBps;
} row_t;

#define MAX_ROWS 16

/* Reads one CSV row (the columns of tools/swy-tune/report.c). */
static int row_parse(const char *line, row_t *r)
{
    double alone, p95, slowdown, ar_alone, floor_MBps, score;
    return sscanf(line,
                  "%d,\"%63[^\"]\",%llu,%63[^,],%lf,%lf,%lf,%lf,%lf,%lf,%lf,"
                  "%31[^,],%lf",
                  &r->chosen, r->policy, &r->partition, r->credit, &alone,
                  &r->a2a_loaded_ms, &p95, &slowdown, &r->allreduce_MBps,
                  &ar_alone, &floor_MBps, r->verdict, &score) == 13
               ? 0
               : -1;
}

static void rows_print(const row_t *rows, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(stderr, "  %s%s %llu: loaded %.3f ms, allreduce %.1f MB/s, "
                "%s\n", rows[i].chosen ? "* " : "  ", rows[i].policy,
                rows[i].partition, rows[i].a2a_loaded_ms,
                rows[i].allreduce_MBps, rows[i].verdict);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/swy-tune-e2e-XXXXXX";
    char out[256], csv[256], svg[256], line[1024];
    row_t rows[MAX_ROWS];
    int n = 0, header = 1;

    if (argc != 4) {
        fprintf(stderr, "usage: test_tune_e2e SWY_TUNE SWY_RUN SWY_BENCH\n");
        return 2;
    }
    char *help[] = {argv[3], "interference", "--help", NULL};
    if (run(help, 1) != 0) {
        printf("SKIP: %s has no interference benchmark\n", argv[3]);
        return TEST_SKIP;
    }
    CHECK_RET(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(out, sizeof(out), "%s/tuned.conf", dir);
    snprintf(csv, sizeof(csv), "%s/tune.csv", dir);
    snprintf(svg, sizeof(svg), "%s/tune.svg", dir);

    /* Tiny all-to-all, a backlog big enough to outlast it. */
    char *tune[] = {argv[1], "--bench", argv[3], "--policies", "lina,fair",
                    "--partitions", "64K,256K", "--credits", "auto",
                    "--bench-args",
                    "--a2a-size 64K --allreduce-size 16M --reps 3 "
                    "--warmup 1 --delay-ms 2",
                    "--timeout", "100", "--out", out, "--csv", csv, "--svg",
                    svg, "--", argv[2], "-n", "2", "--timeout", "90", NULL};
    int rc = run(tune, 0);

    FILE *f = fopen(csv, "r");
    CHECK_RET(f != NULL, "no CSV written (swy-tune exited %d)", rc);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (header) {
            header = 0;
            continue;
        }
        CHECK_RET(n != MAX_ROWS && row_parse(line, &rows[n]) == 0,
                  "CSV line unreadable or one too many: %s", line);
        n++;
    }
    fclose(f);
    CHECK_RET(access(svg, R_OK) == 0, "no SVG written");
    int grid[2][2] = {{0, 0}, {0, 0}};
    for (int i = 0; i < n; i++) {
        int p = strcmp(rows[i].policy, "lina") == 0   ? 0
                : strcmp(rows[i].policy, "fair") == 0 ? 1
                                                      : -1;
        int q = rows[i].partition == 65536    ? 0
                : rows[i].partition == 262144 ? 1
                                              : -1;
        CHECK_RET(p >= 0 && q >= 0, "row outside the grid: %s %llu",
                  rows[i].policy, rows[i].partition);
        grid[p][q]++;
    }
    CHECK_RET(n == 4 && grid[0][0] == 1 && grid[0][1] == 1 &&
                  grid[1][0] == 1 && grid[1][1] == 1,
              "the grid is not lina, fair x 64K, 256K once each (%d rows)", n);
    /* The table comes first, so that a failure below is read against it. */
    rows_print(rows, n);

    /* The verdicts, from fair's row at each partition. A row the
     * benchmark found wrong fails the test; "no-load" (the backlog ended
     * before the all-to-all) rests on a column the CSV does not carry. */
    for (int i = 0; i < n; i++) {
        const row_t *fair = NULL;
        for (int j = 0; j < n; j++)
            if (strcmp(rows[j].policy, "fair") == 0 &&
                rows[j].partition == rows[i].partition)
                fair = &rows[j];
        CHECK_RET(strcmp(rows[i].verdict, "WRONG") != 0,
                  "a wrong result in %s %llu", rows[i].policy,
                  rows[i].partition);
        if (strcmp(rows[i].verdict, "no-load") == 0)
            continue;
        int ok = rows[i].allreduce_MBps >= 0.90 * fair->allreduce_MBps;
        CHECK_RET(ok == (strcmp(rows[i].verdict, "ok") == 0),
                  "%s %llu: verdict %s, but its allreduce is %.1f MB/s "
                  "against fair's %.1f", rows[i].policy, rows[i].partition,
                  rows[i].verdict, rows[i].allreduce_MBps,
                  fair->allreduce_MBps);
    }
    /* The choice: fastest feasible, ties within 2% to the allreduce. */
    double best = -1.0;
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].verdict, "ok") == 0 &&
            (best < 0.0 || rows[i].a2a_loaded_ms < best))
            best = rows[i].a2a_loaded_ms;
    int want = -1, chosen = -1;
    for (int i = 0; i < n; i++) {
        if (rows[i].chosen) {
            CHECK_RET(chosen < 0, "two candidates marked chosen");
            chosen = i;
        }
        if (strcmp(rows[i].verdict, "ok") != 0 ||
            rows[i].a2a_loaded_ms > best * 1.02)
            continue;
        if (want < 0 || rows[i].allreduce_MBps > rows[want].allreduce_MBps)
            want = i;
    }
    CHECK_RET(want >= 0, "no feasible candidate (swy-tune exited %d): a run "
              "must prove a choice", rc);
    CHECK_RET(rc == 0 && chosen == want && access(out, R_OK) == 0,
              "swy-tune exited %d and chose %s, where the CSV proves %s %llu",
              rc, chosen >= 0 ? rows[chosen].policy : "nothing",
              rows[want].policy, rows[want].partition);

    setenv("SWY_CONFIG", out, 1);
    unsetenv("SWY_POLICY");
    unsetenv("SWY_PARTITION_BYTES");
    unsetenv("SWY_CREDIT_BYTES");
    swy_config_reload();
    const char *policy = swy_config_get("SWY_POLICY");
    const char *credit = swy_config_get("SWY_CREDIT_BYTES");
    unsigned long long partition =
        swy_config_get_size("SWY_PARTITION_BYTES", 0);
    CHECK_RET(policy != NULL && strcmp(policy, rows[want].policy) == 0 &&
                  partition == rows[want].partition && credit != NULL &&
                  strcmp(credit, rows[want].credit) == 0,
              "config (%s, %llu, %s) is not the chosen row (%s, %llu, %s)",
              policy ? policy : "-", partition, credit ? credit : "-",
              rows[want].policy, rows[want].partition, rows[want].credit);
    printf("chosen, proven from the CSV and loaded: %s %llu %s\n", policy,
           partition, credit);
    unlink(out);
    unlink(csv);
    unlink(svg);
    rmdir(dir);
    return 0;
}
