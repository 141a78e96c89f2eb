/* Multi-head self-attention on the GPU, the port of
 * kernels/cpu/attention.c: q.k^T and att.v (and their backward products)
 * are strided-batched SGEMMs reading q, k, v straight out of qkv (N,3C)
 * without a permute; the softmax, its scale 1/sqrt(hs) and the mask
 * (KN_ATT_* in kernels/backend.h) are one kernel, as is the softmax's
 * backward pass. */
#include <math.h>

#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"

/* The (batch, head) block of a tensor starts batch * b + head * h floats
 * in. */
struct head_strides {
	long long b, h;
};

/* Row-major C = alpha op(A) op(B) + beta C for each (batch, head).  The
 * blocks are not one stride apart (batch strides T*3C in qkv, head
 * strides hs), so batch the GEMM over the larger index and loop over the
 * smaller: NH = 4 launches of 32 for our shapes. */
static void
heads_gemm(bool transA, bool transB, int M, int N, int K, float alpha,
    const float *A, int lda, head_strides sa,
    const float *B, int ldb, head_strides sb, float beta,
    float *C, int ldc, head_strides sc, int nb, int nh)
{
	if (nb >= nh)
		for (int h = 0; h < nh; h++)
			kn__gemm(transA, transB, M, N, K, alpha,
			    A + h * sa.h, lda, sa.b, B + h * sb.h, ldb, sb.b,
			    beta, C + h * sc.h, ldc, sc.b, nb);
	else
		for (int b = 0; b < nb; b++)
			kn__gemm(transA, transB, M, N, K, alpha,
			    A + b * sa.b, lda, sa.h, B + b * sb.b, ldb, sb.h,
			    beta, C + b * sc.b, ldc, sc.h, nh);
}

/* Whether query i of T positions sees key j under mask (the CPU's
 * visible() in kernels/cpu/attention.c, as a predicate). */
static __device__ bool
att_visible(int mask, int T, int i, int j)
{
	int L = mask < 0 ? -mask : mask, n = T / 2;

	if (mask == KN_ATT_FULL)
		return true;
	if (mask > 0)
		return j / L <= i / L;
	if (i >= n)
		return j >= n && (j - n) / L <= (i - n) / L;
	return j < n ? j / L == i / L : (j - n) / L < i / L;
}

/* The keys a query sees run from 0 to its return value, except under a
 * twin mask (< 0), which att_visible decides key by key. */
static __device__ int
att_prefix(int mask, int T, int L, int pos0, int i)
{
	if (mask == KN_ATT_FULL)
		return L;
	if (mask == KN_ATT_CAUSAL)
		return pos0 + i + 1;
	return (i / mask + 1) * mask < T ? (i / mask + 1) * mask : T;
}

/* att (rows, L) holds q.k; it becomes softmax(scale * q.k) over the keys
 * a query may see, 0 elsewhere.  One warp per row; row % T is the query's
 * position among the T queries, which come after pos0 cached ones (a full
 * pass: L = T, pos0 = 0; decoding is causal). */
static __global__ void
softmax_forward_kernel(float *att, int rows, int T, int L, int pos0,
    float scale, int mask)
{
	int lane = threadIdx.x % 32;
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	float *x;
	float mx = -INFINITY, sum = 0.0f, inv;
	int len, i;

	if (row >= rows)
		return;
	x = att + (size_t)row * L;
	i = row % T;
	if (mask < 0) {
		for (int j = lane; j < L; j += 32)
			if (att_visible(mask, T, i, j))
				mx = fmaxf(mx, x[j] * scale);
		mx = kn__warp_max(mx);
		for (int j = lane; j < L; j += 32) {
			float e = att_visible(mask, T, i, j) ?
			    expf(x[j] * scale - mx) : 0.0f;

			x[j] = e;
			sum += e;
		}
		inv = 1.0f / kn__warp_sum(sum);
		for (int j = lane; j < L; j += 32)
			x[j] *= inv;
		return;
	}
	len = att_prefix(mask, T, L, pos0, i);
	for (int j = lane; j < len; j += 32)
		mx = fmaxf(mx, x[j] * scale);
	mx = kn__warp_max(mx);
	for (int j = lane; j < len; j += 32) {
		float e = expf(x[j] * scale - mx);

		x[j] = e;
		sum += e;
	}
	inv = 1.0f / kn__warp_sum(sum);
	for (int j = lane; j < L; j += 32)
		x[j] = j < len ? x[j] * inv : 0.0f;
}

/* datt (rows,T) holds dout.v^T; it becomes the gradient of scale * q.k:
 * att * (datt - sum(att * datt)) * scale, 0 where masked. */
static __global__ void
softmax_backward_kernel(float *datt, const float *att, int rows, int T,
    float scale, int mask)
{
	int lane = threadIdx.x % 32;
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	const float *a;
	float *d;
	float dot = 0.0f;
	int len, i;

	if (row >= rows)
		return;
	a = att + (size_t)row * T;
	d = datt + (size_t)row * T;
	i = row % T;
	/* a twin row's masked probabilities are 0 and sit inside it: the
	 * whole row, with those zeros, is the same sum */
	len = mask < 0 ? T : att_prefix(mask, T, T, 0, i);
	for (int j = lane; j < len; j += 32)
		dot += a[j] * d[j];
	dot = kn__warp_sum(dot);
	for (int j = lane; j < T; j += 32)
		d[j] = j < len && (mask >= 0 || att_visible(mask, T, i, j)) ?
		    a[j] * (d[j] - dot) * scale : 0.0f;
}

namespace kn_cuda {

void
attention_forward(float *out, float *att, const float *qkv, int B, int T,
    int C, int NH, int mask)
{
	const int block = 256, per_block = block / 32;
	int hs = C / NH, rows = B * NH * T;
	float scale = 1.0f / sqrtf((float)hs);
	const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
	head_strides sqkv = { (long long)T * 3 * C, hs };
	head_strides satt = { (long long)NH * T * T, (long long)T * T };
	head_strides sout = { (long long)T * C, hs };

	if (rows <= 0)
		return;
	/* att (T,T) = q (T,hs) . k^T, per (b, h) */
	heads_gemm(false, true, T, T, hs, 1.0f, q, 3 * C, sqkv, k, 3 * C, sqkv,
	    0.0f, att, T, satt, B, NH);
	softmax_forward_kernel<<<(rows + per_block - 1) / per_block, block,
	    0, kn__cuda_stream>>>(att, rows, T, T, 0, scale, mask);
	KN_LAUNCHED("softmax_forward_kernel");
	/* out (T,hs) = att (T,T) . v (T,hs), into columns h*hs of out */
	heads_gemm(false, false, T, hs, T, 1.0f, att, T, satt, v, 3 * C, sqkv,
	    0.0f, out, C, sout, B, NH);
}

void
attention_backward(float *dqkv, float *scratch, const float *dout,
    const float *qkv, const float *att, int B, int T, int C, int NH,
    int mask)
{
	const int block = 256, per_block = block / 32;
	int hs = C / NH, rows = B * NH * T;
	float scale = 1.0f / sqrtf((float)hs);
	const float *q = qkv, *k = qkv + C, *v = qkv + 2 * C;
	float *dq = dqkv, *dk = dqkv + C, *dv = dqkv + 2 * C;
	head_strides sqkv = { (long long)T * 3 * C, hs };
	head_strides satt = { (long long)NH * T * T, (long long)T * T };
	head_strides sout = { (long long)T * C, hs };

	if (rows <= 0)
		return;
	/* datt (T,T) = dout (T,hs) . v^T */
	heads_gemm(false, true, T, T, hs, 1.0f, dout, C, sout, v, 3 * C, sqkv,
	    0.0f, scratch, T, satt, B, NH);
	/* dv (T,hs) = att^T . dout */
	heads_gemm(true, false, T, hs, T, 1.0f, att, T, satt, dout, C, sout,
	    0.0f, dv, 3 * C, sqkv, B, NH);
	softmax_backward_kernel<<<(rows + per_block - 1) / per_block, block,
	    0, kn__cuda_stream>>>(scratch, att, rows, T, scale, mask);
	KN_LAUNCHED("softmax_backward_kernel");
	/* dq (T,hs) = dpreatt . k; dk (T,hs) = dpreatt^T . q */
	heads_gemm(false, false, T, hs, T, 1.0f, scratch, T, satt, k, 3 * C,
	    sqkv, 0.0f, dq, 3 * C, sqkv, B, NH);
	heads_gemm(true, false, T, hs, T, 1.0f, scratch, T, satt, q, 3 * C,
	    sqkv, 0.0f, dk, 3 * C, sqkv, B, NH);
}

}  /* namespace kn_cuda */

namespace kn_cuda {

void
attention_decode(float *out, float *kcache, float *vcache, float *scores,
    const float *qkv, int pos0, int T, int C, int NH)
{
	const int block = 256, per_block = block / 32;
	int hs = C / NH, L = pos0 + T, rows = NH * T;
	float scale = 1.0f / sqrtf((float)hs);
	size_t row = (size_t)C * sizeof(float);
	head_strides sq = { 0, hs }, sc = { 0, hs };
	head_strides ss = { 0, (long long)T * L }, so = { 0, hs };

	if (T <= 0)
		return;
	/* the new keys and values join the cache: T rows of C floats each */
	KN_CUDA(cudaMemcpy2DAsync(kcache + (size_t)pos0 * C, row, qkv + C,
	    3 * row, row, T, cudaMemcpyDeviceToDevice, kn__cuda_stream));
	KN_CUDA(cudaMemcpy2DAsync(vcache + (size_t)pos0 * C, row, qkv + 2 * C,
	    3 * row, row, T, cudaMemcpyDeviceToDevice, kn__cuda_stream));
	heads_gemm(false, true, T, L, hs, 1.0f, qkv, 3 * C, sq, kcache, C, sc,
	    0.0f, scores, L, ss, 1, NH);
	softmax_forward_kernel<<<(rows + per_block - 1) / per_block, block, 0,
	    kn__cuda_stream>>>(scores, rows, T, L, pos0, scale, KN_ATT_CAUSAL);
	KN_LAUNCHED("softmax_forward_kernel");
	heads_gemm(false, false, T, hs, L, 1.0f, scores, L, ss, vcache, C, sc,
	    0.0f, out, C, so, 1, NH);
}

}
