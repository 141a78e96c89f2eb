/* The JSON of a completion, read without HTTP or a socket
 * (serve_request.h): its fields checked one by one, each integer through
 * proto/intcheck.h before it is added to anything. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/blocktrain/blocktrain.h"
#include "kernels/error.h"
#include "proto/intcheck.h"
#include "daemon/pipeline/serve_request.h"

/* Completions ------------------------------------------------------------ */

static int
refuse(char *msg, size_t len, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int
refuse(char *msg, size_t len, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
	return status;
}

/* A field of the request body: absent or null (0), of its type (1), or
 * not (-1, the reason in msg). */
static int
field(json_t *o, const char *key, json_type type, json_t **out, char *msg,
    size_t len)
{
	static const char *names[] = { "an object", "an array", "a string",
	    "an integer", "a number", "true or false", "true or false",
	    "null" };

	*out = json_object_get(o, key);
	if (*out == NULL || json_is_null(*out))
		return 0;
	if (json_typeof(*out) == type || (type == JSON_REAL &&
	    json_is_integer(*out)) || (type == JSON_TRUE &&
	    json_is_boolean(*out)))
		return 1;
	refuse(msg, len, 400, "%s must be %s", key, names[type]);
	return -1;
}

/* The integers of the body, each in its range before it is used. */
static int
completion_ints(json_t *o, const pr_spec *spec, pl_frame *f, char *msg,
    size_t len)
{
	json_int_t v;
	json_t *j;
	int rc;
	/* the window less the prompt: what the output may take */
	int64_t room = (int64_t)spec->window - (int64_t)f->data_len;

	if ((rc = field(o, "max_tokens", JSON_INTEGER, &j, msg, len)) < 0)
		return 400;
	if (rc > 0) {
		v = json_integer_value(j);
		if (v < 1 || !pr_int_sum_le(v, (int64_t)f->data_len,
		    spec->window))
			return refuse(msg, len, 400, "max_tokens is %"
			    JSON_INTEGER_FORMAT ": it must be at least 1, and "
			    "with the prompt (%zu bytes) fit the window of %d "
			    "bytes", v, f->data_len, spec->window);
		f->length = (int)v;
	} else if (room < 1)
		return refuse(msg, len, 400, "the prompt (%zu bytes) leaves no "
		    "room for output in the window of %d bytes", f->data_len,
		    spec->window);
	else if (f->length > room)
		/* what the window leaves after the prompt, when less */
		f->length = (int)room;
	if ((rc = field(o, "steps", JSON_INTEGER, &j, msg, len)) < 0)
		return 400;
	if (rc > 0 && pr_int_to_int(json_integer_value(j), 1, PL_STEPS_MAX,
	    &f->steps) != 0)
		return refuse(msg, len, 400, "steps is %" JSON_INTEGER_FORMAT
		    ": it must be 1 to %d (a completion's cost grows with its "
		    "steps; the default is %d)", json_integer_value(j),
		    PL_STEPS_MAX, PL_STEPS_DEFAULT);
	if ((rc = field(o, "seed", JSON_INTEGER, &j, msg, len)) < 0)
		return 400;
	if (rc > 0 && !pr_int_in(json_integer_value(j), 0, INT64_MAX))
		return refuse(msg, len, 400, "seed must not be negative");
	if (rc > 0)
		f->seed = (uint64_t)json_integer_value(j);
	return 0;
}

/* A number field that the entry serves at one value only (its default,
 * which changes nothing): any other is refused by name. */
static int
only_default(json_t *o, const char *key, double def, sr_opts *x, char *msg,
    size_t len)
{
	json_t *j;
	int rc;

	if ((rc = field(o, key, JSON_REAL, &j, msg, len)) < 0) {
		x->param = key;
		return 400;
	}
	if (rc > 0 && json_number_value(j) != def) {
		x->param = key;
		return refuse(msg, len, 400, "%s is not served here: only %g "
		    "(the default) is taken", key, def);
	}
	return 0;
}

/* stop: one string or an array of up to SR_STOP_MAX, none empty. */
static int
stop_strings(json_t *o, const pr_spec *spec, sr_opts *x, char *msg,
    size_t len)
{
	json_t *j = json_object_get(o, "stop"), *e;
	size_t i, n, k;

	x->param = "stop";
	if (j == NULL || json_is_null(j)) {
		x->param = NULL;
		return 0;
	}
	if (!json_is_string(j) && !json_is_array(j))
		return refuse(msg, len, 400, "stop must be a string or an array "
		    "of strings");
	n = json_is_string(j) ? 1 : json_array_size(j);
	if (n > SR_STOP_MAX)
		return refuse(msg, len, 400, "stop has %zu strings: at most %d",
		    n, SR_STOP_MAX);
	for (i = 0; i < n; i++) {
		e = json_is_string(j) ? j : json_array_get(j, i);
		if (!json_is_string(e))
			return refuse(msg, len, 400, "stop must be a string or "
			    "an array of strings");
		k = json_string_length(e);
		if (k == 0 || k > SR_STOP_LEN || k > (size_t)spec->window)
			return refuse(msg, len, 400, "a stop string must have 1 "
			    "to %d bytes", spec->window < SR_STOP_LEN ?
			    spec->window : SR_STOP_LEN);
		memcpy(x->stop[i], json_string_value(e), k);
		x->stop_len[i] = k;
	}
	x->nstop = (int)n;
	x->param = NULL;
	return 0;
}

/* The OpenAI fields: model, n, echo, logprobs, stop, stream_options,
 * served; the ones that would change the answer in a way the entry does
 * not serve, refused by name (user changes nothing and is read as
 * nothing). */
static int
openai_fields(json_t *o, const pr_spec *spec, const char *model, sr_opts *x,
    char *msg, size_t len)
{
	json_t *j, *k;
	int rc;

#define FIELD_OR_REFUSE(key, type) \
	if ((rc = field(o, key, type, &j, msg, len)) < 0) { \
		x->param = key; \
		return 400; \
	}
	FIELD_OR_REFUSE("model", JSON_STRING);
	if (rc > 0 && model != NULL && strcmp(json_string_value(j), model)) {
		x->param = "model";
		x->code = "model_not_found";
		return refuse(msg, len, 404, "the model '%.60s' does not exist "
		    "here: this entry serves '%.60s' (GET /v1/models)",
		    json_string_value(j), model);
	}
	FIELD_OR_REFUSE("n", JSON_INTEGER);
	if (rc > 0 && pr_int_to_int(json_integer_value(j), 1, SR_N_MAX,
	    &x->n) != 0) {
		x->param = "n";
		return refuse(msg, len, 400, "n is %" JSON_INTEGER_FORMAT ": it "
		    "must be 1 to %d (each choice is a request of the ring)",
		    json_integer_value(j), SR_N_MAX);
	}
	FIELD_OR_REFUSE("best_of", JSON_INTEGER);
	if (rc > 0 && json_integer_value(j) != x->n) {
		x->param = "best_of";
		return refuse(msg, len, 400, "best_of is not served here: only "
		    "best_of equal to n (every choice is returned)");
	}
	FIELD_OR_REFUSE("echo", JSON_TRUE);
	x->echo = rc > 0 && json_is_true(j);
	FIELD_OR_REFUSE("logprobs", JSON_INTEGER);
	if (rc > 0 && pr_int_to_int(json_integer_value(j), 0,
	    SR_LOGPROBS_MAX, &x->logprobs) != 0) {
		x->param = "logprobs";
		return refuse(msg, len, 400, "logprobs is %" JSON_INTEGER_FORMAT
		    ": it must be 0 to %d (the alternatives given per byte)",
		    json_integer_value(j), SR_LOGPROBS_MAX);
	}
	if ((rc = stop_strings(o, spec, x, msg, len)) != 0)
		return rc;
	FIELD_OR_REFUSE("stream_options", JSON_OBJECT);
	if (rc > 0) {
		if ((rc = field(j, "include_usage", JSON_TRUE, &k, msg,
		    len)) < 0) {
			x->param = "stream_options";
			return 400;
		}
		x->include_usage = rc > 0 && json_is_true(k);
	}
	FIELD_OR_REFUSE("suffix", JSON_STRING);
	if (rc > 0 && json_string_length(j) > 0) {
		x->param = "suffix";
		return refuse(msg, len, 400, "suffix is not served here: a "
		    "completion continues its prompt, it inserts nothing");
	}
	FIELD_OR_REFUSE("logit_bias", JSON_OBJECT);
	if (rc > 0 && json_object_size(j) > 0) {
		x->param = "logit_bias";
		return refuse(msg, len, 400, "logit_bias is not served here");
	}
#undef FIELD_OR_REFUSE
	if ((rc = only_default(o, "top_p", 1, x, msg, len)) != 0 ||
	    (rc = only_default(o, "presence_penalty", 0, x, msg, len)) != 0 ||
	    (rc = only_default(o, "frequency_penalty", 0, x, msg, len)) != 0)
		return rc;
	return 0;
}

int
sr_completion(const char *body, size_t len, const pr_spec *spec,
    const char *model, pl_frame *f, sr_opts *x, char *msg, size_t msglen)
{
	json_error_t jerr;
	json_t *o, *v;
	int rc, status = 400;

	memset(f, 0, sizeof(*f));
	memset(x, 0, sizeof(*x));
	x->n = 1;
	x->logprobs = -1;
	f->type = PL_GEN;
	f->mode = PL_MODE_BT;
	f->length = SR_MAX_TOKENS_DEFAULT;
	f->steps = PL_STEPS_DEFAULT;
	f->temperature = 1.0;
	f->seed = 1;
	if ((o = json_loadb(body != NULL ? body : "", len, JSON_ALLOW_NUL,
	    &jerr)) == NULL) {
		pl_frame_clear(f);
		return refuse(msg, msglen, 400, "invalid JSON at line %d column "
		    "%d: %s", jerr.line, jerr.column, jerr.text);
	}
	if (!json_is_object(o)) {
		refuse(msg, msglen, 400, "the body must be a JSON object");
		goto out;
	}
	if ((status = openai_fields(o, spec, model, x, msg, msglen)) != 0)
		goto out;
	status = 400;
	if ((rc = field(o, "prompt", JSON_STRING, &v, msg, msglen)) <= 0) {
		x->param = "prompt";
		if (rc == 0)
			refuse(msg, msglen, 400, "prompt (a string) is required");
		goto out;
	}
	f->data_len = json_string_length(v);
	if ((f->data = malloc(f->data_len + 1)) == NULL) {
		status = refuse(msg, msglen, 503, "out of memory");
		goto out;
	}
	memcpy(f->data, json_string_value(v), f->data_len);
	if ((rc = field(o, "mode", JSON_STRING, &v, msg, msglen)) < 0)
		goto out;
	if (rc > 0 && pl_mode_parse(json_string_value(v), &f->mode) != 0) {
		refuse(msg, msglen, 400, "mode is blocktrain or ar, not '%.40s'",
		    json_string_value(v));
		goto out;
	}
	if (completion_ints(o, spec, f, msg, msglen) != 0)
		goto out;
	if ((rc = field(o, "temperature", JSON_REAL, &v, msg, msglen)) < 0)
		goto out;
	if (rc > 0 && !(json_number_value(v) >= 0 &&
	    json_number_value(v) <= 100)) {
		refuse(msg, msglen, 400, "temperature must be 0 to 100 (0 is "
		    "argmax)");
		goto out;
	}
	if (rc > 0)
		f->temperature = json_number_value(v);
	if ((rc = field(o, "decode", JSON_STRING, &v, msg, msglen)) < 0)
		goto out;
	if (rc > 0) {
		bt_decode d;

		if (bt_decode_parse(json_string_value(v), &d) != 0) {
			refuse(msg, msglen, 400, "decode is random, "
			    "confidence, margin or sampled, not '%.40s'",
			    json_string_value(v));
			goto out;
		}
		f->decode = 1 + (int)d;
	}
	if ((rc = field(o, "stream", JSON_TRUE, &v, msg, msglen)) < 0)
		goto out;
	x->stream = rc > 0 && json_is_true(v);
	/* the ring computes what logprobs asks (k + 1 figures a byte) */
	f->lpk = x->logprobs >= 0 ? x->logprobs + 1 : 0;
	status = 0;
out:
	json_decref(o);
	if (status != 0)
		pl_frame_clear(f);
	return status;
}
