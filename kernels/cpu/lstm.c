/* The SOMA expert's layers on the CPU: the LSTM recurrence (forward and
 * backpropagation through time) and the K-copy linear layer that lets the
 * perturbed bodies of one SPSA step share a pass (kernels/soma_model.c).
 * Work is split by (copy, rows) into pool tasks fixed by the shape, each
 * calling kn_gemm_serial, so results do not depend on the thread count. */
#include "config.h"

#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/pool.h"

/* Rows of one copy's GEMM per task of the batched linear layer. */
#define MM_ROWS 128
/* Sequences per task of the recurrence: each task runs all T steps of its
 * rows, so the pool is entered once per layer rather than once per step. */
#define LSTM_ROWS 8
/* Columns of a cell row handled at a time, for the stack buffers that
 * feed the vectorised exp. */
#define CELL_COLS 64

struct bmm_job {
	float *out;
	const float *inp, *w, *bias;
	int N, C, OC, chunks;
	size_t inp_stride, w_stride;
};

static void
bmm_task(void *ctx, int task, int thread)
{
	const struct bmm_job *j = ctx;
	int k = task / j->chunks, r0 = (task % j->chunks) * MM_ROWS;
	int rows = j->N - r0 < MM_ROWS ? j->N - r0 : MM_ROWS, i;
	const float *w = j->w + (size_t)k * j->w_stride;
	float *out = j->out + ((size_t)k * j->N + r0) * j->OC;

	(void)thread;
	if (j->bias != NULL)
		for (i = 0; i < rows; i++)
			memcpy(out + (size_t)i * j->OC,
			    j->bias + (size_t)k * j->w_stride,
			    (size_t)j->OC * sizeof(float));
	kn_gemm_serial(0, 1, rows, j->OC, j->C, 1.0f,
	    j->inp + (size_t)k * j->inp_stride + (size_t)r0 * j->C, j->C, w,
	    j->C, j->bias != NULL ? 1.0f : 0.0f, out, j->OC);
}

void
kn_cpu_matmul_forward_batched(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC, int K, size_t inp_stride,
    size_t w_stride)
{
	struct bmm_job j = { out, inp, w, bias, N, C, OC,
	    (N + MM_ROWS - 1) / MM_ROWS, inp_stride, w_stride };

	if (N <= 0 || K <= 0)
		return;
	kn_pool_run(K * j.chunks, bmm_task, &j);
}

/* One position of one sequence: g (4C) holds the pre-activations on entry
 * and the activations on return; cprev is NULL at the first step. */
static KN_CLONES void
cell_forward_row(float *g, float *c, float *h, const float *cprev, int C)
{
	float e[4 * CELL_COLS], tc[CELL_COLS];
	int j0, j, n;

	for (j0 = 0; j0 < C; j0 += n) {
		n = C - j0 < CELL_COLS ? C - j0 : CELL_COLS;
		/* sigma(x) = 1/(1+exp(-x)), tanh(x) = 2 sigma(2x) - 1 */
		for (j = 0; j < n; j++) {
			e[j] = -g[j0 + j];
			e[n + j] = -g[C + j0 + j];
			e[2 * n + j] = -2.0f * g[2 * C + j0 + j];
			e[3 * n + j] = -g[3 * C + j0 + j];
		}
		kn_cpu_exp_row(e, e, 4 * n, 0.0f, 1.0f);
		for (j = 0; j < n; j++) {
			float i = 1.0f / (1.0f + e[j]);
			float f = 1.0f / (1.0f + e[n + j]);
			float gg = 2.0f / (1.0f + e[2 * n + j]) - 1.0f;
			float o = 1.0f / (1.0f + e[3 * n + j]);
			float cc = i * gg;

			if (cprev != NULL)
				cc += f * cprev[j0 + j];
			g[j0 + j] = i;
			g[C + j0 + j] = f;
			g[2 * C + j0 + j] = gg;
			g[3 * C + j0 + j] = o;
			c[j0 + j] = cc;
			tc[j] = -2.0f * cc;
		}
		kn_cpu_exp_row(tc, tc, n, 0.0f, 1.0f);
		for (j = 0; j < n; j++)
			h[j0 + j] = g[3 * C + j0 + j] *
			    (2.0f / (1.0f + tc[j]) - 1.0f);
	}
}

/* The gradient through one cell: dh (C) is the total gradient w.r.t. h
 * at this step, dcell (C) the cell gradient from the step after (replaced
 * by the one for the step before); dg (4C) receives the gradient w.r.t.
 * the pre-activations. */
static KN_CLONES void
cell_backward_row(float *dg, float *dcell, const float *dh, const float *g,
    const float *c, const float *cprev, int C)
{
	float tc[CELL_COLS];
	int j0, j, n;

	for (j0 = 0; j0 < C; j0 += n) {
		n = C - j0 < CELL_COLS ? C - j0 : CELL_COLS;
		for (j = 0; j < n; j++)
			tc[j] = -2.0f * c[j0 + j];
		kn_cpu_exp_row(tc, tc, n, 0.0f, 1.0f);
		for (j = 0; j < n; j++) {
			int q = j0 + j;
			float i = g[q], f = g[C + q], gg = g[2 * C + q];
			float o = g[3 * C + q];
			float th = 2.0f / (1.0f + tc[j]) - 1.0f;
			float dc = dcell[q] + dh[q] * o * (1.0f - th * th);
			float cp = cprev != NULL ? cprev[q] : 0.0f;

			dg[q] = dc * gg * i * (1.0f - i);
			dg[C + q] = dc * cp * f * (1.0f - f);
			dg[2 * C + q] = dc * i * (1.0f - gg * gg);
			dg[3 * C + q] = dh[q] * th * o * (1.0f - o);
			dcell[q] = dc * f;
		}
	}
}

struct lstm_job {
	float *h, *c, *gates, *dgates, *dh, *dcell;
	const float *ch, *cc, *cgates, *whh;
	int B, T, C, chunks;
	size_t whh_stride;
};

static void
lstm_forward_task(void *ctx, int task, int thread)
{
	const struct lstm_job *j = ctx;
	int k = task / j->chunks, b0 = (task % j->chunks) * LSTM_ROWS;
	int b1 = b0 + LSTM_ROWS < j->B ? b0 + LSTM_ROWS : j->B;
	int T = j->T, C = j->C, t, b;
	size_t base = (size_t)k * j->B * T;     /* first position of copy k */
	float *h = j->h + base * C, *c = j->c + base * C;
	float *g = j->gates + base * 4 * C;
	const float *whh = j->whh + (size_t)k * j->whh_stride;

	(void)thread;
	for (t = 0; t < T; t++) {
		/* gates_t += h_{t-1} . W_hh^T for this task's sequences */
		if (t > 0)
			kn_gemm_serial(0, 1, b1 - b0, 4 * C, C, 1.0f,
			    h + ((size_t)b0 * T + t - 1) * C, T * C, whh, C,
			    1.0f, g + ((size_t)b0 * T + t) * 4 * C, T * 4 * C);
		for (b = b0; b < b1; b++) {
			size_t n = (size_t)b * T + t;

			cell_forward_row(g + n * 4 * C, c + n * C, h + n * C,
			    t > 0 ? c + (n - 1) * C : NULL, C);
		}
	}
}

void
kn_cpu_lstm_forward(float *h, float *c, float *gates, const float *whh,
    int K, int B, int T, int C, size_t whh_stride)
{
	struct lstm_job j = { .h = h, .c = c, .gates = gates, .whh = whh,
	    .B = B, .T = T, .C = C, .chunks = (B + LSTM_ROWS - 1) / LSTM_ROWS,
	    .whh_stride = whh_stride };

	if (K <= 0 || B <= 0 || T <= 0)
		return;
	kn_pool_run(K * j.chunks, lstm_forward_task, &j);
}

static void
lstm_backward_task(void *ctx, int task, int thread)
{
	const struct lstm_job *j = ctx;
	int b0 = task * LSTM_ROWS;
	int b1 = b0 + LSTM_ROWS < j->B ? b0 + LSTM_ROWS : j->B;
	int T = j->T, C = j->C, t, b;

	(void)thread;
	memset(j->dcell + (size_t)b0 * C, 0,
	    (size_t)(b1 - b0) * C * sizeof(float));
	for (t = T - 1; t >= 0; t--) {
		for (b = b0; b < b1; b++) {
			size_t n = (size_t)b * T + t;

			cell_backward_row(j->dgates + n * 4 * C,
			    j->dcell + (size_t)b * C, j->dh + n * C,
			    j->cgates + n * 4 * C, j->cc + n * C,
			    t > 0 ? j->cc + (n - 1) * C : NULL, C);
		}
		/* dh_{t-1} += dgates_t . W_hh: the recurrent share */
		if (t > 0)
			kn_gemm_serial(0, 0, b1 - b0, C, 4 * C, 1.0f,
			    j->dgates + ((size_t)b0 * T + t) * 4 * C, T * 4 * C,
			    j->whh, C, 1.0f,
			    j->dh + ((size_t)b0 * T + t - 1) * C, T * C);
	}
}

void
kn_cpu_lstm_backward(float *dgates, float *dwhh, float *dh, float *dcell,
    const float *h, const float *c, const float *gates, const float *whh,
    int B, int T, int C)
{
	struct lstm_job j = { .dgates = dgates, .dh = dh, .dcell = dcell,
	    .ch = h, .cc = c, .cgates = gates, .whh = whh, .B = B, .T = T,
	    .C = C };
	int b;

	if (B <= 0 || T <= 0)
		return;
	kn_pool_run((B + LSTM_ROWS - 1) / LSTM_ROWS, lstm_backward_task, &j);
	/* dW_hh += sum over t >= 1 of dgates_t^T . h_{t-1}: per sequence,
	 * rows 1.. of its dgates against rows ..T-2 of its h */
	for (b = 0; b < B && T > 1; b++)
		kn_gemm(1, 0, 4 * C, C, T - 1, 1.0f,
		    dgates + ((size_t)b * T + 1) * 4 * C, 4 * C,
		    h + (size_t)b * T * C, C, 1.0f, dwhh, C);
}
