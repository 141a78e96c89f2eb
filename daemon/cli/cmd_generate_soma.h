/* The SOMA half of shardmeter generate (--mode soma). */
#ifndef SM_CLI_CMD_GENERATE_SOMA_H
#define SM_CLI_CMD_GENERATE_SOMA_H

#include "daemon/cli/cmd.h"
#include "daemon/net/tls.h"

struct cli_soma_gen {
	struct cli_run *run;    /* --spec, and --dir in process */
	const char *peers;      /* a SOMA host list, or NULL: in process */
	const char *prompt;
	int length;             /* < 0: 64 */
	double temp;
	unsigned long long seed;
	const char *score;      /* a file to score instead, or NULL */
	long windows;           /* --windows: at most that many (0: all) */
	int timeout_ms;
	int verbose;
};

/* The operator's identity (shardmeter init --client) for TLS to
 * pipeline hosts. */
int cli_operator_tls(tls_ctx **tls, char *err);
/* Generates (or scores a file) with the routed mixture; the exit
 * status. */
int cli_generate_soma(const struct cli_soma_gen *a);

#endif
