/* The pipeline host's autoregressive batcher, on the compute thread: the
 * KV cache of each request over this host's causal layers, and one decode
 * pass over the new positions of every request that shares a temperature.
 * serve_compute.c feeds it the jobs. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"

/* One request's KV cache over this host's causal layers. */
struct cache {
	uint64_t id;
	kn_kv *kv;
	double used;
	struct cache *next;
};

static struct cache *
cache_find(sc *c, uint64_t id)
{
	struct cache *e;

	for (e = c->caches; e != NULL; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

void
sc__ar_drop(sc *c, uint64_t id)
{
	struct cache **prev, *e;

	for (prev = &c->caches; (e = *prev) != NULL; prev = &e->next)
		if (e->id == id) {
			*prev = e->next;
			kn_kv_free(e->kv);
			free(e);
			atomic_fetch_sub(&c->ncaches, 1);
			return;
		}
}

void
sc__ar_evict_idle(sc *c, double t)
{
	struct cache *e, *nx;
	int evicted = 0;

	for (e = c->caches; e != NULL; e = nx) {
		nx = e->next;
		if (t - e->used > c->o.idle_s) {
			sc__ar_drop(c, e->id);
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
	struct cache *e = cache_find(c, job->in.id);
	char err[KN_ERR_LEN];
	size_t used;
	int held;

	if (job->in.pos == 0) {
		if (e != NULL)
			sc__ar_drop(c, job->in.id);
		held = atomic_load(&c->ncaches);
		used = (size_t)held * c->kv_bytes;
		if (used + c->kv_bytes > c->o.cache_bytes) {
			char why[128];

			snprintf(why, sizeof(why), "busy: the KV caches are full "
			    "(%d requests hold %.0f MiB); try again", held,
			    used / 1048576.0);
			sc__fail(job, "", why);
			return NULL;
		}
		if ((e = calloc(1, sizeof(*e))) == NULL ||
		    kn_kv_create(&e->kv, c->causal, err) != 0) {
			free(e);
			sc__fail(job, "", "cannot allocate a KV cache");
			return NULL;
		}
		e->id = job->in.id;
		e->next = c->caches;
		c->caches = e;
		atomic_fetch_add(&c->ncaches, 1);
	} else if (e == NULL || kn_kv_len(e->kv) != job->in.pos) {
		sc__fail(job, "", "no KV cache for this request here (evicted "
		    "as idle, or the host restarted)");
		return NULL;
	}
	e->used = kn_now();
	return e;
}

static void
ar_output(sc *c, sc_job *job, const float *hidden, int32_t byte,
    const float *lp, const unsigned char *top)
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
		/* its logprobs, of the PL_LOGPROBS_MAX alternatives computed
		 * the request's own */
		if (in->lpk > 0 && lp != NULL) {
			out->lpk = in->lpk;
			out->lp_len = (size_t)in->lpk;
			out->lpb_len = (size_t)in->lpk - 1;
			out->lp = malloc(out->lp_len * sizeof(float));
			out->lpb = malloc(out->lpb_len + 1);
			if (out->lp == NULL || out->lpb == NULL) {
				sc__fail(job, "", "out of memory");
				sc__post(c, job);
				return;
			}
			memcpy(out->lp, lp, out->lp_len * sizeof(float));
			memcpy(out->lpb, top, out->lpb_len);
		} else if (in->lpk > 0) {
			sc__fail(job, "", "no logprobs were computed");
			sc__post(c, job);
			return;
		}
	} else {
		out->type = PL_AR;
		out->temperature = in->temperature;
		out->seed = in->seed;
		out->fixed = in->fixed;
		out->end = in->end;
		out->pos = in->pos;
		out->count = in->count;
		out->width = d;
		out->lpk = in->lpk;
		out->data_len = (size_t)in->count * d * sizeof(float);
		/* little-endian hosts only (checked at start) */
		if ((out->data = malloc(out->data_len)) == NULL)
			sc__fail(job, "", "out of memory");
		else
			memcpy(out->data, hidden, out->data_len);
	}
	sc__post(c, job);
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
	float *lp = NULL;
	unsigned char *top = NULL;
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
			sc__fail(jobs[k], "", "out of memory");
			sc__post(c, jobs[k]);
		}
		goto out;
	}
	for (k = 0, rows = 0; k < nj; k++) {
		sc_job *job = jobs[k];
		struct cache *e = cache_for(c, job);

		if (e == NULL) {
			sc__post(c, job);
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
	/* the logprobs of each byte, where one of the requests asks */
	for (k = 0; k < nl && rc == 0 && c->o.ar_last && lp == NULL; k++)
		if (live[k]->in.lpk > 0) {
			lp = malloc((size_t)nl * (PL_LOGPROBS_MAX + 1) *
			    sizeof(float));
			top = malloc((size_t)nl * PL_LOGPROBS_MAX);
			rc = lp == NULL || top == NULL ? kn_error(err, KN_ENOMEM,
			    "out of memory") : kn_model_head_logprobs(c->causal,
			    nl, (float)live[0]->in.temperature, picked,
			    PL_LOGPROBS_MAX, lp, top, err);
		}
	for (k = 0, r = 0; k < nl; r += live[k]->in.count, k++) {
		live[k]->compute_us += (uint64_t)((kn_now() - t0) * 1e6);
		if (rc != 0) {
			sc__fail(live[k], "decoding failed: ", err);
			sc__ar_drop(c, live[k]->in.id);
			sc__post(c, live[k]);
		} else
			ar_output(c, live[k], hidden + (size_t)r * d, picked[k],
			    lp != NULL ? lp + (size_t)k * (PL_LOGPROBS_MAX + 1) :
			    NULL, top != NULL ? top + (size_t)k *
			    PL_LOGPROBS_MAX : NULL);
	}
out:
	free(seqs); free(sym); free(picked); free(hidden); free(u); free(live);
	free(lp); free(top);
}

static int
in_batch(sc_job *const *batch, int nb, uint64_t id)
{
	int i;

	for (i = 0; i < nb; i++)
		if (batch[i]->in.id == id)
			return 1;
	return 0;
}

void
sc__ar_run(sc *c, sc_job *list)
{
	sc_job *batch[256];
	int nb;

	while (list != NULL) {
		sc_job *j, **prev, *lead = list;
		int rows = 0, cap = c->o.max_batch * c->spec.window;

		/* the lead and what shares its temperature, within the rows
		 * one pass takes; the rest wait for the next pass, as does a
		 * second job of a request already in it (a traversal sent
		 * again after a failover), whose cache it would replace */
		nb = 0;
		for (prev = &list; (j = *prev) != NULL && nb < 256;) {
			if ((!c->o.ar_last || j->in.temperature ==
			    lead->in.temperature) && rows + j->in.count <=
			    cap && !in_batch(batch, nb, j->in.id)) {
				*prev = j->next;
				batch[nb++] = j;
				rows += j->in.count;
			} else
				prev = &j->next;
		}
		ar_pass(c, batch, nb);
	}
}

int
sc__ar_accept(sc *c, sc_job *job)
{
	const pl_frame *in = &job->in;

	if (c->causal == NULL) {
		sc__fail(job, "", "this host does not serve the autoregressive "
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
		sc__fail(job, "autoregressive frame does not fit this host: ",
		    why);
		return -1;
	}
	return 0;
}

void
sc__ar_free_all(sc *c)
{
	while (c->caches != NULL)
		sc__ar_drop(c, c->caches->id);
}
