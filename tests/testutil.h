/* Helpers shared by the check programs: seeded inputs, error measures and
 * a central-difference gradient checker. */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

void tu_fill(float *x, size_t n, float lo, float hi, uint64_t seed);
float *tu_alloc_fill(size_t n, float lo, float hi, uint64_t seed);
/* max |a-b| / max(|a|, |b|, floor) */
double tu_max_rel_err(const float *a, const float *b, size_t n, double floor);

/* Loss as a function of the current contents of some buffer. */
typedef double (*tu_loss_fn)(void *ctx);

/* Checks grad (n) against central differences of loss() in x (n), at up
 * to max_probe evenly spread indices; returns the largest relative error
 * |g - fd| / max(|g|, |fd|, floor). */
double tu_gradcheck(tu_loss_fn loss, void *ctx, float *x, const float *grad,
    size_t n, size_t max_probe, float eps, double floor);

/* Records the largest error of a named check in the log, one line each,
 * for the closing note. */
void tu_report(const char *what, double err);

#endif
