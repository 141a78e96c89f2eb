/* The pipeline host's connections: accepting them within the limits,
 * mutual TLS over each (tls_stream.h) with the peer told apart by its id,
 * the frame reader that lets each kind of peer send only its own frames,
 * the rate of clients at an open entry, and the link to the next host,
 * pinned to its id.  What the frames do is serve.c's; a connection that
 * speaks HTTP is handed on through s->http_ops (serve_http.c). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"

/* An unfinished frame may sit this long before its connection goes. */
#define PARTIAL_S 10.0
/* Bytes waiting to be written to one connection before it is dropped:
 * a client that does not read must not hold the host's memory. */
#define WRITE_BACKLOG ((size_t)256 << 20)
/* A refused connection has this long to take its TLS alert. */
#define DRAIN_S 2.0

/* Writing --------------------------------------------------------------- */

typedef struct {
	ts_write_t req;
	char *buf;
} wreq;

static void
on_written(ts_write_t *w, int status)
{
	wreq *r = (wreq *)w;

	(void)status;	/* a failed write shows up as a read error too */
	free(r->buf);
	free(r);
}

int
sv_conn_write(conn *c, char *buf, size_t len)
{
	wreq *r;
	uv_buf_t b = uv_buf_init(buf, (unsigned)len);

	if (c->closing || uv_stream_get_write_queue_size(
	    (uv_stream_t *)&c->tcp) > WRITE_BACKLOG) {
		free(buf);
		if (!c->closing)
			sv_conn_close(c, "it does not read what it is sent");
		return -1;
	}
	if ((r = malloc(sizeof(*r))) == NULL) {
		free(buf);
		return -1;
	}
	c->s->st.bytes_out[c->outbound ? SV_BYTES_RING : c->http != NULL ?
	    SV_BYTES_HTTP : SV_BYTES_CLIENT] += len;
	r->buf = buf;
	if (ts_write(&r->req, (uv_stream_t *)&c->tcp, c->tls, &b, 1,
	    on_written) != 0) {
		free(buf);
		free(r);
		return -1;
	}
	return 0;
}

int
sv_conn_send(conn *c, const pl_frame *f)
{
	char *buf, err[KN_ERR_LEN];
	size_t len;

	if (pl_frame_encode(f, &buf, &len, err) != 0) {
		log_warnx("pipeline: cannot encode a %s frame: %s",
		    pl_type_name(f->type), err);
		return -1;
	}
	return sv_conn_write(c, buf, len);
}

/* Closing --------------------------------------------------------------- */

static void
on_conn_closed(uv_handle_t *h)
{
	conn *c = h->data;
	sv *s = c->s;
	conn **p;

	for (p = &s->conns; *p != NULL; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	tls_conn_free(c->tls);
	free(c->body);
	free(c);
}

static void
conn_release(conn *c)
{
	if (c->released)
		return;
	c->released = 1;
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

/* Marks c closing and tells serve.c; 0 when it already was. */
static int
conn_begin_close(conn *c, const char *why)
{
	if (c->closing)
		return 0;
	c->closing = 1;
	if (why != NULL)
		log_info("pipeline: closing %s%s: %s", c->outbound ? "the link "
		    "to " : "", c->peer, why);
	if (c->http != NULL)
		c->s->http_ops->gone(c);
	sv_conn_gone(c->s, c, why);
	return 1;
}

void
sv_conn_close(conn *c, const char *why)
{
	conn_begin_close(c, why);
	conn_release(c);        /* at once, draining or not */
}

static void
on_drained(uv_shutdown_t *req, int status)
{
	(void)status;
	conn_release(req->data);
}

/* Closes c once what is queued (a TLS alert) is written, so that the
 * peer learns why; DRAIN_S at most. */
static void
conn_drain(conn *c, const char *why)
{
	if (!conn_begin_close(c, why))
		return;
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->shutdown.data = c;
	c->draining_since = kn_now();
	if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_drained) != 0)
		conn_release(c);
}

void
sv_conn_finish(conn *c)
{
	if (c->closing)
		return;
	/* a TLS peer tells a whole answer from a cut-off one by this */
	if (c->tls != NULL) {
		tls_conn_shutdown(c->tls);
		if (ts_flush((uv_stream_t *)&c->tcp, c->tls) < 0) {
			sv_conn_close(c, NULL);
			return;
		}
	}
	conn_drain(c, NULL);
}

/* Who the peer is -------------------------------------------------------- */

/* The kind of an inbound peer whose handshake presented id. */
static sv_peer
peer_kind(const sv *s, const uint8_t id[ID_BYTES])
{
	int h = ph_find_id(&s->hosts, id), S = s->hosts.nstages;

	/* any host of the stage before sends us its work */
	if (h >= 0)
		return S > 0 && s->hosts.v[h].stage == (s->stage + S - 1) % S ?
		    SV_PEER_PREV : SV_PEER_HOST;
	if (ph_client_find(&s->hosts, id) >= 0)
		return SV_PEER_CLIENT;
	return SV_PEER_OPEN;
}

int
sv_allows(void *arg, const uint8_t id[ID_BYTES])
{
	const sv *s = arg;

	return ph_find_id(&s->hosts, id) >= 0 ||
	    ph_client_find(&s->hosts, id) >= 0 || (s->entry && s->open_entry);
}

static const char *
peer_kind_name(sv_peer k)
{
	switch (k) {
	case SV_PEER_PREV: return "the previous host";
	case SV_PEER_NEXT: return "the next host";
	case SV_PEER_HOST: return "a host that is not the previous one";
	case SV_PEER_CLIENT: return "a listed client";
	case SV_PEER_OPEN: return "a client the list does not name";
	case SV_PEER_NOCERT: return "a client without a certificate";
	default: return "a peer";
	}
}

/* The TLS handshake of c is over. */
static void
conn_established(conn *c)
{
	sv *s = c->s;
	char id[ID_LEN];

	c->handshaking = 0;
	if (tls_conn_peer_id(c->tls) == NULL) {
		/* only an open entry lets a handshake end without one
		 * (tls_conn_cert_optional): such a client is told so over
		 * HTTP (serve_http.c) and may send nothing else */
		if (c->outbound || !s->entry || !s->open_entry) {
			sv_conn_close(c, "a peer without a certificate");
			return;
		}
		c->kind = SV_PEER_NOCERT;
		c->tokens = s->cfg.pipeline_client_rate;
		c->tokens_at = kn_now();
		log_debug("pipeline: %s is a client without a certificate",
		    c->peer);
		return;
	}
	id_format(tls_conn_peer_id(c->tls), id);
	if (c->outbound) {
		c->kind = SV_PEER_NEXT;
		c->up = 1;
		log_info("pipeline: connected to the next host %s (peer id %s)",
		    c->peer, id);
		sv_link_up(s, c->link);
		return;
	}
	c->kind = peer_kind(s, tls_conn_peer_id(c->tls));
	if (sv_limits_admit(c) != 0)
		return;
	c->tokens = s->cfg.pipeline_client_rate;
	c->tokens_at = kn_now();
	log_debug("pipeline: %s is %s, peer id %s", c->peer,
	    peer_kind_name(c->kind), id);
}

/* Whether c's kind of peer may send f: clients ask, the previous host
 * brings the ring's frames, and nobody else sends anything. */
static int
frame_allowed(const conn *c, const pl_frame *f)
{
	/* a SOMA host has no ring: clients only, and their own frames */
	if (c->s->soma != NULL)
		return (c->kind == SV_PEER_ANY || c->kind == SV_PEER_CLIENT ||
		    c->kind == SV_PEER_OPEN) && (f->type == PL_SCORE ||
		    f->type == PL_STEP || f->type == PL_END);
	switch (c->kind) {
	case SV_PEER_ANY:
	case SV_PEER_NEXT:
		return 1;
	case SV_PEER_PREV:
		return f->type != PL_GEN;
	case SV_PEER_CLIENT:
	case SV_PEER_OPEN:
		return f->type == PL_GEN;
	default:
		return 0;
	}
}

/* Reading -------------------------------------------------------------- */

/* What a frame read whole counts as: a client's request, or the ring's
 * (over plain TCP the kind of peer is not known, the frame's type
 * tells). */
static sv_bytes
frame_bytes_kind(const conn *c, const pl_frame *f)
{
	if (c->kind == SV_PEER_CLIENT || c->kind == SV_PEER_OPEN)
		return SV_BYTES_CLIENT;
	if (c->kind == SV_PEER_ANY && !c->outbound && (f->type == PL_GEN ||
	    f->type == PL_SCORE || f->type == PL_STEP))
		return SV_BYTES_CLIENT;
	return SV_BYTES_RING;
}

/* Whether the first byte of a connection starts an HTTP request: a
 * method's capital letter, which no frame length below PL_FRAME_MAX
 * starts with. */
static int
is_http(unsigned char first)
{
	return first >= 'A' && first <= 'Z';
}

/* Feeds plaintext to the frame reader of c (or its HTTP side); returns
 * -1 when c was closed. */
static int
conn_feed(conn *c, const char *p, size_t n)
{
	sv *s = c->s;
	char err[KN_ERR_LEN];

	if (c->http != NULL || (n > 0 && !c->outbound && c->frames == 0 &&
	    c->hdr_got == 0 && is_http((unsigned char)p[0]))) {
		int rc = s->http_ops->feed(c, p, n);

		if (rc > 0)
			sv_conn_hold(c, 1);
		return rc < 0 ? -1 : 0;
	}
	while (n > 0 && !c->closing) {
		if (c->partial_since == 0)
			c->partial_since = kn_now();
		if (c->hdr_got < PL_HEADER) {
			size_t k = PL_HEADER - c->hdr_got < n ?
			    PL_HEADER - c->hdr_got : n;

			memcpy(c->hdr + c->hdr_got, p, k);
			c->hdr_got += k;
			p += k;
			n -= k;
			if (c->hdr_got < PL_HEADER)
				break;
			/* bounded before a byte of the body is kept */
			c->body_len = pl_frame_length(c->hdr);
			if (c->body_len == 0 ||
			    c->body_len > s->cfg.pipeline_max_frame) {
				snprintf(err, sizeof(err), "a frame of %zu bytes "
				    "(the limit is %zu)", c->body_len,
				    s->cfg.pipeline_max_frame);
				sv_conn_close(c, err);
				return -1;
			}
			if ((c->body = malloc(c->body_len)) == NULL) {
				sv_conn_close(c, "out of memory");
				return -1;
			}
			c->body_got = 0;
		}
		{
			size_t k = c->body_len - c->body_got < n ?
			    c->body_len - c->body_got : n;
			pl_frame f;

			memcpy(c->body + c->body_got, p, k);
			c->body_got += k;
			p += k;
			n -= k;
			if (c->body_got < c->body_len)
				break;
			c->hdr_got = 0;
			c->partial_since = 0;
			if (pl_frame_decode(c->body, c->body_len, &f, err) != 0) {
				free(c->body);
				c->body = NULL;
				sv_conn_close(c, err);
				return -1;
			}
			free(c->body);
			c->body = NULL;
			c->frames++;
			if (c->outbound)
				c->heard = kn_now();
			s->st.bytes_in[frame_bytes_kind(c, &f)] += PL_HEADER +
			    c->body_len;
			if (!frame_allowed(c, &f)) {
				snprintf(err, sizeof(err), "refused a %s frame from "
				    "%s", pl_type_name(f.type),
				    peer_kind_name(c->kind));
				pl_frame_clear(&f);
				sv_conn_close(c, err);
				return -1;
			}
			sv_dispatch(s, c, &f);
		}
	}
	return 0;
}

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	static char slab[65536];	/* the loop reads one buffer at a time */

	(void)h;
	(void)hint;
	*buf = uv_buf_init(slab, sizeof(slab));
}

/* The tokens of a client at an open entry, refilled to now: its rate a
 * second, a second's worth at most. */
static void
conn_refill(conn *c, double now)
{
	double rate = c->s->cfg.pipeline_client_rate;

	c->tokens += rate * (now - c->tokens_at);
	if (c->tokens > rate)
		c->tokens = rate;
	c->tokens_at = now;
}

/* A client the list does not name pays for the frames it sends, record
 * by record; past its rate, the socket is not read and the engine keeps
 * the rest until it has paid. */
static void
conn_charge(conn *c, size_t n)
{
	if (c->kind != SV_PEER_OPEN && c->kind != SV_PEER_NOCERT)
		return;
	conn_refill(c, kn_now());
	c->tokens -= (double)n;
	if (c->tokens < 0 && !c->paused) {
		uv_read_stop((uv_stream_t *)&c->tcp);
		c->paused = 1;
	}
}

/* Plaintext out of the engine (or the socket, plain); nonzero once c
 * takes no more for now. */
static int
conn_deliver(void *arg, const char *data, size_t len)
{
	conn *c = arg;

	/* the handshake may end and data follow in one read */
	if (c->handshaking && tls_conn_established(c->tls)) {
		conn_established(c);
		if (c->closing)
			return 1;
	}
	conn_charge(c, len);
	conn_feed(c, data, len);
	return c->closing || c->paused || c->http_full;
}

/* The handshake failed (or a record was bad): the alert goes out, then
 * the connection. */
static void
conn_tls_failed(conn *c, int rc)
{
	char why[KN_ERR_LEN];

	if (rc == TLS_ECLOSED) {
		sv_conn_close(c, c->outbound ? "closed" : NULL);
		return;
	}
	snprintf(why, sizeof(why), "%s%.200s", rc == TLS_EHANDSHAKE ?
	    "TLS handshake failed: " : "TLS: ", tls_conn_error(c->tls)[0] ?
	    tls_conn_error(c->tls) : "out of memory");
	/* a refusal is logged as such, with the id presented */
	if (rc == TLS_EHANDSHAKE && !c->outbound)
		log_warnx("pipeline: refused %s: %s", c->peer,
		    tls_conn_error(c->tls));
	conn_drain(c, rc == TLS_EHANDSHAKE && !c->outbound ? NULL : why);
}

static void
on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	conn *c = st->data;
	sc *k = c->s->compute;
	int rc;

	if (c->closing)
		return;
	if (nread < 0) {
		sv_conn_close(c, nread == UV_EOF ? (c->hdr_got ? "closed in "
		    "the middle of a frame" : c->outbound ? "closed" : NULL) :
		    uv_strerror((int)nread));
		return;
	}
	if (k != NULL)
		sc_hold(k);
	rc = ts_feed(st, c->tls, buf->base, (size_t)nread, conn_deliver, c);
	if (k != NULL)
		sc_release(k);
	if (rc < 0 && !c->closing) {
		conn_tls_failed(c, rc);
		return;
	}
	if (c->handshaking && !c->closing && tls_conn_established(c->tls))
		conn_established(c);
}

/* What the engine kept first, then the socket again, unless c is to
 * wait still. */
static void
conn_read_again(conn *c)
{
	sc *k = c->s->compute;
	int rc;

	if (k != NULL)
		sc_hold(k);
	rc = ts_feed((uv_stream_t *)&c->tcp, c->tls, NULL, 0, conn_deliver, c);
	if (k != NULL)
		sc_release(k);
	if (rc < 0 && !c->closing) {
		conn_tls_failed(c, rc);
		return;
	}
	if (!c->closing && !c->paused && !c->http_full)
		uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* A paused client has paid: it is read again, unless its HTTP answer
 * still holds it. */
static void
conn_resume(conn *c)
{
	c->paused = 0;
	if (!c->http_full)
		conn_read_again(c);
}

void
sv_conn_hold(conn *c, int hold)
{
	if (c->closing || hold == c->http_full)
		return;
	c->http_full = hold;
	if (hold)
		uv_read_stop((uv_stream_t *)&c->tcp);
	else if (!c->paused)
		conn_read_again(c);
}

/* Accepting ------------------------------------------------------------- */

static conn *
conn_new(sv *s, int outbound)
{
	conn *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->s = s;
	c->outbound = outbound;
	c->opened = kn_now();
	c->kind = s->tls != NULL ? SV_PEER_UNKNOWN : SV_PEER_ANY;
	uv_tcp_init(s->loop, &c->tcp);
	c->tcp.data = c;
	uv_tcp_nodelay(&c->tcp, 1);
	c->next = s->conns;
	s->conns = c;
	return c;
}

static void
conn_name(conn *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss), port = 0;

	snprintf(c->addr, sizeof(c->addr), "?");
	snprintf(c->peer, sizeof(c->peer), "?");
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
		return;
	if (ss.ss_family == AF_INET) {
		uv_ip4_name((struct sockaddr_in *)&ss, c->addr, sizeof(c->addr));
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	} else if (ss.ss_family == AF_INET6) {
		uv_ip6_name((struct sockaddr_in6 *)&ss, c->addr,
		    sizeof(c->addr));
		port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	snprintf(c->peer, sizeof(c->peer), "%s:%d", c->addr, port);
}

void
sv_on_connection(uv_stream_t *server, int status)
{
	sv *s = server->data;
	char why[KN_ERR_LEN];
	conn *c;

	if (status < 0 || s->stopping || (c = conn_new(s, 0)) == NULL)
		return;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
		sv_conn_close(c, NULL);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	conn_name(c);
	if (sv_limits_accept(c, why, sizeof(why)) != 0) {
		sv_conn_close(c, why);
		return;
	}
	if (s->tls != NULL) {
		if (tls_conn_new(&c->tls, s->tls, 1, NULL, why) != 0) {
			sv_conn_close(c, why);
			return;
		}
		/* an open entry answers a client without a certificate */
		if (s->entry && s->open_entry && s->soma == NULL)
			tls_conn_cert_optional(c->tls);
		c->handshaking = 1;
	}
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* The link to the next host ------------------------------------------- */

typedef struct {
	uv_connect_t req;
	conn *c;
} creq;

/* TCP is up: TLS pinned to the next host's id, or the link is up. */
static void
on_link_connected(uv_connect_t *req, int status)
{
	creq *r = (creq *)req;
	conn *c = r->c;
	sv *s = c->s;
	const ph_host *next = &s->hosts.v[c->link->host];
	char err[KN_ERR_LEN];

	free(r);
	if (c->closing)
		return;
	if (status < 0) {
		sv_conn_close(c, uv_strerror(status));
		return;
	}
	c->opened = kn_now();
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	if (s->tls == NULL) {
		c->up = 1;
		log_info("pipeline: connected to the next host %s", c->peer);
		sv_link_up(s, c->link);
		return;
	}
	if (tls_conn_new(&c->tls, s->tls, 0, next->id, err) != 0) {
		sv_conn_close(c, err);
		return;
	}
	c->handshaking = 1;
	/* the client hello */
	if (tls_conn_start(c->tls) != 0 ||
	    ts_flush((uv_stream_t *)&c->tcp, c->tls) < 0)
		conn_tls_failed(c, TLS_EHANDSHAKE);
}

void
sv_link_connect(sv *s, sv_link *l)
{
	const ph_host *h = &s->hosts.v[l->host];
	/* pipeline_next stands for the one next host there is */
	const char *addr = s->cfg.pipeline_next[0] && s->nlinks == 1 ?
	    s->cfg.pipeline_next : h->addr;
	char host[CF_HOST_LEN];
	int port;
	struct sockaddr_storage sa;
	creq *r;
	conn *c;

	if (l->c != NULL || s->stopping || s->hosts.soma)
		return;
	if (cf_parse_hostport(addr, host, sizeof(host), &port) != 0 ||
	    (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
	    uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) != 0)) {
		log_warnx("pipeline: the next host %s is not a numeric "
		    "host:port", addr);
		return;
	}
	if ((c = conn_new(s, 1)) == NULL || (r = malloc(sizeof(*r))) == NULL) {
		if (c != NULL)
			sv_conn_close(c, NULL);
		return;
	}
	snprintf(c->peer, sizeof(c->peer), "%.63s", addr);
	l->c = c;
	c->link = l;
	r->c = c;
	if (uv_tcp_connect(&r->req, &c->tcp, (struct sockaddr *)&sa,
	    on_link_connected) != 0) {
		free(r);
		sv_conn_close(c, "cannot connect");
	}
}

/* Housekeeping ---------------------------------------------------------- */

void
sv_conns_cron(sv *s, double now)
{
	conn *c, *cn;
	char why[KN_ERR_LEN];

	for (c = s->conns; c != NULL; c = cn) {
		cn = c->next;
		if (c->closing) {
			if (c->draining_since > 0 &&
			    now - c->draining_since > DRAIN_S)
				conn_release(c);
			continue;
		}
		if (c->handshaking && now - c->opened >
		    s->cfg.handshake_timeout_ms / 1000.0) {
			snprintf(why, sizeof(why), "TLS handshake not finished "
			    "within %d ms", s->cfg.handshake_timeout_ms);
			if (!c->outbound)
				log_warnx("pipeline: refused %s: %s", c->peer,
				    why);
			sv_conn_close(c, c->outbound ? why : NULL);
		} else if (c->outbound && !c->up && !c->handshaking &&
		    s->nlinks > 1 && now - c->opened >
		    s->cfg.handshake_timeout_ms / 1000.0) {
			/* one of several: not left to the kernel's minutes */
			snprintf(why, sizeof(why), "cannot connect within %d "
			    "ms", s->cfg.handshake_timeout_ms);
			sv_conn_close(c, why);
		} else if (c->partial_since > 0 &&
		    now - c->partial_since > PARTIAL_S)
			sv_conn_close(c, "a frame left unfinished");
		else if (c->paused) {
			conn_refill(c, now);
			if (c->tokens >= 0)
				conn_resume(c);
		}
	}
}

int
sv_conns_recheck(sv *s)
{
	const uint8_t *id;
	conn *c, *cn;
	int n = 0;

	if (s->tls == NULL)
		return 0;
	for (c = s->conns; c != NULL; c = cn) {
		cn = c->next;
		if (c->closing || c->outbound || c->handshaking ||
		    (id = tls_conn_peer_id(c->tls)) == NULL)
			continue;
		if (!tls_ctx_allows(s->tls, id)) {
			sv_conn_close(c, "its peer id is no longer listed");
			n++;
			continue;
		}
		c->kind = peer_kind(s, id);
	}
	return n;
}
