/* Tests of swy-run, run as a real program against run_helper ranks.
 * Usage: test_run CASE SWY_RUN RUN_HELPER. Each CASE is one meson test. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char *swy_run_path;
static const char *helper_path;
static char        work_dir[4096];
/* swy-run's stdout is a pipe whose reader has gone (`swy-run | head`). */
static bool        stdout_reader_gone;
/* swy-run leads its own process group, as a terminal's foreground job. */
static bool        own_process_group;
/* The case ran to its end; otherwise a check failed (check.h's CHECK_EXIT)
 * and failure_show tells what swy-run printed. */
static bool        case_done;

typedef struct {
    int    status;   /* as from waitpid */
    double elapsed_s;
    char  *out;      /* swy-run's stdout, NUL-terminated */
    size_t out_len;
    char  *err;      /* swy-run's stderr */
} result_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double seconds)
{
    struct timespec ts = {(time_t)seconds,
                          (long)((seconds - (time_t)seconds) * 1e9)};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static char *file_read(const char *path, size_t *len_p)
{
    FILE  *f = fopen(path, "r");
    char  *data = NULL;
    size_t len = 0, cap = 0, got;

    if (f == NULL) {
        return NULL;
    }
    do {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            data = realloc(data, cap);
            if (data == NULL) {
                abort();
            }
        }
        got = fread(data + len, 1, 65536, f);
        len += got;
    } while (got > 0);
    fclose(f);
    data[len] = '\0';
    if (len_p != NULL) {
        *len_p = len;
    }
    return data;
}

static void work_dir_remove(void)
{
    DIR           *dir = opendir(work_dir);
    struct dirent *entry;

    if (dir == NULL) {
        return;
    }
    while ((entry = readdir(dir)) != NULL) {
        char path[8192];

        if (strcmp(entry->d_name, ".") == 0 ||
            strcmp(entry->d_name, "..") == 0) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", work_dir, entry->d_name);
        unlink(path);
    }
    closedir(dir);
    rmdir(work_dir);
}

/* At exit before the case's end: the last swy-run's output, from the
 * work directory that is kept for a look. */
static void failure_show(void)
{
    char   path[8192];
    char  *out, *err;
    size_t out_len = 0;

    if (case_done) {
        return;
    }
    snprintf(path, sizeof(path), "%s/stdout", work_dir);
    out = file_read(path, &out_len);
    snprintf(path, sizeof(path), "%s/stderr", work_dir);
    err = file_read(path, NULL);
    if (out != NULL || err != NULL) {
        fprintf(stderr, "--- swy-run stdout (%zu bytes, first 2000) ---\n"
                "%.2000s\n--- swy-run stderr ---\n%s\n", out_len,
                out ? out : "", err ? err : "");
    }
    fprintf(stderr, "(work directory kept: %s)\n", work_dir);
    free(out);
    free(err);
}

/* Starts swy-run with argv (argv[0] is ignored) and extra NAME=value
 * variables; its stdout and stderr go to files in the work directory. */
static pid_t swy_run_start(const char *const *argv, const char *const *env)
{
    pid_t pid = fork();

    CHECK_EXIT(pid >= 0, "fork: %s", strerror(errno));
    if (own_process_group) {
        setpgid(pid, pid);
    }
    if (pid == 0) {
        char path[8192];
        int  fd;

        if (own_process_group) {
            setpgid(0, 0);
        }
        for (; env != NULL && *env != NULL; ++env) {
            putenv((char *)*env);
        }
        fd = open("/dev/null", O_RDONLY);
        dup2(fd, STDIN_FILENO);
        snprintf(path, sizeof(path), "%s/stdout", work_dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (stdout_reader_gone) {
            int fds[2];

            if (pipe(fds) != 0) {
                _exit(126);
            }
            close(fds[0]);
            fd = fds[1];
        }
        dup2(fd, STDOUT_FILENO);
        snprintf(path, sizeof(path), "%s/stderr", work_dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, STDERR_FILENO);
        execv(swy_run_path, (char *const *)argv);
        _exit(126);
    }
    return pid;
}

/* Waits at most limit_s for swy-run; a hang is a failure. */
static result_t swy_run_wait(pid_t pid, double start_s, double limit_s)
{
    result_t res = {0};
    char     path[8192];
    pid_t    done;

    while ((done = waitpid(pid, &res.status, WNOHANG)) == 0) {
        bool hung = now_s() - start_s > limit_s;

        if (hung) {
            kill(pid, SIGKILL);
            waitpid(pid, &res.status, 0);
        }
        CHECK_EXIT(!hung, "swy-run still running after %.1f s", limit_s);
        sleep_s(0.01);
    }
    CHECK_EXIT(done >= 0, "waitpid: %s", strerror(errno));
    res.elapsed_s = now_s() - start_s;
    snprintf(path, sizeof(path), "%s/stdout", work_dir);
    res.out = file_read(path, &res.out_len);
    snprintf(path, sizeof(path), "%s/stderr", work_dir);
    res.err = file_read(path, NULL);
    CHECK_EXIT(res.out != NULL && res.err != NULL,
               "cannot read swy-run's output files");
    return res;
}

static result_t swy_run(const char *const *argv, const char *const *env,
                        double limit_s)
{
    double start = now_s();

    return swy_run_wait(swy_run_start(argv, env), start, limit_s);
}

static void result_free(result_t *res)
{
    free(res->out);
    free(res->err);
    res->out = NULL;
    res->err = NULL;
}

static int exit_code(const result_t *res)
{
    return WIFEXITED(res->status) ? WEXITSTATUS(res->status) : -1;
}

static pid_t rank_pid_read(int rank)
{
    char  path[8192];
    char *text;
    long  pid;

    snprintf(path, sizeof(path), "%s/pid.%d", work_dir, rank);
    text = file_read(path, NULL);
    if (text == NULL) {
        return 0;
    }
    pid = atol(text);
    free(text);
    return (pid_t)pid;
}

/* Every rank wrote its pid, and none of those processes exists now. */
static void ranks_gone_check(int world_size)
{
    for (int r = 0; r < world_size; ++r) {
        pid_t pid = rank_pid_read(r);

        CHECK_EXIT(pid > 0, "rank %d wrote no pid file", r);
        CHECK_EXIT(kill(pid, 0) != 0 && errno == ESRCH,
                   "rank %d (pid %d) still exists after swy-run exited", r,
                   (int)pid);
    }
}

static size_t count_lines(const char *text)
{
    size_t n = 0;

    for (; *text != '\0'; ++text) {
        n += *text == '\n';
    }
    return n;
}

/* (a) Variables, prefixes, stdout and stderr, for 4 ranks. */
static void case_env(void)
{
    const char *argv[] = {"swy-run", "-n", "4", helper_path, "env", NULL};
    const char *clean_env[] = {"SWY_ROOT=", "SWY_JOB_KEY=", NULL};
    result_t    res = swy_run(argv, clean_env, 20);
    char        root[256] = "", key[256] = "";
    bool        seen[4] = {false};
    char       *line, *save;

    CHECK_EXIT(exit_code(&res) == 0, "exit status %d, expected 0",
               exit_code(&res));
    CHECK_EXIT(count_lines(res.out) == 4, "expected 4 stdout lines");
    for (line = strtok_r(res.out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        int  prefix_rank, rank, size, local, local_size, port, used = 0;
        char line_root[256], line_key[256];

        CHECK_EXIT(sscanf(line, "[%d] rank=%d size=%d local=%d "
                          "localsize=%d root=127.0.0.1:%d key=%255s%n",
                          &prefix_rank, &rank, &size, &local, &local_size,
                          &port, line_key, &used) == 7 &&
                       line[used] == '\0',
                   "malformed line '%s'", line);
        CHECK_EXIT(prefix_rank == rank && rank >= 0 && rank < 4,
                   "line '%s': prefix and SWY_RANK disagree", line);
        CHECK_EXIT(!seen[rank], "rank %d appears twice", rank);
        seen[rank] = true;
        CHECK_EXIT(size == 4 && local == rank && local_size == 4,
                   "line '%s': wrong SWY_WORLD_SIZE, SWY_LOCAL_RANK or "
                   "SWY_LOCAL_WORLD_SIZE", line);
        CHECK_EXIT(port > 0 && port < 65536, "line '%s': bad port", line);
        CHECK_EXIT(strlen(line_key) == 64, "line '%s': key not 64 chars",
                   line);
        for (int i = 0; i < 64; ++i) {
            CHECK_EXIT(isxdigit((unsigned char)line_key[i]),
                       "line '%s': key not hex", line);
        }
        snprintf(line_root, sizeof(line_root), "127.0.0.1:%d", port);
        if (root[0] == '\0') {
            strcpy(root, line_root);
            strcpy(key, line_key);
        }
        CHECK_EXIT(strcmp(root, line_root) == 0 && strcmp(key, line_key) == 0,
                   "ranks disagree on SWY_ROOT or SWY_JOB_KEY");
    }
    CHECK_EXIT(count_lines(res.err) == 4, "expected 4 stderr lines");
    for (int r = 0; r < 4; ++r) {
        char expected[64];

        snprintf(expected, sizeof(expected), "[%d] stderr of rank %d\n", r,
                 r);
        CHECK_EXIT(strstr(res.err, expected) != NULL, "no '%s' on stderr",
                   expected);
    }

    /* A second job gets a fresh key. */
    {
        result_t again = swy_run(argv, clean_env, 20);

        CHECK_EXIT(strstr(again.out, key) == NULL,
                   "two jobs got the same SWY_JOB_KEY");
        result_free(&again);
    }

    /* The caller's SWY_ROOT and SWY_JOB_KEY are kept; --no-prefix. */
    {
        const char *set_env[] = {"SWY_ROOT=10.1.2.3:4567",
                                 "SWY_JOB_KEY=feedface", NULL};
        const char *np_argv[] = {"swy-run", "--no-prefix", "-n", "2",
                                 helper_path, "env", NULL};
        result_t    kept = swy_run(np_argv, set_env, 20);

        CHECK_EXIT(exit_code(&kept) == 0, "exit status %d",
                   exit_code(&kept));
        CHECK_EXIT(strstr(kept.out, "rank=0 size=2 local=0 localsize=2 "
                          "root=10.1.2.3:4567 key=feedface\n") != NULL &&
                   strstr(kept.out, "rank=1 size=2 local=1 localsize=2 "
                          "root=10.1.2.3:4567 key=feedface\n") != NULL,
                   "caller's SWY_ROOT/SWY_JOB_KEY not kept");
        CHECK_EXIT(strchr(kept.out, '[') == NULL,
                   "--no-prefix still prefixed");
        result_free(&kept);
    }
    result_free(&res);
}

/* (b) One rank exits 3 while the others sleep 60 s. */
static void case_fail(void)
{
    const char *argv[] = {"swy-run", "-n", "4", helper_path, "fail",
                          work_dir, "2", "3", NULL};
    result_t    res = swy_run(argv, NULL, 20);

    CHECK_EXIT(exit_code(&res) == 3, "exit status %d, expected 3",
               exit_code(&res));
    CHECK_EXIT(res.elapsed_s < 5, "took %.1f s", res.elapsed_s);
    CHECK_EXIT(strstr(res.err, "swy-run: rank 2 exited with status 3; "
                      "stopping the other ranks\n") != NULL,
               "no failure message");
    ranks_gone_check(4);
    result_free(&res);
}

/* Every rank fails, rank 0 a moment after the others with the reason:
 * the first failure does not cut rank 0 off before it says why. */
static void case_failall(void)
{
    const char *argv[] = {"swy-run", "-n", "3", helper_path, "failall",
                          work_dir, "2", NULL};
    result_t    res = swy_run(argv, NULL, 20);

    CHECK_EXIT(exit_code(&res) == 2, "exit status %d, expected 2",
               exit_code(&res));
    CHECK_EXIT(strstr(res.err, "rank 0: the reason") != NULL,
               "rank 0's reason was cut off");
    ranks_gone_check(3);
    result_free(&res);
}

/* (c) One rank is killed by SIGKILL. */
static void case_sigkill(void)
{
    const char *argv[] = {"swy-run", "-n", "3", helper_path, "sigkill",
                          work_dir, "1", NULL};
    result_t    res = swy_run(argv, NULL, 20);

    CHECK_EXIT(exit_code(&res) == 128 + SIGKILL,
               "exit status %d, expected %d", exit_code(&res), 128 + SIGKILL);
    CHECK_EXIT(strstr(res.err, "swy-run: rank 1 killed by signal 9 "
                      "(Killed)") != NULL, "no failure message");
    ranks_gone_check(3);
    result_free(&res);
}

/* Waits until ranks 0..world_size-1 wrote their pid files. */
static void ranks_ready_wait(pid_t swy_run_pid, int world_size)
{
    double start = now_s();
    int    r = 0;

    while (r < world_size) {
        bool late;

        if (rank_pid_read(r) > 0) {
            ++r;
            continue;
        }
        late = now_s() - start > 10;
        if (late) {
            kill(swy_run_pid, SIGKILL);
        }
        CHECK_EXIT(!late, "rank %d never got ready", r);
        sleep_s(0.01);
    }
}

/* A Ctrl-C goes to the terminal's whole foreground process group; each
 * rank must see it once (forwarded), not twice. SIGUSR1 is forwarded too. */
static void case_sigint(void)
{
    const char *argv[] = {"swy-run", "-n", "3", helper_path, "count",
                          work_dir, NULL};
    pid_t       pid;
    result_t    res;

    own_process_group = true;
    pid = swy_run_start(argv, NULL);
    ranks_ready_wait(pid, 3);
    kill(-pid, SIGINT);
    sleep_s(0.2);
    kill(pid, SIGUSR1);
    sleep_s(0.2);
    kill(pid, SIGUSR1);
    sleep_s(0.2);
    kill(pid, SIGTERM);
    res = swy_run_wait(pid, now_s(), 5);
    CHECK_EXIT(exit_code(&res) == 0, "exit status %d, expected 0",
               exit_code(&res));
    for (int r = 0; r < 3; ++r) {
        char  path[8192];
        char *counts;

        snprintf(path, sizeof(path), "%s/count.%d", work_dir, r);
        counts = file_read(path, NULL);
        CHECK_EXIT(counts != NULL, "rank %d got no SIGTERM", r);
        CHECK_EXIT(strcmp(counts, "int=1 usr1=2\n") == 0,
                   "rank %d counted %s (expected int=1 usr1=2)", r, counts);
        free(counts);
    }
    ranks_gone_check(3);
    result_free(&res);
}

/* (d) SIGTERM to swy-run reaches every rank. */
static void case_sigterm(void)
{
    const char *argv[] = {"swy-run", "-n", "3", helper_path, "term",
                          work_dir, NULL};
    pid_t       pid = swy_run_start(argv, NULL);
    result_t    res;
    int         r;

    ranks_ready_wait(pid, 3);
    kill(pid, SIGTERM);
    res = swy_run_wait(pid, now_s(), 5);
    CHECK_EXIT(WIFEXITED(res.status), "swy-run died from signal %d",
               WTERMSIG(res.status));
    for (r = 0; r < 3; ++r) {
        char path[8192];

        snprintf(path, sizeof(path), "%s/term.%d", work_dir, r);
        CHECK_EXIT(access(path, F_OK) == 0, "rank %d got no SIGTERM", r);
    }
    /* The ranks' handlers exit 0, so the job ends successfully. */
    CHECK_EXIT(exit_code(&res) == 0, "exit status %d, expected 0",
               exit_code(&res));
    ranks_gone_check(3);
    result_free(&res);
}

/* (e) --timeout with sleeping ranks. */
static void case_timeout(void)
{
    const char *argv[] = {"swy-run", "--timeout", "1", "-n", "2",
                          helper_path, "sleep", work_dir, NULL};
    result_t    res = swy_run(argv, NULL, 20);

    CHECK_EXIT(exit_code(&res) == 124, "exit status %d, expected 124",
               exit_code(&res));
    CHECK_EXIT(res.elapsed_s >= 1 && res.elapsed_s < 4,
               "took %.2f s for --timeout 1", res.elapsed_s);
    CHECK_EXIT(strstr(res.err, "swy-run: timeout after 1 s") != NULL,
               "no timeout message");
    ranks_gone_check(2);
    result_free(&res);
}

/* A rank that ignores SIGTERM is killed after --grace. */
static void case_grace(void)
{
    const char *argv[] = {"swy-run", "--grace", "0.5", "-n", "3",
                          helper_path, "ignore-term", work_dir, NULL};
    result_t    res = swy_run(argv, NULL, 20);

    CHECK_EXIT(exit_code(&res) == 1, "exit status %d, expected 1",
               exit_code(&res));
    CHECK_EXIT(res.elapsed_s >= 0.5 && res.elapsed_s < 4,
               "took %.2f s with --grace 0.5", res.elapsed_s);
    ranks_gone_check(3);
    result_free(&res);
}

/* When swy-run's stdout reader goes away, ranks writing to stdout get
 * SIGPIPE as they would without swy-run, instead of running forever. */
static void case_brokenpipe(void)
{
    const char *argv[] = {"swy-run", "-n", "2", helper_path, "spam",
                          work_dir, NULL};
    result_t    res;

    stdout_reader_gone = true;
    res = swy_run(argv, NULL, 20);
    CHECK_EXIT(exit_code(&res) == 128 + SIGPIPE,
               "exit status %d, expected %d", exit_code(&res), 128 + SIGPIPE);
    CHECK_EXIT(strstr(res.err, "killed by signal 13") != NULL,
               "no failure message");
    ranks_gone_check(2);
    result_free(&res);
}

/* (f) A program that does not exist. */
static void case_noexec(void)
{
    char        prog[8192], expected[8400];
    const char *argv[] = {"swy-run", "-n", "2", prog, NULL};
    result_t    res;

    snprintf(prog, sizeof(prog), "%s/no-such-program", work_dir);
    res = swy_run(argv, NULL, 20);
    CHECK_EXIT(exit_code(&res) == 127, "exit status %d, expected 127",
               exit_code(&res));
    snprintf(expected, sizeof(expected),
             "rank 0: cannot run '%s': No such file or directory", prog);
    CHECK_EXIT(strstr(res.err, expected) != NULL, "no '%s'", expected);
    result_free(&res);
}

/* (g) 100 KB without a newline from each of 2 ranks: each arrives whole,
 * prefixed once, never mixed with the other. */
static void case_longline(void)
{
    enum { LINE_BYTES = 100000 };
    const char *argv[] = {"swy-run", "-n", "2", helper_path, "longline",
                          work_dir, "100000", NULL};
    result_t    res = swy_run(argv, NULL, 20);
    bool        seen[2] = {false};
    const char *line = res.out;

    CHECK_EXIT(exit_code(&res) == 0, "exit status %d", exit_code(&res));
    CHECK_EXIT(res.out_len == 2 * (4 + LINE_BYTES + 1),
               "stdout has %zu bytes, expected %d", res.out_len,
               2 * (4 + LINE_BYTES + 1));
    for (int i = 0; i < 2; ++i, line += 4 + LINE_BYTES + 1) {
        int rank = line[1] - '0';

        CHECK_EXIT(line[0] == '[' && (rank == 0 || rank == 1) &&
                   line[2] == ']' && line[3] == ' ' && !seen[rank],
                   "line %d has no proper prefix", i);
        seen[rank] = true;
        for (int b = 0; b < LINE_BYTES; ++b) {
            CHECK_EXIT(line[4 + b] == 'a' + rank,
                       "line of rank %d broken at byte %d", rank, b);
        }
        CHECK_EXIT(line[4 + LINE_BYTES] == '\n', "line %d not ended", i);
    }
    result_free(&res);
}

/* (h) Bad usage exits 2 with a message; --help and --version exit 0. */
static void case_usage(void)
{
    static const char *const bad[][8] = {
        {"swy-run", NULL},
        {"swy-run", "-n", "2", NULL},
        {"swy-run", "-n", "0", "true", NULL},
        {"swy-run", "-n", "4097", "true", NULL},
        {"swy-run", "-n", "two", "true", NULL},
        {"swy-run", "--np", NULL},
        {"swy-run", "--bogus", "true", NULL},
        {"swy-run", "--timeout", "-1", "true", NULL},
        {"swy-run", "--grace", "x", "true", NULL},
        {"swy-run", "--link", "1gbit", "true", NULL},
        {"swy-run", "--nodes", "2", "--link", "fast", "true", NULL},
        {"swy-run", "--nodes", "2", "--link", "0gbit", "true", NULL},
        {"swy-run", "--nodes", "2", "--link", "-1gbit", "true", NULL},
        {"swy-run", "--nodes", "2", "--link", "1gbitx", "true", NULL},
        {"swy-run", "--nodes", "255", "true", NULL},
        {"swy-run", "--nodes", "2", "-n", "3", "true", NULL},
    };
    const char *help[] = {"swy-run", "--help", NULL};
    const char *version[] = {"swy-run", "--version", NULL};
    const char *dashdash[] = {"swy-run", "-n", "1", "--", helper_path,
                              "env", NULL};
    result_t    res;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        res = swy_run((const char *const *)bad[i], NULL, 10);
        CHECK_EXIT(exit_code(&res) == 2, "case %zu: exit status %d, "
                   "expected 2", i, exit_code(&res));
        CHECK_EXIT(strncmp(res.err, "swy-run: ", 9) == 0,
                   "case %zu: no message", i);
        result_free(&res);
    }
    res = swy_run(help, NULL, 10);
    CHECK_EXIT(exit_code(&res) == 0, "--help: exit status %d",
               exit_code(&res));
    {
        static const char *const words[] = {
            "--np", "--timeout", "--grace", "--no-prefix", "--help",
            "--version", "SWY_RANK", "SWY_WORLD_SIZE", "SWY_LOCAL_RANK",
            "SWY_LOCAL_WORLD_SIZE",
            "SWY_ROOT", "SWY_JOB_KEY", "--nodes", "--ranks-per-node",
            "--link", "SWY_NODE", "SWY_NNODES"};

        for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); ++i) {
            CHECK_EXIT(strstr(res.out, words[i]) != NULL,
                       "--help does not mention %s", words[i]);
        }
    }
    result_free(&res);
    res = swy_run(version, NULL, 10);
    CHECK_EXIT(exit_code(&res) == 0 && strncmp(res.out, "swy-run ", 8) == 0,
               "--version failed");
    result_free(&res);
    res = swy_run(dashdash, NULL, 10);
    CHECK_EXIT(exit_code(&res) == 0 &&
               strncmp(res.out, "[0] rank=0 size=1 ", 18) == 0,
               "'--' before the program not accepted");
    result_free(&res);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*run)(void);
    } cases[] = {
        {"env", case_env},         {"fail", case_fail},
        {"failall", case_failall},
        {"sigkill", case_sigkill}, {"sigterm", case_sigterm},
        {"timeout", case_timeout}, {"grace", case_grace},
        {"noexec", case_noexec},   {"longline", case_longline},
        {"usage", case_usage},     {"brokenpipe", case_brokenpipe},
        {"sigint", case_sigint},
    };
    const char *tmp = getenv("TMPDIR");

    if (argc != 4) {
        fprintf(stderr, "usage: test_run CASE SWY_RUN RUN_HELPER\n");
        return 2;
    }
    swy_run_path = argv[2];
    helper_path = argv[3];
    snprintf(work_dir, sizeof(work_dir), "%s/swy-run-test.XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(work_dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    atexit(failure_show);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        if (strcmp(argv[1], cases[i].name) == 0) {
            cases[i].run();
            case_done = true;
            work_dir_remove();
            printf("ok: %s\n", cases[i].name);
            return 0;
        }
    }
    fprintf(stderr, "unknown case '%s'\n", argv[1]);
    case_done = true;
    work_dir_remove();
    return 2;
}
