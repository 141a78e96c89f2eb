/* Writing a plan: the spec, peer list, pipeline host list and daemon
 * configuration lines that run the first choice, and plan.json.  A key
 * this build's daemon lacks is written commented out with the reason,
 * so every file still loads and nothing is set silently. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/error.h"
#include "plan/output.h"

#define DEFAULT_PORT 7300

/* Whether this build's daemon has the key name and, for a key of
 * choices, value among them. */
static int
conf_has(const pr_key *keys, int n, const char *name, const char *value)
{
	const pr_key *k = keys == NULL ? NULL : pr_key_find(keys, n, "", name);
	int i;

	if (k == NULL || value == NULL || k->type != PR_KEY_CHOICE ||
	    k->choices == NULL)
		return k != NULL;
	for (i = 0; k->choices[i] != NULL; i++)
		if (strcmp(k->choices[i], value) == 0)
			return 1;
	return 0;
}

void
pn_support_detect(pn_support *sup, const pr_key *keys, int n)
{
	memset(sup, 0, sizeof(*sup));
	sup->int8 = conf_has(keys, n, PN_KEY_ENCODING, "int8");
	sup->zstd = conf_has(keys, n, PN_KEY_COMPRESSION, "zstd");
	sup->streams = conf_has(keys, n, PN_KEY_STREAMS, NULL);
	sup->overlap = conf_has(keys, n, PN_KEY_OVERLAP, "yes");
}

void
pn_host_addr(const topo_topology *t, int h, char *buf, size_t len)
{
	const topo_host *host = &t->hosts[h];

	if (host->address[0])
		snprintf(buf, len, "%s", host->address);
	else if (strchr(host->name, ':') != NULL)
		snprintf(buf, len, "%s", host->name);
	else
		snprintf(buf, len, "%s:%d", host->name, DEFAULT_PORT);
}

int
pn_candidate_spec(const pr_spec *s, const pn_candidate *c, pr_spec *out,
    char *err)
{
	char cwd[PATH_MAX];
	size_t i;

	*out = *s;
	out->steps = c->steps;
	out->replicas = c->nrep[0];
	out->local_steps = c->local_steps;
	pr_spec_set_layers(out, c->layers);
	/* the plan's folder is not the spec's: its data paths must not be
	 * relative to either */
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		return kn_error(err, KN_EIO, "getcwd: %s", strerror(errno));
	for (i = 0; i < pr_spec_nkeys; i++) {
		const pr_key *k = &pr_spec_keys[i];
		char *path = (char *)out + k->offset, joined[PR_PATH_LEN];

		if (!(k->flags & PR_KEY_PATH) || path[0] == '\0' ||
		    path[0] == '/')
			continue;
		if ((size_t)snprintf(joined, sizeof(joined), "%s/%s", cwd,
		    path) >= sizeof(joined))
			return kn_error(err, KN_EINVAL, "[%s] %s: path too long",
			    k->section, k->name);
		snprintf(path, k->size, "%s", joined);
	}
	return pr_spec_validate(out, err);
}

static json_t *
breakdown_json(const pn_breakdown *b)
{
	return json_pack("{s:f,s:f,s:f,s:f}", "compute", b->compute,
	    "straggler", b->straggler, "transfer", b->transfer, "latency",
	    b->latency);
}

static json_t *
serve_json(const pn_serve_mode *m)
{
	return json_pack("{s:f,s:o,s:f}", "latency_s", m->latency_s,
	    "breakdown", breakdown_json(&m->part), "output_bytes_per_s",
	    m->bytes_per_s);
}

static json_t *
serve_loss_json(const topo_topology *t, const pn_serve_loss *l)
{
	json_t *o = json_pack("{s:s,s:i,s:b}", "host", t->hosts[l->host].name,
	    "block", l->block + 1, "ring_fails", l->fails);

	if (!l->fails)
		json_object_set_new(o, "via", json_string(
		    t->hosts[l->via].name));
	if (!l->fails) {
		json_object_set_new(o, "latency_s", json_real(l->latency_s));
		json_object_set_new(o, "breakdown", breakdown_json(&l->part));
	}
	return o;
}

/* The ring's hosts, block T first, each block's in the order a request
 * tries them, and one traversal with each of them lost. */
static void
serve_hosts_json(const topo_topology *t, const pr_spec *s,
    const pn_result *r, json_t *serve)
{
	const pn_candidate *c = &r->c;
	json_t *hosts = json_array(), *losses = json_array();
	pn_serve_loss l;
	int b, k;

	for (b = c->blocks - 1; b >= 0; b--) {
		json_t *one = json_array();

		for (k = 0; k <= c->nalt[b]; k++) {
			json_array_append_new(one, json_string(t->hosts[k == 0 ?
			    c->ring[b] : c->alt[b][k - 1]].name));
			pn_serve_loss_of(t, s, c, &r->p, b, k, &l);
			json_array_append_new(losses, serve_loss_json(t, &l));
		}
		json_array_append_new(hosts, one);
	}
	json_object_set_new(serve, "hosts", hosts);
	json_object_set_new(serve, "one_host_down", losses);
	json_object_set_new(serve, "worst_host_down",
	    serve_loss_json(t, &r->p.serve_lost));
}

static json_t *
train_loss_json(const topo_topology *t, const pn_train_loss *l)
{
	json_t *o = json_pack("{s:s,s:i,s:b,s:f}", "host",
	    t->hosts[l->host].name, "block", l->block + 1, "halts", l->halts,
	    "positions_per_s", l->positions_per_s);

	if (!l->halts) {
		json_object_set_new(o, "round_s", json_real(l->round_s));
		json_object_set_new(o, "train_s", json_real(l->train_s));
	}
	return o;
}

static json_t *
links_json(const topo_topology *t, const pn_result *r)
{
	size_t n = (size_t)t->nhosts * t->nhosts, k;
	double *bytes = malloc(n * sizeof(double));
	json_t *arr = json_array();

	if (bytes == NULL)
		return arr;
	pn_link_bytes(t, &r->c, &r->p, bytes);
	for (k = 0; k < n; k++)
		if (bytes[k] > 0)
			json_array_append_new(arr, json_pack("{s:s,s:s,s:f}",
			    "from", t->hosts[k / t->nhosts].name, "to",
			    t->hosts[k % t->nhosts].name, "bytes_per_hour",
			    bytes[k]));
	free(bytes);
	return arr;
}

json_t *
pn_result_json(const topo_topology *t, const pr_spec *s, const pn_result *r,
    const pn_result *def)
{
	const pn_candidate *c = &r->c;
	const pn_prediction *p = &r->p;
	json_t *blocks = json_array(), *o;
	int b, k;

	for (b = 0; b < c->blocks; b++) {
		const pn_block_pred *bp = &p->block[b];
		json_t *hosts = json_array();

		for (k = 0; k < c->nrep[b]; k++)
			json_array_append_new(hosts,
			    json_string(t->hosts[c->host[b][k]].name));
		json_array_append_new(blocks, json_pack("{s:i,s:i,s:o,s:f,s:f,"
		    "s:f,s:f,s:f,s:f,s:f,s:o,s:o}", "block", b + 1, "layers",
		    c->layers[b], "hosts", hosts, "step_s", bp->step_s,
		    "round_s", bp->round_s, "exchange_s", bp->exchange_s,
		    "round_cpu_s", bp->round_cpu_s,
		    "update_bytes", bp->update_bytes, "positions_per_s",
		    bp->positions_per_s, "train_s", bp->train_s, "round",
		    breakdown_json(&bp->round), "train",
		    breakdown_json(&bp->train)));
	}
	o = json_pack("{s:{s:i,s:i,s:i,s:s,s:b,s:i,s:b},s:o,s:f,s:f,s:i,s:f,"
	    "s:o}", "options", "replicas", c->nrep[0], "local_steps",
	    c->local_steps, "steps", c->steps, "encoding",
	    pr_encoding_name(c->enc), "zstd", c->zstd, "streams", c->streams,
	    "overlap", c->overlap, "blocks", blocks, "train_s", p->train_s,
	    "positions_per_s", p->positions_per_s, "slowest_block",
	    p->slowest + 1, "max_link_bytes_per_hour",
	    p->max_link_bytes_per_h, "links", links_json(t, r));
	if (def != NULL && r->score > 0)
		json_object_set_new(o, "speedup", json_real(def->score /
		    r->score));
	if (p->train_lost.host >= 0)
		json_object_set_new(o, "worst_replica_down",
		    train_loss_json(t, &p->train_lost));
	if (p->serve) {
		json_t *ring = json_array(), *serve;

		for (b = c->blocks - 1; b >= 0; b--)
			json_array_append_new(ring,
			    json_string(t->hosts[c->ring[b]].name));
		serve = json_pack("{s:o,s:i,s:i,s:o,s:o}", "ring", ring,
		    "output_bytes", p->output_bytes, "denoising_steps",
		    PN_SERVE_STEPS, "blocktrain", serve_json(&p->bt), "ar",
		    serve_json(&p->ar));
		serve_hosts_json(t, s, r, serve);
		json_object_set_new(o, "serve", serve);
	}
	return o;
}

static const char *
goal_name(pn_goal g)
{
	return g == PN_GOAL_SERVE ? "serve" : g == PN_GOAL_BOTH ? "both" :
	    "train";
}

json_t *
pn_plan_json(const topo_topology *t, const pr_spec *s, const pn_options *o,
    const pn_plan *plan)
{
	json_t *cands = json_array(), *root;
	char run_id[PR_RUN_ID_LEN] = "", chosen_id[PR_RUN_ID_LEN] = "";
	char err[KN_ERR_LEN];
	pr_spec written;
	int i;

	pr_spec_run_id(s, run_id, NULL);
	/* the run of the written spec.conf, which daemons started from the
	 * plan check it against */
	if (pn_candidate_spec(s, &plan->v[plan->chosen].c, &written, err) == 0)
		pr_spec_run_id(&written, chosen_id, NULL);
	for (i = 0; i < plan->nall; i++) {
		json_t *r;

		if (i >= plan->n && i != plan->chosen)
			continue;
		r = pn_result_json(t, s, &plan->v[i], &plan->def);

		json_object_set_new(r, "rank", json_integer(i + 1));
		json_array_append_new(cands, r);
	}
	root = json_pack("{s:i,s:s,s:s,s:s,s:{s:s,s:f,s:f},s:o,s:o,s:i}",
	    "version", 1, "goal", goal_name(o->goal), "measured_at",
	    t->measured_at, "spec_run_id", run_id, "search", "method",
	    plan->exhaustive ? "exhaustive" : "greedy and swaps",
	    "evaluated", plan->evaluated, "placements_per_option_set",
	    plan->placements, "default", pn_result_json(t, s, &plan->def,
	    NULL),
	    "candidates", cands, "chosen", plan->chosen + 1);
	if (chosen_id[0])
		json_object_set_new(root, "run_id", json_string(chosen_id));
	return root;
}

static FILE *
open_out(const char *dir, const char *name, char *path, size_t len,
    char *err)
{
	FILE *f;

	if ((size_t)snprintf(path, len, "%s/%s", dir, name) >= len) {
		kn_error(err, KN_EINVAL, "%.200s/%s: the path is too long", dir,
		    name);
		return NULL;
	}
	if ((f = fopen(path, "w")) == NULL)
		kn_error(err, KN_EIO, "cannot write %.200s: %s", path,
		    strerror(errno));
	return f;
}

static int
close_out(FILE *f, const char *path, char *err)
{
	if (ferror(f) | (fclose(f) != 0))
		return kn_error(err, KN_EIO, "cannot write %.200s", path);
	return KN_OK;
}

static int
write_spec(const char *dir, const pr_spec *s, const pn_candidate *c,
    const char *what, char *err)
{
	char path[PR_PATH_LEN];
	pr_spec out;
	FILE *f;
	int rc;

	if ((rc = pn_candidate_spec(s, c, &out, err)) != 0)
		return rc;
	if ((f = open_out(dir, "spec.conf", path, sizeof(path), err)) == NULL)
		return KN_EIO;
	fprintf(f, "# written by shardmeter plan: %s\n", what);
	pr_spec_print(f, &out);
	return close_out(f, path, err);
}

static int
write_peers(const char *dir, const topo_topology *t, const pn_candidate *c,
    char *err)
{
	char path[PR_PATH_LEN], addr[TOPO_NAME_LEN + 8];
	FILE *f;
	int b, r;

	if ((f = open_out(dir, "peers", path, sizeof(path), err)) == NULL)
		return KN_EIO;
	fprintf(f, "# written by shardmeter plan: host:port block [peer-id];"
	    "\n# a block's lines give its replicas their order (replica 0 "
	    "coordinates).\n# NAME:%d is a placeholder for a host the "
	    "topology gives no address.\n", DEFAULT_PORT);
	for (b = 0; b < c->blocks; b++)
		for (r = 0; r < c->nrep[b]; r++) {
			int h = c->host[b][r];

			pn_host_addr(t, h, addr, sizeof(addr));
			fprintf(f, "%s %d%s%s\n", addr, b + 1,
			    t->hosts[h].id[0] ? " " : "", t->hosts[h].id);
		}
	return close_out(f, path, err);
}

static int
write_pipeline(const char *dir, const topo_topology *t, const pn_candidate *c,
    char *err)
{
	char path[PR_PATH_LEN], addr[TOPO_NAME_LEN + 8];
	FILE *f;
	int b, k, several = 0;

	if ((f = open_out(dir, "pipeline", path, sizeof(path), err)) == NULL)
		return KN_EIO;
	fprintf(f, "# written by shardmeter plan: the ring in traversal order, "
	    "the entry first\n");
	for (b = 0; b < c->blocks; b++)
		several |= c->nalt[b] > 0;
	if (several)
		fprintf(f, "# several lines of a block: its hosts in the order a "
		    "request tries them\n");
	for (b = c->blocks - 1; b >= 0; b--)
		for (k = 0; k <= c->nalt[b]; k++) {
			int h = k == 0 ? c->ring[b] : c->alt[b][k - 1];

			pn_host_addr(t, h, addr, sizeof(addr));
			fprintf(f, "%s %d%s%s\n", addr, b + 1,
			    t->hosts[h].id[0] ? " " : "", t->hosts[h].id);
		}
	return close_out(f, path, err);
}

/* One daemon's line; a key (or value) this build's daemon lacks is
 * written commented out. */
static void
conf_line(FILE *f, const pn_options *o, const char *name,
    const char *value)
{
	if (conf_has(o->daemon_keys, o->daemon_nkeys, name, value))
		fprintf(f, "%s = %s\n", name, value);
	else
		fprintf(f, "# %s = %s   (not in this build's blocktraind)\n",
		    name, value);
}

static int
write_confs(const char *dir, const topo_topology *t, const pn_candidate *c,
    const pn_options *o, char *err)
{
	char sub[PR_PATH_LEN], path[PR_PATH_LEN], name[TOPO_NAME_LEN + 8];
	char addr[TOPO_NAME_LEN + 8], v[32];
	int b, r, rc = 0;
	size_t i;

	snprintf(sub, sizeof(sub), "%s/conf", dir);
	if (mkdir(sub, 0777) != 0 && errno != EEXIST)
		return kn_error(err, KN_EIO, "cannot make %.200s: %s", sub,
		    strerror(errno));
	for (b = 0; b < c->blocks && rc == 0; b++)
		for (r = 0; r < c->nrep[b] && rc == 0; r++) {
			int h = c->host[b][r];
			FILE *f;

			/* a file name of the host's name, ':' and '/' aside */
			snprintf(name, sizeof(name), "%s.conf", t->hosts[h].name);
			for (i = 0; name[i]; i++)
				if (name[i] == '/' || name[i] == ':')
					name[i] = '_';
			if ((f = open_out(sub, name, path, sizeof(path),
			    err)) == NULL)
				return KN_EIO;
			pn_host_addr(t, h, addr, sizeof(addr));
			fprintf(f, "# %s: merge into its blocktrain.conf (spec, "
			    "peers and state_dir as on that host)\n",
			    t->hosts[h].name);
			snprintf(v, sizeof(v), "%d", b + 1);
			conf_line(f, o, "block", v);
			conf_line(f, o, "advertise", addr);
			conf_line(f, o, PN_KEY_ENCODING, pr_encoding_name(c->enc));
			conf_line(f, o, PN_KEY_COMPRESSION, pr_compression_name(
			    c->zstd ? PR_COMP_ZSTD : PR_COMP_NONE));
			snprintf(v, sizeof(v), "%d", c->streams);
			conf_line(f, o, PN_KEY_STREAMS, v);
			conf_line(f, o, PN_KEY_OVERLAP, c->overlap ? "yes" : "no");
			fprintf(f, "# the predictions, reported beside the "
			    "measured figures; relative to this file\n");
			conf_line(f, o, "plan", "../plan.json");
			rc = close_out(f, path, err);
		}
	return rc;
}

static int
write_json(const char *dir, const topo_topology *t, const pr_spec *s,
    const pn_options *o, const pn_plan *plan, int pick, char *err)
{
	char path[PR_PATH_LEN], id[PR_RUN_ID_LEN];
	json_t *j = pn_plan_json(t, s, o, plan);
	pr_spec written;
	int rc;

	/* which row the other files run, when not the first choice, and the
	 * run id of its spec.conf: daemons take that row's predictions */
	if (pick != plan->chosen + 1) {
		json_object_set_new(j, "written", json_integer(pick));
		if (pn_candidate_spec(s, pick == 0 ? &plan->def.c :
		    &plan->v[pick - 1].c, &written, err) != 0 ||
		    pr_spec_run_id(&written, id, err) != 0) {
			json_decref(j);
			return KN_EINVAL;
		}
		json_object_set_new(j, "run_id", json_string(id));
	}
	snprintf(path, sizeof(path), "%s/plan.json", dir);
	rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS |
	    JSON_REAL_PRECISION(10));
	json_decref(j);
	return rc != 0 ? kn_error(err, KN_EIO, "cannot write %.200s", path) :
	    KN_OK;
}

int
pn_write_pick(const char *dir, const topo_topology *t, const pr_spec *s,
    const pn_options *o, const pn_plan *plan, int pick, char *err)
{
	const pn_candidate *c;
	char what[64];
	int rc;

	if (pick < 0 || pick > plan->nall || (pick > plan->n &&
	    pick != plan->chosen + 1))
		return kn_error(err, KN_EINVAL, "no candidate of rank %d (the "
		    "table has %d)", pick, plan->n);
	c = pick == 0 ? &plan->def.c : &plan->v[pick - 1].c;
	if (pick == 0)
		snprintf(what, sizeof(what), "the default configuration");
	else if (pick == plan->chosen + 1)
		snprintf(what, sizeof(what), "the first choice");
	else
		snprintf(what, sizeof(what), "the candidate of rank %d", pick);
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		return kn_error(err, KN_EIO, "cannot make %.200s: %s", dir,
		    strerror(errno));
	if ((rc = write_spec(dir, s, c, what, err)) != 0 ||
	    (rc = write_peers(dir, t, c, err)) != 0 ||
	    (c->ring[0] >= 0 && (rc = write_pipeline(dir, t, c, err)) != 0) ||
	    (rc = write_confs(dir, t, c, o, err)) != 0)
		return rc;
	return write_json(dir, t, s, o, plan, pick, err);
}

int
pn_write(const char *dir, const topo_topology *t, const pr_spec *s,
    const pn_options *o, const pn_plan *plan, char *err)
{
	return pn_write_pick(dir, t, s, o, plan, plan->chosen + 1, err);
}
