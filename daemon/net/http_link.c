/* Links: connections another module accepted and reads (the pipeline
 * port, which tells HTTP from its frames by the first byte), served by the
 * HTTP server as its own: parsed, bounded, timed and answered through the
 * owner's write, finish, close and resume (http_server.h).  Everything
 * but the socket is http_server.c's and http_response.c's. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon/net/internal.h"

hs_link *
hs_link_new(hs_server *s, const hs_link_ops *ops, void *arg,
    const char *peer, const char *addr, const uint8_t *peer_id)
{
	hs_conn *c;

	if (s->closing || (c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->srv = s;
	c->lops = ops;
	c->larg = arg;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	if (peer_id != NULL) {
		memcpy(c->link_id, peer_id, ID_BYTES);
		c->has_link_id = 1;
		if (hs__quota_link(c, peer_id) != 0) {
			free(c);
			return NULL;
		}
	}
	uv_timer_init(s->loop, &c->timer);
	c->timer.data = c;
	c->handles = 1;
	c->next = s->conns;
	if (s->conns != NULL)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	s->accepted++;
	hs__conn_parser_init(c);
	hs__conn_timer(c, HS_T_IDLE);
	return (hs_link *)c;
}

int
hs_link_feed(hs_link *l, const char *data, size_t len)
{
	hs_conn *c = (hs_conn *)l;

	if (!c->closing && !c->finishing && !c->lingering) {
		c->link_full = 0;
		hs__conn_feed(c, data, len);
	}
	return c->closing || c->finishing || c->lingering || c->link_full;
}

void
hs_link_close(hs_link *l)
{
	hs_conn *c = (hs_conn *)l;

	c->detached = 1;
	hs__conn_close(c);
}
