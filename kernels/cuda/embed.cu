/* Token and position embeddings on the GPU, the port of
 * kernels/cpu/embed.c.  The backward pass is deterministic, without racing
 * atomicAdds: positions are sorted by symbol (a stable radix sort, so each
 * symbol's positions stay in order), each fixed chunk of the sorted order
 * sums its pieces of runs, and one thread per (symbol, column) adds its
 * run's pieces in order.  The chunks matter: in masked diffusion half the
 * positions may hold the mask symbol, and one thread walking that run
 * alone would take longer than the rest of the backward pass. */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/common.cuh"

/* Positions per chunk of the sorted order: a run of R positions costs its
 * first thread about R / RUN_CHUNK steps. */
#define RUN_CHUNK 32
/* Columns per block in the backward kernels. */
#define RUN_COLS 128

/* out (N,C) = wte[sym[i]] + wpe[i % T] */
static __global__ void
embed_forward_kernel(float *out, const int32_t *sym, const float *wte,
    const float *wpe, int N, int T, int C)
{
	size_t n = (size_t)N * C;

	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
	    k += (size_t)gridDim.x * blockDim.x) {
		size_t i = k / C, c = k % C;

		out[k] = wte[(size_t)sym[i] * C + c] +
		    wpe[(size_t)(i % T) * C + c];
	}
}

/* dwpe (T,C) += the rows i of dout with i % T == t, added in order of i
 * as the CPU adds them, so the bits are the same. */
static __global__ void
embed_backward_wpe_kernel(float *dwpe, const float *dout, int N, int T,
    int C)
{
	size_t n = (size_t)T * C;

	for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
	    k += (size_t)gridDim.x * blockDim.x) {
		size_t t = k / C, c = k % C;
		float acc = dwpe[k];

		for (size_t i = t; i < (size_t)N; i += T)
			acc += dout[i * C + c];
		dwpe[k] = acc;
	}
}

static __global__ void
iota_kernel(int32_t *x, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
	    i += gridDim.x * blockDim.x)
		x[i] = i;
}

/* partial (N,C): for each piece of a run that lies in one chunk, the sum
 * of its rows of dout, in position order, at the piece's last sorted
 * index; other rows are left alone.  Block: one chunk, RUN_COLS columns. */
static __global__ void
embed_backward_chunk_kernel(float *partial, const float *dout,
    const int32_t *sorted_sym, const int32_t *sorted_pos, int N, int C)
{
	int j0 = blockIdx.x * RUN_CHUNK;
	int j1 = min(j0 + RUN_CHUNK, N);
	int c = blockIdx.y * blockDim.x + threadIdx.x;
	float acc = 0.0f;

	if (c >= C)
		return;
	for (int j = j0; j < j1; j++) {
		acc += dout[(size_t)sorted_pos[j] * C + c];
		if (j == j1 - 1 || sorted_sym[j + 1] != sorted_sym[j]) {
			partial[(size_t)j * C + c] = acc;
			acc = 0.0f;
		}
	}
}

/* dwte[s] += the pieces of s's run, in order.  Block: one sorted index k,
 * of which only a run's first does work, and RUN_COLS columns. */
static __global__ void
embed_backward_wte_kernel(float *dwte, const float *partial,
    const int32_t *sorted_sym, int N, int C)
{
	int k = blockIdx.x, j = k;
	int c = blockIdx.y * blockDim.x + threadIdx.x;
	int32_t s = sorted_sym[k];
	float acc;

	if (c >= C || (k > 0 && sorted_sym[k - 1] == s))
		return;
	acc = dwte[(size_t)s * C + c];
	for (;;) {
		/* the last sorted index of j's chunk */
		int last = min((j / RUN_CHUNK + 1) * RUN_CHUNK, N) - 1;

		if (sorted_sym[last] != s) {
			/* the run ends inside this chunk, before last */
			while (sorted_sym[j + 1] == s)
				j++;
			acc += partial[(size_t)j * C + c];
			break;
		}
		acc += partial[(size_t)last * C + c];
		j = last + 1;
		if (j >= N || sorted_sym[j] != s)
			break;
	}
	dwte[(size_t)s * C + c] = acc;
}

/* Work space, grown when N or C grows and then kept, so ops stop calling
 * cudaMalloc once the shapes have been seen. */
static void *sort_buf;        /* int32 (3, N): positions, sorted symbols,
                               * sorted positions */
static size_t sort_buf_bytes;
static void *run_partial;     /* float (N, C) */
static size_t run_partial_bytes;
static void *sort_temp;       /* CUB's */
static size_t sort_temp_bytes;

/* Makes *p at least want bytes; its contents are not kept. */
static bool
grow(void **p, size_t *have, size_t want)
{
	if (want <= *have)
		return true;
	cudaFree(*p);
	*p = NULL;
	*have = 0;
	if (!KN_CUDA(cudaMalloc(p, want)))
		return false;
	*have = want;
	return true;
}

namespace kn_cuda {

void
embed_forward(float *out, const int32_t *sym, const float *wte,
    const float *wpe, int N, int T, int C)
{
	const unsigned block = 256;

	embed_forward_kernel<<<kn__cuda_blocks((size_t)N * C, block), block,
	    0, kn__cuda_stream>>>(out, sym, wte, wpe, N, T, C);
	KN_LAUNCHED("embed_forward_kernel");
}

void
embed_backward(float *dwte, float *dwpe, const float *dout,
    const int32_t *sym, int N, int T, int C)
{
	const unsigned block = 256;
	dim3 cols(1, (unsigned)((C + RUN_COLS - 1) / RUN_COLS));
	size_t temp_bytes = 0;
	int32_t *pos, *sorted_sym, *sorted_pos;

	if (N <= 0 || C <= 0)
		return;
	embed_backward_wpe_kernel<<<kn__cuda_blocks((size_t)T * C, block),
	    block, 0, kn__cuda_stream>>>(dwpe, dout, N, T, C);
	KN_LAUNCHED("embed_backward_wpe_kernel");

	if (!KN_CUDA(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes,
	    (const int32_t *)NULL, (int32_t *)NULL, (const int32_t *)NULL,
	    (int32_t *)NULL, N, 0, 32, kn__cuda_stream)))
		return;
	if (!grow(&sort_buf, &sort_buf_bytes, 3 * (size_t)N * sizeof(int32_t))
	    || !grow(&run_partial, &run_partial_bytes,
	    (size_t)N * C * sizeof(float)) ||
	    !grow(&sort_temp, &sort_temp_bytes, temp_bytes > 0 ? temp_bytes : 1))
		return;
	pos = (int32_t *)sort_buf;
	sorted_sym = pos + N;
	sorted_pos = pos + 2 * (size_t)N;
	iota_kernel<<<kn__cuda_blocks((size_t)N, block), block, 0,
	    kn__cuda_stream>>>(pos, N);
	KN_LAUNCHED("iota_kernel");
	if (!KN_CUDA(cub::DeviceRadixSort::SortPairs(sort_temp, temp_bytes,
	    sym, sorted_sym, pos, sorted_pos, N, 0, 32, kn__cuda_stream)))
		return;
	cols.x = (unsigned)((N + RUN_CHUNK - 1) / RUN_CHUNK);
	embed_backward_chunk_kernel<<<cols, RUN_COLS, 0, kn__cuda_stream>>>(
	    (float *)run_partial, dout, sorted_sym, sorted_pos, N, C);
	KN_LAUNCHED("embed_backward_chunk_kernel");
	cols.x = (unsigned)N;
	embed_backward_wte_kernel<<<cols, RUN_COLS, 0, kn__cuda_stream>>>(
	    dwte, (const float *)run_partial, sorted_sym, N, C);
	KN_LAUNCHED("embed_backward_wte_kernel");
}

}  /* namespace kn_cuda */
