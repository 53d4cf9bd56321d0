/* A rank program for the swy-run tests. Its first argument picks what it
 * does; ranks that the test later checks for leftovers write their pid to
 * DIR/pid.<rank> once they are ready (signal handlers installed). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int         my_rank;
static const char *work_dir;

static int env_int(const char *name)
{
    const char *text = getenv(name);

    if (text == NULL) {
        fprintf(stderr, "run_helper: %s is not set\n", name);
        exit(90);
    }
    return atoi(text);
}

static void sleep_s(double seconds)
{
    struct timespec ts = {(time_t)seconds,
                          (long)((seconds - (time_t)seconds) * 1e9)};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Written to a temporary name and renamed, so a reader never sees a
 * half-written file. */
static void file_write(const char *kind, const char *text)
{
    char  tmp[4096], path[4096];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s/.%s.%d.tmp", work_dir, kind, my_rank);
    snprintf(path, sizeof(path), "%s/%s.%d", work_dir, kind, my_rank);
    f = fopen(tmp, "w");
    if (f == NULL || fputs(text, f) == EOF || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        fprintf(stderr, "run_helper: cannot write %s: %s\n", path,
                strerror(errno));
        exit(91);
    }
}

static void pid_file_write(void)
{
    char text[32];

    snprintf(text, sizeof(text), "%ld\n", (long)getpid());
    file_write("pid", text);
}

/* So that the test can check every rank: fail only once all are ready. */
static void all_ranks_ready_wait(void)
{
    int world_size = env_int("SWY_WORLD_SIZE");

    for (int tries = 0; tries < 1000; ++tries) {
        int ready = 0;

        for (int r = 0; r < world_size; ++r) {
            char path[4096];

            snprintf(path, sizeof(path), "%s/pid.%d", work_dir, r);
            ready += access(path, F_OK) == 0;
        }
        if (ready == world_size) {
            return;
        }
        sleep_s(0.01);
    }
    fprintf(stderr, "run_helper: rank %d: other ranks never got ready\n",
            my_rank);
    exit(92);
}

static char term_marker_path[4096];

static void on_sigterm(int sig)
{
    int fd;

    (void)sig;
    fd = open(term_marker_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        close(fd);
    }
    _exit(0);
}

static volatile sig_atomic_t sigint_count, sigusr1_count;

static void on_counted(int sig)
{
    if (sig == SIGINT) {
        sigint_count++;
    } else {
        sigusr1_count++;
    }
}

/* Writes DIR/count.<rank> = "int=I usr1=U" and exits. */
static void on_sigterm_count(int sig)
{
    char text[64];
    int  fd, len;

    (void)sig;
    len = snprintf(text, sizeof(text), "int=%d usr1=%d\n", (int)sigint_count,
                   (int)sigusr1_count);
    fd = open(term_marker_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        if (write(fd, text, (size_t)len) != len) {
            _exit(95);
        }
        close(fd);
    }
    _exit(0);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";

    my_rank = env_int("SWY_RANK");
    work_dir = argc > 2 ? argv[2] : ".";

    if (strcmp(mode, "env") == 0) {
        printf("rank=%s size=%s local=%s localsize=%s root=%s key=%s\n",
               getenv("SWY_RANK"), getenv("SWY_WORLD_SIZE"),
               getenv("SWY_LOCAL_RANK"), getenv("SWY_LOCAL_WORLD_SIZE"),
               getenv("SWY_ROOT"),
               getenv("SWY_JOB_KEY"));
        fprintf(stderr, "stderr of rank %d\n", my_rank);
        return 0;
    }
    if (strcmp(mode, "fail") == 0 && argc == 5) {
        /* fail DIR RANK CODE: RANK exits CODE, the others sleep. */
        pid_file_write();
        if (my_rank == atoi(argv[3])) {
            all_ranks_ready_wait();
            return atoi(argv[4]);
        }
        sleep_s(60);
        return 0;
    }
    if (strcmp(mode, "failall") == 0 && argc == 4) {
        /* failall DIR CODE: every rank fails with CODE, rank 0 last and
         * after saying why (as a tool that checks its options on every
         * rank and reports on rank 0). */
        pid_file_write();
        all_ranks_ready_wait();
        if (my_rank == 0) {
            sleep_s(0.2);
            fprintf(stderr, "rank 0: the reason\n");
        }
        return atoi(argv[3]);
    }
    if (strcmp(mode, "sigkill") == 0 && argc == 4) {
        /* sigkill DIR RANK: RANK kills itself, the others sleep. */
        pid_file_write();
        if (my_rank == atoi(argv[3])) {
            all_ranks_ready_wait();
            raise(SIGKILL);
        }
        sleep_s(60);
        return 0;
    }
    if (strcmp(mode, "term") == 0 && argc == 3) {
        /* term DIR: mark SIGTERM in DIR/term.<rank> and exit 0. */
        snprintf(term_marker_path, sizeof(term_marker_path), "%s/term.%d",
                 work_dir, my_rank);
        signal(SIGTERM, on_sigterm);
        pid_file_write();
        for (;;) {
            pause();
        }
    }
    if (strcmp(mode, "count") == 0 && argc == 3) {
        /* count DIR: count SIGINT and SIGUSR1; report them on SIGTERM. */
        struct sigaction count = {.sa_handler = on_counted};

        snprintf(term_marker_path, sizeof(term_marker_path), "%s/count.%d",
                 work_dir, my_rank);
        sigaction(SIGINT, &count, NULL);
        sigaction(SIGUSR1, &count, NULL);
        signal(SIGTERM, on_sigterm_count);
        pid_file_write();
        for (;;) {
            pause();
        }
    }
    if (strcmp(mode, "ignore-term") == 0 && argc == 3) {
        /* ignore-term DIR: rank 0 exits 1; the others ignore SIGTERM. */
        if (my_rank != 0) {
            signal(SIGTERM, SIG_IGN);
        }
        pid_file_write();
        if (my_rank == 0) {
            all_ranks_ready_wait();
            return 1;
        }
        sleep_s(60);
        return 0;
    }
    if (strcmp(mode, "sleep") == 0 && argc == 3) {
        pid_file_write();
        sleep_s(60);
        return 0;
    }
    if (strcmp(mode, "spam") == 0 && argc == 3) {
        /* spam DIR: print lines until stdout breaks (SIGPIPE). */
        pid_file_write();
        all_ranks_ready_wait();
        for (;;) {
            printf("line from rank %d\n", my_rank);
            fflush(stdout);
        }
    }
    if (strcmp(mode, "longline") == 0 && argc == 4) {
        /* longline DIR BYTES: one line of BYTES letters, no newline. */
        size_t bytes = strtoul(argv[3], NULL, 10);
        char  *line = malloc(bytes);

        if (line == NULL) {
            return 93;
        }
        memset(line, 'a' + my_rank % 26, bytes);
        fwrite(line, 1, bytes, stdout);
        free(line);
        return 0;
    }
    fprintf(stderr, "run_helper: bad arguments\n");
    return 94;
}
