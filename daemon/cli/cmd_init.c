/* shardmeter init: makes the identity of a daemon (in its state
 * directory) or of an operator (--client): a key pair and a self-signed
 * certificate, and prints the peer id that peer lists will name. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>

#include "daemon/cli/cmd.h"
#include "daemon/identity.h"
#include "kernels/error.h"

/* The new identity's peer id, read back from its files as `id` reads it. */
static int
init_run(const struct cli_identity *a, char id[ID_LEN])
{
	char err[KN_ERR_LEN];

	if (id_create(a->path, a->force, err) != 0 ||
	    id_of_dir(a->path, id, err) != 0) {
		fprintf(stderr, "shardmeter init: %s\n", err);
		return 1;
	}
	return 0;
}

static void
init_print(const struct cli_identity *a, const char *id)
{
	printf("%s\n", id);
	fprintf(stderr, "shardmeter init: %s identity in %s/%s (the private "
	    "key: keep it secret) and %s/%s\n", a->client ? "an operator's" :
	    "a daemon's", a->path, ID_KEY_FILE, a->path, ID_CERT_FILE);
}

static int
init_exec(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_IDENTITY_OPTIONS,
		{ "force", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 }
	};
	struct cli_identity a;
	char id[ID_LEN];
	int rc;

	if ((rc = cli_identity_parse(self, &a, argc, argv, opts)) !=
	    CLI_CONTINUE)
		return rc;
	if ((rc = init_run(&a, id)) != 0)
		return rc;
	init_print(&a, id);
	return 0;
}

const struct cmd_entry cmd_init_entry = {
	.name = "init",
	.summary = "make a daemon's or an operator's identity, print its id",
	.usage = "usage: shardmeter init [--dir DIR] [--client] [--force]\n"
	    "Makes an Ed25519 key pair and a self-signed certificate, "
	    "DIR/key.pem and\nDIR/cert.pem, and prints the peer id. DIR "
	    "defaults to /var/lib/blocktrain\n(the daemon's), or with "
	    "--client to $XDG_CONFIG_HOME/shardmeter or\n"
	    "~/.config/shardmeter (an operator's). An identity already "
	    "there is kept\nunless --force replaces it, and its peer id "
	    "with it.\n",
	.exec = init_exec
};
