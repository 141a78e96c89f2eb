/* One SOMA model trained in this process: the loop, its validation and
 * schedule, its compute count and its checkpoint. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/clock.h"
#include "kernels/eggroll.h"
#include "kernels/error.h"
#include "kernels/spsa.h"
#include "soma/model_file.h"
#include "soma/text.h"
#include "soma/trainer.h"

#define VALID_BATCH 32
/* The stream of a kind's draws: experts 0..63 keep their index, so an
 * expert's directions are those of (seed, expert, step, j) as DESIGN
 * section 3 has them; the others sit far above. */
#define STREAM_SEED (1u << 20)
#define STREAM_CONTROL (2u << 20)
/* EGGROLL's perturbation scale against SPSA's eps: a rank-r product of
 * normals moves every entry, so it is taken larger (our choice) */
#define EGG_SIGMA_MULT 10.0

static const char *const kind_names[] = { "seed", "expert", "spsa",
    "eggroll", "bptt" };

const char *
sa_kind_name(sa_kind k)
{
	return kind_names[k];
}

kn_soma_shape
sa_expert_shape(const pr_spec *s)
{
	kn_soma_shape m = { s->soma.width, s->soma.mlp_mult, s->soma.layers };

	return m;
}

kn_soma_shape
sa_control_shape(const pr_spec *s)
{
	kn_soma_shape e = sa_expert_shape(s), m = e;
	size_t want = kn_soma_body_params(&e) * (size_t)s->soma.experts;

	for (;;) {
		kn_soma_shape next = m;

		next.width++;
		if (kn_soma_body_params(&next) > want)
			return m;
		m = next;
	}
}

int
sa_expert_decoder_learns(const pr_spec *s)
{
	return strcmp(s->soma.expert_decoder, "delta") == 0;
}

uint64_t
sa_step_positions(const pr_spec *s, sa_kind k, int P)
{
	uint64_t bt = (uint64_t)s->soma.batch * (uint64_t)s->soma.window;

	if (P <= 0)
		P = s->soma.perturbations;
	switch (k) {
	case SA_BPTT:
		return bt;
	case SA_EXPERT:
		/* and the delta rule's pass where the expert's decoder
		 * learns */
		return (2 * (uint64_t)P + sa_expert_decoder_learns(s)) * bt;
	default:
		return (2 * (uint64_t)P + 1) * bt;
	}
}

uint64_t
sa_soma_positions(const pr_spec *s)
{
	return (uint64_t)s->soma.seed_steps * sa_step_positions(s, SA_SEED, 0) +
	    (uint64_t)s->soma.experts * (uint64_t)s->soma.steps *
	    sa_step_positions(s, SA_EXPERT, 0);
}

double
sa_soma_macs(const pr_spec *s)
{
	kn_soma_shape e = sa_expert_shape(s);

	return (double)sa_soma_positions(s) * (double)kn_soma_forward_macs(&e);
}

uint64_t
sa_control_equal_macs_positions(const pr_spec *s)
{
	kn_soma_shape e = sa_expert_shape(s), c = sa_control_shape(s);
	uint64_t pos = sa_soma_positions(s), me = kn_soma_forward_macs(&e);
	uint64_t mc = kn_soma_forward_macs(&c);

	/* floor(pos me / mc) without forming pos me, which could pass
	 * 2^64 for a long spec */
	return pos / mc * me + pos % mc * me / mc;
}

/* ---- the loop's state ---- */

struct trainer {
	const sa_train_opts *o;
	const pr_spec *spec;
	kn_soma_shape shape;
	kn_soma_model *m;
	const kn_backend *be;
	sa_text text;
	int B, T, P;
	size_t nbody, ndec;
	float *theta;           /* host body */
	int32_t *tokens;        /* (B, T+1) */
	int32_t *vtokens;       /* (VALID_BATCH, T+1) */
	int nvalid;
	float *dm, *dv;         /* backend: decoder Adam moments */
	float *bm, *bv;         /* backend: body Adam moments (BPTT) */
	int learn_decoder;
	kn_spsa spsa;
	kn_egg egg;
	int have_spsa, have_egg;
	double best;            /* EGGROLL's plateau, as kn_spsa_plateau */
	int stale;
	uint64_t stream;
	FILE *log;
};

/* BPTT's learning rate: the caller's, or [soma] lr */
static double
trainer_lr(const struct trainer *t)
{
	return t->o->lr > 0 ? t->o->lr : t->spec->soma.lr;
}

static int
eval_population(void *ctx, const float *thetas, int K, float *losses,
    char *err)
{
	struct trainer *t = ctx;

	return kn_soma_population_loss(t->m, thetas, K, t->tokens, t->B,
	    t->T, losses, err);
}

/* The mean loss of the model's body over the validation windows. */
static int
validate(struct trainer *t, double *out, char *err)
{
	double sum = 0;
	int i, rc;

	for (i = 0; i < t->nvalid; i += VALID_BATCH) {
		int b, n = t->nvalid - i < VALID_BATCH ? t->nvalid - i :
		    VALID_BATCH;
		double l;

		for (b = 0; b < n; b++)
			sa_text_valid_window(&t->text, i + b, t->nvalid, t->T,
			    t->vtokens + (size_t)b * (t->T + 1));
		if ((rc = kn_soma_loss(t->m, t->vtokens, n, t->T, &l,
		    err)) != 0)
			return rc;
		sum += l * n;
	}
	*out = sum / t->nvalid;
	return KN_OK;
}

static float *
be_zeros(const kn_backend *be, size_t n)
{
	return be->alloc(n * sizeof(float));
}

static int
trainer_open(struct trainer *t, const sa_train_opts *o, char *err)
{
	const pr_spec *s = o->spec;
	int rc;

	memset(t, 0, sizeof(*t));
	t->o = o;
	t->spec = s;
	t->be = o->be;
	t->B = s->soma.batch;
	t->T = s->soma.window;
	t->P = o->P > 0 ? o->P : s->soma.perturbations;
	t->shape = o->kind == SA_SEED || o->kind == SA_EXPERT ?
	    sa_expert_shape(s) : sa_control_shape(s);
	t->learn_decoder = o->kind != SA_EXPERT ||
	    sa_expert_decoder_learns(s);
	t->best = HUGE_VAL;
	t->stream = o->kind == SA_EXPERT ? (uint64_t)o->expert :
	    o->kind == SA_SEED ? STREAM_SEED :
	    STREAM_CONTROL + (uint64_t)o->kind * 65536 + (uint64_t)t->P;
	if ((rc = kn_soma_create(&t->m, &t->shape, t->be, err)) != 0)
		return rc;
	if ((rc = kn_soma_init(t->m, s->seed ^ (t->stream *
	    0x9e3779b97f4a7c15ull), err)) != 0)
		return rc;
	t->nbody = kn_soma_body_params(&t->shape);
	t->ndec = kn_soma_decoder_params(&t->shape);
	if ((rc = sa_text_open(&t->text, o->train, o->ntrain,
	    SA_TEXT_VALID_SHARE, t->T, err)) != 0)
		return rc;
	t->nvalid = sa_text_valid_count(&t->text, t->T,
	    o->valid_windows > 0 ? o->valid_windows : 64);
	t->theta = malloc(t->nbody * sizeof(float));
	t->tokens = malloc((size_t)t->B * (t->T + 1) * sizeof(int32_t));
	t->vtokens = malloc((size_t)VALID_BATCH * (t->T + 1) *
	    sizeof(int32_t));
	t->dm = be_zeros(t->be, t->ndec);
	t->dv = be_zeros(t->be, t->ndec);
	if (t->theta == NULL || t->tokens == NULL || t->vtokens == NULL ||
	    t->dm == NULL || t->dv == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if (o->kind == SA_EXPERT) {
		/* the seed's body and decoder, which stays frozen unless
		 * [soma] expert_decoder = delta */
		float *dec = malloc(t->ndec * sizeof(float));
		pr_ckpt_meta want = { .block = 0, .kind = "seed" };

		if (dec == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		snprintf(want.run_id, sizeof(want.run_id), "%s", o->run_id);
		rc = sa_model_load(o->seed_path, &want, &t->shape, t->theta,
		    dec, NULL, err);
		if (rc == 0 && (rc = kn_soma_set_body(t->m, t->theta,
		    err)) == 0)
			rc = kn_soma_set_decoder(t->m, dec, err);
		free(dec);
		if (rc != 0)
			return rc;
	}
	kn_soma_get_body(t->m, t->theta);
	if (o->kind == SA_BPTT) {
		t->bm = be_zeros(t->be, t->nbody);
		t->bv = be_zeros(t->be, t->nbody);
		if (t->bm == NULL || t->bv == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
	} else if (o->kind == SA_EGGROLL) {
		kn_egg_config c = { 0 };
		kn_egg_tensor *et;
		kn_soma_tensor *st;
		int i, n = kn_soma_body_tensors(&t->shape, NULL, 0);

		c.K = 2 * t->P;
		c.rank = s->soma.eggroll_rank;
		c.sigma = (float)(o->eps > 0 ? o->eps :
		    s->soma.eps * EGG_SIGMA_MULT);
		c.lr = (float)(o->lr > 0 ? o->lr : s->soma.lr);
		c.k_max = c.K;
		c.groups = 1;
		c.seed = s->seed ^ t->stream;
		st = calloc((size_t)n, sizeof(*st));
		et = calloc((size_t)n, sizeof(*et));
		if (st == NULL || et == NULL) {
			free(st);
			free(et);
			return kn_error(err, KN_ENOMEM, "out of memory");
		}
		kn_soma_body_tensors(&t->shape, st, n);
		for (i = 0; i < n; i++) {
			et[i].offset = st[i].offset;
			et[i].rows = st[i].rows;
			et[i].cols = st[i].cols;
		}
		rc = kn_egg_init(&t->egg, t->nbody, et, n, &c, err);
		free(st);
		free(et);
		if (rc != 0)
			return rc;
		t->have_egg = 1;
	} else {
		kn_spsa_config c;

		kn_spsa_config_default(&c);
		c.P = t->P;
		c.eps = (float)(o->eps > 0 ? o->eps : s->soma.eps);
		c.lr = (float)(o->lr > 0 ? o->lr : s->soma.lr);
		c.density = (float)s->soma.density;
		c.k_max = 2 * t->P;
		c.mode = KN_SPSA_INDEPENDENT;
		c.groups = 1;
		c.seed = s->seed;
		c.expert = t->stream;
		c.patience = s->soma.patience;
		c.floor = (float)s->soma.lr_floor;
		if ((rc = kn_spsa_init(&t->spsa, t->nbody, &c, err)) != 0)
			return rc;
		t->have_spsa = 1;
	}
	if (o->log_path != NULL) {
		if ((t->log = fopen(o->log_path, "w")) == NULL)
			return kn_error(err, KN_EIO, "%s: cannot write",
			    o->log_path);
		fprintf(t->log, "step,loss,val,lr,eps,positions\n");
	}
	return KN_OK;
}

static void
trainer_close(struct trainer *t)
{
	if (t->log != NULL)
		fclose(t->log);
	if (t->have_spsa)
		kn_spsa_free(&t->spsa);
	if (t->have_egg)
		kn_egg_free(&t->egg);
	if (t->be != NULL) {
		t->be->free(t->dm);
		t->be->free(t->dv);
		t->be->free(t->bm);
		t->be->free(t->bv);
	}
	free(t->theta);
	free(t->tokens);
	free(t->vtokens);
	sa_text_close(&t->text);
	kn_soma_free(t->m);
}

/* Adam on the decoder by the delta rule, the body as it is now. */
static int
decoder_step(struct trainer *t, long step, double lr, char *err)
{
	double loss;
	int rc;

	kn_soma_zero_grad(t->m);
	if ((rc = kn_soma_decoder_delta(t->m, t->tokens, t->B, t->T, &loss,
	    err)) != 0)
		return rc;
	t->be->adamw_update(kn_soma_decoder(t->m), kn_soma_decoder_grad(t->m),
	    t->dm, t->dv, t->ndec, (float)lr, 0.9f, 0.999f, 1e-8f, 0.0f,
	    (int)step + 1, 1.0f);
	return t->be->status(err);
}

/* Whether the delta rule runs at this step: the seed's and the zero-order
 * controls' decoders learn, the latter perhaps for their first
 * decoder_steps only. */
static int
decoder_learns(const struct trainer *t, long step)
{
	return t->learn_decoder && (t->o->decoder_steps <= 0 ||
	    step < t->o->decoder_steps);
}

/* The byte positions a step evaluates: without the delta rule's pass
 * once the decoder has stopped learning. */
static uint64_t
step_cost(const struct trainer *t, long step)
{
	uint64_t per = sa_step_positions(t->spec, t->o->kind, t->P);

	if (t->learn_decoder && t->o->kind != SA_BPTT && !decoder_learns(t,
	    step))
		per -= (uint64_t)t->spec->soma.batch *
		    (uint64_t)t->spec->soma.window;
	return per;
}

/* One step of the kind's optimizer on the batch in t->tokens; its
 * training loss in *loss. */
static int
train_step(struct trainer *t, long step, double *loss, char *err)
{
	kn_zo_stats st;
	int rc;

	if (t->o->kind == SA_BPTT) {
		kn_soma_zero_grad(t->m);
		if ((rc = kn_soma_forward_backward(t->m, t->tokens, t->B,
		    t->T, loss, err)) != 0)
			return rc;
		t->be->adamw_update(kn_soma_body(t->m),
		    kn_soma_body_grad(t->m), t->bm, t->bv, t->nbody,
		    (float)trainer_lr(t), 0.9f, 0.999f, 1e-8f, 0.0f,
		    (int)step + 1, 1.0f);
		t->be->adamw_update(kn_soma_decoder(t->m),
		    kn_soma_decoder_grad(t->m), t->dm, t->dv, t->ndec,
		    (float)trainer_lr(t), 0.9f, 0.999f, 1e-8f, 0.0f,
		    (int)step + 1, 1.0f);
		return t->be->status(err);
	}
	if (t->have_egg)
		rc = kn_egg_step(&t->egg, t->theta, eval_population, t, &st,
		    err);
	else
		rc = kn_spsa_step(&t->spsa, t->theta, eval_population, t, &st,
		    err);
	if (rc != 0)
		return rc;
	*loss = st.loss;
	if ((rc = kn_soma_set_body(t->m, t->theta, err)) != 0)
		return rc;
	if (decoder_learns(t, step))
		return decoder_step(t, step, t->have_egg ? t->egg.cfg.lr :
		    t->spsa.cfg.lr, err);
	return KN_OK;
}

/* The plateau schedule after a validation: SPSA's own, and the same
 * rule for EGGROLL's lr and sigma. */
static void
schedule(struct trainer *t, double val)
{
	const pr_spec *s = t->spec;

	if (t->have_spsa) {
		kn_spsa_plateau(&t->spsa, val);
		return;
	}
	if (!t->have_egg)
		return;
	/* the same improvement threshold as SPSA's default */
	if (!kn_zo_plateau(&t->best, &t->stale, val, 1e-3, s->soma.patience))
		return;
	t->egg.cfg.lr = fmaxf(t->egg.cfg.lr / 2, (float)s->soma.lr_floor);
	t->egg.cfg.sigma = fmaxf(t->egg.cfg.sigma / 2,
	    (float)s->soma.lr_floor);
}

static long
steps_for(const struct trainer *t)
{
	const sa_train_opts *o = t->o;
	uint64_t per = step_cost(t, 0), left = o->budget;
	long n = 0;

	if (o->steps >= 0)
		return o->steps;
	if (o->budget > 0) {
		/* steps that still run the delta rule, then cheaper ones */
		if (o->decoder_steps > 0 && left > (uint64_t)o->decoder_steps *
		    per) {
			n = o->decoder_steps;
			left -= (uint64_t)n * per;
			per = step_cost(t, n);
		}
		return n + (long)((left + per - 1) / per);
	}
	return o->kind == SA_SEED ? t->spec->soma.seed_steps :
	    t->spec->soma.steps;
}

int
sa_train(const sa_train_opts *o, sa_result *res, char *err)
{
	struct trainer t;
	sa_progress p = { 0 };
	double t0, busy = 0, val = NAN;
	int rc, validated;

	memset(res, 0, sizeof(*res));
	if (o->kind == SA_EXPERT && (o->expert < 0 ||
	    o->expert >= o->spec->soma.experts))
		return kn_error(err, KN_EINVAL, "expert %d does not exist: the "
		    "spec has %d", o->expert, o->spec->soma.experts);
	if ((rc = trainer_open(&t, o, err)) != 0)
		goto out;
	t0 = kn_now();
	p.steps = steps_for(&t);
	for (p.step = 0; p.step < p.steps; p.step++) {
		double s0 = kn_now(), loss;

		if (o->stop != NULL && *o->stop)
			break;
		sa_text_batch(&t.text, o->spec->seed, t.stream,
		    (uint64_t)p.step, t.B, t.T, t.tokens);
		if ((rc = train_step(&t, p.step, &loss, err)) != 0)
			goto out;
		busy += kn_now() - s0;
		p.positions += step_cost(&t, p.step);
		p.loss = loss;
		validated = (p.step + 1) % o->spec->soma.eval_every == 0 ||
		    p.step + 1 == p.steps;
		if (validated) {
			if ((rc = validate(&t, &val, err)) != 0)
				goto out;
			schedule(&t, val);
		}
		p.val = val;
		p.lr = t.have_spsa ? t.spsa.cfg.lr : t.have_egg ?
		    t.egg.cfg.lr : trainer_lr(&t);
		p.eps = t.have_spsa ? t.spsa.cfg.eps : t.have_egg ?
		    t.egg.cfg.sigma : 0;
		p.positions_per_s = busy > 0 ? p.positions / busy : 0;
		if (validated && o->validated != NULL &&
		    (rc = o->validated(o->user, t.m, &p, err)) != 0)
			goto out;
		if (t.log != NULL)
			fprintf(t.log, "%ld,%.6f,%.6f,%g,%g,%llu\n",
			    p.step + 1, p.loss, p.val, p.lr, p.eps,
			    (unsigned long long)p.positions);
		if (o->progress != NULL)
			o->progress(o->user, &p);
		if (o->snapshot_at > 0 && res->snapshot_steps == 0 &&
		    p.positions >= o->snapshot_at) {
			if ((rc = sa_train_checkpoint(o, t.m, p.step + 1,
			    o->snapshot_path, err)) != 0)
				goto out;
			res->snapshot_steps = p.step + 1;
			res->snapshot_positions = p.positions;
		}
	}
	if (isnan(val) && (rc = validate(&t, &val, err)) != 0)
		goto out;
	if ((rc = sa_train_checkpoint(o, t.m, p.step, o->out_path, err)) != 0)
		goto out;
	res->steps = p.step;
	res->positions = p.positions;
	res->val = val;
	res->seconds = kn_now() - t0;
out:
	trainer_close(&t);
	return rc;
}

int
sa_train_checkpoint(const sa_train_opts *o, kn_soma_model *m, long steps,
    const char *path, char *err)
{
	const kn_soma_shape *sh = kn_soma_get_shape(m);
	pr_ckpt_meta meta = { .block = o->kind == SA_EXPERT ? o->expert : 0,
	    .step = steps, .round = 0 };
	float *body = malloc(kn_soma_body_params(sh) * sizeof(float));
	float *dec = malloc(kn_soma_decoder_params(sh) * sizeof(float));
	int rc;

	if (body == NULL || dec == NULL) {
		free(body);
		free(dec);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", o->run_id);
	snprintf(meta.kind, sizeof(meta.kind), "%s", sa_kind_name(o->kind));
	kn_soma_get_body(m, body);
	kn_soma_get_decoder(m, dec);
	rc = sa_model_save(path, &meta, sh, body, dec, err);
	free(body);
	free(dec);
	return rc;
}
