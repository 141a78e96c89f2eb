/* The links from a pipeline host to the hosts of the next stage: which
 * host a frame goes to, the frames waiting for a link, and, where the
 * next stage has several hosts, failover: each bt or ar frame sent is
 * held until the host it went to acks it (once its own work has gone on
 * from there), and when a link fails (refused, closed, or silent past
 * its keep-alive) what it held goes to another host of the same blocks.
 * Health comes from the links themselves: a failed host is left alone
 * for a backoff that grows while it keeps failing, then tried again.
 * serve.c routes frames here; serve_conn.c makes the connections. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"

/* Frames waiting for one link to come up, at most. */
#define LINK_QUEUE 65536
/* A link of a single next host is tried again this often, as always. */
#define RECONNECT_S 0.5
/* With several: a failed host is left alone this long, doubling while
 * it keeps failing, up to BACKOFF_MAX_S. */
#define BACKOFF_S 0.25
#define BACKOFF_MAX_S 2.0
/* Keep-alive, on links to a stage of several hosts: a ping this often,
 * and a link that has sent nothing back for DEAD_S is closed. */
#define PING_S 1.0
#define DEAD_S 5.0
/* Requests pinned to the host of their caches, at most (the oldest pin
 * goes first; an end frame removes one). */
#define PINS_MAX 4096

static int
link_up(const sv_link *l)
{
	return l->c != NULL && l->c->up && !l->c->closing;
}

void
sv_links_init(sv *s)
{
	const ph_list *pl = &s->hosts;
	int next, i;

	s->nlinks = 0;
	s->spare = 0;
	if (pl->soma || pl->nstages < 2)
		return;
	next = (s->stage + 1) % pl->nstages;
	for (i = 0; i < ph_stage_size(pl, next); i++) {
		sv_link *l = &s->links[s->nlinks++];

		memset(l, 0, sizeof(*l));
		l->host = pl->stage_first[next] + i;
	}
	/* the exit's answers belong to one entry: nothing to fail over to */
	s->spare = s->nlinks > 1 && next != 0;
}

void
sv_links_start(sv *s)
{
	int i;

	for (i = 0; i < s->nlinks; i++)
		sv_link_connect(s, &s->links[i]);
}

int
sv_links_any_up(const sv *s)
{
	int i;

	for (i = 0; i < s->nlinks; i++)
		if (link_up(&s->links[i]))
			return 1;
	return 0;
}

/* Which link ---------------------------------------------------------- */

/* The link for a frame: the first host of the next stage in the list's
 * order whose link is up (the one shardmeter plan --serve-replicas puts
 * first is the one it predicts a request to take), then one coming up,
 * then one whose backoff is over, then any; never avoid.  NULL when
 * there is no other. */
static sv_link *
link_choose(sv *s, const sv_link *avoid)
{
	double now = kn_now();
	int n = s->nlinks, pass, i;

	for (pass = 0; pass < 4; pass++)
		for (i = 0; i < n; i++) {
			sv_link *l = &s->links[i];

			if (l == avoid)
				continue;
			if ((pass == 0 && link_up(l)) ||
			    (pass == 1 && l->c != NULL && !l->c->closing) ||
			    (pass == 2 && l->c == NULL && now >= l->retry_at) ||
			    pass == 3)
				return l;
		}
	return NULL;
}

/* At the exit: the entry that owns id (its line is the id's top byte,
 * serve.c), or the first when the id names none. */
static sv_link *
link_of_owner(sv *s, uint64_t id)
{
	int owner = (int)(id >> 56);

	return &s->links[owner < s->nlinks ? owner : 0];
}

/* Pins ------------------------------------------------------------ */

static sv_pin *
pin_find(sv *s, uint64_t id)
{
	int i;

	for (i = 0; i < s->npins; i++)
		if (s->pins[i].id == id)
			return &s->pins[i];
	return NULL;
}

static void
pin_remove(sv *s, uint64_t id)
{
	sv_pin *p = pin_find(s, id);

	if (p == NULL)
		return;
	memmove(p, p + 1, (size_t)(&s->pins[s->npins] - (p + 1)) *
	    sizeof(*p));
	s->npins--;
}

/* id's frames went on l, whose next generation holds them when it is
 * not up yet. */
static void
pin_set(sv *s, uint64_t id, const sv_link *l)
{
	sv_pin *p = pin_find(s, id);

	if (p == NULL) {
		if (s->npins == s->pins_cap) {
			int cap = s->pins_cap ? 2 * s->pins_cap : 64;
			sv_pin *v;

			if (cap > PINS_MAX) {
				pin_remove(s, s->pins[0].id);
				cap = s->pins_cap;
			} else if ((v = realloc(s->pins, (size_t)cap *
			    sizeof(*v))) == NULL)
				return;	/* unpinned: it may redo */
			else
				s->pins = v;
			s->pins_cap = cap;
		}
		p = &s->pins[s->npins++];
		p->id = id;
	}
	p->link = (int)(l - s->links);
	p->gen = l->gen + !link_up(l);
}

/* The ar request id lost the caches of its path: the entry runs it
 * again from position 0 (here, or told round the ring). */
static void
redo(sv *s, uint64_t id)
{
	pl_frame f = { .type = PL_REDO, .id = id };

	s->st.rerouted++;
	pin_remove(s, id);
	if (s->entry)
		sv_request_redo(s, id);
	else
		sv_links_send(s, &f);
}

/* Sending ----------------------------------------------------------- */

static queued *
queued_new(uint64_t id, char *buf, size_t len, int work)
{
	queued *q = malloc(sizeof(*q));

	if (q == NULL)
		return NULL;
	q->id = id;
	q->buf = buf;
	q->len = len;
	q->work = work;
	q->next = NULL;
	return q;
}

static void
queued_free(queued *q)
{
	free(q->buf);
	free(q);
}

/* Writes buf (taken) on l, which is up; a work frame is held, a copy of
 * it, until its ack. */
static void
link_write(sv *s, sv_link *l, uint64_t id, char *buf, size_t len, int work)
{
	if (work && s->spare) {
		char *copy = malloc(len);
		queued *q;

		if (copy != NULL && (q = queued_new(id, copy, len, work)) !=
		    NULL) {
			memcpy(copy, buf, len);
			q->next = l->held;
			l->held = q;
			l->nheld++;
		} else
			free(copy);
	}
	sv_conn_write(l->c, buf, len);
}

/* The frame (buf taken) of id goes on l: now, or when l comes up.  0,
 * or -1 when it cannot wait (congested: buf freed). */
static int
link_put(sv *s, sv_link *l, uint64_t id, char *buf, size_t len, int work)
{
	queued *q;

	if (link_up(l)) {
		link_write(s, l, id, buf, len, work);
		return 0;
	}
	if (l->q_len >= LINK_QUEUE || (q = queued_new(id, buf, len,
	    work)) == NULL) {
		free(buf);
		return -1;
	}
	if (l->q_tail != NULL)
		l->q_tail->next = q;
	else
		l->q_head = q;
	l->q_tail = q;
	l->q_len++;
	/* down: connected at once, as a frame is waiting, unless it is a
	 * host of several that is left alone for its backoff (then the
	 * housekeeping tries it when that is over) */
	if (l->c == NULL && (!s->spare || kn_now() >= l->retry_at))
		sv_link_connect(s, l);
	return 0;
}

/* The link for f where the next stage has hosts to spare: its request's
 * pinned one while the same process is behind it, else one chosen; NULL
 * when an ar frame after position 0 lost the host of its caches (the
 * request is then started again). */
static sv_link *
link_for(sv *s, const pl_frame *f)
{
	int cached = f->type == PL_AR && f->pos > 0;
	int pinned = f->type == PL_AR || (f->type == PL_BT && f->pos_block > 0);
	sv_pin *p = pin_find(s, f->id);
	sv_link *l = NULL;

	if (p != NULL && link_up(&s->links[p->link]) &&
	    s->links[p->link].gen == p->gen)
		l = &s->links[p->link];
	else if (p != NULL && cached) {
		redo(s, f->id);
		return NULL;
	}
	if (l == NULL)
		l = link_choose(s, NULL);
	if (pinned)
		pin_set(s, f->id, l);
	return l;
}

void
sv_links_send(sv *s, const pl_frame *f)
{
	char *buf, err[KN_ERR_LEN];
	size_t len;
	int work = f->type == PL_BT || f->type == PL_AR ? f->type == PL_AR &&
	    f->pos > 0 ? SV_WORK_CACHED : SV_WORK : 0, i;
	sv_link *l;

	if (s->nlinks == 0)
		return;
	if (f->type == PL_END && s->nlinks > 1) {
		/* any host of the next stage may hold some of the request */
		for (i = 0; i < s->nlinks; i++) {
			if (!link_up(&s->links[i]))
				continue;
			if (pl_frame_encode(f, &buf, &len, err) != 0)
				break;
			sv_conn_write(s->links[i].c, buf, len);
		}
		return;
	}
	l = s->nlinks == 1 ? &s->links[0] : s->spare ? link_for(s, f) :
	    link_of_owner(s, f->id);
	if (l == NULL)
		return;
	if (pl_frame_encode(f, &buf, &len, err) != 0) {
		log_warnx("pipeline: cannot encode a %s frame: %s",
		    pl_type_name(f->type), err);
		return;
	}
	if (link_put(s, l, f->id, buf, len, work) != 0)
		sv_request_lost(s, f->id, "the link to the next host is "
		    "congested");
}

/* Acks -------------------------------------------------------------- */

/* In order: a request of position blocks may owe two traversals' acks
 * for a while, the older first. */
static void
owe_remove(sv *s, int i)
{
	memmove(&s->owes[i], &s->owes[i + 1], (size_t)(s->nowes - i - 1) *
	    sizeof(s->owes[0]));
	s->nowes--;
}

void
sv_links_owe(sv *s, conn *c, uint64_t id)
{
	/* the host before holds what it sends here only when our stage
	 * has hosts to spare and is not the entries' */
	if (s->stage == 0 || ph_stage_size(&s->hosts, s->stage) < 2)
		return;
	if (s->nowes == s->owes_cap) {
		int cap = s->owes_cap ? 2 * s->owes_cap : 64;
		sv_owe *v = realloc(s->owes, (size_t)cap * sizeof(*v));

		/* never acked: held there until the request ends */
		if (v == NULL)
			return;
		s->owes = v;
		s->owes_cap = cap;
	}
	s->owes[s->nowes].id = id;
	s->owes[s->nowes].from = c;
	s->nowes++;
}

int
sv_links_held(const sv *s, uint64_t id)
{
	const queued *q;
	int i, n = 0;

	for (i = 0; i < s->nlinks; i++) {
		for (q = s->links[i].held; q != NULL; q = q->next)
			n += q->id == id;
		for (q = s->links[i].q_head; q != NULL; q = q->next)
			n += q->id == id && q->work;
	}
	return n;
}

void
sv_links_passed(sv *s, uint64_t id)
{
	int i;

	for (i = 0; i < s->nowes; i++) {
		pl_frame f = { .type = PL_ACK, .id = id };

		if (s->owes[i].id != id)
			continue;
		if (!s->owes[i].from->closing)
			sv_conn_send(s->owes[i].from, &f);
		owe_remove(s, i);
		return;
	}
}

/* Removes what l holds of id: all of it, or (one) its oldest frame; 1
 * when it held some. */
static int
held_remove(sv_link *l, uint64_t id, int one)
{
	queued **p, *q, **oldest = NULL;
	int found = 0;

	for (p = &l->held; (q = *p) != NULL;) {
		if (q->id != id) {
			p = &q->next;
			continue;
		}
		if (one) {
			/* the list is newest first */
			oldest = p;
			p = &q->next;
			continue;
		}
		*p = q->next;
		queued_free(q);
		l->nheld--;
		found = 1;
	}
	if (oldest != NULL) {
		q = *oldest;
		*oldest = q->next;
		queued_free(q);
		l->nheld--;
		found = 1;
	}
	return found;
}

void
sv_links_frame(sv *s, conn *c, const pl_frame *f)
{
	pl_frame pong = { .type = PL_PONG, .id = f->id };

	switch (f->type) {
	case PL_PING:
		sv_conn_send(c, &pong);
		break;
	case PL_ACK:
		/* the host before is acked in turn: our part is done */
		if (c->outbound && c->link != NULL &&
		    held_remove(c->link, f->id, 1))
			sv_links_passed(s, f->id);
		break;
	default:
		break;		/* a pong: c->heard says enough */
	}
}

/* Removes what waits on l for id. */
static void
queue_remove(sv_link *l, uint64_t id)
{
	queued **p, *q;

	l->q_tail = NULL;
	for (p = &l->q_head; (q = *p) != NULL;) {
		if (q->id == id && q->work) {
			*p = q->next;
			queued_free(q);
			l->q_len--;
		} else {
			l->q_tail = q;
			p = &q->next;
		}
	}
}

void
sv_links_forget(sv *s, uint64_t id)
{
	int i;

	for (i = 0; i < s->nlinks; i++) {
		held_remove(&s->links[i], id, 0);
		queue_remove(&s->links[i], id);
	}
	pin_remove(s, id);
	for (i = 0; i < s->nowes; i++)
		if (s->owes[i].id == id)
			owe_remove(s, i--);
}

void
sv_links_conn_gone(sv *s, conn *c)
{
	int i;

	for (i = 0; i < s->nowes; i++)
		if (s->owes[i].from == c)
			owe_remove(s, i--);
}

/* Up and down ------------------------------------------------------- */

void
sv_link_up(sv *s, sv_link *l)
{
	queued *q, *next;

	l->gen++;
	l->c->heard = kn_now();
	l->ping_at = l->c->heard;
	for (q = l->q_head; q != NULL; q = next) {
		next = q->next;
		link_write(s, l, q->id, q->buf, q->len, q->work);
		free(q);
	}
	l->q_head = l->q_tail = NULL;
	l->q_len = 0;
}

/* The frames of list (taken) go to other hosts of the next stage; those
 * that have nowhere to go are lost, with why.  The count sent on. */
static int
reroute(sv *s, sv_link *from, queued *list, const char *why)
{
	queued *q, *next, *r;
	int moved = 0;

	/* an earlier traversal of a request that starts again is not sent
	 * twice (marked before anything is freed) */
	for (q = list; q != NULL; q = q->next)
		for (r = list; r != NULL && q->work == SV_WORK; r = r->next)
			if (r->id == q->id && r->work == SV_WORK_CACHED)
				q->work = -1;
	for (q = list; q != NULL; q = next) {
		sv_link *to = link_choose(s, from);

		next = q->next;
		if (q->work < 0) {
			free(q->buf);
			if (!s->entry)
				sv_links_passed(s, q->id);
		} else if (q->work == SV_WORK_CACHED) {
			/* its caches went with the host: the request starts
			 * again, and the host before has nothing to keep */
			free(q->buf);
			redo(s, q->id);
			if (!s->entry)
				sv_links_passed(s, q->id);
			moved++;
		} else if (to != NULL && link_put(s, to, q->id, q->buf, q->len,
		    q->work) == 0) {
			if (pin_find(s, q->id) != NULL)
				pin_set(s, q->id, to);
			s->st.rerouted++;
			moved++;
		} else {
			if (to == NULL)
				free(q->buf);
			sv_request_lost(s, q->id, why);
		}
		free(q);
	}
	return moved;
}

/* What l held and what waited for it, one list, l emptied. */
static queued *
link_take_all(sv_link *l)
{
	queued *list = l->held, *q;

	if (list == NULL)
		list = l->q_head;
	else {
		for (q = list; q->next != NULL; q = q->next)
			;
		q->next = l->q_head;
	}
	l->held = l->q_head = l->q_tail = NULL;
	l->nheld = l->q_len = 0;
	return list;
}

void
sv_link_down(sv *s, sv_link *l, const char *why)
{
	const char *addr = s->hosts.v[l->host].addr;
	double now = kn_now();
	char msg[PL_MSG_LEN];
	queued *list, *next;
	int moved;

	l->c = NULL;
	if (s->spare) {
		/* left alone a while, longer while it keeps failing */
		l->backoff = l->backoff > 0 ? 2 * l->backoff : BACKOFF_S;
		if (l->backoff > BACKOFF_MAX_S)
			l->backoff = BACKOFF_MAX_S;
		l->retry_at = now + l->backoff;
		if (s->stopping)
			return;
		list = link_take_all(l);
		snprintf(msg, sizeof(msg), "the next hosts of blocks %d-%d are "
		    "down (%.100s: %.60s)", s->hosts.v[l->host].block_hi,
		    s->hosts.v[l->host].block_lo, addr, why);
		if (list != NULL && (moved = reroute(s, l, list, msg)) > 0)
			log_info("pipeline: %s failed (%s): %d frame(s) sent "
			    "on to the other hosts of its blocks", addr, why,
			    moved);
		return;
	}
	l->retry_at = now + RECONNECT_S;
	if (!s->stopping && s->entry && s->nlinks == 1) {
		snprintf(msg, sizeof(msg), "lost the connection to the next "
		    "host %s: %.100s", addr, why);
		sv_requests_lost(s, msg);
	}
	snprintf(msg, sizeof(msg), "the next host %s is down: %.150s", addr,
	    why);
	for (list = link_take_all(l); list != NULL; list = next) {
		next = list->next;
		sv_request_lost(s, list->id, msg);
		queued_free(list);
	}
}

void
sv_links_cron(sv *s, double now)
{
	/* this host stood still (stopped, or its loop held up): what it
	 * did not hear meanwhile says nothing of the others */
	int stalled = s->links_cron_at > 0 && now - s->links_cron_at > 1.0, i;

	s->links_cron_at = now;

	for (i = 0; i < s->nlinks; i++) {
		sv_link *l = &s->links[i];

		if (l->c == NULL) {
			if (now >= l->retry_at) {
				/* a single next host is tried every 0.5 s, as
				 * always; one of several after its backoff */
				if (!s->spare)
					l->retry_at = now + RECONNECT_S;
				sv_link_connect(s, l);
			}
			continue;
		}
		if (s->nlinks < 2 || !link_up(l))
			continue;
		if (stalled)
			l->c->heard = now;
		if (now - l->c->heard > DEAD_S) {
			char why[64];

			snprintf(why, sizeof(why), "no answer to keep-alive in "
			    "%.0f s", DEAD_S);
			sv_conn_close(l->c, why);
			continue;
		}
		if (now - l->ping_at >= PING_S) {
			pl_frame f = { .type = PL_PING, .id = ++s->ping_id };

			l->ping_at = now;
			sv_conn_send(l->c, &f);
		}
		/* a host that stayed up a while starts afresh */
		if (l->backoff > 0 && now - l->c->opened > 2 * BACKOFF_MAX_S)
			l->backoff = 0;
	}
}

void
sv_links_free(sv *s)
{
	int i;

	for (i = 0; i < s->nlinks; i++) {
		queued *q = link_take_all(&s->links[i]), *next;

		for (; q != NULL; q = next) {
			next = q->next;
			queued_free(q);
		}
	}
	free(s->owes);
	s->owes = NULL;
	s->nowes = s->owes_cap = 0;
	free(s->pins);
	s->pins = NULL;
	s->npins = s->pins_cap = 0;
}
