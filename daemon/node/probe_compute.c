/* The compute probe: a scratch model of the block's shape, a random batch,
 * and a clock around training steps and forward passes; and the free
 * memory of the device they ran on. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/node/probe_compute.h"
#include "kernels/average.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/rng.h"
#include "proto/update.h"

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
pcm_free_memory(const kn_backend *be, uint64_t *bytes, const char **how,
    char *err)
{
	*bytes = 0;
	if (be->memory_free != NULL) {
		*how = be->kind == KN_BACKEND_CUDA ? "cudaMemGetInfo" :
		    "memory_free";
		return be->memory_free(bytes, err);
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
    int max_steps, float *losses, int *count, double *elapsed, double *cpu,
    char *err)
{
	kn_adamw opt = { 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f };
	double t0 = kn_now(), c0 = kn_cpu_now();
	float loss;
	int rc, i;

	for (i = -1; i < max_steps; i++) {
		if (i == 0) {
			t0 = kn_now();  /* after the warm-up */
			c0 = kn_cpu_now();
		}
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
	*cpu = kn_cpu_now() - c0;
	return KN_OK;
}

/* Serving passes of one window picking R rows (the middle one when R is
 * 1, else the first R) until the budget is spent; *each: seconds a pass. */
static int
timed_serve(kn_model *m, const int32_t *input, int R, double seconds,
    int max_steps, double *each, char *err)
{
	int n = kn_model_get_shape(m)->window, i, rc, count = 0;
	int32_t *rows = malloc((size_t)n * sizeof(int32_t));
	int32_t *out = malloc((size_t)n * sizeof(int32_t));
	float *u = malloc((size_t)n * sizeof(float));
	double t0 = 0.0;

	if (rows == NULL || out == NULL || u == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	/* one row: the middle of the window; all rows: every one */
	for (i = 0; i < R; i++) {
		rows[i] = R == 1 ? n / 2 : i;
		u[i] = (float)(i + 1) / (float)(R + 1);
	}
	for (i = -1; i < max_steps; i++) {
		if (i == 0)
			t0 = kn_now();  /* after the warm-up */
		if ((rc = kn_model_predict_at(m, input, 1, rows, R, u, 1.0f,
		    out, err)) != 0)
			goto out;
		if (i >= 0 && kn_now() - t0 >= seconds) {
			i++;
			break;
		}
	}
	count = i;
	*each = (kn_now() - t0) / count;
	rc = KN_OK;
out:
	free(rows);
	free(out);
	free(u);
	return rc;
}

void
pcm_sort(double *v, int n)
{
	int i, j;

	/* a few values: insertion sort, no comparator to go wrong on NaN */
	for (i = 1; i < n; i++) {
		double x = v[i];

		for (j = i; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
}

double
pcm_quantile(const double *sorted, int n, double q)
{
	double pos = q * (n - 1);
	int i = (int)pos;

	if (i >= n - 1)
		return sorted[n - 1];
	return sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]);
}

double
pcm_median(double *v, int n)
{
	pcm_sort(v, n);
	return pcm_quantile(v, n, 0.5);
}

int
pcm_measure_update(size_t count, double cpu_seconds, pcm_update_cost *out,
    char *err)
{
	size_t most = pr_update_max_bytes(count), i, len;
	int ok = count > 0 && count <= SIZE_MAX / sizeof(float) &&
	    most != SIZE_MAX;
	size_t bytes = ok ? count * sizeof(float) : 1;
	float *delta = malloc(bytes), *got = malloc(bytes), *avg = malloc(bytes);
	/* what the round keeps of an update: its bytes */
	char *copy = malloc(ok ? most : 1);
	pr_update_meta meta = { .block = 1, .enc = PR_ENC_F32, .count = count,
		.comp = PR_COMP_NONE }, expect = { .block = -1, .round = -1,
		.count = count };
	const float *list[2] = { delta, got };
	double enc = 0, merge = 0, t0;
	volatile char seen = 0;
	char *buf = NULL;
	int rc = KN_OK, reps = 0;

	memset(out, 0, sizeof(*out));
	if (!ok)
		rc = kn_error(err, KN_EINVAL, "an update of %zu parameters",
		    count);
	else if (delta == NULL || got == NULL || avg == NULL || copy == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; rc == KN_OK && i < count; i++)
		delta[i] = (float)((i * 2654435761u) % 2001) * 1e-6f - 1e-3f;
	memset(meta.run_id, '0', PR_RUN_ID_LEN - 1);
	while (rc == KN_OK && (reps < 3 || enc + merge < cpu_seconds)) {
		t0 = kn_cpu_now();
		if ((rc = pr_update_encode(&meta, delta, &buf, &len, err)) != 0)
			break;
		enc += kn_cpu_now() - t0;
		t0 = kn_cpu_now();
		rc = pr_update_decode(buf, len, &expect, got, NULL, err);
		/* the round keeps the bytes to answer followers (read back
		 * once, so the copy is not optimized away) */
		if (rc == 0 && len <= most && len > 0) {
			memcpy(copy, buf, len);
			seen = copy[len - 1];
		}
		merge += kn_cpu_now() - t0;
		/* the average is of two: half of it is this update's */
		t0 = kn_cpu_now();
		kn_average(avg, list, 2, count);
		merge += (kn_cpu_now() - t0) / 2;
		free(buf);
		buf = NULL;
		reps++;
	}
	if (rc == KN_OK) {
		out->encode_s = enc / reps / (double)count;
		out->merge_s = merge / reps / (double)count;
	}
	(void)seen;
	free(delta);
	free(got);
	free(avg);
	free(copy);
	return rc;
}

int
pcm_measure(const kn_model_shape *shape, int batch, const kn_backend *be,
    double seconds_each, int max_steps, int repeats, pcm_rates *out,
    char *err)
{
	size_t N = (size_t)batch * kn_model_row_len(shape);
	int32_t *input = malloc(N * sizeof(int32_t));
	int32_t *target = malloc(N * sizeof(int32_t));
	float *weight = malloc(N * sizeof(float));
	float *losses = malloc((size_t)batch * sizeof(float));
	double train[PCM_MAX_REPEATS], forward[PCM_MAX_REPEATS], s;
	double one[PCM_MAX_REPEATS], all[PCM_MAX_REPEATS];
	double share[PCM_MAX_REPEATS], cpu;
	kn_model *m = NULL, *serving = NULL;
	kn_batch b = { input, target, weight, batch };
	int rc = KN_OK, k, count;

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
	if (repeats < 1 || repeats > PCM_MAX_REPEATS) {
		rc = kn_error(err, KN_EINVAL, "a probe repeats 1 to %d times, "
		    "not %d", PCM_MAX_REPEATS, repeats);
		goto out;
	}
	fill_batch(input, target, weight, N, shape->window);
	if ((rc = kn_model_create(&m, shape, be, batch, err)) != 0 ||
	    (rc = kn_model_create_inference(&serving, shape, be, 1,
	    KN_STORE_F32, err)) != 0)
		goto out;
	kn_model_init(m, 12);
	kn_model_init(serving, 12);
	for (k = 0; k < repeats; k++) {
		rc = timed(m, &b, 1, seconds_each, max_steps, losses, &count,
		    &s, &cpu, err);
		if (rc != 0)
			break;
		out->train_steps += count;
		out->train_s += s;
		out->train_each[k] = train[k] = (double)count * (double)N / s;
		share[k] = cpu / s;
		rc = timed(m, &b, 0, seconds_each, max_steps, losses, &count,
		    &s, &cpu, err);
		if (rc != 0)
			break;
		out->forward_passes += count;
		out->forward_s += s;
		out->forward_each[k] = forward[k] = (double)count * (double)N /
		    s;
		if ((rc = timed_serve(serving, input, 1, seconds_each / 2,
		    max_steps, &one[k], err)) != 0 ||
		    (rc = timed_serve(serving, input, shape->window,
		    seconds_each / 2, max_steps, &all[k], err)) != 0)
			break;
	}
	if (rc == 0) {
		out->repeats = repeats;
		out->train_positions_per_s = pcm_median(train, repeats);
		out->forward_positions_per_s = pcm_median(forward, repeats);
		out->serve_pass_one_s = pcm_median(one, repeats);
		out->serve_pass_window_s = pcm_median(all, repeats);
		out->train_cpu_share = pcm_median(share, repeats);
	}
out:
	kn_model_free(m);
	kn_model_free(serving);
	free(input);
	free(target);
	free(weight);
	free(losses);
	return rc;
}
