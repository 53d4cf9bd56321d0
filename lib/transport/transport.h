/* lib/transport: the registry of transports for one communicator: the
 * built-in `self`, plugins loaded with dlopen (swy_transport_v1), and the
 * choice of a transport per (peer, memory type).
 *
 * Loader: for each name in SWY_TRANSPORT_PLUGINS it looks for
 * `swy-transport-<name>.so` in SWY_PLUGIN_PATH, then the directory
 * libswitchyard was loaded from + "/switchyard" (nothing compiled in: see
 * the top-level meson.build). In each file it tries the
 * newest ABI symbol first (today only swy_transport_plugin_v1), checks
 * abi_version and struct_size, and logs clearly what is missing or wrong
 * (info for a plugin that is simply absent, warn for one that is broken);
 * the built-ins always remain.
 *
 * A plugin file may also export swy_device_plugin_v1 (device.h) and
 * swy_send_hints_plugin_v1; the loader validates them the same way and
 * keeps them in swy_transport_t.dev and .hints.
 *
 * Selection: per peer, the highest-scoring transport that serves the memory
 * type and the link class (caps.score[class] > 0); SWY_TRANSPORT forces a
 * name where that transport can serve. */
#ifndef SWY_TRANSPORT_TRANSPORT_H
#define SWY_TRANSPORT_TRANSPORT_H

#include "boot/boot.h"
#include "switchyard/swy_device_v1.h"
#include "switchyard/swy_send_hints_v1.h"
#include "switchyard/swy_transport_v1.h"
#include "topo/topo.h"

#define SWY_TRANSPORT_MAX 8

typedef struct {
    const swy_transport_v1_t *ops; /* &ops_table, or the built-in's */
    void *ctx;
    void *dl_handle;        /* NULL for a built-in */
    char path[256];         /* file it came from, "built-in" otherwise */
    swy_transport_caps_v1_t caps;
    const swy_device_v1_t *dev; /* the same file's device services, or NULL */
    const swy_send_hints_v1_t *hints; /* its hinted sends, or NULL */
    /* This host's copies of a plugin's tables (ops, dev and hints point
     * here): read once by the struct_size rule. */
    swy_transport_v1_t ops_table;
    swy_device_v1_t dev_table;
    swy_send_hints_v1_t hints_table;
} swy_transport_t;

typedef struct swy_transport_set {
    int rank, nranks;
    int count;
    swy_transport_t tps[SWY_TRANSPORT_MAX];
    /* chosen transport index per memory type and peer; -1 unreachable */
    int *peer_tp[SWY_MEM_NTYPES];
    swy_transport_host_v1_t host;
} swy_transport_set_t;

/* The built-in transport serving a rank's messages to itself. */
const swy_transport_v1_t *swy_transport_self_ops(void);

/* Open one plugin file and validate its ABI. On failure *why is set to a
 * message (not found / not a shared object / no symbol / wrong ABI
 * version or struct size) and the status is SWY_ERR_UNSUPPORTED for
 * "missing" or SWY_ERR_INVALID_ARG for "broken". The plugin's table is
 * read into *table (swy_plugin_table), and *ops_p = table on success. */
swy_status_t swy_transport_plugin_open(const char *path,
                                       swy_transport_v1_t *table,
                                       const swy_transport_v1_t **ops_p,
                                       void **dl_handle_p, char *why,
                                       size_t why_len);

/* The table a plugin exports as symbol, read into *table (this host's
 * layout, table_size bytes) by the struct_size rule (swy_common.h): 1
 * when read; 0 when the plugin does not export symbol; -1 with *why set
 * when its abi_version is not abi_version or its struct_size is below
 * first_size (the table's first release). Every plugin table starts with
 * uint32_t abi_version, struct_size. The host keeps and calls its copy,
 * never the plugin's symbol. */
int swy_plugin_table(void *dl_handle, const char *path, const char *symbol,
                     uint32_t abi_version, void *table, size_t table_size,
                     size_t first_size, char *why, size_t why_len);

/* Look for swy_send_hints_plugin_v1 in an opened plugin and validate it.
 * SWY_OK with *hints_p NULL when the plugin does not export it; SWY_OK
 * with *hints_p set when it is valid; SWY_ERR_INVALID_ARG with *why set
 * when it is of the wrong ABI version or struct size, or lacks
 * isend_hinted. */
swy_status_t swy_send_hints_plugin_symbol(void *dl_handle, const char *path,
                                          swy_send_hints_v1_t *table,
                                          const swy_send_hints_v1_t **hints_p,
                                          char *why, size_t why_len);

/* Find swy-<kind>-<name>.so (kind: "transport", "policy") along the
 * plugin search path; SWY_ERR_UNSUPPORTED with the directories tried in
 * *why when absent. */
swy_status_t swy_plugin_find(const char *kind, const char *name, char *path,
                             size_t path_len, char *why, size_t why_len);

/* Open every plugin of SWY_TRANSPORT_PLUGINS that loads, for its
 * variables alone (swy-info -c), and close it again: no init(). */
void swy_transport_plugins_config(void);

/* Find swy-transport-<name>.so along the search path; SWY_ERR_UNSUPPORTED
 * with the directories tried in *why when absent. */
swy_status_t swy_transport_plugin_find(const char *name, char *path,
                                       size_t path_len, char *why,
                                       size_t why_len);

/* Create the set: self + every plugin that loads and initializes. */
swy_status_t swy_transport_set_create(int rank, int nranks,
                                      swy_transport_set_t **set_p);

/* Self + the given transport only, no plugin loaded (swy_sim.h). */
swy_status_t swy_transport_set_create_given(int rank, int nranks,
                                            const swy_transport_v1_t *ops,
                                            swy_transport_set_t **set_p);

/* Exchange addresses over boot, choose per peer and memory type, connect.
 * SWY_ERR_UNSUPPORTED (message names the peer and its link class) when no
 * transport reaches some peer for host memory. */
swy_status_t swy_transport_set_connect(swy_transport_set_t *set,
                                       swy_boot_t *boot,
                                       const swy_topo_t *topo,
                                       double timeout_s);

/* The parts of swy_transport_set_connect, for callers (and tests) that
 * gather addresses themselves. set_address: this rank's blob (every
 * transport's name and address; swy_free it). set_connect_all: given every
 * rank's blob concatenated in rank order (all, rank_lens[r] bytes each),
 * choose per peer and memory type and connect. topo NULL: own rank is
 * SWY_LINK_SELF, every other SWY_LINK_CROSS_NODE. Connect only once. */
swy_status_t swy_transport_set_address(swy_transport_set_t *set,
                                       void **blob_p, size_t *len_p);
swy_status_t swy_transport_set_connect_all(swy_transport_set_t *set,
                                           const void *all,
                                           const size_t *rank_lens,
                                           const swy_topo_t *topo);

/* Send through tp by the best entry it offers: a transport with device
 * services takes the op's priority (prio >= 0: the nccl plugin's high- or
 * low-priority stream), one with send hints hears the hints
 * (SWY_SEND_HINT_*: bulk and preemptible sends skip the ucx plugin's
 * eager path to local ranks), any other gets a plain isend. prio -1: no
 * priority (a header). */
swy_status_t swy_transport_isend(swy_transport_t *tp, int peer, uint64_t tag,
                                 const void *buf, size_t bytes,
                                 swy_mem_type_t mem, int prio, uint32_t hints,
                                 swy_transport_complete_cb_v1_t cb,
                                 void *cb_arg, void **handle_p);

/* Chosen transport for (peer, mem); NULL when none. */
swy_transport_t *swy_transport_for_peer(swy_transport_set_t *set, int peer,
                                        swy_mem_type_t mem);

/* The loaded transports (file, memory types, score per link class) and
 * the one chosen for host memory per link class, as text (swy-info). */
void swy_transport_set_describe(const swy_transport_set_t *set, char *buf,
                                size_t len);

/* Names of the loaded transports, ", "-separated ("self, ucx"). */
void swy_transport_set_names(const swy_transport_set_t *set, char *buf,
                             size_t len);

/* Progress every transport; returns events handled. */
int swy_transport_set_progress(swy_transport_set_t *set);
/* Arm every transport and collect their event fds (up to max) for poll;
 * returns the number of fds, or -1 if some transport has events pending
 * or cannot sleep (the caller should keep polling). */
int swy_transport_set_arm(swy_transport_set_t *set, int *fds, int max);

void swy_transport_set_destroy(swy_transport_set_t *set);

#endif
