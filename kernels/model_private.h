/* Private to kernels/: the layout of a model, shared by model.c (size
 * table, creation, parameters, the forward pass, backward and AdamW) and
 * model_infer.c (serving: inference-only creation, fp16 storage,
 * predictions, KV-cache decoding, layer slices). */
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
	float *att;                     /* (L, B, h, T, T), T a row */
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
	/* Bumped whenever the parameters change: what is derived from them
	 * below is redone when its generation is behind. */
	unsigned params_gen;
	/* Inference models of fp32 storage on a backend that packs: each
	 * layer matrix and the head packed once for its GEMM (layer l of
	 * tensor i at packed[i] + l * packed_per[i]; NULL: unpacked), packed
	 * again at the next pass after the parameters change. */
	void *packed_block;
	char *packed[P_COUNT];
	size_t packed_per[P_COUNT];
	unsigned packed_gen;
	/* With packed_block, the last layer's QKV weight packed once more
	 * as its two parts, q (d rows) and k, v (2d rows): kn_model_predict_at
	 * needs every row's k and v there but q of its picked rows only. */
	char *packed_q, *packed_kv;
	/* kn_model_predict_at's layer-0 q, k, v (max_batch * n, 3d): a row
	 * depends on its own symbol alone, so the rows whose symbol is the
	 * last call's are kept (qkv0_in, host; qkv0_rows of them valid at
	 * generation qkv0_gen). */
	float *qkv0;
	int32_t *qkv0_in;
	int qkv0_rows;
	unsigned qkv0_gen;
	int t;                          /* AdamW steps taken */
	int inference;                  /* no gradients, optimizer or backward */
	int act_layers;                 /* L, or 1 when layers share buffers */
	/* The pass under way: positions per window and the attention mask
	 * (KN_ATT_*), set by kn__model_pass. */
	int T, mask;
	uint64_t passes;                /* kn_model_passes */
	struct acts a;
	void *act_block;                /* all activations, one allocation */
	float *host_losses;             /* (B, T) */
};


#define LAYER(base, l, per) ((base) + (size_t)(l) * (per))

/* Values are moved in pieces of this many: fp16 storage converts
 * through a host buffer that never holds a whole model. */
#define KN_MODEL_PIECE ((size_t)1 << 20)

/* The per-layer matrices: fp16 in a model of fp16 storage. */
#define KN_IS_MATRIX(i) ((i) >= P_QKVW && (i) <= P_FCPROJW)

/* How one layer's attention runs: over B whole windows, or decoding new
 * positions of R sequences against their caches. */
struct kn__attn {
	int B;
	const kn_decode_seq *seqs;
	int R;
	int block;      /* > 0: block-causal decoding, position blocks of this */
};

/* model.c */

/* Sets up a pass over training or scoring rows (train), or serving rows
 * of one window (kn_model_row_len). */
void kn__model_pass(kn_model *m, int train);

/* A model for up to max_batch windows: with inference set, no gradients
 * nor optimizer state and one layer's activations; storage KN_STORE_F16
 * only with inference. */
int kn__model_create(kn_model **out, const kn_model_shape *shape,
    const kn_backend *be, int max_batch, int inference, kn_storage storage,
    char *err);
/* Bytes of the activations of B windows, as kn__model_create lays them
 * out. */
size_t kn__model_acts_bytes(const kn_model_shape *s, int B, int inference);
/* Layer l on N rows: x (N, d) in, the layer's output returned (an
 * activation buffer).  Weights from fp32 or fp16 storage. */
const float *kn__model_layer(kn_model *m, int l, const float *x, int N,
    const struct kn__attn *at);
/* kn__model_layer's two halves: LayerNorm, QKV and attention (returns
 * the attention output, (N, d)); then the projection, the MLP and both
 * residual adds, each row on its own (returns (N, d)).  The second may
 * run on a subset of the rows the first did, gathered. */
const float *kn__model_layer_attn(kn_model *m, int l, const float *x, int N,
    const struct kn__attn *at);
const float *kn__model_layer_mlp(kn_model *m, int l, const float *x,
    const float *atty, int N);
/* kn__model_layer_attn's first half: LayerNorm and QKV of layer l;
 * returns q, k, v (N, 3d). */
const float *kn__model_layer_qkv(kn_model *m, int l, const float *x, int N);
/* The attention of layer l on its q, k, v (N, 3d) given; returns its
 * output (N, d). */
const float *kn__model_attend(kn_model *m, int l, const float *qkv, int N,
    const struct kn__attn *at);
/* out = inp . W^T + bias for layer l's matrix i (or the head), from
 * whichever storage. */
void kn__model_linear(kn_model *m, int i, int l, float *out,
    const float *inp, const float *bias, int N, int C, int OC);
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
/* The forward pass of B uploaded windows up to the logits. */
void kn__model_forward(kn_model *m, int B);

/* model_infer.c */

/* Allocates the fp16 storage of the layer matrices (params16, NULL on
 * failure) and matmul_forward_f16's scratch (stage, *stage bytes);
 * returns the number of elements in fp16. */
size_t kn__model_alloc_f16(kn_model *m, size_t *stage);
/* kn_model_get_params and kn_model_set_params for fp16 storage. */
void kn__model_get_params_f16(const kn_model *m, float *host);
int kn__model_set_params_f16(kn_model *m, const float *host, char *err);
/* len values of tensor i from element first on, from host, into the
 * model; where the tensor is in fp16, narrowed through half (len work
 * space), and KN_ENUM if one is beyond the fp16 range. */
int kn__model_put_values(kn_model *m, int i, size_t first, const float *host,
    size_t len, uint16_t *half, char *err);
/* Room for the packed weights of an inference model (none where the
 * backend does not pack or memory is short: the pass then packs per
 * product), and packing them again if the parameters changed. */
void kn__model_alloc_packed(kn_model *m);
void kn__model_repack(kn_model *m);
/* What model_infer.c allocated for an inference model beyond the
 * parameters and activations. */
void kn__model_free_infer(kn_model *m);
/* Layer l's k cache of a sequence; its v cache follows, window x d
 * floats on. */
float *kn__kv_layer(kn_kv *kv, int l);
/* The final LayerNorm, head and sampling on rows (R) of x (N, d): out[r]
 * sampled with u[r] at temperature temp. */
int kn__model_sample_rows(kn_model *m, const float *x, const int32_t *rows,
    int R, const float *u, float temp, int32_t *out, char *err);
/* Sets the positions a cache holds (blockdecode's commit). */
void kn__kv_set_len(kn_kv *kv, int len);

/* model_blockdecode.c */

/* The attention of layer l in a block-causal decoding pass (at->block
 * set): each sequence's new rows against its cache.  tmp: 3d floats of
 * work space free during the attention. */
void kn__blockdecode_attention(kn_model *m, int l, float *atty,
    const float *qkv, float *tmp, const struct kn__attn *at);

#endif
