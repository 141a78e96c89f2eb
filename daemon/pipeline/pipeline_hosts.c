/* Parsing the pipeline's host list: host lines with their peer ids,
 * client lines, and the optional logical shape. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "proto/router.h"

static int
parse_blocks(const char *s, int *hi, int *lo)
{
	char *end;
	long a = strtol(s, &end, 10), b = a;

	if (end == s || a < 1 || a > PR_MAX_BLOCKS)
		return KN_EINVAL;
	if (*end == '-') {
		const char *t = end + 1;

		b = strtol(t, &end, 10);
		if (end == t || b < 1 || b > PR_MAX_BLOCKS)
			return KN_EINVAL;
	}
	if (*end != '\0')
		return KN_EINVAL;
	*hi = (int)(a > b ? a : b);
	*lo = (int)(a > b ? b : a);
	return KN_OK;
}

static int
parse_shape(ph_list *pl, char *rest, const char *path, int lineno,
    char *err)
{
	char *save = NULL, *t;
	kn_model_shape s;

	pl->seed = 1;
	for (t = strtok_r(rest, " \t", &save); t != NULL;
	    t = strtok_r(NULL, " \t", &save)) {
		char *eq = strchr(t, '='), *end;
		unsigned long long v;

		if (eq == NULL)
			return kn_error(err, KN_EINVAL, "%.150s:%d: '%.40s' is "
			    "not key=value", path, lineno, t);
		*eq = '\0';
		if (strcmp(t, "storage") == 0) {
			if (strcmp(eq + 1, "f16") != 0 && strcmp(eq + 1, "f32") != 0)
				return kn_error(err, KN_EINVAL, "%.150s:%d: storage "
				    "is f32 or f16, not '%.20s'", path, lineno, eq + 1);
			pl->f16 = strcmp(eq + 1, "f16") == 0;
			continue;
		}
		errno = 0;
		v = strtoull(eq + 1, &end, 10);
		if (errno || end == eq + 1 || *end || (strcmp(t, "seed") != 0 &&
		    v > 1000000))
			return kn_error(err, KN_EINVAL, "%.150s:%d: %s=%.40s is "
			    "not a count", path, lineno, t, eq + 1);
		if (strcmp(t, "width") == 0)
			pl->width = (int)v;
		else if (strcmp(t, "heads") == 0)
			pl->heads = (int)v;
		else if (strcmp(t, "layers") == 0)
			pl->layers_per_block = (int)v;
		else if (strcmp(t, "window") == 0)
			pl->window = (int)v;
		else if (strcmp(t, "blocks") == 0)
			pl->blocks = (int)v;
		else if (strcmp(t, "seed") == 0)
			pl->seed = v;
		else if (strcmp(t, "position_block") == 0)
			pl->pos_block = (int)v;
		else
			return kn_error(err, KN_EINVAL, "%.150s:%d: unknown shape "
			    "key '%.40s' (width, heads, layers, window, blocks, "
			    "position_block, seed, storage)", path, lineno, t);
	}
	s = (kn_model_shape){ pl->width, pl->heads, pl->layers_per_block,
	    pl->window, 0, 0 };
	if (pl->pos_block != 0 && (pl->pos_block > pl->window ||
	    pl->window % pl->pos_block != 0))
		return kn_error(err, KN_EINVAL, "%.150s:%d: position_block=%d "
		    "must divide window=%d", path, lineno, pl->pos_block,
		    pl->window);
	if (pl->blocks < 1 || pl->blocks > PR_MAX_BLOCKS ||
	    kn_model_check_shape(&s, err) != 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: a logical shape needs "
		    "width, heads (dividing width), layers, window and blocks "
		    "(1 to %d), each positive", path, lineno, PR_MAX_BLOCKS);
	pl->logical = 1;
	return KN_OK;
}

/* "experts=E" or "experts=E-F", numbered from 0 */
static int
parse_experts(const char *s, int *lo, int *hi)
{
	char *end;
	long a, b;

	if (strncmp(s, "experts=", 8) != 0)
		return KN_EINVAL;
	s += 8;
	a = b = strtol(s, &end, 10);
	if (end == s || a < 0 || a >= PR_ROUTER_MAX_EXPERTS)
		return KN_EINVAL;
	if (*end == '-') {
		const char *t = end + 1;

		b = strtol(t, &end, 10);
		if (end == t || b < a || b >= PR_ROUTER_MAX_EXPERTS)
			return KN_EINVAL;
	}
	if (*end != '\0')
		return KN_EINVAL;
	*lo = (int)a;
	*hi = (int)b;
	return KN_OK;
}

/* "host:port BLOCKS [PEER-ID]" or "host:port experts=E[-F] [PEER-ID]" */
static int
parse_host(ph_host *h, char **tok, int n, const char *path, int lineno,
    char *err)
{
	char why[KN_ERR_LEN];

	if (n != 2 && n != 3)
		return kn_error(err, KN_EINVAL, "%.150s:%d: expected 'host:port "
		    "BLOCKS peer-id' (BLOCKS: 4, or 4-3 for two blocks) or "
		    "'client peer-id [name]'", path, lineno);
	memset(h, 0, sizeof(*h));
	if (cf_parse_hostport(tok[0], h->host, sizeof(h->host), &h->port) != 0
	    || h->port == 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: '%.40s' is not "
		    "host:port", path, lineno, tok[0]);
	snprintf(h->addr, sizeof(h->addr), "%s", tok[0]);
	if (strncmp(tok[1], "experts=", 8) == 0) {
		if (parse_experts(tok[1], &h->expert_lo, &h->expert_hi) != 0)
			return kn_error(err, KN_EINVAL, "%.150s:%d: '%.30s' is "
			    "not experts=E or experts=E-F (E <= F, from 0)", path,
			    lineno, tok[1]);
		h->block_hi = h->block_lo = -1;
	} else if (strncmp(tok[1], "expert=", 7) == 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: '%.30s' is a line of "
		    "a training daemon's peer list (blocktraind without -S); a "
		    "pipeline host list names the experts a host serves as "
		    "experts=E or experts=E-F", path, lineno, tok[1]);
	else if (parse_blocks(tok[1], &h->block_hi, &h->block_lo) != 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: blocks '%.20s' are "
		    "not B or B-C with blocks from 1 to %d", path, lineno,
		    tok[1], PR_MAX_BLOCKS);
	if (n == 3) {
		if (id_parse(tok[2], h->id, why) != 0)
			return kn_error(err, KN_EINVAL, "%.150s:%d: %.200s",
			    path, lineno, why);
		id_format(h->id, h->id_text);
		h->has_id = 1;
	}
	return KN_OK;
}

/* "client PEER-ID [name]", appended to pl's clients. */
static int
parse_client(ph_list *pl, int *cap, char **tok, int n, const char *path,
    int lineno, char *err)
{
	peers_client c;
	int rc;

	if ((rc = peers_parse_client(&c, tok, n, path, lineno, err)) != 0)
		return rc;
	if (ph_find_id(pl, c.id) >= 0 || ph_client_find(pl, c.id) >= 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: peer id %s is "
		    "listed twice", path, lineno, c.id_text);
	if (pl->nclients == *cap) {
		int ncap = *cap ? *cap * 2 : 8;
		peers_client *v = realloc(pl->clients, (size_t)ncap *
		    sizeof(*v));

		if (v == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		pl->clients = v;
		*cap = ncap;
	}
	pl->clients[pl->nclients++] = c;
	return KN_OK;
}

/* A host line, checked against the lines before it. */
static int
add_host(ph_list *pl, char **tok, int n, const char *path, int lineno,
    char *err)
{
	ph_host *h = &pl->v[pl->n];
	const ph_host *prev;
	int rc, i, expect, same;

	if (pl->n == PH_MAX_HOSTS)
		return kn_error(err, KN_EINVAL, "%.150s:%d: more than %d hosts",
		    path, lineno, PH_MAX_HOSTS);
	if ((rc = parse_host(h, tok, n, path, lineno, err)) != 0)
		return rc;
	if (pl->n == 0)
		pl->soma = h->block_hi < 0;
	if (pl->soma != (h->block_hi < 0))
		return kn_error(err, KN_EINVAL, "%.150s:%d: a list gives blocks "
		    "or experts=, not both", path, lineno);
	/* traversal order: each host takes over where the last ended, or
	 * serves the last one's blocks beside it */
	prev = pl->n > 0 ? &pl->v[pl->n - 1] : NULL;
	same = !pl->soma && prev != NULL && h->block_hi == prev->block_hi &&
	    h->block_lo == prev->block_lo;
	expect = prev == NULL ? h->block_hi : prev->block_lo - 1;
	if (!pl->soma && !same && prev != NULL &&
	    h->block_hi == prev->block_hi)
		return kn_error(err, KN_EINVAL, "%.150s:%d: this host serves "
		    "blocks %d-%d, the line before %d-%d: hosts of the same "
		    "blocks give the same range, on lines one after another",
		    path, lineno, h->block_hi, h->block_lo, prev->block_hi,
		    prev->block_lo);
	/* a training daemon's peer list counts its blocks up from 1, or
	 * lists its replicas after the blocks: told apart from a slip */
	if (!pl->soma && prev != NULL && h->block_hi > prev->block_hi)
		return kn_error(err, KN_EINVAL, "%.150s:%d: block %d after block "
		    "%d: the blocks go up, as in a training daemon's peer list "
		    "(blocktraind without -S); a pipeline host list (blocktraind "
		    "-S, shardmeter generate --peers) gives its hosts in "
		    "traversal order, the last block first, down to block 1",
		    path, lineno, h->block_hi, prev->block_hi);
	if (!pl->soma && !same && expect == 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: the line before "
		    "ends at block 1: hosts of the same blocks give the same "
		    "range, on lines one after another", path, lineno);
	if (!pl->soma && !same && h->block_hi != expect)
		return kn_error(err, KN_EINVAL, "%.150s:%d: this host should "
		    "start at block %d: hosts are listed in traversal order, "
		    "the last block first", path, lineno, expect);
	for (i = 0; i < pl->n; i++)
		if (strcmp(pl->v[i].addr, h->addr) == 0)
			return kn_error(err, KN_EINVAL, "%.150s:%d: %s is listed "
			    "twice", path, lineno, h->addr);
	if (h->has_id && (ph_find_id(pl, h->id) >= 0 ||
	    ph_client_find(pl, h->id) >= 0))
		return kn_error(err, KN_EINVAL, "%.150s:%d: peer id %s is "
		    "listed twice", path, lineno, h->id_text);
	pl->missing_ids += !h->has_id;
	if (!pl->soma) {
		if (!same)
			pl->stage_first[pl->nstages++] = pl->n;
		h->stage = pl->nstages - 1;
		pl->stage_first[pl->nstages] = pl->n + 1;
	}
	pl->n++;
	return KN_OK;
}

/* One line that is not blank: a shape, a client or a host. */
static int
parse_line(ph_list *pl, int *cap, char *line, const char *path, int lineno,
    char *err)
{
	char *tok[4] = { NULL }, *save = NULL, *t;
	int n = 0;

	if (strncmp(line, "shape", 5) == 0 && (line[5] == ' ' ||
	    line[5] == '\t'))
		return pl->logical ? kn_error(err, KN_EINVAL, "%.150s:%d: a "
		    "second shape line", path, lineno) :
		    parse_shape(pl, line + 6, path, lineno, err);
	for (t = strtok_r(line, " \t", &save); t != NULL && n < 4;
	    t = strtok_r(NULL, " \t", &save))
		tok[n++] = t;
	if (n > 0 && strcmp(tok[0], "client") == 0)
		return parse_client(pl, cap, tok, n, path, lineno, err);
	return add_host(pl, tok, n, path, lineno, err);
}

int
ph_load(ph_list *pl, const char *path, char *err)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int lineno = 0, rc = KN_OK, cap = 0;

	memset(pl, 0, sizeof(*pl));
	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open pipeline host list "
		    "%s: %s", path, strerror(errno));
	while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
		char *s = cf_list_line(line);

		lineno++;
		if (*s != '\0')
			rc = parse_line(pl, &cap, s, path, lineno, err);
	}
	fclose(f);
	if (rc == 0 && pl->n == 0)
		rc = kn_error(err, KN_EINVAL, "%.150s: no hosts", path);
	if (rc == 0 && pl->soma && pl->logical)
		rc = kn_error(err, KN_EINVAL, "%.150s: a shape line is for "
		    "BlockTrain hosts, not experts=", path);
	if (rc == 0 && !pl->soma && pl->v[pl->n - 1].block_lo != 1)
		rc = kn_error(err, KN_EINVAL, "%.150s: the last host must serve "
		    "block 1 (it ends at block %d)", path,
		    pl->v[pl->n - 1].block_lo);
	if (rc == 0 && pl->logical && pl->v[0].block_hi != pl->blocks)
		rc = kn_error(err, KN_EINVAL, "%.150s: the shape has %d blocks, "
		    "the hosts serve %d", path, pl->blocks, pl->v[0].block_hi);
	if (rc == 0 && pl->logical) {
		pr_spec s;

		ph_logical_spec(pl, &s);
		rc = ph_assign(pl, &s, err);
	}
	if (rc != 0)
		ph_free(pl);
	return rc;
}

void
ph_free(ph_list *pl)
{
	free(pl->clients);
	pl->clients = NULL;
	pl->nclients = 0;
}

int
ph_assign(ph_list *pl, const pr_spec *s, char *err)
{
	int blocks = s->blocks, total = pr_spec_total_layers(s), i;

	if (pl->v[0].block_hi != blocks)
		return kn_error(err, KN_EINVAL, "the host list serves %d blocks, "
		    "the run has %d", pl->v[0].block_hi, blocks);
	if (total < pl->nstages)
		return kn_error(err, KN_EINVAL, "%d causal layers cannot be split "
		    "over %d %s", total, pl->nstages, pl->nstages == pl->n ?
		    "hosts" : "stages (block ranges)");
	/* every host of a stage runs its stage's layers, so that any of
	 * them can take an ar frame the stage before sends */
	for (i = 0; i < pl->n; i++) {
		int st = pl->v[i].stage, S = pl->nstages;

		pl->v[i].layer_lo = st * total / S;
		pl->v[i].layer_hi = (st + 1) * total / S;
	}
	return KN_OK;
}

int
ph_stage_size(const ph_list *pl, int st)
{
	return st >= 0 && st < pl->nstages ? pl->stage_first[st + 1] -
	    pl->stage_first[st] : 0;
}

void
ph_logical_spec(const ph_list *pl, pr_spec *s)
{
	int b;

	pr_spec_defaults(s);
	s->blocks = pl->blocks;
	s->width = pl->width;
	s->heads = pl->heads;
	s->layers_per_block = pl->layers_per_block;
	s->window = pl->window;
	s->position_block = pl->pos_block;
	s->seed = pl->seed;
	for (b = 0; b <= s->blocks; b++)
		s->cuts[b] = (double)b / s->blocks;
	s->equal_cuts = 1;
}

/* The host whose address is addr, or (addr NULL) whose peer id is id. */
static int
host_index(const ph_list *pl, const char *addr, const uint8_t *id)
{
	int i;

	for (i = 0; i < pl->n; i++)
		if (addr != NULL ? strcmp(pl->v[i].addr, addr) == 0 :
		    pl->v[i].has_id && id_equal(pl->v[i].id, id))
			return i;
	return -1;
}

int
ph_find(const ph_list *pl, const char *addr)
{
	return host_index(pl, addr, NULL);
}

int
ph_find_id(const ph_list *pl, const uint8_t id[ID_BYTES])
{
	return host_index(pl, NULL, id);
}

int
ph_client_find(const ph_list *pl, const uint8_t id[ID_BYTES])
{
	/* the client lines are the peer list's, searched the same way */
	peers_list clients = { .clients = pl->clients,
	    .nclients = pl->nclients };

	return peers_client_find(&clients, id);
}

int
ph_soma_check(const ph_list *pl, int N, char *err)
{
	int e, i, count;

	if (!pl->soma)
		return kn_error(err, KN_EINVAL, "the host list gives blocks; a "
		    "SOMA spec needs 'host:port experts=E-F peer-id' lines");
	for (i = 0; i < pl->n; i++)
		if (pl->v[i].expert_hi >= N)
			return kn_error(err, KN_EINVAL, "host %s serves expert %d; "
			    "the spec has %d (0 to %d)", pl->v[i].addr,
			    pl->v[i].expert_hi, N, N - 1);
	for (e = 0; e < N; e++) {
		for (i = count = 0; i < pl->n; i++)
			count += e >= pl->v[i].expert_lo &&
			    e <= pl->v[i].expert_hi;
		if (count != 1)
			return kn_error(err, KN_EINVAL, "expert %d is served by "
			    "%d hosts; each must be on exactly one", e, count);
	}
	return KN_OK;
}

int
ph_expert_host(const ph_list *pl, int e)
{
	int i;

	for (i = 0; pl->soma && i < pl->n; i++)
		if (e >= pl->v[i].expert_lo && e <= pl->v[i].expert_hi)
			return i;
	return -1;
}
