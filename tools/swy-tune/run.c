/* Running the benchmark under the user's launcher and reading its JSON
 * lines as they come. */
#include "tune.h"

#include "tool_find.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int swyt_run_line_take(const char *line, swyt_candidate_list_t *list)
{
    const char *text = swyt_line_strip_prefix(line);
    swyt_json_object_t object;
    swyt_candidate_t candidate;
    char why[128];
    int rc;

    while (*text == ' ' || *text == '\t')
        text++;
    if (*text != '{')
        return 0;
    if (swyt_json_parse(text, &object, why, sizeof(why)) != 0) {
        fprintf(stderr, "swy-tune: warning: malformed JSON line skipped "
                        "(%s): %.160s\n", why, line);
        return -1;
    }
    rc = swyt_candidate_from_json(&object, &candidate, why, sizeof(why));
    if (rc > 0)
        return 0; /* another benchmark's line */
    if (rc < 0) {
        fprintf(stderr, "swy-tune: warning: interference line skipped "
                        "(%s): %.160s\n", why, line);
        return -1;
    }
    /* Every rank may print the same result; the first one counts. */
    if (swyt_candidate_list_find(list, candidate.policy,
                                 candidate.partition_bytes,
                                 candidate.credit_bytes) >= 0)
        return 0;
    if (swyt_candidate_list_add(list, &candidate) != 0) {
        fprintf(stderr, "swy-tune: out of memory\n");
        return -1;
    }
    return 1;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Keeps the last bytes of the launcher's stderr for the error report. */
static void tail_append(char *tail, size_t cap, const char *data, size_t n)
{
    size_t have = strlen(tail);

    if (n >= cap - 1) {
        data += n - (cap - 1);
        n = cap - 1;
    }
    if (have + n > cap - 1) {
        size_t drop = have + n - (cap - 1);
        memmove(tail, tail + drop, have - drop);
        have -= drop;
    }
    memcpy(tail + have, data, n);
    tail[have + n] = '\0';
}

/* A line that is not a result: the benchmark's '#' header is kept (one
 * rank's copy) for swy-tune's own header; the rest shows with -v. */
static void line_other(const char *line, int verbose,
                       swyt_run_result_t *result)
{
    const char *text = swyt_line_strip_prefix(line);
    size_t have = strlen(result->header), len = strlen(text);

    if (verbose)
        printf("  | %s\n", line);
    if (strncmp(text, "# ", 2) != 0 || have + len + 2 > sizeof(result->header))
        return;
    if (strstr(result->header, text) != NULL)
        return; /* another rank's copy */
    memcpy(result->header + have, text, len);
    memcpy(result->header + have + len, "\n", 2);
}

typedef struct {
    char *buf;
    size_t len;
    size_t cap;
} line_buffer_t;

/* Splits @p data into lines; each complete line goes to the list. */
static int lines_feed(line_buffer_t *lb, const char *data, size_t n,
                      int verbose, swyt_candidate_list_t *list,
                      swyt_run_result_t *result)
{
    for (size_t i = 0; i < n; i++) {
        if (lb->len + 1 >= lb->cap) {
            size_t cap = lb->cap ? 2 * lb->cap : 4096;
            char *buf = realloc(lb->buf, cap);

            if (buf == NULL)
                return -1;
            lb->buf = buf;
            lb->cap = cap;
        }
        if (data[i] != '\n') {
            lb->buf[lb->len++] = data[i];
            continue;
        }
        if (lb->len > 0 && lb->buf[lb->len - 1] == '\r')
            lb->len--;
        lb->buf[lb->len] = '\0';
        int rc = swyt_run_line_take(lb->buf, list);
        if (rc > 0)
            result->json_lines++;
        else if (rc < 0)
            result->rejected++;
        else
            line_other(lb->buf, verbose, result);
        lb->len = 0;
    }
    return 0;
}

int swyt_run_command(char *const argv[], double timeout_s, int verbose,
                     swyt_candidate_list_t *list,
                     swyt_run_result_t *result_p)
{
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    swyt_run_result_t result;
    line_buffer_t lb = {0};
    double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
    int term_sent = 0, status = 0;
    pid_t pid;

    memset(&result, 0, sizeof(result));
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "swy-tune: pipe: %s\n", strerror(errno));
        goto fail;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "swy-tune: fork: %s\n", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);

        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(err_pipe[1], STDERR_FILENO);
        execvp(argv[0], argv);
        fprintf(stderr, "swy-tune: cannot run %s: %s\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    out_pipe[1] = err_pipe[1] = -1;

    struct pollfd fds[2] = {{.fd = out_pipe[0], .events = POLLIN},
                            {.fd = err_pipe[0], .events = POLLIN}};
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        int wait_ms = -1;

        if (deadline > 0) {
            double left = deadline - now_s();

            if (left <= 0) {
                /* SIGTERM first: swy-run passes it to the ranks and cleans
                 * up the emulated cluster; SIGKILL if that hangs too. */
                if (term_sent == 0) {
                    fprintf(stderr, "swy-tune: the benchmark ran past "
                                    "--timeout %.0f s; stopping it\n",
                            timeout_s);
                    kill(pid, SIGTERM);
                    result.timed_out = 1;
                    term_sent = 1;
                    deadline = now_s() + 10.0;
                } else if (term_sent == 1) {
                    kill(pid, SIGKILL);
                    term_sent = 2;
                    deadline = 0;
                }
                continue;
            }
            wait_ms = (int)(left * 1000.0) + 1;
        }
        int n = poll(fds, 2, wait_ms);
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "swy-tune: poll: %s\n", strerror(errno));
            break;
        }
        for (int i = 0; i < 2 && n > 0; i++) {
            char buf[8192];
            ssize_t got;

            if (fds[i].fd < 0 || fds[i].revents == 0)
                continue;
            got = read(fds[i].fd, buf, sizeof(buf));
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                continue;
            }
            if (i == 0) {
                if (lines_feed(&lb, buf, (size_t)got, verbose, list,
                               &result) != 0)
                    fprintf(stderr, "swy-tune: out of memory\n");
            } else {
                tail_append(result.stderr_tail, sizeof(result.stderr_tail),
                            buf, (size_t)got);
                if (verbose)
                    fwrite(buf, 1, (size_t)got, stderr);
            }
        }
    }
    if (lb.len > 0) /* a last line without its newline */
        lines_feed(&lb, "\n", 1, verbose, list, &result);
    free(lb.buf);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status))
        result.exit_status = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        result.exit_status = 128 + WTERMSIG(status);
    *result_p = result;
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (out_pipe[i] >= 0)
            close(out_pipe[i]);
        if (err_pipe[i] >= 0)
            close(err_pipe[i]);
    }
    return -1;
}

void swyt_bench_path_find(char *buf, size_t len)
{
    if (!swy_tool_find("swy-bench", "swy-bench", buf, len))
        snprintf(buf, len, "swy-bench");
}

void swyt_sim_path_find(char *buf, size_t len)
{
    if (!swy_tool_find("swy-sim", "swy-sim", buf, len))
        snprintf(buf, len, "swy-sim");
}

int swyt_bench_help_read(const char *bench, char *buf, size_t len)
{
    int out_pipe[2];
    size_t used = 0;
    int status = 0;
    pid_t pid;

    if (len == 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return -1;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);

        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDERR_FILENO);
        }
        dup2(out_pipe[1], STDOUT_FILENO);
        execlp(bench, bench, "interference", "--help", (char *)NULL);
        _exit(127);
    }
    close(out_pipe[1]);
    for (;;) {
        char chunk[4096];
        ssize_t got = read(out_pipe[0], chunk, sizeof(chunk));

        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        /* Keep reading past a full buffer so the child never blocks. */
        size_t take = (size_t)got < len - 1 - used ? (size_t)got
                                                   : len - 1 - used;
        memcpy(buf + used, chunk, take);
        used += take;
    }
    buf[used] = '\0';
    close(out_pipe[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}
