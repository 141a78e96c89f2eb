/* The fully connected layer on the GPU, the port of kernels/cpu/matmul.c:
 * every product is a cuBLAS SGEMM (through kn__gemm, which maps row-major
 * to cuBLAS's column-major), the bias and its gradient are small kernels. */
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"

/* dbias: as layernorm's dw, a block sums COL_X columns over all rows. */
#define COL_X 8
#define COL_Y 128

/* out (N,OC) += bias (OC) on every row */
static __global__ void
add_bias_kernel(float *out, const float *bias, int N, int OC)
{
	size_t n = (size_t)N * OC;

	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
	    k += (size_t)gridDim.x * blockDim.x)
		out[k] += bias[k % OC];
}

/* dbias (OC) += column sums of dout (N,OC), folded in a fixed order. */
static __global__ void
matmul_backward_bias_kernel(float *dbias, const float *dout, int N, int OC)
{
	__shared__ float part[COL_Y][COL_X];
	int tx = threadIdx.x, ty = threadIdx.y;
	int o = blockIdx.x * COL_X + tx;
	float acc = 0.0f;

	if (o < OC)
		for (int i = ty; i < N; i += COL_Y)
			acc += dout[(size_t)i * OC + o];
	part[ty][tx] = acc;
	__syncthreads();
	for (int half = COL_Y / 2; half > 0; half >>= 1) {
		if (ty < half)
			part[ty][tx] += part[ty + half][tx];
		__syncthreads();
	}
	if (ty == 0 && o < OC)
		dbias[o] += part[0][tx];
}

/* The activations narrowed to fp16 for an fp16 GEMM. */
static __global__ void
to_half_kernel(__half *dst, const float *src, size_t n)
{
	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
	    k += (size_t)gridDim.x * blockDim.x)
		dst[k] = __float2half_rn(src[k]);
}

namespace kn_cuda {

size_t
matmul_f16_scratch(int N, int C, int OC)
{
	(void)OC;
	return (size_t)N * C * sizeof(__half);
}

/* out (N,OC) = inp (N,C) . w^T with w (OC,C) in fp16: in cuBLAS's
 * column-major terms out^T = w^T' . inp^T, fp16 inputs, fp32 sums. */
void
matmul_forward_f16(float *out, const float *inp, const uint16_t *w,
    const float *bias, void *scratch, int N, int C, int OC)
{
	const unsigned block = 256;
	const float one = 1.0f, zero = 0.0f;
	__half *ih = (__half *)scratch;
	size_t n = (size_t)N * C;

	to_half_kernel<<<kn__cuda_blocks(n, block), block, 0,
	    kn__cuda_stream>>>(ih, inp, n);
	KN_LAUNCHED("to_half_kernel");
	KN_CUBLAS(cublasGemmEx(kn__cuda_blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N,
	    C, &one, w, CUDA_R_16F, C, ih, CUDA_R_16F, C, &zero, out,
	    CUDA_R_32F, OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	if (bias == NULL)
		return;
	add_bias_kernel<<<kn__cuda_blocks((size_t)N * OC, block), block, 0,
	    kn__cuda_stream>>>(out, bias, N, OC);
	KN_LAUNCHED("add_bias_kernel");
}

void
matmul_forward(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC)
{
	const unsigned block = 256;

	/* out (N,OC) = inp (N,C) . w^T, w (OC,C) */
	kn__gemm(false, true, N, OC, C, 1.0f, inp, C, 0, w, C, 0, 0.0f,
	    out, OC, 0, 1);
	if (bias == NULL)
		return;
	add_bias_kernel<<<kn__cuda_blocks((size_t)N * OC, block), block, 0,
	    kn__cuda_stream>>>(out, bias, N, OC);
	KN_LAUNCHED("add_bias_kernel");
}

void
matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
    const float *inp, const float *w, int N, int C, int OC)
{
	/* dinp (N,C) = dout (N,OC) . w (OC,C), overwritten */
	if (dinp != NULL)
		kn__gemm(false, false, N, C, OC, 1.0f, dout, OC, 0, w, C, 0,
		    0.0f, dinp, C, 0, 1);
	/* dw (OC,C) += dout^T (OC,N) . inp (N,C) */
	kn__gemm(true, false, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f,
	    dw, C, 0, 1);
	if (dbias == NULL || OC <= 0)
		return;
	matmul_backward_bias_kernel<<<(OC + COL_X - 1) / COL_X,
	    dim3(COL_X, COL_Y), 0, kn__cuda_stream>>>(dbias, dout, N, OC);
	KN_LAUNCHED("matmul_backward_bias_kernel");
}

}  /* namespace kn_cuda */
