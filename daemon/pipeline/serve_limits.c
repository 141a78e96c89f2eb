/* The pipeline port's connection limits (DESIGN section 5), as the
 * training API's: caps in all and per address, where a connection still
 * in its TLS handshake (one that has proved nothing) makes room for a
 * new one; and, once the handshake has named the peer, caps per
 * identity, with the ring's own hosts given the place of a client's
 * connection when every place is taken.  Called from serve_conn.c on the
 * loop. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"

/* Whether o counts against the limits: an inbound connection, open, and
 * not one let in beyond max_connections to learn who it is. */
static int
counted(const conn *o, const conn *c)
{
	return o != c && !o->closing && !o->outbound && !o->provisional;
}

/* The oldest inbound connection still in its handshake: from addr when
 * it is not NULL, else from the address holding the most of them; among
 * those let in beyond max_connections when over is set.  Closed, quietly;
 * 1 when there was one. */
static int
evict_handshaking(sv *s, const conn *c, const char *addr, int over)
{
	conn *o, *p, *oldest = NULL;
	int most = 0;

	for (o = s->conns; o != NULL; o = o->next) {
		int n = 0;

		if (o == c || o->closing || o->outbound || !o->handshaking ||
		    o->provisional != over ||
		    (addr != NULL && strcmp(o->addr, addr) != 0))
			continue;
		if (addr == NULL)
			for (p = s->conns; p != NULL; p = p->next)
				n += !p->closing && p->handshaking &&
				    !p->outbound && strcmp(p->addr, o->addr) == 0;
		/* the list runs from new to old: a later one of equal rank
		 * is older */
		if (oldest == NULL || n >= most) {
			oldest = o;
			most = n;
		}
	}
	if (oldest == NULL)
		return 0;
	sv_conn_close(oldest, NULL);
	return 1;
}

/* A client's connection that a host of the ring may take the place of. */
static int
evictable(const conn *o)
{
	return !o->closing && !o->outbound && !o->handshaking &&
	    !o->provisional && (o->kind == SV_PEER_CLIENT ||
	    o->kind == SV_PEER_OPEN || o->kind == SV_PEER_NOCERT);
}

int
sv_limits_accept(conn *c, char *why, size_t len)
{
	sv *s = c->s;
	const conn *o;
	int all = 0, here = 0, waiting = 0, clients = 0;

	for (o = s->conns; o != NULL; o = o->next) {
		if (o != c && !o->closing && o->provisional)
			waiting++;
		if (!counted(o, c))
			continue;
		all++;
		here += strcmp(o->addr, c->addr) == 0;
		clients += evictable(o);
	}
	if (here >= s->cfg.max_connections_per_addr &&
	    (s->tls == NULL || !evict_handshaking(s, c, c->addr, 0))) {
		snprintf(why, len, "too many connections from %s (limit %d)",
		    c->addr, s->cfg.max_connections_per_addr);
		return -1;
	}
	if (here >= s->cfg.max_connections_per_addr)
		all--;          /* one made room */
	if (all < s->cfg.max_connections)
		return 0;
	if (s->tls != NULL && evict_handshaking(s, c, NULL, 0))
		return 0;
	/* every place taken, none by a stranger: a host of the ring may yet
	 * take a client's (sv_limits_admit), so its handshake may go on,
	 * as many at once as there are places */
	if (s->tls != NULL && clients > 0 &&
	    (waiting < s->cfg.max_connections ||
	    evict_handshaking(s, c, NULL, 1))) {
		c->provisional = 1;
		return 0;
	}
	snprintf(why, len, "too many connections (limit %d)",
	    s->cfg.max_connections);
	return -1;
}

/* The client connection a host takes the place of: one the list does
 * not name before a listed client's, an idle one (no request in flight,
 * no frame begun) before a busy one, the oldest before a newer one. */
static conn *
eviction_victim(sv *s)
{
	conn *o, *best = NULL;
	int best_rank = 0;

	for (o = s->conns; o != NULL; o = o->next) {
		int rank;

		if (!evictable(o))
			continue;
		rank = (o->kind == SV_PEER_NOCERT ? 4 : o->kind ==
		    SV_PEER_OPEN ? 2 : 0) + (o->inflight == 0 &&
		    o->hdr_got == 0 && o->http == NULL);
		if (best == NULL || rank >= best_rank) {
			best = o;
			best_rank = rank;
		}
	}
	return best;
}

int
sv_limits_admit(conn *c)
{
	sv *s = c->s;
	const uint8_t *id = tls_conn_peer_id(c->tls), *oid;
	const conn *o;
	conn *victim;
	char why[160];
	int host = c->kind == SV_PEER_PREV || c->kind == SV_PEER_HOST;
	int limit = host ? s->cfg.max_connections_per_peer :
	    s->cfg.max_connections_per_client, n = 0;

	if (id == NULL)
		return 0;
	for (o = s->conns; o != NULL; o = o->next)
		if (counted(o, c) && !o->handshaking && o->tls != NULL &&
		    (oid = tls_conn_peer_id(o->tls)) != NULL &&
		    memcmp(oid, id, ID_BYTES) == 0)
			n++;
	if (n >= limit) {
		snprintf(why, sizeof(why), "too many connections of this %s's "
		    "identity (limit %d)", host ? "host" : "client", limit);
		sv_conn_close(c, why);
		return -1;
	}
	if (!c->provisional)
		return 0;
	if (!host || (victim = eviction_victim(s)) == NULL) {
		snprintf(why, sizeof(why), "too many connections (limit %d)",
		    s->cfg.max_connections);
		sv_conn_close(c, why);
		return -1;
	}
	sv_conn_close(victim, "its place taken by a host of the ring");
	c->provisional = 0;
	return 0;
}
