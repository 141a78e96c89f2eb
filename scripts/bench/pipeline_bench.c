/* Load for scripts/bench/pipeline: C clients, each on its own connection
 * to the pipeline's entry host, each sending N requests one after the
 * other.  Prints one line of key=value figures: latency per request,
 * output bytes per second over the whole run, and the hosts' compute and
 * the rest per frame hop (the pipeline's own overhead). */
#include "config.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/pipeline_client.h"
#include "kernels/clock.h"
#include "kernels/error.h"

struct client {
	const char *addr;
	pc_request req;
	int requests, timeout_ms, index;
	double *latency;        /* requests seconds */
	uint64_t compute_us, bytes;
	long hops, traversals;
	size_t frame_bytes;
	int failed;
	char why[PL_MSG_LEN];
};

static void *
run_client(void *arg)
{
	struct client *c = arg;
	char err[KN_ERR_LEN];
	pc_conn *conn;
	int i;

	if (pc_connect(&conn, c->addr, c->timeout_ms, err) != 0) {
		c->failed = c->requests;
		snprintf(c->why, sizeof(c->why), "%s", err);
		return NULL;
	}
	for (i = 0; i < c->requests; i++) {
		pc_result res;
		double t0 = kn_now();

		/* each request its own seed: no two outputs alike */
		c->req.seed = 1000003ULL * (uint64_t)c->index + (uint64_t)i + 1;
		if (pc_send(conn, &c->req, NULL, err) != 0 ||
		    pc_recv(conn, &res, c->timeout_ms, err) != 0) {
			c->failed++;
			snprintf(c->why, sizeof(c->why), "%s", err);
			break;
		}
		c->latency[i] = kn_now() - t0;
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

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "mode", required_argument, NULL, 'o' },
		{ "length", required_argument, NULL, 'm' },
		{ "steps", required_argument, NULL, 'k' },
		{ "prompt", required_argument, NULL, 'p' },
		{ "clients", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 't' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *addr = NULL, *prompt = " The ";
	int length = 16, steps = 64, clients = 1, requests = 1, ch, i, j;
	int timeout_ms = 600000, failed = 0, total;
	double temp = 0.8, t0, wall, *all, sum = 0;
	uint64_t compute = 0, bytes = 0;
	long hops = 0, trav = 0;
	pl_mode mode = PL_MODE_BT;
	struct client *cl;
	pthread_t *th;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'a': addr = optarg; break;
		case 'o':
			if (pl_mode_parse(optarg, &mode) != 0) {
				fprintf(stderr, "pipeline-bench: --mode takes "
				    "blocktrain or ar\n");
				return 2;
			}
			break;
		case 'm': length = atoi(optarg); break;
		case 'k': steps = atoi(optarg); break;
		case 'p': prompt = optarg; break;
		case 'c': clients = atoi(optarg); break;
		case 'n': requests = atoi(optarg); break;
		case 't': temp = atof(optarg); break;
		case 'w': timeout_ms = atoi(optarg); break;
		case 'h':
			printf("usage: pipeline-bench --addr HOST:PORT [--mode "
			    "blocktrain|ar] [--length M]\n    [--steps K] "
			    "[--prompt P] [--clients C] [--requests N] "
			    "[--temperature T]\n    [--timeout MS]\n");
			return 0;
		default:
			return 2;
		}
	}
	if (addr == NULL || length < 1 || steps < 1 || clients < 1 ||
	    requests < 1) {
		fprintf(stderr, "pipeline-bench: --addr is required; counts are "
		    "positive\n");
		return 2;
	}
	cl = calloc((size_t)clients, sizeof(*cl));
	th = calloc((size_t)clients, sizeof(*th));
	for (i = 0; i < clients; i++) {
		cl[i].addr = addr;
		cl[i].req.mode = mode;
		cl[i].req.prompt = prompt;
		cl[i].req.prompt_len = strlen(prompt);
		cl[i].req.length = length;
		cl[i].req.steps = steps;
		cl[i].req.temperature = temp;
		cl[i].requests = requests;
		cl[i].timeout_ms = timeout_ms;
		cl[i].index = i;
		cl[i].latency = calloc((size_t)requests, sizeof(double));
	}
	t0 = kn_now();
	for (i = 0; i < clients; i++)
		pthread_create(&th[i], NULL, run_client, &cl[i]);
	for (i = 0; i < clients; i++)
		pthread_join(th[i], NULL);
	wall = kn_now() - t0;
	total = clients * requests;
	all = calloc((size_t)total, sizeof(double));
	for (i = 0; i < clients; i++) {
		for (j = 0; j < requests; j++) {
			all[i * requests + j] = cl[i].latency[j];
			sum += cl[i].latency[j];
		}
		failed += cl[i].failed;
		compute += cl[i].compute_us;
		bytes += cl[i].bytes;
		hops += cl[i].hops;
		trav += cl[i].traversals;
		if (cl[i].failed && cl[i].why[0])
			fprintf(stderr, "pipeline-bench: client %d: %s\n", i,
			    cl[i].why);
	}
	qsort(all, (size_t)total, sizeof(double), cmp_double);
	/* overhead: what a request took beyond the hosts' compute, per frame
	 * hop (client -> entry, host -> host, entry -> client) */
	printf("mode=%s clients=%d requests=%d length=%d steps=%d failed=%d "
	    "latency_ms=%.3f latency_p50_ms=%.3f latency_max_ms=%.3f "
	    "Bps=%.2f latency_Bps=%.2f compute_ms=%.3f hops=%.1f "
	    "traversals=%.1f overhead_us_per_hop=%.1f frame_bytes=%zu "
	    "wall_s=%.3f\n", pl_mode_name(mode), clients, requests, length,
	    steps, failed, 1e3 * sum / total, 1e3 * all[total / 2],
	    1e3 * all[total - 1], bytes / wall, length / (sum / total),
	    compute / 1e3 / total, (double)hops / total, (double)trav / total,
	    hops ? (sum - compute / 1e6) / hops * 1e6 : 0.0,
	    cl[0].frame_bytes, wall);
	for (i = 0; i < clients; i++)
		free(cl[i].latency);
	free(cl);
	free(th);
	free(all);
	return failed ? 1 : 0;
}
