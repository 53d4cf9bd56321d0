/* Network namespaces, veths, bridge and tbf of the emulated cluster; see
 * netns.h. */
#include "netns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_NETNS_DIR "/run/netns"
/* Held while creating namespaces and while removing /run/netns, so that
 * one run cannot remove the directory under another's `ip netns add`. */
#define LOCK_PATH     "/run/swy-run-netns.lock"

/* tc-tbf(8): the bucket must hold at least rate/HZ bytes, or a kernel that
 * refills per tick cannot reach the rate. 250 is this kernel's (and
 * Debian's) CONFIG_HZ; user space cannot read HZ. 256 KiB is the smallest
 * burst measured to give UCX 0.956 of 1 gbit over TCP (docs/running.md). */
#define TBF_HZ        250.0
#define TBF_MIN_BURST (256.0 * 1024)
#define TBF_LATENCY   "5ms"

static char ip_path[PATH_MAX];
static char tc_path[PATH_MAX];

bool swy_run_tool_find(const char *name, char *path_p, unsigned path_len)
{
    const char *env_path = getenv("PATH");
    char        dirs[8192];
    char       *save = NULL;
    struct stat st;

    snprintf(dirs, sizeof(dirs), "%s:/usr/sbin:/sbin",
             env_path != NULL ? env_path : "");
    for (char *dir = strtok_r(dirs, ":", &save); dir != NULL;
         dir = strtok_r(NULL, ":", &save)) {
        char candidate[PATH_MAX];

        if (dir[0] != '/') {
            continue; /* a relative PATH entry would depend on the cwd */
        }
        snprintf(candidate, sizeof(candidate), "%s/%s", dir, name);
        /* A directory passes access(X_OK): /usr/lib/<triplet>/tc is one. */
        if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) &&
            access(candidate, X_OK) == 0) {
            snprintf(path_p, path_len, "%s", candidate);
            return true;
        }
    }
    return false;
}

static bool tools_find(void)
{
    if (ip_path[0] == '\0' &&
        !swy_run_tool_find("ip", ip_path, sizeof(ip_path))) {
        return false;
    }
    if (tc_path[0] == '\0' &&
        !swy_run_tool_find("tc", tc_path, sizeof(tc_path))) {
        return false;
    }
    return true;
}

/* Runs argv (argv[0]: "ip" or "tc") to completion with its stdout
 * discarded. On failure prints the command and what it said on stderr,
 * unless quiet. */
static bool cmd_run(bool quiet, const char *const *argv)
{
    char    err_text[1024];
    size_t  err_len = 0;
    int     err_pipe[2];
    int     status;
    ssize_t got;
    pid_t   pid;

    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "swy-run: pipe: %s\n", strerror(errno));
        return false;
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "swy-run: fork: %s\n", strerror(errno));
        close(err_pipe[0]);
        close(err_pipe[1]);
        return false;
    }
    if (pid == 0) {
        int      null_fd = open("/dev/null", O_RDWR);
        sigset_t none;

        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
            dup2(null_fd, STDOUT_FILENO);
        }
        dup2(err_pipe[1], STDERR_FILENO);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(strcmp(argv[0], "tc") == 0 ? tc_path : ip_path,
              (char *const *)argv);
        _exit(127);
    }
    close(err_pipe[1]);
    while ((got = read(err_pipe[0], err_text + err_len,
                       sizeof(err_text) - 1 - err_len)) != 0) {
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            break;
        }
        err_len += (size_t)got;
        if (err_len == sizeof(err_text) - 1) {
            char discard[256];

            while (read(err_pipe[0], discard, sizeof(discard)) > 0) {
            }
            break;
        }
    }
    close(err_pipe[0]);
    err_text[err_len] = '\0';
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            status = -1;
            break;
        }
    }
    if (status == 0) {
        return true;
    }
    if (!quiet) {
        fputs("swy-run: failed:", stderr);
        for (int i = 0; argv[i] != NULL; ++i) {
            fprintf(stderr, " %s", argv[i]);
        }
        err_text[strcspn(err_text, "\n")] = '\0';
        fprintf(stderr, ": %s\n", err_len > 0 ? err_text : "(no message)");
    }
    return false;
}

#define CMD(quiet, ...) cmd_run(quiet, (const char *const[]){__VA_ARGS__, NULL})

/* The pid in "swy-<pid>-n<i>" or "swy-<pid>-br"; 0 if name is not one. */
static pid_t name_pid(const char *name)
{
    char *end;
    long  pid;

    if (strncmp(name, "swy-", 4) != 0 || name[4] < '1' || name[4] > '9') {
        return 0;
    }
    errno = 0;
    pid = strtol(name + 4, &end, 10);
    if (errno != 0 || pid <= 0 || pid > INT_MAX || *end != '-') {
        return 0;
    }
    end++;
    if (strcmp(end, "br") != 0) {
        if (end[0] != 'n' || end[1] == '\0' ||
            strspn(end + 1, "0123456789") != strlen(end + 1)) {
            return 0;
        }
    }
    return (pid_t)pid;
}

static bool name_is_stale(const char *name)
{
    pid_t pid = name_pid(name);

    /* EPERM means the process exists; only ESRCH proves it is gone. */
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

static void stale_remove(void)
{
    DIR           *dir;
    struct dirent *entry;

    if (!tools_find()) {
        return;
    }
    dir = opendir(RUN_NETNS_DIR);
    if (dir == NULL) {
        return;
    }
    while ((entry = readdir(dir)) != NULL) {
        if (name_is_stale(entry->d_name)) {
            fprintf(stderr, "swy-run: removing namespace %s left by a run "
                    "that is gone\n", entry->d_name);
            (void)CMD(false, "ip", "netns", "delete", entry->d_name);
        }
    }
    closedir(dir);
}

void swy_run_netns_node_name(const swy_run_netns_t *net, int node,
                             char name_p[SWY_RUN_NETNS_NAME_MAX])
{
    snprintf(name_p, SWY_RUN_NETNS_NAME_MAX, "%s-n%d", net->prefix, node);
}

/* Both ends of node i's uplink, each shaping what it sends. */
static bool node_shape(const char *bridge, const char *node,
                       const char *bridge_end, double link_bits_s)
{
    char   rate[48], burst[48];
    double burst_bytes = link_bits_s / 8 / TBF_HZ;

    if (burst_bytes < TBF_MIN_BURST) {
        burst_bytes = TBF_MIN_BURST;
    }
    snprintf(rate, sizeof(rate), "%.0fbit", link_bits_s);
    snprintf(burst, sizeof(burst), "%.0f", burst_bytes);
    return CMD(false, "tc", "-n", node, "qdisc", "add", "dev", "eth0",
               "root", "tbf", "rate", rate, "burst", burst, "latency",
               TBF_LATENCY) &&
           CMD(false, "tc", "-n", bridge, "qdisc", "add", "dev", bridge_end,
               "root", "tbf", "rate", rate, "burst", burst, "latency",
               TBF_LATENCY);
}

static bool node_create(swy_run_netns_t *net, const char *bridge, int i,
                        double link_bits_s)
{
    char node[SWY_RUN_NETNS_NAME_MAX];
    char bridge_end[16], addr[32];

    swy_run_netns_node_name(net, i, node);
    snprintf(bridge_end, sizeof(bridge_end), "v%d", i);
    snprintf(addr, sizeof(addr), "198.18.0.%d/24", i + 1);

    if (!CMD(false, "ip", "netns", "add", node)) {
        return false;
    }
    net->nodes_created = i + 1;
    return CMD(false, "ip", "-n", bridge, "link", "add", bridge_end, "type",
               "veth", "peer", "name", "eth0", "netns", node) &&
           CMD(false, "ip", "-n", bridge, "link", "set", bridge_end,
               "master", "br0") &&
           CMD(false, "ip", "-n", bridge, "link", "set", bridge_end, "up") &&
           CMD(false, "ip", "-n", node, "addr", "add", addr, "dev",
               "eth0") &&
           CMD(false, "ip", "-n", node, "link", "set", "eth0", "up") &&
           CMD(false, "ip", "-n", node, "link", "set", "lo", "up") &&
           (link_bits_s <= 0 ||
            node_shape(bridge, node, bridge_end, link_bits_s));
}

/* -1 if the lock cannot be had; runs go on unlocked then (the race it
 * prevents is narrow). */
static int lock_take(void)
{
    int fd = open(LOCK_PATH, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

    if (fd < 0) {
        return -1;
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

static void lock_release(int fd)
{
    if (fd >= 0) {
        close(fd); /* releases the flock */
    }
}

/* Whether path has entries other than swy-run's namespaces (of any run):
 * if it has none, the last swy-run to leave may remove it. */
static bool dir_has_others(const char *path)
{
    DIR           *dir = opendir(path);
    struct dirent *entry;
    bool           others = false;

    if (dir == NULL) {
        return false;
    }
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 &&
            strcmp(entry->d_name, "..") != 0 && name_pid(entry->d_name) == 0) {
            others = true;
            break;
        }
    }
    closedir(dir);
    return others;
}

static bool dir_is_empty(const char *path)
{
    DIR           *dir = opendir(path);
    struct dirent *entry;
    bool           empty = true;

    if (dir == NULL) {
        return false;
    }
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") != 0 &&
            strcmp(entry->d_name, "..") != 0) {
            empty = false;
            break;
        }
    }
    closedir(dir);
    return empty;
}

static int netns_build(swy_run_netns_t *net, int nodes, double link_bits_s)
{
    char bridge[SWY_RUN_NETNS_NAME_MAX];

    stale_remove();
    /* Holding only swy-run's namespaces (or nothing: what an earlier or a
     * crashed run left), it is swy-run's: the last run removes it. */
    net->run_netns_foreign = dir_has_others(RUN_NETNS_DIR);

    snprintf(bridge, sizeof(bridge), "%s-br", net->prefix);
    if (!CMD(false, "ip", "netns", "add", bridge)) {
        fprintf(stderr, "swy-run: cannot create network namespaces; "
                "--nodes needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN)\n");
        return 77;
    }
    net->bridge_created = true;
    if (!CMD(false, "ip", "-n", bridge, "link", "set", "lo", "up") ||
        !CMD(false, "ip", "-n", bridge, "link", "add", "br0", "type",
             "bridge") ||
        !CMD(false, "ip", "-n", bridge, "link", "set", "br0", "up")) {
        return 1;
    }
    for (int i = 0; i < nodes; ++i) {
        if (!node_create(net, bridge, i, link_bits_s)) {
            return 1;
        }
    }
    return 0;
}

int swy_run_netns_create(swy_run_netns_t *net, int nodes,
                         double link_bits_s)
{
    int lock_fd;
    int status;

    *net = (swy_run_netns_t){.nodes = nodes};
    snprintf(net->prefix, sizeof(net->prefix), "swy-%d", (int)getpid());
    if (!tools_find()) {
        fprintf(stderr, "swy-run: --nodes needs ip and tc (iproute2)\n");
        return 77;
    }
    lock_fd = lock_take();
    status = netns_build(net, nodes, link_bits_s);
    lock_release(lock_fd);
    return status;
}

void swy_run_netns_destroy(swy_run_netns_t *net)
{
    char name[SWY_RUN_NETNS_NAME_MAX];

    if (net == NULL || net->prefix[0] == '\0') {
        return;
    }
    for (int i = net->nodes_created - 1; i >= 0; --i) {
        swy_run_netns_node_name(net, i, name);
        (void)CMD(false, "ip", "netns", "delete", name);
    }
    net->nodes_created = 0;
    if (net->bridge_created) {
        snprintf(name, sizeof(name), "%s-br", net->prefix);
        (void)CMD(false, "ip", "netns", "delete", name);
        net->bridge_created = false;
    }

    /* `ip netns add` made /run/netns a bind mount of itself (so that the
     * namespaces' mounts propagate); undo that if this run brought
     * /run/netns into being and nobody else uses it now. */
    if (!net->run_netns_foreign) {
        int lock_fd = lock_take();

        if (dir_is_empty(RUN_NETNS_DIR)) {
            if (umount(RUN_NETNS_DIR) != 0 && errno != EINVAL) {
                fprintf(stderr, "swy-run: umount %s: %s\n", RUN_NETNS_DIR,
                        strerror(errno));
            } else if (rmdir(RUN_NETNS_DIR) != 0 && errno != ENOENT &&
                       errno != ENOTEMPTY) {
                fprintf(stderr, "swy-run: rmdir %s: %s\n", RUN_NETNS_DIR,
                        strerror(errno));
            }
        }
        lock_release(lock_fd);
    }
}
