/* Block-scaled int8, the 8-bit form an update may travel in: each block
 * of consecutive values shares one float scale, and a value is q x scale
 * with q in [-127, 127].  proto/update.c calls these to encode and decode
 * updates; they work on host memory. */
#ifndef KN_INT8_H
#define KN_INT8_H

#include <stddef.h>
#include <stdint.h>

#define KN_INT8_QMAX 127

/* Quantizes x (n finite values) in blocks of block values (the last one
 * may be shorter).  scales[b] is max |x| over block b divided by 127,
 * raised by an ulp or two where the division rounded down, so that every
 * |x| / scale <= 127 and no value is clipped; q[i] is x[i] / scale
 * rounded to nearest, ties to even (0 in a block of zeros, whose scale is
 * +0).  So |x - q * scale| <= scale / 2, up to the rounding of the
 * division and the product.  Returns -1, or the index of a value whose
 * block cannot be stored (its scale x 127 would overflow: |x| within a
 * few ulps of FLT_MAX); q and scales are then partly written.  block >=
 * 1; dst and src do not overlap. */
long kn_int8_quantize(int8_t *q, float *scales, const float *x, size_t n,
    size_t block);

/* x[i] = q[i] * scales[i / block], the product in float.  With scales
 * that kn_int8_first_bad_scale() accepts and q in [-127, 127], every
 * result is finite. */
void kn_int8_dequantize(float *x, const int8_t *q, const float *scales,
    size_t n, size_t block);

/* Index of the first of nblocks scales that a reader must refuse (NaN,
 * Inf, a set sign bit, or so large that 127 x scale overflows), or -1. */
long kn_int8_first_bad_scale(const float *scales, size_t nblocks);

#endif
