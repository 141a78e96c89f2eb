/* AdamW on the GPU, the port of kernels/cpu/adamw.c: one thread per
 * parameter, with the bias corrections and the decay factor computed once
 * on the host exactly as the CPU computes them. */
#include <math.h>

#include "kernels/cuda/common.cuh"

/* c1 = 1/(1-b1^t), c2 = 1/(1-b2^t), decay = 1 - lr*wd */
static __global__ void
adamw_update_kernel(float *p, const float *grad, float *m, float *v,
    size_t n, float lr, float b1, float b2, float eps, float decay,
    float c1, float c2, float gscale)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += (size_t)gridDim.x * blockDim.x) {
		float g = grad[i] * gscale;
		float mi = b1 * m[i] + (1.0f - b1) * g;
		float vi = b2 * v[i] + (1.0f - b2) * g * g;

		m[i] = mi;
		v[i] = vi;
		p[i] = p[i] * decay - lr * (mi * c1) / (sqrtf(vi * c2) + eps);
	}
}

namespace kn_cuda {

void
adamw_update(float *p, const float *grad, float *m, float *v, size_t n,
    float lr, float b1, float b2, float eps, float wd, int t, float gscale)
{
	const unsigned block = 256;
	float decay = 1.0f - lr * wd;
	float c1 = (float)(1.0 / (1.0 - pow(b1, t)));
	float c2 = (float)(1.0 / (1.0 - pow(b2, t)));

	adamw_update_kernel<<<kn__cuda_blocks(n, block), block, 0,
	    kn__cuda_stream>>>(p, grad, m, v, n, lr, b1, b2, eps, decay, c1,
	    c2, gscale);
	KN_LAUNCHED("adamw_update_kernel");
}

}  /* namespace kn_cuda */
