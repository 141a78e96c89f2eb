/* Philox4x32-10 and the helpers built on it.  Constants from Random123. */
#include "config.h"

#include <math.h>

#include "kernels/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void
kn_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4])
{
	uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
	uint32_t k0 = key[0], k1 = key[1];
	int round;

	for (round = 0; round < 10; round++) {
		uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
		uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;

		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
		k0 += PHILOX_W0;
		k1 += PHILOX_W1;
	}
	out[0] = c0;
	out[1] = c1;
	out[2] = c2;
	out[3] = c3;
}

static void
philox_block(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4])
{
	uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
	uint32_t ctr[4] = { (uint32_t)index, (uint32_t)(index >> 32),
	    (uint32_t)stream, (uint32_t)(stream >> 32) };

	kn_philox4x32(key, ctr, out);
}

void
kn_rng_init(kn_rng *r, uint64_t seed, uint64_t stream)
{
	r->seed = seed;
	r->stream = stream;
	r->index = 0;
	r->left = 0;
}

uint32_t
kn_rng_u32(kn_rng *r)
{
	if (r->left == 0) {
		philox_block(r->seed, r->stream, r->index++, r->buf);
		r->left = 4;
	}
	return r->buf[4 - r->left--];
}

static float
u32_to_uniform(uint32_t u)
{
	return (float)(u >> 8) * (1.0f / 16777216.0f);
}

float
kn_rng_uniform(kn_rng *r)
{
	return u32_to_uniform(kn_rng_u32(r));
}

/* Box-Muller on two uniforms; 1 - u keeps the log argument in (0, 1]. */
static float
box_muller(uint32_t a, uint32_t b)
{
	float u1 = 1.0f - u32_to_uniform(a);
	float u2 = u32_to_uniform(b);

	return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

float
kn_rng_normal(kn_rng *r)
{
	uint32_t a = kn_rng_u32(r);

	return box_muller(a, kn_rng_u32(r));
}

uint64_t
kn_rng_below(kn_rng *r, uint64_t n)
{
	uint64_t x = ((uint64_t)kn_rng_u32(r) << 32) | kn_rng_u32(r);

	return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

void
kn_rng_fill_normal(float *x, size_t n, float mean, float std, uint64_t seed,
    uint64_t stream)
{
	uint32_t w[4];
	size_t i;

	for (i = 0; i < n; i += 2) {
		philox_block(seed, stream, i / 2, w);
		x[i] = mean + std * box_muller(w[0], w[1]);
		if (i + 1 < n)
			x[i + 1] = mean + std * box_muller(w[2], w[3]);
	}
}

void
kn_rng_fill_normal_from(float *x, size_t n, float mean, float std,
    uint64_t seed, uint64_t stream, size_t first)
{
	uint32_t w[4];
	size_t i;

	/* element g is half of block g / 2, as kn_rng_fill_normal has it */
	for (i = 0; i < n;) {
		size_t g = first + i;

		philox_block(seed, stream, g / 2, w);
		if (g % 2 == 0) {
			x[i++] = mean + std * box_muller(w[0], w[1]);
			if (i < n)
				x[i++] = mean + std * box_muller(w[2], w[3]);
		} else
			x[i++] = mean + std * box_muller(w[2], w[3]);
	}
}

void
kn_rng_fill_uniform(float *x, size_t n, uint64_t seed, uint64_t stream)
{
	uint32_t w[4];
	size_t i, j;

	for (i = 0; i < n; i += 4) {
		philox_block(seed, stream, i / 4, w);
		for (j = 0; j < 4 && i + j < n; j++)
			x[i + j] = u32_to_uniform(w[j]);
	}
}

/* SplitMix64's finaliser: a bijection with good avalanche. */
static uint64_t
mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

uint64_t
kn_rng_stream(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
	uint64_t h = mix64(a + 0x9E3779B97F4A7C15ull);

	h = mix64(h ^ (b + 0x9E3779B97F4A7C15ull));
	h = mix64(h ^ (c + 0x9E3779B97F4A7C15ull));
	return mix64(h ^ (d + 0x9E3779B97F4A7C15ull));
}
