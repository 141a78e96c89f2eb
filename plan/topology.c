/* Reading a topology file for the planner, strictly: an unknown key, a
 * number that is not positive and finite, a host named twice or an
 * ordered pair of hosts without exactly one link is an error that names
 * the file and the entry.  The compact form of hand-written files is
 * expanded here, so the cost model only ever sees the full form. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernels/error.h"
#include "plan/topology.h"
#include "proto/checkpoint.h"

#define SITE_PREFIX "site:"

/* Where in the file a message is about: "FILE: hosts[2] (h2)". */
struct where {
	const char *file;
	char at[160];
};

static int
bad(const struct where *w, char *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
bad(const struct where *w, char *err, const char *fmt, ...)
{
	char msg[KN_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return kn_error(err, KN_EINVAL, "%.80s: %s%s%s", w->file, w->at,
	    w->at[0] ? ": " : "", msg);
}

/* Every key of o is one of allowed (NULL-terminated). */
static int
only_keys(const struct where *w, json_t *o, const char *const *allowed,
    char *err)
{
	const char *key;
	json_t *v;
	int i;

	json_object_foreach(o, key, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL)
			return bad(w, err, "unknown key \"%s\"", key);
	}
	return KN_OK;
}

/* A positive finite number; absent: *out keeps its value unless needed. */
static int
get_positive(const struct where *w, json_t *o, const char *key, int needed,
    int zero_ok, double *out, char *err)
{
	json_t *v = json_object_get(o, key);
	double x;

	if (v == NULL)
		return needed ? bad(w, err, "\"%s\" is missing", key) : KN_OK;
	if (!json_is_number(v))
		return bad(w, err, "\"%s\" must be a number", key);
	x = json_number_value(v);
	if (!isfinite(x) || x < 0 || (x == 0 && !zero_ok))
		return bad(w, err, "\"%s\" must be a %s finite number, not %g",
		    key, zero_ok ? "non-negative" : "positive", x);
	*out = x;
	return KN_OK;
}

static int
get_count(const struct where *w, json_t *o, const char *key, int needed,
    int *out, char *err)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL)
		return needed ? bad(w, err, "\"%s\" is missing", key) : KN_OK;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > (1 << 30))
		return bad(w, err, "\"%s\" must be a positive integer", key);
	*out = (int)json_integer_value(v);
	return KN_OK;
}

static int
get_string(const struct where *w, json_t *o, const char *key, int needed,
    char *out, size_t len, char *err)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL)
		return needed ? bad(w, err, "\"%s\" is missing", key) : KN_OK;
	if (!json_is_string(v))
		return bad(w, err, "\"%s\" must be a string", key);
	if (json_string_length(v) >= len)
		return bad(w, err, "\"%s\" is longer than %zu bytes", key,
		    len - 1);
	if (needed && json_string_length(v) == 0)
		return bad(w, err, "\"%s\" is empty", key);
	snprintf(out, len, "%s", json_string_value(v));
	return KN_OK;
}

static int
read_shape(const struct where *file, json_t *root, pl_topology *t, char *err)
{
	static const char *const keys[] = { "width", "heads", "layers",
	    "window", "batch", NULL };
	struct where w = *file;
	json_t *o = json_object_get(root, "shape");
	char kerr[KN_ERR_LEN];
	int rc;

	snprintf(w.at, sizeof(w.at), "shape");
	if (!json_is_object(o))
		return bad(&w, err, "missing, or not an object");
	if ((rc = only_keys(&w, o, keys, err)) != 0 ||
	    (rc = get_count(&w, o, "width", 1, &t->shape.width, err)) != 0 ||
	    (rc = get_count(&w, o, "heads", 1, &t->shape.heads, err)) != 0 ||
	    (rc = get_count(&w, o, "layers", 1, &t->shape.layers, err)) != 0 ||
	    (rc = get_count(&w, o, "window", 1, &t->shape.window, err)) != 0 ||
	    (rc = get_count(&w, o, "batch", 1, &t->batch, err)) != 0)
		return rc;
	t->shape.causal = 0;
	if (kn_model_check_shape(&t->shape, kerr) != 0)
		return bad(&w, err, "%s", kerr);
	return KN_OK;
}

/* One entry of "hosts": a host, or with "count" that many alike, named
 * NAME-0, NAME-1, ... in site "site" (default NAME). */
static int
read_host(const struct where *file, json_t *o, size_t i, pl_topology *t,
    char *err)
{
	static const char *const keys[] = { "name", "address", "id",
	    "device", "memory_bytes", "train_positions_per_s",
	    "forward_positions_per_s", "site", "count", NULL };
	struct where w = *file;
	pl_host h;
	int rc, count = 1, k;

	memset(&h, 0, sizeof(h));
	snprintf(w.at, sizeof(w.at), "hosts[%zu]", i);
	if (!json_is_object(o))
		return bad(&w, err, "not an object");
	if ((rc = get_string(&w, o, "name", 1, h.name, sizeof(h.name),
	    err)) != 0)
		return rc;
	snprintf(w.at, sizeof(w.at), "hosts[%zu] (%.60s)", i, h.name);
	if ((rc = only_keys(&w, o, keys, err)) != 0 ||
	    (rc = get_string(&w, o, "address", 0, h.address,
	    sizeof(h.address), err)) != 0 ||
	    (rc = get_string(&w, o, "id", 0, h.id, sizeof(h.id), err)) != 0 ||
	    (rc = get_string(&w, o, "device", 0, h.device, sizeof(h.device),
	    err)) != 0 ||
	    (rc = get_string(&w, o, "site", 0, h.site, sizeof(h.site),
	    err)) != 0 ||
	    (rc = get_count(&w, o, "count", 0, &count, err)) != 0 ||
	    (rc = get_positive(&w, o, "memory_bytes", 1, 0, &h.memory_bytes,
	    err)) != 0 ||
	    (rc = get_positive(&w, o, "train_positions_per_s", 1, 0,
	    &h.train_pps, err)) != 0 ||
	    (rc = get_positive(&w, o, "forward_positions_per_s", 1, 0,
	    &h.forward_pps, err)) != 0)
		return rc;
	if (strncmp(h.name, SITE_PREFIX, strlen(SITE_PREFIX)) == 0)
		return bad(&w, err, "a host's name cannot start with \"%s\"",
		    SITE_PREFIX);
	if (json_object_get(o, "count") != NULL && (h.address[0] ||
	    h.id[0]))
		return bad(&w, err, "\"count\" stands for several hosts, which "
		    "cannot share one address or id");
	if (json_object_get(o, "count") != NULL && h.site[0] == '\0')
		snprintf(h.site, sizeof(h.site), "%s", h.name);
	if (t->n + count > PL_MAX_HOSTS)
		return bad(&w, err, "more than %d hosts", PL_MAX_HOSTS);
	for (k = 0; k < count; k++) {
		pl_host *dst = &t->hosts[t->n];

		*dst = h;
		if (json_object_get(o, "count") != NULL &&
		    (size_t)snprintf(dst->name, sizeof(dst->name), "%s-%d",
		    h.name, k) >= sizeof(dst->name))
			return bad(&w, err, "name too long");
		if (pl_topology_find(t, dst->name) >= 0)
			return bad(&w, err, "host \"%s\" is named twice",
			    dst->name);
		t->n++;
	}
	return KN_OK;
}

/* The hosts an end of a link names: one host, or every host of a site. */
static int
link_end(const struct where *w, const pl_topology *t, const char *name,
    unsigned char *in, int *site, char *err)
{
	int i, any = 0;

	memset(in, 0, (size_t)t->n);
	*site = strncmp(name, SITE_PREFIX, strlen(SITE_PREFIX)) == 0;
	if (!*site) {
		if ((i = pl_topology_find(t, name)) < 0)
			return bad(w, err, "no host is named \"%s\"", name);
		in[i] = 1;
		return KN_OK;
	}
	for (i = 0; i < t->n; i++)
		if (strcmp(t->hosts[i].site, name + strlen(SITE_PREFIX)) == 0)
			in[i] = any = 1;
	return any ? KN_OK : bad(w, err, "no host is in site \"%s\"",
	    name + strlen(SITE_PREFIX));
}

/* One entry of "links".  given[] records which entry set each pair and
 * at what level (1: between sites, 2: between hosts): a host's own link
 * overrides its site's, and the same pair twice at one level is an
 * error. */
static int
read_link(const struct where *file, json_t *o, size_t i, pl_topology *t,
    int *given_by, unsigned char *level, char *err)
{
	static const char *const keys[] = { "from", "to", "rtt_ms",
	    "rtt_spread_ms", "samples", "stream_bytes_per_s", "streams",
	    "multi_bytes_per_s", NULL };
	struct where w = *file;
	char from[PL_NAME_LEN], to[PL_NAME_LEN];
	unsigned char *fin = NULL, *tin = NULL;
	pl_link l = { 0 };
	double samples = 0;
	int rc, fsite, tsite, a, b, lev;

	snprintf(w.at, sizeof(w.at), "links[%zu]", i);
	if (!json_is_object(o))
		return bad(&w, err, "not an object");
	if ((rc = get_string(&w, o, "from", 1, from, sizeof(from), err)) != 0 ||
	    (rc = get_string(&w, o, "to", 1, to, sizeof(to), err)) != 0)
		return rc;
	snprintf(w.at, sizeof(w.at), "links[%zu] (%.60s -> %.60s)", i, from,
	    to);
	l.streams = 1;
	if ((rc = only_keys(&w, o, keys, err)) != 0 ||
	    (rc = get_positive(&w, o, "rtt_ms", 1, 0, &l.rtt_ms, err)) != 0 ||
	    (rc = get_positive(&w, o, "rtt_spread_ms", 0, 1, &l.rtt_spread_ms,
	    err)) != 0 ||
	    (rc = get_positive(&w, o, "samples", 0, 0, &samples, err)) != 0 ||
	    (rc = get_positive(&w, o, "stream_bytes_per_s", 1, 0,
	    &l.stream_bps, err)) != 0 ||
	    (rc = get_count(&w, o, "streams", 0, &l.streams, err)) != 0)
		return rc;
	l.samples = (int)samples;
	l.multi_bps = l.stream_bps;
	if ((json_object_get(o, "streams") == NULL) !=
	    (json_object_get(o, "multi_bytes_per_s") == NULL))
		return bad(&w, err, "\"streams\" and \"multi_bytes_per_s\" go "
		    "together");
	if ((rc = get_positive(&w, o, "multi_bytes_per_s", 0, 0, &l.multi_bps,
	    err)) != 0)
		return rc;
	if ((fin = malloc((size_t)t->n)) == NULL ||
	    (tin = malloc((size_t)t->n)) == NULL) {
		free(fin);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	if ((rc = link_end(&w, t, from, fin, &fsite, err)) != 0 ||
	    (rc = link_end(&w, t, to, tin, &tsite, err)) != 0)
		goto out;
	if (!fsite && !tsite && strcmp(from, to) == 0) {
		rc = bad(&w, err, "a link joins two different hosts");
		goto out;
	}
	lev = fsite || tsite ? 1 : 2;
	for (a = 0; a < t->n; a++)
		for (b = 0; b < t->n; b++) {
			size_t k = (size_t)a * (size_t)t->n + (size_t)b;

			if (a == b || !fin[a] || !tin[b] || level[k] > lev)
				continue;
			if (level[k] == lev) {
				rc = bad(&w, err, "the link %s -> %s is given "
				    "twice (also by links[%d])",
				    t->hosts[a].name, t->hosts[b].name,
				    given_by[k]);
				goto out;
			}
			level[k] = (unsigned char)lev;
			given_by[k] = (int)i;
			t->links[k] = l;
		}
out:
	free(fin);
	free(tin);
	return rc;
}

static int
read_links(const struct where *file, json_t *arr, pl_topology *t, char *err)
{
	struct where w = *file;
	size_t n = (size_t)t->n * (size_t)t->n, i;
	unsigned char *level = calloc(n, 1);
	int *given_by = calloc(n, sizeof(int));
	int rc = KN_OK, a, b;

	if (level == NULL || given_by == NULL) {
		rc = kn_error(err, KN_ENOMEM, "out of memory");
		goto out;
	}
	for (i = 0; i < json_array_size(arr) && rc == 0; i++)
		rc = read_link(file, json_array_get(arr, i), i, t, given_by,
		    level, err);
	for (a = 0; a < t->n && rc == 0; a++)
		for (b = 0; b < t->n && rc == 0; b++)
			if (a != b && level[(size_t)a * t->n + b] == 0)
				rc = bad(&w, err, "no link from %s to %s: every "
				    "ordered pair of hosts needs one",
				    t->hosts[a].name, t->hosts[b].name);
out:
	free(level);
	free(given_by);
	return rc;
}

static int
read_root(const struct where *file, json_t *root, pl_topology *t, char *err)
{
	static const char *const keys[] = { "version", "measured_at",
	    "shape", "hosts", "links", "notes", NULL };
	json_t *hosts = json_object_get(root, "hosts");
	json_t *links = json_object_get(root, "links");
	json_t *v = json_object_get(root, "version");
	char notes[4096];
	size_t i;
	int rc;

	if (!json_is_object(root))
		return bad(file, err, "not a JSON object");
	if ((rc = only_keys(file, root, keys, err)) != 0)
		return rc;
	if (!json_is_integer(v) || json_integer_value(v) != 1)
		return bad(file, err, "\"version\" must be 1");
	t->version = 1;
	if ((rc = get_string(file, root, "measured_at", 1, t->measured_at,
	    sizeof(t->measured_at), err)) != 0 ||
	    (rc = get_string(file, root, "notes", 0, notes, sizeof(notes),
	    err)) != 0 ||
	    (rc = read_shape(file, root, t, err)) != 0)
		return rc;
	if (!json_is_array(hosts) || json_array_size(hosts) == 0)
		return bad(file, err, "\"hosts\" must be a non-empty array");
	if (!json_is_array(links))
		return bad(file, err, "\"links\" must be an array");
	if ((t->hosts = calloc(PL_MAX_HOSTS, sizeof(pl_host))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < json_array_size(hosts); i++)
		if ((rc = read_host(file, json_array_get(hosts, i), i, t,
		    err)) != 0)
			return rc;
	if ((t->links = calloc((size_t)t->n * (size_t)t->n,
	    sizeof(pl_link))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return read_links(file, links, t, err);
}

int
pl_topology_parse(pl_topology *t, const char *text, size_t len,
    const char *name, char *err)
{
	struct where file = { name, "" };
	json_error_t jerr;
	json_t *root;
	int rc;

	memset(t, 0, sizeof(*t));
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		return kn_error(err, KN_EINVAL, "%.80s:%d: %s", name, jerr.line,
		    jerr.text);
	rc = read_root(&file, root, t, err);
	json_decref(root);
	if (rc != 0)
		pl_topology_free(t);
	return rc;
}

int
pl_topology_load(pl_topology *t, const char *path, char *err)
{
	char *text;
	size_t len;
	int rc;

	memset(t, 0, sizeof(*t));
	/* the reader of whole files the checkpoints use: bounded, and a
	 * file that is not regular is refused */
	if ((rc = pr_ckpt_read_file(path, (size_t)64 << 20, &text, &len,
	    err)) != 0) {
		char msg[KN_ERR_LEN];

		snprintf(msg, sizeof(msg), "%s", err ? err : "");
		return kn_error(err, rc, "topology: %.200s", msg);
	}
	rc = pl_topology_parse(t, text, len, path, err);
	free(text);
	return rc;
}

void
pl_topology_free(pl_topology *t)
{
	free(t->hosts);
	free(t->links);
	t->hosts = NULL;
	t->links = NULL;
	t->n = 0;
}

int
pl_topology_find(const pl_topology *t, const char *name)
{
	int i;

	for (i = 0; i < t->n; i++)
		if (strcmp(t->hosts[i].name, name) == 0)
			return i;
	return -1;
}

const pl_link *
pl_topology_link(const pl_topology *t, int from, int to)
{
	return &t->links[(size_t)from * (size_t)t->n + (size_t)to];
}
