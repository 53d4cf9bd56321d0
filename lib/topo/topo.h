/* lib/topo: hwloc discovery, host identity, link classes, and the
 * bandwidth/latency matrix between the ranks of a communicator.
 * Only this module includes hwloc. */
#ifndef SWY_TOPO_TOPO_H
#define SWY_TOPO_TOPO_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/switchyard.h"
#include "switchyard/swy_common.h"

#define SWY_TOPO_MAX_GPUS 16
#define SWY_TOPO_MAX_NICS 16

typedef struct {
    char bus_id[16]; /* PCI "0000:3b:00.0" */
    int numa;        /* NUMA node logical index, -1 unknown */
} swy_topo_pci_dev_t;

typedef struct {
    char name[32];   /* OS device name, e.g. "mlx5_0" or "eth0" */
    char bus_id[16];
    int numa;
} swy_topo_nic_t;

/* What one rank knows of itself; plain data, fixed size, so ranks can
 * allgather it as bytes. */
typedef struct {
    char hostname[64];
    char host_id[128];    /* hostname + boot id: distinguishes hosts and
                             emulated nodes (own UTS namespace) */
    int32_t n_packages, n_numa, n_cores, n_pus;
    int32_t numa;         /* NUMA node this rank is bound to, -1 if not
                             bound within one node */
    int32_t package;      /* package likewise */
    int32_t n_gpus, n_nics;
    swy_topo_pci_dev_t gpus[SWY_TOPO_MAX_GPUS];
    swy_topo_nic_t nics[SWY_TOPO_MAX_NICS];
    char source[32];      /* "host", "xml", "synthetic" */
} swy_topo_local_t;

typedef struct swy_topo swy_topo_t;

/* Discover this rank's host: SWY_TOPO_XML, else SWY_TOPO_SYNTHETIC, else
 * the real machine (I/O devices kept: HWLOC_TYPE_FILTER_KEEP_ALL). The
 * host identity always comes from the running host (hostname, boot id).
 * numa/package: from the process binding on the real host; with XML or a
 * synthetic topology the real binding (sched_getaffinity) is used only when
 * all its PUs exist in the loaded topology, else they are -1. GPUs: PCI
 * class 0x0302, or 0x0300 from NVIDIA, or CUDA/NVML OS devices (one entry
 * per PCI device). NICs: one entry per OpenFabrics or network OS device, so
 * an InfiniBand adapter shows twice (mlx5_0 and ib0).
 * Errors: SWY_ERR_INVALID_ARG (bad XML path/content or synthetic string,
 * message names it), SWY_ERR_SYSTEM. */
swy_status_t swy_topo_discover(swy_topo_local_t *local);

/* As above from an explicit source (tests): exactly one of xml_path,
 * synthetic non-NULL. */
swy_status_t swy_topo_discover_from(const char *xml_path,
                                    const char *synthetic,
                                    swy_topo_local_t *local);

/* Check a topology XML's text (len bytes, NUL-terminated) before hwloc
 * imports it (xml_check.c): well-formed, within limits, and nothing that
 * crashes hwloc 2.9's import. SWY_ERR_INVALID_ARG naming path, the line
 * and the reason. */
swy_status_t swy_topo_xml_check(const char *path, const char *text,
                                size_t len);

/* Build the comm-wide view from every rank's local description (index =
 * rank): link classes and the bandwidth (bytes/s) / latency (s) matrix from
 * per-class defaults, overridden by SWY_TOPO_FILE. */
swy_status_t swy_topo_build(const swy_topo_local_t *all, int nranks,
                            int myrank, swy_topo_t **topo_p);
void swy_topo_destroy(swy_topo_t *topo);
/* The topology of some of the ranks (members[i]: rank i of the subset,
 * a rank of topo), links as topo has them (measured or loaded ones
 * included); myrank is this process's index in members. */
swy_status_t swy_topo_subset(const swy_topo_t *topo, const int *members,
                             int nmembers, int myrank, swy_topo_t **sub_p);

/* Apply an override file (format: see SWY_TOPO_FILE help). Errors name
 * the file and line. */
swy_status_t swy_topo_load_file(swy_topo_t *topo, const char *path);

swy_link_class_t swy_topo_link_class(const swy_topo_t *topo, int a, int b);
double swy_topo_bandwidth(const swy_topo_t *topo, int a, int b); /* B/s */
double swy_topo_latency(const swy_topo_t *topo, int a, int b);   /* s */
void swy_topo_set_link(swy_topo_t *topo, int a, int b, double bw, double lat);
int swy_topo_nranks(const swy_topo_t *topo);
/* The rank given to swy_topo_build (-1 for NULL). */
int swy_topo_myrank(const swy_topo_t *topo);
const swy_topo_local_t *swy_topo_rank_info(const swy_topo_t *topo, int rank);
/* Ranks on the same host as rank r (host_id equal), count and index. */
int swy_topo_node_of(const swy_topo_t *topo, int rank);
int swy_topo_nnodes(const swy_topo_t *topo);

const char *swy_topo_link_class_name(swy_link_class_t cls);
/* Parse "self", "same_numa", "same_node", "cross_node"; -1 if unknown. */
int swy_topo_link_class_parse(const char *name);

/* Default per-class figures (documented in topo.c with their source). */
double swy_topo_default_bandwidth(swy_link_class_t cls);
double swy_topo_default_latency(swy_link_class_t cls);

/* Multi-line human description (for swy-info) into buf. */
void swy_topo_describe_local(const swy_topo_local_t *local, char *buf,
                             size_t len);

/* Communication model (model.c): modeled seconds of an all-to-all in which
 * rank i sends bytes[i * n + j] to rank j: the largest of every link's
 * bytes / bandwidth and every node uplink's egress and ingress bytes /
 * uplink rate, plus the largest latency of a pair that carries bytes. why
 * (may be NULL) names the bottleneck. */
double swy_topo_model_alltoall(const swy_topo_t *topo, const double *bytes,
                               char *why, size_t why_len);

/* Bandwidth of the flow a -> b when every rank sends to every other at
 * once: the link's, and for a peer on another node at most a's node
 * uplink divided among the flows through it (ranks on the node x ranks
 * off it). */
double swy_topo_flow_bandwidth(const swy_topo_t *topo, int a, int b);

/* TA-MoE dispatch target of one rank: share[j] (sums to 1) proportional to
 * the bandwidth rank can get to j, cross-node links capped at the node's
 * uplink divided among the node's ranks and the ranks off the node. */
void swy_topo_ta_shares(const swy_topo_t *topo, int rank, double *share);

#endif
