/* The emulated-cluster launcher.
 *
 * Per node, one "agent" process holds the node's namespaces: swy-run
 * clones it into new PID, UTS, IPC and mount namespaces, and it joins the
 * node's network namespace, makes its mounts private, mounts a sysfs of
 * that network namespace (as `ip netns exec` does, so /sys/class/net lists
 * eth0, which UCX reads), a /proc of its PID namespace and a fresh tmpfs on
 * /dev/shm, and sets the hostname to node<i>. It is PID 1 there, reaps
 * orphans, and exits when swy-run's end of a socket pair closes, which
 * takes everything left in the node down with it (the kernel kills a PID
 * namespace with its init).
 *
 * Ranks stay children of swy-run, so the local launcher's supervision
 * (output relay, signal forwarding, failure handling) is reused unchanged:
 * each rank's forked child enters the agent's namespaces with setns(2)
 * and forks once more, since a PID namespace applies to children only; the
 * process left behind (the "shim") waits for the rank and ends with its
 * status. Shim and rank share a process group, so the signals swy-run
 * sends to the group reach the rank directly; the shim keeps them blocked
 * and does not forward them (which would deliver them twice). This is
 * what nsenter(1) does, except that nsenter dies of the first SIGUSR1 or
 * SIGTERM it receives instead of passing on the rank's own exit status.
 * All M ranks of a node thus share one IPC namespace and one /dev/shm (UCX
 * shared memory works inside a node) and nothing with other nodes (it
 * cannot bypass the shaped link between them). */
#include "launch_cluster.h"

#include "job_env.h"
#include "launch_local.h"
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define AGENT_STACK_BYTES (256 * 1024)

/* SWY_ROOT's port: the node namespaces are fresh, so any port is free. */
#define ROOT_PORT_MIN 20000
#define ROOT_PORT_MAX 60000

typedef struct {
    pid_t pid;     /* as seen from swy-run; 0 once reaped */
    int   sock;    /* swy-run's end of the lifeline; -1 if none */
} agent_t;

typedef struct {
    const swy_run_options_t *opts;
    swy_run_netns_t          net;
    agent_t                 *agents;
    char                     cwd[PATH_MAX];
} cluster_t;

/* What the cloned agent gets: a copy of the parent's memory. */
typedef struct {
    int node;
    int netns_fd;
    int sock;      /* the agent's end of the lifeline */
} agent_args_t;

static const int terminating_signals[] = {SIGINT, SIGTERM, SIGHUP};

static void __attribute__((noreturn)) agent_fail(int node, const char *what)
{
    dprintf(STDERR_FILENO, "swy-run: node %d: %s: %s\n", node, what,
            strerror(errno));
    _exit(1);
}

/* The agent, PID 1 of node's PID namespace. Only system calls here: this
 * is a clone of swy-run without exec. */
static int agent_main(void *arg)
{
    const agent_args_t *args = arg;
    struct pollfd       pfds[2];
    char                hostname[32];
    sigset_t            chld;
    int                 signal_fd;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* Out of swy-run's process group: terminal job control is for the
     * ranks, through swy-run. */
    setpgid(0, 0);
    if (setns(args->netns_fd, CLONE_NEWNET) != 0) {
        agent_fail(args->node, "setns(net)");
    }
    close(args->netns_fd);
    /* Private first, or the mounts below would propagate to the host. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        agent_fail(args->node, "making mounts private");
    }
    (void)umount2("/sys", MNT_DETACH); /* not a mount point: fine */
    if (mount("sysfs", "/sys", "sysfs", 0, NULL) != 0) {
        agent_fail(args->node, "mounting /sys");
    }
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              NULL) != 0) {
        agent_fail(args->node, "mounting /proc");
    }
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=1777") != 0) {
        agent_fail(args->node, "mounting a tmpfs on /dev/shm");
    }
    snprintf(hostname, sizeof(hostname), "node%d", args->node);
    if (sethostname(hostname, strlen(hostname)) != 0) {
        agent_fail(args->node, "sethostname");
    }

    /* SIGCHLD is blocked (inherited from swy-run). Keep only stdio, the
     * lifeline and the signalfd: other nodes' lifelines must not be held
     * here, or they would not close when swy-run dies. */
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (dup2(args->sock, 3) != 3) {
        agent_fail(args->node, "dup2");
    }
    close_range(4, ~0u, 0);
    signal_fd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd < 0) {
        agent_fail(args->node, "signalfd");
    }
    if (write(3, "1", 1) != 1) {
        _exit(1);
    }

    pfds[0] = (struct pollfd){.fd = 3, .events = POLLIN};
    pfds[1] = (struct pollfd){.fd = signal_fd, .events = POLLIN};
    for (;;) {
        struct signalfd_siginfo info;
        char                    byte;

        if (poll(pfds, 2, -1) < 0) {
            continue; /* EINTR */
        }
        if (pfds[0].revents != 0 && read(3, &byte, 1) <= 0) {
            _exit(0); /* swy-run is done or gone */
        }
        if (pfds[1].revents != 0) {
            while (read(signal_fd, &info, sizeof(info)) > 0) {
            }
            while (waitpid(-1, NULL, WNOHANG) > 0) {
            }
        }
    }
}

/* Clones node's agent and waits until it has set the node up. */
static bool agent_start(cluster_t *cluster, int node)
{
    agent_t     *agent = &cluster->agents[node];
    agent_args_t args = {.node = node};
    char         name[SWY_RUN_NETNS_NAME_MAX], path[64 + SWY_RUN_NETNS_NAME_MAX];
    char        *stack;
    int          socks[2];
    char         byte;
    ssize_t      got;
    pid_t        pid;

    swy_run_netns_node_name(&cluster->net, node, name);
    snprintf(path, sizeof(path), "/run/netns/%s", name);
    args.netns_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (args.netns_fd < 0) {
        fprintf(stderr, "swy-run: open %s: %s\n", path, strerror(errno));
        return false;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, socks) != 0) {
        fprintf(stderr, "swy-run: socketpair: %s\n", strerror(errno));
        goto err_close_netns;
    }
    args.sock = socks[1];
    stack = malloc(AGENT_STACK_BYTES);
    if (stack == NULL) {
        fprintf(stderr, "swy-run: out of memory\n");
        goto err_close_socks;
    }
    /* Not CLONE_VM: the agent gets a copy of memory, and of the stack. */
    pid = clone(agent_main, stack + AGENT_STACK_BYTES,
                CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNS |
                SIGCHLD, &args);
    free(stack);
    if (pid < 0) {
        fprintf(stderr, "swy-run: cannot create the namespaces of node %d: "
                "%s\n", node, strerror(errno));
        goto err_close_socks;
    }
    agent->pid  = pid;
    agent->sock = socks[0];
    close(socks[1]);
    close(args.netns_fd);

    do {
        got = read(agent->sock, &byte, 1);
    } while (got < 0 && errno == EINTR);
    if (got != 1) {
        /* It has said why on stderr. */
        fprintf(stderr, "swy-run: node %d could not be set up\n", node);
        return false;
    }
    return true;

err_close_socks:
    close(socks[0]);
    close(socks[1]);
err_close_netns:
    close(args.netns_fd);
    return false;
}

static void agents_stop(cluster_t *cluster)
{
    for (int i = 0; i < cluster->opts->nodes; ++i) {
        agent_t *agent = &cluster->agents[i];

        if (agent->sock >= 0) {
            close(agent->sock);
            agent->sock = -1;
        }
        if (agent->pid > 0) {
            /* Killing PID 1 kills the rest of the node; waitpid returns
             * once they are all gone. */
            (void)kill(agent->pid, SIGKILL);
            while (waitpid(agent->pid, NULL, 0) < 0 && errno == EINTR) {
            }
            agent->pid = 0;
        }
    }
}

static void cluster_rank_env(void *ctx, int rank)
{
    const cluster_t *cluster = ctx;
    int              per_node = cluster->opts->ranks_per_node;
    char             text[16];

    snprintf(text, sizeof(text), "%d", rank % per_node);
    setenv("SWY_LOCAL_RANK", text, 1);
    snprintf(text, sizeof(text), "%d", rank / per_node);
    setenv("SWY_NODE", text, 1);
}

/* In the rank's child (see the top of the file): enter the node, fork the
 * rank, wait for it and end as it ended. */
static void cluster_rank_enter(void *ctx, int rank, int status_fd)
{
    static const struct {
        const char *name;
        int         type;
    } namespaces[] = {
        {"net", CLONE_NEWNET}, {"uts", CLONE_NEWUTS}, {"ipc", CLONE_NEWIPC},
        {"pid", CLONE_NEWPID}, {"mnt", CLONE_NEWNS},
    };
    enum { N_NS = sizeof(namespaces) / sizeof(namespaces[0]) };
    const cluster_t *cluster = ctx;
    int              node = rank / cluster->opts->ranks_per_node;
    pid_t            agent = cluster->agents[node].pid;
    int              fds[N_NS];
    int              status, sig;
    struct rlimit    no_core = {0, 0};
    sigset_t         one;
    pid_t            pid;

    /* All opened before entering any: /proc changes with the mount
     * namespace. */
    for (int i = 0; i < N_NS; ++i) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)agent,
                 namespaces[i].name);
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            fprintf(stderr, "swy-run: rank %d: open %s: %s\n", rank, path,
                    strerror(errno));
            _exit(SWY_RUN_EXIT_INTERNAL);
        }
    }
    for (int i = 0; i < N_NS; ++i) {
        if (setns(fds[i], namespaces[i].type) != 0) {
            fprintf(stderr, "swy-run: rank %d: entering node %d's %s "
                    "namespace: %s\n", rank, node, namespaces[i].name,
                    strerror(errno));
            _exit(SWY_RUN_EXIT_INTERNAL);
        }
        close(fds[i]);
    }
    /* Entering a mount namespace moves to its root directory. */
    if (chdir(cluster->cwd) != 0) {
        fprintf(stderr, "swy-run: rank %d: chdir %s: %s\n", rank,
                cluster->cwd, strerror(errno));
        _exit(SWY_RUN_EXIT_INTERNAL);
    }

    /* The shim does not exec, so close-on-exec does not apply to it: drop
     * what it inherited from swy-run (other ranks' pipe read ends, which
     * would keep a rank from seeing EPIPE when swy-run closes its end;
     * the agents' lifelines). Keep stdio and the status pipe. */
    if (status_fd > 3) {
        close_range(3, (unsigned)status_fd - 1, 0);
    }
    close_range((unsigned)status_fd + 1, ~0u, 0);

    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "swy-run: rank %d: fork: %s\n", rank,
                strerror(errno));
        _exit(SWY_RUN_EXIT_INTERNAL);
    }
    if (pid == 0) {
        /* getppid() is 0 across the PID namespace, so the usual check
         * for a parent that died first is not possible here; the shim
         * only dies of SIGKILL, which reaches the whole process group. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        return;
    }

    close(status_fd);
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            _exit(SWY_RUN_EXIT_INTERNAL);
        }
    }
    if (WIFEXITED(status)) {
        _exit(WEXITSTATUS(status));
    }
    sig = WTERMSIG(status);
    setrlimit(RLIMIT_CORE, &no_core); /* the rank may have dumped one */
    signal(sig, SIG_DFL);
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig);
}

static void cluster_child_exited(void *ctx, pid_t pid, int status)
{
    cluster_t *cluster = ctx;

    for (int i = 0; i < cluster->opts->nodes; ++i) {
        if (cluster->agents[i].pid == pid) {
            cluster->agents[i].pid = 0;
            fprintf(stderr, "swy-run: node %d's namespace holder ended "
                    "(status 0x%x); its ranks are gone\n", i, status);
        }
    }
}

static bool root_env_set(void)
{
    uint32_t random;
    char     root[64];

    if (getrandom(&random, sizeof(random), 0) != sizeof(random)) {
        fprintf(stderr, "swy-run: getrandom: %s\n", strerror(errno));
        return false;
    }
    /* Always set: an outer SWY_ROOT (127.0.0.1, another job) cannot be
     * reached from inside the nodes. */
    snprintf(root, sizeof(root), "198.18.0.1:%u",
             ROOT_PORT_MIN + random % (ROOT_PORT_MAX - ROOT_PORT_MIN + 1));
    if (setenv("SWY_ROOT", root, 1) != 0) {
        fprintf(stderr, "swy-run: setenv: %s\n", strerror(errno));
        return false;
    }
    return true;
}

static bool nnodes_env_set(int nodes)
{
    char text[16];

    snprintf(text, sizeof(text), "%d", nodes);
    if (setenv("SWY_NNODES", text, 1) != 0) {
        fprintf(stderr, "swy-run: setenv: %s\n", strerror(errno));
        return false;
    }
    return true;
}

/* Tell the library the shaped rate, so that its link model (and the
 * partition size derived from it) matches the emulated link: a topology
 * file (SWY_TOPO_FILE) with the cross-node class at the --link rate. A
 * caller's own SWY_TOPO_FILE wins. Returns false on error; *path is set
 * (to be removed at the end) only when a file was written. */
static bool topo_file_set(const swy_run_options_t *opts, char *path,
                          size_t len)
{
    path[0] = '\0';
    if (opts->link_bits_s <= 0 || getenv("SWY_TOPO_FILE") != NULL)
        return true;
    snprintf(path, len, "/tmp/swy-run-%d-topo.txt", (int)getpid());
    FILE *file = fopen(path, "w");
    if (file == NULL) {
        fprintf(stderr, "swy-run: cannot write %s: %s\n", path,
                strerror(errno));
        path[0] = '\0';
        return false;
    }
    /* GB/s (1e9 bytes/s) and an assumed 50 us of TCP latency: tbf's own
     * latency bound is a queue limit, not propagation. */
    fprintf(file, "# written by swy-run --link %s\ncross_node %.6f 50\n",
            opts->link_rate, opts->link_bits_s / 8 / 1e9);
    fclose(file);
    return setenv("SWY_TOPO_FILE", path, 1) == 0;
}

/* A SIGINT, SIGTERM or SIGHUP that arrived while the nodes were being
 * built (it is blocked): its number, or 0 if none. Consumes it. */
static int terminating_signal_pending(void)
{
    struct timespec zero = {0, 0};
    sigset_t        set;
    int             sig;

    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(terminating_signals) / sizeof(int); ++i) {
        sigaddset(&set, terminating_signals[i]);
    }
    sig = sigtimedwait(&set, NULL, &zero);
    return sig > 0 ? sig : 0;
}

int swy_run_cluster_launch(const swy_run_options_t *opts)
{
    cluster_t cluster = {.opts = opts};
    char      topo_path[128] = "";
    sigset_t  blocked, saved_mask;
    int       status;
    int       net_status;

    if (geteuid() != 0) {
        fprintf(stderr, "swy-run: --nodes needs root (network namespaces)\n");
        return SWY_RUN_EXIT_UNSUPPORTED;
    }
    if (getcwd(cluster.cwd, sizeof(cluster.cwd)) == NULL) {
        fprintf(stderr, "swy-run: getcwd: %s\n", strerror(errno));
        return SWY_RUN_EXIT_INTERNAL;
    }
    cluster.agents = calloc((size_t)opts->nodes, sizeof(*cluster.agents));
    if (cluster.agents == NULL) {
        fprintf(stderr, "swy-run: out of memory\n");
        return SWY_RUN_EXIT_INTERNAL;
    }
    for (int i = 0; i < opts->nodes; ++i) {
        cluster.agents[i].sock = -1;
    }

    /* From here on a signal must not end swy-run before it has removed
     * what it built: block them now; the supervision core reads them from
     * a signalfd, and the ranks get the original mask back. */
    sigemptyset(&blocked);
    for (size_t i = 0; i < sizeof(terminating_signals) / sizeof(int); ++i) {
        sigaddset(&blocked, terminating_signals[i]);
    }
    sigaddset(&blocked, SIGQUIT);
    sigaddset(&blocked, SIGUSR1);
    sigaddset(&blocked, SIGUSR2);
    sigaddset(&blocked, SIGCHLD);
    sigprocmask(SIG_BLOCK, &blocked, &saved_mask);

    net_status = swy_run_netns_create(&cluster.net, opts->nodes,
                                      opts->link_bits_s);
    if (net_status != 0) {
        status = net_status == 77 ? SWY_RUN_EXIT_UNSUPPORTED
                                  : SWY_RUN_EXIT_INTERNAL;
        goto out_destroy;
    }
    for (int i = 0; i < opts->nodes; ++i) {
        if (!agent_start(&cluster, i)) {
            status = SWY_RUN_EXIT_INTERNAL;
            goto out_stop;
        }
    }
    if (!root_env_set() || !nnodes_env_set(opts->nodes) ||
        !topo_file_set(opts, topo_path, sizeof(topo_path)) ||
        !swy_run_job_env_set(opts->np, opts->ranks_per_node, "198.18.0.1")) {
        status = SWY_RUN_EXIT_INTERNAL;
        goto out_stop;
    }
    status = terminating_signal_pending();
    if (status != 0) {
        fprintf(stderr, "swy-run: %s while building the nodes\n",
                strsignal(status));
        status += 128;
        goto out_stop;
    }

    {
        swy_run_launch_hooks_t hooks = {
            .ctx               = &cluster,
            .rank_enter        = cluster_rank_enter,
            .rank_env          = cluster_rank_env,
            .child_exited      = cluster_child_exited,
            .rank_sigmask      = &saved_mask,
            .kill_after_signal = true,
        };

        status = swy_run_ranks_launch(opts, &hooks);
    }

out_stop:
    agents_stop(&cluster);
out_destroy:
    swy_run_netns_destroy(&cluster.net);
    if (topo_path[0] != '\0')
        unlink(topo_path);
    free(cluster.agents);
    return status;
}
