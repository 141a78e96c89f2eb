/* The labels every series of a daemon's /metrics carries (run, block,
 * replica; host and blocks on a serving host), added in one place to the
 * Prometheus text its families wrote, so that no family can leave them
 * out and sums across daemons need no join.  node/metrics.c and
 * pipeline/serve_stats.c call it on each scrape. */
#ifndef SM_PROM_H
#define SM_PROM_H

#include <stddef.h>

#include "kernels/error.h"

/* A label set "name=\"value\",..." being built; PROM_LABELS_LEN holds a
 * run id and a few short figures. */
#define PROM_LABELS_LEN 512

/* Appends name="value" (value escaped as the text format wants: \\, \"
 * and \n) to labels (size bytes, NUL-terminated), with a comma before
 * it unless labels is empty.  KN_EINVAL when it does not fit (labels
 * unchanged). */
int prom_label_append(char *labels, size_t size, const char *name,
    const char *value);
int prom_label_int(char *labels, size_t size, const char *name,
    long long value);

/* A copy of the text (len bytes) in which every sample line carries the
 * labels: each one first, in their order, unless the sample has a label
 * of that name already (its own value is kept).  Comment and blank lines
 * are copied as they are.  Returns the malloc'd text (*outlen bytes,
 * NUL-terminated), or NULL when out of memory. */
char *prom_add_labels(const char *text, size_t len, const char *labels,
    size_t *outlen);

#endif
