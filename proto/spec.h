/* The run spec: everything every peer of a run must agree on (DESIGN
 * section 2).  Read from an INI file; its canonical msgpack encoding,
 * hashed with SHA-256, is the run id. */
#ifndef PR_SPEC_H
#define PR_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/model.h"
#include "proto/keys.h"

#define PR_MAX_BLOCKS 64
#define PR_PATH_LEN 1024
#define PR_RUN_ID_LEN 65        /* 64 hex digits and NUL */
#define PR_ERR_LEN 256

typedef enum { PR_METHOD_BLOCKTRAIN = 0, PR_METHOD_SOMA } pr_method;

/* [soma]: the SOMA experts and their zero-order training (DESIGN
 * section 3).  The expert's shape is its own, not [model]'s. */
typedef struct {
	int experts;                    /* N */
	int width, mlp_mult, layers;    /* d, MLP ratio, residual blocks */
	int window, batch;              /* bytes per sequence, sequences */
	int perturbations;              /* P */
	double eps, lr, lr_floor, density;
	int patience;                   /* evaluations before halving */
	int seed_steps, steps, eval_every;
	char mode[16];                  /* independent | summed */
	/* frozen: an expert keeps the seed's decoder (the published
	 * method); delta: it goes on learning its own copy by the delta
	 * rule on its cluster (ours) */
	char expert_decoder[16];
	int top_k, route_bytes;
	int eggroll_rank;
	/* the output folder of shardmeter cluster: router.smr and
	 * cluster-<e>.txt; local like the data paths */
	char clusters[PR_PATH_LEN];
	char router_sha256[65];
} pr_soma;

typedef struct {
	char method[16];                /* blocktrain | soma */
	/* [model] */
	int blocks;                     /* T */
	int width, heads, layers_per_block, window;
	/* L bytes per position block, dividing window; 0 when absent:
	 * the whole window, today's model (DESIGN section 2) */
	int position_block;
	/* [model] layers: L_b of block b (0-based) when layers_given, from
	 * a list that is not all equal; otherwise every block has
	 * layers_per_block and these are 0.  Read them with pr_spec_layers. */
	int block_layers[PR_MAX_BLOCKS];
	int layers_given;
	double cuts[PR_MAX_BLOCKS + 1]; /* 0 = t_0 < t_1 < ... < t_T = 1 */
	int equal_cuts;                 /* cuts were not given */
	double p_prefix;                /* probability of an unmasked prefix */
	/* [noise]: how a block draws its noise within its interval
	 * (daemon/blocktrain/blocktrain.c); each key is hashed only when it is not at
	 * its default, so specs without them keep their run ids */
	char noise_draw[16];            /* stratified | antithetic | kform */
	double t_floor;                 /* 0: levels uniform in the interval */
	double floor_share;             /* share of the draws below t_floor */
	double count_tilt;              /* klevel: counts drawn x k^tilt */
	/* [data]: paths are local to each host and not part of the run id;
	 * the hashes, when given, are */
	char train[PR_PATH_LEN], valid[PR_PATH_LEN], test[PR_PATH_LEN];
	char train_sha256[65], valid_sha256[65], test_sha256[65];
	/* [optim] */
	double lr, lr_min, weight_decay, clip, beta1, beta2;
	int warmup, batch, steps;
	/* [sync] */
	int replicas, local_steps;
	double outer_lr, round_deadline;        /* seconds */
	/* [generate]: the decoder a request takes when it names none
	 * (random | confidence | margin | sampled); not hashed: it changes
	 * no weights */
	char decode[16];
	/* top level */
	uint64_t seed;
	pr_soma soma;
} pr_spec;

/* The names of [generate] decode, NULL-terminated; a decoder's number
 * on the wire (pipeline frames) is its index here. */
extern const char *const pr_decoders[];

/* PR_METHOD_SOMA when method = soma */
pr_method pr_spec_method(const pr_spec *s);

/* One row per key (proto/keys.h): its section, name, type, range,
 * default and field; parsing, validation, defaults, printing and the
 * canonical encoding all read it. */
extern const pr_key pr_spec_keys[];
extern const size_t pr_spec_nkeys;

/* Defaults for every key (documented in blocktrain.conf(5) and
 * scripts/specs/). */
void pr_spec_defaults(pr_spec *s);
/* Reads and validates path; relative data paths are taken relative to the
 * spec file's folder.  Returns 0 or a negative code with a message that
 * names the file, line and key. */
int pr_spec_load(pr_spec *s, const char *path, char *err);
/* Reads and validates INI text (no relative-path resolution). */
int pr_spec_parse(pr_spec *s, const char *text, size_t len, char *err);
int pr_spec_validate(const pr_spec *s, char *err);

/* Every key as INI text, values as in s; keys whose value is derived
 * (equal cuts) or absent (no sha256) are written commented out, so that
 * parsing the text gives s again.  0, or KN_EIO. */
int pr_spec_print(FILE *f, const pr_spec *s);

/* The text `shardmeter spec --new` prints: a commented BlockTrain spec to
 * start a run from, with the settings that measured best where the
 * defaults keep those of older specs (the [noise] draw). */
const char *pr_spec_template(void);

/* The canonical encoding (a msgpack map with sorted keys, integers as
 * int64, reals as float64), caller frees *buf. */
int pr_spec_encode(const pr_spec *s, char **buf, size_t *len, char *err);
/* Hex SHA-256 of the canonical encoding. */
int pr_spec_run_id(const pr_spec *s, char id[PR_RUN_ID_LEN], char *err);

/* Layers of block b (0-based): its entry of [model] layers, or
 * layers_per_block; and their sum over the blocks, the depth of the
 * references. */
int pr_spec_layers(const pr_spec *s, int block);
/* Gives block b layers[b] layers (each 1 to 1024, for s->blocks blocks):
 * equal counts become layers_per_block, so that such a spec has the run
 * id of one written with it. */
void pr_spec_set_layers(pr_spec *s, const int *layers);
int pr_spec_total_layers(const pr_spec *s);

/* The model shape of block b (0-based, causal 0), of the end-to-end
 * reference (pr_spec_total_layers layers) and of the causal LM of the
 * same depth. */
kn_model_shape pr_spec_block_shape(const pr_spec *s, int block);
kn_model_shape pr_spec_reference_shape(const pr_spec *s, int causal);

/* Learning rate at step (0-based): linear warmup, then cosine decay from
 * lr to lr_min over the remaining steps. */
double pr_spec_lr(const pr_spec *s, int step);

/* The denoising schedule of k steps over (0, 1]: each block runs
 * round(k * its interval width) steps (at least one) on an even grid of its
 * interval.  pr_spec_steps_of() gives block b's count, pr_spec_time_of()
 * the level at the start of its step j (its end is time_of(j + 1), and
 * time_of(count) is the block's lower cut). */
int pr_spec_steps_of(const pr_spec *s, int k, int block);
double pr_spec_time_of(const pr_spec *s, int k, int block, int j);

#endif
