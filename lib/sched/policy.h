/* Scheduling policies: the built-ins and plugins behind swy_policy_v1. */
#ifndef SWY_SCHED_POLICY_H
#define SWY_SCHED_POLICY_H

#include "switchyard/swy_policy_v1.h"

typedef struct {
    const swy_policy_v1_t *ops; /* a built-in, or &table */
    swy_policy_v1_t table; /* a plugin's table, read by the struct_size rule */
    void *ctx;
    void *dl_handle; /* NULL for a built-in */
    /* It orders by priority (all but fifo and fair): a send below the
     * highest priority seen goes with SWY_SEND_HINT_PREEMPTIBLE. */
    int by_priority;
} swy_policy_t;

/* Load the policy named by SWY_POLICY (a built-in, else
 * swy-policy-<name>.so); unknown or broken → SWY_ERR_INVALID_ARG naming it
 * and the built-ins. */
swy_status_t swy_policy_load(const char *name, int rank, int nranks,
                             swy_policy_t *policy);
void swy_policy_unload(swy_policy_t *policy);

/* Open a policy plugin file and validate its ABI (tests); its table is
 * read into *table, and *ops_p = table on success. */
swy_status_t swy_policy_plugin_open(const char *path, swy_policy_v1_t *table,
                                    const swy_policy_v1_t **ops_p,
                                    void **dl_handle_p, char *why,
                                    size_t why_len);

/* The built-in policies, NULL-terminated. */
extern const swy_policy_v1_t *const swy_policy_builtins[];

#endif
