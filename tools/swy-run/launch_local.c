/* The local launcher: N ranks as children of swy-run.
 *
 * Each rank is the leader of its own process group. A Ctrl-C at the
 * terminal therefore goes to swy-run's (foreground) group only, and reaches
 * each rank exactly once, through the forwarding below; and signalling the
 * group reaches whatever the rank started itself (a wrapper script's
 * child). The price: a rank must not read the terminal (it would be stopped
 * with SIGTTIN), so rank 0 inherits stdin only when it is not a terminal.
 *
 * All signals swy-run reacts to are blocked and read from a signalfd in the
 * same poll() as the ranks' output pipes, so the loop is single-threaded and
 * has no async-signal-safety concerns. */
#include "launch_local.h"

#include "job_env.h"
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const int forwarded_signals[] = {SIGINT,  SIGTERM, SIGHUP,
                                        SIGQUIT, SIGUSR1, SIGUSR2};

/* How long output is still relayed after the last rank has exited. */
#define SWY_RUN_DRAIN_S 1.0

#define N_FORWARDED (int)(sizeof(forwarded_signals) / sizeof(int))

typedef struct {
    pid_t            pid;        /* 0 once reaped, or if never started */
    int              out_fd;     /* read end of its stdout; -1 at EOF */
    int              err_fd;     /* read end of its stderr; -1 at EOF */
    bool             exec_failed;
    swy_run_output_t out;
    swy_run_output_t err;
} rank_t;

typedef struct {
    const swy_run_options_t *opts;
    const swy_run_launch_hooks_t *hooks;
    rank_t                  *ranks;
    int                      n_started;
    int                      n_running;   /* started and not yet reaped */
    int                      signal_fd;
    sigset_t                 saved_mask;  /* restored in each rank */
    struct sigaction         saved_sigpipe;
    struct rlimit            saved_nofile;
    bool                     stdin_to_rank0;

    bool                     stopping;    /* SIGTERM sent to all ranks */
    bool                     killed;      /* SIGKILL sent to all ranks */
    double                   kill_at;     /* when stopping turns to SIGKILL */
    double                   signal_kill_at; /* kill_after_signal; 0: none */
    double                   timeout_at;  /* 0: none */
    double                   settle_at;   /* a rank failed: stop the others
                                             then if still running; 0: none */
    int                      settle_status;
    double                   drain_until; /* set when the last rank exits */
    int                      exit_status; /* 0 until something fails */
} job_t;

/* How long the other ranks may take to end on their own after one exited
 * with a failure, before they are stopped. */
#define SETTLE_S 0.5

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void signal_ranks(job_t *job, int sig)
{
    for (int r = 0; r < job->n_started; ++r) {
        pid_t pid = job->ranks[r].pid;

        /* Only unreaped ranks: a reaped rank's pid may belong to someone
         * else by now. */
        if (pid > 0 && kill(-pid, sig) != 0) {
            (void)kill(pid, sig);
        }
    }
}

/* First failure wins: its status becomes swy-run's, and everyone else is
 * asked to stop (SIGTERM now, SIGKILL after the grace period). */
static void job_stop(job_t *job, int exit_status)
{
    if (job->stopping) {
        return;
    }
    job->stopping    = true;
    job->exit_status = exit_status;
    job->kill_at     = now_s() + job->opts->grace_s;
    signal_ranks(job, SIGTERM);
}

/* swy-run needs two descriptors per rank; a 4096-rank job needs more than
 * the usual soft limit of 1024. The ranks get the original limit back. */
static bool raise_fd_limit(job_t *job)
{
    rlim_t        needed = (rlim_t)job->opts->np * 2 + 64;
    struct rlimit raised;

    if (getrlimit(RLIMIT_NOFILE, &job->saved_nofile) != 0) {
        fprintf(stderr, "swy-run: getrlimit: %s\n", strerror(errno));
        return false;
    }
    if (job->saved_nofile.rlim_cur >= needed) {
        return true;
    }
    if (job->saved_nofile.rlim_max < needed) {
        fprintf(stderr, "swy-run: %d ranks need %lu open files; the limit "
                "is %lu (ulimit -Hn)\n", job->opts->np,
                (unsigned long)needed,
                (unsigned long)job->saved_nofile.rlim_max);
        return false;
    }
    raised          = job->saved_nofile;
    raised.rlim_cur = needed;
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
        fprintf(stderr, "swy-run: setrlimit: %s\n", strerror(errno));
        return false;
    }
    return true;
}

static bool signals_block(job_t *job)
{
    struct sigaction ignore = {.sa_handler = SIG_IGN};
    sigset_t         mask;

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (int i = 0; i < N_FORWARDED; ++i) {
        sigaddset(&mask, forwarded_signals[i]);
    }
    if (sigprocmask(SIG_BLOCK, &mask, &job->saved_mask) != 0) {
        fprintf(stderr, "swy-run: sigprocmask: %s\n", strerror(errno));
        return false;
    }
    if (job->hooks->rank_sigmask != NULL) {
        job->saved_mask = *job->hooks->rank_sigmask;
    }
    job->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (job->signal_fd < 0) {
        fprintf(stderr, "swy-run: signalfd: %s\n", strerror(errno));
        return false;
    }
    /* A closed stdout must not kill swy-run while ranks still run. */
    sigaction(SIGPIPE, &ignore, &job->saved_sigpipe);
    return true;
}

/* In the child, between fork and exec: only async-signal-safe calls,
 * except setenv, which is fine because swy-run is single-threaded. */
static void __attribute__((noreturn))
rank_exec(job_t *job, int rank, pid_t parent, int out_w, int err_w,
          int status_w)
{
    char text[16];
    int  saved_errno;

    setpgid(0, 0);
    /* If swy-run is killed outright, no rank outlives it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
        _exit(SWY_RUN_EXIT_INTERNAL);
    }

    if (!(rank == 0 && job->stdin_to_rank0)) {
        int null_fd = open("/dev/null", O_RDONLY);

        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
            if (null_fd != STDIN_FILENO) {
                close(null_fd);
            }
        }
    }
    dup2(out_w, STDOUT_FILENO);
    dup2(err_w, STDERR_FILENO);

    snprintf(text, sizeof(text), "%d", rank);
    setenv("SWY_RANK", text, 1);
    if (job->hooks->rank_env != NULL) {
        job->hooks->rank_env(job->hooks->ctx, rank);
    } else {
        setenv("SWY_LOCAL_RANK", text, 1);
    }
    if (job->hooks->rank_enter != NULL) {
        job->hooks->rank_enter(job->hooks->ctx, rank, status_w);
    }

    sigaction(SIGPIPE, &job->saved_sigpipe, NULL);
    setrlimit(RLIMIT_NOFILE, &job->saved_nofile);
    sigprocmask(SIG_SETMASK, &job->saved_mask, NULL);

    execvp(job->opts->prog_argv[0], job->opts->prog_argv);

    saved_errno = errno;
    while (write(status_w, &saved_errno, sizeof(saved_errno)) < 0 &&
           errno == EINTR) {
    }
    _exit(SWY_RUN_EXIT_NOEXEC);
}

/* Forks rank r. Returns false on swy-run's own failure; an exec failure is
 * a rank failure, reported here and recorded in the job. */
static bool rank_start(job_t *job, int r)
{
    rank_t *rank = &job->ranks[r];
    int     out_pipe[2], err_pipe[2], status_pipe[2];
    int     exec_errno = 0;
    ssize_t got;
    pid_t   parent = getpid();
    pid_t   pid;

    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
        goto err;
    }
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        goto err_close_out;
    }
    if (pipe2(status_pipe, O_CLOEXEC) != 0) {
        goto err_close_err;
    }
    pid = fork();
    if (pid < 0) {
        goto err_close_status;
    }
    if (pid == 0) {
        rank_exec(job, r, parent, out_pipe[1], err_pipe[1], status_pipe[1]);
    }
    /* Also here, so that signal_ranks never races the child's setpgid. */
    (void)setpgid(pid, pid);
    rank->pid = pid;
    job->n_started++;
    job->n_running++;

    close(out_pipe[1]);
    close(err_pipe[1]);
    close(status_pipe[1]);
    rank->out_fd = out_pipe[0];
    rank->err_fd = err_pipe[0];
    fcntl(rank->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(rank->err_fd, F_SETFL, O_NONBLOCK);

    /* The status pipe closes on a successful exec, or carries errno. */
    do {
        got = read(status_pipe[0], &exec_errno, sizeof(exec_errno));
    } while (got < 0 && errno == EINTR);
    close(status_pipe[0]);
    if (got == (ssize_t)sizeof(exec_errno)) {
        rank->exec_failed = true;
        fprintf(stderr, "swy-run: rank %d: cannot run '%s': %s\n", r,
                job->opts->prog_argv[0], strerror(exec_errno));
        job_stop(job, SWY_RUN_EXIT_NOEXEC);
    }
    return true;

err_close_status:
    close(status_pipe[0]);
    close(status_pipe[1]);
err_close_err:
    close(err_pipe[0]);
    close(err_pipe[1]);
err_close_out:
    close(out_pipe[0]);
    close(out_pipe[1]);
err:
    fprintf(stderr, "swy-run: cannot start rank %d: %s\n", r,
            strerror(errno));
    return false;
}

static void rank_exited(job_t *job, int r, int status)
{
    rank_t *rank = &job->ranks[r];
    int     others;

    rank->pid = 0;
    job->n_running--;
    if (job->stopping || rank->exec_failed) {
        return; /* an expected consequence of an earlier failure */
    }
    others = job->n_running;
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        fprintf(stderr, "swy-run: rank %d exited with status %d%s\n", r,
                WEXITSTATUS(status),
                others > 0 ? "; stopping the other ranks" : "");
        /* The others have a moment to end on their own: a bad option or
         * a failed collective ends every rank, and the one that says why
         * (rank 0, usually) must not be cut off by the first to exit. */
        if (job->settle_at == 0) {
            job->settle_at     = now_s() + SETTLE_S;
            job->settle_status = WEXITSTATUS(status);
        }
    } else if (WIFSIGNALED(status)) {
        fprintf(stderr, "swy-run: rank %d killed by signal %d (%s)%s\n", r,
                WTERMSIG(status), strsignal(WTERMSIG(status)),
                others > 0 ? "; stopping the other ranks" : "");
        job_stop(job, 128 + WTERMSIG(status));
    }
}

static void reap_children(job_t *job)
{
    int   status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        bool is_rank = false;

        for (int r = 0; r < job->n_started; ++r) {
            if (job->ranks[r].pid == pid) {
                rank_exited(job, r, status);
                is_rank = true;
                break;
            }
        }
        if (!is_rank && job->hooks->child_exited != NULL) {
            job->hooks->child_exited(job->hooks->ctx, pid, status);
        }
    }
}

static void signals_handle(job_t *job)
{
    struct signalfd_siginfo info;

    while (read(job->signal_fd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGCHLD) {
            reap_children(job);
        } else {
            signal_ranks(job, (int)info.ssi_signo);
            if (job->hooks->kill_after_signal && job->signal_kill_at == 0 &&
                (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM ||
                 info.ssi_signo == SIGHUP)) {
                job->signal_kill_at = now_s() + job->opts->grace_s;
            }
        }
    }
}

/* Reads what one pipe has now; at end of stream flushes and closes it. */
static void pipe_drain(int *fd, swy_run_output_t *output)
{
    char    buf[65536];
    ssize_t got;

    got = read(*fd, buf, sizeof(buf));
    if (got > 0) {
        swy_run_output_feed(output, buf, (size_t)got);
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        swy_run_output_flush(output);
        close(*fd);
        *fd = -1;
    }
}

/* When swy-run's own stdout or stderr is gone (`swy-run ... | head`), the
 * ranks' pipes for that stream are closed too, so a rank writing there gets
 * SIGPIPE or EPIPE exactly as if it wrote to the pipe itself, rather than
 * running on with its output discarded. */
static void broken_outputs_close(job_t *job)
{
    bool out_broken = swy_run_output_is_broken(STDOUT_FILENO);
    bool err_broken = swy_run_output_is_broken(STDERR_FILENO);

    if (!out_broken && !err_broken) {
        return;
    }
    for (int r = 0; r < job->n_started; ++r) {
        rank_t *rank = &job->ranks[r];

        if (out_broken && rank->out_fd >= 0) {
            close(rank->out_fd);
            rank->out_fd = -1;
        }
        if (err_broken && rank->err_fd >= 0) {
            close(rank->err_fd);
            rank->err_fd = -1;
        }
    }
}

static int poll_timeout_ms(const job_t *job)
{
    double deadline = 0;
    double left;

    if (job->n_running == 0) {
        return 0; /* only draining what the ranks left in their pipes */
    }
    if (job->stopping && !job->killed) {
        deadline = job->kill_at;
    } else if (!job->stopping && job->timeout_at > 0) {
        deadline = job->timeout_at;
    }
    if (!job->stopping && job->settle_at > 0 &&
        (deadline == 0 || job->settle_at < deadline)) {
        deadline = job->settle_at;
    }
    if (job->signal_kill_at > 0 && !job->killed &&
        (deadline == 0 || job->signal_kill_at < deadline)) {
        deadline = job->signal_kill_at;
    }
    if (deadline == 0) {
        return -1;
    }
    left = deadline - now_s();
    if (left > 3600) {
        return 3600 * 1000; /* a long --timeout must not overflow an int */
    }
    return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

static void deadlines_check(job_t *job)
{
    double now = now_s();

    if (!job->stopping && job->settle_at > 0 && now >= job->settle_at) {
        job_stop(job, job->settle_status);
    }
    if (!job->stopping && job->timeout_at > 0 && now >= job->timeout_at) {
        fprintf(stderr, "swy-run: timeout after %g s; stopping all ranks\n",
                job->opts->timeout_s);
        job_stop(job, SWY_RUN_EXIT_TIMEOUT);
    }
    if (!job->killed &&
        ((job->stopping && now >= job->kill_at) ||
         (job->signal_kill_at > 0 && now >= job->signal_kill_at))) {
        job->killed = true;
        signal_ranks(job, SIGKILL);
    }
}

static int job_loop(job_t *job)
{
    struct pollfd *pfds;
    int            n_pfds;

    pfds = calloc((size_t)job->n_started * 2 + 1, sizeof(*pfds));
    if (pfds == NULL) {
        fprintf(stderr, "swy-run: out of memory\n");
        job_stop(job, SWY_RUN_EXIT_INTERNAL);
        /* Still wait for the ranks, without relaying output. */
        while (job->n_running > 0) {
            int status;
            if (wait(&status) < 0) {
                break;
            }
            job->n_running--;
        }
        return job->exit_status;
    }

    for (;;) {
        int ready;

        n_pfds    = 0;
        pfds[n_pfds++] = (struct pollfd){.fd = job->signal_fd,
                                         .events = POLLIN};
        for (int r = 0; r < job->n_started; ++r) {
            pfds[n_pfds++] = (struct pollfd){.fd = job->ranks[r].out_fd,
                                             .events = POLLIN};
            pfds[n_pfds++] = (struct pollfd){.fd = job->ranks[r].err_fd,
                                             .events = POLLIN};
        }

        ready = poll(pfds, (nfds_t)n_pfds, poll_timeout_ms(job));
        if (ready < 0 && errno != EINTR) {
            fprintf(stderr, "swy-run: poll: %s\n", strerror(errno));
            job_stop(job, SWY_RUN_EXIT_INTERNAL);
            break;
        }
        /* Every rank reaped and nothing left in their pipes: done. A
         * rank's leftover children that keep writing to the pipes are not
         * waited for beyond SWY_RUN_DRAIN_S. */
        if (job->n_running == 0) {
            double now = now_s();

            if (job->drain_until == 0) {
                job->drain_until = now + SWY_RUN_DRAIN_S;
            }
            if (ready == 0 || now >= job->drain_until) {
                break;
            }
        }
        if (ready > 0) {
            for (int r = 0; r < job->n_started; ++r) {
                rank_t *rank = &job->ranks[r];

                if (pfds[1 + 2 * r].revents != 0 && rank->out_fd >= 0) {
                    pipe_drain(&rank->out_fd, &rank->out);
                }
                if (pfds[2 + 2 * r].revents != 0 && rank->err_fd >= 0) {
                    pipe_drain(&rank->err_fd, &rank->err);
                }
            }
            broken_outputs_close(job);
            if (pfds[0].revents != 0) {
                signals_handle(job);
            }
        }
        deadlines_check(job);
    }
    free(pfds);
    if (job->exit_status == 0) { /* every rank ended while settling */
        job->exit_status = job->settle_status;
    }
    return job->exit_status;
}

int swy_run_local_launch(const swy_run_options_t *opts)
{
    static const swy_run_launch_hooks_t no_hooks = {0};

    if (!swy_run_job_env_set(opts->np, opts->np, "127.0.0.1")) {
        return SWY_RUN_EXIT_INTERNAL;
    }
    return swy_run_ranks_launch(opts, &no_hooks);
}

int swy_run_ranks_launch(const swy_run_options_t *opts,
                         const swy_run_launch_hooks_t *hooks)
{
    job_t job = {.opts = opts, .hooks = hooks, .signal_fd = -1};
    int   status;
    job.ranks = calloc((size_t)opts->np, sizeof(*job.ranks));
    if (job.ranks == NULL) {
        fprintf(stderr, "swy-run: out of memory for %d ranks\n", opts->np);
        return SWY_RUN_EXIT_INTERNAL;
    }
    for (int r = 0; r < opts->np; ++r) {
        job.ranks[r].out_fd = -1;
        job.ranks[r].err_fd = -1;
        swy_run_output_init(&job.ranks[r].out, STDOUT_FILENO, r,
                            opts->prefix);
        swy_run_output_init(&job.ranks[r].err, STDERR_FILENO, r,
                            opts->prefix);
    }
    job.stdin_to_rank0 = !isatty(STDIN_FILENO);

    if (!raise_fd_limit(&job) || !signals_block(&job)) {
        status = SWY_RUN_EXIT_INTERNAL;
        goto out_free;
    }
    if (opts->timeout_s > 0) {
        job.timeout_at = now_s() + opts->timeout_s;
    }

    for (int r = 0; r < opts->np && !job.stopping; ++r) {
        if (!rank_start(&job, r)) {
            job_stop(&job, SWY_RUN_EXIT_INTERNAL);
        }
    }
    status = job_loop(&job);

    close(job.signal_fd);
    for (int r = 0; r < job.n_started; ++r) {
        if (job.ranks[r].out_fd >= 0) {
            close(job.ranks[r].out_fd);
        }
        if (job.ranks[r].err_fd >= 0) {
            close(job.ranks[r].err_fd);
        }
    }
out_free:
    for (int r = 0; r < opts->np; ++r) {
        swy_run_output_finalize(&job.ranks[r].out);
        swy_run_output_finalize(&job.ranks[r].err);
    }
    free(job.ranks);
    return status;
}
