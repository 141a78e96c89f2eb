/* A completion's JSON body (POST /v1/completions on the pipeline port),
 * read without HTTP or a socket: serve_http.c's handler reads each body
 * the server has bounded through it, tests/fuzz/fuzz_completions.c a
 * fuzzer's.  Every field is checked (the window, the steps, each integer
 * through proto/intcheck.h) before it is used. */
#ifndef SM_SERVE_REQUEST_H
#define SM_SERVE_REQUEST_H

#include <stddef.h>

#include "proto/pipeline.h"
#include "proto/spec.h"

#define SR_MAX_BODY ((size_t)1 << 20)       /* a completion's JSON */
#define SR_MAX_TOKENS_DEFAULT 64            /* as shardmeter generate */
/* The OpenAI fields' bounds: choices of one completion (each a request
 * of the ring), stop strings and their bytes (a stop string longer than
 * the window could never match), alternatives per byte of logprobs. */
#define SR_N_MAX 8
#define SR_STOP_MAX 4
#define SR_STOP_LEN 256
#define SR_LOGPROBS_MAX PL_LOGPROBS_MAX

/* What a completion asks beyond its gen frame: the OpenAI fields the
 * entry itself applies to the ring's answers. */
typedef struct {
	int stream;
	int include_usage;      /* stream_options.include_usage */
	int n;                  /* choices, 1 to SR_N_MAX */
	int echo;               /* the prompt before each choice's text */
	int logprobs;           /* alternatives per byte; -1: no logprobs */
	int nstop;
	char stop[SR_STOP_MAX][SR_STOP_LEN];
	size_t stop_len[SR_STOP_MAX];
	/* a refusal's field and code for the OpenAI error (NULL: none) */
	const char *param, *code;
} sr_opts;

/* The JSON body of POST /v1/completions (len bytes at body) as the gen
 * frame it asks of the ring, every field checked against the spec: the
 * prompt and max_tokens within the window, steps within PL_STEPS_MAX,
 * model (when given) equal to model.  The OpenAI fields the entry does
 * not serve, where they would change the answer, are refused by name.
 * 0 with *f (its data owned) and *o set, or the HTTP status of the
 * refusal (400; 404 for another model; 503 when out of memory) with the
 * reason in msg, o->param and o->code, and f cleared. */
int sr_completion(const char *body, size_t len, const pr_spec *spec,
    const char *model, pl_frame *f, sr_opts *o, char *msg, size_t msglen);

#endif
