/* Private to the CPU backend: its ops, named as in the backend table with
 * a kn_cpu_ prefix, and the vector-math loops they share (vmath.c). */
#ifndef KN_CPU_H
#define KN_CPU_H

#include <stddef.h>
#include <stdint.h>

/* Hot loops are built for AVX-512, AVX2 and the baseline, and the loader
 * picks the version for the CPU at hand: the build never assumes the
 * machine it runs on. */
#if defined(__clang__) && __clang_major__ < 15
/* clang 14 names an extern clone's dispatcher "f.ifunc", which calls from
 * other files do not find (the fuzzing build uses clang): one version */
#define KN_CLONES
#else
#define KN_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#endif

/* Rows handed to one pool task by the row-parallel ops: small enough to
 * balance two to a few dozen threads, large enough to amortise a task. */
#define KN_CPU_ROWS_PER_TASK 32
/* Elements per task of the flat element-wise ops, and the fixed chunk of
 * the reductions whose order must not depend on the thread count. */
#define KN_CPU_CHUNK 16384

void kn_cpu_embed_forward(float *out, const int32_t *sym, const float *wte,
    const float *wpe, int N, int T, int C);
void kn_cpu_embed_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *sym, int N, int T, int C);
void kn_cpu_layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int N, int C);
void kn_cpu_layernorm_backward(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w, const float *mean,
    const float *rstd, int N, int C);
void kn_cpu_matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC);
void kn_cpu_matmul_backward(float *dinp, float *dw, float *dbias,
    const float *dout, const float *inp, const float *w, int N, int C,
    int OC);
void kn_cpu_matmul_forward_f16(float *out, const float *inp,
    const uint16_t *w, const float *bias, void *scratch, int N, int C,
    int OC);
size_t kn_cpu_matmul_f16_scratch(int N, int C, int OC);
size_t kn_cpu_matmul_pack_bytes(int C, int OC);
void kn_cpu_matmul_pack(void *packed, const float *w, int C, int OC);
void kn_cpu_matmul_forward_packed(float *out, const float *inp,
    const float *w, const void *packed, const float *bias, int N, int C,
    int OC);
void kn_cpu_attention_forward(float *out, float *att, const float *qkv,
    int B, int T, int C, int NH, int mask);
void kn_cpu_attention_rows(float *out, float *att, const float *qkv,
    int B, int T, int C, int NH, int mask, const int32_t *rows, int R);
void kn_cpu_attention_backward(float *dqkv, float *scratch,
    const float *dout, const float *qkv, const float *att, int B, int T,
    int C, int NH, int mask);
void kn_cpu_attention_decode(float *out, float *kcache, float *vcache,
    float *scores, const float *qkv, int pos0, int T, int C, int NH);
void kn_cpu_matmul_forward_batched(float *out, const float *inp,
    const float *w, const float *bias, int N, int C, int OC, int K,
    size_t inp_stride, size_t w_stride);
void kn_cpu_lstm_forward(float *h, float *c, float *gates, const float *whh,
    int K, int B, int T, int C, size_t whh_stride);
void kn_cpu_lstm_backward(float *dgates, float *dwhh, float *dh,
    float *dcell, const float *h, const float *c, const float *gates,
    const float *whh, int B, int T, int C);
void kn_cpu_gelu_forward(float *out, const float *inp, size_t n);
void kn_cpu_gelu_backward(float *dinp, const float *inp, const float *dout,
    size_t n);
void kn_cpu_residual_forward(float *out, const float *a, const float *b,
    size_t n);
void kn_cpu_xent_forward_backward(float *losses, float *dlogits,
    const float *logits, const int32_t *target, const float *weight, int N,
    int V, float dscale);
double kn_cpu_sumsq(const float *x, size_t n);
void kn_cpu_scale(float *x, float s, size_t n);
void kn_cpu_adamw_update(float *p, const float *grad, float *m, float *v,
    size_t n, float lr, float b1, float b2, float eps, float wd, int t,
    float gscale);
void kn_cpu_sample(int32_t *out, const float *logits, const float *u, int N,
    int V, float temp);

/* vmath.c: loops over contiguous floats, built for several instruction
 * sets and picked at load time. */
/* x[j] = exp(scale*x[j] - m) / sum, m = max of scale*x over j < n;
 * returns the sum before normalisation. */
float kn_cpu_softmax_row(float *x, int n, float scale);
/* kn_cpu_softmax_row on each of rows rows of n floats, ld apart: the
 * same bits, faster. */
void kn_cpu_softmax_rows(float *x, int rows, int n, size_t ld,
    float scale);
/* log(sum_j exp(x[j])) */
float kn_cpu_logsumexp_row(const float *x, int n);
/* y[j] = exp(x[j] - shift) * mul */
void kn_cpu_exp_row(float *y, const float *x, int n, float shift, float mul);
void kn_cpu_gelu_range(float *out, const float *inp, size_t n);
void kn_cpu_gelu_backward_range(float *dinp, const float *inp,
    const float *dout, size_t n);

#endif
