/* The pipeline host's compute thread: loads the blocks and the causal-LM
 * slice this host serves, and runs the jobs the loop hands it, batching
 * every request in flight into shared forward passes (BlockTrain: one
 * predict per block and temperature per step; autoregressive: one decode
 * pass over the new positions of every request). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/blocktrain.h"
#include "daemon/log.h"
#include "daemon/serve_compute.h"
#include "daemon/train.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"

/* A BlockTrain request in progress here. */
struct bt_state {
	sc_job *job;
	int32_t *seq;           /* window symbols, KN_MASK undecided */
	float *u;               /* 2n draws of the current step */
	int block;              /* 1-based, running now */
	int j;                  /* its step */
	double p, next;
	int32_t *pos;           /* positions the step unmasks (n) */
	int npos;
	int taken;              /* in this round's forward passes */
	struct bt_state *next_active;
};

/* One request's KV cache over this host's causal layers. */
struct cache {
	uint64_t id;
	kn_kv *kv;
	double used;
	struct cache *next;
};

struct sc {
	sc_opts o;
	pr_spec spec;
	uv_async_t async;
	pthread_t thread;
	int started;
	void (*done)(void *, sc_job *);
	void *ctx;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	sc_job *in_head, *in_tail;      /* loop -> thread */
	sc_job *out_head, *out_tail;    /* thread -> loop */
	int stop;
	/* the thread's own */
	kn_model *blocks[PR_MAX_BLOCKS + 1];    /* by 1-based block */
	kn_model *causal;                       /* this host's layers */
	struct bt_state *active;
	struct cache *caches;
	int ncaches;                            /* under lock for usage() */
	size_t cache_used;
	float *ar_scratch;                      /* window floats */
	void (*closed)(void *);
	void *closed_arg;
};

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

/* The job's answer becomes an error: prefix, then msg. */
static void
fail(sc_job *job, const char *prefix, const char *msg)
{
	pl_frame_clear(&job->out);
	job->out.type = PL_ERR;
	job->out.id = job->in.id;
	snprintf(job->out.message, sizeof(job->out.message), "%.60s%.190s",
	    prefix, msg);
}

static void
post(sc *c, sc_job *job)
{
	pthread_mutex_lock(&c->lock);
	job->next = NULL;
	if (c->out_tail != NULL)
		c->out_tail->next = job;
	else
		c->out_head = job;
	c->out_tail = job;
	pthread_mutex_unlock(&c->lock);
	uv_async_send(&c->async);
}

/* BlockTrain ---------------------------------------------------------- */

static void
bt_free(struct bt_state *st)
{
	free(st->seq);
	free(st->u);
	free(st->pos);
	free(st);
}

static void
bt_finish(sc *c, struct bt_state *st)
{
	sc_job *job = st->job;
	const pl_frame *in = &job->in;
	pl_frame *out = &job->out;
	int n = c->spec.window, i;

	pl_frame_clear(out);
	out->id = in->id;
	out->compute_us = in->compute_us + job->compute_us;
	out->hops = in->hops + 1;
	if (c->o.block_lo == 1) {
		out->type = PL_OUT;
		out->traversals = 1;
		out->data_len = (size_t)(in->end - in->fixed);
		out->data = malloc(out->data_len ? out->data_len : 1);
		for (i = in->fixed; i < in->end && out->data != NULL; i++)
			out->data[i - in->fixed] = (unsigned char)st->seq[i];
	} else {
		out->type = PL_BT;
		out->steps = in->steps;
		out->temperature = in->temperature;
		out->seed = in->seed;
		out->fixed = in->fixed;
		out->end = in->end;
		out->block = c->o.block_lo - 1;
		out->data_len = out->mask_len = (size_t)n;
		out->data = malloc((size_t)n);
		out->mask = malloc((size_t)n);
		for (i = 0; i < n && out->data != NULL && out->mask != NULL; i++) {
			out->mask[i] = st->seq[i] == KN_MASK;
			out->data[i] = st->seq[i] == KN_MASK ? 0 :
			    (unsigned char)st->seq[i];
		}
	}
	if (out->data == NULL || (out->type == PL_BT && out->mask == NULL))
		fail(job, "", "out of memory");
	st->job = NULL;
	post(c, job);
}

static int
bt_begin(sc *c, sc_job *job)
{
	const pl_frame *in = &job->in;
	int n = c->spec.window, i;
	struct bt_state *st;

	if (c->blocks[c->o.block_hi] == NULL) {
		fail(job, "", "this host does not serve BlockTrain (its block "
		    "checkpoints were missing at start)");
		return -1;
	}
	if (in->block != c->o.block_hi || in->data_len != (size_t)n ||
	    in->end > n) {
		char why[128];

		snprintf(why, sizeof(why), "block %d, window %zu; this host "
		    "runs block %d first, window %d", in->block, in->data_len,
		    c->o.block_hi, n);
		fail(job, "BlockTrain frame does not fit this host: ", why);
		return -1;
	}
	if ((st = calloc(1, sizeof(*st))) == NULL ||
	    (st->seq = malloc((size_t)n * sizeof(int32_t))) == NULL ||
	    (st->u = malloc((size_t)2 * n * sizeof(float))) == NULL ||
	    (st->pos = malloc((size_t)n * sizeof(int32_t))) == NULL) {
		if (st != NULL)
			bt_free(st);
		fail(job, "", "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++)
		st->seq[i] = in->mask[i] ? KN_MASK : in->data[i];
	st->job = job;
	st->block = in->block;
	st->j = 0;
	st->next_active = c->active;
	c->active = st;
	return 0;
}

/* Moves st to its next step that needs a forward pass; returns 1 when
 * this host's blocks are done with it. */
static int
bt_advance(sc *c, struct bt_state *st)
{
	const pl_frame *in = &st->job->in;
	int n = c->spec.window;

	for (;;) {
		if (bt_step_draw(&c->spec, in->steps, st->block - 1, st->j,
		    in->seed, st->u, &st->p, &st->next)) {
			if ((st->npos = bt_step_positions(st->seq, n, in->fixed,
			    st->u, st->p, st->next, st->pos)) > 0)
				return 0;
			st->j++;
			continue;
		}
		if (st->block == c->o.block_lo)
			return 1;
		st->block--;
		st->j = 0;
	}
}

/* One step of every active request: those at the same block and
 * temperature share a forward pass. */
static void
bt_round(sc *c)
{
	int n = c->spec.window, B = c->o.max_batch < 256 ? c->o.max_batch : 256;
	struct bt_state **prev, *st, *group[256];
	int32_t *in = malloc((size_t)B * n * sizeof(int32_t));
	int32_t *rows = malloc((size_t)B * n * sizeof(int32_t));
	int32_t *picked = malloc((size_t)B * n * sizeof(int32_t));
	float *u = malloc((size_t)B * n * sizeof(float));
	char err[KN_ERR_LEN];

	/* drop the finished first, so every one left needs a pass */
	for (prev = &c->active; (st = *prev) != NULL;) {
		st->taken = 0;
		if (bt_advance(c, st)) {
			*prev = st->next_active;
			bt_finish(c, st);
			bt_free(st);
		} else
			prev = &st->next_active;
	}
	while (in != NULL && rows != NULL && picked != NULL && u != NULL) {
		struct bt_state *lead = NULL;
		int g = 0, k, r, R = 0, rc;
		uint64_t us;
		double t0;

		for (st = c->active; st != NULL && lead == NULL;
		    st = st->next_active)
			if (!st->taken)
				lead = st;
		if (lead == NULL)
			break;
		for (st = lead; st != NULL && g < B; st = st->next_active)
			if (!st->taken && st->block == lead->block &&
			    st->job->in.temperature == lead->job->in.temperature) {
				st->taken = 1;
				group[g++] = st;
			}
		/* one batch of windows; the head only where a byte is picked */
		for (k = 0; k < g; k++) {
			st = group[k];
			memcpy(in + (size_t)k * n, st->seq,
			    (size_t)n * sizeof(int32_t));
			for (r = 0; r < st->npos; r++, R++) {
				rows[R] = k * n + st->pos[r];
				u[R] = st->u[n + st->pos[r]];
			}
		}
		t0 = kn_now();
		rc = kn_model_predict_at(c->blocks[lead->block], in, g, rows, R,
		    u, (float)lead->job->in.temperature, picked, err);
		us = (uint64_t)((kn_now() - t0) * 1e6);
		for (k = 0, R = 0; k < g; k++) {
			st = group[k];
			st->job->compute_us += us;
			if (rc != 0) {
				fail(st->job, "BlockTrain step failed: ", err);
				continue;
			}
			for (r = 0; r < st->npos; r++, R++)
				st->seq[st->pos[r]] = picked[R];
			st->j++;
		}
	}
	for (prev = &c->active; (st = *prev) != NULL;) {
		if (st->job->out.type == PL_ERR) {
			sc_job *job = st->job;

			*prev = st->next_active;
			st->job = NULL;
			bt_free(st);
			post(c, job);
		} else
			prev = &st->next_active;
	}
	free(in); free(rows); free(picked); free(u);
}

/* Autoregressive ------------------------------------------------------ */

static struct cache *
cache_find(sc *c, uint64_t id)
{
	struct cache *e;

	for (e = c->caches; e != NULL; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

static void
cache_drop(sc *c, uint64_t id)
{
	struct cache **prev, *e;

	for (prev = &c->caches; (e = *prev) != NULL; prev = &e->next)
		if (e->id == id) {
			*prev = e->next;
			kn_kv_free(e->kv);
			free(e);
			pthread_mutex_lock(&c->lock);
			c->ncaches--;
			c->cache_used -= kn_kv_bytes(kn_model_get_shape(c->causal));
			pthread_mutex_unlock(&c->lock);
			return;
		}
}

static void
cache_evict_idle(sc *c, double t)
{
	struct cache *e, *nx;
	int evicted = 0;

	for (e = c->caches; e != NULL; e = nx) {
		nx = e->next;
		if (t - e->used > c->o.idle_s) {
			cache_drop(c, e->id);
			evicted++;
		}
	}
	if (evicted)
		log_info("pipeline: evicted %d idle KV cache%s", evicted,
		    evicted == 1 ? "" : "s");
}

/* The cache for a job's positions: a new one at position 0. */
static struct cache *
cache_for(sc *c, sc_job *job)
{
	size_t bytes = kn_kv_bytes(kn_model_get_shape(c->causal));
	struct cache *e = cache_find(c, job->in.id);
	char err[KN_ERR_LEN];

	if (job->in.pos == 0) {
		if (e != NULL)
			cache_drop(c, job->in.id);
		if (c->cache_used + bytes > c->o.cache_bytes) {
			char why[128];

			snprintf(why, sizeof(why), "busy: the KV caches are full "
			    "(%d requests hold %.0f MiB); try again", c->ncaches,
			    c->cache_used / 1048576.0);
			fail(job, "", why);
			return NULL;
		}
		if ((e = calloc(1, sizeof(*e))) == NULL ||
		    kn_kv_create(&e->kv, c->causal, err) != 0) {
			free(e);
			fail(job, "", "cannot allocate a KV cache");
			return NULL;
		}
		e->id = job->in.id;
		e->next = c->caches;
		c->caches = e;
		pthread_mutex_lock(&c->lock);
		c->ncaches++;
		c->cache_used += bytes;
		pthread_mutex_unlock(&c->lock);
	} else if (e == NULL || kn_kv_len(e->kv) != job->in.pos) {
		fail(job, "", "no KV cache for this request here (evicted "
		    "as idle, or the host restarted)");
		return NULL;
	}
	e->used = kn_now();
	return e;
}

static void
ar_output(sc *c, sc_job *job, const float *hidden, int32_t byte)
{
	const pl_frame *in = &job->in;
	pl_frame *out = &job->out;
	int d = c->spec.width;

	pl_frame_clear(out);
	out->id = in->id;
	out->compute_us = in->compute_us + job->compute_us;
	out->hops = in->hops + 1;
	if (c->o.ar_last) {
		out->type = PL_TOK;
		out->pos = in->pos + in->count;
		out->byte = byte;
	} else {
		out->type = PL_AR;
		out->temperature = in->temperature;
		out->seed = in->seed;
		out->fixed = in->fixed;
		out->end = in->end;
		out->pos = in->pos;
		out->count = in->count;
		out->width = d;
		out->data_len = (size_t)in->count * d * sizeof(float);
		/* little-endian hosts only (checked at start) */
		if ((out->data = malloc(out->data_len)) == NULL)
			fail(job, "", "out of memory");
		else
			memcpy(out->data, hidden, out->data_len);
	}
	post(c, job);
}

/* One decode pass over the jobs taken together (same temperature when
 * this host samples). */
static void
ar_pass(sc *c, sc_job **jobs, int nj)
{
	int d = c->spec.width, n = c->spec.window, rows = 0, k, r, rc;
	kn_decode_seq *seqs = calloc((size_t)nj, sizeof(*seqs));
	int32_t *sym = NULL, *picked = calloc((size_t)nj, sizeof(int32_t));
	float *hidden, *u = calloc((size_t)nj, sizeof(float));
	sc_job **live = calloc((size_t)nj, sizeof(*live));
	char err[KN_ERR_LEN];
	double t0;
	int nl = 0;

	for (k = 0; k < nj; k++)
		rows += jobs[k]->in.count;
	hidden = malloc((size_t)rows * d * sizeof(float));
	if (c->o.ar_first)
		sym = malloc((size_t)rows * sizeof(int32_t));
	if (seqs == NULL || picked == NULL || u == NULL || live == NULL ||
	    hidden == NULL || (c->o.ar_first && sym == NULL)) {
		for (k = 0; k < nj; k++) {
			fail(jobs[k], "", "out of memory");
			post(c, jobs[k]);
		}
		goto out;
	}
	for (k = 0, rows = 0; k < nj; k++) {
		sc_job *job = jobs[k];
		struct cache *e = cache_for(c, job);

		if (e == NULL) {
			post(c, job);
			continue;
		}
		if (c->o.ar_first)
			memcpy(sym + rows, job->sym,
			    (size_t)job->in.count * sizeof(int32_t));
		else
			memcpy(hidden + (size_t)rows * d, job->in.data,
			    job->in.data_len);
		seqs[nl] = (kn_decode_seq){ e->kv, job->in.pos, job->in.count };
		if (c->o.ar_last)
			u[nl] = bt_ar_uniform(job->in.seed, n,
			    job->in.pos + job->in.count, c->ar_scratch);
		live[nl++] = job;
		rows += job->in.count;
	}
	if (nl == 0)
		goto out;
	t0 = kn_now();
	rc = kn_model_decode(c->causal, seqs, nl, c->o.ar_first ? sym : NULL,
	    hidden, u, (float)live[0]->in.temperature, c->o.ar_last ? picked :
	    NULL, err);
	for (k = 0, r = 0; k < nl; r += live[k]->in.count, k++) {
		live[k]->compute_us += (uint64_t)((kn_now() - t0) * 1e6);
		if (rc != 0) {
			fail(live[k], "decoding failed: ", err);
			cache_drop(c, live[k]->in.id);
			post(c, live[k]);
		} else
			ar_output(c, live[k], hidden + (size_t)r * d, picked[k]);
	}
out:
	free(seqs); free(sym); free(picked); free(hidden); free(u); free(live);
}

static void
ar_run(sc *c, sc_job *list)
{
	sc_job *batch[256];
	int nb;

	while (list != NULL) {
		sc_job *j, **prev, *lead = list;
		int rows = 0, cap = c->o.max_batch * c->spec.window;

		/* the lead and what shares its temperature, within the rows
		 * one pass takes; the rest wait for the next pass */
		nb = 0;
		for (prev = &list; (j = *prev) != NULL && nb < 256;) {
			if ((!c->o.ar_last || j->in.temperature ==
			    lead->in.temperature) && rows + j->in.count <= cap) {
				*prev = j->next;
				batch[nb++] = j;
				rows += j->in.count;
			} else
				prev = &j->next;
		}
		ar_pass(c, batch, nb);
	}
}

static int
ar_accept(sc *c, sc_job *job)
{
	const pl_frame *in = &job->in;

	if (c->causal == NULL) {
		fail(job, "", "this host does not serve the autoregressive "
		    "baseline (no causal checkpoint at start)");
		return -1;
	}
	if (in->count < 1 || in->pos + in->count > c->spec.window ||
	    in->end > c->spec.window || (c->o.ar_first ? job->sym == NULL :
	    in->width != c->spec.width)) {
		char why[96];

		snprintf(why, sizeof(why), "positions %d+%d, width %d; window "
		    "%d, width %d", in->pos, in->count, in->width,
		    c->spec.window, c->spec.width);
		fail(job, "autoregressive frame does not fit this host: ",
		    why);
		return -1;
	}
	return 0;
}

/* The thread ----------------------------------------------------------- */

static void *
run(void *arg)
{
	sc *c = arg;

	for (;;) {
		sc_job *jobs, *j, *next, *ar = NULL, **ar_tail = &ar;

		pthread_mutex_lock(&c->lock);
		while (!c->stop && c->in_head == NULL && c->active == NULL) {
			struct timespec ts;

			/* wake now and then to evict idle caches */
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&c->wake, &c->lock, &ts);
			if (c->caches != NULL)
				break;
		}
		if (c->stop) {
			pthread_mutex_unlock(&c->lock);
			break;
		}
		jobs = c->in_head;
		c->in_head = c->in_tail = NULL;
		pthread_mutex_unlock(&c->lock);
		for (j = jobs; j != NULL; j = next) {
			next = j->next;
			j->next = NULL;
			switch (j->kind) {
			case SC_END:
				if (c->causal != NULL)
					cache_drop(c, j->in.id);
				sc_job_free(j);
				break;
			case SC_BT:
				if (bt_begin(c, j) != 0)
					post(c, j);
				break;
			case SC_AR:
				if (ar_accept(c, j) != 0)
					post(c, j);
				else {
					*ar_tail = j;
					ar_tail = &j->next;
				}
				break;
			}
		}
		if (ar != NULL)
			ar_run(c, ar);
		if (c->active != NULL)
			bt_round(c);
		if (c->caches != NULL)
			cache_evict_idle(c, kn_now());
	}
	return NULL;
}

static void
on_async(uv_async_t *h)
{
	sc *c = h->data;
	sc_job *j, *next;

	pthread_mutex_lock(&c->lock);
	j = c->out_head;
	c->out_head = c->out_tail = NULL;
	pthread_mutex_unlock(&c->lock);
	for (; j != NULL; j = next) {
		next = j->next;
		j->next = NULL;
		c->done(c->ctx, j);
	}
}

static int
load_models(sc *c, char *note, size_t notelen, char *err)
{
	const sc_opts *o = &c->o;
	kn_model_shape bs = pr_spec_block_shape(&c->spec);
	kn_model_shape cs = pr_spec_reference_shape(&c->spec, 1);
	int b, rc;
	char why[KN_ERR_LEN];

	note[0] = '\0';
	for (b = o->block_lo; b <= o->block_hi; b++) {
		if (o->logical) {
			rc = kn_model_create_inference(&c->blocks[b], &bs, o->be,
			    o->max_batch, o->storage, err);
			if (rc == 0)
				kn_model_init(c->blocks[b], c->spec.seed * 1000003u +
				    (uint64_t)b);
		} else
			rc = sm_load_model(&c->blocks[b], &c->spec, o->run_id,
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

		rc = sm_load_model(&full, &c->spec, o->run_id, o->dir, BT_CAUSAL,
		    0, o->be, 1, why);
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

int
sc_start(sc **out, uv_loop_t *loop, const sc_opts *o,
    void (*done)(void *, sc_job *), void *ctx, char *note, size_t notelen,
    char *err)
{
	sc *c = calloc(1, sizeof(*c));
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
	if (rc != 0) {
		for (int b = 0; b <= PR_MAX_BLOCKS; b++)
			kn_model_free(c->blocks[b]);
		kn_model_free(c->causal);
		free(c->ar_scratch);
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->wake, NULL);
	uv_async_init(loop, &c->async, on_async);
	c->async.data = c;
	if (pthread_create(&c->thread, NULL, run, c) != 0) {
		uv_close((uv_handle_t *)&c->async, NULL);
		return kn_error(err, KN_EIO, "cannot start the compute thread");
	}
	c->started = 1;
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
	pthread_mutex_lock(&c->lock);
	job->next = NULL;
	if (c->in_tail != NULL)
		c->in_tail->next = job;
	else
		c->in_head = job;
	c->in_tail = job;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
}

void
sc_cache_usage(sc *c, int *count, size_t *bytes)
{
	pthread_mutex_lock(&c->lock);
	*count = c->ncaches;
	*bytes = c->cache_used;
	pthread_mutex_unlock(&c->lock);
}

static void
on_closed(uv_handle_t *h)
{
	sc *c = h->data;
	void (*closed)(void *) = c->closed;
	void *arg = c->closed_arg;
	sc_job *j, *next;
	struct bt_state *st, *snext;
	int b;

	for (j = c->in_head; j != NULL; j = next) {
		next = j->next;
		sc_job_free(j);
	}
	for (j = c->out_head; j != NULL; j = next) {
		next = j->next;
		sc_job_free(j);
	}
	for (st = c->active; st != NULL; st = snext) {
		snext = st->next_active;
		sc_job_free(st->job);
		bt_free(st);
	}
	while (c->caches != NULL)
		cache_drop(c, c->caches->id);
	for (b = 0; b <= PR_MAX_BLOCKS; b++)
		kn_model_free(c->blocks[b]);
	kn_model_free(c->causal);
	free(c->ar_scratch);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->wake);
	free(c);
	if (closed != NULL)
		closed(arg);
}

void
sc_stop(sc *c, void (*closed)(void *), void *arg)
{
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	c->closed = closed;
	c->closed_arg = arg;
	uv_close((uv_handle_t *)&c->async, on_closed);
}
