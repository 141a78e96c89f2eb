/* The time of one update exchange between two replicas (rounds.c over
 * real sockets, plain TCP) with update_streams 1 or more, for the
 * planner's network options.  Both replicas live in this process; each
 * reaches the other at the address given, which may be a wan-relay in
 * front of it (scripts/bench/streams runs it both ways).  An exchange
 * is timed from both updates being ready to the last answer to a part of
 * either: both updates delivered.  Not a test: it prints figures.
 *   streams-bench --port0 P --port1 P [--via0 H:P --via1 H:P]
 *       [--count N] [--streams K] [--chunk BYTES] [--rounds R] */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/log.h"
#include "daemon/core/peers.h"
#include "daemon/rounds/rounds.h"
#include "kernels/clock.h"
#include "kernels/error.h"

#define RUN_ID "0000000000000000000000000000000000000000000000000000000000000000"

struct replica {
	hs_server *http;
	hc_client *client;
	peers_list peers;
	rounds *r;
	char addr[64];          /* ours, as the other reaches us */
	int commits;
	double last_push;       /* the last answer to our update's parts */
};

static uv_loop_t loop;
static struct replica rep[2];

static void
die(const char *what)
{
	fprintf(stderr, "streams-bench: %s\n", what);
	exit(1);
}

static double
clock_now(void *arg)
{
	(void)arg;
	return kn_now();
}

static void
on_meter(void *arg, int peer, int kind, uint64_t in, uint64_t out)
{
	struct replica *x = arg;

	(void)peer;
	(void)in;
	(void)out;
	if (kind == PEERS_KIND_UPDATE)
		x->last_push = kn_now();
}

static void
on_journal(void *arg, const char *line)
{
	(void)arg;
	(void)line;
}

static void
on_commit(void *arg, rounds_outcome *o)
{
	struct replica *x = arg;
	int i;

	for (i = 0; i < o->count; i++)
		free(o->update[i]);
	for (i = 0; i < o->extras; i++)
		free(o->extra[i]);
	free(o->ckpt);
	x->commits++;
	rounds_on_checkpoint(x->r, 0, o->round + 1, "");
}

static void
handler(void *ctx, const hs_request *req, hs_response *res)
{
	struct replica *x = ctx;
	long long round;
	int used = 0;

	if (sscanf(req->path, "/v1/blocks/1/rounds/%lld/%n", &round,
	    &used) == 1 && used > 0 &&
	    rounds_handle(x->r, req, res, round, req->path + used))
		return;
	hs_response_text(res, 404, "no such resource");
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "port0", required_argument, NULL, 'p' },
		{ "port1", required_argument, NULL, 'P' },
		{ "via0", required_argument, NULL, 'v' },
		{ "via1", required_argument, NULL, 'V' },
		{ "count", required_argument, NULL, 'n' },
		{ "streams", required_argument, NULL, 's' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "rounds", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 }
	};
	char err[KN_ERR_LEN], peers_path[64];
	char text[256], via[2][64] = { "", "" };
	int port[2] = { 0, 0 }, streams = 1, nrounds = 5, ch, k, fd;
	size_t count = (size_t)1 << 20, chunk = (size_t)1 << 20, i;
	double *took, t0;
	float *delta;
	FILE *f;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'p': port[0] = atoi(optarg); break;
		case 'P': port[1] = atoi(optarg); break;
		case 'v': snprintf(via[0], sizeof(via[0]), "%s", optarg); break;
		case 'V': snprintf(via[1], sizeof(via[1]), "%s", optarg); break;
		case 'n': count = strtoull(optarg, NULL, 10); break;
		case 's': streams = atoi(optarg); break;
		case 'c': chunk = strtoull(optarg, NULL, 10); break;
		case 'r': nrounds = atoi(optarg); break;
		default: die("usage: streams-bench --port0 P --port1 P "
		    "[--via0 H:P --via1 H:P] [--count N] [--streams K] "
		    "[--chunk B] [--rounds R]");
		}
	}
	if (port[0] <= 0 || port[1] <= 0 || nrounds < 1 || count == 0)
		die("--port0 and --port1 are needed");
	log_init(0, 0, "streams-bench");
	if (uv_loop_init(&loop) != 0)
		die("uv_loop_init");
	for (k = 0; k < 2; k++) {
		if (via[k][0] == '\0')
			snprintf(via[k], sizeof(via[k]), "127.0.0.1:%d", port[k]);
		snprintf(rep[k].addr, sizeof(rep[k].addr), "%s", via[k]);
	}
	/* this process's own file: created here, refused if it exists */
	snprintf(peers_path, sizeof(peers_path), "/tmp/streams-bench.%ld",
	    (long)getpid());
	if ((fd = open(peers_path, O_WRONLY | O_CREAT | O_EXCL, 0600)) < 0 ||
	    (f = fdopen(fd, "w")) == NULL)
		die("cannot write the peer list");
	snprintf(text, sizeof(text), "%s 1\n%s 1\n", via[0], via[1]);
	fputs(text, f);
	fclose(f);
	for (k = 0; k < 2; k++) {
		hs_config hcfg;
		rounds_config rc = {
			.loop = &loop, .peers = &rep[k].peers, .block = 1,
			.replica = k, .replicas = 2, .run_id = RUN_ID,
			.advertise = rep[k].addr, .count = count,
			.enc = PR_ENC_F32, .comp = PR_COMP_NONE,
			.round_deadline = 600, .outer_lr = 0.7,
			.peer_timeout_ms = 5000, .streams = streams,
			.chunk = chunk,
			.ops = { clock_now, on_meter, on_journal, on_commit },
			.arg = &rep[k],
		};

		hs_config_defaults(&hcfg);
		hcfg.max_body_bytes = count * 4 + (1 << 20);
		if (hs_server_new(&rep[k].http, &loop, &hcfg, handler, &rep[k],
		    err) != 0 || hs_server_listen(rep[k].http, "127.0.0.1",
		    port[k], err) != 0 ||
		    hc_client_new(&rep[k].client, &loop, err) != 0 ||
		    peers_load(&rep[k].peers, peers_path, err) != 0)
			die(err);
		for (i = 0; i < (size_t)rep[k].peers.n; i++) {
			rep[k].peers.v[i].self = (int)i == k;
			rep[k].peers.v[i].state = PEERS_UP;
			rep[k].peers.v[i].last_seen = 1;
		}
		rc.client = rep[k].client;
		if (rounds_new(&rep[k].r, &rc, err) != 0)
			die(err);
	}
	unlink(peers_path);
	if ((delta = malloc(count * sizeof(float))) == NULL ||
	    (took = calloc((size_t)nrounds, sizeof(double))) == NULL)
		die("out of memory");
	for (i = 0; i < count; i++)
		delta[i] = 1e-3f * (float)((i * 2654435761u) % 1000) - 0.5f;
	for (k = 0; k < nrounds; k++) {
		int want = k + 1;

		t0 = kn_now();
		rounds_on_update(rep[0].r, k, 10 * (k + 1), delta, count);
		rounds_on_update(rep[1].r, k, 10 * (k + 1), delta, count);
		while (rep[0].commits < want || rep[1].commits < want)
			uv_run(&loop, UV_RUN_ONCE);
		took[k] = (rep[0].last_push > rep[1].last_push ?
		    rep[0].last_push : rep[1].last_push) - t0;
		printf("round %d: %.1f ms\n", k, took[k] * 1e3);
	}
	if (nrounds > 1)
		qsort(took + 1, (size_t)nrounds - 1, sizeof(double), cmp_double);
	printf("streams %d chunk %zu update %zu bytes: first %.1f ms, median "
	    "of the rest %.1f ms\n", streams, chunk, count * 4 + 0,
	    took[0] * 1e3, took[nrounds > 1 ? 1 + (nrounds - 1) / 2 : 0] * 1e3);
	return 0;
}
