/* The CPU backend's transcendental loops (softmax, log-sum-exp, GELU).  libm
 * calls do not vectorise without -ffast-math, and these loops carry the
 * element-wise share of a train step, so exp and tanh are computed here by
 * range reduction and a polynomial in plain C that the compiler vectorises;
 * target_clones builds an AVX-512, an AVX2 and a baseline version and the
 * loader picks one for the CPU at hand. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"


/* exp(x) for x in about [-87, 88], relative error below 2e-7: x = k ln2 + r,
 * |r| <= ln2/2, exp(r) by a degree-6 polynomial (Cephes expf), times 2^k
 * built in the exponent bits. */
static inline float
vexp(float x)
{
	float k, r, p, r2;
	int32_t ki;
	uint32_t bits;
	float scale;

	x = x < -87.0f ? -87.0f : x;
	x = x > 88.0f ? 88.0f : x;
	/* round to nearest by the 1.5 * 2^23 trick: roundf() is a libm
	 * call that stops the loop from vectorising */
	k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	r = x - k * 0.693359375f;
	r = r + k * 2.12194440e-4f;
	r2 = r * r;
	p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r2 + r + 1.0f;
	ki = (int32_t)k;
	bits = (uint32_t)(ki + 127) << 23;
	memcpy(&scale, &bits, sizeof(scale));
	return p * scale;
}

/* x becomes exp(scale * x - max), the maximum in 16 lanes, which
 * vectorises (the maximum is the same in any order), the exponentials in
 * a loop of their own, which vectorises too. */
static inline void
exp_shifted(float *x, int n, float scale)
{
	float lane[16], m = -INFINITY;
	int j, l;

	for (l = 0; l < 16; l++)
		lane[l] = -INFINITY;
	for (j = 0; j + 16 <= n; j += 16)
		for (l = 0; l < 16; l++)
			lane[l] = x[j + l] * scale > lane[l] ?
			    x[j + l] * scale : lane[l];
	for (; j < n; j++)
		m = x[j] * scale > m ? x[j] * scale : m;
	for (l = 0; l < 16; l++)
		m = lane[l] > m ? lane[l] : m;
	for (j = 0; j < n; j++)
		x[j] = vexp(x[j] * scale - m);
}

KN_CLONES float
kn_cpu_softmax_row(float *x, int n, float scale)
{
	float sum = 0.0f, inv;
	int j;

	exp_shifted(x, n, scale);
	/* the sum alone stays in order, the bits of one running sum */
	for (j = 0; j < n; j++)
		sum += x[j];
	inv = 1.0f / sum;
	for (j = 0; j < n; j++)
		x[j] *= inv;
	return sum;
}

/* Rows whose sums run side by side. */
#define SOFTMAX_ROWS 8

KN_CLONES void
kn_cpu_softmax_rows(float *x, int rows, int n, size_t ld, float scale)
{
	float sum[SOFTMAX_ROWS], inv;
	int r, j, l;

	/* each row's sum is still one running sum in order, but those of
	 * SOFTMAX_ROWS rows are independent chains the core overlaps,
	 * where one row's waits on its adder's latency */
	for (r = 0; r + SOFTMAX_ROWS <= rows; r += SOFTMAX_ROWS) {
		float *y = x + (size_t)r * ld;

		for (l = 0; l < SOFTMAX_ROWS; l++) {
			exp_shifted(y + (size_t)l * ld, n, scale);
			sum[l] = 0.0f;
		}
		for (j = 0; j < n; j++)
			for (l = 0; l < SOFTMAX_ROWS; l++)
				sum[l] += y[(size_t)l * ld + j];
		for (l = 0; l < SOFTMAX_ROWS; l++) {
			inv = 1.0f / sum[l];
			for (j = 0; j < n; j++)
				y[(size_t)l * ld + j] *= inv;
		}
	}
	for (; r < rows; r++)
		kn_cpu_softmax_row(x + (size_t)r * ld, n, scale);
}

KN_CLONES float
kn_cpu_logsumexp_row(const float *x, int n)
{
	float m = -INFINITY, sum = 0.0f;
	int j;

	for (j = 0; j < n; j++)
		m = x[j] > m ? x[j] : m;
	for (j = 0; j < n; j++)
		sum += vexp(x[j] - m);
	return m + logf(sum);
}

KN_CLONES void
kn_cpu_exp_row(float *y, const float *x, int n, float shift, float mul)
{
	int j;

	for (j = 0; j < n; j++)
		y[j] = vexp(x[j] - shift) * mul;
}

/* GELU, tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
 * 1 + tanh(u) = 2 / (1 + exp(-2u)), one exp per element. */
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

KN_CLONES void
kn_cpu_gelu_range(float *out, const float *inp, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		float x = inp[i];
		float u = GELU_K * (x + GELU_C * x * x * x);

		out[i] = x / (1.0f + vexp(-2.0f * u));
	}
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, with
 * s = 1/(1+exp(-2u)) = (1 + tanh u)/2 and 1 - tanh^2 u = 4 s (1 - s). */
KN_CLONES void
kn_cpu_gelu_backward_range(float *dinp, const float *inp, const float *dout,
    size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		float x = inp[i];
		float u = GELU_K * (x + GELU_C * x * x * x);
		float s = 1.0f / (1.0f + vexp(-2.0f * u));
		float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);

		dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
	}
}
