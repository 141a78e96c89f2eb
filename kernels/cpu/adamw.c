/* AdamW on the CPU, over fixed chunks of the parameter buffer. */
#include "config.h"

#include <math.h>

#include "kernels/cpu/cpu.h"
#include "kernels/pool.h"

struct adamw_job {
	float *p, *m, *v;
	const float *g;
	size_t n;
	float lr, b1, b2, eps, decay, gscale, c1, c2;
};

static KN_CLONES void
adamw_task(void *ctx, int task, int thread)
{
	struct adamw_job *j = ctx;
	size_t lo = (size_t)task * KN_CPU_CHUNK, hi = lo + KN_CPU_CHUNK, i;

	if (hi > j->n)
		hi = j->n;
	for (i = lo; i < hi; i++) {
		float g = j->g[i] * j->gscale;
		float m = j->b1 * j->m[i] + (1.0f - j->b1) * g;
		float v = j->b2 * j->v[i] + (1.0f - j->b2) * g * g;

		j->m[i] = m;
		j->v[i] = v;
		j->p[i] = j->p[i] * j->decay -
		    j->lr * (m * j->c1) / (sqrtf(v * j->c2) + j->eps);
	}
}

void
kn_cpu_adamw_update(float *p, const float *grad, float *m, float *v,
    size_t n, float lr, float b1, float b2, float eps, float wd, int t,
    float gscale)
{
	struct adamw_job j = { .p = p, .m = m, .v = v, .g = grad, .n = n,
	    .lr = lr, .b1 = b1, .b2 = b2, .eps = eps, .gscale = gscale };

	j.decay = 1.0f - lr * wd;
	j.c1 = (float)(1.0 / (1.0 - pow(b1, t)));
	j.c2 = (float)(1.0 / (1.0 - pow(b2, t)));
	kn_pool_run((int)((n + KN_CPU_CHUNK - 1) / KN_CPU_CHUNK), adamw_task,
	    &j);
}
