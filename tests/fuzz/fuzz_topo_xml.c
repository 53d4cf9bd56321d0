/* libFuzzer harness: a topology XML (SWY_TOPO_XML) read through the
 * bounded reader and hwloc's XML import. The input is the file's content,
 * in a memfd. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "topo/topo.h"
#include "util/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    int fd = memfd_create("swy-fuzz-xml", 0);
    if (fd < 0)
        abort();
    if (size > 0 && write(fd, data, size) != (ssize_t)size)
        abort();
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    swy_topo_local_t local;
    if (swy_topo_discover_from(path, NULL, &local) == SWY_OK &&
        (local.n_pus < 1 || local.n_cores < 0))
        abort();
    close(fd);
    return 0;
}
