/* Conversions between float32 and the two 16-bit formats an update may
 * travel in: IEEE 754 binary16 (fp16) and bfloat16.  proto/update.c calls
 * them to encode and decode updates; they work on host memory. */
#ifndef KN_CONVERT_H
#define KN_CONVERT_H

#include <stddef.h>
#include <stdint.h>

/* Every conversion rounds to nearest, ties to even, and handles every
 * input (fp16 subnormals are rounded by one float addition, so they need
 * the FPU's default rounding mode, which nothing of ours changes;
 * flush-to-zero and denormals-are-zero make no difference):
 * - f32 -> f16: subnormal results are rounded like any other, values from
 *   65520 up (half-way to 2^16 and beyond) become Inf, and a NaN stays a
 *   NaN of the same sign with the top 10 bits of its payload and the quiet
 *   bit set (so no NaN can turn into Inf).
 * - f32 -> bf16: likewise, over the f32 exponent range: finite values
 *   from 0x1.ffp127 up (half-way past the largest bf16) become Inf, and
 *   subnormals round like any other value.
 * - f16 -> f32 and bf16 -> f32 are exact; NaNs keep sign and payload.
 * dst and src must not overlap. */
void kn_f32_to_f16(uint16_t *dst, const float *src, size_t n);
void kn_f16_to_f32(float *dst, const uint16_t *src, size_t n);
void kn_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void kn_bf16_to_f32(float *dst, const uint16_t *src, size_t n);

/* Index of the first Inf or NaN among n fp16 (or bf16) values, or -1:
 * a check on encoded values, without converting them. */
long kn_f16_first_nonfinite(const uint16_t *x, size_t n);
long kn_bf16_first_nonfinite(const uint16_t *x, size_t n);

#endif
