/* Strikes per peer and the quarantine past a threshold (strikes.h).  A
 * handful of peers: a linear table is enough, and its order (first
 * refusal first) is the order status and metrics list them in. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/strikes.h"

struct strikes {
	strikes_peer *v;
	int n, cap;
	int threshold;
	uint64_t clears;
	uint64_t uncounted;             /* refusals past STRIKES_MAX_PEERS */
	void (*on_quarantine)(void *arg, const char *peer_id);
	void *arg;
};

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
	p->current++;
	snprintf(p->why, sizeof(p->why), "%s", why);
	if (p->quarantined)
		return 1;
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
	if (s->threshold == 0 || p->current < (uint64_t)s->threshold)
		return 0;
	p->quarantined = 1;
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
