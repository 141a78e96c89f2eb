/* Training one model of a run (a block, or a reference) from its spec to
 * its checkpoint, resuming from the checkpoint it finds.  Used by
 * `shardmeter train` and by the daemon's trainer thread. */
#ifndef SM_TRAIN_H
#define SM_TRAIN_H

#include <signal.h>
#include <stddef.h>

#include "daemon/blocktrain.h"
#include "kernels/backend.h"
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

int sm_train(const sm_train_opts *o, char *err);

/* Loads the checkpoint of (kind, block) from dir into a new model on be
 * with room for max_batch windows; says what to do when it is missing. */
int sm_load_model(kn_model **out, const pr_spec *s, const char *run_id,
    const char *dir, bt_kind kind, int block, const kn_backend *be,
    int max_batch, char *err);

#endif
