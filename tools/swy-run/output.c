/* Relaying rank output line by line; see output.h. */
#include "output.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Set once our stdout or stderr is gone (EPIPE and the like): output for
 * that descriptor is dropped from then on. */
static bool output_fd_broken[3];

void swy_run_output_init(swy_run_output_t *output, int out_fd, int rank,
                         bool prefix)
{
    memset(output, 0, sizeof(*output));
    output->out_fd = out_fd;
    if (prefix) {
        output->prefix_len = (size_t)snprintf(output->prefix,
                                              sizeof(output->prefix), "[%d] ",
                                              rank);
    }
}

/* Writes every byte of iov[], resuming after partial writes, and waiting
 * if the descriptor we inherited happens to be non-blocking. */
static void write_all(int fd, struct iovec *iov, int iovcnt)
{
    if (fd < 3 && output_fd_broken[fd]) {
        return;
    }
    while (iovcnt > 0) {
        ssize_t written = writev(fd, iov, iovcnt);

        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                struct pollfd pfd = {.fd = fd, .events = POLLOUT};

                (void)poll(&pfd, 1, -1);
                continue;
            }
            if (fd < 3) {
                output_fd_broken[fd] = true;
            }
            return;
        }
        while (iovcnt > 0 && (size_t)written >= iov->iov_len) {
            written -= (ssize_t)iov->iov_len;
            ++iov;
            --iovcnt;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + written;
            iov->iov_len -= (size_t)written;
        }
    }
}

/* One output line: prefix, the pending head, the new tail, and a newline
 * if the line has none (a flushed partial line). */
static void write_line(swy_run_output_t *output, const char *head,
                       size_t head_len, const char *tail, size_t tail_len,
                       bool add_newline)
{
    struct iovec iov[4];
    int          iovcnt = 0;

    if (output->prefix_len > 0) {
        iov[iovcnt++] = (struct iovec){output->prefix, output->prefix_len};
    }
    if (head_len > 0) {
        iov[iovcnt++] = (struct iovec){(void *)head, head_len};
    }
    if (tail_len > 0) {
        iov[iovcnt++] = (struct iovec){(void *)tail, tail_len};
    }
    if (add_newline) {
        iov[iovcnt++] = (struct iovec){"\n", 1};
    }
    write_all(output->out_fd, iov, iovcnt);
}

static bool pending_append(swy_run_output_t *output, const char *data,
                           size_t len)
{
    if (output->pending_len + len > output->pending_cap) {
        size_t cap = output->pending_cap > 0 ? output->pending_cap : 4096;
        char  *grown;

        while (cap < output->pending_len + len) {
            cap *= 2;
        }
        grown = realloc(output->pending, cap);
        if (grown == NULL) {
            return false;
        }
        output->pending     = grown;
        output->pending_cap = cap;
    }
    memcpy(output->pending + output->pending_len, data, len);
    output->pending_len += len;
    return true;
}

void swy_run_output_feed(swy_run_output_t *output, const char *data,
                         size_t len)
{
    const char *newline;

    while ((newline = memchr(data, '\n', len)) != NULL) {
        size_t line_len = (size_t)(newline - data) + 1;

        write_line(output, output->pending, output->pending_len, data,
                   line_len, false);
        output->pending_len = 0;
        data += line_len;
        len -= line_len;
    }
    if (len == 0) {
        return;
    }
    /* Too long to hold, or no memory to hold it: better a line cut in two
     * (each piece prefixed) than lost output. */
    if (output->pending_len + len > SWY_RUN_OUTPUT_MAX_LINE ||
        !pending_append(output, data, len)) {
        write_line(output, output->pending, output->pending_len, data, len,
                   true);
        output->pending_len = 0;
    }
}

void swy_run_output_flush(swy_run_output_t *output)
{
    if (output->pending_len > 0) {
        write_line(output, output->pending, output->pending_len, NULL, 0,
                   true);
        output->pending_len = 0;
    }
}

bool swy_run_output_is_broken(int out_fd)
{
    return out_fd >= 0 && out_fd < 3 && output_fd_broken[out_fd];
}

void swy_run_output_finalize(swy_run_output_t *output)
{
    if (output == NULL) {
        return;
    }
    free(output->pending);
    output->pending     = NULL;
    output->pending_len = 0;
    output->pending_cap = 0;
}
