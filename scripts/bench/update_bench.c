/* The size and speed of the update encodings (proto/update.c), for the
 * planner's network options: bytes of one update of a block in f32, f16,
 * bf16 and int8, each with and without zstd, and encode and decode time
 * per MB of f32 values.  The update is theta_to - theta_from of two
 * checkpoints of the same model (--from, --to), or synthetic values of
 * the quality spec's block size.  Not a test: it prints figures.
 *   update-bench [--from A.ckpt --to B.ckpt] [--count N] [--seconds S] */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>
#include <zstd.h>

#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/update.h"

#define RUN_ID "0000000000000000000000000000000000000000000000000000000000000000"

static void
die(const char *what)
{
	fprintf(stderr, "update-bench: %s\n", what);
	exit(1);
}

/* The payload of a checkpoint file as floats (its tensors back to back,
 * PROTOCOL.md); the file was written by pr_ckpt_encode, so it is read
 * without the decoder's checks. */
static float *
ckpt_params(const char *path, size_t *count)
{
	msgpack_unpacked up;
	msgpack_object_kv *kv;
	float *out = NULL;
	char *buf;
	long len;
	uint32_t i;
	FILE *f;

	if ((f = fopen(path, "rb")) == NULL || fseek(f, 0, SEEK_END) != 0 ||
	    (len = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET) != 0)
		die("cannot read a checkpoint");
	if ((buf = malloc((size_t)len)) == NULL ||
	    fread(buf, 1, (size_t)len, f) != (size_t)len)
		die("cannot read a checkpoint");
	fclose(f);
	msgpack_unpacked_init(&up);
	if (msgpack_unpack_next(&up, buf, (size_t)len, NULL) !=
	    MSGPACK_UNPACK_SUCCESS || up.data.type != MSGPACK_OBJECT_MAP)
		die("not a checkpoint");
	kv = up.data.via.map.ptr;
	for (i = 0; i < up.data.via.map.size; i++)
		if (kv[i].key.type == MSGPACK_OBJECT_STR &&
		    kv[i].key.via.str.size == 7 &&
		    memcmp(kv[i].key.via.str.ptr, "payload", 7) == 0 &&
		    kv[i].val.type == MSGPACK_OBJECT_BIN) {
			*count = kv[i].val.via.bin.size / 4;
			if ((out = malloc(*count * sizeof(float))) == NULL)
				die("out of memory");
			/* little-endian hosts only, like the bench machines */
			memcpy(out, kv[i].val.via.bin.ptr, *count * 4);
		}
	if (out == NULL)
		die("checkpoint without a payload");
	msgpack_unpacked_destroy(&up);
	free(buf);
	return out;
}

/* Gaussian values (std 1e-3) with one in 100 ten times larger: about an
 * AdamW update after a round of local steps, without a training run. */
static void
synthetic(float *x, size_t n)
{
	uint64_t s = 88172645463325252ull;
	size_t i;

	for (i = 0; i < n; i++) {
		double u1, u2;

		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		u1 = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		u2 = (double)(s >> 11) / 9007199254740992.0;
		x[i] = (float)(1e-3 * sqrt(-2 * log(u1)) * cos(6.283185307 *
		    u2) * (i % 100 == 7 ? 10 : 1));
	}
}

int
main(int argc, char **argv)
{
	const char *from = NULL, *to = NULL;
	double seconds = 0.5;
	size_t count = kn_model_params_for(&(kn_model_shape){ 128, 4, 2, 64,
	    0, 0 }), n2, i;
	float *delta, *out;
	double rms;
	char err[KN_ERR_LEN];
	int a, enc, comp;

	for (a = 1; a < argc; a++) {
		if (strcmp(argv[a], "--from") == 0 && a + 1 < argc)
			from = argv[++a];
		else if (strcmp(argv[a], "--to") == 0 && a + 1 < argc)
			to = argv[++a];
		else if (strcmp(argv[a], "--count") == 0 && a + 1 < argc)
			count = strtoul(argv[++a], NULL, 10);
		else if (strcmp(argv[a], "--seconds") == 0 && a + 1 < argc)
			seconds = atof(argv[++a]);
		else {
			fprintf(stderr, "usage: update-bench [--from A.ckpt "
			    "--to B.ckpt] [--count N] [--seconds S]\n"
			    "Bytes of one update in each encoding, with and "
			    "without zstd, and encode and decode time per MB "
			    "of f32 values.\n");
			return 2;
		}
	}
	if ((from == NULL) != (to == NULL))
		die("--from and --to go together");
	if (from != NULL) {
		float *b = ckpt_params(to, &n2);

		delta = ckpt_params(from, &count);
		if (n2 != count)
			die("the two checkpoints differ in size");
		for (i = 0; i < count; i++)
			delta[i] -= b[i];
		free(b);
	} else {
		if ((delta = malloc(count * sizeof(float))) == NULL)
			die("out of memory");
		synthetic(delta, count);
	}
	if ((out = malloc(count * sizeof(float))) == NULL)
		die("out of memory");
	for (i = 0, rms = 0; i < count; i++)
		rms += (double)delta[i] * delta[i];
	printf("update of %zu parameters (%s), %.2f MB in f32, rms %.3g\n",
	    count, from ? "two checkpoints" : "synthetic", 4.0 * count / 1e6,
	    sqrt(rms / count));
	printf("%-5s %-5s %10s %7s %14s %14s %12s\n", "enc", "comp", "bytes",
	    "of f32", "encode ms/MB", "decode ms/MB", "rms error");
	for (enc = PR_ENC_F32; enc <= PR_ENC_INT8; enc++)
		for (comp = PR_COMP_NONE; comp <= PR_COMP_ZSTD; comp++) {
			pr_update_meta m = { .enc = (pr_encoding)enc,
			    .comp = (pr_compression)comp, .count = count };
			double t0, t_enc, t_dec, mb = 4.0 * count / 1e6, se = 0;
			size_t len = 0, f32_len = pr_update_max_bytes(count);
			int reps;
			char *buf = NULL;

			memcpy(m.run_id, RUN_ID, sizeof(RUN_ID));
			t0 = kn_now();
			for (reps = 0; reps == 0 || kn_now() - t0 < seconds;
			    reps++) {
				free(buf);
				if (pr_update_encode(&m, delta, &buf, &len,
				    err) != 0)
					die(err);
			}
			t_enc = (kn_now() - t0) / reps;
			t0 = kn_now();
			for (reps = 0; reps == 0 || kn_now() - t0 < seconds;
			    reps++)
				if (pr_update_decode(buf, len, &m, out, NULL,
				    err) != 0)
					die(err);
			t_dec = (kn_now() - t0) / reps;
			for (i = 0; i < count; i++)
				se += ((double)out[i] - delta[i]) *
				    ((double)out[i] - delta[i]);
			printf("%-5s %-5s %10zu %6.1f%% %14.2f %14.2f %12.3g\n",
			    pr_encoding_name(m.enc),
			    pr_compression_name(m.comp), len,
			    100.0 * len / (f32_len - 512),
			    1000 * t_enc / mb, 1000 * t_dec / mb,
			    sqrt(se / count));
			free(buf);
		}
	/* the level: zstd alone on each raw payload */
	printf("\nzstd level on the raw payload (bytes, compress ms/MB of "
	    "payload):\n");
	for (enc = PR_ENC_F32; enc <= PR_ENC_INT8; enc++) {
		static const int levels[4] = { 1, 3, 9, 19 };
		pr_update_meta m = { .enc = (pr_encoding)enc, .count = count };
		size_t raw = pr_update_payload_bytes(m.enc, count), len, k;
		size_t bound = ZSTD_compressBound(raw);
		char *buf, *z = malloc(bound);

		memcpy(m.run_id, RUN_ID, sizeof(RUN_ID));
		if (z == NULL || pr_update_encode(&m, delta, &buf, &len,
		    err) != 0)
			die("encode");
		printf("%-5s raw %9zu:", pr_encoding_name(m.enc), raw);
		for (k = 0; k < 4; k++) {
			double t0 = kn_now();
			size_t zlen = 0;
			int reps;

			for (reps = 0; reps == 0 || kn_now() - t0 <
			    seconds / 4; reps++)
				zlen = ZSTD_compress(z, bound,
				    buf + len - 41 - raw, raw, levels[k]);
			printf("  L%d %9zu %7.2f", levels[k], zlen,
			    1000 * (kn_now() - t0) / reps / (raw / 1e6));
		}
		printf("\n");
		free(buf);
		free(z);
	}
	free(delta);
	free(out);
	return 0;
}
