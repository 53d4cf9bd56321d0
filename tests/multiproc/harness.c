#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int child_main(int fd, int rank, int nranks, swy_test_rank_fn fn,
                      void *arg)
{
    swy_unique_id_t id;
    size_t got = 0;
    while (got < sizeof(id)) {
        ssize_t n = read(fd, (char *)&id + got, sizeof(id) - got);
        if (n <= 0)
            return 90;
        got += (size_t)n;
    }
    close(fd);
    swy_comm_t comm;
    swy_status_t status = swy_comm_init_rank(&comm, nranks, &id, rank);
    if (status != SWY_OK) {
        fprintf(stderr, "rank %d: init failed: %s: %s\n", rank,
                swy_status_string(status), swy_last_error(NULL));
        return 91;
    }
    /* SWYTEST_SPLIT: run fn on a communicator split from the world
     * instead: "reverse" (every rank, in reverse order) or "halves" (even
     * and odd ranks, each half on its own). */
    const char *split = getenv("SWYTEST_SPLIT");
    if (split != NULL && split[0] != '\0') {
        int halves = strcmp(split, "halves") == 0;
        swy_comm_t sub = NULL;
        status = swy_comm_split(comm, halves ? rank % 2 : 0,
                                halves ? rank : nranks - rank, &sub);
        if (status != SWY_OK) {
            fprintf(stderr, "rank %d: split failed: %s: %s\n", rank,
                    swy_status_string(status), swy_last_error(comm));
            return 93;
        }
        int code = fn(sub, swy_comm_rank(sub), swy_comm_size(sub), arg);
        if (code >= 200)
            return code - 200;
        status = swy_comm_destroy(sub);
        if (status == SWY_OK)
            status = swy_comm_destroy(comm);
        if (status != SWY_OK) {
            fprintf(stderr, "rank %d: destroy failed: %s: %s\n", rank,
                    swy_status_string(status), swy_last_error(NULL));
            return code ? code : 92;
        }
        return code;
    }
    int code = fn(comm, rank, nranks, arg);
    if (code >= 200)
        return code - 200;
    status = swy_comm_destroy(comm);
    if (status != SWY_OK) {
        fprintf(stderr, "rank %d: destroy failed: %s: %s\n", rank,
                swy_status_string(status), swy_last_error(NULL));
        return code ? code : 92;
    }
    return code;
}

int swy_test_spawn(int nranks, swy_test_rank_fn fn, void *arg,
                   double timeout_s, swy_test_result_t *result)
{
    pid_t pids[256];
    int fds[256];
    swy_test_result_t local;
    if (result == NULL)
        result = &local;
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < nranks; r++) {
        int p[2];
        if (pipe(p) != 0)
            return -1;
        pid_t pid = fork();
        if (pid == 0) {
            close(p[1]);
            for (int q = 0; q < r; q++)
                close(fds[q]);
            int code = child_main(p[0], r, nranks, fn, arg);
            /* A counted CHECK (check.h) that failed fails the rank. */
            _exit(code == 0 && check_failures != 0 ? 1 : code);
        }
        close(p[0]);
        pids[r] = pid;
        fds[r] = p[1];
    }
    swy_unique_id_t id;
    swy_status_t status = swy_get_unique_id(&id);
    for (int r = 0; r < nranks; r++) {
        if (status == SWY_OK && write(fds[r], &id, sizeof(id)) != sizeof(id))
            status = SWY_ERR_SYSTEM;
        close(fds[r]);
    }
    if (status != SWY_OK)
        fprintf(stderr, "harness: swy_get_unique_id failed: %s\n",
                swy_last_error(NULL));
    double deadline = swy_test_now_s() + timeout_s;
    int remaining = nranks, killed = 0;
    for (int r = 0; r < nranks; r++)
        result->code[r] = -1000;
    while (remaining > 0) {
        int wstatus;
        pid_t pid = waitpid(-1, &wstatus, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < nranks; r++)
                if (pids[r] == pid) {
                    result->code[r] = WIFEXITED(wstatus)
                                          ? WEXITSTATUS(wstatus)
                                          : -WTERMSIG(wstatus);
                    remaining--;
                }
            continue;
        }
        if (!killed && swy_test_now_s() > deadline) {
            fprintf(stderr, "harness: timeout after %.0f s; killing ranks\n",
                    timeout_s);
            for (int r = 0; r < nranks; r++)
                if (result->code[r] == -1000)
                    kill(pids[r], SIGKILL);
            killed = 1;
        }
        usleep(2000);
    }
    int failed = 0;
    for (int r = 0; r < nranks; r++)
        if (result->code[r] != 0) {
            fprintf(stderr, "harness: rank %d ended with %d\n", r,
                    result->code[r]);
            failed = 1;
        }
    return failed || killed;
}

/* ---- the GPU test double (see harness.h) ---- */

#include <dlfcn.h>

#include "devdouble.h"

static struct {
    int tried, ok;
    swy_devdouble_alloc_fn alloc;
    swy_devdouble_free_fn free;
    swy_devdouble_stream_create_fn stream_create;
    swy_devdouble_stream_destroy_fn stream_destroy;
    swy_devdouble_launch_fn launch;
    swy_devdouble_stream_capture_fn capture;
    swy_devdouble_traffic_fn traffic;
} dd;

int swy_test_devdouble(void)
{
    if (dd.tried)
        return dd.ok;
    dd.tried = 1;
    const char *path = getenv("SWYTEST_DEVDOUBLE");
    /* The library loads the same file from SWY_PLUGIN_PATH; dlopen gives
     * both the one copy. */
    void *h = path != NULL && path[0] != '\0' ? dlopen(path, RTLD_NOW) : NULL;
    if (h == NULL)
        return 0;
    dd.alloc = (swy_devdouble_alloc_fn)dlsym(h, SWY_DEVDOUBLE_ALLOC);
    dd.free = (swy_devdouble_free_fn)dlsym(h, SWY_DEVDOUBLE_FREE);
    dd.stream_create = (swy_devdouble_stream_create_fn)dlsym(
        h, SWY_DEVDOUBLE_STREAM_CREATE);
    dd.stream_destroy = (swy_devdouble_stream_destroy_fn)dlsym(
        h, SWY_DEVDOUBLE_STREAM_DESTROY);
    dd.launch = (swy_devdouble_launch_fn)dlsym(h, SWY_DEVDOUBLE_LAUNCH);
    dd.capture = (swy_devdouble_stream_capture_fn)dlsym(
        h, SWY_DEVDOUBLE_STREAM_CAPTURE);
    dd.traffic = (swy_devdouble_traffic_fn)dlsym(h, SWY_DEVDOUBLE_TRAFFIC);
    dd.ok = dd.alloc && dd.free && dd.stream_create && dd.stream_destroy &&
            dd.launch && dd.capture && dd.traffic;
    return dd.ok;
}

static void dd_need(const char *what)
{
    if (!swy_test_devdouble()) {
        const char *path = getenv("SWYTEST_DEVDOUBLE");
        fprintf(stderr, "%s: the GPU test double is not loaded "
                "(SWYTEST_DEVDOUBLE=%s)\n", what, path ? path : "(unset)");
        abort();
    }
}

void *swy_test_dev_alloc(size_t bytes)
{
    dd_need("swy_test_dev_alloc");
    void *p = dd.alloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "swy_test_dev_alloc(%zu): out of memory\n", bytes);
        abort();
    }
    return p;
}

void swy_test_dev_free(void *ptr)
{
    dd_need("swy_test_dev_free");
    dd.free(ptr);
}

void *swy_test_dev_stream_create(void)
{
    dd_need("swy_test_dev_stream_create");
    void *s = dd.stream_create();
    if (s == NULL)
        abort();
    return s;
}

void swy_test_dev_stream_destroy(void *stream)
{
    dd_need("swy_test_dev_stream_destroy");
    dd.stream_destroy(stream);
}

void swy_test_dev_launch(void *stream, void (*fn)(void *), void *arg)
{
    dd_need("swy_test_dev_launch");
    if (dd.launch(stream, fn, arg) != 0)
        abort();
}

void swy_test_dev_stream_capture(void *stream, int on)
{
    dd_need("swy_test_dev_stream_capture");
    dd.capture(stream, on);
}

swy_test_dev_traffic_t swy_test_dev_traffic_mark(void)
{
    swy_test_dev_traffic_t t;
    dd_need("swy_test_dev_traffic_mark");
    dd.traffic(&t.transport_sends, &t.launches);
    return t;
}

int swy_test_dev_moved_by_plugin(swy_test_dev_traffic_t mark,
                                 const char *what)
{
    swy_test_dev_traffic_t now = swy_test_dev_traffic_mark();
    CHECK_RET(now.transport_sends == mark.transport_sends, "%s: %llu "
              "transport sends of device memory, want 0 (the device "
              "plugin's launches move it)", what,
              now.transport_sends - mark.transport_sends);
    CHECK_RET(now.launches > mark.launches, "%s: no launch of the device "
              "plugin", what);
    return 0;
}

void swy_test_snapshot(void *arg)
{
    swy_test_snapshot_t *s = arg;
    memcpy(s->dst, s->src, s->bytes);
}

void *swy_test_buf_calloc(int device, size_t n, size_t size)
{
    if (!device)
        return calloc(n, size);
    void *p = swy_test_dev_alloc(n * size);
    memset(p, 0, n * size);
    return p;
}

void swy_test_buf_free(int device, void *ptr)
{
    if (device)
        swy_test_dev_free(ptr);
    else
        free(ptr);
}
