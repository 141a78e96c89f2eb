/* The safetensors format, float32 only, with jansson for the header.
 * Rules followed (those of the reference implementation): the header
 * length is a little-endian u64, the header is one JSON object that may be
 * padded with trailing spaces, "__metadata__" maps strings to strings, and
 * the tensors' data_offsets tile the data section exactly. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/msgpack_strict.h"
#include "proto/safetensors.h"

#define ST_META_KEY "__metadata__"

uint64_t
pr_st_numel(const pr_st_tensor *t)
{
	uint64_t n = 1;
	int d;

	for (d = 0; d < t->ndim; d++)
		n *= (uint64_t)t->shape[d];
	return n;
}

static void
store_le_floats(unsigned char *dst, const float *src, size_t n)
{
	size_t i;

	if (pr_mp_little_endian()) {
		memcpy(dst, src, n * sizeof(float));
		return;
	}
	for (i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &src[i], sizeof(u));
		dst[4 * i] = (unsigned char)u;
		dst[4 * i + 1] = (unsigned char)(u >> 8);
		dst[4 * i + 2] = (unsigned char)(u >> 16);
		dst[4 * i + 3] = (unsigned char)(u >> 24);
	}
}

/* The header object: metadata first, then the tensors in data order. */
static json_t *
st_header(const pr_st_tensor *tensors, int n, const pr_st_meta *meta,
    int nmeta, uint64_t *data_len, char *err)
{
	json_t *h = json_object(), *m = json_object();
	uint64_t off = 0;
	int i, d;

	for (i = 0; i < nmeta; i++)
		json_object_set_new(m, meta[i].key, json_string(meta[i].value));
	if (nmeta > 0)
		json_object_set_new(h, ST_META_KEY, m);
	else
		json_decref(m);
	for (i = 0; i < n; i++) {
		const pr_st_tensor *t = &tensors[i];
		json_t *e, *shape = json_array();
		uint64_t bytes = 4 * pr_st_numel(t);

		if (t->name[0] == '\0' || strcmp(t->name, ST_META_KEY) == 0 ||
		    json_object_get(h, t->name) != NULL) {
			json_decref(shape);
			json_decref(h);
			kn_error(err, KN_EINVAL, "tensor %d: name \"%.64s\" is "
			    "empty, reserved or repeated", i, t->name);
			return NULL;
		}
		for (d = 0; d < t->ndim; d++)
			json_array_append_new(shape, json_integer(t->shape[d]));
		e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", "F32", "shape",
		    shape, "data_offsets", (json_int_t)off,
		    (json_int_t)(off + bytes));
		json_object_set_new(h, t->name, e);
		off += bytes;
	}
	*data_len = off;
	return h;
}

int
pr_st_encode(const pr_st_tensor *tensors, int n, const pr_st_meta *meta,
    int nmeta, char **buf, size_t *len, char *err)
{
	json_t *h;
	char *text;
	size_t tlen, hlen, i;
	uint64_t data_len, off;
	unsigned char *out;

	*buf = NULL;
	*len = 0;
	if (n < 0 || n > PR_ST_MAX_TENSORS || nmeta < 0 ||
	    nmeta > PR_ST_MAX_META)
		return kn_error(err, KN_EINVAL, "%d tensors and %d metadata "
		    "entries; at most %d and %d", n, nmeta, PR_ST_MAX_TENSORS,
		    PR_ST_MAX_META);
	if ((h = st_header(tensors, n, meta, nmeta, &data_len, err)) == NULL)
		return KN_EINVAL;
	text = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(h);
	if (text == NULL)
		return kn_error(err, KN_ENOMEM, "cannot format the header");
	tlen = strlen(text);
	/* the data section starts 8-byte aligned, as the reference writer
	 * has it, so a reader may map the floats in place */
	hlen = (tlen + 7) & ~(size_t)7;
	out = malloc(8 + hlen + data_len);
	if (out == NULL) {
		free(text);
		return kn_error(err, KN_ENOMEM, "cannot allocate %.1f MiB for "
		    "the file", (8 + hlen + data_len) / 1048576.0);
	}
	for (i = 0; i < 8; i++)
		out[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
	memcpy(out + 8, text, tlen);
	memset(out + 8 + tlen, ' ', hlen - tlen);
	free(text);
	for (i = 0, off = 8 + hlen; i < (size_t)n; i++) {
		size_t k = (size_t)pr_st_numel(&tensors[i]);

		store_le_floats(out + off, tensors[i].values, k);
		off += 4 * (uint64_t)k;
	}
	*buf = (char *)out;
	*len = 8 + hlen + data_len;
	return KN_OK;
}

void
pr_st_free(pr_st_file *f)
{
	free(f->tensors);
	json_decref(f->json);
	memset(f, 0, sizeof(*f));
}

static int
st_uint(json_t *v, uint64_t max, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) > max)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* One tensor entry of the header, checked against the data length. */
static int
st_entry(const char *name, json_t *e, uint64_t data_len, pr_st_tensor *t,
    char *err)
{
	json_t *dtype, *shape, *offs, *v;
	uint64_t dim, numel = 1;
	size_t i;

	if (strlen(name) >= PR_ST_NAME_LEN)
		return kn_error(err, KN_EINVAL, "tensor name \"%.40s...\" is "
		    "longer than %d bytes", name, PR_ST_NAME_LEN - 1);
	snprintf(t->name, sizeof(t->name), "%s", name);
	if (!json_is_object(e) || json_object_size(e) != 3 ||
	    !json_is_string(dtype = json_object_get(e, "dtype")) ||
	    !json_is_array(shape = json_object_get(e, "shape")) ||
	    !json_is_array(offs = json_object_get(e, "data_offsets")))
		return kn_error(err, KN_EINVAL, "tensor %.64s: an entry is an "
		    "object of exactly dtype, shape and data_offsets", name);
	if (strcmp(json_string_value(dtype), "F32") != 0)
		return kn_error(err, KN_EINVAL, "tensor %.64s has dtype %.16s; "
		    "only F32 is read", name, json_string_value(dtype));
	if (json_array_size(shape) > PR_ST_MAX_DIMS)
		return kn_error(err, KN_EINVAL, "tensor %.64s has %zu "
		    "dimensions; at most %d are read", name,
		    json_array_size(shape), PR_ST_MAX_DIMS);
	t->ndim = (int)json_array_size(shape);
	json_array_foreach(shape, i, v) {
		/* bounded by the data, so the product cannot wrap */
		if (st_uint(v, data_len / 4, &dim) != 0)
			return kn_error(err, KN_EINVAL, "tensor %.64s: "
			    "dimension %zu is not an integer from 0 to the "
			    "data's %llu floats", name, i,
			    (unsigned long long)(data_len / 4));
		t->shape[i] = (int64_t)dim;
		numel = dim == 0 || numel == 0 ? 0 : numel * dim;
		if (numel > data_len / 4)
			return kn_error(err, KN_EINVAL, "tensor %.64s: shape "
			    "holds more floats than the data section", name);
	}
	if (json_array_size(offs) != 2 ||
	    st_uint(json_array_get(offs, 0), data_len, &t->begin) != 0 ||
	    st_uint(json_array_get(offs, 1), data_len, &t->end) != 0 ||
	    t->begin > t->end)
		return kn_error(err, KN_EINVAL, "tensor %.64s: data_offsets "
		    "must be [begin, end] with begin <= end <= %llu, the "
		    "length of the data section", name,
		    (unsigned long long)data_len);
	if (t->end - t->begin != 4 * numel)
		return kn_error(err, KN_EINVAL, "tensor %.64s: data_offsets "
		    "span %llu bytes, its shape needs %llu", name,
		    (unsigned long long)(t->end - t->begin),
		    (unsigned long long)(4 * numel));
	t->values = NULL;
	return KN_OK;
}

static int
st_by_begin(const void *a, const void *b)
{
	const pr_st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* The tensors, sorted by offset, must tile [0, data_len). */
static int
st_check_tiling(const pr_st_file *f, char *err)
{
	uint64_t pos = 0;
	int i;

	for (i = 0; i < f->ntensors; i++) {
		const pr_st_tensor *t = &f->tensors[i];

		if (t->begin < pos)
			return kn_error(err, KN_EINVAL, "tensors %.48s and "
			    "%.48s overlap (bytes %llu..%llu and %llu..%llu of "
			    "the data)", f->tensors[i - 1].name, t->name,
			    (unsigned long long)f->tensors[i - 1].begin,
			    (unsigned long long)pos,
			    (unsigned long long)t->begin,
			    (unsigned long long)t->end);
		if (t->begin > pos)
			return kn_error(err, KN_EINVAL, "bytes %llu..%llu of "
			    "the data belong to no tensor",
			    (unsigned long long)pos,
			    (unsigned long long)t->begin);
		pos = t->end;
	}
	if (pos != f->data_len)
		return kn_error(err, KN_EINVAL, "bytes %llu..%llu of the data "
		    "belong to no tensor (the file has trailing bytes)",
		    (unsigned long long)pos, (unsigned long long)f->data_len);
	return KN_OK;
}

static int
st_meta(pr_st_file *f, json_t *m, char *err)
{
	const char *key;
	json_t *v;

	if (!json_is_object(m))
		return kn_error(err, KN_EINVAL, "__metadata__ is not an "
		    "object");
	if (json_object_size(m) > PR_ST_MAX_META)
		return kn_error(err, KN_EINVAL, "__metadata__ has %zu entries; "
		    "at most %d are read", json_object_size(m), PR_ST_MAX_META);
	json_object_foreach(m, key, v) {
		if (!json_is_string(v))
			return kn_error(err, KN_EINVAL, "__metadata__ entry "
			    "%.64s is not a string", key);
		f->meta[f->nmeta].key = key;
		f->meta[f->nmeta++].value = json_string_value(v);
	}
	return KN_OK;
}

static int
st_parse(const unsigned char *p, size_t len, pr_st_file *f, char *err)
{
	json_error_t jerr;
	const char *key;
	json_t *h, *v;
	uint64_t hlen = 0;
	int i, rc;

	if (len < 8)
		return kn_error(err, KN_EINVAL, "file of %zu bytes: too short "
		    "for the 8-byte header length", len);
	for (i = 0; i < 8; i++)
		hlen |= (uint64_t)p[i] << (8 * i);
	if (hlen < 2 || hlen > PR_ST_MAX_HEADER || hlen > len - 8)
		return kn_error(err, KN_EINVAL, "header length %llu does not "
		    "fit: the file has %zu bytes after it, and a header holds "
		    "2 to %llu", (unsigned long long)hlen, len - 8,
		    (unsigned long long)PR_ST_MAX_HEADER);
	if (p[8] != '{')
		return kn_error(err, KN_EINVAL, "the header does not start "
		    "with '{'");
	h = json_loadb((const char *)p + 8, (size_t)hlen,
	    JSON_REJECT_DUPLICATES, &jerr);
	if (h == NULL)
		return kn_error(err, KN_EINVAL, "header JSON, column %d: %.120s",
		    jerr.column, jerr.text);
	f->json = h;
	if (!json_is_object(h))
		return kn_error(err, KN_EINVAL, "the header is not an object");
	f->data = p + 8 + hlen;
	f->data_len = len - 8 - hlen;
	if (json_object_size(h) > PR_ST_MAX_TENSORS)
		return kn_error(err, KN_EINVAL, "the header lists more than %d "
		    "tensors", PR_ST_MAX_TENSORS);
	f->tensors = calloc(json_object_size(h) + 1, sizeof(*f->tensors));
	if (f->tensors == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	json_object_foreach(h, key, v) {
		if (strcmp(key, ST_META_KEY) == 0)
			rc = st_meta(f, v, err);
		else
			rc = st_entry(key, v, f->data_len,
			    &f->tensors[f->ntensors++], err);
		if (rc != 0)
			return rc;
	}
	qsort(f->tensors, (size_t)f->ntensors, sizeof(*f->tensors),
	    st_by_begin);
	return st_check_tiling(f, err);
}

int
pr_st_decode(const char *buf, size_t len, pr_st_file *f, char *err)
{
	int rc;

	memset(f, 0, sizeof(*f));
	if ((rc = st_parse((const unsigned char *)buf, len, f, err)) != 0)
		pr_st_free(f);
	return rc;
}

const pr_st_tensor *
pr_st_find(const pr_st_file *f, const char *name)
{
	int i;

	for (i = 0; i < f->ntensors; i++)
		if (strcmp(f->tensors[i].name, name) == 0)
			return &f->tensors[i];
	return NULL;
}

const char *
pr_st_meta_get(const pr_st_file *f, const char *key)
{
	int i;

	for (i = 0; i < f->nmeta; i++)
		if (strcmp(f->meta[i].key, key) == 0)
			return f->meta[i].value;
	return NULL;
}

int
pr_st_read_values(const pr_st_file *f, const pr_st_tensor *t, float *out,
    char *err)
{
	size_t n = (size_t)pr_st_numel(t), i;

	pr_mp_load_le_floats(out, f->data + t->begin, n);
	for (i = 0; i < n; i++)
		if (!isfinite(out[i]))
			return kn_error(err, KN_ENUM, "tensor %.64s holds a "
			    "non-finite value at index %zu", t->name, i);
	return KN_OK;
}
