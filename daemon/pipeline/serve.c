/* The pipeline host's frames and requests: where each frame goes, the
 * entry host's requests with their deadlines, the queue for the link to
 * the next host, and the housekeeping.  Connections are serve_conn.c's;
 * compute runs on the thread of serve_compute.c; a request's client is
 * answered through the sv_reply_ops it came with (frames here, HTTP in
 * serve_http.c); nothing here reads a float. */
#include "config.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/core/conf.h"
#include "daemon/core/log.h"
#include "daemon/net/http_server.h"
#include "daemon/pipeline/pipeline_hosts.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/intcheck.h"
#include "proto/pipeline.h"

/* Frames out ------------------------------------------------------------ */

static void
send_error(conn *c, uint64_t id, const char *msg)
{
	pl_frame f = { .type = PL_ERR, .id = id };

	snprintf(f.message, sizeof(f.message), "%s", msg);
	sv_conn_send(c, &f);
}

/* The entry's requests ------------------------------------------------- */

static request *
request_find(sv *s, uint64_t id)
{
	request *r;

	for (r = s->requests; r != NULL; r = r->next)
		if (r->id == id)
			return r;
	return NULL;
}

/* The KV caches of an autoregressive request go, here and on the ring;
 * with cancel (the request failed or its client went before its answer)
 * any request's work in progress goes too, so that the ring stops
 * computing what no one will read.  A BlockTrain request answered in
 * one traversal has nothing left on the ring: its frames stay as they
 * always were. */
static void
request_end_ring(sv *s, request *r, int cancel)
{
	pl_frame f = { .type = PL_END, .id = r->id };
	sc_job *job;

	if (!cancel && r->mode != PL_MODE_AR && r->pos_block == 0)
		return;
	job = sc_job_new(SC_END);
	job->in.id = r->id;
	sc_submit(s->compute, job);
	if (sv_links_any_up(s))
		sv_links_send(s, &f);
}

static void
request_remove(sv *s, request *r)
{
	request **p;

	for (p = &s->requests; *p != NULL; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	s->inflight--;
	if (r->client != NULL)
		r->client->inflight--;
	sv_links_forget(s, r->id);
	free(r->seq);
	free(r->lp);
	free(r->lpb);
	free(r);
}

void
sv_count_error(sv *s, sv_err kind)
{
	s->st.errors[kind]++;
}

static void
request_fail(sv *s, request *r, sv_err kind, const char *msg)
{
	/* its client let go of it (a completion's choice cut at a stop
	 * string): its work stops, and that is no error */
	if (r->dropped) {
		s->st.cancelled++;
		request_end_ring(s, r, 1);
		request_remove(s, r);
		return;
	}
	if (r->client != NULL)
		r->reply->fail(r->client, r, kind, msg);
	log_info("pipeline: request %llu failed: %s",
	    (unsigned long long)r->id, msg);
	s->failed++;
	sv_count_error(s, kind);
	/* work that may still run for no one: its client went, or it
	 * timed out */
	if (kind == SV_ERR_CLIENT_GONE || kind == SV_ERR_TIMEOUT)
		s->st.cancelled++;
	request_end_ring(s, r, 1);
	request_remove(s, r);
}

/* A client of frames: its answer is an out frame, its error an err
 * frame, under the client's own id. */
static void
frame_answer(conn *c, request *r, const unsigned char *data, size_t len)
{
	pl_frame f = { .type = PL_OUT, .id = r->client_id };

	f.data = (unsigned char *)data;
	f.data_len = len;
	f.compute_us = r->compute_us;
	/* with the client's request and this answer */
	f.hops = r->hops + 2;
	f.traversals = r->traversals;
	if (r->lpk > 0) {
		f.lpk = r->lpk;
		f.lp = r->lp + (size_t)r->fixed * r->lpk;
		f.lp_len = len * (size_t)r->lpk;
		f.lpb = r->lpb + (size_t)r->fixed * (r->lpk - 1);
		f.lpb_len = len * (size_t)(r->lpk - 1);
	}
	sv_conn_send(c, &f);
}

static void
frame_fail(conn *c, request *r, sv_err kind, const char *msg)
{
	(void)kind;
	send_error(c, r->client_id, msg);
}

static const sv_reply_ops frame_reply = {
	.answer = frame_answer,
	.fail = frame_fail,
};

static void
request_answer(sv *s, request *r, const unsigned char *data, size_t len)
{
	if (r->client != NULL)
		r->reply->answer(r->client, r, data, len);
	s->served++;
	sv_stats_answered(s, r);
	request_end_ring(s, r, 0);
	request_remove(s, r);
}

void
sv_request_drop(sv *s, uint64_t id)
{
	request *r = s->entry ? request_find(s, id) : NULL;

	if (r == NULL || r->client == NULL)
		return;
	r->client->inflight--;
	r->client = NULL;
	r->dropped = 1;
}

void
sv_request_lost(sv *s, uint64_t id, const char *msg)
{
	request *r = s->entry ? request_find(s, id) : NULL;

	if (r != NULL)
		request_fail(s, r, SV_ERR_LINK, msg);
}

/* Every request in flight is lost with the link it went out on. */
void
sv_requests_lost(sv *s, const char *msg)
{
	while (s->requests != NULL)
		request_fail(s, s->requests, SV_ERR_LINK, msg);
}

/* Frames in ------------------------------------------------------------- */

static void route(sv *s, pl_frame *f);

/* The ids whose end frame came lately, on a host past the entry: a
 * request cancelled at the entry may have a frame still on its way
 * here, or one this host's compute is about to finish; neither goes on.
 * The entry's ids start from its pid and clock, so a restarted entry
 * does not meet its old ones. */
static void
ended_add(sv *s, uint64_t id)
{
	s->ended[s->ended_at] = id;
	s->ended_at = (s->ended_at + 1) % SV_ENDED;
	s->ended_count += s->ended_count < SV_ENDED;
}

static int
ended_has(const sv *s, uint64_t id)
{
	int i;

	for (i = 0; i < s->ended_count; i++)
		if (s->ended[i] == id)
			return 1;
	return 0;
}

void
sv_on_compute_done(void *ctx, sc_job *job)
{
	sv *s = ctx;

	s->st.jobs++;
	s->st.job_compute_s += job->compute_us / 1e6;
	if (!s->stopping) {
		int held = sv_links_held(s, job->in.id);

		route(s, &job->out);
		/* the work came from the host before and has gone on; where
		 * its frame is held here, once the next host acks it */
		if (job->kind != SC_END && sv_links_held(s, job->in.id) == held)
			sv_links_passed(s, job->in.id);
	}
	sc_job_free(job);
}

/* Why this host cannot take a client's request (in msg, with its kind),
 * or 0 when it can. */
static int
gen_refused(sv *s, conn *c, const pl_frame *f, char *msg, size_t len,
    sv_err *kind)
{
	/* data_len is bounded by the frame's or the body's size; it is
	 * compared as it is, before it is ever narrowed */
	int n = s->spec.window, plen = f->data_len > (size_t)n ? n + 1 :
	    (int)f->data_len;

	*kind = SV_ERR_REFUSED;
	if (!s->entry)
		snprintf(msg, len, "this host is not the entry; send requests "
		    "to %.150s", s->hosts.v[0].addr);
	else if (!sc_serves(s->compute, f->mode))
		snprintf(msg, len, "mode %s is not served here (see the host's "
		    "log)", pl_mode_name(f->mode));
	/* a client the list does not name, at an open entry */
	else if (c->kind == SV_PEER_OPEN &&
	    c->inflight >= s->cfg.pipeline_client_requests) {
		*kind = SV_ERR_LIMIT;
		snprintf(msg, len, "too many requests in flight on this "
		    "connection (the limit is %d)",
		    s->cfg.pipeline_client_requests);
	} else if (f->pos_block > 0 && f->pos_block != bg_pos_block(&s->spec)) {
		*kind = SV_ERR_INVALID;
		snprintf(msg, len, "the request asks for position blocks of %d "
		    "bytes; this run has %d (position_block in its spec; the "
		    "window when it has none)", f->pos_block,
		    bg_pos_block(&s->spec));
	} else if (f->steps < 1 || f->steps > PL_STEPS_MAX) {
		/* a request's cost grows with its steps */
		*kind = SV_ERR_INVALID;
		snprintf(msg, len, "the request asks for %d steps; a host takes "
		    "1 to %d (the default is %d)", f->steps, PL_STEPS_MAX,
		    PL_STEPS_DEFAULT);
	} else if (f->length < 1 || !pr_int_sum_le((int64_t)f->data_len,
	    f->length, n) || (f->mode == PL_MODE_AR && plen < 1)) {
		*kind = SV_ERR_INVALID;
		snprintf(msg, len, "the prompt (%zu bytes) and the output (%d) "
		    "must fit the window of %d bytes%s", f->data_len, f->length, n,
		    f->mode == PL_MODE_AR ? ", with a prompt of at least one "
		    "byte in ar mode" : "");
	} else
		return 0;
	return 1;
}

/* The run's [generate] decode, as pl_frame's decode. */
static int
sv_default_decode(const sv *s)
{
	bt_decode d;

	return bt_decode_parse(s->spec.decode, &d) == 0 ? 1 + (int)d :
	    1 + BT_DECODE_RANDOM;
}

/* The request for a client's gen frame, linked and counted in flight;
 * NULL when out of memory. */
static request *
gen_request_new(sv *s, conn *c, const pl_frame *f, const sv_reply_ops *reply,
    int stream)
{
	int plen = (int)f->data_len;
	request *r;

	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->seq = calloc((size_t)s->spec.window, 1)) == NULL) {
		free(r);
		return NULL;
	}
	r->id = s->next_id++;
	r->client_id = f->id;
	r->client = c;
	r->reply = reply;
	r->mode = f->mode;
	r->fixed = plen;
	r->end = plen + f->length;
	r->steps = f->steps;
	r->temperature = f->temperature;
	r->seed = f->seed;
	r->decode = f->decode > 0 ? f->decode : sv_default_decode(s);
	/* random goes as it always did: without the key */
	if (r->decode == 1 + BT_DECODE_RANDOM)
		r->decode = 0;
	if (f->lpk > 0) {
		size_t n = (size_t)s->spec.window, k1 = (size_t)f->lpk;

		r->lpk = f->lpk;
		r->lp = calloc(n * k1, sizeof(float));
		r->lpb = calloc(n * (k1 - 1) + 1, 1);
		if (r->lp == NULL || r->lpb == NULL) {
			free(r->lp);
			free(r->lpb);
			free(r->seq);
			free(r);
			return NULL;
		}
	}
	/* only a completion streamed as events has a use for the windows
	 * of the hosts; anything else keeps the ring's frames as they were */
	r->stream = f->mode == PL_MODE_BT && stream && reply->partial != NULL;
	memcpy(r->seq, f->data, (size_t)plen);
	r->arrived = kn_now();
	r->deadline = r->arrived + s->cfg.pipeline_timeout_ms / 1000.0;
	r->next = s->requests;
	s->requests = r;
	s->inflight++;
	c->inflight++;
	s->trimmed = 0;
	return r;
}

/* The first bt traversal: the prompt over a whole window, the rest
 * masked; NULL when out of memory. */
static sc_job *
gen_job_bt(sv *s, const pl_frame *f)
{
	int n = s->spec.window, plen = (int)f->data_len, i;
	sc_job *job = sc_job_new(SC_BT);

	job->in.type = PL_BT;
	job->in.data = calloc((size_t)n, 1);
	job->in.mask = malloc((size_t)n);
	if (job->in.data == NULL || job->in.mask == NULL) {
		sc_job_free(job);
		return NULL;
	}
	job->in.data_len = job->in.mask_len = (size_t)n;
	memcpy(job->in.data, f->data, (size_t)plen);
	/* the whole rest of the window starts masked, as in one
	 * process: the positions after the output are context too */
	for (i = 0; i < n; i++)
		job->in.mask[i] = i >= plen;
	job->in.block = s->spec.blocks;
	if (bg_has_pos_blocks(&s->spec)) {
		/* the first traversal: the position block the prompt ends in */
		job->in.pos_block = s->spec.position_block;
		job->in.pblock = plen / s->spec.position_block;
	}
	return job;
}

/* The first ar traversal: the prompt's symbols from position 0; NULL
 * when out of memory. */
static sc_job *
gen_job_ar(const pl_frame *f)
{
	int plen = (int)f->data_len, i;
	sc_job *job = sc_job_new(SC_AR);

	job->in.type = PL_AR;
	job->in.pos = 0;
	job->in.count = plen;
	job->sym = malloc((size_t)plen * sizeof(int32_t));
	if (job->sym == NULL) {
		sc_job_free(job);
		return NULL;
	}
	for (i = 0; i < plen; i++)
		job->sym[i] = f->data[i];
	return job;
}

int
sv_start_request(sv *s, conn *c, pl_frame *f, const sv_reply_ops *reply,
    int stream, char *msg, size_t len, sv_err *kind)
{
	request *r;
	sc_job *job;

	s->st.requests[f->mode == PL_MODE_AR]++;
	/* length 0: the default, or what the window leaves after the
	 * prompt when that is less, as for POST /v1/completions */
	if (f->length == 0 && f->data_len < (size_t)s->spec.window)
		f->length = s->spec.window - (int)f->data_len < PL_LENGTH_DEFAULT ?
		    s->spec.window - (int)f->data_len : PL_LENGTH_DEFAULT;
	if (gen_refused(s, c, f, msg, len, kind)) {
		sv_count_error(s, *kind);
		return -1;
	}
	if ((r = gen_request_new(s, c, f, reply, stream)) == NULL) {
		*kind = SV_ERR_MEMORY;
		sv_count_error(s, *kind);
		snprintf(msg, len, "out of memory");
		return -1;
	}
	job = f->mode == PL_MODE_BT ? gen_job_bt(s, f) : gen_job_ar(f);
	if (job == NULL) {
		/* answered, and counted, as a failed request */
		request_fail(s, r, SV_ERR_MEMORY, "out of memory");
		return 0;
	}
	job->in.id = r->id;
	job->in.steps = r->steps;
	job->in.temperature = r->temperature;
	job->in.seed = r->seed;
	job->in.decode = f->mode == PL_MODE_BT ? r->decode : 0;
	job->in.fixed = r->fixed;
	job->in.end = r->end;
	job->in.stream = r->stream;
	job->in.lpk = r->lpk;
	r->pos_block = job->in.pos_block;
	r->pblock = job->in.pblock;
	sc_submit(s->compute, job);
	return 0;
}

/* A request of position blocks back at the entry from the exit host:
 * the next position block's traversal starts here, at block T.  Takes
 * what f owns. */
static void
handle_bt_next(sv *s, pl_frame *f)
{
	request *r = request_find(s, f->id);
	sc_job *job;

	if (r == NULL)
		return;		/* it failed or timed out meanwhile */
	/* a traversal done twice, after a host failed over */
	if (r->pos_block > 0 && f->pos_block == r->pos_block &&
	    f->pblock <= r->pblock && f->pblock >= 0)
		return;
	if (r->pos_block == 0 || f->pos_block != r->pos_block ||
	    f->pblock != r->pblock + 1 || f->block != s->spec.blocks ||
	    f->fixed != r->fixed || f->end != r->end ||
	    f->decode != r->decode) {
		request_fail(s, r, SV_ERR_PIPELINE, "the pipeline sent a "
		    "position block out of order");
		return;
	}
	if (r->client == NULL) {
		request_fail(s, r, SV_ERR_CLIENT_GONE, "the client has gone");
		return;
	}
	r->traversals++;
	r->pblock = f->pblock;
	r->deadline = kn_now() + s->cfg.pipeline_timeout_ms / 1000.0;
	job = sc_job_new(SC_BT);
	job->in = *f;	/* the job takes what the frame owns */
	memset(f, 0, sizeof(*f));
	sc_submit(s->compute, job);
}

/* The entry takes a client's gen frame. */
static void
handle_gen(sv *s, conn *c, pl_frame *f)
{
	char msg[PL_MSG_LEN];
	sv_err kind;

	if (sv_start_request(s, c, f, &frame_reply, 0, msg, sizeof(msg),
	    &kind) != 0)
		send_error(c, f->id, msg);
}

/* The logprobs of count positions from pos that frame f brings (a tok
 * frame's one byte, an out frame's output) into r's; 0, or -1 when they
 * do not match what r asked.  The decoder checked their lengths against
 * f's own positions; here they are held to the request's. */
static int
lp_take(request *r, const pl_frame *f, int pos, int count)
{
	size_t k1 = (size_t)r->lpk;

	if (r->lpk == 0)
		return f->lpk == 0 ? 0 : -1;
	if (f->lpk != r->lpk || pos < 0 || count < 0 || pos > r->end ||
	    count > r->end - pos || f->lp_len != (size_t)count * k1 ||
	    f->lpb_len != (size_t)count * (k1 - 1))
		return -1;
	memcpy(r->lp + (size_t)pos * k1, f->lp, f->lp_len * sizeof(float));
	memcpy(r->lpb + (size_t)pos * (k1 - 1), f->lpb, f->lpb_len);
	return 0;
}

/* A window's logprobs (f: bt or part, window positions) for r's output
 * positions; 0 or -1 as lp_take. */
static int
lp_take_window(sv *s, request *r, const pl_frame *f)
{
	size_t k1 = (size_t)r->lpk, n = (size_t)s->spec.window;

	if (r->lpk == 0)
		return f->lpk == 0 ? 0 : -1;
	if (f->lpk != r->lpk || f->data_len != n || f->lp_len != n * k1 ||
	    f->lpb_len != n * (k1 - 1))
		return -1;
	memcpy(r->lp + (size_t)r->fixed * k1, f->lp + (size_t)r->fixed * k1,
	    (size_t)(r->end - r->fixed) * k1 * sizeof(float));
	memcpy(r->lpb + (size_t)r->fixed * (k1 - 1), f->lpb + (size_t)r->fixed *
	    (k1 - 1), (size_t)(r->end - r->fixed) * (k1 - 1));
	return 0;
}

/* The byte of one autoregressive traversal, back at the entry. */
static void
handle_tok(sv *s, pl_frame *f)
{
	request *r = request_find(s, f->id);
	sc_job *job;

	if (r == NULL)
		return;		/* it failed or timed out meanwhile */
	/* a byte already had: a traversal done twice after a failover */
	if (f->pos >= r->fixed && f->pos < r->fixed + r->traversals)
		return;
	r->compute_us += f->compute_us;
	r->hops += f->hops;
	r->traversals++;
	/* traversal k (from 1) emits the byte at fixed + k - 1 */
	if (f->pos != r->fixed + r->traversals - 1 || f->pos >= r->end) {
		request_fail(s, r, SV_ERR_PIPELINE, "the pipeline answered "
		    "out of order");
		return;
	}
	r->seq[f->pos] = (unsigned char)f->byte;
	if (lp_take(r, f, f->pos, 1) != 0) {
		request_fail(s, r, SV_ERR_PIPELINE, "the pipeline answered "
		    "without the logprobs asked");
		return;
	}
	if (r->client != NULL && r->reply->partial_byte != NULL &&
	    f->pos + 1 < r->end)
		r->reply->partial_byte(r->client, r, f->pos);
	if (f->pos + 1 == r->end) {
		request_answer(s, r, r->seq + r->fixed,
		    (size_t)(r->end - r->fixed));
		return;
	}
	if (r->client == NULL) {
		request_fail(s, r, SV_ERR_CLIENT_GONE, "the client has gone");
		return;
	}
	r->deadline = kn_now() + s->cfg.pipeline_timeout_ms / 1000.0;
	job = sc_job_new(SC_AR);
	job->in.type = PL_AR;
	job->in.id = r->id;
	job->in.pos = f->pos;
	job->in.count = 1;
	job->in.temperature = r->temperature;
	job->in.seed = r->seed;
	job->in.fixed = r->fixed;
	job->in.end = r->end;
	job->in.lpk = r->lpk;
	job->sym = malloc(sizeof(int32_t));
	if (job->sym == NULL) {
		sc_job_free(job);
		request_fail(s, r, SV_ERR_MEMORY, "out of memory");
		return;
	}
	job->sym[0] = f->byte;
	sc_submit(s->compute, job);
}

void
sv_request_redo(sv *s, uint64_t id)
{
	request *r = request_find(s, id);
	int n, i;
	sc_job *job;

	if (r == NULL || r->mode != PL_MODE_AR)
		return;		/* it ended meanwhile */
	/* the prompt and the bytes had so far, in one traversal that makes
	 * every cache of the new path at position 0 (ours too) and emits
	 * the next byte: the draws are keyed by position, so the output is
	 * the one the request would have had */
	n = r->fixed + r->traversals;
	job = sc_job_new(SC_AR);
	job->in.type = PL_AR;
	job->in.id = r->id;
	job->in.pos = 0;
	job->in.count = n;
	job->in.temperature = r->temperature;
	job->in.seed = r->seed;
	job->in.fixed = r->fixed;
	job->in.end = r->end;
	job->in.lpk = r->lpk;
	if ((job->sym = malloc((size_t)n * sizeof(int32_t))) == NULL) {
		sc_job_free(job);
		request_fail(s, r, SV_ERR_MEMORY, "out of memory");
		return;
	}
	for (i = 0; i < n; i++)
		job->sym[i] = r->seq[i];
	log_info("pipeline: request %llu lost a host of its path after %d "
	    "bytes; running it again from position 0",
	    (unsigned long long)r->id, r->traversals);
	r->deadline = kn_now() + s->cfg.pipeline_timeout_ms / 1000.0;
	sc_submit(s->compute, job);
}

/* The window of a host further round the ring, back at the entry: it
 * must be from a host of the next stage (the next host line, with one
 * host a block), with the window and block that stage's blocks leave. */
static void
handle_part(sv *s, pl_frame *f)
{
	request *r = request_find(s, f->id);
	const ph_list *pl = &s->hosts;
	int stage = f->host >= 1 && f->host <= pl->n ?
	    pl->v[f->host - 1].stage + 1 : 0;

	if (r == NULL)
		return;		/* it failed or timed out meanwhile */
	/* a window had already: its stage ran twice after a failover */
	if (r->stream && stage >= 1 && stage <= r->parts)
		return;
	if (!r->stream || stage != r->parts + 1 || stage >= pl->nstages ||
	    f->block != pl->v[f->host - 1].block_lo - 1 ||
	    f->data_len != (size_t)s->spec.window) {
		request_fail(s, r, SV_ERR_PIPELINE, "the pipeline sent a host's "
		    "window out of order, or one the request did not ask for");
		return;
	}
	if (lp_take_window(s, r, f) != 0) {
		request_fail(s, r, SV_ERR_PIPELINE, "the pipeline sent a window "
		    "without the logprobs asked");
		return;
	}
	r->parts++;
	if (r->client != NULL && r->reply->partial != NULL)
		r->reply->partial(r->client, r, f->data, f->mask, f->block,
		    f->host);
}

/* A host past the entry tells the entry, round the rest of the ring,
 * what its blocks made of a streamed request's window: the frame goes
 * just before the bt frame on the same link, and each host passes it on
 * as it arrives, so the entry gets the windows in host order. */
static void
send_part(sv *s, const pl_frame *bt)
{
	pl_frame p = { .type = PL_PART, .id = bt->id, .host = s->self + 1,
	    .block = bt->block };

	/* borrowed: the bt frame still owns them */
	p.data = bt->data;
	p.data_len = bt->data_len;
	p.mask = bt->mask;
	p.mask_len = bt->mask_len;
	p.lpk = bt->lpk;
	p.lp = bt->lp;
	p.lp_len = bt->lp_len;
	p.lpb = bt->lpb;
	p.lpb_len = bt->lpb_len;
	sv_links_send(s, &p);
}

/* Where a frame goes, whether it arrived or this host made it. */
static void
route(sv *s, pl_frame *f)
{
	request *r = NULL;      /* set where s->entry (gcc -O1 cannot tell) */
	int last = s->stage == s->hosts.nstages - 1;

	switch (f->type) {
	case PL_BT:
		/* a ring of one host: its next position block starts here */
		if (s->entry && f->pos_block > 0 && f->block == s->spec.blocks) {
			handle_bt_next(s, f);
			break;
		}
		/* the request ended while this host computed: no further */
		if (s->entry ? (r = request_find(s, f->id)) == NULL :
		    ended_has(s, f->id))
			break;
		if (s->entry && r->client == NULL) {
			request_fail(s, r, SV_ERR_CLIENT_GONE, "the client has "
			    "gone");
			break;
		}
		/* at the entry: its own blocks' result, on its way on */
		if (s->entry) {
			r->parts = 1;	/* windows had, by stage */
			if (r->stream && lp_take_window(s, r, f) != 0) {
				request_fail(s, r, SV_ERR_PIPELINE, "logprobs "
				    "missing from the entry's own window");
				break;
			}
			if (r->client != NULL && r->reply->partial != NULL)
				r->reply->partial(r->client, r, f->data, f->mask,
				    f->block, s->self + 1);
		} else if (f->stream && f->block < s->spec.blocks)
			/* not the exit's frame for the next position block */
			send_part(s, f);
		sv_links_send(s, f);
		break;
	case PL_AR:
		if (s->entry ? request_find(s, f->id) != NULL :
		    !ended_has(s, f->id))
			sv_links_send(s, f);
		break;
	case PL_TOK:
	case PL_PART:
		/* for the entry: the hosts between pass them on */
		if (!s->entry)
			sv_links_send(s, f);
		else if (f->type == PL_TOK)
			handle_tok(s, f);
		else
			handle_part(s, f);
		break;
	case PL_OUT:
		if (!s->entry) {
			sv_links_send(s, f);
			break;
		}
		if ((r = request_find(s, f->id)) != NULL) {
			r->compute_us += f->compute_us;
			r->hops += f->hops;
			r->traversals += f->traversals;
			if (f->data_len != (size_t)(r->end - r->fixed) ||
			    lp_take(r, f, r->fixed, r->end - r->fixed) != 0)
				request_fail(s, r, SV_ERR_PIPELINE, "the pipeline "
				    "answered with another length or without the "
				    "logprobs asked");
			else
				request_answer(s, r, f->data, f->data_len);
		}
		break;
	case PL_REDO:
		if (!s->entry)
			sv_links_send(s, f);
		else
			sv_request_redo(s, f->id);
		break;
	case PL_ERR:
		if (!s->entry) {
			sv_links_send(s, f);
			break;
		}
		if ((r = request_find(s, f->id)) != NULL)
			request_fail(s, r, SV_ERR_PIPELINE, f->message);
		break;
	case PL_END:
		if (!s->entry && !last)
			sv_links_send(s, f);
		break;
	default:
		break;
	}
}

void
sv_dispatch(sv *s, conn *c, pl_frame *f)
{
	sc_job *job;

	if (s->soma != NULL) {
		ss_dispatch(s, c, f);
		return;
	}
	switch (f->type) {
	case PL_GEN:
		handle_gen(s, c, f);
		pl_frame_clear(f);
		return;
	case PL_BT:
	case PL_AR:
		if (!s->entry && ended_has(s, f->id)) {
			/* its end frame overtook it: nothing to compute */
			pl_frame_clear(f);
			return;
		}
		if (!s->entry)
			sv_links_owe(s, c, f->id);
		if (s->entry && f->type == PL_BT && f->pos_block > 0) {
			handle_bt_next(s, f);
			pl_frame_clear(f);
			return;
		}
		if (s->entry && f->type == PL_BT) {
			/* the ring never brings BlockTrain back to block T */
			send_error(c, f->id, "a BlockTrain frame reached the "
			    "entry host");
			pl_frame_clear(f);
			return;
		}
		job = sc_job_new(f->type == PL_BT ? SC_BT : SC_AR);
		job->in = *f;	/* the job takes what the frame owns */
		memset(f, 0, sizeof(*f));
		sc_submit(s->compute, job);
		return;
	case PL_END:
		sv_links_forget(s, f->id);
		if (!s->entry) {
			/* with several hosts a block, it comes from each host
			 * of the stage before: on once is enough */
			if (ended_has(s, f->id))
				break;
			ended_add(s, f->id);
		}
		job = sc_job_new(SC_END);
		job->in.id = f->id;
		sc_submit(s->compute, job);
		route(s, f);
		break;
	case PL_PING:
	case PL_PONG:
	case PL_ACK:
		sv_links_frame(s, c, f);
		break;
	default:
		route(s, f);
		break;
	}
	pl_frame_clear(f);
}

/* Connections' news ------------------------------------------------------ */

void
sv_conn_gone(sv *s, conn *c, const char *why)
{
	request *r;

	/* a client's requests end with it, at the next housekeeping: c may
	 * be closing from inside an answer to one of them */
	for (r = s->requests; r != NULL; r = r->next)
		if (r->client == c)
			r->client = NULL;
	ss_conn_gone(s, c);
	sv_links_conn_gone(s, c);
	if (c->outbound && c->link != NULL && c->link->c == c)
		sv_link_down(s, c->link, why ? why : "closed");
}

/* Housekeeping: deadlines, stalled frames, the link, idle memory. */
void
sv_on_cron(uv_timer_t *t)
{
	sv *s = t->data;
	double tnow = kn_now();
	request *r, *next;

	for (r = s->requests; r != NULL; r = next) {
		next = r->next;
		/* its work stops here and round the ring */
		if (r->client == NULL) {
			request_fail(s, r, SV_ERR_CLIENT_GONE, "the client has "
			    "gone");
			continue;
		}
		if (tnow > r->deadline) {
			char msg[PL_MSG_LEN];

			snprintf(msg, sizeof(msg), "timed out: no progress from "
			    "the pipeline in %d ms (after %d traversals); a host "
			    "may be down or overloaded", s->cfg.pipeline_timeout_ms,
			    r->traversals);
			request_fail(s, r, SV_ERR_TIMEOUT, msg);
		}
	}
	sv_conns_cron(s, tnow);
	sv_links_cron(s, tnow);
	if (s->inflight == 0 && !s->trimmed && s->compute != NULL) {
		int count;
		size_t bytes;

		sc_cache_usage(s->compute, &count, &bytes);
		if (count == 0) {
			/* back to the idle footprint once the work is done */
			malloc_trim(0);
			s->trimmed = 1;
		}
	}
}

/* Start-up and shut-down ------------------------------------------------- */

static void
on_handle_closed(uv_handle_t *h)
{
	sv *s = h->data;

	s->closing_handles--;
}

static void
on_compute_closed(void *arg)
{
	sv *s = arg;

	s->closing_handles--;
}

void
sv_shutdown(sv *s)
{
	conn *c, *next;

	if (s->stopping)
		return;
	s->stopping = 1;
	log_info("pipeline: stopping (%llu requests served, %llu failed)",
	    (unsigned long long)s->served, (unsigned long long)s->failed);
	while (s->requests != NULL)
		request_fail(s, s->requests, SV_ERR_SHUTDOWN, "the host is "
		    "shutting down");
	sv_links_free(s);
	for (c = s->conns; c != NULL; c = next) {
		next = c->next;
		sv_conn_close(c, NULL);
	}
	s->closing_handles = s->compute != NULL ? 6 : 5;
	sv_metrics_stop(s);
	if (s->http != NULL)
		hs_server_close(s->http, NULL, NULL);
	s->http = NULL;
	uv_close((uv_handle_t *)&s->listener, on_handle_closed);
	uv_close((uv_handle_t *)&s->cron, on_handle_closed);
	uv_close((uv_handle_t *)&s->sigterm, on_handle_closed);
	uv_close((uv_handle_t *)&s->sigint, on_handle_closed);
	uv_close((uv_handle_t *)&s->sighup, on_handle_closed);
	if (s->compute != NULL)
		sc_stop(s->compute, on_compute_closed, s);
	ss_stop(s);
}

