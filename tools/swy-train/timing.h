/* Per-step timers of swy-train and their statistics.
 *
 * What is measured, per rank and step (seconds):
 *  - a2a:      the span of every all-to-all of the MoE blocks, from its
 *              post to its completion as this rank saw it (count exchange,
 *              dispatch, combine and their backward), summed over layers.
 *              With pipelining a span also covers the expert compute that
 *              overlapped it.
 *  - a2a_wait: the part of it this rank spent blocked in a wait.
 *  - ar:       the span of the dense-gradient allreduce, from the first
 *              bucket's post to the last bucket's completion (completions
 *              are polled between compute blocks, so this is an upper
 *              bound by at most one block).
 *  - ar_wait:  the time blocked waiting for buckets before the optimizer.
 *  - exposed:  a2a_wait + ar_wait: communication nothing overlapped.
 *  - expert:   expert FFN compute, forward and backward.
 *  - moe_seg:  per MoE block and direction, from the dispatch post to the
 *              combine's completion (backward: combine backward post to
 *              dispatch backward completion): the pipelined segment.
 *  - compute:  every compute block (measured time; with --compute-scale the
 *              emulated time).
 *  - step:     the whole step, data to optimizer.
 */
#ifndef SWT_TIMING_H
#define SWT_TIMING_H

#include <stddef.h>

typedef enum {
    SWT_T_STEP,
    SWT_T_A2A,
    SWT_T_A2A_WAIT,
    SWT_T_AR,
    SWT_T_AR_WAIT,
    SWT_T_EXPERT,
    SWT_T_MOE_SEG,
    SWT_T_COMPUTE,
    SWT_T_SLEPT,
    SWT_T_COUNT
} swt_timer_t;

extern const char *const swt_timer_names[SWT_T_COUNT];

typedef struct {
    double acc[SWT_T_COUNT]; /* this step, seconds */
    double compute_scale;    /* >= 1; 1 = measured compute as is */
} swt_timing_t;

/** Monotonic seconds. */
double swt_now(void);

/** Zero the step's timers (keeps compute_scale). */
void swt_timing_reset(swt_timing_t *tm);

static inline void swt_timing_add(swt_timing_t *tm, swt_timer_t which,
                                  double seconds)
{
    tm->acc[which] += seconds;
}

/**
 * End a compute block that began at @p t0: add its time to compute and,
 * with compute_scale X > 1, sleep (X - 1) times that long, so the block
 * takes X times its measured time without using a core (an emulation of
 * slower compute; the output says so).
 * @return the block's (emulated) duration in seconds.
 */
double swt_timing_compute_end(swt_timing_t *tm, double t0);

/** Median, min and max of v[n] (n >= 1); v is sorted in place. */
typedef struct {
    double median, min, max;
} swt_stats_t;
swt_stats_t swt_stats(double *v, size_t n);

#endif /* SWT_TIMING_H */
