/* Data-parallel gradient exchange of swy-train, as PyTorch DDP does it:
 * the dense gradients live in one flat buffer laid out in the order in
 * which backward produces them (the reverse of the forward), cut into
 * buckets of about bucket_bytes at tensor boundaries; a bucket is posted
 * as a non-blocking swy_allreduce at SWY_PRIO_LOW as soon as backward has
 * produced all of it, so it travels while backward goes on and meets the
 * MoE all-to-alls of the earlier layers on the links (Lina's setting).
 * swt_ddp_wait() completes every bucket before the optimizer step.
 *
 * Overlap (swt_ddp_set_overlap, swy-train --overlap): ByteScheduler's
 * crossing of the iteration boundary. Backward ends with
 * swt_ddp_post_rest() and does not wait; the next forward calls
 * swt_ddp_finish() for each parameter range right before it reads those
 * parameters, which waits for the buckets holding their gradients and
 * hands each to the caller's optimizer. The allreduce then also overlaps
 * the next forward, and the buckets go in the order that forward needs
 * them (the last posted, the embedding's, first).
 *
 * The gradients are of the global-mean loss already (each rank scales its
 * local loss by 1/W), so buckets are summed (SWY_SUM). Not thread-safe: one
 * training thread calls everything. */
#ifndef SWT_DDP_H
#define SWT_DDP_H

#include <stddef.h>

#include "switchyard/switchyard.h"
#include "timing.h"

typedef struct swt_ddp swt_ddp_t;

/**
 * @param grad          the flat gradient buffer (borrowed).
 * @param tensor_elems  [n_tensors] element counts in buffer order.
 * @param bucket_bytes  close a bucket once it holds at least this many
 *                      bytes (0: one bucket per tensor).
 * @return 0, or -1 when out of memory.
 */
int swt_ddp_create(swy_comm_t comm, float *grad, const size_t *tensor_elems,
                   int n_tensors, size_t bucket_bytes, swt_ddp_t **ddp_p);
void swt_ddp_destroy(swt_ddp_t *ddp);

/** Number of buckets. */
int swt_ddp_num_buckets(const swt_ddp_t *ddp);

/** Device gradients (--device cuda): the buckets are posted with
 *  attr.stream = @p stream, the stream on which backward queues the
 *  kernels that produce them, so the allreduce reads a bucket only after
 *  that work. NULL (the default): host gradients. */
void swt_ddp_set_stream(swt_ddp_t *ddp, void *stream);

/**
 * Backward has produced grad[0, ready_elems): post every bucket that lies
 * wholly below it and is not posted yet.
 * @return SWY_OK or the failing swy_allreduce status.
 */
swy_status_t swt_ddp_ready(swt_ddp_t *ddp, size_t ready_elems,
                           swt_timing_t *tm);

/** Test posted buckets without blocking, noting completion times. */
swy_status_t swt_ddp_poll(swt_ddp_t *ddp);

/** Overlap mode (see above): bucket order reversed. Set before the
 *  first step. */
void swt_ddp_set_overlap(swt_ddp_t *ddp, int on);

/** Whether buckets of the last backward are posted and not all finished
 *  yet. */
int swt_ddp_pending(const swt_ddp_t *ddp);

/** Post every bucket not posted yet (the end of backward). */
swy_status_t swt_ddp_post_rest(swt_ddp_t *ddp, swt_timing_t *tm);

/** Gradients [begin, end) summed over ranks: called once per bucket,
 *  whole buckets (they lie at tensor boundaries); its compute time goes
 *  to @p tm. */
typedef void (*swt_ddp_apply_fn)(void *arg, size_t begin, size_t end,
                                 swt_timing_t *tm);

/**
 * Wait for every posted bucket that overlaps [begin, end) and was not
 * finished yet, and call @p apply (may be NULL) on each. Once every
 * bucket is finished, the round ends: the allreduce span goes to @p tm
 * and the buckets can be posted again. Nothing posted: returns at once.
 * @return SWY_OK or the first failing bucket's status.
 */
swy_status_t swt_ddp_finish(swt_ddp_t *ddp, size_t begin, size_t end,
                            swt_ddp_apply_fn apply, void *arg,
                            swt_timing_t *tm);

/** Post what is left, wait for every bucket, add the allreduce span and
 *  the time blocked to @p tm, and reset for the next step. */
swy_status_t swt_ddp_wait(swt_ddp_t *ddp, swt_timing_t *tm);

#endif /* SWT_DDP_H */
