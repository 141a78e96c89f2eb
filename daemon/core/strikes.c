/* Strikes per peer and the quarantine past a threshold (strikes.h).  A
 * handful of peers: a linear table is enough, and its order (first
 * refusal first) is the order status and metrics list them in. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "daemon/core/log.h"
#include "daemon/core/strikes.h"
#include "kernels/clock.h"
#include "proto/checkpoint.h"

struct strikes {
	strikes_peer *v;
	int n, cap;
	int threshold;
	uint64_t clears;
	uint64_t uncounted;             /* refusals past STRIKES_MAX_PEERS */
	void (*on_quarantine)(void *arg, const char *peer_id);
	void *arg;
	char *file;                     /* strikes_set_file; NULL: none */
	char run_id[PR_RUN_ID_LEN];
};

/* The largest strikes file read back: far above STRIKES_MAX_PEERS
 * records of a few hundred bytes. */
#define STRIKES_FILE_MAX ((size_t)4 << 20)

static void save(const strikes *s);

static const char *const kind_names[STRIKES_KINDS] = {
	"update", "checkpoint", "claim"
};

const char *
strikes_kind_name(strikes_kind kind)
{
	return kind >= 0 && kind < STRIKES_KINDS ? kind_names[kind] : "other";
}

int
strikes_new(strikes **out, int threshold, char *err)
{
	strikes *s;

	*out = NULL;
	if (threshold < 0 || threshold > STRIKES_MAX_THRESHOLD)
		return kn_error(err, KN_EINVAL, "strikes_quarantine: %d is not "
		    "in 0..%d", threshold, STRIKES_MAX_THRESHOLD);
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	s->threshold = threshold;
	*out = s;
	return KN_OK;
}

void
strikes_free(strikes *s)
{
	if (s == NULL)
		return;
	free(s->v);
	free(s->file);
	free(s);
}

void
strikes_on_quarantine(strikes *s, void (*fn)(void *arg, const char *peer_id),
    void *arg)
{
	s->on_quarantine = fn;
	s->arg = arg;
}

static int
find(const strikes *s, const char *peer_id)
{
	int i;

	for (i = 0; i < s->n; i++)
		if (strcmp(s->v[i].id, peer_id) == 0)
			return i;
	return -1;
}

/* The record of peer_id, made on its first refusal; NULL past the cap
 * or without memory. */
static strikes_peer *
record(strikes *s, const char *peer_id)
{
	strikes_peer *p;
	int i = find(s, peer_id);

	if (i >= 0)
		return &s->v[i];
	if (s->n >= STRIKES_MAX_PEERS)
		return NULL;
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 8;

		if ((p = realloc(s->v, (size_t)cap * sizeof(*p))) == NULL)
			return NULL;
		s->v = p;
		s->cap = cap;
	}
	p = &s->v[s->n++];
	memset(p, 0, sizeof(*p));
	snprintf(p->id, sizeof(p->id), "%s", peer_id);
	return p;
}

int
strikes_note(strikes *s, const char *peer_id, strikes_kind kind,
    const char *why)
{
	strikes_peer *p;

	if (s == NULL || peer_id == NULL)
		return 0;
	if (kind < 0 || kind >= STRIKES_KINDS)
		kind = STRIKES_CLAIM;
	if (why == NULL)
		why = "";
	if ((p = record(s, peer_id)) == NULL) {
		s->uncounted++;
		log_warnx("peer %s: %s refused: %s (not counted: %d peers "
		    "with strikes already)", peer_id, kind_names[kind], why,
		    STRIKES_MAX_PEERS);
		return 0;
	}
	p->total[kind]++;
	/* The same refusal again (a checkpoint polled every 100 ms, the
	 * same "over" to every push of a round) is one offence, not one a
	 * poll: an honest replica that is behind for a moment must not
	 * reach the threshold in a second.  It counts again once it has
	 * not recurred for STRIKES_REPEAT_S. */
	if (p->why_at > 0 && p->why_kind == (int)kind &&
	    strncmp(p->why, why, sizeof(p->why) - 1) == 0 &&
	    kn_now() - p->why_at < STRIKES_REPEAT_S) {
		p->why_at = kn_now();
		p->repeats++;
		log_debug("peer %s: %s refused again (not a new strike): %s",
		    peer_id, kind_names[kind], why);
		return p->quarantined;
	}
	p->why_kind = (int)kind;
	p->why_at = kn_now();
	p->current++;
	snprintf(p->why, sizeof(p->why), "%s", why);
	if (p->quarantined) {
		save(s);
		return 1;
	}
	/* refusals are rare from an honest peer, and a hostile one is
	 * quarantined after a few: each is named in the log, but for a run
	 * that never quarantines (threshold 0), where the first ten and then
	 * every hundredth are */
	if (s->threshold > 0)
		log_warnx("peer %s: %s refused (strike %llu of %d): %s",
		    peer_id, kind_names[kind], (unsigned long long)p->current,
		    s->threshold, why);
	else if (p->current <= 10 || p->current % 100 == 0)
		log_warnx("peer %s: %s refused (strike %llu, no quarantine): "
		    "%s", peer_id, kind_names[kind],
		    (unsigned long long)p->current, why);
	if (s->threshold == 0 || p->current < (uint64_t)s->threshold) {
		save(s);
		return 0;
	}
	p->quarantined = 1;
	save(s);
	log_warnx("peer %s quarantined after %llu refusals: its connections "
	    "are refused until the operator clears it (SIGHUP or "
	    "'shardmeter strikes --clear')", peer_id,
	    (unsigned long long)p->current);
	if (s->on_quarantine != NULL)
		s->on_quarantine(s->arg, p->id);
	return 1;
}

int
strikes_quarantined(const strikes *s, const char *peer_id)
{
	int i;

	if (s == NULL || peer_id == NULL || (i = find(s, peer_id)) < 0)
		return 0;
	return s->v[i].quarantined;
}

uint64_t
strikes_refused(strikes *s, const char *peer_id)
{
	int i;

	if (s == NULL || peer_id == NULL || (i = find(s, peer_id)) < 0 ||
	    !s->v[i].quarantined)
		return 0;
	return ++s->v[i].refused;
}

void
strikes_clear(strikes *s)
{
	int i, lifted = 0;

	if (s == NULL)
		return;
	for (i = 0; i < s->n; i++) {
		lifted += s->v[i].quarantined;
		s->v[i].quarantined = 0;
		s->v[i].current = 0;
	}
	s->clears++;
	save(s);
	log_info("strikes cleared by the operator: %d peer(s) out of "
	    "quarantine", lifted);
}

int
strikes_count(const strikes *s)
{
	return s != NULL ? s->n : 0;
}

const strikes_peer *
strikes_at(const strikes *s, int i)
{
	return s != NULL && i >= 0 && i < s->n ? &s->v[i] : NULL;
}

const strikes_peer *
strikes_find(const strikes *s, const char *peer_id)
{
	int i;

	if (s == NULL || peer_id == NULL || (i = find(s, peer_id)) < 0)
		return NULL;
	return &s->v[i];
}

int
strikes_threshold(const strikes *s)
{
	return s != NULL ? s->threshold : 0;
}

int
strikes_quarantined_count(const strikes *s)
{
	int i, n = 0;

	for (i = 0; s != NULL && i < s->n; i++)
		n += s->v[i].quarantined;
	return n;
}

uint64_t
strikes_clears(const strikes *s)
{
	return s != NULL ? s->clears : 0;
}

void
strikes_set_file(strikes *s, const char *path, const char *run_id)
{
	free(s->file);
	s->file = path != NULL ? strdup(path) : NULL;
	snprintf(s->run_id, sizeof(s->run_id), "%s", run_id ? run_id : "");
}

/* The records as JSON text (malloc'd), or NULL. */
static char *
to_json(const strikes *s)
{
	json_t *o = json_object(), *arr = json_array();
	char *text;
	int i, k;

	for (i = 0; i < s->n; i++) {
		const strikes_peer *p = &s->v[i];
		json_t *e = json_object();

		json_object_set_new(e, "id", json_string(p->id));
		for (k = 0; k < STRIKES_KINDS; k++)
			json_object_set_new(e, kind_names[k], json_integer(
			    (json_int_t)p->total[k]));
		json_object_set_new(e, "current", json_integer(
		    (json_int_t)p->current));
		json_object_set_new(e, "quarantined",
		    json_boolean(p->quarantined));
		json_object_set_new(e, "why", json_string(p->why));
		json_array_append_new(arr, e);
	}
	json_object_set_new(o, "run_id", json_string(s->run_id));
	json_object_set_new(o, "clears", json_integer((json_int_t)s->clears));
	json_object_set_new(o, "peers", arr);
	text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return text;
}

/* Rewrites the file after a change: a failure is logged, and the counts
 * in memory go on. */
static void
save(const strikes *s)
{
	char err[KN_ERR_LEN], *text;

	if (s->file == NULL)
		return;
	if ((text = to_json(s)) == NULL) {
		log_warnx("strikes: out of memory writing %s", s->file);
		return;
	}
	if (pr_ckpt_write_file(s->file, text, strlen(text), err) != 0)
		log_warnx("strikes: %s", err);
	free(text);
}

/* A count of the file: a non-negative integer. */
static int
count_of(json_t *e, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(e, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* One record of the file into s; -1 when it is not one. */
static int
load_peer(strikes *s, json_t *e)
{
	const char *id = json_string_value(json_object_get(e, "id"));
	const char *why = json_string_value(json_object_get(e, "why"));
	strikes_peer rec, *p;
	int k;

	memset(&rec, 0, sizeof(rec));
	if (id == NULL || strlen(id) >= sizeof(rec.id) || find(s, id) >= 0 ||
	    count_of(e, "current", &rec.current) != 0 ||
	    !json_is_boolean(json_object_get(e, "quarantined")))
		return -1;
	for (k = 0; k < STRIKES_KINDS; k++)
		if (count_of(e, kind_names[k], &rec.total[k]) != 0)
			return -1;
	if ((p = record(s, id)) == NULL)
		return -1;
	memcpy(p->total, rec.total, sizeof(p->total));
	p->current = rec.current;
	p->quarantined = json_is_true(json_object_get(e, "quarantined"));
	snprintf(p->why, sizeof(p->why), "%s", why ? why : "");
	return 0;
}

int
strikes_load(strikes *s, const char *path, const char *run_id, char *err)
{
	json_t *o, *arr, *e;
	json_error_t jerr;
	const char *rid;
	uint64_t clears;
	char *buf;
	size_t len, i;
	int rc;

	if (access(path, F_OK) != 0)
		return KN_OK;
	if ((rc = pr_ckpt_read_file(path, STRIKES_FILE_MAX, &buf, &len,
	    err)) != 0)
		return rc;
	o = json_loadb(buf, len, 0, &jerr);
	free(buf);
	if (o == NULL)
		return kn_error(err, KN_EINVAL, "%s: not JSON: %s", path,
		    jerr.text);
	rid = json_string_value(json_object_get(o, "run_id"));
	arr = json_object_get(o, "peers");
	if (rid == NULL || strcmp(rid, run_id) != 0) {
		json_decref(o);
		return kn_error(err, KN_EINVAL, "%s is of another run: its "
		    "strikes are not taken", path);
	}
	if (!json_is_array(arr) || json_array_size(arr) > STRIKES_MAX_PEERS ||
	    count_of(o, "clears", &clears) != 0) {
		json_decref(o);
		return kn_error(err, KN_EINVAL, "%s: not a strikes file", path);
	}
	json_array_foreach(arr, i, e)
		if (load_peer(s, e) != 0) {
			json_decref(o);
			s->n = 0;
			return kn_error(err, KN_EINVAL, "%s: record %zu is not "
			    "one of strikes", path, i);
		}
	s->clears = clears;
	json_decref(o);
	return KN_OK;
}
