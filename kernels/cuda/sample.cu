/* Sampling a symbol per position on the GPU, the port of
 * kernels/cpu/sample.c.  The same u must give the same symbol on both
 * backends, so each row is one thread that sums and scans the classes
 * left to right in float, in the CPU's order and with its formulas. */
#include <math.h>

#include "kernels/cuda/common.cuh"

static __global__ void
sample_kernel(int32_t *out, const float *logits, const float *u, int N,
    int V, float temp)
{
	int row = blockIdx.x * blockDim.x + threadIdx.x;
	const float *l;
	float scale, mx = -INFINITY, sum = 0.0f, inv, cum = 0.0f;
	int pick = 0;

	if (row >= N)
		return;
	l = logits + (size_t)row * V;
	if (temp <= 0.0f) {
		/* strict >: the first of equal maxima, as a scan from 0 */
		for (int c = 1; c < V; c++)
			if (l[c] > l[pick])
				pick = c;
		out[row] = pick;
		return;
	}
	/* p[c] = exp(l[c]/temp - max) / sum, with 1/temp as a product */
	scale = 1.0f / temp;
	for (int c = 0; c < V; c++)
		mx = fmaxf(mx, l[c] * scale);
	for (int c = 0; c < V; c++)
		sum += expf(l[c] * scale - mx);
	inv = 1.0f / sum;
	pick = -1;
	for (int c = 0; c < V; c++) {
		cum += expf(l[c] * scale - mx) * inv;
		if (u[row] < cum) {
			pick = c;
			break;
		}
	}
	/* rounding left the total just under u: take the last class that
	 * has any mass */
	if (pick < 0)
		for (pick = V - 1; pick > 0 &&
		    expf(l[pick] * scale - mx) * inv == 0.0f; pick--)
			;
	out[row] = pick;
}

namespace kn_cuda {

void
sample(int32_t *out, const float *logits, const float *u, int N, int V,
    float temp)
{
	const int block = 128;

	if (N <= 0)
		return;
	sample_kernel<<<(N + block - 1) / block, block, 0, kn__cuda_stream>>>(
	    out, logits, u, N, V, temp);
	KN_LAUNCHED("sample_kernel");
}

}  /* namespace kn_cuda */
