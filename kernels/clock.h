/* One monotonic clock for the whole tree: timings in the kernels and the
 * benchmarks, deadlines and rates in the daemons, waits in the tests. */
#ifndef KN_CLOCK_H
#define KN_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary start, from CLOCK_MONOTONIC: never steps
 * back when the wall clock is set. */
double kn_now(void);

#ifdef __cplusplus
}
#endif

#endif
