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

#include <cpuid.h>
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

/* 32 fp16 weights at w widened to two vectors of 16 floats.  One 64-byte
 * load, then the conversion from registers: on the AMD EPYC (Zen 5) here
 * the conversion straight from memory (vcvtph2ps zmm, m256, what the
 * compiler makes of a 32-byte load fed to it) held a one-row pass to
 * 28-42 GB/s, and this form reaches 50-72 on the same matrices, where a
 * plain read runs at 62-70. */
#define GEMV_WIDEN(w, lo, hi) do { \
	__m512i v_ = _mm512_loadu_si512((const void *)(w)); \
	(lo) = _mm512_cvtph_ps(_mm512_castsi512_si256(v_)); \
	(hi) = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v_, 1)); \
} while (0)

/* One row, a byte's decoding and the case that decides an ar traversal:
 * each output column's weights read front to back as one sequential
 * stream, 64 at a time into four accumulators, with a prefetch GEMV_AHEAD
 * weights ahead.  Long sequential streams keep the hardware prefetchers
 * at full rate: the first kernel, 8 interleaved columns 32 bytes of each
 * at a time, reached about half of the memory's rate (34 against 62-70
 * GB/s for 4096 x 16384 on 2 threads on the Intel Cooper Lake machine).
 * On Zen 5 one stream beat two interleaved (50-62 against 42-53 GB/s),
 * and the sums, and so the bits, are the same either way. */
#define GEMV_AHEAD 1024

/* the dot product of x with row w (C weights), every lane summed in a
 * fixed order */
GEMV_TARGET static float
dot1(const uint16_t *w, const float *x, int C)
{
	__m512 a[4], lo, hi;
	int c = 0, k;

	for (k = 0; k < 4; k++)
		a[k] = _mm512_setzero_ps();
	for (; c + 64 <= C; c += 64) {
		_mm_prefetch((const char *)(w + c + GEMV_AHEAD), _MM_HINT_T0);
		_mm_prefetch((const char *)(w + c + GEMV_AHEAD + 32),
		    _MM_HINT_T0);
		/* unrolled, or the accumulators live in memory */
#pragma GCC unroll 2
		for (k = 0; k < 4; k += 2) {
			GEMV_WIDEN(w + c + 16 * k, lo, hi);
			a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16 * k),
			    lo, a[k]);
			a[k + 1] = _mm512_fmadd_ps(_mm512_loadu_ps(x + c +
			    16 * k + 16), hi, a[k + 1]);
		}
	}
	for (; c < C; c += 16) {
		__mmask16 m = C - c >= 16 ? (__mmask16)0xffff :
		    (__mmask16)((1u << (C - c)) - 1);

		a[0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + c),
		    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + c)), a[0]);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]),
	    _mm512_add_ps(a[2], a[3])));
}

GEMV_TARGET static void
one_row_task(void *ctx, int task, int thread)
{
	const struct gemv_job *j = ctx;
	int o0 = task * GEMV_COLS, o;
	int o1 = o0 + GEMV_COLS < j->OC ? o0 + GEMV_COLS : j->OC;

	(void)thread;
	for (o = o0; o < o1; o++) {
		float r = dot1(j->w + (size_t)o * j->C, j->inp, j->C);

		j->out[o] = j->beta != 0.0f ? j->beta * j->out[o] + r : r;
	}
}

/* 2 to 8 rows, a short prompt's prefill: one pass over the weights for
 * all of them.  Two things set its pace, and each has its answer here.
 * - The rows' inputs: loaded once per weight vector and row, a load per
 *   multiply-add.  So two output columns are taken at once and each input
 *   vector serves both: half the loads.
 * - Where those inputs come from: a whole row of C floats per input row
 *   (128 KiB for 8 rows of 4096) streams from L2 for every column.  So
 *   the columns of a task are taken GEMV_ROWS_KC inputs at a time, their
 *   sums kept in memory between the slices, and a slice of the inputs
 *   stays in L1.
 * 8 rows of 4096 x 16384 took 9.3-10.9 ms one column at a time with the
 * whole row, 3.5 with pairs and slices, on the Zen 5 here.  Every column
 * has one accumulator per row, summed in the order of c whether it is
 * paired or not, so the bits depend neither on the pairing nor on the
 * thread count.  NR and NC are constants where this is inlined, so the
 * accumulators stay in registers within a slice.
 *
 * Inputs per slice: 32 KiB of the rows' floats, and 2048 at most, the
 * best of 512 to 4096 for 2, 4 and 8 rows here (the weights are then read
 * in bursts of 2 to 4 KiB per column). */
#define GEMV_ROWS_KC(NR) ((NR) <= 4 ? 2048 : (8192 / (NR)) & ~31)

GEMV_TARGET static inline __attribute__((always_inline)) void
rows_slice(const struct gemv_job *j, const uint16_t *w, const uint16_t *next,
    int c0, int c1, __m512 acc[][KN_GEMV_F16_MAX_ROWS], const int NR,
    const int NC)
{
	__m512 a[2][KN_GEMV_F16_MAX_ROWS];
	int c, n, k, C = j->C;

#pragma GCC unroll 2
	for (k = 0; k < NC; k++)
#pragma GCC unroll 8
		for (n = 0; n < NR; n++)
			a[k][n] = acc[k][n];
	for (c = c0; c < c1; c += 32) {
		__m512 lo[2], hi[2];

#pragma GCC unroll 2
		for (k = 0; k < NC; k++) {
			/* the next pair's slice, read next */
			_mm_prefetch((const char *)(next + (size_t)k * C + c),
			    _MM_HINT_T0);
			GEMV_WIDEN(w + (size_t)k * C + c, lo[k], hi[k]);
		}
		/* unrolled, or the accumulators live in memory */
#pragma GCC unroll 8
		for (n = 0; n < NR; n++) {
			const float *x = j->inp + (size_t)n * C + c;
			__m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x +
			    16);

#pragma GCC unroll 2
			for (k = 0; k < NC; k++)
				a[k][n] = _mm512_fmadd_ps(x1, hi[k],
				    _mm512_fmadd_ps(x0, lo[k], a[k][n]));
		}
	}
#pragma GCC unroll 2
	for (k = 0; k < NC; k++)
#pragma GCC unroll 8
		for (n = 0; n < NR; n++)
			acc[k][n] = a[k][n];
}

GEMV_TARGET static inline __attribute__((always_inline)) void
rows_range(const struct gemv_job *j, int o0, int o1, const int NR)
{
	__m512 acc[GEMV_COLS][KN_GEMV_F16_MAX_ROWS];
	int o, n, C = j->C, C32 = C & ~31, c0;

	for (o = o0; o < o1; o++)
#pragma GCC unroll 8
		for (n = 0; n < NR; n++)
			acc[o - o0][n] = _mm512_setzero_ps();
	for (c0 = 0; c0 < C32; c0 += GEMV_ROWS_KC(NR)) {
		int c1 = c0 + GEMV_ROWS_KC(NR) < C32 ? c0 + GEMV_ROWS_KC(NR) :
		    C32;

		/* the last pair prefetches its own slice: no pointer past
		 * the matrix */
		for (o = o0; o + 2 <= o1; o += 2)
			rows_slice(j, j->w + (size_t)o * C, j->w + (size_t)(o +
			    (o + 4 <= j->OC ? 2 : 0)) * C, c0, c1,
			    acc + (o - o0), NR, 2);
		if (o < o1)
			rows_slice(j, j->w + (size_t)o * C, j->w + (size_t)o * C,
			    c0, c1, acc + (o - o0), NR, 1);
	}
	for (o = o0; o < o1; o++) {
		const uint16_t *w = j->w + (size_t)o * C;
		int c;

		for (c = C32; c < C; c += 16) {
			__mmask16 m = C - c >= 16 ? (__mmask16)0xffff :
			    (__mmask16)((1u << (C - c)) - 1);
			__m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m,
			    w + c));

#pragma GCC unroll 8
			for (n = 0; n < NR; n++)
				acc[o - o0][n] = _mm512_fmadd_ps(
				    _mm512_maskz_loadu_ps(m, j->inp +
				    (size_t)n * C + c), wv, acc[o - o0][n]);
		}
#pragma GCC unroll 8
		for (n = 0; n < NR; n++) {
			float *y = j->out + (size_t)n * j->OC + o;
			float v = _mm512_reduce_add_ps(acc[o - o0][n]);

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

/* F16C from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c"
 * for __builtin_cpu_supports.  Asked only once AVX-512 is known usable,
 * so the OS saves the vector state the conversions use. */
static int
has_f16c(void)
{
	unsigned int a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

int
kn_cpu_gemv_f16_usable(int N)
{
	static int cpu = -1;

	if (cpu < 0)
		cpu = __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") &&
		    __builtin_cpu_supports("fma") && has_f16c();
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
