/* The round protocol of rounds.c, driven in one process: three replicas
 * of block 1, each with its own rounds, HTTP server and client on
 * loopback, its own peer list and its own view of the others' health, and
 * one clock the test can move forward.  The "trainer" of each replica is
 * a vector of weights here: an average is applied to it, a checkpoint is
 * its bytes.  Covers the coordinator's choice, a member missing the
 * deadline, catch-up, a split round and its healing, the status of an
 * update that cannot be stored for want of memory, rounds in int8
 * (with and without zstd) with error feedback, an update for the next
 * round held rather than refused, and updates sent in parts
 * on parallel connections (update_streams) with the receiver's refusals
 * of parts that do not fit, and a slow link between two followers (two
 * wan-relays) over which each update still comes once, not also
 * fetched from the coordinator. */
#include "config.h"

#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/log.h"
#include "daemon/core/peers.h"
#include "daemon/rounds/rounds.h"
#include "daemon/net/tls.h"
#include "kernels/average.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "proto/update.h"
#include "tests/testutil.h"

/* The out-of-memory case asks malloc for more than any machine has: it
 * must return NULL under AddressSanitizer too, not abort. */
const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}

#define NREP 3
#define COUNT 96                /* floats in an update */
#define DEADLINE 30.0           /* seconds of the test's clock */
#define OUTER_LR 0.7f
#define CKPT_HEAD 16            /* step and round before the weights */
#define RUN_ID "5e1f0c3a9d7b2e4f6a8c0d1e3f5a7b9c2d4e6f8a0b1c3d5e7f9a1b2c3d4e5f60"

struct replica {
	int k;
	hs_server *http;
	hc_client *client;
	tls_ctx *tls;
	int port;
	char addr[64];
	peers_list peers;
	rounds *r;
	/* the trainer */
	float theta[COUNT];
	int64_t step, round;
	int commits, avg_commits, ckpt_commits, none_commits;
	char journal[512];
	uint64_t metered[NREP];         /* bytes, by replica of the peer */
	int update_calls[NREP];         /* update exchanges metered, likewise */
	int posts_from[NREP];           /* POSTs of updates it received */
	int parts_from[NREP];           /* of them, parts */
	int fetches_from[NREP];         /* GETs of an update it answered */
	int refuse_from[NREP];          /* a partition: 503 to these */
	int quarantined[NREP];          /* rounds_ops.quarantined says so */
	int lies_over;                  /* answers every update "over" */
	int refused[NREP];              /* rounds_ops.refused, by replica */
};

static uv_loop_t loop;
static struct replica rep[NREP];
static char dir[64];
static double skew;             /* the test's clock runs ahead by this */
/* how the replicas send their updates: set by the fixture */
static pr_encoding setup_enc = PR_ENC_F32;
static pr_compression setup_comp = PR_COMP_NONE;
static int setup_streams = 1;
static size_t setup_chunk;
static size_t setup_max_assembly;
static int closed_count;

static double
fake_now(void *arg)
{
	(void)arg;
	return kn_now() + skew;
}

static int
replica_of_peer(const struct replica *x, int peer)
{
	return peer >= 0 && peer < x->peers.n ?
	    peers_replica_index(&x->peers, peer) : -1;
}

static void
on_meter(void *arg, int peer, int kind, uint64_t in, uint64_t out)
{
	struct replica *x = arg;
	int k = replica_of_peer(x, peer);

	ck_assert_int_ge(k, 0);
	x->metered[k] += in + out;
	x->update_calls[k] += kind == PEERS_KIND_UPDATE;
}

static void
on_refused(void *arg, int peer, int kind, const char *why)
{
	struct replica *x = arg;
	int k = replica_of_peer(x, peer);

	(void)why;
	ck_assert_int_ge(k, 0);
	ck_assert_int_ge(kind, ROUNDS_REFUSED_UPDATE);
	ck_assert_int_le(kind, ROUNDS_REFUSED_CLAIM);
	x->refused[k]++;
}

static int
on_quarantined(void *arg, int peer)
{
	struct replica *x = arg;
	int k = replica_of_peer(x, peer);

	return k >= 0 && x->quarantined[k];
}

static void
on_journal(void *arg, const char *line)
{
	struct replica *x = arg;

	snprintf(x->journal, sizeof(x->journal), "%s", line);
}

static void
sha_of(const struct replica *x, char hex[65])
{
	char err[KN_ERR_LEN];

	ck_assert_int_eq(pr_ckpt_sha256_hex((const char *)x->theta,
	    sizeof(x->theta), hex, err), 0);
}

/* What the trainer does with the outcome: the outer step with the plain
 * mean of the members' updates (the protocol's part ends at handing
 * them on: the checks and the robust combination are the trainer's,
 * tests/check_verify.c), or the adopted checkpoint; then it reports its
 * new checkpoint to the rounds. */
static void
on_commit(void *arg, rounds_outcome *o)
{
	struct replica *x = arg;
	const float *list[NREP];
	float *avg = NULL, lr = o->outer_lr;
	char hex[65], *ckpt = o->ckpt;
	size_t len = o->len;
	int i;

	ck_assert_int_le(o->count, NREP);
	x->commits++;
	if (o->count > 0) {
		avg = malloc(sizeof(x->theta));
		ck_assert_ptr_nonnull(avg);
		for (i = 0; i < o->count; i++) {
			list[i] = o->update[i];
			ck_assert_int_eq(replica_of_peer(x, o->peer[i]),
			    o->replica[i]);
		}
		kn_average(avg, list, o->count, COUNT);
		for (i = 0; i < o->count; i++)
			free(o->update[i]);
	}
	for (i = 0; i < o->extras; i++)
		free(o->extra[i]);
	if (avg != NULL) {
		for (i = 0; i < COUNT; i++)
			x->theta[i] -= lr * avg[i];
		x->round = o->round + 1;
		x->avg_commits++;
	} else if (ckpt != NULL) {
		ck_assert_uint_eq(len, CKPT_HEAD + sizeof(x->theta));
		memcpy(&x->step, ckpt, 8);
		memcpy(&x->round, ckpt + 8, 8);
		memcpy(x->theta, ckpt + CKPT_HEAD, sizeof(x->theta));
		x->ckpt_commits++;
	} else {
		x->round = o->round + 1;
		x->none_commits++;
	}
	free(avg);
	free(ckpt);
	sha_of(x, hex);
	rounds_on_checkpoint(x->r, x->step, x->round, hex);
}

static int
from_replica(const hs_request *req)
{
	const char *from = strstr(req->query, "from=");
	int k;

	for (k = 0; from != NULL && k < NREP; k++)
		if (strcmp(from + 5, rep[k].addr) == 0)
			return k;
	return -1;
}

static void
handler(void *ctx, const hs_request *req, hs_response *res)
{
	struct replica *x = ctx;
	long long round;
	int used = 0, from = from_replica(req);

	if (from >= 0 && x->refuse_from[from]) {
		hs_response_text(res, 503, "partitioned");
		return;
	}
	if (from >= 0 && strcmp(req->method, "POST") == 0 &&
	    strstr(req->path, "/updates") != NULL) {
		x->posts_from[from]++;
		x->parts_from[from] += strstr(req->query, "parts=") != NULL;
	}
	if (from >= 0 && strcmp(req->method, "GET") == 0 &&
	    strstr(req->path, "/updates/") != NULL)
		x->fetches_from[from]++;
	if (x->lies_over && strcmp(req->method, "POST") == 0) {
		hs_response_text(res, 409, "round is over; fetch the checkpoint");
		hs_response_header(res, ROUNDS_STATE_HEADER, ROUNDS_STATE_OVER);
		return;
	}
	if (strcmp(req->path, "/v1/blocks/1/checkpoint") == 0) {
		char *body = malloc(CKPT_HEAD + sizeof(x->theta));

		memcpy(body, &x->step, 8);
		memcpy(body + 8, &x->round, 8);
		memcpy(body + CKPT_HEAD, x->theta, sizeof(x->theta));
		hs_response_status(res, 200);
		hs_response_body_owned(res, "application/x-msgpack", body,
		    CKPT_HEAD + sizeof(x->theta));
		return;
	}
	if (sscanf(req->path, "/v1/blocks/1/rounds/%lld/%n", &round,
	    &used) == 1 && used > 0 &&
	    rounds_handle(x->r, req, res, round, req->path + used))
		return;
	hs_response_text(res, 404, "no such resource");
}

static void
on_closed(void *arg)
{
	(void)arg;
	closed_count++;
}

static void
on_tick(uv_timer_t *t)
{
	(void)t;
}

/* Runs the loop until cond() holds or 20 s of real time have passed. */
static int
run_until(int (*cond)(void))
{
	uv_timer_t tick;
	double end = kn_now() + 20.0;
	int ok;

	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, on_tick, 10, 10);
	while (!(ok = cond()) && kn_now() < end)
		uv_run(&loop, UV_RUN_ONCE);
	uv_timer_stop(&tick);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	return ok;
}

/* Runs the loop for about secs of real time. */
static void
run_for(double secs)
{
	uv_timer_t tick;
	double end = kn_now() + secs;

	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, on_tick, 10, 10);
	while (kn_now() < end)
		uv_run(&loop, UV_RUN_ONCE);
	uv_timer_stop(&tick);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
}

/* The TLS layer's question: a daemon of the peer list. */
static int
allow_listed(void *arg, const uint8_t id[ID_BYTES])
{
	const struct replica *r = arg;

	return peers_find_id(&r->peers, id) >= 0;
}

static void
setup(void)
{
	char path[sizeof(dir) + 16], text[1024], err[PR_ERR_LEN];
	char ident[NREP][sizeof(dir) + 16], other[sizeof(dir) + 16];
	int k, i;

	log_init(1, getenv("ROUNDS_DEBUG") != NULL, "check_rounds");
	skew = 0;
	closed_count = 0;
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	memset(rep, 0, sizeof(rep));
	tu_temp_dir(dir, sizeof(dir), "check_rounds");
	for (k = 0; k < NREP; k++) {
		hs_config hcfg;

		rep[k].k = k;
		/* mutual TLS, each replica pinning the others to their ids */
		snprintf(ident[k], sizeof(ident[k]), "%s/rep%d", dir, k);
		ck_assert_int_eq(id_create(ident[k], 0, err), 0);
		ck_assert_int_eq(tls_ctx_new(&rep[k].tls, ident[k], err), 0);
		tls_ctx_set_allow(rep[k].tls, allow_listed, &rep[k]);
		hs_config_defaults(&hcfg);
		hcfg.tls = rep[k].tls;
		ck_assert_int_eq(hs_server_new(&rep[k].http, &loop, &hcfg,
		    handler, &rep[k], err), 0);
		ck_assert_int_eq(hs_server_listen(rep[k].http, "127.0.0.1", 0,
		    err), 0);
		rep[k].port = hs_server_port(rep[k].http);
		snprintf(rep[k].addr, sizeof(rep[k].addr), "127.0.0.1:%d",
		    rep[k].port);
		ck_assert_int_eq(hc_client_new(&rep[k].client, &loop, err), 0);
		hc_client_set_tls(rep[k].client, rep[k].tls);
		for (i = 0; i < COUNT; i++)
			rep[k].theta[i] = 0.01f * (float)i;
	}
	/* one line per replica, plus a peer of another block between them:
	 * replica indexes are not line numbers */
	snprintf(other, sizeof(other), "%s/other", dir);
	text[0] = '\0';
	tu_peer_line(text, sizeof(text), rep[0].port, 1, ident[0]);
	tu_peer_line(text, sizeof(text), 9, 2, other);
	tu_peer_line(text, sizeof(text), rep[1].port, 1, ident[1]);
	tu_peer_line(text, sizeof(text), rep[2].port, 1, ident[2]);
	snprintf(path, sizeof(path), "%s", tu_write_file(dir, "peers", text));
	for (k = 0; k < NREP; k++) {
		rounds_config rc = {
			.loop = &loop, .client = rep[k].client,
			.peers = &rep[k].peers, .block = 1, .replica = k,
			.replicas = NREP, .run_id = RUN_ID,
			.advertise = rep[k].addr, .count = COUNT,
			.enc = setup_enc, .comp = setup_comp,
			.round_deadline = DEADLINE,
			.outer_lr = OUTER_LR, .peer_timeout_ms = 2000,
			.streams = setup_streams, .chunk = setup_chunk,
			.max_assembly = setup_max_assembly,
			.ops = { fake_now, on_meter, on_journal, on_commit, on_refused,
		    on_quarantined },
			.arg = &rep[k],
		};

		ck_assert_int_eq(peers_load(&rep[k].peers, path, err), 0);
		for (i = 0; i < rep[k].peers.n; i++) {
			rep[k].peers.v[i].self =
			    strcmp(rep[k].peers.v[i].addr, rep[k].addr) == 0;
			rep[k].peers.v[i].state = PEERS_UP;
			rep[k].peers.v[i].last_seen = 1;
		}
		ck_assert_int_eq(rounds_new(&rep[k].r, &rc, err), 0);
	}
}

static void
teardown(void)
{
	int k;

	for (k = 0; k < NREP; k++) {
		rounds_free(rep[k].r);
		hs_server_close(rep[k].http, on_closed, NULL);
		hc_client_close(rep[k].client, on_closed, NULL);
	}
	while (closed_count < 2 * NREP)
		uv_run(&loop, UV_RUN_ONCE);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
	for (k = 0; k < NREP; k++) {
		peers_free(&rep[k].peers);
		tls_ctx_free(rep[k].tls);
	}
	tu_remove_dir(dir);
}

/* Replica k's update for its current round: distinct for each replica
 * and round. */
static void
update_of(int k, int64_t round, float *delta)
{
	int i;

	for (i = 0; i < COUNT; i++)
		delta[i] = 0.001f * (float)((k + 1) * (i % 7) - 3) +
		    0.0001f * (float)round;
}

static void
send_update(int k)
{
	float delta[COUNT];

	update_of(k, rep[k].round, delta);
	rep[k].step += 10;
	rounds_on_update(rep[k].r, rep[k].round, rep[k].step, delta, COUNT);
}

/* The weights every member should hold after averaging members' updates
 * of round, from theta0, in replica order as the protocol does. */
static void
expected_after(const float *theta0, uint64_t members, int64_t round,
    float *out)
{
	float d[NREP][COUNT], avg[COUNT];
	const float *list[NREP];
	int k, m = 0, i;

	for (k = 0; k < NREP; k++)
		if (members & (1u << k)) {
			update_of(k, round, d[k]);
			list[m++] = d[k];
		}
	kn_average(avg, list, m, COUNT);
	for (i = 0; i < COUNT; i++)
		out[i] = theta0[i] - OUTER_LR * avg[i];
}

static int want_commits[NREP];

static int
commits_reached(void)
{
	int k;

	for (k = 0; k < NREP; k++)
		if (rep[k].commits < want_commits[k])
			return 0;
	return 1;
}

static void
wait_commits(int c0, int c1, int c2)
{
	want_commits[0] = c0;
	want_commits[1] = c1;
	want_commits[2] = c2;
	ck_assert_msg(run_until(commits_reached), "commits %d %d %d, want "
	    "%d %d %d", rep[0].commits, rep[1].commits, rep[2].commits, c0,
	    c1, c2);
}

static void
set_state(int viewer, int k, peers_state s)
{
	int line = k == 0 ? 0 : k + 1;	/* the peer of block 2 is line 1 */

	ck_assert_int_eq(peers_replica_index(&rep[viewer].peers, line), k);
	rep[viewer].peers.v[line].state = s;
}

static void
assert_same_weights(int a, int b)
{
	ck_assert_msg(memcmp(rep[a].theta, rep[b].theta,
	    sizeof(rep[a].theta)) == 0, "replicas %d and %d differ", a, b);
}

/* The requests each update took to each replica, as the fixture's
 * update_streams and update_chunk should make them: an f32 update of
 * COUNT floats is COUNT * 4 bytes and some, so chunks of 64 bytes give
 * four parts, chunks of 1 MiB one. */
static int
parts_expected(void)
{
	if (setup_streams <= 1 || setup_chunk >= (size_t)1 << 20)
		return 1;
	ck_assert_uint_le(setup_chunk * (size_t)setup_streams, COUNT * 4);
	return setup_streams;
}

/* Each replica sent each other one update in n requests and received
 * as many; the sender metered each (and any fetch besides). */
static void
assert_requests(int n)
{
	int j, k;

	for (j = 0; j < NREP; j++)
		for (k = 0; k < NREP; k++) {
			if (j == k)
				continue;
			ck_assert_int_eq(rep[k].posts_from[j], n);
			ck_assert_int_eq(rep[k].parts_from[j], n > 1 ? n : 0);
			ck_assert_int_ge(rep[j].update_calls[k], n);
		}
}

START_TEST(test_all_members)
{
	float theta0[COUNT], want[COUNT];
	int k;

	memcpy(theta0, rep[0].theta, sizeof(theta0));
	for (k = 0; k < NREP; k++)
		send_update(k);
	wait_commits(1, 1, 1);
	expected_after(theta0, 7, 0, want);
	for (k = 0; k < NREP; k++) {
		ck_assert_int_eq(rep[k].avg_commits, 1);
		ck_assert_int_eq(rep[k].round, 1);
		ck_assert(memcmp(rep[k].theta, want, sizeof(want)) == 0);
	}
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x7 coordinator 0");
	/* every exchange was charged to the replica it was with */
	ck_assert_uint_gt(rep[0].metered[1], 0);
	ck_assert_uint_gt(rep[0].metered[2], 0);
	ck_assert_uint_gt(rep[2].metered[0], 0);
	assert_requests(parts_expected());
}
END_TEST

/* Replica 0 is down for the others: replica 1, the next up, coordinates,
 * and does not wait for the one that is down. */
START_TEST(test_coordinator_choice)
{
	float theta0[COUNT], want[COUNT];

	memcpy(theta0, rep[1].theta, sizeof(theta0));
	set_state(1, 0, PEERS_DOWN);
	set_state(2, 0, PEERS_DOWN);
	send_update(1);
	send_update(2);
	wait_commits(0, 1, 1);
	ck_assert_str_eq(rep[1].journal, "round 0 members 0x6 coordinator 1");
	ck_assert_str_eq(rep[2].journal, "round 0 members 0x6 coordinator 1");
	expected_after(theta0, 6, 0, want);
	ck_assert(memcmp(rep[1].theta, want, sizeof(want)) == 0);
	assert_same_weights(1, 2);
}
END_TEST

/* Replica 0 has answered every request of replica 1's update (a slow
 * machine may take longer than the half second waited first). */
static int
coordinator_has_1(void)
{
	return rep[1].update_calls[0] >= parts_expected();
}

static int
is_active_round_over(void)
{
	return rep[0].commits >= 1 && rep[1].commits >= 1;
}

/* Replica 2 is up but sends nothing: the coordinator waits for it until
 * the deadline of its clock, then commits without it.  Replica 2's late
 * update is refused as over, and it catches up from the coordinator's
 * checkpoint. */
START_TEST(test_deadline_and_catch_up)
{
	send_update(0);
	send_update(1);
	/* half a second of real time: the coordinator still waits */
	run_for(0.5);
	ck_assert_int_eq(rep[0].commits, 0);
	ck_assert_int_eq(rep[1].commits, 0);
	ck_assert(run_until(coordinator_has_1));
	skew += DEADLINE + 1;
	ck_assert(run_until(is_active_round_over));
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x3 coordinator 0");
	assert_same_weights(0, 1);
	/* late: round 0 is over at the others */
	send_update(2);
	wait_commits(1, 1, 1);
	ck_assert_int_eq(rep[2].ckpt_commits, 1);
	ck_assert_int_eq(rep[2].round, 1);
	assert_same_weights(0, 2);
	ck_assert_msg(strstr(rep[2].journal, "round 0 left out: the "
	    "checkpoint of ") == rep[2].journal &&
	    strstr(rep[2].journal, rep[0].addr) != NULL, "journal: %s",
	    rep[2].journal);
}
END_TEST

/* Replica 2 has posted its updates of rounds 0 and 1 to replica 0. */
static int
coordinator_has_2_twice(void)
{
	return rep[2].update_calls[0] >= 2 * parts_expected();
}

/* Replicas 0 and 1 cannot reach each other; replica 2 reaches both.  Each
 * of 0 and 1 believes itself the coordinator, and round 0 splits: 0 and 2
 * average {0, 2}, 1 averages {1, 2}.  Told of the other checkpoint, the
 * replica of higher index gives way and adopts replica 0's weights at its
 * next round; after it all three hold the same weights again. */
START_TEST(test_split_and_heal)
{
	char hex0[65], hex1[65];

	rep[0].refuse_from[1] = rep[1].refuse_from[0] = 1;
	set_state(0, 1, PEERS_DOWN);
	set_state(1, 0, PEERS_DOWN);
	send_update(0);
	send_update(1);
	send_update(2);
	wait_commits(1, 1, 1);
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x5 coordinator 0");
	ck_assert_str_eq(rep[1].journal, "round 0 members 0x6 coordinator 1");
	assert_same_weights(0, 2);
	ck_assert(memcmp(rep[0].theta, rep[1].theta, sizeof(rep[0].theta)));
	ck_assert_int_eq(rep[0].step, rep[1].step);
	ck_assert_int_eq(rep[0].round, rep[1].round);

	/* the partition heals; the probes compare checkpoints */
	rep[0].refuse_from[1] = rep[1].refuse_from[0] = 0;
	set_state(0, 1, PEERS_UP);
	set_state(1, 0, PEERS_UP);
	sha_of(&rep[0], hex0);
	sha_of(&rep[1], hex1);
	/* replica 0 keeps its weights; so does one that compares another
	 * step, or the same weights */
	rounds_diverged(rep[0].r, 2, rep[1].step, rep[1].round, hex1);
	rounds_diverged(rep[1].r, 0, rep[0].step + 1, rep[0].round, hex0);
	rounds_diverged(rep[1].r, 0, rep[0].step, rep[0].round, hex1);
	rounds_diverged(rep[1].r, 0, rep[0].step, rep[0].round, hex0);
	ck_assert_msg(strncmp(rep[1].journal, "round 1 diverged from replica 0 "
	    "(", 33) == 0, "journal: %s", rep[1].journal);

	/* round 1: replica 1 adopts replica 0's checkpoint instead of sending
	 * an update; the coordinator waits for it until the deadline */
	send_update(0);
	send_update(2);
	send_update(1);
	wait_commits(1, 2, 1);
	ck_assert_int_eq(rep[1].ckpt_commits, 1);
	/* replica 2's update is in before the deadline passes: on a loaded
	 * machine its post may still be on the way */
	ck_assert(run_until(coordinator_has_2_twice));
	skew += DEADLINE + 1;
	wait_commits(2, 2, 2);
	ck_assert_str_eq(rep[0].journal, "round 1 members 0x5 coordinator 0");
	assert_same_weights(0, 2);
	/* replica 1 holds round 0's outcome of the others; one more round
	 * brings it level: its update for round 1 is over, so it catches up */
	if (rep[1].round < rep[0].round) {
		send_update(1);
		wait_commits(2, 3, 2);
		ck_assert_int_eq(rep[1].ckpt_commits, 2);
	}
	ck_assert_int_eq(rep[1].round, rep[0].round);
	assert_same_weights(0, 1);
	/* and the next round is whole again */
	send_update(0);
	send_update(1);
	send_update(2);
	wait_commits(3, rep[1].commits + 1, 3);
	ck_assert_str_eq(rep[0].journal, "round 2 members 0x7 coordinator 0");
	assert_same_weights(0, 1);
	assert_same_weights(0, 2);
}
END_TEST

/* Replica 2 is left out of round 0 and is a round behind when the others
 * send their updates for round 1, as a follower is that has not yet seen
 * the commit when the coordinator sends its next update.  Sent whole,
 * they are held there: each is uploaded to it once, not again after a
 * 409 behind and a backoff, and none is fetched later.  In parts they
 * are refused (409 behind, for every part), and once replica 2 has
 * caught up it fetches from the coordinator those the round's end
 * stopped on their way.  Either way round 1 averages all three to the
 * weights computed here. */
START_TEST(test_behind_then_member)
{
	float theta0[COUNT], want[COUNT];
	int k, whole = parts_expected() == 1;

	send_update(0);
	send_update(1);
	ck_assert(run_until(coordinator_has_1));
	skew += DEADLINE + 1;
	ck_assert(run_until(is_active_round_over));
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x3 coordinator 0");
	memcpy(theta0, rep[0].theta, sizeof(theta0));
	send_update(0);
	send_update(1);
	/* a backoff would have offered them again by now (0.1, 0.3 s) */
	run_for(0.5);
	ck_assert_int_eq(rep[0].commits, 1);
	for (k = 0; k < 2 && whole; k++)
		ck_assert_int_eq(rep[2].posts_from[k], 2);
	send_update(2);         /* round 0: over, it adopts the checkpoint */
	wait_commits(1, 1, 1);
	ck_assert_int_eq(rep[2].ckpt_commits, 1);
	ck_assert_int_eq(rep[2].round, 1);
	send_update(2);
	wait_commits(2, 2, 2);
	ck_assert_str_eq(rep[0].journal, "round 1 members 0x7 coordinator 0");
	expected_after(theta0, 7, 1, want);
	for (k = 0; k < NREP; k++)
		ck_assert_msg(memcmp(rep[k].theta, want, sizeof(want)) == 0,
		    "replica %d", k);
	for (k = 0; k < 2 && whole; k++) {
		ck_assert_int_eq(rep[2].posts_from[k], 2);
		ck_assert_int_eq(rep[0].fetches_from[2], 0);
	}
}
END_TEST

/* The link between replicas 1 and 2 goes through two wan-relays (one
 * for the connections each opens to the other) that delay each way by
 * SLOW_LINK_MS; every other link is direct.  Replicas 1 and 2 follow
 * replica 0. */
#define SLOW_LINK_MS "250"
static pid_t relay_pid[2];

static void
stop_relays(void)
{
	tu_stop(&relay_pid[0], SIGTERM, 5);
	tu_stop(&relay_pid[1], SIGTERM, 5);
}

/* Replica viewer reaches replica k through a relay on port, to k. */
static void
slow_route(int i, int viewer, int k, int port)
{
	char listen[32], target[32];
	const char *argv[] = { "wan-relay", "-q", "-d", SLOW_LINK_MS, listen,
	    target, NULL };
	int line = k == 0 ? 0 : k + 1;  /* as set_state */

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(target, sizeof(target), "127.0.0.1:%d", rep[k].port);
	relay_pid[i] = tu_spawn(NULL, tu_wan_relay(), argv);
	ck_assert_msg(tu_wait_port(port, relay_pid[i], 10), "no relay on %s",
	    listen);
	snprintf(rep[viewer].peers.v[line].addr,
	    sizeof(rep[viewer].peers.v[line].addr), "%s", listen);
}

/* Replica 1's update has reached replica 2 over the slow link, and 2's
 * replica 1, every part of it. */
static int
slow_posts_in(void)
{
	return rep[2].posts_from[1] >= parts_expected() &&
	    rep[1].posts_from[2] >= parts_expected();
}

/* The coordinator takes every update over fast links and commits before
 * the pushes between 1 and 2 have crossed the slow link.  Each follower
 * must then wait for the other's own push rather than fetch that update
 * from the coordinator as well: every update reaches every other
 * replica once, as the POST its sender made (whole, or its parts), and
 * the coordinator answers no GET of an update.  The round averages all
 * three to the weights computed here. */
START_TEST(test_slow_link_sent_once)
{
	float theta0[COUNT], want[COUNT];
	int port = tu_port_base(2), parts = parts_expected(), f, k;
	int got[NREP];

	atexit(stop_relays);    /* a failed check exits the test's process */
	slow_route(0, 1, 2, port);
	slow_route(1, 2, 1, port + 1);
	memcpy(theta0, rep[0].theta, sizeof(theta0));
	for (k = 0; k < NREP; k++)
		send_update(k);
	wait_commits(1, 1, 1);
	/* what was on its way over the slow link has come, too */
	ck_assert(run_until(slow_posts_in));
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x7 coordinator 0");
	expected_after(theta0, 7, 0, want);
	for (k = 0; k < NREP; k++)
		ck_assert_msg(memcmp(rep[k].theta, want, sizeof(want)) == 0,
		    "replica %d", k);
	for (f = 1; f < NREP; f++) {
		got[f] = 0;
		for (k = 0; k < NREP; k++)
			got[f] += k != f ? rep[f].posts_from[k] : 0;
		fprintf(stderr, "slow link, %d part(s) an update: replica %d "
		    "took %d POSTs of updates and fetched %d, want %d and 0\n",
		    parts, f, got[f], rep[0].fetches_from[f],
		    (NREP - 1) * parts);
	}
	for (f = 1; f < NREP; f++) {
		ck_assert_msg(rep[0].fetches_from[f] == 0, "replica %d fetched "
		    "%d update(s) from the coordinator that their senders "
		    "pushed to it as well", f, rep[0].fetches_from[f]);
		ck_assert_int_eq(got[f], (NREP - 1) * parts);
	}
	stop_relays();
}
END_TEST

struct answer {
	int done;
	long status;
	char state[16];
	char body[256];
};

static void
on_answer(void *ctx, hc_result *res)
{
	struct answer *a = ctx;

	a->done = 1;
	a->status = res->status;
	snprintf(a->state, sizeof(a->state), "%s", res->header ? res->header :
	    "");
	snprintf(a->body, sizeof(a->body), "%.*s", (int)res->body_len,
	    res->body ? res->body : "");
}

static struct answer *pending;

static int
answered(void)
{
	return pending->done;
}

/* Replica k's update for round in f32 at step 10, encoded. */
static char *
encoded(int k, int64_t round, size_t *len)
{
	pr_update_meta meta = { 0 };
	char err[KN_ERR_LEN], *buf;
	float delta[COUNT];

	update_of(k, round, delta);
	snprintf(meta.run_id, sizeof(meta.run_id), RUN_ID);
	meta.block = 1;
	meta.round = round;
	meta.replica = k;
	meta.step = 10;
	meta.enc = PR_ENC_F32;
	meta.count = COUNT;
	ck_assert_int_eq(pr_update_encode(&meta, delta, &buf, len, err), 0);
	return buf;
}

/* POSTs len bytes to replica to's updates of round, with query q (""
 * for none), over replica from's client (its TLS identity), and waits
 * for the answer. */
static void
post_body(int from, int to, int64_t round, const char *q, const char *body,
    size_t len, struct answer *a)
{
	hc_request_opts o = { 0 };
	char url[512], err[KN_ERR_LEN];

	snprintf(url, sizeof(url), "https://%s/v1/blocks/1/rounds/%" PRId64
	    "/updates%s%s", rep[to].addr, round, q[0] ? "?" : "", q);
	o.method = "POST";
	o.url = url;
	o.pin = tu_port_pin(rep[to].port);
	o.content_type = "application/x-msgpack";
	o.body = body;
	o.body_len = len;
	o.want_header = ROUNDS_STATE_HEADER;
	memset(a, 0, sizeof(*a));
	ck_assert_int_eq(hc_request(rep[from].client, &o, on_answer, a, err),
	    0);
	pending = a;
	ck_assert(run_until(answered));
}

/* POSTs replica 0's encoded update for round to replica k, as a test
 * client would, and waits for the answer. */
static void
post_update(int k, int64_t round, struct answer *a)
{
	size_t len;
	char *buf = encoded(0, round, &len);

	/* replica 0's update, from replica 0: only its own is taken */
	post_body(0, k, round, "", buf, len, a);
	free(buf);
}

/* A 409 says in a header, for the sender's program, whether the round
 * is over or the receiver is behind. */
START_TEST(test_conflict_kinds)
{
	struct answer a;

	post_update(2, 5, &a);
	ck_assert_int_eq(a.status, 409);
	ck_assert_str_eq(a.state, ROUNDS_STATE_BEHIND);
	send_update(0);
	send_update(1);
	send_update(2);
	wait_commits(1, 1, 1);
	post_update(2, 0, &a);
	ck_assert_int_eq(a.status, 409);
	ck_assert_str_eq(a.state, ROUNDS_STATE_OVER);
}
END_TEST

/* An update that cannot be stored for want of memory is answered 503
 * (try again), not 400 (do not resend): here the replica's updates are
 * larger than any machine's memory, so malloc really fails. */
START_TEST(test_out_of_memory_is_503)
{
	rounds_config rc = {
		.loop = &loop, .client = rep[2].client, .peers = &rep[2].peers,
		.block = 1, .replica = 2, .replicas = NREP,
		.run_id = RUN_ID, .advertise = rep[2].addr,
		.count = (size_t)1 << 61, .enc = PR_ENC_F32,
		.round_deadline = DEADLINE, .outer_lr = OUTER_LR,
		.peer_timeout_ms = 2000,
		.ops = { fake_now, on_meter, on_journal, on_commit, on_refused,
		    on_quarantined },
		.arg = &rep[2],
	};
	struct answer a;
	char err[KN_ERR_LEN];

	rounds_free(rep[2].r);
	ck_assert_int_eq(rounds_new(&rep[2].r, &rc, err), 0);
	post_update(2, 0, &a);
	ck_assert_int_eq(a.status, 503);
	ck_assert_msg(strstr(a.body, "out of memory") != NULL, "body: %s",
	    a.body);
}
END_TEST


/* ---- updates in parts (update_streams) ---- */

/* A part of an update, its query written here (not by rounds_parts.c),
 * POSTed from replica from to replica 2 for round 0, unless round says
 * otherwise. */
struct part {
	int from, replica, part, parts;
	int64_t round;
	size_t offset, total;
	const char *sha256;
};

static void
post_part(const struct part *p, const char *body, size_t len,
    struct answer *a)
{
	char q[400];

	snprintf(q, sizeof(q), "replica=%d&part=%d&parts=%d&offset=%zu&"
	    "total=%zu%s%s", p->replica, p->part, p->parts, p->offset,
	    p->total, p->sha256 ? "&sha256=" : "", p->sha256 ? p->sha256 : "");
	post_body(p->from, 2, p->round, q, body, len, a);
}

/* The part is refused with status and a reason holding why, and replica
 * 2 holds as many bytes in parts as before. */
static void
refused_part(const struct part *p, const char *body, size_t len,
    long status, const char *why)
{
	size_t before = rounds_assembling(rep[2].r);
	struct answer a;

	post_part(p, body, len, &a);
	ck_assert_msg(a.status == status && strstr(a.body, why) != NULL,
	    "part %d at %zu of %zu: %ld %s, want %ld ...%s...", p->part,
	    p->offset, p->total, a.status, a.body, status, why);
	ck_assert_uint_eq(rounds_assembling(rep[2].r), before);
}

static void
accepted_part(const struct part *p, const char *body, size_t len,
    const char *why)
{
	struct answer a;

	post_part(p, body, len, &a);
	ck_assert_msg(a.status == 202 && strstr(a.body, why) != NULL,
	    "part %d: %ld %s", p->part, a.status, a.body);
}

/* Replica 2 refuses every part that does not fit, each with its reason
 * and nothing changed; puts replica 0's update together from the parts
 * that do; and drops an assembly left incomplete when the round ends.
 * The round then averages as it would have with whole updates. */
START_TEST(test_malformed_parts)
{
	float theta0[COUNT], want[COUNT];
	char sha[65], zero[65], err[KN_ERR_LEN], *u, *u1, *flipped;
	size_t len, len1, h;
	struct answer a;
	struct part p;

	memcpy(theta0, rep[2].theta, sizeof(theta0));
	u = encoded(0, 0, &len);
	ck_assert_int_eq(pr_ckpt_sha256_hex(u, len, sha, err), 0);
	memset(zero, '0', 64);
	zero[64] = '\0';
	h = len / 2;
	p = (struct part){ 0, 0, 0, 2, 0, 0, len, sha };

	/* named badly: nothing is kept */
	p.parts = 1;
	refused_part(&p, u, h, 400, "parts=1: an update in parts has 2 to 16");
	p.parts = 17;
	refused_part(&p, u, h, 400, "parts=17 is not a number from 0 to 16");
	p.parts = 2;
	p.part = 2;
	refused_part(&p, u, h, 400, "part=2 of parts=2");
	p.part = 0;
	p.sha256 = NULL;
	refused_part(&p, u, h, 400, "sha256= once");
	p.sha256 = sha;
	p.offset = len - 1;
	refused_part(&p, u, h, 400, "does not fit in total=");
	p.offset = 0;
	p.replica = 1;          /* from replica 0 */
	refused_part(&p, u, h, 400, "it names replica 1, but its sender is "
	    "replica 0");
	p.replica = 2;
	refused_part(&p, u, h, 400, "replica=2 is not another replica");
	p.replica = 0;
	p.total = (size_t)1 << 40;
	refused_part(&p, u, h, 413, "larger than the largest one here");
	p.total = len;
	p.round = 5;
	refused_part(&p, u, h, 409, "behind");
	p.round = 0;
	ck_assert_uint_eq(rounds_assembling(rep[2].r), 0);

	/* every byte in, but not the bytes the hash names: dropped */
	p.sha256 = zero;
	accepted_part(&p, u, h, "part 0 of 2 of replica 0's update");
	ck_assert_uint_eq(rounds_assembling(rep[2].r), len);
	p.part = 1;
	p.offset = h;
	post_part(&p, u + h, len - h, &a);
	ck_assert_int_eq(a.status, 400);
	ck_assert_msg(strstr(a.body, "not the sha256=0000000000000000") !=
	    NULL, "%s", a.body);
	ck_assert_uint_eq(rounds_assembling(rep[2].r), 0);

	/* the real one: part 0, then whatever does not fit beside it */
	p.sha256 = sha;
	p.part = 0;
	p.offset = 0;
	accepted_part(&p, u, h, "part 0 of 2");
	ck_assert_uint_eq(rounds_assembling(rep[2].r), len);
	post_part(&p, u, h, &a);        /* again: its answer was lost */
	ck_assert_int_eq(a.status, 409);
	ck_assert_str_eq(a.state, ROUNDS_STATE_HAVE);
	ck_assert_uint_eq(rounds_assembling(rep[2].r), len);
	flipped = malloc(h);
	memcpy(flipped, u, h);
	flipped[h - 1] ^= 1;
	refused_part(&p, flipped, h, 400, "part 0 of 2 came before with other "
	    "bytes");
	free(flipped);
	p.part = 1;
	p.offset = h;
	p.total = len + 1;
	refused_part(&p, u + h, len - h, 400, "but the parts before said");
	p.total = len;
	p.sha256 = zero;
	refused_part(&p, u + h, len - h, 400, "sha256=0000000000000000..., "
	    "but the parts before said");
	p.sha256 = sha;
	p.parts = 3;
	refused_part(&p, u + h, len - h, 400, "parts=3, but the parts before "
	    "said 2");
	p.parts = 2;
	p.offset = h - 1;
	refused_part(&p, u + h - 1, len - h + 1, 400, "overlap part 0");
	p.offset = h;
	accepted_part(&p, u + h, len - h, "update of replica 0 for round 0 "
	    "accepted");
	ck_assert_uint_eq(rounds_assembling(rep[2].r), 0);
	post_part(&p, u + h, len - h, &a);
	ck_assert_int_eq(a.status, 409);
	ck_assert_str_eq(a.state, ROUNDS_STATE_HAVE);

	/* replica 1 starts one and never finishes it */
	u1 = encoded(1, 0, &len1);
	ck_assert_int_eq(pr_ckpt_sha256_hex(u1, len1, sha, err), 0);
	p = (struct part){ 1, 1, 0, 2, 0, 0, len1, sha };
	accepted_part(&p, u1, len1 / 2, "part 0 of 2 of replica 1's update");
	ck_assert_uint_eq(rounds_assembling(rep[2].r), len1);

	/* the round, with whole updates: the same outcome, and nothing in
	 * parts left behind */
	send_update(0);
	send_update(1);
	send_update(2);
	wait_commits(1, 1, 1);
	expected_after(theta0, 7, 0, want);
	ck_assert(memcmp(rep[2].theta, want, sizeof(want)) == 0);
	assert_same_weights(0, 2);
	ck_assert_uint_eq(rounds_assembling(rep[2].r), 0);
	p = (struct part){ 0, 0, 1, 2, 0, h, len, sha };
	refused_part(&p, u + h, len - h, 409, "round 0 is over");
	free(u);
	free(u1);
}
END_TEST

/* The bytes being put together are bounded for all replicas together:
 * a part that would start one beyond it is 503 (try again). */
START_TEST(test_assembly_budget)
{
	rounds_config rc = {
		.loop = &loop, .client = rep[2].client, .peers = &rep[2].peers,
		.block = 1, .replica = 2, .replicas = NREP,
		.run_id = RUN_ID, .advertise = rep[2].addr, .count = COUNT,
		.enc = PR_ENC_F32, .round_deadline = DEADLINE,
		.outer_lr = OUTER_LR, .peer_timeout_ms = 2000,
		.ops = { fake_now, on_meter, on_journal, on_commit, on_refused,
		    on_quarantined },
		.arg = &rep[2],
	};
	char err[KN_ERR_LEN], sha0[65], sha1[65], *u0, *u1;
	size_t len0, len1;
	struct part p;

	u0 = encoded(0, 0, &len0);
	u1 = encoded(1, 0, &len1);
	ck_assert_int_eq(pr_ckpt_sha256_hex(u0, len0, sha0, err), 0);
	ck_assert_int_eq(pr_ckpt_sha256_hex(u1, len1, sha1, err), 0);
	rc.max_assembly = len0 + len1 - 1;
	rounds_free(rep[2].r);
	ck_assert_int_eq(rounds_new(&rep[2].r, &rc, err), 0);
	p = (struct part){ 0, 0, 0, 2, 0, 0, len0, sha0 };
	accepted_part(&p, u0, len0 / 2, "part 0 of 2");
	p = (struct part){ 1, 1, 0, 2, 0, 0, len1, sha1 };
	refused_part(&p, u1, len1 / 2, 503, "pass the");
	ck_assert_uint_eq(rounds_assembling(rep[2].r), len0);
	free(u0);
	free(u1);
}
END_TEST

/* ---- lossy encodings and error feedback ---- */

/* A member that answers every update "over" and serves an all-zero
 * checkpoint stamped step 200000 takes over no one: the follower waits
 * for the coordinator's word, and the coordinator, whose view of the
 * liar's status says it is not ahead, refuses the claim and names it.
 * Both average the round; neither adopts the checkpoint. */
static int
liar_was_told(void)
{
	return rep[2].posts_from[0] > 0 && rep[2].posts_from[1] > 0 &&
	    rep[0].refused[2] > 0;
}

START_TEST(test_false_over_not_taken)
{
	float theta0[COUNT], want[COUNT];
	int k;

	rep[2].lies_over = 1;
	memset(rep[2].theta, 0, sizeof(rep[2].theta));
	rep[2].step = 200000;
	rep[2].round = 4000;
	memcpy(theta0, rep[0].theta, sizeof(theta0));
	send_update(0);
	send_update(1);
	ck_assert(run_until(liar_was_told));
	/* the liar sends no update: the round closes at its deadline */
	skew += DEADLINE + 1;
	wait_commits(1, 1, 0);
	expected_after(theta0, 3, 0, want);
	for (k = 0; k < 2; k++) {
		ck_assert_int_eq(rep[k].ckpt_commits, 0);
		ck_assert_int_eq(rep[k].avg_commits, 1);
		ck_assert_int_eq(rep[k].round, 1);
		ck_assert(memcmp(rep[k].theta, want, sizeof(want)) == 0);
	}
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x3 coordinator 0");
}
END_TEST

/* A quarantined replica is neither waited for nor a member, and its
 * updates are refused with 403. */
START_TEST(test_quarantined_left_out)
{
	float theta0[COUNT], want[COUNT];
	int k;

	for (k = 0; k < 2; k++)
		rep[k].quarantined[2] = 1;
	memcpy(theta0, rep[0].theta, sizeof(theta0));
	for (k = 0; k < NREP; k++)
		send_update(k);
	/* no deadline to wait out: the coordinator does not wait for 2 */
	wait_commits(1, 1, 1);
	expected_after(theta0, 3, 0, want);
	for (k = 0; k < 2; k++) {
		ck_assert_int_eq(rep[k].avg_commits, 1);
		ck_assert(memcmp(rep[k].theta, want, sizeof(want)) == 0);
	}
	ck_assert_str_eq(rep[0].journal, "round 0 members 0x3 coordinator 0");
	/* left out, replica 2 adopts the coordinator's checkpoint */
	ck_assert_int_eq(rep[2].ckpt_commits, 1);
	assert_same_weights(0, 2);
}
END_TEST

static void
setup_with(pr_encoding enc, pr_compression comp, int streams, size_t chunk)
{
	setup_enc = enc;
	setup_comp = comp;
	setup_streams = streams;
	setup_chunk = chunk;
	setup();
}

static void
setup_f32(void)
{
	setup_with(PR_ENC_F32, PR_COMP_NONE, 1, 0);
}

/* four parts of an update of COUNT floats */
static void
setup_streams4(void)
{
	setup_with(PR_ENC_F32, PR_COMP_NONE, 4, 64);
}

/* four streams, but an update smaller than one chunk goes whole */
static void
setup_one_chunk(void)
{
	setup_with(PR_ENC_F32, PR_COMP_NONE, 4, (size_t)1 << 20);
}

static void
setup_int8(void)
{
	setup_with(PR_ENC_INT8, PR_COMP_NONE, 1, 0);
}

static void
setup_int8_zstd(void)
{
	setup_with(PR_ENC_INT8, PR_COMP_ZSTD, 1, 0);
}

static void
setup_int8_streams(void)
{
	setup_with(PR_ENC_INT8, PR_COMP_NONE, 3, 24);
}

/* What a replica's update becomes on the wire: decode(encode(sent)) in
 * the fixture's encoding, by proto/update.c directly. */
static int compressed;           /* updates wire() saw compressed */

static void
wire(const float *sent, int64_t round, float *decoded)
{
	pr_update_meta m = { 0 }, got;
	char err[KN_ERR_LEN], *buf;
	size_t len;

	snprintf(m.run_id, sizeof(m.run_id), RUN_ID);
	m.block = 1;
	m.round = round;
	m.enc = setup_enc;
	m.comp = setup_comp;
	m.count = COUNT;
	ck_assert_int_eq(pr_update_encode(&m, sent, &buf, &len, err), 0);
	ck_assert_int_eq(pr_update_decode(buf, len, &m, decoded, &got, err),
	    0);
	compressed += got.comp == PR_COMP_ZSTD;
	free(buf);
}

/* The round's outcome for the members, computed here: each member sends
 * its update plus its residual (error feedback), keeps what the encoding
 * dropped, and all average the decoded updates in replica order; theta
 * takes the trainer's outer step.  Without feedback, the theta it would
 * be goes to plain (NULL: not wanted). */
static void
lossy_expected(float *theta, float residual[NREP][COUNT], uint64_t members,
    int64_t round, float *plain)
{
	float sent[NREP][COUNT], dec[NREP][COUNT], avg[COUNT];
	float bare[NREP][COUNT], bare_avg[COUNT];
	const float *list[NREP], *bare_list[NREP];
	int k, i, m = 0;

	for (k = 0; k < NREP; k++) {
		if (!(members & (1u << k)))
			continue;
		update_of(k, round, bare[k]);
		for (i = 0; i < COUNT; i++)
			sent[k][i] = bare[k][i] + residual[k][i];
		wire(sent[k], round, dec[k]);
		for (i = 0; i < COUNT; i++)
			residual[k][i] = sent[k][i] - dec[k][i];
		wire(bare[k], round, bare[k]);
		bare_list[m] = bare[k];
		list[m++] = dec[k];
	}
	kn_average(avg, list, m, COUNT);
	kn_average(bare_avg, bare_list, m, COUNT);
	for (i = 0; i < COUNT; i++) {
		if (plain != NULL)
			plain[i] = theta[i] - OUTER_LR * bare_avg[i];
		theta[i] -= OUTER_LR * avg[i];
	}
}

/* Rounds 0 to 2 with every replica: all end bitwise identical, on the
 * weights computed here with feedback, which from round 1 on differ from
 * those without.  Round 3 leaves replica 2 out (it adopts the
 * checkpoint, and so forgets its residual); round 4 is whole again. */
START_TEST(test_lossy_rounds)
{
	static float residual[NREP][COUNT];
	float theta[COUNT], plain[COUNT];
	int64_t round;
	int k, c;

	memset(residual, 0, sizeof(residual));
	memcpy(theta, rep[0].theta, sizeof(theta));
	compressed = 0;
	for (round = 0; round < 3; round++) {
		for (k = 0; k < NREP; k++)
			send_update(k);
		c = (int)round + 1;
		wait_commits(c, c, c);
		lossy_expected(theta, residual, 7, round, plain);
		for (k = 0; k < NREP; k++) {
			ck_assert_int_eq(rep[k].avg_commits, c);
			ck_assert_msg(memcmp(rep[k].theta, theta,
			    sizeof(theta)) == 0, "round %d: replica %d is "
			    "not on the weights of error feedback",
			    (int)round, k);
		}
		if (round > 0)
			ck_assert(memcmp(plain, theta, sizeof(theta)) != 0);
	}
	/* round 3 without replica 2 */
	send_update(0);
	send_update(1);
	skew += DEADLINE + 1;
	wait_commits(4, 4, 3);
	lossy_expected(theta, residual, 3, 3, NULL);
	ck_assert(memcmp(rep[0].theta, theta, sizeof(theta)) == 0);
	send_update(2);
	wait_commits(4, 4, 4);
	ck_assert_int_eq(rep[2].ckpt_commits, 1);
	assert_same_weights(0, 2);
	memset(residual[2], 0, sizeof(residual[2]));
	/* round 4: replica 2 sends its update with no residual */
	for (k = 0; k < NREP; k++)
		send_update(k);
	wait_commits(5, 5, 5);
	lossy_expected(theta, residual, 7, 4, NULL);
	for (k = 0; k < NREP; k++)
		ck_assert_msg(memcmp(rep[k].theta, theta, sizeof(theta)) == 0,
		    "round 4: replica %d differs", k);
	/* with zstd asked for, the updates did travel compressed */
	ck_assert_int_eq(compressed > 0, setup_comp == PR_COMP_ZSTD);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("rounds");
	TCase *tc = tcase_create("rounds");
	TCase *int8 = tcase_create("int8");
	TCase *int8_zstd = tcase_create("int8_zstd");
	TCase *streams = tcase_create("streams");
	TCase *one_chunk = tcase_create("one_chunk");
	TCase *int8_streams = tcase_create("int8_streams");

	tcase_add_checked_fixture(tc, setup_f32, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_all_members);
	tcase_add_test(tc, test_coordinator_choice);
	tcase_add_test(tc, test_deadline_and_catch_up);
	tcase_add_test(tc, test_split_and_heal);
	tcase_add_test(tc, test_conflict_kinds);
	tcase_add_test(tc, test_out_of_memory_is_503);
	tcase_add_test(tc, test_malformed_parts);
	tcase_add_test(tc, test_behind_then_member);
	tcase_add_test(tc, test_slow_link_sent_once);
	tcase_add_test(tc, test_assembly_budget);
	tcase_add_test(tc, test_false_over_not_taken);
	tcase_add_test(tc, test_quarantined_left_out);
	suite_add_tcase(s, tc);
	/* the same rounds with updates in parts end on the same weights */
	tcase_add_checked_fixture(streams, setup_streams4, teardown);
	tcase_set_timeout(streams, 60);
	tcase_add_test(streams, test_all_members);
	tcase_add_test(streams, test_deadline_and_catch_up);
	tcase_add_test(streams, test_split_and_heal);
	tcase_add_test(streams, test_behind_then_member);
	tcase_add_test(streams, test_slow_link_sent_once);
	suite_add_tcase(s, streams);
	tcase_add_checked_fixture(one_chunk, setup_one_chunk, teardown);
	tcase_set_timeout(one_chunk, 60);
	tcase_add_test(one_chunk, test_all_members);
	suite_add_tcase(s, one_chunk);
	tcase_add_checked_fixture(int8_streams, setup_int8_streams, teardown);
	tcase_set_timeout(int8_streams, 60);
	tcase_add_test(int8_streams, test_lossy_rounds);
	suite_add_tcase(s, int8_streams);
	tcase_add_checked_fixture(int8, setup_int8, teardown);
	tcase_set_timeout(int8, 60);
	tcase_add_test(int8, test_lossy_rounds);
	suite_add_tcase(s, int8);
	tcase_add_checked_fixture(int8_zstd, setup_int8_zstd, teardown);
	tcase_set_timeout(int8_zstd, 60);
	tcase_add_test(int8_zstd, test_lossy_rounds);
	suite_add_tcase(s, int8_zstd);
	return tu_run_suite(s);
}
