/* The GEMM choice by measurement: the shape classes of a model, a short
 * timing of our kernel and OpenBLAS on each, a cache of the result per
 * machine and build, and the plan kn_gemm then follows.  The plan is made
 * once per process so that a run's bits never change midway. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/cpu/blas_load.h"
#include "kernels/cpu/gemm.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"

/* In gemm_avx512.c. */
extern const char kn__gemm_own_build[];

/* A timed run does about this many multiply-adds: the larger of M and K
 * is halved until it fits, as both kernels' time is linear in each, but
 * M stays at CHOOSE_MIN_M or more on the pool, where both kernels split
 * the rows into tiles, and K at one block of our kernel (GEMM_KC), so
 * that the cut is parallel and blocked as the whole. */
#define CHOOSE_MACS ((size_t)1 << 24)
#define CHOOSE_MIN_M 256
#define CHOOSE_MIN_K 256
/* Timed runs per kernel and class, taking turns, after one warm-up each. */
#define CHOOSE_REPS 7
/* Serial classes run as this many pool tasks per thread at once, as the
 * attention runs them. */
#define CHOOSE_TASKS_PER_THREAD 2

static int
shape_eq(const kn_gemm_shape *a, const kn_gemm_shape *b)
{
	return a->parallel == b->parallel && a->transA == b->transA &&
	    a->transB == b->transB && a->M == b->M && a->N == b->N &&
	    a->K == b->K;
}

int
kn_gemm_parse_mode(const char *s, kn_gemm_kernel *mode)
{
	if (strcmp(s, "auto") == 0)
		*mode = KN_GEMM_AUTO;
	else if (strcmp(s, "own") == 0)
		*mode = KN_GEMM_AVX512;
	else if (strcmp(s, "blas") == 0)
		*mode = KN_GEMM_OPENBLAS;
	else
		return KN_EINVAL;
	return KN_OK;
}

static const char *
pick_name(kn_gemm_kernel k)
{
	return k == KN_GEMM_OPENBLAS ? "blas" : "own";
}

static int
add_shape(kn_gemm_shape *out, int n, int max, int parallel, int transA,
    int transB, int M, int N, int K)
{
	kn_gemm_shape s = { parallel, transA, transB, M, N, K };
	int i;

	if (M <= 0 || N <= 0 || K <= 0)
		return n;
	for (i = 0; i < n && i < max; i++)
		if (shape_eq(&out[i], &s))
			return n;
	if (n < max)
		out[n] = s;
	return n + 1;
}

/* The products of kernels/cpu/matmul.c and attention.c for this step. */
int
kn_gemm_model_shapes(int width, int heads, int window, int batch,
    kn_gemm_shape *out, int max)
{
	int d = width, N = batch * window, T = window;
	int hs = heads > 0 ? d / heads : 0, n = 0, i;
	/* (C, OC) of the linear layers: QKV, attention out, MLP in, MLP
	 * out, head (256 output bytes) */
	int lin[5][2] = { { d, 3 * d }, { d, d }, { d, 4 * d }, { 4 * d, d },
	    { d, 256 } };

	for (i = 0; i < 5; i++) {
		int C = lin[i][0], OC = lin[i][1];

		n = add_shape(out, n, max, 1, 0, 1, N, OC, C);  /* forward */
		n = add_shape(out, n, max, 1, 0, 0, N, C, OC);  /* dinp */
		n = add_shape(out, n, max, 1, 1, 0, OC, C, N);  /* dW */
	}
	n = add_shape(out, n, max, 0, 0, 1, T, T, hs);  /* q.k^T, dout.v^T */
	n = add_shape(out, n, max, 0, 0, 0, T, hs, T);  /* P.v, dS.k */
	n = add_shape(out, n, max, 0, 1, 0, T, hs, T);  /* P^T.dout, dS^T.q */
	return n < max ? n : max;
}

void
kn_gemm_choose(kn_gemm_choice *c, int n)
{
	int i;

	for (i = 0; i < n; i++)
		c[i].pick = c[i].blas_gflops >
		    c[i].own_gflops * (1.0 + KN_GEMM_MARGIN) ?
		    KN_GEMM_OPENBLAS : KN_GEMM_AVX512;
}

/* What one timed run computes: the class cut to CHOOSE_MACS, and for a
 * serial class the number of tasks and each task's own C. */
struct timing {
	kn_gemm_shape s;
	kn_gemm_kernel k;
	const float *A, *B;
	float *C;
	size_t c_stride;
	int tasks;
};

static void
timing_task(void *ctx, int t, int thread)
{
	const struct timing *g = ctx;
	const kn_gemm_shape *s = &g->s;

	(void)thread;
	kn__gemm_run(g->k, 0, s->transA, s->transB, s->M, s->N, s->K, 1.0f,
	    g->A, s->transA ? s->M : s->K, g->B, s->transB ? s->K : s->N,
	    0.0f, g->C + (size_t)t * g->c_stride, s->N);
}

static double
timing_run(struct timing *g, kn_gemm_kernel k)
{
	const kn_gemm_shape *s = &g->s;
	double t0 = kn_now();

	g->k = k;
	if (s->parallel)
		kn__gemm_run(k, 1, s->transA, s->transB, s->M, s->N, s->K,
		    1.0f, g->A, s->transA ? s->M : s->K, g->B,
		    s->transB ? s->K : s->N, 0.0f, g->C, s->N);
	else
		kn_pool_run(g->tasks, timing_task, g);
	return kn_now() - t0;
}

static int
measure_one(kn_gemm_choice *c, char *err)
{
	struct timing g = { .s = c->shape };
	kn_gemm_shape *s = &g.s;
	double best[2] = { 1e30, 1e30 }, macs;
	size_t na, nb;
	float *A, *B, *C;
	int r, i;

	while ((size_t)s->M * s->N * s->K > CHOOSE_MACS) {
		int m_ok = s->parallel && s->M / 2 >= CHOOSE_MIN_M;
		int k_ok = s->K / 2 >= CHOOSE_MIN_K;

		if (m_ok && (s->M >= s->K || !k_ok))
			s->M /= 2;
		else if (k_ok)
			s->K /= 2;
		else
			break;
	}
	g.tasks = s->parallel ? 1 : kn_pool_threads() *
	    CHOOSE_TASKS_PER_THREAD;
	g.c_stride = (size_t)s->M * s->N;
	na = (size_t)s->M * s->K;
	nb = (size_t)s->K * s->N;
	A = malloc(na * sizeof(float));
	B = malloc(nb * sizeof(float));
	C = malloc(g.c_stride * g.tasks * sizeof(float));
	if (A == NULL || B == NULL || C == NULL) {
		free(A); free(B); free(C);
		return kn_error(err, KN_ENOMEM, "out of memory timing a GEMM "
		    "of %dx%dx%d", s->M, s->N, s->K);
	}
	kn_rng_fill_uniform(A, na, 7, 1);
	kn_rng_fill_uniform(B, nb, 7, 2);
	g.A = A;
	g.B = B;
	g.C = C;
	for (r = 0; r <= CHOOSE_REPS; r++) {
		for (i = 0; i < 2; i++) {
			double t = timing_run(&g, i == 0 ? KN_GEMM_AVX512 :
			    KN_GEMM_OPENBLAS);

			if (r > 0 && t < best[i])
				best[i] = t;
		}
	}
	macs = (double)s->M * s->N * s->K * g.tasks;
	c->own_gflops = 2.0 * macs / best[0] / 1e9;
	c->blas_gflops = 2.0 * macs / best[1] / 1e9;
	free(A); free(B); free(C);
	return KN_OK;
}

int
kn_gemm_measure(kn_gemm_choice *c, int n, char *err)
{
	int i, rc;

	if (kn_gemm_current() != KN_GEMM_AVX512)
		return kn_error(err, KN_ENODEV, "no AVX-512 on this CPU: "
		    "OpenBLAS is the only GEMM");
	if (kn_blas_load(err) == NULL)
		return KN_ENODEV;
	/* an untimed pass first wakes the pool and fills the packing
	 * buffers, which would otherwise count against the first class */
	if (n > 0) {
		kn_gemm_choice warm = c[0];

		if ((rc = measure_one(&warm, err)) != 0)
			return rc;
	}
	for (i = 0; i < n; i++)
		if ((rc = measure_one(&c[i], err)) != 0)
			return rc;
	kn_gemm_choose(c, n);
	return KN_OK;
}

/* The first "model name" of /proc/cpuinfo, or "unknown". */
static void
cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, len, "unknown");
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
			colon += 1 + (colon[1] == ' ');
			colon[strcspn(colon, "\n")] = '\0';
			snprintf(buf, len, "%s", colon);
			break;
		}
	}
	fclose(f);
}

void
kn_gemm_cache_key(char *buf, size_t len)
{
	const kn_blas *blas = kn_blas_load(NULL);
	char cpu[256];

	cpu_model(cpu, sizeof(cpu));
	snprintf(buf, len, "cpu=%s; openblas=%s; core=%s; build=%s %s; "
	    "threads=%d", cpu, blas != NULL ? blas->get_config() : "none",
	    blas != NULL ? blas->get_corename() : "none", PACKAGE_VERSION,
	    kn__gemm_own_build, kn_pool_threads());
	buf[strcspn(buf, "\n")] = '\0';
}

/* FNV-1a, to name a key's file. */
static uint64_t
key_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

int
kn_gemm_cache_path(char *buf, size_t len, const char *key)
{
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	int n;

	if (xdg != NULL && xdg[0] == '/')
		n = snprintf(buf, len, "%s/shardmeter/gemm-%016" PRIx64, xdg,
		    key_hash(key));
	else if (home != NULL && home[0] == '/')
		n = snprintf(buf, len, "%s/.cache/shardmeter/gemm-%016" PRIx64,
		    home, key_hash(key));
	else
		return KN_EINVAL;
	return n > 0 && (size_t)n < len ? KN_OK : KN_EINVAL;
}

int
kn_gemm_cache_read(const char *path, const char *key, kn_gemm_choice *c,
    int max, int *n, char *err)
{
	FILE *f = fopen(path, "r");
	char line[1024], pick[8];
	int lineno = 0, rc = KN_OK;

	*n = 0;
	if (f == NULL)
		return kn_error(err, KN_EIO, "%s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), f) != NULL) {
		kn_gemm_choice e;
		kn_gemm_shape *s = &e.shape;
		int used = 0;

		lineno++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			rc = kn_error(err, KN_EINVAL, "%s:%d: line too long",
			    path, lineno);
			break;
		}
		line[strcspn(line, "\n")] = '\0';
		if (lineno == 1) {
			if (strcmp(line, KN_GEMM_CACHE_MAGIC) != 0) {
				rc = kn_error(err, KN_EINVAL, "%s:1: not a GEMM "
				    "choice cache of this version (expected "
				    "'%s')", path, KN_GEMM_CACHE_MAGIC);
				break;
			}
			continue;
		}
		if (lineno == 2) {
			if (strncmp(line, "key ", 4) != 0 ||
			    strcmp(line + 4, key) != 0) {
				rc = kn_error(err, KN_EINVAL, "%s:2: made for "
				    "another CPU, library or build", path);
				break;
			}
			continue;
		}
		if (sscanf(line, "%d %d %d %d %d %d %lf %lf %7s%n",
		    &s->parallel, &s->transA, &s->transB, &s->M, &s->N, &s->K,
		    &e.own_gflops, &e.blas_gflops, pick, &used) != 9 ||
		    line[used] != '\0' || (s->parallel | s->transA |
		    s->transB) & ~1 || s->M <= 0 || s->N <= 0 || s->K <= 0 ||
		    !(e.own_gflops >= 0) || !(e.blas_gflops >= 0) ||
		    kn_gemm_parse_mode(pick, &e.pick) != 0 ||
		    e.pick == KN_GEMM_AUTO) {
			rc = kn_error(err, KN_EINVAL, "%s:%d: expected "
			    "'parallel transA transB M N K own_gflops "
			    "blas_gflops own|blas'", path, lineno);
			break;
		}
		if (*n >= max) {
			rc = kn_error(err, KN_EINVAL, "%s:%d: more than %d "
			    "classes", path, lineno, max);
			break;
		}
		c[(*n)++] = e;
	}
	if (rc == KN_OK && lineno < 2)
		rc = kn_error(err, KN_EINVAL, "%s:%d: truncated", path,
		    lineno + 1);
	if (rc != KN_OK)
		*n = 0;
	fclose(f);
	return rc;
}

/* mkdir -p of path's directory. */
static int
make_parent(const char *path)
{
	char dir[1024];
	char *p;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -1;
	if ((p = strrchr(dir, '/')) == NULL || p == dir)
		return 0;
	*p = '\0';
	for (p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int
kn_gemm_cache_write(const char *path, const char *key,
    const kn_gemm_choice *c, int n, char *err)
{
	char tmp[1100];
	FILE *f;
	int i, bad;

	if (make_parent(path) != 0)
		return kn_error(err, KN_EIO, "cannot make the directory of "
		    "%s: %s", path, strerror(errno));
	snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
	if ((f = fopen(tmp, "w")) == NULL)
		return kn_error(err, KN_EIO, "%s: %s", tmp, strerror(errno));
	fprintf(f, "%s\nkey %s\n", KN_GEMM_CACHE_MAGIC, key);
	for (i = 0; i < n; i++) {
		const kn_gemm_shape *s = &c[i].shape;

		fprintf(f, "%d %d %d %d %d %d %.1f %.1f %s\n", s->parallel,
		    s->transA, s->transB, s->M, s->N, s->K, c[i].own_gflops,
		    c[i].blas_gflops, pick_name(c[i].pick));
	}
	bad = ferror(f);
	if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
		kn_error(err, KN_EIO, "cannot write %s: %s", path,
		    strerror(errno));
		unlink(tmp);
		return KN_EIO;
	}
	return KN_OK;
}

/* The plan in force and how it came about, for kn_gemm_plan_describe. */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static int planned;
static kn_gemm_kernel plan_mode;
static kn_gemm_choice plan_c[KN_GEMM_MAX_SHAPES];
static int plan_count, plan_cached, plan_measured;
static double plan_ms;
static char plan_note[KN_ERR_LEN];

/* Takes the cached classes, measures the rest and writes the union back,
 * all under an exclusive lock of the cache file so that processes
 * starting together on one host measure once and agree. */
static int
plan_auto(const kn_gemm_shape *s, int n, const char *path, char *note,
    char *err)
{
	char key[1024], why[KN_ERR_LEN], cpath[1024], lockpath[1100];
	kn_gemm_choice cached[KN_GEMM_MAX_SHAPES], to_time[KN_GEMM_MAX_SHAPES];
	int ncached = 0, nto_time = 0, i, j, lockfd = -1, rc;
	double t0 = kn_now();

	kn_gemm_cache_key(key, sizeof(key));
	if (path == NULL && kn_gemm_cache_path(cpath, sizeof(cpath),
	    key) == 0)
		path = cpath;
	else if (path == NULL)
		kn_error(note, KN_OK, "no GEMM choice cache: neither "
		    "XDG_CACHE_HOME nor HOME is an absolute path");
	if (path != NULL && path[0] != '\0') {
		const char *p = path;

		snprintf(lockpath, sizeof(lockpath), "%s.lock", p);
		if (make_parent(lockpath) == 0 && (lockfd = open(lockpath,
		    O_RDWR | O_CREAT | O_CLOEXEC, 0644)) >= 0)
			flock(lockfd, LOCK_EX);
		rc = kn_gemm_cache_read(p, key, cached, KN_GEMM_MAX_SHAPES,
		    &ncached, why);
		if (rc == KN_EINVAL)
			kn_error(note, KN_OK, "ignoring the GEMM choice "
			    "cache: %s", why);
		for (i = 0; i < n; i++) {
			for (j = 0; j < ncached; j++)
				if (shape_eq(&cached[j].shape, &s[i]))
					break;
			if (j == ncached)
				to_time[nto_time++].shape = s[i];
		}
		rc = kn_gemm_measure(to_time, nto_time, err);
		if (rc == 0 && nto_time > 0) {
			/* a full cache drops its oldest classes: this
			 * model's are kept, and used below */
			int drop = ncached + nto_time - KN_GEMM_MAX_SHAPES;

			if (drop > 0) {
				memmove(cached, cached + drop, (size_t)(ncached -
				    drop) * sizeof(cached[0]));
				ncached -= drop;
			}
			for (i = 0; i < nto_time; i++)
				cached[ncached++] = to_time[i];
			if (kn_gemm_cache_write(p, key, cached, ncached,
			    why) != 0)
				kn_error(note, KN_OK, "GEMM choice not "
				    "cached: %s", why);
		}
		if (lockfd >= 0)
			close(lockfd);      /* drops the lock */
		if (rc != 0)
			return rc;
	} else {
		for (i = 0; i < n; i++)
			to_time[nto_time++].shape = s[i];
		if ((rc = kn_gemm_measure(to_time, nto_time, err)) != 0)
			return rc;
		memcpy(cached, to_time, (size_t)nto_time * sizeof(to_time[0]));
		ncached = nto_time;
	}
	/* the plan holds just this model's classes, in its order */
	plan_count = 0;
	for (i = 0; i < n; i++)
		for (j = 0; j < ncached; j++)
			if (shape_eq(&cached[j].shape, &s[i])) {
				plan_c[plan_count++] = cached[j];
				break;
			}
	plan_measured = nto_time;
	plan_cached = plan_count - nto_time;
	plan_ms = 1000.0 * (kn_now() - t0);
	kn__gemm_plan_install(plan_c, plan_count);
	return KN_OK;
}

int
kn_gemm_plan(const kn_gemm_shape *s, int n, kn_gemm_kernel mode,
    const char *cache_path, char *note, char *err)
{
	int rc = KN_OK;

	if (note != NULL)
		note[0] = '\0';
	if (n < 0 || n > KN_GEMM_MAX_SHAPES)
		return kn_error(err, KN_EINVAL, "%d GEMM shape classes (at "
		    "most %d)", n, KN_GEMM_MAX_SHAPES);
	pthread_mutex_lock(&plan_lock);
	if (planned)
		goto out;
	plan_note[0] = '\0';
	if (mode == KN_GEMM_AVX512 && kn_gemm_use(KN_GEMM_AVX512) != 0) {
		kn_error(plan_note, KN_OK, "gemm own needs AVX-512, which this CPU "
		    "lacks: using OpenBLAS");
		mode = KN_GEMM_OPENBLAS;
	}
	/* OpenBLAS is used, timed or named in the cache's key: loaded
	 * here, where a missing one can be said */
	if (mode != KN_GEMM_AVX512 && kn_blas_load(err) == NULL)
		rc = KN_ENODEV;
	else if (mode == KN_GEMM_OPENBLAS)
		rc = kn_gemm_use(KN_GEMM_OPENBLAS);
	else if (mode == KN_GEMM_AUTO) {
		kn_gemm_use(KN_GEMM_AUTO);
		if (kn_gemm_current() == KN_GEMM_AVX512)
			rc = plan_auto(s, n, cache_path, plan_note, err);
	}
	if (rc == KN_OK) {
		planned = 1;
		plan_mode = mode;
	}
	if (note != NULL)
		snprintf(note, KN_ERR_LEN, "%s", plan_note);
out:
	pthread_mutex_unlock(&plan_lock);
	return rc;
}

void
kn_gemm_plan_get(const kn_gemm_choice **c, int *n)
{
	pthread_mutex_lock(&plan_lock);
	*c = planned && plan_count > 0 ? plan_c : NULL;
	*n = planned ? plan_count : 0;
	pthread_mutex_unlock(&plan_lock);
}

void
kn_gemm_plan_describe(char *buf, size_t len)
{
	int i, blas = 0;

	pthread_mutex_lock(&plan_lock);
	for (i = 0; i < plan_count; i++)
		blas += plan_c[i].pick == KN_GEMM_OPENBLAS;
	if (!planned)
		snprintf(buf, len, "gemm chosen when a model starts "
		    "(%s until then)", kn_gemm_current() == KN_GEMM_AVX512 ?
		    "own" : "blas");
	else if (plan_mode != KN_GEMM_AUTO)
		snprintf(buf, len, "gemm %s (forced)", pick_name(plan_mode));
	else if (kn_gemm_current() != KN_GEMM_AVX512)
		snprintf(buf, len, "gemm auto: blas (no AVX-512)");
	else
		snprintf(buf, len, "gemm auto: own %d, blas %d of %d shape "
		    "classes (%d measured, %d cached, %.0f ms)",
		    plan_count - blas, blas, plan_count, plan_measured,
		    plan_cached, plan_ms);
	if (planned && plan_note[0] != '\0' && strlen(buf) + 3 < len)
		snprintf(buf + strlen(buf), len - strlen(buf), " [%s]",
		    plan_note);
	pthread_mutex_unlock(&plan_lock);
}
