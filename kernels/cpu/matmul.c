/* Linear layer with bias on the CPU: every product goes through kn_gemm. */
#include "config.h"

#include <string.h>

#include "kernels/convert.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemv_f16.h"
#include "kernels/cpu/gemm.h"
#include "kernels/pool.h"

struct bias_job {
	float *out, *dbias;
	const float *bias, *dout;
	int N, OC;
};

static void
bias_fill_task(void *ctx, int task, int thread)
{
	struct bias_job *j = ctx;
	int i, end = (task + 1) * KN_CPU_ROWS_PER_TASK;

	if (end > j->N)
		end = j->N;
	for (i = task * KN_CPU_ROWS_PER_TASK; i < end; i++)
		memcpy(j->out + (size_t)i * j->OC, j->bias,
		    (size_t)j->OC * sizeof(float));
}

/* The bias goes into C first and the product is added with beta = 1, so
 * the output is written in one GEMM pass instead of a second sweep. */
void
kn_cpu_matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC)
{
	struct bias_job j = { .out = out, .bias = bias, .N = N, .OC = OC };

	if (bias != NULL)
		kn_pool_run((N + KN_CPU_ROWS_PER_TASK - 1) /
		    KN_CPU_ROWS_PER_TASK, bias_fill_task, &j);
	kn_gemm(0, 1, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f,
	    out, OC);
}

/* 0 where our kernel is not the process's: OpenBLAS gets B itself. */
size_t
kn_cpu_matmul_pack_bytes(int C, int OC)
{
	if (kn_gemm_current() != KN_GEMM_AVX512)
		return 0;
	return kn_gemm_pack_floats(OC, C) * sizeof(float);
}

void
kn_cpu_matmul_pack(void *packed, const float *w, int C, int OC)
{
	kn_gemm_pack(w, OC, C, packed);
}

void
kn_cpu_matmul_forward_packed(float *out, const float *inp, const float *w,
    const void *packed, const float *bias, int N, int C, int OC)
{
	kn_gemm_packed(N, OC, C, inp, C, w, packed, bias, 0.0f, out, OC);
}

#define BIAS_COLS 64

static KN_CLONES void
dbias_task(void *ctx, int task, int thread)
{
	struct bias_job *j = ctx;
	int c0 = task * BIAS_COLS, c1 = c0 + BIAS_COLS, i, c;
	float acc[BIAS_COLS] = { 0 };

	if (c1 > j->OC)
		c1 = j->OC;
	for (i = 0; i < j->N; i++) {
		const float *d = j->dout + (size_t)i * j->OC;

		for (c = c0; c < c1; c++)
			acc[c - c0] += d[c];
	}
	for (c = c0; c < c1; c++)
		j->dbias[c] += acc[c - c0];
}

void
kn_cpu_matmul_backward(float *dinp, float *dw, float *dbias,
    const float *dout, const float *inp, const float *w, int N, int C, int OC)
{
	struct bias_job j = { .dbias = dbias, .dout = dout, .N = N, .OC = OC };

	if (dinp != NULL)
		kn_gemm(0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
	kn_gemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
	if (dbias != NULL)
		kn_pool_run((OC + BIAS_COLS - 1) / BIAS_COLS, dbias_task, &j);
}

/* The fp16-storage layer: our kernel widens the weights as it packs
 * them; with OpenBLAS, each task widens a few output columns into its own
 * slice of scratch, small enough to stay in cache while the GEMM reads
 * it.  Either way the fp32 copy of a matrix never exists whole. */
#define F16_SLICE 65536         /* floats a task widens at a time */

static int
f16_cols(int C)
{
	int cols = F16_SLICE / C;

	return cols < 16 ? 16 : cols;
}

size_t
kn_cpu_matmul_f16_scratch(int N, int C, int OC)
{
	(void)N;
	(void)OC;
	return (size_t)kn_pool_threads() * f16_cols(C) * C * sizeof(float);
}

struct f16_job {
	float *out, *scratch;
	const float *inp;
	const uint16_t *w;
	int N, C, OC, cols;
	float beta;
};

static void
f16_task(void *ctx, int task, int thread)
{
	struct f16_job *j = ctx;
	int o0 = task * j->cols;
	int o1 = o0 + j->cols < j->OC ? o0 + j->cols : j->OC;
	float *wf = j->scratch + (size_t)thread * j->cols * j->C;

	kn_f16_to_f32(wf, j->w + (size_t)o0 * j->C, (size_t)(o1 - o0) * j->C);
	kn_gemm_serial(0, 1, j->N, o1 - o0, j->C, 1.0f, j->inp, j->C, wf, j->C,
	    j->beta, j->out + o0, j->OC);
}

void
kn_cpu_matmul_forward_f16(float *out, const float *inp, const uint16_t *w,
    const float *bias, void *scratch, int N, int C, int OC)
{
	struct bias_job b = { .out = out, .bias = bias, .N = N, .OC = OC };
	struct f16_job j = { out, scratch, inp, w, N, C, OC, f16_cols(C),
	    bias ? 1.0f : 0.0f };

	if (bias != NULL)
		kn_pool_run((N + KN_CPU_ROWS_PER_TASK - 1) /
		    KN_CPU_ROWS_PER_TASK, bias_fill_task, &b);
	/* a byte's decoding: memory-bound, the weights read only once */
	if (kn_cpu_gemv_f16_usable(N))
		kn_cpu_gemv_f16(out, inp, w, N, C, OC, j.beta);
	/* our kernel widens the weights as it packs them, over the pool's
	 * tiles of the whole product */
	else if (!kn_gemm_f16(N, OC, C, inp, C, w, C, j.beta, out, OC))
		kn_pool_run((OC + j.cols - 1) / j.cols, f16_task, &j);
}
