/* Private to kernels/cuda/: the one stream and cuBLAS handle every op runs
 * on, the error record that stands in for exit() (the table's ops return
 * void, so the first failure is kept for kn_cuda_status() to report), and
 * the declarations of the ops, which keep the CPU backend's names inside
 * namespace kn_cuda so the C and C++ symbols never clash. */
#ifndef KN_CUDA_COMMON_CUH
#define KN_CUDA_COMMON_CUH

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* Created once by kn_cuda_backend(); every kernel, copy and GEMM is queued
 * on this stream, so ops are ordered without host synchronisation. */
extern cudaStream_t kn__cuda_stream;
extern cublasHandle_t kn__cuda_blas;

/* Record the first failure (later ones are dropped: they are usually its
 * consequences).  Return true when e is a success. */
bool kn__cuda_check(cudaError_t e, const char *expr, const char *file,
    int line);
bool kn__cublas_check(cublasStatus_t s, const char *expr, const char *file,
    int line);

#define KN_CUDA(call) kn__cuda_check((call), #call, __FILE__, __LINE__)
#define KN_CUBLAS(call) kn__cublas_check((call), #call, __FILE__, __LINE__)
/* After a <<<>>> launch: catches a bad configuration at once; faults inside
 * the kernel surface at the next synchronising call. */
#define KN_LAUNCHED(name) \
	kn__cuda_check(cudaGetLastError(), name, __FILE__, __LINE__)

/* Blocks for a grid-stride loop over n items; capped because the loops
 * stride, and at least 1 so a launch with n = 0 stays valid. */
unsigned kn__cuda_blocks(size_t n, unsigned block);

/* Row-major GEMM, batched over one index with fixed strides:
 * C (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * C, for each of batch
 * matrices.  Row-major X is column-major X^T, so this is the column-major
 * C^T = op(B)^T . op(A)^T, i.e. cuBLAS with A and B swapped. */
void kn__gemm(bool transA, bool transB, int M, int N, int K, float alpha,
    const float *A, int lda, long long strideA,
    const float *B, int ldb, long long strideB, float beta,
    float *C, int ldc, long long strideC, int batch);

/* Reductions across a warp.  Device functions cannot be linked between
 * translation units without -rdc, so these few live in the header. */
static __device__ __forceinline__ float
kn__warp_sum(float x)
{
	for (int off = 16; off > 0; off >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, off);
	return x;
}

static __device__ __forceinline__ float
kn__warp_max(float x)
{
	for (int off = 16; off > 0; off >>= 1)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
	return x;
}

namespace kn_cuda {

void embed_forward(float *out, const int32_t *sym, const float *wte,
    const float *wpe, int N, int T, int C);
void embed_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *sym, int N, int T, int C);

void layernorm_forward(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int N, int C);
void layernorm_backward(float *dinp, float *dw, float *db,
    const float *dout, const float *inp, const float *w,
    const float *mean, const float *rstd, int N, int C);

void matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC);
void matmul_backward(float *dinp, float *dw, float *dbias,
    const float *dout, const float *inp, const float *w,
    int N, int C, int OC);

void matmul_forward_f16(float *out, const float *inp, const uint16_t *w,
    const float *bias, void *scratch, int N, int C, int OC);
size_t matmul_f16_scratch(int N, int C, int OC);

void attention_forward(float *out, float *att, const float *qkv,
    int B, int T, int C, int NH, int mask);
void attention_backward(float *dqkv, float *scratch,
    const float *dout, const float *qkv, const float *att,
    int B, int T, int C, int NH, int mask);

void attention_decode(float *out, float *kcache, float *vcache,
    float *scores, const float *qkv, int pos0, int T, int C, int NH);

void matmul_forward_batched(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC, int K, size_t inp_stride,
    size_t w_stride);
void lstm_forward(float *h, float *c, float *gates, const float *whh, int K,
    int B, int T, int C, size_t whh_stride);
void lstm_backward(float *dgates, float *dwhh, float *dh, float *dcell,
    const float *h, const float *c, const float *gates, const float *whh,
    int B, int T, int C);

void gelu_forward(float *out, const float *inp, size_t n);
void gelu_backward(float *dinp, const float *inp, const float *dout,
    size_t n);
void residual_forward(float *out, const float *a, const float *b, size_t n);
double sumsq(const float *x, size_t n);
void scale(float *x, float s, size_t n);

void xent_forward_backward(float *losses, float *dlogits,
    const float *logits, const int32_t *target, const float *weight,
    int N, int V, float dscale);

void adamw_update(float *p, const float *grad, float *m, float *v,
    size_t n, float lr, float b1, float b2, float eps, float wd,
    int t, float gscale);

void sample(int32_t *out, const float *logits, const float *u,
    int N, int V, float temp);

}  /* namespace kn_cuda */

#endif
