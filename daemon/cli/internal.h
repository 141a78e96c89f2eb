/* Private to daemon/cli/export.c (BlockTrain models, the file, import's
 * checks) and daemon/cli/export_soma.c (SOMA's seed and experts). */
#ifndef SM_DAEMON_CLI_INTERNAL_H
#define SM_DAEMON_CLI_INTERNAL_H

#include <jansson.h>

#include "daemon/cli/export.h"
#include "proto/safetensors.h"

/* export.c */

/* Finds each tensor of want[0..n) in f by name, checks its shape, marks
 * it in taken and reads its values to want[i].values (a host buffer). */
int xp__take(const pr_st_file *f, const pr_st_tensor *want, int n,
    unsigned char *taken, char *err);

/* export_soma.c: a SOMA model is its body and its decoder, buf[0] and
 * buf[1], each a host buffer of the model's */

/* The seed (dir/seed.ckpt) when it is there, then every expert
 * (dir/expert-E.ckpt, E from 0), which must all be. */
int xp__soma_find(const pr_spec *s, const char *dir, xp_summary *sum,
    char *err);
/* Tensors one SOMA model exports. */
int xp__soma_count(const pr_spec *s);
/* Reads and verifies x's checkpoint into new buffers buf[0..1] and
 * appends its tensors to out at *n (max in all). */
int xp__soma_read(const pr_spec *s, const char *run_id, xp_model *x,
    float **buf, pr_st_tensor *out, int *n, int max, char *err);
/* The metadata's "models" entry of x. */
json_t *xp__soma_json(const pr_spec *s, const xp_model *x);
/* Names x (prefix, kind, path in dir) from an entry's kind and index;
 * -1 when they are not a model of s. */
int xp__soma_name(const pr_spec *s, const char *kind, int index,
    const char *dir, xp_model *x);
/* x's tensors from f, checked, into new buffers buf[0..1]. */
int xp__soma_gather(const pr_st_file *f, const pr_spec *s, xp_model *x,
    unsigned char *taken, float **buf, char *err);
/* Writes x's checkpoint from buf[0..1] to x->path. */
int xp__soma_save(const pr_spec *s, const char *run_id, const xp_model *x,
    float *const *buf, char *err);

extern const char xp__soma_tensors_doc[], xp__soma_forward_doc[];

#endif
