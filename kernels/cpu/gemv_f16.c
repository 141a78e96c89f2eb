/* A few rows times a matrix in fp16 storage, as decoding one byte per
 * sequence needs: each weight is read once, widened in a register and
 * multiplied at once, so a matrix costs its 2 bytes per weight of memory
 * traffic, with no widening pass and no packing (the GEMM path's costs,
 * which held an ar traversal to a quarter of the memory bandwidth).  Every
 * output column is one task's and its sum runs in a fixed order, so the
 * result does not depend on the thread count. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/gemv_f16.h"
#include "kernels/pool.h"

/* output columns per pool task: a few hundred KiB of weights */
#define GEMV_COLS 64
/* rows one pass over the weights serves; more rows (a short prompt's
 * prefill) take one pass per group of these, still ahead of widening and
 * packing the weights for a GEMM up to KN_GEMV_F16_MAX_ROWS */
#define GEMV_PASS_ROWS 4

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define GEMV_TARGET \
	__attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

struct gemv_job {
	float *out;
	const float *inp;
	const uint16_t *w;
	int N, C, OC;
	float beta;
};

/* How many output columns one pass over the rows of x serves: each block
 * of x is loaded once for all of them, and they give the FMAs independent
 * chains even for one row.  8 for one or two rows (more loads in flight:
 * 23.5 against 18.5 GB/s of weights for one row here), 4 beyond, where
 * 8 x N accumulators would no longer fit the 32 registers. */
#define GEMV_GROUP 8
#define GEMV_GROUP_MANY 4

/* acc[n * GEMV_GROUP + g] = sum over c of x[n][c] * w[g][c] for the g < G
 * columns starting at w (row stride C): blocks of 16 lanes, the tail with
 * masked loads, each column's lanes summed in a fixed order */
GEMV_TARGET static void
columns(const struct gemv_job *j, const uint16_t *w, int G, float *acc)
{
	__m512 a[GEMV_PASS_ROWS][GEMV_GROUP];
	int n, g, c, C = j->C;

	for (n = 0; n < j->N; n++)
		for (g = 0; g < GEMV_GROUP; g++)
			a[n][g] = _mm512_setzero_ps();
	for (c = 0; c < C; c += 16) {
		/* all lanes but in the tail, where the loads are masked */
		__mmask16 m = C - c >= 16 ? (__mmask16)0xffff :
		    (__mmask16)((1u << (C - c)) - 1);
		__m512 wv[GEMV_GROUP];

		for (g = 0; g < G; g++)
			wv[g] = _mm512_cvtph_ps(m == 0xffff ? _mm256_loadu_si256(
			    (const __m256i *)(w + (size_t)g * C + c)) :
			    _mm256_maskz_loadu_epi16(m, w + (size_t)g * C + c));
		for (n = 0; n < j->N; n++) {
			const float *x = j->inp + (size_t)n * C + c;
			__m512 xv = m == 0xffff ? _mm512_loadu_ps(x) :
			    _mm512_maskz_loadu_ps(m, x);

			for (g = 0; g < G; g++)
				a[n][g] = _mm512_fmadd_ps(xv, wv[g], a[n][g]);
		}
	}
	for (n = 0; n < j->N; n++)
		for (g = 0; g < G; g++)
			acc[n * GEMV_GROUP + g] = _mm512_reduce_add_ps(a[n][g]);
}

GEMV_TARGET static void
gemv_task(void *ctx, int task, int thread)
{
	const struct gemv_job *j = ctx;
	int o0 = task * GEMV_COLS, o, n;
	int o1 = o0 + GEMV_COLS < j->OC ? o0 + GEMV_COLS : j->OC;
	float acc[GEMV_PASS_ROWS * GEMV_GROUP];
	int g, G, group = j->N <= 2 ? GEMV_GROUP : GEMV_GROUP_MANY;

	(void)thread;
	for (o = o0; o < o1; o += group) {
		G = o1 - o < group ? o1 - o : group;
		columns(j, j->w + (size_t)o * j->C, G, acc);
		for (n = 0; n < j->N; n++)
			for (g = 0; g < G; g++) {
				float *y = j->out + (size_t)n * j->OC + o + g;
				float v = acc[n * GEMV_GROUP + g];

				*y = j->beta != 0.0f ? j->beta * *y + v : v;
			}
	}
}

int
kn_cpu_gemv_f16_usable(int N)
{
	static int cpu = -1;

	if (cpu < 0)
		cpu = __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") &&
		    __builtin_cpu_supports("f16c") &&
		    __builtin_cpu_supports("fma");
	return cpu && N >= 1 && N <= KN_GEMV_F16_MAX_ROWS;
}

void
kn_cpu_gemv_f16(float *out, const float *inp, const uint16_t *w, int N,
    int C, int OC, float beta)
{
	struct gemv_job j = { out, inp, w, N, C, OC, beta };
	int r;

	for (r = 0; r < N; r += GEMV_PASS_ROWS) {
		j.inp = inp + (size_t)r * C;
		j.out = out + (size_t)r * OC;
		j.N = N - r < GEMV_PASS_ROWS ? N - r : GEMV_PASS_ROWS;
		kn_pool_run((OC + GEMV_COLS - 1) / GEMV_COLS, gemv_task, &j);
	}
}

#else

int
kn_cpu_gemv_f16_usable(int N)
{
	(void)N;
	return 0;
}

void
kn_cpu_gemv_f16(float *out, const float *inp, const uint16_t *w, int N,
    int C, int OC, float beta)
{
	(void)out; (void)inp; (void)w; (void)N; (void)C; (void)OC;
	(void)beta;
}

#endif
