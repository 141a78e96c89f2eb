/* Error feedback (kernels/feedback.h): two elementwise loops over host
 * memory.  The residual stays on the replica that computed it, so unlike
 * kernels/average.c nothing here must match bits across hosts. */
#include "config.h"

#include "kernels/feedback.h"

void
kn_feedback_add(float *out, const float *delta, const float *residual,
    size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = delta[i] + residual[i];
}

void
kn_feedback_residual(float *residual, const float *sent,
    const float *decoded, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		residual[i] = sent[i] - decoded[i];
}
