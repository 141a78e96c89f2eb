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

/* One row, a byte's decoding and the case that decides an ar
 * traversal: two output columns at a time, each read front to back in
 * blocks of 64 weights into four accumulators, with a prefetch
 * GEMV_AHEAD weights ahead of each.  Two long sequential streams keep
 * the hardware prefetchers at full rate, where the kernel before, 8
 * interleaved columns 32 bytes of each at a time, reached about half of
 * it: 34 against 62-70 GB/s for 4096 x 16384 on 2 threads here, whose
 * pure read runs at about 80. */
#define GEMV_AHEAD 1024

/* r0, r1: the dot products of x with rows w0 and w1 (C weights each),
 * every lane summed in a fixed order */
GEMV_TARGET static void
dot2(const uint16_t *w0, const uint16_t *w1, const float *x, int C,
    float *r0, float *r1)
{
	__m512 a[4], b[4];
	int c = 0, k;

	for (k = 0; k < 4; k++)
		a[k] = b[k] = _mm512_setzero_ps();
	for (; c + 64 <= C; c += 64) {
		_mm_prefetch((const char *)(w0 + c + GEMV_AHEAD), _MM_HINT_T0);
		_mm_prefetch((const char *)(w0 + c + GEMV_AHEAD + 32),
		    _MM_HINT_T0);
		_mm_prefetch((const char *)(w1 + c + GEMV_AHEAD), _MM_HINT_T0);
		_mm_prefetch((const char *)(w1 + c + GEMV_AHEAD + 32),
		    _MM_HINT_T0);
		for (k = 0; k < 4; k++) {
			__m512 xv = _mm512_loadu_ps(x + c + 16 * k);

			a[k] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(
			    _mm256_loadu_si256((const __m256i *)(w0 + c +
			    16 * k))), a[k]);
			b[k] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(
			    _mm256_loadu_si256((const __m256i *)(w1 + c +
			    16 * k))), b[k]);
		}
	}
	for (; c < C; c += 16) {
		__mmask16 m = C - c >= 16 ? (__mmask16)0xffff :
		    (__mmask16)((1u << (C - c)) - 1);
		__m512 xv = _mm512_maskz_loadu_ps(m, x + c);

		a[0] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(
		    _mm256_maskz_loadu_epi16(m, w0 + c)), a[0]);
		b[0] = _mm512_fmadd_ps(xv, _mm512_cvtph_ps(
		    _mm256_maskz_loadu_epi16(m, w1 + c)), b[0]);
	}
	*r0 = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]),
	    _mm512_add_ps(a[2], a[3])));
	*r1 = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(b[0], b[1]),
	    _mm512_add_ps(b[2], b[3])));
}

GEMV_TARGET static void
one_row_task(void *ctx, int task, int thread)
{
	const struct gemv_job *j = ctx;
	int o0 = task * GEMV_COLS, o;
	int o1 = o0 + GEMV_COLS < j->OC ? o0 + GEMV_COLS : j->OC;
	float r[2];

	(void)thread;
	for (o = o0; o < o1; o += 2) {
		const uint16_t *w0 = j->w + (size_t)o * j->C;
		int g, G = o + 1 < o1 ? 2 : 1;

		/* a lone last column is read twice, its second sum dropped */
		dot2(w0, G == 2 ? w0 + j->C : w0, j->inp, j->C, &r[0], &r[1]);
		for (g = 0; g < G; g++)
			j->out[o + g] = j->beta != 0.0f ? j->beta *
			    j->out[o + g] + r[g] : r[g];
	}
}

/* 2 to 8 rows, a short prompt's prefill: one pass over the weights for
 * all of them, one output column at a time read front to back (the same
 * sequential stream as one row's), 32 weights per step into two
 * accumulators per row.  The 8-column interleave before needed two
 * passes for 8 rows: 18.9 against 10.8 ms for 8 rows of 4096 x 16384
 * here, and 13.0 ms through the widening GEMM.  NR is a constant where
 * it is inlined, so the accumulators stay in registers. */
GEMV_TARGET static inline __attribute__((always_inline)) void
rows_range(const struct gemv_job *j, int o0, int o1, const int NR)
{
	int o, n, C = j->C;

	for (o = o0; o < o1; o++) {
		const uint16_t *w = j->w + (size_t)o * C;
		__m512 a[KN_GEMV_F16_MAX_ROWS][2];
		int c = 0;

#pragma GCC unroll 8
		for (n = 0; n < NR; n++)
			a[n][0] = a[n][1] = _mm512_setzero_ps();
		for (; c + 32 <= C; c += 32) {
			__m512 w0, w1;

			_mm_prefetch((const char *)(w + c + GEMV_AHEAD),
			    _MM_HINT_T0);
			w0 = _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)(w + c)));
			w1 = _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)(w + c + 16)));
			/* unrolled, or the accumulators live in memory */
#pragma GCC unroll 8
			for (n = 0; n < NR; n++) {
				const float *x = j->inp + (size_t)n * C + c;

				a[n][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x), w0,
				    a[n][0]);
				a[n][1] = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16),
				    w1, a[n][1]);
			}
		}
		for (; c < C; c += 16) {
			__mmask16 m = C - c >= 16 ? (__mmask16)0xffff :
			    (__mmask16)((1u << (C - c)) - 1);
			__m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m,
			    w + c));

#pragma GCC unroll 8
			for (n = 0; n < NR; n++)
				a[n][0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m,
				    j->inp + (size_t)n * C + c), wv, a[n][0]);
		}
#pragma GCC unroll 8
		for (n = 0; n < NR; n++) {
			float *y = j->out + (size_t)n * j->OC + o;
			float v = _mm512_reduce_add_ps(_mm512_add_ps(a[n][0],
			    a[n][1]));

			*y = j->beta != 0.0f ? j->beta * *y + v : v;
		}
	}
}

GEMV_TARGET static void
rows_task(void *ctx, int task, int thread)
{
	const struct gemv_job *j = ctx;
	int o0 = task * GEMV_COLS;
	int o1 = o0 + GEMV_COLS < j->OC ? o0 + GEMV_COLS : j->OC;

	(void)thread;
	switch (j->N) {
	case 2: rows_range(j, o0, o1, 2); break;
	case 3: rows_range(j, o0, o1, 3); break;
	case 4: rows_range(j, o0, o1, 4); break;
	case 5: rows_range(j, o0, o1, 5); break;
	case 6: rows_range(j, o0, o1, 6); break;
	case 7: rows_range(j, o0, o1, 7); break;
	default: rows_range(j, o0, o1, 8); break;
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

	kn_pool_run((OC + GEMV_COLS - 1) / GEMV_COLS, N == 1 ? one_row_task :
	    rows_task, &j);
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
