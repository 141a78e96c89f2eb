/* The insider's attacks on connections (scripts/insider.c): a slowloris
 * with a listed identity (every connection finishes its TLS handshake as
 * the replica it impersonates, then sends one byte of a request head
 * every few seconds and never ends it), and one completion with huge
 * integers for the pipeline entry.  Bounded: at most --connections held
 * at once, reopened when the server drops one, all gone at --seconds. */
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/tls_stream.h"
#include "kernels/clock.h"
#include "scripts/insider.h"

/* At most this many new connections per tick (100 ms): a flood that
 * builds up over a few seconds, not a burst the kernel drops. */
#define OPEN_PER_TICK 10

/* A request head that never ends: its first line, then one header whose
 * value goes on for ever (the byte after the text is 'a' again). */
static const char slow_head[] =
    "GET /v1/status HTTP/1.1\r\nHost: insider\r\nX-Slow: ";

typedef struct fl_conn {
	uv_tcp_t tcp;
	uv_connect_t connect;
	tls_conn *tls;
	in_flood *f;
	int target;             /* replica index */
	int established;
	size_t sent;            /* head bytes sent */
	double opened, next_byte;
	struct fl_conn *next;
} fl_conn;

struct in_flood {
	insider *in;
	uv_timer_t timer;
	fl_conn *conns;
	int open, next_target, next_source;
	int held, held_max;
	long opened_total, closed_early, answers;
	int stopping;
};

static void
on_closed(uv_handle_t *h)
{
	fl_conn *c = h->data;
	in_flood *f = c->f;
	fl_conn **p;

	for (p = &f->conns; *p != NULL; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	f->open--;
	tls_conn_free(c->tls);
	free(c);
}

static void
drop(fl_conn *c)
{
	if (uv_is_closing((uv_handle_t *)&c->tcp))
		return;
	/* dropped by the server before it held a second of our time */
	if (!c->established || kn_now() - c->opened < 1.0)
		c->f->closed_early++;
	uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void
on_alloc(uv_handle_t *h, size_t want, uv_buf_t *buf)
{
	static char space[16384];

	(void)h;
	(void)want;
	*buf = uv_buf_init(space, sizeof(space));
}

/* The server's answers (a 408, a 503) are counted, never read. */
static int
deliver(void *arg, const char *data, size_t len)
{
	fl_conn *c = arg;

	(void)data;
	if (len > 0)
		c->f->answers++;
	return 0;
}

static void
on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	fl_conn *c = st->data;

	if (n < 0) {
		drop(c);
		return;
	}
	if (n == 0)
		return;
	if (ts_feed(st, c->tls, buf->base, (size_t)n, deliver, c) != 0) {
		drop(c);
		return;
	}
	if (!c->established && tls_conn_established(c->tls)) {
		c->established = 1;
		c->next_byte = kn_now();
	}
}

static void
on_connected(uv_connect_t *req, int status)
{
	fl_conn *c = req->data;
	char err[KN_ERR_LEN];
	const peers_entry *p;

	if (status != 0 || c->f->stopping) {
		drop(c);
		return;
	}
	p = &c->f->in->peers.v[c->f->in->rep_peer[c->target]];
	if (tls_conn_new(&c->tls, c->f->in->tls, 0, p->has_id ? p->id : NULL,
	    err) != 0 || tls_conn_start(c->tls) != 0 ||
	    ts_flush((uv_stream_t *)&c->tcp, c->tls) != 0 ||
	    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
		drop(c);
		return;
	}
}

static void
on_written(ts_write_t *w, int status)
{
	fl_conn *c = w->data;

	free(w);
	if (status != 0)
		drop(c);
}

/* One more byte of the head that never ends. */
static void
drip(fl_conn *c, double t)
{
	static char byte;
	ts_write_t *w;
	uv_buf_t b;

	if (!c->established || t < c->next_byte ||
	    uv_is_closing((uv_handle_t *)&c->tcp))
		return;
	byte = c->sent < sizeof(slow_head) - 1 ? slow_head[c->sent] : 'a';
	c->sent++;
	c->next_byte = t + c->f->in->drip;
	if ((w = calloc(1, sizeof(*w))) == NULL)
		return;
	w->data = c;
	b = uv_buf_init(&byte, 1);
	if (ts_write(w, (uv_stream_t *)&c->tcp, c->tls, &b, 1,
	    on_written) != 0) {
		free(w);
		drop(c);
	}
}

/* A new connection to the next replica in turn, from the next source
 * address (127.0.1.x: the host's several addresses, so that a cap per
 * address alone does not stop it). */
static void
open_one(in_flood *f)
{
	insider *in = f->in;
	const peers_entry *p;
	struct sockaddr_in to, from;
	fl_conn *c;
	int k;

	do {
		k = f->next_target++ % in->replicas;
	} while (k == in->replica);
	p = &in->peers.v[in->rep_peer[k]];
	if (uv_ip4_addr(p->host, p->port, &to) != 0 ||
	    (c = calloc(1, sizeof(*c))) == NULL)
		return;
	c->f = f;
	c->target = k;
	c->opened = kn_now();
	uv_tcp_init(in->loop, &c->tcp);
	c->tcp.data = c;
	c->connect.data = c;
	c->next = f->conns;
	f->conns = c;
	f->open++;
	f->opened_total++;
	if (in->sources > 0 && strncmp(p->host, "127.", 4) == 0) {
		char src[32];

		snprintf(src, sizeof(src), "127.0.1.%d",
		    1 + f->next_source++ % in->sources);
		if (uv_ip4_addr(src, 0, &from) == 0)
			uv_tcp_bind(&c->tcp, (const struct sockaddr *)&from, 0);
	}
	if (uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&to,
	    on_connected) != 0)
		drop(c);
}

static void
on_flood_tick(uv_timer_t *h)
{
	in_flood *f = h->data;
	double t = kn_now();
	fl_conn *c, *next;
	int n = 0;

	f->held = 0;
	for (c = f->conns; c != NULL; c = next) {
		next = c->next;
		if (c->established && !uv_is_closing((uv_handle_t *)&c->tcp))
			f->held++;
		drip(c, t);
	}
	if (f->held > f->held_max)
		f->held_max = f->held;
	if (in_elapsed(f->in) + 1.0 >= f->in->seconds) {
		in_flood_stop(f);
		return;
	}
	while (f->open < f->in->connections && n++ < OPEN_PER_TICK)
		open_one(f);
}

int
in_flood_start(insider *in)
{
	in_flood *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	f->in = in;
	in->flood = f;
	uv_timer_init(in->loop, &f->timer);
	f->timer.data = f;
	uv_timer_start(&f->timer, on_flood_tick, 100, 100);
	printf("insider: flood: up to %d connections to the other replicas of "
	    "block %d, one header byte every %.1f s, from %d source "
	    "address(es)\n", in->connections, in->block, in->drip, in->sources);
	fflush(stdout);
	return 0;
}

void
in_flood_stop(in_flood *f)
{
	fl_conn *c;

	if (f->stopping)
		return;
	f->stopping = 1;
	uv_timer_stop(&f->timer);
	for (c = f->conns; c != NULL; c = c->next)
		if (!uv_is_closing((uv_handle_t *)&c->tcp))
			uv_close((uv_handle_t *)&c->tcp, on_closed);
}

void
in_flood_summary(const in_flood *f, char *buf, size_t len)
{
	snprintf(buf, len, "held_max=%d opened=%ld closed_early=%ld "
	    "server_answers=%ld", f->held_max, f->opened_total,
	    f->closed_early, f->answers);
}

/* ---- the completion ---- */

/* The integers of issue 35, one request each, in this order: max_tokens
 * that overflows the window check, streamed and not; its negative twin;
 * steps beyond int32 and beyond any cap; a seed beyond int64; and last
 * the most expensive request the cap allows, given up after 2 s (its
 * work should stop with it).  Then GET /v1/status: is the entry alive? */
static const char *const completions[] = {
	"{\"prompt\": \"The \", \"max_tokens\": 9223372036854775807, "
	    "\"stream\": true}",
	"{\"prompt\": \"The \", \"max_tokens\": 9223372036854775807}",
	"{\"prompt\": \"The \", \"max_tokens\": -9223372036854775808, "
	    "\"stream\": true}",
	"{\"prompt\": \"The \", \"steps\": 9223372036854775807}",
	"{\"prompt\": \"The \", \"seed\": 18446744073709551616}",
	"{\"prompt\": \"The \", \"steps\": 1048576}",
	NULL
};

static void send_completion(insider *in);

static void
on_entry_status(void *ctx, hc_result *res)
{
	insider *in = ctx;
	size_t n = strlen(in->completion_error);

	snprintf(in->completion_error + n, sizeof(in->completion_error) - n,
	    " entry_alive=%s", res->status == 200 ? "yes" : "no");
	in->completion_status = res->status == 200 ? 0 : 1;
	in->seconds = in_elapsed(in);   /* nothing more to do: stop */
	printf("insider: completion: afterwards GET /v1/status of the entry: "
	    "%ld%s%s\n", res->status, res->error ? " " : "",
	    res->error ? res->error : "");
	fflush(stdout);
}

static void
on_completion(void *ctx, hc_result *res)
{
	insider *in = ctx;
	size_t n = strlen(in->completion_error);

	snprintf(in->completion_error + n, sizeof(in->completion_error) - n,
	    "%s%ld", n > 0 ? "," : "answers=", res->status);
	printf("insider: completion %d answered %ld: %.*s\n",
	    in->completion_sent, res->status, res->body != NULL ?
	    (int)strcspn(res->body, "\n") > 160 ? 160 :
	    (int)strcspn(res->body, "\n") : 0, res->body != NULL ? res->body :
	    "");
	if (res->error != NULL)
		printf("insider:   (%s)\n", res->error);
	fflush(stdout);
	send_completion(in);
}

static int
entry_request(insider *in, const char *method, const char *path,
    const char *body, long timeout_ms, hc_done_fn done)
{
	hc_request_opts o = { 0 };
	char url[512], err[KN_ERR_LEN];

	snprintf(url, sizeof(url), "%s://%s%s", hc_scheme(in->client),
	    in->entry, path);
	o.method = method;
	o.url = url;
	o.pin = in->entry_pin;
	o.content_type = body != NULL ? "application/json" : NULL;
	o.body = body;
	o.body_len = body != NULL ? strlen(body) : 0;
	o.timeout_ms = timeout_ms;
	o.connect_timeout_ms = 2000;
	if (hc_request(in->client, &o, done, in, err) != 0) {
		printf("insider: completion: %s\n", err);
		return -1;
	}
	return 0;
}

static void
send_completion(insider *in)
{
	const char *body = completions[in->completion_sent];

	if (body == NULL) {
		entry_request(in, "GET", "/v1/status", NULL, 5000,
		    on_entry_status);
		return;
	}
	in->completion_sent++;
	/* the last, the expensive one, is given up early on purpose */
	if (entry_request(in, "POST", "/v1/completions", body,
	    completions[in->completion_sent] == NULL ? 2000 : 10000,
	    on_completion) != 0)
		send_completion(in);
}

int
in_completion_start(insider *in)
{
	char err[KN_ERR_LEN];

	if (in->entry == NULL || in->entry_id == NULL) {
		snprintf(in->completion_error, sizeof(in->completion_error),
		    "this run has no pipeline entry (--entry and --entry-id)");
		return -1;
	}
	if (id_parse(in->entry_id, in->entry_pin, err) != 0) {
		snprintf(in->completion_error, sizeof(in->completion_error),
		    "--entry-id: %s", err);
		return -1;
	}
	send_completion(in);
	return 0;
}
