/* OPENBLAS_CORETYPE for the ranks; see blas_env.h. */
#include "blas_env.h"

#include "blas_core.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The libraries a rank's BLAS may come from: OpenBLAS by its own name,
 * or as the system's libblas (Debian's alternatives, what PyTorch links). */
static const char *const blas_libs[] = {"libopenblas.so.0", "libblas.so.3"};

/* In the child: load OpenBLAS as a rank would (one thread, so that it
 * starts none) and write the name of the kernels it chose to fd. */
static void probe_child(int fd)
{
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    for (size_t i = 0; i < sizeof(blas_libs) / sizeof(*blas_libs); i++) {
        void *lib = dlopen(blas_libs[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL)
            continue;
        const char *(*corename)(void) =
            (const char *(*)(void))dlsym(lib, "openblas_get_corename");
        const char *name = corename != NULL ? corename() : NULL;
        if (name != NULL) {
            size_t len = strnlen(name, 63);
            if (write(fd, name, len) != (ssize_t)len)
                _exit(1);
            _exit(0);
        }
    }
    _exit(1);
}

/* The name of the kernels OpenBLAS chooses here, into buf; 0 when it
 * cannot be learned within a few seconds. */
static int probe(char *buf, size_t len)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return 0;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return 0;
    }
    if (pid == 0) {
        close(fds[0]);
        probe_child(fds[1]);
    }
    close(fds[1]);
    size_t got = 0;
    int timed_out = 0;
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    while (got + 1 < len) {
        int ready = poll(&pfd, 1, 5000);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0) {
            timed_out = 1;
            break;
        }
        ssize_t n = read(fds[0], buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    if (timed_out)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    buf[got] = '\0';
    return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void swy_run_blas_env_set(void)
{
    if (getenv("OPENBLAS_CORETYPE") != NULL)
        return;
    unsigned features = swy_blas_cpu_features();
    if (!(features & SWY_BLAS_CPU_AVX2))
        return; /* nothing better to ask for */
    char current[64];
    if (!probe(current, sizeof(current)))
        return;
    const char *pick = swy_blas_core_pick(current, features);
    if (pick != NULL)
        setenv("OPENBLAS_CORETYPE", pick, 1);
}
