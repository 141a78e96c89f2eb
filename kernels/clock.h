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
/* CPU seconds this process has used, every thread together, ended ones
 * too (CLOCK_PROCESS_CPUTIME_ID): against kn_now, the share of CPU a
 * host's work gets under a quota or beside others. */
double kn_cpu_now(void);
/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): the
 * event loop's own work, apart from a trainer beside it. */
double kn_thread_cpu_now(void);

#ifdef __cplusplus
}
#endif

#endif
