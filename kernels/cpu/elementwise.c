/* Flat element-wise ops on the CPU (GELU, residual add, scale) and the
 * sum of squares behind gradient clipping, split into fixed chunks. */
#include "config.h"

#include "kernels/cpu/cpu.h"
#include "kernels/pool.h"

struct flat_job {
	float *out, *dinp, *x;
	const float *a, *b, *inp, *dout, *cx;
	double *partial;
	float s;
	size_t n;
};

#define CHUNK_RANGE(j, task, lo, hi) do {                               \
	(lo) = (size_t)(task) * KN_CPU_CHUNK;                           \
	(hi) = (lo) + KN_CPU_CHUNK < (j)->n ? (lo) + KN_CPU_CHUNK : (j)->n; \
} while (0)

static int
nchunks(size_t n)
{
	return (int)((n + KN_CPU_CHUNK - 1) / KN_CPU_CHUNK);
}

static void
gelu_forward_task(void *ctx, int task, int thread)
{
	struct flat_job *j = ctx;
	size_t lo, hi;

	CHUNK_RANGE(j, task, lo, hi);
	kn_cpu_gelu_range(j->out + lo, j->inp + lo, hi - lo);
}

void
kn_cpu_gelu_forward(float *out, const float *inp, size_t n)
{
	struct flat_job j = { .out = out, .inp = inp, .n = n };

	kn_pool_run(nchunks(n), gelu_forward_task, &j);
}

static void
gelu_backward_task(void *ctx, int task, int thread)
{
	struct flat_job *j = ctx;
	size_t lo, hi;

	CHUNK_RANGE(j, task, lo, hi);
	kn_cpu_gelu_backward_range(j->dinp + lo, j->inp + lo, j->dout + lo,
	    hi - lo);
}

void
kn_cpu_gelu_backward(float *dinp, const float *inp, const float *dout,
    size_t n)
{
	struct flat_job j = { .dinp = dinp, .inp = inp, .dout = dout, .n = n };

	kn_pool_run(nchunks(n), gelu_backward_task, &j);
}

static KN_CLONES void
residual_task(void *ctx, int task, int thread)
{
	struct flat_job *j = ctx;
	size_t lo, hi, i;

	CHUNK_RANGE(j, task, lo, hi);
	for (i = lo; i < hi; i++)
		j->out[i] = j->a[i] + j->b[i];
}

void
kn_cpu_residual_forward(float *out, const float *a, const float *b, size_t n)
{
	struct flat_job j = { .out = out, .a = a, .b = b, .n = n };

	kn_pool_run(nchunks(n), residual_task, &j);
}

static KN_CLONES void
scale_task(void *ctx, int task, int thread)
{
	struct flat_job *j = ctx;
	size_t lo, hi, i;

	CHUNK_RANGE(j, task, lo, hi);
	for (i = lo; i < hi; i++)
		j->x[i] *= j->s;
}

void
kn_cpu_scale(float *x, float s, size_t n)
{
	struct flat_job j = { .x = x, .s = s, .n = n };

	kn_pool_run(nchunks(n), scale_task, &j);
}

/* Within a chunk, eight float lanes that the compiler can vectorise, then
 * a double per chunk; the chunks are added in order. */
static KN_CLONES void
sumsq_task(void *ctx, int task, int thread)
{
	struct flat_job *j = ctx;
	size_t lo, hi, i;
	float lane[8] = { 0 };
	double s = 0.0;
	int k;

	CHUNK_RANGE(j, task, lo, hi);
	for (i = lo; i + 8 <= hi; i += 8)
		for (k = 0; k < 8; k++)
			lane[k] += j->cx[i + k] * j->cx[i + k];
	for (; i < hi; i++)
		s += (double)j->cx[i] * j->cx[i];
	for (k = 0; k < 8; k++)
		s += lane[k];
	j->partial[task] = s;
}

double
kn_cpu_sumsq(const float *x, size_t n)
{
	double stack[256], *partial = stack, s = 0.0;
	int k, nc = nchunks(n);
	struct flat_job j = { .cx = x, .n = n };

	/* Larger inputs are summed in slices of 256 chunks, still in order. */
	while (nc > 0) {
		int now = nc < 256 ? nc : 256;

		j.partial = partial;
		j.n = n < (size_t)now * KN_CPU_CHUNK ? n :
		    (size_t)now * KN_CPU_CHUNK;
		kn_pool_run(now, sumsq_task, &j);
		for (k = 0; k < now; k++)
			s += partial[k];
		j.cx += j.n;
		n -= j.n;
		nc -= now;
	}
	return s;
}
