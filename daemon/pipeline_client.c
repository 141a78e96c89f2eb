/* The pipeline client: blocking sockets with poll() for the bounded
 * waits, frames from proto/pipeline.c. */
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

#include "daemon/conf.h"
#include "daemon/pipeline_client.h"
#include "kernels/error.h"

struct pc_conn {
	int fd;
	uint64_t next_id;
	char addr[CF_HOST_LEN + 8];
};

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int
pc_connect(pc_conn **out, const char *addr, int timeout_ms, char *err)
{
	char host[CF_HOST_LEN], port[16];
	struct addrinfo hints = { 0 }, *res = NULL, *ai;
	int p, fd = -1, rc, one = 1, soerr = 0;
	socklen_t sl = sizeof(soerr);
	pc_conn *c;

	*out = NULL;
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
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		close(fd);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	c->fd = fd;
	c->next_id = 1;
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	*out = c;
	return KN_OK;
}

void
pc_close(pc_conn *c)
{
	if (c == NULL)
		return;
	close(c->fd);
	free(c);
}

int
pc_send(pc_conn *c, const pc_request *r, uint64_t *id, char *err)
{
	pl_frame f = { .type = PL_GEN };
	char *buf;
	size_t len, off = 0;
	int rc;

	f.id = c->next_id++;
	f.mode = r->mode;
	f.length = r->length;
	f.steps = r->steps;
	f.temperature = r->temperature;
	f.seed = r->seed;
	f.data = (unsigned char *)r->prompt;
	f.data_len = r->prompt_len;
	if ((rc = pl_frame_encode(&f, &buf, &len, err)) != 0)
		return rc;
	while (off < len) {
		ssize_t k = send(c->fd, buf + off, len - off, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			free(buf);
			return kn_error(err, KN_EIO, "sending to %.100s: %s",
			    c->addr, strerror(errno));
		}
		off += (size_t)k;
	}
	free(buf);
	if (id != NULL)
		*id = f.id;
	return KN_OK;
}

/* Reads exactly n bytes by the deadline (ms on the monotonic clock). */
static int
read_full(pc_conn *c, char *p, size_t n, double deadline, char *err)
{
	while (n > 0) {
		struct pollfd pfd = { c->fd, POLLIN, 0 };
		double left = deadline - now_ms();
		ssize_t k;

		if (left <= 0 || poll(&pfd, 1, (int)left + 1) == 0)
			return kn_error(err, PC_ETIMEDOUT, "no answer from %.100s "
			    "in time", c->addr);
		k = recv(c->fd, p, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			return kn_error(err, KN_EIO, "%.100s closed the "
			    "connection", c->addr);
		if (k < 0)
			return kn_error(err, KN_EIO, "reading from %.100s: %s",
			    c->addr, strerror(errno));
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

int
pc_recv(pc_conn *c, pc_result *res, int timeout_ms, char *err)
{
	double deadline = now_ms() + timeout_ms;
	unsigned char hdr[PL_HEADER];
	uint32_t len;
	char *body;
	pl_frame f;
	int rc;

	memset(res, 0, sizeof(*res));
	if ((rc = read_full(c, (char *)hdr, PL_HEADER, deadline, err)) != 0)
		return rc;
	len = pl_frame_length(hdr);
	if (len == 0 || len > PL_FRAME_DEFAULT)
		return kn_error(err, KN_EIO, "%.100s sent a frame of %u bytes",
		    c->addr, len);
	if ((body = malloc(len)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	if ((rc = read_full(c, body, len, deadline, err)) == 0)
		rc = pl_frame_decode(body, len, &f, err);
	free(body);
	if (rc != 0)
		return rc;
	res->id = f.id;
	res->frame_bytes = PL_HEADER + len;
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
pc_generate(const char *addr, const pc_request *r, pc_result *res,
    int timeout_ms, char *err)
{
	pc_conn *c;
	int rc;

	memset(res, 0, sizeof(*res));
	if ((rc = pc_connect(&c, addr, timeout_ms, err)) != 0)
		return rc;
	if ((rc = pc_send(c, r, NULL, err)) == 0)
		rc = pc_recv(c, res, timeout_ms, err);
	pc_close(c);
	return rc;
}
