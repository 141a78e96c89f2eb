/* A completion choice's logprobs in OpenAI's completions shape (tokens,
 * token_logprobs, top_logprobs, text_offset), a byte a token: what
 * serve_http.c puts in each choice of an answer or an event when the
 * request asked for logprobs. */
#ifndef SM_SERVE_LOGPROBS_H
#define SM_SERVE_LOGPROBS_H

#include <stddef.h>

#include <jansson.h>

/* A byte as a token: printable ASCII (0x20 to 0x7e), tab, newline and
 * carriage return as that character; any other byte as "bytes:\xNN"
 * (a backslash, x and two lowercase hex digits), as OpenAI writes a
 * token that is not UTF-8 on its own.  buf has room for 12. */
const char *sl_token(unsigned char b, char buf[12]);

/* The logprobs object of pre echoed prompt bytes (prompt; null entries:
 * the entry does not score the prompt) then output bytes [from, to) of
 * out, whose figures are lp (lpk a byte: the chosen byte's
 * log-probability, then the lpk - 1 likeliest bytes' in order, those
 * bytes in lpb, lpk - 1 a byte), both indexed as out.  text_offset
 * counts bytes from the choice's text: a prompt byte i at i, output
 * byte j at off + j.  NULL when out of memory. */
json_t *sl_logprobs_json(const unsigned char *prompt, size_t pre,
    const unsigned char *out, const float *lp, const unsigned char *lpb,
    int lpk, size_t from, size_t to, size_t off);

#endif
