/* Shared helpers of the check programs. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/rng.h"
#include "tests/testutil.h"

void
tu_fill(float *x, size_t n, float lo, float hi, uint64_t seed)
{
	size_t i;

	kn_rng_fill_uniform(x, n, seed, 77);
	for (i = 0; i < n; i++)
		x[i] = lo + (hi - lo) * x[i];
}

float *
tu_alloc_fill(size_t n, float lo, float hi, uint64_t seed)
{
	float *x = malloc((n ? n : 1) * sizeof(float));

	if (x == NULL)
		abort();
	tu_fill(x, n, lo, hi, seed);
	return x;
}

double
tu_max_rel_err(const float *a, const float *b, size_t n, double floor)
{
	double worst = 0.0;
	size_t i;

	for (i = 0; i < n; i++) {
		double scale = fmax(fmax(fabs(a[i]), fabs(b[i])), floor);
		double e = fabs((double)a[i] - b[i]) / scale;

		if (!(e <= worst))
			worst = e;
	}
	return worst;
}

double
tu_gradcheck(tu_loss_fn loss, void *ctx, float *x, const float *grad,
    size_t n, size_t max_probe, float eps, double floor)
{
	size_t step = n > max_probe ? n / max_probe : 1, i;
	double worst = 0.0;

	for (i = 0; i < n; i += step) {
		float keep = x[i];
		double up, down, fd, e;

		x[i] = keep + eps;
		up = loss(ctx);
		x[i] = keep - eps;
		down = loss(ctx);
		x[i] = keep;
		fd = (up - down) / (2.0 * eps);
		e = fabs(fd - grad[i]) / fmax(fmax(fabs(fd), fabs(grad[i])),
		    floor);
		if (!(e <= worst))
			worst = e;
	}
	return worst;
}

void
tu_report(const char *what, double err)
{
	fprintf(stderr, "# %-28s max relative error %.3e\n", what, err);
}
