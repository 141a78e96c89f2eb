/* Fuzz target: what a client sends on the pipeline port, read as the
 * entry reads it (daemon/pipeline/serve_request.c).  An input whose first byte is
 * a capital letter is HTTP (as sh_is_http tells it): its requests are
 * parsed one after another, as a kept-alive connection sends them, and
 * the body of each POST /v1/completions is read as a completion; any
 * other input is a completion's JSON body by itself.  The requests must
 * not depend on where the bytes were cut, every bound must hold, and a
 * completion that is taken must be a gen frame the ring takes: within
 * the window and the steps cap, and the same after encoding it. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/pipeline/serve_request.h"
#include "kernels/error.h"
#include "proto/pipeline.h"
#include "proto/spec.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "completions";

/* A run's window as small as a test ring's, so that prompts reach it. */
#define FZ_WINDOW 64
/* Requests looked at per input; the rest only parse. */
#define FZ_REQUESTS 16

/* What a parse saw of each request, to compare two cuts of the bytes. */
typedef struct {
	int n, status;
	int method[FZ_REQUESTS];
	size_t url_len[FZ_REQUESTS], body_len[FZ_REQUESTS];
	unsigned long body_sum[FZ_REQUESTS];
} seen;

static const pr_spec *
spec(void)
{
	static pr_spec s;
	static int ready;

	if (!ready) {
		pr_spec_defaults(&s);
		s.window = FZ_WINDOW;
		ready = 1;
	}
	return &s;
}

/* A completion body: refused with a status and a reason and the frame
 * left clear, or taken as a gen frame within every bound. */
static void
completion(const char *body, size_t len)
{
	static const pl_frame cleared;
	pl_frame f, g;
	char msg[PL_MSG_LEN], err[KN_ERR_LEN], *out;
	size_t outlen;
	int stream = -1, status;

	memset(msg, 0, sizeof(msg));
	status = sr_completion(body, len, spec(), &f, &stream, msg,
	    sizeof(msg));
	if (status != 0) {
		if (status != 400 && status != 503)
			fz_fail("a completion refused with status %d", status);
		if (msg[0] == '\0')
			fz_fail("a completion refused without a reason");
		if (memcmp(&f, &cleared, sizeof(f)) != 0)
			fz_fail("a refused completion left its frame filled");
		return;
	}
	if (f.type != PL_GEN || f.data == NULL || (stream != 0 && stream != 1))
		fz_fail("a taken completion is no gen frame");
	if (f.length < 1 || f.data_len > FZ_WINDOW ||
	    (size_t)f.length > FZ_WINDOW - f.data_len)
		fz_fail("a completion of %zu + %d bytes was taken for a window "
		    "of %d", f.data_len, f.length, FZ_WINDOW);
	if (f.steps < 1 || f.steps > PL_STEPS_MAX)
		fz_fail("a completion of %d steps was taken", f.steps);
	if (!(f.temperature >= 0 && f.temperature <= 100))
		fz_fail("a completion at temperature %g was taken",
		    f.temperature);
	if (f.mode != PL_MODE_BT && f.mode != PL_MODE_AR)
		fz_fail("a completion of mode %d was taken", (int)f.mode);
	/* the frame the entry would start the request with */
	if (pl_frame_encode(&f, &out, &outlen, err) != 0)
		fz_fail("a taken completion does not encode: %s", err);
	if (pl_frame_decode(out + PL_HEADER, outlen - PL_HEADER, &g, err) != 0)
		fz_fail("a taken completion's frame does not decode: %s", err);
	if (g.length != f.length || g.steps != f.steps || g.seed != f.seed ||
	    g.mode != f.mode || g.temperature != f.temperature ||
	    g.data_len != f.data_len ||
	    memcmp(g.data, f.data, f.data_len) != 0)
		fz_fail("a completion's gen frame differs after decoding");
	free(out);
	pl_frame_clear(&f);
	pl_frame_clear(&g);
}

/* One request read whole: its bounds, and what it asks. */
static void
request(sr_request *q, seen *w, int look)
{
	size_t plen = sr_path_len(q);
	unsigned long sum = 0;
	size_t i;

	if (q->url_len >= sizeof(q->url) || q->url[q->url_len] != '\0' ||
	    plen > q->url_len)
		fz_fail("a target of %zu bytes", q->url_len);
	if (q->header_bytes > SR_MAX_HEADER || q->body_len > SR_MAX_BODY)
		fz_fail("a request of %zu header and %zu body bytes was kept",
		    q->header_bytes, q->body_len);
	if (q->body_len > 0 && (q->body == NULL || q->body[q->body_len] != '\0'))
		fz_fail("a body is not NUL-terminated");
	for (i = 0; i < q->body_len; i++)
		sum = sum * 31 + (unsigned char)q->body[i];
	if (w->n < FZ_REQUESTS) {
		w->method[w->n] = sr_method(q);
		w->url_len[w->n] = q->url_len;
		w->body_len[w->n] = q->body_len;
		w->body_sum[w->n] = sum;
	}
	w->n++;
	if (look && w->n <= FZ_REQUESTS && sr_method(q) == HTTP_POST &&
	    plen == 15 && memcmp(q->url, "/v1/completions", 15) == 0)
		completion(q->body, q->body_len);
}

/* The bytes as a connection sends them, in two pieces cut at cut; the
 * requests they make into *w, completions read when look is set. */
static void
parse(const char *p, size_t n, size_t cut, seen *w, int look)
{
	sr_request q;
	char msg[PL_MSG_LEN];
	size_t off = 0, end = cut, used;
	int status = 0;

	memset(w, 0, sizeof(*w));
	sr_init(&q);
	while (off < n) {
		if (off >= end)
			end = n;
		status = sr_execute(&q, p + off, end - off, &used, msg,
		    sizeof(msg));
		if (used > end - off)
			fz_fail("the parser took %zu of %zu bytes", used,
			    end - off);
		off += used;
		if (status != 0)
			break;
		if (q.complete) {
			request(&q, w, look);
			sr_next(&q);
		} else if (used < end - off)
			fz_fail("the parser stopped at %zu of %zu bytes without "
			    "a request or an error", used, end - off);
	}
	if (status != 0 && status != 400 && status != 413)
		fz_fail("bytes refused with status %d", status);
	w->status = status;
	sr_free(&q);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = fz_copy(data, size);
	seen whole, cut;

	if (size == 0 || !(data[0] >= 'A' && data[0] <= 'Z')) {
		completion(copy, size);
		free(copy);
		return 0;
	}
	parse(copy, size, size, &whole, 1);
	/* the same bytes cut somewhere: the same requests, the same end */
	parse(copy, size, (size_t)data[size - 1] * 7 % size, &cut, 0);
	if (whole.n != cut.n || whole.status != cut.status ||
	    memcmp(whole.method, cut.method, sizeof(whole.method)) != 0 ||
	    memcmp(whole.url_len, cut.url_len, sizeof(whole.url_len)) != 0 ||
	    memcmp(whole.body_len, cut.body_len, sizeof(whole.body_len)) != 0 ||
	    memcmp(whole.body_sum, cut.body_sum, sizeof(whole.body_sum)) != 0)
		fz_fail("the requests differ with the bytes cut in two (%d and "
		    "%d requests, status %d and %d)", whole.n, cut.n,
		    whole.status, cut.status);
	free(copy);
	return 0;
}
