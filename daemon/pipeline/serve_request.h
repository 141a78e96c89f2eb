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

/* The JSON body of POST /v1/completions (len bytes at body) as the gen
 * frame it asks of the ring, every field checked against the spec: the
 * prompt and max_tokens within the window, steps within PL_STEPS_MAX.
 * 0 with *f (its data owned) and *stream set, or the HTTP status of the
 * refusal (400, or 503 when out of memory) with the reason in msg and f
 * cleared. */
int sr_completion(const char *body, size_t len, const pr_spec *spec,
    pl_frame *f, int *stream, char *msg, size_t msglen);

#endif
