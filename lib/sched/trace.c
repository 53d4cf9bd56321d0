#include "sched/trace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util/alloc.h"
#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"

#define TRACE_MAX_EVENTS (1u << 20) /* ~112 MiB: beyond, events are counted */

typedef struct {
    uint64_t start_ns, end_ns;
    size_t bytes;
    int tid, priority, peer;
    uint32_t seq;
    unsigned hints;
    char name[64];
    const char *cat;
} trace_event_t;

struct swy_trace {
    char path[1024];
    int rank, nranks;
    int64_t wall_minus_mono_ns; /* to put monotonic times on the wall clock */
    trace_event_t *events;
    size_t count, capacity, dropped;
};

swy_trace_t *swy_trace_create(int rank, int nranks)
{
    const char *pattern = swy_config_get("SWY_TRACE");
    if (pattern == NULL || pattern[0] == '\0')
        return NULL;
    swy_trace_t *t = swy_calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    size_t out = 0;
    for (const char *p = pattern; *p && out + 16 < sizeof(t->path); p++) {
        if (p[0] == '%' && p[1] == 'r') {
            out += (size_t)snprintf(t->path + out, sizeof(t->path) - out,
                                    "%d", rank);
            p++;
        } else {
            t->path[out++] = *p;
        }
    }
    if (strstr(pattern, "%r") == NULL && nranks > 1) /* one file per rank */
        snprintf(t->path + out, sizeof(t->path) - out, ".%d", rank);
    t->rank = rank;
    t->nranks = nranks;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    t->wall_minus_mono_ns = (int64_t)wall.tv_sec * 1000000000 +
                            wall.tv_nsec - (int64_t)swy_time_ns();
    return t;
}

void swy_trace_event(swy_trace_t *t, int tid, const char *name,
                     const char *cat, uint64_t start_ns, uint64_t end_ns,
                     int priority, size_t bytes, int peer, uint32_t seq,
                     unsigned hints)
{
    if (t == NULL)
        return;
    if (t->count == t->capacity) {
        if (t->capacity >= TRACE_MAX_EVENTS) {
            t->dropped++;
            return;
        }
        size_t cap = t->capacity ? t->capacity * 2 : 4096;
        trace_event_t *grown = swy_realloc_array(t->events, cap,
                                                 sizeof(*grown));
        if (grown == NULL) {
            t->dropped++;
            return;
        }
        t->events = grown;
        t->capacity = cap;
    }
    trace_event_t *e = &t->events[t->count++];
    *e = (trace_event_t){start_ns, end_ns, bytes, tid, priority, peer, seq,
                         hints, "", cat};
    snprintf(e->name, sizeof(e->name), "%s", name);
}

static void json_string(FILE *f, const char *text)
{
    fputc('"', f);
    for (; *text; text++) {
        if (*text == '"' || *text == '\\')
            fputc('\\', f);
        if ((unsigned char)*text >= 0x20)
            fputc(*text, f);
    }
    fputc('"', f);
}

void swy_trace_finish(swy_trace_t *t)
{
    if (t == NULL)
        return;
    FILE *f = fopen(t->path, "w");
    if (f == NULL) {
        swy_warn("sched", "SWY_TRACE: cannot write %s: %s", t->path,
                 strerror(errno));
    } else {
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":%d,"
                   "\"nranks\":%d,\"dropped_events\":%zu},\"traceEvents\":[\n",
                t->rank, t->nranks, t->dropped);
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                   "\"args\":{\"name\":\"rank %d\"}},\n", t->rank, t->rank);
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
                   "\"tid\":0,\"args\":{\"name\":\"ops\"}}", t->rank);
        for (int p = 0; p < t->nranks; p++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
                       "\"tid\":%d,\"args\":{\"name\":\"send to %d\"}},\n"
                       "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,"
                       "\"tid\":%d,\"args\":{\"name\":\"recv from %d\"}}",
                    t->rank, 1 + p, p, t->rank, 100000 + p, p);
        for (size_t i = 0; i < t->count; i++) {
            const trace_event_t *e = &t->events[i];
            double ts = (double)((int64_t)e->start_ns + t->wall_minus_mono_ns) /
                        1e3;
            double dur = (double)(e->end_ns - e->start_ns) / 1e3;
            fprintf(f, ",\n{\"name\":");
            json_string(f, e->name);
            fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                       "\"pid\":%d,\"tid\":%d,\"args\":{\"priority\":%d,"
                       "\"bytes\":%zu,\"peer\":%d,\"op\":%u,\"hints\":%u}}",
                    e->cat, ts, dur, t->rank, e->tid, e->priority, e->bytes,
                    e->peer, e->seq, e->hints);
        }
        fprintf(f, "\n]}\n");
        fclose(f);
        swy_info("sched", "trace of %zu events written to %s", t->count,
                 t->path);
    }
    swy_free(t->events);
    swy_free(t);
}
