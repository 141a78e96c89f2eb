/* shardmeter init: makes the identity of a daemon (in its state
 * directory) or of an operator (--client): a key pair and a self-signed
 * certificate, and prints the peer id that peer lists will name. */
#include "config.h"

#include <stdio.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/identity.h"
#include "kernels/error.h"

/* Makes the identity, then shows its peer id read back from its files
 * exactly as `shardmeter id` does. */
static int
init_run(const struct cmd_entry *self, const struct cli_identity *a)
{
	char err[KN_ERR_LEN];
	int rc;

	if (id_create(a->path, a->force, err) != 0) {
		fprintf(stderr, "shardmeter init: %s\n", err);
		return 1;
	}
	if ((rc = cli_identity_show(self, a)) == 0)
		fprintf(stderr, "shardmeter init: %s identity in %s/%s (the "
		    "private key: keep it secret) and %s/%s\n", a->client ?
		    "an operator's" : "a daemon's", a->path, ID_KEY_FILE,
		    a->path, ID_CERT_FILE);
	return rc;
}

static int
init_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct cli_identity a;
	int rc = cli_identity_parse(self, &a, argc, argv, 1);

	return rc != CLI_CONTINUE ? rc : init_run(self, &a);
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
