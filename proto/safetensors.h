/* The safetensors file (the format PyTorch users load weights from):
 * 8 bytes of little-endian header length, a JSON header naming each
 * tensor's dtype, shape and byte range, then the raw values.  Written and
 * read strictly here for `shardmeter export` and `import` (daemon/cli/export.c);
 * float32 only, since every model of ours is. */
#ifndef PR_SAFETENSORS_H
#define PR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define PR_ST_NAME_LEN 128
#define PR_ST_MAX_DIMS 8
/* The reference implementation refuses headers above 100 MB. */
#define PR_ST_MAX_HEADER ((uint64_t)100 << 20)
#define PR_ST_MAX_TENSORS 1000000
#define PR_ST_MAX_META 64

typedef struct {
	char name[PR_ST_NAME_LEN];
	int ndim;
	int64_t shape[PR_ST_MAX_DIMS];
	/* writing: the host floats to store; reading: NULL (the values are
	 * at data + begin of the file, little-endian, maybe unaligned) */
	const float *values;
	uint64_t begin, end;    /* byte range in the data section */
} pr_st_tensor;

typedef struct {
	const char *key, *value;
} pr_st_meta;

/* A decoded file: its tensors in data order, its metadata, and where the
 * data section starts in the caller's buffer. */
typedef struct {
	pr_st_tensor *tensors;  /* owned */
	int ntensors;
	pr_st_meta meta[PR_ST_MAX_META];        /* point into json */
	int nmeta;
	const unsigned char *data;
	uint64_t data_len;
	void *json;             /* the parsed header (jansson), owned */
} pr_st_file;

/* All functions return 0 or a negative KN_E* code with a one-line reason
 * in err (PR_ERR_LEN bytes). */

/* Encodes tensors[0..n) (values in host order, stored back to back in the
 * order given) and the metadata meta[0..nmeta) into a new buffer *buf of
 * *len bytes (caller frees).  The header is padded with spaces so the
 * data starts 8-byte aligned.  Names must be unique. */
int pr_st_encode(const pr_st_tensor *tensors, int n, const pr_st_meta *meta,
    int nmeta, char **buf, size_t *len, char *err);

/* Parses and checks buf (len bytes): the header length, the JSON, every
 * entry's dtype (F32 only), shape and data_offsets, and that the offsets
 * tile the data section exactly (no overlap, no hole, nothing beyond).
 * On success f points into buf, which must outlive it; free with
 * pr_st_free. */
int pr_st_decode(const char *buf, size_t len, pr_st_file *f, char *err);
void pr_st_free(pr_st_file *f);

/* The tensor named name, or NULL. */
const pr_st_tensor *pr_st_find(const pr_st_file *f, const char *name);
/* The metadata value of key, or NULL. */
const char *pr_st_meta_get(const pr_st_file *f, const char *key);
/* Copies t's values into out (its element count of floats), host order;
 * KN_ENUM if one is not finite. */
int pr_st_read_values(const pr_st_file *f, const pr_st_tensor *t,
    float *out, char *err);
/* Product of t's shape. */
uint64_t pr_st_numel(const pr_st_tensor *t);

#endif
