/* shardmeter eval: the composed held-out bound of a run's blocks and each
 * block's share, beside the references (e2e, causal) evaluated on the same
 * windows and noise draws, as a table or as JSON. */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/cli/cmd.h"
#include "daemon/cli/cmd_eval_samples.h"
#include "daemon/cli/cmd_eval_soma.h"
#include "proto/corpus.h"
#include "daemon/blocktrain/train.h"
#include "kernels/model.h"

struct eval_args {
	struct cli_run run;
	const char *split;      /* "valid" or "test", or "text" with text */
	const char *text;       /* --text: any file in place of a split */
	int json;
	int windows_given;
	bt_eval_set set;
	es_opts samples;        /* --samples N: samples.samples > 0 */
};

struct eval_result {
	const char *path;       /* the split's corpus */
	double shares[PR_MAX_BLOCKS], total;
	int have_e2e;           /* its checkpoint is in the run's dir */
	double eshares[PR_MAX_BLOCKS], etotal;
	int have_causal;
	double causal;
};

/* --decode LIST or --steps LIST of --samples; CLI_CONTINUE or 2. */
static int
eval_list(struct eval_args *e, int ch)
{
	char buf[256], *tok, *save = NULL;
	es_opts *o = &e->samples;

	snprintf(buf, sizeof(buf), "%s", optarg);
	if (ch == 'd')
		o->ndecoders = 0;
	else
		o->nsteps = 0;
	for (tok = strtok_r(buf, ", ", &save); tok != NULL;
	    tok = strtok_r(NULL, ", ", &save)) {
		if (ch == 'd') {
			bt_decode d;

			if (bt_decode_parse(tok, &d) != 0 || o->ndecoders == 4) {
				fprintf(stderr, "shardmeter eval: --decode takes "
				    "random, confidence, margin and sampled, not '%s'\n",
				    tok);
				return 2;
			}
			o->decoders[o->ndecoders++] = d;
		} else if (o->nsteps == ES_MAX_STEPS || cli_parse_int("eval",
		    "steps", tok, 1, 256, &o->steps[o->nsteps++]) != 0) {
			if (o->nsteps == ES_MAX_STEPS)
				fprintf(stderr, "shardmeter eval: --steps takes "
				    "at most %d counts\n", ES_MAX_STEPS);
			return 2;
		}
	}
	return CLI_CONTINUE;
}

/* One option of eval's own; CLI_CONTINUE, or the exit status. */
static int
eval_option(void *args, int ch)
{
	struct eval_args *e = args;

	switch (ch) {
	case 's': e->split = optarg; return CLI_CONTINUE;
	case 't': e->text = optarg; return CLI_CONTINUE;
	case 'j': e->json = 1; return CLI_CONTINUE;
	case 'w':
		e->windows_given = 1;
		return cli_parse_int("eval", "windows", optarg, 1, 1 << 20,
		    &e->set.windows) ? 2 : CLI_CONTINUE;
	case 'n':
		return cli_parse_int("eval", "samples", optarg, 1, 100000,
		    &e->samples.samples) ? 2 : CLI_CONTINUE;
	case 'p':
		return cli_parse_int("eval", "prompt-bytes", optarg, 1, 65535,
		    &e->samples.prompt_bytes) ? 2 : CLI_CONTINUE;
	case 'r':
		return cli_parse_int("eval", "show", optarg, 0, 100000,
		    &e->samples.show) ? 2 : CLI_CONTINUE;
	case 'W': e->samples.words = optarg; return CLI_CONTINUE;
	case 'c': e->samples.causal_spec = optarg; return CLI_CONTINUE;
	case 'C': e->samples.causal_dir = optarg; return CLI_CONTINUE;
	case 'd':
	case 'k':
		return eval_list(e, ch);
	case 'u': {
		char *end;

		e->samples.temperature = strtod(optarg, &end);
		if (end == optarg || *end || !(e->samples.temperature >= 0 &&
		    e->samples.temperature <= 100)) {
			fprintf(stderr, "shardmeter eval: --temperature takes a "
			    "number from 0 to 100\n");
			return 2;
		}
		return CLI_CONTINUE;
	}
	default: return 2;
	}
}

static int
eval_parse(const struct cmd_entry *self, struct eval_args *e, int argc,
    char **argv)
{
	static const struct option opts[] = {
		CLI_RUN_OPTIONS,
		{ "split", required_argument, NULL, 's' },
		{ "text", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "windows", required_argument, NULL, 'w' },
		{ "samples", required_argument, NULL, 'n' },
		{ "prompt-bytes", required_argument, NULL, 'p' },
		{ "decode", required_argument, NULL, 'd' },
		{ "steps", required_argument, NULL, 'k' },
		{ "temperature", required_argument, NULL, 'u' },
		{ "words", required_argument, NULL, 'W' },
		{ "show", required_argument, NULL, 'r' },
		{ "causal-spec", required_argument, NULL, 'c' },
		{ "causal-dir", required_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 }
	};
	int rc;

	if ((rc = cli_run_parse(self, &e->run, argc, argv, opts, eval_option,
	    e)) != CLI_CONTINUE)
		return rc;
	if ((e->samples.causal_spec == NULL) !=
	    (e->samples.causal_dir == NULL)) {
		fprintf(stderr, "shardmeter eval: give --causal-spec and "
		    "--causal-dir together\n");
		return 2;
	}
	if (e->split != NULL && e->text != NULL) {
		fprintf(stderr, "shardmeter eval: give --split or --text, not "
		    "both\n");
		return 2;
	}
	if (e->text != NULL) {
		e->split = "text";
		return CLI_CONTINUE;
	}
	if (e->split == NULL)
		e->split = "valid";
	if (strcmp(e->split, "valid") != 0 && strcmp(e->split, "test") != 0) {
		fprintf(stderr, "shardmeter eval: --split takes valid or test\n");
		return 2;
	}
	return CLI_CONTINUE;
}

static int
eval_have(const struct cli_run *r, bt_kind kind)
{
	char path[PR_PATH_LEN + 32];

	tr_model_path(path, sizeof(path), r->dir, kind, 0, "ckpt");
	return access(path, F_OK) == 0;
}

/* Loads one model of the run, evaluates it and frees it: for a diffusion
 * model its shares on the intervals of blocks [first, last) into out[b],
 * for the causal LM its cross-entropy into out[0]. */
static int
eval_model(const struct eval_args *e, const corpus *c, bt_kind kind,
    int block, int first, int last, double *out, char *err)
{
	kn_model *m;
	double lo, hi;
	int rc = 0, b;

	if (tr_load_model(&m, &e->run.spec, e->run.run_id, e->run.dir, kind,
	    block, e->run.be, 32, err) != 0)
		return -1;
	if (kind == BT_CAUSAL)
		rc = bt_eval_causal(m, &e->run.spec, c, &e->set, out, err);
	else
		for (b = first; b < last && rc == 0; b++) {
			bt_interval(&e->run.spec, BT_BLOCK, b, &lo, &hi);
			rc = bt_eval_share(m, &e->run.spec, c, &e->set, lo, hi,
			    &out[b], err);
		}
	kn_model_free(m);
	return rc;
}

/* Every model whose checkpoint is there, on the split's corpus c. */
static int
eval_run(const struct eval_args *e, const corpus *c, struct eval_result *res,
    char *err)
{
	int b, T = e->run.spec.blocks;

	for (b = 0; b < T; b++)
		if (eval_model(e, c, BT_BLOCK, b + 1, b, b + 1, res->shares,
		    err) != 0)
			return -1;
	res->have_e2e = eval_have(&e->run, BT_E2E);
	if (res->have_e2e && eval_model(e, c, BT_E2E, 0, 0, T, res->eshares,
	    err) != 0)
		return -1;
	res->have_causal = eval_have(&e->run, BT_CAUSAL);
	if (res->have_causal && eval_model(e, c, BT_CAUSAL, 0, 0, 0,
	    &res->causal, err) != 0)
		return -1;
	for (b = 0; b < T; b++) {
		res->total += res->shares[b];
		res->etotal += res->eshares[b];
	}
	return 0;
}

static int
eval_print_json(const struct eval_args *e, const struct eval_result *res)
{
	const pr_spec *s = &e->run.spec;
	json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:f}", "run_id",
	    e->run.run_id, "split", e->split, "path", res->path,
	    "windows", e->set.windows,
	    "strata", e->set.strata, "blocktrain_nats_per_byte", res->total,
	    "blocktrain_bits_per_byte", res->total / M_LN2);
	json_t *arr = json_array(), *e2e = json_array();
	char *text;
	int b;

	for (b = 0; b < s->blocks; b++) {
		json_array_append_new(arr, json_pack("{s:i,s:f,s:f,s:f}",
		    "block", b + 1, "lo", s->cuts[b], "hi", s->cuts[b + 1],
		    "share", res->shares[b]));
		json_array_append_new(e2e, json_real(res->eshares[b]));
	}
	json_object_set_new(o, "shares", arr);
	if (res->have_e2e) {
		json_object_set_new(o, "e2e_nats_per_byte",
		    json_real(res->etotal));
		json_object_set_new(o, "e2e_shares", e2e);
	} else {
		json_decref(e2e);
	}
	if (res->have_causal)
		json_object_set_new(o, "causal_nats_per_byte",
		    json_real(res->causal));
	text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(o);
	if (text == NULL)
		return 1;
	printf("%s\n", text);
	free(text);
	return 0;
}

static int
eval_print_table(const struct eval_args *e, const struct eval_result *res)
{
	const pr_spec *s = &e->run.spec;
	int b;

	if (bt_next_byte(s, BT_BLOCK))
		printf("held-out bound on %s (%s), %d windows, every byte "
		    "given those before it (one byte per position block: no "
		    "noise drawn)\n", e->split, res->path, e->set.windows);
	else
		printf("held-out bound on %s (%s), %d windows x %d noise "
		    "levels per interval\n", e->split, res->path,
		    e->set.windows, e->set.strata);
	printf("  %-8s %-18s %12s%s\n", "block", "interval", "share",
	    res->have_e2e ? "   e2e share" : "");
	for (b = 0; b < s->blocks; b++) {
		char iv[40];

		snprintf(iv, sizeof(iv), "(%.4g, %.4g]", s->cuts[b],
		    s->cuts[b + 1]);
		printf("  %-8d %-18s %12.4f", b + 1, iv, res->shares[b]);
		if (res->have_e2e)
			printf("  %10.4f", res->eshares[b]);
		printf("\n");
	}
	printf("blocktrain bound  %.4f nats/byte  (%.4f bits/byte)\n",
	    res->total, res->total / M_LN2);
	if (res->have_e2e)
		printf("e2e reference     %.4f nats/byte  (%.4f bits/byte)  "
		    "gap %+.4f\n", res->etotal, res->etotal / M_LN2,
		    res->total - res->etotal);
	if (res->have_causal)
		printf("causal LM         %.4f nats/byte  (%.4f bits/byte)\n",
		    res->causal, res->causal / M_LN2);
	return 0;
}

static int
eval_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct eval_args e = { .set = { BT_EVAL_WINDOWS, BT_EVAL_STRATA },
	    .samples = { .prompt_bytes = 8, .temperature = 1.0,
	    .decoders = { BT_DECODE_RANDOM, BT_DECODE_CONFIDENCE,
	    BT_DECODE_MARGIN, BT_DECODE_SAMPLED }, .ndecoders = 4, .steps = { 16, 64, 256 },
	    .nsteps = 3, .words = "/usr/share/dict/words" } };
	struct eval_result res = { 0 };
	char err[PR_ERR_LEN];
	int rc, test;
	corpus c;

	if ((rc = eval_parse(self, &e, argc, argv)) != CLI_CONTINUE)
		return rc;
	if ((rc = cli_run_open(&e.run, "eval", 1)) != 0)
		return rc;
	if (pr_spec_method(&e.run.spec) == PR_METHOD_SOMA)
		return cli_eval_soma(&e.run, e.split, e.text, e.json,
		    e.windows_given ? e.set.windows : 0);
	test = strcmp(e.split, "test") == 0;
	res.path = e.text != NULL ? e.text : test ? e.run.spec.test :
	    e.run.spec.valid;
	/* the spec's files are checked against its digests; any other
	 * text is scored as it is, and the run id is not touched */
	if (corpus_open(&c, res.path, e.text != NULL ? NULL : test ?
	    e.run.spec.test_sha256 : e.run.spec.valid_sha256,
	    (size_t)e.run.spec.window + 2, err) != 0) {
		fprintf(stderr, "shardmeter eval: %s split: %s\n", e.split, err);
		return 1;
	}
	if (e.samples.samples > 0) {
		e.samples.json = e.json;
		rc = cli_eval_samples(&e.run, &c, res.path, &e.samples);
		corpus_close(&c);
		return rc;
	}
	rc = eval_run(&e, &c, &res, err);
	corpus_close(&c);
	if (rc != 0) {
		fprintf(stderr, "shardmeter eval: %s\n", err);
		return 1;
	}
	return e.json ? eval_print_json(&e, &res) : eval_print_table(&e, &res);
}

const struct cmd_entry cmd_eval_entry = {
	.name = "eval",
	.summary = "held-out bound and references; SOMA: experts, mixture, "
	    "controls",
	.usage = "usage: shardmeter eval --spec FILE --dir DIR "
	    "[--split valid|test | --text FILE] [--json]\n"
	    "                       [--windows N]\n"
	    "       shardmeter eval --spec FILE --dir DIR --samples N "
	    "[--split valid|test | --text FILE]\n"
	    "         [--prompt-bytes P] [--decode LIST] [--steps LIST] "
	    "[--temperature T]\n"
	    "         [--words FILE] [--show K] [--causal-spec FILE "
	    "--causal-dir DIR] [--json]\n"
	    "Reports the composed held-out bound (nats and bits "
	    "per byte), each block's\nshare on its interval, the "
	    "e2e reference on the same intervals and the causal\n"
	    "LM's cross-entropy, when their checkpoints are in "
	    "DIR.  --text scores any file\nwith the same fixed "
	    "procedure (windows and noise draws) in place of the "
	    "spec's\nsplit.\n"
	    "On a spec of method = soma: each expert's loss on the "
	    "held-out tail of its\ncluster, the routed mixture of the "
	    "experts (top-k chosen from the bytes\nbefore each window) "
	    "on the split, and the seed and every control in DIR on\n"
	    "the same windows, with the byte positions each trained "
	    "on and their forward\nmultiply-adds (MACs); --windows caps "
	    "the windows.\n"
	    "--samples N measures samples instead: from N prompts of P "
	    "bytes (default 8)\nat word starts spread over the split, "
	    "it continues each to the end of the\nwindow with the causal "
	    "LM at temperature 1 (the anchor) and with the blocks\n"
	    "under each decoder of LIST (default all four) "
	    "at each step\ncount of LIST (default 16,64,256) and "
	    "temperature T (default 1), sample i\nwith seed i + 1.  Each "
	    "set is reported with its generative cross-entropy\n(nats "
	    "per generated byte under the run's causal LM; lower is "
	    "better), its\nbytes' own entropy (nats, per sample; a "
	    "decoder that repeats itself scores\nlow here), the share "
	    "of its words of 3+ letters found in the word list\n(default "
	    "/usr/share/dict/words, from wamerican), the traversals and "
	    "the time\nof one sample; the split's own continuations "
	    "come first, as the ceiling.\nWhen DIR holds the e2e "
	    "reference, its rows follow (\"e2e ...\"): the same\nsets "
	    "with it in every block's place.\n--show K prints the first K "
	    "samples of each set.\n--causal-spec and --causal-dir take "
	    "the causal LM of another run of the same\nwindow: runs of "
	    "other position blocks scored by one judge.\n",
	.exec = eval_exec
};
