/* The HTTP server and client on one real loop over 127.0.0.1: round trips
 * through hc_ against hs_, raw sockets for what a well-behaved client
 * never sends, the limits and timeouts of both, answers given later
 * (whole and streamed, in order with what was pipelined, and their
 * owner told when the connection goes), and connections another module
 * reads (links). */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <uv.h>

#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/identity.h"
#include "daemon/net/tls.h"
#include "tests/testutil.h"

#define RAW_CAP (1 << 20)

struct exchange {
	char peer[64];
	int kind, who;
	size_t in, out;
};

struct reply {
	int done;
	long status;
	char error[HC_ERR_LEN];
	int has_error;
	int code;               /* hc_result.code */
	char *body;
	size_t body_len;
	char etag[64];
	size_t in, out;
	double total_s;
	int seq;
};

static uv_loop_t loop;
static uv_timer_t tick;
static hs_server *srv;
static hc_client *cli;
static int port;
static struct exchange ex[64];
static int nex;
static int srv_closed, cli_closed, seq, closed_seq;
static int hdr_bad_name, hdr_own, hdr_crlf, bad_status;
static char raw[RAW_CAP];

/* The "tls" case runs the same tests over mutual TLS: the server and the
 * client with identities of their own, the raw sockets through a TLS
 * engine of the test's. */
#define RAW_MAX_FD 4096
static int use_tls;
static char tls_dir[64];
static tls_ctx *srv_tls, *cli_tls;
static uint8_t srv_id[ID_BYTES], cli_id[ID_BYTES];
static tls_conn *raw_tls[RAW_MAX_FD];

static const char *
scheme(void)
{
	return use_tls ? "https" : "http";
}

static const uint8_t *
pin(void)
{
	return use_tls ? srv_id : NULL;
}

/* ---- the server side of the tests ---- */

static void
on_exchange(void *ctx, const char *peer, hs_meter m, size_t in,
    size_t out)
{
	(void)ctx;
	if (nex < (int)(sizeof(ex) / sizeof(ex[0]))) {
		snprintf(ex[nex].peer, sizeof(ex[nex].peer), "%s", peer);
		ex[nex].kind = m.kind;
		ex[nex].who = m.who;
		ex[nex].in = in;
		ex[nex].out = out;
	}
	nex++;
}

static void
set_flag(void *arg)
{
	*(int *)arg = ++seq;
}

/* The answer /later and /stream deferred (one at a time), and how many
 * times an owner was told its connection went. */
static hs_deferred *later;
static int deferred_n, gone_n;

static void
on_gone(void *arg)
{
	ck_assert_ptr_eq(arg, &later);
	later = NULL;
	gone_n++;
}

/* What /shared serves: generation g of SHARED_LEN bytes, (g + 13 i) each */
#define SHARED_LEN (3 * 1024 * 1024 + 5)
static hs_shared *shared_body;
static int shared_gen;

static hs_shared *
shared_make(int g)
{
	char *buf = malloc(SHARED_LEN);
	size_t i;

	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < SHARED_LEN; i++)
		buf[i] = (char)(g + 13 * i);
	return hs_shared_new(buf, SHARED_LEN);
}

static void
handler(void *ctx, const hs_request *req, hs_response *res)
{
	char text[512];

	(void)ctx;
	if (strcmp(req->path, "/hello") == 0) {
		const char *inm = hs_request_header(req, "if-none-match");

		hs_response_header(res, "ETag", "\"v1\"");
		hs_response_meter(res, 1, 7);
		if (inm != NULL && strcmp(inm, "\"v1\"") == 0) {
			hs_response_status(res, 304);
			return;
		}
		hs_response_status(res, 200);
		hs_response_body(res, "text/plain", "hello world", 11);
	} else if (strcmp(req->path, "/echo") == 0) {
		const char *ct = hs_request_header(req, "Content-Type");
		size_t n;
		char *body = hs_request_take_body(req, &n);

		hs_response_status(res, 200);
		hs_response_header(res, "X-Method", req->method);
		hs_response_body_owned(res,
		    ct ? ct : "application/octet-stream", body, n);
		hs_response_meter(res, 2, -1);
	} else if (strcmp(req->path, "/big") == 0) {
		size_t n = strtoul(req->query + 2, NULL, 10);
		char *body = malloc(n);

		memset(body, 'x', n);
		hs_response_status(res, 200);
		hs_response_body_owned(res, "application/octet-stream", body,
		    n);
	} else if (strcmp(req->path, "/shared") == 0) {
		/* served without a copy, then replaced at once as a newer
		 * checkpoint replaces the one peers are downloading */
		hs_response_status(res, 200);
		hs_response_body_shared(res, "application/octet-stream",
		    shared_body);
		hs_shared_unref(shared_body);
		shared_body = shared_make(++shared_gen);
	} else if (strcmp(req->path, "/info") == 0) {
		snprintf(text, sizeof(text), "%s %s %s", req->method, req->path,
		    req->query);
		hs_response_status(res, 200);
		hs_response_body(res, "text/plain", text, strlen(text));
	} else if (strcmp(req->path, "/headers") == 0) {
		hdr_bad_name = hs_response_header(res, "Bad Name", "x");
		hdr_own = hs_response_header(res, "content-length", "3");
		hdr_crlf = hs_response_header(res, "X-Evil", "a\r\nB: c");
		bad_status = hs_response_status(res, 999);
		hs_response_header(res, "X-Test", "yes");
		hs_response_status(res, 201);
		hs_response_body(res, NULL, "ok", 2);
	} else if (strcmp(req->path, "/later") == 0) {
		/* what is set before the defer is kept */
		hs_response_header(res, "X-Early", "1");
		ck_assert_ptr_null(later);
		later = hs_response_defer(res, on_gone, &later);
		ck_assert_ptr_nonnull(later);
		deferred_n++;
	} else if (strcmp(req->path, "/whose") == 0) {
		hs_response_status(res, 200);
		hs_response_body(res, "text/plain", req->link_arg != NULL ?
		    "link" : "socket", req->link_arg != NULL ? 4 : 6);
	} else if (strcmp(req->path, "/nostatus") == 0) {
		/* nothing: the server answers 500 */
	} else if (strcmp(req->path, "/close-server") == 0) {
		hs_server_close(srv, set_flag, &srv_closed);
		srv = NULL;
		hs_response_status(res, 200);
	} else {
		snprintf(text, sizeof(text), "no such thing: %s", req->path);
		hs_response_status(res, 404);
		hs_response_body(res, "text/plain", text, strlen(text));
	}
}

static void
server_start(const hs_config *cfg)
{
	hs_config c;
	char err[HS_ERR_LEN];

	if (cfg != NULL)
		c = *cfg;
	else
		memset(&c, 0, sizeof(c));
	c.on_exchange = on_exchange;
	c.tls = use_tls ? srv_tls : NULL;
	ck_assert_int_eq(hs_server_new(&srv, &loop, &c, handler, NULL, err),
	    0);
	ck_assert_msg(hs_server_listen(srv, "127.0.0.1", 0, err) == 0, "%s",
	    err);
	port = hs_server_port(srv);
	ck_assert_int_gt(port, 0);
}

static void
on_tick(uv_timer_t *t)
{
	(void)t;
}

static void
setup(void)
{
	char err[HC_ERR_LEN];

	ck_assert_int_eq(uv_loop_init(&loop), 0);
	uv_timer_init(&loop, &tick);
	srv = NULL;
	nex = 0;
	srv_closed = cli_closed = seq = closed_seq = 0;
	ck_assert_msg(hc_client_new(&cli, &loop, err) == 0, "%s", err);
	if (use_tls)
		hc_client_set_tls(cli, cli_tls);
}

static int
allow_client(void *arg, const uint8_t id[ID_BYTES])
{
	(void)arg;
	return id_equal(id, cli_id);
}

static void
identity(const char *name, uint8_t id[ID_BYTES], tls_ctx **ctx)
{
	char path[128], err[KN_ERR_LEN], text[ID_LEN];

	snprintf(path, sizeof(path), "%s/%s", tls_dir, name);
	ck_assert_int_eq(id_create(path, 0, err), 0);
	ck_assert_int_eq(id_of_dir(path, text, err), 0);
	ck_assert_int_eq(id_parse(text, id, err), 0);
	ck_assert_int_eq(tls_ctx_new(ctx, path, err), 0);
	tls_ctx_set_allow(*ctx, allow_client, NULL);
}

static void
setup_tls(void)
{
	use_tls = 1;
	tu_temp_dir(tls_dir, sizeof(tls_dir), "check_http");
	identity("server", srv_id, &srv_tls);
	identity("client", cli_id, &cli_tls);
	setup();
}

/* Runs the loop until *count reaches want or ms pass. */
static int
run_until_n(int *count, int want, int ms)
{
	uint64_t end;

	uv_update_time(&loop);
	end = uv_now(&loop) + (uint64_t)ms;
	uv_timer_start(&tick, on_tick, 5, 5);
	while (*count < want && uv_now(&loop) < end)
		uv_run(&loop, UV_RUN_ONCE);
	uv_timer_stop(&tick);
	return *count >= want;
}

/* Runs the loop until *flag is set or ms pass; returns *flag. */
static int
run_until(int *flag, int ms)
{
	run_until_n(flag, 1, ms);
	return *flag;
}

static void
teardown(void)
{
	if (cli != NULL)
		hc_client_close(cli, set_flag, &cli_closed);
	else
		cli_closed = 1;
	if (srv != NULL)
		hs_server_close(srv, set_flag, &srv_closed);
	else
		srv_closed = 1;
	cli = NULL;
	srv = NULL;
	ck_assert(run_until(&cli_closed, 5000));
	ck_assert(run_until(&srv_closed, 5000));
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	/* every handle of both modules is closed */
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	if (use_tls) {
		tls_ctx_free(srv_tls);
		tls_ctx_free(cli_tls);
		tu_remove_dir(tls_dir);
	}
}

/* ---- the client side ---- */

static void
on_done(void *ctx, hc_result *r)
{
	struct reply *p = ctx;

	p->done = 1;
	p->seq = ++seq;
	p->status = r->status;
	p->has_error = r->error != NULL;
	p->code = r->code;
	snprintf(p->error, sizeof(p->error), "%s", r->error ? r->error : "");
	p->body_len = r->body_len;
	p->body = hc_result_take_body(r);
	snprintf(p->etag, sizeof(p->etag), "%s", r->etag ? r->etag : "");
	p->in = r->bytes_in;
	p->out = r->bytes_out;
	p->total_s = r->total_s;
}

static void
request(struct reply *p, const char *method, const char *path,
    const void *body, size_t len, const hc_request_opts *base)
{
	hc_request_opts o;
	char url[256], err[HC_ERR_LEN];

	if (base != NULL)
		o = *base;
	else
		memset(&o, 0, sizeof(o));
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d%s", scheme(), port, path);
	o.method = method;
	o.url = url;
	o.pin = pin();
	o.body = body;
	o.body_len = len;
	memset(p, 0, sizeof(*p));
	ck_assert_msg(hc_request(cli, &o, on_done, p, err) == 0, "%s", err);
}

static void
fetch(struct reply *p, const char *method, const char *path,
    const void *body, size_t len, const hc_request_opts *base)
{
	request(p, method, path, body, len, base);
	ck_assert_msg(run_until(&p->done, 5000), "no answer to %s", path);
}

/* ---- raw sockets ---- */

static void pump(int fd, int ms);

/* Sends what the engine of fd has queued. */
static void
raw_flush(int fd)
{
	size_t len, off = 0;
	char *buf = tls_conn_take(raw_tls[fd], &len);

	while (off < len) {
		ssize_t w = send(fd, buf + off, len - off, MSG_NOSIGNAL);

		if (w > 0)
			off += (size_t)w;
		else if (w < 0 && errno == EAGAIN)
			pump(fd, 1);
		else
			break;  /* the server closed: reading will tell */
	}
	tls_buf_free(buf);
}

/* Ciphertext that arrived for fd into its engine: recv's result. */
static ssize_t
raw_recv_tls(int fd)
{
	char buf[16384];
	ssize_t r = recv(fd, buf, sizeof(buf), 0);

	if (r > 0)
		ck_assert_int_eq(tls_conn_feed(raw_tls[fd], buf, (size_t)r), 0);
	return r;
}

static void
raw_handshake(int fd)
{
	char err[KN_ERR_LEN];
	uint64_t end;

	ck_assert_int_lt(fd, RAW_MAX_FD);
	ck_assert_int_eq(tls_conn_new(&raw_tls[fd], cli_tls, 0, srv_id, err),
	    0);
	ck_assert_int_eq(tls_conn_start(raw_tls[fd]), 0);
	raw_flush(fd);
	uv_update_time(&loop);
	end = uv_now(&loop) + 3000;
	/* a server that refuses closes before the end: raw_read sees it */
	while (!tls_conn_established(raw_tls[fd]) && uv_now(&loop) < end) {
		ssize_t r = raw_recv_tls(fd);

		if (r == 0 || (r < 0 && errno != EAGAIN))
			break;
		if (r < 0)
			pump(fd, 1);
		if (tls_conn_start(raw_tls[fd]) != 0)
			break;
		raw_flush(fd);
		uv_update_time(&loop);
	}
}

static void
raw_close(int fd)
{
	if (fd >= 0 && fd < RAW_MAX_FD) {
		tls_conn_free(raw_tls[fd]);
		raw_tls[fd] = NULL;
	}
	close(fd);
}

static int
raw_connect_to(int to_port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)to_port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	if (use_tls)
		raw_handshake(fd);
	return fd;
}

static int
raw_connect(void)
{
	return raw_connect_to(port);
}

static void
pump(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	uv_run(&loop, UV_RUN_NOWAIT);
	poll(&p, 1, ms);
}

static void
raw_send(int fd, const void *data, size_t n)
{
	const char *d = data;

	if (use_tls) {
		ck_assert_int_eq(tls_conn_write(raw_tls[fd], data, n), 0);
		raw_flush(fd);
		return;
	}
	while (n > 0) {
		ssize_t w = send(fd, d, n, MSG_NOSIGNAL);

		if (w > 0) {
			d += w;
			n -= (size_t)w;
		} else if (w < 0 && errno == EAGAIN)
			pump(fd, 1);
		else
			ck_abort_msg("send: %s", strerror(errno));
	}
}

/* How many whole responses buf holds (by Content-Length; a 100 Continue
 * counts as none). */
static int
responses_in(const char *buf, size_t len)
{
	int n = 0;

	while (len > 0) {
		const char *end = memmem(buf, len, "\r\n\r\n", 4);
		const char *cl;
		size_t head, body = 0;

		if (end == NULL)
			break;
		head = (size_t)(end - buf) + 4;
		cl = memmem(buf, head, "Content-Length: ", 16);
		if (cl != NULL)
			body = strtoul(cl + 16, NULL, 10);
		if (head + body > len)
			break;
		if (strncmp(buf, "HTTP/1.1 100", 12) != 0)
			n++;
		buf += head + body;
		len -= head + body;
	}
	return n;
}

/* Reads into raw[] until EOF (or a reset), until `want` whole responses
 * are there (want > 0), or until ms pass.  Returns the bytes read. */
static size_t
raw_read(int fd, int ms, int *eof, int want)
{
	size_t len = 0;
	uint64_t end;

	*eof = 0;
	uv_update_time(&loop);
	end = uv_now(&loop) + (uint64_t)ms;
	while (uv_now(&loop) < end) {
		ssize_t r;

		if (use_tls) {
			ssize_t c = raw_recv_tls(fd), got;
			int closed = c == 0 || (c < 0 && errno != EAGAIN &&
			    errno != EINTR);

			/* every record the engine holds, then the verdict */
			while ((got = tls_conn_read(raw_tls[fd], raw + len,
			    RAW_CAP - 1 - len)) > 0)
				len += (size_t)got;
			raw[len] = '\0';
			raw_flush(fd);
			if (want > 0 && responses_in(raw, len) >= want)
				break;
			if (closed || got < 0) {
				*eof = 1;
				break;
			}
			if (c < 0) {
				pump(fd, 1);
				uv_update_time(&loop);
			}
			continue;
		} else
			r = recv(fd, raw + len, RAW_CAP - 1 - len, 0);

		if (r > 0) {
			len += (size_t)r;
			raw[len] = '\0';
			if (want > 0 && responses_in(raw, len) >= want)
				break;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
			*eof = 1;
			break;
		}
		pump(fd, 1);
		uv_update_time(&loop);
	}
	raw[len] = '\0';
	return len;
}

static double
now_s(void)
{
	return (double)uv_hrtime() / 1e9;
}

/* A socket that listens and never accepts: connections complete in the
 * kernel and then nothing is ever said. */
static int
silent_listener(int *out_port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	*out_port = ntohs(a.sin_port);
	return fd;
}

static void
later_reset(void)
{
	deferred_n = gone_n = 0;
	later = NULL;
}

/* Runs the loop until /later has deferred n answers in all. */
static void
wait_deferred(int n)
{
	ck_assert(run_until_n(&deferred_n, n, 3000));
	ck_assert_ptr_nonnull(later);
}

/* A connection that sent req, once /later has deferred n answers. */
static int
later_open(const char *req, int n)
{
	int fd = raw_connect();

	raw_send(fd, req, strlen(req));
	wait_deferred(n);
	return fd;
}

/* Sends the deferred answer whole: 200 and body. */
static void
later_finish(const char *body)
{
	hs_deferred *d = later;
	hs_response *res = hs_deferred_response(d);

	later = NULL;
	hs_response_status(res, 200);
	hs_response_header(res, "X-Late", "2");
	hs_response_meter(res, 5, 9);
	hs_response_body(res, "text/plain", body, strlen(body));
	hs_deferred_finish(d);
}

/* ---- the tests ---- */

START_TEST(test_get_post)
{
	struct reply r;
	size_t n = 300 * 1000, i;
	char *body = malloc(n);

	server_start(NULL);
	fetch(&r, "GET", "/hello", NULL, 0, NULL);
	ck_assert_str_eq(r.error, "");
	ck_assert_int_eq(r.code, 0);
	ck_assert_int_eq(r.status, 200);
	ck_assert_uint_eq(r.body_len, 11);
	ck_assert_str_eq(r.body, "hello world");
	ck_assert_str_eq(r.etag, "\"v1\"");
	ck_assert_int_eq(nex, 1);
	ck_assert_int_eq(ex[0].kind, 1);
	ck_assert_int_eq(ex[0].who, 7);
	/* both ends count the same bytes */
	ck_assert_uint_eq(r.out, ex[0].in);
	ck_assert_uint_eq(r.in, ex[0].out);
	free(r.body);

	for (i = 0; i < n; i++)
		body[i] = (char)(i * 7 + 3);
	fetch(&r, "POST", "/echo", body, n, &(hc_request_opts){
	    .content_type = "application/x-msgpack" });
	ck_assert_str_eq(r.error, "");
	ck_assert_int_eq(r.status, 200);
	ck_assert_uint_eq(r.body_len, n);
	ck_assert_int_eq(memcmp(r.body, body, n), 0);
	ck_assert_int_eq(nex, 2);
	ck_assert_int_eq(ex[1].kind, 2);
	ck_assert_uint_eq(r.out, ex[1].in);
	ck_assert_uint_eq(r.in, ex[1].out);
	ck_assert_uint_gt(r.out, n);
	free(r.body);

	fetch(&r, "PUT", "/echo", "put body", 8, NULL);
	ck_assert_int_eq(r.status, 200);
	ck_assert_str_eq(r.body, "put body");
	free(r.body);

	fetch(&r, "POST", "/echo", NULL, 0, NULL);
	ck_assert_int_eq(r.status, 200);
	ck_assert_uint_eq(r.body_len, 0);
	ck_assert_ptr_null(r.body);

	fetch(&r, "GET", "/info?a=1&b=%20", NULL, 0, NULL);
	ck_assert_str_eq(r.body, "GET /info a=1&b=%20");
	free(r.body);
	free(body);
}
END_TEST

static struct reply second;

static void
on_first_then_second(void *ctx, hc_result *r)
{
	on_done(ctx, r);
	request(&second, "GET", "/hello", NULL, 0, NULL);
}

START_TEST(test_keepalive)
{
	struct reply first;
	hc_request_opts o;
	char url[128], err[HC_ERR_LEN];

	server_start(NULL);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d/hello", scheme(), port);
	memset(&o, 0, sizeof(o));
	o.url = url;
	o.pin = pin();
	memset(&first, 0, sizeof(first));
	ck_assert_int_eq(hc_request(cli, &o, on_first_then_second, &first,
	    err), 0);
	ck_assert(run_until(&second.done, 5000));
	ck_assert_int_eq(first.status, 200);
	ck_assert_int_eq(second.status, 200);
	free(first.body);
	free(second.body);
	ck_assert_uint_eq(hs_server_accepted(srv), 1);
	ck_assert_int_eq(nex, 2);
	ck_assert_str_eq(ex[0].peer, ex[1].peer);
	ck_assert_int_eq(strncmp(ex[0].peer, "127.0.0.1:", 10), 0);
}
END_TEST

/* A daemon asks each of its peers in turn (status probes, one at a time):
 * every peer's connection is kept for the next turn, however many peers.
 * curl's own default kept about four connections between transfers. */
#define NPEERS 8

START_TEST(test_keepalive_many_servers)
{
	hs_server *peer[NPEERS];
	int closed[NPEERS], i, turn;
	hs_config c;
	char err[HS_ERR_LEN];

	memset(&c, 0, sizeof(c));
	c.tls = use_tls ? srv_tls : NULL;
	for (i = 0; i < NPEERS; i++) {
		ck_assert_int_eq(hs_server_new(&peer[i], &loop, &c, handler,
		    NULL, err), 0);
		ck_assert_msg(hs_server_listen(peer[i], "127.0.0.1", 0, err) ==
		    0, "%s", err);
	}
	for (turn = 0; turn < 3; turn++)
		for (i = 0; i < NPEERS; i++) {
			struct reply r;

			port = hs_server_port(peer[i]);
			fetch(&r, "GET", "/hello", NULL, 0, NULL);
			ck_assert_int_eq(r.status, 200);
			free(r.body);
		}
	for (i = 0; i < NPEERS; i++) {
		ck_assert_uint_eq(hs_server_accepted(peer[i]), 1);
		closed[i] = 0;
		hs_server_close(peer[i], set_flag, &closed[i]);
	}
	for (i = 0; i < NPEERS; i++)
		ck_assert(run_until(&closed[i], 5000));
}
END_TEST

#define NCONC 40

static struct reply conc[NCONC];
static int conc_done;

static void
on_conc_done(void *ctx, hc_result *r)
{
	on_done(ctx, r);
	conc_done++;
}

/* Many requests at once on one loop, each answered with its own body. */
START_TEST(test_concurrent)
{
	char bodies[NCONC][32], url[128], err[HC_ERR_LEN];
	hc_request_opts o;
	int i;

	/* all from one address and one identity: allowed that many */
	server_start(&(hs_config){ .max_connections_per_addr = NCONC,
	    .max_connections_per_client = NCONC });
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d/echo", scheme(), port);
	conc_done = 0;
	for (i = 0; i < NCONC; i++) {
		memset(&o, 0, sizeof(o));
		snprintf(bodies[i], sizeof(bodies[i]), "request %d", i);
		o.method = "POST";
		o.url = url;
		o.pin = pin();
		o.body = bodies[i];
		o.body_len = strlen(bodies[i]);
		memset(&conc[i], 0, sizeof(conc[i]));
		ck_assert_int_eq(hc_request(cli, &o, on_conc_done, &conc[i],
		    err), 0);
	}
	ck_assert(run_until_n(&conc_done, NCONC, 10000));
	for (i = 0; i < NCONC; i++) {
		ck_assert_int_eq(conc[i].status, 200);
		ck_assert_str_eq(conc[i].body, bodies[i]);
		free(conc[i].body);
	}
	ck_assert_int_eq(nex, NCONC);
}
END_TEST

/* A body shared by responses in flight outlives its owner's reference:
 * each of several downloads gets its generation whole, though the owner
 * dropped it (and made the next) as soon as the response was queued. */
START_TEST(test_shared_body)
{
	char url[128], err[HC_ERR_LEN];
	hc_request_opts o;
	int i, g;
	size_t j;

	server_start(&(hs_config){ .max_connections_per_addr = 8 });
	shared_gen = 0;
	shared_body = shared_make(0);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d/shared", scheme(),
	    port);
	conc_done = 0;
	for (i = 0; i < 6; i++) {
		memset(&o, 0, sizeof(o));
		o.url = url;
		o.pin = pin();
		memset(&conc[i], 0, sizeof(conc[i]));
		ck_assert_int_eq(hc_request(cli, &o, on_conc_done, &conc[i],
		    err), 0);
	}
	ck_assert(run_until_n(&conc_done, 6, 20000));
	for (i = 0; i < 6; i++) {
		ck_assert_int_eq(conc[i].status, 200);
		ck_assert_uint_eq(conc[i].body_len, SHARED_LEN);
		g = (unsigned char)conc[i].body[0];
		ck_assert_int_lt(g, shared_gen);
		for (j = 0; j < SHARED_LEN; j++)
			if (conc[i].body[j] != (char)(g + 13 * j))
				ck_abort_msg("response %d byte %zu: %d, not "
				    "generation %d's", i, j, conc[i].body[j], g);
		free(conc[i].body);
	}
	ck_assert_int_eq(shared_gen, 6);
	hs_shared_unref(shared_body);
	shared_body = NULL;
}
END_TEST

static struct reply pending_reply;

static void
on_done_then_close(void *ctx, hc_result *r)
{
	on_done(ctx, r);
	hc_client_close(cli, set_flag, &cli_closed);
	cli = NULL;
}

/* Closing the client from a done callback cancels the others. */
START_TEST(test_client_close_from_done)
{
	struct reply r;
	hc_request_opts o;
	char url[128], err[HC_ERR_LEN];
	int lfd, silent_port;

	server_start(NULL);
	lfd = silent_listener(&silent_port);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d/never", scheme(), silent_port);
	memset(&o, 0, sizeof(o));
	o.url = url;
	o.pin = pin();
	memset(&pending_reply, 0, sizeof(pending_reply));
	ck_assert_int_eq(hc_request(cli, &o, on_done, &pending_reply, err),
	    0);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d/hello", scheme(), port);
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(hc_request(cli, &o, on_done_then_close, &r, err),
	    0);
	ck_assert(run_until(&cli_closed, 5000));
	ck_assert_int_eq(r.status, 200);
	free(r.body);
	ck_assert(pending_reply.done);
	ck_assert_str_eq(pending_reply.error, "cancelled");
	ck_assert_int_lt(r.seq, pending_reply.seq);
	ck_assert_int_lt(pending_reply.seq, cli_closed);
	close(lfd);
}
END_TEST

START_TEST(test_head)
{
	struct reply r;
	int fd, eof;
	const char *req = "HEAD /hello HTTP/1.1\r\nHost: x\r\n"
	    "Connection: close\r\n\r\n";
	size_t n;

	server_start(NULL);
	fetch(&r, "HEAD", "/hello", NULL, 0, NULL);
	ck_assert_str_eq(r.error, "");
	ck_assert_int_eq(r.status, 200);
	ck_assert_uint_eq(r.body_len, 0);
	ck_assert_str_eq(r.etag, "\"v1\"");

	fd = raw_connect();
	raw_send(fd, req, strlen(req));
	n = raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_ptr_nonnull(strstr(raw, "Content-Length: 11\r\n"));
	/* the head and nothing after it */
	ck_assert_uint_eq(n, (size_t)(strstr(raw, "\r\n\r\n") - raw) + 4);
	raw_close(fd);
}
END_TEST

START_TEST(test_status_from_handler)
{
	struct reply r;
	int fd, eof;
	const char *req = "GET /headers HTTP/1.1\r\nHost: x\r\n\r\n";

	server_start(NULL);
	fetch(&r, "GET", "/missing", NULL, 0, NULL);
	ck_assert_str_eq(r.error, "");
	ck_assert_int_eq(r.status, 404);
	ck_assert_str_eq(r.body, "no such thing: /missing");
	free(r.body);

	fetch(&r, "GET", "/nostatus", NULL, 0, NULL);
	ck_assert_int_eq(r.status, 500);
	ck_assert_ptr_nonnull(strstr(r.body, "no status"));
	free(r.body);

	fetch(&r, "GET", "/hello", NULL, 0, &(hc_request_opts){
	    .if_none_match = "\"v1\"" });
	ck_assert_int_eq(r.status, 304);
	ck_assert_uint_eq(r.body_len, 0);
	ck_assert_str_eq(r.etag, "\"v1\"");

	fd = raw_connect();
	raw_send(fd, req, strlen(req));
	raw_read(fd, 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 201 Created\r\n", 22), 0);
	ck_assert_ptr_nonnull(strstr(raw, "\r\nX-Test: yes\r\n"));
	ck_assert_ptr_null(strstr(raw, "X-Evil"));
	ck_assert_ptr_null(strstr(raw, "Content-Type"));
	ck_assert_int_eq(hdr_bad_name, UV_EINVAL);
	ck_assert_int_eq(hdr_own, UV_EINVAL);
	ck_assert_int_eq(hdr_crlf, UV_EINVAL);
	ck_assert_int_eq(bad_status, UV_EINVAL);
	raw_close(fd);
}
END_TEST

START_TEST(test_413_declared)
{
	hs_config cfg = { .max_body_bytes = 1024 };
	const char *req = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 1000000\r\n\r\n";
	int fd, eof;

	server_start(&cfg);
	fd = raw_connect();
	/* the headers only: the answer must not wait for the body */
	raw_send(fd, req, strlen(req));
	raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 413 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "Connection: close\r\n"));
	ck_assert_ptr_nonnull(strstr(raw, "Content-Type: text/plain\r\n"));
	ck_assert_ptr_nonnull(strstr(raw, "limit of 1024 bytes"));
	ck_assert_int_eq(nex, 1);
	ck_assert_int_eq(ex[0].kind, HS_METER_ERROR);
	ck_assert_uint_eq(ex[0].in, strlen(req));
	raw_close(fd);
}
END_TEST

START_TEST(test_413_chunked)
{
	hs_config cfg = { .max_body_bytes = 1024 };
	const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n";
	char chunk[600];
	int fd, eof, i;

	server_start(&cfg);
	fd = raw_connect();
	raw_send(fd, head, strlen(head));
	memset(chunk, 'a', sizeof(chunk));
	memcpy(chunk, "200\r\n", 5);            /* 512 bytes */
	memcpy(chunk + 5 + 512, "\r\n", 2);
	for (i = 0; i < 2; i++)
		raw_send(fd, chunk, 5 + 512 + 2);
	/* within the limit so far: no answer yet */
	ck_assert_uint_eq(raw_read(fd, 100, &eof, 0), 0);
	ck_assert(!eof);
	raw_send(fd, "1\r\nz\r\n", 6);
	raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 413 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "limit of 1024 bytes"));
	raw_close(fd);
}
END_TEST

START_TEST(test_400_malformed)
{
	static const char *const bad[] = {
		"G@T / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.x\r\n\r\n",
		"GET / HTTP/1.1\r\nContent-Length: 12z\r\n\r\n",
	};
	size_t i;

	server_start(NULL);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = raw_connect(), eof;

		raw_send(fd, bad[i], strlen(bad[i]));
		raw_read(fd, 3000, &eof, 0);
		ck_assert_msg(eof, "%s", bad[i]);
		ck_assert_msg(strncmp(raw, "HTTP/1.1 400 ", 13) == 0, "%s",
		    raw);
		ck_assert_ptr_nonnull(strstr(raw, "malformed request: "));
		ck_assert_ptr_nonnull(strstr(raw, "(HPE_"));
		raw_close(fd);
	}
}
END_TEST

START_TEST(test_431_headers)
{
	size_t n = 20000;
	char *req = malloc(n + 100);
	int fd, eof;

	server_start(NULL);     /* the default cap, 16 KiB */
	strcpy(req, "GET /hello HTTP/1.1\r\nX-Big: ");
	memset(req + strlen(req), 'a', n);
	strcpy(req + 28 + n, "\r\n\r\n");
	fd = raw_connect();
	raw_send(fd, req, strlen(req));
	raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 431 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "limit of 16384 bytes"));
	raw_close(fd);
	free(req);
}
END_TEST

START_TEST(test_slow_client)
{
	hs_config cfg = { .request_timeout_ms = 150 };
	const char *half = "GET /hello HTTP/1.1\r\nHost: x\r\n";
	double t0;
	int fd, eof;

	server_start(&cfg);
	fd = raw_connect();
	t0 = now_s();
	raw_send(fd, half, strlen(half));
	raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_double_ge(now_s() - t0, 0.14);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 408 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "150 ms"));
	raw_close(fd);
}
END_TEST

/* Headers trickled in are cut at header_timeout_ms although the
 * request's own time is far longer; a body then has request_timeout_ms
 * periods of its own, not what was left of the headers' time. */
START_TEST(test_slow_headers)
{
	hs_config cfg = { .request_timeout_ms = 20000,
	    .header_timeout_ms = 150 };
	const char *half = "GET /hello HTTP/1.1\r\nHost: x\r\n";
	const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 5\r\n\r\n";
	int fd, eof;

	server_start(&cfg);
	fd = raw_connect();
	raw_send(fd, half, strlen(half));
	/* well before request_timeout_ms */
	raw_read(fd, 5000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 408 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "headers not received within 150 "
	    "ms"));
	raw_close(fd);

	fd = raw_connect();
	raw_send(fd, head, strlen(head));
	ck_assert_uint_eq(raw_read(fd, 400, &eof, 0), 0);    /* > 150 ms */
	ck_assert(!eof);
	raw_send(fd, "hello", 5);
	raw_read(fd, 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(fd);
}
END_TEST

/* GET /hello on a new connection kept open: the status of the answer,
 * 0 when the connection closed without one. */
static int
hello_on(int fd)
{
	static const char get[] = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	int eof;

	raw_send(fd, get, strlen(get));
	raw_read(fd, 3000, &eof, 1);
	return strncmp(raw, "HTTP/1.1 ", 9) == 0 ? atoi(raw + 9) : 0;
}

/* Over TLS the quotas follow the identity the handshake proved, not the
 * address: its connections (every other connection open and idle), and
 * its requests in flight over all of them. */
START_TEST(test_identity_quota)
{
	char body[600];
	int fd[3], eof, i;

	server_start(&(hs_config){ .max_connections_per_addr = 10,
	    .max_connections_per_client = 2 });
	for (i = 0; i < 3; i++) {
		fd[i] = raw_connect();
		if (i < 2)
			ck_assert_int_eq(hello_on(fd[i]), 200);
	}
	raw_send(fd[2], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", 32);
	raw_read(fd[2], 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 503 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "connections of this client's "
	    "identity (limit 2)"));
	ck_assert_uint_eq(hs_server_over_quota(srv), 1);
	for (i = 0; i < 3; i++)
		raw_close(fd[i]);
	hs_server_close(srv, NULL, NULL);
	srv = NULL;

	/* one request being read on one connection is all this identity
	 * may have in flight: a second on another is refused */
	server_start(&(hs_config){ .max_requests_per_id = 1 });
	fd[0] = raw_connect();
	fd[1] = raw_connect();
	raw_send(fd[0], "GET /hello HTTP/1.1\r\n", 21);
	ck_assert_uint_eq(raw_read(fd[0], 100, &eof, 0), 0);
	ck_assert_int_eq(hello_on(fd[1]), 503);
	ck_assert_ptr_nonnull(strstr(raw, "too many requests in flight from "
	    "this identity (limit 1)"));
	raw_send(fd[0], "Host: x\r\n\r\n", 11);
	raw_read(fd[0], 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(fd[0]);
	raw_close(fd[1]);
	hs_server_close(srv, NULL, NULL);
	srv = NULL;

	/* a client holds one body's worth at most, over all its
	 * connections: the rest of max_buffered_bytes is the peers' */
	server_start(&(hs_config){ .max_body_bytes = 1000 });
	fd[0] = raw_connect();
	fd[1] = raw_connect();
	raw_send(fd[0], "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 900\r\n\r\n", 53);
	memset(body, 'a', sizeof(body));
	raw_send(fd[0], body, 600);
	ck_assert_uint_eq(raw_read(fd[0], 100, &eof, 0), 0);
	raw_send(fd[1], "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 900\r\n\r\n", 53);
	raw_send(fd[1], body, 10);
	raw_read(fd[1], 3000, &eof, 0);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 503 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "this client's identity holds too "
	    "many request bodies"));
	raw_send(fd[0], body, 300);
	raw_read(fd[0], 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(fd[0]);
	raw_close(fd[1]);
}
END_TEST

/* A body that keeps flowing above the floor completes although it takes
 * many request periods; one that stalls is cut after one period. */
START_TEST(test_body_rate_floor)
{
	hs_config cfg = { .request_timeout_ms = 200, .min_body_rate = 1000 };
	const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 6000\r\n\r\n";
	char part[400];
	double t0;
	int fd, eof, i;

	memset(part, 'b', sizeof(part));
	server_start(&cfg);
	fd = raw_connect();
	t0 = now_s();
	raw_send(fd, head, strlen(head));
	for (i = 0; i < 14; i++) {      /* 4000 bytes/s for 1.4 s */
		raw_send(fd, part, sizeof(part));
		ck_assert_uint_eq(raw_read(fd, 100, &eof, 0), 0);
		ck_assert(!eof);
	}
	raw_send(fd, part, sizeof(part));
	raw_read(fd, 3000, &eof, 1);
	ck_assert_double_ge(now_s() - t0, 1.0);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(fd);

	fd = raw_connect();
	raw_send(fd, head, strlen(head));
	raw_send(fd, part, 100);
	t0 = now_s();
	raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_double_lt(now_s() - t0, 1.0);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 408 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "slower than 1000 bytes/s"));
	raw_close(fd);
}
END_TEST

START_TEST(test_idle_timeout)
{
	hs_config cfg = { .idle_timeout_ms = 150 };
	const char *req = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	double t0;
	int fd, eof;

	server_start(&cfg);
	fd = raw_connect();
	raw_send(fd, req, strlen(req));
	raw_read(fd, 3000, &eof, 1);
	ck_assert(!eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	t0 = now_s();
	ck_assert_uint_eq(raw_read(fd, 3000, &eof, 0), 0);
	ck_assert(eof);
	ck_assert_double_ge(now_s() - t0, 0.1);
	ck_assert_double_lt(now_s() - t0, 2.0);
	raw_close(fd);
}
END_TEST

START_TEST(test_pipelined)
{
	char req[4096], want[64];
	const char *p;
	int fd, eof, i, n = 20;     /* more than the server has in flight */
	size_t len = 0;

	server_start(NULL);
	for (i = 0; i < n; i++)
		len += (size_t)sprintf(req + len, "GET /info?i=%d HTTP/1.1\r\n"
		    "Host: x\r\n%s\r\n", i,
		    i == n - 1 ? "Connection: close\r\n" : "");
	fd = raw_connect();
	raw_send(fd, req, len);
	raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(responses_in(raw, strlen(raw)), n);
	for (i = 0, p = raw; i < n; i++) {
		snprintf(want, sizeof(want), "GET /info i=%d", i);
		p = strstr(p, want);
		ck_assert_msg(p != NULL, "response %d missing or out of order",
		    i);
	}
	ck_assert_int_eq(nex, n);
	raw_close(fd);
}
END_TEST

START_TEST(test_exchange_bytes)
{
	const char *post = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 5\r\n\r\nhello"
	    "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
	    "Connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
	const char *get = "GET /hello HTTP/1.1\r\nHost: x\r\n"
	    "Connection: close\r\n\r\n";
	size_t n;
	int fd, eof;

	server_start(NULL);
	fd = raw_connect();
	raw_send(fd, get, strlen(get));
	n = raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(nex, 1);
	ck_assert_uint_eq(ex[0].in, strlen(get));
	ck_assert_uint_eq(ex[0].out, n);
	ck_assert_int_eq(ex[0].kind, 1);
	raw_close(fd);

	/* a peer that half-closes after its request still gets the answer */
	fd = raw_connect();
	get = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	raw_send(fd, get, strlen(get));
	shutdown(fd, SHUT_WR);
	n = raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(responses_in(raw, n), 1);
	ck_assert_int_eq(nex, 2);
	ck_assert_uint_eq(ex[1].out, n);
	raw_close(fd);
	nex = 0;

	fd = raw_connect();
	raw_send(fd, post, strlen(post));
	n = raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(nex, 2);
	ck_assert_uint_eq(ex[0].in + ex[1].in, strlen(post));
	ck_assert_uint_eq(ex[0].in, (size_t)(strstr(post, "helloPOST") -
	    post) + 5);
	ck_assert_uint_eq(ex[0].out + ex[1].out, n);
	ck_assert_ptr_nonnull(strstr(raw, "\r\n\r\nabcde"));
	raw_close(fd);
}
END_TEST

START_TEST(test_expect_continue)
{
	const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Expect: 100-continue\r\nContent-Length: 4\r\n"
	    "Connection: close\r\n\r\n";
	int fd, eof;
	size_t n;

	server_start(NULL);
	fd = raw_connect();
	raw_send(fd, head, strlen(head));
	n = raw_read(fd, 200, &eof, 0);
	ck_assert(!eof);
	ck_assert_str_eq(raw, "HTTP/1.1 100 Continue\r\n\r\n");
	raw_send(fd, "ping", 4);
	n += raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "\r\n\r\nping"));
	ck_assert_uint_eq(ex[0].out, n);
	ck_assert_uint_eq(ex[0].in, strlen(head) + 4);
	raw_close(fd);
}
END_TEST

START_TEST(test_http10_and_limits)
{
	hs_config cfg = { .max_connections = 1 };
	const char *old = "GET /hello HTTP/1.0\r\n\r\n";
	int a, b, eof;

	server_start(&cfg);
	a = raw_connect();
	raw_send(a, old, strlen(old));
	raw_read(a, 3000, &eof, 0);
	ck_assert(eof);         /* 1.0 without keep-alive closes */
	ck_assert_ptr_nonnull(strstr(raw, "\r\n\r\nhello world"));
	raw_close(a);
	while (hs_server_connections(srv) > 0)
		uv_run(&loop, UV_RUN_ONCE);

	a = raw_connect();
	old = "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
	raw_send(a, old, strlen(old));
	raw_read(a, 3000, &eof, 1);
	ck_assert(!eof);
	ck_assert_ptr_nonnull(strstr(raw, "Connection: keep-alive\r\n"));
	/* a is kept open: a second connection is one too many */
	b = raw_connect();
	raw_read(b, 3000, &eof, 0);
	ck_assert(eof);
	if (use_tls)
		ck_assert_str_eq(raw, "");      /* closed before a handshake */
	else {
		ck_assert_int_eq(strncmp(raw, "HTTP/1.1 503 ", 13), 0);
		ck_assert_ptr_nonnull(strstr(raw, "too many connections "
		    "(limit 1)"));
	}
	raw_close(b);
	raw_send(a, old, strlen(old));
	raw_read(a, 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(a);
}
END_TEST

START_TEST(test_client_max_body)
{
	struct reply r;
	char *chunked, *p;
	int lfd, cport, fd = -1, i;

	server_start(NULL);
	/* declared length over the limit */
	fetch(&r, "GET", "/big?n=100000", NULL, 0, &(hc_request_opts){
	    .max_body_bytes = 10000 });
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.error, "limit of 10000 bytes"));
	ck_assert_int_eq(r.code, HC_ETOOLARGE);
	ck_assert_ptr_null(r.body);
	fetch(&r, "GET", "/big?n=10000", NULL, 0, &(hc_request_opts){
	    .max_body_bytes = 10000 });
	ck_assert_int_eq(r.status, 200);
	ck_assert_uint_eq(r.body_len, 10000);
	free(r.body);
	/* several write slices on the server side */
	fetch(&r, "GET", "/big?n=5000000", NULL, 0, NULL);
	ck_assert_int_eq(r.status, 200);
	ck_assert_uint_eq(r.body_len, 5000000);
	ck_assert_int_eq(r.body[4999999], 'x');
	ck_assert_uint_eq(r.in, ex[nex - 1].out);
	free(r.body);

	/* undeclared length: counted as it arrives */
	lfd = silent_listener(&cport);
	chunked = malloc(64 * 1024);
	p = chunked + sprintf(chunked, "HTTP/1.1 200 OK\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n");
	for (i = 0; i < 5; i++) {
		p += sprintf(p, "fa0\r\n");     /* 4000 bytes */
		memset(p, 'y', 4000);
		p += 4000;
		p += sprintf(p, "\r\n");
	}
	p += sprintf(p, "0\r\n\r\n");
	port = cport;
	request(&r, "GET", "/chunked", NULL, 0, &(hc_request_opts){
	    .max_body_bytes = 10000 });
	while (!r.done) {
		uv_run(&loop, UV_RUN_NOWAIT);
		if (fd < 0 && (fd = accept(lfd, NULL, NULL)) >= 0) {
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			raw_send(fd, chunked, (size_t)(p - chunked));
		}
		pump(lfd, 1);
	}
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.error, "limit of 10000 bytes"));
	ck_assert_int_eq(r.code, HC_ETOOLARGE);
	raw_close(fd);
	close(lfd);
	free(chunked);
}
END_TEST

START_TEST(test_client_timeout)
{
	struct reply r;
	int lfd;
	double t0 = now_s();

	lfd = silent_listener(&port);
	fetch(&r, "GET", "/never", NULL, 0, &(hc_request_opts){
	    .timeout_ms = 200 });
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(strstr(r.error, "imed out") != NULL, "%s", r.error);
	ck_assert_int_eq(r.code, HC_ETIMEDOUT);
	ck_assert_double_ge(now_s() - t0, 0.19);
	ck_assert_double_lt(now_s() - t0, 3.0);
	close(lfd);
}
END_TEST

START_TEST(test_client_refused)
{
	struct reply r;
	int lfd = silent_listener(&port);

	close(lfd);             /* nothing listens there now */
	fetch(&r, "GET", "/", NULL, 0, NULL);
	ck_assert_int_eq(r.status, 0);
	ck_assert(r.has_error);
	ck_assert_msg(strstr(r.error, "onnect") != NULL, "%s", r.error);
	ck_assert_int_eq(r.code, HC_ECONNECT);
}
END_TEST

/* Something listens but does not speak HTTP: a failure that is neither
 * a refused connection nor a timeout, whatever curl's words for it. */
START_TEST(test_client_not_http)
{
	struct reply r;
	int lfd = silent_listener(&port), fd = -1;
	static const char junk[] = "SSH-2.0-OpenSSH_9.2\r\nnot http\r\n";

	fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
	request(&r, "GET", "/", NULL, 0, NULL);
	while (!r.done) {
		uv_run(&loop, UV_RUN_NOWAIT);
		if (fd < 0 && (fd = accept(lfd, NULL, NULL)) >= 0) {
			ck_assert_int_eq(write(fd, junk, sizeof(junk) - 1),
			    (ssize_t)sizeof(junk) - 1);
			shutdown(fd, SHUT_WR);
		}
		pump(lfd, 1);
	}
	ck_assert_int_eq(r.status, 0);
	ck_assert(r.has_error);
	ck_assert_int_eq(r.code, KN_EIO);
	if (fd >= 0)
		close(fd);
	close(lfd);
}
END_TEST

/* The server is not the pinned one: a failure of TLS, not of the
 * connection. */
START_TEST(test_client_wrong_pin)
{
	struct reply r;
	hc_request_opts o;
	char url[128], err[HC_ERR_LEN];

	server_start(NULL);
	memset(&o, 0, sizeof(o));
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/hello", port);
	o.url = url;
	o.pin = cli_id;         /* an id, but not the server's */
	memset(&r, 0, sizeof(r));
	ck_assert_msg(hc_request(cli, &o, on_done, &r, err) == 0, "%s", err);
	ck_assert(run_until(&r.done, 5000));
	ck_assert_int_eq(r.status, 0);
	ck_assert(r.has_error);
	ck_assert_int_eq(r.code, HC_ETLS);
}
END_TEST

static void
on_close_timer(uv_timer_t *t)
{
	hc_client_close(cli, set_flag, &cli_closed);
	cli = NULL;
	uv_close((uv_handle_t *)t, NULL);
}

START_TEST(test_client_close_in_flight)
{
	struct reply r1, r2;
	uv_timer_t t;
	hc_request_opts o = { .method = "GET" };
	int lfd = silent_listener(&port);
	char url[128], err[HC_ERR_LEN];

	request(&r1, "GET", "/a", NULL, 0, NULL);
	request(&r2, "POST", "/b", "x", 1, NULL);
	uv_timer_init(&loop, &t);
	uv_timer_start(&t, on_close_timer, 50, 0);
	ck_assert(run_until(&cli_closed, 5000));
	ck_assert(r1.done && r2.done);
	ck_assert_str_eq(r1.error, "cancelled");
	ck_assert_str_eq(r2.error, "cancelled");
	ck_assert_int_eq(r1.code, HC_ECANCELLED);
	ck_assert_int_eq(r2.code, HC_ECANCELLED);
	ck_assert_int_eq(r1.status, 0);
	ck_assert_int_lt(r1.seq, cli_closed);
	ck_assert_int_lt(r2.seq, cli_closed);
	close(lfd);

	/* a closing client takes no more requests */
	ck_assert_int_eq(hc_client_new(&cli, &loop, err), 0);
	if (use_tls)
		hc_client_set_tls(cli, cli_tls);
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d/", scheme(), port);
	o.url = url;
	o.pin = pin();
	o.method = "DELETE";
	ck_assert_int_eq(hc_request(cli, &o, on_done, &r1, err), UV_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "DELETE"));
	o.method = "GET";
	o.body_len = 3;
	o.body = "abc";
	ck_assert_int_eq(hc_request(cli, &o, on_done, &r1, err), UV_EINVAL);
}
END_TEST

START_TEST(test_server_close)
{
	const char *req = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	int idle, partial, eof;
	struct reply r;

	server_start(NULL);
	idle = raw_connect();
	raw_send(idle, req, strlen(req));
	raw_read(idle, 3000, &eof, 1);
	partial = raw_connect();
	raw_send(partial, "POST /echo HTTP/1.1\r\nContent-Length: 9\r\n\r\nab",
	    44);
	while (hs_server_connections(srv) < 2)
		uv_run(&loop, UV_RUN_ONCE);
	hs_server_close(srv, set_flag, &srv_closed);
	srv = NULL;
	ck_assert(run_until(&srv_closed, 3000));
	ck_assert_uint_eq(raw_read(idle, 1000, &eof, 0), 0);
	ck_assert(eof);
	ck_assert_uint_eq(raw_read(partial, 1000, &eof, 0), 0);
	ck_assert(eof);
	raw_close(idle);
	raw_close(partial);

	/* and from inside the handler */
	srv_closed = 0;
	server_start(NULL);
	fetch(&r, "GET", "/close-server", NULL, 0, &(hc_request_opts){
	    .timeout_ms = 2000 });
	ck_assert(run_until(&srv_closed, 3000));
	ck_assert(r.has_error);
	ck_assert_int_eq(r.status, 0);
}
END_TEST

/* One address cannot hold every connection: beyond its own limit it is
 * answered 503, and a connection it closes makes room again. */
START_TEST(test_per_addr_limit)
{
	hs_config cfg = { .max_connections_per_addr = 2 };
	const char *get = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	int a, b, c, eof;

	server_start(&cfg);
	a = raw_connect();
	b = raw_connect();
	while (hs_server_connections(srv) < 2)
		uv_run(&loop, UV_RUN_ONCE);
	c = raw_connect();
	raw_read(c, 3000, &eof, 0);
	ck_assert(eof);
	if (use_tls) {
		/* refused before the handshake: it would cost more than an
		 * answer is worth */
		ck_assert_str_eq(raw, "");
	} else {
		ck_assert_int_eq(strncmp(raw, "HTTP/1.1 503 ", 13), 0);
		ck_assert_ptr_nonnull(strstr(raw, "too many connections from "
		    "127.0.0.1 (limit 2)"));
	}
	raw_close(c);
	raw_send(b, get, strlen(get));
	raw_read(b, 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(a);
	while (hs_server_connections(srv) > 1)
		uv_run(&loop, UV_RUN_ONCE);
	c = raw_connect();
	raw_send(c, get, strlen(get));
	raw_read(c, 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(b);
	raw_close(c);
}
END_TEST

/* Bodies held by all connections together are bounded: a second large
 * body sent slowly while the first is held gets 503, and the first is
 * still answered. */
START_TEST(test_body_budget)
{
	hs_config cfg = { .max_body_bytes = 1 << 20,
	    .max_buffered_bytes = (1 << 20) + (1 << 19) };
	const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\n"
	    "Content-Type: application/octet-stream\r\n"
	    "Content-Length: 1048576\r\n\r\n";
	static char part[600000];
	int a, b, eof;

	memset(part, 'p', sizeof(part));
	server_start(&cfg);
	a = raw_connect();
	raw_send(a, head, strlen(head));
	raw_send(a, part, sizeof(part));
	ck_assert_uint_eq(raw_read(a, 200, &eof, 0), 0);
	b = raw_connect();
	raw_send(b, head, strlen(head));
	raw_send(b, part, sizeof(part));
	raw_read(b, 3000, &eof, 0);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 503 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "too many request bodies"));
	raw_close(b);
	raw_send(a, part, (1 << 20) - sizeof(part));
	raw_read(a, 5000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 200 ", 13), 0);
	raw_close(a);
}
END_TEST

/* Path numbers: one spelling each, nothing wraps. */
/* A deferred answer keeps its place: what was pipelined after it waits,
 * and goes once it is sent; each exchange is metered once. */
START_TEST(test_deferred_in_order)
{
	const char *req = "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /info?i=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	const char *a, *b;
	size_t n;
	int fd, eof;

	server_start(NULL);
	later_reset();
	fd = later_open(req, 1);
	/* nothing goes before the deferred answer, nor is the next
	 * request answered */
	ck_assert_uint_eq(raw_read(fd, 200, &eof, 1), 0);
	ck_assert(!eof);
	ck_assert_int_eq(nex, 0);
	later_finish("late");
	n = raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_int_eq(responses_in(raw, n), 2);
	ck_assert_ptr_nonnull(a = strstr(raw, "X-Early: 1\r\nX-Late: 2\r\n"));
	ck_assert_ptr_nonnull(strstr(raw, "\r\n\r\nlate"));
	ck_assert_ptr_nonnull(b = strstr(raw, "GET /info i=1"));
	ck_assert(a < b);
	ck_assert_int_eq(nex, 2);
	ck_assert_int_eq(ex[0].kind, 5);
	ck_assert_int_eq(ex[0].who, 9);
	ck_assert_uint_eq(ex[0].in + ex[1].in, strlen(req));
	ck_assert_uint_eq(ex[0].out + ex[1].out, n);
	ck_assert_int_eq(gone_n, 0);
	raw_close(fd);
}
END_TEST

/* A streamed answer: the head with Transfer-Encoding: chunked, a chunk
 * per call, the last chunk; the bytes exactly, and metered whole. */
START_TEST(test_deferred_stream)
{
	static const char want[] = "HTTP/1.1 200 OK\r\nContent-Type: "
	    "text/event-stream\r\nX-Early: 1\r\nCache-Control: no-cache\r\n"
	    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
	    "d\r\ndata: first\n\n\r\n10\r\ndata: [second]\n\n\r\n0\r\n\r\n";
	const char *req = "GET /later HTTP/1.1\r\nHost: x\r\n"
	    "Connection: close\r\n\r\n";
	hs_deferred *d;
	hs_response *res;
	size_t n;
	int fd, eof;

	server_start(NULL);
	later_reset();
	fd = later_open(req, 1);
	d = later;
	res = hs_deferred_response(d);
	ck_assert_int_eq(hs_response_status(res, 200), 0);
	ck_assert_int_eq(hs_response_body_owned(res, "text/event-stream",
	    NULL, 0), 0);
	ck_assert_int_eq(hs_response_header(res, "Cache-Control", "no-cache"),
	    0);
	ck_assert_int_eq(hs_deferred_stream_begin(d), 0);
	ck_assert_int_eq(hs_deferred_stream_chunk(d, "data: first\n\n", 13),
	    0);
	/* the head and the first event are out before the stream ends */
	n = raw_read(fd, 300, &eof, 0);
	ck_assert(!eof);
	ck_assert_ptr_nonnull(strstr(raw, "data: first"));
	ck_assert_int_eq(hs_deferred_stream_chunk(d, "data: [second]\n\n",
	    16), 0);
	later = NULL;
	hs_deferred_stream_end(d);
	n += raw_read(fd, 3000, &eof, 0);
	ck_assert(eof);
	ck_assert_uint_eq(n, sizeof(want) - 1);
	ck_assert_int_eq(nex, 1);
	ck_assert_uint_eq(ex[0].in, strlen(req));
	ck_assert_uint_eq(ex[0].out, n);
	ck_assert_int_eq(gone_n, 0);
	raw_close(fd);
}
END_TEST

/* The owner of a deferred answer is told when its connection goes: the
 * peer closed, or the server closed; the idle timeout waits for the
 * answer, and holds again once it is sent. */
START_TEST(test_deferred_gone)
{
	hs_config cfg = { .idle_timeout_ms = 150 };
	const char *req = "GET /later HTTP/1.1\r\nHost: x\r\n\r\n";
	const char *post = "POST /later HTTP/1.1\r\nHost: x\r\n"
	    "Expect: 100-continue\r\nContent-Length: 2\r\n\r\nab";
	int fd, eof;

	server_start(&cfg);
	later_reset();
	/* the peer goes first */
	fd = later_open(req, 1);
	raw_close(fd);
	ck_assert(run_until(&gone_n, 3000));
	ck_assert_ptr_null(later);
	ck_assert(run_until_n(&nex, 1, 3000));
	ck_assert_uint_eq(ex[0].out, 0);        /* it failed */

	/* the answer outlasts the idle timeout, which then holds again
	 * (a 100 Continue written before it does not hold it) */
	fd = later_open(post, 2);
	raw_read(fd, 500, &eof, 1);
	ck_assert(!eof);
	ck_assert_int_eq(responses_in(raw, strlen(raw)), 0);
	later_finish("slow");
	raw_read(fd, 3000, &eof, 1);
	ck_assert_ptr_nonnull(strstr(raw, "\r\n\r\nslow"));
	ck_assert(!eof);
	ck_assert_uint_eq(raw_read(fd, 3000, &eof, 0), 0);
	ck_assert(eof);
	raw_close(fd);
	ck_assert_int_eq(gone_n, 1);

	/* the server closes */
	fd = later_open(req, 3);
	hs_server_close(srv, set_flag, &srv_closed);
	srv = NULL;
	ck_assert_int_eq(gone_n, 2);
	ck_assert_ptr_null(later);
	ck_assert(run_until(&srv_closed, 3000));
	raw_close(fd);
}
END_TEST

/* A deferred request counts against its identity's requests in flight
 * while it waits. */
START_TEST(test_deferred_quota)
{
	hs_config cfg = { .max_requests_per_id = 1 };
	const char *req = "GET /later HTTP/1.1\r\nHost: x\r\n\r\n";
	const char *get = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	int fd, fd2, eof;

	server_start(&cfg);
	later_reset();
	fd = later_open(req, 1);
	fd2 = raw_connect();
	raw_send(fd2, get, strlen(get));
	raw_read(fd2, 3000, &eof, 1);
	ck_assert_int_eq(strncmp(raw, "HTTP/1.1 503 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(raw, "too many requests in flight"));
	raw_close(fd2);
	later_finish("done");
	raw_read(fd, 3000, &eof, 1);
	ck_assert_ptr_nonnull(strstr(raw, "\r\n\r\ndone"));
	raw_close(fd);
}
END_TEST

/* ---- links: connections another module reads ---- */

struct owner {
	char out[16384];
	size_t len;
	int finished, closed, resumed;
};

static int
own_write(void *arg, char *buf, size_t len)
{
	struct owner *o = arg;

	ck_assert_uint_le(o->len + len, sizeof(o->out) - 1);
	memcpy(o->out + o->len, buf, len);
	o->len += len;
	o->out[o->len] = '\0';
	free(buf);
	return 0;
}

static void
own_finish(void *arg)
{
	((struct owner *)arg)->finished++;
}

static void
own_close(void *arg)
{
	((struct owner *)arg)->closed++;
}

static void
own_resume(void *arg)
{
	((struct owner *)arg)->resumed++;
}

static const hs_link_ops own_ops = {
	own_write, own_finish, own_close, own_resume
};

/* An answer the server makes itself, in the owner's shape. */
static void
error_answer(void *ctx, const hs_error *e, hs_response *res)
{
	char text[256];

	(void)ctx;
	snprintf(text, sizeof(text), "{\"status\":%d,\"parse\":\"%s\"}",
	    e->status, e->parse_error != NULL ? e->parse_error : "-");
	hs_response_status(res, e->status);
	hs_response_body(res, "application/json", text, strlen(text));
}

START_TEST(test_link)
{
	const char *two = "GET /later HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /whose HTTP/1.1\r\nHost: x\r\n\r\n";
	hs_config cfg = { .error_answer = error_answer,
	    .max_body_bytes = 16, .on_exchange = on_exchange };
	struct owner own;
	char err[HS_ERR_LEN];
	hs_link *l;
	const char *a, *b;

	memset(&own, 0, sizeof(own));
	later_reset();
	ck_assert_int_eq(hs_server_new(&srv, &loop, &cfg, handler, NULL, err),
	    0);
	ck_assert_ptr_nonnull(l = hs_link_new(srv, &own_ops, &own,
	    "192.0.2.1:7", "192.0.2.1", NULL));
	ck_assert_int_eq(hs_server_connections(srv), 1);
	/* the deferred answer holds what follows: the owner stops reading */
	ck_assert_int_ne(hs_link_feed(l, two, strlen(two)), 0);
	ck_assert_int_eq(deferred_n, 1);
	ck_assert_uint_eq(own.len, 0);
	later_finish("late");
	/* the next request is read on from the loop, not from inside the
	 * owner's call */
	ck_assert_ptr_nonnull(a = strstr(own.out, "\r\n\r\nlate"));
	ck_assert_ptr_null(strstr(own.out, "\r\n\r\nlink"));
	ck_assert(run_until(&own.resumed, 3000));
	ck_assert_ptr_nonnull(b = strstr(own.out, "\r\n\r\nlink"));
	ck_assert(a < b);
	ck_assert_int_eq(own.resumed, 1);
	ck_assert_int_eq(nex, 2);
	/* the owner's connection goes before an answer: its owner is told */
	ck_assert_int_eq(hs_link_feed(l, two, 32), 0);
	ck_assert_int_eq(deferred_n, 2);
	hs_link_close(l);
	ck_assert_int_eq(gone_n, 1);
	ck_assert_int_eq(own.closed + own.finished, 0);

	/* a malformed request: the owner's error shape, then its close */
	memset(&own, 0, sizeof(own));
	ck_assert_ptr_nonnull(l = hs_link_new(srv, &own_ops, &own,
	    "192.0.2.1:8", "192.0.2.1", NULL));
	ck_assert_int_ne(hs_link_feed(l, "GET /x\x01 HTTP/1.1\r\n\r\n", 20), 0);
	ck_assert_int_eq(strncmp(own.out, "HTTP/1.1 400 ", 13), 0);
	ck_assert_ptr_nonnull(strstr(own.out, "application/json"));
	ck_assert_ptr_nonnull(strstr(own.out, "{\"status\":400,\"parse\":\"invalid"));
	ck_assert_int_eq(own.finished, 1);
	ck_assert_int_eq(own.closed, 0);

	/* too large: the limit's status, no parser's reason */
	memset(&own, 0, sizeof(own));
	ck_assert_ptr_nonnull(l = hs_link_new(srv, &own_ops, &own,
	    "192.0.2.1:9", "192.0.2.1", NULL));
	hs_link_feed(l, "POST /echo HTTP/1.1\r\nContent-Length: 17\r\n\r\n",
	    43);
	ck_assert_ptr_nonnull(strstr(own.out, "{\"status\":413,\"parse\":\"-\"}"));
	ck_assert_int_eq(own.finished, 1);

	/* the server closes a link: its owner closes the connection */
	memset(&own, 0, sizeof(own));
	ck_assert_ptr_nonnull(l = hs_link_new(srv, &own_ops, &own,
	    "192.0.2.1:10", "192.0.2.1", NULL));
	ck_assert_int_eq(hs_link_feed(l, "GET /whose HTTP/1.1\r\n\r\n", 23), 0);
	ck_assert_ptr_nonnull(strstr(own.out, "\r\n\r\nlink"));
	hs_server_close(srv, set_flag, &srv_closed);
	srv = NULL;
	ck_assert_int_eq(own.closed, 1);
	ck_assert(run_until(&srv_closed, 3000));
}
END_TEST

START_TEST(test_path_number)
{
	int64_t v = -7;

	ck_assert_uint_eq(hs_path_number("0", 10, &v), 1);
	ck_assert_int_eq(v, 0);
	ck_assert_uint_eq(hs_path_number("42/x", 100, &v), 2);
	ck_assert_int_eq(v, 42);
	ck_assert_uint_eq(hs_path_number("2147483647", INT32_MAX, &v), 10);
	ck_assert_int_eq(v, INT32_MAX);
	ck_assert_uint_eq(hs_path_number("9223372036854775807", INT64_MAX,
	    &v), 19);
	ck_assert_int_eq(v, INT64_MAX);
	v = -7;
	ck_assert_uint_eq(hs_path_number("2147483648", INT32_MAX, &v), 0);
	ck_assert_uint_eq(hs_path_number("4294967297", INT32_MAX, &v), 0);
	ck_assert_uint_eq(hs_path_number("9223372036854775808", INT64_MAX,
	    &v), 0);
	ck_assert_uint_eq(hs_path_number("01", 10, &v), 0);
	ck_assert_uint_eq(hs_path_number("+1", 10, &v), 0);
	ck_assert_uint_eq(hs_path_number("-1", 10, &v), 0);
	ck_assert_uint_eq(hs_path_number("", 10, &v), 0);
	ck_assert_uint_eq(hs_path_number("11", 10, &v), 0);
	ck_assert_int_eq(v, -7);
}
END_TEST

int
main(void)
{
	/* the plain-only tests are of the client's own failures (no server
	 * or a silent one) and of the HTTP layer alone */
	const TTest *both[] = {
	    test_get_post, test_keepalive, test_keepalive_many_servers,
	    test_concurrent, test_head,
	    test_413_declared, test_413_chunked, test_400_malformed,
	    test_431_headers, test_slow_client, test_idle_timeout,
	    test_body_rate_floor, test_pipelined, test_exchange_bytes,
	    test_expect_continue, test_http10_and_limits,
	    test_client_close_in_flight, test_server_close,
	    test_per_addr_limit, test_body_budget, test_shared_body,
	    test_slow_headers, test_deferred_in_order, test_deferred_stream,
	    test_deferred_gone,
	};
	const TTest *tls_only[] = { test_identity_quota,
	    test_client_wrong_pin, test_deferred_quota };
	const TTest *plain_only[] = {
	    test_client_close_from_done, test_status_from_handler,
	    test_client_max_body, test_client_timeout, test_client_refused,
	    test_client_not_http,
	    test_path_number, test_link,
	};
	Suite *s = suite_create("http");
	TCase *tc = tcase_create("http");
	size_t i;

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	for (i = 0; i < sizeof(both) / sizeof(both[0]); i++)
		tcase_add_test(tc, both[i]);
	for (i = 0; i < sizeof(plain_only) / sizeof(plain_only[0]); i++)
		tcase_add_test(tc, plain_only[i]);
	suite_add_tcase(s, tc);
	/* the same over mutual TLS */
	tc = tcase_create("tls");
	tcase_add_checked_fixture(tc, setup_tls, teardown);
	tcase_set_timeout(tc, 30);
	for (i = 0; i < sizeof(both) / sizeof(both[0]); i++)
		tcase_add_test(tc, both[i]);
	for (i = 0; i < sizeof(tls_only) / sizeof(tls_only[0]); i++)
		tcase_add_test(tc, tls_only[i]);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
