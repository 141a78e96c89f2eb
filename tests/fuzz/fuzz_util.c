/* Helpers of the fuzz targets (fuzz.h): failing with a reason, the input
 * as a file, and the byte surgery that lets a mutated payload pass its
 * hash.  The surgery reads the bytes directly, never through msgpack-c,
 * which would allocate whatever a hostile container count asks for. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ini.h>
#include <openssl/sha.h>

#include "tests/fuzz/fuzz.h"

const kn_tensor fz_tensors[FZ_NTENSORS] = {
	{ .name = "embed", .ndim = 2, .shape = { 2, 3 }, .offset = 0 },
	{ .name = "norm.bias", .ndim = 1, .shape = { 4 }, .offset = 6 },
};
const char fz_run_id[] =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const char fz_http_spec[] = "[model]\nblocks = 2\n";

/* The sanitizers' runtime, when linked, prints the text to its report
 * file, which libFuzzer keeps when it silences stderr (-close_fd_mask=2,
 * as scripts/fuzz runs the HTTP target). */
extern void __sanitizer_report_error_summary(const char *summary)
    __attribute__((weak));

void
fz_fail(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	int n;

	n = snprintf(msg, sizeof(msg), "fuzz_%s: ", fz_target);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", msg);
	if (__sanitizer_report_error_summary != NULL)
		__sanitizer_report_error_summary(msg);
	abort();
}

const char *
fz_file(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;
	size_t done = 0;

	if (fd < 0) {
		if ((fd = memfd_create("fuzz-input", MFD_CLOEXEC)) < 0) {
			perror("memfd_create");
			abort();
		}
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0) {
		perror("ftruncate");
		abort();
	}
	while (done < size) {
		ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);

		if (n <= 0) {
			perror("pwrite");
			abort();
		}
		done += (size_t)n;
	}
	return path;
}

void
fz_untouched(const void *p, size_t n, const char *what)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i] != FZ_SENTINEL)
			fz_fail("a refused %s wrote byte %zu of the output", what,
			    i);
}

char *
fz_copy(const uint8_t *data, size_t size)
{
	char *copy = malloc(size);

	if (copy == NULL && size > 0)
		abort();
	if (size > 0)
		memcpy(copy, data, size);
	return copy;
}

void
fz_decode_rehashed(const uint8_t *data, size_t size,
    void (*decode)(const char *buf, size_t len))
{
	char *copy = fz_copy(data, size);

	decode(copy, size);
	if (fz_rehash(copy, size))
		decode(copy, size);
	free(copy);
}

char *
fz_print(int (*print)(FILE *f, const void *obj), const void *obj,
    size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);

	if (f == NULL)
		abort();
	if (print(f, obj) != 0)
		fz_fail("a value that was read does not print");
	if (fclose(f) != 0)
		abort();
	return text;
}

/* Offset of the value that follows the key as our encoders write it (a
 * fixstr), or (size_t)-1. */
static size_t
value_at(const char *buf, size_t len, const char *key)
{
	size_t n = strlen(key), i;

	for (i = 0; i + n + 1 < len; i++)
		if ((unsigned char)buf[i] == (0xa0 | n) &&
		    memcmp(buf + i + 1, key, n) == 0)
			return i + 1 + n;
	return (size_t)-1;
}

/* A big-endian unsigned integer of n bytes. */
static uint64_t
load_be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

int
fz_rehash(char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)buf;
	unsigned char md[SHA256_DIGEST_LENGTH];
	size_t pay = value_at(buf, len, "payload");
	size_t sha = value_at(buf, len, "sha256");
	size_t body, size;
	int width;

	if (pay == (size_t)-1 || sha == (size_t)-1 || sha + 2 + 32 > len ||
	    p[sha] != 0xc4 || p[sha + 1] != 32)
		return 0;
	switch (p[pay]) {
	case 0xc4: width = 1; break;
	case 0xc5: width = 2; break;
	case 0xc6: width = 4; break;
	default: return 0;
	}
	if (pay + 1 + (size_t)width > len)
		return 0;
	size = (size_t)load_be(p + pay + 1, width);
	body = pay + 1 + (size_t)width;
	if (size > len - body)
		return 0;
	SHA256(p + body, size, md);
	if (memcmp(buf + sha + 2, md, sizeof(md)) == 0)
		return 0;
	memcpy(buf + sha + 2, md, sizeof(md));
	return 1;
}

long long
fz_map_uint(const char *buf, size_t len, const char *key)
{
	const unsigned char *p = (const unsigned char *)buf;
	size_t at = value_at(buf, len, key);
	int width;

	if (at == (size_t)-1 || at >= len)
		return -1;
	if (p[at] <= 0x7f)
		return p[at];
	switch (p[at]) {
	case 0xcc: width = 1; break;
	case 0xcd: width = 2; break;
	case 0xce: width = 4; break;
	default: return -1;     /* larger than any target decodes */
	}
	if (at + 1 + (size_t)width > len)
		return -1;
	return (long long)load_be(p + at + 1, width);
}

int
fz_ini_lines_fit(const char *text, size_t len)
{
	size_t start = 0, i;

	/* ini.h: the buffer must be 3 more than the longest line */
	for (i = 0; i <= len; i++)
		if (i == len || text[i] == '\n') {
			if (i - start > INI_MAX_LINE - 3)
				return 0;
			start = i + 1;
		}
	return 1;
}
