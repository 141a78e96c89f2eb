/* Weighted softmax cross-entropy on the CPU: the masked-diffusion loss
 * gives masked positions weight 1/(t n) and the rest 0, and rows of weight
 * 0 are skipped outright. */
#include "config.h"

#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/pool.h"

struct xent_job {
	float *losses, *dlogits;
	const float *logits, *weight;
	const int32_t *target;
	int N, V;
	float dscale;
};

static void
xent_task(void *ctx, int task, int thread)
{
	struct xent_job *j = ctx;
	int i, V = j->V, end = (task + 1) * KN_CPU_ROWS_PER_TASK;

	if (end > j->N)
		end = j->N;
	for (i = task * KN_CPU_ROWS_PER_TASK; i < end; i++) {
		const float *l = j->logits + (size_t)i * V;
		float w = j->weight[i], lse;

		if (w == 0.0f) {
			j->losses[i] = 0.0f;
			if (j->dlogits != NULL)
				memset(j->dlogits + (size_t)i * V, 0,
				    (size_t)V * sizeof(float));
			continue;
		}
		lse = kn_cpu_logsumexp_row(l, V);
		j->losses[i] = w * (lse - l[j->target[i]]);
		if (j->dlogits != NULL) {
			float *d = j->dlogits + (size_t)i * V;
			float g = j->dscale * w;

			kn_cpu_exp_row(d, l, V, lse, g);
			d[j->target[i]] -= g;
		}
	}
}

void
kn_cpu_xent_forward_backward(float *losses, float *dlogits,
    const float *logits, const int32_t *target, const float *weight, int N,
    int V, float dscale)
{
	struct xent_job j = { .losses = losses, .dlogits = dlogits,
	    .logits = logits, .target = target, .weight = weight, .N = N,
	    .V = V, .dscale = dscale };

	kn_pool_run((N + KN_CPU_ROWS_PER_TASK - 1) / KN_CPU_ROWS_PER_TASK,
	    xent_task, &j);
}
