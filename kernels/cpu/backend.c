/* The CPU backend's table: host memory, ops from kernels/cpu/, GEMMs from
 * kn_gemm on the process's thread pool (ours or OpenBLAS per shape class,
 * as kn_backend_plan chose). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/blas_load.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"

/* 64-byte alignment keeps AVX-512 loads of whole rows on one cache line. */
static void *
cpu_alloc(size_t bytes)
{
	size_t rounded = (bytes + 63) & ~(size_t)63;
	void *p;

	if (rounded == 0)
		rounded = 64;
	p = aligned_alloc(64, rounded);
	if (p != NULL)
		memset(p, 0, rounded);
	return p;
}

static void
cpu_free(void *p)
{
	free(p);
}

static void
cpu_copy(void *dst, const void *src, size_t bytes)
{
	memmove(dst, src, bytes);
}

static void
cpu_zero(void *p, size_t bytes)
{
	memset(p, 0, bytes);
}

static void
cpu_sync(void)
{
}

/* CPU ops cannot fail once their inputs are checked. */
static int
cpu_status(char *err)
{
	(void)err;
	return 0;
}

static void
cpu_describe(char *buf, size_t len)
{
	char gemm[KN_ERR_LEN + 128], why[KN_ERR_LEN];
	const kn_blas *blas = kn_blas_load(why);

	kn_gemm_plan_describe(gemm, sizeof(gemm));
	if (blas != NULL)
		snprintf(buf, len, "cpu: %d threads, %s, OpenBLAS %s (%s)",
		    kn_pool_threads(), gemm, blas->get_corename(),
		    blas->get_config());
	else
		snprintf(buf, len, "cpu: %d threads, %s, no OpenBLAS (%s)",
		    kn_pool_threads(), gemm, why);
}

static const kn_backend cpu_backend = {
	.name = "cpu",
	.kind = KN_BACKEND_CPU,
	.describe = cpu_describe,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.copy = cpu_copy,
	.zero = cpu_zero,
	.sync = cpu_sync,
	.embed_forward = kn_cpu_embed_forward,
	.embed_backward = kn_cpu_embed_backward,
	.layernorm_forward = kn_cpu_layernorm_forward,
	.layernorm_backward = kn_cpu_layernorm_backward,
	.matmul_forward = kn_cpu_matmul_forward,
	.matmul_backward = kn_cpu_matmul_backward,
	.matmul_forward_f16 = kn_cpu_matmul_forward_f16,
	.matmul_f16_scratch = kn_cpu_matmul_f16_scratch,
	.attention_forward = kn_cpu_attention_forward,
	.attention_backward = kn_cpu_attention_backward,
	.attention_decode = kn_cpu_attention_decode,
	.matmul_forward_batched = kn_cpu_matmul_forward_batched,
	.lstm_forward = kn_cpu_lstm_forward,
	.lstm_backward = kn_cpu_lstm_backward,
	.gelu_forward = kn_cpu_gelu_forward,
	.gelu_backward = kn_cpu_gelu_backward,
	.residual_forward = kn_cpu_residual_forward,
	.xent_forward_backward = kn_cpu_xent_forward_backward,
	.sumsq = kn_cpu_sumsq,
	.scale = kn_cpu_scale,
	.adamw_update = kn_cpu_adamw_update,
	.sample = kn_cpu_sample,
	.status = cpu_status,
	.matmul_pack_bytes = kn_cpu_matmul_pack_bytes,
	.matmul_pack = kn_cpu_matmul_pack,
	.matmul_forward_packed = kn_cpu_matmul_forward_packed,
	.attention_rows = kn_cpu_attention_rows,
};

const kn_backend *
kn_cpu_backend(void)
{
	/* The pool starts on first use with the default budget; a program
	 * that wants another size calls kn_pool_init() itself first. */
	kn_pool_ensure();
	return &cpu_backend;
}
