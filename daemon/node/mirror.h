/* Mirrors (mirror.c): each block's newest checkpoint and optimizer state
 * kept on `mirrors` hosts of other blocks, so that a block survives the
 * loss of its only host (bootstrap.c fetches it back).  A mirror pulls:
 * the peer watch names a newer checkpoint of a block it mirrors, and it
 * GETs the pair from that host, checks it as any peer checkpoint (hash,
 * shape against the spec, finite values) and keeps the newest verified
 * copy under state_dir/mirror/ within mirror_budget bytes.  node.c
 * starts it and hands it the peers' checkpoints; api.c routes
 * /v1/mirrors/ and /v1/blocks/{b}/optimizer to it.  Loop thread, but
 * for mr_check_pair (mirror_check.c), which runs on libuv's pool. */
#ifndef SM_MIRROR_H
#define SM_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "daemon/core/peers.h"
#include "daemon/net/http_route.h"
#include "proto/checkpoint.h"
#include "proto/spec.h"

struct node;
typedef struct mr_state mr_state;

/* The lines of pl that mirror block (at most max of them, mirrors
 * wanted), into out in the order chosen; their count.  Hosts of other
 * blocks only: a block's own replicas already hold its checkpoint, and
 * the point is to survive the loss of every host of the block.  Blocks
 * are taken in ascending order; each takes, mirrors times, the host of
 * another block holding the fewest copies so far, ties going to the
 * first after the block's last line in ring order, so that copies
 * spread over the hosts.  Every daemon computes the same from the same
 * list.  0 when no host of another block is listed. */
int mr_assign(const peers_list *pl, int block, int mirrors, int *out,
    int max);
/* Whether line i of pl mirrors block. */
int mr_mirrors_block(const peers_list *pl, int i, int block, int mirrors);

/* The most bytes one copy of block (1-based) takes on disk: its
 * checkpoint and its optimizer state. */
uint64_t mr_copy_bytes(const pr_spec *s, int block);
/* Whether budget bytes hold one copy of each block that line self of
 * pl mirrors: 0, or KN_EINVAL with what is needed in err (PR_ERR_LEN).
 * *need (may be NULL) receives the bytes needed. */
int mr_budget_check(const pr_spec *s, const peers_list *pl, int self,
    int mirrors, uint64_t budget, uint64_t *need, char *err);

/* Whether s is a sha256 as the daemons write it: 64 lowercase hex
 * digits and nothing more (mirror_check.c, as the two below). */
int mr_sha_ok(const char *s);
/* Whether a step and a round a peer names (JSON integers, whatever was
 * sent) can be of the run of s: 0 to its steps, each; the comparisons
 * cannot overflow.  1 and the values in *step and *round, or 0. */
int mr_claim_in_run(const pr_spec *s, json_t *step, json_t *round,
    int64_t *step_out, int64_t *round_out);

/* A pair fetched from a peer: the checkpoint and, when it came, the
 * optimizer state (optim NULL). */
typedef struct mr_pair {
	const char *ckpt;
	size_t ckpt_len;
	const char *optim;
	size_t optim_len;
} mr_pair;

/* What mr_check_pair found. */
typedef struct mr_verdict {
	int hash_bad;           /* the bytes are not the ones named */
	pr_ckpt_meta got;       /* the checkpoint's meta, when valid */
	char sha[65];           /* the checkpoint's sha256, when valid */
	int optim_ok;           /* the optimizer state is of the same step */
	char optim_sha[65];     /* its sha256, when optim_ok */
	char optim_why[160];    /* why not, when given and not ok */
} mr_verdict;

/* What a source named of the checkpoint it serves: the step, round and
 * sha256 (64 hex digits) it claimed beforehand (its status, its
 * mirror's description), and the ETag of the answer that brought the
 * bytes ("" when none came). */
typedef struct mr_claim {
	int64_t step, round;
	char sha[65];
	char etag[65];
} mr_claim;

/* The sha256 of an ETag header ("\"hex\"" or hex) into out, "" when it
 * is none. */
void mr_etag(const char *header, char out[65]);

/* Checks a pair of block of run_id from a source that named c: the
 * checkpoint's bytes hash to the ETag that came with them (to the
 * claim's sha256 without one), they decode against the spec's shape of
 * the block with every value finite, and they are the checkpoint
 * claimed or a newer one (a host trains on between its status and the
 * fetch: a newer step under another hash is that, the claimed step
 * under another hash is not); the optimizer state, when given, of the
 * same run, block, step and round, decodes with the block's parameter
 * count.  0 (the checkpoint good, its sha256 in v->sha; v->optim_ok for
 * the state), or KN_EINVAL / KN_ENUM with the reason in err
 * (PR_ERR_LEN), v->hash_bad when the bytes are not the ones named.
 * Thread-safe. */
int mr_check_pair(const pr_spec *s, const char *run_id, int block,
    const mr_claim *c, const mr_pair *p, mr_verdict *v, char *err);

/* Counts a refusal of what the peer at addr served against it (the
 * strikes' checkpoint kind), with the journal and the log. */
void mr_refused(struct node *n, const char *addr, const char *why);

/* Loads the copies state_dir/mirror/ holds (each hashed again; a copy
 * that fails is removed, and so are copies of blocks this host no
 * longer mirrors), and refuses a mirror_budget that cannot hold one copy
 * of each block this host mirrors.  0 or KN_E* with the reason in err
 * (PR_ERR_LEN); n->mirror is set either way (NULL with mirrors = 0 or
 * a SOMA run: then nothing is mirrored). */
int mr_start(struct node *n, char *err);
void mr_free(mr_state *m);
/* The peer at line peer named its checkpoint (the peer watch): pulled
 * when newer than the copy held of a block this host mirrors. */
void mr_on_checkpoint(mr_state *m, int peer, int64_t step, int64_t round,
    const char *sha256);
/* The copies held, for /v1/status; NULL with none to report. */
json_t *mr_status_json(const mr_state *m);

/* The routes (api.c's table; ctx is the node).
 * GET /v1/mirrors/{b}: what copy of block b is held (JSON), 404 none;
 * GET /v1/mirrors/{b}/checkpoint and .../optimizer: its files;
 * GET /v1/blocks/{b}/optimizer: this host's own optimizer state. */
void mr_api_mirror(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m);
void mr_api_mirror_checkpoint(void *ctx, const hs_request *req,
    hs_response *res, const hr_match *m);
void mr_api_mirror_optimizer(void *ctx, const hs_request *req,
    hs_response *res, const hr_match *m);
void mr_api_optimizer(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m);

#endif
