/* Small helpers on the tensor view. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "kernels/tensor.h"

size_t
kn_tensor_numel(const kn_tensor *t)
{
	size_t n = 1;
	int i;

	for (i = 0; i < t->ndim; i++)
		n *= (size_t)t->shape[i];
	return n;
}

void
kn_tensor_shape_str(const kn_tensor *t, char *buf, size_t len)
{
	size_t used = 0;
	int i;

	used += (size_t)snprintf(buf, len, "(");
	for (i = 0; i < t->ndim && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld",
		    i ? ", " : "", (long long)t->shape[i]);
	if (used < len)
		snprintf(buf + used, len - used, ")");
}

long
kn_first_nonfinite(const float *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return (long)i;
	return -1;
}
