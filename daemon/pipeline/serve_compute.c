/* The pipeline host's compute thread: loads the blocks and the causal-LM
 * slice this host serves, and runs the jobs the loop hands it, batching
 * every request in flight into shared forward passes: BlockTrain in
 * serve_bt.c, autoregressive in serve_ar.c (internal.h).  The
 * queues to and from the loop are a loop thread (loop_thread.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "daemon/blocktrain/train.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/model_blockdecode.h"

sc_job *
sc_job_new(sc_kind kind)
{
	sc_job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		abort();	/* a few hundred bytes: nothing to recover */
	j->kind = kind;
	return j;
}

void
sc_job_free(sc_job *job)
{
	if (job == NULL)
		return;
	pl_frame_clear(&job->in);
	pl_frame_clear(&job->out);
	free(job->sym);
	free(job);
}

void
sc__fail(sc_job *job, const char *prefix, const char *msg)
{
	pl_frame_clear(&job->out);
	job->out.type = PL_ERR;
	job->out.id = job->in.id;
	snprintf(job->out.message, sizeof(job->out.message), "%.60s%.190s",
	    prefix, msg);
}

void
sc__post(sc *c, sc_job *job)
{
	lt_post(c->lt, &job->link);
}

/* The thread ----------------------------------------------------------- */

static void
free_job(lt_item *item)
{
	sc_job_free(LT_CONTAINER(item, sc_job, link));
}

/* The jobs just taken from the loop: each starts or fails, but the
 * autoregressive ones that fit, returned in a list through next. */
static sc_job *
take_jobs(sc *c, lt_item *item)
{
	sc_job *ar = NULL, **ar_tail = &ar;
	lt_item *next;

	for (; item != NULL; item = next) {
		sc_job *j = LT_CONTAINER(item, sc_job, link);

		next = item->next;
		j->next = NULL;
		switch (j->kind) {
		case SC_END:
			if (c->causal != NULL)
				sc__ar_drop(c, j->in.id);
			sc__pb_drop(c, j->in.id);
			if (sc__bt_drop(c, j->in.id))
				atomic_fetch_add(&c->cancelled, 1);
			sc_job_free(j);
			break;
		case SC_BT:
			if (sc__bt_begin(c, j) != 0)
				sc__post(c, j);
			break;
		case SC_AR:
			if (sc__ar_accept(c, j) != 0)
				sc__post(c, j);
			else {
				*ar_tail = j;
				ar_tail = &j->next;
			}
			break;
		}
	}
	return ar;
}

/* Warm-up --------------------------------------------------------------- */

/* One pass of block model m as a request's step makes it: a window of
 * masks, one row through the head; with position blocks the pass of
 * serve_bt.c's pb_pass, against a cache of its own. */
static int
warm_block(sc *c, kn_model *m, char *err)
{
	int n = c->spec.window, L = bg_pos_block(&c->spec), i, rc;
	int32_t *sym = malloc((size_t)n * sizeof(int32_t));
	int32_t row = 0, out;
	float u = 0.5f;
	kn_kv *kv = NULL;

	if (sym == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < n; i++)
		sym[i] = KN_MASK;
	if (!bg_has_pos_blocks(&c->spec))
		rc = kn_model_predict_at(m, sym, 1, &row, 1, &u, 1.0f, &out,
		    err);
	else if ((rc = kn_kv_create(&kv, m, err)) == 0) {
		kn_decode_seq seq = { kv, 0, L };

		rc = kn_model_blockdecode(m, &seq, 1, sym, 0, &row, 1, &u,
		    1.0f, &out, err);
	}
	kn_kv_free(kv);
	free(sym);
	return rc;
}

/* One decoding pass of the causal layers over one position, as the
 * first traversal of an autoregressive request makes it here. */
static int
warm_causal(sc *c, char *err)
{
	int32_t sym = ' ', picked;
	float *hidden = calloc((size_t)c->spec.width, sizeof(float)), u = 0.5f;
	kn_kv *kv = NULL;
	int rc;

	if (hidden == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if ((rc = kn_kv_create(&kv, c->causal, err)) == 0) {
		kn_decode_seq seq = { kv, 0, 1 };

		rc = kn_model_decode(c->causal, &seq, 1, c->o.ar_first ? &sym :
		    NULL, hidden, &u, 1.0f, c->o.ar_last ? &picked : NULL, err);
	}
	kn_kv_free(kv);
	free(hidden);
	return rc;
}

/* Before the host says it is ready, one throwaway pass of each model it
 * serves, on this thread: a model's first pass packs its weights and
 * allocates and touches its caches, and the thread its GEMM scratch,
 * which made the first request after a start spend 60 to 130 ms in
 * compute where the others spent 14 (the bench's model on a busy
 * machine: thousands of page faults).  Requests never see what it
 * leaves: every cache it fills is checked against its input. */
static void
warm_up(sc *c)
{
	char err[KN_ERR_LEN];
	double t0 = kn_now();
	int b;

	for (b = c->o.block_lo; b <= c->o.block_hi; b++)
		if (c->blocks[b] != NULL && warm_block(c, c->blocks[b], err) != 0)
			log_warnx("pipeline: warm-up pass of block %d: %s", b, err);
	if (c->causal != NULL && warm_causal(c, err) != 0)
		log_warnx("pipeline: warm-up pass of the causal layers: %s", err);
	c->warm_s = kn_now() - t0;
}

static void
run(lt_thread *t, void *arg)
{
	sc *c = arg;

	warm_up(c);
	uv_sem_post(&c->warmed);
	for (;;) {
		lt_item *jobs, *next;
		sc_job *ar;
		/* no wait with requests in flight; with caches held, wake
		 * now and then to evict the idle ones */
		double wait = c->active != NULL ? 0 :
		    c->caches != NULL || c->spb_caches != NULL ? 1 : -1;

		if (lt_wait(t, wait, &jobs)) {
			for (; jobs != NULL; jobs = next) {
				next = jobs->next;
				free_job(jobs);
			}
			break;
		}
		if ((ar = take_jobs(c, jobs)) != NULL)
			sc__ar_run(c, ar);
		if (c->active != NULL)
			sc__bt_round(c);
		if (c->caches != NULL)
			sc__ar_evict_idle(c, kn_now());
		if (c->spb_caches != NULL)
			sc__pb_evict_idle(c, kn_now());
	}
}

static void
deliver(void *arg, lt_item *item)
{
	sc *c = arg;
	sc_job *job = LT_CONTAINER(item, sc_job, link);

	job->next = NULL;
	c->done(c->ctx, job);
}

/* Start and stop ------------------------------------------------------- */

static int
load_models(sc *c, char *note, size_t notelen, char *err)
{
	const sc_opts *o = &c->o;
	kn_model_shape cs = pr_spec_reference_shape(&c->spec, 1);
	int b, rc;
	char why[KN_ERR_LEN];

	note[0] = '\0';
	for (b = o->block_lo; b <= o->block_hi; b++) {
		kn_model_shape bs = pr_spec_block_shape(&c->spec, b - 1);

		if (o->logical) {
			rc = kn_model_create_inference(&c->blocks[b], &bs, o->be,
			    o->max_batch, o->storage, err);
			if (rc == 0)
				kn_model_init(c->blocks[b], c->spec.seed * 1000003u +
				    (uint64_t)b);
		} else
			rc = tr_load_model(&c->blocks[b], &c->spec, o->run_id,
			    o->dir, BT_BLOCK, b, o->be, o->max_batch, why);
		if (rc != 0 && o->logical)
			return rc;
		if (rc != 0) {
			for (b = o->block_lo; b <= o->block_hi; b++) {
				kn_model_free(c->blocks[b]);
				c->blocks[b] = NULL;
			}
			snprintf(note, notelen, "BlockTrain off: %s", why);
			break;
		}
	}
	cs.layers = o->layer_hi - o->layer_lo;
	if (o->logical) {
		if ((rc = kn_model_create_inference(&c->causal, &cs, o->be,
		    o->max_batch, o->storage, err)) != 0)
			return rc;
		kn_model_init(c->causal, c->spec.seed * 1000003u + 7777u +
		    (uint64_t)o->layer_lo);
	} else {
		kn_model *full;

		rc = tr_load_model(&full, &c->spec, o->run_id, o->dir,
		    BT_CAUSAL, 0, o->be, 1, why);
		if (rc == 0) {
			rc = kn_model_create_inference(&c->causal, &cs, o->be,
			    o->max_batch, KN_STORE_F32, err);
			if (rc == 0 && (rc = kn_model_copy_layers(c->causal, full,
			    o->layer_lo, err)) != 0) {
				kn_model_free(c->causal);
				c->causal = NULL;
			}
			kn_model_free(full);
			if (rc != 0)
				return rc;
		} else {
			size_t l = strlen(note);

			snprintf(note + l, notelen - l, "%sautoregressive off: %s",
			    l ? "; " : "", why);
		}
	}
	if (c->causal == NULL && c->blocks[o->block_hi] == NULL)
		return kn_error(err, KN_EIO, "nothing to serve: %s", note);
	return KN_OK;
}

/* The models, then c. */
static void
free_sc(sc *c)
{
	for (int b = 0; b <= PR_MAX_BLOCKS; b++)
		kn_model_free(c->blocks[b]);
	kn_model_free(c->causal);
	free(c->ar_scratch);
	free(c);
}

int
sc_start(sc **out, uv_loop_t *loop, const sc_opts *o,
    void (*done)(void *, sc_job *), void *ctx, char *note, size_t notelen,
    char *err)
{
	sc *c = calloc(1, sizeof(*c));
	lt_opts lo = { "compute", run, deliver, free_job, free_job, c };
	int rc = KN_OK;
	uint32_t one = 1;

	*out = NULL;
	if (c == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if (*(unsigned char *)&one != 1) {
		free(c);
		return kn_error(err, KN_EINVAL, "the pipeline ships hidden "
		    "states little-endian; this big-endian host cannot serve");
	}
	c->o = *o;
	c->spec = *o->spec;
	c->done = done;
	c->ctx = ctx;
	if (c->o.max_batch < 1)
		c->o.max_batch = 1;
	if ((c->ar_scratch = malloc((size_t)c->spec.window * 4)) == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	else
		rc = load_models(c, note, notelen, err);
	if (rc == 0 && c->causal != NULL)
		c->kv_bytes = kn_kv_bytes(kn_model_get_shape(c->causal));
	if (rc == 0 && uv_sem_init(&c->warmed, 0) != 0)
		rc = kn_error(err, KN_ENOMEM, "cannot make a semaphore");
	else if (rc == 0 && (rc = lt_start(&c->lt, loop, &lo, err)) != 0)
		uv_sem_destroy(&c->warmed);
	if (rc != 0) {
		free_sc(c);
		return rc;
	}
	/* ready only once warm: the host's listening line comes after */
	uv_sem_wait(&c->warmed);
	uv_sem_destroy(&c->warmed);
	log_info("pipeline: warm-up passes took %.0f ms", c->warm_s * 1e3);
	*out = c;
	return KN_OK;
}

int
sc_serves(const sc *c, pl_mode mode)
{
	return mode == PL_MODE_AR ? c->causal != NULL :
	    c->blocks[c->o.block_hi] != NULL;
}

void
sc_submit(sc *c, sc_job *job)
{
	if (c->holds == 0) {
		lt_submit(c->lt, &job->link);
		return;
	}
	job->link.next = NULL;
	if (c->held_tail != NULL)
		c->held_tail->next = &job->link;
	else
		c->held_head = &job->link;
	c->held_tail = &job->link;
}

void
sc_hold(sc *c)
{
	c->holds++;
}

void
sc_release(sc *c)
{
	if (--c->holds > 0 || c->held_head == NULL)
		return;
	lt_submit_all(c->lt, c->held_head);
	c->held_head = c->held_tail = NULL;
}

uint64_t
sc_jobs_cancelled(sc *c)
{
	return (uint64_t)atomic_load(&c->cancelled);
}

void
sc_cache_usage(sc *c, int *count, size_t *bytes)
{
	/* every cache holds the same bytes */
	*count = atomic_load(&c->ncaches);
	*bytes = (size_t)*count * c->kv_bytes;
}

/* After the thread and the queues: what the thread held. */
static void
on_closed(void *arg)
{
	sc *c = arg;
	void (*closed)(void *) = c->closed;
	void *closed_arg = c->closed_arg;

	sc__bt_free_all(c);
	sc__ar_free_all(c);
	sc__pb_free_all(c);
	free_sc(c);
	if (closed != NULL)
		closed(closed_arg);
}

void
sc_stop(sc *c, void (*closed)(void *), void *arg)
{
	c->closed = closed;
	c->closed_arg = arg;
	lt_close(c->lt, on_closed, c);
}
