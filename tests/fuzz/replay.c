/* The replay driver: runs a fuzz target once per file of its corpus with
 * the normal compiler and no libFuzzer, so that `make check` proves every
 * committed input (seeds and fixed crashers) still passes.  TAP output,
 * one line per file.
 *   replay_<target> [FILE | DIR]...
 * Without arguments it reads $FUZZ_CORPUS/<target> (make check sets
 * FUZZ_CORPUS to the source tree's tests/fuzz/corpus). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

/* Inputs are small; a larger file is a mistake in the corpus. */
#define REPLAY_MAX_INPUT ((size_t)16 << 20)

struct paths {
	char **v;
	size_t n, cap;
};

static void
add_path(struct paths *p, const char *path)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 64;
		if ((p->v = realloc(p->v, p->cap * sizeof(*p->v))) == NULL) {
			perror("replay");
			exit(99);
		}
	}
	if ((p->v[p->n++] = strdup(path)) == NULL) {
		perror("replay");
		exit(99);
	}
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A file as one input, or a folder's files (not its hidden ones), sorted
 * so that the TAP lines come in a stable order. */
static void
collect(struct paths *p, const char *path)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	size_t first = p->n;

	if (stat(path, &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(99);
	}
	if (!S_ISDIR(st.st_mode)) {
		add_path(p, path);
		return;
	}
	if ((d = opendir(path)) == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(99);
	}
	while ((e = readdir(d)) != NULL) {
		char full[4096];

		if (e->d_name[0] == '.')
			continue;
		snprintf(full, sizeof(full), "%s/%s", path, e->d_name);
		add_path(p, full);
	}
	closedir(d);
	qsort(p->v + first, p->n - first, sizeof(*p->v), by_name);
}

static unsigned char *
read_input(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = malloc(REPLAY_MAX_INPUT + 1);

	if (f == NULL || buf == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(99);
	}
	*len = fread(buf, 1, REPLAY_MAX_INPUT + 1, f);
	if (ferror(f) || *len > REPLAY_MAX_INPUT) {
		fprintf(stderr, "replay: %s: unreadable or over %zu bytes\n",
		    path, REPLAY_MAX_INPUT);
		exit(99);
	}
	fclose(f);
	return buf;
}

int
main(int argc, char **argv)
{
	struct paths p = { 0 };
	const char *root = getenv("FUZZ_CORPUS");
	size_t i;
	int a;

	for (a = 1; a < argc; a++)
		collect(&p, argv[a]);
	if (argc == 1) {
		char dir[4096];

		snprintf(dir, sizeof(dir), "%s/%s", root ? root :
		    "tests/fuzz/corpus", fz_target);
		collect(&p, dir);
	}
	if (p.n == 0) {
		printf("1..0 # SKIP no inputs for %s\n", fz_target);
		return 0;
	}
	printf("1..%zu\n", p.n);
	fflush(stdout);
	for (i = 0; i < p.n; i++) {
		size_t len;
		unsigned char *buf = read_input(p.v[i], &len);
		const char *name = strrchr(p.v[i], '/');

		/* a finding aborts here, and the missing lines fail the test */
		LLVMFuzzerTestOneInput(buf, len);
		printf("ok %zu - %s %s\n", i + 1, fz_target,
		    name ? name + 1 : p.v[i]);
		fflush(stdout);
		free(buf);
		free(p.v[i]);
	}
	free(p.v);
	return 0;
}
