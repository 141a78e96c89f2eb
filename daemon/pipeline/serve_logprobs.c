/* A completion's logprobs as OpenAI's completions API gives them, with
 * a byte for a token (serve_logprobs.h). */
#include "config.h"

#include <stdio.h>

#include "daemon/pipeline/serve_logprobs.h"

const char *
sl_token(unsigned char b, char buf[12])
{
	if ((b >= 0x20 && b <= 0x7e) || b == '\t' || b == '\n' || b == '\r') {
		buf[0] = (char)b;
		buf[1] = '\0';
	} else
		snprintf(buf, 12, "bytes:\\x%02x", b);
	return buf;
}

json_t *
sl_logprobs_json(const unsigned char *prompt, size_t pre,
    const unsigned char *out, const float *lp, const unsigned char *lpb,
    int lpk, size_t from, size_t to, size_t off)
{
	json_t *o = json_object(), *tokens = json_array(),
	    *tlp = json_array(), *top = json_array(), *offs = json_array();
	char buf[12];
	size_t i;
	int j, bad;

	/* o owns the arrays from here (set_new takes them, even on
	 * failure), so one json_decref frees all */
	bad = o == NULL || json_object_set_new(o, "tokens", tokens) != 0;
	bad |= o == NULL || json_object_set_new(o, "token_logprobs", tlp) != 0;
	bad |= o == NULL || json_object_set_new(o, "top_logprobs", top) != 0;
	bad |= o == NULL || json_object_set_new(o, "text_offset", offs) != 0;

	for (i = 0; i < pre && !bad; i++) {
		bad |= json_array_append_new(tokens,
		    json_string(sl_token(prompt[i], buf)));
		bad |= json_array_append_new(tlp, json_null());
		bad |= json_array_append_new(top, json_null());
		bad |= json_array_append_new(offs, json_integer((json_int_t)i));
	}
	for (i = from; i < to && !bad; i++) {
		const float *f = lp + i * (size_t)lpk;
		const unsigned char *b = lpb + i * (size_t)(lpk - 1);
		json_t *alt = json_object();

		bad |= json_array_append_new(tokens,
		    json_string(sl_token(out[i], buf)));
		bad |= json_array_append_new(tlp, json_real(f[0]));
		/* most likely first: jansson keeps the order of insertion */
		for (j = 0; j + 1 < lpk && alt != NULL; j++)
			bad |= json_object_set_new(alt, sl_token(b[j], buf),
			    json_real(f[1 + j]));
		bad |= json_array_append_new(top, alt);
		bad |= json_array_append_new(offs,
		    json_integer((json_int_t)(off + i)));
	}
	if (!bad)
		return o;
	json_decref(o);
	return NULL;
}
