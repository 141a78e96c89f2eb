/* Fuzz target: the JSON body of POST /v1/completions, read as the entry
 * reads it (daemon/pipeline/serve_request.c) once the HTTP server has
 * bounded the request (its HTTP is fuzzed by fuzz_http, through the one
 * parser of daemon/net/http_server.c).  Every input is a body; one that
 * looks like an HTTP request (the older corpus files) is read as a body
 * too, and then once more from the end of its head, so that the bodies
 * those files carry are still read.  A body is refused with a status and
 * a reason, or taken as a gen frame the ring takes: within the window and
 * the steps cap, and the same after encoding it. */
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
	sr_opts o;
	int stream, status, k;

	memset(msg, 0, sizeof(msg));
	status = sr_completion(body, len, spec(), "fuzz-model", &f, &o, msg,
	    sizeof(msg));
	stream = o.stream;
	if (status != 0) {
		if (status != 400 && status != 404 && status != 503)
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
	if (o.n < 1 || o.n > SR_N_MAX || o.logprobs < -1 ||
	    o.logprobs > SR_LOGPROBS_MAX || o.nstop < 0 ||
	    o.nstop > SR_STOP_MAX)
		fz_fail("a completion of n %d, logprobs %d, %d stop strings "
		    "was taken", o.n, o.logprobs, o.nstop);
	for (k = 0; k < o.nstop; k++)
		if (o.stop_len[k] < 1 || o.stop_len[k] > SR_STOP_LEN)
			fz_fail("a stop string of %zu bytes was taken",
			    o.stop_len[k]);
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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = fz_copy(data, size);
	size_t i;

	completion(copy, size);
	/* a request's body: what follows its head */
	if (size > 0 && data[0] >= 'A' && data[0] <= 'Z')
		for (i = 0; i + 4 <= size; i++)
			if (memcmp(copy + i, "\r\n\r\n", 4) == 0) {
				completion(copy + i + 4, size - i - 4);
				break;
			}
	free(copy);
	return 0;
}
