/**
 * @file swy_send_hints_v1.h
 * @brief Sends with hints from the scheduler, an optional table a
 *        transport plugin may export, version 1.
 *
 * Frozen from 0.1.0 on: no field of a struct here is removed, reordered,
 * retyped or given a new meaning; a struct only grows at its end, by
 * fields whose zero (or NULL) means what the struct meant before they
 * existed, and every reader follows the struct_size rule of
 * swy_common.h. A change that cannot be made that way is a new file
 * (swy_send_hints_v2.h) with a new symbol.
 *
 * A plugin that can do better with a hint about a send exports
 * `const swy_send_hints_v1_t swy_send_hints_plugin_v1` next to
 * swy_transport_plugin_v1. The host finds it with dlsym, checks
 * abi_version and struct_size, and then posts a send that carries a hint
 * with isend_hinted() instead of swy_transport_v1_t.isend(); sends
 * without a hint, and every send to a plugin without the table, go
 * through isend(). A hint never changes what arrives: the receiver posts
 * the same irecv() either way. A plugin may ignore any hint.
 */
#ifndef SWY_SEND_HINTS_V1_H
#define SWY_SEND_HINTS_V1_H

#include "swy_transport_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWY_SEND_HINTS_ABI_V1 1u
#define SWY_SEND_HINTS_PLUGIN_SYMBOL_V1 "swy_send_hints_plugin_v1"

/** The send is one of many posted together, and nothing waits for it
 *  alone (an alltoallv's chunks): favour bandwidth (a zero-copy
 *  rendezvous) over completing early (an eager copy). Without it a send
 *  may be a step that the next one depends on (allreduce). */
#define SWY_SEND_HINT_BULK 0x1u
/** The scheduler may want sends posted later to overtake this one (a
 *  low-priority partition that its policy holds to a credit of bytes in
 *  flight): complete it only once its bytes are on their way to the
 *  receiver, not when they were copied into a queue of the transport's
 *  that later sends to that peer wait behind, so that what the scheduler
 *  counts in flight is what a later send waits for. Added after the
 *  first release of v1: a plugin that does not know it ignores it (as
 *  any unknown bit), and its sends complete as before. */
#define SWY_SEND_HINT_PREEMPTIBLE 0x2u

typedef struct swy_send_hints_v1 {
    uint32_t abi_version; /**< SWY_SEND_HINTS_ABI_V1 */
    uint32_t struct_size; /**< sizeof(swy_send_hints_v1_t) */

    /** As swy_transport_v1_t.isend on a context of the same plugin, with
     *  hints (SWY_SEND_HINT_* bits; unknown bits are ignored). Same
     *  threading and completion rules as isend. */
    swy_status_t (*isend_hinted)(void *ctx, int peer, uint64_t tag,
                                 const void *buf, size_t len,
                                 swy_mem_type_t mem, uint32_t hints,
                                 swy_transport_complete_cb_v1_t cb,
                                 void *cb_arg, void **handle_p);
} swy_send_hints_v1_t;

#ifdef __cplusplus
}
#endif
#endif /* SWY_SEND_HINTS_V1_H */
