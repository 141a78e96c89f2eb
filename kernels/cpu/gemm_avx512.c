/* Our AVX-512 SGEMM, reached only through kn_gemm and kn_gemm_serial
 * (kernels/cpu/gemm.c), which check the CPU first.  B is packed once per
 * call into 32-column panels that every task shares; a 12x32 register-
 * blocked kernel runs over them, reading A in place or from 12-row panels
 * that each task packs for itself.  Every element of C is the same chain
 * of FMAs over k, cut into fixed blocks of GEMM_KC, whichever task, tile or
 * kernel computes it: that is what makes the result independent of the
 * thread count. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "kernels/cpu/gemm_private.h"
#include "kernels/pool.h"

/* When this kernel was compiled: the GEMM choice cache (gemm_choose.c)
 * keys on it, so that a changed kernel is timed again, and every program
 * of one build shares the key. */
const char kn__gemm_own_build[] = __DATE__ " " __TIME__;

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define GEMM_TARGET \
	__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))

/* Register tile: GEMM_MR rows of C by two zmm of columns, 24 accumulators. */
#define GEMM_MR 12
#define GEMM_NR 32
/* GEMM_KC fixes the summation blocks, hence the bits of the result: never
 * make it depend on the shape or the thread count.  A KC x NR panel of B
 * (32 KiB) stays in L1 while the MC x KC block of A (192 KiB) sits in L2. */
#define GEMM_KC 256
#define GEMM_MC 192
/* Tiles up to this wide read A in place when it is not transposed;
 * wider ones reuse a packed A enough to pay for packing it. */
#define GEMM_DIRECT_COLS 256
/* Rows of A whose stride is a multiple of this many floats (2 KiB) share
 * too few L1 sets to be read in place. */
#define GEMM_ALIAS_FLOATS 512
/* The kernel fetches its tile of C this many k before the end. */
#define GEMM_PF_C_K 48
/* How far ahead packing prefetches rows of A transposed. */
#define GEMM_PF_ROWS 8
/* Packed B beyond this many floats (8 MiB) is done in column chunks. */
#define GEMM_BPACK_MAX ((size_t)2 << 20)
/* Below this many multiply-adds a call is not worth waking the pool. */
#define GEMM_SERIAL_MACS ((size_t)1 << 20)

/* Per-thread packing buffers, freed when the thread exits.  The calling
 * thread's bpack is shared with the pool workers during a kn_gemm call;
 * the caller waits for them, so nothing else can touch it meanwhile. */
struct gemm_scratch {
	float *apack;   /* GEMM_MC x GEMM_KC */
	float *bpack;   /* K x (panels * GEMM_NR) */
	size_t bcap;    /* floats in bpack */
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void
scratch_free(void *p)
{
	struct gemm_scratch *s = p;

	free(s->apack);
	free(s->bpack);
	free(s);
}

static void
scratch_key_make(void)
{
	scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

static float *
floats_alloc(size_t n)
{
	size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;

	return aligned_alloc(64, bytes);
}

/* NULL when memory is short: callers then take gemm_tile_plain, which
 * gives the same bits without any buffer. */
static struct gemm_scratch *
scratch_get(void)
{
	struct gemm_scratch *s;

	pthread_once(&scratch_once, scratch_key_make);
	if (!scratch_key_ok)
		return NULL;
	if ((s = pthread_getspecific(scratch_key)) != NULL)
		return s;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	if ((s->apack = floats_alloc((size_t)GEMM_MC * GEMM_KC)) == NULL ||
	    pthread_setspecific(scratch_key, s) != 0) {
		free(s->apack);
		free(s);
		return NULL;
	}
	return s;
}

static float *
scratch_bpack(struct gemm_scratch *s, size_t n)
{
	if (s == NULL)
		return NULL;
	if (s->bcap < n) {
		free(s->bpack);
		s->bcap = 0;
		if ((s->bpack = floats_alloc(n)) == NULL)
			return NULL;
		s->bcap = n;
	}
	return s->bpack;
}

static inline __mmask16
mask_first(int n)
{
	return n >= 16 ? (__mmask16)0xffff :
	    n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* In-register transpose: out[j] lane i = in[i] lane j.  Four rounds of
 * shuffles, 64 in all, for 256 floats. */
GEMM_TARGET __attribute__((always_inline)) static inline void
transpose16(const __m512 in[16], __m512 out[16])
{
	__m512 t[16], s[16];
	int g, c;

#pragma GCC unroll 8
	for (g = 0; g < 8; g++) {
		t[2 * g] = _mm512_unpacklo_ps(in[2 * g], in[2 * g + 1]);
		t[2 * g + 1] = _mm512_unpackhi_ps(in[2 * g], in[2 * g + 1]);
	}
	/* s[4g+c], 128-bit lane L: rows 4g..4g+3 of column 4L+c */
#pragma GCC unroll 4
	for (g = 0; g < 4; g++) {
		__m512d t0 = _mm512_castps_pd(t[4 * g]);
		__m512d t1 = _mm512_castps_pd(t[4 * g + 1]);
		__m512d t2 = _mm512_castps_pd(t[4 * g + 2]);
		__m512d t3 = _mm512_castps_pd(t[4 * g + 3]);

		s[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
		s[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
		s[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
		s[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
	}
#pragma GCC unroll 4
	for (c = 0; c < 4; c++) {
		__m512 u = _mm512_shuffle_f32x4(s[c], s[4 + c], 0x44);
		__m512 v = _mm512_shuffle_f32x4(s[c], s[4 + c], 0xee);
		__m512 w = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0x44);
		__m512 x = _mm512_shuffle_f32x4(s[8 + c], s[12 + c], 0xee);

		out[c] = _mm512_shuffle_f32x4(u, w, 0x88);
		out[4 + c] = _mm512_shuffle_f32x4(u, w, 0xdd);
		out[8 + c] = _mm512_shuffle_f32x4(v, x, 0x88);
		out[12 + c] = _mm512_shuffle_f32x4(v, x, 0xdd);
	}
}

/* 16 k of a 12-row panel of A not transposed: rows (mr valid) of lda,
 * kk <= 16 k, into dst (kk, 12).  Inlined with kk constant in the main
 * loop, so that the arrays stay in registers. */
GEMM_TARGET __attribute__((always_inline)) static inline void
pack_a_block(const float *src, int lda, int mr, int kk, float *dst)
{
	const __mmask16 km = mask_first(kk), m12 = mask_first(GEMM_MR);
	__m512 in[16], out[16];
	int i, j;

#pragma GCC unroll 16
	for (i = 0; i < 16; i++)
		in[i] = i < mr ? _mm512_maskz_loadu_ps(km,
		    src + (size_t)i * lda) : _mm512_setzero_ps();
	transpose16(in, out);
#pragma GCC unroll 16
	for (j = 0; j < kk; j++)
		_mm512_mask_storeu_ps(dst + (size_t)j * GEMM_MR, m12, out[j]);
}

/* One 12-row panel of A not transposed, (M,K) with rows of k: rows
 * i0.. (mr valid), k in [p0, p0+kc), into dst (kc, 12) with the missing
 * rows zero.  A transpose, 16 k at a time. */
GEMM_TARGET static void
pack_a_panel(const float *A, int lda, int i0, int mr, int p0, int kc,
    float *dst)
{
	const float *src = A + (size_t)i0 * lda + p0;
	int k;

	for (k = 0; k + 16 <= kc; k += 16)
		pack_a_block(src + k, lda, mr, 16, dst + (size_t)k * GEMM_MR);
	if (k < kc)
		pack_a_block(src + k, lda, mr, kc - k,
		    dst + (size_t)k * GEMM_MR);
}

/* Rows [i0, i0+mc) of op(A), k in [p0, p0+kc): ceil(mc/12) panels.
 * A transposed is (K,M): a row of it feeds every panel, so k goes
 * outside and the reads stream along its rows. */
GEMM_TARGET static void
pack_a(int transA, const float *A, int lda, int i0, int mc, int p0, int kc,
    float *dst)
{
	const __mmask16 m12 = mask_first(GEMM_MR);
	const __mmask16 mtail = mask_first(mc - (mc - 1) / GEMM_MR * GEMM_MR);
	int i, k;

	if (transA) {
		for (k = 0; k < kc; k++) {
			const float *row = A + (size_t)(p0 + k) * lda + i0;
			float *out = dst + (size_t)k * GEMM_MR;

			for (i = 0; i + GEMM_MR < mc; i += GEMM_MR) {
				/* rows lda apart defeat the hardware
				 * prefetcher */
				_mm_prefetch((const char *)(row + i +
				    (size_t)GEMM_PF_ROWS * lda), _MM_HINT_T0);
				_mm512_mask_storeu_ps(out, m12,
				    _mm512_maskz_loadu_ps(m12, row + i));
				out += (size_t)kc * GEMM_MR;
			}
			_mm512_mask_storeu_ps(out, m12,
			    _mm512_maskz_loadu_ps(mtail, row + i));
		}
		return;
	}
	for (i = 0; i < mc; i += GEMM_MR)
		pack_a_panel(A, lda, i0 + i,
		    mc - i < GEMM_MR ? mc - i : GEMM_MR, p0, kc,
		    dst + (size_t)i * kc);
}

/* 16 columns (nr valid) by kk <= 16 k of B transposed, rows of ldb, into
 * dst with a row stride of 32: from src, or from src16's fp16 values,
 * widened as they are loaded, where src16 is not NULL (the panel then
 * holds what src would give of the values widened beforehand). */
GEMM_TARGET __attribute__((always_inline)) static inline void
pack_bt_block(const float *src, const uint16_t *src16, int ldb, int nr,
    int kk, float *dst)
{
	const __mmask16 km = mask_first(kk);
	__m512 in[16], out[16];
	int i, j;

#pragma GCC unroll 16
	for (i = 0; i < 16; i++)
		in[i] = i >= nr ? _mm512_setzero_ps() : src16 != NULL ?
		    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(km,
		    src16 + (size_t)i * ldb)) :
		    _mm512_maskz_loadu_ps(km, src + (size_t)i * ldb);
	transpose16(in, out);
#pragma GCC unroll 16
	for (j = 0; j < kk; j++)
		_mm512_store_ps(dst + (size_t)j * GEMM_NR, out[j]);
}

/* Rows [k0, k1) of B not transposed, (K,N) with rows of n, columns
 * [n0, n0+nc), into every panel of K block pc (np panels of kc rows):
 * whole rows at a time, so that the reads stream through memory. */
GEMM_TARGET static void
pack_b_rows(const float *B, int ldb, int n0, int nc, int np, int pc,
    int kc, int k0, int k1, float *bpack)
{
	const int tail = nc - (np - 1) * GEMM_NR;
	const __mmask16 m0 = mask_first(tail), m1 = mask_first(tail - 16);
	float *blk = bpack + (size_t)pc * np * GEMM_NR;
	int k, j;

	for (k = k0; k < k1; k++) {
		const float *row = B + (size_t)k * ldb + n0;
		float *dst = blk + (size_t)(k - pc) * GEMM_NR;

		for (j = 0; j < np - 1; j++) {
			_mm_prefetch((const char *)(row +
			    (size_t)GEMM_PF_ROWS * ldb), _MM_HINT_T0);
			_mm_prefetch((const char *)(row +
			    (size_t)GEMM_PF_ROWS * ldb + 16), _MM_HINT_T0);
			_mm512_store_ps(dst, _mm512_loadu_ps(row));
			_mm512_store_ps(dst + 16, _mm512_loadu_ps(row + 16));
			row += GEMM_NR;
			dst += (size_t)kc * GEMM_NR;
		}
		_mm_prefetch((const char *)(row + (size_t)GEMM_PF_ROWS * ldb),
		    _MM_HINT_T0);
		_mm_prefetch((const char *)(row + (size_t)GEMM_PF_ROWS * ldb +
		    16), _MM_HINT_T0);
		_mm512_store_ps(dst, _mm512_maskz_loadu_ps(m0, row));
		_mm512_store_ps(dst + 16, _mm512_maskz_loadu_ps(m1, row + 16));
	}
}

/* One 32-column panel of B transposed, (N,K) with rows of k: columns
 * j0.. (nr valid), k in [p0, p0+kc), into dst (kc, 32), missing columns
 * zero.  A transpose, 16 k at a time; B16, when not NULL, holds B in
 * fp16 (and B is not read). */
GEMM_TARGET static void
pack_bt_panel(const float *B, const uint16_t *B16, int ldb, int j0, int nr,
    int p0, int kc, float *dst)
{
	int k, h;
	size_t off;

	/* whole blocks of 16 k with a constant count, then the tail */
	for (k = 0; k + 16 <= kc; k += 16)
		for (h = 0; h < 2; h++) {
			off = (size_t)(j0 + h * 16) * ldb + p0 + k;
			pack_bt_block(B16 != NULL ? NULL : B + off,
			    B16 != NULL ? B16 + off : NULL, ldb, nr - h * 16,
			    16, dst + (size_t)k * GEMM_NR + h * 16);
		}
	if (k < kc)
		for (h = 0; h < 2; h++) {
			off = (size_t)(j0 + h * 16) * ldb + p0 + k;
			pack_bt_block(B16 != NULL ? NULL : B + off,
			    B16 != NULL ? B16 + off : NULL, ldb, nr - h * 16,
			    kc - k, dst + (size_t)k * GEMM_NR + h * 16);
		}
}

/* How a kernel folds its block sum s into C: the first K block applies
 * beta, the later ones add.  The plain path below must match these bits. */
enum { EPI_SET, EPI_BETA, EPI_ADD };

struct gemm_epi {
	int mode;
	int full;              /* all 32 columns: no masks */
	__mmask16 m0, m1;
	__m512 alpha, beta;
};

GEMM_TARGET static inline void
epi_row(float *c, __m512 s0, __m512 s1, const struct gemm_epi *e)
{
	if (e->full) {
		switch (e->mode) {
		case EPI_SET:
			s0 = _mm512_mul_ps(e->alpha, s0);
			s1 = _mm512_mul_ps(e->alpha, s1);
			break;
		case EPI_BETA:
			s0 = _mm512_fmadd_ps(e->alpha, s0,
			    _mm512_mul_ps(e->beta, _mm512_loadu_ps(c)));
			s1 = _mm512_fmadd_ps(e->alpha, s1,
			    _mm512_mul_ps(e->beta, _mm512_loadu_ps(c + 16)));
			break;
		default:
			s0 = _mm512_fmadd_ps(e->alpha, s0, _mm512_loadu_ps(c));
			s1 = _mm512_fmadd_ps(e->alpha, s1,
			    _mm512_loadu_ps(c + 16));
			break;
		}
		_mm512_storeu_ps(c, s0);
		_mm512_storeu_ps(c + 16, s1);
		return;
	}
	switch (e->mode) {
	case EPI_SET:
		s0 = _mm512_mul_ps(e->alpha, s0);
		s1 = _mm512_mul_ps(e->alpha, s1);
		break;
	case EPI_BETA:
		s0 = _mm512_fmadd_ps(e->alpha, s0, _mm512_mul_ps(e->beta,
		    _mm512_maskz_loadu_ps(e->m0, c)));
		s1 = _mm512_fmadd_ps(e->alpha, s1, _mm512_mul_ps(e->beta,
		    _mm512_maskz_loadu_ps(e->m1, c + 16)));
		break;
	default:
		s0 = _mm512_fmadd_ps(e->alpha, s0,
		    _mm512_maskz_loadu_ps(e->m0, c));
		s1 = _mm512_fmadd_ps(e->alpha, s1,
		    _mm512_maskz_loadu_ps(e->m1, c + 16));
		break;
	}
	_mm512_mask_storeu_ps(c, e->m0, s0);
	_mm512_mask_storeu_ps(c + 16, e->m1, s1);
}

/* Row i of A: rows 3q..3q+2 hang off pointer q, so that A in place needs
 * four pointers and one stride, few enough to stay in registers. */
#define KERN_A(i)							\
	((i) < 3 ? a0 : (i) < 6 ? a3 : (i) < 9 ? a6 : a9)[((i) % 3) * rs]

#define KERN_ROW(i)							\
	do {								\
		__m512 ai = _mm512_set1_ps(KERN_A(i));			\
		c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);		\
		c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);		\
	} while (0)

#define KERN_STORE(i)							\
	do {								\
		if ((i) >= mr)						\
			return;						\
		epi_row(c + (size_t)(i) * ldc, c##i##_0, c##i##_1, e);	\
	} while (0)

/* C (mr<=12, nr<=32 via e's masks) <- e(sum over kc of A x b (kc,32)),
 * where A (12,kc) is a[i * rs + k * cs]: a packed panel (rs 1, cs 12),
 * A transposed in place (rs 1, cs lda) or A in place (rs lda, cs 1).
 * Each accumulator lane is one element's FMA chain in k, the same in all
 * three. */
GEMM_TARGET __attribute__((always_inline)) static inline void
kern_body(int kc, const float *a, size_t rs, size_t cs,
    const float *restrict b, float *c, int ldc, int mr,
    const struct gemm_epi *e)
{
	const float *a0 = a, *a3 = a + 3 * rs, *a6 = a + 6 * rs;
	const float *a9 = a + 9 * rs;
	__m512 c0_0, c0_1, c1_0, c1_1, c2_0, c2_1, c3_0, c3_1;
	__m512 c4_0, c4_1, c5_0, c5_1, c6_0, c6_1, c7_0, c7_1;
	__m512 c8_0, c8_1, c9_0, c9_1, c10_0, c10_1, c11_0, c11_1;
	int k, i, kpf;

	c0_0 = c0_1 = c1_0 = c1_1 = c2_0 = c2_1 = _mm512_setzero_ps();
	c3_0 = c3_1 = c4_0 = c4_1 = c5_0 = c5_1 = _mm512_setzero_ps();
	c6_0 = c6_1 = c7_0 = c7_1 = c8_0 = c8_1 = _mm512_setzero_ps();
	c9_0 = c9_1 = c10_0 = c10_1 = c11_0 = c11_1 = _mm512_setzero_ps();
	/* C is fetched late enough that the panels of A and B streaming
	 * through L1 do not push it out again before the epilogue */
	kpf = kc > GEMM_PF_C_K ? kc - GEMM_PF_C_K : 0;
#pragma GCC unroll 4
	for (k = 0; k < kpf; k++) {
		__m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);

		KERN_ROW(0); KERN_ROW(1); KERN_ROW(2); KERN_ROW(3);
		KERN_ROW(4); KERN_ROW(5); KERN_ROW(6); KERN_ROW(7);
		KERN_ROW(8); KERN_ROW(9); KERN_ROW(10); KERN_ROW(11);
		a0 += cs;
		a3 += cs;
		a6 += cs;
		a9 += cs;
		b += GEMM_NR;
	}
	for (i = 0; i < mr; i++) {
		_mm_prefetch((const char *)(c + (size_t)i * ldc), _MM_HINT_T0);
		_mm_prefetch((const char *)(c + (size_t)i * ldc + 31),
		    _MM_HINT_T0);
	}
#pragma GCC unroll 4
	for (; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);

		KERN_ROW(0); KERN_ROW(1); KERN_ROW(2); KERN_ROW(3);
		KERN_ROW(4); KERN_ROW(5); KERN_ROW(6); KERN_ROW(7);
		KERN_ROW(8); KERN_ROW(9); KERN_ROW(10); KERN_ROW(11);
		a0 += cs;
		a3 += cs;
		a6 += cs;
		a9 += cs;
		b += GEMM_NR;
	}
	KERN_STORE(0); KERN_STORE(1); KERN_STORE(2); KERN_STORE(3);
	KERN_STORE(4); KERN_STORE(5); KERN_STORE(6); KERN_STORE(7);
	KERN_STORE(8); KERN_STORE(9); KERN_STORE(10); KERN_STORE(11);
}

GEMM_TARGET static void
kern_packed(int kc, const float *a, const float *b, float *c, int ldc,
    int mr, const struct gemm_epi *e)
{
	kern_body(kc, a, 1, GEMM_MR, b, c, ldc, mr, e);
}

/* A in place: all 12 rows must exist (mr == 12). */
GEMM_TARGET static void
kern_at(int kc, const float *a, int lda, const float *b, float *c, int ldc,
    const struct gemm_epi *e)
{
	kern_body(kc, a, 1, (size_t)lda, b, c, ldc, GEMM_MR, e);
}

GEMM_TARGET static void
kern_rows(int kc, const float *a, int lda, const float *b, float *c,
    int ldc, const struct gemm_epi *e)
{
	kern_body(kc, a, (size_t)lda, 1, b, c, ldc, GEMM_MR, e);
}

static int
div_up(int a, int b)
{
	return (a + b - 1) / b;
}

struct gemm_job {
	int transA, transB, M, N, K;
	float alpha, beta;
	const float *A, *B;
	const uint16_t *B16;   /* not NULL: B is these fp16 values (transB) */
	float *C;
	int lda, ldb, ldc;
	float *bpack;          /* NULL: no packed B, every tile goes plain */
	const float *bias;     /* (N): each tile's C starts as it (beta 1) */
	int n0, nc, np;        /* columns [n0, n0+nc) in np panels */
	int nkb;               /* K blocks */
	int tm, tn, gn;        /* task tile rows, columns; tiles per row */
};

/* One fp16 value widened, for the buffer-free path. */
GEMM_TARGET static inline float
half_value(uint16_t h)
{
	return _mm_cvtss_f32(_mm512_castps512_ps128(_mm512_cvtph_ps(
	    _mm256_set1_epi16((short)h))));
}

/* The buffer-free path, for when memory is short: scalar, but each
 * element gets exactly the FMA chain and epilogue of kern_body. */
GEMM_TARGET static void
gemm_tile_plain(const struct gemm_job *g, int r0, int r1, int c0, int c1)
{
	int i, j, k, pc;

	for (i = r0; i < r1; i++)
		for (j = c0; j < c1; j++) {
			float *cij = g->C + (size_t)i * g->ldc + j;

			for (pc = 0; pc < g->K; pc += GEMM_KC) {
				int kend = g->K - pc < GEMM_KC ? g->K :
				    pc + GEMM_KC;
				float s = 0.0f;

				for (k = pc; k < kend; k++) {
					float a = g->transA ?
					    g->A[(size_t)k * g->lda + i] :
					    g->A[(size_t)i * g->lda + k];
					float b = g->B16 != NULL ?
					    half_value(g->B16[(size_t)j *
					    g->ldb + k]) : g->transB ?
					    g->B[(size_t)j * g->ldb + k] :
					    g->B[(size_t)k * g->ldb + j];

					s = __builtin_fmaf(a, b, s);
				}
				if (pc > 0 || g->beta == 1.0f)
					*cij = __builtin_fmaf(g->alpha, s,
					    *cij);
				else if (g->beta == 0.0f)
					*cij = g->alpha * s;
				else
					*cij = __builtin_fmaf(g->alpha, s,
					    g->beta * *cij);
			}
		}
}

/* C rows [r0, r1), columns [c0, c1) (c0 - n0 a multiple of 32). */
GEMM_TARGET static void
gemm_tile(const struct gemm_job *g, int r0, int r1, int c0, int c1)
{
	struct gemm_scratch *s = g->bpack != NULL ? scratch_get() : NULL;
	struct gemm_epi e;
	int ic, pc, col, ir, direct;

	if (s == NULL) {
		gemm_tile_plain(g, r0, r1, c0, c1);
		return;
	}
	/* Measured on Zen 5: reading A in place beats packing it whenever A
	 * is transposed (12 contiguous floats per k), and for A not
	 * transposed in narrow tiles, unless its rows alias in L1. */
	direct = g->transA || (c1 - c0 <= GEMM_DIRECT_COLS &&
	    g->lda % GEMM_ALIAS_FLOATS != 0);
	e.alpha = _mm512_set1_ps(g->alpha);
	e.beta = _mm512_set1_ps(g->beta);
	for (ic = r0; ic < r1; ic += GEMM_MC) {
		int mc = r1 - ic < GEMM_MC ? r1 - ic : GEMM_MC;
		int full = direct ? mc / GEMM_MR * GEMM_MR : 0;

		for (pc = 0; pc < g->K; pc += GEMM_KC) {
			int kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;

			/* in direct mode only the short last panel is
			 * packed, as the kernels read 12 rows */
			if (full < mc)
				pack_a(g->transA, g->A, g->lda, ic + full,
				    mc - full, pc, kc, s->apack);
			/* beta == 1 adds: 1 * c is c, the bits agree */
			e.mode = pc > 0 || g->beta == 1.0f ? EPI_ADD :
			    g->beta == 0.0f ? EPI_SET : EPI_BETA;
			for (col = c0; col < c1; col += GEMM_NR) {
				int nr = c1 - col < GEMM_NR ? c1 - col :
				    GEMM_NR;
				const float *bp = g->bpack +
				    (size_t)pc * g->np * GEMM_NR +
				    (size_t)((col - g->n0) / GEMM_NR) * kc *
				    GEMM_NR;
				float *cc = g->C + (size_t)ic * g->ldc + col;

				e.full = nr == GEMM_NR;
				e.m0 = mask_first(nr);
				e.m1 = mask_first(nr - 16);
				for (ir = 0; ir < full; ir += GEMM_MR) {
					float *ct = cc + (size_t)ir * g->ldc;

					if (g->transA)
						kern_at(kc, g->A +
						    (size_t)pc * g->lda + ic +
						    ir, g->lda, bp, ct, g->ldc,
						    &e);
					else
						kern_rows(kc, g->A +
						    (size_t)(ic + ir) * g->lda +
						    pc, g->lda, bp, ct, g->ldc,
						    &e);
				}
				for (ir = full; ir < mc; ir += GEMM_MR)
					kern_packed(kc, s->apack +
					    (size_t)(ir - full) * kc, bp,
					    cc + (size_t)ir * g->ldc, g->ldc,
					    mc - ir, &e);
			}
		}
	}
}

/* B not transposed: task t packs rows [t, t+1) * GEMM_KROWS of every
 * panel (GEMM_KC is a multiple of GEMM_KROWS).  Transposed: task t packs
 * panel t % np of K block t / np. */
#define GEMM_KROWS 64

static int
gemm_pack_tasks(const struct gemm_job *g)
{
	return g->transB ? g->nkb * g->np : div_up(g->K, GEMM_KROWS);
}

static void
gemm_pack_task(void *ctx, int t, int thread)
{
	const struct gemm_job *g = ctx;
	int pb, pc, kc, j, j0, nr, k0, k1;

	(void)thread;
	if (!g->transB) {
		k0 = t * GEMM_KROWS;
		k1 = g->K - k0 < GEMM_KROWS ? g->K : k0 + GEMM_KROWS;
		pc = k0 / GEMM_KC * GEMM_KC;
		kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;
		pack_b_rows(g->B, g->ldb, g->n0, g->nc, g->np, pc, kc, k0, k1,
		    g->bpack);
		return;
	}
	pb = t / g->np;
	j = t % g->np;
	pc = pb * GEMM_KC;
	kc = g->K - pc < GEMM_KC ? g->K - pc : GEMM_KC;
	j0 = g->n0 + j * GEMM_NR;
	nr = g->n0 + g->nc - j0 < GEMM_NR ? g->n0 + g->nc - j0 : GEMM_NR;
	pack_bt_panel(g->B, g->B16, g->ldb, j0, nr, pc, kc, g->bpack +
	    (size_t)pc * g->np * GEMM_NR + (size_t)j * kc * GEMM_NR);
}

static void
gemm_tile_task(void *ctx, int t, int thread)
{
	const struct gemm_job *g = ctx;
	int r0 = (t / g->gn) * g->tm, c0 = g->n0 + (t % g->gn) * g->tn;
	int r1 = r0 + g->tm < g->M ? r0 + g->tm : g->M;
	int c1 = c0 + g->tn < g->n0 + g->nc ? c0 + g->tn : g->n0 + g->nc;
	int i;

	(void)thread;
	/* the bias put in the tile just before it is read (beta is 1): the
	 * bits of C filled with it beforehand, without a pass of its own */
	for (i = r0; g->bias != NULL && i < r1; i++)
		memcpy(g->C + (size_t)i * g->ldc + c0, g->bias + c0,
		    (size_t)(c1 - c0) * sizeof(float));
	gemm_tile(g, r0, r1, c0, c1);
}

/* Splits the chunk's output into about four tiles per thread, whole rows
 * where there are enough of them, so that A is read only once.  Only the
 * speed depends on this: the bits do not. */
static void
gemm_grid(struct gemm_job *g, int threads)
{
	int mt = div_up(g->M, GEMM_MR), gm, gn, want = 4 * threads;

	if (threads <= 1) {
		g->tm = g->M;
		g->tn = g->np * GEMM_NR;
		g->gn = 1;
		return;
	}
	/* at least four register rows per tile, so a B panel is reused */
	gm = mt / 4 < want ? mt / 4 : want;
	if (gm < 1)
		gm = 1;
	gn = div_up(want, gm);
	if (gn > g->np)
		gn = g->np;
	g->tm = div_up(mt, gm) * GEMM_MR;
	g->tn = div_up(g->np, gn) * GEMM_NR;
	g->gn = div_up(g->np, g->tn / GEMM_NR);
}

/* Columns per chunk of packed B: the whole of N unless B is large. */
static int
gemm_chunk_cols(int K)
{
	int ncmax = (int)(GEMM_BPACK_MAX / (size_t)K / GEMM_NR) * GEMM_NR;

	return ncmax < GEMM_NR ? GEMM_NR : ncmax;
}

/* The product over chunks of columns; packed, when not NULL, holds every
 * chunk's panels one after the other (kn__gemm_avx512_pack). */
static void
gemm_run(struct gemm_job *g, int parallel, const float *packed)
{
	struct gemm_scratch *s = scratch_get();
	int threads = parallel ? kn_pool_threads() : 1;
	int ncmax = gemm_chunk_cols(g->K), t, ntiles, pack;

	if ((size_t)g->M * g->N * g->K < GEMM_SERIAL_MACS)
		threads = 1;
	g->nkb = div_up(g->K, GEMM_KC);
	for (g->n0 = 0; g->n0 < g->N; g->n0 += g->nc) {
		g->nc = g->N - g->n0 < ncmax ? g->N - g->n0 : ncmax;
		g->np = div_up(g->nc, GEMM_NR);
		pack = packed == NULL;
		if (pack)
			g->bpack = scratch_bpack(s, (size_t)g->K * g->np *
			    GEMM_NR);
		else {
			g->bpack = (float *)packed;
			packed += (size_t)g->K * g->np * GEMM_NR;
		}
		gemm_grid(g, threads);
		ntiles = div_up(g->M, g->tm) * g->gn;
		if (threads > 1) {
			if (pack && g->bpack != NULL)
				kn_pool_run(gemm_pack_tasks(g),
				    gemm_pack_task, g);
			kn_pool_run(ntiles, gemm_tile_task, g);
			continue;
		}
		/* kn_gemm_serial must stay on this thread, pool or not */
		if (pack && g->bpack != NULL)
			for (t = 0; t < gemm_pack_tasks(g); t++)
				gemm_pack_task(g, t, 0);
		for (t = 0; t < ntiles; t++)
			gemm_tile_task(g, t, 0);
	}
}

void
kn__gemm_avx512(int parallel, int transA, int transB, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc)
{
	struct gemm_job g = {
		.transA = transA, .transB = transB, .M = M, .N = N, .K = K,
		.alpha = alpha, .beta = beta, .A = A, .B = B, .C = C,
		.lda = lda, .ldb = ldb, .ldc = ldc,
	};

	gemm_run(&g, parallel, NULL);
}

void
kn__gemm_avx512_f16(int parallel, int M, int N, int K, const float *A,
    int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
	struct gemm_job g = {
		.transB = 1, .M = M, .N = N, .K = K, .alpha = 1.0f,
		.beta = beta, .A = A, .B16 = B, .C = C, .lda = lda,
		.ldb = ldb, .ldc = ldc,
	};

	gemm_run(&g, parallel, NULL);
}

size_t
kn__gemm_avx512_packed_floats(int N, int K)
{
	int ncmax = gemm_chunk_cols(K), n0, nc;
	size_t total = 0;

	for (n0 = 0; n0 < N; n0 += nc) {
		nc = N - n0 < ncmax ? N - n0 : ncmax;
		total += (size_t)K * div_up(nc, GEMM_NR) * GEMM_NR;
	}
	return total;
}

void
kn__gemm_avx512_pack(const float *B, int ldb, int N, int K, float *packed)
{
	struct gemm_job g = { .transB = 1, .N = N, .K = K, .B = B,
	    .ldb = ldb };
	int ncmax = gemm_chunk_cols(K), t;

	g.nkb = div_up(K, GEMM_KC);
	for (g.n0 = 0; g.n0 < N; g.n0 += g.nc) {
		g.nc = N - g.n0 < ncmax ? N - g.n0 : ncmax;
		g.np = div_up(g.nc, GEMM_NR);
		g.bpack = packed;
		for (t = 0; t < gemm_pack_tasks(&g); t++)
			gemm_pack_task(&g, t, 0);
		packed += (size_t)K * g.np * GEMM_NR;
	}
}

void
kn__gemm_avx512_packed(int parallel, int M, int N, int K, const float *A,
    int lda, const float *B, int ldb, const float *packed,
    const float *bias, float beta, float *C, int ldc)
{
	struct gemm_job g = {
		.transB = 1, .M = M, .N = N, .K = K, .alpha = 1.0f,
		.beta = bias != NULL ? 1.0f : beta, .A = A, .B = B, .C = C,
		.lda = lda, .ldb = ldb, .ldc = ldc, .bias = bias,
	};

	gemm_run(&g, parallel, packed);
}

#else /* no x86: gemm.c never selects this kernel */

void
kn__gemm_avx512(int parallel, int transA, int transB, int M, int N, int K,
    float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc)
{
	(void)parallel; (void)transA; (void)transB; (void)M; (void)N;
	(void)K; (void)alpha; (void)A; (void)lda; (void)B; (void)ldb;
	(void)beta; (void)C; (void)ldc;
}

void
kn__gemm_avx512_f16(int parallel, int M, int N, int K, const float *A,
    int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
	(void)parallel; (void)M; (void)N; (void)K; (void)A; (void)lda;
	(void)B; (void)ldb; (void)beta; (void)C; (void)ldc;
}

size_t
kn__gemm_avx512_packed_floats(int N, int K)
{
	(void)N;
	(void)K;
	return 0;
}

void
kn__gemm_avx512_pack(const float *B, int ldb, int N, int K, float *packed)
{
	(void)B; (void)ldb; (void)N; (void)K; (void)packed;
}

void
kn__gemm_avx512_packed(int parallel, int M, int N, int K, const float *A,
    int lda, const float *B, int ldb, const float *packed,
    const float *bias, float beta, float *C, int ldc)
{
	(void)parallel; (void)M; (void)N; (void)K; (void)A; (void)lda;
	(void)B; (void)ldb; (void)packed; (void)bias; (void)beta; (void)C;
	(void)ldc;
}

#endif
