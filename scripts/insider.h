/* The hostile replica of scripts/chaos --insiders (scripts/insider.c): one
 * listed replica's identity, port and peer list in the hands of an
 * attacker.  insider.c plays the round protocol badly; insider_flood.c
 * holds slow connections and sends the pipeline entry completions with
 * huge integers; insider_read.c reads the daemons for the script.  Shared
 * state and the calls between the files. */
#ifndef SM_INSIDER_H
#define SM_INSIDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <uv.h>

#include "daemon/net/http_client.h"
#include "daemon/net/http_server.h"
#include "daemon/core/peers.h"
#include "daemon/net/tls.h"
#include "proto/spec.h"

#define IN_MAX_REPLICAS 64

typedef enum {
	IN_NOISE,               /* Gaussian update of sigma scale */
	IN_FLIP,                /* -factor x a plausible update */
	IN_HUGE,                /* every value 1e30 */
	IN_OVER,                /* 409 over to every push, a bad checkpoint */
	IN_FUTURE,              /* a checkpoint stamped far beyond the run */
	IN_FLOOD,               /* slow connections to the other replicas */
	IN_COMPLETION,          /* huge integers to the pipeline entry */
	IN_MODES
} in_mode;

/* The slow connections of IN_FLOOD (insider_flood.c). */
typedef struct in_flood in_flood;

typedef struct {
	/* what the command line asked */
	in_mode mode;
	double scale, factor, seconds, drip;
	int stale;              /* over: the first honest checkpoint, not 0s */
	int64_t future_step;
	int connections, sources;
	const char *entry, *entry_id;
	uint64_t seed;

	uv_loop_t *loop;
	hs_server *server;
	hc_client *client;
	tls_ctx *tls;
	peers_list peers;
	int self;               /* our line in the peer list */
	int block, replica, replicas;
	int rep_peer[IN_MAX_REPLICAS];  /* replica index -> line */
	pr_spec spec;
	char run_id[PR_RUN_ID_LEN];
	size_t count;           /* floats in an update of our block */
	const kn_tensor *tensors;
	int ntensors;
	void *model;            /* the kn_model that owns tensors */
	double started;

	/* the honest replicas as their status says */
	int64_t round, step;    /* the highest of them */
	double round_seen;      /* when round was first seen */
	char honest_sha[65];    /* the newest checkpoint one of them holds */
	int honest_from;        /* the replica that holds it */
	int status_busy[IN_MAX_REPLICAS];
	double status_next[IN_MAX_REPLICAS];
	int ckpt_busy;

	/* checkpoints: the newest honest one, the first, and what we serve */
	char *honest, *first, *served;
	size_t honest_len, first_len, served_len;
	char served_sha[65];
	int64_t served_step, served_round;
	float *cur_params, *prev_params; /* two honest ones, for flip */
	int64_t cur_round, prev_round;

	/* our own update and its pushes */
	int64_t posted_round;
	char *mine;
	size_t mine_len;
	int push_state[IN_MAX_REPLICAS];        /* 0 to send, 1 sent, 2 over */
	double push_at[IN_MAX_REPLICAS];

	/* updates received for one round, and the round we decided as
	 * coordinator (the lowest replica, when we are it) */
	int64_t gather_round;
	double gather_since;
	char *got[IN_MAX_REPLICAS];
	size_t got_len[IN_MAX_REPLICAS];
	float *honest_update;   /* one decoded, for flip */
	int64_t honest_update_round;
	int64_t decided_round;
	uint64_t members;
	char *kept[IN_MAX_REPLICAS];
	size_t kept_len[IN_MAX_REPLICAS];

	/* what happened, for the last line */
	long rounds_posted, accepted, refused, over, behind, failed;
	long updates_received, checkpoints_served, over_answers, commits;
	char first_refusal[200];
	in_flood *flood;
	/* -1: not sent; 0: the entry answered its status afterwards; 1 not */
	int completion_status;
	int completion_sent;
	uint8_t entry_pin[ID_BYTES];
	char completion_error[320];     /* the answers, or why none */
	int done;
} insider;

/* The usage text, to f; returns 2. */
int in_usage(FILE *f);
/* The subcommands of insider_read.c: argv[0] is the subcommand's name;
 * they return the process's exit status. */
int in_get(int argc, char **argv);
int in_strikes(int argc, char **argv);

/* Wall seconds since the insider started. */
double in_elapsed(const insider *in);

/* The slow connections: 0, or -1 with a reason on stderr. */
int in_flood_start(insider *in);
/* The counts for the last line: "held_max=N opened=N closed_early=N". */
void in_flood_summary(const in_flood *f, char *buf, size_t len);
void in_flood_stop(in_flood *f);

/* POSTs the completions with huge integers to in->entry (pinned to
 * in->entry_id), one after another, then asks the entry's status: the
 * answers land in in->completion_error, whether it still answered in
 * in->completion_status.  -1 (the reason in completion_error) when there
 * is no entry to send them to. */
int in_completion_start(insider *in);

#endif
