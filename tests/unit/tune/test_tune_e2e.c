/* swy-tune end to end: a small grid measured by swy-bench interference on
 * 2 local ranks under swy-run; the config it writes must load and name
 * the candidate its CSV marks as chosen. Skips (77) when this swy-bench
 * has no interference benchmark.
 * Usage: test_tune_e2e SWY_TUNE SWY_RUN SWY_BENCH */
#include "util/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

#define FAIL(...)                                                            \
    do {                                                                     \
        fprintf(stderr, "FAIL: " __VA_ARGS__);                               \
        fprintf(stderr, "\n");                                               \
        return 1;                                                            \
    } while (0)

int main(int argc, char **argv)
{
    char dir[] = "/tmp/swy-tune-e2e-XXXXXX";
    char out[256], csv[256], svg[256], line[1024];
    char chosen_policy[64] = "";
    unsigned long long chosen_partition = 0;
    char chosen_credit[64] = "";
    int rows = 0, lina_64k = 0, lina_256k = 0, fair_64k = 0, fair_256k = 0;

    if (argc != 4) {
        fprintf(stderr, "usage: test_tune_e2e SWY_TUNE SWY_RUN SWY_BENCH\n");
        return 2;
    }
    char *help[] = {argv[3], "interference", "--help", NULL};
    if (run(help, 1) != 0) {
        printf("SKIP: %s has no interference benchmark\n", argv[3]);
        return 77;
    }
    if (mkdtemp(dir) == NULL)
        FAIL("mkdtemp");
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
    if (rc != 0 && rc != 1)
        FAIL("swy-tune exited %d", rc);

    FILE *f = fopen(csv, "r");
    if (f == NULL)
        FAIL("no CSV written");
    while (fgets(line, sizeof(line), f) != NULL) {
        int chosen;
        char policy[64], credit[64];
        unsigned long long partition;

        if (rows++ == 0)
            continue; /* header */
        if (sscanf(line, "%d,\"%63[^\"]\",%llu,%63[^,]", &chosen, policy,
                   &partition, credit) != 4)
            FAIL("CSV line unreadable: %s", line);
        lina_64k += strcmp(policy, "lina") == 0 && partition == 65536;
        lina_256k += strcmp(policy, "lina") == 0 && partition == 262144;
        fair_64k += strcmp(policy, "fair") == 0 && partition == 65536;
        fair_256k += strcmp(policy, "fair") == 0 && partition == 262144;
        if (chosen) {
            if (chosen_policy[0] != '\0')
                FAIL("two candidates marked chosen");
            snprintf(chosen_policy, sizeof(chosen_policy), "%s", policy);
            snprintf(chosen_credit, sizeof(chosen_credit), "%s", credit);
            chosen_partition = partition;
        }
    }
    fclose(f);
    if (lina_64k != 1 || lina_256k != 1 || fair_64k != 1 || fair_256k != 1)
        FAIL("grid rows missing: lina 64K %d, 256K %d; fair 64K %d, 256K "
             "%d", lina_64k, lina_256k, fair_64k, fair_256k);
    if (access(svg, R_OK) != 0)
        FAIL("no SVG written");

    if (rc == 1) {
        /* No feasible candidate: reported, nothing chosen or written. */
        if (chosen_policy[0] != '\0' || access(out, F_OK) == 0)
            FAIL("exit 1 but a candidate was chosen");
        printf("no feasible candidate on this run (allowed)\n");
    } else {
        if (chosen_policy[0] == '\0')
            FAIL("exit 0 but no candidate marked chosen");
        setenv("SWY_CONFIG", out, 1);
        unsetenv("SWY_POLICY");
        unsetenv("SWY_PARTITION_BYTES");
        unsetenv("SWY_CREDIT_BYTES");
        swy_config_reload();
        const char *policy = swy_config_get("SWY_POLICY");
        const char *credit = swy_config_get("SWY_CREDIT_BYTES");
        unsigned long long partition =
            swy_config_get_size("SWY_PARTITION_BYTES", 0);
        if (policy == NULL || strcmp(policy, chosen_policy) != 0 ||
            partition != chosen_partition || credit == NULL ||
            strcmp(credit, chosen_credit) != 0)
            FAIL("config (%s, %llu, %s) is not the chosen row (%s, %llu, "
                 "%s)", policy ? policy : "-", partition,
                 credit ? credit : "-", chosen_policy, chosen_partition,
                 chosen_credit);
        printf("chosen and loaded: %s %llu %s\n", policy, partition, credit);
    }
    unlink(out);
    unlink(csv);
    unlink(svg);
    rmdir(dir);
    return 0;
}
