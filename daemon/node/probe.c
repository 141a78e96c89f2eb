/* The probe endpoints of blocktraind: echo, source and sink for the link
 * probes of other daemons; the compute probe, run on the probe thread
 * while the trainer waits; and the link probe, which walks this daemon's
 * peers one at a time on the loop (warm-up, S round trips, one stream of
 * B bytes, K streams of B/K bytes each) with the daemon's own client.
 * Starting a probe answers 202; a GET of the same resource answers 202
 * until it is done, then its result. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "daemon/core/log.h"
#include "daemon/net/http_route.h"
#include "daemon/node/probe.h"
#include "daemon/node/probe_compute.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "proto/intcheck.h"

/* Its code in the list of kernels/error.h: the trainer did not reach a
 * step boundary in time, so the compute probe did not run (409). */
#define PB_EBUSY KN_E_PB_BUSY

/* A compute probe, handed to the probe thread and back. */
struct pb_job {
	kn_model_shape shape;
	int batch;
	const kn_backend *be;
	wk_worker *trainer;             /* NULL: none to hold */
	double seconds;
	int repeats;
	/* the answer */
	pcm_rates rates;
	pcm_update_cost update;
	uint64_t memory;
	const char *memory_how;
	int rc;                         /* PB_EBUSY: training did not pause */
	char err[KN_ERR_LEN];
	lt_item link;
};

/* One peer a link probe measures, and what it found. */
struct pb_target {
	char addr[CF_HOST_LEN + 8];
	int has_id;
	uint8_t id[ID_BYTES];
	double *rtt_ms;                 /* samples */
	double stream_bps, multi_bps;
	uint64_t sink_bytes;            /* what the sinks said they took */
	/* the loop thread's CPU seconds over the one-stream and the
	 * K-stream transfers together (curl, TLS, TCP: what an update's
	 * bytes cost the loop), for sink_bytes; and the peer's loop's, from
	 * its answers' PB_LOOP_CPU_HEADER: take_cpu_s (< 0: it gave none),
	 * and where it stood before each transfer */
	double send_cpu_s, take_cpu_s, peer_cpu0, peer_cpu1;
	char error[200];
};

enum { PH_WARM, PH_RTT, PH_SINGLE, PH_MWARM, PH_MULTI, PH_DONE };

/* A link probe in flight on the loop. */
struct pb_links {
	struct pb_state *s;
	struct pb_target *t;
	int nt, cur, phase;
	int samples, streams;
	size_t bytes;
	double seconds, started, deadline, multi_t0, cpu_t0;
	int sample, pending;
	int aborted;                    /* a round began, or the node stops */
	char abort_why[160];
};

struct pb_state {
	pb_config c;                    /* the daemon's side, its ops */
	lt_thread *lt;
	int busy;                       /* a probe runs */
	/* the last result of each kind: its HTTP status (0: none yet, 202:
	 * running) and its JSON */
	int compute_status, links_status;
	json_t *compute, *links;
	struct pb_links *run;
	double compute_began;           /* kn_now() of the last start; 0 */
};

int
pb_query_get(const char *query, const char *key, char *val, size_t len)
{
	size_t klen = strlen(key);
	const char *p = query;

	while (*p != '\0') {
		size_t seg = strcspn(p, "&");

		if (seg > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
			size_t vlen = seg - klen - 1;

			if (vlen >= len)
				vlen = len - 1;
			memcpy(val, p + klen + 1, vlen);
			val[vlen] = '\0';
			return 1;
		}
		p += seg;
		if (*p == '&')
			p++;
	}
	return 0;
}

/* A number parameter in [lo, hi] (its default when absent) into *out;
 * -1 once a 400 that says why is set in res. */
static int
param(const hs_request *req, hs_response *res, const char *key, double lo,
    double hi, double dflt, int integer, double *out)
{
	char val[64], *end;
	double v;

	*out = dflt;
	if (!pb_query_get(req->query, key, val, sizeof(val)))
		return 0;
	v = strtod(val, &end);
	if (end == val || *end != '\0' || !isfinite(v) || v < lo || v > hi ||
	    (integer && v != floor(v))) {
		hs_response_text(res, 400, "%s=%s: %s from %g to %g", key, val,
		    integer ? "an integer" : "a number", lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* Whether a round of averaging is in progress: probes wait. */
static int
in_round(const struct pb_state *s)
{
	int64_t round;

	return s->c.ops.in_round(s->c.arg, &round);
}

/* 409 while a round is in progress or another probe runs, 503 while
 * the daemon stops; 0 to go on. */
static int
refused(struct pb_state *s, hs_response *res)
{
	int64_t round;

	if (s->c.ops.in_round(s->c.arg, &round)) {
		hs_response_text(res, 409, "a round of averaging is in progress "
		    "(round %" PRId64 "): probe again when it is over",
		    round);
		return 1;
	}
	if (s->c.ops.stopping(s->c.arg)) {
		hs_response_text(res, 503, "the daemon is stopping");
		return 1;
	}
	if (s->busy) {
		hs_response_text(res, 409, "another probe is running on this "
		    "daemon: wait for its result");
		return 1;
	}
	return 0;
}

/* ---- what other daemons' link probes ask of this one ---- */

/* The loop's CPU seconds so far, on echo and sink answers: the prober
 * takes the sink's answer less the echo's before it as what taking the
 * upload cost this daemon's loop (TLS, TCP, HTTP) */
static void
loop_cpu_header(hs_response *res)
{
	char v[32];

	snprintf(v, sizeof(v), "%.9f", kn_thread_cpu_now());
	hs_response_header(res, PB_LOOP_CPU_HEADER, v);
}

static void
get_echo(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;

	(void)req;
	(void)m;
	if (in_round(s) && refused(s, res))
		return;
	loop_cpu_header(res);
	hs_response_status(res, 200);
	hs_response_body(res, "text/plain", "echo\n", 5);
}

static void
get_source(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;
	char val[32];
	double bytes;

	(void)m;
	if (in_round(s) && refused(s, res))
		return;
	if (!pb_query_get(req->query, "bytes", val, sizeof(val))) {
		hs_response_text(res, 400, "the source needs ?bytes=N (0 to "
		    "%zu)", PB_MAX_BYTES);
		return;
	}
	if (param(req, res, "bytes", 0, (double)PB_MAX_BYTES, 0, 1,
	    &bytes) != 0)
		return;
	hs_response_status(res, 200);
	hs_response_body_pattern(res, "application/octet-stream",
	    (size_t)bytes);
}

static void
post_sink(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;

	(void)m;
	if (in_round(s) && refused(s, res))
		return;
	loop_cpu_header(res);
	hs_response_json(res, 200, json_pack("{s:I}", "bytes",
	    (json_int_t)(req->discarded + req->body_len)));
}

int
pb_discard(void *ctx, const char *method, const char *target, size_t *max)
{
	static const char sink[] = "/v1/probe/sink";

	(void)ctx;
	if (strcmp(method, "POST") != 0 ||
	    strncmp(target, sink, sizeof(sink) - 1) != 0 ||
	    (target[sizeof(sink) - 1] != '\0' &&
	    target[sizeof(sink) - 1] != '?'))
		return 0;
	*max = PB_MAX_BYTES;
	return 1;
}

/* ---- the compute probe, on the probe thread ---- */

static void
job_run(struct pb_job *j)
{
	if (j->trainer != NULL) {
		wk_hold(j->trainer);
		if (wk_wait_held(j->trainer, PB_HOLD_TIMEOUT) != 0) {
			wk_release(j->trainer);
			j->rc = kn_error(j->err, PB_EBUSY, "training did not "
			    "reach a step boundary within %.0f s (a round or a "
			    "full disk holds it): probe again later",
			    PB_HOLD_TIMEOUT);
			return;
		}
	}
	/* before the scratch model takes its share */
	j->rc = pcm_free_memory(j->be, &j->memory, &j->memory_how, j->err);
	if (j->rc == 0)
		j->rc = pcm_measure(&j->shape, j->batch, j->be, j->seconds, 100000,
		    j->repeats, &j->rates, j->err);
	/* a round's own CPU work on the block's update, beside the bytes
	 * the link probe times: 0.05 s of CPU, 0.5 s at a tenth of a core */
	if (j->rc == 0)
		j->rc = pcm_measure_update(kn_model_params_for(&j->shape),
		    PB_UPDATE_CPU_SECONDS, &j->update, j->err);
	if (j->trainer != NULL)
		wk_release(j->trainer);
}

static void
prober_run(lt_thread *lt, void *arg)
{
	lt_item *item, *next;
	int stop;

	(void)arg;
	do {
		stop = lt_wait(lt, -1, &item);
		for (; item != NULL; item = next) {
			next = item->next;
			job_run(LT_CONTAINER(item, struct pb_job, link));
			lt_post(lt, item);
		}
	} while (!stop);
}

static void
job_free(lt_item *item)
{
	free(LT_CONTAINER(item, struct pb_job, link));
}

static json_t *
shape_json(const kn_model_shape *sh, int batch)
{
	return json_pack("{s:i,s:i,s:i,s:i,s:i}", "width", sh->width, "heads",
	    sh->heads, "layers", sh->layers, "window", sh->window, "batch",
	    batch);
}

/* The first n of v as a JSON array. */
static json_t *
numbers_json(const double *v, int n)
{
	json_t *a = json_array();
	int i;

	for (i = 0; a != NULL && i < n; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

/* Which machine this daemon runs on, for the planner to know which hosts
 * share one (their CPUs, memory bandwidth, a GPU's host): 16 hex digits
 * of a SHA-256 of the machine id (systemd's, else D-Bus's, else this
 * boot's), keyed so that the id itself is not published; "" when none
 * can be read. */
static void
machine_of(char out[17])
{
	static const char *const paths[] = { "/etc/machine-id",
	    "/var/lib/dbus/machine-id", "/proc/sys/kernel/random/boot_id" };
	static const char key[] = "shardmeter machine\n";
	unsigned char md[EVP_MAX_MD_SIZE], buf[sizeof(key) - 1 + 128];
	unsigned int mdlen = 0, k;
	size_t i, n = 0;
	FILE *f;

	out[0] = '\0';
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]) && n == 0; i++) {
		if ((f = fopen(paths[i], "r")) == NULL)
			continue;
		n = fread(buf + sizeof(key) - 1, 1, 128, f);
		fclose(f);
		while (n > 0 && (buf[sizeof(key) - 2 + n] == '\n' ||
		    buf[sizeof(key) - 2 + n] == ' '))
			n--;
	}
	if (n == 0)
		return;
	memcpy(buf, key, sizeof(key) - 1);
	if (EVP_Digest(buf, sizeof(key) - 1 + n, md, &mdlen, EVP_sha256(),
	    NULL) != 1 || mdlen < 8)
		return;
	for (k = 0; k < 8; k++)
		snprintf(out + 2 * k, 3, "%02x", md[k]);
}

/* The answer of the probe thread, on the loop. */
static void
job_deliver(void *arg, lt_item *item)
{
	struct pb_state *s = arg;
	struct pb_job *j = LT_CONTAINER(item, struct pb_job, link);
	char machine[17];

	s->busy = 0;
	json_decref(s->compute);
	if (j->rc != 0) {
		s->compute_status = hs_status_of_error(j->rc);
		s->compute = json_pack("{s:s,s:s}", "state", "failed", "error",
		    j->err);
		log_warnx("compute probe: %s", j->err);
	} else {
		s->compute_status = 200;
		machine_of(machine);
		s->compute = json_pack("{s:s,s:s,s:s,s:o,s:s,s:I,s:s,s:f,s:f,"
		    "s:i,s:o,s:o,s:i,s:i,s:f,s:f,s:f,s:f}", "state", "done",
		    "addr", s->c.advertise, "machine", machine,
		    "shape", shape_json(&j->shape, j->batch), "device",
		    s->c.device, "memory_bytes", (json_int_t)j->memory,
		    "memory_source", j->memory_how, "train_positions_per_s",
		    j->rates.train_positions_per_s, "forward_positions_per_s",
		    j->rates.forward_positions_per_s, "repeats",
		    j->rates.repeats, "train_positions_per_s_each",
		    numbers_json(j->rates.train_each, j->rates.repeats),
		    "forward_positions_per_s_each",
		    numbers_json(j->rates.forward_each, j->rates.repeats),
		    "train_steps",
		    j->rates.train_steps, "forward_passes",
		    j->rates.forward_passes, "train_s", j->rates.train_s,
		    "forward_s", j->rates.forward_s, "serve_pass_one_s",
		    j->rates.serve_pass_one_s, "serve_pass_window_s",
		    j->rates.serve_pass_window_s);
		if (s->compute != NULL) {
			json_object_set_new(s->compute,
			    "encode_cpu_s_per_param",
			    json_real(j->update.encode_s));
			json_object_set_new(s->compute, "merge_cpu_s_per_param",
			    json_real(j->update.merge_s));
		}
		/* only where the training itself runs on the CPU does the
		 * exchange's CPU come out of its time */
		if (s->compute != NULL && strcmp(j->be->name, "cpu") == 0 &&
		    j->rates.train_cpu_share > 0)
			json_object_set_new(s->compute, "cpu_share",
			    json_real(j->rates.train_cpu_share));
		log_info("compute probe: %.0f positions/s training, %.0f "
		    "forward, a serving pass %.3f ms (one row) to %.3f ms "
		    "(every row) (medians of %d)",
		    j->rates.train_positions_per_s,
		    j->rates.forward_positions_per_s,
		    1e3 * j->rates.serve_pass_one_s,
		    1e3 * j->rates.serve_pass_window_s, j->rates.repeats);
	}
	free(j);
}

/* Seconds until another compute probe may start (probe_compute_
 * interval_s from the start of the last), 0 when it may now. */
static double
compute_wait(const struct pb_state *s)
{
	double left;

	if (s->compute_began <= 0)
		return 0;
	left = s->compute_began + s->c.compute_interval_s - kn_now();
	return left > 0 ? left : 0;
}

/* What keeps a listed identity from freezing training with compute
 * probes: operators only (the route's who column), seconds x repeats
 * bounded, one at a time and one per probe_compute_interval_s.  0 to go
 * on, else the answer is set. */
static int
compute_refused(struct pb_state *s, hs_response *res, double seconds,
    double repeats)
{
	double wait;
	char v[32];

	if (seconds * repeats > s->c.compute_max_s) {
		hs_response_text(res, 400, "seconds x repeats = %g: at most %g "
		    "(probe_compute_max_s; training pauses about three times "
		    "as long)", seconds * repeats, s->c.compute_max_s);
		return 1;
	}
	if (refused(s, res))
		return 1;
	if ((wait = compute_wait(s)) > 0) {
		snprintf(v, sizeof(v), "%.0f", ceil(wait));
		hs_response_header(res, "Retry-After", v);
		hs_response_text(res, 429, "a compute probe began %.0f s ago: "
		    "one every %d s (probe_compute_interval_s), the next in "
		    "%.0f s", kn_now() - s->compute_began,
		    s->c.compute_interval_s, ceil(wait));
		return 1;
	}
	return 0;
}

static void
post_compute(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;
	struct pb_job *j;
	double seconds, repeats;

	(void)m;
	if (s->c.expert >= 0) {
		hs_response_text(res, 404, "expert %d trains a SOMA expert: the "
		    "compute probe times BlockTrain blocks only", s->c.expert);
		return;
	}
	if (param(req, res, "seconds", 0.01, PB_MAX_COMPUTE_SECONDS,
	    PB_DEFAULT_COMPUTE_SECONDS, 0, &seconds) != 0)
		return;
	/* by default as many repetitions as the bound allows, up to 3 */
	repeats = floor(s->c.compute_max_s / seconds);
	if (repeats > PB_DEFAULT_COMPUTE_REPEATS)
		repeats = PB_DEFAULT_COMPUTE_REPEATS;
	if (repeats < 1)
		repeats = 1;
	if (param(req, res, "repeats", 1, PCM_MAX_REPEATS, repeats, 1,
	    &repeats) != 0 || compute_refused(s, res, seconds, repeats))
		return;
	if ((j = calloc(1, sizeof(*j))) == NULL) {
		hs_response_text(res, 503, "out of memory");
		return;
	}
	j->shape = pr_spec_block_shape(s->c.spec, s->c.block - 1);
	j->batch = s->c.spec->batch;
	j->be = s->c.be;
	j->trainer = s->c.ops.trainer(s->c.arg);
	j->seconds = seconds;
	j->repeats = (int)repeats;
	s->busy = 1;
	s->compute_began = kn_now();
	s->compute_status = 202;
	json_decref(s->compute);
	s->compute = json_pack("{s:s}", "state", "running");
	lt_submit(s->lt, &j->link);
	hs_response_json(res, 202, json_pack("{s:s}", "state", "running"));
}

/* GET of /v1/probe/compute or /links: the last result. */
static void
get_result(struct pb_state *s, hs_response *res, int status, json_t *o,
    const char *what)
{
	(void)s;
	if (status == 0) {
		hs_response_text(res, 404, "no %s probe asked yet: POST "
		    "/v1/probe/%s starts one", what, what);
		return;
	}
	hs_response_json(res, status, json_incref(o));
}

/* GET of /v1/probe/compute: the last result, with the seconds until
 * another may start, for a tool to wait that long. */
static void
get_compute(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;
	json_t *o;

	(void)req;
	(void)m;
	if (s->compute_status == 0 || s->compute == NULL) {
		get_result(s, res, s->compute_status, s->compute, "compute");
		return;
	}
	o = json_copy(s->compute);
	if (o != NULL)
		json_object_set_new(o, "next_in_s", json_real(compute_wait(s)));
	hs_response_json(res, s->compute_status, o);
}

/* ---- the link probe, on the loop ---- */

static void links_next(struct pb_links *L);

static void
links_free(struct pb_links *L)
{
	int i;

	for (i = 0; i < L->nt; i++)
		free(L->t[i].rtt_ms);
	free(L->t);
	free(L);
}

static json_t *
target_json(const struct pb_links *L, struct pb_target *t)
{
	json_t *o;

	if (t->error[0] != '\0')
		return json_pack("{s:s,s:s}", "to", t->addr, "error", t->error);
	pcm_sort(t->rtt_ms, L->samples);
	o = json_pack("{s:s,s:f,s:f,s:i,s:f,s:i,s:f,s:I}", "to", t->addr,
	    "rtt_ms", pcm_quantile(t->rtt_ms, L->samples, 0.5), "rtt_spread_ms",
	    pcm_quantile(t->rtt_ms, L->samples, 0.75) - pcm_quantile(t->rtt_ms,
	    L->samples, 0.25), "samples", L->samples, "stream_bytes_per_s",
	    t->stream_bps, "streams", L->streams, "multi_bytes_per_s",
	    t->multi_bps, "sink_bytes", (json_int_t)t->sink_bytes);
	if (o != NULL && t->sink_bytes > 0 && t->send_cpu_s > 0)
		json_object_set_new(o, "send_cpu_s_per_byte",
		    json_real(t->send_cpu_s / (double)t->sink_bytes));
	if (o != NULL && t->sink_bytes > 0 && t->take_cpu_s > 0)
		json_object_set_new(o, "take_cpu_s_per_byte",
		    json_real(t->take_cpu_s / (double)t->sink_bytes));
	return o;
}

/* The run is over: its result becomes the answer to GET. */
static void
links_finish(struct pb_links *L)
{
	struct pb_state *s = L->s;
	json_t *arr;
	int i;

	s->busy = 0;
	s->run = NULL;
	json_decref(s->links);
	if (L->aborted) {
		s->links_status = 409;
		s->links = json_pack("{s:s,s:s}", "state", "failed", "error",
		    L->abort_why);
		log_warnx("link probe: %s", L->abort_why);
		links_free(L);
		return;
	}
	arr = json_array();
	for (i = 0; i < L->nt; i++)
		json_array_append_new(arr, target_json(L, &L->t[i]));
	s->links_status = 200;
	s->links = json_pack("{s:s,s:s,s:i,s:I,s:i,s:f,s:o}", "state", "done",
	    "from", s->c.advertise, "samples", L->samples, "bytes",
	    (json_int_t)L->bytes, "streams", L->streams, "seconds",
	    kn_now() - L->started, "links", arr);
	log_info("link probe of %d peers done in %.1f s", L->nt,
	    kn_now() - L->started);
	links_free(L);
}

/* The current peer failed at what: the reason kept, on to the next. */
static void
target_failed(struct pb_links *L, const char *what, const char *why)
{
	struct pb_target *t = &L->t[L->cur];

	if (t->error[0] == '\0')
		snprintf(t->error, sizeof(t->error), "%.60s: %.130s", what,
		    why);
}

/* What a request of the run came to: NULL when it was a 200, else why
 * not (in buf). */
static const char *
result_error(const hc_result *r, char *buf, size_t len)
{
	size_t n;

	if (r->error != NULL)
		return r->error;
	if (r->status == 200)
		return NULL;
	n = r->body ? strcspn(r->body, "\n") : 0;
	snprintf(buf, len, "HTTP %ld%s%.*s", r->status, n ? ": " : "",
	    (int)(n > 120 ? 120 : n), r->body ? r->body : "");
	return buf;
}

static const char *const phase_name[] = { "warm-up", "round trip",
	"one stream", "warm-up of the streams", "streams" };

/* The peer's loop CPU from an answer: echoes set where it stood (the
 * latest of a warm-up's), sinks where it got to, and the end of each
 * transfer adds the difference to take_cpu_s. */
static void
peer_cpu(struct pb_links *L, struct pb_target *t, const hc_result *r)
{
	char *end;
	double v = r->header ? strtod(r->header, &end) : -1;

	if (r->header == NULL || end == r->header || !(v >= 0 && isfinite(v))) {
		if (L->phase == PH_SINGLE || L->phase == PH_MULTI)
			t->take_cpu_s = -1;     /* a daemon of before it */
		return;
	}
	if (L->phase == PH_RTT || L->phase == PH_MWARM)
		t->peer_cpu0 = fmax(t->peer_cpu0, v);
	else if (L->phase == PH_SINGLE || L->phase == PH_MULTI)
		t->peer_cpu1 = fmax(t->peer_cpu1, v);
}

/* A transfer is over: what the peer's loop took for it. */
static void
take_cpu(struct pb_target *t)
{
	if (t->take_cpu_s >= 0 && t->peer_cpu1 > t->peer_cpu0)
		t->take_cpu_s += t->peer_cpu1 - t->peer_cpu0;
	t->peer_cpu0 = t->peer_cpu1 = 0;
}

/* The sink's count of what it took, added to the peer's. */
static void
count_sink(struct pb_target *t, const hc_result *r)
{
	json_t *o = json_loadb(r->body, r->body_len, 0, NULL);

	t->sink_bytes += (uint64_t)pr_int_or(json_integer_value(
	    json_object_get(o, "bytes")), 0, (int64_t)PB_MAX_BYTES, 0);
	json_decref(o);
}

static void
links_done(void *ctx, hc_result *r)
{
	struct pb_links *L = ctx;
	struct pb_state *s = L->s;
	struct pb_target *t = &L->t[L->cur];
	char buf[200];
	const char *why;
	double el;

	L->pending--;
	s->c.ops.meter(s->c.arg, peers_find(s->c.ops.peers(s->c.arg, NULL),
	    t->addr), PEERS_KIND_OTHER, r->bytes_in, r->bytes_out);
	if (s->c.ops.stopping(s->c.arg)) {
		L->aborted = 1;
		snprintf(L->abort_why, sizeof(L->abort_why), "the daemon is "
		    "stopping");
	}
	if ((why = result_error(r, buf, sizeof(buf))) == NULL)
		peer_cpu(L, t, r);
	if (why != NULL)
		target_failed(L, phase_name[L->phase], why);
	else if (L->phase == PH_RTT)
		t->rtt_ms[L->sample++] = r->total_s * 1000.0;
	else if (L->phase == PH_SINGLE) {
		count_sink(t, r);
		t->send_cpu_s += kn_thread_cpu_now() - L->cpu_t0;
		take_cpu(t);
		/* the connection is warm: pretransfer is ~0, but a new one's
		 * handshake is not the link's throughput */
		el = r->total_s - r->pretransfer_s;
		t->stream_bps = (double)L->bytes / (el > 0 ? el : r->total_s);
	} else if (L->phase == PH_MULTI)
		count_sink(t, r);
	if (L->pending > 0)
		return;
	if (L->phase == PH_MULTI && t->error[0] == '\0') {
		t->multi_bps = (double)L->bytes / (kn_now() - L->multi_t0);
		t->send_cpu_s += kn_thread_cpu_now() - L->cpu_t0;
		take_cpu(t);
	}
	if (t->error[0] != '\0')
		L->phase = PH_DONE;
	else if (L->phase != PH_RTT || L->sample == L->samples)
		L->phase++;
	links_next(L);
}

/* Issues one request of the run to the current peer. */
static int
links_request(struct pb_links *L, const char *method, const char *path,
    size_t zeros)
{
	struct pb_state *s = L->s;
	struct pb_target *t = &L->t[L->cur];
	hc_request_opts o = { 0 };
	char url[2 * CF_HOST_LEN + 96], err[HC_ERR_LEN];
	double left = L->deadline - kn_now();

	snprintf(url, sizeof(url), "%s://%s%s%cfrom=%s", hc_scheme(s->c.client),
	    t->addr, path, strchr(path, '?') ? '&' : '?', s->c.advertise);
	o.method = method;
	o.url = url;
	o.pin = t->has_id ? t->id : NULL;
	o.body_zeros = zeros;
	o.timeout_ms = (long)(left * 1000) + 1;
	o.connect_timeout_ms = o.timeout_ms;
	o.max_body_bytes = 1 << 16;
	o.want_header = PB_LOOP_CPU_HEADER;
	if (hc_request(s->c.client, &o, links_done, L, err) != 0) {
		target_failed(L, phase_name[L->phase], err);
		return -1;
	}
	L->pending++;
	return 0;
}

/* The next step of the run, or its end. */
static void
links_next(struct pb_links *L)
{
	int k;

	for (;;) {
		if (!L->aborted && in_round(L->s)) {
			L->aborted = 1;
			snprintf(L->abort_why, sizeof(L->abort_why), "a round of "
			    "averaging began during the probe: probe again when "
			    "it is over");
		}
		if (L->aborted) {
			if (L->pending == 0)
				links_finish(L);
			return;
		}
		if (L->phase == PH_DONE) {
			L->cur++;
			L->phase = PH_WARM;
			L->sample = 0;
		}
		if (L->cur == L->nt) {
			links_finish(L);
			return;
		}
		if (kn_now() >= L->deadline) {
			for (; L->cur < L->nt; L->cur++)
				target_failed(L, "not measured", "the probe's "
				    "time limit was reached");
			links_finish(L);
			return;
		}
		switch (L->phase) {
		case PH_WARM:
		case PH_RTT:
			if (links_request(L, "GET", "/v1/probe/echo", 0) == 0)
				return;
			break;
		case PH_SINGLE:
			L->cpu_t0 = kn_thread_cpu_now();
			if (links_request(L, "POST", "/v1/probe/sink",
			    L->bytes) == 0)
				return;
			break;
		case PH_MWARM:
		case PH_MULTI:
			/* B split into K ranges, as a K-stream transfer of
			 * one body; the first takes the remainder */
			L->multi_t0 = kn_now();
			L->cpu_t0 = kn_thread_cpu_now();
			for (k = 0; k < L->streams; k++)
				if (L->phase == PH_MWARM ? links_request(L, "GET",
				    "/v1/probe/echo", 0) != 0 :
				    links_request(L, "POST", "/v1/probe/sink",
				    L->bytes / L->streams + (k == 0 ?
				    L->bytes % L->streams : 0)) != 0)
					break;
			if (L->pending > 0)
				return;
			break;
		}
		L->phase = PH_DONE;     /* the request could not start */
	}
}

/* The peers named by ?peers=a,b (all others when absent) into L. */
static int
links_targets(struct pb_state *s, const hs_request *req, hs_response *res,
    struct pb_links *L)
{
	char names[1024], *tok, *save;
	int i, self, want[1024] = { 0 };
	const peers_list *pl = s->c.ops.peers(s->c.arg, &self);

	if (pl->n > (int)(sizeof(want) / sizeof(want[0]))) {
		hs_response_text(res, 400, "too many peers to probe");
		return -1;
	}
	if (pb_query_get(req->query, "peers", names, sizeof(names)))
		for (tok = strtok_r(names, ",", &save); tok != NULL;
		    tok = strtok_r(NULL, ",", &save)) {
			if ((i = peers_find(pl, tok)) < 0 ||
			    i == self) {
				hs_response_text(res, 400, "peers=%s: %s", tok,
				    i < 0 ? "not in this daemon's peer list" :
				    "that is this daemon");
				return -1;
			}
			want[i] = 1;
		}
	else
		for (i = 0; i < pl->n; i++)
			want[i] = i != self;
	L->t = calloc((size_t)pl->n + 1, sizeof(*L->t));
	if (L->t == NULL) {
		hs_response_text(res, 503, "out of memory");
		return -1;
	}
	for (i = 0; i < pl->n; i++) {
		struct pb_target *t;

		if (!want[i])
			continue;
		t = &L->t[L->nt++];
		snprintf(t->addr, sizeof(t->addr), "%s", pl->v[i].addr);
		t->has_id = pl->v[i].has_id;
		memcpy(t->id, pl->v[i].id, sizeof(t->id));
		if ((t->rtt_ms = calloc((size_t)L->samples,
		    sizeof(double))) == NULL) {
			hs_response_text(res, 503, "out of memory");
			return -1;
		}
	}
	return 0;
}

/* It sends up to 64 MiB to every peer: an operator's to ask for, never
 * another daemon's (theirs are echo, source and sink), as its row
 * says. */
static void
post_links(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;
	struct pb_links *L;
	double samples, bytes, streams, seconds;

	(void)m;
	if (param(req, res, "samples", 1, PB_MAX_SAMPLES, PB_DEFAULT_SAMPLES,
	    1, &samples) != 0 || param(req, res, "bytes", 1,
	    (double)PB_MAX_BYTES, (double)PB_DEFAULT_BYTES, 1, &bytes) != 0 ||
	    param(req, res, "streams", 1, PB_MAX_STREAMS, PB_DEFAULT_STREAMS, 1,
	    &streams) != 0 || param(req, res, "seconds", 0.1, PB_MAX_SECONDS,
	    PB_DEFAULT_SECONDS, 0, &seconds) != 0)
		return;
	if (bytes < streams) {
		hs_response_text(res, 400, "bytes=%.0f is fewer than streams=%.0f"
		    ": each stream takes bytes/streams", bytes, streams);
		return;
	}
	if ((L = calloc(1, sizeof(*L))) == NULL) {
		hs_response_text(res, 503, "out of memory");
		return;
	}
	L->s = s;
	L->samples = (int)samples;
	L->bytes = (size_t)bytes;
	L->streams = (int)streams;
	L->seconds = seconds;
	if (links_targets(s, req, res, L) != 0) {
		links_free(L);
		return;
	}
	if (refused(s, res)) {
		links_free(L);
		return;
	}
	L->started = kn_now();
	L->deadline = L->started + seconds;
	s->busy = 1;
	s->run = L;
	s->links_status = 202;
	json_decref(s->links);
	s->links = json_pack("{s:s}", "state", "running");
	log_info("link probe of %d peers: %d round trips, %zu bytes, %d "
	    "streams, at most %.0f s", L->nt, L->samples, L->bytes, L->streams,
	    seconds);
	hs_response_json(res, 202, json_pack("{s:s,s:i}", "state", "running",
	    "peers", L->nt));
	links_next(L);
}

/* ---- the routes ---- */

/* GET of /v1/probe/links: the last result. */
static void
get_links(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	struct pb_state *s = ctx;

	(void)req;
	(void)m;
	get_result(s, res, s->links_status, s->links, "links");
}

/* Below /v1/probe/.  A peer daemon's link probe asks for echo, source
 * and sink; what pauses training or loads every link is an operator's.
 * The metering is the table above's. */
static const hr_route routes[] = {
	{ "GET", "echo", HR_ANYONE, HR_METER_KEEP, get_echo, NULL },
	{ "GET", "source", HR_ANYONE, HR_METER_KEEP, get_source, NULL },
	{ "POST", "sink", HR_ANYONE, HR_METER_KEEP, post_sink, NULL },
	{ "GET", "compute", HR_ANYONE, HR_METER_KEEP, get_compute, NULL },
	{ "POST", "compute", HR_OPERATOR, HR_METER_KEEP, post_compute, NULL },
	{ "GET", "links", HR_ANYONE, HR_METER_KEEP, get_links, NULL },
	{ "POST", "links", HR_OPERATOR, HR_METER_KEEP, post_links, NULL },
};

/* A 403 says what the probe would do to the daemon; a 405 is the
 * table's. */
static void
refuse(void *ctx, const hs_request *req, hs_response *res, int status,
    const hr_route *row, const hr_match *m)
{
	(void)ctx;
	(void)m;
	if (status != 403)
		hr_refuse_text(req, res, status);
	else if (row->fn == post_compute)
		hs_response_text(res, 403, "the compute probe pauses training: "
		    "only an operator (a client line of the peer list) may ask "
		    "for it, not a peer daemon");
	else
		hs_response_text(res, 403, "a link probe loads every link of "
		    "this daemon: only an operator (a client line of the peer "
		    "list) may ask for it, not a peer daemon");
}

static void
not_found(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)ctx;
	(void)m;
	hs_response_text(res, 404, "no such probe: %s (echo, source, sink, "
	    "compute, links)", req->path);
}

/* The route table's who: the daemon's, through the ops. */
static unsigned
who(void *ctx, const hs_request *req)
{
	const struct pb_state *s = ctx;

	return s->c.ops.who(s->c.arg, req);
}

void
pb_handle(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	hr_table t = { routes, sizeof(routes) / sizeof(routes[0]), ctx,
	    who, NULL, refuse, not_found };

	hr_dispatch(&t, req, res, m);
}

int
pb_start(struct pb_state **out, const pb_config *c, char *err)
{
	struct pb_state *s = calloc(1, sizeof(*s));
	lt_opts lo = { "probe", prober_run, job_deliver, job_free, job_free,
	    NULL };
	int rc;

	if (s == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	s->c = *c;
	lo.arg = s;
	if ((rc = lt_start(&s->lt, c->loop, &lo, err)) != 0) {
		free(s);
		return rc;
	}
	*out = s;
	return KN_OK;
}

void
pb_close(struct pb_state *s)
{

	if (s == NULL || s->lt == NULL)
		return;
	lt_close(s->lt, NULL, NULL);
	s->lt = NULL;
}

void
pb_free(struct pb_state *s)
{

	if (s == NULL)
		return;
	/* a link run's requests were cancelled as the client closed, and
	 * its last callback freed it */
	json_decref(s->compute);
	json_decref(s->links);
	free(s);
}
