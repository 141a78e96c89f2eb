/* HTTP on the pipeline host's own port: GET /v1/status and, at the entry,
 * POST /v1/completions in the shape OpenAI-style clients send, answered
 * whole or as server-sent events.  A connection whose first byte is a
 * method's capital letter speaks HTTP (no frame length starts with one):
 * serve_conn.c keeps its TLS, peer kind, an open entry's limits and byte
 * counts, and feeds its plaintext to the daemon's one HTTP server
 * (daemon/net/http_server.h) as a link, whose handlers are here.  The
 * answer of a completion comes later from the ring: its handler defers
 * it, and the ring's answer, failure or progress finishes or streams it
 * through the request's sv_reply_ops.  A completion's JSON is read, and
 * bounded, by serve_request.c. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "daemon/core/log.h"
#include "daemon/net/http_route.h"
#include "daemon/net/http_server.h"
#include "daemon/pipeline/internal.h"
#include "daemon/pipeline/serve_logprobs.h"
#include "daemon/pipeline/serve_request.h"
#include "kernels/error.h"

/* As the pipeline port read HTTP before it had the daemon's server: a
 * request's headers and body, and a stalled one's time. */
#define SH_MAX_HEADER ((size_t)16 * 1024)
#define SH_STALL_MS 10000u

/* One choice of a completion: a request of the ring, and what of its
 * output went out (streamed) or is kept for the answer. */
typedef struct {
	uint64_t id;            /* the ring's request */
	int done;               /* answered, cut at a stop string, or failed */
	const char *finish;     /* "stop" or "length" once done */
	unsigned char *out;     /* the output kept (its len bytes) */
	size_t len;
	size_t sent;            /* output bytes streamed so far */
	size_t text_sent;       /* of which their text carried */
	int echoed;             /* the prompt went before its text */
	/* logprobs kept with out (the request's lpk figures and lpk - 1
	 * bytes a byte; NULL: none asked) */
	float *lp;
	unsigned char *lpb;
} sh_choice;

/* A connection's HTTP side: its link to the server, and the completion
 * waiting for the ring (one at a time: the server reads nothing the
 * client pipelined after it until it is answered), with its choices. */
struct sh_conn {
	hs_link *link;          /* NULL once the server let go of it */
	hs_deferred *d;         /* the completion's answer, or NULL */
	int head_sent;          /* the event stream's status line is out */
	sr_opts o;
	unsigned char *prompt;  /* for echo */
	int plen;
	uint64_t id;
	long long created;
	int n, done;
	sh_choice ch[SR_N_MAX];
};

/* Text for JSON ---------------------------------------------------------- */

/* Length of the UTF-8 sequence at p (n bytes there): 1 to 4; 0 when p
 * does not start a valid one; -1 when it would, were it not cut off. */
static int
utf8_len(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;
	int len, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		lo = c == 0xE0 ? 0xA0 : 0x80;
		hi = c == 0xED ? 0x9F : 0xBF;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		lo = c == 0xF0 ? 0x90 : 0x80;
		hi = c == 0xF4 ? 0x8F : 0xBF;
	} else
		return 0;
	for (i = 1; i < len; i++) {
		if ((size_t)i >= n)
			return -1;
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF))
			return 0;
	}
	return len;
}

/* How many of the n bytes at p can go out as text now: all but an
 * unfinished UTF-8 sequence at the end, which waits for its rest. */
static size_t
utf8_whole(const unsigned char *p, size_t n)
{
	size_t i = 0;
	int k;

	while (i < n) {
		if ((k = utf8_len(p + i, n - i)) < 0)
			return i;
		i += k > 0 ? (size_t)k : 1;
	}
	return n;
}

/* The bytes as a JSON string: valid UTF-8 as it is, every other byte as
 * U+FFFD (what a client shows); the exact bytes go beside it in base64. */
static json_t *
text_json(const unsigned char *p, size_t n)
{
	char *u = malloc(3 * n + 1);
	size_t i = 0, o = 0;
	json_t *j;
	int k;

	if (u == NULL)
		return NULL;
	while (i < n) {
		if ((k = utf8_len(p + i, n - i)) > 0) {
			memcpy(u + o, p + i, (size_t)k);
			o += (size_t)k;
			i += (size_t)k;
		} else {
			memcpy(u + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	j = json_stringn_nocheck(u, o);
	free(u);
	return j;
}

static json_t *
base64_json(const unsigned char *p, size_t n)
{
	char *b = malloc(4 * ((n + 2) / 3) + 1);
	json_t *j;

	if (b == NULL)
		return NULL;
	EVP_EncodeBlock((unsigned char *)b, p, (int)n);
	j = json_string(b);
	free(b);
	return j;
}

/* Answers ----------------------------------------------------------------- */

/* A whole answer: status and a JSON text (body, malloc'd, taken; NULL:
 * out of memory), one line for a person at a terminal. */
static void
respond_body(hs_response *res, int status, char *body)
{
	size_t blen;

	if (body == NULL) {
		hs_response_text(res, 503, "out of memory");
		return;
	}
	blen = strlen(body);
	body[blen] = '\n';
	if (hs_response_status(res, status) == 0)
		hs_response_body_owned(res, "application/json", body, blen + 1);
	else
		free(body);
}

/* The same with o (taken) as the body. */
static void
respond_json(hs_response *res, int status, json_t *o)
{
	char *body = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	respond_body(res, status, body);
}

/* An error the way OpenAI-style clients read it: the field it is
 * about and a code, when there are (NULL: null). */
static json_t *
error_json_full(int status, const char *msg, const char *param,
    const char *code)
{
	const char *type = status == 401 ? "authentication_error" :
	    status < 500 ? "invalid_request_error" : "server_error";

	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg,
	    "type", type, "param", param ? json_string(param) : json_null(),
	    "code", code ? json_string(code) : json_null());
}

static json_t *
error_json(int status, const char *msg)
{
	return error_json_full(status, msg, NULL, NULL);
}

static void
respond_error(hs_response *res, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
respond_error(hs_response *res, int status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	respond_json(res, status, error_json(status, msg));
}

/* Whether c's completion waits for the ring (the server has not let go
 * of it). */
static sh_conn *
waiting(conn *c)
{
	return c->closing || c->http == NULL || c->http->d == NULL ? NULL :
	    c->http;
}

/* The choice of h that request r is, while it runs: NULL for one done,
 * or of a completion answered before. */
static sh_choice *
choice_of(sh_conn *h, const request *r)
{
	int i;

	for (i = 0; i < h->n; i++)
		if (h->ch[i].id == r->id && !h->ch[i].done)
			return &h->ch[i];
	return NULL;
}

/* What the completion's choices kept goes. */
static void
choices_free(sh_conn *h)
{
	int i;

	for (i = 0; i < h->n; i++) {
		free(h->ch[i].out);
		free(h->ch[i].lp);
		free(h->ch[i].lpb);
		h->ch[i].out = NULL;
		h->ch[i].lp = NULL;
		h->ch[i].lpb = NULL;
	}
	h->n = h->done = 0;
	free(h->prompt);
	h->prompt = NULL;
}

/* The completion is answered: the requests of its choices still
 * running have no one to read them (no error: another choice failed,
 * or the answer went). */
static void
choices_end(sv *s, sh_conn *h)
{
	int i;

	for (i = 0; i < h->n; i++)
		if (!h->ch[i].done)
			sv_request_drop(s, h->ch[i].id);
	choices_free(h);
}

/* The completion's answer goes whole: d is the server's again. */
static void
finish(sv *s, sh_conn *h)
{
	hs_deferred *d = h->d;

	choices_end(s, h);
	h->d = NULL;
	h->head_sent = 0;
	hs_deferred_finish(d);
}

/* One server-sent event in its own chunk: "data: TEXT\n\n". */
static void
sse_event(conn *c, const char *text)
{
	sh_conn *h = waiting(c);
	size_t n = strlen(text);
	char *b;

	if (h == NULL)
		return;         /* an event before failed, and closed c */
	if ((b = malloc(n + 8)) == NULL) {
		sv_conn_close(c, "out of memory");
		return;
	}
	memcpy(b, "data: ", 6);
	memcpy(b + 6, text, n);
	memcpy(b + 6 + n, "\n\n", 2);
	hs_deferred_stream_chunk(h->d, b, n + 8);
	free(b);
}

static void
sse_json(conn *c, json_t *o)
{
	char *t = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	if (t == NULL) {
		sv_conn_close(c, "out of memory");
		return;
	}
	sse_event(c, t);
	free(t);
}

/* The last event, and the chunked body's end: d is the server's again. */
static void
sse_end(conn *c)
{
	sh_conn *h;
	hs_deferred *d;

	sse_event(c, "[DONE]");
	/* a write that failed closed c, and its HTTP side went */
	if ((h = waiting(c)) == NULL)
		return;
	d = h->d;
	choices_end(c->s, h);
	h->d = NULL;
	h->head_sent = 0;
	hs_deferred_stream_end(d);
}

/* Completions ------------------------------------------------------------ */

/* Where the first stop string of o starts in out (len bytes), or -1. */
static long
stop_at(const sr_opts *o, const unsigned char *out, size_t len)
{
	long best = -1;
	size_t i;
	int k;

	for (k = 0; k < o->nstop; k++)
		for (i = 0; i + o->stop_len[k] <= len &&
		    (best < 0 || i < (size_t)best); i++)
			if (memcmp(out + i, o->stop[k], o->stop_len[k]) == 0) {
				best = (long)i;
				break;
			}
	return best;
}

/* Of the len bytes of a choice known so far, how many may be streamed:
 * those that no stop string, found later, can begin in. */
static size_t
stop_safe(const sr_opts *o, size_t len)
{
	size_t hold = 0;
	int k;

	for (k = 0; k < o->nstop; k++)
		if (o->stop_len[k] - 1 > hold)
			hold = o->stop_len[k] - 1;
	return len > hold ? len - hold : 0;
}

/* pre bytes of the prompt, then [from, to) of out, in one buffer (NULL
 * when out of memory). */
static unsigned char *
with_prompt(const sh_conn *h, size_t pre, const unsigned char *out,
    size_t from, size_t to, size_t *n)
{
	unsigned char *b = malloc(pre + (to - from) + 1);

	if (b == NULL)
		return NULL;
	/* memcpy from a NULL prompt or output is undefined even for 0 bytes */
	if (pre > 0)
		memcpy(b, h->prompt, pre);
	if (to > from)
		memcpy(b + pre, out + from, to - from);
	*n = pre + (to - from);
	return b;
}

/* Choice i with its output bytes [sent, to) of out: their text (up to
 * text_to, an unfinished UTF-8 sequence held back while streaming) and
 * the exact bytes in base64, the prompt before both the first time when
 * the completion echoes; their logprobs from lp and lpb (indexed as
 * out) when asked. */
static json_t *
choice_json(sh_conn *h, int i, const unsigned char *out, const float *lp,
    const unsigned char *lpb, size_t to, size_t text_to, const char *finish)
{
	sh_choice *c = &h->ch[i];
	size_t pre = h->o.echo && !c->echoed ? (size_t)h->plen : 0, tn, bn;
	unsigned char *t = with_prompt(h, pre, out, c->text_sent, text_to, &tn);
	unsigned char *b = with_prompt(h, pre, out, c->sent, to, &bn);
	json_t *ch = json_object();

	if (t != NULL && b != NULL) {
		json_object_set_new(ch, "text", text_json(t, tn));
		json_object_set_new(ch, "bytes", base64_json(b, bn));
	}
	free(t);
	free(b);
	json_object_set_new(ch, "index", json_integer(i));
	json_object_set_new(ch, "logprobs", h->o.logprobs >= 0 && lp != NULL ?
	    sl_logprobs_json(h->prompt, pre, out, lp, lpb, h->o.logprobs + 1,
	    c->sent, to, h->o.echo ? (size_t)h->plen : 0) : json_null());
	json_object_set_new(ch, "finish_reason", finish ? json_string(finish) :
	    json_null());
	c->echoed = 1;
	c->sent = to;
	c->text_sent = text_to;
	return ch;
}

static json_t *
completion_json(sv *s, sh_conn *h, json_t *choices)
{
	char id[40];

	snprintf(id, sizeof(id), "cmpl-%016" PRIx64, h->id);
	return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", id, "object",
	    "text_completion", "created", (json_int_t)h->created, "model",
	    s->model_name, "choices", choices);
}

/* Output bytes of every choice, as they were cut. */
static json_t *
usage_json(const sh_conn *h)
{
	json_int_t len = 0;
	int i;

	for (i = 0; i < h->n; i++)
		len += (json_int_t)h->ch[i].len;
	return json_pack("{s:i,s:I,s:I}", "prompt_tokens", h->plen,
	    "completion_tokens", len, "total_tokens", h->plen + len);
}

/* Choice c has its output (len bytes of out, cut at a stop string or
 * not): streamed on, or kept; once every choice has its output, the
 * answer goes. */
static void
choice_done(conn *c, sh_conn *h, sh_choice *ch, const unsigned char *out,
    const float *lp, const unsigned char *lpb, size_t len,
    const char *finish_reason)
{
	int k1 = h->o.logprobs + 1;
	json_t *o, *choices;
	int i = (int)(ch - h->ch);

	ch->done = 1;
	ch->finish = finish_reason;
	ch->len = len;
	h->done++;
	if (h->head_sent) {
		o = completion_json(c->s, h, json_pack("[o]", choice_json(h, i,
		    out, lp, lpb, len, len, finish_reason)));
		/* the last choice's last event has the usage, as always,
		 * unless it comes in an event of its own */
		if (h->done == h->o.n && !h->o.include_usage)
			json_object_set_new(o, "usage", usage_json(h));
		sse_json(c, o);
		if ((h = waiting(c)) == NULL)
			return;
	} else if ((ch->out = malloc(len ? len : 1)) == NULL || (lp != NULL &&
	    ((ch->lp = malloc(len * k1 * sizeof(float) + 1)) == NULL ||
	    (ch->lpb = malloc(len * (k1 - 1) + 1)) == NULL))) {
		respond_error(hs_deferred_response(h->d), 503, "out of memory");
		finish(c->s, h);
		return;
	} else {
		memcpy(ch->out, out, len);
		if (lp != NULL) {
			memcpy(ch->lp, lp, len * k1 * sizeof(float));
			memcpy(ch->lpb, lpb, len * (k1 - 1));
		}
	}
	if (h->done < h->o.n)
		return;
	if (h->head_sent) {
		if (h->o.include_usage) {
			o = completion_json(c->s, h, json_array());
			json_object_set_new(o, "usage", usage_json(h));
			sse_json(c, o);
		}
		sse_end(c);
		return;
	}
	choices = json_array();
	for (i = 0; i < h->n; i++)
		json_array_append_new(choices, choice_json(h, i, h->ch[i].out,
		    h->ch[i].lp, h->ch[i].lpb, h->ch[i].len, h->ch[i].len,
		    h->ch[i].finish));
	o = completion_json(c->s, h, choices);
	json_object_set_new(o, "usage", usage_json(h));
	respond_json(hs_deferred_response(h->d), 200, o);
	finish(c->s, h);
}

/* A request's logprobs from its first output byte (NULL: none asked),
 * indexed as its output. */
static const float *
lp_of(const request *r)
{
	return r->lpk > 0 ? r->lp + (size_t)r->fixed * r->lpk : NULL;
}

static const unsigned char *
lpb_of(const request *r)
{
	return r->lpk > 0 ? r->lpb + (size_t)r->fixed * (r->lpk - 1) : NULL;
}

static void
reply_answer(conn *c, request *r, const unsigned char *data, size_t len)
{
	sh_conn *h = waiting(c);
	sh_choice *ch;
	long cut;

	if (h == NULL || (ch = choice_of(h, r)) == NULL)
		return;
	cut = stop_at(&h->o, data, len);
	choice_done(c, h, ch, data, lp_of(r), lpb_of(r), cut >= 0 ?
	    (size_t)cut : len, cut >= 0 ? "stop" : "length");
}

/* The status of a request that failed at the entry or round the ring. */
static int
status_of_failure(sv_err kind)
{
	switch (kind) {
	case SV_ERR_TIMEOUT: return 504;
	case SV_ERR_SHUTDOWN: return 503;
	default: return 502;
	}
}

/* A choice failed: so has the completion (the other choices' requests
 * stop). */
static void
reply_fail(conn *c, request *r, sv_err kind, const char *msg)
{
	sh_conn *h = waiting(c);
	int status = status_of_failure(kind);
	sh_choice *ch;

	if (h == NULL || (ch = choice_of(h, r)) == NULL)
		return;
	ch->done = 1;
	if (!h->head_sent) {
		respond_error(hs_deferred_response(h->d), status, "%s", msg);
		finish(c->s, h);
		return;
	}
	/* the status line has gone: the error is an event */
	sse_json(c, error_json(status, msg));
	sse_end(c);
}

/* A streamed choice decided the first known bytes of out: those a stop
 * string cannot begin in go as an event, or it is cut at one, and its
 * request stops.  partial (taken; NULL: none) is the event's view of the
 * ring.  Returns 1 when the choice is done. */
static int
choice_progress(conn *c, sh_conn *h, sh_choice *ch, request *r,
    const unsigned char *out, size_t known, json_t *partial)
{
	long cut = stop_at(&h->o, out, known);
	size_t to = stop_safe(&h->o, known);
	json_t *o;

	if (cut >= 0) {
		json_decref(partial);
		choice_done(c, h, ch, out, lp_of(r), lpb_of(r), (size_t)cut,
		    "stop");
		sv_request_drop(c->s, r->id);
		return 1;
	}
	if (to < ch->sent)
		to = ch->sent;
	if (to == ch->sent && partial == NULL && h->o.nstop > 0)
		return 0;       /* nothing new to say */
	o = completion_json(c->s, h, json_pack("[o]", choice_json(h,
	    (int)(ch - h->ch), out, lp_of(r), lpb_of(r), to, ch->text_sent +
	    utf8_whole(out + ch->text_sent, to - ch->text_sent), NULL)));
	if (partial != NULL)
		json_object_set_new(o, "partial", partial);
	sse_json(c, o);
	return 0;
}

static void
reply_partial(conn *c, request *r, const unsigned char *data,
    const unsigned char *mask, int next_block, int host)
{
	sh_conn *h = waiting(c);
	const ph_host *by = &c->s->hosts.v[host - 1];
	size_t n = (size_t)(r->end - r->fixed), known = 0, i;
	unsigned char *out;
	json_t *partial, *masked;
	sh_choice *ch;

	if (h == NULL || !h->head_sent || r->end < r->fixed ||
	    (ch = choice_of(h, r)) == NULL || (out = malloc(n + 1)) == NULL)
		return;
	/* decided positions stay decided: the prefix decided so far is
	 * the output's, the rest of the window is shown as it stands */
	masked = json_array();
	for (i = 0; i < n; i++) {
		out[i] = mask[r->fixed + i] ? 0 : data[r->fixed + i];
		if (mask[r->fixed + i])
			json_array_append_new(masked, json_integer((json_int_t)i));
		else if (known == i)
			known = i + 1;
	}
	partial = json_pack("{s:i,s:s,s:[i,i],s:i,s:o,s:o}", "host", host,
	    "addr", by->addr, "blocks", by->block_hi, by->block_lo,
	    "next_block", next_block, "bytes", base64_json(out, n), "masked",
	    masked);
	choice_progress(c, h, ch, r, out, known, partial);
	free(out);
}

static void
reply_partial_byte(conn *c, request *r, int pos)
{
	sh_conn *h = waiting(c);
	sh_choice *ch;

	if (h == NULL || !h->head_sent || (ch = choice_of(h, r)) == NULL)
		return;
	choice_progress(c, h, ch, r, r->seq + r->fixed,
	    (size_t)(pos - r->fixed) + 1, NULL);
}

/* How serve.c answers a completion's request. */
static const sv_reply_ops completion_reply = {
	.answer = reply_answer,
	.fail = reply_fail,
	.partial = reply_partial,
	.partial_byte = reply_partial_byte,
};

static int
status_of_kind(sv_err kind)
{
	switch (kind) {
	case SV_ERR_INVALID: return 400;
	case SV_ERR_LIMIT: return 429;
	case SV_ERR_MEMORY: return 503;
	default: return 503;
	}
}

/* The server lets go of c's completion before its answer (the client
 * went, a timeout, shutdown): the requests lose their client, so their
 * work stops at the next housekeeping, here and round the ring. */
static void
completion_gone(void *arg)
{
	conn *c = arg;

	if (c->http != NULL) {
		c->http->d = NULL;
		c->http->head_sent = 0;
		choices_free(c->http);
	}
	if (!c->closing)
		sv_conn_close(c, NULL);
}

/* A completion's body refused: its status, and the OpenAI error with the
 * field it is about. */
static void
refuse_completion(sv *s, hs_response *res, int status, const char *msg,
    const sr_opts *o)
{
	sv_count_error(s, status == 503 ? SV_ERR_MEMORY : status == 429 ?
	    SV_ERR_LIMIT : SV_ERR_INVALID);
	respond_json(res, status, error_json_full(status, msg, o->param,
	    o->code));
}

/* Starts the o.n requests of a completion, each its own seed (the
 * request's, plus the choice's index); what f owns stays f's. */
static void
start_choices(sv *s, conn *c, sh_conn *h, pl_frame *f)
{
	uint64_t seed = f->seed;
	char msg[PL_MSG_LEN];
	sv_err kind;
	int i;

	for (i = 0; i < h->o.n; i++) {
		sh_choice *ch = &h->ch[h->n++];

		ch->id = s->next_id;    /* the ring's id of the request */
		f->seed = seed + (uint64_t)i;
		if (sv_start_request(s, c, f, &completion_reply, h->o.stream,
		    msg, sizeof(msg), &kind) != 0) {
			ch->done = 1;
			if (waiting(c) != NULL) {
				respond_error(hs_deferred_response(h->d),
				    status_of_kind(kind), "%s", msg);
				finish(s, h);
			}
			return;
		}
		/* answered already (out of memory) */
		if (waiting(c) == NULL)
			return;
	}
}

static void
post_completions(sv *s, conn *c, const hs_request *req, hs_response *res)
{
	sh_conn *h = c->http;
	pl_frame f;
	char msg[PL_MSG_LEN];
	sr_opts o;
	int status;

	if (s->soma != NULL) {
		sv_count_error(s, SV_ERR_REFUSED);
		respond_error(res, 404, "a SOMA host serves no completions: its "
		    "clients route themselves (shardmeter generate --mode soma "
		    "--peers)");
		return;
	}
	if (!s->entry || s->compute == NULL) {
		sv_count_error(s, SV_ERR_REFUSED);
		respond_error(res, 421, "this host is not the entry; send "
		    "completions to %s", s->hosts.v[0].addr);
		return;
	}
	if ((status = sr_completion(req->body, req->body_len, &s->spec,
	    s->model_name, &f, &o, msg, sizeof(msg))) != 0) {
		refuse_completion(s, res, status, msg, &o);
		return;
	}
	/* the choices are requests of this connection, held to its quota */
	if (c->kind == SV_PEER_OPEN && c->inflight + o.n >
	    s->cfg.pipeline_client_requests) {
		pl_frame_clear(&f);
		snprintf(msg, sizeof(msg), "n is %d, and this connection has %d "
		    "requests in flight: a client the host list does not name "
		    "may have %d (pipeline_client_requests)", o.n, c->inflight,
		    s->cfg.pipeline_client_requests);
		o.param = "n";
		refuse_completion(s, res, 429, msg, &o);
		return;
	}
	choices_free(h);
	memset(h->ch, 0, sizeof(h->ch));
	h->o = o;
	h->head_sent = 0;
	h->plen = (int)f.data_len;
	h->id = s->next_id;     /* the ring's id of the first request */
	h->created = (long long)time(NULL);
	if ((o.echo && (h->prompt = malloc(f.data_len + 1)) == NULL) ||
	    (h->d = hs_response_defer(res, completion_gone, c)) == NULL) {
		pl_frame_clear(&f);
		choices_free(h);
		sv_count_error(s, SV_ERR_MEMORY);
		respond_error(res, 503, "out of memory");
		return;
	}
	if (o.echo)
		memcpy(h->prompt, f.data, f.data_len);
	/* the answer comes from the ring: its place is kept meanwhile */
	start_choices(s, c, h, &f);
	pl_frame_clear(&f);
	/* answered already (out of memory), or its events begin */
	if (o.stream && waiting(c) != NULL) {
		hs_response *sr = hs_deferred_response(h->d);

		if (hs_response_status(sr, 200) != 0 ||
		    hs_response_body_owned(sr, "text/event-stream", NULL,
		    0) != 0 || hs_response_header(sr, "Cache-Control",
		    "no-cache") != 0 || hs_deferred_stream_begin(h->d) != 0)
			return;         /* the connection closes: gone */
		if ((h = waiting(c)) != NULL)
			h->head_sent = 1;
	}
}

/* GET /v1/models: the one model this entry serves, in OpenAI's list. */
static void
get_models(sv *s, hs_response *res)
{
	respond_json(res, 200, json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}",
	    "object", "list", "data", "id", s->model_name, "object", "model",
	    "created", (json_int_t)s->model_created, "owned_by", "shardmeter"));
}

/* Requests ---------------------------------------------------------------- */

/* Who the caller is to the routes: the host list's hosts and clients
 * may read the status, clients (listed or at an open entry) send
 * completions; without TLS every peer is both. */
#define SH_LISTED HR_ROLE(0)
#define SH_CLIENT HR_ROLE(1)

static unsigned
route_who(void *ctx, const hs_request *req)
{
	const conn *c = req->link_arg;

	(void)ctx;
	switch (c->kind) {
	case SV_PEER_ANY:
	case SV_PEER_CLIENT:
		return SH_LISTED | SH_CLIENT;
	case SV_PEER_OPEN:
		return SH_CLIENT;
	case SV_PEER_PREV:
	case SV_PEER_HOST:
		return SH_LISTED;
	default:
		return 0;
	}
}

/* A refusal of the dispatch, counted, in the words this port has
 * always used. */
static void
route_refuse(void *ctx, const hs_request *req, hs_response *res,
    int status, const hr_route *row, const hr_match *m)
{
	sv *s = ctx;

	(void)m;
	if (status == 405) {
		sv_count_error(s, SV_ERR_INVALID);
		respond_error(res, 405, "%s is not allowed on %s (%s)",
		    req->method, row->pattern, row->method);
		return;
	}
	sv_count_error(s, SV_ERR_REFUSED);
	if (row->who == SH_LISTED)
		respond_error(res, 403, "the status is for the host list's "
		    "hosts and clients");
	else
		respond_error(res, 403, "hosts of the ring send no completions; "
		    "a client's peer id must be on a client line");
}

static void
route_not_found(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)m;
	sv_count_error(ctx, SV_ERR_INVALID);
	respond_error(res, 404, "no such resource: %s %s (a pipeline host "
	    "serves GET /v1/status and, at the entry, GET /v1/models and "
	    "POST /v1/completions)", req->method, req->path);
}

static void
route_status(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	size_t len;

	(void)req;
	(void)m;
	respond_body(res, 200, sv_status_json(ctx, &len));
}

static void
route_completions(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)m;
	post_completions(ctx, req->link_arg, req, res);
}

static void
route_models(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)req;
	(void)m;
	get_models(ctx, res);
}

/* The pipeline port's endpoints. */
static const hr_route routes[] = {
	{ "GET", "/v1/status", SH_LISTED, 0, route_status, NULL },
	{ "GET", "/v1/models", SH_LISTED | SH_CLIENT, 0, route_models, NULL },
	{ "POST", "/v1/completions", SH_CLIENT, 0, route_completions, NULL },
};

/* Every request of the pipeline port, through its route table. */
static void
on_request(void *ctx, const hs_request *req, hs_response *res)
{
	sv *s = ctx;
	const conn *c = req->link_arg;
	const hr_table table = {
		.rows = routes, .nrows = sizeof(routes) / sizeof(routes[0]),
		.ctx = s, .who = route_who, .refuse = route_refuse,
		.not_found = route_not_found,
	};

	s->st.http_requests++;
	if (c == NULL || c->http == NULL) {
		respond_error(res, 503, "the connection is closing");
		return;
	}
	/* an open entry lets a client without a certificate finish its
	 * handshake only to be told this */
	if (c->kind == SV_PEER_NOCERT) {
		sv_count_error(s, SV_ERR_REFUSED);
		respond_json(res, 401, error_json_full(401, "this entry needs a "
		    "client certificate: make an identity with 'shardmeter init "
		    "--dir DIR' ('shardmeter id --dir DIR' prints its peer id), "
		    "and send DIR/cert.pem and DIR/key.pem with each request "
		    "(curl --cert DIR/cert.pem --key DIR/key.pem)", NULL,
		    "client_certificate_required"));
		return;
	}
	hr_dispatch(&table, req, res, NULL);
}

/* The answers the server makes itself (bytes that are no request, too
 * many of them, a stalled request) in the JSON clients read here. */
static void
on_error(void *ctx, const hs_error *e, hs_response *res)
{
	sv *s = ctx;

	if (e->status == 413 || e->status == 431) {
		sv_count_error(s, SV_ERR_INVALID);
		respond_error(res, 413, "the request is too large");
	} else if (e->parse_error != NULL) {
		sv_count_error(s, SV_ERR_INVALID);
		respond_error(res, e->status, "%s", e->parse_error);
	} else
		respond_error(res, e->status, "%s", e->msg);
}

/* The link: what the server writes, and when it is done -------------------- */

static int
link_write(void *arg, char *buf, size_t len)
{
	return sv_conn_write(arg, buf, len);
}

/* The server has let go of the link: c closes, once written or now. */
static void
link_finish(void *arg)
{
	conn *c = arg;

	if (c->http != NULL)
		c->http->link = NULL;
	sv_conn_finish(c);
}

static void
link_close(void *arg)
{
	conn *c = arg;

	if (c->http != NULL)
		c->http->link = NULL;
	sv_conn_close(c, NULL);
}

static void
link_resume(void *arg)
{
	sv_conn_hold(arg, 0);
}

static const hs_link_ops link_ops = {
	.write = link_write,
	.finish = link_finish,
	.close = link_close,
	.resume = link_resume,
};

/* Plaintext of c, which speaks HTTP: fed to its link (made on the first
 * call). */
static int
http_feed(conn *c, const char *p, size_t n)
{
	sh_conn *h = c->http;

	c->s->st.bytes_in[SV_BYTES_HTTP] += n;
	if (h == NULL) {
		if ((h = calloc(1, sizeof(*h))) == NULL) {
			sv_conn_close(c, "out of memory");
			return -1;
		}
		c->http = h;
		h->link = hs_link_new(c->s->http, &link_ops, c, c->peer, c->addr,
		    c->tls != NULL ? tls_conn_peer_id(c->tls) : NULL);
		if (h->link == NULL) {
			sv_conn_close(c, "out of memory");
			return -1;
		}
	}
	if (h->link == NULL)
		return 1;       /* closing: nothing more is read */
	if (hs_link_feed(h->link, p, n) != 0)
		return c->closing ? -1 : 1;
	return c->closing ? -1 : 0;
}

/* c is closing: its link goes, and with it a completion's answer (the
 * request has lost its client: serve.c ends it). */
static void
http_gone(conn *c)
{
	sh_conn *h = c->http;
	hs_link *l;

	if (h == NULL)
		return;
	c->http = NULL;
	if ((l = h->link) != NULL) {
		h->link = NULL;
		hs_link_close(l);
	}
	choices_free(h);
	free(h);
}

static const sv_http_ops http_ops = {
	.feed = http_feed,
	.gone = http_gone,
};

int
sh_start(sv *s, char *err)
{
	hs_config cfg;
	char why[HS_ERR_LEN];

	hs_config_defaults(&cfg);
	cfg.max_header_bytes = SH_MAX_HEADER;
	cfg.max_body_bytes = SR_MAX_BODY;
	cfg.header_timeout_ms = SH_STALL_MS;
	cfg.request_timeout_ms = SH_STALL_MS;
	cfg.error_answer = on_error;
	s->model_created = (long long)time(NULL);
	if (hs_server_new(&s->http, s->loop, &cfg, on_request, s, why) != 0)
		return kn_error(err, KN_ENOMEM, "pipeline: HTTP: %s", why);
	s->http_ops = &http_ops;
	return KN_OK;
}
