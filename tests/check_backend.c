/* Choosing the backend, and what the programs pay for the CUDA one: the
 * programs link no CUDA library (the module shardmeter-cuda.so is loaded
 * only when a GPU is asked for or present), the module exports its entry
 * point alone and refuses a caller built with another table, and the
 * backend line is printed once, only by the commands that compute.  The
 * same for libcurl and OpenBLAS: the programs link neither, a command
 * that makes no request and computes nothing loads neither, and one that
 * does loads the one it needs (daemon/net/curl_load.c,
 * kernels/cpu/blas_load.c). */
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/curl_load.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_load.h"
#include "kernels/error.h"
#include "tests/testutil.h"

#ifndef TOP_BUILDDIR
#define TOP_BUILDDIR "."
#endif

/* The program's path from anywhere: the tests below run it in a
 * directory of their own, and tu_*() may be relative to the build tree. */
static const char *
abs_program(const char *prog)
{
	static char path[4096];

	return realpath(prog, path) != NULL ? path : prog;
}

/* The DT_NEEDED names of the ELF file at path, one per line, into out. */
static void
needed_libs(const char *path, char *out, size_t outlen)
{
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	unsigned char *buf;
	size_t len, i, used = 0;
	FILE *f = fopen(path, "rb");
	long size;

	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	ck_assert_int_gt(size, (long)sizeof(Elf64_Ehdr));
	len = (size_t)size;
	buf = malloc(len);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, len, f), len);
	fclose(f);
	eh = (const Elf64_Ehdr *)buf;
	ck_assert_msg(memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 &&
	    eh->e_ident[EI_CLASS] == ELFCLASS64, "%s: not a 64-bit ELF file",
	    path);
	ck_assert(eh->e_shoff + (size_t)eh->e_shnum * sizeof(*sh) <= len);
	sh = (const Elf64_Shdr *)(buf + eh->e_shoff);
	out[0] = '\0';
	for (i = 0; i < eh->e_shnum; i++) {
		const Elf64_Dyn *d;
		const Elf64_Shdr *strs;
		size_t k, n;

		if (sh[i].sh_type != SHT_DYNAMIC)
			continue;
		ck_assert(sh[i].sh_link < eh->e_shnum);
		strs = &sh[sh[i].sh_link];
		ck_assert(sh[i].sh_offset + sh[i].sh_size <= len &&
		    strs->sh_offset + strs->sh_size <= len);
		d = (const Elf64_Dyn *)(buf + sh[i].sh_offset);
		n = sh[i].sh_size / sizeof(*d);
		for (k = 0; k < n && d[k].d_tag != DT_NULL; k++) {
			const char *name;

			if (d[k].d_tag != DT_NEEDED)
				continue;
			ck_assert(d[k].d_un.d_val < strs->sh_size);
			name = (const char *)buf + strs->sh_offset +
			    d[k].d_un.d_val;
			used += (size_t)snprintf(out + used, outlen - used,
			    "%s\n", name);
			ck_assert(used < outlen);
		}
	}
	free(buf);
}

static void
assert_no_cuda_linked(const char *prog)
{
	char libs[4096];

	needed_libs(prog, libs, sizeof(libs));
	ck_assert_msg(strstr(libs, "libc.so") != NULL, "%s: no libc among "
	    "its libraries:\n%s", prog, libs);
	ck_assert_msg(strstr(libs, "libcudart") == NULL &&
	    strstr(libs, "libcublas") == NULL && strstr(libs, "libcuda.") ==
	    NULL, "%s links CUDA libraries:\n%s", prog, libs);
}

START_TEST(test_programs_link_no_cuda)
{
	assert_no_cuda_linked(tu_shardmeter());
	assert_no_cuda_linked(tu_blocktraind());
}
END_TEST

static void
assert_no_curl_blas_linked(const char *prog)
{
	char libs[4096];

	needed_libs(prog, libs, sizeof(libs));
	ck_assert_msg(strstr(libs, "libc.so") != NULL, "%s: no libc among "
	    "its libraries:\n%s", prog, libs);
	ck_assert_msg(strstr(libs, "libcurl") == NULL &&
	    strstr(libs, "libopenblas") == NULL && strstr(libs, "libblas") ==
	    NULL, "%s links libcurl or OpenBLAS:\n%s", prog, libs);
}

START_TEST(test_programs_link_no_curl_blas)
{
	assert_no_curl_blas_linked(tu_shardmeter());
	assert_no_curl_blas_linked(tu_blocktraind());
}
END_TEST

/* The loaders in this process, which links both libraries too (as a
 * test does): one table a process, whose functions work. */
START_TEST(test_loaders)
{
	char err[KN_ERR_LEN] = "";
	const kn_blas *blas = kn_blas_load(err);
	const cl_curl *curl = cl_load(err);
	float a[4] = { 1, 2, 3, 4 }, b[4] = { 5, 6, 7, 8 }, c[4] = { 0 };
	CURL *h;

	ck_assert_msg(blas != NULL, "%s", err);
	ck_assert_ptr_eq(kn_blas_load(NULL), blas);
	blas->sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f,
	    a, 2, b, 2, 0.0f, c, 2);
	ck_assert(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
	ck_assert_ptr_nonnull(blas->get_config());
	ck_assert_msg(curl != NULL, "%s", err);
	ck_assert_ptr_eq(cl_load(NULL), curl);
	ck_assert_ptr_nonnull(h = curl->easy_init());
	ck_assert_int_eq(curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L),
	    CURLE_OK);
	ck_assert_int_eq(curl->easy_setopt(h, CURLOPT_URL,
	    "http://127.0.0.1/"), CURLE_OK);
	curl->easy_cleanup(h);
	ck_assert_str_eq(curl->easy_strerror(CURLE_OK), "No error");
}
END_TEST

/* The libraries the dynamic loader loaded for the command: its
 * LD_DEBUG=files trace, which names each with "file=".  Returns the
 * command's exit status. */
static int
loaded_libs(char *out, size_t outlen, const char *dir, const char *args)
{
	return tu_run_cmd(out, outlen, "cd %s && LD_DEBUG=files %s %s "
	    ">trace 2>&1; rc=$?; grep -o 'file=[^ ]*' trace | sort -u; "
	    "exit $rc", dir, abs_program(tu_shardmeter()), args);
}

/* What loads libcurl or OpenBLAS, and what does not. */
START_TEST(test_commands_load_lazily)
{
	char dir[256], out[16384], text[128];
	const char *cmds[] = { "--help", "id --dir ident", "spec run.conf",
	    "export --help" };
	size_t i;
	int rc;

	tu_temp_dir(dir, sizeof(dir), "check_backend");
	tu_write_run(dir, 1, 2, 2, 30);
	rc = tu_run_cmd(out, sizeof(out), "cd %s && %s init --dir ident 2>&1",
	    dir, abs_program(tu_shardmeter()));
	ck_assert_msg(rc == 0, "init: %s", out);
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		loaded_libs(out, sizeof(out), dir, cmds[i]);
		/* the trace is there: the check below can fail */
		ck_assert_msg(strstr(out, "file=libc.so.6") != NULL,
		    "%s: no LD_DEBUG trace:\n%s", cmds[i], out);
		ck_assert_msg(strstr(out, "libcurl") == NULL &&
		    strstr(out, "libopenblas") == NULL, "%s loads libcurl or "
		    "OpenBLAS:\n%s", cmds[i], out);
	}
	/* a request, answered or not, loads libcurl */
	snprintf(text, sizeof(text), "127.0.0.1:%d 1\n", tu_port_base(1));
	tu_write_file(dir, "peers", text);
	loaded_libs(out, sizeof(out), dir, "status --peers peers");
	ck_assert_msg(strstr(out, "file=libcurl.so.4") != NULL &&
	    strstr(out, "libopenblas") == NULL, "status:\n%s", out);
	/* training loads OpenBLAS, and makes no request */
	rc = loaded_libs(out, sizeof(out), dir, "train --spec run.conf --dir "
	    "run --block 1 --backend cpu");
	ck_assert_msg(rc == 0, "train: %s", out);
	ck_assert_msg(strstr(out, "file=libopenblas.so.0") != NULL &&
	    strstr(out, "libcurl") == NULL, "train:\n%s", out);
	tu_remove_dir(dir);
}
END_TEST

/* The CPU asked for, or auto where no GPU shows: the CPU, and nothing
 * to say about it. */
START_TEST(test_cpu_without_note)
{
	char note[KN_ERR_LEN], err[KN_ERR_LEN], why[KN_ERR_LEN];
	const kn_backend *be;

	be = kn_backend_get(KN_BACKEND_CPU, note, err);
	ck_assert_ptr_eq(be, kn_cpu_backend());
	ck_assert_str_eq(note, "");
	if (kn_cuda_present(why)) {
		fprintf(stderr, "# a GPU is present: auto's CPU case not "
		    "checked\n");
		return;
	}
	ck_assert_msg(strstr(why, "no NVIDIA GPU") != NULL, "%s", why);
	be = kn_backend_get(KN_BACKEND_AUTO, note, err);
	ck_assert_ptr_eq(be, kn_cpu_backend());
	ck_assert_str_eq(note, "");
}
END_TEST

/* shardmeter train --dir DIR ... with the run of tu_write_run in dir;
 * its exit status, and its output in out. */
static int
sm_run(char *out, size_t outlen, const char *env, const char *dir,
    const char *args)
{
	return tu_run_cmd(out, outlen, "cd %s && %s %s %s 2>&1", dir, env,
	    abs_program(tu_shardmeter()), args);
}

/* Lines of text that start with prefix. */
static int
count_lines(const char *text, const char *prefix)
{
	const char *p = text;
	int n = 0;

	while (*p != '\0') {
		if (strncmp(p, prefix, strlen(prefix)) == 0)
			n++;
		p = strchr(p, '\n');
		if (p == NULL)
			break;
		p++;
	}
	return n;
}

START_TEST(test_backend_line_once)
{
	char dir[256], out[16384];
	int rc;

	tu_temp_dir(dir, sizeof(dir), "check_backend");
	tu_write_run(dir, 1, 2, 2, 30);
	/* a command that computes: one line, naming the backend */
	rc = sm_run(out, sizeof(out), "", dir, "train --spec run.conf --dir "
	    "run --block 1 --backend cpu");
	ck_assert_msg(rc == 0, "train: %s", out);
	ck_assert_msg(count_lines(out, "shardmeter: cpu: ") == 1 &&
	    count_lines(out, "shardmeter: ") == 1, "train:\n%s", out);
	/* commands that compute nothing: no backend line */
	rc = sm_run(out, sizeof(out), "", dir, "export --spec run.conf --dir "
	    "run --out run.safetensors");
	ck_assert_msg(rc == 0, "export: %s", out);
	ck_assert_msg(strstr(out, "backend") == NULL &&
	    strstr(out, "cpu:") == NULL && strstr(out, "CUDA") == NULL,
	    "export:\n%s", out);
	rc = sm_run(out, sizeof(out), "", dir, "spec run.conf");
	ck_assert_msg(rc == 0, "spec: %s", out);
	ck_assert_msg(strstr(out, "cpu:") == NULL && strstr(out, "CUDA") ==
	    NULL, "spec:\n%s", out);
	rc = sm_run(out, sizeof(out), "", dir, "--help");
	ck_assert_msg(strstr(out, "cpu:") == NULL && strstr(out, "CUDA") ==
	    NULL, "--help:\n%s", out);
	tu_remove_dir(dir);
}
END_TEST

/* SM_CUDA_MODULE names the module; a name that is not there is said, and
 * cuda asked for fails with it (a build without CUDA says that). */
START_TEST(test_module_override)
{
	char dir[256], out[16384];
	int rc;

	tu_temp_dir(dir, sizeof(dir), "check_backend");
	tu_write_run(dir, 1, 2, 2, 30);
	rc = sm_run(out, sizeof(out), "SM_CUDA_MODULE=/nonexistent/sm.so",
	    dir, "train --spec run.conf --dir run --block 1 --backend cuda");
	ck_assert_msg(rc == 1, "train --backend cuda: %d\n%s", rc, out);
#ifdef HAVE_CUDA
	ck_assert_msg(strstr(out, "SM_CUDA_MODULE names "
	    "/nonexistent/sm.so") != NULL, "%s", out);
#else
	ck_assert_msg(strstr(out, "no CUDA support") != NULL, "%s", out);
#endif
	tu_remove_dir(dir);
}
END_TEST

#ifdef HAVE_CUDA
/* The build tree's module: it loads (its CUDA libraries found), exports
 * its entry point and nothing of ours besides, and refuses a table of
 * another version or size before it touches CUDA. */
START_TEST(test_module_entry)
{
	char err[KN_ERR_LEN];
	kn_cuda_module_fn entry;
	void *h, *sym;

	h = dlopen(TOP_BUILDDIR "/shardmeter-cuda.so", RTLD_NOW |
	    RTLD_LOCAL);
	ck_assert_msg(h != NULL, "%s", dlerror());
	sym = dlsym(h, KN_CUDA_MODULE_ENTRY);
	ck_assert_ptr_nonnull(sym);
	ck_assert_ptr_null(dlsym(h, "kn_error"));
	ck_assert_ptr_null(dlsym(h, "kn_cuda_status"));
	entry = (kn_cuda_module_fn)sym;
	err[0] = '\0';
	ck_assert_ptr_null(entry(KN_BACKEND_ABI + 1, sizeof(kn_backend),
	    err));
	ck_assert_msg(strstr(err, "backend table") != NULL, "%s", err);
	err[0] = '\0';
	ck_assert_ptr_null(entry(KN_BACKEND_ABI, sizeof(kn_backend) - 8,
	    err));
	ck_assert_msg(strstr(err, "backend table") != NULL, "%s", err);
	/* no dlclose: the CUDA runtime does not unload cleanly */
}
END_TEST
#endif

int
main(void)
{
	Suite *s = suite_create("backend");
	TCase *tc = tcase_create("backend");

	tcase_add_test(tc, test_programs_link_no_cuda);
	tcase_add_test(tc, test_programs_link_no_curl_blas);
	tcase_add_test(tc, test_loaders);
	tcase_add_test(tc, test_commands_load_lazily);
	tcase_add_test(tc, test_cpu_without_note);
	tcase_add_test(tc, test_backend_line_once);
	tcase_add_test(tc, test_module_override);
#ifdef HAVE_CUDA
	tcase_add_test(tc, test_module_entry);
#endif
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
