/* shardmeter status on a pipeline host list (blocktrain.conf(5), the
 * format of pipeline_hosts): one line per blocktraind -S host from its
 * GET /v1/status on the pipeline port, over mutual TLS pinned to the id of
 * its line, or the statuses as JSON. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/error.h"

/* A host line as the peer entry the HTTP helpers take. */
static void
host_entry(const ph_host *h, peers_entry *p)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->host, sizeof(p->host), "%s", h->host);
	p->port = h->port;
	snprintf(p->addr, sizeof(p->addr), "%s", h->addr);
	p->has_id = h->has_id;
	memcpy(p->id, h->id, sizeof(p->id));
	snprintf(p->id_text, sizeof(p->id_text), "%s", h->id_text);
	p->expert = -1;
}

static long long
count(json_t *o, const char *path1, const char *path2)
{
	json_t *v = json_object_get(o, path1);

	if (path2 != NULL)
		v = json_object_get(v, path2);
	return json_integer_value(v);
}

static long long
errors_sum(json_t *s)
{
	const char *k;
	json_t *v;
	long long n = 0;

	json_object_foreach(json_object_get(s, "errors"), k, v)
		n += json_integer_value(v);
	return n;
}

/* Bytes of clients' requests (dir "in") or answers ("out"), frames and
 * HTTP. */
static long long
client_bytes(json_t *s, const char *dir)
{
	json_t *d = json_object_get(json_object_get(s, "bytes"), dir);

	return json_integer_value(json_object_get(d, "client")) +
	    json_integer_value(json_object_get(d, "http"));
}

static void
ms(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL)
		printf(" %7s", "-");
	else
		printf(" %7.2f", json_number_value(v));
}

/* With several hosts for the next blocks: how many links are down,
 * while some is up. */
static void
links_down(json_t *s)
{
	json_t *links = json_object_get(s, "links"), *l;
	size_t i, down = 0;

	json_array_foreach(links, i, l)
		down += !json_is_true(json_object_get(l, "up"));
	if (down > 0 && down < json_array_size(links))
		printf("  %zu OF %zu LINKS DOWN", down, json_array_size(links));
}

/* One host's line: its place, requests, latency and traffic. */
static void
host_line(const ph_host *h, json_t *s, const char *err)
{
	json_t *lat, *blocks;
	char place[24];

	if (s == NULL) {
		printf("%-22s %-6s down: %s\n", h->addr, "-", err);
		return;
	}
	blocks = json_object_get(s, "blocks");
	if (json_object_get(s, "experts") != NULL)
		snprintf(place, sizeof(place), "e%d-%d", h->expert_lo,
		    h->expert_hi);
	else
		snprintf(place, sizeof(place), "%lld-%lld",
		    (long long)json_integer_value(json_array_get(blocks, 0)),
		    (long long)json_integer_value(json_array_get(blocks, 1)));
	lat = json_object_get(s, "latency");
	printf("%-22s %-6s %-6s %8lld %5lld %8lld %6lld", h->addr,
	    json_is_true(json_object_get(s, "entry")) ? "entry" : "inner",
	    place, count(s, "requests", "total"), count(s, "in_flight", NULL),
	    count(s, "served", NULL), errors_sum(s));
	ms(lat, "p50_ms");
	ms(lat, "p90_ms");
	ms(s, "per_hop_ms");
	printf(" %8.1f %10lld %10lld%s", count(s, "kv_cache", "bytes") /
	    1048576.0, client_bytes(s, "in"), client_bytes(s, "out"),
	    json_is_false(json_object_get(s, "link_up")) ? "  LINK DOWN" : "");
	links_down(s);
	printf("\n");
}

int
cli_status_pipeline(const ph_list *hosts, int json)
{
	json_t *all = json_array();
	char err[KN_ERR_LEN];
	int i, up = 0;

	if (!json)
		printf("%-22s %-6s %-6s %8s %5s %8s %6s %7s %7s %7s %8s %10s "
		    "%10s\n", "host", "role", "blocks", "requests", "infl",
		    "served", "errors", "p50_ms", "p90_ms", "hop_ms", "kv_MiB",
		    "client_in", "client_out");
	for (i = 0; i < hosts->n; i++) {
		peers_entry p;
		json_t *s;

		host_entry(&hosts->v[i], &p);
		err[0] = '\0';
		s = cli_status_fetch(&p, err);
		up += s != NULL;
		if (json) {
			json_array_append_new(all, s != NULL ? s : json_pack(
			    "{s:s,s:s}", "addr", hosts->v[i].addr, "error", err));
			continue;
		}
		host_line(&hosts->v[i], s, err);
		json_decref(s);
	}
	if (json)
		cli_print_json(json_pack("{s:o}", "hosts", all));
	else
		json_decref(all);
	return up;
}

int
cli_is_pipeline_host(const ph_list *hosts)
{
	peers_entry p;
	char err[KN_ERR_LEN];
	json_t *s;
	const char *role;
	int i, yes = 0;

	for (i = 0; i < hosts->n; i++) {
		host_entry(&hosts->v[i], &p);
		if ((s = cli_status_fetch(&p, err)) == NULL)
			continue;
		role = json_string_value(json_object_get(s, "role"));
		yes = role != NULL && strstr(role, "host") != NULL;
		json_decref(s);
		return yes;
	}
	return 0;
}
