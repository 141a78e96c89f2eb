/* The run spec: parsing, validation with clear messages, and a run id that
 * depends on the values alone. */
#include "config.h"

#include <check.h>
#include <msgpack.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proto/corpus.h"
#include "proto/spec.h"
#include "kernels/error.h"
#include "tests/testutil.h"

static const char *base =
    "seed = 3\n"
    "[model]\nblocks = 4\nwidth = 128\nheads = 4\nlayers_per_block = 2\n"
    "window = 64\n"
    "[data]\ntrain = a.txt\nvalid = b.txt\ntest = c.txt\n"
    "[optim]\nlr = 1e-3\nwarmup = 100\nlr_min = 1e-4\nweight_decay = 0.1\n"
    "clip = 1.0\nbetas = 0.9, 0.95\nbatch = 32\nsteps = 2000\n";

/* The same values, keys reordered, other spacing, comments, and data
 * paths that differ (paths are local to a host). */
static const char *shuffled =
    "; a comment\n"
    "[optim]\nsteps=2000\nbatch   =   32\nbeta2 = 0.95\nbeta1 = 0.9\n"
    "clip = 1\nweight_decay = 0.10\nlr_min = 0.0001\nwarmup = 100\n"
    "lr = 0.001\n"
    "[data]\ntest = /x/c.txt\nvalid = /x/b.txt\ntrain = /x/a.txt\n"
    "[model]\nwindow = 64\nlayers_per_block = 2\nheads = 4\nwidth = 128\n"
    "blocks = 4\ncuts = 0.25, 0.5, 0.75\n"
    "[]\nseed = 3\n";

static void
parse_ok(const char *text, pr_spec *s)
{
	char err[PR_ERR_LEN] = "";

	ck_assert_msg(pr_spec_parse(s, text, strlen(text), err) == 0, "%s", err);
}

START_TEST(test_run_id_stable)
{
	pr_spec a, b;
	char ia[PR_RUN_ID_LEN], ib[PR_RUN_ID_LEN], err[PR_ERR_LEN];

	parse_ok(base, &a);
	parse_ok(shuffled, &b);
	ck_assert_int_eq(pr_spec_run_id(&a, ia, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&b, ib, err), 0);
	ck_assert_str_eq(ia, ib);
	/* pinned: a change here changes every run id, across releases and
	 * platforms, and must be deliberate */
	ck_assert_str_eq(ia,
	    "87b240a039395ed4dd33f205df8a7dfa370fb05774fca4bacb1e31e9f252dcc6");
	b.seed = 4;
	ck_assert_int_eq(pr_spec_run_id(&b, ib, err), 0);
	ck_assert_str_ne(ia, ib);
	b.seed = 3;
	b.cuts[1] = 0.2;
	ck_assert_int_eq(pr_spec_run_id(&b, ib, err), 0);
	ck_assert_str_ne(ia, ib);
}
END_TEST

START_TEST(test_values)
{
	pr_spec s;

	parse_ok(base, &s);
	ck_assert_int_eq(s.blocks, 4);
	ck_assert(s.equal_cuts);
	ck_assert_double_eq(s.cuts[2], 0.5);
	ck_assert_double_eq(s.cuts[4], 1.0);
	ck_assert_double_eq(s.beta2, 0.95);
	ck_assert_str_eq(s.train, "a.txt");
	ck_assert_uint_eq(s.seed, 3);
	/* warmup then cosine to lr_min */
	ck_assert_double_eq_tol(pr_spec_lr(&s, 0), 1e-5, 1e-12);
	ck_assert_double_eq_tol(pr_spec_lr(&s, 99), 1e-3, 1e-12);
	ck_assert_double_eq_tol(pr_spec_lr(&s, 1999), 1e-4, 1e-8);
	ck_assert_double_eq_tol(pr_spec_lr(&s, 1050), 5.5e-4, 1e-9);
}
END_TEST

static void
expect_error(const char *text, const char *fragment)
{
	pr_spec s;
	char err[PR_ERR_LEN] = "";

	ck_assert_int_ne(pr_spec_parse(&s, text, strlen(text), err), 0);
	ck_assert_msg(strstr(err, fragment) != NULL, "'%s' lacks '%s'", err,
	    fragment);
}

START_TEST(test_errors)
{
	expect_error("[model]\nwidht = 3\n", "unknown key 'widht' in [model]");
	expect_error("[modle]\nwidth = 3\n", "unknown section [modle]");
	expect_error("[model]\nwidth = many\n", "'many' is not an integer");
	expect_error("[model]\nwidth = 30\nheads = 4\n", "multiple of heads");
	expect_error("[model]\nblocks = 3\ncuts = 0.5\n", "need 2 interior cuts");
	expect_error("[model]\nblocks = 3\ncuts = 0.6, 0.5\n",
	    "strictly increasing");
	expect_error("[optim]\nlr = nan\n", "not a finite number");
	expect_error("[optim]\nbetas = 0.9\n", "two numbers");
	expect_error("[data]\ntrain_sha256 = 12\n", "64 hex digits");
	expect_error("seed = -1\n", "non-negative");
	expect_error("[model]\nthis line is wrong\n", "line 2");
	expect_error("[sync]\nreplicas = 0\n", "replicas >= 1");
}
END_TEST

START_TEST(test_load_resolves_paths)
{
	char dir[64], path[256], err[PR_ERR_LEN];
	pr_spec s;

	tu_temp_dir(dir, sizeof(dir), "check_spec");
	snprintf(path, sizeof(path), "%s", tu_write_file(dir, "run.conf",
	    base));
	ck_assert_int_eq(pr_spec_load(&s, path, err), 0);
	ck_assert_str_eq(s.train + strlen(dir), "/a.txt");
	ck_assert_int_ne(pr_spec_load(&s, "/nonexistent/run.conf", err), 0);
	ck_assert_ptr_nonnull(strstr(err, "cannot open spec"));
	unlink(path);
	rmdir(dir);
}
END_TEST

/* Out-of-range values are refused at their line, naming the range. */
START_TEST(test_range_errors)
{
	expect_error("[model]\nblocks = 65\n",
	    "line 2: [model] blocks: 65 is out of range (need 1 <= blocks <= "
	    "64)");
	expect_error("\n[model]\nwidth = 20000\n",
	    "line 3: [model] width: 20000 is out of range");
	expect_error("[model]\nwidth = 0\n", "need 1 <= width <= 16384");
	expect_error("[model]\np_prefix = 1.5\n", "need 0 <= p_prefix <= 1");
	expect_error("[optim]\nlr = 0\n", "[optim] lr: 0 is out of range "
	    "(need lr > 0)");
	expect_error("[optim]\nlr_min = 0.1\n", "need lr_min <= lr");
	expect_error("[optim]\nbeta1 = 1\n", "need 0 <= beta1 < 1");
	expect_error("[optim]\nbetas = 0.9, 1.5\n", "need 0 <= beta2 < 1");
	expect_error("[optim]\nbetas = , 0.95\n", "two numbers");
	expect_error("[optim]\nwarmup = -1\n", "need warmup >= 0");
	expect_error("[optim]\nsteps = 1.5\n",
	    "'1.5' is not an integer (need steps >= 1)");
	expect_error("[sync]\nround_deadline = 0\n", "need round_deadline > 0");
}
END_TEST

/* pr_spec_print's text of s, NUL-terminated; its length */
static size_t
print_spec(const pr_spec *s, char *printed, size_t size)
{
	FILE *f;

	ck_assert_ptr_nonnull(f = tmpfile());
	ck_assert_int_eq(pr_spec_print(f, s), 0);
	return tu_read_back(f, printed, size);
}

/* Print, parse what was printed: the same struct and the same run id. */
static void
round_trip(const char *text)
{
	char id[PR_RUN_ID_LEN], id2[PR_RUN_ID_LEN], err[PR_ERR_LEN] = "";
	char printed[8192];
	pr_spec a, b;
	size_t len;

	parse_ok(text, &a);
	len = print_spec(&a, printed, sizeof(printed));
	ck_assert_msg(pr_spec_parse(&b, printed, len, err) == 0, "%s in\n%s",
	    err, printed);
	ck_assert_msg(memcmp(&a, &b, sizeof(a)) == 0, "differs:\n%s", printed);
	ck_assert_int_eq(pr_spec_run_id(&a, id, err), 0);
	ck_assert_int_eq(pr_spec_run_id(&b, id2, err), 0);
	ck_assert_str_eq(id, id2);
}

START_TEST(test_print_round_trip)
{
	char printed[8192];
	pr_spec s;

	round_trip("");
	round_trip(base);
	round_trip(shuffled);
	round_trip("seed = 18446744073709551615\n[model]\nblocks = 1\n"
	    "[data]\ntrain = /d/a b.txt\ntrain_sha256 = "
	    "ABCDEF0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789\n"
	    "[optim]\nlr = 3.3e-4\nlr_min = 1e-300\nbetas = 0.1, 0.7\n"
	    "[sync]\nouter_lr = 0.30000000000000004\n");
	round_trip("[model]\nblocks = 5\ncuts = 0.1 0.2 0.3 0.9\n");
	/* equal cuts and absent hashes are printed commented out */
	parse_ok("", &s);
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_nonnull(strstr(printed, "seed = 1\n\n[model]\n"
	    "blocks = 4\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\n# cuts = 0.25, 0.5, 0.75\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\n# test_sha256 =\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\nlr = 0.001\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\nbeta2 = 0.95\n"));
	ck_assert_ptr_null(strstr(printed, "betas"));
}
END_TEST

/* The table itself: defaults in range, names unique, the keys before any
 * section first (printing relies on it). */
START_TEST(test_key_table)
{
	char err[PR_ERR_LEN] = "";
	size_t i, j;
	pr_spec s;

	parse_ok("", &s);
	ck_assert_msg(pr_key_check_all(pr_spec_keys, pr_spec_nkeys, &s, err) ==
	    0, "%s", err);
	for (i = 0; i < pr_spec_nkeys; i++) {
		const pr_key *k = &pr_spec_keys[i];

		ck_assert_ptr_nonnull(k->doc);
		if (i > 0 && k->section[0] == '\0')
			ck_assert_str_eq(pr_spec_keys[i - 1].section, "");
		for (j = 0; j < i; j++)
			ck_assert(strcmp(k->section, pr_spec_keys[j].section) ||
			    strcmp(k->name, pr_spec_keys[j].name));
	}
}
END_TEST

/* Run ids pinned as exact hex strings, each for a spec written to a file
 * and loaded as a daemon would: a change in parsing, defaults or the
 * canonical encoding that moves any of them breaks every existing run. */
static char pin_dir[64];

static void
pin_setup(void)
{
	snprintf(pin_dir, sizeof(pin_dir), "/tmp/check_spec.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(pin_dir));
}

static void
pin_teardown(void)
{
	char cmd[96];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", pin_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", pin_dir);
}

static void
pin_write(const char *name, const char *text, size_t len, char *path,
    size_t pathlen)
{
	FILE *f;

	snprintf(path, pathlen, "%s/%s", pin_dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	fclose(f);
}

/* A small data file of n bytes and its SHA-256 in hex. */
static void
pin_data(const char *name, size_t n, unsigned seed, char hex[65])
{
	char text[512], path[128];
	unsigned char md[32];
	unsigned int mdlen = 0;
	size_t i;

	ck_assert_uint_le(n, sizeof(text));
	for (i = 0; i < n; i++)
		text[i] = (char)('a' + (i * 7 + seed) % 26);
	pin_write(name, text, n, path, sizeof(path));
	ck_assert_int_eq(EVP_Digest(text, n, md, &mdlen, EVP_sha256(), NULL),
	    1);
	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static void
pin_expect(const char *name, const char *text, pr_spec *s, const char *want)
{
	char path[128], id[PR_RUN_ID_LEN], err[PR_ERR_LEN] = "";

	pin_write(name, text, strlen(text), path, sizeof(path));
	ck_assert_msg(pr_spec_load(s, path, err) == 0, "%s: %s", name, err);
	ck_assert_int_eq(pr_spec_run_id(s, id, err), 0);
	ck_assert_msg(strcmp(id, want) == 0, "%s: run id %s, pinned %s", name,
	    id, want);
}

START_TEST(test_run_ids_pinned)
{
	char train[65], valid[65], test[65], text[2048];
	corpus c;
	char err[PR_ERR_LEN];
	pr_spec s;
	int i;

	/* the empty spec: every default */
	pin_expect("minimal.conf", "", &s,
	    "4326acf3f8662baa3b76d0f714bf6a73135c6179d6a3ba1231d5b6e9b34fa208");
	/* every key away from its default; the data hashes are those of files
	 * beside the spec, one written in capitals */
	pin_data("train.txt", 300, 1, train);
	pin_data("valid.txt", 120, 2, valid);
	pin_data("test.txt", 100, 3, test);
	for (i = 0; i < 64; i++)
		if (test[i] >= 'a' && test[i] <= 'f')
			test[i] = (char)(test[i] - 32);
	snprintf(text, sizeof(text),
	    "seed = 12345678901\n"
	    "[model]\nblocks = 3\nwidth = 96\nheads = 6\n"
	    "layers_per_block = 3\nwindow = 48\ncuts = 0.2, 0.55\n"
	    "p_prefix = 0.25\n"
	    "[data]\ntrain = train.txt\nvalid = valid.txt\ntest = test.txt\n"
	    "train_sha256 = %s\nvalid_sha256 = %s\ntest_sha256 = %s\n"
	    "[optim]\nlr = 3e-4\nlr_min = 3e-5\nwarmup = 10\n"
	    "weight_decay = 0.05\nclip = 0.5\nbetas = 0.85, 0.99\nbatch = 8\n"
	    "steps = 300\n"
	    "[sync]\nreplicas = 3\nlocal_steps = 25\nouter_lr = 0.7\n"
	    "round_deadline = 12.5\n", train, valid, test);
	pin_expect("full.conf", text, &s,
	    "04ff80e18a1855b75b65ee2ba073792bdb6bc3fc7da9260a40556195fc437e68");
	ck_assert_str_eq(s.train + strlen(pin_dir), "/train.txt");
	ck_assert_str_eq(s.train_sha256, train);
	ck_assert_int_eq(corpus_open(&c, s.train, s.train_sha256,
	    (size_t)s.window + 2, err), 0);
	corpus_close(&c);
	ck_assert_int_eq(corpus_open(&c, s.test, s.test_sha256,
	    (size_t)s.window + 2, err), 0);
	corpus_close(&c);
	/* one block (no cuts at all), the largest seed, betas one by one */
	pin_expect("one-block.conf",
	    "seed = 18446744073709551615\n[model]\nblocks = 1\n"
	    "[optim]\nbeta2 = 0.999\nbeta1 = 0.8\n[sync]\nreplicas = 2\n", &s,
	    "52ce7cb9a8f3c183376f449e9a56985d9849121bdedda04f21594b6ba334cc9d");
	/* eight blocks with uneven cuts, and equal cuts written out, which
	 * hash as the defaults do */
	pin_expect("eight-blocks.conf",
	    "[model]\nblocks = 8\nwidth = 64\nheads = 2\nlayers_per_block = 1\n"
	    "window = 32\ncuts = 0.05 0.1 0.2 0.3 0.45 0.6 0.8\n"
	    "[sync]\nlocal_steps = 1\n", &s,
	    "0bc7983d3d58300bb50ede28eddb28ad4025926c5a8ed54d626c0cf56bd3b851");
	pin_expect("equal-cuts.conf", "[model]\ncuts = 0.25, 0.5, 0.75\n", &s,
	    "4326acf3f8662baa3b76d0f714bf6a73135c6179d6a3ba1231d5b6e9b34fa208");
	ck_assert(!s.equal_cuts);
}
END_TEST

/* The template of `shardmeter spec --new` parses and sets the draw that
 * measured best and the default decoder; the same text without its [noise] section parses with
 * the default that older specs keep. */
START_TEST(test_template)
{
	const char *t = pr_spec_template(), *a = strstr(t, "[noise]"),
	    *b = strstr(t, "[data]");
	char old[4096];
	pr_spec s;

	parse_ok(t, &s);
	ck_assert_str_eq(s.noise_draw, "klevel");
	ck_assert(s.count_tilt == -0.5);
	ck_assert_int_eq(s.blocks, 4);
	/* the decoder is written out, so a new user sees the choice */
	ck_assert_str_eq(s.decode, "sampled");
	ck_assert_ptr_nonnull(strstr(t, "\n[generate]\n"));
	ck_assert_ptr_nonnull(strstr(t, "\ndecode = sampled\n"));
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_lt(strlen(t), sizeof(old));
	snprintf(old, sizeof(old), "%.*s%s", (int)(a - t), t, b);
	ck_assert_ptr_null(strstr(old, "klevel"));
	parse_ok(old, &s);
	ck_assert_str_eq(s.noise_draw, "stratified");
	ck_assert(s.count_tilt == 0);
}
END_TEST

static void
run_id_of(const char *text, char id[PR_RUN_ID_LEN])
{
	char err[PR_ERR_LEN] = "";
	pr_spec s;

	parse_ok(text, &s);
	ck_assert_msg(pr_spec_run_id(&s, id, err) == 0, "%s", err);
}

/* position_block: absent or the whole window is today's model, with
 * today's run id and printed text; below the window it is a new run. */
START_TEST(test_position_block)
{
	char none[PR_RUN_ID_LEN], whole[PR_RUN_ID_LEN], four[PR_RUN_ID_LEN];
	char printed[8192];
	pr_spec s;

	run_id_of("", none);
	ck_assert_str_eq(none, "4326acf3f8662baa3b76d0f714bf6a73135c6179d6a"
	    "3ba1231d5b6e9b34fa208");
	run_id_of("[model]\nposition_block = 64\n", whole);
	ck_assert_str_eq(whole, none);
	run_id_of("[model]\nposition_block = 4\n", four);
	ck_assert_str_ne(four, none);
	parse_ok("[model]\nwindow = 48\nposition_block = 16\n", &s);
	ck_assert_int_eq(s.position_block, 16);
	ck_assert_int_eq(pr_spec_block_shape(&s, 0).pos_block, 16);
	ck_assert_int_eq(pr_spec_reference_shape(&s, 0).pos_block, 16);
	ck_assert_int_eq(pr_spec_reference_shape(&s, 1).pos_block, 0);
	round_trip("[model]\nposition_block = 1\n");
	round_trip("[model]\nwindow = 48\nposition_block = 48\n");
	/* absent, it prints commented out as the window */
	parse_ok("", &s);
	ck_assert_int_eq(s.position_block, 0);
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_nonnull(strstr(printed, "\n# position_block = 64\n"));
	expect_error("[model]\nposition_block = 0\n",
	    "[model] position_block: '0' is not a whole number from 1");
	expect_error("[model]\nposition_block = 4.5\n", "is not a whole");
	expect_error("[model]\nposition_block = 128\n",
	    "position_block 128 must divide window 64");
	expect_error("[model]\nwindow = 48\nposition_block = 5\n",
	    "position_block 5 must divide window 48");
}
END_TEST

/* [generate] decode: each name parses, the default is a decoder, a bad
 * name is refused naming the choices, and the key (how a request is
 * decoded, not what is trained) leaves the run id as it was. */
START_TEST(test_generate_decode)
{
	char none[PR_RUN_ID_LEN], with[PR_RUN_ID_LEN], printed[8192];
	pr_spec s;
	int i;

	parse_ok("", &s);
	ck_assert_msg(s.decode[0] != '\0', "no default decoder");
	for (i = 0; pr_decoders[i] != NULL; i++)
		if (strcmp(s.decode, pr_decoders[i]) == 0)
			break;
	ck_assert_msg(pr_decoders[i] != NULL, "default '%s' is no decoder",
	    s.decode);
	parse_ok("[generate]\ndecode = margin\n", &s);
	ck_assert_str_eq(s.decode, "margin");
	for (i = 0; pr_decoders[i] != NULL; i++) {
		char text[512];

		snprintf(text, sizeof(text), "[generate]\ndecode = %s\n",
		    pr_decoders[i]);
		parse_ok(text, &s);
		ck_assert_str_eq(s.decode, pr_decoders[i]);
		round_trip(text);
		/* not hashed: the same run with any decoder */
		run_id_of("", none);
		run_id_of(text, with);
		ck_assert_str_eq(with, none);
		run_id_of(base, none);
		snprintf(text, sizeof(text), "%s[generate]\ndecode = %s\n", base,
		    pr_decoders[i]);
		run_id_of(text, with);
		ck_assert_str_eq(with, none);
	}
	ck_assert_int_ge(i, 3);
	/* the pinned id of base holds with a decoder named */
	ck_assert_str_eq(with,
	    "87b240a039395ed4dd33f205df8a7dfa370fb05774fca4bacb1e31e9f252dcc6");
	/* printed, it says which decoder */
	parse_ok("[generate]\ndecode = confidence\n", &s);
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_nonnull(strstr(printed, "[generate]"));
	ck_assert_ptr_nonnull(strstr(printed, "confidence"));
	expect_error("[generate]\ndecode = greedy\n", "'greedy' is not");
	for (i = 0; pr_decoders[i] != NULL; i++)
		expect_error("[generate]\ndecode = foo\n", pr_decoders[i]);
	expect_error("[generate]\ndecode = foo\n", "decode");
	expect_error("[generate]\ndecode = Margin\n", "'Margin' is not");
	expect_error("[generate]\ndecode =\n", "decode");
	expect_error("[generate]\ndecoder = margin\n",
	    "unknown key 'decoder' in [generate]");
}
END_TEST

/* method = soma: its run id covers the [soma] keys but not the local
 * clusters folder; a BlockTrain spec ignores [soma] entirely */
START_TEST(test_soma_keys)
{
	char a[PR_RUN_ID_LEN], b[PR_RUN_ID_LEN], printed[8192];
	char err[PR_ERR_LEN] = "";
	pr_spec s;

	run_id_of(base, a);
	run_id_of("[soma]\nperturbations = 7\n", b);
	{
		char c[PR_RUN_ID_LEN];

		run_id_of("", c);
		ck_assert_str_eq(b, c);
	}
	run_id_of("method = soma\n[soma]\nclusters = /a\n", a);
	run_id_of("method = soma\n[soma]\nclusters = /b\n", b);
	ck_assert_str_eq(a, b);
	run_id_of("method = soma\n[soma]\nperturbations = 7\n", b);
	ck_assert_str_ne(a, b);
	run_id_of("method = soma\n[soma]\nmode = summed\n", b);
	ck_assert_str_ne(a, b);

	parse_ok("method = soma\n[soma]\nexperts = 8\nwidth = 16\n"
	    "density = 0.25\n", &s);
	ck_assert_int_eq(pr_spec_method(&s), PR_METHOD_SOMA);
	ck_assert_int_eq(s.soma.experts, 8);
	ck_assert_int_eq(s.soma.perturbations, 64);
	ck_assert(s.soma.density == 0.25);
	ck_assert_str_eq(s.soma.mode, "independent");
	round_trip("method = soma\n[soma]\nexperts = 8\nlr = 0.002\n");
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_nonnull(strstr(printed, "\n[soma]\nexperts = 8\n"));
	parse_ok("", &s);
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_null(strstr(printed, "[soma]"));
	ck_assert_ptr_null(strstr(printed, "method"));

	ck_assert_int_eq(pr_spec_parse(&s, "method = soma\n[soma]\n"
	    "density = 0\n", 33, err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "density"));
	ck_assert_int_eq(pr_spec_parse(&s, "method = soma\n[soma]\n"
	    "lr = 1e-6\n", 31, err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "lr_floor"));
	ck_assert_int_eq(pr_spec_parse(&s, "method = somma\n", 15, err),
	    KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "method"));
}
END_TEST

/* The keys of the canonical encoding of s, and model.layers when it is
 * there, read back with msgpack-c: what the run id hashes. */
static int
encoded_layers(const pr_spec *s, int *layers, int max, int *has_lpb)
{
	msgpack_unpacked u;
	char *buf, err[PR_ERR_LEN];
	size_t len, i, j;
	int n = -1;

	ck_assert_msg(pr_spec_encode(s, &buf, &len, err) == 0, "%s", err);
	msgpack_unpacked_init(&u);
	ck_assert(msgpack_unpack_next(&u, buf, len, NULL) ==
	    MSGPACK_UNPACK_SUCCESS);
	ck_assert(u.data.type == MSGPACK_OBJECT_MAP);
	*has_lpb = 0;
	for (i = 0; i < u.data.via.map.size; i++) {
		const msgpack_object_kv *kv = &u.data.via.map.ptr[i];
		const msgpack_object_str *k = &kv->key.via.str;

		if (k->size == 22 && memcmp(k->ptr, "model.layers_per_block",
		    22) == 0)
			*has_lpb = 1;
		if (k->size == 12 && memcmp(k->ptr, "model.layers", 12) == 0) {
			ck_assert(kv->val.type == MSGPACK_OBJECT_ARRAY);
			n = (int)kv->val.via.array.size;
			for (j = 0; j < kv->val.via.array.size && (int)j < max;
			    j++)
				layers[j] = (int)kv->val.via.array.ptr[j].via.i64;
		}
	}
	msgpack_unpacked_destroy(&u);
	free(buf);
	return n;
}

/* [model] layers: one count per block.  Absent, or all equal, it is
 * today's spec with today's run id and encoding; unequal, the encoding
 * holds the list in place of layers_per_block. */
START_TEST(test_layers)
{
	char none[PR_RUN_ID_LEN], equal[PR_RUN_ID_LEN], a[PR_RUN_ID_LEN];
	char b[PR_RUN_ID_LEN], printed[8192], err[PR_ERR_LEN];
	int got[8], has_lpb;
	pr_spec s;

	run_id_of("", none);
	run_id_of("[model]\nlayers = 2, 2, 2, 2\n", equal);
	ck_assert_str_eq(equal, none);
	parse_ok("[model]\nlayers = 3 3 3 3\n", &s);
	ck_assert(!s.layers_given);
	ck_assert_int_eq(s.layers_per_block, 3);
	ck_assert_int_eq(encoded_layers(&s, got, 8, &has_lpb), -1);
	ck_assert(has_lpb);
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_nonnull(strstr(printed, "\nlayers_per_block = 3\n"
	    "# layers = 3, 3, 3, 3\n"));

	parse_ok("[model]\nblocks = 2\nlayers = 1, 3\n", &s);
	ck_assert(s.layers_given);
	ck_assert_int_eq(pr_spec_layers(&s, 0), 1);
	ck_assert_int_eq(pr_spec_layers(&s, 1), 3);
	ck_assert_int_eq(pr_spec_total_layers(&s), 4);
	ck_assert_int_eq(pr_spec_block_shape(&s, 0).layers, 1);
	ck_assert_int_eq(pr_spec_block_shape(&s, 1).layers, 3);
	ck_assert_int_eq(pr_spec_reference_shape(&s, 0).layers, 4);
	ck_assert_int_eq(pr_spec_reference_shape(&s, 1).layers, 4);
	ck_assert_int_eq(encoded_layers(&s, got, 8, &has_lpb), 2);
	ck_assert(!has_lpb);
	ck_assert_int_eq(got[0], 1);
	ck_assert_int_eq(got[1], 3);
	ck_assert_int_eq(pr_spec_run_id(&s, a, err), 0);
	ck_assert_str_eq(a, "deca381036ead06977c99f5e8eb1db4ad10de0fbff948b8e3"
	    "209341a289093d9");
	run_id_of("[model]\nblocks = 2\nlayers = 3, 1\n", b);
	ck_assert_str_ne(a, b);
	print_spec(&s, printed, sizeof(printed));
	ck_assert_ptr_nonnull(strstr(printed, "\n# layers_per_block = 2\n"
	    "layers = 1, 3\n"));
	round_trip("[model]\nblocks = 2\nlayers = 1, 3\n");
	round_trip("[model]\nblocks = 5\nlayers = 4,1,1,2,9\n");

	/* set from a list, as the planner writes its split */
	pr_spec_defaults(&s);
	s.blocks = 3;
	pr_spec_set_layers(&s, (int[]){ 2, 2, 2 });
	ck_assert(!s.layers_given);
	pr_spec_set_layers(&s, (int[]){ 2, 5, 2 });
	ck_assert(s.layers_given);
	ck_assert_int_eq(pr_spec_total_layers(&s), 9);
	s.block_layers[2] = 0;
	ck_assert_int_eq(pr_spec_validate(&s, err), KN_EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "block 3 has 0 layers"));

	expect_error("[model]\nblocks = 3\nlayers = 1, 2\n",
	    "[model] layers: 3 blocks need 3 layer counts, one per block, "
	    "got 2");
	expect_error("[model]\nblocks = 2\nlayers = 1, 2, 3\n",
	    "got 3");
	expect_error("[model]\nblocks = 2\nlayers = 1, 0\n",
	    "block 2 has 0 layers; each block needs 1 to 1024");
	expect_error("[model]\nblocks = 2\nlayers = 1, 1025\n",
	    "block 2 has 1025 layers");
	expect_error("[model]\nblocks = 2\nlayers = 1, two\n",
	    "is not a list of whole numbers");
	expect_error("[model]\nblocks = 2\nlayers = 1.5, 2\n",
	    "is not a list of whole numbers");
	expect_error("[model]\nblocks = 2\nlayers_per_block = 2\nlayers = 1, 2\n",
	    "mutually exclusive");
	expect_error("[model]\nlayers = 1, 2, 2, 2\nlayers_per_block = 1\n",
	    "mutually exclusive");
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("spec");
	TCase *tc = tcase_create("spec");

	tcase_add_test(tc, test_run_id_stable);
	tcase_add_test(tc, test_values);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_load_resolves_paths);
	tcase_add_test(tc, test_range_errors);
	tcase_add_test(tc, test_print_round_trip);
	tcase_add_test(tc, test_key_table);
	tcase_add_test(tc, test_soma_keys);
	tcase_add_test(tc, test_position_block);
	tcase_add_test(tc, test_generate_decode);
	tcase_add_test(tc, test_layers);
	tcase_add_test(tc, test_template);
	suite_add_tcase(s, tc);
	tc = tcase_create("pinned");
	tcase_add_checked_fixture(tc, pin_setup, pin_teardown);
	tcase_add_test(tc, test_run_ids_pinned);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
