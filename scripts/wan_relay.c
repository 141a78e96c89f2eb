/* wan-relay: a userspace TCP relay that adds one-way delay and a bandwidth
 * limit per direction, to emulate WAN hops on loopback where the kernel has
 * no netem.  Used by scripts/pipeline-testbed and scripts/bench/pipeline. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

/* Bytes read from one side and not yet written out to the other: past this
 * the source is no longer read, so its TCP window closes as it would behind
 * a full link. */
#define RL_QUEUE_MAX ((size_t)64 << 20)
/* Largest read; a rate-limited direction reads about 1 ms of its link at a
 * time (at least one MTU), so chunks leave paced rather than in bursts. */
#define RL_READ_MAX 65536
#define RL_READ_MIN 1500
#define RL_DELAY_MAX_MS 3600000.0
#define RL_RATE_MAX 1e12
#define RL_ADDR_MAX 64

#define rl_container_of(p, type, member) \
	((type *)(void *)((char *)(p) - offsetof(type, member)))

enum { RL_UP, RL_DOWN };	/* client->target, target->client */

struct rl_chunk {
	struct rl_chunk *next;
	uv_write_t req;
	uint64_t due;		/* ns, uv_hrtime clock */
	size_t len;
	char data[];
};

struct rl_conn;

struct rl_dir {
	struct rl_conn *conn;
	const char *src_name, *dst_name;
	uv_stream_t *src, *dst;
	uv_timer_t timer;
	uv_shutdown_t shutdown_req;
	struct rl_chunk *head, *tail;	/* read, waiting for their due time */
	size_t queued;		/* bytes read and not yet written out */
	size_t read_size;
	uint64_t delay;		/* ns */
	double rate;		/* bytes/s, 0 = unlimited */
	uint64_t link_free;	/* ns: when the emulated link is idle again */
	uint64_t bytes;
	int reading, eof, shut, done;
};

struct rl_relay;

struct rl_conn {
	struct rl_relay *relay;
	struct rl_conn *prev, *next;
	uint64_t id;
	uint64_t opened;	/* ns */
	uv_tcp_t client, target;
	uv_connect_t connect_req;
	struct rl_dir dir[2];
	int closing;
	int open_handles;
	char peer[RL_ADDR_MAX];
};

struct rl_relay {
	uv_loop_t loop;
	uv_tcp_t listener;
	uv_signal_t sigint, sigterm;
	struct sockaddr_storage target;
	char listen_name[RL_ADDR_MAX], target_name[RL_ADDR_MAX];
	double delay_ms[2], rate[2];
	int quiet;
	int exit_code;
	int stopping;
	uint64_t next_id;
	struct rl_conn *conns;
};

static void rl_dir_timer_cb(uv_timer_t *);
static void rl_shutdown_cb(uv_shutdown_t *, int);
static void rl_conn_close(struct rl_conn *, const char *, int);
static void rl_relay_stop(struct rl_relay *);

static void
rl_log(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* One write per line, so that lines of several relays sharing a
	 * terminal or log file do not interleave. */
	fprintf(stderr, "wan-relay: %s\n", msg);
}

static void
rl_addr_name(const struct sockaddr *sa, char *out, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		uv_ip4_name(in, host, sizeof(host));
		port = ntohs(in->sin_port);
		snprintf(out, size, "%s:%d", host, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		uv_ip6_name(in6, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		snprintf(out, size, "[%s]:%d", host, port);
	} else {
		snprintf(out, size, "?");
	}
}

/* Chunks of one direction are due in the order they were read, so the timer
 * only ever waits for the head.  Due times are in uv_hrtime ns, finer than
 * the loop's ms clock; the timeout is rounded up, and a timer that still
 * fires early (uv_now lags uv_hrtime) finds the head not due and waits
 * again, so no byte leaves before its time. */
static void
rl_dir_arm(struct rl_dir *d)
{
	uint64_t now = uv_hrtime(), wait;

	wait = d->head->due > now ? d->head->due - now : 0;
	uv_update_time(d->timer.loop);
	uv_timer_start(&d->timer, rl_dir_timer_cb, (wait + 999999) / 1000000,
	    0);
}

static void
rl_dir_maybe_shutdown(struct rl_dir *d)
{
	int r;

	if (!d->eof || d->head != NULL || d->shut || d->conn->closing)
		return;
	d->shut = 1;
	/* libuv runs the shutdown after the writes already queued. */
	r = uv_shutdown(&d->shutdown_req, d->dst, rl_shutdown_cb);
	if (r < 0)
		rl_conn_close(d->conn, d->dst_name, r);
}

static void
rl_shutdown_cb(uv_shutdown_t *req, int status)
{
	struct rl_dir *d = req->data;
	struct rl_conn *c = d->conn;

	if (c->closing)
		return;
	if (status < 0) {
		rl_conn_close(c, d->dst_name, status);
		return;
	}
	d->done = 1;
	if (c->dir[RL_UP].done && c->dir[RL_DOWN].done)
		rl_conn_close(c, NULL, 0);
}

static void rl_alloc_cb(uv_handle_t *, size_t, uv_buf_t *);
static void rl_read_cb(uv_stream_t *, ssize_t, const uv_buf_t *);

static int
rl_dir_read_start(struct rl_dir *d)
{
	int r;

	r = uv_read_start(d->src, rl_alloc_cb, rl_read_cb);
	if (r < 0) {
		rl_conn_close(d->conn, d->src_name, r);
		return r;
	}
	d->reading = 1;
	return 0;
}

static void
rl_write_cb(uv_write_t *req, int status)
{
	struct rl_chunk *ch = rl_container_of(req, struct rl_chunk, req);
	struct rl_dir *d = req->data;
	struct rl_conn *c = d->conn;

	d->queued -= ch->len;
	free(ch);
	/* Cancelled writes of a closing connection end here too, before the
	 * handle's close callback, so c is still valid. */
	if (c->closing)
		return;
	if (status < 0) {
		rl_conn_close(c, d->dst_name, status);
		return;
	}
	if (!d->reading && !d->eof && d->queued < RL_QUEUE_MAX)
		rl_dir_read_start(d);
}

static int
rl_dir_write(struct rl_dir *d, struct rl_chunk *ch)
{
	uv_buf_t buf = uv_buf_init(ch->data, (unsigned int)ch->len);
	int r;

	ch->req.data = d;
	r = uv_write(&ch->req, d->dst, &buf, 1, rl_write_cb);
	if (r < 0) {
		d->queued -= ch->len;
		free(ch);
		rl_conn_close(d->conn, d->dst_name, r);
	}
	return r;
}

static void
rl_dir_timer_cb(uv_timer_t *t)
{
	struct rl_dir *d = t->data;
	uint64_t now = uv_hrtime();
	struct rl_chunk *ch;

	while ((ch = d->head) != NULL && ch->due <= now) {
		d->head = ch->next;
		if (d->head == NULL)
			d->tail = NULL;
		if (rl_dir_write(d, ch) < 0)
			return;
	}
	if (d->head != NULL)
		rl_dir_arm(d);
	else
		rl_dir_maybe_shutdown(d);
}

static void
rl_alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct rl_dir *d = h->data;
	struct rl_chunk *ch;

	(void)suggested;
	ch = malloc(offsetof(struct rl_chunk, data) + d->read_size);
	buf->base = ch != NULL ? ch->data : NULL;
	buf->len = ch != NULL ? d->read_size : 0;
}

static void
rl_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct rl_dir *d = s->data;
	struct rl_chunk *ch = NULL, *small;
	uint64_t now, start;

	if (buf->base != NULL)
		ch = rl_container_of(buf->base, struct rl_chunk, data);
	if (nread <= 0) {
		free(ch);
		if (nread == UV_EOF) {
			d->eof = 1;
			d->reading = 0;
			rl_dir_maybe_shutdown(d);
		} else if (nread < 0) {
			rl_conn_close(d->conn, d->src_name, (int)nread);
		}
		return;
	}
	/* Keep the memory held close to the bytes counted against
	 * RL_QUEUE_MAX when the peer sends in small pieces. */
	if ((size_t)nread < d->read_size / 2) {
		small = realloc(ch, offsetof(struct rl_chunk, data) +
		    (size_t)nread);
		if (small != NULL)
			ch = small;
	}
	ch->next = NULL;
	ch->len = (size_t)nread;
	d->bytes += ch->len;
	d->queued += ch->len;
	if (d->queued >= RL_QUEUE_MAX) {
		uv_read_stop(d->src);
		d->reading = 0;
	}
	if (d->delay == 0 && d->rate == 0) {
		rl_dir_write(d, ch);
		return;
	}
	now = uv_hrtime();
	ch->due = now;
	if (d->rate > 0) {
		start = d->link_free > now ? d->link_free : now;
		d->link_free = start +
		    (uint64_t)((double)ch->len * 1e9 / d->rate + 0.5);
		ch->due = d->link_free;
	}
	ch->due += d->delay;
	if (d->tail != NULL) {
		d->tail->next = ch;
		d->tail = ch;
	} else {
		d->head = d->tail = ch;
		rl_dir_arm(d);
	}
}

static void
rl_handle_closed(uv_handle_t *h)
{
	struct rl_dir *d = h->data;
	struct rl_conn *c = d->conn;

	if (--c->open_handles == 0)
		free(c);
}

/* err < 0: what failed, on which side; err == 0: both directions ended. */
static void
rl_conn_close(struct rl_conn *c, const char *side, int err)
{
	struct rl_relay *rl = c->relay;
	struct rl_chunk *ch;
	int i;

	if (c->closing)
		return;
	c->closing = 1;
	if (!rl->quiet) {
		char why[128];

		if (err < 0)
			snprintf(why, sizeof(why), "%s: %s", side,
			    uv_strerror(err));
		else
			snprintf(why, sizeof(why), "%s",
			    side != NULL ? side : "done");
		rl_log("#%llu close (%s) after %.3f s, %llu B up, %llu B down",
		    (unsigned long long)c->id, why,
		    (double)(uv_hrtime() - c->opened) * 1e-9,
		    (unsigned long long)c->dir[RL_UP].bytes,
		    (unsigned long long)c->dir[RL_DOWN].bytes);
	}
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		rl->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	for (i = 0; i < 2; i++) {
		while ((ch = c->dir[i].head) != NULL) {
			c->dir[i].head = ch->next;
			free(ch);
		}
		c->dir[i].tail = NULL;
		uv_close((uv_handle_t *)&c->dir[i].timer, rl_handle_closed);
	}
	uv_close((uv_handle_t *)&c->client, rl_handle_closed);
	uv_close((uv_handle_t *)&c->target, rl_handle_closed);
}

static void
rl_connect_cb(uv_connect_t *req, int status)
{
	struct rl_conn *c = req->data;

	if (c->closing)
		return;
	if (status < 0) {
		char side[RL_ADDR_MAX + 16];

		snprintf(side, sizeof(side), "connect to %s",
		    c->relay->target_name);
		rl_conn_close(c, side, status);
		return;
	}
	uv_tcp_nodelay(&c->target, 1);
	if (rl_dir_read_start(&c->dir[RL_UP]) == 0)
		rl_dir_read_start(&c->dir[RL_DOWN]);
}

static void
rl_dir_init(struct rl_dir *d, struct rl_conn *c, int which)
{
	struct rl_relay *rl = c->relay;
	double slice;

	d->conn = c;
	d->src_name = which == RL_UP ? "client" : "target";
	d->dst_name = which == RL_UP ? "target" : "client";
	d->src = (uv_stream_t *)(which == RL_UP ? &c->client : &c->target);
	d->dst = (uv_stream_t *)(which == RL_UP ? &c->target : &c->client);
	d->delay = (uint64_t)(rl->delay_ms[which] * 1e6 + 0.5);
	d->rate = rl->rate[which];
	d->read_size = RL_READ_MAX;
	if (d->rate > 0) {
		slice = d->rate / 1000;
		d->read_size = slice < RL_READ_MIN ? RL_READ_MIN :
		    slice > RL_READ_MAX ? RL_READ_MAX : (size_t)slice;
	}
	d->shutdown_req.data = d;
	uv_timer_init(&rl->loop, &d->timer);
	d->timer.data = d;
	d->src->data = d;
}

static void
rl_connection_cb(uv_stream_t *server, int status)
{
	struct rl_relay *rl = server->data;
	struct sockaddr_storage ss;
	int len = sizeof(ss), r;
	struct rl_conn *c;

	if (status < 0) {
		rl_log("accept: %s", uv_strerror(status));
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		/* Without a handle the pending connection cannot even be
		 * refused, and libuv stops accepting until it is. */
		rl_log("out of memory, stopping");
		rl->exit_code = 1;
		rl_relay_stop(rl);
		return;
	}
	c->relay = rl;
	c->id = ++rl->next_id;
	c->opened = uv_hrtime();
	uv_tcp_init(&rl->loop, &c->client);
	uv_tcp_init(&rl->loop, &c->target);
	rl_dir_init(&c->dir[RL_UP], c, RL_UP);
	rl_dir_init(&c->dir[RL_DOWN], c, RL_DOWN);
	c->open_handles = 4;
	c->next = rl->conns;
	if (rl->conns != NULL)
		rl->conns->prev = c;
	rl->conns = c;

	r = uv_accept(server, (uv_stream_t *)&c->client);
	if (r < 0) {
		rl_conn_close(c, "accept", r);
		return;
	}
	snprintf(c->peer, sizeof(c->peer), "?");
	if (uv_tcp_getpeername(&c->client, (struct sockaddr *)&ss, &len) == 0)
		rl_addr_name((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
	if (!rl->quiet)
		rl_log("#%llu open from %s", (unsigned long long)c->id,
		    c->peer);
	uv_tcp_nodelay(&c->client, 1);
	c->connect_req.data = c;
	r = uv_tcp_connect(&c->connect_req, &c->target,
	    (const struct sockaddr *)&rl->target, rl_connect_cb);
	if (r < 0) {
		char side[RL_ADDR_MAX + 16];

		snprintf(side, sizeof(side), "connect to %s", rl->target_name);
		rl_conn_close(c, side, r);
	}
}

static void
rl_relay_stop(struct rl_relay *rl)
{
	if (rl->stopping)
		return;
	rl->stopping = 1;
	uv_close((uv_handle_t *)&rl->listener, NULL);
	uv_close((uv_handle_t *)&rl->sigint, NULL);
	uv_close((uv_handle_t *)&rl->sigterm, NULL);
	while (rl->conns != NULL)
		rl_conn_close(rl->conns, "stopping", 0);
}

static void
rl_signal_cb(uv_signal_t *s, int signum)
{
	(void)signum;
	rl_relay_stop(s->data);
}

static void
rl_usage(FILE *f)
{
	fprintf(f,
	    "usage: wan-relay [-q] [-d delay_ms] [-D reverse_delay_ms] "
	    "[-r rate] [-R reverse_rate]\n"
	    "                 listen_host:port target_host:port\n");
}

static void
rl_help(void)
{
	rl_usage(stdout);
	printf("\n"
	    "Relays each TCP connection made to listen_host:port to\n"
	    "target_host:port, delaying and rate-limiting each direction.\n"
	    "\n"
	    "  -d ms    one-way delay client->target, fractional ms allowed "
	    "(default 0)\n"
	    "  -D ms    one-way delay target->client (default: -d)\n"
	    "  -r B/s   bandwidth client->target in bytes/s, 0 = unlimited "
	    "(default 0)\n"
	    "  -R B/s   bandwidth target->client (default: -r)\n"
	    "  -q       no line per connection\n"
	    "  -h       this help\n"
	    "\n"
	    "Bytes read at t are written at the earliest at t + delay; with\n"
	    "a rate they queue for an emulated link of that bandwidth first.\n"
	    "At most %zu MiB wait per direction before the sender is no longer\n"
	    "read.  SIGINT and SIGTERM close everything and exit 0.\n",
	    RL_QUEUE_MAX >> 20);
}

static int
rl_parse_number(const char *s, double max, double *out)
{
	char *end;
	double v;

	if (*s == '\0')
		return -1;
	v = strtod(s, &end);
	if (*end != '\0' || !(v >= 0 && v <= max))
		return -1;
	*out = v;
	return 0;
}

/* host:port or [v6host]:port, resolved now: the loop has nothing else to do
 * yet, and a bad name should fail at start-up, not on the first client. */
static int
rl_parse_addr(uv_loop_t *loop, const char *arg, int passive,
    struct sockaddr_storage *out, const char **why)
{
	char host[256], *colon, *h, *end;
	struct addrinfo hints, *ai;
	uv_getaddrinfo_t req;
	long port;
	size_t n;
	int r;

	*why = "want host:port";
	n = strlen(arg);
	if (n >= sizeof(host))
		return -1;
	memcpy(host, arg, n + 1);
	colon = strrchr(host, ':');
	if (colon == NULL || colon == host || colon[1] == '\0')
		return -1;
	*colon = '\0';
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < (passive ? 0 : 1) || port > 65535) {
		*why = "bad port";
		return -1;
	}
	h = host;
	if (h[0] == '[') {
		n = strlen(h);
		if (n < 3 || h[n - 1] != ']')
			return -1;
		h[n - 1] = '\0';
		h++;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	r = uv_getaddrinfo(loop, &req, NULL, h, colon + 1, &hints);
	if (r < 0) {
		*why = uv_strerror(r);
		return -1;
	}
	ai = req.addrinfo;
	memset(out, 0, sizeof(*out));
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	uv_freeaddrinfo(ai);
	return 0;
}

static void
rl_rate_name(double rate, char *out, size_t size)
{
	if (rate > 0)
		snprintf(out, size, "%.15g B/s", rate);
	else
		snprintf(out, size, "unlimited");
}

/* -d/-D (delay) or -r/-R (rate) of one direction; 0, or 2 after the
 * message for a bad value. */
static int
rl_parse_link_option(struct rl_relay *rl, int ch, const char *arg)
{
	int dir = ch == 'd' || ch == 'r' ? RL_UP : RL_DOWN;

	if ((ch == 'd' || ch == 'D') &&
	    rl_parse_number(arg, RL_DELAY_MAX_MS, &rl->delay_ms[dir]) < 0) {
		fprintf(stderr, "wan-relay: bad -%c '%s': want "
		    "milliseconds from 0 to %.0f\n", ch, arg,
		    RL_DELAY_MAX_MS);
		return 2;
	}
	if ((ch == 'r' || ch == 'R') &&
	    rl_parse_number(arg, RL_RATE_MAX, &rl->rate[dir]) < 0) {
		fprintf(stderr, "wan-relay: bad -%c '%s': want "
		    "bytes per second, 0 for unlimited\n", ch, arg);
		return 2;
	}
	return 0;
}

/* Options into rl, the reverse direction defaulting to the forward one;
 * -1 to go on with the two addresses at argv[optind], else the exit
 * status: 0 after -h, 2 for a bad command line. */
static int
rl_parse_options(struct rl_relay *rl, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, have_D = 0, have_R = 0;

	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":d:D:r:R:qh", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'd': case 'D': case 'r': case 'R':
			if (rl_parse_link_option(rl, ch, optarg) != 0)
				return 2;
			have_D |= ch == 'D';
			have_R |= ch == 'R';
			break;
		case 'q':
			rl->quiet = 1;
			break;
		case 'h':
			rl_help();
			return 0;
		case ':':
			fprintf(stderr, "wan-relay: -%c needs a value "
			    "(wan-relay -h for help)\n", optopt);
			return 2;
		default:
			if (optopt != 0)
				fprintf(stderr, "wan-relay: unknown option -%c "
				    "(wan-relay -h for help)\n", optopt);
			else
				fprintf(stderr, "wan-relay: unknown option %s "
				    "(wan-relay -h for help)\n",
				    argv[optind - 1]);
			return 2;
		}
	}
	if (argc - optind != 2) {
		fprintf(stderr, "wan-relay: want LISTEN_HOST:PORT and "
		    "TARGET_HOST:PORT (wan-relay -h for help)\n");
		return 2;
	}
	if (!have_D)
		rl->delay_ms[RL_DOWN] = rl->delay_ms[RL_UP];
	if (!have_R)
		rl->rate[RL_DOWN] = rl->rate[RL_UP];
	return -1;
}

/* The loop, and both addresses resolved on it; -1 to go on, else the
 * exit status (the loop is closed again then). */
static int
rl_open(struct rl_relay *rl, const char *listen_arg, const char *target_arg,
    struct sockaddr_storage *listen_addr)
{
	const char *why;
	int r;

	r = uv_loop_init(&rl->loop);
	if (r < 0) {
		fprintf(stderr, "wan-relay: loop: %s\n", uv_strerror(r));
		return 1;
	}
	if (rl_parse_addr(&rl->loop, listen_arg, 1, listen_addr, &why) < 0) {
		fprintf(stderr, "wan-relay: bad listen address '%s': %s\n",
		    listen_arg, why);
		uv_loop_close(&rl->loop);
		return 2;
	}
	if (rl_parse_addr(&rl->loop, target_arg, 0, &rl->target, &why) < 0) {
		fprintf(stderr, "wan-relay: bad target address '%s': %s\n",
		    target_arg, why);
		uv_loop_close(&rl->loop);
		return 2;
	}
	rl_addr_name((struct sockaddr *)&rl->target, rl->target_name,
	    sizeof(rl->target_name));
	return -1;
}

/* Binds and listens; on failure the loop is closed and 1 returned. */
static int
rl_listen(struct rl_relay *rl, const struct sockaddr_storage *listen_addr)
{
	struct sockaddr_storage bound;
	int len, r;

	uv_tcp_init(&rl->loop, &rl->listener);
	rl->listener.data = rl;
	r = uv_tcp_bind(&rl->listener, (const struct sockaddr *)listen_addr,
	    0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&rl->listener, 128,
		    rl_connection_cb);
	if (r < 0) {
		rl_addr_name((const struct sockaddr *)listen_addr,
		    rl->listen_name, sizeof(rl->listen_name));
		fprintf(stderr, "wan-relay: listen on %s: %s\n",
		    rl->listen_name, uv_strerror(r));
		uv_close((uv_handle_t *)&rl->listener, NULL);
		uv_run(&rl->loop, UV_RUN_DEFAULT);
		uv_loop_close(&rl->loop);
		return 1;
	}
	/* The bound address, so that port 0 tells the caller its port. */
	len = sizeof(bound);
	if (uv_tcp_getsockname(&rl->listener, (struct sockaddr *)&bound,
	    &len) < 0)
		memcpy(&bound, listen_addr, sizeof(bound));
	rl_addr_name((struct sockaddr *)&bound, rl->listen_name,
	    sizeof(rl->listen_name));
	return 0;
}

/* Until SIGINT or SIGTERM; returns the exit status. */
static int
rl_run(struct rl_relay *rl)
{
	char rate_up[32], rate_down[32];
	int r;

	uv_signal_init(&rl->loop, &rl->sigint);
	uv_signal_init(&rl->loop, &rl->sigterm);
	rl->sigint.data = rl->sigterm.data = rl;
	uv_signal_start(&rl->sigint, rl_signal_cb, SIGINT);
	uv_signal_start(&rl->sigterm, rl_signal_cb, SIGTERM);

	rl_rate_name(rl->rate[RL_UP], rate_up, sizeof(rate_up));
	rl_rate_name(rl->rate[RL_DOWN], rate_down, sizeof(rate_down));
	rl_log("%s -> %s, delay %g ms / %g ms, rate %s / %s", rl->listen_name,
	    rl->target_name, rl->delay_ms[RL_UP], rl->delay_ms[RL_DOWN],
	    rate_up, rate_down);

	uv_run(&rl->loop, UV_RUN_DEFAULT);
	r = uv_loop_close(&rl->loop);
	if (r < 0)
		rl_log("loop close: %s", uv_strerror(r));
	return rl->exit_code;
}

int
main(int argc, char **argv)
{
	struct rl_relay rl;
	struct sockaddr_storage listen_addr;
	int r;

	memset(&rl, 0, sizeof(rl));
	if ((r = rl_parse_options(&rl, argc, argv)) >= 0)
		return r;
	if ((r = rl_open(&rl, argv[optind], argv[optind + 1],
	    &listen_addr)) >= 0)
		return r;
	/* A peer that resets while we write must cost one connection, not
	 * the process. */
	signal(SIGPIPE, SIG_IGN);
	if (rl_listen(&rl, &listen_addr) != 0)
		return 1;
	return rl_run(&rl);
}
