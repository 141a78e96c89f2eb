/* float32 <-> fp16 and bfloat16, by integer operations on the bit
 * patterns (and one exact-or-RNE float addition for fp16 subnormals), so
 * every element takes the same branch-free path and the loops vectorise.
 * Called by proto/update.c on host memory. */
#include "config.h"

#include <string.h>

#include "kernels/convert.h"

static inline uint32_t
f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float
bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* c ? x : y for c in {0, 1}, as masks: a ternary would let the compiler
 * move the float arithmetic into a branch, which it may not then
 * if-convert (the arithmetic could trap, in its model), and the loop
 * would stay scalar. */
static inline uint32_t
select_u32(uint32_t c, uint32_t x, uint32_t y)
{
	uint32_t m = 0u - c;

	return (x & m) | (y & ~m);
}

/* fp16 has exponent bias 15 against f32's 127: 112 << 23 rebiases. */
#define F16_REBIAS (112u << 23)

static inline uint16_t
f32_to_f16(float f)
{
	uint32_t x = f32_bits(f), a = x & 0x7fffffffu;
	uint32_t sign = (x >> 16) & 0x8000u;
	/* a normal result: round off the 13 low bits to nearest even, then
	 * rebias; a carry out of the mantissa bumps the exponent, up to Inf
	 * from 65520 on */
	uint32_t normal = (a + 0xfffu + ((a >> 13) & 1u) - F16_REBIAS) >> 13;
	/* below 2^-14: adding 0.5 leaves the fp16 subnormal's units (2^-24)
	 * in the low bits of 0.5's mantissa, rounded by the addition itself
	 * (the FPU rounds to nearest even in every process of ours); f32
	 * subnormals round to zero, with or without denormals-are-zero */
	uint32_t sub = f32_bits(bits_f32(a) + 0.5f) - 0x3f000000u;
	uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
	uint32_t h = select_u32(a >= 0x38800000u, normal, sub); /* 2^-14 */

	h = select_u32(a >= 0x47800000u, 0x7c00u, h);  /* 2^16 and Inf */
	h = select_u32(a > 0x7f800000u, nan, h);

	return (uint16_t)(sign | h);
}

static inline float
f16_to_f32(uint16_t h)
{
	uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
	uint32_t em = (uint32_t)h & 0x7fffu;
	uint32_t normal = (em << 13) + F16_REBIAS;
	uint32_t special = (em << 13) | 0x7f800000u;    /* Inf, NaN */
	/* a subnormal is em units of 2^-24: exact in f32 */
	uint32_t sub = f32_bits((float)(int32_t)em * 0x1p-24f);
	uint32_t u = select_u32(em >= 0x0400u, normal, sub);

	u = select_u32(em >= 0x7c00u, special, u);
	return bits_f32(sign | u);
}

static inline uint16_t
f32_to_bf16(float f)
{
	uint32_t x = f32_bits(f);
	/* cannot wrap: the largest finite pattern, 0xff7fffff, plus 0x8000
	 * stays below 2^32; the carry rounds up to Inf where it must */
	uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
	uint32_t nan = (x >> 16) | 0x0040u;

	return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

void
kn_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		dst[i] = f32_to_f16(src[i]);
}

void
kn_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		dst[i] = f16_to_f32(src[i]);
}

void
kn_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		dst[i] = f32_to_bf16(src[i]);
}

void
kn_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		dst[i] = bits_f32((uint32_t)src[i] << 16);
}

long
kn_f16_first_nonfinite(const uint16_t *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((x[i] & 0x7c00u) == 0x7c00u)
			return (long)i;
	return -1;
}

long
kn_bf16_first_nonfinite(const uint16_t *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((x[i] & 0x7f80u) == 0x7f80u)
			return (long)i;
	return -1;
}
