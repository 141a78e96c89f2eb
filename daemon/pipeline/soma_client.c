/* SOMA inference's entry: routing, the mixture and sampling, with the
 * experts in this process or on serving hosts. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/pipeline_client.h"
#include "daemon/pipeline/soma_client.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/rng.h"
#include "soma/model_file.h"
#include "soma/step.h"
#include "soma/trainer.h"

/* Windows per score frame: a multiple of the hosts' pass of 64, so their
 * passes are the ones shardmeter eval makes. */
#define SQ_SCORE_CHUNK 2048

struct sq_experts {
	const pr_spec *s;
	kn_soma_shape shape;
	int N, k;
	/* in process */
	kn_soma_model **m;      /* N, for scoring */
	sa_stepper *st;         /* N, for generation */
	/* served */
	int served;
	const ph_list *hosts;
	tls_ctx *tls;
	int timeout_ms;
	pc_conn *conn[PH_MAX_HOSTS];
	uint64_t next_id;
};

/* In process ---------------------------------------------------------- */

int
sq_open_local(sq_experts **out, const pr_spec *s, const char *run_id,
    const char *dir, const kn_backend *be, char *err)
{
	sq_experts *x = calloc(1, sizeof(*x));
	float *body = NULL, *dec = NULL;
	int e, rc = KN_OK;

	*out = NULL;
	if (x == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	x->s = s;
	x->shape = sa_expert_shape(s);
	x->N = s->soma.experts;
	x->k = s->soma.top_k < x->N ? s->soma.top_k : x->N;
	x->m = calloc((size_t)x->N, sizeof(*x->m));
	x->st = calloc((size_t)x->N, sizeof(*x->st));
	body = malloc(kn_soma_body_params(&x->shape) * sizeof(float));
	dec = malloc(kn_soma_decoder_params(&x->shape) * sizeof(float));
	if (x->m == NULL || x->st == NULL || body == NULL || dec == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	for (e = 0; e < x->N && rc == 0; e++) {
		char path[PR_PATH_LEN + 32];
		pr_ckpt_meta want = { .block = e, .kind = "expert" };

		snprintf(path, sizeof(path), "%s/expert-%d.ckpt", dir, e);
		snprintf(want.run_id, sizeof(want.run_id), "%s", run_id);
		if ((rc = sa_model_load(path, &want, &x->shape, body, dec, NULL,
		    err)) == 0 && (rc = kn_soma_create(&x->m[e], &x->shape, be,
		    err)) == 0 && (rc = kn_soma_set_body(x->m[e], body,
		    err)) == 0 && (rc = kn_soma_set_decoder(x->m[e], dec,
		    err)) == 0)
			rc = sa_stepper_init(&x->st[e], &x->shape, body, dec, err);
	}
	free(body);
	free(dec);
	if (rc != 0) {
		sq_close(x);
		return rc;
	}
	*out = x;
	return KN_OK;
}

/* Served ---------------------------------------------------------------- */

int
sq_open_served(sq_experts **out, const pr_spec *s, const ph_list *hosts,
    tls_ctx *tls, int timeout_ms, char *err)
{
	sq_experts *x;
	int rc;

	*out = NULL;
	if ((rc = ph_soma_check(hosts, s->soma.experts, err)) != 0)
		return rc;
	if ((x = calloc(1, sizeof(*x))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	x->s = s;
	x->shape = sa_expert_shape(s);
	x->N = s->soma.experts;
	x->k = s->soma.top_k < x->N ? s->soma.top_k : x->N;
	x->served = 1;
	x->hosts = hosts;
	x->tls = tls;
	x->timeout_ms = timeout_ms;
	x->next_id = 1;
	*out = x;
	return KN_OK;
}

void
sq_close(sq_experts *x)
{
	int i;

	if (x == NULL)
		return;
	for (i = 0; x->m != NULL && i < x->N; i++)
		kn_soma_free(x->m[i]);
	for (i = 0; x->st != NULL && i < x->N; i++)
		sa_stepper_free(&x->st[i]);
	free(x->m);
	free(x->st);
	for (i = 0; i < PH_MAX_HOSTS; i++)
		pc_close(x->conn[i]);
	free(x);
}

/* "expert host ADDR (experts E-F)" for messages. */
static const char *
host_name(const sq_experts *x, int h, char *buf, size_t len)
{
	const ph_host *p = &x->hosts->v[h];

	snprintf(buf, len, "expert host %s (experts %d-%d)", p->addr,
	    p->expert_lo, p->expert_hi);
	return buf;
}

/* The connection to the host of expert e, made on first use; *h its
 * index. */
static int
host_conn(sq_experts *x, int e, int *h, pc_conn **c, char *err)
{
	const ph_host *p;
	char why[KN_ERR_LEN], name[160];
	int rc;

	if ((*h = ph_expert_host(x->hosts, e)) < 0)
		return kn_error(err, KN_EINVAL, "no host serves expert %d", e);
	p = &x->hosts->v[*h];
	if (x->conn[*h] == NULL && (rc = pc_connect(&x->conn[*h], p->addr,
	    p->has_id ? x->tls : NULL, p->has_id ? p->id : NULL,
	    x->timeout_ms, why)) != 0)
		return kn_error(err, rc, "%s is down or refused us: %.200s",
		    host_name(x, *h, name, sizeof(name)), why);
	*c = x->conn[*h];
	return KN_OK;
}

/* After a failed round: answers still on the way must not be taken for
 * the next request's, so every connection is made afresh. */
static void
reset_conns(sq_experts *x)
{
	int i;

	for (i = 0; i < PH_MAX_HOSTS; i++) {
		pc_close(x->conn[i]);
		x->conn[i] = NULL;
	}
}

/* The answer to request id for expert e from host h, of type want;
 * an error frame or a broken connection names the host. */
static int
host_answer(sq_experts *x, int h, uint64_t id, int e, pl_type want,
    pl_frame *f, sq_stats *st, char *err)
{
	char why[KN_ERR_LEN], name[160];
	int rc;

	if ((rc = pc_recv_frame(x->conn[h], f, x->timeout_ms, why)) != 0) {
		/* a connection that failed once is made again next time */
		pc_close(x->conn[h]);
		x->conn[h] = NULL;
		return kn_error(err, rc, "%s: %.200s", host_name(x, h, name,
		    sizeof(name)), why);
	}
	if (f->type == PL_ERR)
		rc = kn_error(err, KN_EINVAL, "%s says: %.200s", host_name(x, h,
		    name, sizeof(name)), f->message);
	else if (f->type != want || f->id != id || f->expert != e)
		rc = kn_error(err, KN_EINVAL, "%s answered with a %s frame for "
		    "id %llu, expert %d (expected %s, %llu, %d)", host_name(x,
		    h, name, sizeof(name)), pl_type_name(f->type),
		    (unsigned long long)f->id, f->expert, pl_type_name(want),
		    (unsigned long long)id, e);
	if (rc != 0)
		pl_frame_clear(f);
	else
		st->compute_us += f->compute_us;
	return rc;
}

/* The mixture ------------------------------------------------------------ */

/* One byte from the mean of k distributions (logp, k x 256) at temp,
 * by the inverse CDF of one uniform, the classes in order. */
static int
mix_sample(const float *logp, int k, double temp, kn_rng *rng)
{
	double p[256], total = 0, u, cum = 0;
	int c, j, best = 0;

	for (c = 0; c < 256; c++) {
		p[c] = 0;
		for (j = 0; j < k; j++)
			p[c] += exp(logp[j * 256 + c]) / k;
		if (p[c] > p[best])
			best = c;
	}
	u = kn_rng_uniform(rng);	/* drawn even at temp 0: same stream */
	if (temp <= 0)
		return best;
	for (c = 0; c < 256; c++) {
		p[c] = p[c] > 0 ? exp(log(p[c] / p[best]) / temp) : 0;
		total += p[c];
	}
	for (c = 0; c < 256; c++) {
		cum += p[c] / total;
		if (u < cum)
			return c;
	}
	for (c = 255; c > 0 && p[c] == 0; c--)
		;
	return c;
}

/* n bytes for the sessions of the k experts in sel (the pos-th bytes on
 * of each; pos 0 opens them), the next byte's log-probabilities into
 * logp (k x 256).  In process: the states in states (k sessions). */
static int
feed(sq_experts *x, uint64_t sid, const int *sel, int pos,
    const unsigned char *bytes, size_t n, float *states, float *logp,
    sq_stats *st, char *err)
{
	size_t len = sa_step_state_len(&x->shape), i;
	int j, h, rc;

	if (!x->served) {
		for (j = 0; j < x->k; j++) {
			float *state = states + (size_t)j * len;

			if (pos == 0)
				memset(state, 0, len * sizeof(float));
			for (i = 0; i < n; i++)
				sa_step(&x->st[sel[j]], state, bytes[i],
				    i + 1 == n ? logp + j * 256 : NULL);
		}
		return KN_OK;
	}
	/* every host reached before anything is sent, then all requests
	 * out, then the answers: one round trip */
	for (j = 0; j < x->k; j++) {
		pc_conn *c;

		if ((rc = host_conn(x, sel[j], &h, &c, err)) != 0)
			return rc;
	}
	for (j = 0; j < x->k; j++) {
		pl_frame f = { .type = PL_STEP, .id = sid, .expert = sel[j],
		    .pos = pos, .data = (unsigned char *)bytes,
		    .data_len = n };
		pc_conn *c;
		char why[KN_ERR_LEN], name[160];

		if ((rc = host_conn(x, sel[j], &h, &c, err)) != 0)
			return rc;
		if ((rc = pc_send_frame(c, &f, why)) != 0) {
			reset_conns(x);
			return kn_error(err, rc, "%s: %.200s", host_name(x, h,
			    name, sizeof(name)), why);
		}
		st->frames++;
	}
	for (j = 0; j < x->k; j++) {
		pl_frame f;

		h = ph_expert_host(x->hosts, sel[j]);
		if ((rc = host_answer(x, h, sid, sel[j], PL_DIST, &f, st,
		    err)) != 0) {
			reset_conns(x);
			return rc;
		}
		memcpy(logp + j * 256, f.data, 256 * sizeof(float));
		pl_frame_clear(&f);
	}
	st->rounds++;
	return KN_OK;
}

/* The sessions of sid go on every host that has one. */
static void
end_sessions(sq_experts *x, uint64_t sid, const int *sel)
{
	int done[PH_MAX_HOSTS] = { 0 }, j, h;
	char why[KN_ERR_LEN];

	for (j = 0; x->served && j < x->k; j++) {
		pl_frame f = { .type = PL_END, .id = sid };

		h = ph_expert_host(x->hosts, sel[j]);
		if (h < 0 || done[h] || x->conn[h] == NULL)
			continue;
		done[h] = 1;
		if (pc_send_frame(x->conn[h], &f, why) != 0) {
			pc_close(x->conn[h]);
			x->conn[h] = NULL;
		}
	}
}

int
sq_generate(sq_experts *x, const sa_router *r, const char *prompt,
    size_t plen, int length, double temp, uint64_t seed,
    unsigned char *out, sq_stats *st, char *err)
{
	size_t len = sa_step_state_len(&x->shape);
	int *sel = malloc((size_t)x->k * sizeof(int));
	float *logp = malloc((size_t)x->k * 256 * sizeof(float));
	float *states = x->served ? NULL : malloc((size_t)x->k * len *
	    sizeof(float));
	uint64_t sid = x->next_id++;
	double t0 = kn_now();
	kn_rng rng;
	int rc, i, got = 0;

	memset(st, 0, sizeof(*st));
	if (sel == NULL || logp == NULL || (!x->served && states == NULL)) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	if (plen < 1 || length < 0) {
		rc = kn_error(err, KN_EINVAL, "SOMA generation needs a prompt "
		    "of at least one byte");
		goto out;
	}
	if ((got = sa_route(r, prompt, plen, (size_t)x->s->soma.route_bytes,
	    x->k, sel, NULL, err)) < 0) {
		rc = got;
		got = 0;
		goto out;
	}
	st->route_s = kn_now() - t0;
	st->k = x->k;
	for (i = 0; i < x->k && i < (int)(sizeof(st->experts) /
	    sizeof(st->experts[0])); i++)
		st->experts[i] = sel[i];
	kn_rng_init(&rng, seed, 0x736f6d61);    /* "soma" */
	rc = feed(x, sid, sel, 0, (const unsigned char *)prompt, plen, states,
	    logp, st, err);
	for (i = 0; i < length && rc == 0; i++) {
		out[i] = (unsigned char)mix_sample(logp, x->k, temp, &rng);
		if (i + 1 < length)
			rc = feed(x, sid, sel, (int)plen + i, out + i, 1, states,
			    logp, st, err);
	}
out:
	if (got > 0)
		end_sessions(x, sid, sel);
	st->wall_s = kn_now() - t0;
	free(sel);
	free(logp);
	free(states);
	return rc;
}

/* Scoring ------------------------------------------------------------------ */

/* The windows idx[0..count) of w, scored by expert e, into lp (count x
 * T): in process as shardmeter eval does, or sent to its host in chunks
 * (answers read later by score_collect). */
static int
score_send(sq_experts *x, const sa_windows *w, int e, const long *idx,
    long count, float *lp, uint64_t *first_id, sq_stats *st, char *err)
{
	size_t W = (size_t)w->T + 1;
	unsigned char *buf;
	long i, b;
	int h, rc = KN_OK;
	pc_conn *c;

	if (!x->served)
		return sa_score(x->m[e], w, idx, count, lp, err);
	if ((rc = host_conn(x, e, &h, &c, err)) != 0)
		return rc;
	if ((buf = malloc((size_t)SQ_SCORE_CHUNK * W)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	*first_id = x->next_id;
	for (i = 0; i < count && rc == 0; i += SQ_SCORE_CHUNK) {
		long n = count - i < SQ_SCORE_CHUNK ? count - i : SQ_SCORE_CHUNK;
		pl_frame f = { .type = PL_SCORE, .id = x->next_id++,
		    .expert = e, .count = (int)n, .width = w->T, .data = buf,
		    .data_len = (size_t)n * W };
		char why[KN_ERR_LEN], name[160];

		for (b = 0; b < n; b++)
			memcpy(buf + (size_t)b * W, w->text + (size_t)idx[i + b] *
			    w->T, W);
		if ((rc = pc_send_frame(c, &f, why)) != 0)
			rc = kn_error(err, rc, "%s: %.200s", host_name(x, h, name,
			    sizeof(name)), why);
		st->frames++;
	}
	free(buf);
	return rc;
}

static int
score_collect(sq_experts *x, int T, int e, long count, float *lp,
    uint64_t id, sq_stats *st, char *err)
{
	int h = ph_expert_host(x->hosts, e), rc;
	long i;

	for (i = 0; i < count; i += SQ_SCORE_CHUNK, id++) {
		long n = count - i < SQ_SCORE_CHUNK ? count - i : SQ_SCORE_CHUNK;
		pl_frame f;

		if ((rc = host_answer(x, h, id, e, PL_LOGP, &f, st, err)) != 0)
			return rc;
		if (f.count != n || f.width != T) {
			pl_frame_clear(&f);
			return kn_error(err, KN_EINVAL, "expert host %s scored %d "
			    "windows of %d, not %ld of %d", x->hosts->v[h].addr,
			    f.count, f.width, n, T);
		}
		memcpy(lp + (size_t)i * T, f.data, f.data_len);
		pl_frame_clear(&f);
	}
	return KN_OK;
}

int
sq_score(sq_experts *x, const sa_router *r, const sa_windows *w,
    double *nats, sq_stats *st, char *err)
{
	size_t nT = (size_t)w->n * w->T, i;
	int *sel = malloc((size_t)w->n * x->k * sizeof(int) + 1);
	long *count = calloc((size_t)x->N, sizeof(long));
	long **idx = calloc((size_t)x->N, sizeof(long *));
	float **lp = calloc((size_t)x->N, sizeof(float *));
	uint64_t *ids = calloc((size_t)x->N, sizeof(uint64_t));
	double *mix = calloc(nT + 1, sizeof(double)), t0 = kn_now(), sum = 0;
	long wi;
	int e, j, rc = KN_OK;

	memset(st, 0, sizeof(*st));
	st->k = x->k;
	if (sel == NULL || count == NULL || idx == NULL || lp == NULL ||
	    ids == NULL || mix == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	if (w->n < 1) {
		rc = kn_error(err, KN_EINVAL, "no whole window of %d bytes to "
		    "score", w->T + 1);
		goto out;
	}
	if ((rc = sa_route_windows(r, w, (size_t)x->s->soma.route_bytes,
	    x->k, sel, err)) < 0)
		goto out;
	rc = KN_OK;
	st->route_s = kn_now() - t0;
	for (e = 0; e < x->N && rc == 0; e++) {
		for (wi = 0; wi < w->n; wi++)
			for (j = 0; j < x->k; j++)
				count[e] += sel[wi * x->k + j] == e;
		if (count[e] == 0)
			continue;
		idx[e] = malloc((size_t)count[e] * sizeof(long));
		lp[e] = malloc((size_t)count[e] * w->T * sizeof(float));
		if (idx[e] == NULL || lp[e] == NULL) {
			rc = kn_error(err, KN_ENOMEM, "out of memory");
			break;
		}
		count[e] = 0;
		for (wi = 0; wi < w->n; wi++)
			for (j = 0; j < x->k; j++)
				if (sel[wi * x->k + j] == e)
					idx[e][count[e]++] = wi;
		rc = score_send(x, w, e, idx[e], count[e], lp[e], &ids[e], st,
		    err);
	}
	for (e = 0; e < x->N && rc == 0 && x->served; e++)
		if (count[e] > 0)
			rc = score_collect(x, w->T, e, count[e], lp[e], ids[e], st,
			    err);
	if (x->served && rc != 0)
		reset_conns(x);
	if (x->served && rc == 0)
		st->rounds = 1;
	/* the mixture, experts in order as shardmeter eval sums it */
	for (e = 0; e < x->N && rc == 0; e++)
		for (wi = 0; wi < count[e]; wi++)
			for (j = 0; j < w->T; j++)
				mix[(size_t)idx[e][wi] * w->T + j] +=
				    exp(lp[e][(size_t)wi * w->T + j]) / x->k;
	for (i = 0; i < nT && rc == 0; i++)
		sum -= log(mix[i]);
	if (rc == 0)
		*nats = sum / (double)nT;
out:
	for (e = 0; idx != NULL && lp != NULL && e < x->N; e++) {
		free(idx[e]);
		free(lp[e]);
	}
	free(sel);
	free(count);
	free(idx);
	free(lp);
	free(ids);
	free(mix);
	st->wall_s = kn_now() - t0;
	return rc;
}
