/* Between the compute thread (serve_compute.c) and its two batchers:
 * BlockTrain (serve_bt.c) and autoregressive with its KV caches
 * (serve_ar.c).  Every sc__ function runs on the compute thread, or at
 * close once the thread has been joined. */
#ifndef SM_SERVE_COMPUTE_PRIVATE_H
#define SM_SERVE_COMPUTE_PRIVATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon/loop_thread.h"
#include "daemon/serve_compute.h"

struct bt_state;        /* serve_bt.c */
struct cache;           /* serve_ar.c */
struct pb_cache;        /* serve_pb.c */

struct sc {
	sc_opts o;
	pr_spec spec;
	lt_thread *lt;
	void (*done)(void *, sc_job *);
	void *ctx;
	void (*closed)(void *);
	void *closed_arg;
	/* set at start, read-only after */
	kn_model *blocks[PR_MAX_BLOCKS + 1];    /* by 1-based block */
	kn_model *causal;                       /* this host's layers */
	size_t kv_bytes;                        /* one KV cache's */
	/* the thread's own */
	struct bt_state *active;
	struct cache *caches;
	struct pb_cache *pb_caches;             /* position blocks' */
	atomic_int ncaches;                     /* the loop reads it too */
	atomic_uint_fast64_t cancelled;         /* jobs dropped unfinished */
	float *ar_scratch;                      /* window floats */
};

/* The job's answer becomes an error: prefix, then msg. */
void sc__fail(sc_job *job, const char *prefix, const char *msg);
/* Hands a finished job back to the loop. */
void sc__post(sc *c, sc_job *job);

/* A BlockTrain job joins the active requests; -1: it failed (answer set,
 * the caller posts it). */
int sc__bt_begin(sc *c, sc_job *job);
/* One step of every active request; the finished ones are posted. */
void sc__bt_round(sc *c);
/* At close: the active requests and their jobs. */
void sc__bt_free_all(sc *c);
/* The request id ended: its work here goes unfinished, unanswered; 1
 * when it had some. */
int sc__bt_drop(sc *c, uint64_t id);

/* serve_pb.c: the caches of requests of position blocks.  begin finds
 * or makes the request's caches for position block p and adds the
 * clean context seq[.., pL) to them; -1 with why set when it cannot. */
int sc__pb_begin(sc *c, uint64_t id, const int32_t *seq, int p, char *why,
    size_t len);
/* The request's cache over block (1-based), NULL when it has none. */
kn_kv *sc__pb_kv(sc *c, uint64_t id, int block);
void sc__pb_drop(sc *c, uint64_t id);
void sc__pb_evict_idle(sc *c, double t);
void sc__pb_free_all(sc *c);

/* -1: the autoregressive job does not fit this host (answer set, the
 * caller posts it). */
int sc__ar_accept(sc *c, sc_job *job);
/* Runs the accepted jobs (a list through next) in batched passes and
 * posts each. */
void sc__ar_run(sc *c, sc_job *list);
/* Drops the request's KV cache, if it has one. */
void sc__ar_drop(sc *c, uint64_t id);
/* Drops the caches unused for idle_s at time t (kn_now). */
void sc__ar_evict_idle(sc *c, double t);
/* At close: every cache. */
void sc__ar_free_all(sc *c);

#endif
