/* The C client of the inference pipeline: connects to the entry host,
 * over mutual TLS pinned to its peer id (tls.h) or plain TCP when the
 * hosts run insecure, sends requests (several may be in flight on one
 * connection, told apart by id) and reads their answers, each with a
 * bounded wait.  Used by `shardmeter generate --peers`, the tests and
 * scripts/bench/pipeline. */
#ifndef SM_PIPELINE_CLIENT_H
#define SM_PIPELINE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/net/tls.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "kernels/error.h"
#include "proto/pipeline.h"

typedef struct pc_conn pc_conn;

/* Its codes in the list of kernels/error.h: no answer within the wait. */
#define PC_ETIMEDOUT KN_E_PC_TIMEDOUT

typedef struct {
	pl_mode mode;
	const char *prompt;
	size_t prompt_len;
	int length;             /* output bytes */
	int steps;              /* denoising steps (blocktrain) */
	double temperature;
	uint64_t seed;
	/* blocktrain: the position block the run must have (the window
	 * when it has none); 0 takes the run's, whatever it is */
	int pos_block;
	/* blocktrain: 1 + the decoder's index in pr_decoders; 0 takes the
	 * run's default ([generate] decode) */
	int decode;
} pc_request;

typedef struct {
	uint64_t id;
	int ok;                 /* 0: error says why */
	unsigned char *output;  /* length bytes, malloc'd */
	size_t len;
	char error[PL_MSG_LEN];
	uint64_t compute_us;    /* compute on the hosts, summed */
	int hops;               /* frames between hosts and client */
	int traversals;
	size_t frame_bytes;     /* the answer's frame on the wire */
} pc_result;

/* addr is host:port (a name or a numeric address).  With tls, mutual TLS
 * presenting tls's identity (an operator's, tls_ctx_new on its
 * directory), the host pinned to pin (its peer id from the host list);
 * with tls NULL, plain TCP.  timeout_ms bounds the connection, and then
 * the handshake. */
int pc_connect(pc_conn **out, const char *addr, tls_ctx *tls,
    const uint8_t *pin, int timeout_ms, char *err);
void pc_close(pc_conn *c);
/* Any frame as it is (its id the caller's); and the next frame, whatever
 * its type, decoded strictly into f (the caller clears it).  For the
 * frames that are not a generation request's: SOMA's score and step. */
int pc_send_frame(pc_conn *c, const pl_frame *f, char *err);
int pc_recv_frame(pc_conn *c, pl_frame *f, int timeout_ms, char *err);
/* The address given to pc_connect. */
const char *pc_addr(const pc_conn *c);
/* Sends r under a new id (in *id). */
int pc_send(pc_conn *c, const pc_request *r, uint64_t *id, char *err);
/* The next answer, whatever its id; PC_ETIMEDOUT when none comes within
 * timeout_ms, KN_EIO when the host closed the connection (or, over TLS,
 * refused our identity: err says so). */
int pc_recv(pc_conn *c, pc_result *res, int timeout_ms, char *err);
void pc_result_clear(pc_result *res);
/* One request on a connection of its own (tls and pin as pc_connect's). */
int pc_generate(const char *addr, tls_ctx *tls, const uint8_t *pin,
    const pc_request *r, pc_result *res, int timeout_ms, char *err);

/* Entry failover: any host of a list's first blocks is an entry.  A
 * connection to the first entry, from line first on (then round to the
 * list's first), that connects within timeout_ms and, over TLS pinned
 * to its line's id when the list has ids (tls the identity to present;
 * NULL: plain TCP), finishes its handshake; *which (may be NULL) its
 * line.  err names every entry tried when none did. */
int pc_connect_entry(pc_conn **out, const ph_list *hosts, int first,
    tls_ctx *tls, int timeout_ms, int *which, char *err);
/* One request to the ring of hosts: sent to each entry in turn while the
 * one tried is down (no connection, or it closed ours before the
 * answer); an answer, even an error, or a wait past timeout_ms ends it.
 * The request's seed makes the output the same wherever it ran. */
int pc_generate_entries(const ph_list *hosts, tls_ctx *tls,
    const pc_request *r, pc_result *res, int timeout_ms, char *err);

#endif
