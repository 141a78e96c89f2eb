/* Mirrors: which hosts keep a copy of which block, the pulls that keep
 * the copies newest, their store under state_dir/mirror/ within the
 * budget, and the routes that serve them.  See mirror.h.  The checks
 * and the file work run on libuv's pool (file work is what it is for);
 * the rest on the loop. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/node/mirror.h"
#include "daemon/node/node.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"

/* Headers of a checkpoint (its tensor table) and of a state file, at
 * most, beside their floats. */
#define MR_SLACK ((uint64_t)64 * 1024)
/* Seconds before a pull that failed is tried again: in transit, and for
 * what a peer served that was refused (or did not fit the budget). */
#define MR_RETRY_S 5.0
#define MR_REFUSED_RETRY_S 30.0
/* A pull's time: this, plus a second per MR_RATE bytes. */
#define MR_TIMEOUT_MS 30000L
#define MR_RATE ((uint64_t)256 * 1024)
/* the folder, and a file in it */
#define MR_DIR_LEN (PR_PATH_LEN + 16)
#define MR_PATH_LEN (PR_PATH_LEN + 128)

struct mr_copy {
	/* the verified copy on disk; held 0: none */
	int held;
	int64_t step, round;
	char sha[65], optim_sha[65];    /* optim_sha "": no state kept */
	uint64_t ckpt_len, optim_len;
	char from[CF_HOST_LEN + 8];
	double at;                      /* wall clock, seconds */
	/* the pull under way */
	int pulling;
	double next_try;                /* kn_now */
	mr_claim want;                  /* what the host's status named */
	char src[CF_HOST_LEN + 8];
	char *ckpt, *optim;             /* what came so far */
	size_t ckpt_in, optim_in;
};

/* The disk a copy held takes: its files, and block-B.json's room (a
 * few hundred bytes: numbers, two hashes and an address). */
#define MR_META_BYTES ((uint64_t)1024)

static uint64_t
copy_size(const struct mr_copy *c)
{
	return c->ckpt_len + c->optim_len + MR_META_BYTES;
}

struct mr_state {
	struct node *n;
	uint64_t used;                  /* bytes of the copies held */
	struct mr_copy copy[PR_MAX_BLOCKS + 1];
};

/* ---- which host mirrors which block ---- */

int
mr_assign(const peers_list *pl, int block, int mirrors, int *out, int max)
{
	int *load, *chosen, b, j, i, k, last, got = 0, count;

	if (pl->n <= 0 || mirrors <= 0)
		return 0;
	load = calloc((size_t)pl->n, sizeof(int));
	chosen = calloc((size_t)pl->n, sizeof(int));
	if (load == NULL || chosen == NULL) {
		free(load);
		free(chosen);
		return 0;
	}
	/* every block in ascending order, each taking its mirrors from the
	 * load the blocks before it left */
	for (b = 1; b <= PR_MAX_BLOCKS; b++) {
		last = -1;
		for (i = 0; i < pl->n; i++)
			if (pl->v[i].block == b)
				last = i;
		if (last < 0)
			continue;
		memset(chosen, 0, (size_t)pl->n * sizeof(int));
		for (j = 0, count = 0; j < mirrors; j++) {
			int best = -1;

			for (k = 1; k <= pl->n; k++) {
				i = (last + k) % pl->n;
				if (pl->v[i].block == b || pl->v[i].block <= 0 ||
				    chosen[i])
					continue;
				if (best < 0 || load[i] < load[best])
					best = i;
			}
			if (best < 0)
				break;
			chosen[best] = 1;
			load[best]++;
			if (b == block && count < max)
				out[count] = best;
			count++;
		}
		if (b == block)
			got = count < max ? count : max;
	}
	free(load);
	free(chosen);
	return got;
}

int
mr_mirrors_block(const peers_list *pl, int i, int block, int mirrors)
{
	int out[CF_MAX_MIRRORS], k, n;

	n = mr_assign(pl, block, mirrors, out, CF_MAX_MIRRORS);
	for (k = 0; k < n; k++)
		if (out[k] == i)
			return 1;
	return 0;
}

uint64_t
mr_copy_bytes(const pr_spec *s, int block)
{
	kn_model_shape shape = pr_spec_block_shape(s, block - 1);
	uint64_t np = kn_model_params_for(&shape);

	/* the checkpoint's floats and the state's two moments */
	return 12 * np + 2 * MR_SLACK;
}

int
mr_budget_check(const pr_spec *s, const peers_list *pl, int self,
    int mirrors, uint64_t budget, uint64_t *need, char *err)
{
	uint64_t sum = 0;
	int b, blocks = 0;

	for (b = 1; b <= s->blocks && b <= PR_MAX_BLOCKS; b++)
		if (mr_mirrors_block(pl, self, b, mirrors)) {
			sum += mr_copy_bytes(s, b);
			blocks++;
		}
	if (need != NULL)
		*need = sum;
	if (sum <= budget)
		return KN_OK;
	return kn_error(err, KN_EINVAL, "mirror_budget: %" PRIu64 " bytes "
	    "cannot hold one copy of the %d block(s) this host mirrors "
	    "(checkpoint and optimizer state: %" PRIu64 " bytes, %.1f MiB); "
	    "raise mirror_budget, or set mirrors = 0", budget, blocks, sum,
	    sum / 1048576.0);
}

void
mr_refused(node *n, const char *addr, const char *why)
{
	int i = peers_find(&n->peers, addr);
	const peers_entry *p;

	if (i < 0 || i == n->self) {
		log_warnx("refused from %s: %s", addr, why);
		return;
	}
	p = &n->peers.v[i];
	node_journal(n, "refused %s kind %d: %s", p->addr,
	    (int)STRIKES_CHECKPOINT, why);
	if (!p->has_id) {
		log_warnx("refused from peer %s: %s", p->addr, why);
		return;
	}
	strikes_note(node_trust_strikes(n), p->id_text, STRIKES_CHECKPOINT,
	    why);
}

/* ---- the store: state_dir/mirror/ ---- */

static void
mirror_dir(const node *n, char *buf, size_t len)
{
	snprintf(buf, len, "%s/mirror", n->cfg.state_dir);
}

/* block-B-STEP-ROUND.ckpt and .optim, and block-B.json, which names the
 * copy: written last, it is the copy's commit. */
static void
copy_path(const node *n, int block, int64_t step, int64_t round,
    const char *ext, char *buf, size_t len)
{
	char d[MR_DIR_LEN];

	mirror_dir(n, d, sizeof(d));
	if (ext == NULL)
		snprintf(buf, len, "%s/block-%d.json", d, block);
	else
		snprintf(buf, len, "%s/block-%d-%" PRId64 "-%" PRId64 ".%s", d,
		    block, step, round, ext);
}

static int
copy_wanted(const mr_state *m, int block)
{
	const node *n = m->n;

	return block >= 1 && block <= n->spec.blocks && block !=
	    n->cfg.block && mr_mirrors_block(&n->peers, n->self, block,
	    n->cfg.mirrors);
}

/* Whether the file at path hashes to sha (len bytes). */
static int
file_is(const char *path, uint64_t len, const char *sha)
{
	char *buf = NULL, got[65];
	size_t n;
	int ok;

	if (pr_ckpt_read_file(path, TR_CKPT_MAX_BYTES, &buf, &n, NULL) != 0)
		return 0;
	ok = n == len && pr_ckpt_sha256_hex(buf, n, got, NULL) == 0 &&
	    strcmp(got, sha) == 0;
	free(buf);
	return ok;
}

/* A length block-B.json gives: beyond what a copy of the block can be,
 * one that no file matches (the copy is then removed). */
static uint64_t
copy_len(const node *n, int block, json_t *v)
{
	uint64_t most = mr_copy_bytes(&n->spec, block);

	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > most)
		return UINT64_MAX;
	return (uint64_t)json_integer_value(v);
}

/* The copy block-B.json names, when its files are whole. */
static int
load_copy(mr_state *m, int block)
{
	struct mr_copy *c = &m->copy[block];
	char path[MR_PATH_LEN], why[PR_ERR_LEN];
	json_t *j;
	json_error_t jerr;
	const char *sha, *osha, *from;

	copy_path(m->n, block, 0, 0, NULL, path, sizeof(path));
	if ((j = json_load_file(path, 0, &jerr)) == NULL)
		return 0;
	sha = json_string_value(json_object_get(j, "sha256"));
	osha = json_string_value(json_object_get(json_object_get(j,
	    "optimizer"), "sha256"));
	from = json_string_value(json_object_get(j, "from"));
	if (!mr_claim_in_run(&m->n->spec, json_object_get(j, "step"),
	    json_object_get(j, "round"), &c->step, &c->round)) {
		c->step = c->round = 0;
		sha = NULL;     /* not a copy of this run: removed below */
	}
	c->ckpt_len = copy_len(m->n, block, json_object_get(j, "bytes"));
	c->optim_len = copy_len(m->n, block, json_object_get(
	    json_object_get(j, "optimizer"), "bytes"));
	c->at = json_number_value(json_object_get(j, "at"));
	snprintf(c->from, sizeof(c->from), "%s", from ? from : "");
	snprintf(c->sha, sizeof(c->sha), "%s", sha ? sha : "");
	snprintf(c->optim_sha, sizeof(c->optim_sha), "%s", osha ? osha : "");
	json_decref(j);
	snprintf(why, sizeof(why), "its checkpoint");
	copy_path(m->n, block, c->step, c->round, "ckpt", path, sizeof(path));
	if (!mr_sha_ok(c->sha) || !file_is(path, c->ckpt_len, c->sha))
		goto bad;
	snprintf(why, sizeof(why), "its optimizer state");
	copy_path(m->n, block, c->step, c->round, "optim", path,
	    sizeof(path));
	if (c->optim_sha[0] != '\0' && (!mr_sha_ok(c->optim_sha) ||
	    !file_is(path, c->optim_len, c->optim_sha)))
		goto bad;
	if (c->optim_sha[0] == '\0')
		c->optim_len = 0;
	c->held = 1;
	m->used += copy_size(c);
	log_info("mirror: holding block %d step %" PRId64 " round %" PRId64
	    " (%" PRIu64 " bytes, sha256 %.16s...)", block, c->step, c->round,
	    c->ckpt_len + c->optim_len, c->sha);
	return 1;
bad:
	log_warnx("mirror: the copy of block %d at step %" PRId64 " is not "
	    "whole (%s does not hash to what block-%d.json says): removed",
	    block, c->step, why, block);
	memset(c, 0, sizeof(*c));
	return 0;
}

/* Whether name is a file of the copy held of some block. */
static int
name_held(const mr_state *m, const char *name)
{
	char want[MR_PATH_LEN];
	int b;

	for (b = 1; b <= PR_MAX_BLOCKS; b++) {
		const struct mr_copy *c = &m->copy[b];
		const char *exts[] = { NULL, "ckpt", "optim" };
		int e;

		if (!c->held)
			continue;
		for (e = 0; e < 3; e++) {
			const char *slash;

			if (e == 2 && c->optim_sha[0] == '\0')
				continue;
			copy_path(m->n, b, c->step, c->round, exts[e], want,
			    sizeof(want));
			slash = strrchr(want, '/');
			if (strcmp(slash + 1, name) == 0)
				return 1;
		}
	}
	return 0;
}

/* What is not a copy held (older steps, leftovers of a write cut
 * short, blocks no longer mirrored) goes: the budget counts the copies
 * only. */
static void
sweep(mr_state *m)
{
	char d[MR_DIR_LEN], path[MR_DIR_LEN + 300];
	struct dirent *e;
	DIR *dir;

	mirror_dir(m->n, d, sizeof(d));
	if ((dir = opendir(d)) == NULL)
		return;
	while ((e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.' || name_held(m, e->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", d, e->d_name);
		if (unlink(path) == 0)
			log_info("mirror: removed %s", path);
	}
	closedir(dir);
}

int
mr_start(node *n, char *err)
{
	mr_state *m;
	char d[MR_DIR_LEN];
	uint64_t need;
	int b, rc;

	n->mirror = NULL;
	if (n->soma || n->cfg.mirrors <= 0)
		return KN_OK;
	if ((rc = mr_budget_check(&n->spec, &n->peers, n->self,
	    n->cfg.mirrors, n->cfg.mirror_budget, &need, err)) != 0)
		return rc;
	if ((m = calloc(1, sizeof(*m))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	m->n = n;
	mirror_dir(n, d, sizeof(d));
	/* a host that cannot keep copies still trains its block; the
	 * state dir is made as the trainer makes it */
	if (need > 0 && ((mkdir(n->cfg.state_dir, 0755) != 0 && errno !=
	    EEXIST) || (mkdir(d, 0700) != 0 && errno != EEXIST))) {
		log_warnx("mirror: cannot make %s: %s: this host keeps no "
		    "copies of other blocks", d, strerror(errno));
		free(m);
		return KN_OK;
	}
	for (b = 1; b <= n->spec.blocks && b <= PR_MAX_BLOCKS; b++)
		if (copy_wanted(m, b))
			load_copy(m, b);
	sweep(m);
	n->mirror = m;
	return KN_OK;
}

void
mr_free(mr_state *m)
{
	int b;

	if (m == NULL)
		return;
	for (b = 0; b <= PR_MAX_BLOCKS; b++) {
		free(m->copy[b].ckpt);
		free(m->copy[b].optim);
	}
	free(m);
}

/* ---- pulls ---- */

/* A pair fetched, checked and written on the pool. */
struct mr_job {
	uv_work_t work;
	mr_state *m;
	int block;
	char *ckpt, *optim;
	size_t ckpt_len, optim_len;
	mr_claim claim;
	char src[CF_HOST_LEN + 8];
	int drop_old;           /* the copy held goes before the new one */
	int had_old;
	int64_t old_step, old_round;
	/* what came of it */
	mr_verdict v;
	int rc, wrote, old_gone;
	int refused;            /* the check failed: the peer's doing */
	char err[PR_ERR_LEN];
};

static void
pull_failed(struct mr_copy *c, double retry_s)
{
	c->pulling = 0;
	c->next_try = kn_now() + retry_s;
	free(c->ckpt);
	free(c->optim);
	c->ckpt = c->optim = NULL;
}

static void
job_write(struct mr_job *j)
{
	const node *n = j->m->n;
	char path[MR_PATH_LEN], *meta;
	json_t *o;
	const pr_ckpt_meta *g = &j->v.got;
	int e;

	if (j->drop_old)
		for (e = 0; e < 3; e++) {
			copy_path(n, j->block, j->old_step, j->old_round,
			    e == 0 ? NULL : e == 1 ? "ckpt" : "optim", path,
			    sizeof(path));
			unlink(path);
			j->old_gone = 1;
		}
	copy_path(n, j->block, g->step, g->round, "ckpt", path, sizeof(path));
	if ((j->rc = pr_ckpt_write_file(path, j->ckpt, j->ckpt_len,
	    j->err)) != 0)
		return;
	if (j->v.optim_ok) {
		copy_path(n, j->block, g->step, g->round, "optim", path,
		    sizeof(path));
		if ((j->rc = pr_ckpt_write_file(path, j->optim, j->optim_len,
		    j->err)) != 0)
			return;
	}
	o = json_pack("{s:i,s:I,s:I,s:s,s:I,s:s,s:f}", "block", j->block,
	    "step", (json_int_t)g->step, "round", (json_int_t)g->round,
	    "sha256", j->v.sha, "bytes", (json_int_t)j->ckpt_len, "from",
	    j->src, "at", (double)time(NULL));
	if (o != NULL && j->v.optim_ok)
		json_object_set_new(o, "optimizer", json_pack("{s:s,s:I}",
		    "sha256", j->v.optim_sha, "bytes",
		    (json_int_t)j->optim_len));
	meta = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (meta == NULL) {
		j->rc = kn_error(j->err, KN_ENOMEM, "out of memory");
		return;
	}
	copy_path(n, j->block, 0, 0, NULL, path, sizeof(path));
	j->rc = pr_ckpt_write_file(path, meta, strlen(meta), j->err);
	free(meta);
	if (j->rc != 0)
		return;
	j->wrote = 1;
	/* the copy before it, now that this one is committed */
	if (j->had_old && !j->drop_old && (j->old_step != g->step ||
	    j->old_round != g->round)) {
		copy_path(n, j->block, j->old_step, j->old_round, "ckpt", path,
		    sizeof(path));
		unlink(path);
		copy_path(n, j->block, j->old_step, j->old_round, "optim",
		    path, sizeof(path));
		unlink(path);
		j->old_gone = 1;
	}
}

static void
job_run(uv_work_t *w)
{
	struct mr_job *j = w->data;
	const node *n = j->m->n;
	mr_pair p = { j->ckpt, j->ckpt_len, j->optim, j->optim_len };

	j->rc = mr_check_pair(&n->spec, n->run_id, j->block, &j->claim, &p,
	    &j->v, j->err);
	if (j->rc != 0)
		j->refused = 1;
	else if (j->had_old && (j->v.got.step < j->old_step ||
	    (j->v.got.step == j->old_step && j->v.got.round < j->old_round)))
		/* a newer copy came meanwhile: nothing to keep */
		j->rc = kn_error(j->err, KN_EINVAL, "step %" PRId64 " is older "
		    "than the copy held", j->v.got.step);
	else
		job_write(j);
}

static void
job_done(uv_work_t *w, int status)
{
	struct mr_job *j = w->data;
	mr_state *m = j->m;
	node *n = m->n;
	struct mr_copy *c = &m->copy[j->block];

	(void)status;
	c->pulling = 0;
	if (j->old_gone && c->held) {
		m->used -= copy_size(c);
		c->held = 0;
	}
	if (j->refused) {
		char why[PR_ERR_LEN + 128];

		snprintf(why, sizeof(why), "the checkpoint of block %d it "
		    "served to this mirror is refused: %.200s", j->block,
		    j->err);
		log_warnx("mirror: %s: %s", j->src, why);
		if (!n->stopping)
			mr_refused(n, j->src, why);
		c->next_try = kn_now() + MR_REFUSED_RETRY_S;
	} else if (j->rc != 0) {
		log_warnx("mirror: cannot keep the copy of block %d from %s: "
		    "%s", j->block, j->src, j->err);
		c->next_try = kn_now() + MR_RETRY_S;
	} else {
		/* the copy before is gone: removed, or written over */
		if (c->held)
			m->used -= copy_size(c);
		c->held = 1;
		c->step = j->v.got.step;
		c->round = j->v.got.round;
		memcpy(c->sha, j->v.sha, sizeof(c->sha));
		snprintf(c->optim_sha, sizeof(c->optim_sha), "%s",
		    j->v.optim_ok ? j->v.optim_sha : "");
		c->ckpt_len = j->ckpt_len;
		c->optim_len = j->v.optim_ok ? j->optim_len : 0;
		snprintf(c->from, sizeof(c->from), "%s", j->src);
		c->at = (double)time(NULL);
		m->used += copy_size(c);
		if (!j->v.optim_ok)
			c->next_try = kn_now() + MR_RETRY_S;
		log_info("mirror: holding block %d step %" PRId64 " round %"
		    PRId64 " from %s (%" PRIu64 " bytes, sha256 %.16s...)%s%s",
		    j->block, c->step, c->round, c->from, c->ckpt_len +
		    c->optim_len, c->sha, j->v.optim_ok ? "" : "; without its "
		    "optimizer state: ", j->v.optim_ok ? "" : j->v.optim_why[0] ?
		    j->v.optim_why : "none served");
		node_journal(n, "mirror: block %d step %" PRId64 " round %"
		    PRId64 " from %s, sha256 %s", j->block, c->step, c->round,
		    c->from, c->sha);
	}
	free(j->ckpt);
	free(j->optim);
	free(j);
}

/* Both files are in: the budget decides whether the copy can be kept,
 * and the pool checks and writes it. */
static void
pull_write(mr_state *m, int block)
{
	node *n = m->n;
	struct mr_copy *c = &m->copy[block];
	char *optim = c->optim;
	size_t optim_len = c->optim_in;
	uint64_t add = c->ckpt_in + (optim != NULL ? optim_len : 0) +
	    MR_META_BYTES;
	uint64_t budget = n->cfg.mirror_budget;
	struct mr_job *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		pull_failed(c, MR_RETRY_S);
		return;
	}
	j->had_old = c->held;
	j->old_step = c->step;
	j->old_round = c->round;
	/* never above the budget, a write's new files and the copy they
	 * replace together: when they do not fit, the old copy goes first */
	if (m->used + add > budget) {
		uint64_t old = c->held ? copy_size(c) : 0;

		if (m->used - old + add > budget) {
			log_warnx("mirror: the copy of block %d at step %" PRId64
			    " takes %" PRIu64 " bytes; mirror_budget (%" PRIu64
			    ") has %" PRIu64 " free: not kept", block,
			    c->want.step, add, budget, m->used - old < budget ?
			    budget - (m->used - old) : 0);
			free(j);
			pull_failed(c, MR_REFUSED_RETRY_S);
			return;
		}
		j->drop_old = c->held;
	}
	j->work.data = j;
	j->m = m;
	j->block = block;
	j->ckpt = c->ckpt;
	j->ckpt_len = c->ckpt_in;
	c->ckpt = NULL;
	j->optim = optim;
	j->optim_len = optim_len;
	c->optim = NULL;
	j->claim = c->want;
	snprintf(j->src, sizeof(j->src), "%s", c->src);
	if (uv_queue_work(n->loop, &j->work, job_run, job_done) != 0) {
		free(j->ckpt);
		free(j->optim);
		free(j);
		pull_failed(c, MR_RETRY_S);
	}
}

struct mr_call {
	mr_state *m;
	int block;
};

static void
meter_call(mr_state *m, const char *addr, const hc_result *r)
{
	node_meter(m->n, peers_find(&m->n->peers, addr),
	    PEERS_KIND_CHECKPOINT, r->bytes_in, r->bytes_out);
}

static int
pull_get(mr_state *m, int block, const char *what, hc_done_fn done,
    char *err)
{
	node *n = m->n;
	struct mr_copy *c = &m->copy[block];
	int i = peers_find(&n->peers, c->src);
	hc_request_opts o = { 0 };
	char url[2 * CF_HOST_LEN + 96];
	uint64_t bytes = mr_copy_bytes(&n->spec, block);
	struct mr_call *call;

	if (i < 0)
		return kn_error(err, KN_EINVAL, "%s is no longer listed", c->src);
	snprintf(url, sizeof(url), "%s://%s/v1/blocks/%d/%s?from=%s",
	    hc_scheme(n->client), c->src, block, what, n->cfg.advertise);
	o.method = "GET";
	o.url = url;
	o.pin = n->peers.v[i].has_id ? n->peers.v[i].id : NULL;
	o.connect_timeout_ms = n->cfg.peer_timeout_ms;
	o.timeout_ms = MR_TIMEOUT_MS + (long)(bytes / MR_RATE) * 1000;
	o.max_body_bytes = (size_t)bytes;
	if ((call = malloc(sizeof(*call))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	call->m = m;
	call->block = block;
	if (hc_request(n->client, &o, done, call, err) != 0) {
		free(call);
		return KN_EIO;
	}
	return KN_OK;
}

static void
on_ckpt(void *ctx, hc_result *r)
{
	struct mr_call *call = ctx;
	mr_state *m = call->m;
	int block = call->block;
	struct mr_copy *c = &m->copy[block];

	free(call);
	if (m->n->stopping) {
		pull_failed(c, 0);
		return;
	}
	meter_call(m, c->src, r);
	if (r->error != NULL || r->status != 200) {
		log_info("mirror: block %d from %s: %s", block, c->src,
		    r->error ? r->error : "its answer was not 200");
		pull_failed(c, MR_RETRY_S);
		return;
	}
	c->ckpt_in = r->body_len;
	c->ckpt = hc_result_take_body(r);
	/* the host may have trained on since its status: the bytes are
	 * checked against what came with them */
	mr_etag(r->etag, c->want.etag);
	pull_write(m, block);
}

/* The optimizer state comes first: the host writes it just before each
 * checkpoint, which it serves from memory once both are written, so
 * the state read first and the checkpoint read next are of the same
 * step unless a whole checkpoint was written between the two; read the
 * other way, a state written but not yet served would not match. */
static void
on_optim(void *ctx, hc_result *r)
{
	struct mr_call *call = ctx;
	mr_state *m = call->m;
	int block = call->block;
	struct mr_copy *c = &m->copy[block];
	char err[KN_ERR_LEN];

	free(call);
	if (m->n->stopping) {
		pull_failed(c, 0);
		return;
	}
	meter_call(m, c->src, r);
	if (r->error == NULL && r->status == 200) {
		c->optim_in = r->body_len;
		c->optim = hc_result_take_body(r);
	} else
		log_info("mirror: %s served no optimizer state of block %d (%s): "
		    "the copy is kept without it", c->src, block,
		    r->error ? r->error : "its answer was not 200");
	if (pull_get(m, block, "checkpoint", on_ckpt, err) != 0) {
		log_warnx("mirror: block %d from %s: %s", block, c->src, err);
		pull_failed(c, MR_RETRY_S);
	}
}

void
mr_on_checkpoint(mr_state *m, int peer, int64_t step, int64_t round,
    const char *sha256)
{
	node *n;
	const peers_entry *p;
	struct mr_copy *c;
	char err[KN_ERR_LEN];
	int b;

	if (m == NULL || (n = m->n)->stopping || peer < 0 ||
	    peer >= n->peers.n)
		return;
	p = &n->peers.v[peer];
	b = p->block;
	/* step 0 is what every host of a block makes alone from the seed */
	if (step <= 0 || step > n->spec.steps || round < 0 ||
	    round > n->spec.steps || !copy_wanted(m, b) ||
	    !mr_sha_ok(sha256))
		return;
	c = &m->copy[b];
	if (c->pulling || kn_now() < c->next_try)
		return;
	/* the same step again only for the optimizer state it lacks (its
	 * host was writing a newer one when it was pulled) */
	if (c->held && (step < c->step || (step == c->step &&
	    (round < c->round || (round == c->round &&
	    c->optim_sha[0] != '\0')))))
		return;
	if (p->has_id && strikes_quarantined(node_trust_strikes(n),
	    p->id_text))
		return;
	c->pulling = 1;
	memset(&c->want, 0, sizeof(c->want));
	c->want.step = step;
	c->want.round = round;
	snprintf(c->want.sha, sizeof(c->want.sha), "%s", sha256);
	snprintf(c->src, sizeof(c->src), "%s", p->addr);
	if (pull_get(m, b, "optimizer", on_optim, err) != 0) {
		log_warnx("mirror: block %d from %s: %s", b, p->addr, err);
		pull_failed(c, MR_RETRY_S);
	}
}

json_t *
mr_status_json(const mr_state *m)
{
	json_t *o, *held, *want;
	int b;

	if (m == NULL)
		return NULL;
	held = json_array();
	want = json_array();
	for (b = 1; b <= m->n->spec.blocks && b <= PR_MAX_BLOCKS; b++) {
		const struct mr_copy *c = &m->copy[b];

		if (copy_wanted(m, b))
			json_array_append_new(want, json_integer(b));
		if (!c->held)
			continue;
		json_array_append_new(held, json_pack("{s:i,s:I,s:I,s:s,s:I,"
		    "s:I,s:s}", "block", b, "step", (json_int_t)c->step,
		    "round", (json_int_t)c->round, "sha256", c->sha, "bytes",
		    (json_int_t)c->ckpt_len, "optimizer_bytes",
		    (json_int_t)c->optim_len, "from", c->from));
	}
	o = json_pack("{s:i,s:I,s:I,s:o,s:o}", "mirrors", m->n->cfg.mirrors,
	    "budget", (json_int_t)m->n->cfg.mirror_budget, "used",
	    (json_int_t)m->used, "blocks", want, "held", held);
	return o;
}

/* ---- serving files from the pool ---- */

struct mr_send {
	uv_work_t work;
	node *n;
	hs_deferred *d;
	int gone;
	char path[MR_PATH_LEN];
	char etag[65];          /* "": hashed from what is read */
	char what[160];         /* for the log: "the checkpoint of ..." */
	char peer[CF_HOST_LEN + 8];
	char *buf;
	size_t len;
	int rc;
	char err[PR_ERR_LEN];
};

static void
send_gone(void *arg)
{
	((struct mr_send *)arg)->gone = 1;
}

static void
send_read(uv_work_t *w)
{
	struct mr_send *s = w->data;

	s->rc = pr_ckpt_read_file(s->path, TR_CKPT_MAX_BYTES, &s->buf,
	    &s->len, s->err);
	if (s->rc == 0 && s->etag[0] == '\0')
		s->rc = pr_ckpt_sha256_hex(s->buf, s->len, s->etag, s->err);
}

static void
send_done(uv_work_t *w, int status)
{
	struct mr_send *s = w->data;
	hs_response *res;
	char etag[80];

	(void)status;
	if (s->gone) {
		free(s->buf);
		free(s);
		return;
	}
	res = hs_deferred_response(s->d);
	if (s->rc != 0) {
		/* replaced meanwhile, or gone with its block's copy */
		hs_response_text(res, 503, "%s is not readable now: %s; ask "
		    "again", s->what, s->err);
		free(s->buf);
	} else {
		snprintf(etag, sizeof(etag), "\"%s\"", s->etag);
		hs_response_header(res, "ETag", etag);
		hs_response_status(res, 200);
		hs_response_body_owned(res, "application/x-msgpack", s->buf,
		    s->len);
		log_info("sent %s (%zu bytes) to %s", s->what, s->len, s->peer);
	}
	hs_deferred_finish(s->d);
	free(s);
}

/* Answers res with the file at path, read on the pool; etag NULL: its
 * hash. */
static void
send_file(node *n, const hs_request *req, hs_response *res,
    const char *path, const char *etag, const char *what)
{
	struct mr_send *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		hs_response_text(res, 503, "out of memory: ask again");
		return;
	}
	s->n = n;
	s->work.data = s;
	snprintf(s->path, sizeof(s->path), "%s", path);
	snprintf(s->etag, sizeof(s->etag), "%s", etag ? etag : "");
	snprintf(s->what, sizeof(s->what), "%s", what);
	snprintf(s->peer, sizeof(s->peer), "%s", req->peer);
	if ((s->d = hs_response_defer(res, send_gone, s)) == NULL) {
		free(s);
		hs_response_text(res, 503, "out of memory: ask again");
		return;
	}
	if (uv_queue_work(n->loop, &s->work, send_read, send_done) != 0) {
		res = hs_deferred_response(s->d);
		hs_response_text(res, 503, "cannot read %s now: ask again", what);
		hs_deferred_finish(s->d);
		free(s);
	}
}

/* The copy of the block a /v1/mirrors/{b} path names, or NULL with res
 * answered. */
static const struct mr_copy *
held_copy(node *n, hs_response *res, const hr_match *m)
{
	int64_t b = m->num[0];

	if (n->mirror == NULL || b < 1 || b > PR_MAX_BLOCKS ||
	    !n->mirror->copy[b].held) {
		hs_response_text(res, 404, "this host holds no copy of block %"
		    PRId64, b);
		return NULL;
	}
	return &n->mirror->copy[b];
}

void
mr_api_mirror(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	const struct mr_copy *c = held_copy(n, res, m);
	json_t *o;

	(void)req;
	if (c == NULL)
		return;
	o = json_pack("{s:I,s:I,s:I,s:s,s:I,s:s}", "block",
	    (json_int_t)m->num[0], "step", (json_int_t)c->step, "round",
	    (json_int_t)c->round, "sha256", c->sha, "bytes",
	    (json_int_t)c->ckpt_len, "from", c->from);
	if (o != NULL && c->optim_sha[0] != '\0')
		json_object_set_new(o, "optimizer", json_pack("{s:s,s:I}",
		    "sha256", c->optim_sha, "bytes", (json_int_t)c->optim_len));
	hs_response_json(res, 200, o);
}

static void
mirror_file(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m, int optim)
{
	node *n = ctx;
	const struct mr_copy *c = held_copy(n, res, m);
	char path[MR_PATH_LEN], what[160];

	if (c == NULL)
		return;
	if (optim && c->optim_sha[0] == '\0') {
		hs_response_text(res, 404, "the copy of block %" PRId64 " at "
		    "step %" PRId64 " has no optimizer state", m->num[0],
		    c->step);
		return;
	}
	copy_path(n, (int)m->num[0], c->step, c->round, optim ? "optim" :
	    "ckpt", path, sizeof(path));
	/* "sent the checkpoint": the traffic is metered as checkpoints */
	snprintf(what, sizeof(what), "the checkpoint%s of block %" PRId64
	    " step %" PRId64 " from its mirror", optim ? "'s optimizer state" :
	    "", m->num[0], c->step);
	send_file(n, req, res, path, optim ? c->optim_sha : c->sha, what);
}

void
mr_api_mirror_checkpoint(void *ctx, const hs_request *req,
    hs_response *res, const hr_match *m)
{
	mirror_file(ctx, req, res, m, 0);
}

void
mr_api_mirror_optimizer(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	mirror_file(ctx, req, res, m, 1);
}

void
mr_api_optimizer(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	node *n = ctx;
	char path[MR_PATH_LEN];

	(void)m;
	if (n->soma) {
		hs_response_text(res, 404, "a SOMA expert serves no optimizer "
		    "state");
		return;
	}
	if (tr_model_path(path, sizeof(path), n->cfg.state_dir, BT_BLOCK,
	    n->cfg.block, "optim") != 0 || access(path, F_OK) != 0) {
		hs_response_text(res, 503, "no optimizer state yet: the block "
		    "is starting");
		return;
	}
	send_file(n, req, res, path, NULL, "the checkpoint's optimizer state");
}
