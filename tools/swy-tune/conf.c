/* The tuned settings as a file SWY_CONFIG loads (lib/util/config.c:
 * "NAME=value" lines, '#' comments, lines read 1023 bytes at a time). */
#include "tune.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* Comment lines stay well under the loader's 1024-byte line buffer: a
 * longer one would be read in pieces and the rest taken for a setting. */
enum { CONF_COMMENT_WIDTH = 78, CONF_WORD_MAX = 900 };

/* Writes @p text as '#' lines no wider than CONF_COMMENT_WIDTH where the
 * words allow; line breaks in the text become spaces. */
static void comment_wrap(FILE *f, const char *first, const char *text)
{
    size_t column = (size_t)fprintf(f, "# %s", first);
    const char *p = text;

    while (*p != '\0') {
        size_t word = 0;

        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
            p++;
        while (p[word] != '\0' && p[word] != ' ' && p[word] != '\n' &&
               p[word] != '\r' && p[word] != '\t')
            word++;
        if (word == 0)
            break;
        if (column + 1 + word > CONF_COMMENT_WIDTH && column > 4) {
            fprintf(f, "\n#  ");
            column = 3;
        }
        if (word > CONF_WORD_MAX)
            fprintf(f, " %.*s...", CONF_WORD_MAX, p);
        else
            fprintf(f, " %.*s", (int)word, p);
        column += 1 + word;
        p += word;
    }
    fputc('\n', f);
}

static void figure(char *buf, size_t len, const char *name, double value,
                   const char *unit)
{
    if (isfinite(value))
        snprintf(buf, len, "%s %.2f%s", name, value, unit);
    else
        snprintf(buf, len, "%s -", name);
}

int swyt_conf_write(const char *path, const swyt_candidate_t *winner,
                    const char *command, const char *search,
                    swyt_objective_t objective)
{
    FILE *f = fopen(path, "w");
    char date[64] = "unknown", figures[512], b[6][64];
    char part[32], credit[32];
    time_t now = time(NULL);
    struct tm tm_utc;

    if (f == NULL)
        return -1;
    if (gmtime_r(&now, &tm_utc) != NULL)
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm_utc);
    swyt_size_format(winner->partition_bytes, part, sizeof(part));
    if (winner->credit_bytes == 0)
        snprintf(credit, sizeof(credit), "auto");
    else
        swyt_size_format(winner->credit_bytes, credit, sizeof(credit));
    figure(b[0], sizeof(b[0]), "a2a alone", winner->a2a_alone_ms, " ms,");
    figure(b[1], sizeof(b[1]), "loaded", winner->a2a_loaded_ms, " ms,");
    figure(b[2], sizeof(b[2]), "p95", winner->a2a_loaded_p95_ms, " ms,");
    figure(b[3], sizeof(b[3]), "slowdown", winner->slowdown, "x;");
    figure(b[4], sizeof(b[4]), "allreduce", winner->allreduce_MBps,
           " MB/s");
    figure(b[5], sizeof(b[5]), "(alone", winner->allreduce_alone_MBps,
           " MB/s,");
    snprintf(figures, sizeof(figures),
             "%s %s %s %s %s %s floor %.2f MB/s); %d ranks on %d nodes; "
             "all-to-all %llu bytes, allreduce backlog %llu bytes",
             b[0], b[1], b[2], b[3], b[4], b[5],
             SWYT_ALLREDUCE_FLOOR * winner->reference_MBps, winner->ranks,
             winner->nodes, (unsigned long long)winner->a2a_bytes,
             (unsigned long long)winner->allreduce_bytes);

    fprintf(f, "# Switchyard scheduling settings chosen by swy-tune\n");
    fprintf(f, "# date: %s\n", date);
    comment_wrap(f, "command:", command);
    comment_wrap(f, "search:", search);
    comment_wrap(f, "objective:", swyt_objective_describe(objective));
    comment_wrap(f, "chosen:", "");
    fprintf(f, "#   policy %s, partition %s, credit %s\n", winner->policy,
            part, credit);
    comment_wrap(f, "measured:", figures);
    fprintf(f, "# Use: SWY_CONFIG=<this file>; the environment overrides "
               "it.\n");
    fprintf(f, "SWY_POLICY=%s\n", winner->policy);
    fprintf(f, "SWY_PARTITION_BYTES=%llu\n",
            (unsigned long long)winner->partition_bytes);
    if (winner->credit_bytes == 0)
        fprintf(f, "SWY_CREDIT_BYTES=auto\n");
    else
        fprintf(f, "SWY_CREDIT_BYTES=%llu\n",
                (unsigned long long)winner->credit_bytes);
    return fclose(f) == 0 ? 0 : -1;
}
