/* The float32 tensor: a named, shaped view into memory someone else owns
 * (usually a model's one parameter buffer).  It is the only type of the
 * compute core that proto/ sees. */
#ifndef KN_TENSOR_H
#define KN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define KN_MAX_DIMS 4
#define KN_NAME_LEN 48

typedef struct {
	char name[KN_NAME_LEN];
	int ndim;
	int64_t shape[KN_MAX_DIMS];
	float *data;            /* backend memory; not owned */
	size_t offset;          /* in floats, within the owning buffer */
} kn_tensor;

size_t kn_tensor_numel(const kn_tensor *t);
/* Formats the shape as "(a, b, c)". */
void kn_tensor_shape_str(const kn_tensor *t, char *buf, size_t len);
/* Index of the first non-finite value in x (n), or -1 if all are finite. */
long kn_first_nonfinite(const float *x, size_t n);

#endif
