/* What the fuzz targets share: the libFuzzer entry point each defines,
 * the name that finds its corpus, and the helpers that carry a fuzz input
 * to a decoder that reads a file or checks a hash.  The same target
 * source is linked with libFuzzer (--enable-fuzzing) or with replay.c,
 * which `make check` runs over the committed corpus. */
#ifndef FZ_FUZZ_H
#define FZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/tensor.h"

/* The target: one input, returns 0 (libFuzzer's contract).  A bug shows
 * as a sanitizer report or as fz_fail(). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Each target defines its name: tests/fuzz/corpus/<fz_target>/. */
extern const char fz_target[];

/* A property of the decoder does not hold: prints why and aborts, so that
 * libFuzzer saves the input as a crash and the replay test fails. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2),
    noreturn));

/* The input as a file, for decoders that take a path: a memfd, rewritten
 * for each input, whose path ("/proc/self/fd/N") is returned.  Aborts
 * when the file cannot be made, which is no finding. */
const char *fz_file(const uint8_t *data, size_t size);

/* What a decoder's outputs are filled with before a call, so that a
 * refused input that wrote to them shows: fz_untouched() fails unless
 * the n bytes at p all still hold it. */
#define FZ_SENTINEL 0x5a
void fz_untouched(const void *p, size_t n, const char *what);

/* A writable copy of the input, of exactly size bytes so that the
 * sanitizer sees a read past them (caller frees). */
char *fz_copy(const uint8_t *data, size_t size);

/* Runs decode on a copy of the input (fz_copy), and once more on the copy
 * rehashed (fz_rehash) when that changed it: past the hash check, where
 * a payload meets the rest of the message. */
void fz_decode_rehashed(const uint8_t *data, size_t size,
    void (*decode)(const char *buf, size_t len));

/* What print(f, obj) writes, in a new buffer of *len bytes and a NUL
 * (caller frees).  A print that fails is a finding. */
char *fz_print(int (*print)(FILE *f, const void *obj), const void *obj,
    size_t *len);

/* In a copy of a msgpack map (buf, len bytes, writable) whose top level
 * has a "payload" bin and a "sha256" bin of 32 bytes, writes the payload's
 * real SHA-256 over the sha256 field, so that a mutated payload reaches
 * the checks behind the hash.  1 when it changed buf, else 0. */
int fz_rehash(char *buf, size_t len);

/* Whether every line of text (len bytes) is short enough for inih to read
 * it as one line.  Printed INI text reads back only then: a longer line
 * (a value near the limit, or a long path that became absolute) is a
 * known limit of the format, not a finding. */
int fz_ini_lines_fit(const char *text, size_t len);

/* The value of the top-level unsigned integer field key of a msgpack map,
 * or -1 when there is none. */
long long fz_map_uint(const char *buf, size_t len, const char *key);

/* The model the corpus's checkpoints are written for (make-corpus.c, and
 * the daemon of the HTTP target): two small tensors of FZ_PARAMS floats
 * in all; and the run they belong to. */
#define FZ_NTENSORS 2
#define FZ_PARAMS 10
extern const kn_tensor fz_tensors[FZ_NTENSORS];
extern const char fz_run_id[];
/* The run spec of the HTTP target's daemon (its seeds carry its run id). */
extern const char fz_http_spec[];

#endif
