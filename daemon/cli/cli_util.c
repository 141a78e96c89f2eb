/* What several shardmeter commands share: --help, reading a whole file,
 * integer options, the backend, and the options of the commands that work
 * on a run's files (spec, train, eval, generate). */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "kernels/error.h"
#include "kernels/pool.h"

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

	if (note[0])
		fprintf(stderr, "shardmeter: %s\n", note);
	kn_backend_describe(be, desc, sizeof(desc));
	fprintf(stderr, "shardmeter: %s\n", desc);
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
	    pr_spec_run_id(&r->spec, r->run_id, err) != 0 ||
	    (r->be = cli_backend_open(r->backend, r->threads, note,
	    err)) == NULL) {
		fprintf(stderr, "shardmeter %s: %s\n", cmd, err);
		return 1;
	}
	cli_backend_report(r->be, note);
	return 0;
}
