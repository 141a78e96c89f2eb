/* The SOMA half of shardmeter eval. */
#ifndef SM_CLI_CMD_EVAL_SOMA_H
#define SM_CLI_CMD_EVAL_SOMA_H

#include "daemon/cli/cmd.h"

/* Prints the experts, the routed mixture and the controls on split
 * ("valid" or "test"), or on the file text when it is not NULL (split
 * then names it "text"), at most max_windows windows (0: all); the exit
 * status. */
int cli_eval_soma(const struct cli_run *run, const char *split,
    const char *text, int json, long max_windows);

#endif
