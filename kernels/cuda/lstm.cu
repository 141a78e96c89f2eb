/* The SOMA expert's layers on the GPU, the port of kernels/cpu/lstm.c: the
 * K-copy linear layer and the LSTM recurrence as strided-batched cuBLAS
 * GEMMs (one call covers every copy of the population) and one small
 * element-wise kernel per step. */
#include <math.h>

#include "kernels/cuda/common.cuh"

#define BLOCK 256

/* out_k (N,OC) += bias_k (OC) on every row, bias_k = bias + k*stride */
static __global__ void
add_bias_batched_kernel(float *out, const float *bias, int N, int OC, int K,
    size_t stride)
{
	size_t per = (size_t)N * OC, n = per * K;

	for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n;
	    q += (size_t)gridDim.x * blockDim.x)
		out[q] += bias[(q / per) * stride + q % OC];
}

static __device__ __forceinline__ float
sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

/* Step t of every copy and sequence: one thread per (copy, sequence,
 * column); as cell_forward_row on the CPU. */
static __global__ void
lstm_cell_forward_kernel(float *h, float *c, float *gates, int K, int B,
    int T, int C, int t)
{
	size_t n = (size_t)K * B * C;

	for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n;
	    q += (size_t)gridDim.x * blockDim.x) {
		size_t seq = q / C;     /* copy * B + sequence */
		int j = (int)(q % C);
		size_t pos = seq * T + t;
		float *g = gates + pos * 4 * C;
		float i = sigmoid(g[j]), f = sigmoid(g[C + j]);
		float gg = tanhf(g[2 * C + j]), o = sigmoid(g[3 * C + j]);
		float cc = i * gg;

		if (t > 0)
			cc += f * c[(pos - 1) * C + j];
		g[j] = i;
		g[C + j] = f;
		g[2 * C + j] = gg;
		g[3 * C + j] = o;
		c[pos * C + j] = cc;
		h[pos * C + j] = o * tanhf(cc);
	}
}

/* Step t of the backward pass of one copy: as cell_backward_row. */
static __global__ void
lstm_cell_backward_kernel(float *dgates, float *dcell, const float *dh,
    const float *gates, const float *c, int B, int T, int C, int t)
{
	size_t n = (size_t)B * C;

	for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n;
	    q += (size_t)gridDim.x * blockDim.x) {
		size_t b = q / C;
		int j = (int)(q % C);
		size_t pos = b * T + t;
		const float *g = gates + pos * 4 * C;
		float *dg = dgates + pos * 4 * C;
		float i = g[j], f = g[C + j], gg = g[2 * C + j];
		float o = g[3 * C + j];
		float th = tanhf(c[pos * C + j]);
		float dht = dh[pos * C + j];
		float dcin = t == T - 1 ? 0.0f : dcell[q];
		float dc = dcin + dht * o * (1.0f - th * th);
		float cp = t > 0 ? c[(pos - 1) * C + j] : 0.0f;

		dg[j] = dc * gg * i * (1.0f - i);
		dg[C + j] = dc * cp * f * (1.0f - f);
		dg[2 * C + j] = dc * i * (1.0f - gg * gg);
		dg[3 * C + j] = dht * th * o * (1.0f - o);
		dcell[q] = dc * f;
	}
}

namespace kn_cuda {

void
matmul_forward_batched(float *out, const float *inp, const float *w,
    const float *bias, int N, int C, int OC, int K, size_t inp_stride,
    size_t w_stride)
{
	size_t n = (size_t)N * OC * K;

	if (N <= 0 || K <= 0)
		return;
	/* out_k (N,OC) = inp_k (N,C) . w_k^T */
	kn__gemm(false, true, N, OC, C, 1.0f, inp, C, (long long)inp_stride,
	    w, C, (long long)w_stride, 0.0f, out, OC, (long long)N * OC, K);
	if (bias == NULL)
		return;
	add_bias_batched_kernel<<<kn__cuda_blocks(n, BLOCK), BLOCK, 0,
	    kn__cuda_stream>>>(out, bias, N, OC, K, w_stride);
	KN_LAUNCHED("add_bias_batched_kernel");
}

void
lstm_forward(float *h, float *c, float *gates, const float *whh, int K,
    int B, int T, int C, size_t whh_stride)
{
	size_t n = (size_t)K * B * C;
	long long per = (long long)B * T;       /* positions of one copy */

	if (K <= 0 || B <= 0 || T <= 0)
		return;
	for (int t = 0; t < T; t++) {
		/* gates_t += h_{t-1} . W_hh^T, every copy in one call */
		if (t > 0)
			kn__gemm(false, true, B, 4 * C, C, 1.0f,
			    h + (size_t)(t - 1) * C, T * C, per * C,
			    whh, C, (long long)whh_stride, 1.0f,
			    gates + (size_t)t * 4 * C, T * 4 * C, per * 4 * C,
			    K);
		lstm_cell_forward_kernel<<<kn__cuda_blocks(n, BLOCK), BLOCK, 0,
		    kn__cuda_stream>>>(h, c, gates, K, B, T, C, t);
		KN_LAUNCHED("lstm_cell_forward_kernel");
	}
}

void
lstm_backward(float *dgates, float *dwhh, float *dh, float *dcell,
    const float *h, const float *c, const float *gates, const float *whh,
    int B, int T, int C)
{
	size_t n = (size_t)B * C;

	if (B <= 0 || T <= 0)
		return;
	for (int t = T - 1; t >= 0; t--) {
		lstm_cell_backward_kernel<<<kn__cuda_blocks(n, BLOCK), BLOCK, 0,
		    kn__cuda_stream>>>(dgates, dcell, dh, gates, c, B, T, C, t);
		KN_LAUNCHED("lstm_cell_backward_kernel");
		/* dh_{t-1} += dgates_t . W_hh */
		if (t > 0)
			kn__gemm(false, false, B, C, 4 * C, 1.0f,
			    dgates + (size_t)t * 4 * C, T * 4 * C, 0, whh, C, 0,
			    1.0f, dh + (size_t)(t - 1) * C, T * C, 0, 1);
	}
	/* dW_hh += dgates_t^T . h_{t-1} over t >= 1, one sequence at a time
	 * (a batched call would race on the one output) */
	for (int b = 0; b < B && T > 1; b++)
		kn__gemm(true, false, 4 * C, C, T - 1, 1.0f,
		    dgates + ((size_t)b * T + 1) * 4 * C, 4 * C, 0,
		    h + (size_t)b * T * C, C, 0, 1.0f, dwhh, C, 0, 1);
}

}  /* namespace kn_cuda */
