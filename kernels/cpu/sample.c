/* Sampling a symbol per position from logits with a temperature, by the
 * inverse CDF of one uniform: the same u gives the same symbol on every
 * backend, since the classes are scanned in order. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu.h"

#define SAMPLE_MAX_V 1024

void
kn_cpu_sample(int32_t *out, const float *logits, const float *u, int N,
    int V, float temp)
{
	float p[SAMPLE_MAX_V];
	int i, c;

	for (i = 0; i < N; i++) {
		const float *l = logits + (size_t)i * V;
		float cum = 0.0f, target;
		int pick = 0;

		if (temp <= 0.0f || V > SAMPLE_MAX_V) {
			for (c = 1; c < V; c++)
				if (l[c] > l[pick])
					pick = c;
			out[i] = pick;
			continue;
		}
		for (c = 0; c < V; c++)
			p[c] = l[c];
		kn_cpu_softmax_row(p, V, 1.0f / temp);
		target = u[i];
		pick = -1;
		for (c = 0; c < V; c++) {
			cum += p[c];
			if (target < cum) {
				pick = c;
				break;
			}
		}
		/* rounding left the total just under u: take the last
		 * class that has any mass */
		if (pick < 0)
			for (pick = V - 1; pick > 0 && p[pick] == 0.0f; pick--)
				;
		out[i] = pick;
	}
}
