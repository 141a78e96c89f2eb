/* The backend table: every compute operation of the core, with one
 * implementation per backend (kernels/cpu/ in C with OpenBLAS, kernels/cuda/
 * with cuBLAS and .cu kernels).  The model code calls only through this
 * table, so the GPU version reads as a port of the CPU one and a parity test
 * can run both on the same inputs.
 *
 * All pointers passed to ops point into the backend's own memory (host
 * memory for the CPU, device memory for CUDA), obtained from alloc().
 * Shapes are row-major and given in comments; N is a count of positions
 * (batch x window), C a width, OC an output width, T the window, NH heads.
 *
 * Gradient convention: parameter gradients (dw, db, dwte, dwpe) are always
 * accumulated (+=), so several micro-batches may add into one buffer.
 * Activation gradients are overwritten (=) except where an op says "+=":
 * layernorm_backward adds into dinp because its input is the residual
 * stream, whose gradient already holds the skip connection's share.
 */
#ifndef KN_BACKEND_H
#define KN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
	KN_BACKEND_AUTO = 0,
	KN_BACKEND_CPU,
	KN_BACKEND_CUDA
} kn_backend_kind;

/* Attention masks: which keys query i of a sequence of T sees.
 * KN_ATT_FULL: all of them (the bidirectional block).
 * L > 0: block-causal over position blocks of L (DESIGN section 2): the
 *   keys of its own block and of the blocks before; KN_ATT_CAUSAL (L = 1)
 *   is the causal LM's j <= i.  T is a multiple of L.
 * -L < 0: the rows that train and score position blocks of L: T = 2n
 *   positions, a noisy copy of the window in [0, n) and the clean copy in
 *   [n, 2n).  A noisy query of block j sees the noisy keys of block j and
 *   the clean keys of blocks before j; a clean query sees the clean keys
 *   block-causally.  So every block is predicted from its clean context
 *   in one pass, and no noise of another block reaches it. */
#define KN_ATT_FULL 0
#define KN_ATT_CAUSAL 1

typedef struct kn_backend kn_backend;

struct kn_backend {
	const char *name;                 /* "cpu" or "cuda" */
	kn_backend_kind kind;

	/* One line for the log: BLAS kernel and threads for the CPU, device
	 * name and memory for CUDA.  Writes at most len bytes to buf. */
	void (*describe)(char *buf, size_t len);

	/* Memory.  alloc() returns zeroed memory or NULL. */
	void *(*alloc)(size_t bytes);
	void (*free)(void *p);
	void (*upload)(void *dst, const void *host_src, size_t bytes);
	void (*download)(void *host_dst, const void *src, size_t bytes);
	void (*copy)(void *dst, const void *src, size_t bytes);
	void (*zero)(void *p, size_t bytes);
	void (*sync)(void);

	/* out (N,C) = wte[sym[i]] (V,C) + wpe[i % T] (T,C) */
	void (*embed_forward)(float *out, const int32_t *sym, const float *wte,
	    const float *wpe, int N, int T, int C);
	/* dwte += scatter of dout by sym; dwpe += dout summed over the batch */
	void (*embed_backward)(float *dwte, float *dwpe, const float *dout,
	    const int32_t *sym, int N, int T, int C);

	/* out (N,C) = (inp - mean) * rstd * w + b; mean, rstd (N) saved */
	void (*layernorm_forward)(float *out, float *mean, float *rstd,
	    const float *inp, const float *w, const float *b, int N, int C);
	/* dinp += ..., dw += ..., db += ... */
	void (*layernorm_backward)(float *dinp, float *dw, float *db,
	    const float *dout, const float *inp, const float *w,
	    const float *mean, const float *rstd, int N, int C);

	/* out (N,OC) = inp (N,C) . w^T (w is (OC,C)) + bias (OC, may be NULL) */
	void (*matmul_forward)(float *out, const float *inp, const float *w,
	    const float *bias, int N, int C, int OC);
	/* dinp (N,C) = dout . w (NULL: skipped); dw (OC,C) += dout^T . inp;
	 * dbias (OC) += column sums of dout (NULL: skipped) */
	void (*matmul_backward)(float *dinp, float *dw, float *dbias,
	    const float *dout, const float *inp, const float *w,
	    int N, int C, int OC);

	/* matmul_forward with the weights w (OC,C) in IEEE fp16 storage.
	 * The CPU widens a slice of w at a time to fp32 in scratch and runs
	 * the same GEMM on it (the result is the fp32 op's on the widened
	 * weights); CUDA narrows inp to fp16 in scratch and runs an fp16
	 * GEMM with fp32 accumulation.  scratch: matmul_f16_scratch(N, C,
	 * OC) bytes, for these sizes and any smaller. */
	void (*matmul_forward_f16)(float *out, const float *inp,
	    const uint16_t *w, const float *bias, void *scratch, int N, int C,
	    int OC);
	size_t (*matmul_f16_scratch)(int N, int C, int OC);

	/* Multi-head self-attention without projections.  qkv (N,3C) holds
	 * q, k, v side by side; head h uses columns [h*hs, (h+1)*hs) of each,
	 * hs = C/NH.  att (B,NH,T,T) keeps the softmax probabilities for the
	 * backward pass.  out (N,C).  N = B*T.  mask: which keys a query
	 * sees (KN_ATT_*, below). */
	void (*attention_forward)(float *out, float *att, const float *qkv,
	    int B, int T, int C, int NH, int mask);
	/* dqkv (N,3C) = ...; scratch (B,NH,T,T) is work space */
	void (*attention_backward)(float *dqkv, float *scratch,
	    const float *dout, const float *qkv, const float *att,
	    int B, int T, int C, int NH, int mask);

	/* Causal attention of T new positions pos0..pos0+T-1 of one
	 * sequence, decoding with a KV cache: their k and v (from qkv
	 * (T,3C)) are first written to rows pos0.. of kcache and vcache
	 * (window, C), then position pos0+i attends to cache rows
	 * 0..pos0+i.  scores (NH, T, pos0+T) is work space; out (T,C). */
	void (*attention_decode)(float *out, float *kcache, float *vcache,
	    float *scores, const float *qkv, int pos0, int T, int C, int NH);

	/* K copies of a linear layer on inputs of the same shape, for the
	 * population of perturbed bodies: for each k < K, out_k (N,OC) =
	 * inp_k (N,C) . w_k^T (w_k (OC,C)) + bias_k (OC, may be NULL), where
	 * inp_k = inp + k*inp_stride, w_k = w + k*w_stride, bias_k = bias +
	 * k*w_stride (strides in floats: copies are rows of one (K, nbody)
	 * array), out_k = out + k*N*OC.  inp_stride 0 shares one input. */
	void (*matmul_forward_batched)(float *out, const float *inp,
	    const float *w, const float *bias, int N, int C, int OC, int K,
	    size_t inp_stride, size_t w_stride);

	/* K independent LSTM layers (gates i, f, g, o) over B sequences of T
	 * steps, width C, state starting at zero.  gates (K,B,T,4C): on
	 * entry x.W_ih^T + b at every position (one GEMM for all); on
	 * return the gate activations sigma(i), sigma(f), tanh(g), sigma(o),
	 * kept for the backward pass.  whh_k = whh + k*whh_stride (4C,C).
	 * h (K,B,T,C) the outputs, c (K,B,T,C) the cell states. */
	void (*lstm_forward)(float *h, float *c, float *gates,
	    const float *whh, int K, int B, int T, int C, size_t whh_stride);
	/* Backpropagation through time of one layer (K = 1): dgates
	 * (B,T,4C) = gradient w.r.t. the pre-activation gates, i.e. w.r.t.
	 * the input projections (=); dwhh (4C,C) +=.  dh (B,T,C) holds the
	 * gradient w.r.t. h from above and is used as work space (its
	 * contents are lost); dcell (B,C) is work space. */
	void (*lstm_backward)(float *dgates, float *dwhh, float *dh,
	    float *dcell, const float *h, const float *c, const float *gates,
	    const float *whh, int B, int T, int C);

	/* tanh-approximation GELU, as GPT-2 and torch's gelu(approximate=
	 * "tanh"); exact erf GELU would cost a libm call per element. */
	void (*gelu_forward)(float *out, const float *inp, size_t n);
	/* dinp = dout * gelu'(inp); dinp may alias dout */
	void (*gelu_backward)(float *dinp, const float *inp, const float *dout,
	    size_t n);

	/* out = a + b; out may alias a or b */
	void (*residual_forward)(float *out, const float *a, const float *b,
	    size_t n);

	/* Weighted softmax cross-entropy over V classes at N positions.
	 * losses[i] = weight[i] * -log softmax(logits_i)[target[i]];
	 * dlogits_i = dscale * weight[i] * (softmax(logits_i) - onehot).
	 * dlogits may alias logits, or be NULL for a forward-only pass.
	 * A position of weight 0 costs nothing and gets loss 0, gradient 0. */
	void (*xent_forward_backward)(float *losses, float *dlogits,
	    const float *logits, const int32_t *target, const float *weight,
	    int N, int V, float dscale);

	/* Sum of squares of x (n), in double, reduced in a fixed order. */
	double (*sumsq)(const float *x, size_t n);
	/* x *= s */
	void (*scale)(float *x, float s, size_t n);

	/* AdamW (Loshchilov & Hutter) as torch.optim.AdamW: g = grad*gscale;
	 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p *= 1 - lr*wd;
	 * p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps).  t >= 1. */
	void (*adamw_update)(float *p, const float *grad, float *m, float *v,
	    size_t n, float lr, float b1, float b2, float eps, float wd,
	    int t, float gscale);

	/* For each of N positions: probabilities softmax(logits_i / temp)
	 * (V classes), and the symbol picked by inverse CDF with the uniform
	 * u[i] in [0,1); temp <= 0 picks the argmax.  out (N). */
	void (*sample)(int32_t *out, const float *logits, const float *u,
	    int N, int V, float temp);

	/* Ops return nothing, and a GPU reports faults late: status()
	 * returns 0, or the first failure since start-up (KN_EIO, reason in
	 * err).  The model checks it wherever results come back to the
	 * host. */
	int (*status)(char *err);

	/* Optional, NULL where a backend has none (they come last, so that
	 * a table that leaves them out has them NULL): weights w (OC,C)
	 * that stay fixed, packed once into packed (matmul_pack_bytes(C,
	 * OC) bytes, backend memory; 0: this kernel takes none) for
	 * matmul_forward_packed, which is matmul_forward on w to the bit (w
	 * must stay where it is: it may be read instead).  A backend that
	 * packs also gives each row of a product the same bits whatever
	 * rows share it, which serving's row shortcuts rely on. */
	size_t (*matmul_pack_bytes)(int C, int OC);
	void (*matmul_pack)(void *packed, const float *w, int C, int OC);
	void (*matmul_forward_packed)(float *out, const float *inp,
	    const float *w, const void *packed, const float *bias, int N,
	    int C, int OC);

	/* Optional: attention_forward for the R query rows rows[] only
	 * (increasing, in [0, N)), as serving needs when it predicts a few
	 * positions of a window: every row's k and v still count.  Rows
	 * rows[r] of out (N,C) and of att (B,NH,T,T) get attention_forward's
	 * bits; the other rows may be left as they were or written. */
	void (*attention_rows)(float *out, float *att, const float *qkv,
	    int B, int T, int C, int NH, int mask, const int32_t *rows,
	    int R);

	/* Optional: the bytes of backend memory free now (CUDA:
	 * cudaMemGetInfo), in *bytes; 0, or KN_ENODEV with the reason in
	 * err.  NULL: the backend's memory is the host's. */
	int (*memory_free)(uint64_t *bytes, char *err);
};

/* Returns the backend for kind, or NULL with a reason in err (KN_ERR_LEN).
 * KN_BACKEND_AUTO gives CUDA when a GPU is present (kn_cuda_present), else
 * the CPU backend; then note (if not NULL, KN_ERR_LEN) receives a reason
 * when a GPU is there but the CUDA backend could not be had, "" when
 * there is nothing to say (no GPU: the CPU is what auto means). */
const kn_backend *kn_backend_get(kn_backend_kind kind, char *note, char *err);

/* Tells the backend the shape of the model it is about to train (width,
 * heads, window, batch), so that it can pick its kernels for it: the CPU
 * backend chooses its GEMM per shape class (kernels/cpu/gemm.h,
 * kn_gemm_plan) as gemm says, "auto", "own" or "blas"; the environment's
 * SM_GEMM, when set, overrides it, and NULL with SM_GEMM unset means
 * "auto".  Once per process: the first call decides.  Returns 0, or
 * KN_EINVAL for a bad setting (reason in err). */
int kn_backend_plan(const kn_backend *be, int width, int heads, int window,
    int batch, const char *gemm, char *err);

/* Parses "auto", "cpu" or "cuda"; returns 0 or KN_EINVAL. */
int kn_backend_parse(const char *s, kn_backend_kind *kind);

/* be->describe(buf, len): one line describing the backend in use, for the
 * caller to log. */
void kn_backend_describe(const kn_backend *be, char *buf, size_t len);

/* The CPU backend is always built.  The CUDA backend is a module of its
 * own, shardmeter-cuda.so, built when configure found nvcc (HAVE_CUDA)
 * and linked against the CUDA runtime and cuBLAS, so that the programs
 * link neither and start fast; kn_cuda_backend() loads it with dlopen on
 * its first call (kernels/cuda_module.c: $SM_CUDA_MODULE, else the build
 * tree when the program runs from it, else the program's own directory,
 * else the install directory) and
 * returns its table, or NULL with a reason when it is missing or no
 * usable GPU is present.  The outcome is kept for later calls. */
const kn_backend *kn_cpu_backend(void);
const kn_backend *kn_cuda_backend(char *err);

/* Whether this machine shows an NVIDIA GPU to us at all: its driver's
 * device or /proc files, without loading anything.  Returns 1 or 0, and
 * 0 says why in why (KN_ERR_LEN). */
int kn_cuda_present(char *why);

/* The module's one exported symbol, kn_cuda_module_backend: given the
 * table's ABI version and size as the caller was built with, the module
 * starts CUDA and returns its table, or NULL with a reason in err.  The
 * version changes whenever the table's layout or meaning does, so that a
 * module from another build is refused rather than misread. */
#define KN_BACKEND_ABI 1
#define KN_CUDA_MODULE_ENTRY "kn_cuda_module_backend"
typedef const kn_backend *(*kn_cuda_module_fn)(int abi, size_t table_size,
    char *err);

#ifdef __cplusplus
}
#endif

#endif
