/* shardmeter eval --samples (cmd_eval_samples.c). */
#ifndef CMD_EVAL_SAMPLES_H
#define CMD_EVAL_SAMPLES_H

#include "daemon/blocktrain/blocktrain.h"
#include "daemon/cli/cmd.h"
#include "proto/corpus.h"

#define ES_MAX_STEPS 8

typedef struct {
	int samples;            /* N prompts, one sample each per row */
	int prompt_bytes;
	double temperature;     /* the blocks'; the causal LM's is 1 */
	bt_decode decoders[4];
	int ndecoders;
	int steps[ES_MAX_STEPS];
	int nsteps;
	const char *words;      /* the word list */
	/* another run's causal LM (both or neither): the judge */
	const char *causal_spec, *causal_dir;
	int show;               /* samples printed under each row */
	int json;
} es_opts;

/* The table (or JSON) of the run's samples from prompts of c (path
 * names it); the exit status. */
int cli_eval_samples(const struct cli_run *run, const corpus *c,
    const char *path, const es_opts *o);

#endif
