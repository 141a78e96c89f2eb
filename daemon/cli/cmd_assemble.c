/* shardmeter assemble: the latest checkpoint of every block of a run,
 * fetched from a daemon serving it, verified (hash, run id, block) and
 * written where 'shardmeter eval' and 'generate' read it. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/cli/cmd.h"
#include "daemon/core/peers.h"
#include "daemon/blocktrain/train.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"

struct assemble_args {
	const char *peers, *out, *spec_path;
	/* the spec's run id, or else the first checkpoint's; "" until then */
	char run_id[PR_RUN_ID_LEN];
};

static int
assemble_parse(const struct cmd_entry *self, struct assemble_args *a,
    int argc, char **argv)
{
	static const struct option opts[] = {
		{ "peers", required_argument, NULL, 'p' },
		{ "out", required_argument, NULL, 'o' },
		{ "spec", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': a->peers = optarg; break;
		case 'o': a->out = optarg; break;
		case 's': a->spec_path = optarg; break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (a->peers == NULL || a->out == NULL) {
		fprintf(stderr, "shardmeter assemble: --peers FILE and --out DIR "
		    "are required\n");
		return 2;
	}
	return CLI_CONTINUE;
}

/* Block b's checkpoint from peer p, verified and written; 0, or -1 with
 * the reason on stderr. */
static int
assemble_fetch(struct assemble_args *a, const peers_entry *p, int b)
{
	char url[CF_HOST_LEN + 64], path[PR_PATH_LEN + 32], hex[65];
	char err[PR_ERR_LEN];
	pr_ckpt_meta expect = { 0 }, meta;
	struct cli_body body;
	long st;
	int rc = -1;

	snprintf(url, sizeof(url), "/v1/blocks/%d/checkpoint", b);
	st = cli_peer_get(p, url, TR_CKPT_MAX_BYTES, 120000, &body, err);
	snprintf(expect.run_id, sizeof(expect.run_id), "%s", a->run_id);
	expect.block = b;
	snprintf(expect.kind, sizeof(expect.kind), "block");
	if (st != 200)
		fprintf(stderr, "assemble: block %d from %s: %s\n", b, p->addr,
		    st ? "HTTP error" : err);
	else if (pr_ckpt_decode(body.data, body.len, &expect, NULL, 0, NULL,
	    &meta, err) != 0)
		fprintf(stderr, "assemble: block %d from %s: %s\n", b, p->addr,
		    err);
	else {
		if (a->run_id[0] == '\0')
			snprintf(a->run_id, sizeof(a->run_id), "%s",
			    meta.run_id);
		tr_model_path(path, sizeof(path), a->out, BT_BLOCK, b, "ckpt");
		pr_ckpt_sha256_hex(body.data, body.len, hex, err);
		rc = pr_ckpt_write_file(path, body.data, body.len, err);
		if (rc != 0)
			fprintf(stderr, "assemble: %s\n", err);
		else
			printf("block %d: step %lld, round %lld, %zu bytes, "
			    "sha256 %.16s... from %s -> %s\n", b,
			    (long long)meta.step, (long long)meta.round,
			    body.len, hex, p->addr, path);
	}
	free(body.data);
	return rc == 0 ? 0 : -1;
}

/* Blocks 1..the highest in the peer list, each from the first of its
 * daemons that serves a valid checkpoint; returns the blocks missed. */
static int
assemble_run(struct assemble_args *a, const peers_list *pl, int *maxb)
{
	int b, i, got, failed = 0;

	*maxb = 0;
	for (i = 0; i < pl->n; i++)
		if (pl->v[i].block > *maxb)
			*maxb = pl->v[i].block;
	for (b = 1; b <= *maxb; b++) {
		for (got = 0, i = 0; i < pl->n && !got; i++)
			if (pl->v[i].block == b)
				got = assemble_fetch(a, &pl->v[i], b) == 0;
		if (!got) {
			fprintf(stderr, "assemble: no daemon served a valid "
			    "checkpoint of block %d\n", b);
			failed++;
		}
	}
	return failed;
}

static int
assemble_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct assemble_args a = { 0 };
	char err[PR_ERR_LEN];
	peers_list pl;
	pr_spec s;
	int rc, failed, maxb;

	if ((rc = assemble_parse(self, &a, argc, argv)) != CLI_CONTINUE)
		return rc;
	if (a.spec_path != NULL && (pr_spec_load(&s, a.spec_path, err) != 0 ||
	    pr_spec_run_id(&s, a.run_id, err) != 0)) {
		fprintf(stderr, "shardmeter assemble: %s\n", err);
		return 1;
	}
	if (peers_load(&pl, a.peers, err) != 0) {
		fprintf(stderr, "shardmeter assemble: %s\n", err);
		return 1;
	}
	if (mkdir(a.out, 0755) != 0 && access(a.out, W_OK) != 0) {
		fprintf(stderr, "shardmeter assemble: cannot create %s\n", a.out);
		peers_free(&pl);
		return 1;
	}
	failed = assemble_run(&a, &pl, &maxb);
	peers_free(&pl);
	if (failed == 0)
		printf("assembled %d blocks of run %.16s... in %s\n", maxb,
		    a.run_id, a.out);
	return failed ? 1 : 0;
}

const struct cmd_entry cmd_assemble_entry = {
	.name = "assemble",
	.summary = "fetch and verify every block's checkpoint",
	.usage = "usage: shardmeter assemble --peers FILE --out DIR "
	    "[--spec FILE]\nFetches the latest checkpoint of "
	    "every block from a daemon serving it, verifies\nit "
	    "(hash, run id, block; the spec's run id when --spec "
	    "is given) and writes\nDIR/block-B.ckpt, ready for "
	    "'shardmeter eval' and 'generate'.\n",
	.exec = assemble_exec
};
