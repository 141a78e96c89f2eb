/* Private to kernels/: the layout of a model, shared by model.c
 * (creation, parameters, training) and model_infer.c (serving: some rows
 * only, KV-cache decoding, layer slices, fp16 storage). */
#ifndef KN_MODEL_PRIVATE_H
#define KN_MODEL_PRIVATE_H

#include <stdint.h>

#include "kernels/model.h"

/* Parameter tensors in buffer order.  The decayed ones (matrices and
 * embeddings) come first so that AdamW is two calls: one with weight decay,
 * one without (biases and LayerNorm). */
enum {
	P_WTE,          /* (257, d) */
	P_WPE,          /* (n, d) */
	P_QKVW,         /* (L, 3d, d) */
	P_ATTPROJW,     /* (L, d, d) */
	P_FCW,          /* (L, 4d, d) */
	P_FCPROJW,      /* (L, d, 4d) */
	P_HEADW,        /* (256, d) */
	P_LN1W,         /* (L, d) */
	P_LN1B,         /* (L, d) */
	P_QKVB,         /* (L, 3d) */
	P_ATTPROJB,     /* (L, d) */
	P_LN2W,         /* (L, d) */
	P_LN2B,         /* (L, d) */
	P_FCB,          /* (L, 4d) */
	P_FCPROJB,      /* (L, d) */
	P_LNFW,         /* (d) */
	P_LNFB,         /* (d) */
	P_HEADB,        /* (256) */
	P_COUNT
};
#define P_FIRST_UNDECAYED P_LN1W

/* Activations of one forward pass, per layer where it says (L, ...). */
struct acts {
	int32_t *input, *target;        /* (N) */
	float *weight;                  /* (N) */
	float *encoded;                 /* (N, d) */
	float *ln1, *ln1_mean, *ln1_rstd;       /* (L, N, d), (L, N) x2 */
	float *qkv;                     /* (L, N, 3d) */
	float *atty;                    /* (L, N, d) */
	float *att;                     /* (L, B, h, n, n) */
	float *attproj;                 /* (L, N, d) */
	float *resid2;                  /* (L, N, d) */
	float *ln2, *ln2_mean, *ln2_rstd;       /* (L, N, d), (L, N) x2 */
	float *fch, *fch_gelu;          /* (L, N, 4d) */
	float *fcproj;                  /* (L, N, d) */
	float *resid3;                  /* (L, N, d) */
	float *lnf, *lnf_mean, *lnf_rstd;       /* (N, d), (N) x2 */
	float *logits;                  /* (N, 256) */
	float *losses;                  /* (N) */
	/* backward work space */
	float *dres, *dln, *datty, *dqkv, *dfch, *datt;
	float *u;                       /* (N) uniforms for sampling */
	int32_t *picked;                /* (N) */
};

struct kn_model {
	kn_model_shape shape;
	const kn_backend *be;
	int max_batch;
	kn_tensor tensors[P_COUNT];
	size_t num_params;
	float *params, *grads, *m, *v;
	/* Where each tensor's fp32 values are: into params, or, with fp16
	 * storage, NULL for the four layer matrices, which are in w16. */
	float *w[P_COUNT];
	uint16_t *w16[P_COUNT];
	kn_storage storage;
	uint16_t *params16;             /* fp16 storage of the matrices */
	void *stage;                    /* matmul_forward_f16's scratch */
	int t;                          /* AdamW steps taken */
	int inference;                  /* no gradients, optimizer or backward */
	int act_layers;                 /* L, or 1 when layers share buffers */
	struct acts a;
	void *act_block;                /* all activations, one allocation */
	float *host_losses;             /* (N) */
};


#define LAYER(base, l, per) ((base) + (size_t)(l) * (per))

/* The per-layer matrices: fp16 in a model of fp16 storage. */
#define KN_IS_MATRIX(i) ((i) >= P_QKVW && (i) <= P_FCPROJW)

/* How one layer's attention runs: over B whole windows, or decoding new
 * positions of R sequences against their caches. */
struct kn__attn {
	int B;
	const kn_decode_seq *seqs;
	int R;
};

/* Layer l's k cache of a sequence; its v cache follows, window x d
 * floats on. */
float *kn__kv_layer(kn_kv *kv, int l);

/* Layer l on N rows: x (N, d) in, the layer's output returned (an
 * activation buffer).  Weights from fp32 or fp16 storage. */
const float *kn__model_layer(kn_model *m, int l, const float *x, int N,
    const struct kn__attn *at);
/* The final LayerNorm and head on N rows of x into the logits. */
void kn__model_head(kn_model *m, const float *x, int N);
int kn__model_check_batch(const kn_model *m, const int32_t *input,
    const int32_t *target, const float *weight, int B, char *err);
/* The input symbols of B windows (and targets, weights if not NULL). */
void kn__model_upload_batch(kn_model *m, const int32_t *input,
    const int32_t *target, const float *weight, int B);
/* Embeds the uploaded input and runs every layer; returns the residual
 * stream after the last (N, d). */
const float *kn__model_forward_layers(kn_model *m, int B);

#endif
