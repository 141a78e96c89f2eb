/* Fixtures of the BlockTrain objective's tests: see bt_fixture.h. */
#include "config.h"

#include <check.h>
#include <stdlib.h>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/rng.h"
#include "tests/bt_fixture.h"

unsigned char *
tu_letter_text(size_t len, uint64_t seed)
{
	unsigned char *s = malloc(len);
	size_t i;
	kn_rng r;

	ck_assert_ptr_nonnull(s);
	kn_rng_init(&r, seed, 0);
	for (i = 0; i < len; i++)
		s[i] = i % 6 == 5 ? ' ' :
		    (unsigned char)"etaoinshr"[kn_rng_below(&r, 9)];
	return s;
}

kn_model *
tu_scaled_model(const kn_model_shape *shape, int max_batch, uint64_t seed)
{
	char err[KN_ERR_LEN];
	kn_model *m;
	float *p;
	size_t i, np;

	ck_assert_int_eq(kn_model_create(&m, shape, kn_cpu_backend(),
	    max_batch, err), 0);
	kn_model_init(m, seed);
	np = kn_model_num_params(m);
	p = malloc(np * sizeof(float));
	ck_assert_ptr_nonnull(p);
	kn_model_get_params(m, p);
	for (i = 0; i < np; i++)
		p[i] *= 3.0f;
	ck_assert_int_eq(kn_model_set_params(m, p, err), 0);
	free(p);
	return m;
}
