/* Multi-head self-attention on the CPU: one pool task per (sequence, head),
 * each doing its small products with the serial GEMM straight on the
 * strided q, k, v columns of the qkv buffer (no repacking).  The mask
 * (KN_ATT_* in kernels/backend.h) only decides which scores each softmax
 * row covers; masked probabilities are 0, which is all backward needs. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/pool.h"

struct att_job {
	float *out, *att, *dqkv, *scratch;
	const float *qkv, *dout, *catt;
	int B, T, C, NH, mask;
	const int32_t *rows;    /* attention_rows: the query rows wanted */
};

/* The keys query i sees under mask, as ranges [r[0], r[1]) and, when
 * there are two, [r[2], r[3]); returns how many. */
static int
visible(int mask, int T, int i, int r[4])
{
	int L = mask < 0 ? -mask : mask, n = T / 2;

	r[0] = 0;
	if (mask == KN_ATT_FULL) {
		r[1] = T;
		return 1;
	}
	if (mask > 0) {
		r[1] = (i / L + 1) * L < T ? (i / L + 1) * L : T;
		return 1;
	}
	if (i >= n) {
		/* a clean query: block-causal on the clean copy */
		r[0] = n;
		r[1] = n + ((i - n) / L + 1) * L;
		return 1;
	}
	/* a noisy query: its own noisy block, then the clean context */
	r[0] = i / L * L;
	r[1] = r[0] + L;
	r[2] = n;
	r[3] = n + r[0];
	return r[3] > r[2] ? 2 : 1;
}

/* row (T scores of query i) becomes softmax(scale * row) over the keys
 * the mask lets it see, 0 elsewhere.  One range is the softmax of the
 * unmasked model, to the bit. */
static void
masked_softmax(float *row, int T, int i, int mask, float scale)
{
	int r[4], k, c;
	float mx = -INFINITY, sum = 0.0f, inv;

	if (visible(mask, T, i, r) == 1) {
		kn_cpu_softmax_row(row + r[0], r[1] - r[0], scale);
		memset(row, 0, (size_t)r[0] * sizeof(float));
		memset(row + r[1], 0, (size_t)(T - r[1]) * sizeof(float));
		return;
	}
	for (k = 0; k < 4; k += 2)
		for (c = r[k]; c < r[k + 1]; c++) {
			row[c] *= scale;
			mx = row[c] > mx ? row[c] : mx;
		}
	for (k = 0; k < 4; k += 2) {
		kn_cpu_exp_row(row + r[k], row + r[k], r[k + 1] - r[k], mx,
		    1.0f);
		for (c = r[k]; c < r[k + 1]; c++)
			sum += row[c];
	}
	inv = 1.0f / sum;
	for (c = 0; c < T; c++)
		row[c] = (c >= r[0] && c < r[1]) || (c >= r[2] && c < r[3]) ?
		    row[c] * inv : 0.0f;
}

/* Query rows [i0, i0 + M) of sequence b, head h: scores against every
 * key into their rows of att (the (b, h) block of (B,NH,T,T)), the masked
 * softmax, then their output rows.  The full pass runs it on all T rows
 * with kn_gemm_serial (k NULL); attention_rows on one row, each product on
 * the kernel k[0], k[1] that the full pass's class takes. */
static void
att_forward_rows(const struct att_job *j, const kn_gemm_kernel *k, int b,
    int h, int i0, int M)
{
	int T = j->T, C = j->C, hs = C / j->NH, i;
	const float *q = j->qkv + ((size_t)b * T + i0) * 3 * C +
	    (size_t)h * hs;
	const float *kk = j->qkv + (size_t)b * T * 3 * C + C + (size_t)h * hs;
	const float *v = kk + C;
	float *att = j->att + (((size_t)b * j->NH + h) * T + i0) * T;
	float *out = j->out + ((size_t)b * T + i0) * C + (size_t)h * hs;
	float scale = 1.0f / sqrtf((float)hs);

	if (k == NULL)
		kn_gemm_serial(0, 1, M, T, hs, 1.0f, q, 3 * C, kk, 3 * C, 0.0f,
		    att, T);
	else
		kn__gemm_run(k[0], 0, 0, 1, M, T, hs, 1.0f, q, 3 * C, kk,
		    3 * C, 0.0f, att, T);
	if (j->mask == KN_ATT_FULL)
		/* every row sees every key: rows side by side, each with
		 * the bits kn_cpu_softmax_row gives it alone */
		kn_cpu_softmax_rows(att, M, T, (size_t)T, scale);
	else
		for (i = 0; i < M; i++)
			masked_softmax(att + (size_t)i * T, T, i0 + i, j->mask,
			    scale);
	if (k == NULL)
		kn_gemm_serial(0, 0, M, hs, T, 1.0f, att, T, v, 3 * C, 0.0f,
		    out, C);
	else
		kn__gemm_run(k[1], 0, 0, 0, M, hs, T, 1.0f, att, T, v, 3 * C,
		    0.0f, out, C);
}

static void
att_forward_task(void *ctx, int task, int thread)
{
	struct att_job *j = ctx;

	(void)thread;
	att_forward_rows(j, NULL, task / j->NH, task % j->NH, 0, j->T);
}

void
kn_cpu_attention_forward(float *out, float *att, const float *qkv, int B,
    int T, int C, int NH, int mask)
{
	struct att_job j = { .out = out, .att = att, .qkv = qkv, .B = B,
	    .T = T, .C = C, .NH = NH, .mask = mask };

	kn_pool_run(B * NH, att_forward_task, &j);
}

#define ATT_ROWS_SERIAL_MACS ((size_t)1 << 20)

/* Task r * NH + h: picked row r, head h, on our kernel (the full pass's
 * products of a row run on it too: rows_stable). */
static void
att_rows_task(void *ctx, int task, int thread)
{
	struct att_job *j = ctx;
	static const kn_gemm_kernel own[2] = { KN_GEMM_AVX512, KN_GEMM_AVX512 };
	int row = j->rows[task / j->NH];

	(void)thread;
	att_forward_rows(j, own, row / j->T, task % j->NH, row % j->T, 1);
}

/* Whether one row's product gives it the bits it gets among all T: so
 * with our kernel, whose FMA chain per element does not depend on the
 * rows beside it; OpenBLAS promises nothing of the kind. */
static int
rows_stable(int T, int hs)
{
	return kn__gemm_pick(0, 0, 1, T, T, hs) == KN_GEMM_AVX512 &&
	    kn__gemm_pick(0, 0, 0, T, hs, T) == KN_GEMM_AVX512;
}

void
kn_cpu_attention_rows(float *out, float *att, const float *qkv, int B,
    int T, int C, int NH, int mask, const int32_t *rows, int R)
{
	struct att_job j = { .out = out, .att = att, .qkv = qkv, .B = B,
	    .T = T, .C = C, .NH = NH, .mask = mask, .rows = rows };
	size_t macs = (size_t)R * 2 * T * C;
	int t;

	if (R <= 0)
		return;
	if (!rows_stable(T, C / NH)) {
		kn_cpu_attention_forward(out, att, qkv, B, T, C, NH, mask);
		return;
	}
	/* a few rows are microseconds of work, less than waking the pool
	 * costs (the GEMM's own cut, GEMM_SERIAL_MACS, is the same) */
	if (macs < ATT_ROWS_SERIAL_MACS)
		for (t = 0; t < R * NH; t++)
			att_rows_task(&j, t, 0);
	else
		kn_pool_run(R * NH, att_rows_task, &j);
}

static KN_CLONES void
att_backward_task(void *ctx, int task, int thread)
{
	struct att_job *j = ctx;
	int b = task / j->NH, h = task % j->NH, T = j->T, C = j->C;
	int hs = C / j->NH, i, c;
	size_t off = (size_t)b * T * 3 * C + (size_t)h * hs;
	const float *q = j->qkv + off, *k = q + C, *v = q + 2 * C;
	float *dq = j->dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
	const float *att = j->catt + (size_t)task * T * T;
	const float *dout = j->dout + (size_t)b * T * C + (size_t)h * hs;
	float *datt = j->scratch + (size_t)task * T * T;
	float scale = 1.0f / sqrtf((float)hs);

	/* datt = dout . v^T;  dv = att^T . dout */
	kn_gemm_serial(0, 1, T, T, hs, 1.0f, dout, C, v, 3 * C, 0.0f, datt, T);
	kn_gemm_serial(1, 0, T, hs, T, 1.0f, att, T, dout, C, 0.0f, dv, 3 * C);
	/* softmax backward, with the 1/sqrt(hs) of the scores folded in:
	 * dpre = att * (datt - sum(att * datt)) * scale */
	for (i = 0; i < T; i++) {
		const float *a = att + (size_t)i * T;
		float *d = datt + (size_t)i * T, dot = 0.0f;

		for (c = 0; c < T; c++)
			dot += a[c] * d[c];
		for (c = 0; c < T; c++)
			d[c] = a[c] * (d[c] - dot) * scale;
	}
	/* dq = dpre . k;  dk = dpre^T . q */
	kn_gemm_serial(0, 0, T, hs, T, 1.0f, datt, T, k, 3 * C, 0.0f, dq, 3 * C);
	kn_gemm_serial(1, 0, T, hs, T, 1.0f, datt, T, q, 3 * C, 0.0f, dk, 3 * C);
}

void
kn_cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
    const float *qkv, const float *att, int B, int T, int C, int NH,
    int mask)
{
	/* the mask is in att already: its zeros stop every masked gradient */
	struct att_job j = { .dqkv = dqkv, .scratch = scratch, .dout = dout,
	    .qkv = qkv, .catt = att, .B = B, .T = T, .C = C, .NH = NH,
	    .mask = mask };

	kn_pool_run(B * NH, att_backward_task, &j);
}

/* Decoding with a KV cache: the T new positions' k and v join the cache,
 * then each new position attends to every cached position up to itself.
 * The products are the same serial GEMMs and softmax as the full pass, so
 * a position's output matches what attention_forward gives it. */
struct dec_job {
	float *out, *kcache, *vcache, *scores;
	const float *qkv;
	int pos0, T, C, NH;
};

static void
att_decode_task(void *ctx, int h, int thread)
{
	struct dec_job *j = ctx;
	int C = j->C, hs = C / j->NH, L = j->pos0 + j->T, i;
	float *att = j->scores + (size_t)h * j->T * L;
	float scale = 1.0f / sqrtf((float)hs);

	(void)thread;
	kn_gemm_serial(0, 1, j->T, L, hs, 1.0f, j->qkv + (size_t)h * hs,
	    3 * C, j->kcache + (size_t)h * hs, C, 0.0f, att, L);
	for (i = 0; i < j->T; i++) {
		float *row = att + (size_t)i * L;
		int n = j->pos0 + i + 1;

		kn_cpu_softmax_row(row, n, scale);
		if (n < L)
			memset(row + n, 0, (size_t)(L - n) * sizeof(float));
	}
	kn_gemm_serial(0, 0, j->T, hs, L, 1.0f, att, L,
	    j->vcache + (size_t)h * hs, C, 0.0f, j->out + (size_t)h * hs, C);
}

void
kn_cpu_attention_decode(float *out, float *kcache, float *vcache,
    float *scores, const float *qkv, int pos0, int T, int C, int NH)
{
	struct dec_job j = { out, kcache, vcache, scores, qkv, pos0, T, C,
	    NH };
	int i;

	for (i = 0; i < T; i++) {
		memcpy(kcache + (size_t)(pos0 + i) * C,
		    qkv + (size_t)i * 3 * C + C, (size_t)C * sizeof(float));
		memcpy(vcache + (size_t)(pos0 + i) * C,
		    qkv + (size_t)i * 3 * C + 2 * C, (size_t)C * sizeof(float));
	}
	kn_pool_run(NH, att_decode_task, &j);
}
