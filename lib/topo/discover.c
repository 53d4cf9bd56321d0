/* lib/topo/discover.c: what one rank learns of its host through hwloc
 * (packages, NUMA nodes, cores, PUs, GPUs, NICs and their locality, the
 * rank's binding) and the host identity (hostname, boot id).
 *
 * The only file of Switchyard that includes hwloc headers. */
#include "topo/topo.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <hwloc.h>

#include "util/alloc.h"
#include "util/config.h"
#include "util/file.h"
#include "util/log.h"
#include "util/status.h"

#define SWY_TOPO_SUBSYS "topo"
#define SWY_TOPO_BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
/* hwloc XML of a large host is a few MiB. */
#define SWY_TOPO_XML_MAX_BYTES (64u << 20)

#define SWY_TOPO_PCI_CLASS_VGA 0x0300
#define SWY_TOPO_PCI_CLASS_3D 0x0302
#define SWY_TOPO_PCI_VENDOR_NVIDIA 0x10de

static void topo_copy_str(char *dst, size_t dst_len, const char *src)
{
    snprintf(dst, dst_len, "%s", src != NULL ? src : "");
}

/* hwloc keeps its ABI within one major API version (hwloc.h: "the major
 * number changes when the ABI breaks"); a library of another major than the
 * headers we were compiled with would misread every structure. */
static swy_status_t topo_check_api_version(void)
{
    unsigned runtime = hwloc_get_api_version();

    if ((runtime >> 16) != ((unsigned)HWLOC_API_VERSION >> 16)) {
        return swy_err_set(SWY_ERR_UNSUPPORTED, SWY_TOPO_SUBSYS,
                           "hwloc API version mismatch: built against "
                           "0x%x, running with 0x%x (major versions differ)",
                           (unsigned)HWLOC_API_VERSION, runtime);
    }
    return SWY_OK;
}

/* Host identity from the running host even when the topology comes from
 * XML or a synthetic string: an emulated node (own UTS namespace) has its
 * own hostname, and the boot id tells apart two hosts that happen to share
 * a hostname. */
static swy_status_t topo_read_host_identity(swy_topo_local_t *local)
{
    char hostname[sizeof(local->hostname)];
    char boot_id[64] = "";
    FILE *boot_file;

    if (gethostname(hostname, sizeof(hostname)) != 0) {
        return swy_err_set(SWY_ERR_SYSTEM, SWY_TOPO_SUBSYS,
                           "gethostname failed: %s", strerror(errno));
    }
    hostname[sizeof(hostname) - 1] = '\0';

    boot_file = fopen(SWY_TOPO_BOOT_ID_PATH, "r");
    if (boot_file == NULL) {
        return swy_err_set(SWY_ERR_SYSTEM, SWY_TOPO_SUBSYS,
                           "cannot open %s: %s", SWY_TOPO_BOOT_ID_PATH,
                           strerror(errno));
    }
    if (fgets(boot_id, sizeof(boot_id), boot_file) == NULL) {
        fclose(boot_file);
        return swy_err_set(SWY_ERR_SYSTEM, SWY_TOPO_SUBSYS,
                           "cannot read %s", SWY_TOPO_BOOT_ID_PATH);
    }
    fclose(boot_file);
    boot_id[strcspn(boot_id, " \t\r\n")] = '\0';
    if (boot_id[0] == '\0') {
        return swy_err_set(SWY_ERR_SYSTEM, SWY_TOPO_SUBSYS, "%s is empty",
                           SWY_TOPO_BOOT_ID_PATH);
    }

    topo_copy_str(local->hostname, sizeof(local->hostname), hostname);
    snprintf(local->host_id, sizeof(local->host_id), "%s:%s", hostname,
             boot_id);
    return SWY_OK;
}

static int topo_count_type(hwloc_topology_t topology, hwloc_obj_type_t type)
{
    int count = hwloc_get_nbobjs_by_type(topology, type);

    /* -1 means "several depths"; none of the types we count can do that in
     * hwloc 2, but a negative count must never reach the caller. */
    return count < 0 ? 0 : count;
}

/* NUMA locality of an I/O object. In hwloc 2 NUMA nodes are memory
 * children, never ancestors of I/O objects, so take the first normal
 * ancestor and its nodeset: exactly one node means local to that node;
 * several (attached to the Machine) or none means unknown. */
static int topo_io_numa(hwloc_topology_t topology, hwloc_obj_t io_obj)
{
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topology, io_obj);
    hwloc_obj_t numa_node;

    if (ancestor == NULL || ancestor->nodeset == NULL ||
        hwloc_bitmap_weight(ancestor->nodeset) != 1) {
        return -1;
    }
    numa_node = hwloc_get_numanode_obj_by_os_index(
        topology, (unsigned)hwloc_bitmap_first(ancestor->nodeset));
    return numa_node != NULL ? (int)numa_node->logical_index : -1;
}

static void topo_pci_bus_id(hwloc_obj_t pci, char *buf, size_t len)
{
    if (pci == NULL || pci->type != HWLOC_OBJ_PCI_DEVICE) {
        topo_copy_str(buf, len, "");
        return;
    }
    snprintf(buf, len, "%04x:%02x:%02x.%01x",
             (unsigned)pci->attr->pcidev.domain,
             (unsigned)pci->attr->pcidev.bus,
             (unsigned)pci->attr->pcidev.dev,
             (unsigned)pci->attr->pcidev.func);
}

static hwloc_obj_t topo_pci_parent(hwloc_obj_t obj)
{
    hwloc_obj_t parent = obj->parent;

    while (parent != NULL && parent->type != HWLOC_OBJ_PCI_DEVICE &&
           parent->type != HWLOC_OBJ_BRIDGE)
        parent = parent->parent;
    if (parent != NULL && parent->type == HWLOC_OBJ_PCI_DEVICE)
        return parent;
    return NULL;
}

static int topo_gpu_known(const swy_topo_local_t *local, const char *bus_id)
{
    for (int i = 0; i < local->n_gpus; i++) {
        if (bus_id[0] != '\0' && strcmp(local->gpus[i].bus_id, bus_id) == 0)
            return 1;
    }
    return 0;
}

static void topo_add_gpu(hwloc_topology_t topology, swy_topo_local_t *local,
                         hwloc_obj_t obj, const char *bus_id)
{
    swy_topo_pci_dev_t *gpu;

    if (local->n_gpus >= SWY_TOPO_MAX_GPUS) {
        swy_warn(SWY_TOPO_SUBSYS, "more than %d GPUs; ignoring %s",
                 SWY_TOPO_MAX_GPUS, bus_id[0] != '\0' ? bus_id : obj->name);
        return;
    }
    gpu = &local->gpus[local->n_gpus++];
    topo_copy_str(gpu->bus_id, sizeof(gpu->bus_id), bus_id);
    gpu->numa = topo_io_numa(topology, obj);
}

static int topo_pci_is_gpu(hwloc_obj_t pci)
{
    unsigned class_id = pci->attr->pcidev.class_id;

    return class_id == SWY_TOPO_PCI_CLASS_3D ||
           (class_id == SWY_TOPO_PCI_CLASS_VGA &&
            pci->attr->pcidev.vendor_id == SWY_TOPO_PCI_VENDOR_NVIDIA);
}

static int topo_osdev_is_gpu(hwloc_obj_t osdev)
{
    if (osdev->subtype == NULL)
        return 0;
    return strcmp(osdev->subtype, "CUDA") == 0 ||
           strcmp(osdev->subtype, "NVML") == 0;
}

/* GPUs: PCI devices first (what Debian's hwloc sees, it has no CUDA/NVML
 * plugins), then CUDA/NVML OS devices not already found through their PCI
 * device (a build of hwloc with those plugins, or an XML from one). */
static void topo_find_gpus(hwloc_topology_t topology, swy_topo_local_t *local)
{
    hwloc_obj_t obj = NULL;
    char bus_id[sizeof(local->gpus[0].bus_id)];

    while ((obj = hwloc_get_next_pcidev(topology, obj)) != NULL) {
        if (!topo_pci_is_gpu(obj))
            continue;
        topo_pci_bus_id(obj, bus_id, sizeof(bus_id));
        topo_add_gpu(topology, local, obj, bus_id);
    }
    obj = NULL;
    while ((obj = hwloc_get_next_osdev(topology, obj)) != NULL) {
        if (!topo_osdev_is_gpu(obj))
            continue;
        topo_pci_bus_id(topo_pci_parent(obj), bus_id, sizeof(bus_id));
        if (bus_id[0] != '\0' && topo_gpu_known(local, bus_id))
            continue;
        /* Without a PCI parent two OS devices (cuda0, nvml0) may be the
         * same GPU; we cannot tell, so count CUDA ones only. */
        if (bus_id[0] == '\0' && strcmp(obj->subtype, "CUDA") != 0)
            continue;
        topo_add_gpu(topology, local, obj, bus_id);
    }
}

/* NICs: every OpenFabrics (mlx5_0) or network (ib0, eth0) OS device; one
 * physical adapter may show both, and each name is what a transport would
 * be told to use. */
static void topo_find_nics(hwloc_topology_t topology, swy_topo_local_t *local)
{
    hwloc_obj_t obj = NULL;

    while ((obj = hwloc_get_next_osdev(topology, obj)) != NULL) {
        hwloc_obj_osdev_type_t osdev_type = obj->attr->osdev.type;
        swy_topo_nic_t *nic;

        if (osdev_type != HWLOC_OBJ_OSDEV_OPENFABRICS &&
            osdev_type != HWLOC_OBJ_OSDEV_NETWORK)
            continue;
        if (local->n_nics >= SWY_TOPO_MAX_NICS) {
            /* Hosts with many virtual interfaces are common; not worth
             * a warning on every rank. */
            swy_info(SWY_TOPO_SUBSYS, "more than %d NICs; ignoring %s",
                     SWY_TOPO_MAX_NICS, obj->name);
            continue;
        }
        nic = &local->nics[local->n_nics++];
        topo_copy_str(nic->name, sizeof(nic->name), obj->name);
        topo_pci_bus_id(topo_pci_parent(obj), nic->bus_id,
                        sizeof(nic->bus_id));
        nic->numa = topo_io_numa(topology, obj);
    }
}

/* Logical index of the single object of this type whose cpuset meets the
 * binding, or -1 when it meets none or several. */
static int topo_binding_owner(hwloc_topology_t topology,
                              hwloc_const_cpuset_t binding,
                              hwloc_obj_type_t type)
{
    hwloc_obj_t obj = NULL;
    int owner = -1;

    while ((obj = hwloc_get_next_obj_by_type(topology, type, obj)) != NULL) {
        if (obj->cpuset == NULL ||
            !hwloc_bitmap_intersects(obj->cpuset, binding))
            continue;
        if (owner >= 0)
            return -1;
        owner = (int)obj->logical_index;
    }
    return owner;
}

/* The process's CPU binding as OS PU indexes. From the real host hwloc reads
 * it; a topology loaded from XML or a synthetic string is not this system,
 * hwloc cannot bind or query through it, so ask the kernel directly. */
static int topo_read_binding(hwloc_topology_t topology, int loaded,
                             hwloc_cpuset_t binding)
{
    cpu_set_t affinity;

    if (!loaded)
        return hwloc_get_cpubind(topology, binding, HWLOC_CPUBIND_PROCESS);

    CPU_ZERO(&affinity);
    if (sched_getaffinity(0, sizeof(affinity), &affinity) != 0)
        return -1;
    hwloc_bitmap_zero(binding);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &affinity))
            hwloc_bitmap_set(binding, (unsigned)cpu);
    }
    return 0;
}

/* Binding → NUMA node and package. For a loaded (XML/synthetic) topology
 * the real binding is used only when every bound PU exists in the loaded
 * topology (the description is taken to be of this host's numbering);
 * otherwise numa and package stay -1: the real binding says nothing about
 * a machine that is not this one. */
static void topo_find_binding(hwloc_topology_t topology, int loaded,
                              swy_topo_local_t *local)
{
    hwloc_cpuset_t binding = hwloc_bitmap_alloc();

    local->numa = -1;
    local->package = -1;
    if (binding == NULL) {
        swy_warn(SWY_TOPO_SUBSYS, "cannot allocate a cpuset; binding "
                 "unknown");
        return;
    }
    if (topo_read_binding(topology, loaded, binding) != 0) {
        swy_debug(SWY_TOPO_SUBSYS, "cannot read the CPU binding: %s",
                  strerror(errno));
        goto out;
    }
    if (hwloc_bitmap_iszero(binding))
        goto out;
    if (loaded && !hwloc_bitmap_isincluded(
                      binding, hwloc_topology_get_complete_cpuset(topology))) {
        swy_debug(SWY_TOPO_SUBSYS, "binding lies outside the loaded "
                  "topology; numa and package unknown");
        goto out;
    }
    local->numa = topo_binding_owner(topology, binding, HWLOC_OBJ_NUMANODE);
    local->package = topo_binding_owner(topology, binding,
                                        HWLOC_OBJ_PACKAGE);
out:
    hwloc_bitmap_free(binding);
}

static swy_status_t topo_load(const char *xml_path, const char *synthetic,
                              hwloc_topology_t *topology_p)
{
    hwloc_topology_t topology;
    swy_status_t status;
    char *xml_text = NULL; /* parsed by hwloc_topology_load */
    size_t xml_len = 0;

    if (hwloc_topology_init(&topology) != 0) {
        return swy_err_set(SWY_ERR_SYSTEM, SWY_TOPO_SUBSYS,
                           "hwloc_topology_init failed: %s", strerror(errno));
    }
    /* hwloc 2 drops I/O objects by default: without this there would be
     * no PCI devices, hence no GPUs or NICs. */
    if (hwloc_topology_set_io_types_filter(topology,
                                           HWLOC_TYPE_FILTER_KEEP_ALL) != 0) {
        status = swy_err_set(SWY_ERR_SYSTEM, SWY_TOPO_SUBSYS,
                             "hwloc_topology_set_io_types_filter failed: %s",
                             strerror(errno));
        goto err_destroy;
    }
    if (xml_path != NULL) {
        /* Read here, bounded, and handed to hwloc from memory: hwloc
         * would read a FIFO or /dev/zero without end. */
        status = swy_file_read_text(xml_path, "topology XML",
                                    SWY_TOPO_SUBSYS, SWY_TOPO_XML_MAX_BYTES,
                                    &xml_text, &xml_len);
        if (status != SWY_OK)
            goto err_destroy;
        /* hwloc 2.9's import crashes on some damaged files
         * (xml_check.c): what it would trust is checked first. */
        status = swy_topo_xml_check(xml_path, xml_text, xml_len);
        if (status != SWY_OK)
            goto err_destroy;
        if (hwloc_topology_set_xmlbuffer(topology, xml_text,
                                         (int)xml_len + 1) != 0) {
            status = swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                                 "hwloc cannot parse topology XML '%s'",
                                 xml_path);
            goto err_destroy;
        }
    } else if (synthetic != NULL) {
        if (hwloc_topology_set_synthetic(topology, synthetic) != 0) {
            status = swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                                 "invalid hwloc synthetic topology '%s'",
                                 synthetic);
            goto err_destroy;
        }
    }
    if (hwloc_topology_load(topology) != 0) {
        /* With XML the content is only parsed here. */
        status = swy_err_set(
            xml_path != NULL || synthetic != NULL ? SWY_ERR_INVALID_ARG
                                                  : SWY_ERR_SYSTEM,
            SWY_TOPO_SUBSYS, "hwloc cannot load the topology from %s%s%s: %s",
            xml_path != NULL ? "XML '" : synthetic != NULL ? "synthetic '" : "",
            xml_path != NULL ? xml_path : synthetic != NULL ? synthetic
                                                            : "this host",
            xml_path != NULL || synthetic != NULL ? "'" : "",
            strerror(errno));
        goto err_destroy;
    }
    swy_free(xml_text);
    *topology_p = topology;
    return SWY_OK;

err_destroy:
    swy_free(xml_text);
    hwloc_topology_destroy(topology);
    return status;
}

swy_status_t swy_topo_discover_from(const char *xml_path,
                                    const char *synthetic,
                                    swy_topo_local_t *local)
{
    hwloc_topology_t topology = NULL;
    swy_topo_local_t result;
    int loaded = xml_path != NULL || synthetic != NULL;

    if (local == NULL || (xml_path != NULL && synthetic != NULL)) {
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "discover: %s",
                           local == NULL ? "local is NULL"
                                         : "both an XML path and a "
                                           "synthetic string given");
    }
    SWY_CHECK(topo_check_api_version());

    memset(&result, 0, sizeof(result));
    SWY_CHECK(topo_read_host_identity(&result));
    SWY_CHECK(topo_load(xml_path, synthetic, &topology));

    result.n_packages = topo_count_type(topology, HWLOC_OBJ_PACKAGE);
    result.n_numa = topo_count_type(topology, HWLOC_OBJ_NUMANODE);
    result.n_cores = topo_count_type(topology, HWLOC_OBJ_CORE);
    result.n_pus = topo_count_type(topology, HWLOC_OBJ_PU);
    if (loaded && result.n_pus < 1) {
        /* hwloc loads an XML whose objects have empty cpusets. */
        hwloc_topology_destroy(topology);
        return swy_err_set(SWY_ERR_INVALID_ARG, SWY_TOPO_SUBSYS,
                           "topology %s%s%s has no PU",
                           xml_path != NULL ? "XML '" : "synthetic '",
                           xml_path != NULL ? xml_path : synthetic, "'");
    }
    topo_find_binding(topology, loaded, &result);
    topo_find_gpus(topology, &result);
    topo_find_nics(topology, &result);
    topo_copy_str(result.source, sizeof(result.source),
                  xml_path != NULL ? "xml"
                                   : synthetic != NULL ? "synthetic" : "host");
    hwloc_topology_destroy(topology);

    swy_debug(SWY_TOPO_SUBSYS,
              "%s topology: %d packages, %d NUMA, %d cores, %d PUs, "
              "%d GPUs, %d NICs, bound to NUMA %d package %d",
              result.source, result.n_packages, result.n_numa,
              result.n_cores, result.n_pus, result.n_gpus, result.n_nics,
              result.numa, result.package);
    *local = result;
    return SWY_OK;
}

swy_status_t swy_topo_discover(swy_topo_local_t *local)
{
    const char *xml_path = swy_config_get("SWY_TOPO_XML");
    const char *synthetic = swy_config_get("SWY_TOPO_SYNTHETIC");

    if (xml_path != NULL && xml_path[0] == '\0')
        xml_path = NULL;
    if (synthetic != NULL && synthetic[0] == '\0')
        synthetic = NULL;
    /* XML wins over a synthetic string when both are set. */
    if (xml_path != NULL)
        synthetic = NULL;
    return swy_topo_discover_from(xml_path, synthetic, local);
}
