/* libFuzzer harness: a topology XML (SWY_TOPO_XML) read through the
 * bounded reader, the XML check (lib/topo/xml_check.c) and hwloc's XML
 * import. The input is the file's content, in a memfd. A topology without
 * PUs, or an error other than SWY_ERR_INVALID_ARG naming the file, is a
 * finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <hwloc.h>

#include "topo/topo.h"
#include "util/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static hwloc_topology_t keep_plugins;
    if (keep_plugins == NULL) {
        setenv("SWY_LOG_LEVEL", "error", 1); /* one warning per input */
        /* hwloc loads its plugins (libxml2, OpenCL, ...) with the first
         * live topology and unloads them with the last: one kept for the
         * whole run spares a dlopen of each per input (5x the speed). */
        if (hwloc_topology_init(&keep_plugins) != 0)
            abort();
    }
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
    swy_status_t status = swy_topo_discover_from(path, NULL, &local);
    if (status == SWY_OK && (local.n_pus < 1 || local.n_cores < 0))
        abort();
    if (status != SWY_OK && (status != SWY_ERR_INVALID_ARG ||
                             strstr(swy_err_last(), path) == NULL))
        abort();
    close(fd);
    return 0;
}
