/* Load for scripts/bench/pipeline and pipeline-tls: C clients, each on
 * its own connection to the pipeline's entry host (over TLS as an
 * operator identity when the host list has peer ids), each sending N
 * requests one after the other.  Prints one line of key=value figures:
 * latency per request (mean, p50, p99, the slowest and its compute, so
 * that a stall of a few requests shows), output bytes per second over
 * the whole run, and the hosts' compute and the rest per frame hop (the
 * pipeline's own overhead). */
#include "config.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/pipeline/pipeline_client.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/clock.h"
#include "kernels/error.h"

struct client {
	const char *addr;
	tls_ctx *tls;           /* NULL: plain TCP */
	const uint8_t *pin;
	const ph_list *hosts;   /* --peers: any entry that is up */
	pc_request req;
	int requests, timeout_ms, index;
	double *latency;        /* requests seconds; 0: never answered */
	double *compute;        /* each request's compute, seconds */
	uint64_t compute_us, bytes;
	long hops, traversals;
	size_t frame_bytes;
	int failed;
	char why[PL_MSG_LEN];
};

/* One request and its answer; with --peers, an entry that goes before it
 * answers is left for the next one, and the request sent there. */
static int
ask_entry(struct client *c, pc_conn **conn, int *entry, pc_result *res,
    char *err)
{
	int tries = 0, rc;

	for (;;) {
		if ((rc = pc_send(*conn, &c->req, NULL, err)) == 0)
			rc = pc_recv(*conn, res, c->timeout_ms, err);
		if (rc != KN_EIO || c->hosts == NULL ||
		    ++tries > ph_stage_size(c->hosts, 0))
			return rc;
		pc_close(*conn);
		*conn = NULL;
		if ((rc = pc_connect_entry(conn, c->hosts, *entry + 1, c->tls,
		    c->timeout_ms, entry, err)) != 0)
			return rc;
	}
}

static void *
run_client(void *arg)
{
	struct client *c = arg;
	char err[KN_ERR_LEN];
	pc_conn *conn;
	int i, entry = 0;

	if ((c->hosts != NULL ? pc_connect_entry(&conn, c->hosts, 0, c->tls,
	    c->timeout_ms, &entry, err) : pc_connect(&conn, c->addr, c->tls,
	    c->pin, c->timeout_ms, err)) != 0) {
		c->failed = c->requests;
		snprintf(c->why, sizeof(c->why), "%s", err);
		return NULL;
	}
	for (i = 0; i < c->requests; i++) {
		pc_result res;
		double t0 = kn_now();

		/* each request its own seed: no two outputs alike */
		c->req.seed = 1000003ULL * (uint64_t)c->index + (uint64_t)i + 1;
		if (ask_entry(c, &conn, &entry, &res, err) != 0) {
			c->failed++;
			snprintf(c->why, sizeof(c->why), "%s", err);
			break;
		}
		c->latency[i] = kn_now() - t0;
		c->compute[i] = res.compute_us / 1e6;
		if (!res.ok) {
			c->failed++;
			snprintf(c->why, sizeof(c->why), "%s", res.error);
		} else {
			c->bytes += res.len;
			c->compute_us += res.compute_us;
			c->hops += res.hops;
			c->traversals += res.traversals;
			c->frame_bytes = res.frame_bytes;
		}
		pc_result_clear(&res);
	}
	pc_close(conn);
	return NULL;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The q quantile (0 < q <= 1) of sorted v (n >= 1) by nearest rank: the
 * ceil(q n)-th smallest, a latency some request took (p99 of 20 requests
 * is the slowest; of 200, the second slowest). */
static double
rank_quantile(const double *sorted, int n, double q)
{
	int rank = (int)(q * n);

	if ((double)rank < q * n)
		rank++;
	if (rank < 1)
		rank = 1;
	return sorted[(rank > n ? n : rank) - 1];
}

/* What the command line asks for. */
struct bench_opts {
	const char *addr, *prompt;
	const char *peers, *identity;   /* --peers, --identity */
	const char *latencies;          /* --latencies: appended, ms a line */
	int length, steps, clients, requests, timeout_ms;
	double temp;
	pl_mode mode;
};

/* All clients' figures together; latency holds every answered
 * request's (answered of them), sorted. */
struct totals {
	double *latency, sum;
	int answered;
	double slowest_compute; /* of the slowest request, seconds */
	uint64_t compute, bytes;
	long hops, trav;
	int failed;
};

/* -1 to go on, else the exit status: 0 after --help, 2 for a bad command
 * line. */
static int
parse_options(int argc, char **argv, struct bench_opts *o)
{
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "peers", required_argument, NULL, 'P' },
		{ "identity", required_argument, NULL, 'i' },
		{ "mode", required_argument, NULL, 'o' },
		{ "length", required_argument, NULL, 'm' },
		{ "steps", required_argument, NULL, 'k' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "clients", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 't' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "latencies", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'a': o->addr = optarg; break;
		case 'P': o->peers = optarg; break;
		case 'i': o->identity = optarg; break;
		case 'o':
			if (pl_mode_parse(optarg, &o->mode) != 0) {
				fprintf(stderr, "pipeline-bench: --mode takes "
				    "blocktrain or ar\n");
				return 2;
			}
			break;
		case 'm': o->length = atoi(optarg); break;
		case 'k': o->steps = atoi(optarg); break;
		case 'p': o->prompt = optarg; break;
		case 'c': o->clients = atoi(optarg); break;
		case 'n': o->requests = atoi(optarg); break;
		case 't': o->temp = atof(optarg); break;
		case 'w': o->timeout_ms = atoi(optarg); break;
		case 'L': o->latencies = optarg; break;
		case 'h':
			printf("usage: pipeline-bench --addr HOST:PORT | --peers "
			    "HOSTS [--identity DIR]\n    [--mode blocktrain|ar] "
			    "[--length M] [--steps K] [--prompt P]\n    "
			    "[--clients C] [--requests N] [--temperature T] "
			    "[--timeout MS]\n    [--latencies FILE]\n"
			    "--addr: plain TCP to the entry; --peers: the entry "
			    "of the host list, over TLS\npinned to its peer id "
			    "as the operator identity in DIR when the list has "
			    "ids.\n--latencies: each answered request's latency "
			    "in ms appended to FILE, a line each\n(a steady "
			    "stream run in batches, its percentiles taken over "
			    "all).\n");
			return 0;
		default:
			return 2;
		}
	}
	if ((o->addr == NULL) == (o->peers == NULL) || o->length < 1 ||
	    o->steps < 1 || o->clients < 1 || o->requests < 1) {
		fprintf(stderr, "pipeline-bench: give --addr or --peers; counts "
		    "are positive\n");
		return 2;
	}
	return -1;
}

/* --peers: the entry's address and id, and the identity to present. */
static int
open_entry(struct bench_opts *o, ph_list *hosts, tls_ctx **tls)
{
	char err[PR_ERR_LEN];

	*tls = NULL;
	if (o->peers == NULL)
		return 0;
	if (ph_load(hosts, o->peers, err) != 0) {
		fprintf(stderr, "pipeline-bench: %s\n", err);
		return 2;
	}
	o->addr = hosts->v[0].addr;
	if (!hosts->v[0].has_id)
		return 0;
	if (o->identity == NULL) {
		fprintf(stderr, "pipeline-bench: %s has peer ids: give "
		    "--identity DIR, an operator identity its client lines "
		    "name\n", o->peers);
		return 2;
	}
	if (tls_ctx_new(tls, o->identity, err) != 0) {
		fprintf(stderr, "pipeline-bench: %s\n", err);
		return 1;
	}
	return 0;
}

/* One client per --clients, each with the same request and room for
 * its latencies. */
static struct client *
clients_new(const struct bench_opts *o, tls_ctx *tls, const ph_list *hosts)
{
	struct client *cl = calloc((size_t)o->clients, sizeof(*cl));
	int i;

	for (i = 0; i < o->clients; i++) {
		cl[i].addr = o->addr;
		cl[i].tls = tls;
		cl[i].pin = tls != NULL ? hosts->v[0].id : NULL;
		cl[i].hosts = o->peers != NULL ? hosts : NULL;
		cl[i].req.mode = o->mode;
		cl[i].req.prompt = o->prompt;
		cl[i].req.prompt_len = strlen(o->prompt);
		cl[i].req.length = o->length;
		cl[i].req.steps = o->steps;
		cl[i].req.temperature = o->temp;
		cl[i].requests = o->requests;
		cl[i].timeout_ms = o->timeout_ms;
		cl[i].index = i;
		cl[i].latency = calloc((size_t)o->requests, sizeof(double));
		cl[i].compute = calloc((size_t)o->requests, sizeof(double));
	}
	return cl;
}

/* All clients at once, each on its own thread; the wall seconds. */
static double
run_clients(struct client *cl, int clients)
{
	pthread_t *th = calloc((size_t)clients, sizeof(*th));
	double t0 = kn_now(), wall;
	int i;

	for (i = 0; i < clients; i++)
		pthread_create(&th[i], NULL, run_client, &cl[i]);
	for (i = 0; i < clients; i++)
		pthread_join(th[i], NULL);
	wall = kn_now() - t0;
	free(th);
	return wall;
}

/* Sums the clients' figures and says why each failing one failed. */
static void
gather(const struct client *cl, const struct bench_opts *o,
    struct totals *t)
{
	int i, j, total = o->clients * o->requests;
	double slowest = 0;

	memset(t, 0, sizeof(*t));
	t->latency = calloc((size_t)total, sizeof(double));
	for (i = 0; i < o->clients; i++) {
		for (j = 0; j < o->requests; j++) {
			double lat = cl[i].latency[j];

			/* a request never answered has no latency */
			if (lat <= 0)
				continue;
			if (lat > slowest) {
				slowest = lat;
				t->slowest_compute = cl[i].compute[j];
			}
			t->latency[t->answered++] = lat;
			t->sum += lat;
		}
		t->failed += cl[i].failed;
		t->compute += cl[i].compute_us;
		t->bytes += cl[i].bytes;
		t->hops += cl[i].hops;
		t->trav += cl[i].traversals;
		if (cl[i].failed && cl[i].why[0])
			fprintf(stderr, "pipeline-bench: client %d: %s\n", i,
			    cl[i].why);
	}
	qsort(t->latency, (size_t)t->answered, sizeof(double), cmp_double);
}

/* Latency over the answered requests: the mean (latency_ms), p50, p99,
 * the slowest and the compute of that slowest one.  Overhead: what a
 * request took beyond the hosts' compute, per frame hop (client ->
 * entry, host -> host, entry -> client). */
static void
print_result(const struct bench_opts *o, const struct totals *t,
    double wall, size_t frame_bytes)
{
	int total = o->clients * o->requests, n = t->answered;
	double sum = t->sum, mean = n ? sum / n : 0;

	printf("mode=%s clients=%d requests=%d length=%d steps=%d failed=%d "
	    "latency_ms=%.3f latency_p50_ms=%.3f latency_max_ms=%.3f "
	    "Bps=%.2f latency_Bps=%.2f compute_ms=%.3f hops=%.1f "
	    "traversals=%.1f overhead_us_per_hop=%.1f frame_bytes=%zu "
	    "wall_s=%.3f latency_p99_ms=%.3f slowest_compute_ms=%.3f\n",
	    pl_mode_name(o->mode), o->clients, o->requests,
	    o->length, o->steps, t->failed, 1e3 * mean,
	    n ? 1e3 * rank_quantile(t->latency, n, 0.5) : 0,
	    n ? 1e3 * t->latency[n - 1] : 0,
	    t->bytes / wall, mean > 0 ? o->length / mean : 0,
	    t->compute / 1e3 / total, (double)t->hops / total,
	    (double)t->trav / total,
	    t->hops ? (sum - t->compute / 1e6) / t->hops * 1e6 : 0.0,
	    frame_bytes, wall,
	    n ? 1e3 * rank_quantile(t->latency, n, 0.99) : 0,
	    1e3 * t->slowest_compute);
}

/* --latencies: the answered requests' latencies appended, for figures
 * over many runs of the tool. */
static int
write_latencies(const char *path, const struct totals *t)
{
	FILE *f = fopen(path, "a");
	int i;

	if (f == NULL) {
		perror(path);
		return -1;
	}
	for (i = 0; i < t->answered; i++)
		fprintf(f, "%.3f\n", 1e3 * t->latency[i]);
	if (fclose(f) != 0) {
		perror(path);
		return -1;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	struct bench_opts o = { .prompt = " The ", .length = 16, .steps = 64,
	    .clients = 1, .requests = 1, .timeout_ms = 600000, .temp = 0.8,
	    .mode = PL_MODE_BT };
	struct client *cl;
	struct totals t;
	ph_list hosts = { 0 };
	tls_ctx *tls;
	double wall;
	int i, rc;

	if ((rc = parse_options(argc, argv, &o)) >= 0 ||
	    (rc = open_entry(&o, &hosts, &tls)) != 0)
		return rc;
	cl = clients_new(&o, tls, &hosts);
	wall = run_clients(cl, o.clients);
	gather(cl, &o, &t);
	print_result(&o, &t, wall, cl[0].frame_bytes);
	if (o.latencies != NULL && write_latencies(o.latencies, &t) != 0)
		rc = 1;
	for (i = 0; i < o.clients; i++) {
		free(cl[i].latency);
		free(cl[i].compute);
	}
	free(cl);
	free(t.latency);
	tls_ctx_free(tls);
	ph_free(&hosts);
	return t.failed || rc ? 1 : 0;
}
