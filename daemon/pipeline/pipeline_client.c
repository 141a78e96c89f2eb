/* The pipeline client: blocking sockets with poll() for the bounded
 * waits, the TLS engine of tls.h between the socket and the frames of
 * proto/pipeline.c when the hosts have peer ids. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/conf.h"
#include "daemon/pipeline/pipeline_client.h"
#include "kernels/error.h"

#define PC_READ_LEN 16384          /* ciphertext read at once */

struct pc_conn {
	int fd;
	uint64_t next_id;
	char addr[CF_HOST_LEN + 8];
	tls_conn *tls;                  /* NULL: plain TCP */
	const char *id;                 /* ours, with tls */
	int heard;                      /* plaintext came from the host */
};

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* A socket connected to addr within timeout_ms into *out. */
static int
sock_connect(int *out, const char *addr, int timeout_ms, char *err)
{
	char host[CF_HOST_LEN], port[16];
	struct addrinfo hints = { 0 }, *res = NULL, *ai;
	int p, fd = -1, rc, one = 1, soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (cf_parse_hostport(addr, host, sizeof(host), &p) != 0 || p == 0)
		return kn_error(err, KN_EINVAL, "'%.100s' is not host:port",
		    addr);
	snprintf(port, sizeof(port), "%d", p);
	hints.ai_socktype = SOCK_STREAM;
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0)
		return kn_error(err, KN_EIO, "%.100s: %s", host,
		    gai_strerror(rc));
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		struct pollfd pfd;

		if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
		    ai->ai_protocol)) < 0)
			continue;
		/* non-blocking only for the connect, so it can time out */
		fcntl(fd, F_SETFL, O_NONBLOCK);
		rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (rc != 0 && errno == EINPROGRESS) {
			pfd.fd = fd;
			pfd.events = POLLOUT;
			rc = poll(&pfd, 1, timeout_ms) == 1 &&
			    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0
			    && soerr == 0 ? 0 : -1;
			if (rc != 0)
				errno = soerr ? soerr : ETIMEDOUT;
		}
		if (rc == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return kn_error(err, KN_EIO, "cannot connect to the pipeline at "
		    "%.100s: %s", addr, strerror(errno));
	fcntl(fd, F_SETFL, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*out = fd;
	return KN_OK;
}

static int
send_all(pc_conn *c, const char *buf, size_t len, char *err)
{
	size_t off = 0;

	while (off < len) {
		ssize_t k = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return kn_error(err, KN_EIO, "sending to %.100s: %s",
			    c->addr, strerror(errno));
		off += (size_t)k;
	}
	return KN_OK;
}

/* Sends the ciphertext the engine has made. */
static int
tls_flush(pc_conn *c, char *err)
{
	while (tls_conn_pending(c->tls) > 0) {
		size_t len;
		char *buf = tls_conn_take(c->tls, &len);
		int rc;

		if (buf == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		rc = send_all(c, buf, len, err);
		tls_buf_free(buf);
		if (rc != 0)
			return rc;
	}
	return KN_OK;
}

/* A failure of the engine as the client's error. */
static int
tls_failed(pc_conn *c, int rc, char *err)
{
	/* TLS 1.3 ends the client's handshake before the host has checked
	 * its certificate: a refusal comes as the first thing read */
	int refused = tls_conn_established(c->tls) && !c->heard;

	if (rc == TLS_ECLOSED)
		return kn_error(err, KN_EIO, "%.100s closed the connection",
		    c->addr);
	return kn_error(err, KN_EIO, "TLS with %.100s: %.200s%s%.64s%s",
	    c->addr, tls_conn_error(c->tls)[0] ? tls_conn_error(c->tls) :
	    "out of memory", refused ? " (the host may not list this "
	    "identity, " : "", refused ? c->id : "", refused ? ", as a "
	    "client)" : "");
}

/* Waits by the deadline (ms on the monotonic clock) for bytes from the
 * socket: plain, up to n of them into p; TLS, fed to the engine.
 * Returns the bytes put in p (0 with TLS), or a negative code. */
static ssize_t
sock_read(pc_conn *c, char *p, size_t n, double deadline, char *err)
{
	char buf[PC_READ_LEN];

	for (;;) {
		struct pollfd pfd = { c->fd, POLLIN, 0 };
		double left = deadline - now_ms();
		ssize_t k;

		if (left <= 0 || poll(&pfd, 1, (int)left + 1) == 0)
			return kn_error(err, PC_ETIMEDOUT, "no answer from %.100s "
			    "in time", c->addr);
		k = c->tls != NULL ? recv(c->fd, buf, sizeof(buf), 0) :
		    recv(c->fd, p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			return kn_error(err, KN_EIO, "%.100s closed the "
			    "connection", c->addr);
		if (k < 0)
			return kn_error(err, KN_EIO, "reading from %.100s: %s",
			    c->addr, strerror(errno));
		if (c->tls == NULL)
			return k;
		if (tls_conn_feed(c->tls, buf, (size_t)k) != 0)
			return kn_error(err, KN_ENOMEM, "out of memory");
		return 0;
	}
}

/* The client's side of the handshake, by the deadline. */
static int
tls_handshake(pc_conn *c, double deadline, char *err)
{
	int rc;

	for (;;) {
		if ((rc = tls_conn_start(c->tls)) != 0)
			return tls_failed(c, rc, err);
		if ((rc = tls_flush(c, err)) != 0)
			return rc;
		if (tls_conn_established(c->tls))
			return KN_OK;
		if ((rc = (int)sock_read(c, NULL, 0, deadline, err)) < 0)
			return rc == PC_ETIMEDOUT ? kn_error(err, rc, "no TLS "
			    "handshake with %.100s in time", c->addr) : rc;
	}
}

int
pc_connect(pc_conn **out, const char *addr, tls_ctx *tls,
    const uint8_t *pin, int timeout_ms, char *err)
{
	pc_conn *c;
	int fd, rc;

	*out = NULL;
	if ((rc = sock_connect(&fd, addr, timeout_ms, err)) != 0)
		return rc;
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	c->fd = fd;
	c->next_id = 1;
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	c->id = tls != NULL ? tls_ctx_id(tls) : NULL;
	if (tls != NULL && ((rc = tls_conn_new(&c->tls, tls, 0, pin, err)) != 0
	    || (rc = tls_handshake(c, now_ms() + timeout_ms, err)) != 0)) {
		pc_close(c);
		return rc;
	}
	*out = c;
	return KN_OK;
}

void
pc_close(pc_conn *c)
{
	char err[KN_ERR_LEN];

	if (c == NULL)
		return;
	if (c->tls != NULL) {
		/* the host tells a client that is done from one cut off; a
		 * host that does not read does not hold us up */
		tls_conn_shutdown(c->tls);
		fcntl(c->fd, F_SETFL, O_NONBLOCK);
		tls_flush(c, err);
		tls_conn_free(c->tls);
	}
	close(c->fd);
	free(c);
}

const char *
pc_addr(const pc_conn *c)
{
	return c->addr;
}

int
pc_send_frame(pc_conn *c, const pl_frame *f, char *err)
{
	char *buf;
	size_t len;
	int rc;

	if ((rc = pl_frame_encode(f, &buf, &len, err)) != 0)
		return rc;
	if (c->tls == NULL)
		rc = send_all(c, buf, len, err);
	else if ((rc = tls_conn_write(c->tls, buf, len)) != 0)
		rc = tls_failed(c, rc, err);
	else
		rc = tls_flush(c, err);
	free(buf);
	return rc;
}

int
pc_send(pc_conn *c, const pc_request *r, uint64_t *id, char *err)
{
	pl_frame f = { .type = PL_GEN };
	int rc;

	f.id = c->next_id++;
	f.mode = r->mode;
	f.length = r->length;
	f.steps = r->steps;
	f.temperature = r->temperature;
	f.seed = r->seed;
	f.pos_block = r->mode == PL_MODE_BT ? r->pos_block : 0;
	f.decode = r->mode == PL_MODE_BT ? r->decode : 0;
	f.data = (unsigned char *)r->prompt;
	f.data_len = r->prompt_len;
	if ((rc = pc_send_frame(c, &f, err)) != 0)
		return rc;
	if (id != NULL)
		*id = f.id;
	return KN_OK;
}

/* Reads exactly n bytes of plaintext by the deadline (ms on the
 * monotonic clock). */
static int
read_full(pc_conn *c, char *p, size_t n, double deadline, char *err)
{
	while (n > 0) {
		ssize_t k = 0;

		if (c->tls != NULL) {
			int rc;

			/* what the engine holds first, then the socket */
			if ((k = tls_conn_read(c->tls, p, n)) < 0)
				return tls_failed(c, (int)k, err);
			c->heard |= k > 0;
			if ((rc = tls_flush(c, err)) != 0)
				return rc;
		}
		if (k == 0 && (k = sock_read(c, p, n, deadline, err)) < 0)
			return (int)k;
		p += k;
		n -= (size_t)k;
	}
	return KN_OK;
}

void
pc_result_clear(pc_result *res)
{
	free(res->output);
	memset(res, 0, sizeof(*res));
}

/* The next frame and its length on the wire. */
static int
recv_frame(pc_conn *c, pl_frame *f, size_t *wire, int timeout_ms,
    char *err)
{
	double deadline = now_ms() + timeout_ms;
	unsigned char hdr[PL_HEADER];
	uint32_t len;
	char *body;
	int rc;

	memset(f, 0, sizeof(*f));
	if ((rc = read_full(c, (char *)hdr, PL_HEADER, deadline, err)) != 0)
		return rc;
	/* "HTTP" read as a length: an HTTP server answered our frame */
	if (memcmp(hdr, "HTTP", PL_HEADER) == 0)
		return kn_error(err, KN_EINVAL, "%.100s answered in HTTP, not "
		    "in pipeline frames: it is a training daemon (blocktraind "
		    "without -S) or another HTTP server, not a pipeline host; "
		    "give the host list the pipeline's hosts run with "
		    "(blocktraind -S -P)", c->addr);
	len = pl_frame_length(hdr);
	if (len == 0 || len > PL_FRAME_DEFAULT)
		return kn_error(err, KN_EIO, "%.100s sent a frame of %u bytes",
		    c->addr, len);
	if ((body = malloc(len)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if ((rc = read_full(c, body, len, deadline, err)) == 0)
		rc = pl_frame_decode(body, len, f, err);
	free(body);
	if (rc == 0)
		*wire = PL_HEADER + len;
	return rc;
}

int
pc_recv_frame(pc_conn *c, pl_frame *f, int timeout_ms, char *err)
{
	size_t wire;

	return recv_frame(c, f, &wire, timeout_ms, err);
}

int
pc_recv(pc_conn *c, pc_result *res, int timeout_ms, char *err)
{
	pl_frame f;
	int rc;

	memset(res, 0, sizeof(*res));
	if ((rc = recv_frame(c, &f, &res->frame_bytes, timeout_ms, err)) != 0)
		return rc;
	res->id = f.id;
	if (f.type == PL_OUT) {
		res->ok = 1;
		res->output = f.data;
		res->len = f.data_len;
		f.data = NULL;
		res->compute_us = f.compute_us;
		res->hops = f.hops;
		res->traversals = f.traversals;
	} else if (f.type == PL_ERR)
		snprintf(res->error, sizeof(res->error), "%s", f.message);
	else
		snprintf(res->error, sizeof(res->error), "unexpected %s frame "
		    "from the pipeline", pl_type_name(f.type));
	pl_frame_clear(&f);
	return KN_OK;
}

int
pc_generate(const char *addr, tls_ctx *tls, const uint8_t *pin,
    const pc_request *r, pc_result *res, int timeout_ms, char *err)
{
	pc_conn *c;
	int rc;

	memset(res, 0, sizeof(*res));
	if ((rc = pc_connect(&c, addr, tls, pin, timeout_ms, err)) != 0)
		return rc;
	if ((rc = pc_send(c, r, NULL, err)) == 0)
		rc = pc_recv(c, res, timeout_ms, err);
	pc_close(c);
	return rc;
}

/* The entries ---------------------------------------------------------- */

int
pc_connect_entry(pc_conn **out, const ph_list *hosts, int first,
    tls_ctx *tls, int timeout_ms, int *which, char *err)
{
	int n = hosts->nstages > 0 ? ph_stage_size(hosts, 0) : 1, i, rc = KN_OK;
	size_t used = 0;
	char why[KN_ERR_LEN];

	*out = NULL;
	if (first < 0 || first >= n)
		first = 0;
	err[0] = '\0';
	for (i = 0; i < n; i++) {
		const ph_host *h = &hosts->v[(first + i) % n];

		rc = pc_connect(out, h->addr, h->has_id ? tls : NULL,
		    h->has_id ? h->id : NULL, timeout_ms, why);
		if (rc == KN_OK) {
			if (which != NULL)
				*which = (first + i) % n;
			return KN_OK;
		}
		/* every entry's reason, for the one error at the end */
		if (used < KN_ERR_LEN - 1)
			used += (size_t)snprintf(err + used, KN_ERR_LEN - used,
			    "%s%.200s", used ? "; " : "", why);
	}
	if (n > 1 && used < KN_ERR_LEN - 1)
		snprintf(err + used, KN_ERR_LEN - used, " (every entry of the "
		    "list tried)");
	return rc;
}

int
pc_generate_entries(const ph_list *hosts, tls_ctx *tls, const pc_request *r,
    pc_result *res, int timeout_ms, char *err)
{
	int n = hosts->nstages > 0 ? ph_stage_size(hosts, 0) : 1, first = 0,
	    which, rc = KN_EIO, tries;
	pc_conn *c;

	memset(res, 0, sizeof(*res));
	for (tries = 0; tries < n; tries++) {
		if ((rc = pc_connect_entry(&c, hosts, first, tls, timeout_ms,
		    &which, err)) != 0)
			return rc;
		if ((rc = pc_send(c, r, NULL, err)) == 0)
			rc = pc_recv(c, res, timeout_ms, err);
		pc_close(c);
		/* an entry that went before it answered: the next one */
		if (rc != KN_EIO)
			return rc;
		first = which + 1;
	}
	return rc;
}
