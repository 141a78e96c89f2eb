/* Rows times an fp16-storage matrix without widening it first (decoding). */
#ifndef KN_CPU_GEMV_F16_H
#define KN_CPU_GEMV_F16_H

#include <stdint.h>

/* The most rows the path takes (a byte's decoding, a short prompt); more
 * go through the GEMM.  The path keeps a row's sums in registers, two
 * columns at a time, and 8 rows fill them. */
#define KN_GEMV_F16_MAX_ROWS 8

/* Whether this CPU runs the path (AVX-512F/BW/VL, F16C, FMA) for N rows. */
int kn_cpu_gemv_f16_usable(int N);
/* out (N, OC) = beta out + inp (N, C) w^T, w (OC, C) fp16 bits; only
 * where kn_cpu_gemv_f16_usable(N). */
void kn_cpu_gemv_f16(float *out, const float *inp, const uint16_t *w, int N,
    int C, int OC, float beta);

#endif
