/* The pipeline host's BlockTrain batcher, on the compute thread: every
 * request in flight advances one step per round, and those at the same
 * block and temperature share one predict pass.  serve_compute.c feeds it
 * the jobs. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/model_blockdecode.h"

/* A BlockTrain request in progress here. */
struct bt_state {
	sc_job *job;
	int32_t *seq;           /* window symbols, KN_MASK undecided */
	float *u;               /* 2n draws of the current step */
	int block;              /* 1-based, running now */
	int j;                  /* its step */
	double p, next;
	int32_t *pos;           /* positions the step predicts (n) */
	int pb;                 /* position blocks: the job's in.pblock + 1 */
	int npos;
	bt_decode dec;          /* the job's decoder */
	int keep;               /* of the npos, those the step decides */
	int taken;              /* in this round's forward passes */
	/* logprobs (job's in.lpk figures, lpk - 1 bytes a position; NULL
	 * when not asked): the pass that decided each position gives its */
	float *lp;
	unsigned char *lpb;
	struct bt_state *next_active;
};

static void
bt_free(struct bt_state *st)
{
	free(st->seq);
	free(st->u);
	free(st->pos);
	free(st->lp);
	free(st->lpb);
	free(st);
}

/* The logprobs of the R rows a pass just sampled (model m, picked) into
 * the positions they decided (pos_of[r]) of their requests (st_of[r]):
 * figures for PL_LOGPROBS_MAX alternatives, of which each request keeps
 * what it asked.  Only when a request of the pass asked; 0 or the
 * kernel's error. */
static int
lp_fill(kn_model *m, struct bt_state **st_of, const int32_t *pos_of, int R,
    float temp, const int32_t *picked, char *err)
{
	const int K = PL_LOGPROBS_MAX, W = K + 1;
	float *lp;
	unsigned char *top;
	int r, j, any = 0, rc;

	for (r = 0; r < R && !any; r++)
		any = st_of[r]->lp != NULL;
	if (!any)
		return KN_OK;
	lp = malloc((size_t)R * W * sizeof(float));
	top = malloc((size_t)R * K + 1);
	if (lp == NULL || top == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	else
		rc = kn_model_head_logprobs(m, R, temp, picked, K, lp, top, err);
	for (r = 0; r < R && rc == 0; r++) {
		struct bt_state *st = st_of[r];
		int k1 = st->job->in.lpk;

		if (st->lp == NULL)
			continue;
		for (j = 0; j < k1; j++)
			st->lp[(size_t)pos_of[r] * k1 + j] =
			    lp[(size_t)r * W + j];
		for (j = 0; j + 1 < k1; j++)
			st->lpb[(size_t)pos_of[r] * (k1 - 1) + j] =
			    top[(size_t)r * K + j];
	}
	free(lp);
	free(top);
	return rc;
}

/* Positions [from, to) of st's logprobs into out's, when asked; 0, or
 * -1 when out of memory. */
static int
lp_out(const struct bt_state *st, int from, int to, pl_frame *out)
{
	int k1 = st->job->in.lpk;
	size_t P = (size_t)(to - from);

	if (st->lp == NULL)
		return 0;
	out->lpk = k1;
	out->lp_len = P * k1;
	out->lpb_len = P * (k1 - 1);
	out->lp = malloc(out->lp_len * sizeof(float) + 1);
	out->lpb = malloc(out->lpb_len + 1);
	if (out->lp == NULL || out->lpb == NULL)
		return -1;
	memcpy(out->lp, st->lp + (size_t)from * k1, out->lp_len *
	    sizeof(float));
	memcpy(out->lpb, st->lpb + (size_t)from * (k1 - 1), out->lpb_len);
	return 0;
}

/* The bt frame that takes the request of in on to block, with seq's
 * symbols and mask flags (n). */
static void
bt_frame_on(const pl_frame *in, int block, const int32_t *seq, int n,
    pl_frame *out)
{
	int i;

	out->type = PL_BT;
	out->steps = in->steps;
	out->temperature = in->temperature;
	out->seed = in->seed;
	out->decode = in->decode;
	out->fixed = in->fixed;
	out->end = in->end;
	out->block = block;
	out->stream = in->stream;
	out->data_len = out->mask_len = (size_t)n;
	out->data = malloc((size_t)n);
	out->mask = malloc((size_t)n);
	for (i = 0; i < n && out->data != NULL && out->mask != NULL; i++) {
		out->mask[i] = seq[i] == KN_MASK;
		out->data[i] = seq[i] == KN_MASK ? 0 : (unsigned char)seq[i];
	}
}

/* A request of position blocks after this host's blocks: on to the next
 * host, or from the exit round the ring to the entry for the next
 * position block's traversal (block T again); returns 0 when it is the
 * output (the exit, the last position block).  Its caches here go with
 * its last traversal. */
static int
pb_finish(sc *c, struct bt_state *st, pl_frame *out)
{
	const pl_frame *in = &st->job->in;
	int first, last, exit_host = c->o.block_lo == 1;

	bg_span(&c->spec, in->fixed, in->end, &first, &last);
	if (in->pblock == last)
		sc__pb_drop(c, in->id);
	if (exit_host && in->pblock == last)
		return 0;
	bt_frame_on(in, exit_host ? c->spec.blocks : c->o.block_lo - 1,
	    st->seq, c->spec.window, out);
	if (lp_out(st, 0, c->spec.window, out) != 0)
		out->lpk = -1;		/* said out of memory by bt_finish */
	out->pos_block = in->pos_block;
	out->pblock = in->pblock + exit_host;
	return 1;
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
	if (st->pb && pb_finish(c, st, out))
		;
	else if (c->o.block_lo == 1) {
		out->type = PL_OUT;
		out->traversals = 1;
		out->data_len = (size_t)(in->end - in->fixed);
		out->data = malloc(out->data_len ? out->data_len : 1);
		for (i = in->fixed; i < in->end && out->data != NULL; i++)
			out->data[i - in->fixed] = (unsigned char)st->seq[i];
		if (lp_out(st, in->fixed, in->end, out) != 0)
			out->lpk = -1;
	} else {
		bt_frame_on(in, c->o.block_lo - 1, st->seq, n, out);
		if (lp_out(st, 0, n, out) != 0)
			out->lpk = -1;
	}
	if (out->lpk < 0 || out->data == NULL || (out->type == PL_BT && out->mask == NULL))
		sc__fail(job, "", "out of memory");
	st->job = NULL;
	sc__post(c, job);
}

int
sc__bt_begin(sc *c, sc_job *job)
{
	const pl_frame *in = &job->in;
	int n = c->spec.window, i;
	struct bt_state *st;

	if (c->blocks[c->o.block_hi] == NULL) {
		sc__fail(job, "", "this host does not serve BlockTrain (its "
		    "block checkpoints were missing at start)");
		return -1;
	}
	if (in->block != c->o.block_hi || in->data_len != (size_t)n ||
	    in->end > n) {
		char why[128];

		snprintf(why, sizeof(why), "block %d, window %zu; this host "
		    "runs block %d first, window %d", in->block, in->data_len,
		    c->o.block_hi, n);
		sc__fail(job, "BlockTrain frame does not fit this host: ", why);
		return -1;
	}
	if (in->pos_block != (bg_has_pos_blocks(&c->spec) ?
	    c->spec.position_block : 0)) {
		char why[160];

		snprintf(why, sizeof(why), "the request has position blocks of "
		    "%d; this host's checkpoints have %d (position_block)",
		    in->pos_block ? in->pos_block : n, bg_pos_block(&c->spec));
		sc__fail(job, "BlockTrain frame does not fit this host: ", why);
		return -1;
	}
	if ((st = calloc(1, sizeof(*st))) == NULL ||
	    (st->seq = malloc((size_t)n * sizeof(int32_t))) == NULL ||
	    (st->u = malloc((size_t)2 * n * sizeof(float))) == NULL ||
	    (st->pos = malloc((size_t)n * sizeof(int32_t))) == NULL) {
		if (st != NULL)
			bt_free(st);
		sc__fail(job, "", "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++)
		st->seq[i] = in->mask[i] ? KN_MASK : in->data[i];
	/* the logprobs of the positions decided before this host (none
	 * at the first traversal's first host), checked by their decoder
	 * against the window */
	if (in->lpk > 0) {
		size_t k1 = (size_t)in->lpk;

		st->lp = calloc((size_t)n * k1, sizeof(float));
		st->lpb = calloc((size_t)n * (k1 - 1) + 1, 1);
		if (st->lp == NULL || st->lpb == NULL) {
			bt_free(st);
			sc__fail(job, "", "out of memory");
			return -1;
		}
		if (in->lp != NULL && in->lp_len == (size_t)n * k1 &&
		    in->lpb_len == (size_t)n * (k1 - 1)) {
			memcpy(st->lp, in->lp, in->lp_len * sizeof(float));
			memcpy(st->lpb, in->lpb, in->lpb_len);
		}
	}
	if (in->pos_block > 0) {
		char why[KN_ERR_LEN];
		double t0 = kn_now();

		st->pb = in->pblock + 1;
		if (sc__pb_begin(c, in->id, st->seq, in->pblock, why,
		    sizeof(why)) != 0) {
			bt_free(st);
			sc__fail(job, "BlockTrain context: ", why);
			return -1;
		}
		job->compute_us += (uint64_t)((kn_now() - t0) * 1e6);
	}
	st->job = job;
	st->dec = in->decode > 0 ? (bt_decode)(in->decode - 1) :
	    BT_DECODE_RANDOM;
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
		if (st->pb ? bg_step_draw(&c->spec, in->steps, st->block - 1,
		    st->j, st->pb - 1, in->seed, st->u, &st->p, &st->next) :
		    bt_step_draw(&c->spec, in->steps, st->block - 1, st->j,
		    in->seed, st->u, &st->p, &st->next)) {
			st->npos = st->pb ? bg_step_candidates(&c->spec,
			    st->dec, st->seq, st->pb - 1, in->fixed, st->u,
			    st->p, st->next, st->pos, &st->keep) :
			    bt_step_candidates(st->dec, st->seq, n, in->fixed,
			    st->u, st->p, st->next, st->pos, &st->keep);
			if (st->npos > 0)
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

/* After a pass over the R rows of a group (picked, st_of[r] the request
 * of row r, each request's rows together and in its pos order): the
 * scores of those whose decoder ranks its candidates; 0 or the kernel's
 * error. */
static int
dec_scores(kn_model *m, struct bt_state **st_of, int R,
    const int32_t *picked, float **lp, char *err)
{
	int r, any = 0;

	*lp = NULL;
	for (r = 0; r < R && !any; r++)
		any = st_of[r]->dec != BT_DECODE_RANDOM;
	if (!any)
		return KN_OK;
	if ((*lp = malloc((size_t)R * BT_DECODE_LP * sizeof(float))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return bt_step_scores(BT_DECODE_CONFIDENCE, m, R, picked, *lp, err);
}

/* st's step after the pass: of its npos rows from R0 (picked, and lp
 * when its decoder ranks them), the positions it decides take their
 * bytes and keep their logprobs (lp_fill wrote every row's); L is the
 * position block (the window without them).  The pass is done with its
 * rows, so they are ranked in place.  0, or -1 when out of memory. */
static int
dec_commit(struct bt_state *st, int32_t *picked, const float *lp, int R0,
    int L)
{
	int32_t *mine = picked + R0;
	int r, keep, k1 = st->job->in.lpk;

	keep = bt_step_keep(st->dec, st->pos, mine, lp == NULL ? NULL :
	    lp + (size_t)R0 * BT_DECODE_LP, st->u, st->pb ? (st->pb - 1) * L :
	    0, (float)st->job->in.temperature, st->npos, st->keep);
	if (keep < 0)
		return -1;
	for (r = 0; r < keep; r++)
		st->seq[st->pos[r]] = mine[r];
	/* the logprobs of the rows the step left masked go back to 0, as a
	 * frame gives an undecided position; the pass that decides it
	 * writes them */
	for (r = keep; r < st->npos && st->lp != NULL; r++) {
		memset(st->lp + (size_t)st->pos[r] * k1, 0, (size_t)k1 *
		    sizeof(float));
		memset(st->lpb + (size_t)st->pos[r] * (k1 - 1), 0,
		    (size_t)(k1 - 1));
	}
	return 0;
}

/* The step of g requests of position blocks at one block: their
 * position blocks' rows in one pass, each against its own cache (the
 * uniforms of a step are u[L + i] for position pL + i).  A request whose
 * caches went meanwhile (its end frame came) fails alone. */
static void
pb_pass(sc *c, struct bt_state **group, int g)
{
	int L = bg_pos_block(&c->spec), N = g * L, k, r, R = 0, q = 0, rc;
	kn_decode_seq *seqs = malloc((size_t)g * sizeof(*seqs));
	int32_t *sym = malloc((size_t)N * sizeof(int32_t));
	int32_t *rows = malloc((size_t)N * sizeof(int32_t));
	int32_t *picked = malloc((size_t)N * sizeof(int32_t));
	float *u = malloc((size_t)N * sizeof(float));
	struct bt_state **st_of = malloc((size_t)N * sizeof(*st_of));
	int32_t *pos_of = malloc((size_t)N * sizeof(int32_t));
	char err[KN_ERR_LEN];
	struct bt_state *st;
	float *lp = NULL;
	uint64_t us;
	double t0 = kn_now();

	if (seqs == NULL || sym == NULL || rows == NULL || picked == NULL ||
	    u == NULL || st_of == NULL || pos_of == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	else {
		for (k = 0; k < g; k++) {
			int from = (group[k]->pb - 1) * L;

			st = group[k];
			if ((seqs[q].kv = sc__pb_kv(c, st->job->in.id,
			    st->block)) == NULL) {
				sc__fail(st->job, "", "the request ended here");
				continue;
			}
			seqs[q].pos0 = from;
			seqs[q].count = L;
			bg_symbols(&c->spec, st->seq, from, L,
			    sym + (size_t)q * L);
			for (r = 0; r < st->npos; r++, R++) {
				rows[R] = q * L + st->pos[r] - from;
				u[R] = st->u[L + st->pos[r] - from];
				st_of[R] = st;
				pos_of[R] = st->pos[r];
			}
			q++;
		}
		rc = q == 0 ? KN_OK : kn_model_blockdecode(
		    c->blocks[group[0]->block], seqs, q, sym,
		    bg_commits_picks(&c->spec), rows, R, u,
		    (float)group[0]->job->in.temperature, picked, err);
		if (rc == 0 && q > 0)
			rc = lp_fill(c->blocks[group[0]->block], st_of, pos_of,
			    R, (float)group[0]->job->in.temperature, picked,
			    err);
		if (rc == 0 && q > 0)
			rc = dec_scores(c->blocks[group[0]->block], st_of, R,
			    picked, &lp, err);
	}
	us = (uint64_t)((kn_now() - t0) * 1e6);
	for (k = 0, R = 0; k < g; k++) {
		st = group[k];
		if (st->job->out.type == PL_ERR)
			continue;
		st->job->compute_us += us;
		if (rc != 0) {
			sc__fail(st->job, "BlockTrain step failed: ", err);
			continue;
		}
		if (dec_commit(st, picked, lp, R, L) != 0)
			sc__fail(st->job, "", "out of memory");
		R += st->npos;
		st->j++;
	}
	free(seqs); free(sym); free(rows); free(picked); free(u);
	free(st_of); free(pos_of); free(lp);
}

/* One step of every active request: those at the same block and
 * temperature share a forward pass. */
void
sc__bt_round(sc *c)
{
	int n = c->spec.window, B = c->o.max_batch < 256 ? c->o.max_batch : 256;
	struct bt_state **prev, *st, *group[256];
	int32_t *in = malloc((size_t)B * n * sizeof(int32_t));
	int32_t *rows = malloc((size_t)B * n * sizeof(int32_t));
	int32_t *picked = malloc((size_t)B * n * sizeof(int32_t));
	float *u = malloc((size_t)B * n * sizeof(float));
	struct bt_state **st_of = malloc((size_t)B * n * sizeof(*st_of));
	int32_t *pos_of = malloc((size_t)B * n * sizeof(int32_t));
	char err[KN_ERR_LEN];
	float *lp = NULL;

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
	while (in != NULL && rows != NULL && picked != NULL && u != NULL &&
	    st_of != NULL && pos_of != NULL) {
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
			    !st->pb == !lead->pb &&
			    st->job->in.temperature == lead->job->in.temperature) {
				st->taken = 1;
				group[g++] = st;
			}
		if (lead->pb) {
			pb_pass(c, group, g);
			continue;
		}
		/* one batch of windows; the head only where a byte is picked */
		for (k = 0; k < g; k++) {
			st = group[k];
			memcpy(in + (size_t)k * n, st->seq,
			    (size_t)n * sizeof(int32_t));
			for (r = 0; r < st->npos; r++, R++) {
				rows[R] = k * n + st->pos[r];
				u[R] = st->u[n + st->pos[r]];
				st_of[R] = st;
				pos_of[R] = st->pos[r];
			}
		}
		t0 = kn_now();
		rc = kn_model_predict_at(c->blocks[lead->block], in, g, rows, R,
		    u, (float)lead->job->in.temperature, picked, err);
		if (rc == 0)
			rc = lp_fill(c->blocks[lead->block], st_of, pos_of, R,
			    (float)lead->job->in.temperature, picked, err);
		if (rc == 0)
			rc = dec_scores(c->blocks[lead->block], st_of, R,
			    picked, &lp, err);
		us = (uint64_t)((kn_now() - t0) * 1e6);
		for (k = 0, R = 0; k < g; k++) {
			st = group[k];
			st->job->compute_us += us;
			if (rc != 0) {
				sc__fail(st->job, "BlockTrain step failed: ",
				    err);
				continue;
			}
			if (dec_commit(st, picked, lp, R, n) != 0)
				sc__fail(st->job, "", "out of memory");
			R += st->npos;
			st->j++;
		}
		free(lp);
		lp = NULL;
	}
	for (prev = &c->active; (st = *prev) != NULL;) {
		if (st->job->out.type == PL_ERR) {
			sc_job *job = st->job;

			*prev = st->next_active;
			st->job = NULL;
			bt_free(st);
			sc__post(c, job);
		} else
			prev = &st->next_active;
	}
	free(in); free(rows); free(picked); free(u);
	free(st_of); free(pos_of);
}

int
sc__bt_drop(sc *c, uint64_t id)
{
	struct bt_state **prev, *st;

	/* between rounds: no state is half-way through a pass */
	for (prev = &c->active; (st = *prev) != NULL; prev = &st->next_active)
		if (st->job->in.id == id) {
			*prev = st->next_active;
			sc_job_free(st->job);
			bt_free(st);
			return 1;
		}
	return 0;
}

void
sc__bt_free_all(sc *c)
{
	struct bt_state *st, *next;

	for (st = c->active; st != NULL; st = next) {
		next = st->next_active;
		sc_job_free(st->job);
		bt_free(st);
	}
	c->active = NULL;
}
