/* shardmeter id: prints the peer id of an identity that `shardmeter init`
 * made, the one to put in other hosts' peer lists. */
#include "config.h"

#include "daemon/cli/cmd.h"

static int
cmd_id_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct cli_identity a;
	int rc = cli_identity_parse(self, &a, argc, argv, 0);

	return rc != CLI_CONTINUE ? rc : cli_identity_show(self, &a);
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
