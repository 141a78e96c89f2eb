/* The pipeline host's compute thread: the models this host serves (its
 * BlockTrain blocks and its slice of the causal LM's layers), and the
 * batching of the requests in flight.  Jobs come from the loop and go
 * back to it through a loop thread (loop_thread.h).  While the thread
 * computes, new jobs queue up and join the next forward pass, so
 * concurrent requests at a host share one batched pass. */
#ifndef SM_SERVE_COMPUTE_H
#define SM_SERVE_COMPUTE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/loop_thread.h"
#include "kernels/backend.h"
#include "kernels/model.h"
#include "proto/pipeline.h"
#include "proto/spec.h"

typedef enum {
	SC_BT,          /* in: a PL_BT frame; out: PL_BT on, or PL_OUT */
	SC_AR,          /* in: PL_AR (hidden states) or sym; out: PL_AR / PL_TOK */
	SC_END          /* in: the id whose KV cache and work in progress go */
} sc_kind;

typedef struct sc_job {
	sc_kind kind;
	pl_frame in;
	/* SC_AR on the first host: the bytes to embed at in.pos.. (in.count) */
	int32_t *sym;
	pl_frame out;           /* filled by the thread; PL_ERR on failure */
	uint64_t compute_us;    /* forward passes this job took part in */
	void *owner;            /* the loop's, untouched here */
	struct sc_job *next;    /* the compute thread's own lists */
	lt_item link;           /* in the queues to and from the thread */
} sc_job;

typedef struct {
	const pr_spec *spec;
	const char *run_id;
	const char *dir;        /* checkpoints; NULL with a logical shape */
	int logical;            /* seeded random weights */
	kn_storage storage;     /* of a logical shape's weights */
	int block_hi, block_lo; /* 1-based */
	int layer_lo, layer_hi; /* causal layers [lo, hi) */
	int ar_first, ar_last;  /* embeds the bytes / runs the head */
	int max_batch;          /* windows per forward pass */
	size_t cache_bytes;     /* KV caches in all */
	double idle_s;          /* a cache unused this long is evicted */
	const kn_backend *be;
} sc_opts;

typedef struct sc sc;

/* Loads the models (a missing checkpoint leaves that mode off, said in
 * note), then starts the thread.  done runs on the loop thread with each
 * finished job; it owns the job (sc_job_free). */
int sc_start(sc **out, uv_loop_t *loop, const sc_opts *o,
    void (*done)(void *ctx, sc_job *job), void *ctx, char *note,
    size_t notelen, char *err);
int sc_serves(const sc *c, pl_mode mode);
void sc_submit(sc *c, sc_job *job);
/* Between sc_hold and sc_release (which nest) submitted jobs are held,
 * then go to the thread in one piece: the frames of one read reach the
 * thread together, so a request and the end frame that cancels it, come
 * in the same read, are never split by a round that computes the first
 * for no one. */
void sc_hold(sc *c);
void sc_release(sc *c);
/* Jobs dropped unfinished because their request ended (an end frame
 * came while they ran): for the status. */
uint64_t sc_jobs_cancelled(sc *c);
/* KV caches held now and their bytes, for the status line and tests. */
void sc_cache_usage(sc *c, int *count, size_t *bytes);
/* Stops and joins the thread, frees jobs not done and the models; the
 * async handle is closed, then closed(arg) runs. */
void sc_stop(sc *c, void (*closed)(void *), void *arg);

sc_job *sc_job_new(sc_kind kind);
void sc_job_free(sc_job *job);

#endif
