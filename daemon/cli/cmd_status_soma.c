/* shardmeter status on a SOMA run (a peer list of expert=E lines): each
 * expert daemon's progress, and the routed mixture's held-out loss mixed
 * here from the log-probabilities each daemon publishes for the windows
 * routed to it (GET /v1/soma/heldout), so no weights move.  A table, or
 * JSON. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "kernels/error.h"
#include "proto/heldout.h"

#define HELDOUT_MAX_BYTES ((size_t)256 << 20)

/* One expert daemon as it answered. */
struct soma_peer {
	const peers_entry *p;
	json_t *status;                 /* NULL: did not answer */
	pr_heldout_meta hm;
	int have_heldout;
	char why[KN_ERR_LEN];           /* no status, or no held-out scores */
};

/* The mixture over the experts that reported. */
struct soma_mix {
	char run_id[PR_RUN_ID_LEN];
	int N, k, T;
	long M;
	double *sum;                    /* (M, T): sum of probabilities / k */
	int *cover;                     /* (M): experts that scored it */
	int reported;
	long complete;                  /* windows with all k experts */
	double nats;                    /* NAN: none complete */
	char why[KN_ERR_LEN];           /* inconsistent messages */
};

static int
mix_add(struct soma_mix *x, const pr_heldout_meta *m, const uint32_t *idx,
    const float *lp, char *err)
{
	long i;
	int j;

	if (x->sum == NULL) {
		x->N = m->experts;
		x->k = m->top_k;
		x->T = m->T;
		x->M = m->windows;
		snprintf(x->run_id, sizeof(x->run_id), "%s", m->run_id);
		x->sum = calloc((size_t)(x->M ? x->M : 1) * x->T, sizeof(double));
		x->cover = calloc((size_t)(x->M ? x->M : 1), sizeof(int));
		if (x->sum == NULL || x->cover == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
	} else if (m->experts != x->N || m->top_k != x->k || m->T != x->T ||
	    m->windows != x->M || strcmp(m->run_id, x->run_id) != 0)
		return kn_error(err, KN_EINVAL, "its held-out scores are of "
		    "another set (run %.16s..., %ld windows of %d bytes, top-%d "
		    "of %d) than the first expert's", m->run_id, m->windows,
		    m->T, m->top_k, m->experts);
	for (i = 0; i < m->count; i++) {
		x->cover[idx[i]]++;
		for (j = 0; j < x->T; j++)
			x->sum[(size_t)idx[i] * x->T + j] +=
			    exp(lp[(size_t)i * x->T + j]) / x->k;
	}
	x->reported++;
	return 0;
}

/* The mean negative log of the mixture over the windows whose k experts
 * all reported; a window with more than k is a routing that disagrees. */
static void
mix_finish(struct soma_mix *x)
{
	double s = 0;
	long w;
	int j;

	x->nats = NAN;
	for (w = 0; w < x->M; w++) {
		if (x->cover[w] > x->k) {
			snprintf(x->why, sizeof(x->why), "window %ld is scored "
			    "by %d experts, top-k is %d: the daemons route "
			    "differently", w, x->cover[w], x->k);
			return;
		}
		if (x->cover[w] != x->k)
			continue;
		x->complete++;
		for (j = 0; j < x->T; j++)
			s -= log(x->sum[(size_t)w * x->T + j]);
	}
	if (x->complete > 0)
		x->nats = s / ((double)x->complete * x->T);
}

/* Status and held-out scores of one expert daemon. */
static void
fetch_peer(struct soma_peer *sp, struct soma_mix *x)
{
	struct cli_body b;
	uint32_t *idx = NULL;
	float *lp = NULL;
	const char *rid;
	long st;

	if ((sp->status = cli_status_fetch(sp->p, sp->why)) == NULL)
		return;
	rid = json_string_value(json_object_get(sp->status, "run_id"));
	st = cli_peer_get(sp->p, "/v1/soma/heldout", HELDOUT_MAX_BYTES, 10000,
	    &b, sp->why);
	if (st != 200) {
		if (st != 0)
			snprintf(sp->why, sizeof(sp->why), "held-out scores: "
			    "HTTP %ld: %.200s", st, b.data ? b.data : "");
		free(b.data);
		return;
	}
	if (pr_heldout_decode(b.data, b.len, &sp->hm, &idx, &lp,
	    sp->why) == 0) {
		if (sp->hm.expert != sp->p->expert || rid == NULL ||
		    strcmp(rid, sp->hm.run_id) != 0)
			snprintf(sp->why, sizeof(sp->why), "its held-out scores "
			    "are of expert %d of run %.16s..., not of its line",
			    sp->hm.expert, sp->hm.run_id);
		else if (mix_add(x, &sp->hm, idx, lp, sp->why) == 0)
			sp->have_heldout = 1;
	}
	free(b.data);
	free(idx);
	free(lp);
}

static double
num(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

static void
print_table(struct soma_peer *sp, int n, const struct soma_mix *x)
{
	int i;

	printf("%-22s %6s %-9s %13s %8s %8s %10s %8s\n", "peer", "expert",
	    "state", "step", "loss", "val", "pos/s", "heldout");
	for (i = 0; i < n; i++) {
		json_t *s = sp[i].status;

		if (s == NULL) {
			printf("%-22s %6d %-9s %s\n", sp[i].p->addr,
			    sp[i].p->expert, "down", sp[i].why);
			continue;
		}
		printf("%-22s %6d %-9s %6lld/%-6lld %8.4f %8.4f %10.0f ",
		    sp[i].p->addr, sp[i].p->expert, json_string_value(
		    json_object_get(s, "state")), (long long)json_integer_value(
		    json_object_get(s, "step")), (long long)json_integer_value(
		    json_object_get(s, "steps")), num(s, "loss"),
		    num(s, "val_loss"), num(s, "positions_per_s"));
		if (sp[i].have_heldout)
			printf("%8lld\n", (long long)sp[i].hm.step);
		else
			printf("%8s  %s\n", "-", sp[i].why);
	}
	if (x->sum == NULL) {
		printf("\nrouted mixture: no expert has published held-out "
		    "scores yet\n");
		return;
	}
	printf("\nrouted mixture, top-%d of %d experts, %ld held-out windows "
	    "of %d bytes: ", x->k, x->N, x->M, x->T);
	if (x->why[0])
		printf("refused: %s\n", x->why);
	else if (isnan(x->nats))
		printf("not yet (no window has all its experts' scores)\n");
	else
		printf("%.4f nats/byte (%.4f bits/byte)%s\n", x->nats,
		    x->nats / M_LN2, x->complete < x->M ? ", partial" : "");
	printf("experts reported: %d of %d", x->reported, x->N);
	for (i = 0; i < n; i++)
		if (sp[i].have_heldout)
			printf("%s %d@%lld", i ? "," : ";", sp[i].p->expert,
			    (long long)sp[i].hm.step);
	printf("\n");
	if (x->complete < x->M)
		printf("over %ld of %ld windows: the others wait for a missing "
		    "expert\n", x->complete, x->M);
}

/* The experts of 0..N-1 with no scores: named, with why. */
static void
missing(struct soma_peer *sp, int n, const struct soma_mix *x, json_t *arr,
    FILE *f)
{
	int e, i;

	for (e = 0; e < x->N; e++) {
		const char *why = "not in the peer list";

		for (i = 0; i < n; i++)
			if (sp[i].p->expert == e)
				why = sp[i].have_heldout ? NULL : sp[i].why;
		if (why == NULL)
			continue;
		if (arr != NULL)
			json_array_append_new(arr, json_pack("{s:i,s:s}",
			    "expert", e, "why", why));
		if (f != NULL)
			fprintf(f, "missing expert %d: %s\n", e, why);
	}
}

static void
print_json(struct soma_peer *sp, int n, const struct soma_mix *x)
{
	json_t *o = json_object(), *ex = json_array(), *mix = json_object();
	json_t *miss = json_array();
	int i;

	for (i = 0; i < n; i++) {
		json_t *e = json_pack("{s:i,s:s}", "expert", sp[i].p->expert,
		    "addr", sp[i].p->addr);
		json_t *s = sp[i].status;
		static const char *const keys[] = { "state", "step", "steps",
		    "loss", "val_loss", "val_step", "lr", "eps", "positions",
		    "positions_per_s" };
		size_t k;

		for (k = 0; s != NULL && k < sizeof(keys) / sizeof(keys[0]);
		    k++)
			if (json_object_get(s, keys[k]) != NULL)
				json_object_set(e, keys[k],
				    json_object_get(s, keys[k]));
		if (sp[i].have_heldout)
			json_object_set_new(e, "heldout_step",
			    json_integer(sp[i].hm.step));
		else
			json_object_set_new(e, "error", json_string(sp[i].why));
		json_array_append_new(ex, e);
	}
	missing(sp, n, x, miss, NULL);
	json_object_set_new(mix, "experts", json_integer(x->N));
	json_object_set_new(mix, "top_k", json_integer(x->k));
	json_object_set_new(mix, "window", json_integer(x->T));
	json_object_set_new(mix, "windows", json_integer(x->M));
	json_object_set_new(mix, "windows_mixed", json_integer(x->complete));
	json_object_set_new(mix, "reported", json_integer(x->reported));
	json_object_set_new(mix, "complete", json_boolean(x->sum != NULL &&
	    !x->why[0] && x->complete == x->M && x->reported == x->N));
	if (!isnan(x->nats) && !x->why[0])
		json_object_set_new(mix, "nats_per_byte", json_real(x->nats));
	if (x->why[0])
		json_object_set_new(mix, "error", json_string(x->why));
	json_object_set_new(mix, "missing", miss);
	json_object_set_new(o, "method", json_string("soma"));
	json_object_set_new(o, "run_id", json_string(x->run_id));
	json_object_set_new(o, "experts", ex);
	json_object_set_new(o, "mixture", mix);
	cli_print_json(o);
}

int
cli_status_soma(const peers_list *pl, int json)
{
	struct soma_peer *sp = calloc((size_t)pl->n, sizeof(*sp));
	struct soma_mix x = { .nats = NAN };
	int i, up = 0;

	if (sp == NULL) {
		fprintf(stderr, "shardmeter status: out of memory\n");
		return 0;
	}
	for (i = 0; i < pl->n; i++) {
		sp[i].p = &pl->v[i];
		fetch_peer(&sp[i], &x);
		up += sp[i].status != NULL;
	}
	if (x.sum != NULL)
		mix_finish(&x);
	if (json)
		print_json(sp, pl->n, &x);
	else {
		print_table(sp, pl->n, &x);
		missing(sp, pl->n, &x, NULL, stdout);
	}
	for (i = 0; i < pl->n; i++)
		json_decref(sp[i].status);
	free(sp);
	free(x.sum);
	free(x.cover);
	return up;
}
