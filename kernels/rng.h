/* Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).  Every
 * draw is a pure function of (seed, stream, index), so initialisation,
 * noise and data sampling are the same whatever the thread count, and a
 * perturbation can be regenerated instead of stored. */
#ifndef KN_RNG_H
#define KN_RNG_H

#include <stddef.h>
#include <stdint.h>

/* out = Philox4x32-10(key, ctr) */
void kn_philox4x32(const uint32_t key[2], const uint32_t ctr[4],
    uint32_t out[4]);

/* A sequential view of one stream, for code that draws a few numbers. */
typedef struct {
	uint64_t seed;
	uint64_t stream;
	uint64_t index;      /* next block of four */
	uint32_t buf[4];
	int left;            /* unread words in buf */
} kn_rng;

void kn_rng_init(kn_rng *r, uint64_t seed, uint64_t stream);
uint32_t kn_rng_u32(kn_rng *r);
/* uniform in [0, 1), 24 bits */
float kn_rng_uniform(kn_rng *r);
/* standard normal (Box-Muller) */
float kn_rng_normal(kn_rng *r);
/* uniform integer in [0, n), n > 0, without modulo bias worth noting
 * (64-bit multiply-shift) */
uint64_t kn_rng_below(kn_rng *r, uint64_t n);

/* Element i of the fill is a function of (seed, stream, i) alone. */
void kn_rng_fill_normal(float *x, size_t n, float mean, float std,
    uint64_t seed, uint64_t stream);
void kn_rng_fill_uniform(float *x, size_t n, uint64_t seed,
    uint64_t stream);
/* Elements first .. first + n - 1 of kn_rng_fill_normal's fill, for a
 * tensor filled a piece at a time. */
void kn_rng_fill_normal_from(float *x, size_t n, float mean, float std,
    uint64_t seed, uint64_t stream, size_t first);

/* Folds several identifiers (block, replica, step, ...) into one stream id,
 * so that callers key their draws by meaning instead of by hand-made
 * offsets. */
uint64_t kn_rng_stream(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

#endif
