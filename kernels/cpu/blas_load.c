/* Loading OpenBLAS on first use (see blas_load.h): one dlopen a process,
 * whichever thread asks first. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "kernels/cpu/blas_load.h"
#include "kernels/error.h"

/* The table's GEMM has cblas.h's type; checked without referring to the
 * function, so that nothing links it. */
_Static_assert(_Generic(&cblas_sgemm,
    __typeof__(((kn_blas *)0)->sgemm): 1, default: 0),
    "cblas_sgemm has another type in cblas.h");

/* The names dlsym looks up, with where each pointer goes. */
static const struct {
	const char *name;
	size_t offset;
} symbols[] = {
	{ "cblas_sgemm", offsetof(kn_blas, sgemm) },
	{ "openblas_get_corename", offsetof(kn_blas, get_corename) },
	{ "openblas_get_config", offsetof(kn_blas, get_config) },
	{ "sgeqrf_", offsetof(kn_blas, sgeqrf) },
	{ "sorgqr_", offsetof(kn_blas, sorgqr) },
	{ "dgesvd_", offsetof(kn_blas, dgesvd) },
};

/* The first call's outcome, for every later one. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static kn_blas table;
static const kn_blas *loaded;
static char load_error[KN_ERR_LEN];

static void
load(void)
{
	void (*set_num_threads)(int);
	size_t i;
	void *h, *sym;

	if ((h = dlopen(KN_BLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		kn_error(load_error, KN_ENODEV, "cannot load %s: %s (install "
		    "the Debian package %s)", KN_BLAS_LIBRARY, dlerror(),
		    KN_BLAS_PACKAGE);
		return;
	}
	for (i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		if ((sym = dlsym(h, symbols[i].name)) == NULL) {
			kn_error(load_error, KN_ENODEV, "%s has no %s: not "
			    "OpenBLAS with LAPACK (install the Debian package "
			    "%s)", KN_BLAS_LIBRARY, symbols[i].name,
			    KN_BLAS_PACKAGE);
			return;
		}
		/* POSIX makes a function's address from dlsym usable as
		 * one; C alone does not convert void * to it */
		*(void **)((char *)&table + symbols[i].offset) = sym;
	}
	if ((sym = dlsym(h, "openblas_set_num_threads")) == NULL) {
		kn_error(load_error, KN_ENODEV, "%s has no "
		    "openblas_set_num_threads: not OpenBLAS (install the "
		    "Debian package %s)", KN_BLAS_LIBRARY, KN_BLAS_PACKAGE);
		return;
	}
	*(void **)&set_num_threads = sym;
	/* before anyone has the table: no call ever runs on more */
	set_num_threads(1);
	loaded = &table;
}

const kn_blas *
kn_blas_load(char *err)
{
	pthread_once(&load_once, load);
	if (loaded == NULL)
		kn_error(err, KN_ENODEV, "%s", load_error);
	return loaded;
}
