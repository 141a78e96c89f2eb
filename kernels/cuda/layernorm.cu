/* Layer normalisation on the GPU, the port of kernels/cpu/layernorm.c:
 * one warp per row for the per-row statistics and dinp, and a column
 * reduction in a fixed order for dw and db, so gradients are the same
 * from run to run (no atomics). */
#include "kernels/cuda/common.cuh"

/* As the CPU backend and torch.nn.LayerNorm's default. */
#define LN_EPS 1e-5f

/* dw and db: a block sums COL_X columns over all rows, COL_Y rows at a
 * time; a warp reads 4 rows of 8 adjacent floats, 32-byte sectors. */
#define COL_X 8
#define COL_Y 128

static __global__ void
layernorm_forward_kernel(float *out, float *mean, float *rstd,
    const float *inp, const float *w, const float *b, int N, int C)
{
	int lane = threadIdx.x % 32;
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	const float *x;
	float *o;
	float sum = 0.0f, m, v = 0.0f, s;

	if (row >= N)
		return;
	x = inp + (size_t)row * C;
	o = out + (size_t)row * C;
	for (int c = lane; c < C; c += 32)
		sum += x[c];
	m = kn__warp_sum(sum) / C;
	/* Two passes, as the CPU: the variance of centred values does not
	 * cancel catastrophically when |mean| >> std. */
	for (int c = lane; c < C; c += 32) {
		float d = x[c] - m;

		v += d * d;
	}
	v = kn__warp_sum(v) / C;
	s = 1.0f / sqrtf(v + LN_EPS);
	for (int c = lane; c < C; c += 32)
		o[c] = (s * (x[c] - m)) * w[c] + b[c];
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = s;
	}
}

/* dinp (N,C) += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd,
 * dnorm = w * dout: one warp per row. */
static __global__ void
layernorm_backward_dinp_kernel(float *dinp, const float *dout,
    const float *inp, const float *w, const float *mean, const float *rstd,
    int N, int C)
{
	int lane = threadIdx.x % 32;
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	const float *x, *dy;
	float *dx;
	float m, s, dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;

	if (row >= N)
		return;
	x = inp + (size_t)row * C;
	dy = dout + (size_t)row * C;
	dx = dinp + (size_t)row * C;
	m = mean[row];
	s = rstd[row];
	for (int c = lane; c < C; c += 32) {
		float norm = (x[c] - m) * s;
		float dnorm = w[c] * dy[c];

		dnorm_mean += dnorm;
		dnorm_norm_mean += dnorm * norm;
	}
	dnorm_mean = kn__warp_sum(dnorm_mean) / C;
	dnorm_norm_mean = kn__warp_sum(dnorm_norm_mean) / C;
	for (int c = lane; c < C; c += 32) {
		float norm = (x[c] - m) * s;
		float dnorm = w[c] * dy[c];

		dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
	}
}

/* dw (C) += sum over rows of dout * norm; db (C) += sum of dout.  Block
 * (COL_X, COL_Y); the partial sums are folded in a fixed tree. */
static __global__ void
layernorm_backward_dwdb_kernel(float *dw, float *db, const float *dout,
    const float *inp, const float *mean, const float *rstd, int N, int C)
{
	__shared__ float sw[COL_Y][COL_X], sb[COL_Y][COL_X];
	int tx = threadIdx.x, ty = threadIdx.y;
	int c = blockIdx.x * COL_X + tx;
	float accw = 0.0f, accb = 0.0f;

	if (c < C) {
		for (int i = ty; i < N; i += COL_Y) {
			size_t k = (size_t)i * C + c;
			float norm = (inp[k] - mean[i]) * rstd[i];

			accw += dout[k] * norm;
			accb += dout[k];
		}
	}
	sw[ty][tx] = accw;
	sb[ty][tx] = accb;
	__syncthreads();
	for (int half = COL_Y / 2; half > 0; half >>= 1) {
		if (ty < half) {
			sw[ty][tx] += sw[ty + half][tx];
			sb[ty][tx] += sb[ty + half][tx];
		}
		__syncthreads();
	}
	if (ty == 0 && c < C) {
		dw[c] += sw[0][tx];
		db[c] += sb[0][tx];
	}
}

namespace kn_cuda {

void
layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
    const float *w, const float *b, int N, int C)
{
	const int block = 256, rows = block / 32;

	if (N <= 0)
		return;
	layernorm_forward_kernel<<<(N + rows - 1) / rows, block, 0,
	    kn__cuda_stream>>>(out, mean, rstd, inp, w, b, N, C);
	KN_LAUNCHED("layernorm_forward_kernel");
}

void
layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
    const float *inp, const float *w, const float *mean, const float *rstd,
    int N, int C)
{
	const int block = 256, rows = block / 32;

	if (N <= 0 || C <= 0)
		return;
	layernorm_backward_dinp_kernel<<<(N + rows - 1) / rows, block, 0,
	    kn__cuda_stream>>>(dinp, dout, inp, w, mean, rstd, N, C);
	KN_LAUNCHED("layernorm_backward_dinp_kernel");
	layernorm_backward_dwdb_kernel<<<(C + COL_X - 1) / COL_X,
	    dim3(COL_X, COL_Y), 0, kn__cuda_stream>>>(dw, db, dout, inp,
	    mean, rstd, N, C);
	KN_LAUNCHED("layernorm_backward_dwdb_kernel");
}

}  /* namespace kn_cuda */
