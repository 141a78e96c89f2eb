/* The JSON of a completion, read without HTTP or a socket
 * (serve_request.h): its fields checked one by one, each integer through
 * proto/intcheck.h before it is added to anything. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

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

int
sr_completion(const char *body, size_t len, const pr_spec *spec,
    pl_frame *f, int *stream, char *msg, size_t msglen)
{
	json_error_t jerr;
	json_t *o, *v;
	int rc, status = 400;

	memset(f, 0, sizeof(*f));
	*stream = 0;
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
	if ((rc = field(o, "prompt", JSON_STRING, &v, msg, msglen)) <= 0) {
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
	if ((rc = field(o, "stream", JSON_TRUE, &v, msg, msglen)) < 0)
		goto out;
	*stream = rc > 0 && json_is_true(v);
	status = 0;
out:
	json_decref(o);
	if (status != 0)
		pl_frame_clear(f);
	return status;
}
