/* The compute probe: a scratch model of the block's shape, a random batch,
 * and a clock around training steps and forward passes; and the free
 * memory of the device they ran on. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "daemon/probe_compute.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/rng.h"

/* MemAvailable of /proc/meminfo, in bytes. */
static int
host_available(uint64_t *bytes, char *err)
{
	char line[256];
	unsigned long long kib;
	FILE *f = fopen("/proc/meminfo", "r");

	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot read /proc/meminfo");
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
			fclose(f);
			*bytes = (uint64_t)kib * 1024;
			return KN_OK;
		}
	fclose(f);
	return kn_error(err, KN_EIO, "/proc/meminfo has no MemAvailable");
}

int
pc_free_memory(const kn_backend *be, uint64_t *bytes, const char **how,
    char *err)
{
	*bytes = 0;
	if (be->kind == KN_BACKEND_CUDA) {
#ifdef HAVE_CUDA
		size_t free_b = 0, total_b = 0;

		*how = "cudaMemGetInfo";
		if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
			(void)cudaGetLastError();
			return kn_error(err, KN_ENODEV, "cudaMemGetInfo failed");
		}
		*bytes = free_b;
		return KN_OK;
#else
		return kn_error(err, KN_ENODEV, "a CUDA backend in a build "
		    "without CUDA");
#endif
	}
	*how = "MemAvailable";
	return host_available(bytes, err);
}

/* A batch of the masked-diffusion objective at noise level one half:
 * its values do not change the work, a seed makes it the same each time. */
static void
fill_batch(int32_t *input, int32_t *target, float *weight, size_t N,
    int window)
{
	kn_rng r;
	size_t i;

	kn_rng_init(&r, 12, 0);
	for (i = 0; i < N; i++) {
		target[i] = (int32_t)kn_rng_below(&r, KN_VOCAB_OUT);
		if (kn_rng_uniform(&r) < 0.5f) {
			input[i] = KN_MASK;
			weight[i] = 2.0f / (float)window;
		} else {
			input[i] = target[i];
			weight[i] = 0.0f;
		}
	}
}

/* Steps of one kind (train or forward) until the budget is spent. */
static int
timed(kn_model *m, const kn_batch *b, int train, double seconds,
    int max_steps, float *losses, int *count, double *elapsed, char *err)
{
	kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	double t0 = kn_now();
	float loss;
	int rc, i;

	for (i = -1; i < max_steps; i++) {
		if (i == 0)
			t0 = kn_now();  /* after the warm-up */
		rc = train ? kn_model_step(m, b, &opt, 1e-4f, &loss, err) :
		    kn_model_eval(m, b, losses, err);
		if (rc != 0)
			return rc;
		if (i >= 0 && kn_now() - t0 >= seconds) {
			i++;
			break;
		}
	}
	*count = i;
	*elapsed = kn_now() - t0;
	return KN_OK;
}

int
pc_measure(const kn_model_shape *shape, int batch, const kn_backend *be,
    double seconds_each, int max_steps, pc_rates *out, char *err)
{
	size_t N = (size_t)batch * kn_model_row_len(shape);
	int32_t *input = malloc(N * sizeof(int32_t));
	int32_t *target = malloc(N * sizeof(int32_t));
	float *weight = malloc(N * sizeof(float));
	float *losses = malloc((size_t)batch * sizeof(float));
	kn_model *m = NULL;
	kn_batch b = { input, target, weight, batch };
	int rc;

	memset(out, 0, sizeof(*out));
	if (input == NULL || target == NULL || weight == NULL ||
	    losses == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	if (batch < 1 || max_steps < 1 || !(seconds_each > 0)) {
		rc = kn_error(err, KN_EINVAL, "a probe needs a batch, steps "
		    "and seconds above zero");
		goto out;
	}
	fill_batch(input, target, weight, N, shape->window);
	if ((rc = kn_model_create(&m, shape, be, batch, err)) != 0)
		goto out;
	kn_model_init(m, 12);
	rc = timed(m, &b, 1, seconds_each, max_steps, losses,
	    &out->train_steps, &out->train_s, err);
	if (rc == 0)
		rc = timed(m, &b, 0, seconds_each, max_steps, losses,
		    &out->forward_passes, &out->forward_s, err);
	if (rc == 0) {
		out->train_positions_per_s = (double)out->train_steps *
		    (double)N / out->train_s;
		out->forward_positions_per_s = (double)out->forward_passes *
		    (double)N / out->forward_s;
	}
out:
	kn_model_free(m);
	free(input);
	free(target);
	free(weight);
	free(losses);
	return rc;
}
