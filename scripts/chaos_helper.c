/* chaos-helper: the two things scripts/chaos cannot do in sh.  `check`
 * decodes checkpoint and optimizer-state files as the daemon would and
 * prints their step, round and SHA-256 (no shardmeter command decodes one
 * file); `kill-on-write` kills a daemon the moment one of its checkpoint
 * writes starts or ends (inotify), to aim a kill -9 inside the write. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/types.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/model.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"

/* Far above the files of any run chaos trains. */
#define CH_FILE_MAX ((size_t)1 << 30)

static int
ch_usage(FILE *f)
{
	fprintf(f,
	    "usage: chaos-helper check --spec FILE PATH...\n"
	    "       chaos-helper kill-on-write --pid PID --dir DIR --prefix NAME\n"
	    "                    [--event create|written] [--timeout SECONDS]\n"
	    "check: decodes each .ckpt (hash, finiteness, run id of the spec)\n"
	    "and .optim (size of the spec's block, hash, finiteness); prints\n"
	    "'ok PATH step=S round=R sha256=H' or 'bad PATH: why'; exits 1 when\n"
	    "a file does not decode.\n"
	    "kill-on-write: SIGKILLs PID when a file of DIR whose name starts\n"
	    "with NAME is created (create) or closed after writing (written);\n"
	    "prints the name; exits 1 when none came within the timeout.\n");
	return 2;
}

static int
ch_ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);

	return n >= m && strcmp(s + n - m, tail) == 0;
}

/* Decodes one file; 0 when it decodes, with its metadata in meta and the
 * file's SHA-256 (what the daemon serves as its ETag) in sha. */
static int
ch_decode(const char *path, const pr_spec *spec, const char *run_id,
    pr_ckpt_meta *meta, char sha[65], char *err)
{
	pr_ckpt_meta expect = { 0 };
	const char *base = strrchr(path, '/');
	kn_model_shape shape;
	char *buf;
	size_t len;
	int rc, t, block = 1;

	/* an optimizer state is sized by its block's own layers, which
	 * its name, block-<b>.optim, gives */
	if (sscanf(base != NULL ? base + 1 : path, "block-%d", &block) != 1)
		block = 1;
	shape = pr_spec_block_shape(spec, block - 1);

	snprintf(expect.run_id, sizeof(expect.run_id), "%s", run_id);
	expect.block = -1;
	snprintf(expect.kind, sizeof(expect.kind), "block");
	if ((rc = pr_ckpt_read_file(path, CH_FILE_MAX, &buf, &len, err)) != 0)
		return rc;
	if (ch_ends_with(path, ".optim"))
		rc = pr_ckpt_decode_optim(buf, len, &expect,
		    kn_model_params_for(&shape), NULL, NULL, &t, meta, err);
	else
		rc = pr_ckpt_decode(buf, len, &expect, NULL, 0, NULL, meta, err);
	if (rc == 0)
		rc = pr_ckpt_sha256_hex(buf, len, sha, err);
	free(buf);
	return rc;
}

static int
ch_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "spec", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 }
	};
	const char *spec_path = NULL;
	char err[PR_ERR_LEN], run_id[PR_RUN_ID_LEN], sha[65];
	pr_spec spec;
	pr_ckpt_meta meta;
	int ch, i, bad = 0;

	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (ch != 's')
			return ch_usage(stderr);
		spec_path = optarg;
	}
	if (spec_path == NULL || optind >= argc)
		return ch_usage(stderr);
	if (pr_spec_load(&spec, spec_path, err) != 0 ||
	    pr_spec_run_id(&spec, run_id, err) != 0) {
		fprintf(stderr, "chaos-helper: %s\n", err);
		return 2;
	}
	for (i = optind; i < argc; i++) {
		if (ch_decode(argv[i], &spec, run_id, &meta, sha, err) != 0) {
			printf("bad %s: %s\n", argv[i], err);
			bad = 1;
			continue;
		}
		printf("ok %s step=%lld round=%lld sha256=%s\n", argv[i],
		    (long long)meta.step, (long long)meta.round, sha);
	}
	return bad;
}

/* The options of kill-on-write. */
struct ch_kill_args {
	pid_t pid;
	const char *dir, *prefix;
	uint32_t mask;          /* IN_CREATE or IN_CLOSE_WRITE */
	double timeout;
};

static int
ch_kill_parse(struct ch_kill_args *a, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "dir", required_argument, NULL, 'd' },
		{ "prefix", required_argument, NULL, 'n' },
		{ "event", required_argument, NULL, 'e' },
		{ "timeout", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	*a = (struct ch_kill_args){ 0, NULL, NULL, IN_CREATE, 30 };
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1)
		switch (ch) {
		case 'p': a->pid = (pid_t)atol(optarg); break;
		case 'd': a->dir = optarg; break;
		case 'n': a->prefix = optarg; break;
		case 't': a->timeout = atof(optarg); break;
		case 'e':
			if (strcmp(optarg, "create") == 0)
				a->mask = IN_CREATE;
			else if (strcmp(optarg, "written") == 0)
				a->mask = IN_CLOSE_WRITE;
			else
				return -1;
			break;
		default: return -1;
		}
	return a->pid > 1 && a->dir != NULL && a->prefix != NULL &&
	    a->timeout > 0 && optind == argc ? 0 : -1;
}

/* Whether a batch of inotify events read into buf holds one of ours; its
 * name is copied to name. */
static int
ch_kill_match(const struct ch_kill_args *a, const char *buf, ssize_t n,
    char *name, size_t name_len)
{
	const struct inotify_event *ev;
	ssize_t off;

	for (off = 0; off < n; off += (ssize_t)(sizeof(*ev) + ev->len)) {
		ev = (const struct inotify_event *)(const void *)(buf + off);
		if (ev->len > 0 && (ev->mask & a->mask) &&
		    strncmp(ev->name, a->prefix, strlen(a->prefix)) == 0) {
			snprintf(name, name_len, "%s", ev->name);
			return 1;
		}
	}
	return 0;
}

static int
ch_kill_on_write(int argc, char **argv)
{
	struct ch_kill_args a;
	/* aligned for struct inotify_event, as inotify(7) asks */
	char buf[8192] __attribute__((aligned(__alignof__(struct
	    inotify_event)))), name[256];
	double until;
	struct pollfd pfd;
	ssize_t n;
	int fd, left;

	if (ch_kill_parse(&a, argc, argv) != 0)
		return ch_usage(stderr);
	if ((fd = inotify_init1(IN_CLOEXEC)) < 0 ||
	    inotify_add_watch(fd, a.dir, a.mask) < 0) {
		fprintf(stderr, "chaos-helper: inotify on %s: %s\n", a.dir,
		    strerror(errno));
		return 2;
	}
	until = kn_now() + a.timeout;
	pfd.fd = fd;
	pfd.events = POLLIN;
	while ((left = (int)((until - kn_now()) * 1000.0)) > 0) {
		if (poll(&pfd, 1, left) <= 0)
			continue;
		if ((n = read(fd, buf, sizeof(buf))) <= 0)
			continue;
		if (!ch_kill_match(&a, buf, n, name, sizeof(name)))
			continue;
		/* first the kill, then anything else: the write is short */
		if (kill(a.pid, SIGKILL) != 0) {
			fprintf(stderr, "chaos-helper: kill %ld: %s\n",
			    (long)a.pid, strerror(errno));
			return 2;
		}
		printf("%s\n", name);
		close(fd);
		return 0;
	}
	close(fd);
	return 1;
}

int
main(int argc, char **argv)
{
	if (argc < 2)
		return ch_usage(stderr);
	if (strcmp(argv[1], "check") == 0)
		return ch_check(argc - 1, argv + 1);
	if (strcmp(argv[1], "kill-on-write") == 0)
		return ch_kill_on_write(argc - 1, argv + 1);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		ch_usage(stdout);
		return 0;
	}
	return ch_usage(stderr);
}
