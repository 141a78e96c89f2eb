/* The pipeline port's HTTP requests and a completion's JSON body, read
 * without a socket: serve_http.c feeds each connection's bytes through
 * it, tests/fuzz/fuzz_completions.c a fuzzer's.  Every bound (header and
 * body bytes, the window, the steps) is checked here before a byte is
 * kept or an integer is used. */
#ifndef SM_SERVE_REQUEST_H
#define SM_SERVE_REQUEST_H

#include <stddef.h>

#include <http_parser.h>

#include "proto/pipeline.h"
#include "proto/spec.h"

#define SR_MAX_HEADER ((size_t)16 * 1024)   /* target and header lines */
#define SR_MAX_BODY ((size_t)1 << 20)       /* a completion's JSON */
#define SR_MAX_TOKENS_DEFAULT 64            /* as shardmeter generate */

/* One request being read, then answered; the next one waits for
 * sr_next. */
typedef struct {
	http_parser parser;
	size_t header_bytes;
	char url[1024];
	size_t url_len;
	char *body;
	size_t body_len;
	int begun;              /* a request's first byte has come */
	int complete;           /* a whole request waits to be answered */
	int close_after;        /* Connection: close, or HTTP/1.0 */
	int in_field;           /* within a header's name */
	int too_large;          /* past a bound: 413 */
} sr_request;

void sr_init(sr_request *q);
/* Parses up to n bytes at p, taking *used of them: all, unless a request
 * ended before them (q->complete: the rest is for after its answer).
 * 0, or the HTTP status (400, 413) of bytes that are no request, with
 * the reason in msg; the connection then closes. */
int sr_execute(sr_request *q, const char *p, size_t n, size_t *used,
    char *msg, size_t len);
/* The request is answered: the next may come (its body goes). */
void sr_next(sr_request *q);
void sr_free(sr_request *q);
/* The length of the target before its query; the method (http_method). */
size_t sr_path_len(const sr_request *q);
int sr_method(const sr_request *q);

/* The JSON body of POST /v1/completions (len bytes at body) as the gen
 * frame it asks of the ring, every field checked against the spec: the
 * prompt and max_tokens within the window, steps within PL_STEPS_MAX.
 * 0 with *f (its data owned) and *stream set, or the HTTP status of the
 * refusal (400, or 503 when out of memory) with the reason in msg and f
 * cleared. */
int sr_completion(const char *body, size_t len, const pr_spec *spec,
    pl_frame *f, int *stream, char *msg, size_t msglen);

#endif
