/* Training one model of a run (a block, or a reference) from its spec to
 * its checkpoint, resuming from the checkpoint it finds.  Used by
 * `shardmeter train` and by the daemon's trainer thread. */
#ifndef SM_TRAIN_H
#define SM_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/blocktrain.h"
#include "kernels/backend.h"
#include "kernels/model.h"
#include "proto/spec.h"

#define SM_CKPT_MAX_BYTES ((size_t)4 << 30)

/* "<dir>/block-<b>.<ext>", "<dir>/e2e.<ext>" or "<dir>/causal.<ext>";
 * block counts from 1, as users name blocks. */
int sm_model_path(char *buf, size_t len, const char *dir, bt_kind kind,
    int block, const char *ext);
kn_model_shape sm_model_shape(const pr_spec *s, bt_kind kind);

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
} sm_train_opts;

/* The whole loop for the command line: trains to o->steps with a progress
 * line, checkpoints every o->every steps and at the end. */
int sm_train(const sm_train_opts *o, char *err);

/* One model in training, for callers that drive the steps themselves (the
 * daemon's trainer thread).  open() resumes from the checkpoint in dir. */
typedef struct sm_trainer sm_trainer;

int sm_trainer_open(sm_trainer **out, const sm_train_opts *o, char *err);
void sm_trainer_close(sm_trainer *t);
/* One step at the spec's learning-rate schedule; a line in the CSV log. */
int sm_trainer_step(sm_trainer *t, float *loss, char *err);
/* Writes the optimizer state, then the checkpoint, atomically. */
int sm_trainer_save(sm_trainer *t, char *err);
double sm_trainer_positions_per_s(const sm_trainer *t);
int64_t sm_trainer_steps(const sm_trainer *t);
int64_t sm_trainer_round(const sm_trainer *t);
void sm_trainer_set_round(sm_trainer *t, int64_t round);
/* A replica that adopts a published checkpoint takes its step count. */
void sm_trainer_set_step(sm_trainer *t, int64_t step);
kn_model *sm_trainer_model(sm_trainer *t);

/* Loads the checkpoint of (kind, block) from dir into a new model on be
 * with room for max_batch windows; says what to do when it is missing. */
int sm_load_model(kn_model **out, const pr_spec *s, const char *run_id,
    const char *dir, bt_kind kind, int block, const kn_backend *be,
    int max_batch, char *err);

#endif
