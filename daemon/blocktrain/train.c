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

#include "daemon/blocktrain/train.h"
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
	/* the step and round of the checkpoint on disk (on_disk): a save
	 * of another step or round first keeps it as the previous good one */
	int on_disk;
	int64_t disk_step, disk_round;
	char recovered[KN_ERR_LEN + 128];       /* open's fallback, or "" */
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

/* The health share: a few fixed windows of the training text, enough to
 * see weights that no longer give a finite loss, cheap beside a round. */
#define HEALTH_WINDOWS 4

/* Health of the weights in host (as the model holds them): every value
 * finite, and a finite share of the objective on HEALTH_WINDOWS windows.
 * KN_ENUM with the reason when not. */
static int
health(tr_trainer *t, const float *host, char *err)
{
	const tr_opts *o = &t->o;
	bt_eval_set set = { HEALTH_WINDOWS, BT_EVAL_STRATA };
	long bad = kn_first_nonfinite(host, kn_model_num_params(t->m));
	double lo, hi, share = 0;
	int rc;

	if (bad >= 0)
		return kn_error(err, KN_ENUM, "parameter %ld is %g, not finite",
		    bad, host[bad]);
	if (o->kind == BT_CAUSAL)
		rc = bt_eval_causal(t->m, o->spec, &t->c, &set, &share, err);
	else {
		bt_interval(o->spec, o->kind, o->block - 1, &lo, &hi);
		rc = bt_eval_share(t->m, o->spec, &t->c, &set, lo, hi, &share,
		    err);
	}
	if (rc != 0)
		return rc;
	if (!isfinite(share))
		return kn_error(err, KN_ENUM, "the share on %d health windows "
		    "is %g, not finite", HEALTH_WINDOWS, share);
	return KN_OK;
}

int
tr_trainer_health(tr_trainer *t, char *err)
{
	size_t np = kn_model_num_params(t->m);
	float *host = malloc(np * 4);
	int rc;

	if (host == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	kn_model_get_params(t->m, host);
	rc = health(t, host, err);
	free(host);
	return rc;
}

/* to (absent) becomes a hard link to from, or a copy of it where the
 * file system has no links. */
static int
link_or_copy(const char *from, const char *to, char *err)
{
	char *buf;
	size_t len;
	int rc;

	if (link(from, to) == 0)
		return KN_OK;
	if ((rc = pr_ckpt_read_file(from, TR_CKPT_MAX_BYTES, &buf, &len,
	    err)) != 0)
		return rc;
	rc = pr_ckpt_write_file(to, buf, len, err);
	free(buf);
	return rc;
}

/* The optimizer's moments back to zero, as at a first start. */
static void
zero_moments(tr_trainer *t)
{
	size_t np = kn_model_num_params(t->m);
	float *z = calloc(np, 4);

	if (z != NULL)
		kn_model_set_opt_state(t->m, z, z, 0);
	free(z);
}

/* path.prev becomes what path is now, atomically (a hard link renamed
 * over it; a copy where the file system has no links): the previous good
 * file stays while path is replaced.  Nothing when path is missing. */
static int
keep_prev(const char *path, char *err)
{
	char prev[PR_PATH_LEN + 48], tmp[PR_PATH_LEN + 80], *buf;
	size_t len;
	int rc;

	if (access(path, F_OK) != 0)
		return KN_OK;
	snprintf(prev, sizeof(prev), "%s.prev", path);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", prev, (long)getpid());
	unlink(tmp);
	if (link(path, tmp) == 0) {
		if (rename(tmp, prev) == 0)
			return KN_OK;
		unlink(tmp);
		return kn_error(err, KN_EIO, "cannot rename %s to %s: %s", tmp,
		    prev, strerror(errno));
	}
	/* pr_ckpt_write_file replaces prev atomically itself */
	if ((rc = pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &buf, &len,
	    err)) != 0)
		return rc;
	rc = pr_ckpt_write_file(prev, buf, len, err);
	free(buf);
	return rc;
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
	/* nothing is written for weights that fail their health check:
	 * the last good pair stays */
	kn_model_get_params(m, host);
	if ((rc = health(t, host, err)) != 0) {
		char why[KN_ERR_LEN];

		snprintf(why, sizeof(why), "%s", err);
		rc = kn_error(err, rc, "unhealthy weights at step %lld, not "
		    "written: %.180s", (long long)t->step, why);
		goto out;
	}
	/* the pair on disk, of another step or round, is kept as the
	 * previous good one: optimizer state first, as it is written */
	if (t->on_disk && (t->disk_step != t->step ||
	    t->disk_round != t->round)) {
		if (tr_model_path(path, sizeof(path), o->dir, o->kind, o->block,
		    "optim") == 0 && (rc = keep_prev(path, err)) != 0)
			goto out;
		if (tr_model_path(path, sizeof(path), o->dir, o->kind, o->block,
		    "ckpt") == 0 && (rc = keep_prev(path, err)) != 0)
			goto out;
	}
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
	tab = kn_model_tensors(m, &count);
	rc = pr_ckpt_encode(&meta, tab, count, host, &buf, &len, err);
	if (rc == 0 && tr_model_path(path, sizeof(path), o->dir, o->kind,
	    o->block, "ckpt") == 0)
		rc = pr_ckpt_write_file(path, buf, len, err);
	if (rc == 0) {
		t->on_disk = 1;
		t->disk_step = t->step;
		t->disk_round = t->round;
	}
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

/* The paths of this model's checkpoint and optimizer state, with suffix
 * ("" or ".prev"). */
static void
pair_paths(const tr_trainer *t, const char *suffix, char *ckpt, char *optim,
    size_t len)
{
	const tr_opts *o = &t->o;
	char base[PR_PATH_LEN + 32];

	tr_model_path(base, sizeof(base), o->dir, o->kind, o->block, "ckpt");
	snprintf(ckpt, len, "%s%s", base, suffix);
	tr_model_path(base, sizeof(base), o->dir, o->kind, o->block, "optim");
	snprintf(optim, len, "%s%s", base, suffix);
}

/* Loads the checkpoint at ckpt into the model, and the optimizer state
 * at optim when it is of the same step; else the moments start afresh
 * (zero), loudly when say.  The checkpoint's step and round in *got. */
static int
load_pair(tr_trainer *t, const char *ckpt, const char *optim, int say,
    pr_ckpt_meta *got, char *err)
{
	kn_model *m = t->m;
	pr_ckpt_meta expect, gopt;
	size_t np = kn_model_num_params(m), len;
	char *buf = NULL;
	float *mm, *vv;
	int rc, topt;

	fill_meta(&expect, &t->o, 0, 0);
	if ((rc = load_params(m, ckpt, &expect, got, err)) != 0)
		return rc;
	mm = malloc(np * 4);
	vv = malloc(np * 4);
	if (mm == NULL || vv == NULL) {
		free(mm);
		free(vv);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	rc = pr_ckpt_read_file(optim, TR_CKPT_MAX_BYTES, &buf, &len, err);
	if (rc == 0)
		rc = pr_ckpt_decode_optim(buf, len, &expect, np, mm, vv, &topt,
		    &gopt, err);
	if (rc == 0 && gopt.step == got->step)
		kn_model_set_opt_state(m, mm, vv, topt);
	else {
		if (say)
			fprintf(stderr, "shardmeter: %s: optimizer state %s; "
			    "its moments start afresh at step %lld\n", optim,
			    rc != 0 ? "unreadable" : "from another step",
			    (long long)got->step);
		memset(mm, 0, np * 4);
		memset(vv, 0, np * 4);
		kn_model_set_opt_state(m, mm, vv, 0);
	}
	free(buf); free(mm); free(vv);
	return KN_OK;
}

/* Loads a pair and checks its weights' health: KN_ENUM when a value is
 * not finite, in the file or as a share. */
static int
load_healthy(tr_trainer *t, const char *suffix, int say, pr_ckpt_meta *got,
    char *err)
{
	char ckpt[PR_PATH_LEN + 48], optim[PR_PATH_LEN + 48], why[KN_ERR_LEN];
	int rc;

	pair_paths(t, suffix, ckpt, optim, sizeof(ckpt));
	if (access(ckpt, F_OK) != 0)
		return kn_error(err, KN_EIO, "no checkpoint %.200s", ckpt);
	if ((rc = load_pair(t, ckpt, optim, say, got, err)) != 0)
		return rc;
	if ((rc = tr_trainer_health(t, why)) != 0)
		return kn_error(err, rc, "%.120s: %.120s", ckpt, why);
	return KN_OK;
}

/* The newest pair is unhealthy (why): it is moved aside to .bad, and the
 * previous good pair, if healthy, becomes the newest; else the model
 * starts from its initialization.  Said in t->recovered. */
static int
fall_back(tr_trainer *t, const char *why, pr_ckpt_meta *got, char *err)
{
	const tr_opts *o = &t->o;
	char ckpt[PR_PATH_LEN + 48], optim[PR_PATH_LEN + 48];
	char pckpt[PR_PATH_LEN + 48], poptim[PR_PATH_LEN + 48];
	char bad[PR_PATH_LEN + 64], pwhy[KN_ERR_LEN];
	int rc;

	pair_paths(t, "", ckpt, optim, sizeof(ckpt));
	pair_paths(t, ".prev", pckpt, poptim, sizeof(pckpt));
	snprintf(bad, sizeof(bad), "%s.bad", ckpt);
	if (rename(ckpt, bad) != 0)
		return kn_error(err, KN_EIO, "%.200s, and it cannot be moved "
		    "aside: %s", why, strerror(errno));
	if ((rc = load_healthy(t, ".prev", 0, got, pwhy)) == 0) {
		/* the previous pair becomes the newest, and stays the
		 * previous too until the next checkpoint */
		if ((rc = link_or_copy(pckpt, ckpt, err)) != 0)
			return rc;
		/* a missing or mismatched state only restarts the moments */
		unlink(optim);
		(void)link_or_copy(poptim, optim, pwhy);
		snprintf(t->recovered, sizeof(t->recovered), "%.150s (moved to "
		    ".bad); resumed from the previous good checkpoint, step "
		    "%lld round %lld", why, (long long)got->step,
		    (long long)got->round);
		return KN_OK;
	}
	/* no good pair left: a fresh start refuses nothing more */
	kn_model_init(t->m, kn_rng_stream(o->spec->seed, o->kind,
	    (uint64_t)o->block, 0x1417));
	memset(got, 0, sizeof(*got));
	snprintf(t->recovered, sizeof(t->recovered), "%.150s (moved to .bad), "
	    "and no previous good checkpoint (%.100s): starting from step 0",
	    why, pwhy);
	zero_moments(t);
	return KN_OK;
}

/* Restores parameters and, when it matches, the optimizer state, from the
 * checkpoint in dir if there is one; an unhealthy one gives way to the
 * previous good one (fall_back). */
static int
resume(tr_trainer *t, char *err)
{
	char ckpt[PR_PATH_LEN + 48], optim[PR_PATH_LEN + 48], why[KN_ERR_LEN];
	pr_ckpt_meta got;
	int rc;

	t->step = t->round = 0;
	pair_paths(t, "", ckpt, optim, sizeof(ckpt));
	if (access(ckpt, F_OK) != 0)
		return KN_OK;
	rc = load_healthy(t, "", 1, &got, why);
	if (rc == KN_ENUM)
		rc = fall_back(t, why, &got, err);
	else if (rc != 0)
		return kn_error(err, rc, "%s", why);
	if (rc != 0)
		return rc;
	t->step = got.step;
	t->round = got.round;
	t->on_disk = access(ckpt, F_OK) == 0;
	t->disk_step = got.step;
	t->disk_round = got.round;
	return KN_OK;
}

int
tr_trainer_restore(tr_trainer *t, int prev, int64_t *step, int64_t *round,
    char *err)
{
	pr_ckpt_meta got;
	int rc;

	if ((rc = load_healthy(t, prev ? ".prev" : "", 0, &got, err)) != 0)
		return rc;
	*step = got.step;
	*round = got.round;
	return KN_OK;
}

int
tr_trainer_recovered(const tr_trainer *t, const char **what)
{
	*what = t->recovered;
	return t->recovered[0] != '\0';
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
	static const char *const exts[] = { "ckpt", "optim", "csv",
		"ckpt.prev", "optim.prev" };
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
	if (t->recovered[0] != '\0')
		fprintf(stderr, "shardmeter: unhealthy checkpoint refused: %s\n",
		    t->recovered);
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
