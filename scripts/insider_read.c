/* What scripts/chaos-insiders reads of the daemons, as subcommands of
 * scripts/insider: `get`, one path of one daemon asked as a listed
 * identity (pinned, over the daemon's own HTTP client), and `strikes`,
 * the refusals and quarantine a daemon's status reports of one peer. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/net/http_client.h"
#include "daemon/core/peers.h"
#include "daemon/net/tls.h"
#include "kernels/error.h"
#include "scripts/insider.h"

/* ---- get ---- */

struct get_result {
	long status;
	int done;
	const char *field;      /* NULL: the whole body */
};

/* A field of a JSON body, "name" or "name.name": a string as it is,
 * anything else as compact JSON; nothing when it is absent. */
static void
print_field(const char *body, size_t len, const char *field)
{
	char first[64], *text;
	const char *dot = strchr(field, '.');
	json_t *root, *v;
	json_error_t jerr;

	if ((root = json_loadb(body, len, 0, &jerr)) == NULL)
		return;
	snprintf(first, sizeof(first), "%.*s", dot != NULL ?
	    (int)(dot - field) : (int)strlen(field), field);
	v = json_object_get(root, first);
	if (dot != NULL)
		v = json_object_get(v, dot + 1);
	if (json_is_string(v))
		printf("%s\n", json_string_value(v));
	else if (v != NULL && (text = json_dumps(v, JSON_COMPACT |
	    JSON_ENCODE_ANY)) != NULL) {
		printf("%s\n", text);
		free(text);
	}
	json_decref(root);
}

static void
on_get(void *ctx, hc_result *res)
{
	struct get_result *g = ctx;

	g->status = res->status;
	g->done = 1;
	if (res->status == 200 && res->body != NULL && g->field != NULL)
		print_field(res->body, res->body_len, g->field);
	else if (res->status == 200 && res->body != NULL)
		fwrite(res->body, 1, res->body_len, stdout);
	else
		fprintf(stderr, "insider get: %s\n", res->error ? res->error :
		    res->body ? res->body : "no body");
}

int
in_get(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "identity", required_argument, NULL, 'i' },
		{ "addr", required_argument, NULL, 'a' },
		{ "path", required_argument, NULL, 'P' },
		{ "field", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 }
	};
	const char *peers = NULL, *ident = NULL, *addr = NULL, *path = NULL;
	char err[KN_ERR_LEN], url[1024];
	struct get_result g = { 0, 0, NULL };
	hc_request_opts o = { 0 };
	peers_list pl;
	tls_ctx *tls;
	hc_client *c;
	int ch, i;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1)
		switch (ch) {
		case 'p': peers = optarg; break;
		case 'i': ident = optarg; break;
		case 'a': addr = optarg; break;
		case 'P': path = optarg; break;
		case 'f': g.field = optarg; break;
		default: return in_usage(stderr);
		}
	if (peers == NULL || ident == NULL || addr == NULL || path == NULL)
		return in_usage(stderr);
	if (peers_load(&pl, peers, err) != 0 ||
	    tls_ctx_new(&tls, ident, err) != 0) {
		fprintf(stderr, "insider get: %s\n", err);
		return 2;
	}
	if ((i = peers_find(&pl, addr)) < 0) {
		fprintf(stderr, "insider get: %s is not in %s\n", addr, peers);
		return 2;
	}
	if (hc_client_new(&c, uv_default_loop(), err) != 0) {
		fprintf(stderr, "insider get: %s\n", err);
		return 2;
	}
	hc_client_set_tls(c, tls);
	snprintf(url, sizeof(url), "%s://%s%s", hc_scheme(c), addr, path);
	o.url = url;
	o.pin = pl.v[i].has_id ? pl.v[i].id : NULL;
	o.timeout_ms = 5000;
	o.connect_timeout_ms = 2000;
	if (hc_request(c, &o, on_get, &g, err) != 0) {
		fprintf(stderr, "insider get: %s\n", err);
		return 2;
	}
	while (!g.done && uv_run(uv_default_loop(), UV_RUN_ONCE))
		;
	return g.status == 200 ? 0 : 1;
}

/* ---- strikes ---- */

/* The count a status field holds: an integer, or the sum of an object's
 * integers ({"updates": 3, "checkpoints": 1}). */
static long
count_of(json_t *v)
{
	const char *key;
	json_t *x;
	long n = 0;

	if (json_is_integer(v))
		return (long)json_integer_value(v);
	if (json_is_object(v))
		json_object_foreach(v, key, x)
			if (json_is_integer(x))
				n += (long)json_integer_value(x);
	return n;
}

/* What one daemon's status (read on stdin) says of the peer at addr: its
 * refusals and whether it is quarantined, under whichever of the names
 * below the daemon writes (issue 35, point 6); "fields=none" when it
 * writes none of them. */
int
in_strikes(int argc, char **argv)
{
	static const char *const counts[] = { "strikes", "rejected",
	    "refusals", "refused", NULL };
	json_t *root, *peers, *p, *v;
	json_error_t jerr;
	const char *addr, *st;
	long rejected = 0;
	int i, j, quarantined = 0, known = 0;

	if (argc != 2)
		return in_usage(stderr);
	addr = argv[1];
	if ((root = json_loadf(stdin, 0, &jerr)) == NULL) {
		fprintf(stderr, "insider strikes: %s\n", jerr.text);
		return 1;
	}
	peers = json_object_get(root, "peers");
	for (i = 0; i < (int)json_array_size(peers); i++) {
		p = json_array_get(peers, i);
		if (strcmp(json_string_value(json_object_get(p, "addr")) ?
		    json_string_value(json_object_get(p, "addr")) : "",
		    addr) != 0)
			continue;
		for (j = 0; counts[j] != NULL; j++)
			if ((v = json_object_get(p, counts[j])) != NULL) {
				rejected += count_of(v);
				known = 1;
			}
		if ((v = json_object_get(p, "quarantined")) != NULL) {
			known = 1;
			quarantined |= json_is_true(v) ||
			    (json_is_integer(v) && json_integer_value(v) != 0) ||
			    json_is_object(v) || (json_is_string(v) &&
			    json_string_value(v)[0] != '\0');
		}
		st = json_string_value(json_object_get(p, "state"));
		if (st != NULL && strcmp(st, "quarantined") == 0)
			quarantined = known = 1;
	}
	printf("rejected=%ld quarantined=%d fields=%s\n", rejected,
	    quarantined, known ? "status" : "none");
	json_decref(root);
	return 0;
}

