/* shardmeter generate --mode soma: the routed mixture of SOMA experts in
 * this process (--dir) or on serving hosts (--peers), continuing a
 * prompt or (--score FILE) scoring a file's windows as shardmeter eval
 * scores a split. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd_generate_soma.h"
#include "proto/corpus.h"
#include "daemon/pipeline/soma_client.h"
#include "kernels/error.h"
#include "kernels/pool.h"

int
cli_operator_tls(tls_ctx **tls, char *err)
{
	char dir[PR_PATH_LEN], why[KN_ERR_LEN];
	int rc;

	if (cli_client_dir(dir, err) != 0)
		return KN_EINVAL;
	if ((rc = tls_ctx_new(tls, dir, why)) != 0)
		return kn_error(err, rc, "%s%s", why, rc == ID_ENONE ? ": make "
		    "an operator identity with 'shardmeter init --client' and "
		    "list it in the pipeline host list as 'client <its id>'" :
		    "");
	return KN_OK;
}

/* The operator's identity, when a host line has a peer id. */
static int
soma_identity(const ph_list *hosts, tls_ctx **tls, char *err)
{
	int i;

	*tls = NULL;
	for (i = 0; i < hosts->n && !hosts->v[i].has_id; i++)
		;
	return i == hosts->n ? KN_OK : cli_operator_tls(tls, err);
}

static int
soma_score(const struct cli_soma_gen *a, sq_experts *x, const sa_router *r,
    char *err)
{
	const pr_spec *s = &a->run->spec;
	sq_stats st;
	sa_windows w;
	double nats;
	corpus c;
	int rc;

	if ((rc = corpus_open(&c, a->score, NULL, (size_t)s->soma.window + 1,
	    err)) != 0)
		return rc;
	sa_windows_init(&w, c.data, c.len, s->soma.window, a->windows);
	if ((rc = sq_score(x, r, &w, &nats, &st, err)) == 0) {
		printf("routed mixture %.6f nats/byte (%.6f bits/byte), %ld "
		    "windows of %d bytes, top-%d of %d experts\n", nats,
		    nats / M_LN2, w.n, w.T, st.k, s->soma.experts);
		if (a->verbose)
			fprintf(stderr, "shardmeter generate: %ld bytes scored in "
			    "%.1f ms (%.0f bytes/s), routing %.3f ms (%.1f us per "
			    "window), %llu request(s), %llu round trip(s), %.1f "
			    "ms of compute on the hosts\n", w.n * (long)w.T,
			    st.wall_s * 1e3, w.n * (double)w.T / st.wall_s,
			    st.route_s * 1e3, st.route_s * 1e6 / w.n,
			    (unsigned long long)st.frames,
			    (unsigned long long)st.rounds, st.compute_us / 1e3);
	}
	corpus_close(&c);
	return rc;
}

static int
soma_generate(const struct cli_soma_gen *a, sq_experts *x,
    const sa_router *r, char *err)
{
	int n = a->length < 0 ? 64 : a->length, i, rc;
	unsigned char *out = malloc((size_t)n + 1);
	sq_stats st;

	if (out == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	rc = sq_generate(x, r, a->prompt, strlen(a->prompt), n, a->temp,
	    a->seed, out, &st, err);
	if (rc == 0) {
		fwrite(a->prompt, 1, strlen(a->prompt), stdout);
		fwrite(out, 1, (size_t)n, stdout);
		putchar('\n');
		fflush(stdout);
	}
	if (rc == 0 && a->verbose) {
		fprintf(stderr, "shardmeter generate: %d bytes in %.1f ms (%.0f "
		    "bytes/s), routing %.3f ms, experts", n, st.wall_s * 1e3,
		    n / st.wall_s, st.route_s * 1e3);
		for (i = 0; i < st.k && i < 16; i++)
			fprintf(stderr, " %d", st.experts[i]);
		fprintf(stderr, ", %llu round trip(s), %.1f ms of compute on "
		    "the hosts\n", (unsigned long long)st.rounds,
		    st.compute_us / 1e3);
	}
	free(out);
	return rc;
}

int
cli_generate_soma(const struct cli_soma_gen *a)
{
	const pr_spec *s = &a->run->spec;
	char err[PR_ERR_LEN], path[PR_PATH_LEN + 16];
	ph_list hosts = { 0 };
	tls_ctx *tls = NULL;
	sq_experts *x = NULL;
	sa_router r;
	int rc;

	/* through served experts the hosts compute, this process routes */
	a->run->no_backend = a->peers != NULL;
	if ((rc = cli_run_open(a->run, "generate", a->peers == NULL)) != 0)
		return rc;
	if (pr_spec_method(s) != PR_METHOD_SOMA) {
		fprintf(stderr, "shardmeter generate: --mode soma needs a spec "
		    "with method = soma\n");
		return 2;
	}
	if (a->score == NULL && a->prompt[0] == '\0') {
		fprintf(stderr, "shardmeter generate: --mode soma needs a prompt "
		    "of at least one byte (the router reads it)\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/router.smr", s->soma.clusters);
	if ((rc = sa_router_load(&r, path, err)) != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		return 1;
	}
	if ((int)r.file.nexperts != s->soma.experts)
		rc = kn_error(err, KN_EINVAL, "%s routes to %d experts, the spec "
		    "has %d", path, (int)r.file.nexperts, s->soma.experts);
	else if (a->peers == NULL)
		rc = sq_open_local(&x, s, a->run->run_id, a->run->dir, a->run->be,
		    err);
	else if ((rc = ph_load(&hosts, a->peers, err)) == 0 &&
	    (rc = soma_identity(&hosts, &tls, err)) == 0)
		rc = sq_open_served(&x, s, &hosts, tls, a->timeout_ms, err);
	if (rc == 0)
		rc = a->score != NULL ? soma_score(a, x, &r, err) :
		    soma_generate(a, x, &r, err);
	sq_close(x);
	tls_ctx_free(tls);
	ph_free(&hosts);
	sa_router_free(&r);
	kn_pool_shutdown();
	if (rc != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		return 1;
	}
	return 0;
}
