/* The root under a connection flood, in a process limited to 128 file
 * descriptors (as rank 0 of a job may be):
 *   (a) 200 idle connections that never start the handshake: the root
 *       keeps the ones without a handshake under its cap (dropping the
 *       oldest, said once), stays idle (no spinning), and a real job
 *       still joins and runs on it;
 *   (b) accept failing with EMFILE (the process's fds taken by something
 *       else): the root backs off instead of spinning, its warnings are
 *       rate limited, and it accepts again once fds are free.
 * The log goes to a file whose lines are counted. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "boot_test.h"
#include "util/log.h"

#define FD_LIMIT 128
#define FLOOD 200

static swy_boot_addr_t g_addr;
static char g_log_path[64];

static double cpu_s(void)
{
    struct rusage usage;
    CHECK_EXIT(getrusage(RUSAGE_SELF, &usage) == 0);
    return (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 +
           (double)usage.ru_stime.tv_sec + usage.ru_stime.tv_usec * 1e-6;
}

static size_t log_lines(const char *needle)
{
    FILE *file = fopen(g_log_path, "r");
    CHECK_EXIT(file != NULL);
    char line[4096];
    size_t count = 0;
    while (fgets(line, sizeof(line), file) != NULL)
        count += needle == NULL || strstr(line, needle) != NULL;
    fclose(file);
    return count;
}

/* Child (forked before the fd limit): open FLOOD connections to the
 * port it is sent, say so, and hold them until killed. */
static pid_t start_flooder(int *to_child_p, int *from_child_p)
{
    int to_child[2], from_child[2];
    CHECK_EXIT(pipe(to_child) == 0 && pipe(from_child) == 0);
    pid_t pid = fork();
    CHECK_EXIT(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(to_child[1]);
        close(from_child[0]);
        for (;;) {
            swy_boot_addr_t addr;
            if (test_read_all(to_child[0], &addr, sizeof(addr)) != 0)
                _exit(0);
            struct sockaddr_in sin;
            memset(&sin, 0, sizeof(sin));
            sin.sin_family = AF_INET;
            sin.sin_port = htons(addr.port);
            inet_pton(AF_INET, addr.host, &sin.sin_addr);
            int opened = 0;
            for (int i = 0; i < FLOOD; i++) {
                int fd = socket(AF_INET, SOCK_STREAM, 0);
                if (fd >= 0 &&
                    connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
                    opened++;
            }
            char done = opened == FLOOD ? 'f' : 'x';
            test_write_all(from_child[1], &done, 1);
        }
    }
    close(to_child[0]);
    close(from_child[1]);
    *to_child_p = to_child[1];
    *from_child_p = from_child[0];
    return pid;
}

static int open_fds(void)
{
    int count = 0;
    for (int fd = 0; fd < FD_LIMIT; fd++)
        count += fcntl(fd, F_GETFD) >= 0;
    return count;
}

static void job_rank(int rank, void *arg)
{
    (void)arg;
    swy_boot_t *boot = NULL;
    CHECK_OK_EXIT(swy_boot_connect(&g_addr, rank, 2, 20.0, &boot), NULL);
    int value = 40 + rank;
    void *all = NULL;
    size_t lens[2];
    CHECK_OK_EXIT(swy_boot_allgather(boot, &value, sizeof(value), 20.0, &all,
                                     lens), NULL);
    int got[2];
    CHECK_EXIT(lens[0] == sizeof(int) && lens[1] == sizeof(int));
    memcpy(got, all, sizeof(got));
    CHECK_EXIT(got[0] == 40 && got[1] == 41);
    swy_free(all);
    swy_boot_finalize(boot);
}

static void flood(int to_child, int from_child)
{
    test_write_all(to_child, &g_addr, sizeof(g_addr));
    char done;
    CHECK_EXIT(test_read_all(from_child, &done, 1) == 0);
    CHECK_EXIT(done == 'f');
}

static void test_idle_flood(int to_child, int from_child)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    test_secret(secret, "idle flood");
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    size_t lines_before = log_lines(NULL);
    double cpu0 = cpu_s();
    flood(to_child, from_child);
    swy_sleep_us(3000000);
    double cpu = cpu_s() - cpu0;
    fprintf(stderr, "idle flood: %.3f s of CPU in 3 s, %d fds open\n", cpu,
            open_fds());
    CHECK_EXIT(cpu < 1.0);
    test_run_ranks(2, NULL, job_rank, NULL);
    swy_boot_root_release(root);
    fprintf(stderr, "idle flood: %d fds open after the job\n", open_fds());
    size_t lines = log_lines(NULL) - lines_before;
    fprintf(stderr, "idle flood: %zu log lines\n", lines);
    CHECK_EXIT(log_lines("dropping the oldest") == 1);
    CHECK_EXIT(lines < 40);
}

static void test_emfile(int to_child, int from_child)
{
    uint8_t secret[SWY_BOOT_SECRET_LEN];
    test_secret(secret, "emfile");
    swy_boot_root_t *root = NULL;
    CHECK_OK_EXIT(swy_boot_root_start("127.0.0.1", 0, secret, &root, &g_addr),
                  NULL);
    size_t lines_before = log_lines(NULL);
    /* Take every free fd (as other parts of a rank might). */
    int hoard[FD_LIMIT];
    int nhoard = 0;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        CHECK_EXIT(nhoard < FD_LIMIT);
        hoard[nhoard++] = fd;
    }
    double cpu0 = cpu_s();
    flood(to_child, from_child);
    swy_sleep_us(3000000);
    double cpu = cpu_s() - cpu0;
    for (int i = 0; i < nhoard; i++)
        close(hoard[i]);
    size_t lines = log_lines(NULL) - lines_before;
    fprintf(stderr, "EMFILE: %.3f s of CPU in 3 s, %zu log lines\n", cpu,
            lines);
    CHECK_EXIT(cpu < 1.0);
    CHECK_EXIT(lines < 30);
    CHECK_EXIT(log_lines("accept failed") >= 1);
    /* Listening again after the back-off: a job joins. */
    test_run_ranks(2, NULL, job_rank, NULL);
    swy_boot_root_release(root);
}

int main(void)
{
    snprintf(g_log_path, sizeof(g_log_path), "/tmp/swy-flood-%d.log",
             (int)getpid());
    setenv("SWY_LOG_FILE", g_log_path, 1);
    setenv("SWY_LOG_LEVEL", "warn", 1);
    /* Open the log now, before the fds run out. */
    CHECK_EXIT(swy_log_enabled(SWY_LOG_WARN, "boot"));
    swy_log(SWY_LOG_WARN, "boot", "test_boot_flood: start");

    int to_child, from_child;
    pid_t flooder = start_flooder(&to_child, &from_child);
    struct rlimit limit;
    CHECK_EXIT(getrlimit(RLIMIT_NOFILE, &limit) == 0);
    limit.rlim_cur = FD_LIMIT;
    CHECK_EXIT(setrlimit(RLIMIT_NOFILE, &limit) == 0);

    test_idle_flood(to_child, from_child);
    test_emfile(to_child, from_child);

    close(to_child);
    close(from_child);
    kill(flooder, SIGKILL);
    waitpid(flooder, NULL, 0);
    if (getenv("SWYTEST_KEEP_LOG") == NULL)
        unlink(g_log_path);
    printf("boot flood: ok\n");
    return 0;
}
