/* SOMA's clustering (soma/): documents split on <doc> entries and in
 * chunks, words and tf-idf against hand-computed values, the truncated
 * SVD against a matrix of known singular values (and its leading
 * direction left out), and balanced k-means:
 * balance, determinism over seeds and threads, recovery of separated
 * clusters. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "soma/docs.h"
#include "soma/kmeans.h"
#include "soma/svd.h"
#include "soma/tfidf.h"
#include "tests/testutil.h"

/* Document d, of a text split at base, holds exactly want. */
static int
doc_is(const char *text, size_t base, const sa_doc *d, const char *want)
{
	return d->len == strlen(want) && memcmp(text + (d->off - base), want,
	    d->len) == 0;
}

START_TEST(test_docs_entries)
{
	static const char text[] =
	    "junk before\n"
	    "<doc id=\"1\" url=\"?curid=1\" title=\"One\">\n"
	    "One\n\nFirst body.\n\n"
	    "</doc>\n"
	    "between\n"
	    "<doc id=\"2\" title=\"Empty\">\n"
	    "</doc>\n"
	    "<doc>\nTwo\n</doc>\n"
	    "<document is not an entry>\n"
	    "<doc id=\"3\">\nThree, never closed\n";
	char err[KN_ERR_LEN];
	sa_docs d = { 0 };

	ck_assert_int_eq(sa_docs_split(&d, text, strlen(text), 1000, 16, err),
	    0);
	ck_assert_uint_eq(d.n, 3);
	ck_assert_uint_eq(d.v[0].off, 1000 + strlen("junk before\n") +
	    strlen("<doc id=\"1\" url=\"?curid=1\" title=\"One\">\n"));
	ck_assert(doc_is(text, 1000, &d.v[0], "One\n\nFirst body.\n\n"));
	ck_assert(doc_is(text, 1000, &d.v[1], "Two\n"));
	ck_assert(doc_is(text, 1000, &d.v[2], "<document is not an entry>\n"
	    "<doc id=\"3\">\nThree, never closed\n") == 0);
	ck_assert(doc_is(text, 1000, &d.v[2], "Three, never closed\n"));
	sa_docs_free(&d);
}
END_TEST

/* Chunks are whole lines of at most chunk bytes, a longer line cut, and
 * together they are the text. */
START_TEST(test_docs_chunks)
{
	char err[KN_ERR_LEN], *text = malloc(20000);
	size_t len = 0, i, covered = 0;
	kn_rng rng;
	sa_docs d = { 0 };

	kn_rng_init(&rng, 7, 0);
	while (len < 19000) {
		size_t n = (size_t)kn_rng_below(&rng, 90);

		if (kn_rng_below(&rng, 20) == 0)
			n = 300;        /* longer than a chunk */
		for (i = 0; i < n; i++)
			text[len++] = (char)('a' + kn_rng_below(&rng, 26));
		text[len++] = '\n';
	}
	memcpy(text + len, "tail without newline", 20);
	len += 20;
	ck_assert_int_eq(sa_docs_split(&d, text, len, 0, 128, err), 0);
	ck_assert_uint_gt(d.n, len / 128);
	for (i = 0; i < d.n; i++) {
		const char *end = text + d.v[i].off + d.v[i].len;

		ck_assert_uint_eq(d.v[i].off, covered);
		ck_assert_uint_le(d.v[i].len, 128);
		/* a chunk ends at a line end unless no line end fits */
		if (end[-1] != '\n' && i + 1 < d.n)
			ck_assert_ptr_null(memchr(text + d.v[i].off, '\n',
			    d.v[i].len));
		covered += d.v[i].len;
	}
	ck_assert_uint_eq(covered, len);
	ck_assert_int_eq(sa_docs_split(&d, text, len, 0, 0, err), KN_EINVAL);
	sa_docs_free(&d);
	free(text);
}
END_TEST

START_TEST(test_words)
{
	static const char text[] = "Hello, WORLD-42 caf\xc3\xa9 x\n"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
	    "end";
	static const char *const want[] = { "hello", "world", "42",
	    "caf\xc3\xa9", "x", "end" };
	char w[SA_WORD_MAX];
	size_t pos = 0, n, i = 0;

	while (sa_next_word(text, strlen(text), &pos, w, &n)) {
		ck_assert_uint_lt(i, 6);
		ck_assert_uint_eq(n, strlen(want[i]));
		ck_assert(memcmp(w, want[i], n) == 0);
		i++;
	}
	ck_assert_uint_eq(i, 6);        /* the 65-letter run is no word */
}
END_TEST

static void
docs_of(sa_docs *d, const char *text)
{
	const char *p = text, *nl;
	char err[KN_ERR_LEN];

	/* one document per line */
	for (; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
		ck_assert_int_eq(sa_docs_split(d, p, (size_t)(nl - p + 1),
		    (size_t)(p - text), 1 << 20, err), 0);
	}
}

/* Words in two or more documents, by document frequency then bytes;
 * (1 + ln tf) * (ln((1 + n) / (1 + df)) + 1), rows of unit length. */
START_TEST(test_tfidf_hand)
{
	static const char text[] = "Apple banana banana\n"
	    "apple cherry\n"
	    "banana cherry date\n"
	    "banana\n"
	    "elder\n";
	double ib = log(6.0 / 4.0) + 1, ia = log(6.0 / 3.0) + 1, ic = ia;
	double x0 = ia, x1 = (1 + log(2.0)) * ib, nrm = sqrt(x0 * x0 + x1 * x1);
	char err[KN_ERR_LEN];
	sa_docs d = { 0 };
	sa_vocab v;
	sa_csr m;

	docs_of(&d, text);
	ck_assert_uint_eq(d.n, 5);
	ck_assert_int_eq(sa_vocab_build(&v, text, d.v, d.n, 100, err), 0);
	ck_assert_uint_eq(v.n, 3);
	ck_assert_str_eq(v.words + v.start[0], "banana");
	ck_assert_str_eq(v.words + v.start[1], "apple");
	ck_assert_str_eq(v.words + v.start[2], "cherry");
	ck_assert_uint_eq(v.words_len, 7 + 6 + 7);
	ck_assert_double_eq_tol(v.idf[0], ib, 1e-6);
	ck_assert_double_eq_tol(v.idf[1], ia, 1e-6);
	ck_assert_int_eq(sa_vocab_find(&v, "date", 4), -1);
	ck_assert_int_eq(sa_vocab_find(&v, "cherry", 6), 2);

	ck_assert_int_eq(sa_tfidf_rows(&m, &v, text, d.v, d.n, err), 0);
	ck_assert_uint_eq(m.nrows, 5);
	ck_assert_uint_eq(m.ncols, 3);
	/* row 0: banana (tf 2), apple (tf 1) */
	ck_assert_uint_eq(m.rowptr[1], 2);
	ck_assert_uint_eq(m.col[0], 0);
	ck_assert_uint_eq(m.col[1], 1);
	ck_assert_double_eq_tol(m.val[0], x1 / nrm, 1e-6);
	ck_assert_double_eq_tol(m.val[1], x0 / nrm, 1e-6);
	/* row 1: apple and cherry, equal weights */
	ck_assert_uint_eq(m.rowptr[2] - m.rowptr[1], 2);
	ck_assert_double_eq_tol(m.val[2], ia / sqrt(ia * ia + ic * ic), 1e-6);
	/* row 3: banana alone; row 4: no known word */
	ck_assert_uint_eq(m.rowptr[4] - m.rowptr[3], 1);
	ck_assert_double_eq_tol(m.val[m.rowptr[3]], 1.0, 1e-6);
	ck_assert_uint_eq(m.rowptr[5], m.rowptr[4]);
	sa_csr_free(&m);
	sa_vocab_free(&v);

	/* at most 2 words: the two of highest df */
	ck_assert_int_eq(sa_vocab_build(&v, text, d.v, d.n, 2, err), 0);
	ck_assert_uint_eq(v.n, 2);
	ck_assert_str_eq(v.words + v.start[1], "apple");
	sa_vocab_free(&v);
	/* no word in two documents */
	ck_assert_int_eq(sa_vocab_build(&v, text, d.v + 4, 1, 10, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "no word"));
	sa_docs_free(&d);
}
END_TEST

/* n columns of length m, orthonormal (Gram-Schmidt twice), row-major. */
static void
orthonormal(double *q, int m, int n, uint64_t seed)
{
	float *g = tu_alloc_fill((size_t)m * n, -1, 1, seed);
	int i, j, c, pass;

	for (i = 0; i < m * n; i++)
		q[i] = g[i];
	for (c = 0; c < n; c++) {
		double s;

		for (pass = 0; pass < 2; pass++)
			for (j = 0; j < c; j++) {
				for (s = 0, i = 0; i < m; i++)
					s += q[i * n + c] * q[i * n + j];
				for (i = 0; i < m; i++)
					q[i * n + c] -= s * q[i * n + j];
			}
		for (s = 0, i = 0; i < m; i++)
			s += q[i * n + c] * q[i * n + c];
		for (i = 0; i < m; i++)
			q[i * n + c] /= sqrt(s);
	}
	free(g);
}

#define SVD_N 120
#define SVD_V 80
#define SVD_R 4

/* A = U S W^T, every entry stored; W (V, R) into w. */
static void
low_rank(sa_csr *a, double *w)
{
	static const double s[SVD_R] = { 9, 5, 3, 1.5 };
	double *u = malloc(sizeof(double) * SVD_N * SVD_R);
	int i, j, r;

	orthonormal(u, SVD_N, SVD_R, 11);
	orthonormal(w, SVD_V, SVD_R, 12);
	a->nrows = SVD_N;
	a->ncols = SVD_V;
	a->rowptr = malloc((SVD_N + 1) * sizeof(size_t));
	a->col = malloc(SVD_N * SVD_V * sizeof(uint32_t));
	a->val = malloc(SVD_N * SVD_V * sizeof(float));
	for (i = 0; i <= SVD_N; i++)
		a->rowptr[i] = (size_t)i * SVD_V;
	for (i = 0; i < SVD_N; i++)
		for (j = 0; j < SVD_V; j++) {
			double x = 0;

			for (r = 0; r < SVD_R; r++)
				x += u[i * SVD_R + r] * s[r] *
				    w[j * SVD_R + r];
			a->col[i * SVD_V + j] = (uint32_t)j;
			a->val[i * SVD_V + j] = (float)x;
		}
	free(u);
}

START_TEST(test_svd_low_rank)
{
	static const double s[SVD_R] = { 9, 5, 3, 1.5 };
	double w[SVD_V * SVD_R], worst = 0;
	float basis[SVD_V * SVD_R], again[SVD_V * SVD_R], sigma[SVD_R];
	char err[KN_ERR_LEN];
	sa_csr a;
	int c, r, j;

	low_rank(&a, w);
	ck_assert_int_eq(sa_svd(&a, SVD_R, 2, 5, basis, sigma, err), 0);
	for (c = 0; c < SVD_R; c++) {
		double proj = 0;

		worst = fmax(worst, fabs(sigma[c] - s[c]) / s[c]);
		/* each basis vector lies in the span of W, unit length */
		for (r = 0; r < SVD_R; r++) {
			double dot = 0;

			for (j = 0; j < SVD_V; j++)
				dot += w[j * SVD_R + r] * basis[j * SVD_R + c];
			proj += dot * dot;
		}
		worst = fmax(worst, fabs(sqrt(proj) - 1));
	}
	tu_report("svd singular values and subspace", worst);
	ck_assert_double_lt(worst, 1e-4);

	/* two dimensions of rank 4: the top two singular vectors, which
	 * are W's first columns up to sign */
	ck_assert_int_eq(sa_svd(&a, 2, 1, 9, again, sigma, err), 0);
	for (c = 0; c < 2; c++) {
		double dot = 0;

		ck_assert_double_eq_tol(sigma[c], s[c], 1e-3 * s[c]);
		for (j = 0; j < SVD_V; j++)
			dot += w[j * SVD_R + c] * again[j * 2 + c];
		ck_assert_double_eq_tol(fabs(dot), 1.0, 1e-4);
	}
	ck_assert_int_eq(sa_svd(&a, SVD_V + 1, 1, 9, again, sigma, err),
	    KN_EINVAL);

	/* the leading direction left out: every row keeps columns 1..R-1
	 * of the full basis, in place; skipping none changes nothing */
	memcpy(again, basis, sizeof(basis));
	sa_basis_skip(again, SVD_V, SVD_R, 0);
	ck_assert(memcmp(again, basis, sizeof(basis)) == 0);
	sa_basis_skip(again, SVD_V, SVD_R, 1);
	for (j = 0; j < SVD_V; j++)
		ck_assert(memcmp(again + j * (SVD_R - 1), basis + j * SVD_R + 1,
		    (SVD_R - 1) * sizeof(float)) == 0);
	sa_csr_free(&a);
}
END_TEST

/* Same seed, same bits, whatever the thread count. */
START_TEST(test_svd_deterministic)
{
	float b1[SVD_V * SVD_R], b2[SVD_V * SVD_R];
	double w[SVD_V * SVD_R];
	char err[KN_ERR_LEN];
	sa_csr a;

	low_rank(&a, w);
	ck_assert_int_eq(kn_pool_init(1, err), 0);
	ck_assert_int_eq(sa_svd(&a, SVD_R, 2, 5, b1, NULL, err), 0);
	ck_assert_int_eq(kn_pool_init(3, err), 0);
	ck_assert_int_eq(sa_svd(&a, SVD_R, 2, 5, b2, NULL, err), 0);
	ck_assert(memcmp(b1, b2, sizeof(b1)) == 0);
	sa_csr_free(&a);
}
END_TEST

#define KM_D 16

/* Points near centre (point % groups) of groups orthogonal centres,
 * group sizes given by weight: point i is in group g when i falls in its
 * share. */
static float *
separated(size_t n, int groups, int *truth, const int *share)
{
	float *x = tu_alloc_fill(n * KM_D, -0.15f, 0.15f, 21);
	size_t i, total = 0, acc;
	int j, g;

	for (g = 0; g < groups; g++)
		total += (size_t)share[g];
	for (i = 0; i < n; i++) {
		double norm = 0;

		for (g = 0, acc = (size_t)share[0]; i * total >= acc * n; )
			acc += (size_t)share[++g];
		truth[i] = g;
		x[i * KM_D + g] += 1.0f;
		for (j = 0; j < KM_D; j++)
			norm += (double)x[i * KM_D + j] * x[i * KM_D + j];
		for (j = 0; j < KM_D; j++)
			x[i * KM_D + j] = (float)(x[i * KM_D + j] / sqrt(norm));
	}
	return x;
}

static void
assert_balanced(const int *assign, size_t n, int k)
{
	size_t size[16] = { 0 }, i;
	int c;

	for (i = 0; i < n; i++) {
		ck_assert_int_ge(assign[i], 0);
		ck_assert_int_lt(assign[i], k);
		size[assign[i]]++;
	}
	for (c = 0; c < k; c++) {
		ck_assert_uint_ge(size[c], n / (size_t)k);
		ck_assert_uint_le(size[c], (n + (size_t)k - 1) / (size_t)k);
	}
}

START_TEST(test_kmeans_recovers)
{
	static const int share[4] = { 1, 1, 1, 1 };
	size_t n = 203, i;
	int truth[203], assign[203], map[4] = { -1, -1, -1, -1 };
	float cen[4 * KM_D], *x = separated(n, 4, truth, share);
	char err[KN_ERR_LEN];

	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 4, NULL, 30, 3, cen, assign, NULL,
	    NULL, err), 0);
	assert_balanced(assign, n, 4);
	/* one found cluster per group: groups of 50 or 51 fit exactly */
	for (i = 0; i < n; i++) {
		if (map[truth[i]] < 0)
			map[truth[i]] = assign[i];
		ck_assert_int_eq(assign[i], map[truth[i]]);
	}
	free(x);
}
END_TEST

/* Three quarters of the points in one group: still half each. */
START_TEST(test_kmeans_balanced)
{
	static const int share[2] = { 3, 1 };
	size_t n = 201;
	int truth[201], assign[201];
	float cen[2 * KM_D], *x = separated(n, 2, truth, share);
	char err[KN_ERR_LEN];

	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 2, NULL, 30, 4, cen, assign, NULL,
	    NULL, err), 0);
	assert_balanced(assign, n, 2);
	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 202, NULL, 30, 4, cen, assign, NULL,
	    NULL, err), KN_EINVAL);
	free(x);
}
END_TEST

START_TEST(test_kmeans_deterministic)
{
	static const int share[3] = { 1, 2, 3 };
	size_t n = 300;
	int truth[300], a1[300], a2[300], a3[300];
	float c1[5 * KM_D], c2[5 * KM_D], c3[5 * KM_D];
	float *x = separated(n, 3, truth, share);
	char err[KN_ERR_LEN];

	ck_assert_int_eq(kn_pool_init(1, err), 0);
	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 5, NULL, 30, 8, c1, a1, NULL, NULL,
	    err), 0);
	ck_assert_int_eq(kn_pool_init(3, err), 0);
	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 5, NULL, 30, 8, c2, a2, NULL, NULL,
	    err), 0);
	ck_assert(memcmp(a1, a2, sizeof(a1)) == 0);
	ck_assert(memcmp(c1, c2, sizeof(c1)) == 0);
	assert_balanced(a1, n, 5);
	/* another seed starts elsewhere */
	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 5, NULL, 1, 9, c3, a3, NULL, NULL,
	    err), 0);
	ck_assert(memcmp(c1, c3, sizeof(c1)) != 0);
	free(x);
}
END_TEST

/* Weighted: every cluster's weight within the largest weight of an
 * equal share. */
START_TEST(test_kmeans_weighted)
{
	static const int share[3] = { 5, 1, 1 };
	size_t n = 400, i;
	int truth[400], assign[400], c;
	double weight[400], load[4] = { 0 }, total = 0, wmax = 0;
	float cen[4 * KM_D], *x = separated(n, 3, truth, share);
	char err[KN_ERR_LEN];
	kn_rng rng;

	kn_rng_init(&rng, 5, 5);
	for (i = 0; i < n; i++) {
		weight[i] = 1 + (double)kn_rng_below(&rng, 100);
		if (i % 50 == 0)
			weight[i] = 2000;       /* a few long documents */
		total += weight[i];
		wmax = fmax(wmax, weight[i]);
	}
	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 4, weight, 30, 2, cen, assign,
	    NULL, NULL, err), 0);
	for (i = 0; i < n; i++)
		load[assign[i]] += weight[i];
	for (c = 0; c < 4; c++) {
		ck_assert_double_le(load[c], total / 4 + wmax);
		ck_assert_double_ge(load[c], total / 4 - wmax);
	}
	weight[7] = 0;
	ck_assert_int_eq(sa_kmeans(x, n, KM_D, 4, weight, 30, 2, cen, assign,
	    NULL, NULL, err), KN_EINVAL);
	free(x);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("cluster");
	TCase *tc = tcase_create("cluster");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_docs_entries);
	tcase_add_test(tc, test_docs_chunks);
	tcase_add_test(tc, test_words);
	tcase_add_test(tc, test_tfidf_hand);
	tcase_add_test(tc, test_svd_low_rank);
	tcase_add_test(tc, test_svd_deterministic);
	tcase_add_test(tc, test_kmeans_recovers);
	tcase_add_test(tc, test_kmeans_balanced);
	tcase_add_test(tc, test_kmeans_deterministic);
	tcase_add_test(tc, test_kmeans_weighted);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
