/* Training one model of a run (a block, or a reference) from its spec to
 * its checkpoint, resuming from the checkpoint it finds.  Used by
 * `shardmeter train` and by the daemon's trainer thread. */
#ifndef SM_TRAIN_H
#define SM_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/backend.h"
#include "kernels/model.h"
#include "proto/spec.h"

#define TR_CKPT_MAX_BYTES ((size_t)4 << 30)

/* "<dir>/block-<b>.<ext>", "<dir>/e2e.<ext>" or "<dir>/causal.<ext>";
 * block counts from 1, as users name blocks. */
int tr_model_path(char *buf, size_t len, const char *dir, bt_kind kind,
    int block, const char *ext);
/* The shape of block (1-based, its own layers) or of a reference (block
 * ignored). */
kn_model_shape tr_model_shape(const pr_spec *s, bt_kind kind, int block);

typedef struct {
	const pr_spec *spec;
	const char *run_id;
	const char *dir;
	bt_kind kind;
	int block;              /* 1-based; ignored for the references */
	int replica;
	int steps;              /* train until this many steps are done */
	int every;              /* checkpoint every this many steps */
	const kn_backend *be;
	int progress;           /* 0 quiet, 1 a live line on stderr */
	volatile sig_atomic_t *stop;    /* set: checkpoint and return */
} tr_opts;

/* The whole loop for the command line: trains to o->steps with a progress
 * line, checkpoints every o->every steps and at the end. */
int tr_train(const tr_opts *o, char *err);

/* One model in training, for callers that drive the steps themselves (the
 * daemon's trainer thread).  open() resumes from the checkpoint in dir. */
typedef struct tr_trainer tr_trainer;

/* open() also removes this model's leftover temporary files (a write
 * cut short by a kill) and drops the learning curve's lines of steps
 * after the checkpoint, which are trained again. */
int tr_trainer_open(tr_trainer **out, const tr_opts *o, char *err);
/* The leftovers open() removed: their count, and their names in *names,
 * comma-separated, cut short when many ("" when none). */
int tr_trainer_removed(const tr_trainer *t, const char **names);
void tr_trainer_close(tr_trainer *t);
/* One step at the spec's learning-rate schedule; a line in the CSV log. */
int tr_trainer_step(tr_trainer *t, float *loss, char *err);
/* Writes the optimizer state, then the checkpoint, atomically, after a
 * health check of the weights (every value finite, and a finite share of
 * the objective on a few fixed windows): KN_ENUM for weights that fail
 * it, and nothing is written.  The pair on disk, when of another step or
 * round, is kept first as "<name>.ckpt.prev" and "<name>.optim.prev":
 * the previous good checkpoint.  KN_ENOSPC when the disk is full: the
 * last checkpoint stays whole, and a later call may succeed once space is
 * freed. */
int tr_trainer_save(tr_trainer *t, char *err);
/* The health check of save on the weights the model holds now. */
int tr_trainer_health(tr_trainer *t, char *err);
/* Roll back: the model's weights and optimizer state become the newest
 * checkpoint on disk (prev = 0) or the previous good one (prev = 1), if
 * healthy; the trainer's step and round stay (training goes on from
 * there with the next batches).  The checkpoint's step and round in
 * *step and *round.  KN_ENUM when it is unhealthy, KN_EIO when missing. */
int tr_trainer_restore(tr_trainer *t, int prev, int64_t *step,
    int64_t *round, char *err);
/* open() found the newest checkpoint unhealthy (a value not finite, in
 * the file or as a share): it moved it to "<name>.ckpt.bad" and resumed
 * from the previous good one, or from step 0 when none was healthy.  1
 * and what it did in *what, or 0. */
int tr_trainer_recovered(const tr_trainer *t, const char **what);
double tr_trainer_positions_per_s(const tr_trainer *t);
int64_t tr_trainer_steps(const tr_trainer *t);
int64_t tr_trainer_round(const tr_trainer *t);
void tr_trainer_set_round(tr_trainer *t, int64_t round);
/* A replica that adopts a published checkpoint takes its step count. */
void tr_trainer_set_step(tr_trainer *t, int64_t step);
kn_model *tr_trainer_model(tr_trainer *t);

/* Loads the checkpoint of (kind, block) from dir into a new model on be
 * with room for max_batch windows; says what to do when it is missing. */
int tr_load_model(kn_model **out, const pr_spec *s, const char *run_id,
    const char *dir, bt_kind kind, int block, const kn_backend *be,
    int max_batch, char *err);

#endif
