/* lib/topo/describe.c: a rank's local topology as text, for swy-info and
 * debug logs. */
#include "topo/topo.h"

#include <stdarg.h>
#include <stdio.h>

typedef struct {
    char *buf;
    size_t len;
    size_t used;
} topo_text_t;

/* Append, truncating silently when the buffer is full: a description cut
 * short is still useful, and the caller chose the size. */
static void topo_text_append(topo_text_t *text, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void topo_text_append(topo_text_t *text, const char *fmt, ...)
{
    va_list ap;
    int written;

    if (text->used + 1 >= text->len)
        return;
    va_start(ap, fmt);
    written = vsnprintf(text->buf + text->used, text->len - text->used, fmt,
                        ap);
    va_end(ap);
    if (written < 0)
        return;
    text->used += (size_t)written;
    if (text->used >= text->len)
        text->used = text->len - 1;
}

static void topo_text_locality(topo_text_t *text, int numa)
{
    if (numa >= 0)
        topo_text_append(text, "NUMA %d", numa);
    else
        topo_text_append(text, "NUMA unknown");
}

void swy_topo_describe_local(const swy_topo_local_t *local, char *buf,
                             size_t len)
{
    topo_text_t text = {.buf = buf, .len = len, .used = 0};

    if (buf == NULL || len == 0)
        return;
    buf[0] = '\0';
    if (local == NULL)
        return;

    topo_text_append(&text, "topology source: %.*s\n",
                     (int)sizeof(local->source), local->source);
    topo_text_append(&text, "host: %.*s (id %.*s)\n",
                     (int)sizeof(local->hostname), local->hostname,
                     (int)sizeof(local->host_id), local->host_id);
    topo_text_append(&text,
                     "packages: %d, NUMA nodes: %d, cores: %d, PUs: %d\n",
                     (int)local->n_packages, (int)local->n_numa,
                     (int)local->n_cores, (int)local->n_pus);
    topo_text_append(&text, "binding: ");
    if (local->package >= 0)
        topo_text_append(&text, "package %d, ", (int)local->package);
    else
        topo_text_append(&text, "package unknown, ");
    topo_text_locality(&text, local->numa);
    topo_text_append(&text, "\n");

    topo_text_append(&text, "GPUs: %d\n", (int)local->n_gpus);
    for (int i = 0; i < local->n_gpus && i < SWY_TOPO_MAX_GPUS; i++) {
        const swy_topo_pci_dev_t *gpu = &local->gpus[i];

        topo_text_append(&text, "  gpu %d: bus %.*s, ", i,
                         (int)sizeof(gpu->bus_id),
                         gpu->bus_id[0] != '\0' ? gpu->bus_id : "unknown");
        topo_text_locality(&text, gpu->numa);
        topo_text_append(&text, "\n");
    }
    topo_text_append(&text, "NICs: %d\n", (int)local->n_nics);
    for (int i = 0; i < local->n_nics && i < SWY_TOPO_MAX_NICS; i++) {
        const swy_topo_nic_t *nic = &local->nics[i];

        topo_text_append(&text, "  nic %d: %.*s, bus %.*s, ", i,
                         (int)sizeof(nic->name), nic->name,
                         (int)sizeof(nic->bus_id),
                         nic->bus_id[0] != '\0' ? nic->bus_id : "none");
        topo_text_locality(&text, nic->numa);
        topo_text_append(&text, "\n");
    }
}
