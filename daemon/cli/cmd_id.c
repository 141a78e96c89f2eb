/* shardmeter id: prints the peer id of an identity that `shardmeter init`
 * made, the one to put in other hosts' peer lists. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>

#include "daemon/cli/cmd.h"
#include "daemon/identity.h"
#include "kernels/error.h"

static int
cmd_id_run(const struct cli_identity *a, char id[ID_LEN])
{
	char err[KN_ERR_LEN];
	int rc;

	if ((rc = id_of_dir(a->path, id, err)) == ID_ENONE)
		fprintf(stderr, "shardmeter id: %s; 'shardmeter init%s%s%s' "
		    "makes one\n", err, a->client ? " --client" : "",
		    a->dir != NULL ? " --dir " : "",
		    a->dir != NULL ? a->dir : "");
	else if (rc != 0)
		fprintf(stderr, "shardmeter id: %s\n", err);
	return rc != 0 ? 1 : 0;
}

static int
cmd_id_exec(const struct cmd_entry *self, int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_IDENTITY_OPTIONS,
		{ NULL, 0, NULL, 0 }
	};
	struct cli_identity a;
	char id[ID_LEN];
	int rc;

	if ((rc = cli_identity_parse(self, &a, argc, argv, opts)) !=
	    CLI_CONTINUE)
		return rc;
	if ((rc = cmd_id_run(&a, id)) != 0)
		return rc;
	printf("%s\n", id);
	return 0;
}

const struct cmd_entry cmd_id_entry = {
	.name = "id",
	.summary = "print the peer id of an identity",
	.usage = "usage: shardmeter id [--dir DIR] [--client]\n"
	    "Prints the peer id of the identity in DIR, which "
	    "'shardmeter init' made:\nthe SHA-256 of its certificate's "
	    "public key in 13 groups of 4 base32\ncharacters. DIR "
	    "defaults as for init.\n",
	.exec = cmd_id_exec
};
