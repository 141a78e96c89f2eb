/* The entry of SOMA inference (DESIGN section 3), in the client: routes a
 * request on its first route_bytes bytes to its k = min(top_k, N)
 * experts, asks them in parallel and mixes their next-byte distributions
 * (the uniform average of probabilities).  The experts are either in this
 * process or on serving hosts (blocktraind -S with a SOMA spec, reached
 * over the pipeline's mutual TLS with pipeline_client.h); both give the
 * same bytes for a seed and the same scores.  Used by `shardmeter
 * generate --mode soma`, the tests and scripts/bench/soma-serve. */
#ifndef SM_SOMA_CLIENT_H
#define SM_SOMA_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/pipeline/pipeline_hosts.h"
#include "daemon/net/tls.h"
#include "kernels/backend.h"
#include "proto/spec.h"
#include "soma/mixture.h"
#include "soma/router.h"

typedef struct sq_experts sq_experts;

typedef struct {
	double route_s;         /* routing, all requests of the call */
	double wall_s;          /* the whole call, routing included */
	uint64_t rounds;        /* round trips to the hosts (0 in process) */
	uint64_t compute_us;    /* compute the hosts report */
	uint64_t frames;        /* requests sent to hosts */
	int k;                  /* experts per request */
	int experts[SA_ROUTE_TOP * 4];  /* generate: those picked, nearest
	                                 * first (the first 16) */
} sq_stats;

/* All N experts of the run in this process, from dir/expert-E.ckpt. */
int sq_open_local(sq_experts **out, const pr_spec *s, const char *run_id,
    const char *dir, const kn_backend *be, char *err);
/* The experts on the hosts of a SOMA host list (ph_soma_check'ed against
 * the spec here), over TLS as tls's identity pinned to each host's id
 * (tls NULL: plain TCP, for insecure hosts).  Hosts are connected when
 * first needed; timeout_ms bounds each connection and each answer. */
int sq_open_served(sq_experts **out, const pr_spec *s, const ph_list *hosts,
    tls_ctx *tls, int timeout_ms, char *err);
void sq_close(sq_experts *x);

/* length bytes after prompt (plen >= 1) into out: routed on the prompt,
 * then sampled one byte at a time from the mixture at temperature temp
 * (0: the most likely byte), uniforms from seed.  Served: one parallel
 * round per byte (each selected expert's host gets the new byte and
 * answers with its distribution); the hosts keep the LSTM states. */
int sq_generate(sq_experts *x, const sa_router *r, const char *prompt,
    size_t plen, int length, double temp, uint64_t seed,
    unsigned char *out, sq_stats *st, char *err);
/* The routed mixture's mean nats per byte over the windows of w, as
 * shardmeter eval computes it: each window routed on the route_bytes
 * before it, scored by its experts (served: one request per selected
 * expert for all its windows, all sent before any answer is read). */
int sq_score(sq_experts *x, const sa_router *r, const sa_windows *w,
    double *nats, sq_stats *st, char *err);

#endif
