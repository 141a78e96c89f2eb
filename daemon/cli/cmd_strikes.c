/* shardmeter strikes: what each daemon of a peer list refused of its
 * peers (daemon/core/strikes.h: updates left out, checkpoints refused, claims
 * the run does not allow) and whom it quarantined; --clear is the
 * operator's clear (POST /v1/strikes/clear), daemon by daemon. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/peers.h"
#include "kernels/error.h"

struct strikes_args {
	const char *peers;
	const char *only;       /* --peer host:port, or NULL: every daemon */
	int clear, json;
};

static int64_t
integer(json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

/* One daemon's table: threshold, clears, then a line per peer with a
 * record.  0 when it answered, 1 when not. */
static int
show(const peers_entry *p, json_t *all)
{
	char err[KN_ERR_LEN] = "";
	json_t *s = cli_status_fetch(p, err), *st, *e;
	size_t i;

	if (s == NULL) {
		fprintf(stderr, "shardmeter strikes: %s: %s\n", p->addr, err);
		return 1;
	}
	if ((st = json_object_get(s, "strikes")) == NULL) {
		fprintf(stderr, "shardmeter strikes: %s counts no strikes (an "
		    "older blocktraind?)\n", p->addr);
		json_decref(s);
		return 1;
	}
	if (all != NULL) {
		json_object_set(all, p->addr, st);
		json_decref(s);
		return 0;
	}
	printf("%s: quarantine after %lld refusal(s)%s, cleared %lld "
	    "time(s)\n", p->addr, (long long)integer(st, "threshold"),
	    integer(st, "threshold") == 0 ? " (never: 0)" : "",
	    (long long)integer(st, "clears"));
	json_array_foreach(json_object_get(st, "peers"), i, e) {
		const char *addr = json_string_value(json_object_get(e,
		    "addr"));

		printf("  %-22s update %lld  checkpoint %lld  claim %lld  "
		    "since clear %lld%s\n    %s\n    last: %s\n",
		    addr != NULL ? addr : "(operator)",
		    (long long)integer(e, "update"),
		    (long long)integer(e, "checkpoint"),
		    (long long)integer(e, "claim"),
		    (long long)integer(e, "current"),
		    json_is_true(json_object_get(e, "quarantined")) ?
		    "  QUARANTINED" : "",
		    json_string_value(json_object_get(e, "id")),
		    json_string_value(json_object_get(e, "why")));
	}
	if (json_array_size(json_object_get(st, "peers")) == 0)
		printf("  no refusals\n");
	json_decref(s);
	return 0;
}

/* POST /v1/strikes/clear to one daemon; 0 when it cleared, 1 when not. */
static int
clear(const peers_entry *p)
{
	struct cli_body b;
	json_error_t jerr;
	json_t *o = NULL;
	char err[KN_ERR_LEN] = "";
	long st;

	st = cli_peer_request(p, "POST", "/v1/strikes/clear", 1 << 16, 10000,
	    &b, err);
	if (st == 200)
		o = json_loadb(b.data ? b.data : "", b.len, 0, &jerr);
	if (o == NULL) {
		if (st == 0)
			fprintf(stderr, "shardmeter strikes: cannot reach %s: "
			    "%s\n", p->addr, err);
		else
			fprintf(stderr, "shardmeter strikes: %s: HTTP %ld: "
			    "%.*s\n", p->addr, st, b.data ?
			    (int)strcspn(b.data, "\n") : 0,
			    b.data ? b.data : "");
		free(b.data);
		return 1;
	}
	printf("%s: cleared, %lld peer(s) out of quarantine\n", p->addr,
	    (long long)integer(o, "lifted"));
	json_decref(o);
	free(b.data);
	return 0;
}

static int
strikes_parse(const struct cmd_entry *self, struct strikes_args *a,
    int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "peer", required_argument, NULL, 'P' },
		{ "clear", no_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': a->peers = optarg; break;
		case 'P': a->only = optarg; break;
		case 'c': a->clear = 1; break;
		case 'j': a->json = 1; break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (a->peers == NULL) {
		fprintf(stderr, "shardmeter strikes: --peers FILE is required\n");
		return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "shardmeter strikes: unexpected '%s'\n",
		    argv[optind]);
		return 2;
	}
	return CLI_CONTINUE;
}

static int
strikes_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct strikes_args a = { NULL, NULL, 0, 0 };
	char err[PR_ERR_LEN];
	peers_list pl;
	json_t *all = NULL;
	int rc, i, failed = 0, asked = 0;

	if ((rc = strikes_parse(self, &a, argc, argv)) != CLI_CONTINUE)
		return rc;
	if (peers_load(&pl, a.peers, err) != 0) {
		fprintf(stderr, "shardmeter strikes: %s\n", err);
		return 1;
	}
	if (a.json && !a.clear)
		all = json_object();
	for (i = 0; i < pl.n; i++) {
		if (a.only != NULL && strcmp(pl.v[i].addr, a.only) != 0)
			continue;
		asked++;
		failed += a.clear ? clear(&pl.v[i]) : show(&pl.v[i], all);
	}
	if (all != NULL)
		cli_print_json(all);
	if (asked == 0) {
		fprintf(stderr, "shardmeter strikes: %s is not a daemon of %s\n",
		    a.only, a.peers);
		failed = 1;
	}
	peers_free(&pl);
	return failed > 0 ? 1 : 0;
}

const struct cmd_entry cmd_strikes_entry = {
	.name = "strikes",
	.summary = "refusals each daemon counted of its peers, and the "
	    "operator's clear of quarantines",
	.usage = "usage: shardmeter strikes --peers FILE [--peer HOST:PORT] "
	    "[--clear] [--json]\nFor each daemon of the peer list (or the one "
	    "--peer names): what it refused\nof each peer (updates left out "
	    "of an average, checkpoints refused, claims of\na step or round "
	    "the run does not allow), the count since the last clear, and\n"
	    "whether the peer is quarantined (its connections refused).  "
	    "--json: the\ndaemons' strikes objects by address.\n--clear: the "
	    "operator's clear (POST /v1/strikes/clear), which lifts every\n"
	    "quarantine and sets the counts since the clear to 0; it takes an "
	    "operator\nidentity (a client line of the daemons' peer lists).\n",
	.exec = strikes_exec
};
