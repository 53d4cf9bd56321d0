/* Shared pieces of the Switchyard benchmarks; see common.h. */
#include "common.h"

#include "swyb_commit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int swyb_env_rank(void)
{
    static const char *const names[] = {"SWY_RANK", "RANK",
                                        "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                        "SLURM_PROCID"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        const char *value = getenv(names[i]);

        if (value != NULL && *value != '\0') {
            return atoi(value);
        }
    }
    return 0;
}

double swyb_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int double_compare(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return (x > y) - (x < y);
}

void swyb_stats_compute(double *samples, size_t n, swyb_stats_t *stats_p)
{
    swyb_stats_t stats;

    qsort(samples, n, sizeof(*samples), double_compare);
    stats.min = samples[0];
    stats.max = samples[n - 1];
    stats.median = (n % 2 == 1) ? samples[n / 2]
                                : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    stats.q1 = samples[(n - 1) / 4];
    stats.q3 = samples[3 * (n - 1) / 4];
    *stats_p = stats;
}

void swyb_size_format(size_t bytes, char *buf, size_t buf_len)
{
    static const char suffixes[] = {'G', 'M', 'K'};
    static const unsigned shifts[] = {30, 20, 10};

    for (size_t i = 0; i < sizeof(shifts) / sizeof(shifts[0]); ++i) {
        size_t unit = (size_t)1 << shifts[i];

        if (bytes >= unit && bytes % unit == 0) {
            snprintf(buf, buf_len, "%zu%c", bytes / unit, suffixes[i]);
            return;
        }
    }
    snprintf(buf, buf_len, "%zu", bytes);
}

/* The "model name" line of /proc/cpuinfo (x86); other architectures name
 * the CPU differently, so fall back to "unknown" rather than guess. */
static void cpu_model_read(char *buf, size_t buf_len)
{
    FILE *cpuinfo = fopen("/proc/cpuinfo", "r");
    char line[512];

    snprintf(buf, buf_len, "unknown");
    if (cpuinfo == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), cpuinfo) != NULL) {
        if (strncmp(line, "model name", 10) == 0) {
            char *value = strchr(line, ':');

            if (value != NULL) {
                value += 1 + strspn(value + 1, " \t");
                value[strcspn(value, "\n")] = '\0';
                snprintf(buf, buf_len, "%s", value);
            }
            break;
        }
    }
    fclose(cpuinfo);
}

static void env_setting_print(FILE *out, const char *name)
{
    const char *value = getenv(name);

    fprintf(out, " %s=%s", name, value != NULL ? value : "(default)");
}

void swyb_header_print(FILE *out, const char *bench, const char *impl,
                       int argc, char **argv, int nranks)
{
    char cpu_model[256];
    char host[256] = "unknown";
    char date[64] = "unknown";
    time_t now = time(NULL);
    struct tm tm_utc;

    cpu_model_read(cpu_model, sizeof(cpu_model));
    gethostname(host, sizeof(host) - 1);
    if (gmtime_r(&now, &tm_utc) != NULL) {
        strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm_utc);
    }

    fprintf(out, "# bench: %s  impl: %s\n", bench, impl);
    fprintf(out, "# command:");
    for (int i = 0; i < argc; ++i) {
        fprintf(out, " %s", argv[i]);
    }
    fprintf(out, "\n");
    fprintf(out, "# commit: %s  date: %s\n", SWYB_GIT_COMMIT, date);
    fprintf(out, "# machine: %s  nproc: %ld  cpu: %s\n", host,
            sysconf(_SC_NPROCESSORS_ONLN), cpu_model);
    fprintf(out, "# ranks: %d\n", nranks);
    fprintf(out, "# settings:");
    env_setting_print(out, "SWY_POLICY");
    env_setting_print(out, "SWY_PARTITION_BYTES");
    env_setting_print(out, "SWY_WINDOW_BYTES");
    env_setting_print(out, "SWY_CREDIT_BYTES");
    env_setting_print(out, "SWY_PROGRESS");
    env_setting_print(out, "UCX_TLS");
    fprintf(out, "\n");
    fprintf(out, "# time: per iteration, the slowest rank's; bandwidth in "
                 "GB/s (1e9 B/s) from the median time\n");
}

void swyb_coll_result_finish(swyb_coll_result_t *result)
{
    double n = result->ranks;
    double factor = 1.0;

    result->algbw_GBps = result->time_s.median > 0.0
                             ? (double)result->bytes / result->time_s.median
                                   / 1e9
                             : 0.0;
    if (strcmp(result->op, "alltoallv") == 0) {
        factor = (n - 1.0) / n;
    } else if (strcmp(result->op, "allreduce") == 0) {
        factor = 2.0 * (n - 1.0) / n;
    }
    result->busbw_GBps = result->algbw_GBps * factor;
}

void swyb_coll_table_header_print(FILE *out)
{
    fprintf(out, "%-10s %8s %6s %12s %12s %12s %9s %9s %6s\n", "op", "size",
            "iters", "median(us)", "min(us)", "max(us)", "algbw", "busbw",
            "check");
}

void swyb_coll_table_row_print(FILE *out, const swyb_coll_result_t *result)
{
    char size[32];

    swyb_size_format(result->bytes, size, sizeof(size));
    fprintf(out, "%-10s %8s %6d %12.1f %12.1f %12.1f %9.3f %9.3f %6s\n",
            result->op, size, result->iters, result->time_s.median * 1e6,
            result->time_s.min * 1e6, result->time_s.max * 1e6,
            result->algbw_GBps, result->busbw_GBps,
            result->correct ? "ok" : "WRONG");
}

void swyb_coll_json_print(FILE *out, const swyb_coll_result_t *result)
{
    fprintf(out,
            "{\"bench\":\"coll\",\"impl\":\"%s\",\"op\":\"%s\","
            "\"bytes\":%zu,\"ranks\":%d,\"iters\":%d,\"batch\":%d,"
            "\"time_us_median\":%.3f,\"time_us_min\":%.3f,"
            "\"time_us_max\":%.3f,\"algbw_GBps\":%.4f,"
            "\"busbw_GBps\":%.4f,\"mem\":\"%s\",\"check\":\"%s\"}\n",
            result->impl, result->op, result->bytes, result->ranks,
            result->iters, result->batch > 0 ? result->batch : 1,
            result->time_s.median * 1e6,
            result->time_s.min * 1e6, result->time_s.max * 1e6,
            result->algbw_GBps, result->busbw_GBps,
            result->mem != NULL ? result->mem : "malloc",
            result->correct ? "ok" : "WRONG");
}
