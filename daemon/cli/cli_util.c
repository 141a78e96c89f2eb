/* What several shardmeter commands share: --help, reading a whole file,
 * integer options, the backend, the options of the commands that work
 * on a run's files (spec, train, eval, generate), and those of the
 * commands on an identity (init, id). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/conf.h"
#include "daemon/core/identity.h"
#include "kernels/error.h"
#include "kernels/pool.h"

void
cli_print_json(json_t *o)
{
	char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);

	if (text != NULL)
		printf("%s\n", text);
	free(text);
	json_decref(o);
}

int
cli_help(const struct cmd_entry *self)
{
	fputs(self->usage, stdout);
	return 0;
}

int
cli_read_file(const char *path, char **data, size_t *len, char *err)
{
	FILE *f = fopen(path, "rb");
	long size;

	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open %s: %s", path,
		    strerror(errno));
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	rewind(f);
	*data = malloc((size_t)size + 1);
	if (*data == NULL || fread(*data, 1, (size_t)size, f) != (size_t)size) {
		fclose(f);
		free(*data);
		return kn_error(err, KN_EIO, "cannot read %s", path);
	}
	fclose(f);
	(*data)[size] = '\0';
	*len = (size_t)size;
	return 0;
}

int
cli_read_stream(FILE *f, const char *what, size_t max, char **data,
    size_t *len, char *err)
{
	size_t n = 0, cap = 4096, got;
	char *buf = malloc(cap + 1), *nb;

	for (;;) {
		if (buf == NULL)
			return kn_error(err, KN_ENOMEM, "out of memory reading "
			    "%s", what);
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n > max) {
			free(buf);
			return kn_error(err, KN_EINVAL, "%s holds more than "
			    "%zu bytes", what, max);
		}
		if (got == 0 || n < cap) {
			if (ferror(f)) {
				free(buf);
				return kn_error(err, KN_EIO, "cannot read %s: %s",
				    what, strerror(errno));
			}
			if (feof(f))
				break;
			continue;
		}
		cap *= 2;
		if ((nb = realloc(buf, cap + 1)) == NULL)
			free(buf);
		buf = nb;
	}
	if (memchr(buf, '\0', n) != NULL) {
		free(buf);
		return kn_error(err, KN_EINVAL, "%s holds a NUL byte", what);
	}
	buf[n] = '\0';
	*data = buf;
	*len = n;
	return 0;
}

int
cli_parse_int(const char *cmd, const char *name, const char *v, int lo,
    int hi, int *out)
{
	char *end;
	long x = strtol(v, &end, 10);

	if (end == v || *end != '\0' || x < lo || x > hi) {
		fprintf(stderr, "shardmeter %s: --%s takes an integer from %d "
		    "to %d, not '%s'\n", cmd, name, lo, hi, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

const kn_backend *
cli_backend_open(kn_backend_kind kind, int threads, char *note, char *err)
{
	if (kn_pool_init(threads, err) != 0)
		return NULL;
	return kn_backend_get(kind, note, err);
}

void
cli_backend_report(const kn_backend *be, const char *note)
{
	char desc[512];

	/* one line, whatever the backend: the note, when there is one, says
	 * why a GPU that is there is not the one in use */
	kn_backend_describe(be, desc, sizeof(desc));
	fprintf(stderr, "shardmeter: %s%s%s\n", note[0] ? note : "",
	    note[0] ? "; " : "", desc);
}

/* Takes getopt's ch if it is a shared option: 1 if taken, 0 if not, -1
 * on a bad value (said on stderr). */
static int
cli_run_option(struct cli_run *r, int ch, const char *cmd)
{
	switch (ch) {
	case 'S': r->spec_path = optarg; return 1;
	case 'D': r->dir = optarg; return 1;
	case 'T': r->threads = atoi(optarg); return 1;
	case 'B':
		if (kn_backend_parse(optarg, &r->backend) != 0) {
			fprintf(stderr, "shardmeter %s: --backend takes auto, "
			    "cpu or cuda\n", cmd);
			return -1;
		}
		return 1;
	}
	return 0;
}

int
cli_run_parse(const struct cmd_entry *self, struct cli_run *r, int argc,
    char **argv, const struct option *opts, cli_option_fn own, void *args)
{
	int ch, rc;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if ((rc = cli_run_option(r, ch, self->name)) == 1)
			continue;
		if (rc < 0)
			return 2;
		if (ch == 'h')
			return cli_help(self);
		if ((rc = own(args, ch)) != CLI_CONTINUE)
			return rc;
	}
	return CLI_CONTINUE;
}

int
cli_run_open(struct cli_run *r, const char *cmd, int need_dir)
{
	char err[PR_ERR_LEN], note[KN_ERR_LEN];

	if (r->spec_path == NULL) {
		fprintf(stderr, "shardmeter %s: --spec FILE is required\n", cmd);
		return 2;
	}
	if (need_dir && r->dir == NULL) {
		fprintf(stderr, "shardmeter %s: --dir DIR is required\n", cmd);
		return 2;
	}
	if (pr_spec_load(&r->spec, r->spec_path, err) != 0 ||
	    pr_spec_run_id(&r->spec, r->run_id, err) != 0) {
		fprintf(stderr, "shardmeter %s: %s\n", cmd, err);
		return 1;
	}
	if (r->no_backend)
		return 0;
	if ((r->be = cli_backend_open(r->backend, r->threads, note,
	    err)) == NULL) {
		fprintf(stderr, "shardmeter %s: %s\n", cmd, err);
		return 1;
	}
	if (r->defer_report)
		snprintf(r->backend_note, sizeof(r->backend_note), "%s", note);
	else
		cli_backend_report(r->be, note);
	return 0;
}

int
cli_client_dir(char out[PR_PATH_LEN], char *err)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	int n;

	if (xdg != NULL && xdg[0] == '/')
		/* the XDG spec ignores a relative XDG_CONFIG_HOME */
		n = snprintf(out, PR_PATH_LEN, "%s/shardmeter", xdg);
	else if (home != NULL && home[0] != '\0')
		n = snprintf(out, PR_PATH_LEN, "%s/.config/shardmeter", home);
	else
		return kn_error(err, KN_EINVAL, "neither XDG_CONFIG_HOME nor "
		    "HOME is set"), -1;
	if (n >= PR_PATH_LEN)
		return kn_error(err, KN_EINVAL, "%.64s...: path too long",
		    out), -1;
	return 0;
}

/* The directory of the identity a's options name, into a->path. */
static int
cli_identity_dir(struct cli_identity *a, const char *cmd)
{
	char err[KN_ERR_LEN];
	cf_config c;
	int n;

	if (a->client && a->dir == NULL) {
		if (cli_client_dir(a->path, err) == 0)
			return CLI_CONTINUE;
		fprintf(stderr, "shardmeter %s: %s; give --dir DIR\n", cmd,
		    err);
		return 1;
	}
	if (a->dir != NULL)
		n = snprintf(a->path, sizeof(a->path), "%s", a->dir);
	else {
		/* the daemon keeps its identity in its state directory */
		cf_defaults(&c);
		n = snprintf(a->path, sizeof(a->path), "%s", c.state_dir);
	}
	if (n >= (int)sizeof(a->path)) {
		fprintf(stderr, "shardmeter %s: %.64s...: path too long\n",
		    cmd, a->path);
		return 2;
	}
	return CLI_CONTINUE;
}

int
cli_identity_parse(const struct cmd_entry *self, struct cli_identity *a,
    int argc, char **argv, int with_force)
{
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'D' },
		{ "client", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 }
	};
	int ch;

	memset(a, 0, sizeof(*a));
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'D': a->dir = optarg; break;
		case 'c': a->client = 1; break;
		case 'f':
			if (!with_force) {
				fprintf(stderr, "shardmeter %s: --force is "
				    "init's option only\n", self->name);
				return 2;
			}
			a->force = 1;
			break;
		case 'h': return cli_help(self);
		default: return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "shardmeter %s: unexpected argument '%s'\n",
		    self->name, argv[optind]);
		return 2;
	}
	if (a->dir != NULL && a->dir[0] == '\0') {
		fprintf(stderr, "shardmeter %s: --dir takes a directory\n",
		    self->name);
		return 2;
	}
	return cli_identity_dir(a, self->name);
}

int
cli_identity_show(const struct cmd_entry *self, const struct cli_identity *a)
{
	char id[ID_LEN], err[KN_ERR_LEN];
	int rc;

	if ((rc = id_of_dir(a->path, id, err)) == ID_ENONE)
		fprintf(stderr, "shardmeter %s: %s; 'shardmeter init%s%s%s' "
		    "makes one\n", self->name, err, a->client ? " --client" :
		    "", a->dir != NULL ? " --dir " : "",
		    a->dir != NULL ? a->dir : "");
	else if (rc != 0)
		fprintf(stderr, "shardmeter %s: %s\n", self->name, err);
	else
		printf("%s\n", id);
	return rc != 0 ? 1 : 0;
}
