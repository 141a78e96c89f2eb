/* blocktraind -S on a SOMA spec: a host that serves one or more experts
 * (DESIGN section 3) to clients, each host on its own (no ring).  A
 * score frame gets the per-byte log-probabilities of its windows under
 * one expert (one batched pass); a step frame feeds bytes to a session
 * whose LSTM state the host keeps, and gets the next byte's
 * log-probabilities.  The client routes and mixes (daemon/pipeline/soma_client.c).
 * Compute runs on the loop: an expert is small and each host is its own
 * process, so hosts still work in parallel. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "soma/model_file.h"
#include "soma/step.h"
#include "soma/trainer.h"

/* Windows per pass of a score frame: sa_score's, so the floats match
 * shardmeter eval's. */
#define SS_SCORE_BATCH 64
#define SS_MAX_SESSIONS 65536
#define SS_CONN_SESSIONS 4096
/* Bytes predicted per window a host scores: the work space of a pass
 * grows with it. */
#define SS_MAX_WIDTH 8192

typedef struct ss_session {
	conn *owner;
	uint64_t id;
	int expert, pos;
	struct ss_session *next;
	float state[];
} ss_session;

typedef struct {
	kn_soma_model *m;       /* scoring */
	sa_stepper st;          /* sessions */
} ss_expert;

struct ss_host {
	int lo, hi;             /* experts served */
	kn_soma_shape shape;
	ss_expert *x;           /* hi - lo + 1 */
	ss_session *sessions;
	int nsessions;
	uint64_t scored, steps;
};

static int
load_expert(sv *s, ss_expert *x, int e, float *body, float *dec, char *err)
{
	char path[PR_PATH_LEN + 32];
	pr_ckpt_meta want = { .block = e, .kind = "expert" };
	int rc;

	snprintf(path, sizeof(path), "%s/expert-%d.ckpt", s->cfg.state_dir, e);
	snprintf(want.run_id, sizeof(want.run_id), "%s", s->run_id);
	if ((rc = sa_model_load(path, &want, &s->soma->shape, body, dec, NULL,
	    err)) != 0)
		return rc;
	if ((rc = kn_soma_create(&x->m, &s->soma->shape, s->be, err)) != 0 ||
	    (rc = kn_soma_set_body(x->m, body, err)) != 0 ||
	    (rc = kn_soma_set_decoder(x->m, dec, err)) != 0)
		return rc;
	return sa_stepper_init(&x->st, &s->soma->shape, body, dec, err);
}

int
ss_start(sv *s, char *err)
{
	const ph_host *me = &s->hosts.v[s->self];
	float *body, *dec;
	ss_host *q;
	int e, rc = KN_OK;

	if ((q = calloc(1, sizeof(*q))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	s->soma = q;
	q->lo = me->expert_lo;
	q->hi = me->expert_hi;
	q->shape = sa_expert_shape(&s->spec);
	q->x = calloc((size_t)(q->hi - q->lo + 1), sizeof(*q->x));
	body = malloc(kn_soma_body_params(&q->shape) * sizeof(float));
	dec = malloc(kn_soma_decoder_params(&q->shape) * sizeof(float));
	if (q->x == NULL || body == NULL || dec == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	for (e = q->lo; e <= q->hi && rc == 0; e++)
		rc = load_expert(s, &q->x[e - q->lo], e, body, dec, err);
	free(body);
	free(dec);
	return rc;
}

static void __attribute__((format(printf, 3, 4)))
send_err(conn *c, uint64_t id, const char *fmt, ...)
{
	pl_frame f = { .type = PL_ERR, .id = id };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f.message, sizeof(f.message), fmt, ap);
	va_end(ap);
	sv_conn_send(c, &f);
}

/* The expert of f if this host serves it, else NULL with the error
 * sent. */
static ss_expert *
expert_of(ss_host *q, conn *c, const pl_frame *f)
{
	if (f->expert < q->lo || f->expert > q->hi) {
		send_err(c, f->id, "expert %d is not served here (this host "
		    "serves %d-%d)", f->expert, q->lo, q->hi);
		return NULL;
	}
	return &q->x[f->expert - q->lo];
}

static void
handle_score(sv *s, conn *c, const pl_frame *f)
{
	ss_host *q = s->soma;
	ss_expert *x = expert_of(q, c, f);
	pl_frame out = { .type = PL_LOGP, .id = f->id };
	size_t T = (size_t)f->width, n;
	int32_t *tok = NULL;
	float *logp = NULL;
	char err[KN_ERR_LEN];
	double t0 = kn_now();
	int i, rc = 0;

	if (x == NULL)
		return;
	if (f->width > SS_MAX_WIDTH) {
		send_err(c, f->id, "windows of %d bytes: a host scores at most "
		    "%d", f->width, SS_MAX_WIDTH);
		return;
	}
	n = (size_t)f->count * T;
	tok = malloc((size_t)SS_SCORE_BATCH * (T + 1) * sizeof(int32_t));
	logp = malloc(n * sizeof(float));
	if (tok == NULL || logp == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < f->count && rc == 0; i += SS_SCORE_BATCH) {
		int b = f->count - i < SS_SCORE_BATCH ? f->count - i :
		    SS_SCORE_BATCH;
		size_t j;

		for (j = 0; j < (size_t)b * (T + 1); j++)
			tok[j] = f->data[(size_t)i * (T + 1) + j];
		rc = kn_soma_target_logprobs(x->m, tok, b, (int)T,
		    logp + (size_t)i * T, err);
	}
	free(tok);
	if (rc != 0) {
		pl_frame e = { .type = PL_ERR, .id = f->id };

		snprintf(e.message, sizeof(e.message), "scoring: %.200s", err);
		sv_conn_send(c, &e);
		free(logp);
		return;
	}
	/* little-endian float32 on the wire, as the hosts' own floats */
	out.expert = f->expert;
	out.count = f->count;
	out.width = f->width;
	out.data = (unsigned char *)logp;
	out.data_len = n * sizeof(float);
	out.compute_us = (uint64_t)((kn_now() - t0) * 1e6);
	sv_conn_send(c, &out);
	free(logp);
	q->scored += (uint64_t)f->count;
}

static ss_session *
session_find(ss_host *q, conn *c, uint64_t id, int expert)
{
	ss_session *p;

	for (p = q->sessions; p != NULL; p = p->next)
		if (p->owner == c && p->id == id && p->expert == expert)
			return p;
	return NULL;
}

static int
conn_sessions(const ss_host *q, const conn *c)
{
	const ss_session *p;
	int n = 0;

	for (p = q->sessions; p != NULL; p = p->next)
		n += p->owner == c;
	return n;
}

/* Bytes for a session: pos 0 opens it, else pos must be what it has
 * seen.  Every check comes before the state is touched. */
static void
handle_step(sv *s, conn *c, const pl_frame *f)
{
	ss_host *q = s->soma;
	ss_expert *x = expert_of(q, c, f);
	pl_frame out = { .type = PL_DIST, .id = f->id };
	float logp[256];
	ss_session *p;
	size_t i, len = sa_step_state_len(&q->shape);
	double t0 = kn_now();

	if (x == NULL)
		return;
	p = session_find(q, c, f->id, f->expert);
	if (f->pos == 0 && p != NULL) {
		send_err(c, f->id, "session %llu of expert %d is open "
		    "already (pos 0 opens one)", (unsigned long long)f->id,
		    f->expert);
		return;
	}
	if (f->pos > 0 && (p == NULL || p->pos != f->pos)) {
		if (p == NULL)
			send_err(c, f->id, "no open session %llu of expert %d "
			    "(pos 0 opens one)", (unsigned long long)f->id,
			    f->expert);
		else
			send_err(c, f->id, "the session of expert %d has seen "
			    "%d bytes, not %d", f->expert, p->pos, f->pos);
		return;
	}
	if (p == NULL) {
		if (q->nsessions >= SS_MAX_SESSIONS ||
		    conn_sessions(q, c) >= SS_CONN_SESSIONS) {
			send_err(c, f->id, "too many open sessions (%d on the "
			    "host, %d per connection); end some", SS_MAX_SESSIONS,
			    SS_CONN_SESSIONS);
			return;
		}
		if ((p = calloc(1, sizeof(*p) + len * sizeof(float))) == NULL) {
			send_err(c, f->id, "out of memory");
			return;
		}
		p->owner = c;
		p->id = f->id;
		p->expert = f->expert;
		p->next = q->sessions;
		q->sessions = p;
		q->nsessions++;
	}
	for (i = 0; i < f->data_len; i++)
		sa_step(&x->st, p->state, f->data[i], i + 1 == f->data_len ?
		    logp : NULL);
	p->pos += (int)f->data_len;
	q->steps += f->data_len;
	out.expert = f->expert;
	out.pos = p->pos;
	out.data = (unsigned char *)logp;
	out.data_len = sizeof(logp);
	out.compute_us = (uint64_t)((kn_now() - t0) * 1e6);
	sv_conn_send(c, &out);
}

/* The sessions of c (id: only those of id; all with all set). */
static void
sessions_drop(ss_host *q, const conn *c, uint64_t id, int all)
{
	ss_session **pp = &q->sessions, *p;

	while ((p = *pp) != NULL) {
		if (p->owner == c && (all || p->id == id)) {
			*pp = p->next;
			free(p);
			q->nsessions--;
		} else
			pp = &p->next;
	}
}

void
ss_dispatch(sv *s, conn *c, pl_frame *f)
{
	switch (f->type) {
	case PL_SCORE:
		handle_score(s, c, f);
		break;
	case PL_STEP:
		handle_step(s, c, f);
		break;
	case PL_END:
		sessions_drop(s->soma, c, f->id, 0);
		break;
	default:
		send_err(c, f->id, "a SOMA host takes score, step and end "
		    "frames, not %s", pl_type_name(f->type));
		break;
	}
	pl_frame_clear(f);
}

void
ss_conn_gone(sv *s, conn *c)
{
	if (s->soma != NULL)
		sessions_drop(s->soma, c, 0, 1);
}

void
ss_stop(sv *s)
{
	ss_host *q = s->soma;
	int e;

	if (q == NULL)
		return;
	log_info("pipeline: SOMA experts %d-%d: %llu windows scored, %llu "
	    "bytes stepped", q->lo, q->hi, (unsigned long long)q->scored,
	    (unsigned long long)q->steps);
	while (q->sessions != NULL) {
		ss_session *p = q->sessions;

		q->sessions = p->next;
		free(p);
	}
	for (e = 0; q->x != NULL && e <= q->hi - q->lo; e++) {
		kn_soma_free(q->x[e].m);
		sa_stepper_free(&q->x[e].st);
	}
	free(q->x);
	free(q);
	s->soma = NULL;
}
