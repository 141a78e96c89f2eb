/* Reading and writing the topology file with jansson: one table of fields
 * per object (host, link) drives both the strict reader and the writer,
 * so a key is spelled, bounded and made optional in one place.  The
 * compact form of hand-written files is expanded as it is read. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernels/error.h"
#include "proto/checkpoint.h"
#include "proto/topology.h"

#define TOPO_MAX_FILE ((size_t)64 << 20)

enum { F_STR, F_NUM, F_NUM0, F_INT };   /* F_NUM0: >= 0, not > 0 */

/* Whether a key must be in the file.  An optional key left out keeps
 * the value the reader put there first ("", 0, TOPO_UNKNOWN), which the
 * writer leaves out in turn; a key of a pair is optional when its
 * partner is left out too, is always set after reading, and is always
 * written. */
enum { OPTIONAL, REQUIRED, PAIRED };

/* One key of an object: its kind, whether it must be there, and where its
 * value goes (offset into the struct; size for strings). */
struct field {
	const char *key;
	int kind;
	int need;
	size_t off, size;
};

#define HOST(k, kind, need, m) { k, kind, need, offsetof(topo_host, m), \
	sizeof(((topo_host *)0)->m) }
#define LINK(k, kind, need, m) { k, kind, need, offsetof(topo_link, m), \
	sizeof(((topo_link *)0)->m) }
#define SHAPE(k, m) { k, F_INT, REQUIRED, offsetof(topo_shape, m), \
	sizeof(int) }

static const struct field host_fields[] = {
	HOST("name", F_STR, REQUIRED, name),
	HOST("address", F_STR, OPTIONAL, address),
	HOST("id", F_STR, OPTIONAL, id),
	HOST("device", F_STR, OPTIONAL, device),
	HOST("site", F_STR, OPTIONAL, site),
	HOST("memory_bytes", F_NUM, REQUIRED, memory_bytes),
	HOST("train_positions_per_s", F_NUM, REQUIRED, train_positions_per_s),
	HOST("forward_positions_per_s", F_NUM, REQUIRED,
	    forward_positions_per_s),
	HOST("serve_pass_one_s", F_NUM, OPTIONAL, serve_pass_one_s),
	HOST("serve_pass_window_s", F_NUM, OPTIONAL, serve_pass_window_s),
	HOST("machine", F_STR, OPTIONAL, machine),
	HOST("train_positions_per_s_shared", F_NUM, OPTIONAL, train_shared),
	HOST("cpu_share", F_NUM, OPTIONAL, cpu_share),
	HOST("exchange_cpu_s_per_byte", F_NUM, OPTIONAL, exchange_cpu),
	HOST("encode_cpu_s_per_param", F_NUM, OPTIONAL, encode_cpu),
	HOST("merge_cpu_s_per_param", F_NUM, OPTIONAL, merge_cpu),
	{ NULL, 0, 0, 0, 0 }
};

/* "from" and "to" are read apart: they say where the link goes */
static const struct field link_fields[] = {
	LINK("rtt_ms", F_NUM, REQUIRED, rtt_ms),
	LINK("rtt_spread_ms", F_NUM0, OPTIONAL, rtt_spread_ms),
	LINK("samples", F_INT, OPTIONAL, samples),
	LINK("stream_bytes_per_s", F_NUM, REQUIRED, stream_bytes_per_s),
	LINK("streams", F_INT, PAIRED, streams),
	LINK("multi_bytes_per_s", F_NUM, PAIRED, multi_bytes_per_s),
	{ NULL, 0, 0, 0, 0 }
};

static const struct field shape_fields[] = {
	SHAPE("width", width), SHAPE("heads", heads), SHAPE("layers", layers),
	SHAPE("window", window), SHAPE("batch", batch),
	{ NULL, 0, 0, 0, 0 }
};

int
topo_init(topo_topology *t, int nhosts, char *err)
{
	memset(t, 0, sizeof(*t));
	if (nhosts < 1 || nhosts > TOPO_MAX_HOSTS)
		return kn_error(err, KN_EINVAL, "a topology has 1 to %d hosts, "
		    "not %d", TOPO_MAX_HOSTS, nhosts);
	t->hosts = calloc((size_t)nhosts, sizeof(*t->hosts));
	t->links = calloc((size_t)nhosts * (size_t)nhosts, sizeof(*t->links));
	if (t->hosts == NULL || t->links == NULL) {
		topo_free(t);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	t->nhosts = nhosts;
	return KN_OK;
}

void
topo_free(topo_topology *t)
{
	int i;

	if (t->hosts != NULL)
		for (i = 0; i < t->nhosts; i++)
			free(t->hosts[i].notes);
	if (t->links != NULL)
		for (i = 0; i < t->nhosts * t->nhosts; i++)
			free(t->links[i].notes);
	free(t->hosts);
	free(t->links);
	free(t->notes);
	memset(t, 0, sizeof(*t));
}

topo_link *
topo_link_at(const topo_topology *t, int from, int to)
{
	if (from < 0 || to < 0 || from >= t->nhosts || to >= t->nhosts ||
	    from == to)
		return NULL;
	return &t->links[(size_t)from * (size_t)t->nhosts + (size_t)to];
}

int
topo_find(const topo_topology *t, const char *name)
{
	int i;

	for (i = 0; i < t->nhosts; i++)
		if (strcmp(t->hosts[i].name, name) == 0)
			return i;
	return -1;
}

kn_model_shape
topo_model_shape(const topo_shape *s)
{
	kn_model_shape m = { s->width, s->heads, s->layers, s->window, 0, 0 };

	return m;
}

/* ---- reading ---- */

/* The optional "notes" string of o into *notes (malloc'd). */
static int
read_notes(json_t *o, char **notes, const char *where, char *err)
{
	json_t *v = json_object_get(o, "notes");

	if (v == NULL)
		return KN_OK;
	if (!json_is_string(v))
		return kn_error(err, KN_EINVAL, "%s: \"notes\" must be a string",
		    where);
	if ((*notes = strdup(json_string_value(v))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return KN_OK;
}

/* A copy of notes (NULL stays NULL) into *out. */
static int
copy_notes(const char *notes, char **out, char *err)
{
	*out = NULL;
	if (notes != NULL && (*out = strdup(notes)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	return KN_OK;
}

/* Every key of o is one of fields, "notes" or one of extra (NULL-ended). */
static int
known_keys(json_t *o, const struct field *fields, const char *const *extra,
    const char *where, char *err)
{
	const char *key;
	json_t *v;
	int i, ok;

	json_object_foreach(o, key, v) {
		ok = strcmp(key, "notes") == 0;
		for (i = 0; !ok && fields[i].key != NULL; i++)
			ok = strcmp(key, fields[i].key) == 0;
		for (i = 0; !ok && extra != NULL && extra[i] != NULL; i++)
			ok = strcmp(key, extra[i]) == 0;
		if (!ok)
			return kn_error(err, KN_EINVAL, "%s: unknown key \"%s\"",
			    where, key);
	}
	return KN_OK;
}

/* The fields of o into the struct at base; the keys of a pair are both
 * given or both left out. */
static int
read_fields(json_t *o, const struct field *fields, void *base,
    const char *where, char *err)
{
	const struct field *f, *g;
	char *dst;
	json_t *v;
	double d;

	for (f = fields; f->key != NULL; f++) {
		dst = (char *)base + f->off;
		if ((v = json_object_get(o, f->key)) == NULL) {
			if (f->need == REQUIRED)
				return kn_error(err, KN_EINVAL, "%s: missing key "
				    "\"%s\"", where, f->key);
			for (g = fields; f->need == PAIRED && g->key != NULL; g++)
				if (g != f && g->need == PAIRED &&
				    json_object_get(o, g->key) != NULL)
					return kn_error(err, KN_EINVAL, "%s: missing "
					    "key \"%s\" (\"%s\" and \"%s\" go "
					    "together)", where, f->key, f->key,
					    g->key);
			continue;
		}
		if (f->kind == F_STR) {
			if (!json_is_string(v) || json_string_length(v) == 0 ||
			    json_string_length(v) >= f->size)
				return kn_error(err, KN_EINVAL, "%s: \"%s\" must be "
				    "a string of 1 to %zu bytes", where, f->key,
				    f->size - 1);
			memcpy(dst, json_string_value(v),
			    json_string_length(v) + 1);
			continue;
		}
		d = json_number_value(v);
		if (f->kind == F_INT) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 1000000000)
				return kn_error(err, KN_EINVAL, "%s: \"%s\" must be "
				    "a positive integer", where, f->key);
			*(int *)(void *)dst = (int)json_integer_value(v);
			continue;
		}
		if (!json_is_number(v) || !isfinite(d) || d < 0 ||
		    (f->kind == F_NUM && d <= 0))
			return kn_error(err, KN_EINVAL, "%s: \"%s\" must be a %s "
			    "finite number", where, f->key, f->kind == F_NUM ?
			    "positive" : "non-negative");
		*(double *)(void *)dst = d;
	}
	return KN_OK;
}

/* "FILE: hosts[3] ("name")" */
static void
host_where(char *where, size_t len, const char *what, size_t i, json_t *o)
{
	const char *name = json_string_value(json_object_get(o, "name"));

	snprintf(where, len, "%.200s: hosts[%zu]%s%.*s%s", what, i,
	    name ? " (\"" : "", TOPO_NAME_LEN, name ? name : "",
	    name ? "\")" : "");
}

/* How many hosts entry o of "hosts" stands for: its "count" (compact
 * form), else 1. */
static int
host_count(json_t *o, const char *where, int *count, char *err)
{
	json_t *v = json_object_get(o, "count");

	*count = 1;
	if (v == NULL)
		return KN_OK;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > TOPO_MAX_HOSTS)
		return kn_error(err, KN_EINVAL, "%s: \"count\" must be an "
		    "integer from 1 to %d", where, TOPO_MAX_HOSTS);
	*count = (int)json_integer_value(v);
	return KN_OK;
}

/* Entry i of "hosts" (read into h) as count hosts from t->hosts[*next]
 * on: one host as it is, or with "count" NAME-0, NAME-1, ... in site
 * "site" (NAME when not given).  entry[] records the entry of each host
 * for messages. */
static int
expand_host(topo_topology *t, const topo_host *h, json_t *o, int count,
    size_t i, int *next, int *entry, const char *where, const char *what,
    char *err)
{
	int compact = json_object_get(o, "count") != NULL, k, j, rc;

	if (strncmp(h->name, TOPO_SITE_PREFIX, strlen(TOPO_SITE_PREFIX)) == 0)
		return kn_error(err, KN_EINVAL, "%s: a host's name cannot start "
		    "with \"%s\"", where, TOPO_SITE_PREFIX);
	if (compact && (h->address[0] || h->id[0]))
		return kn_error(err, KN_EINVAL, "%s: \"count\" stands for several "
		    "hosts, which cannot share one address or id", where);
	for (k = 0; k < count; k++) {
		topo_host *dst = &t->hosts[*next];

		*dst = *h;
		dst->notes = NULL;
		if (compact && dst->site[0] == '\0')
			memcpy(dst->site, h->name, sizeof(dst->site));
		if (compact && (size_t)snprintf(dst->name, sizeof(dst->name),
		    "%s-%d", h->name, k) >= sizeof(dst->name))
			return kn_error(err, KN_EINVAL, "%s: \"name\" is too long "
			    "to number its hosts", where);
		if ((rc = copy_notes(h->notes, &dst->notes, err)) != 0)
			return rc;
		for (j = 0; j < *next; j++)
			if (strcmp(t->hosts[j].name, dst->name) == 0)
				return kn_error(err, KN_EINVAL, "%s: duplicate host "
				    "\"%s\" (also hosts[%d])", what, dst->name,
				    entry[j]);
		entry[(*next)++] = (int)i;
	}
	return KN_OK;
}

static int
read_hosts(topo_topology *t, json_t *arr, const char *what, char *err)
{
	char where[TOPO_NAME_LEN + 400];
	int *entry = NULL, total = 0, next = 0, count, rc = KN_OK;
	topo_host h;
	size_t i;

	if (!json_is_array(arr) || json_array_size(arr) == 0)
		return kn_error(err, KN_EINVAL, "%s: \"hosts\" must be an array "
		    "of at least one host", what);
	for (i = 0; i < json_array_size(arr); i++) {
		json_t *o = json_array_get(arr, i);

		host_where(where, sizeof(where), what, i, o);
		if (!json_is_object(o))
			return kn_error(err, KN_EINVAL, "%s: not an object", where);
		if ((rc = host_count(o, where, &count, err)) != 0)
			return rc;
		if ((total += count) > TOPO_MAX_HOSTS)
			return kn_error(err, KN_EINVAL, "%s: more than %d hosts",
			    what, TOPO_MAX_HOSTS);
	}
	if ((rc = topo_init(t, total, err)) != 0)
		return rc;
	if ((entry = calloc((size_t)total, sizeof(int))) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < json_array_size(arr) && rc == 0; i++) {
		static const char *const compact[] = { "count", NULL };
		json_t *o = json_array_get(arr, i);

		memset(&h, 0, sizeof(h));
		host_where(where, sizeof(where), what, i, o);
		(void)host_count(o, where, &count, err);
		if ((rc = known_keys(o, host_fields, compact, where, err)) == 0 &&
		    (rc = read_fields(o, host_fields, &h, where, err)) == 0 &&
		    (rc = read_notes(o, &h.notes, where, err)) == 0)
			rc = expand_host(t, &h, o, count, i, &next, entry, where,
			    what, err);
		free(h.notes);
	}
	free(entry);
	return rc;
}

/* The hosts an end of a link names, marked in in[]: one host, or every
 * host of a site. */
static int
link_end(const topo_topology *t, const char *name, unsigned char *in,
    int *site, const char *where, char *err)
{
	size_t pre = strlen(TOPO_SITE_PREFIX);
	int i, any = 0;

	memset(in, 0, (size_t)t->nhosts);
	*site = strncmp(name, TOPO_SITE_PREFIX, pre) == 0;
	if (!*site) {
		if ((i = topo_find(t, name)) < 0)
			return kn_error(err, KN_EINVAL, "%s: no host \"%s\"", where,
			    name);
		in[i] = 1;
		return KN_OK;
	}
	for (i = 0; i < t->nhosts; i++)
		if (strcmp(t->hosts[i].site, name + pre) == 0)
			in[i] = any = 1;
	return any ? KN_OK : kn_error(err, KN_EINVAL, "%s: no host is in site "
	    "\"%s\"", where, name + pre);
}

/* What each ordered pair's link was given by, while links are read. */
struct given {
	unsigned char *level;   /* 0: none yet, 1: between sites, 2: hosts */
	int *entry;             /* the entry of "links" that gave it */
	unsigned char *fin, *tin;       /* the hosts of an entry's ends */
};

/* Link l (from entry i, at level lev) onto every pair from fin to tin:
 * a host's own link overrides its site's, and the same pair twice at
 * one level is an error. */
static int
place_link(topo_topology *t, const topo_link *l, struct given *g, int lev,
    size_t i, const char *where, char *err)
{
	int a, b, rc;

	for (a = 0; a < t->nhosts; a++)
		for (b = 0; b < t->nhosts; b++) {
			size_t k = (size_t)a * (size_t)t->nhosts + (size_t)b;

			if (a == b || !g->fin[a] || !g->tin[b] ||
			    g->level[k] > lev)
				continue;
			if (g->level[k] == lev)
				return kn_error(err, KN_EINVAL, "%s: a second link "
				    "%s -> %s (also links[%d])", where,
				    t->hosts[a].name, t->hosts[b].name,
				    g->entry[k]);
			free(t->links[k].notes);
			t->links[k] = *l;
			if ((rc = copy_notes(l->notes, &t->links[k].notes,
			    err)) != 0)
				return rc;
			g->level[k] = (unsigned char)lev;
			g->entry[k] = (int)i;
		}
	return KN_OK;
}

/* Entry i of "links". */
static int
read_link(topo_topology *t, json_t *o, size_t i, struct given *g,
    const char *what, char *err)
{
	static const char *const ends[] = { "from", "to", NULL };
	const char *f = json_string_value(json_object_get(o, "from"));
	const char *d = json_string_value(json_object_get(o, "to"));
	char where[2 * TOPO_NAME_LEN + 400];
	topo_link l = { .rtt_spread_ms = TOPO_UNKNOWN };
	int fsite, tsite, rc;

	snprintf(where, sizeof(where), "%.200s: links[%zu] (%.*s -> %.*s)",
	    what, i, TOPO_NAME_LEN, f ? f : "?", TOPO_NAME_LEN, d ? d : "?");
	if (!json_is_object(o))
		return kn_error(err, KN_EINVAL, "%s: not an object", where);
	if (f == NULL || d == NULL)
		return kn_error(err, KN_EINVAL, "%s: \"from\" and \"to\" must "
		    "name hosts", where);
	if ((rc = link_end(t, f, g->fin, &fsite, where, err)) != 0 ||
	    (rc = link_end(t, d, g->tin, &tsite, where, err)) != 0)
		return rc;
	if (!fsite && !tsite && strcmp(f, d) == 0)
		return kn_error(err, KN_EINVAL, "%s: a link joins two distinct "
		    "hosts", where);
	if ((rc = known_keys(o, link_fields, ends, where, err)) != 0 ||
	    (rc = read_fields(o, link_fields, &l, where, err)) != 0)
		return rc;
	if (l.streams == 0) {
		l.streams = 1;
		l.multi_bytes_per_s = l.stream_bytes_per_s;
	}
	if ((rc = read_notes(o, &l.notes, where, err)) == 0)
		rc = place_link(t, &l, g, fsite || tsite ? 1 : 2, i, where, err);
	free(l.notes);
	return rc;
}

static int
read_links(topo_topology *t, json_t *arr, const char *what, char *err)
{
	size_t n = (size_t)t->nhosts, i;
	struct given g;
	int from, to, rc = KN_OK;

	if (!json_is_array(arr))
		return kn_error(err, KN_EINVAL, "%s: \"links\" must be an array",
		    what);
	g.level = calloc(n * n, 1);
	g.entry = calloc(n * n, sizeof(int));
	g.fin = malloc(n);
	g.tin = malloc(n);
	if (g.level == NULL || g.entry == NULL || g.fin == NULL ||
	    g.tin == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < json_array_size(arr) && rc == 0; i++)
		rc = read_link(t, json_array_get(arr, i), i, &g, what, err);
	for (from = 0; from < t->nhosts && rc == 0; from++)
		for (to = 0; to < t->nhosts && rc == 0; to++)
			if (from != to && g.level[from * n + to] == 0)
				rc = kn_error(err, KN_EINVAL, "%s: missing link "
				    "%s -> %s (every ordered pair of hosts has one)",
				    what, t->hosts[from].name, t->hosts[to].name);
	free(g.level);
	free(g.entry);
	free(g.fin);
	free(g.tin);
	return rc;
}

/* "by hand", or UTC as 2026-12-03T10:00:00Z (fractions of a second
 * allowed). */
static int
is_when(const char *s)
{
	static const char form[] = "dddd-dd-ddTdd:dd:dd";
	size_t i;

	if (strcmp(s, "by hand") == 0)
		return 1;
	for (i = 0; form[i] != '\0'; i++)
		if (form[i] == 'd' ? s[i] < '0' || s[i] > '9' : s[i] != form[i])
			return 0;
	if (s[i] == '.')
		for (i++; s[i] >= '0' && s[i] <= '9'; i++)
			;
	return s[i] == 'Z' && s[i + 1] == '\0';
}

static int
read_root(topo_topology *t, json_t *root, const char *what, char *err)
{
	static const char *const top[] = { "version", "measured_at", "shape",
		"hosts", "links", "notes", NULL };
	static const struct field none[] = { { NULL, 0, 0, 0, 0 } };
	char where[400], kerr[KN_ERR_LEN];
	kn_model_shape shape;
	json_t *v;
	int rc;

	if (!json_is_object(root))
		return kn_error(err, KN_EINVAL, "%s: not a JSON object", what);
	snprintf(where, sizeof(where), "%.200s", what);
	if ((rc = known_keys(root, none, top, where, err)) != 0)
		return rc;
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) != TOPO_VERSION)
		return kn_error(err, KN_EINVAL, "%s: \"version\" must be %d (a "
		    "topology of another version of shardmeter?)", what,
		    TOPO_VERSION);
	v = json_object_get(root, "measured_at");
	if (!json_is_string(v) || json_string_length(v) >= TOPO_NAME_LEN ||
	    !is_when(json_string_value(v)))
		return kn_error(err, KN_EINVAL, "%s: \"measured_at\" must be a "
		    "UTC time like 2026-12-03T10:00:00Z, or \"by hand\"", what);
	v = json_object_get(root, "shape");
	snprintf(where, sizeof(where), "%.200s: shape", what);
	if (!json_is_object(v))
		return kn_error(err, KN_EINVAL, "%s: missing or not an object",
		    where);
	if ((rc = read_hosts(t, json_object_get(root, "hosts"), what,
	    err)) != 0)
		return rc;
	snprintf(t->measured_at, sizeof(t->measured_at), "%s",
	    json_string_value(json_object_get(root, "measured_at")));
	if ((rc = known_keys(v, shape_fields, NULL, where, err)) != 0 ||
	    (rc = read_fields(v, shape_fields, &t->shape, where, err)) != 0 ||
	    (rc = read_notes(root, &t->notes, what, err)) != 0)
		return rc;
	/* the rates are scaled from this shape: it must be one the kernels
	 * can run */
	shape = topo_model_shape(&t->shape);
	if (kn_model_check_shape(&shape, kerr) != 0)
		return kn_error(err, KN_EINVAL, "%s: %s", where, kerr);
	return read_links(t, json_object_get(root, "links"), what, err);
}

int
topo_parse(topo_topology *t, const char *text, size_t len, const char *what,
    char *err)
{
	json_error_t jerr;
	json_t *root;
	int rc;

	memset(t, 0, sizeof(*t));
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL)
		return kn_error(err, KN_EINVAL, "%.200s:%d:%d: bad JSON: %.120s",
		    what, jerr.line, jerr.column, jerr.text);
	rc = read_root(t, root, what, err);
	json_decref(root);
	if (rc != 0)
		topo_free(t);
	return rc;
}

int
topo_load(topo_topology *t, const char *path, char *err)
{
	char *buf;
	size_t len;
	int rc;

	memset(t, 0, sizeof(*t));
	if ((rc = pr_ckpt_read_file(path, TOPO_MAX_FILE, &buf, &len,
	    err)) != 0)
		return rc;
	rc = topo_parse(t, buf, len, path, err);
	free(buf);
	return rc;
}

/* ---- writing ---- */

static int
write_fields(json_t *o, const struct field *fields, const void *base)
{
	const struct field *f;
	const char *src;
	int rc = 0;

	for (f = fields; f->key != NULL; f++) {
		src = (const char *)base + f->off;
		if (f->kind == F_STR) {
			if (src[0] != '\0' || f->need != OPTIONAL)
				rc |= json_object_set_new(o, f->key,
				    json_string(src));
		} else if (f->kind == F_INT) {
			int i = *(const int *)(const void *)src;

			if (i != 0 || f->need != OPTIONAL)
				rc |= json_object_set_new(o, f->key,
				    json_integer(i));
		} else {
			double d = *(const double *)(const void *)src;

			/* an optional positive number is 0 when not given */
			if (f->need == OPTIONAL && (d == TOPO_UNKNOWN ||
			    (d == 0 && f->kind == F_NUM)))
				continue;
			/* a byte count reads best as an integer */
			rc |= json_object_set_new(o, f->key, d == floor(d) &&
			    d < 9007199254740992.0 ? json_integer((json_int_t)d) :
			    json_real(d));
		}
	}
	return rc;
}

static json_t *
dump_root(const topo_topology *t)
{
	json_t *root = json_object(), *shape = json_object();
	json_t *hosts = json_array(), *links = json_array(), *o;
	int i, j, rc;

	rc = json_object_set_new(root, "version", json_integer(TOPO_VERSION));
	rc |= json_object_set_new(root, "measured_at",
	    json_string(t->measured_at));
	if (t->notes != NULL)
		rc |= json_object_set_new(root, "notes", json_string(t->notes));
	rc |= write_fields(shape, shape_fields, &t->shape);
	rc |= json_object_set_new(root, "shape", shape);
	for (i = 0; i < t->nhosts; i++) {
		o = json_object();
		rc |= write_fields(o, host_fields, &t->hosts[i]);
		if (t->hosts[i].notes != NULL)
			rc |= json_object_set_new(o, "notes",
			    json_string(t->hosts[i].notes));
		rc |= json_array_append_new(hosts, o);
	}
	rc |= json_object_set_new(root, "hosts", hosts);
	for (i = 0; i < t->nhosts; i++)
		for (j = 0; j < t->nhosts; j++) {
			const topo_link *l = topo_link_at(t, i, j);

			if (l == NULL)
				continue;
			o = json_pack("{s:s,s:s}", "from", t->hosts[i].name, "to",
			    t->hosts[j].name);
			rc |= write_fields(o, link_fields, l);
			if (l->notes != NULL)
				rc |= json_object_set_new(o, "notes",
				    json_string(l->notes));
			rc |= json_array_append_new(links, o);
		}
	rc |= json_object_set_new(root, "links", links);
	if (rc != 0) {
		json_decref(root);
		return NULL;
	}
	return root;
}

char *
topo_dump(const topo_topology *t, char *err)
{
	json_t *root = dump_root(t);
	topo_topology back;
	char *text;
	int rc;

	if (root == NULL) {
		kn_error(err, KN_ENOMEM, "out of memory writing the topology");
		return NULL;
	}
	text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
	    JSON_REAL_PRECISION(10));
	json_decref(root);
	if (text == NULL) {
		kn_error(err, KN_ENOMEM, "out of memory writing the topology");
		return NULL;
	}
	/* what is written must read back: the reader's rules are the
	 * writer's */
	if ((rc = topo_parse(&back, text, strlen(text), "the topology",
	    err)) != 0) {
		free(text);
		return NULL;
	}
	topo_free(&back);
	return text;
}

int
topo_save(const topo_topology *t, const char *path, char *err)
{
	char *text = topo_dump(t, err);
	size_t len;
	int rc;

	if (text == NULL)
		return KN_EINVAL;
	len = strlen(text);
	text[len] = '\n';       /* over the NUL: written by length */
	rc = pr_ckpt_write_file(path, text, len + 1, err);
	free(text);
	return rc;
}
