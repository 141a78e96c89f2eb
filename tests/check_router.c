/* SOMA's router: a router built from a generated corpus of three topics
 * routes contexts to the nearest centroids (checked against an embedding
 * and a ranking computed by brute force), reads only its prefix, and
 * embeds a document as clustering did; its file round-trips, and every
 * kind of malformed file is refused with its own message. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "kernels/error.h"
#include "kernels/rng.h"
#include "proto/checkpoint.h"
#include "proto/msgpack_strict.h"
#include "proto/router.h"
#include "soma/docs.h"
#include "soma/kmeans.h"
#include "soma/router.h"
#include "soma/svd.h"
#include "soma/tfidf.h"
#include "tests/testutil.h"

#define TOPICS 3
#define TOPIC_WORDS 12
#define NDOCS 90
#define DIMS 4

static char *text;
static size_t text_len;
static sa_docs docs;
static sa_router router;
static float *doc_emb;

static void
topic_word(char *w, size_t n, int topic, int i)
{
	static const char *const stem[TOPICS] = { "river", "engine",
	    "poem" };

	snprintf(w, n, "%s%c", stem[topic], 'a' + i);
}

/* count words of topic (or, for topic < 0, common words), spaced */
static size_t
put_words(char *p, kn_rng *rng, int topic, int count)
{
	static const char *const common[] = { "The", "and", "of", "a" };
	size_t n = 0;
	char w[32];
	int i;

	for (i = 0; i < count; i++) {
		if (topic < 0 || kn_rng_below(rng, 4) == 0)
			snprintf(w, sizeof(w), "%s",
			    common[kn_rng_below(rng, 4)]);
		else
			topic_word(w, sizeof(w), topic,
			    (int)kn_rng_below(rng, TOPIC_WORDS));
		n += (size_t)sprintf(p + n, "%s ", w);
	}
	return n;
}

static void
setup(void)
{
	char err[KN_ERR_LEN];
	sa_vocab v;
	sa_csr m;
	pr_router f;
	int *assign = malloc(NDOCS * sizeof(int)), d;
	kn_rng rng;

	kn_rng_init(&rng, 42, 0);
	text = malloc(NDOCS * 400);
	text_len = 0;
	for (d = 0; d < NDOCS; d++) {
		text_len += (size_t)sprintf(text + text_len, "<doc id=\"%d\">\n",
		    d);
		text_len += put_words(text + text_len, &rng, d % TOPICS, 30);
		text_len += (size_t)sprintf(text + text_len, "\n</doc>\n");
	}
	memset(&docs, 0, sizeof(docs));
	ck_assert_int_eq(sa_docs_split(&docs, text, text_len, 0, 4096, err),
	    0);
	ck_assert_uint_eq(docs.n, NDOCS);
	ck_assert_int_eq(sa_vocab_build(&v, text, docs.v, docs.n, 1000, err),
	    0);
	ck_assert_int_eq(sa_tfidf_rows(&m, &v, text, docs.v, docs.n, err), 0);
	ck_assert_int_eq(pr_router_alloc(&f, (uint32_t)v.n, DIMS, TOPICS,
	    v.words_len, err), 0);
	f.prefix = SA_ROUTE_PREFIX;
	f.seed = 5;
	memcpy(f.words, v.words, v.words_len);
	memcpy(f.idf, v.idf, v.n * sizeof(float));
	ck_assert_int_eq(sa_svd(&m, DIMS, 2, 5, f.basis, NULL, err), 0);
	doc_emb = malloc(NDOCS * DIMS * sizeof(float));
	sa_embed_rows(&m, f.basis, DIMS, doc_emb);
	ck_assert_int_eq(sa_kmeans(doc_emb, NDOCS, DIMS, TOPICS, NULL, 30, 5,
	    f.centroids, assign, NULL, NULL, err), 0);
	/* three clean topics: each cluster is one topic */
	for (d = TOPICS; d < NDOCS; d++)
		ck_assert_int_eq(assign[d], assign[d % TOPICS]);
	ck_assert_int_eq(sa_router_init(&router, &f, err), 0);
	ck_assert_ptr_null(f.words);
	sa_vocab_free(&v);
	sa_csr_free(&m);
	free(assign);
}

static void
teardown(void)
{
	sa_router_free(&router);
	sa_docs_free(&docs);
	free(text);
	free(doc_emb);
}

/* The embedding the slow way: lowercase space-separated words, found by
 * a linear search of the word list, dense tf, dense product. */
static void
embed_brute(const char *ctx, size_t len, float *out)
{
	const pr_router *f = &router.file;
	double *tf = calloc(f->nwords, sizeof(double)), e[DIMS] = { 0 };
	double norm = 0;
	char w[64];
	size_t i = 0, n, j, off;
	int c;

	while (i < len) {
		for (n = 0; i < len && ctx[i] != ' '; i++)
			w[n++] = (char)(ctx[i] >= 'A' && ctx[i] <= 'Z' ?
			    ctx[i] - 'A' + 'a' : ctx[i]);
		w[n] = '\0';
		i++;
		for (j = 0, off = 0; j < f->nwords; j++) {
			if (n > 0 && strcmp(f->words + off, w) == 0)
				tf[j]++;
			off += strlen(f->words + off) + 1;
		}
	}
	for (j = 0; j < f->nwords; j++)
		if (tf[j] > 0)
			for (c = 0; c < DIMS; c++)
				e[c] += (1 + log(tf[j])) * f->idf[j] *
				    f->basis[j * DIMS + c];
	for (c = 0; c < DIMS; c++)
		norm += e[c] * e[c];
	for (c = 0; c < DIMS; c++)
		out[c] = norm > 0 ? (float)(e[c] / sqrt(norm)) : 0.0f;
	free(tf);
}

static const float *rank_cos;

static int
cmp_rank(const void *pa, const void *pb)
{
	int a = *(const int *)pa, b = *(const int *)pb;

	if (rank_cos[a] != rank_cos[b])
		return rank_cos[a] > rank_cos[b] ? -1 : 1;
	return a - b;
}

START_TEST(test_route_brute_force)
{
	float emb[DIMS], ref[DIMS], cos[TOPICS], sims[TOPICS];
	int order[TOPICS], ids[TOPICS], trial, e, c, got;
	char ctx[400], err[KN_ERR_LEN];
	double worst = 0;
	kn_rng rng;

	kn_rng_init(&rng, 9, 1);
	for (trial = 0; trial < 50; trial++) {
		size_t len = 0;
		int t;

		/* a mix of topics and common words, under 256 bytes */
		for (t = 0; t < 3; t++)
			len += put_words(ctx + len, &rng,
			    (int)kn_rng_below(&rng, TOPICS + 1) - 1,
			    (int)kn_rng_below(&rng, 6));
		if (len > 0)
			len--;          /* no trailing space */
		ck_assert_int_eq(sa_router_embed(&router, ctx, len, 256, emb,
		    err), 0);
		embed_brute(ctx, len, ref);
		for (c = 0; c < DIMS; c++)
			worst = fmax(worst, fabs(emb[c] - ref[c]));
		for (e = 0; e < TOPICS; e++) {
			double s = 0;

			for (c = 0; c < DIMS; c++)
				s += (double)ref[c] *
				    router.file.centroids[e * DIMS + c];
			cos[e] = (float)s;
			order[e] = e;
		}
		rank_cos = cos;
		qsort(order, TOPICS, sizeof(int), cmp_rank);
		got = sa_route(&router, ctx, len, 256, 2, ids, sims, err);
		ck_assert_int_eq(got, 2);
		for (e = 0; e < got; e++) {
			/* near-ties may order either way in float */
			if (ids[e] != order[e])
				ck_assert_float_eq_tol(cos[ids[e]],
				    cos[order[e]], 1e-5);
			ck_assert_float_eq_tol(sims[e], cos[ids[e]], 1e-5);
		}
		ck_assert_float_ge(sims[0], sims[1]);
	}
	tu_report("router embedding against brute force", worst);
	ck_assert_double_lt(worst, 1e-5);
	/* k = min(k, N) */
	ck_assert_int_eq(sa_route(&router, "rivera", 6, 256, 10, ids, NULL,
	    err), TOPICS);
	ck_assert_int_eq(sa_route(&router, "rivera", 6, 256, 0, ids, NULL,
	    err), KN_EINVAL);
	/* no known word: a zero embedding, still N answers */
	ck_assert_int_eq(sa_route(&router, "zzz", 3, 256, 1, ids, sims, err),
	    1);
	ck_assert_float_eq(sims[0], 0.0f);
}
END_TEST

/* A document routed whole lands on its clustering embedding; only the
 * first prefix bytes of a context count. */
START_TEST(test_route_document_and_prefix)
{
	float emb[DIMS], first[DIMS];
	char err[KN_ERR_LEN], *ctx = malloc(2000);
	int ids[1], ids_first[1], d, c;
	size_t len = 0;
	kn_rng rng;

	for (d = 0; d < NDOCS; d += 7) {
		ck_assert_int_eq(sa_router_embed(&router, text + docs.v[d].off,
		    docs.v[d].len, 1 << 20, emb, err), 0);
		for (c = 0; c < DIMS; c++)
			ck_assert_float_eq_tol(emb[c], doc_emb[d * DIMS + c],
			    1e-6);
	}
	kn_rng_init(&rng, 3, 3);
	while (len < 256)
		len += put_words(ctx + len, &rng, 0, 1);
	len += put_words(ctx + len, &rng, 1, 200);
	ck_assert_int_eq(sa_route(&router, ctx, len, 256, 1, ids, NULL, err),
	    1);
	ck_assert_int_eq(sa_route(&router, ctx, 256, 1 << 20, 1, ids_first,
	    NULL, err), 1);
	ck_assert_int_eq(ids[0], ids_first[0]);
	ck_assert_int_eq(sa_router_embed(&router, ctx, len, 256, emb, err), 0);
	ck_assert_int_eq(sa_router_embed(&router, ctx, 256, 256, first, err),
	    0);
	ck_assert(memcmp(emb, first, sizeof(emb)) == 0);
	/* the whole context is mostly topic 1: it routes elsewhere */
	ck_assert_int_eq(sa_route(&router, ctx, len, 1 << 20, 1, ids_first,
	    NULL, err), 1);
	ck_assert_int_ne(ids[0], ids_first[0]);
	free(ctx);
}
END_TEST

START_TEST(test_file_round_trip)
{
	const pr_router *f = &router.file;
	char err[KN_ERR_LEN], dir[128], path[256], *buf, *buf2;
	size_t len, len2, nf;
	pr_router back;
	sa_router loaded;
	int ids[2], ids2[2];

	ck_assert_int_eq(pr_router_encode(f, &buf, &len, err), 0);
	ck_assert_int_eq(pr_router_decode(buf, len, &back, err), 0);
	ck_assert_uint_eq(back.nwords, f->nwords);
	ck_assert_uint_eq(back.dims, f->dims);
	ck_assert_uint_eq(back.nexperts, f->nexperts);
	ck_assert_uint_eq(back.prefix, f->prefix);
	ck_assert_uint_eq(back.seed, f->seed);
	ck_assert_uint_eq(back.words_len, f->words_len);
	ck_assert(memcmp(back.words, f->words, f->words_len) == 0);
	nf = f->nwords + (size_t)f->nwords * f->dims +
	    (size_t)f->nexperts * f->dims;
	ck_assert(memcmp(back.params, f->params, nf * sizeof(float)) == 0);
	ck_assert_ptr_eq(back.basis, back.idf + back.nwords);
	/* the same router encodes to the same bytes */
	ck_assert_int_eq(pr_router_encode(&back, &buf2, &len2, err), 0);
	ck_assert_uint_eq(len, len2);
	ck_assert(memcmp(buf, buf2, len) == 0);
	pr_router_free(&back);

	tu_temp_dir(dir, sizeof(dir), "check_router");
	snprintf(path, sizeof(path), "%s/router.smr", dir);
	ck_assert_int_eq(pr_ckpt_write_file(path, buf, len, err), 0);
	ck_assert_int_eq(sa_router_load(&loaded, path, err), 0);
	ck_assert_int_eq(sa_route(&loaded, "engineb enginec", 15, 256, 2,
	    ids, NULL, err), 2);
	ck_assert_int_eq(sa_route(&router, "engineb enginec", 15, 256, 2,
	    ids2, NULL, err), 2);
	ck_assert(memcmp(ids, ids2, sizeof(ids)) == 0);
	sa_router_free(&loaded);
	snprintf(path, sizeof(path), "%s/missing", dir);
	ck_assert_int_eq(sa_router_load(&loaded, path, err), KN_EIO);
	tu_remove_dir(dir);
	free(buf);
	free(buf2);
}
END_TEST

/* ---- malformed files ---- */

/* What a hand-made file differs in from the router it is packed from. */
struct raw {
	const char *magic;
	int64_t version_delta;  /* added to the version; < 0 packed as a
	                         * negative integer */
	int drop;               /* a field left out: its index + 1, or 0 */
	int extra;              /* an unknown field added */
	int64_t words_delta;    /* added to the counts as packed */
	int64_t dims_delta;
	int64_t experts_delta;
	int64_t prefix_delta;
	int64_t words_bytes_delta;
	int bad_hash;
	size_t trailing;
};

static const char *const keys[] = { "magic", "version", "words", "dims",
    "experts", "prefix", "seed", "words_bytes", "payload", "sha256" };

/* f packed as the encoder would, but for o, and unchecked. */
static char *
pack_raw(const pr_router *f, const struct raw *o, size_t *len)
{
	size_t nf = f->nwords + (size_t)f->nwords * f->dims +
	    (size_t)f->nexperts * f->dims, payload = 4 * nf + f->words_len;
	uint64_t counts[6] = { f->nwords + o->words_delta,
	    f->dims + o->dims_delta, f->nexperts + o->experts_delta,
	    f->prefix + o->prefix_delta, f->seed,
	    f->words_len + o->words_bytes_delta };
	unsigned char *pl = malloc(payload), md[PR_SHA256_LEN];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	char *out;
	int64_t version = PR_ROUTER_VERSION + o->version_delta;
	int k, nk = 10 - (o->drop > 0) + (o->extra != 0);

	memcpy(pl, f->params, 4 * nf);          /* the host is LE here */
	memcpy(pl + 4 * nf, f->words, f->words_len);
	pr_mp_sha256(pl, payload, md);
	if (o->bad_hash)
		md[0] ^= 1;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, (size_t)nk);
	for (k = 0; k < 10; k++) {
		if (k + 1 == o->drop)
			continue;
		pr_mp_pack_key(&pk, keys[k]);
		if (k == 0)
			pr_mp_pack_key(&pk, o->magic ? o->magic :
			    "ShardMeter router");
		else if (k == 1 && version < 0)
			msgpack_pack_int64(&pk, version);
		else if (k == 1)
			msgpack_pack_uint64(&pk, (uint64_t)version);
		else if (k >= 2 && k <= 7)
			msgpack_pack_uint64(&pk, counts[k - 2]);
		else if (k == 8) {
			msgpack_pack_bin(&pk, payload);
			msgpack_pack_bin_body(&pk, pl, payload);
		} else
			msgpack_pack_bin_with_body(&pk, md, PR_SHA256_LEN);
	}
	if (o->extra) {
		pr_mp_pack_key(&pk, "colour");
		msgpack_pack_uint64(&pk, 1);
	}
	for (k = 0; k < (int)o->trailing; k++)
		msgpack_pack_nil(&pk);
	free(pl);
	out = sb.data;
	*len = sb.size;
	return out;
}

static void
refused(const char *buf, size_t len, int code, const char *want)
{
	char err[KN_ERR_LEN] = "";
	pr_router out;

	ck_assert_int_eq(pr_router_decode(buf, len, &out, err), code);
	ck_assert_ptr_null(out.words);
	ck_assert_ptr_null(out.params);
	tu_assert_refused(err, want);
}

static void
refused_raw(const pr_router *f, const struct raw *o, int code,
    const char *want)
{
	size_t len;
	char *buf = pack_raw(f, o, &len);

	refused(buf, len, code, want);
	free(buf);
}

#define RAW(...) (&(struct raw){ __VA_ARGS__ })

START_TEST(test_malformed_structure)
{
	const pr_router *f = &router.file;
	char err[KN_ERR_LEN], *buf;
	size_t len;
	pr_router out;

	/* the hand packer makes a valid file when told nothing */
	buf = pack_raw(f, RAW(.magic = NULL), &len);
	ck_assert_int_eq(pr_router_decode(buf, len, &out, err), 0);
	pr_router_free(&out);
	refused(buf, 0, KN_EINVAL, "truncated");
	refused(buf, len / 2, KN_EINVAL, "truncated");
	refused("\x93\x01\x02\x03", 4, KN_EINVAL, "msgpack map");
	free(buf);
	refused_raw(f, RAW(.magic = "Not a router"), KN_EINVAL,
	    "wrong magic");
	refused_raw(f, RAW(.magic = "ShardMeter checkpoint"), KN_EINVAL,
	    "ShardMeter checkpoint file");
	refused_raw(f, RAW(.version_delta = 1), KN_EINVAL, "upgrade");
	refused_raw(f, RAW(.version_delta = -2), KN_EINVAL, "version");
	refused_raw(f, RAW(.trailing = 2), KN_EINVAL, "trailing");
	refused_raw(f, RAW(.drop = 6 + 1), KN_EINVAL, "lacks field 'seed'");
	refused_raw(f, RAW(.extra = 1), KN_EINVAL, "unknown field 'colour'");
	refused_raw(f, RAW(.bad_hash = 1), KN_EINVAL, "hash mismatch");
}
END_TEST

START_TEST(test_malformed_counts)
{
	const pr_router *f = &router.file;

	refused_raw(f, RAW(.words_delta = -(int64_t)f->nwords), KN_EINVAL,
	    "words");
	refused_raw(f, RAW(.words_delta = PR_ROUTER_MAX_WORDS), KN_EINVAL,
	    "words");
	refused_raw(f, RAW(.dims_delta = (int64_t)f->nwords), KN_EINVAL,
	    "dimensions");
	refused_raw(f, RAW(.experts_delta = -(int64_t)f->nexperts),
	    KN_EINVAL, "experts");
	refused_raw(f, RAW(.prefix_delta = -(int64_t)f->prefix), KN_EINVAL,
	    "prefix");
	refused_raw(f, RAW(.words_bytes_delta = 1), KN_EINVAL,
	    "payload holds");
	refused_raw(f, RAW(.experts_delta = 1), KN_EINVAL, "payload holds");
	refused_raw(f, RAW(.words_bytes_delta = 1000000), KN_EINVAL,
	    "words take");
}
END_TEST

/* A copy of the router's file whose content the caller spoils. */
static pr_router
copy_file(size_t words_len)
{
	const pr_router *f = &router.file;
	char err[KN_ERR_LEN];
	pr_router c;

	ck_assert_int_eq(pr_router_alloc(&c, f->nwords, f->dims, f->nexperts,
	    words_len, err), 0);
	c.prefix = f->prefix;
	c.seed = f->seed;
	memcpy(c.params, f->params, (f->nwords + (size_t)f->nwords * f->dims +
	    (size_t)f->nexperts * f->dims) * sizeof(float));
	memcpy(c.words, f->words, words_len < f->words_len ? words_len :
	    f->words_len);
	return c;
}

/* Spoiled content is refused by the decoder and by the encoder. */
static void
refused_content(pr_router *c, int code, const char *want)
{
	char err[KN_ERR_LEN], *buf;
	size_t len;

	refused_raw(c, RAW(.magic = NULL), code, want);
	ck_assert_int_eq(pr_router_encode(c, &buf, &len, err), code);
	tu_assert_refused(err, want);
	pr_router_free(c);
}

START_TEST(test_malformed_content)
{
	const pr_router *f = &router.file;
	size_t w0 = strlen(f->words);
	pr_router c;

	c = copy_file(f->words_len);
	c.basis[3] = NAN;
	refused_content(&c, KN_ENUM, "non-finite");
	c = copy_file(f->words_len);
	c.idf[1] = 0;
	refused_content(&c, KN_EINVAL, "positive");
	c = copy_file(f->words_len);
	c.centroids[0] *= 2;
	c.centroids[1] += 0.5f;
	refused_content(&c, KN_EINVAL, "norm");
	c = copy_file(f->words_len);
	c.words[0] = 'A';
	refused_content(&c, KN_EINVAL, "byte 0x41");
	c = copy_file(f->words_len);
	c.words[w0 + 1] = '\0';         /* word 1 empty */
	refused_content(&c, KN_EINVAL, "1 to 64 are allowed");
	/* one word more than counted */
	c = copy_file(f->words_len + 3);
	memcpy(c.words + f->words_len, "zq", 3);
	refused_content(&c, KN_EINVAL, "past their");
	/* the last word without its NUL */
	c = copy_file(f->words_len);
	c.words[f->words_len - 1] = 'x';
	refused_content(&c, KN_EINVAL, "end after");
}
END_TEST

/* Duplicates, apart from the length of the words. */
START_TEST(test_duplicate_word)
{
	char err[KN_ERR_LEN], *buf;
	size_t len;
	pr_router c;
	int i;

	ck_assert_int_eq(pr_router_alloc(&c, 3, 1, 1, 9, err), 0);
	memcpy(c.words, "ab\0cd\0ab", 9);
	c.prefix = 256;
	for (i = 0; i < 3; i++)
		c.idf[i] = c.basis[i] = 1;
	c.centroids[0] = 1;
	ck_assert_int_eq(pr_router_encode(&c, &buf, &len, err), KN_EINVAL);
	tu_assert_refused(err, "'ab' twice");
	refused_raw(&c, RAW(.magic = NULL), KN_EINVAL, "'ab' twice");
	c.words[7] = 'c';
	ck_assert_int_eq(pr_router_encode(&c, &buf, &len, err), 0);
	free(buf);
	pr_router_free(&c);
}
END_TEST

/* shardmeter cluster end to end: the router it writes loads, the
 * assignment lists every document once, and each expert's text is its
 * documents in order. */
START_TEST(test_cluster_command)
{
	char dir[128], out[4096], path[300], *file, *tsv, *line;
	size_t len, tlen, want_len[TOPICS] = { 0 }, off, dlen, doc;
	int size[TOPICS] = { 0 }, e, rows = 0;
	char err[KN_ERR_LEN];
	sa_router loaded;

	tu_temp_dir(dir, sizeof(dir), "check_router_cmd");
	tu_write_file(dir, "in.txt", text);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts "
	    "%d --dims %d --vocab 100 --seed 3 --out %s/out %s/in.txt",
	    tu_shardmeter(), TOPICS, DIMS, dir, dir), 0);
	ck_assert_ptr_nonnull(strstr(out, "expert\tdocuments\tbytes"));
	snprintf(path, sizeof(path), "%s/out/router.smr", dir);
	ck_assert_int_eq(sa_router_load(&loaded, path, err), 0);
	ck_assert_uint_eq(loaded.file.nexperts, TOPICS);
	ck_assert_uint_eq(loaded.file.dims, DIMS);
	ck_assert_uint_eq(loaded.file.prefix, SA_ROUTE_PREFIX);
	ck_assert_uint_eq(loaded.file.seed, 3);
	sa_router_free(&loaded);

	snprintf(path, sizeof(path), "%s/out/assignment.tsv", dir);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 20, &file, &tlen, err),
	    0);
	tsv = tu_dup_buf(file, tlen, 0);
	tsv[tlen] = '\0';
	free(file);
	line = strtok(tsv, "\n");
	ck_assert_str_eq(line, "doc\toffset\tlength\tcluster");
	while ((line = strtok(NULL, "\n")) != NULL) {
		ck_assert_int_eq(sscanf(line, "%zu\t%zu\t%zu\t%d", &doc, &off,
		    &dlen, &e), 4);
		ck_assert_uint_eq(doc, (size_t)rows);
		ck_assert_uint_eq(off, docs.v[rows].off);
		ck_assert_uint_eq(dlen, docs.v[rows].len);
		ck_assert(e >= 0 && e < TOPICS);
		size[e]++;
		want_len[e] += dlen;
		rows++;
	}
	ck_assert_int_eq(rows, NDOCS);
	free(tsv);
	for (e = 0; e < TOPICS; e++) {
		ck_assert_int_eq(size[e], NDOCS / TOPICS);
		snprintf(path, sizeof(path), "%s/out/cluster-%d.txt", dir, e);
		ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 20, &file, &len,
		    err), 0);
		ck_assert_uint_eq(len, want_len[e]);
		free(file);
	}

	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts "
	    "0 --out %s/out %s/in.txt", tu_shardmeter(), dir, dir), 2);
	ck_assert_ptr_nonnull(strstr(out, "--experts takes an integer"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts "
	    "2 --out %s/out %s/missing", tu_shardmeter(), dir, dir), 1);
	ck_assert_ptr_nonnull(strstr(out, "cannot open"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts "
	    "2 --dims 500 --out %s/out %s/in.txt", tu_shardmeter(), dir, dir),
	    1);
	ck_assert_ptr_nonnull(strstr(out, "--dims 500 with --skip-dims 1 needs"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --help",
	    tu_shardmeter()), 0);
	ck_assert_ptr_nonnull(strstr(out, "usage: shardmeter cluster"));
	tu_remove_dir(dir);
}
END_TEST

#define MIX_TOPICS 8
#define MIX_DOCS 160            /* per topic: MIX_LONG long, the rest short */
#define MIX_LONG 8

/* Text like an encyclopedia's: per topic a few long documents, half of
 * their words the common words every topic shares, and many short ones
 * of a few words, mostly the topic's own; topic[d] is document d's. */
static char *
mixed_lengths(int *topic)
{
	static const char *const common[] = { "the", "of", "and", "a", "in",
	    "to", "is", "was", "for", "on", "as", "with", "by", "that" };
	char *t = malloc((size_t)MIX_TOPICS * MIX_DOCS * 160 + MIX_TOPICS *
	    MIX_LONG * 1200), *p = t;
	int tp, k, i, d = 0;
	kn_rng rng;

	kn_rng_init(&rng, 7, 0);
	for (tp = 0; tp < MIX_TOPICS; tp++)
		for (k = 0; k < MIX_DOCS; k++, d++) {
			int lng = k < MIX_LONG;
			int n = lng ? 150 : 4 + (int)kn_rng_below(&rng, 5);

			topic[d] = tp;
			p += sprintf(p, "<doc id=\"%d\">\n", d);
			for (i = 0; i < n; i++) {
				float u = kn_rng_uniform(&rng);

				if (u < (lng ? 0.5f : 0.15f))
					p += sprintf(p, "%s ", common[
					    kn_rng_below(&rng, 14)]);
				else
					p += sprintf(p, "t%dw%02d ", tp,
					    (int)kn_rng_below(&rng, 60));
			}
			p += sprintf(p, "\n</doc>\n");
		}
	return t;
}

/* The clusters follow topics, and the words that name them are topic
 * words: the leading singular direction, common words in proportion to
 * a document's length, is left out (SA_SVD_SKIP; with it, every top word
 * was a common word). */
START_TEST(test_cluster_topics)
{
	int topic[MIX_TOPICS * MIX_DOCS], in[MIX_TOPICS][2] = { { 0 } };
	char dir[128], out[8192], path[300], *file, *line, *save, *w;
	size_t tlen, doc, off, dlen;
	char err[KN_ERR_LEN];
	int e, t, lines = 0;
	char *mix = mixed_lengths(topic);

	tu_temp_dir(dir, sizeof(dir), "check_router_topics");
	tu_write_file(dir, "in.txt", mix);
	free(mix);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts 2 "
	    "--balance bytes --dims 16 --vocab 600 --out %s/out %s/in.txt "
	    "2>/dev/null", tu_shardmeter(), dir, dir), 0);
	for (line = strtok_r(out, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		int words = 0;

		if (sscanf(line, "%d\t%zu\t%zu\t", &e, &doc, &dlen) != 3)
			continue;
		lines++;
		w = strrchr(line, '\t') + 1;
		for (w = strtok(w, " "); w != NULL; w = strtok(NULL, " "),
		    words++)
			ck_assert_msg(w[0] == 't' && strchr(w, 'w') != NULL,
			    "cluster %d: top word '%s' is no topic's", e, w);
		ck_assert_int_eq(words, 8);
	}
	ck_assert_int_eq(lines, 2);

	snprintf(path, sizeof(path), "%s/out/assignment.tsv", dir);
	ck_assert_int_eq(pr_ckpt_read_file(path, 1 << 20, &file, &tlen, err),
	    0);
	file = realloc(file, tlen + 1);
	ck_assert_ptr_nonnull(file);
	file[tlen] = '\0';
	for (line = strtok_r(file, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save))
		if (sscanf(line, "%zu\t%zu\t%zu\t%d", &doc, &off, &dlen,
		    &e) == 4) {
			ck_assert(doc < MIX_TOPICS * MIX_DOCS && e >= 0 &&
			    e < 2);
			in[topic[doc]][e]++;
		}
	free(file);
	/* every topic kept together, long documents with short */
	for (t = 0; t < MIX_TOPICS; t++)
		ck_assert_msg(in[t][0] >= 0.95 * MIX_DOCS ||
		    in[t][1] >= 0.95 * MIX_DOCS, "topic %d split %d / %d", t,
		    in[t][0], in[t][1]);

	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts 2 "
	    "--skip-dims -1 --out %s/out %s/in.txt", tu_shardmeter(), dir,
	    dir), 2);
	ck_assert_ptr_nonnull(strstr(out, "--skip-dims"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s cluster --experts 2 "
	    "--dims 16 --skip-dims 590 --vocab 600 --out %s/out %s/in.txt",
	    tu_shardmeter(), dir, dir), 1);
	ck_assert_ptr_nonnull(strstr(out, "--skip-dims 590 needs"));
	tu_remove_dir(dir);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("router");
	TCase *tc = tcase_create("router");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_route_brute_force);
	tcase_add_test(tc, test_route_document_and_prefix);
	tcase_add_test(tc, test_file_round_trip);
	tcase_add_test(tc, test_malformed_structure);
	tcase_add_test(tc, test_malformed_counts);
	tcase_add_test(tc, test_malformed_content);
	tcase_add_test(tc, test_duplicate_word);
	tcase_add_test(tc, test_cluster_command);
	tcase_add_test(tc, test_cluster_topics);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
