/* Room and quotas for the HTTP server's TLS connections (DESIGN section
 * 5): a new connection beyond the limits closes one still in its
 * handshake (it has proved nothing); and since an address says little
 * once many hosts are listed, after the handshake has proved who is
 * connecting, its connections and requests in flight are counted
 * against what its role allows, and the run's own peers get room made
 * for them by closing a client's connection.  Called from
 * http_server.c on the loop. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/internal.h"

static int
role_of(const hs_server *s, const uint8_t *id)
{
	return s->cfg.id_role != NULL && s->cfg.id_role(s->ctx, id) ==
	    HS_ROLE_PEER ? HS_ROLE_PEER : HS_ROLE_CLIENT;
}

static hs_ident *
ident_get(hs_server *s, const uint8_t *id)
{
	hs_ident *i;

	for (i = s->idents; i != NULL; i = i->next)
		if (memcmp(i->id, id, ID_BYTES) == 0)
			return i;
	if ((i = calloc(1, sizeof(*i))) == NULL)
		return NULL;
	memcpy(i->id, id, ID_BYTES);
	i->role = role_of(s, id);
	i->next = s->idents;
	s->idents = i;
	return i;
}

static void
ident_put(hs_server *s, hs_ident *ident)
{
	hs_ident **p;

	if (ident->conns > 0)
		return;
	for (p = &s->idents; *p != NULL; p = &(*p)->next)
		if (*p == ident) {
			*p = ident->next;
			free(ident);
			return;
		}
}

/* A connection of a client that may be closed to make room. */
static int
evictable(const hs_conn *o)
{
	return !o->closing && !o->over_limit && o->ident != NULL &&
	    o->ident->role == HS_ROLE_CLIENT;
}

/* Whether a connection accepted beyond max_connections may go through
 * its handshake: there is a client's connection that a peer could take
 * the place of. */
static int
quota_may_wait(const hs_server *s)
{
	const hs_conn *o;

	if (s->cfg.id_role == NULL)
		return 0;
	for (o = s->conns; o != NULL; o = o->next)
		if (evictable(o))
			return 1;
	return 0;
}

/* Over TLS, a connection still in its handshake has proved nothing: when
 * the limits are reached, the oldest of them (from addr, or from anyone)
 * makes room for a new one, so that idle or slow strangers cannot keep a
 * listed peer out; one whose handshake is done is never pushed out.
 * Returns 1 when one was closed. */
static int
evict_handshaking(hs_server *s, const hs_conn *c, const char *addr)
{
	hs_conn *o, *oldest = NULL;

	for (o = s->conns; o != NULL; o = o->next)
		if (o != c && o->handshaking && !o->closing &&
		    !o->over_limit && (addr == NULL ||
		    strcmp(o->addr, addr) == 0))
			oldest = o;     /* the list runs from new to old */
	if (oldest == NULL)
		return 0;
	hs__conn_close(oldest);
	return 1;
}

/* The oldest of the connections beyond max_connections still in their
 * handshake or refused by a quota, closed for a newer one; 1 when there
 * was one. */
static int
evict_over(hs_server *s, const hs_conn *c)
{
	hs_conn *o, *oldest = NULL;

	for (o = s->conns; o != NULL; o = o->next)
		if (o != c && (o->handshaking || o->finishing) &&
		    !o->closing && o->over_limit)
			oldest = o;
	if (oldest == NULL)
		return 0;
	hs__conn_close(oldest);
	return 1;
}

/* Whether the new TLS connection c may stay, room made if need be.
 * With every place taken and none in a handshake, it may still go
 * through its own, beyond max_connections (and no more than as many
 * again), if it might be a peer that takes a client's place: which it
 * is, only its handshake tells (hs__quota_admit). */
int
hs__room_tls(hs_server *s, hs_conn *c)
{
	int per = s->cfg.max_connections_per_addr;

	if (c->over_limit) {
		if (evict_handshaking(s, c, NULL)) {
			c->over_limit = 0;
			s->nover--;
			s->nconns++;
		} else if (!quota_may_wait(s) ||
		    (s->nover > s->cfg.max_connections &&
		    !evict_over(s, c)))
			return 0;
	}
	return hs__conns_from(c, per) < per || evict_handshaking(s, c, c->addr);
}

/* The client connection a peer takes the place of: one of the client
 * holding the most connections, an idle one (no request being read or
 * answered) before a busy one, the oldest before a newer one.  NULL when
 * only peers hold connections. */
static hs_conn *
eviction_victim(hs_server *s)
{
	hs_conn *o, *best = NULL;
	int best_busy = 0;

	/* the list runs from new to old: a later one of equal rank is
	 * older, and wins */
	for (o = s->conns; o != NULL; o = o->next) {
		int busy;

		if (!evictable(o))
			continue;
		busy = o->in_message || o->outs > 0;
		if (best == NULL || o->ident->conns > best->ident->conns ||
		    (o->ident->conns == best->ident->conns &&
		    busy <= best_busy)) {
			best = o;
			best_busy = busy;
		}
	}
	return best;
}

static void
over_quota(hs_conn *c, const char *fmt, const char *what, int limit)
{
	char msg[HS_MSG_LEN];

	c->srv->over_quota++;
	snprintf(msg, sizeof(msg), fmt, what, limit);
	/* while its answer goes out it holds no place, and a newer
	 * connection may close it (tls_room): one that never reads the
	 * answer must not keep others out */
	if (!c->over_limit) {
		c->over_limit = 1;
		c->srv->nconns--;
		c->srv->nover++;
	}
	hs__conn_fail(c, 503, msg);
}

int
hs__quota_admit(hs_conn *c)
{
	hs_server *s = c->srv;
	const uint8_t *id = tls_conn_peer_id(c->tls);
	hs_ident *ident;
	hs_conn *victim;
	int limit;

	if (id == NULL)
		return 0;
	if ((ident = ident_get(s, id)) == NULL) {
		hs__conn_close(c);
		return -1;
	}
	limit = ident->role == HS_ROLE_PEER ? s->cfg.max_connections_per_peer :
	    s->cfg.max_connections_per_client;
	if (ident->conns >= limit) {
		const char *what = ident->role == HS_ROLE_PEER ? "peer" :
		    "client";

		ident_put(s, ident);
		over_quota(c, "too many connections of this %s's identity "
		    "(limit %d)", what, limit);
		return -1;
	}
	if (c->over_limit) {
		/* accepted beyond max_connections to learn who it is */
		if (ident->role != HS_ROLE_PEER ||
		    (victim = eviction_victim(s)) == NULL) {
			ident_put(s, ident);
			over_quota(c, "too many connections (%s, limit %d)",
			    "every place taken", s->cfg.max_connections);
			return -1;
		}
		s->evicted++;
		hs__conn_close(victim);
		c->over_limit = 0;
		s->nover--;
		s->nconns++;
	}
	c->ident = ident;
	ident->conns++;
	return 0;
}

int
hs__quota_link(hs_conn *c, const uint8_t *id)
{
	hs_ident *ident = ident_get(c->srv, id);

	if (ident == NULL)
		return -1;
	c->ident = ident;
	ident->conns++;
	return 0;
}

void
hs__quota_detach(hs_conn *c)
{
	hs_ident *ident = c->ident;

	if (ident == NULL)
		return;
	c->ident = NULL;
	ident->conns--;
	ident_put(c->srv, ident);
}

int
hs__quota_request(hs_conn *c, char *msg)
{
	const hs_server *s = c->srv;
	const hs_conn *o;
	int n = 0, limit = s->cfg.max_requests_per_id;

	if (c->ident == NULL)
		return 0;
	/* this one, and what is being read or answered on every
	 * connection of the identity */
	n = 1 + c->outs;
	for (o = s->conns; o != NULL && n <= limit; o = o->next)
		if (o != c && o->ident == c->ident && !o->closing)
			n += o->in_message + o->outs;
	if (n <= limit)
		return 0;
	c->srv->over_quota++;
	snprintf(msg, HS_MSG_LEN, "too many requests in flight from this "
	    "identity (limit %d)", limit);
	return -1;
}

int
hs__quota_body(hs_conn *c, size_t more, char *msg)
{
	const hs_server *s = c->srv;
	const hs_conn *o;
	/* one body's buffer, its NUL included */
	size_t held = c->body_cap, max = s->cfg.max_body_bytes < SIZE_MAX ?
	    s->cfg.max_body_bytes + 1 : SIZE_MAX;

	if (c->ident == NULL || c->ident->role != HS_ROLE_CLIENT)
		return 0;
	for (o = s->conns; o != NULL; o = o->next)
		if (o != c && o->ident == c->ident && !o->closing)
			held += o->body_cap;
	if (held <= max && more <= max - held)
		return 0;
	c->srv->over_quota++;
	snprintf(msg, HS_MSG_LEN, "this client's identity holds too many "
	    "request bodies now (limit %zu bytes): try again",
	    s->cfg.max_body_bytes);
	return -1;
}

void
hs__quota_recheck(hs_server *s)
{
	hs_ident *i;

	for (i = s->idents; i != NULL; i = i->next)
		i->role = role_of(s, i->id);
}
