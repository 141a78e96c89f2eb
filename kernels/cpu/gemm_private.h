/* Between gemm.c (the dispatch) and gemm_avx512.c (our kernel): the
 * kernel's entry points, which only gemm.c calls, after its checks. */
#ifndef KN_CPU_GEMM_PRIVATE_H
#define KN_CPU_GEMM_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

/* Requires M, N, K > 0 and alpha != 0 (gemm.c handles the rest). */
void kn__gemm_avx512(int parallel, int transA, int transB, int M, int N,
    int K, float alpha, const float *A, int lda, const float *B, int ldb,
    float beta, float *C, int ldc);

/* Pre-packed B (kn_gemm_pack): B transposed, (N,K), laid out once as
 * every call would pack it, then C = A . B^T + beta C reads it in place
 * of packing; with bias (N), C starts as the bias in every row and beta
 * is 1.  The bits are those of the unpacked call; B itself is read only
 * where memory is short (the kernel's buffer-free path). */
size_t kn__gemm_avx512_packed_floats(int N, int K);
void kn__gemm_avx512_pack(const float *B, int ldb, int N, int K,
    float *packed);
void kn__gemm_avx512_packed(int parallel, int M, int N, int K,
    const float *A, int lda, const float *B, int ldb, const float *packed,
    const float *bias, float beta, float *C, int ldc);

/* C = A . B^T + beta C with B (N,K) in fp16, rows of ldb values: each
 * value widened as the kernel packs it, so the bits are those of the
 * float call on B widened beforehand. */
void kn__gemm_avx512_f16(int parallel, int M, int N, int K,
    const float *A, int lda, const uint16_t *B, int ldb, float beta,
    float *C, int ldc);

#endif
