/* The SOMA half of shardmeter train and eval: which model, its files. */
#ifndef SM_CLI_CMD_TRAIN_SOMA_H
#define SM_CLI_CMD_TRAIN_SOMA_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/cli/cmd.h"
#include "soma/trainer.h"

struct cli_soma_train {
	struct cli_run *run;
	sa_kind kind;
	int expert;
	int P;                  /* 0: the spec's */
	double lr, eps;         /* > 0: a control's own, named in its file */
	int decoder_steps;      /* > 0: a control's decoder stops learning */
	long steps;             /* < 0: the spec's or the budget's */
	uint64_t budget;        /* 0: SOMA's own compute */
	int quiet;
	volatile sig_atomic_t *stop;
};

int cli_train_soma(const struct cli_soma_train *a);
void cli_soma_stem(sa_kind k, int expert, int P, char *buf, size_t len);
/* The kind and P of a model file's stem (cli_soma_stem's, perhaps with
 * a tuning suffix); 0, or -1 for another file. */
int cli_soma_parse_stem(const char *stem, sa_kind *k, int *P);
int cli_soma_text(const pr_spec *s, sa_kind k, int expert, char ***paths,
    int *n, char *err);
void cli_soma_text_free(char **paths, int n);

#endif
