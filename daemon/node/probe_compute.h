/* The compute half of a probe (DESIGN section 4): how fast this host trains
 * and runs forward passes of a block of a given shape, on a scratch model
 * so that no training state is touched, and how much memory its training
 * device has free.  Training-library side: probe.c calls it on a thread
 * of its own, never on the event loop. */
#ifndef SM_PROBE_COMPUTE_H
#define SM_PROBE_COMPUTE_H

#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/model.h"

/* Repetitions of a compute probe at most: one timing of a host whose CPU
 * comes in quota periods, or that others share, can be far off, and the
 * median of a few is not. */
#define PCM_MAX_REPEATS 9

typedef struct {
	/* positions (windows x window) per second: forward, backward and
	 * AdamW; and forward alone: the median over the repetitions, each
	 * over seconds_each or max_steps */
	double train_positions_per_s, forward_positions_per_s;
	int repeats;
	/* each repetition's, in the order they ran */
	double train_each[PCM_MAX_REPEATS], forward_each[PCM_MAX_REPEATS];
	int train_steps, forward_passes;        /* timed, warm-up aside */
	double train_s, forward_s;              /* what they took, in all */
	/* seconds of one serving pass (kn_model_predict_at on one window)
	 * that picks one row, and every row: the median over the
	 * repetitions.  What a BlockTrain request costs a host is dozens of
	 * such passes, whose fixed costs (a job handed to each thread per
	 * operation, a CPU quota that threads spend waiting) a batch's
	 * positions/s spreads too thin to show. */
	double serve_pass_one_s, serve_pass_window_s;
	/* CPU seconds the process used per second of the timed training
	 * (kn_cpu_now against kn_now), the median over the repetitions: on
	 * the CPU backend, the CPU its training gets (a quota's share, or
	 * its threads where nothing else runs), which the exchange's TLS and
	 * TCP work in the same process comes out of */
	double train_cpu_share;
} pcm_rates;

/* What a round's update costs the CPU beside its bytes on the wire, per
 * parameter of the block: encode, once a round (f32: the round's own
 * encoding may be lighter or heavier); merge, once for each replica's
 * update (decoding and checking it, keeping its bytes, and its share of
 * the average). */
typedef struct {
	double encode_s, merge_s;       /* CPU seconds per parameter */
} pcm_update_cost;

/* Times pr_update_encode, pr_update_decode with a copy of the bytes, and
 * kn_average of two, on an update of count parameters, with the process's
 * CPU clock (so the compute pool's threads count), until cpu_seconds are
 * spent and at least 3 times.  0 or a negative KN_E* code with the reason
 * in err (KN_ERR_LEN). */
int pcm_measure_update(size_t count, double cpu_seconds, pcm_update_cost *out,
    char *err);

/* Free memory of the training device in *bytes: MemAvailable of
 * /proc/meminfo on the CPU, the table's memory_free on CUDA
 * (cudaMemGetInfo of the current device).  *how names the source.
 * 0 or a negative KN_E* code with the reason in err (KN_ERR_LEN). */
int pcm_free_memory(const kn_backend *be, uint64_t *bytes, const char **how,
    char *err);

/* Times training steps, then forward passes, of a freshly initialised
 * model of shape on be, batch windows at a time, on a seeded random
 * batch: one untimed warm-up each, then until seconds_each have passed
 * or max_steps were timed (at least one); then serving passes of one
 * window on a serving model of the shape, picking one row and every row,
 * half of seconds_each each; that repeats times (1 to PCM_MAX_REPEATS),
 * the kinds in turn, so a slow spell of the host falls on all alike.  0
 * or KN_E* with err. */
int pcm_measure(const kn_model_shape *shape, int batch, const kn_backend *be,
    double seconds_each, int max_steps, int repeats, pcm_rates *out,
    char *err);

/* Sorts v (n values) in increasing order. */
void pcm_sort(double *v, int n);
/* The q quantile (0 to 1) of sorted v (n >= 1), linear between order
 * statistics. */
double pcm_quantile(const double *sorted, int n, double q);
/* The median of v (n >= 1; sorted in place): the middle value, or the
 * mean of the two middle ones. */
double pcm_median(double *v, int n);

#endif
