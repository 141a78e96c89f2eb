/* The shardmeter commands that talk to running daemons: status (one line
 * per peer, the run's progress and its composed bound, live) and assemble
 * (the latest checkpoint of every block, fetched and verified).  Blocking
 * libcurl calls are fine here: this is a command, not the event loop. */
#include "config.h"

#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/cluster.h"
#include "daemon/peers.h"
#include "daemon/train.h"
#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"

struct body {
	char *data;
	size_t len, max;
};

static size_t
on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
	struct body *b = user;
	size_t n = size * nmemb;
	char *grown;

	if (b->len + n > b->max)
		return 0;	/* aborts the transfer */
	if ((grown = realloc(b->data, b->len + n + 1)) == NULL)
		return 0;
	b->data = grown;
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

/* GET url; the body in *out (caller frees).  Returns the HTTP status, or
 * 0 with a reason in err. */
static long
http_get(const char *url, size_t max, long timeout_ms, struct body *out,
    char *err)
{
	CURL *h = curl_easy_init();
	char cerr[CURL_ERROR_SIZE] = "";
	long status = 0;
	CURLcode rc;

	memset(out, 0, sizeof(*out));
	out->max = max;
	if (h == NULL) {
		kn_error(err, KN_ENOMEM, "curl_easy_init failed");
		return 0;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	rc = curl_easy_perform(h);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	else
		kn_error(err, KN_EIO, "%s", cerr[0] ? cerr :
		    curl_easy_strerror(rc));
	curl_easy_cleanup(h);
	return status;
}

static json_t *
fetch_status(const sm_peer *p, char *err)
{
	char url[SM_HOST_LEN + 64];
	struct body b;
	json_error_t jerr;
	json_t *root = NULL;
	long st;

	snprintf(url, sizeof(url), "http://%s/v1/status", p->addr);
	st = http_get(url, 1 << 20, 3000, &b, err);
	if (st == 200 && (root = json_loadb(b.data, b.len, 0, &jerr)) == NULL)
		kn_error(err, KN_EINVAL, "bad status JSON: %s", jerr.text);
	else if (st != 200 && st != 0)
		kn_error(err, KN_EIO, "HTTP %ld", st);
	free(b.data);
	return root;
}

static double
num(json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static void
bar(double frac, int width)
{
	int i, fill = (int)(frac * width + 0.5);

	putchar('[');
	for (i = 0; i < width; i++)
		putchar(i < fill ? '#' : '.');
	putchar(']');
}

/* One screen of status; returns the number of peers that answered. */
static int
status_once(const sm_peer_list *pl)
{
	double shares[PR_MAX_BLOCKS + 1] = { 0 }, rate = 0;
	int64_t share_step[PR_MAX_BLOCKS + 1], done = 0, total = 0;
	int have[PR_MAX_BLOCKS + 1] = { 0 }, blocks = 0, up = 0, i, b;
	char run_id[PR_RUN_ID_LEN] = "";
	double slowest_eta = 0;

	for (b = 0; b <= PR_MAX_BLOCKS; b++)
		share_step[b] = -1;
	printf("%-22s %5s %4s %-9s %13s %8s %10s %6s %9s\n", "peer", "block",
	    "rep", "state", "step", "loss", "share", "round", "pos/s");
	for (i = 0; i < pl->n; i++) {
		const sm_peer *p = &pl->v[i];
		char err[KN_ERR_LEN] = "";
		json_t *s = fetch_status(p, err);
		int64_t step, steps;
		const char *rid;

		if (s == NULL) {
			printf("%-22s %5d %4d %-9s %s\n", p->addr, p->block,
			    sm_peers_replica_index(pl, i), "down", err);
			continue;
		}
		up++;
		rid = json_string_value(json_object_get(s, "run_id"));
		if (run_id[0] == '\0' && rid != NULL)
			snprintf(run_id, sizeof(run_id), "%s", rid);
		step = json_integer_value(json_object_get(s, "step"));
		steps = json_integer_value(json_object_get(s, "steps"));
		blocks = (int)json_integer_value(json_object_get(s, "blocks"));
		printf("%-22s %5d %4d %-9s %6lld/%-6lld %8.4f ", p->addr,
		    p->block, sm_peers_replica_index(pl, i),
		    json_string_value(json_object_get(s, "state")),
		    (long long)step, (long long)steps, num(s, "loss"));
		if (json_object_get(s, "heldout_share") != NULL) {
			int64_t at = json_integer_value(json_object_get(s,
			    "heldout_share_step"));

			printf("%10.4f", num(s, "heldout_share"));
			if (p->block <= PR_MAX_BLOCKS && at > share_step[p->block]) {
				shares[p->block] = num(s, "heldout_share");
				share_step[p->block] = at;
				have[p->block] = 1;
			}
		} else {
			printf("%10s", "-");
		}
		printf(" %6lld %9.0f%s\n", (long long)json_integer_value(
		    json_object_get(s, "round")), num(s, "positions_per_s"),
		    rid && run_id[0] && strcmp(rid, run_id) ? "  OTHER RUN" : "");
		done += step;
		total += steps;
		rate = num(s, "steps_per_s");
		if (rate > 0 && (steps - step) / rate > slowest_eta)
			slowest_eta = (steps - step) / rate;
		json_decref(s);
	}
	if (total > 0) {
		printf("\nrun %.16s...  ", run_id);
		bar((double)done / total, 30);
		printf(" %5.1f%%  ETA %dm%02ds\n", 100.0 * done / total,
		    (int)slowest_eta / 60, (int)slowest_eta % 60);
	}
	if (blocks > 0) {
		double sum = 0;
		int complete = 1;

		for (b = 1; b <= blocks; b++) {
			if (!have[b])
				complete = 0;
			sum += shares[b];
		}
		if (complete)
			printf("composed held-out bound: %.4f nats/byte (sum of "
			    "the %d blocks' latest shares)\n", sum, blocks);
		else
			printf("composed held-out bound: not yet (a block has no "
			    "held-out share yet)\n");
	}
	return up;
}

int
cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "watch", optional_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *peers = NULL;
	double every = 0;
	sm_peer_list pl;
	char err[PR_ERR_LEN];
	int ch, up;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': peers = optarg; break;
		case 'w': every = optarg ? atof(optarg) : 2.0; break;
		case 'h':
			printf("usage: shardmeter status --peers FILE "
			    "[--watch[=SECONDS]]\nOne line per daemon of the "
			    "peer list, the run's progress with an ETA, and the\n"
			    "composed held-out bound: the sum of every block's "
			    "latest share.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (peers == NULL) {
		fprintf(stderr, "shardmeter status: --peers FILE is required\n");
		return 2;
	}
	if (sm_peers_load(&pl, peers, err) != 0) {
		fprintf(stderr, "shardmeter status: %s\n", err);
		return 1;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (;;) {
		if (every > 0)
			printf("\033[H\033[2J");
		up = status_once(&pl);
		fflush(stdout);
		if (every <= 0)
			break;
		usleep((useconds_t)(every * 1e6));
	}
	sm_peers_free(&pl);
	curl_global_cleanup();
	return up > 0 ? 0 : 1;
}

int
cmd_assemble(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "out", required_argument, NULL, 'o' },
		{ "spec", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *peers = NULL, *out = NULL, *spec_path = NULL;
	char err[PR_ERR_LEN], run_id[PR_RUN_ID_LEN] = "";
	sm_peer_list pl;
	int ch, b, maxb = 0, i, failed = 0;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': peers = optarg; break;
		case 'o': out = optarg; break;
		case 's': spec_path = optarg; break;
		case 'h':
			printf("usage: shardmeter assemble --peers FILE --out DIR "
			    "[--spec FILE]\nFetches the latest checkpoint of "
			    "every block from a daemon serving it, verifies\nit "
			    "(hash, run id, block; the spec's run id when --spec "
			    "is given) and writes\nDIR/block-B.ckpt, ready for "
			    "'shardmeter eval' and 'generate'.\n");
			return 0;
		default:
			return 2;
		}
	}
	if (peers == NULL || out == NULL) {
		fprintf(stderr, "shardmeter assemble: --peers FILE and --out DIR "
		    "are required\n");
		return 2;
	}
	if (spec_path != NULL) {
		pr_spec s;

		if (pr_spec_load(&s, spec_path, err) != 0 ||
		    pr_spec_run_id(&s, run_id, err) != 0) {
			fprintf(stderr, "shardmeter assemble: %s\n", err);
			return 1;
		}
	}
	if (sm_peers_load(&pl, peers, err) != 0) {
		fprintf(stderr, "shardmeter assemble: %s\n", err);
		return 1;
	}
	if (mkdir(out, 0755) != 0 && access(out, W_OK) != 0) {
		fprintf(stderr, "shardmeter assemble: cannot create %s\n", out);
		sm_peers_free(&pl);
		return 1;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (i = 0; i < pl.n; i++)
		if (pl.v[i].block > maxb)
			maxb = pl.v[i].block;
	for (b = 1; b <= maxb; b++) {
		int got = 0;

		for (i = 0; i < pl.n && !got; i++) {
			char url[SM_HOST_LEN + 64], path[PR_PATH_LEN + 32];
			char hex[65];
			pr_ckpt_meta expect = { 0 }, meta;
			struct body body;
			long st;

			if (pl.v[i].block != b)
				continue;
			snprintf(url, sizeof(url), "http://%s/v1/blocks/%d/checkpoint",
			    pl.v[i].addr, b);
			st = http_get(url, SM_CKPT_MAX_BYTES, 120000, &body, err);
			if (st != 200) {
				fprintf(stderr, "assemble: block %d from %s: %s\n", b,
				    pl.v[i].addr, st ? "HTTP error" : err);
				free(body.data);
				continue;
			}
			snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
			expect.block = b;
			snprintf(expect.kind, sizeof(expect.kind), "block");
			if (pr_ckpt_decode(body.data, body.len, &expect, NULL, 0,
			    NULL, &meta, err) != 0) {
				fprintf(stderr, "assemble: block %d from %s: %s\n", b,
				    pl.v[i].addr, err);
				free(body.data);
				continue;
			}
			if (run_id[0] == '\0')
				snprintf(run_id, sizeof(run_id), "%s", meta.run_id);
			sm_model_path(path, sizeof(path), out, BT_BLOCK, b, "ckpt");
			pr_ckpt_sha256_hex(body.data, body.len, hex, err);
			if (pr_ckpt_write_file(path, body.data, body.len, err) != 0) {
				fprintf(stderr, "assemble: %s\n", err);
				free(body.data);
				continue;
			}
			printf("block %d: step %lld, round %lld, %zu bytes, sha256 "
			    "%.16s... from %s -> %s\n", b, (long long)meta.step,
			    (long long)meta.round, body.len, hex, pl.v[i].addr, path);
			free(body.data);
			got = 1;
		}
		if (!got) {
			fprintf(stderr, "assemble: no daemon served a valid "
			    "checkpoint of block %d\n", b);
			failed++;
		}
	}
	sm_peers_free(&pl);
	curl_global_cleanup();
	if (failed == 0)
		printf("assembled %d blocks of run %.16s... in %s\n", maxb,
		    run_id, out);
	return failed ? 1 : 0;
}
