/* Fuzz target: the daemon's HTTP side, bytes in to responses out.  Each
 * input is what a client sends on one TCP connection to the real server
 * (daemon/net/http_server.c) in front of the real API (daemon/node/api.c, and
 * daemon/rounds/rounds.c below it, which decodes POSTed updates): the target
 * connects over loopback, writes the input, half-closes, and reads until
 * the server has closed.  The daemon behind the API is a node set up by
 * hand (a spec, a peer list, a checkpoint, a rounds object with two
 * replicas) without its trainer thread or its peers. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <uv.h>

#include "daemon/node/api.h"
#include "daemon/core/log.h"
#include "daemon/node/node.h"
#include "kernels/clock.h"
#include "proto/checkpoint.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "http";

/* A peer id per line; the addresses are never dialled. */
#define PEER_LIST \
	"127.0.0.1:41001 1 AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-" \
	"AAAA-AAAA-AAAA-AAAA\n" \
	"127.0.0.1:41002 1 BBBB-BBBB-BBBB-BBBB-BBBB-BBBB-BBBB-BBBB-BBBB-" \
	"BBBB-BBBB-BBBB-BBBA\n" \
	"127.0.0.1:41003 2 CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-CCCC-" \
	"CCCC-CCCC-CCCC-CCCA\n" \
	"client DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-DDDD-" \
	"DDDD-DDDQ operator\n"
/* A server that has not closed a connection this long after the client's
 * FIN has stalled: a finding, not a slow input. */
#define STALL_MS 5000

static struct {
	int ready;
	uv_loop_t loop;
	node n;
	hs_server *http;
	int port;
	struct sockaddr_in addr;
} fz;

/* One exchange, driven from the loop. */
struct client {
	int fd;
	uv_poll_t poll;
	const uint8_t *data;
	size_t size, sent;
	int shut, done, stalled;
};

static double
now(void *arg)
{
	(void)arg;
	return kn_now();
}

static void
meter(void *arg, int peer, int kind, uint64_t in, uint64_t out)
{
	node_meter(arg, peer, kind, in, out);
}

static void
journal(void *arg, const char *line)
{
	(void)arg;
	(void)line;
}

/* Updates arrive for a round no trainer takes part in: nothing is ever
 * committed. */
static void
commit(void *arg, rounds_outcome *o)
{
	int i;

	(void)arg;
	for (i = 0; i < o->count; i++)
		free(o->update[i]);
	for (i = 0; i < o->extras; i++)
		free(o->extra[i]);
	free(o->ckpt);
}

static void
setup_fail(const char *what, const char *err)
{
	fz_fail("set-up: %s: %s", what, err);
}

/* The node's run, peers and checkpoint, as node_setup would leave them. */
static void
setup_node(node *n)
{
	float params[FZ_PARAMS];
	char *ckpt;
	pr_ckpt_meta meta = { .block = 1, .kind = "block", .step = 7,
	    .round = 2 };
	char err[PR_ERR_LEN];
	int i;

	cf_defaults(&n->cfg);
	n->cfg.block = 1;
	snprintf(n->cfg.advertise, sizeof(n->cfg.advertise),
	    "127.0.0.1:41001");
	if (pr_spec_parse(&n->spec, fz_http_spec, strlen(fz_http_spec),
	    err) != 0 ||
	    pr_spec_run_id(&n->spec, n->run_id, err) != 0 ||
	    pr_spec_encode(&n->spec, &n->spec_body, &n->spec_len, err) != 0)
		setup_fail("spec", err);
	if (peers_load(&n->peers, fz_file((const uint8_t *)PEER_LIST,
	    sizeof(PEER_LIST) - 1), err) != 0)
		setup_fail("peer list", err);
	n->peers.v[0].self = 1;
	n->peers.v[1].state = PEERS_UP;
	n->peers.v[1].last_seen = kn_now();
	n->self = 0;
	n->replica = 0;
	n->replicas = 2;
	snprintf(n->backend_desc, sizeof(n->backend_desc), "cpu (fuzz)");
	n->report.state = "training";
	n->report.started = kn_now();
	for (i = 0; i < FZ_PARAMS; i++)
		params[i] = 0.25f * (float)i;
	snprintf(meta.run_id, sizeof(meta.run_id), "%s", n->run_id);
	if (pr_ckpt_encode(&meta, fz_tensors, FZ_NTENSORS, params, &ckpt,
	    &n->ckpt.len, err) != 0 ||
	    pr_ckpt_sha256_hex(ckpt, n->ckpt.len, n->ckpt.etag, err) != 0)
		setup_fail("checkpoint", err);
	if ((n->ckpt.body = hs_shared_new(ckpt, n->ckpt.len)) == NULL)
		setup_fail("checkpoint", "out of memory");
	n->ckpt.data = ckpt;
	n->ckpt.step = meta.step;
	n->ckpt.round = meta.round;
}

static void
setup(void)
{
	hs_config hcfg;
	rounds_config rc = { 0 };
	char err[PR_ERR_LEN];
	node *n = &fz.n;

	log_init(1, 0, "fuzz_http");
	if (uv_loop_init(&fz.loop) != 0)
		setup_fail("loop", "uv_loop_init");
	setup_node(n);
	n->loop = &fz.loop;
	if (hc_client_new(&n->client, &fz.loop, err) != 0)
		setup_fail("client", err);
	rc.loop = &fz.loop;
	rc.client = n->client;
	rc.peers = &n->peers;
	rc.block = 1;
	rc.replica = 0;
	rc.replicas = 2;
	rc.run_id = n->run_id;
	rc.advertise = n->cfg.advertise;
	rc.count = FZ_PARAMS;
	rc.enc = PR_ENC_F32;
	rc.round_deadline = 30;
	rc.outer_lr = 0.7;
	rc.peer_timeout_ms = 1000;
	rc.ops = (rounds_ops){ .now = now, .meter = meter, .journal = journal,
	    .commit = commit };
	rc.arg = n;
	if (rounds_new(&n->training.rounds, &rc, err) != 0)
		setup_fail("rounds", err);
	rounds_on_checkpoint(n->training.rounds, n->ckpt.step, n->ckpt.round,
	    n->ckpt.etag);
	/* the daemon's limits, with a body cap the corpus can reach */
	hs_config_defaults(&hcfg);
	hcfg.max_body_bytes = 1 << 16;
	hcfg.max_header_bytes = 4096;
	hcfg.on_exchange = api_on_exchange;
	if (hs_server_new(&fz.http, &fz.loop, &hcfg, api_handle, n, err) != 0 ||
	    hs_server_listen(fz.http, "127.0.0.1", 0, err) != 0)
		setup_fail("server", err);
	fz.port = hs_server_port(fz.http);
	fz.addr.sin_family = AF_INET;
	fz.addr.sin_port = htons((uint16_t)fz.port);
	fz.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fz.ready = 1;
}

/* Writes what the socket takes, half-closes once all is sent, and reads
 * (and drops) the responses until the server's FIN or a reset. */
static void
on_poll(uv_poll_t *h, int status, int events)
{
	struct client *c = h->data;
	char buf[16384];
	ssize_t n;

	if (status < 0)
		events = UV_READABLE;   /* an error: the read says which */
	if ((events & UV_WRITABLE) && !c->shut) {
		n = send(c->fd, c->data + c->sent, c->size - c->sent,
		    MSG_NOSIGNAL);
		if (n > 0)
			c->sent += (size_t)n;
		if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
		    c->sent == c->size) {
			/* all sent, or the server stopped reading */
			shutdown(c->fd, SHUT_WR);
			c->shut = 1;
			uv_poll_start(h, UV_READABLE, on_poll);
		}
	}
	if (events & UV_READABLE) {
		while ((n = recv(c->fd, buf, sizeof(buf), 0)) > 0)
			;
		if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			c->done = 1;
			uv_poll_stop(h);
		}
	}
}

static void
on_stall(uv_timer_t *t)
{
	struct client *c = t->data;

	c->stalled = 1;
}

static void
exchange(const uint8_t *data, size_t size)
{
	struct client c = { .data = data, .size = size };
	uv_timer_t stall;

	c.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c.fd < 0 || (connect(c.fd, (struct sockaddr *)&fz.addr,
	    sizeof(fz.addr)) != 0 && errno != EINPROGRESS)) {
		perror("fuzz_http: connect");
		abort();
	}
	c.shut = size == 0;
	if (c.shut)
		shutdown(c.fd, SHUT_WR);
	uv_poll_init_socket(&fz.loop, &c.poll, c.fd);
	c.poll.data = &c;
	uv_poll_start(&c.poll, c.shut ? UV_READABLE :
	    UV_READABLE | UV_WRITABLE, on_poll);
	uv_timer_init(&fz.loop, &stall);
	stall.data = &c;
	uv_timer_start(&stall, on_stall, STALL_MS, 0);
	while (!c.done && !c.stalled)
		uv_run(&fz.loop, UV_RUN_ONCE);
	if (c.stalled)
		fz_fail("the server neither answered nor closed within %d ms "
		    "(%zu of %zu bytes sent)", STALL_MS, c.sent, c.size);
	/* the server answered and closed before it had read everything */
	if (!c.shut)
		shutdown(c.fd, SHUT_WR);
	uv_close((uv_handle_t *)&c.poll, NULL);
	/* the connection's handles close on later turns of the loop */
	while (hs_server_connections(fz.http) > 0 && !c.stalled)
		uv_run(&fz.loop, UV_RUN_ONCE);
	if (c.stalled)
		fz_fail("the server kept the connection open %d ms after the "
		    "client's FIN", STALL_MS);
	uv_close((uv_handle_t *)&stall, NULL);
	uv_run(&fz.loop, UV_RUN_NOWAIT);
	close(c.fd);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!fz.ready)
		setup();
	exchange(data, size);
	return 0;
}
