/* Choosing a backend at run time, and describing it for the log. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"

int
kn_backend_parse(const char *s, kn_backend_kind *kind)
{
	if (strcmp(s, "auto") == 0)
		*kind = KN_BACKEND_AUTO;
	else if (strcmp(s, "cpu") == 0)
		*kind = KN_BACKEND_CPU;
	else if (strcmp(s, "cuda") == 0)
		*kind = KN_BACKEND_CUDA;
	else
		return KN_EINVAL;
	return KN_OK;
}

const kn_backend *
kn_backend_get(kn_backend_kind kind, char *note, char *err)
{
	char why[KN_ERR_LEN];
	const kn_backend *be;

	if (note != NULL)
		note[0] = '\0';
	if (kind == KN_BACKEND_CPU)
		return kn_cpu_backend();
	/* auto on a machine without a GPU: the CPU, without loading the
	 * CUDA module (and the CUDA libraries behind it) only to hear so */
	if (kind == KN_BACKEND_AUTO && !kn_cuda_present(why))
		return kn_cpu_backend();
	be = kn_cuda_backend(why);
	if (be != NULL)
		return be;
	if (kind == KN_BACKEND_CUDA) {
		kn_error(err, KN_ENODEV, "CUDA backend unavailable: %s", why);
		return NULL;
	}
	if (note != NULL)
		kn_error(note, KN_OK, "using the CPU backend: %s", why);
	return kn_cpu_backend();
}

int
kn_backend_plan(const kn_backend *be, int width, int heads, int window,
    int batch, const char *gemm, char *err)
{
	kn_gemm_shape shapes[KN_GEMM_MAX_SHAPES];
	const char *env = getenv("SM_GEMM"), *from = "gemm";
	kn_gemm_kernel mode;
	int n;

	if (be->kind != KN_BACKEND_CPU)
		return KN_OK;
	if (env != NULL && env[0] != '\0') {
		gemm = env;
		from = "SM_GEMM";
	}
	if (gemm == NULL)
		gemm = "auto";
	if (kn_gemm_parse_mode(gemm, &mode) != 0)
		return kn_error(err, KN_EINVAL, "%s: expected auto, own or "
		    "blas, not '%s'", from, gemm);
	n = kn_gemm_model_shapes(width, heads, window, batch, shapes,
	    KN_GEMM_MAX_SHAPES);
	return kn_gemm_plan(shapes, n, mode, NULL, NULL, err);
}

void
kn_backend_describe(const kn_backend *be, char *buf, size_t len)
{
	be->describe(buf, len);
}
