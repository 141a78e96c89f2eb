/* Finding and loading the CUDA backend, a module of its own
 * (shardmeter-cuda.so, kernels/cuda/), so that the programs link neither
 * the CUDA runtime nor cuBLAS: loading them costs about 100 ms, which
 * every command paid, GPU or not.  kernels/backend.c calls this only when
 * a GPU is asked for or present. */
#include "config.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/error.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_module_dirs.h"
#endif

/* What the NVIDIA driver puts in /dev and /proc (a container given a GPU
 * has them too), and WSL2's GPU device; none needs the driver to answer. */
static const char *const gpu_files[] = {
	"/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version",
	"/dev/dxg"
};

int
kn_cuda_present(char *why)
{
	size_t i;

	for (i = 0; i < sizeof(gpu_files) / sizeof(gpu_files[0]); i++)
		if (access(gpu_files[i], F_OK) == 0)
			return 1;
	kn_error(why, KN_ENODEV, "no NVIDIA GPU on this machine (no %s)",
	    gpu_files[0]);
	return 0;
}

#ifndef HAVE_CUDA
const kn_backend *
kn_cuda_backend(char *err)
{
	kn_error(err, KN_ENODEV, "this build has no CUDA support "
	    "(configure found no working nvcc)");
	return NULL;
}
#else

/* The first call's outcome, for every later one: one dlopen a process. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const kn_backend *loaded;
static char load_error[KN_ERR_LEN];

/* Whether the program exe runs from the build tree (make check, scripts
 * run from the tree): then its own build's module is the one to load,
 * not an installed one of another build. */
static int
in_build_tree(const char *exe)
{
	char top[PATH_MAX];
	size_t n;

	if (realpath(SM_BUILDDIR, top) == NULL)
		return 0;
	n = strlen(top);
	return strncmp(exe, top, n) == 0 && exe[n] == '/';
}

/* Loads the module at path and starts CUDA through it. */
static void
load_from(const char *path)
{
	char why[KN_ERR_LEN];
	kn_cuda_module_fn entry;
	void *h, *sym;

	/* RTLD_NOW: a CUDA library missing from the library path shows here,
	 * named, and not at some later op */
	if ((h = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		kn_error(load_error, KN_ENODEV, "cannot load %s: %s (the CUDA "
		    "runtime and cuBLAS that it links must be on the library "
		    "path: ld.so.conf or LD_LIBRARY_PATH)", path, dlerror());
		return;
	}
	if ((sym = dlsym(h, KN_CUDA_MODULE_ENTRY)) == NULL) {
		kn_error(load_error, KN_ENODEV, "%s is not a ShardMeter CUDA "
		    "module (no %s)", path, KN_CUDA_MODULE_ENTRY);
		dlclose(h);
		return;
	}
	entry = (kn_cuda_module_fn)sym;
	/* the module stays loaded for the process: its table is in it */
	if ((loaded = entry(KN_BACKEND_ABI, sizeof(kn_backend), why)) == NULL)
		kn_error(load_error, KN_ENODEV, "%s", why);
}

static void
load(void)
{
	const char *env = getenv("SM_CUDA_MODULE");
	char exe[PATH_MAX], beside[PATH_MAX + 32], *slash;
	const char *paths[3];
	int i, n = 0;

	/* an override is taken alone: an operator who names a module
	 * means that one, and should hear when it cannot be had */
	if (env != NULL && env[0] != '\0') {
		if (access(env, F_OK) == 0)
			load_from(env);
		else
			kn_error(load_error, KN_ENODEV, "SM_CUDA_MODULE names "
			    "%s, which does not exist", env);
		return;
	}
	if (realpath("/proc/self/exe", exe) != NULL) {
		if (in_build_tree(exe))
			paths[n++] = SM_BUILDDIR "/shardmeter-cuda.so";
		/* beside the program: where scripts/launch copies both */
		if ((slash = strrchr(exe, '/')) != NULL) {
			snprintf(beside, sizeof(beside), "%.*s/shardmeter-cuda.so",
			    (int)(slash - exe), exe);
			paths[n++] = beside;
		}
	}
	paths[n++] = SM_PKGLIBDIR "/shardmeter-cuda.so";
	for (i = 0; i < n; i++)
		if (access(paths[i], F_OK) == 0) {
			load_from(paths[i]);
			return;
		}
	kn_error(load_error, KN_ENODEV, "no CUDA module (looked for %s%s%s%s"
	    "%s; SM_CUDA_MODULE may name one)", paths[0],
	    n > 1 ? ", " : "", n > 1 ? paths[1] : "", n > 2 ? ", " : "",
	    n > 2 ? paths[2] : "");
}

const kn_backend *
kn_cuda_backend(char *err)
{
	pthread_once(&load_once, load);
	if (loaded == NULL)
		kn_error(err, KN_ENODEV, "%s", load_error);
	return loaded;
}
#endif
