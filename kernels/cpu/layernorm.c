/* LayerNorm on the CPU (eps 1e-5, as torch.nn.LayerNorm). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/pool.h"

#define LN_EPS 1e-5f

struct ln_job {
	float *out, *mean, *rstd, *dinp, *dw, *db;
	const float *inp, *w, *b, *dout, *cmean, *crstd;
	int N, C;
};

static KN_CLONES void
ln_forward_task(void *ctx, int task, int thread)
{
	struct ln_job *j = ctx;
	int i, c, C = j->C, end = (task + 1) * KN_CPU_ROWS_PER_TASK;

	if (end > j->N)
		end = j->N;
	for (i = task * KN_CPU_ROWS_PER_TASK; i < end; i++) {
		const float *x = j->inp + (size_t)i * C;
		float *o = j->out + (size_t)i * C;
		float m = 0.0f, v = 0.0f, s;

		for (c = 0; c < C; c++)
			m += x[c];
		m /= (float)C;
		for (c = 0; c < C; c++)
			v += (x[c] - m) * (x[c] - m);
		s = 1.0f / sqrtf(v / (float)C + LN_EPS);
		for (c = 0; c < C; c++)
			o[c] = (x[c] - m) * s * j->w[c] + j->b[c];
		j->mean[i] = m;
		j->rstd[i] = s;
	}
}

void
kn_cpu_layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int N, int C)
{
	struct ln_job j = { .out = out, .mean = mean, .rstd = rstd,
	    .inp = inp, .w = w, .b = b, .N = N, .C = C };

	kn_pool_run((N + KN_CPU_ROWS_PER_TASK - 1) / KN_CPU_ROWS_PER_TASK,
	    ln_forward_task, &j);
}

/* The input gradient needs per-row sums and runs over rows; dw and db need
 * per-column sums over every row and run over column ranges, each walking
 * the rows in order: no scratch and no dependence on the thread count. */
static KN_CLONES void
ln_backward_task(void *ctx, int task, int thread)
{
	struct ln_job *j = ctx;
	int i, c, C = j->C, end = (task + 1) * KN_CPU_ROWS_PER_TASK;

	if (end > j->N)
		end = j->N;
	for (i = task * KN_CPU_ROWS_PER_TASK; i < end; i++) {
		const float *x = j->inp + (size_t)i * C;
		const float *d = j->dout + (size_t)i * C;
		float *dx = j->dinp + (size_t)i * C;
		float m = j->cmean[i], s = j->crstd[i];
		float dmean = 0.0f, dnmean = 0.0f;

		for (c = 0; c < C; c++) {
			float dn = d[c] * j->w[c];

			dmean += dn;
			dnmean += dn * (x[c] - m) * s;
		}
		dmean /= (float)C;
		dnmean /= (float)C;
		for (c = 0; c < C; c++) {
			float n = (x[c] - m) * s;

			dx[c] += (d[c] * j->w[c] - dmean - n * dnmean) * s;
		}
	}
}

#define LN_COLS 32

static KN_CLONES void
ln_params_task(void *ctx, int task, int thread)
{
	struct ln_job *j = ctx;
	int c0 = task * LN_COLS, c1 = c0 + LN_COLS, i, c, C = j->C;
	float dw[LN_COLS] = { 0 }, db[LN_COLS] = { 0 };

	if (c1 > C)
		c1 = C;
	for (i = 0; i < j->N; i++) {
		const float *x = j->inp + (size_t)i * C;
		const float *d = j->dout + (size_t)i * C;
		float m = j->cmean[i], s = j->crstd[i];

		for (c = c0; c < c1; c++) {
			dw[c - c0] += d[c] * (x[c] - m) * s;
			db[c - c0] += d[c];
		}
	}
	for (c = c0; c < c1; c++) {
		j->dw[c] += dw[c - c0];
		j->db[c] += db[c - c0];
	}
}

void
kn_cpu_layernorm_backward(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, const float *mean,
    const float *rstd, int N, int C)
{
	struct ln_job j = { .dinp = dinp, .dw = dw, .db = db, .dout = dout,
	    .inp = inp, .w = w, .cmean = mean, .crstd = rstd, .N = N, .C = C };

	kn_pool_run((N + KN_CPU_ROWS_PER_TASK - 1) / KN_CPU_ROWS_PER_TASK,
	    ln_backward_task, &j);
	kn_pool_run((C + LN_COLS - 1) / LN_COLS, ln_params_task, &j);
}
