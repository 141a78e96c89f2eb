/* The planner's cost model: for one candidate (placement, scheduling and
 * network options) on a topology, the predicted step and round time of
 * each block, positions/s, bytes per link per hour, time to the run's
 * steps, and the inference pipeline's latency and output rate, each with
 * its breakdown.  It mirrors what the daemon does (daemon/rounds/rounds.c,
 * daemon/node/worker.c, the pipeline in proto/PROTOCOL.md); shardmeter(1)
 * states every assumption.  Pure arithmetic: no I/O, no clock. */
#ifndef PN_COST_H
#define PN_COST_H

#include "proto/topology.h"
#include "proto/spec.h"
#include "proto/update.h"

/* the topology's bound: search.c sizes its per-host arrays by it */
#define PN_MAX_HOSTS TOPO_MAX_HOSTS
#define PN_MAX_REPLICAS 64      /* rounds.c's ROUNDS_MAX_REPLICAS */
/* rounds.c polls the coordinator for the commit every POLL_MS */
#define PN_POLL_S 0.1
/* the pipeline's denoising steps per request (shardmeter generate's default) */
#define PN_SERVE_STEPS 64
/* a pipeline frame's fixed bytes beside its payload (PROTOCOL.md) */
#define PN_FRAME_BYTES 150
/* hosts of one block in the serving ring at most (shardmeter plan
 * --serve-replicas) */
#define PN_MAX_SERVE 8

/* The update encodings (proto/update.h's pr_encoding, which the daemon's
 * update_encoding names) are 0 .. PN_ENCS - 1. */
#define PN_ENCS (PR_ENC_INT8 + 1)

/* One way to run the spec. */
typedef struct {
	int blocks;                             /* T, the spec's */
	int layers[PR_MAX_BLOCKS];              /* L_b, block b (0-based) */
	int nrep[PR_MAX_BLOCKS];                /* replicas of block b */
	/* host indices; [b][0] is replica 0, the round's coordinator */
	int host[PR_MAX_BLOCKS][PN_MAX_REPLICAS];
	int steps;                              /* each replica's steps */
	int local_steps;                        /* H */
	int overlap;                            /* rounds overlap compute */
	pr_encoding enc;
	int zstd;                               /* updates zstd-compressed */
	int streams;                            /* TCP streams per transfer */
	/* serving: the host of each block in the pipeline ring, -1: none;
	 * a request takes it while it is up */
	int ring[PR_MAX_BLOCKS];
	/* the other hosts of block b in the ring, in the order a request
	 * is re-sent to them when ring[b] is down (the pipeline host
	 * list's later lines of that block); nalt[b] 0: ring[b] alone */
	int nalt[PR_MAX_BLOCKS];
	int alt[PR_MAX_BLOCKS][PN_MAX_SERVE - 1];
} pn_candidate;

/* Where time goes, in seconds; the parts add up to the whole. */
typedef struct {
	double compute;         /* the fastest replica's steps */
	double straggler;       /* waiting for the slowest replica */
	double transfer;        /* bytes over the links' rates */
	double latency;         /* round trips and the commit poll */
} pn_breakdown;

typedef struct {
	double step_s;          /* the slowest replica's step */
	double exchange_s;      /* a round's exchange, after the last step */
	double round_cpu_s;     /* the slowest replica's own round work
	                         * (pn_exchange_cpu_s), in its steps */
	double round_s;         /* one round's period (H steps and what
	                         * of the exchange is not hidden); one
	                         * replica: H steps */
	pn_breakdown round;     /* round_s in parts */
	double update_bytes;    /* one replica's encoded update */
	double positions_per_s; /* all replicas together */
	double train_s;         /* to the candidate's steps */
	pn_breakdown train;     /* train_s in parts */
} pn_block_pred;

typedef struct {
	double latency_s;       /* one request, one output */
	pn_breakdown part;      /* latency_s: compute and network */
	double bytes_per_s;     /* output bytes/s with the ring saturated */
} pn_serve_mode;

/* One host of the ring lost: it dies as a request's frame reaches it.
 * The host before it (the client, for the entry) re-sends the frame to
 * the block's next host, which computes the block and sends on; the
 * hop to the lost host was already paid.  Losing a host that is not
 * the one a request takes changes nothing; losing a block's only host
 * fails the ring. */
typedef struct {
	int host;               /* the host lost, -1: none */
	int block;              /* its block, 0-based */
	int fails;              /* no other host of its block: the ring fails */
	int via;                /* the host that takes its frame, -1: none */
	double latency_s;       /* one request, one output, re-routed */
	pn_breakdown part;      /* latency_s: compute and network */
} pn_serve_loss;

/* One training replica lost for the whole run: its block goes on with
 * the others (the next in the block's order coordinating when it was
 * replica 0), each still training the candidate's steps; a block's only
 * replica lost stops that block (until a host takes it over). */
typedef struct {
	int host;               /* the host lost, -1: none */
	int block;              /* its block, 0-based */
	int halts;              /* it was its block's only replica */
	double round_s;         /* that block's round without it */
	double positions_per_s; /* all blocks together */
	double train_s;         /* to every block's steps; 0 when halts */
} pn_train_loss;

typedef struct {
	pn_block_pred block[PR_MAX_BLOCKS];
	int slowest;                    /* the block that decides train_s */
	double train_s;                 /* to every block's steps */
	double positions_per_s;         /* all blocks together */
	double max_link_bytes_per_h;    /* the busiest link */
	int serve;                      /* the ring was set: below is valid */
	pn_serve_mode bt;               /* blocktrain: one traversal */
	pn_serve_mode ar;               /* causal LM: one traversal per byte */
	int output_bytes;               /* of the serve predictions */
	/* serve: the host of the ring whose loss hurts most (a failed
	 * ring first, then the slowest traversal; pn_serve_loss_of gives
	 * each); host -1 without a ring */
	pn_serve_loss serve_lost;
	/* training: the replica whose loss hurts most, after
	 * pn_predict_train_loss (host -1 before) */
	pn_train_loss train_lost;
} pn_prediction;

/* What the model needs beyond the topology and the spec. */
typedef struct {
	/* zstd's size ratio (compressed/raw) per encoding; 1: none */
	double zstd_ratio[PN_ENCS];
	/* an update message's bytes beside its payload, for one value of
	 * each encoding uncompressed in a long run's round and step,
	 * measured with proto/update.c's encoder */
	double update_head[PN_ENCS];
} pn_model;

void pn_model_defaults(pn_model *m);

/* Parameters of a block of the spec's shape with layers layers (kernels'
 * count); every block differs from another only in its layers. */
size_t pn_block_params(const pr_spec *s, int layers);
/* Bytes of one encoded update of count parameters: the payload as
 * pr_update_payload_bytes counts it, times zstd's ratio when compressed
 * (the encoder sends it uncompressed when the ratio is not below 1),
 * and the message's head for that count, payload and compression. */
double pn_update_bytes(const pn_model *m, size_t count, pr_encoding enc,
    int zstd);
/* Bytes/s of a link with n parallel streams: the measured single and
 * multi figures, linear between 1 and the measured count, flat beyond. */
double pn_link_rate(const topo_link *l, int streams);
/* A host's training positions/s on a block of layers layers in
 * candidate c: its measured rate scaled by FLOPs per position against
 * the topology's measured shape; where hosts share its machine and the
 * topology has their shared rates, slowed by those c trains too
 * (pn_shared_rate).  c may be NULL: the rate alone. */
double pn_train_rate(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, int host, int layers);
/* A host's measured training rate in candidate c (NULL: alone): with a
 * of the m hosts of its machine that have a shared rate training in c,
 * alone - (alone - shared) (a - 1) / (m - 1); alone where it has no
 * shared rate or its machine no other such host. */
double pn_shared_rate(const topo_topology *t, const pn_candidate *c,
    int host);
/* Seconds of a round a replica on host loses to its own round work, the
 * CPU its steps would have had: sending its update of update_bytes to
 * the replicas - 1 others and taking theirs (exchange_cpu a byte sent
 * and a byte taken), encoding it (encode_cpu a parameter of params) and
 * merging every replica's (merge_cpu each), all over its cpu_share; 0
 * with one replica, or where the topology gives no cpu_share (a GPU
 * host, whose steps do not wait on the CPU, or a file without it).  The
 * model spreads it over the round's steps. */
double pn_exchange_cpu_s(const topo_topology *t, int host,
    double update_bytes, double params, int replicas);
/* A host's forward positions/s on a block of layers layers: its
 * measured rate, scaled as pn_train_rate's. */
double pn_forward_rate(const topo_topology *t, const pr_spec *s, int host,
    int layers);

/* The forward passes block (0-based) is expected to run in one
 * traversal of steps denoising steps that generates outputs positions:
 * its steps that unmask at least one of them (the others are skipped). */
double pn_bt_passes(const pr_spec *s, int steps, int block, int outputs);

/* Predicts c, the ring with each of its hosts lost too.  0, or
 * KN_EINVAL with the reason (a host used twice, a host out of range,
 * steps not a multiple of H with replicas, a host twice in the ring). */
int pn_predict(const topo_topology *t, const pr_spec *s, const pn_model *m,
    const pn_candidate *c, pn_prediction *p, char *err);

/* Host k of block b's ring hosts (0: c->ring[b], then c->alt[b][k - 1])
 * lost, p being pn_predict's for c. */
void pn_serve_loss_of(const topo_topology *t, const pr_spec *s,
    const pn_candidate *c, const pn_prediction *p, int b, int k,
    pn_serve_loss *loss);

/* The training replica whose loss for the whole run hurts most into
 * p->train_lost, p being pn_predict's for c: a block left without a
 * replica first, else the longest time to the steps (then the fewest
 * positions/s).  Apart from pn_predict, which the search calls in its
 * inner loops, as it predicts the run once for every replica. */
void pn_predict_train_loss(const topo_topology *t, const pr_spec *s,
    const pn_model *m, const pn_candidate *c, pn_prediction *p);

/* Block b of c alone, its c->layers[b] layers on its hosts (which
 * pn_predict checks first): what pn_predict gives as p->block[b]. */
void pn_predict_block(const topo_topology *t, const pr_spec *s,
    const pn_model *m, const pn_candidate *c, int b, pn_block_pred *bp);

/* Bytes per hour each link carries in training, [from * n + to]
 * (t->n x t->n doubles, written whole). */
void pn_link_bytes(const topo_topology *t, const pn_candidate *c,
    const pn_prediction *p, double *bytes_per_h);

#endif
