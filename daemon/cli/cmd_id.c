/* shardmeter id: prints the peer id of an identity that `shardmeter init`
 * made, the one to put in other hosts' peer lists, or with --pin the form
 * curl's --pinnedpubkey takes, so that any HTTP client can pin a daemon. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/identity.h"

/* The pin of a peer id given as text, or of the identity a names. */
static int
id_print_pin(const struct cmd_entry *self, const char *text,
    const struct cli_identity *a)
{
	uint8_t id[ID_BYTES];
	char pin[ID_PIN_LEN], buf[ID_LEN], err[KN_ERR_LEN];
	int rc;

	if (text == NULL) {
		if ((rc = id_of_dir(a->path, buf, err)) != 0) {
			fprintf(stderr, "shardmeter %s: %s\n", self->name, err);
			return 1;
		}
		text = buf;
	}
	if (id_parse(text, id, err) != 0) {
		fprintf(stderr, "shardmeter %s: %s\n", self->name, err);
		return 2;
	}
	id_pin(id, pin);
	printf("%s\n", pin);
	return 0;
}

static int
cmd_id_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct cli_identity a;
	const char *peer = NULL;
	int i, n = 0, pin = 0, rc;
	char **rest = calloc((size_t)argc + 1, sizeof(*rest));

	if (rest == NULL) {
		fprintf(stderr, "shardmeter %s: out of memory\n", self->name);
		return 1;
	}

	/* --pin [PEER-ID] is taken out here; the rest is init's options */
	for (i = 0; i < argc; i++) {
		if (i > 0 && strcmp(argv[i], "--pin") == 0) {
			pin = 1;
			if (i + 1 < argc && argv[i + 1][0] != '-')
				peer = argv[++i];
		} else
			rest[n++] = argv[i];
	}
	if (peer != NULL && n > 1) {
		fprintf(stderr, "shardmeter %s: --pin PEER-ID takes no other "
		    "option\n", self->name);
		rc = 2;
	} else if (peer != NULL)
		rc = id_print_pin(self, peer, NULL);
	else if ((rc = cli_identity_parse(self, &a, n, rest, 0)) ==
	    CLI_CONTINUE)
		rc = pin ? id_print_pin(self, NULL, &a) :
		    cli_identity_show(self, &a);
	free(rest);
	return rc;
}

const struct cmd_entry cmd_id_entry = {
	.name = "id",
	.summary = "print the peer id of an identity",
	.usage = "usage: shardmeter id [--dir DIR] [--client] [--pin]\n"
	    "       shardmeter id --pin PEER-ID\n"
	    "Prints the peer id of the identity in DIR, which "
	    "'shardmeter init' made:\nthe SHA-256 of its certificate's "
	    "public key in 13 groups of 4 base32\ncharacters. DIR "
	    "defaults as for init.  --pin prints it (or PEER-ID) as\n"
	    "curl's --pinnedpubkey takes it (sha256// and base64), "
	    "to pin a daemon from\nany HTTP client.\n",
	.exec = cmd_id_exec
};
