/* Element-wise ops and the one reduction to the host, the port of
 * kernels/cpu/elementwise.c: GELU and its gradient, the residual add,
 * scaling, and the sum of squares used for gradient-norm clipping. */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define GELU_K 0.7978845608028654f   /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* sumsq: the grid is fixed rather than sized to the device, so the order
 * of the double additions, and thus the result, depends only on n. */
#define SUMSQ_BLOCK 256
#define SUMSQ_GRID 1024

/* GELU, tanh form: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
 * computed as the CPU does, 1 + tanh(u) = 2 / (1 + exp(-2u)): one exp, and
 * no cancellation in 1 + tanh(u) for negative x. */
static __global__ void
gelu_forward_kernel(float *out, const float *inp, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		float x = inp[i];
		float u = GELU_K * (x + GELU_C * x * x * x);

		out[i] = x / (1.0f + expf(-2.0f * u));
	}
}

/* d/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, with
 * s = 1/(1+exp(-2u)) = (1 + tanh u)/2 and 1 - tanh^2 u = 4 s (1 - s).
 * dinp may alias dout: each element is read before it is written. */
static __global__ void
gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
    size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		float x = inp[i];
		float u = GELU_K * (x + GELU_C * x * x * x);
		float s = 1.0f / (1.0f + expf(-2.0f * u));
		float du = GELU_K * (1.0f + 3.0f * GELU_C * x * x);

		dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
	}
}

static __global__ void
residual_forward_kernel(float *out, const float *a, const float *b, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x)
		out[i] = a[i] + b[i];
}

static __global__ void
scale_kernel(float *x, float s, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x)
		x[i] *= s;
}

/* Folds part[0..blockDim.x) in a fixed tree; blockDim.x a power of 2. */
static __device__ double
block_sum(double *part)
{
	for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {
		if (threadIdx.x < half)
			part[threadIdx.x] += part[threadIdx.x + half];
		__syncthreads();
	}
	return part[0];
}

/* partial[blockIdx.x] = sum of x^2 over this block's share of x */
static __global__ void
sumsq_partial_kernel(double *partial, const float *x, size_t n)
{
	__shared__ double part[SUMSQ_BLOCK];
	double acc = 0.0;

	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		double v = x[i];

		acc += v * v;
	}
	part[threadIdx.x] = acc;
	__syncthreads();
	acc = block_sum(part);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = acc;
}

/* *total = sum of partial[0..count); one block of SUMSQ_GRID threads */
static __global__ void
sumsq_total_kernel(double *total, const double *partial, int count)
{
	__shared__ double part[SUMSQ_GRID];
	double acc;

	part[threadIdx.x] = (int)threadIdx.x < count ? partial[threadIdx.x] :
	    0.0;
	__syncthreads();
	acc = block_sum(part);
	if (threadIdx.x == 0)
		*total = acc;
}

/* (SUMSQ_GRID + 1) doubles: the partial sums, then the total.  Allocated
 * on first use and kept. */
static double *sumsq_buf;

namespace kn_cuda {

void
gelu_forward(float *out, const float *inp, size_t n)
{
	const unsigned block = 256;

	gelu_forward_kernel<<<kn__cuda_blocks(n, block), block, 0,
	    kn__cuda_stream>>>(out, inp, n);
	KN_LAUNCHED("gelu_forward_kernel");
}

void
gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
	const unsigned block = 256;

	gelu_backward_kernel<<<kn__cuda_blocks(n, block), block, 0,
	    kn__cuda_stream>>>(dinp, inp, dout, n);
	KN_LAUNCHED("gelu_backward_kernel");
}

void
residual_forward(float *out, const float *a, const float *b, size_t n)
{
	const unsigned block = 256;

	residual_forward_kernel<<<kn__cuda_blocks(n, block), block, 0,
	    kn__cuda_stream>>>(out, a, b, n);
	KN_LAUNCHED("residual_forward_kernel");
}

void
scale(float *x, float s, size_t n)
{
	const unsigned block = 256;

	scale_kernel<<<kn__cuda_blocks(n, block), block, 0,
	    kn__cuda_stream>>>(x, s, n);
	KN_LAUNCHED("scale_kernel");
}

double
sumsq(const float *x, size_t n)
{
	size_t blocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
	double total = 0.0;

	if (n == 0)
		return 0.0;
	if (sumsq_buf == NULL && !KN_CUDA(cudaMalloc(&sumsq_buf,
	    (SUMSQ_GRID + 1) * sizeof(double)))) {
		sumsq_buf = NULL;
		return NAN;
	}
	if (blocks > SUMSQ_GRID)
		blocks = SUMSQ_GRID;
	sumsq_partial_kernel<<<(unsigned)blocks, SUMSQ_BLOCK, 0,
	    kn__cuda_stream>>>(sumsq_buf, x, n);
	KN_LAUNCHED("sumsq_partial_kernel");
	sumsq_total_kernel<<<1, SUMSQ_GRID, 0, kn__cuda_stream>>>(
	    sumsq_buf + SUMSQ_GRID, sumsq_buf, (int)blocks);
	KN_LAUNCHED("sumsq_total_kernel");
	/* The one op whose result comes back to the host. */
	if (!KN_CUDA(cudaMemcpyAsync(&total, sumsq_buf + SUMSQ_GRID,
	    sizeof(double), cudaMemcpyDeviceToHost, kn__cuda_stream)) ||
	    !KN_CUDA(cudaStreamSynchronize(kn__cuda_stream)))
		return NAN;
	return total;
}

}  /* namespace kn_cuda */
