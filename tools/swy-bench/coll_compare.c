/* swy-bench coll's comparison with Open MPI and ucx_perftest; see
 * coll_compare.h. */
#include "coll_compare.h"

#include "tool_find.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* How long a peer may run before it is taken for hung: Open MPI over
 * 4 KiB – 64 MiB takes seconds (about 0.2 s per point); a perftest
 * client well under one. */
#define MPI_DEADLINE_S 600.0
#define PERFTEST_DEADLINE_S 60.0
#define PERFTEST_BYTES "16777216"
#define PERFTEST_TRIES 10
#define OUTPUT_MAX ((size_t)1 << 20)

int swyb_compare_args_take(int argc, char **argv, int first, int rank,
                           swyb_compare_mode_t *mode_p)
{
    swyb_compare_mode_t mode = SWYB_COMPARE_AUTO;
    int out = first;

    for (int i = first; i < argc; ++i) {
        const char *value = NULL;

        if (strcmp(argv[i], "--") == 0) {
            /* Everything after "--" is left to the parser. */
            while (i < argc) {
                argv[out++] = argv[i++];
            }
            break;
        }
        if (strncmp(argv[i], "--compare=", 10) == 0) {
            value = argv[i] + 10;
        } else if (strcmp(argv[i], "--compare") == 0) {
            if (i + 1 >= argc) {
                if (rank == 0) {
                    fprintf(stderr, "swy-bench coll: --compare needs auto, "
                                    "none or require\n");
                }
                return -1;
            }
            value = argv[++i];
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if (strcmp(value, "auto") == 0) {
            mode = SWYB_COMPARE_AUTO;
        } else if (strcmp(value, "none") == 0) {
            mode = SWYB_COMPARE_NONE;
        } else if (strcmp(value, "require") == 0) {
            mode = SWYB_COMPARE_REQUIRE;
        } else {
            if (rank == 0) {
                fprintf(stderr, "swy-bench coll: --compare needs auto, none "
                                "or require, not '%s'\n", value);
            }
            return -1;
        }
    }
    argv[out] = NULL;
    *mode_p = mode;
    return out;
}

static uint64_t fnv1a(uint64_t hash, const char *text)
{
    for (; *text != '\0'; ++text) {
        hash = (hash ^ (unsigned char)*text) * UINT64_C(0x100000001b3);
    }
    return hash;
}

double swyb_host_key(void)
{
    char host[256] = "";
    char boot_id[64] = "";
    FILE *file = fopen("/proc/sys/kernel/random/boot_id", "r");
    uint64_t hash = UINT64_C(0xcbf29ce484222325);

    gethostname(host, sizeof(host) - 1);
    if (file != NULL) {
        if (fgets(boot_id, sizeof(boot_id), file) == NULL) {
            boot_id[0] = '\0';
        }
        fclose(file);
    }
    hash = fnv1a(fnv1a(fnv1a(hash, host), ":"), boot_id);
    /* 52 bits: every such integer is a double exactly. */
    return (double)(hash & ((UINT64_C(1) << 52) - 1));
}

/* ---- finding and running the peers ---- */

/* swy-bench-mpi: $SWY_BENCH_MPI, else found as tools find the programs
 * they run (tool_find.h). */
static int peer_exe_find(char *path, size_t len)
{
    const char *env = getenv("SWY_BENCH_MPI");

    if (env != NULL && *env != '\0') {
        snprintf(path, len, "%s", env);
        return access(path, X_OK) == 0;
    }
    return swy_tool_find("swy-bench-mpi", "swy-bench-mpi", path, len);
}

/* The environment for a peer: this job's identity removed (the ranks'
 * numbers and rendezvous from swy-run, torchrun, Slurm, and, when an
 * mpirun started this job, its own job variables, which a second mpirun
 * must not inherit). The user's other settings, OMPI_MCA_* included,
 * stay. */
static int env_is_job_identity(const char *entry, int under_mpirun)
{
    static const char *const prefixes[] = {
        "SWY_RANK=", "SWY_WORLD_SIZE=", "SWY_LOCAL_RANK=",
        "SWY_LOCAL_WORLD_SIZE=", "SWY_ROOT=", "SWY_JOB_KEY=", "SWY_NODE=",
        "SWY_NNODES=", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=",
        "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "SLURM_",
        "PMI_", "PMIX_"};

    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); ++i) {
        if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0) {
            return 1;
        }
    }
    return under_mpirun && (strncmp(entry, "OMPI_", 5) == 0 ||
                            (strncmp(entry, "OPAL_", 5) == 0 &&
                             strncmp(entry, "OPAL_PREFIX=", 12) != 0));
}

static char **peer_env_create(void)
{
    int under_mpirun = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
    size_t n = 0;
    char **env;

    while (environ[n] != NULL) {
        ++n;
    }
    env = calloc(n + 1, sizeof(*env));
    if (env == NULL) {
        return NULL;
    }
    n = 0;
    for (char **e = environ; *e != NULL; ++e) {
        if (!env_is_job_identity(*e, under_mpirun)) {
            env[n++] = *e;
        }
    }
    env[n] = NULL;
    return env;
}

/* A child in its own process group (so that a hung mpirun goes with all
 * it started), stdout and stderr into *out_p (NUL-terminated, at most
 * OUTPUT_MAX kept), or to /dev/null with out_p NULL and no wait
 * (*pid_p: a server to wait for or kill). Returns the exit status as
 * waitpid gives it, or -1 when it could not start, or -2 when the
 * deadline passed (then it was killed). */
static int child_run(char *const *argv, char **env, double deadline_s,
                     char **out_p, pid_t *pid_p)
{
    int pipe_fds[2] = {-1, -1};
    pid_t pid;
    int status = -1;

    if (out_p != NULL && pipe(pipe_fds) != 0) {
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        if (out_p != NULL) {
            close(pipe_fds[0]);
            close(pipe_fds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        int fd = out_p != NULL ? pipe_fds[1] : open("/dev/null", O_WRONLY);

        setpgid(0, 0);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        if (out_p != NULL) {
            close(pipe_fds[0]);
        }
        execve(argv[0], argv, env);
        _exit(127);
    }
    setpgid(pid, pid);
    if (out_p == NULL) {
        *pid_p = pid;
        return 0;
    }
    close(pipe_fds[1]);

    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    double deadline = swyb_now_s() + deadline_s;
    int timed_out = 0;

    for (;;) {
        struct pollfd pfd = {.fd = pipe_fds[0], .events = POLLIN};
        double left = deadline - swyb_now_s();
        char buf[4096];
        ssize_t got;

        if (left <= 0.0) {
            timed_out = 1;
            break;
        }
        if (poll(&pfd, 1, (int)(left * 1000.0) + 1) < 0 && errno != EINTR) {
            break;
        }
        if (pfd.revents == 0) {
            continue;
        }
        got = read(pipe_fds[0], buf, sizeof(buf));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            break;
        }
        if (out != NULL && len + (size_t)got + 1 > cap && cap < OUTPUT_MAX) {
            size_t want = cap * 2 < OUTPUT_MAX ? cap * 2 : OUTPUT_MAX;
            char *grown = realloc(out, want);

            if (grown != NULL) {
                out = grown;
                cap = want;
            }
        }
        if (out != NULL && len + (size_t)got + 1 <= cap) {
            memcpy(out + len, buf, (size_t)got);
            len += (size_t)got;
        }
    }
    close(pipe_fds[0]);
    if (timed_out) {
        kill(-pid, SIGKILL);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (out != NULL) {
        out[len] = '\0';
    }
    *out_p = out;
    return timed_out ? -2 : status;
}

static const char *status_text(int status, char *buf, size_t len)
{
    if (status == -1) {
        snprintf(buf, len, "could not start");
    } else if (status == -2) {
        snprintf(buf, len, "killed after its deadline");
    } else if (WIFEXITED(status)) {
        snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    } else {
        snprintf(buf, len, "status %d", status);
    }
    return buf;
}

/* The tail of a peer's output, for a failure's message. */
static void output_tail_print(const char *what, const char *out)
{
    size_t len = out != NULL ? strlen(out) : 0;
    size_t from = len > 2000 ? len - 2000 : 0;

    fprintf(stderr, "swy-bench coll: %s said:\n%s%s", what, out + from,
            len > 0 && out[len - 1] != '\n' ? "\n" : "");
}

/* ---- Open MPI ---- */

typedef struct {
    char op[16];
    size_t bytes;
    double median_us;
    double busbw_GBps;
    int correct;
} peer_point_t;

/* The number after "key": in a JSON line; -1 where there is none. */
static int json_number(const char *line, const char *key, double *value_p)
{
    char pattern[64];
    const char *at;
    char *end;

    snprintf(pattern, sizeof(pattern), "\"%s\":", key);
    at = strstr(line, pattern);
    if (at == NULL) {
        return -1;
    }
    *value_p = strtod(at + strlen(pattern), &end);
    return end == at + strlen(pattern) ? -1 : 0;
}

static int json_string(const char *line, const char *key, char *buf,
                       size_t len)
{
    char pattern[64];
    const char *at;
    size_t n;

    snprintf(pattern, sizeof(pattern), "\"%s\":\"", key);
    at = strstr(line, pattern);
    if (at == NULL) {
        return -1;
    }
    at += strlen(pattern);
    n = strcspn(at, "\"");
    if (n + 1 > len) {
        return -1;
    }
    memcpy(buf, at, n);
    buf[n] = '\0';
    return 0;
}

/* The "coll" lines of swy-bench-mpi's output (impl openmpi). */
static size_t peer_points_parse(char *out, peer_point_t *points, size_t max)
{
    size_t n = 0;

    for (char *line = strtok(out, "\n"); line != NULL && n < max;
         line = strtok(NULL, "\n")) {
        peer_point_t p = {0};
        char impl[32], check[16];
        double bytes;

        if (strstr(line, "{\"bench\":\"coll\"") == NULL ||
            json_string(line, "impl", impl, sizeof(impl)) != 0 ||
            strcmp(impl, "openmpi") != 0 ||
            json_string(line, "op", p.op, sizeof(p.op)) != 0 ||
            json_number(line, "bytes", &bytes) != 0 ||
            json_number(line, "time_us_median", &p.median_us) != 0 ||
            json_number(line, "busbw_GBps", &p.busbw_GBps) != 0 ||
            json_string(line, "check", check, sizeof(check)) != 0) {
            continue;
        }
        p.bytes = (size_t)bytes;
        p.correct = strcmp(check, "ok") == 0;
        points[n++] = p;
    }
    return n;
}

/* Run Open MPI; its points into *points_p (caller frees). Returns the
 * number of points, or -1 after saying why on stdout (auto) or stderr. */
static long mpi_run(int nranks, char **options, int noptions, char **env,
                    char *cmd, size_t cmd_len, peer_point_t **points_p)
{
    char mpirun[PATH_MAX], peer[PATH_MAX], np[16], why[64];
    char **argv;
    char *out = NULL;
    int argc = 0, status;

    if (!peer_exe_find(peer, sizeof(peer))) {
        snprintf(cmd, cmd_len, "not run: swy-bench-mpi not found (built "
                 "only where Open MPI is; SWY_BENCH_MPI names it)");
        return -1;
    }
    if (!swy_tool_find("mpirun", NULL, mpirun, sizeof(mpirun))) {
        snprintf(cmd, cmd_len, "not run: no mpirun on PATH");
        return -1;
    }
    argv = calloc((size_t)noptions + 10, sizeof(*argv));
    if (argv == NULL) {
        snprintf(cmd, cmd_len, "not run: out of memory");
        return -1;
    }
    snprintf(np, sizeof(np), "%d", nranks);
    argv[argc++] = mpirun;
    argv[argc++] = "--allow-run-as-root";
    argv[argc++] = "--oversubscribe";
    argv[argc++] = "-np";
    argv[argc++] = np;
    argv[argc++] = peer;
    argv[argc++] = "coll";
    argv[argc++] = "--json";
    for (int i = 0; i < noptions; ++i) {
        if (strcmp(options[i], "--json") != 0) {
            argv[argc++] = options[i];
        }
    }
    argv[argc] = NULL;

    size_t at = 0;
    for (int i = 0; i < argc && at < cmd_len; ++i) {
        at += (size_t)snprintf(cmd + at, cmd_len - at, "%s%s",
                               i > 0 ? " " : "", argv[i]);
    }
    status = child_run(argv, env, MPI_DEADLINE_S, &out, NULL);
    free(argv);
    if (status != 0 || out == NULL) {
        status_text(status, why, sizeof(why));
        fprintf(stderr, "swy-bench coll: Open MPI's run failed (%s): %s\n",
                why, cmd);
        if (out != NULL) {
            output_tail_print("swy-bench-mpi", out);
        }
        snprintf(cmd, cmd_len, "failed (%s; its output is on stderr)", why);
        free(out);
        return -1;
    }

    size_t max = 256;
    peer_point_t *points = calloc(max, sizeof(*points));
    size_t n = points != NULL ? peer_points_parse(out, points, max) : 0;

    free(out);
    *points_p = points;
    return (long)n;
}

/* ---- ucx_perftest ---- */

/* ucx_perftest's result line with -f: eight numbers (iterations,
 * overhead p50 / average / overall, bandwidth average / overall in MB/s
 * of 2^20 bytes, message rate average / overall). */
static double perftest_GBps_parse(char *out)
{
    for (char *line = strtok(out, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        double v[9];
        int used = 0, n = 0;
        char *p = line;

        if (strncmp(p, "Final:", 6) == 0) {
            p += 6;
        }
        while (n < 9 && sscanf(p, "%lf%n", &v[n], &used) == 1) {
            p += used;
            ++n;
        }
        while (*p == ' ' || *p == '\t' || *p == '\r') {
            ++p;
        }
        if (n == 8 && *p == '\0') {
            return v[5] * 1048576.0 / 1e9;
        }
    }
    return 0.0;
}

/* The server exits after serving its one client; one that has not
 * within @p grace_s (none to serve: 0) is killed. */
static void server_reap(pid_t server, double grace_s)
{
    double deadline = swyb_now_s() + grace_s;
    struct timespec tick = {0, 10 * 1000 * 1000};
    int status;

    while (waitpid(server, &status, WNOHANG) == 0) {
        if (swyb_now_s() >= deadline) {
            kill(-server, SIGKILL);
            while (waitpid(server, &status, 0) < 0 && errno == EINTR) {
            }
            return;
        }
        nanosleep(&tick, NULL);
    }
}

/* The limit: tag_bw of 16 MiB between two local processes, as
 * tools/bench-coll.sh runs it. Returns GB/s, or 0 with *why set. */
static double perftest_run(char **env, char *why, size_t why_len)
{
    char exe[PATH_MAX], port[16], text[64];
    pid_t server = -1;
    double GBps = 0.0;
    int status = -1;

    if (!swy_tool_find("ucx_perftest", NULL, exe, sizeof(exe))) {
        snprintf(why, why_len, "not run: no ucx_perftest on PATH "
                 "(ucx-utils)");
        return 0.0;
    }
    /* A port of its own, so that two benchmarks on one host do not meet. */
    srand((unsigned)(getpid() ^ (unsigned)time(NULL)));
    snprintf(port, sizeof(port), "%d", 20000 + rand() % 20000);
    char *server_argv[] = {exe, "-t", "tag_bw", "-s", PERFTEST_BYTES, "-n",
                           "100", "-w", "10", "-p", port, NULL};
    char *client_argv[] = {exe, "127.0.0.1", "-t", "tag_bw", "-s",
                           PERFTEST_BYTES, "-n", "100", "-w", "10", "-p",
                           port, "-f", NULL};

    if (child_run(server_argv, env, 0.0, NULL, &server) != 0) {
        snprintf(why, why_len, "not run: its server could not start");
        return 0.0;
    }
    for (int attempt = 0; attempt < PERFTEST_TRIES && GBps == 0.0;
         ++attempt) {
        char *out = NULL;
        struct timespec pause = {0, 500 * 1000 * 1000};

        nanosleep(&pause, NULL);
        status = child_run(client_argv, env, PERFTEST_DEADLINE_S, &out,
                           NULL);
        if (status == 0 && out != NULL) {
            GBps = perftest_GBps_parse(out);
        }
        free(out);
    }
    if (GBps == 0.0) {
        snprintf(why, why_len, "failed: the client's last try: %s",
                 status_text(status, text, sizeof(text)));
    }
    server_reap(server, GBps > 0.0 ? PERFTEST_DEADLINE_S : 0.0);
    return GBps;
}

/* ---- the table ---- */

static const peer_point_t *peer_point_find(const peer_point_t *points,
                                           long n, const char *op,
                                           size_t bytes)
{
    for (long i = 0; i < n; ++i) {
        if (strcmp(points[i].op, op) == 0 && points[i].bytes == bytes) {
            return &points[i];
        }
    }
    return NULL;
}

int swyb_coll_compare(swyb_compare_mode_t mode, const char *why_not,
                      int nranks, const swyb_coll_result_t *swy, size_t n,
                      char **options, int noptions, int json)
{
    char mpi_cmd[2048], perf_why[256] = "";
    peer_point_t *points = NULL;
    long npoints = -1;
    double perf_GBps = 0.0;
    int failed = 0;
    char **env;

    if (mode == SWYB_COMPARE_NONE) {
        return 0;
    }
    if (why_not != NULL) {
        printf("# compare: no peer run: %s\n", why_not);
        if (mode == SWYB_COMPARE_REQUIRE) {
            fprintf(stderr, "swy-bench coll: --compare require: %s\n",
                    why_not);
        }
        return mode == SWYB_COMPARE_REQUIRE;
    }
    env = peer_env_create();
    if (env == NULL) {
        fprintf(stderr, "swy-bench coll: out of memory for the peers\n");
        return mode == SWYB_COMPARE_REQUIRE;
    }
    printf("# compare: the peers on this host, run by rank 0 after "
           "Switchyard's ranks finished\n");
    fflush(stdout);
    npoints = mpi_run(nranks, options, noptions, env, mpi_cmd,
                      sizeof(mpi_cmd), &points);
    printf("# openmpi: %s\n", mpi_cmd);
    perf_GBps = perftest_run(env, perf_why, sizeof(perf_why));
    if (perf_GBps > 0.0) {
        printf("# limit: ucx_perftest tag_bw 16 MiB (127.0.0.1): %.3f GB/s "
               "(%%perftest: Switchyard's allreduce busbw over it)\n",
               perf_GBps);
    } else {
        printf("# limit: ucx_perftest %s\n", perf_why);
    }
    failed = npoints < 0 || perf_GBps <= 0.0;
    free(env);

    if (npoints >= 0) {
        printf("%-10s %8s %14s %12s %10s %10s %10s %9s %6s\n", "op", "size",
               "switchyard(us)", "openmpi(us)", "mpi/swy", "swy busbw",
               "mpi busbw", "%perftest", "check");
    }
    for (size_t i = 0; npoints >= 0 && i < n; ++i) {
        const swyb_coll_result_t *r = &swy[i];
        const peer_point_t *p = peer_point_find(points, npoints, r->op,
                                                r->bytes);
        int is_allreduce = strcmp(r->op, "allreduce") == 0;
        double pct = is_allreduce && perf_GBps > 0.0
                         ? 100.0 * r->busbw_GBps / perf_GBps
                         : 0.0;
        char size[32], pct_text[16] = "";

        swyb_size_format(r->bytes, size, sizeof(size));
        if (pct > 0.0) {
            snprintf(pct_text, sizeof(pct_text), "%.0f%%", pct);
        }
        if (p == NULL) {
            printf("%-10s %8s %14.1f %12s %10s %10.3f %10s %9s %6s\n", r->op,
                   size, r->time_s.median * 1e6, "-", "-", r->busbw_GBps,
                   "-", pct_text, r->correct ? "ok" : "WRONG");
            failed = 1;
            continue;
        }
        failed |= !p->correct || !r->correct;
        printf("%-10s %8s %14.1f %12.1f %9.2fx %10.3f %10.3f %9s %6s\n",
               r->op, size, r->time_s.median * 1e6, p->median_us,
               p->median_us / (r->time_s.median * 1e6), r->busbw_GBps,
               p->busbw_GBps, pct_text,
               r->correct && p->correct ? "ok" : "WRONG");
    }
    /* JSON after the table, as the benchmark's own lines. */
    for (size_t i = 0; json && npoints >= 0 && i < n; ++i) {
        const swyb_coll_result_t *r = &swy[i];
        const peer_point_t *p = peer_point_find(points, npoints, r->op,
                                                r->bytes);

        if (p == NULL) {
            continue;
        }
        printf("{\"bench\":\"coll_compare\",\"op\":\"%s\",\"bytes\":%zu,"
               "\"ranks\":%d,\"switchyard_us\":%.3f,\"openmpi_us\":%.3f,"
               "\"openmpi_over_switchyard\":%.4f,"
               "\"switchyard_busbw_GBps\":%.4f,"
               "\"openmpi_busbw_GBps\":%.4f,\"perftest_GBps\":%.4f,"
               "\"mem\":\"%s\",\"check\":\"%s\"}\n",
               r->op, r->bytes, r->ranks, r->time_s.median * 1e6,
               p->median_us, p->median_us / (r->time_s.median * 1e6),
               r->busbw_GBps, p->busbw_GBps, perf_GBps,
               r->mem != NULL ? r->mem : "malloc",
               r->correct && p->correct ? "ok" : "WRONG");
    }
    fflush(stdout);
    free(points);
    if (failed && mode == SWYB_COMPARE_REQUIRE) {
        fprintf(stderr, "swy-bench coll: --compare require: a peer did not "
                        "run, ran wrong, or left a point out\n");
        return 1;
    }
    return 0;
}
