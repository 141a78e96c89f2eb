/* The pipeline's host list: which host serves which blocks, in traversal
 * order (the first line is the entry host that takes client requests;
 * consecutive lines of the same blocks are hosts of one stage, each of
 * which can do its work, and every host of the first is an entry),
 * each host's peer id that TLS pins its links to, the operators allowed
 * at the entry ("client PEER-ID [name]"), and optionally a logical shape
 * served with seeded random weights.  Read by blocktraind -S and by
 * `shardmeter generate --peers`; the format is in blocktrain.conf(5) and
 * proto/PROTOCOL.md. */
#ifndef SM_PIPELINE_HOSTS_H
#define SM_PIPELINE_HOSTS_H

#include "daemon/core/conf.h"
#include "daemon/core/identity.h"
#include "daemon/core/peers.h"
#include "kernels/model.h"
#include "proto/spec.h"

#define PH_MAX_HOSTS 64

typedef struct {
	char host[CF_HOST_LEN];
	int port;
	char addr[CF_HOST_LEN + 8];     /* as written */
	int block_hi, block_lo;         /* blocks served, 1-based, hi >= lo */
	int layer_lo, layer_hi;         /* causal LM layers [lo, hi) served */
	int stage;                      /* its blocks' place in the ring,
					 * from 0 (the entries) */
	int expert_lo, expert_hi;       /* SOMA: experts [lo, hi] served */
	int has_id;
	uint8_t id[ID_BYTES];           /* its peer id, when has_id */
	char id_text[ID_LEN];           /* the same printed, "" without */
} ph_host;

typedef struct {
	ph_host v[PH_MAX_HOSTS];
	int n;
	/* "shape width=W heads=H layers=L window=N blocks=T [seed=S]
	 * [storage=f32|f16] [position_block=P]" */
	int logical;
	int width, heads, layers_per_block, window, blocks;
	int pos_block;                  /* position_block=L, 0 without */
	unsigned long long seed;
	int f16;                        /* weights in fp16 storage */
	peers_client *clients;          /* the operators of "client" lines */
	int nclients;
	int missing_ids;                /* host lines without a peer id */
	/* the stages: lines of the same blocks, listed together; stage s
	 * is lines stage_first[s] .. stage_first[s + 1] - 1 (BlockTrain
	 * lists; a SOMA list has none) */
	int nstages;
	int stage_first[PH_MAX_HOSTS + 1];
	/* SOMA: host lines "host:port experts=E[-F] PEER-ID", each host
	 * on its own (no ring), experts numbered from 0 */
	int soma;
} ph_list;

/* Reads path and checks that the blocks run from T down to 1: each line
 * starts one block below where the line before ended, or serves exactly
 * the blocks of the line before (one more host of that stage), so every
 * block is served by one host or more; the causal LM's layers (the sum
 * of the blocks') are then split evenly over the stages in the same
 * order, each host of a stage taking its stage's.  The blocks and their layers
 * are the run's (from its spec) unless the file gives a logical shape.  A peer id may appear
 * only once (host or client line).  0 or KN_E* with "file:line: reason"
 * in err; on success the caller ph_free()s pl. */
int ph_load(ph_list *pl, const char *path, char *err);
void ph_free(ph_list *pl);
/* Fills layer ranges for the causal LM of s (pr_spec_total_layers). */
int ph_assign(ph_list *pl, const pr_spec *s, char *err);
/* The spec a logical shape stands for: defaults, its shape, equal cuts. */
void ph_logical_spec(const ph_list *pl, pr_spec *s);
/* The hosts of stage st (from 0): how many, the first's line. */
int ph_stage_size(const ph_list *pl, int st);
/* Index of the host whose address is addr, or -1. */
int ph_find(const ph_list *pl, const char *addr);
/* Index of the host, or of the client, whose peer id is id, or -1. */
int ph_find_id(const ph_list *pl, const uint8_t id[ID_BYTES]);
int ph_client_find(const ph_list *pl, const uint8_t id[ID_BYTES]);
/* SOMA: that the hosts serve experts 0 .. N-1, each exactly once. */
int ph_soma_check(const ph_list *pl, int N, char *err);
/* SOMA: the host serving expert e, or -1. */
int ph_expert_host(const ph_list *pl, int e);

#endif
