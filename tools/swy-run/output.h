/* Line-framed relay of one rank's output stream: bytes read from the rank's
 * pipe are held until a newline, then written to swy-run's own stdout or
 * stderr as one whole line with the rank's prefix. Because swy-run writes
 * each line completely before the next, lines of different ranks never
 * mix. */
#ifndef SWY_RUN_OUTPUT_H
#define SWY_RUN_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

/* A line longer than this is written in pieces, each with the prefix, so a
 * rank that never prints a newline cannot make swy-run grow without bound. */
#define SWY_RUN_OUTPUT_MAX_LINE (4u << 20)

typedef struct {
    int    out_fd;      /* STDOUT_FILENO or STDERR_FILENO */
    char   prefix[16];  /* "[r] " or "" */
    size_t prefix_len;
    char  *pending;     /* bytes after the last newline seen */
    size_t pending_len;
    size_t pending_cap;
} swy_run_output_t;

void swy_run_output_init(swy_run_output_t *output, int out_fd, int rank,
                         bool prefix);

/* Relays the complete lines in data[0..len) (plus what was pending) and
 * keeps the tail for the next call. */
void swy_run_output_feed(swy_run_output_t *output, const char *data,
                         size_t len);

/* At end of stream: writes a pending partial line, ending it with '\n'. */
void swy_run_output_flush(swy_run_output_t *output);

/* True once writing to out_fd failed for good (e.g. EPIPE: the reader of
 * swy-run's stdout went away); its output is dropped from then on. */
bool swy_run_output_is_broken(int out_fd);

void swy_run_output_finalize(swy_run_output_t *output);

#endif
