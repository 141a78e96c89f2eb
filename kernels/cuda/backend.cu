/* The CUDA backend's table, its memory functions and its start-up:
 * kn_cuda_module_backend(), the one symbol the module shardmeter-cuda.so
 * exports (kernels/cuda/module.map), finds the device, creates the one
 * stream and cuBLAS handle, and hands out the table that
 * kernels/cuda_module.c loads for kernels/backend.c.  The ops themselves
 * live in the other .cu files. */
#include <stdio.h>

#include <mutex>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/cuda/common.cuh"

cudaStream_t kn__cuda_stream;
cublasHandle_t kn__cuda_blas;

/* The first failure since start-up; ops return void, so this is the only
 * way an asynchronous fault reaches the caller (kn_cuda_status()). */
static std::mutex error_lock;
static bool error_seen;
static char error_first[KN_ERR_LEN];

static void
record(const char *what, const char *expr, const char *file, int line)
{
	std::lock_guard<std::mutex> guard(error_lock);

	if (error_seen)
		return;
	error_seen = true;
	kn_error(error_first, KN_EIO, "%s:%d: %s: %s", file, line, expr, what);
}

bool
kn__cuda_check(cudaError_t e, const char *expr, const char *file, int line)
{
	if (e == cudaSuccess)
		return true;
	record(cudaGetErrorString(e), expr, file, line);
	/* Clears a non-sticky error so the next check reports its own. */
	(void)cudaGetLastError();
	return false;
}

bool
kn__cublas_check(cublasStatus_t s, const char *expr, const char *file,
    int line)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return true;
	record(cublasGetStatusString(s), expr, file, line);
	return false;
}

unsigned
kn__cuda_blocks(size_t n, unsigned block)
{
	/* Enough blocks to fill an H200 many times over; the loops stride
	 * beyond that. */
	const size_t cap = 65536;
	size_t blocks = (n + block - 1) / block;

	if (blocks == 0)
		blocks = 1;
	return (unsigned)(blocks < cap ? blocks : cap);
}

void
kn__gemm(bool transA, bool transB, int M, int N, int K, float alpha,
    const float *A, int lda, long long strideA,
    const float *B, int ldb, long long strideB, float beta,
    float *C, int ldc, long long strideC, int batch)
{
	cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;

	if (M <= 0 || N <= 0 || batch <= 0)
		return;
	/* Column-major C^T (N,M) = op(B)^T (N,K) . op(A)^T (K,M). */
	if (batch == 1)
		KN_CUBLAS(cublasSgemm(kn__cuda_blas, opB, opA, N, M, K,
		    &alpha, B, ldb, A, lda, &beta, C, ldc));
	else
		KN_CUBLAS(cublasSgemmStridedBatched(kn__cuda_blas, opB, opA,
		    N, M, K, &alpha, B, ldb, strideB, A, lda, strideA,
		    &beta, C, ldc, strideC, batch));
}

/* Memory.  Every transfer is queued on the one stream, so it is ordered
 * with the ops around it. */

static void *
cuda_alloc(size_t bytes)
{
	void *p = NULL;

	/* cudaMalloc(0) may give NULL, which the table reads as failure. */
	if (!KN_CUDA(cudaMalloc(&p, bytes > 0 ? bytes : 1)))
		return NULL;
	if (!KN_CUDA(cudaMemsetAsync(p, 0, bytes, kn__cuda_stream))) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

static void
cuda_free(void *p)
{
	if (p != NULL)
		KN_CUDA(cudaFree(p));
}

static void
cuda_upload(void *dst, const void *host_src, size_t bytes)
{
	cudaPointerAttributes attr;

	if (bytes == 0)
		return;
	KN_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice,
	    kn__cuda_stream));
	/* From pageable memory the copy is staged before the call returns,
	 * so the caller may reuse its buffer; from page-locked memory the
	 * DMA reads the buffer later, so wait for it to keep that promise. */
	if (cudaPointerGetAttributes(&attr, host_src) == cudaSuccess &&
	    attr.type == cudaMemoryTypeHost)
		KN_CUDA(cudaStreamSynchronize(kn__cuda_stream));
	(void)cudaGetLastError();
}

static void
cuda_download(void *host_dst, const void *src, size_t bytes)
{
	if (bytes == 0)
		return;
	KN_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost,
	    kn__cuda_stream));
	KN_CUDA(cudaStreamSynchronize(kn__cuda_stream));
}

static void
cuda_copy(void *dst, const void *src, size_t bytes)
{
	if (bytes == 0 || dst == src)
		return;
	KN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
	    kn__cuda_stream));
}

static void
cuda_zero(void *p, size_t bytes)
{
	if (bytes == 0)
		return;
	KN_CUDA(cudaMemsetAsync(p, 0, bytes, kn__cuda_stream));
}

static void
cuda_sync(void)
{
	KN_CUDA(cudaStreamSynchronize(kn__cuda_stream));
}

extern "C" int kn_cuda_status(char *err);

/* The table's memory_free(): what the probe reports as free memory. */
static int
cuda_memory_free(uint64_t *bytes, char *err)
{
	size_t free_b = 0, total_b = 0;

	*bytes = 0;
	if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
		(void)cudaGetLastError();
		return kn_error(err, KN_ENODEV, "cudaMemGetInfo failed");
	}
	*bytes = free_b;
	return KN_OK;
}

/* The table's describe(): the device in use, for the log. */
static void
cuda_describe(char *buf, size_t len)
{
	cudaDeviceProp prop;
	int count = 0, dev = 0;

	if (len == 0)
		return;
	if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
		(void)cudaGetLastError();
		snprintf(buf, len, "no CUDA device");
		return;
	}
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		snprintf(buf, len, "CUDA device %d (properties unavailable)",
		    dev);
		return;
	}
	snprintf(buf, len, "%s, %d SMs, %.1f GiB, compute %d.%d", prop.name,
	    prop.multiProcessorCount,
	    (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
	    prop.major, prop.minor);
}

static const kn_backend cuda_backend = {
	"cuda",
	KN_BACKEND_CUDA,
	cuda_describe,
	cuda_alloc,
	cuda_free,
	cuda_upload,
	cuda_download,
	cuda_copy,
	cuda_zero,
	cuda_sync,
	kn_cuda::embed_forward,
	kn_cuda::embed_backward,
	kn_cuda::layernorm_forward,
	kn_cuda::layernorm_backward,
	kn_cuda::matmul_forward,
	kn_cuda::matmul_backward,
	kn_cuda::matmul_forward_f16,
	kn_cuda::matmul_f16_scratch,
	kn_cuda::attention_forward,
	kn_cuda::attention_backward,
	kn_cuda::attention_decode,
	kn_cuda::matmul_forward_batched,
	kn_cuda::lstm_forward,
	kn_cuda::lstm_backward,
	kn_cuda::gelu_forward,
	kn_cuda::gelu_backward,
	kn_cuda::residual_forward,
	kn_cuda::xent_forward_backward,
	kn_cuda::sumsq,
	kn_cuda::scale,
	kn_cuda::adamw_update,
	kn_cuda::sample,
	kn_cuda_status,
	NULL,                   /* matmul_pack_bytes */
	NULL,                   /* matmul_pack */
	NULL,                   /* matmul_forward_packed */
	NULL,                   /* attention_rows */
	cuda_memory_free,
};

/* Start-up runs once; its outcome (the table, or the reason there is
 * none) is kept for every later call. */
static std::once_flag start_once;
static bool started;
static char start_error[KN_ERR_LEN];

/* Launched once at start-up: a build for another architecture has no
 * image for this device, and that should be a clear "no backend" rather
 * than the first op failing. */
static __global__ void
probe_kernel(int *flag)
{
	if (flag != NULL)
		*flag = 1;
}

static void
start(void)
{
	cudaDeviceProp prop;
	cudaError_t e;
	cublasStatus_t s;
	int count = 0;

	e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		/* without a driver the runtime reports a version mismatch,
		 * which reads like a broken install; say what it means */
		if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
			kn_error(start_error, KN_ENODEV, "no NVIDIA GPU or driver "
			    "on this machine (%s)", cudaGetErrorString(e));
		else
			kn_error(start_error, KN_ENODEV, "cudaGetDeviceCount: %s",
			    cudaGetErrorString(e));
		return;
	}
	if (count == 0) {
		kn_error(start_error, KN_ENODEV, "no CUDA device found");
		return;
	}
	if ((e = cudaSetDevice(0)) != cudaSuccess ||
	    (e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess ||
	    (e = cudaStreamCreate(&kn__cuda_stream)) != cudaSuccess) {
		kn_error(start_error, KN_ENODEV, "device 0: %s",
		    cudaGetErrorString(e));
		return;
	}
	probe_kernel<<<1, 1, 0, kn__cuda_stream>>>(NULL);
	if ((e = cudaGetLastError()) != cudaSuccess ||
	    (e = cudaStreamSynchronize(kn__cuda_stream)) != cudaSuccess) {
		kn_error(start_error, KN_ENODEV,
		    "%s (compute %d.%d) cannot run this build's kernels: %s; "
		    "rebuild with --with-cuda-arch for it", prop.name,
		    prop.major, prop.minor, cudaGetErrorString(e));
		return;
	}
	if ((s = cublasCreate(&kn__cuda_blas)) != CUBLAS_STATUS_SUCCESS ||
	    (s = cublasSetStream(kn__cuda_blas, kn__cuda_stream)) !=
	    CUBLAS_STATUS_SUCCESS) {
		kn_error(start_error, KN_ENODEV, "cuBLAS: %s",
		    cublasGetStatusString(s));
		return;
	}
	/* Plain FP32 GEMMs (no TF32), so results stay within float rounding
	 * of the CPU backend's; cuBLAS's default, stated here on purpose. */
	if ((s = cublasSetMathMode(kn__cuda_blas, CUBLAS_DEFAULT_MATH)) !=
	    CUBLAS_STATUS_SUCCESS) {
		kn_error(start_error, KN_ENODEV, "cuBLAS: %s",
		    cublasGetStatusString(s));
		return;
	}
	started = true;
}

/* The module's entry point (kn_cuda_module_fn in kernels/backend.h).  A
 * caller built with another table than this module refuses it here,
 * before reading a field of it. */
extern "C" const kn_backend *
kn_cuda_module_backend(int abi, size_t table_size, char *err)
{
	if (abi != KN_BACKEND_ABI || table_size != sizeof(kn_backend)) {
		kn_error(err, KN_ENODEV, "the CUDA module was built for backend "
		    "table %d (%zu bytes), this program for %d (%zu bytes): "
		    "install the module of the same build", KN_BACKEND_ABI,
		    sizeof(kn_backend), abi, table_size);
		return NULL;
	}
	std::call_once(start_once, start);
	if (!started) {
		kn_error(err, KN_ENODEV, "%s", start_error);
		return NULL;
	}
	return &cuda_backend;
}

/* The table's status(): the ops return void, so this is how a caller
 * learns that one failed.  Returns 0, or KN_EIO with the first failure
 * since start-up in err. */
extern "C" int
kn_cuda_status(char *err)
{
	std::lock_guard<std::mutex> guard(error_lock);

	if (!error_seen)
		return KN_OK;
	return kn_error(err, KN_EIO, "%s", error_first);
}
