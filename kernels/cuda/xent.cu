/* Weighted softmax cross-entropy on the GPU, the port of
 * kernels/cpu/xent.c: the masked-diffusion loss weights masked positions
 * and gives the rest weight 0, which costs a zero row and nothing else. */
#include <math.h>

#include "kernels/cuda/common.cuh"

/* One warp per position; V = 256 is 8 classes a lane.  dlogits may alias
 * logits: the target's logit is read before any lane writes, and each
 * lane writes only the classes it read. */
static __global__ void
xent_forward_backward_kernel(float *losses, float *dlogits,
    const float *logits, const int32_t *target, const float *weight, int N,
    int V, float dscale)
{
	int lane = threadIdx.x % 32;
	int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
	const float *l;
	float *d;
	float w, lt, g, mx = -INFINITY, sum = 0.0f, lse;
	int t;

	if (row >= N)
		return;
	l = logits + (size_t)row * V;
	d = dlogits != NULL ? dlogits + (size_t)row * V : NULL;
	w = weight[row];
	if (w == 0.0f) {
		if (lane == 0)
			losses[row] = 0.0f;
		if (d != NULL)
			for (int j = lane; j < V; j += 32)
				d[j] = 0.0f;
		return;
	}
	t = target[row];
	lt = l[t];
	for (int j = lane; j < V; j += 32)
		mx = fmaxf(mx, l[j]);
	mx = kn__warp_max(mx);
	for (int j = lane; j < V; j += 32)
		sum += expf(l[j] - mx);
	lse = mx + logf(kn__warp_sum(sum));
	if (lane == 0)
		losses[row] = w * (lse - lt);
	if (d == NULL)
		return;
	/* The shuffles above already order every lane's read of l[t] before
	 * this point; say so explicitly for the aliased case. */
	__syncwarp();
	g = dscale * w;
	for (int j = lane; j < V; j += 32) {
		float p = expf(l[j] - lse) * g;

		d[j] = j == t ? p - g : p;
	}
}

namespace kn_cuda {

void
xent_forward_backward(float *losses, float *dlogits, const float *logits,
    const int32_t *target, const float *weight, int N, int V, float dscale)
{
	const int block = 256, rows = block / 32;

	if (N <= 0)
		return;
	xent_forward_backward_kernel<<<(N + rows - 1) / rows, block, 0,
	    kn__cuda_stream>>>(losses, dlogits, logits, target, weight, N, V,
	    dscale);
	KN_LAUNCHED("xent_forward_backward_kernel");
}

}  /* namespace kn_cuda */
