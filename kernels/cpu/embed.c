/* Symbol and position embedding on the CPU: the first layer of a block. */
#include "config.h"

#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/pool.h"

struct embed_job {
	float *out, *dwte, *dwpe;
	const float *dout, *wte, *wpe;
	const int32_t *sym;
	int N, T, C, cols;
};

static KN_CLONES void
embed_forward_task(void *ctx, int task, int thread)
{
	struct embed_job *j = ctx;
	int i, c, end = (task + 1) * KN_CPU_ROWS_PER_TASK;

	if (end > j->N)
		end = j->N;
	for (i = task * KN_CPU_ROWS_PER_TASK; i < end; i++) {
		const float *e = j->wte + (size_t)j->sym[i] * j->C;
		const float *p = j->wpe + (size_t)(i % j->T) * j->C;
		float *o = j->out + (size_t)i * j->C;

		for (c = 0; c < j->C; c++)
			o[c] = e[c] + p[c];
	}
}

void
kn_cpu_embed_forward(float *out, const int32_t *sym, const float *wte,
    const float *wpe, int N, int T, int C)
{
	struct embed_job j = { .out = out, .sym = sym, .wte = wte,
	    .wpe = wpe, .N = N, .T = T, .C = C };

	kn_pool_run((N + KN_CPU_ROWS_PER_TASK - 1) / KN_CPU_ROWS_PER_TASK,
	    embed_forward_task, &j);
}

/* Each task owns a range of columns and walks the positions in order, so
 * the scatter into dwte needs no lock and sums in a fixed order. */
static KN_CLONES void
embed_backward_task(void *ctx, int task, int thread)
{
	struct embed_job *j = ctx;
	int c0 = task * j->cols, c1 = c0 + j->cols, i, c;

	if (c1 > j->C)
		c1 = j->C;
	for (i = 0; i < j->N; i++) {
		const float *d = j->dout + (size_t)i * j->C;
		float *e = j->dwte + (size_t)j->sym[i] * j->C;
		float *p = j->dwpe + (size_t)(i % j->T) * j->C;

		for (c = c0; c < c1; c++) {
			e[c] += d[c];
			p[c] += d[c];
		}
	}
}

void
kn_cpu_embed_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *sym, int N, int T, int C)
{
	struct embed_job j = { .dwte = dwte, .dwpe = dwpe, .dout = dout,
	    .sym = sym, .N = N, .T = T, .C = C, .cols = 16 };

	kn_pool_run((C + j.cols - 1) / j.cols, embed_backward_task, &j);
}
