/* The training loop of one model: batches from the objective, the AdamW
 * schedule of the spec, a CSV log, periodic atomic checkpoints and resume.
 * The optimizer state is written before the checkpoint, so a crash between
 * the two leaves a state that is newer than the checkpoint; resume then
 * notices the step mismatch and starts the moments afresh. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/train.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/rng.h"
#include "proto/checkpoint.h"

int
tr_model_path(char *buf, size_t len, const char *dir, bt_kind kind,
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
tr_model_shape(const pr_spec *s, bt_kind kind, int block)
{
	if (kind == BT_BLOCK)
		return pr_spec_block_shape(s, block - 1);
	return pr_spec_reference_shape(s, kind == BT_CAUSAL);
}

struct tr_trainer {
	tr_opts o;
	kn_model *m;
	corpus c;
	int32_t *input, *target;
	float *weight;
	FILE *csv;
	int64_t step;           /* optimizer steps done */
	int64_t round;          /* averaging rounds done */
	double t0;
	int64_t step0;          /* step at open, for positions per second */
	int removed;            /* leftover temporary files removed at open */
	char removed_names[200];        /* their names, cut short */
};

static void
fill_meta(pr_ckpt_meta *meta, const tr_opts *o, int64_t step,
    int64_t round)
{
	memset(meta, 0, sizeof(*meta));
	snprintf(meta->run_id, sizeof(meta->run_id), "%s", o->run_id);
	meta->block = o->kind == BT_BLOCK ? o->block : 0;
	snprintf(meta->kind, sizeof(meta->kind), "%s", bt_kind_name(o->kind));
	meta->step = step;
	meta->round = round;
}

int
tr_trainer_save(tr_trainer *t, char *err)
{
	kn_model *m = t->m;
	const tr_opts *o = &t->o;
	size_t np = kn_model_num_params(m), len;
	float *host = malloc(np * 4), *mm = malloc(np * 4), *vv = malloc(np * 4);
	char path[PR_PATH_LEN + 32], *buf = NULL;
	const kn_tensor *tab;
	pr_ckpt_meta meta;
	int count, topt, rc;

	if (host == NULL || mm == NULL || vv == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	if (t->csv != NULL)
		fflush(t->csv);
	fill_meta(&meta, o, t->step, t->round);
	kn_model_get_opt_state(m, mm, vv, &topt);
	rc = pr_ckpt_encode_optim(&meta, np, mm, vv, topt, &buf, &len, err);
	if (rc == 0 && tr_model_path(path, sizeof(path), o->dir, o->kind,
	    o->block, "optim") == 0)
		rc = pr_ckpt_write_file(path, buf, len, err);
	free(buf);
	buf = NULL;
	if (rc != 0)
		goto out;
	kn_model_get_params(m, host);
	tab = kn_model_tensors(m, &count);
	rc = pr_ckpt_encode(&meta, tab, count, host, &buf, &len, err);
	if (rc == 0 && tr_model_path(path, sizeof(path), o->dir, o->kind,
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
	rc = pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &buf, &len, err);
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
tr_load_model(kn_model **out, const pr_spec *s, const char *run_id,
    const char *dir, bt_kind kind, int block, const kn_backend *be,
    int max_batch, char *err)
{
	kn_model_shape shape = tr_model_shape(s, kind, block);
	char path[PR_PATH_LEN + 32];
	pr_ckpt_meta expect = { 0 };
	int rc;

	*out = NULL;
	if (tr_model_path(path, sizeof(path), dir, kind, block, "ckpt") != 0)
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
	/* forward passes only: no gradients or optimizer state */
	if ((rc = kn_model_create_inference(out, &shape, be, max_batch,
	    KN_STORE_F32, err)) != 0)
		return rc;
	if ((rc = load_params(*out, path, &expect, NULL, err)) != 0) {
		kn_model_free(*out);
		*out = NULL;
	}
	return rc;
}

/* Restores parameters and, when it matches, the optimizer state, from the
 * checkpoint in dir if there is one. */
static int
resume(tr_trainer *t, char *err)
{
	const tr_opts *o = &t->o;
	kn_model *m = t->m;
	char path[PR_PATH_LEN + 32], *buf = NULL;
	pr_ckpt_meta expect, got, gopt;
	size_t np = kn_model_num_params(m), len;
	float *mm, *vv;
	int rc, topt;

	t->step = t->round = 0;
	tr_model_path(path, sizeof(path), o->dir, o->kind, o->block, "ckpt");
	if (access(path, F_OK) != 0)
		return KN_OK;
	fill_meta(&expect, o, 0, 0);
	if ((rc = load_params(m, path, &expect, &got, err)) != 0)
		return rc;
	t->step = got.step;
	t->round = got.round;
	tr_model_path(path, sizeof(path), o->dir, o->kind, o->block, "optim");
	mm = malloc(np * 4);
	vv = malloc(np * 4);
	if (mm == NULL || vv == NULL) {
		free(mm);
		free(vv);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	rc = pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &buf, &len, err);
	if (rc == 0)
		rc = pr_ckpt_decode_optim(buf, len, &expect, np, mm, vv, &topt,
		    &gopt, err);
	if (rc == 0 && gopt.step == got.step)
		kn_model_set_opt_state(m, mm, vv, topt);
	else
		fprintf(stderr, "shardmeter: %s: optimizer state %s; its "
		    "moments start afresh at step %lld\n", path,
		    rc != 0 ? "unreadable" : "from another step",
		    (long long)got.step);
	free(buf); free(mm); free(vv);
	return KN_OK;
}

/* Whether name is "<base>.tmp.<pid>" with a pid other than ours: what
 * pr_ckpt_write_file leaves when a kill cuts a write short.  One process
 * owns a state folder, so another pid's file can only be a leftover. */
static int
is_leftover(const char *name, const char *base)
{
	size_t n = strlen(base);
	const char *pid;
	char *end;
	long v;

	if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0)
		return 0;
	pid = name + n + 5;
	if (*pid < '0' || *pid > '9')
		return 0;
	errno = 0;
	v = strtol(pid, &end, 10);
	return *end == '\0' && errno == 0 && v != (long)getpid();
}

/* Removes the leftovers of this model's checkpoint, optimizer state and
 * learning curve, and keeps their names for the caller to log.  One that
 * cannot be removed is left: it is harmless, and skipped again next time. */
static void
remove_leftovers(tr_trainer *t)
{
	static const char *const exts[] = { "ckpt", "optim", "csv" };
	enum { NEXTS = sizeof(exts) / sizeof(exts[0]) };
	const tr_opts *o = &t->o;
	char path[NEXTS][PR_PATH_LEN + 32];
	struct dirent *e;
	size_t i, used;
	DIR *d;

	for (i = 0; i < NEXTS; i++)
		if (tr_model_path(path[i], sizeof(path[i]), o->dir, o->kind,
		    o->block, exts[i]) != 0)
			return;
	if ((d = opendir(o->dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL)
		for (i = 0; i < NEXTS; i++) {
			if (!is_leftover(e->d_name, strrchr(path[i], '/') + 1) ||
			    unlinkat(dirfd(d), e->d_name, 0) != 0)
				continue;
			used = strlen(t->removed_names);
			snprintf(t->removed_names + used,
			    sizeof(t->removed_names) - used, "%s%s",
			    t->removed++ ? ", " : "", e->d_name);
		}
	closedir(d);
}

/* The step of a line of the learning curve ("step,loss,..." ended by a
 * newline), or -1 for the header, a line cut short or anything else. */
static int64_t
csv_line_step(const char *line, const char *end)
{
	int64_t step = 0;
	const char *p;

	if (end[-1] != '\n')
		return -1;
	for (p = line; p < end && *p >= '0' && *p <= '9'; p++) {
		if (step > (INT64_MAX - 9) / 10)
			return -1;
		step = step * 10 + (*p - '0');
	}
	return p > line && p < end && *p == ',' ? step : -1;
}

/* The learning curve as of the checkpoint: the steps after it are trained
 * again on resume, so their lines would come twice.  Keeps the header and
 * the lines of steps up to step; rewritten atomically, and only when a
 * line goes. */
static int
trim_csv(const char *path, int64_t step, char *err)
{
	char *buf, *line, *end, *keep;
	size_t len;
	int64_t s;
	int rc;

	if (access(path, F_OK) != 0)
		return KN_OK;
	if ((rc = pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &buf, &len,
	    err)) != 0)
		return rc;
	keep = buf;
	for (line = buf; line < buf + len; line = end) {
		end = memchr(line, '\n', (size_t)(buf + len - line));
		end = end != NULL ? end + 1 : buf + len;
		s = csv_line_step(line, end);
		if ((s < 0 && line == buf && end - line >= 5 &&
		    memcmp(line, "step,", 5) == 0) ||
		    (s >= 0 && s <= step)) {
			memmove(keep, line, (size_t)(end - line));
			keep += end - line;
		}
	}
	rc = keep == buf + len ? KN_OK :
	    pr_ckpt_write_file(path, buf, (size_t)(keep - buf), err);
	free(buf);
	return rc;
}

void
tr_trainer_close(tr_trainer *t)
{
	if (t == NULL)
		return;
	if (t->csv != NULL)
		fclose(t->csv);
	free(t->input); free(t->target); free(t->weight);
	kn_model_free(t->m);
	corpus_close(&t->c);
	free(t);
}

int
tr_trainer_open(tr_trainer **out, const tr_opts *o, char *err)
{
	const pr_spec *s = o->spec;
	kn_model_shape shape = tr_model_shape(s, o->kind, o->block);
	size_t N = (size_t)s->batch * bt_row_len(s, o->kind);
	char path[PR_PATH_LEN + 32];
	tr_trainer *t;
	int rc;

	*out = NULL;
	if (mkdir(o->dir, 0755) != 0 && errno != EEXIST)
		return kn_error(err, KN_EIO, "cannot create %s: %s", o->dir,
		    strerror(errno));
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	t->o = *o;
	remove_leftovers(t);
	rc = corpus_open(&t->c, s->train, s->train_sha256,
	    (size_t)s->window + 2, err);
	if (rc != 0) {
		free(t);
		return rc;
	}
	if ((rc = kn_model_create(&t->m, &shape, o->be, s->batch, err)) != 0)
		goto fail;
	kn_model_init(t->m, kn_rng_stream(s->seed, o->kind,
	    (uint64_t)o->block, 0x1417));
	if ((rc = resume(t, err)) != 0)
		goto fail;
	t->input = malloc(N * 4);
	t->target = malloc(N * 4);
	t->weight = malloc(N * 4);
	if (t->input == NULL || t->target == NULL || t->weight == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto fail;
	}
	tr_model_path(path, sizeof(path), o->dir, o->kind, o->block, "csv");
	if (t->step > 0 && (rc = trim_csv(path, t->step, err)) != 0)
		goto fail;
	if ((t->csv = fopen(path, t->step > 0 ? "a" : "w")) == NULL) {
		rc = kn_error(err, KN_EIO, "cannot write %s: %s", path,
		    strerror(errno));
		goto fail;
	}
	if (t->step == 0)
		fprintf(t->csv, "step,loss,lr,grad_norm,positions_per_s,"
		    "elapsed_s\n");
	t->t0 = kn_now();
	t->step0 = t->step;
	*out = t;
	return KN_OK;
fail:
	tr_trainer_close(t);
	return rc;
}

int
tr_trainer_step(tr_trainer *t, float *loss, char *err)
{
	const pr_spec *s = t->o.spec;
	kn_adamw opt = { (float)s->beta1, (float)s->beta2, 1e-8f,
	    (float)s->weight_decay, (float)s->clip };
	kn_batch batch = { t->input, t->target, t->weight, s->batch };
	double lr = pr_spec_lr(s, (int)t->step), el;
	float gnorm = 0;
	int rc;

	bt_train_batch(s, &t->c, t->o.kind, t->o.block - 1, t->o.replica,
	    t->step, t->input, t->target, t->weight);
	if ((rc = kn_model_backward(t->m, &batch, loss, err)) != 0)
		return rc;
	kn_model_update(t->m, &opt, (float)lr, &gnorm);
	t->step++;
	el = kn_now() - t->t0;
	fprintf(t->csv, "%lld,%.6f,%.6g,%.5f,%.1f,%.3f\n", (long long)t->step,
	    *loss, lr, gnorm, tr_trainer_positions_per_s(t), el);
	return KN_OK;
}

double
tr_trainer_positions_per_s(const tr_trainer *t)
{
	double el = kn_now() - t->t0;

	return el > 0 ? (double)t->o.spec->batch * t->o.spec->window *
	    (double)(t->step - t->step0) / el : 0.0;
}

int
tr_trainer_removed(const tr_trainer *t, const char **names)
{
	*names = t->removed_names;
	return t->removed;
}

int64_t tr_trainer_steps(const tr_trainer *t) { return t->step; }
int64_t tr_trainer_round(const tr_trainer *t) { return t->round; }
void tr_trainer_set_round(tr_trainer *t, int64_t round) { t->round = round; }
void tr_trainer_set_step(tr_trainer *t, int64_t step) { t->step = step; }
kn_model *tr_trainer_model(tr_trainer *t) { return t->m; }

static void
progress_line(const tr_opts *o, int64_t step, float loss, double pps,
    double eta)
{
	char who[32];

	if (o->kind == BT_BLOCK)
		snprintf(who, sizeof(who), "block %d", o->block);
	else
		snprintf(who, sizeof(who), "%s", bt_kind_name(o->kind));
	fprintf(stderr, "\r[%s] step %lld/%d  loss %.4f  %.0f positions/s  "
	    "ETA %dm%02ds   ", who, (long long)step, o->steps, loss, pps,
	    (int)eta / 60, (int)eta % 60);
}

int
tr_train(const tr_opts *o, char *err)
{
	tr_trainer *t;
	double t0 = kn_now(), last_print = -1;
	int64_t start;
	float loss = 0;
	int rc;

	if ((rc = tr_trainer_open(&t, o, err)) != 0)
		return rc;
	if (t->removed > 0)
		fprintf(stderr, "shardmeter: removed the leftovers of an "
		    "interrupted write: %s\n", t->removed_names);
	start = t->step;
	while (t->step < o->steps) {
		double el;

		if (o->stop != NULL && *o->stop)
			break;
		if ((rc = tr_trainer_step(t, &loss, err)) != 0)
			goto out;
		el = kn_now() - t0;
		if (o->progress && (el - last_print > 0.5 ||
		    t->step == o->steps)) {
			progress_line(o, t->step, loss,
			    tr_trainer_positions_per_s(t),
			    el / (double)(t->step - start) *
			    (double)(o->steps - t->step));
			last_print = el;
		}
		if (o->every > 0 && t->step % o->every == 0 &&
		    t->step < o->steps && (rc = tr_trainer_save(t, err)) != 0)
			goto out;
	}
	if (o->progress)
		fprintf(stderr, "\n");
	rc = tr_trainer_save(t, err);
out:
	tr_trainer_close(t);
	return rc;
}
