/* A run's models as one safetensors file, and back: `shardmeter export`
 * gathers the blocks' checkpoints (and the e2e and causal references when
 * their checkpoints are there; for SOMA the experts and the seed) with the
 * spec in the metadata, under names
 * a PyTorch reader maps to layers; `shardmeter import` writes the same
 * checkpoints again, byte for byte. */
#ifndef SM_EXPORT_H
#define SM_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/blocktrain/blocktrain.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"

/* The metadata's "format" value; a reader refuses any other. */
#define XP_FORMAT "shardmeter-safetensors 1"
/* BlockTrain: the blocks and two references; SOMA: the experts and the
 * seed */
#define XP_MAX_MODELS (PR_MAX_BLOCKS + 2)

/* One model in the file: "block3", "e2e", "causal", "seed" or "expert2"
 * before each of its tensor names. */
typedef struct {
	bt_kind kind;           /* BlockTrain's */
	char kind_name[PR_CKPT_KIND_LEN];       /* its checkpoint's kind */
	int block;              /* 1-based; 0 for the references and the
				 * seed; an expert's index from 0 */
	int64_t step, round;
	char prefix[16];
	char path[PR_PATH_LEN + 32];    /* its checkpoint */
	size_t params;
} xp_model;

typedef struct {
	char run_id[PR_RUN_ID_LEN];
	xp_model models[XP_MAX_MODELS];
	int nmodels;
	size_t tensors;         /* in the file */
	size_t bytes;           /* of the file */
} xp_summary;

/* Writes the models of run s (run id run_id) found in dir to the
 * safetensors file out: every block, which must all be there, then the
 * references that are; for SOMA the seed if it is there, then every
 * expert.  0 or KN_E* with the reason in err. */
int xp_export(const pr_spec *s, const char *run_id, const char *dir,
    const char *out, xp_summary *sum, char *err);

/* Reads the safetensors file in, checks it whole (format, the spec
 * against its run id, every model's tensors, names and shapes, nothing
 * left over), then writes each model's checkpoint into dir.  With
 * want_run_id not NULL the file must be of that run.  A checkpoint
 * already in dir is refused unless force.  Nothing is written unless
 * the whole file is valid. */
int xp_import(const char *in, const char *dir, const char *want_run_id,
    int force, xp_summary *sum, char *err);

#endif
