/* libFuzzer harness: the link override file (SWY_TOPO_FILE) on an
 * 8-rank, 2-host topology. The input is the file's content, in a memfd
 * (a regular file, as the reader demands). A file that loads must leave
 * every link with a positive, finite bandwidth. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "topo/topo.h"
#include "util/status.h"

static swy_topo_t *topo;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (topo == NULL) {
        swy_topo_local_t ranks[8];
        memset(ranks, 0, sizeof(ranks));
        for (int r = 0; r < 8; r++) {
            snprintf(ranks[r].hostname, sizeof(ranks[r].hostname), "host%d",
                     r / 4);
            snprintf(ranks[r].host_id, sizeof(ranks[r].host_id),
                     "host%d:0f0e0d0c-0000-4000-8000-00000000000%d", r / 4,
                     r / 4);
            ranks[r].n_packages = 2;
            ranks[r].n_numa = 2;
            ranks[r].n_cores = 8;
            ranks[r].n_pus = 16;
            ranks[r].numa = (r / 2) % 2;
            ranks[r].package = (r / 2) % 2;
            snprintf(ranks[r].source, sizeof(ranks[r].source), "synthetic");
        }
        if (swy_topo_build(ranks, 8, 0, &topo) != SWY_OK)
            abort();
    }
    int fd = memfd_create("swy-fuzz-topo", 0);
    if (fd < 0)
        abort();
    if (size > 0 && write(fd, data, size) != (ssize_t)size)
        abort();
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    if (swy_topo_load_file(topo, path) == SWY_OK) {
        for (int a = 0; a < 8; a++)
            for (int b = 0; b < 8; b++) {
                double bw = swy_topo_bandwidth(topo, a, b);
                if (!(bw > 0) || !isfinite(bw))
                    abort();
            }
    }
    close(fd);
    return 0;
}
