/* The training loop of one model: batches from the objective, the AdamW
 * schedule of the spec, a CSV log, periodic atomic checkpoints and resume.
 * The optimizer state is written before the checkpoint, so a crash between
 * the two leaves a state that is newer than the checkpoint; resume then
 * notices the step mismatch and starts the moments afresh. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/train.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/rng.h"
#include "proto/checkpoint.h"

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int
sm_model_path(char *buf, size_t len, const char *dir, bt_kind kind,
    int block, const char *ext)
{
	int n;

	if (kind == BT_BLOCK)
		n = snprintf(buf, len, "%s/block-%d.%s", dir, block, ext);
	else
		n = snprintf(buf, len, "%s/%s.%s", dir, bt_kind_name(kind), ext);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

kn_model_shape
sm_model_shape(const pr_spec *s, bt_kind kind)
{
	if (kind == BT_BLOCK)
		return pr_spec_block_shape(s);
	return pr_spec_reference_shape(s, kind == BT_CAUSAL);
}

static void
fill_meta(pr_ckpt_meta *meta, const sm_train_opts *o, int64_t step)
{
	memset(meta, 0, sizeof(*meta));
	snprintf(meta->run_id, sizeof(meta->run_id), "%s", o->run_id);
	meta->block = o->kind == BT_BLOCK ? o->block : 0;
	snprintf(meta->kind, sizeof(meta->kind), "%s", bt_kind_name(o->kind));
	meta->step = step;
}

static int
save(kn_model *m, const sm_train_opts *o, int64_t step, char *err)
{
	size_t np = kn_model_num_params(m), len;
	float *host = malloc(np * 4), *mm = malloc(np * 4), *vv = malloc(np * 4);
	char path[PR_PATH_LEN + 32], *buf = NULL;
	const kn_tensor *t;
	pr_ckpt_meta meta;
	int count, topt, rc;

	if (host == NULL || mm == NULL || vv == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	fill_meta(&meta, o, step);
	kn_model_get_opt_state(m, mm, vv, &topt);
	rc = pr_ckpt_encode_optim(&meta, np, mm, vv, topt, &buf, &len, err);
	if (rc == 0 && sm_model_path(path, sizeof(path), o->dir, o->kind,
	    o->block, "optim") == 0)
		rc = pr_ckpt_write_file(path, buf, len, err);
	free(buf);
	buf = NULL;
	if (rc != 0)
		goto out;
	kn_model_get_params(m, host);
	t = kn_model_tensors(m, &count);
	rc = pr_ckpt_encode(&meta, t, count, host, &buf, &len, err);
	if (rc == 0 && sm_model_path(path, sizeof(path), o->dir, o->kind,
	    o->block, "ckpt") == 0)
		rc = pr_ckpt_write_file(path, buf, len, err);
out:
	free(buf); free(host); free(mm); free(vv);
	return rc;
}

static int
load_params(kn_model *m, const char *path, const pr_ckpt_meta *expect,
    pr_ckpt_meta *got, char *err)
{
	size_t np = kn_model_num_params(m), len;
	float *host = malloc(np * 4);
	const kn_tensor *t;
	char *buf = NULL;
	int count, rc;

	if (host == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	rc = pr_ckpt_read_file(path, SM_CKPT_MAX_BYTES, &buf, &len, err);
	if (rc == 0) {
		t = kn_model_tensors(m, &count);
		rc = pr_ckpt_decode(buf, len, expect, t, count, host, got, err);
	}
	if (rc == 0)
		rc = kn_model_set_params(m, host, err);
	if (rc != 0) {
		char msg[KN_ERR_LEN];

		snprintf(msg, sizeof(msg), "%s", err);
		kn_error(err, rc, "%.100s: %.150s", path, msg);
	}
	free(buf);
	free(host);
	return rc;
}

int
sm_load_model(kn_model **out, const pr_spec *s, const char *run_id,
    const char *dir, bt_kind kind, int block, const kn_backend *be,
    int max_batch, char *err)
{
	kn_model_shape shape = sm_model_shape(s, kind);
	char path[PR_PATH_LEN + 32];
	pr_ckpt_meta expect = { 0 };
	int rc;

	*out = NULL;
	if (sm_model_path(path, sizeof(path), dir, kind, block, "ckpt") != 0)
		return kn_error(err, KN_EINVAL, "path too long");
	if (access(path, F_OK) != 0) {
		if (kind == BT_BLOCK)
			return kn_error(err, KN_EIO, "missing checkpoint %.150s: "
			    "train it with 'shardmeter train --block %d'", path,
			    block);
		return kn_error(err, KN_EIO, "missing checkpoint %.150s: train "
		    "it with 'shardmeter train --reference %s'", path,
		    bt_kind_name(kind));
	}
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
	expect.block = kind == BT_BLOCK ? block : 0;
	snprintf(expect.kind, sizeof(expect.kind), "%s", bt_kind_name(kind));
	if ((rc = kn_model_create(out, &shape, be, max_batch, err)) != 0)
		return rc;
	if ((rc = load_params(*out, path, &expect, NULL, err)) != 0) {
		kn_model_free(*out);
		*out = NULL;
	}
	return rc;
}

/* Restores parameters and, when it matches, the optimizer state; returns
 * the step to continue from (0 for a fresh start). */
static int
resume(kn_model *m, const sm_train_opts *o, int64_t *step, char *err)
{
	char path[PR_PATH_LEN + 32], *buf = NULL;
	pr_ckpt_meta expect, got, gopt;
	size_t np = kn_model_num_params(m), len;
	float *mm, *vv;
	int rc, t;

	*step = 0;
	sm_model_path(path, sizeof(path), o->dir, o->kind, o->block, "ckpt");
	if (access(path, F_OK) != 0)
		return KN_OK;
	fill_meta(&expect, o, 0);
	if ((rc = load_params(m, path, &expect, &got, err)) != 0)
		return rc;
	*step = got.step;
	sm_model_path(path, sizeof(path), o->dir, o->kind, o->block, "optim");
	mm = malloc(np * 4);
	vv = malloc(np * 4);
	if (mm == NULL || vv == NULL) {
		free(mm);
		free(vv);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	rc = pr_ckpt_read_file(path, SM_CKPT_MAX_BYTES, &buf, &len, err);
	if (rc == 0)
		rc = pr_ckpt_decode_optim(buf, len, &expect, np, mm, vv, &t,
		    &gopt, err);
	if (rc == 0 && gopt.step == got.step)
		kn_model_set_opt_state(m, mm, vv, t);
	else
		fprintf(stderr, "shardmeter: %s: optimizer state %s; its "
		    "moments start afresh at step %lld\n", path,
		    rc != 0 ? "unreadable" : "from another step",
		    (long long)got.step);
	free(buf); free(mm); free(vv);
	return KN_OK;
}

static void
progress_line(const sm_train_opts *o, int64_t step, float loss, double pps,
    double eta, int final)
{
	char who[32];

	if (o->kind == BT_BLOCK)
		snprintf(who, sizeof(who), "block %d", o->block);
	else
		snprintf(who, sizeof(who), "%s", bt_kind_name(o->kind));
	fprintf(stderr, "\r[%s] step %lld/%d  loss %.4f  %.0f positions/s  "
	    "ETA %dm%02ds   %s", who, (long long)step, o->steps, loss, pps,
	    (int)eta / 60, (int)eta % 60, final ? "\n" : "");
}

int
sm_train(const sm_train_opts *o, char *err)
{
	const pr_spec *s = o->spec;
	kn_model_shape shape = sm_model_shape(s, o->kind);
	kn_adamw opt = { (float)s->beta1, (float)s->beta2, 1e-8f,
	    (float)s->weight_decay, (float)s->clip };
	size_t N = (size_t)s->batch * s->window;
	int32_t *input = NULL, *target = NULL;
	float *weight = NULL, loss = 0, gnorm = 0;
	char path[PR_PATH_LEN + 32];
	kn_model *m = NULL;
	corpus c;
	FILE *csv = NULL;
	int64_t step, start;
	double t0, last_print = 0;
	int rc;

	if (mkdir(o->dir, 0755) != 0 && errno != EEXIST)
		return kn_error(err, KN_EIO, "cannot create %s: %s", o->dir,
		    strerror(errno));
	rc = corpus_open(&c, s->train, s->train_sha256,
	    (size_t)s->window + 2, err);
	if (rc != 0)
		return rc;
	if ((rc = kn_model_create(&m, &shape, o->be, s->batch, err)) != 0)
		goto out;
	kn_model_init(m, kn_rng_stream(s->seed, o->kind, (uint64_t)o->block,
	    0x1417));
	if ((rc = resume(m, o, &start, err)) != 0)
		goto out;
	input = malloc(N * 4);
	target = malloc(N * 4);
	weight = malloc(N * 4);
	if (input == NULL || target == NULL || weight == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	sm_model_path(path, sizeof(path), o->dir, o->kind, o->block, "csv");
	if ((csv = fopen(path, start > 0 ? "a" : "w")) == NULL) {
		rc = kn_error(err, KN_EIO, "cannot write %s: %s", path,
		    strerror(errno));
		goto out;
	}
	if (start == 0)
		fprintf(csv, "step,loss,lr,grad_norm,positions_per_s,"
		    "elapsed_s\n");
	t0 = now();
	for (step = start; step < o->steps; step++) {
		kn_batch batch = { input, target, weight, s->batch };
		double lr = pr_spec_lr(s, (int)step), el, pps;

		if (o->stop != NULL && *o->stop)
			break;
		bt_train_batch(s, &c, o->kind, o->block - 1, o->replica, step,
		    input, target, weight);
		if ((rc = kn_model_backward(m, &batch, &loss, err)) != 0)
			goto out;
		kn_model_update(m, &opt, (float)lr, &gnorm);
		el = now() - t0;
		pps = (double)N * (step + 1 - start) / el;
		fprintf(csv, "%lld,%.6f,%.6g,%.5f,%.1f,%.3f\n",
		    (long long)step + 1, loss, lr, gnorm, pps, el);
		if (o->progress && (el - last_print > 0.5 ||
		    step + 1 == o->steps)) {
			progress_line(o, step + 1, loss, pps,
			    el / (step + 1 - start) * (o->steps - step - 1), 0);
			last_print = el;
		}
		if (o->every > 0 && (step + 1) % o->every == 0 &&
		    step + 1 < o->steps) {
			fflush(csv);
			if ((rc = save(m, o, step + 1, err)) != 0)
				goto out;
		}
	}
	if (o->progress)
		fprintf(stderr, "\n");
	rc = save(m, o, step, err);
out:
	if (csv != NULL)
		fclose(csv);
	free(input); free(target); free(weight);
	kn_model_free(m);
	corpus_close(&c);
	return rc;
}
