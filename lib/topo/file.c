/* lib/topo/file.c: the link override file (SWY_TOPO_FILE).
 *
 * Format, one entry a line, '#' starts a comment, blank lines ignored:
 *   CLASS GBps usec    every pair of that class (self, same_numa,
 *                      same_node, cross_node)
 *   i j GBps usec      the pair (i, j) and (j, i)
 * GBps is 1e9 bytes/s, usec microseconds; both may be floats. Class lines
 * apply first and pair lines after them, whatever their order in the file,
 * so a pair line always refines its class. The whole file is checked before
 * anything is applied: a bad file leaves the matrix as it was. It is read
 * through swy_file_read_text: a regular file of at most
 * SWY_TOPO_FILE_MAX_BYTES, lines of at most SWY_TOPO_FILE_MAX_LINE. */
#include "topo/topo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/file.h"
#include "util/log.h"
#include "util/status.h"

#define SWY_TOPO_SUBSYS "topo"
#define SWY_TOPO_FILE_MAX_TOKENS 5
/* A pair line for every pair of 1,000 ranks fits; /dev/zero does not. */
#define SWY_TOPO_FILE_MAX_BYTES (64u << 20)
#define SWY_TOPO_FILE_MAX_LINE 1024

typedef struct {
    int link_class;   /* >= 0: a class line; -1: a pair line */
    int rank_a, rank_b;
    double bandwidth; /* bytes/s */
    double latency;   /* s */
} topo_file_entry_t;

static int topo_parse_double(const char *text, double *value_p)
{
    char *end;
    double value;

    errno = 0;
    value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(value))
        return -1;
    *value_p = value;
    return 0;
}

static int topo_parse_rank(const char *text, int nranks, int *rank_p)
{
    char *end;
    long value;

    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 0 ||
        value >= nranks)
        return -1;
    *rank_p = (int)value;
    return 0;
}

/* One line into *entry_p; returns 1 for an entry, 0 for a blank or comment
 * line, or an error status naming path and line. */
static int topo_file_parse_line(char *line, const char *path, int line_no,
                                int nranks, topo_file_entry_t *entry_p)
{
    char *tokens[SWY_TOPO_FILE_MAX_TOKENS];
    char *save = NULL;
    int ntokens = 0;
    topo_file_entry_t entry = {.link_class = -1};
    double gbps, usec;
    char *token;

    line[strcspn(line, "#\r\n")] = '\0';
    for (token = strtok_r(line, " \t", &save);
         token != NULL && ntokens < SWY_TOPO_FILE_MAX_TOKENS;
         token = strtok_r(NULL, " \t", &save))
        tokens[ntokens++] = token;
    if (ntokens == 0)
        return 0;

    if (ntokens == 3) {
        entry.link_class = swy_topo_link_class_parse(tokens[0]);
        if (entry.link_class < 0) {
            return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                               "%s:%d: unknown link class '%s' (expected "
                               "self, same_numa, same_node or cross_node)",
                               path, line_no, tokens[0]);
        }
    } else if (ntokens == 4) {
        if (topo_parse_rank(tokens[0], nranks, &entry.rank_a) != 0 ||
            topo_parse_rank(tokens[1], nranks, &entry.rank_b) != 0) {
            return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                               "%s:%d: ranks '%s %s' are not both integers "
                               "in [0, %d)",
                               path, line_no, tokens[0], tokens[1], nranks);
        }
    } else {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "%s:%d: expected \"CLASS GBps usec\" or \"i j "
                           "GBps usec\", found %s%d fields",
                           path, line_no,
                           ntokens >= SWY_TOPO_FILE_MAX_TOKENS ? "at least "
                                                               : "",
                           ntokens);
    }

    if (topo_parse_double(tokens[ntokens - 2], &gbps) != 0 || gbps <= 0.0) {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "%s:%d: bandwidth '%s' is not a positive number "
                           "of GB/s",
                           path, line_no, tokens[ntokens - 2]);
    }
    if (topo_parse_double(tokens[ntokens - 1], &usec) != 0 || usec < 0.0) {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "%s:%d: latency '%s' is not a non-negative "
                           "number of microseconds",
                           path, line_no, tokens[ntokens - 1]);
    }
    entry.bandwidth = gbps * 1e9;
    entry.latency = usec * 1e-6;
    *entry_p = entry;
    return 1;
}

static swy_status_t topo_file_read(const char *path, int nranks,
                                   topo_file_entry_t **entries_p,
                                   size_t *nentries_p)
{
    char *text = NULL;
    char *cursor, *line;
    topo_file_entry_t *entries = NULL;
    size_t nentries = 0, capacity = 0;
    int line_no = 0;
    swy_status_t status = SWY_OK;

    SWY_CHECK(swy_file_read_text(path, "topology file", SWY_TOPO_SUBSYS,
                                 SWY_TOPO_FILE_MAX_BYTES, &text, NULL));
    cursor = text;
    while ((line = swy_file_next_line(&cursor)) != NULL) {
        topo_file_entry_t entry;
        int parsed;

        line_no++;
        if (strlen(line) > SWY_TOPO_FILE_MAX_LINE) {
            status = swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                                 "%s:%d: line of %zu bytes, over the "
                                 "%d-byte limit",
                                 path, line_no, strlen(line),
                                 SWY_TOPO_FILE_MAX_LINE);
            goto err_free;
        }
        parsed = topo_file_parse_line(line, path, line_no, nranks, &entry);
        if (parsed < 0) {
            status = (swy_status_t)parsed;
            goto err_free;
        }
        if (parsed == 0)
            continue;
        if (nentries == capacity) {
            size_t new_capacity = capacity != 0 ? 2 * capacity : 16;
            topo_file_entry_t *grown =
                swy_realloc_array(entries, new_capacity, sizeof(*entries));

            if (grown == NULL) {
                status = swy_err_set(SWY_ERR_NO_MEMORY, SWY_TOPO_SUBSYS,
                                     "%s:%d: out of memory", path, line_no);
                goto err_free;
            }
            entries = grown;
            capacity = new_capacity;
        }
        entries[nentries++] = entry;
    }
    swy_free(text);
    *entries_p = entries;
    *nentries_p = nentries;
    return SWY_OK;

err_free:
    swy_free(entries);
    swy_free(text);
    return status;
}

swy_status_t swy_topo_load_file(swy_topo_t *topo, const char *path)
{
    topo_file_entry_t *entries = NULL;
    size_t nentries = 0;
    int nranks = swy_topo_nranks(topo);

    if (topo == NULL || path == NULL) {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "load_file: %s is NULL",
                           topo == NULL ? "topo" : "path");
    }
    SWY_CHECK(topo_file_read(path, nranks, &entries, &nentries));

    for (size_t i = 0; i < nentries; i++) {
        if (entries[i].link_class < 0)
            continue;
        for (int a = 0; a < nranks; a++) {
            for (int b = 0; b < nranks; b++) {
                if ((int)swy_topo_link_class(topo, a, b) ==
                    entries[i].link_class)
                    swy_topo_set_link(topo, a, b, entries[i].bandwidth,
                                      entries[i].latency);
            }
        }
    }
    for (size_t i = 0; i < nentries; i++) {
        if (entries[i].link_class >= 0)
            continue;
        swy_topo_set_link(topo, entries[i].rank_a, entries[i].rank_b,
                          entries[i].bandwidth, entries[i].latency);
        swy_topo_set_link(topo, entries[i].rank_b, entries[i].rank_a,
                          entries[i].bandwidth, entries[i].latency);
    }
    swy_info(SWY_TOPO_SUBSYS, "applied %zu link override(s) from %s",
             nentries, path);
    swy_free(entries);
    return SWY_OK;
}
