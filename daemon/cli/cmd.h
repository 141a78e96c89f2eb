/* The commands of shardmeter, after tmux's cmd_entry: each cmd_<name>.c
 * defines one entry (name, summary, usage, exec), cmd.c gathers them in
 * cmd_table[], and main dispatches and prints help from that table. */
#ifndef SM_CLI_CMD_H
#define SM_CLI_CMD_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

#include "daemon/core/peers.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/backend.h"
#include "proto/spec.h"

/* jansson's, for the few functions below that take or give JSON */
struct json_t;


struct cmd_entry {
	const char *name;
	const char *summary;    /* one line in 'shardmeter --help' */
	const char *usage;      /* the whole text of 'shardmeter NAME --help' */
	/* argv[0] is the command's name; returns the exit status */
	int (*exec)(const struct cmd_entry *self, int argc, char **argv);
};

/* Every command, in the order --help lists them; NULL at the end. */
extern const struct cmd_entry *const cmd_table[];

const struct cmd_entry *cmd_find(const char *name);

/* A parse function returns this to go on, or else the exit status. */
#define CLI_CONTINUE (-1)

/* Prints self->usage on stdout for --help; returns 0, the exit status. */
int cli_help(const struct cmd_entry *self);

/* The whole file in *data (caller frees; NUL-terminated) and its length. */
int cli_read_file(const char *path, char **data, size_t *len, char *err);
/* All of f (a pipe too) up to max bytes, NUL-terminated, into *data
 * (malloc'd); more than max is an error naming what, and so is a NUL
 * byte inside it. */
int cli_read_stream(FILE *f, const char *what, size_t max, char **data,
    size_t *len, char *err);

/* "--NAME takes an integer from LO to HI" on stderr when v is not one;
 * returns 0 or -1. */
int cli_parse_int(const char *cmd, const char *name, const char *v, int lo,
    int hi, int *out);

/* The thread pool and the backend asked for; the backend's note (why the
 * CPU was taken, or "") in note.  NULL with a reason in err. */
const kn_backend *cli_backend_open(kn_backend_kind kind, int threads,
    char *note, char *err);
/* The note, if any, and the backend's description, on one line of stderr. */
void cli_backend_report(const kn_backend *be, const char *note);

/* The options every command on a run's files shares: --spec, --dir,
 * --threads, --backend (and --help). */
struct cli_run {
	const char *spec_path;
	const char *dir;
	kn_backend_kind backend;
	int threads;
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	const kn_backend *be;
	/* set before cli_run_open by a command that names the backend itself
	 * once its GEMM choice is made (train): the open keeps its note here
	 * instead of printing the backend line a first time */
	int defer_report;
	char backend_note[KN_ERR_LEN];
	/* set before cli_run_open by a command that computes nothing here
	 * (export, generate through served hosts): the spec alone, be stays
	 * NULL and no backend line is printed */
	int no_backend;
};

#define CLI_RUN_OPTIONS \
	{ "spec", required_argument, NULL, 'S' }, \
	{ "dir", required_argument, NULL, 'D' }, \
	{ "threads", required_argument, NULL, 'T' }, \
	{ "backend", required_argument, NULL, 'B' }, \
	{ "help", no_argument, NULL, 'h' }

/* A command's own option ch (optarg is its value) into its args;
 * CLI_CONTINUE, or the exit status. */
typedef int (*cli_option_fn)(void *args, int ch);
/* getopt_long over argv with opts: the shared options into r, --help from
 * self's usage, every other option to own(args, ch).  CLI_CONTINUE, or the
 * exit status. */
int cli_run_parse(const struct cmd_entry *self, struct cli_run *r, int argc,
    char **argv, const struct option *opts, cli_option_fn own, void *args);
/* Loads the spec, its run id and, unless no_backend, the backend (and
 * prints its one line, unless defer_report); 0, or the exit status with
 * the reason on stderr. */
int cli_run_open(struct cli_run *r, const char *cmd, int need_dir);

/* The options of the commands on an identity (init, id): --dir,
 * --client, --force (init's only) and --help. */
struct cli_identity {
	const char *dir;        /* --dir, or NULL */
	int client;             /* --client: an operator's, not a daemon's */
	int force;              /* --force */
	/* the directory in effect: --dir, else the daemon's default
	 * state_dir, or with --client $XDG_CONFIG_HOME/shardmeter (else
	 * $HOME/.config/shardmeter) */
	char path[PR_PATH_LEN];
};

/* getopt_long over argv (--force taken only with_force), then the
 * directory in effect into a->path.  CLI_CONTINUE, or the exit status
 * with the reason on stderr. */
int cli_identity_parse(const struct cmd_entry *self, struct cli_identity *a,
    int argc, char **argv, int with_force);
/* Prints the peer id of the identity in a->path, as init and id show it;
 * 0, or the exit status with the reason on stderr. */
int cli_identity_show(const struct cmd_entry *self,
    const struct cli_identity *a);

/* A response body as it comes in, refused past max bytes. */
struct cli_body {
	char *data;
	size_t len, max;
};

/* A blocking GET of path from the daemon p (never for the event loop):
 * https with the operator's identity, the daemon pinned to its id, or
 * plain http when the peer list gives no id (insecure daemons).  The body
 * in *out (caller frees out->data).  Returns the HTTP status, or 0 with
 * the reason in err. */
long cli_peer_get(const peers_entry *p, const char *path, size_t max,
    long timeout_ms, struct cli_body *out, char *err);
/* The same with method "GET" or "POST" (an empty body). */
long cli_peer_request(const peers_entry *p, const char *method,
    const char *path, size_t max, long timeout_ms, struct cli_body *out,
    char *err);
/* Prints o on stdout, indented with sorted keys, and releases it (a
 * jansson json_t). */
void cli_print_json(struct json_t *o);
/* GET /v1/status of p as JSON (a jansson json_t, the caller's), or NULL
 * with the reason in err. */
struct json_t *cli_status_fetch(const peers_entry *p, char *err);
/* shardmeter status on a peer list of expert=E lines, once: a table, or
 * JSON; returns the number of daemons that answered. */
int cli_status_soma(const peers_list *pl, int json);
/* The predicted / measured / error section of daemons that run from a
 * plan, from their statuses (status[i] of pl's line i, NULL when down);
 * nothing when none carries a plan. */
void cli_status_predicted(const peers_list *pl, struct json_t *const *status);

/* shardmeter status on a pipeline host list, once: a table, or JSON; returns the number
 * of hosts that answered.  cli_is_pipeline_host: whether the first host
 * that answers is a blocktraind -S host (a list of one block per host
 * reads as a peer list too). */
int cli_status_pipeline(const ph_list *hosts, int json);
int cli_is_pipeline_host(const ph_list *hosts);

/* The operator's identity directory: $XDG_CONFIG_HOME/shardmeter, else
 * $HOME/.config/shardmeter.  0, or -1 with the reason in err. */
int cli_client_dir(char out[PR_PATH_LEN], char *err);

#endif
