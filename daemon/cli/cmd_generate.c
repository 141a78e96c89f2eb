/* shardmeter generate: continues a prompt with a run's trained model, in
 * this process (the blocks' denoising traversal, or the causal LM), or
 * with --peers through the pipeline of running daemons. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "daemon/cli/cmd.h"
#include "daemon/cli/cmd_generate_soma.h"
#include "daemon/pipeline/pipeline_client.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "daemon/blocktrain/train.h"
#include "kernels/clock.h"
#include "kernels/model.h"
#include "kernels/pool.h"

/* more than any window holds: the window check below then names both */
#define GEN_PROMPT_MAX (1 << 20)

struct gen_args {
	struct cli_run run;
	const char *peers;      /* the pipeline's host list, or NULL */
	const char *prompt;
	char *prompt_buf;       /* owned: the prompt read from stdin ("-") */
	int length;             /* -1: to the end of the window (remote: the
				 * entry's default) */
	int steps;
	float temp;
	unsigned long long seed;
	int ar;                 /* the causal LM instead of the blocks */
	int soma;               /* --mode soma: the routed experts */
	const char *score;      /* soma: --score FILE */
	long windows;
	int timeout_ms;
	int verbose;
	int no_cache;           /* position blocks: the uncached reference */
	int pos_block;          /* the run's position block required; 0: any */
	int decode;             /* 1 + bt_decode; 0: the run's default */
};

static int
gen_number(struct gen_args *g, int ch)
{
	char *end;

	if (ch == 't') {
		g->temp = strtof(optarg, &end);
		if (end == optarg || *end || !(g->temp >= 0)) {
			fprintf(stderr, "shardmeter generate: --temperature "
			    "takes a number >= 0\n");
			return 2;
		}
		return CLI_CONTINUE;
	}
	g->seed = strtoull(optarg, &end, 10);
	if (end == optarg || *end) {
		fprintf(stderr, "shardmeter generate: --seed takes an "
		    "integer\n");
		return 2;
	}
	return CLI_CONTINUE;
}

/* One option of generate's own; CLI_CONTINUE, or the exit status. */
static int
gen_option(void *args, int ch)
{
	struct gen_args *g = args;

	switch (ch) {
	case 'm':
		return cli_parse_int("generate", "length", optarg, 1, 1 << 20,
		    &g->length) ? 2 : CLI_CONTINUE;
	case 'k':
		return cli_parse_int("generate", "steps", optarg, 1, 1 << 20,
		    &g->steps) ? 2 : CLI_CONTINUE;
	case 't':
	case 'x':
		return gen_number(g, ch);
	case 'o':
		if (strcmp(optarg, "ar") == 0)
			g->ar = 1;
		else if (strcmp(optarg, "soma") == 0)
			g->soma = 1;
		else if (strcmp(optarg, "blocktrain") != 0) {
			fprintf(stderr, "shardmeter generate: --mode takes "
			    "blocktrain, ar or soma\n");
			return 2;
		}
		return CLI_CONTINUE;
	case 'P': g->peers = optarg; return CLI_CONTINUE;
	case 'c': g->score = optarg; return CLI_CONTINUE;
	case 'n': {
		int n;

		if (cli_parse_int("generate", "windows", optarg, 1, 1 << 30,
		    &n) != 0)
			return 2;
		g->windows = n;
		return CLI_CONTINUE;
	}
	case 'v': g->verbose = 1; return CLI_CONTINUE;
	case 'e': {
		bt_decode d;

		if (bt_decode_parse(optarg, &d) != 0) {
			fprintf(stderr, "shardmeter generate: --decode takes "
			    "random, confidence, margin or sampled, not '%s'\n", optarg);
			return 2;
		}
		g->decode = 1 + (int)d;
		return CLI_CONTINUE;
	}
	case 'C': g->no_cache = 1; return CLI_CONTINUE;
	case 'L':
		return cli_parse_int("generate", "position-block", optarg, 1,
		    65536, &g->pos_block) ? 2 : CLI_CONTINUE;
	case 'w':
		return cli_parse_int("generate", "timeout", optarg, 1,
		    86400000, &g->timeout_ms) ? 2 : CLI_CONTINUE;
	default: return 2;
	}
}

static int
gen_parse(const struct cmd_entry *self, struct gen_args *g, int argc,
    char **argv)
{
	static const struct option opts[] = {
		CLI_RUN_OPTIONS,
		{ "length", required_argument, NULL, 'm' },
		{ "steps", required_argument, NULL, 'k' },
		{ "temperature", required_argument, NULL, 't' },
		{ "seed", required_argument, NULL, 'x' },
		{ "mode", required_argument, NULL, 'o' },
		{ "peers", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 'w' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "score", required_argument, NULL, 'c' },
		{ "windows", required_argument, NULL, 'n' },
		{ "no-cache", no_argument, NULL, 'C' },
		{ "position-block", required_argument, NULL, 'L' },
		{ "decode", required_argument, NULL, 'e' },
		{ NULL, 0, NULL, 0 }
	};
	int rc;

	if ((rc = cli_run_parse(self, &g->run, argc, argv, opts, gen_option,
	    g)) != CLI_CONTINUE)
		return rc;
	if (g->score != NULL && optind == argc) {
		g->prompt = "";
		return CLI_CONTINUE;
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "shardmeter generate: give one PROMPT argument "
		    "(it may be \"\")\n");
		return 2;
	}
	g->prompt = argv[optind];
	if (strcmp(g->prompt, "-") == 0) {
		char err[PR_ERR_LEN];
		size_t n;

		/* bytes as they come: echo's newline is part of the prompt */
		if (cli_read_stream(stdin, "the prompt on standard input",
		    GEN_PROMPT_MAX, &g->prompt_buf, &n, err) != 0) {
			fprintf(stderr, "shardmeter generate: %s\n", err);
			return 2;
		}
		g->prompt = g->prompt_buf;
	}
	return CLI_CONTINUE;
}

/* The request and its answer, over TLS pinned to the entry's id when
 * the host list gives it; the next entry when one is down. */
static int
gen_ask(const struct gen_args *g, const ph_list *hosts,
    const pc_request *req, pc_result *res, char *err)
{
	tls_ctx *tls = NULL;
	int rc;

	if (hosts->v[0].has_id && (rc = cli_operator_tls(&tls, err)) != 0)
		return rc;
	rc = pc_generate_entries(hosts, tls, req, res, g->timeout_ms, err);
	tls_ctx_free(tls);
	return rc;
}

/* --peers: one request to the pipeline's entry host. */
static int
gen_remote(const struct gen_args *g)
{
	char err[PR_ERR_LEN];
	ph_list hosts;
	pc_request req = { 0 };
	pc_result res;
	double t0;
	size_t i;
	int rc;

	if (ph_load(&hosts, g->peers, err) != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		return 2;
	}
	req.mode = g->ar ? PL_MODE_AR : PL_MODE_BT;
	req.prompt = g->prompt;
	req.prompt_len = strlen(g->prompt);
	/* 0: the entry's default, which knows the window (PL_LENGTH_DEFAULT
	 * or what the window leaves after the prompt) */
	req.length = g->length < 0 ? 0 : g->length;
	req.steps = g->steps;
	req.temperature = g->temp;
	req.seed = g->seed;
	req.pos_block = g->pos_block;
	req.decode = g->decode;
	t0 = kn_now();
	rc = gen_ask(g, &hosts, &req, &res, err);
	ph_free(&hosts);
	if (rc != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		return 1;
	}
	if (!res.ok) {
		fprintf(stderr, "shardmeter generate: the pipeline says: %s\n",
		    res.error);
		pc_result_clear(&res);
		return 1;
	}
	fwrite(g->prompt, 1, strlen(g->prompt), stdout);
	for (i = 0; i < res.len; i++)
		putchar(res.output[i]);
	putchar('\n');
	fflush(stdout);
	if (g->verbose)
		fprintf(stderr, "shardmeter generate: %zu bytes in %.1f ms, %d "
		    "traversal%s of %d hosts, %.1f ms of compute on them\n",
		    res.len, (kn_now() - t0) * 1e3, res.traversals,
		    res.traversals == 1 ? "" : "s", hosts.n,
		    res.compute_us / 1e3);
	pc_result_clear(&res);
	return 0;
}

/* The decoder asked, or the run's [generate] decode. */
static bt_decode
gen_decoder(const struct gen_args *g)
{
	bt_decode d = BT_DECODE_RANDOM;

	if (g->decode > 0)
		return (bt_decode)(g->decode - 1);
	(void)bt_decode_parse(g->run.spec.decode, &d);
	return d;
}

/* A run of position blocks: every block loaded at once, each with the
 * cache of the context it has seen, one traversal per position block. */
static int
gen_pos_blocks(const struct gen_args *g, int32_t *seq, int plen, int end,
    char *err)
{
	const struct cli_run *r = &g->run;
	kn_model *blocks[PR_MAX_BLOCKS] = { NULL };
	int b, rc = 0, trav = 0;

	for (b = 0; b < r->spec.blocks && rc == 0; b++)
		rc = tr_load_model(&blocks[b], &r->spec, r->run_id, r->dir,
		    BT_BLOCK, b + 1, r->be, 1, err);
	if (rc == 0)
		rc = bg_generate(blocks, &r->spec, g->steps, seq, plen, end,
		    g->temp, g->seed, gen_decoder(g), !g->no_cache, &trav, err);
	for (b = 0; b < r->spec.blocks; b++)
		kn_model_free(blocks[b]);
	if (rc == 0 && g->verbose)
		fprintf(stderr, "shardmeter generate: %d traversal%s of %d "
		    "blocks, position blocks of %d%s\n", trav, trav == 1 ? "" :
		    "s", r->spec.blocks, r->spec.position_block, g->no_cache ?
		    ", uncached" : "");
	return rc;
}

/* Fills seq[plen, end) after the prompt: the causal LM one byte at a time,
 * or the blocks' traversal, block T first since it starts from all masks
 * at t = 1. */
static int
gen_sample(const struct gen_args *g, int32_t *seq, int plen, int end,
    char *err)
{
	const struct cli_run *r = &g->run;
	kn_model *m;
	int b, rc = 0;

	if (g->ar) {
		rc = tr_load_model(&m, &r->spec, r->run_id, r->dir, BT_CAUSAL,
		    0, r->be, 1, err);
		if (rc == 0)
			rc = bt_generate_ar(m, seq, plen, end, g->temp, g->seed,
			    err);
		kn_model_free(m);
		return rc;
	}
	if (bg_has_pos_blocks(&r->spec))
		return gen_pos_blocks(g, seq, plen, end, err);
	for (b = r->spec.blocks - 1; b >= 0 && rc == 0; b--) {
		rc = tr_load_model(&m, &r->spec, r->run_id, r->dir, BT_BLOCK,
		    b + 1, r->be, 1, err);
		if (rc == 0)
			rc = bt_denoise_block(m, &r->spec, g->steps, b, seq,
			    plen, g->temp, g->seed, gen_decoder(g), err);
		kn_model_free(m);
	}
	return rc;
}

static void
gen_print(const int32_t *seq, int n)
{
	int i;

	for (i = 0; i < n; i++)
		putchar(seq[i] == KN_MASK ? '_' : seq[i]);
	putchar('\n');
}

/* The whole traversal in this process, on the checkpoints in --dir. */
static int
gen_local(struct gen_args *g)
{
	char err[PR_ERR_LEN];
	int32_t *seq;
	int rc, n, plen, i;

	if ((rc = cli_run_open(&g->run, "generate", 1)) != 0)
		return rc;
	n = g->run.spec.window;
	plen = (int)strlen(g->prompt);
	if (g->length < 0)
		g->length = n - plen;
	if (plen + g->length > n || g->length < 1) {
		fprintf(stderr, "shardmeter generate: the prompt (%d bytes) and "
		    "the output (%d) must fit the window of %d bytes\n", plen,
		    g->length, n);
		return 2;
	}
	if (!g->ar && g->pos_block > 0 &&
	    g->pos_block != bg_pos_block(&g->run.spec)) {
		fprintf(stderr, "shardmeter generate: --position-block %d, but "
		    "the run has position blocks of %d (position_block in %s; "
		    "the window when it has none)\n", g->pos_block,
		    bg_pos_block(&g->run.spec), g->run.spec_path);
		return 2;
	}
	if (g->ar && plen == 0) {
		fprintf(stderr, "shardmeter generate: --mode ar needs a prompt "
		    "of at least one byte\n");
		return 2;
	}
	seq = malloc((size_t)n * sizeof(int32_t));
	for (i = 0; i < n; i++)
		seq[i] = i < plen ? (unsigned char)g->prompt[i] : KN_MASK;
	if (gen_sample(g, seq, plen, plen + g->length, err) != 0) {
		fprintf(stderr, "shardmeter generate: %s\n", err);
		free(seq);
		return 1;
	}
	gen_print(seq, plen + g->length);
	free(seq);
	kn_pool_shutdown();
	return 0;
}

static int
gen_run(struct gen_args *g)
{
	if ((g->score != NULL || g->windows > 0) && !g->soma) {
		fprintf(stderr, "shardmeter generate: --score and --windows are "
		    "for --mode soma\n");
		return 2;
	}
	if (g->decode > 0 && (g->ar || g->soma)) {
		fprintf(stderr, "shardmeter generate: --decode orders the "
		    "steps of blocktrain mode; --mode %s samples one byte at a "
		    "time\n", g->ar ? "ar" : "soma");
		return 2;
	}
	if (g->soma) {
		struct cli_soma_gen a = { .run = &g->run, .peers = g->peers,
		    .prompt = g->prompt, .length = g->length, .temp = g->temp,
		    .seed = g->seed, .score = g->score, .windows = g->windows,
		    .timeout_ms = g->timeout_ms, .verbose = g->verbose };

		return cli_generate_soma(&a);
	}
	return g->peers != NULL ? gen_remote(g) : gen_local(g);
}

static int
gen_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct gen_args g = { .length = -1, .steps = 64, .temp = 1.0f,
	    .seed = 1, .timeout_ms = 30000 };
	int rc;

	if ((rc = gen_parse(self, &g, argc, argv)) != CLI_CONTINUE)
		return rc;
	rc = gen_run(&g);
	free(g.prompt_buf);
	return rc;
}

const struct cmd_entry cmd_generate_entry = {
	.name = "generate",
	.summary = "continue a prompt with the trained model",
	.usage = "usage: shardmeter generate --spec FILE --dir DIR "
	    "[--length M] [--steps K]\n"
	    "         [--temperature T] [--seed X] [--mode "
	    "blocktrain|ar|soma] [--no-cache] [--position-block L]\n"
	    "         [--decode random|confidence|margin|sampled] \"PROMPT\"\n"
	    "       shardmeter generate --peers HOSTS [--length M] "
	    "[--steps K] [--timeout MS]\n"
	    "         [--temperature T] [--seed X] [--mode "
	    "blocktrain|ar] [--verbose]\n"
	    "         [--position-block L] [--decode "
	    "random|confidence|margin|sampled] \"PROMPT\"\n"
	    "PROMPT - reads the prompt from standard input, every "
	    "byte of it (echo's\nnewline too; printf '%s' leaves "
	    "it out).\n"
	    "With --peers, asks the pipeline of running daemons "
	    "(blocktraind -S) whose\nhost list is HOSTS: the "
	    "request goes to its first host, the entry, over\n"
	    "mutual TLS as your operator identity (shardmeter "
	    "init --client) when the\nlist has peer ids, and to "
	    "the next host of the same blocks when that one is\n"
	    "down; M defaults there to 64 or what the window leaves "
	    "after the prompt,\nas for POST /v1/completions, and an "
	    "answer that does not come in MS ms\n(default 30000) is an "
	    "error.  "
	    "--verbose adds the\nlatency and the hosts' compute "
	    "time on stderr.\n"
	    "Continues PROMPT by M bytes (default: to the end of "
	    "the window).  blocktrain\nruns the K denoising "
	    "steps (default 64) through blocks T..1 in one\n"
	    "process; ar samples the causal LM one byte at a "
	    "time.  The same seed gives\nthe same output, in one "
	    "process or through the pipeline.\n"
	    "--decode sets the order in which a step decides the masked "
	    "bytes: random,\nconfidence (those the model is surest of "
	    "first), margin (the widest lead\nof the likeliest byte "
	    "over the next first) or sampled (the likeliest drawn\n"
	    "bytes first, with noise); the default is the run's "
	    "[generate] decode.  It\nchanges no traversal count.\n"
	    "A run with position blocks of L bytes (position_block) "
	    "makes one traversal\nper position block that holds "
	    "output, each host keeping the keys and values\nof the "
	    "context it has seen; --no-cache recomputes the whole "
	    "window at every\nstep instead (the same output, "
	    "slower).  --position-block L refuses to\ngenerate "
	    "unless the run's position block is L (the window when "
	    "it has none).\n"
	    "--mode soma (a spec with method = soma) routes the "
	    "prompt to its top-k\nexperts (--dir DIR in this process, "
	    "or --peers on hosts serving experts)\nand samples from "
	    "their mixture; --score FILE [--windows N] instead "
	    "prints\nthe mixture's nats/byte on FILE's windows, as "
	    "shardmeter eval does.\n",
	.exec = gen_exec
};
