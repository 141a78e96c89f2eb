/* The topology file (proto/topology.h): what is saved loads back the
 * same, the example of the format reads, a hand-written file may leave
 * the optional keys out and use the compact form, and each kind of bad
 * file is refused with a message that names the key and the host or
 * link. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/error.h"
#include "proto/topology.h"
#include "tests/testutil.h"

/* The format's own example, two hosts and both their links. */
static const char example[] =
    "{ \"version\": 1, \"measured_at\": \"2026-12-03T10:00:00Z\",\n"
    "  \"shape\": { \"width\": 128, \"heads\": 4, \"layers\": 2,"
    " \"window\": 64, \"batch\": 16 },\n"
    "  \"hosts\": [\n"
    "    { \"name\": \"h0\", \"address\": \"127.0.0.1:7000\", \"id\": \"X\","
    " \"device\": \"cpu: 2 threads, avx512\", \"memory_bytes\": 25769803776,"
    " \"train_positions_per_s\": 12000.0, \"forward_positions_per_s\":"
    " 36000.0 },\n"
    "    { \"name\": \"h1\", \"device\": \"H200\", \"memory_bytes\": 1e11,"
    " \"train_positions_per_s\": 9000, \"forward_positions_per_s\": 27000,"
    " \"notes\": \"by hand\" } ],\n"
    "  \"links\": [\n"
    "    { \"from\": \"h0\", \"to\": \"h1\", \"rtt_ms\": 0.21,"
    " \"rtt_spread_ms\": 0.04, \"samples\": 20, \"stream_bytes_per_s\":"
    " 9.1e8, \"streams\": 4, \"multi_bytes_per_s\": 1.6e9 },\n"
    "    { \"from\": \"h1\", \"to\": \"h0\", \"rtt_ms\": 0.25,"
    " \"rtt_spread_ms\": 0, \"samples\": 20, \"stream_bytes_per_s\":"
    " 8e8, \"streams\": 4, \"multi_bytes_per_s\": 1.5e9 } ] }\n";

/* The example with the first from changed to to; the test fails if from
 * is not in it. */
static char *
edited(const char *from, const char *to)
{
	const char *at = strstr(example, from);
	size_t pre, len;
	char *out;

	ck_assert_msg(at != NULL, "'%s' is not in the example", from);
	pre = (size_t)(at - example);
	len = strlen(example) - strlen(from) + strlen(to);
	out = malloc(len + 1);
	ck_assert_ptr_nonnull(out);
	memcpy(out, example, pre);
	memcpy(out + pre, to, strlen(to));
	strcpy(out + pre + strlen(to), at + strlen(from));
	return out;
}

/* The edited example is refused with a message that holds each of
 * want (NULL-ended). */
static void
refused(const char *from, const char *to, const char *const *want)
{
	char *text = edited(from, to), err[KN_ERR_LEN] = "";
	topo_topology t;
	int rc = topo_parse(&t, text, strlen(text), "topo.json", err);

	ck_assert_msg(rc == KN_EINVAL, "accepted with '%s' as '%s'", from, to);
	ck_assert_int_eq(t.nhosts, 0);
	ck_assert_ptr_null(t.hosts);
	for (; *want != NULL; want++)
		ck_assert_msg(strstr(err, *want) != NULL, "'%s' lacks '%s'", err,
		    *want);
	free(text);
}

START_TEST(test_example_reads)
{
	char err[KN_ERR_LEN];
	topo_topology t;
	const topo_link *l;

	ck_assert_msg(topo_parse(&t, example, strlen(example), "ex",
	    err) == 0, "%s", err);
	ck_assert_int_eq(t.nhosts, 2);
	ck_assert_int_eq(t.shape.width, 128);
	ck_assert_int_eq(t.shape.batch, 16);
	ck_assert_str_eq(t.hosts[0].address, "127.0.0.1:7000");
	ck_assert_str_eq(t.hosts[1].address, "");
	ck_assert(t.hosts[0].memory_bytes == 25769803776.0);
	ck_assert_str_eq(t.hosts[1].notes, "by hand");
	ck_assert_int_eq(topo_find(&t, "h1"), 1);
	ck_assert_int_eq(topo_find(&t, "h2"), -1);
	ck_assert_ptr_null(topo_link_at(&t, 1, 1));
	l = topo_link_at(&t, 1, 0);
	ck_assert(l->rtt_ms == 0.25 && l->rtt_spread_ms == 0.0);
	ck_assert(topo_link_at(&t, 0, 1)->multi_bytes_per_s == 1.6e9);
	topo_free(&t);
}
END_TEST

static double
rel(double a, double b)
{
	return fabs(a - b) / fmax(fabs(a), fabs(b));
}

START_TEST(test_save_load_round_trip)
{
	char dir[64], path[128], err[KN_ERR_LEN], name[32];
	topo_topology t, u;
	int i, j, n = 3;

	tu_temp_dir(dir, sizeof(dir), "check_topology");
	snprintf(path, sizeof(path), "%s/topology.json", dir);
	ck_assert_int_eq(topo_init(&t, n, err), 0);
	snprintf(t.measured_at, sizeof(t.measured_at), "2026-12-03T10:00:00Z");
	t.shape = (topo_shape){ 32, 2, 1, 32, 16 };
	t.notes = strdup("three hosts");
	for (i = 0; i < n; i++) {
		topo_host *h = &t.hosts[i];

		snprintf(h->name, sizeof(h->name), "127.0.0.1:%d", 21000 + i);
		snprintf(h->device, sizeof(h->device), "cpu: %d threads", i + 1);
		h->memory_bytes = 1e9 * (i + 1) + 7;    /* an integer */
		h->train_positions_per_s = 1234.5678901 * (i + 1);
		h->forward_positions_per_s = 3.0 / 7.0 * 1e4 * (i + 1);
		/* host 0 without serving passes: none written, 0 read */
		h->serve_pass_one_s = i == 0 ? 0.0 : 1.25e-4 * i;
		h->serve_pass_window_s = i == 0 ? 0.0 : 3.5e-4 * i;
		/* host 0 on a machine of its own: no machine, no shared rate */
		if (i > 0) {
			snprintf(h->machine, sizeof(h->machine), "0123abcd");
			h->train_shared = 0.8 * h->train_positions_per_s;
			/* and what its round work costs */
			h->cpu_share = 0.1 * i;
			h->exchange_cpu = 3.25e-9 * i;
			h->encode_cpu = 1.5e-10 * i;
			h->merge_cpu = 7.125e-10 * i;
		}
		for (j = 0; j < n; j++) {
			topo_link *l = topo_link_at(&t, i, j);

			if (l == NULL)
				continue;
			l->rtt_ms = 0.1 + i + 0.01 * j;
			l->rtt_spread_ms = i == 0 ? 0.0 : 0.003 * j;
			l->samples = 20 + i;
			l->stream_bytes_per_s = 9.123456789e8 / (j + 1);
			l->streams = 4;
			l->multi_bytes_per_s = 1.6e9 + i;
		}
	}
	t.hosts[1].id[0] = 'Q';
	ck_assert_msg(topo_save(&t, path, err) == 0, "%s", err);
	ck_assert_msg(topo_load(&u, path, err) == 0, "%s", err);
	ck_assert_int_eq(u.nhosts, n);
	ck_assert_str_eq(u.measured_at, t.measured_at);
	ck_assert_str_eq(u.notes, "three hosts");
	ck_assert(memcmp(&u.shape, &t.shape, sizeof(t.shape)) == 0);
	for (i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "127.0.0.1:%d", 21000 + i);
		ck_assert_str_eq(u.hosts[i].name, name);
		ck_assert_str_eq(u.hosts[i].device, t.hosts[i].device);
		ck_assert_str_eq(u.hosts[i].id, t.hosts[i].id);
		ck_assert_ptr_null(u.hosts[i].notes);
		ck_assert(u.hosts[i].memory_bytes == t.hosts[i].memory_bytes);
		ck_assert(rel(u.hosts[i].train_positions_per_s,
		    t.hosts[i].train_positions_per_s) < 1e-9);
		ck_assert(rel(u.hosts[i].forward_positions_per_s,
		    t.hosts[i].forward_positions_per_s) < 1e-9);
		ck_assert(u.hosts[i].serve_pass_one_s ==
		    t.hosts[i].serve_pass_one_s);
		ck_assert(u.hosts[i].serve_pass_window_s ==
		    t.hosts[i].serve_pass_window_s);
		ck_assert_str_eq(u.hosts[i].machine, t.hosts[i].machine);
		ck_assert(t.hosts[i].train_shared == 0 ?
		    u.hosts[i].train_shared == 0 : rel(u.hosts[i].train_shared,
		    t.hosts[i].train_shared) < 1e-9);
		ck_assert(u.hosts[i].cpu_share == t.hosts[i].cpu_share);
		ck_assert(u.hosts[i].exchange_cpu == t.hosts[i].exchange_cpu);
		ck_assert(u.hosts[i].encode_cpu == t.hosts[i].encode_cpu);
		ck_assert(u.hosts[i].merge_cpu == t.hosts[i].merge_cpu);
		for (j = 0; j < n; j++) {
			const topo_link *a = topo_link_at(&t, i, j);
			const topo_link *b = topo_link_at(&u, i, j);

			if (a == NULL)
				continue;
			ck_assert(rel(a->rtt_ms, b->rtt_ms) < 1e-9);
			ck_assert(a->rtt_spread_ms == 0 ? b->rtt_spread_ms == 0 :
			    rel(a->rtt_spread_ms, b->rtt_spread_ms) < 1e-9);
			ck_assert_int_eq(a->samples, b->samples);
			ck_assert_int_eq(a->streams, b->streams);
			ck_assert(rel(a->stream_bytes_per_s,
			    b->stream_bytes_per_s) < 1e-9);
			ck_assert(rel(a->multi_bytes_per_s,
			    b->multi_bytes_per_s) < 1e-9);
		}
	}
	topo_free(&u);
	/* a link left unmeasured is not written */
	topo_link_at(&t, 2, 0)->stream_bytes_per_s = -1;
	ck_assert_int_ne(topo_save(&t, path, err), 0);
	ck_assert_msg(strstr(err, "stream_bytes_per_s") != NULL &&
	    strstr(err, "127.0.0.1:21002 -> 127.0.0.1:21000") != NULL, "%s",
	    err);
	topo_free(&t);
	tu_remove_dir(dir);
}
END_TEST

START_TEST(test_unknown_key)
{
	refused("\"memory_bytes\": 25769803776", "\"memroy_bytes\": 1",
	    (const char *const[]){ "topo.json", "hosts[0] (\"h0\")",
	    "unknown key \"memroy_bytes\"", NULL });
	refused("\"samples\": 20, \"stream", "\"sample\": 20, \"stream",
	    (const char *const[]){ "links[0] (h0 -> h1)",
	    "unknown key \"sample\"", NULL });
	refused("\"version\": 1,", "\"version\": 1, \"verison\": 1,",
	    (const char *const[]){ "unknown key \"verison\"", NULL });
	refused("\"batch\": 16", "\"batch\": 16, \"depth\": 3",
	    (const char *const[]){ "shape", "unknown key \"depth\"", NULL });
}
END_TEST

START_TEST(test_bad_link_ends)
{
	refused("\"from\": \"h1\", \"to\": \"h0\"",
	    "\"from\": \"h0\", \"to\": \"h1\"",
	    (const char *const[]){ "links[1] (h0 -> h1)", "second link",
	    NULL });
	refused("\"from\": \"h1\", \"to\": \"h0\"",
	    "\"from\": \"h1\", \"to\": \"h1\"",
	    (const char *const[]){ "links[1] (h1 -> h1)", "distinct", NULL });
	refused("\"from\": \"h1\", \"to\": \"h0\"",
	    "\"from\": \"h1\", \"to\": \"h9\"",
	    (const char *const[]){ "no host \"h9\"", NULL });
}
END_TEST

/* A file whose second link is gone altogether. */
START_TEST(test_missing_pair)
{
	const char *cut = ",\n    { \"from\": \"h1\"";
	const char *at = strstr(example, cut);
	char text[sizeof(example)], err[KN_ERR_LEN] = "";
	topo_topology t;

	ck_assert_ptr_nonnull(at);
	memcpy(text, example, (size_t)(at - example));
	strcpy(text + (at - example), " ] }\n");
	ck_assert_int_eq(topo_parse(&t, text, strlen(text), "topo.json", err),
	    KN_EINVAL);
	ck_assert_msg(strstr(err, "missing link h1 -> h0") != NULL, "%s", err);
}
END_TEST

START_TEST(test_bad_numbers)
{
	refused("\"train_positions_per_s\": 12000.0",
	    "\"train_positions_per_s\": -12000.0",
	    (const char *const[]){ "hosts[0] (\"h0\")",
	    "\"train_positions_per_s\" must be a positive", NULL });
	refused("\"rtt_ms\": 0.21", "\"rtt_ms\": 0",
	    (const char *const[]){ "links[0] (h0 -> h1)", "\"rtt_ms\"", NULL });
	refused("\"rtt_spread_ms\": 0.04", "\"rtt_spread_ms\": -0.04",
	    (const char *const[]){ "\"rtt_spread_ms\" must be a non-negative",
	    NULL });
	refused("\"samples\": 20, \"stream", "\"samples\": 2.5, \"stream",
	    (const char *const[]){ "\"samples\" must be a positive integer",
	    NULL });
	refused("\"train_positions_per_s\": 12000.0",
	    "\"serve_pass_one_s\": 0, \"train_positions_per_s\": 12000.0",
	    (const char *const[]){ "hosts[0] (\"h0\")",
	    "\"serve_pass_one_s\" must be a positive", NULL });
	refused("\"train_positions_per_s\": 12000.0",
	    "\"train_positions_per_s_shared\": -1, \"train_positions_per_s\": "
	    "12000.0", (const char *const[]){ "hosts[0] (\"h0\")",
	    "\"train_positions_per_s_shared\" must be a positive", NULL });
	refused("\"train_positions_per_s\": 12000.0",
	    "\"cpu_share\": 0, \"train_positions_per_s\": 12000.0",
	    (const char *const[]){ "hosts[0] (\"h0\")",
	    "\"cpu_share\" must be a positive", NULL });
	refused("\"train_positions_per_s\": 12000.0",
	    "\"merge_cpu_s_per_param\": -1e-9, \"train_positions_per_s\": "
	    "12000.0", (const char *const[]){ "hosts[0] (\"h0\")",
	    "\"merge_cpu_s_per_param\" must be a positive", NULL });
	refused("\"memory_bytes\": 1e11", "\"memory_bytes\": \"lots\"",
	    (const char *const[]){ "hosts[1] (\"h1\")", "memory_bytes", NULL });
	refused("\"width\": 128", "\"width\": 0",
	    (const char *const[]){ "shape", "\"width\"", NULL });
	refused("\"streams\": 4, \"multi_bytes_per_s\": 1.6e9",
	    "\"multi_bytes_per_s\": 1.6e9",
	    (const char *const[]){ "missing key \"streams\"", NULL });
}
END_TEST

START_TEST(test_duplicate_host)
{
	refused("\"name\": \"h1\"", "\"name\": \"h0\"",
	    (const char *const[]){ "duplicate host \"h0\"", NULL });
}
END_TEST

START_TEST(test_bad_json)
{
	refused("\"hosts\": [", "\"hosts\" [",
	    (const char *const[]){ "topo.json:", "bad JSON", NULL });
	refused("\"version\": 1", "\"version\": 2",
	    (const char *const[]){ "\"version\" must be 1", NULL });
	refused("2026-12-03T10:00:00Z", "yesterday",
	    (const char *const[]){ "measured_at", NULL });
	refused("\"measured_at\": \"2026-12-03T10:00:00Z\"",
	    "\"measured_at\": \"by hand\", \"measured_at\": \"by hand\"",
	    (const char *const[]){ "bad JSON", "duplicate", NULL });
}
END_TEST

/* text parsed as name must be refused with a message that holds want */
static void
refused_text(const char *text, const char *name, const char *want)
{
	char err[KN_ERR_LEN] = "";
	topo_topology t;

	ck_assert_int_eq(topo_parse(&t, text, strlen(text), name, err),
	    KN_EINVAL);
	ck_assert_msg(strstr(err, want) != NULL && strstr(err, name) != NULL,
	    "'%s' lacks '%s'", err, want);
	ck_assert_ptr_null(t.hosts);
}

/* text with the first from replaced by to (from must be in it) */
static char *
replaced(const char *text, const char *from, const char *to)
{
	const char *at = strstr(text, from);
	char *out;

	ck_assert_msg(at != NULL, "'%s' is not in the text", from);
	out = malloc(strlen(text) + strlen(to) + 1);
	ck_assert_ptr_nonnull(out);
	memcpy(out, text, (size_t)(at - text));
	strcpy(out + (at - text), to);
	strcat(out, at + strlen(from));
	return out;
}

/* text's first from replaced by to is refused with want */
struct edit {
	const char *from, *to, *want;
};

static void
refused_edits(const char *text, const char *name, const struct edit *e,
    size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		char *bad = replaced(text, e[i].from, e[i].to);

		refused_text(bad, name, e[i].want);
		free(bad);
	}
}

static const char hand_head[] =
    "{ \"version\": 1, \"measured_at\": \"by hand\",\n"
    "  \"shape\": { \"width\": 64, \"heads\": 4, \"layers\": 2, "
    "\"window\": 32, \"batch\": 8 },\n";

/* Three hosts written by hand in the full form: no device, and the
 * links without their spread, samples or several-stream figures. */
static const char hand_hosts[] =
    "  \"hosts\": [ { \"name\": \"h0\", \"address\": \"127.0.0.1:7400\", "
    "\"memory_bytes\": 1e9, \"train_positions_per_s\": 3000, "
    "\"forward_positions_per_s\": 9000 },\n"
    "    { \"name\": \"h1\", \"memory_bytes\": 1e9, "
    "\"train_positions_per_s\": 3100, \"forward_positions_per_s\": 9000 },\n"
    "    { \"name\": \"h2\", \"memory_bytes\": 1e9, "
    "\"train_positions_per_s\": 3200, \"forward_positions_per_s\": 9000 } "
    "],\n  \"links\": [ ";

static char *
hand_written(void)
{
	static const char *const pairs[] = { "h0\", \"to\": \"h1",
	    "h0\", \"to\": \"h2", "h1\", \"to\": \"h0", "h1\", \"to\": \"h2",
	    "h2\", \"to\": \"h0", "h2\", \"to\": \"h1" };
	size_t cap = 8192, used;
	char *text = malloc(cap);
	int i;

	ck_assert_ptr_nonnull(text);
	used = (size_t)snprintf(text, cap, "%s%s", hand_head, hand_hosts);
	for (i = 0; i < 6; i++)
		used += (size_t)snprintf(text + used, cap - used, "%s{ \"from\": "
		    "\"%s\", \"rtt_ms\": 1, \"stream_bytes_per_s\": 1e7 }",
		    i ? ",\n    " : "", pairs[i]);
	snprintf(text + used, cap - used, " ] }\n");
	return text;
}

/* The optional keys left out read as the header says, are left out
 * again by the writer, and each kind of mistake is still refused. */
START_TEST(test_hand_written)
{
	static const struct edit cases[] = {
		{ "\"train_positions_per_s\"", "\"trian_positions_per_s\"",
		  "unknown key \"trian_positions_per_s\"" },
		{ "{ \"from\": \"h1\", \"to\": \"h0\"",
		  "{ \"from\": \"h1\", \"to\": \"h0\", \"streams\": 4",
		  "links[2] (h1 -> h0): missing key \"multi_bytes_per_s\"" },
		{ "{ \"from\": \"h1\", \"to\": \"h0\"",
		  "{ \"from\": \"h1\", \"to\": \"h2\"",
		  "a second link h1 -> h2 (also links[2])" },
		{ "\"stream_bytes_per_s\": 1e7", "\"stream_bytes_per_s\": -1e7",
		  "links[0] (h0 -> h1): \"stream_bytes_per_s\" must be a "
		  "positive finite number" },
		{ "\"name\": \"h2\"", "\"name\": \"h0\"",
		  "duplicate host \"h0\" (also hosts[0])" },
		{ "\"width\": 64", "\"width\": 66",
		  "shape: width 66 is not a multiple of heads 4" },
	};
	char *text = hand_written(), *dumped, err[KN_ERR_LEN];
	const topo_link *l;
	topo_topology t, back;

	ck_assert_msg(topo_parse(&t, text, strlen(text), "ok.json", err) == 0,
	    "%s", err);
	ck_assert_int_eq(t.nhosts, 3);
	ck_assert_str_eq(t.hosts[1].device, "");
	l = topo_link_at(&t, 2, 1);
	ck_assert(l->rtt_spread_ms == TOPO_UNKNOWN);
	ck_assert_int_eq(l->samples, 0);
	ck_assert_int_eq(l->streams, 1);
	ck_assert(l->multi_bytes_per_s == 1e7);
	dumped = topo_dump(&t, err);
	ck_assert_msg(dumped != NULL, "%s", err);
	ck_assert_ptr_null(strstr(dumped, "rtt_spread_ms"));
	ck_assert_ptr_null(strstr(dumped, "samples"));
	ck_assert_ptr_null(strstr(dumped, "device"));
	ck_assert_ptr_nonnull(strstr(dumped, "\"streams\": 1"));
	ck_assert_msg(topo_parse(&back, dumped, strlen(dumped), "dumped",
	    err) == 0, "%s", err);
	ck_assert(topo_link_at(&back, 2, 1)->rtt_spread_ms == TOPO_UNKNOWN);
	ck_assert(topo_link_at(&back, 2, 1)->multi_bytes_per_s == 1e7);
	topo_free(&back);
	free(dumped);
	topo_free(&t);

	refused_edits(text, "bad.json", cases, sizeof(cases) /
	    sizeof(cases[0]));
	refused_text("{ \"version\": 1,\n  \"hosts\": [ }", "bad.json",
	    "bad.json:2");
	free(text);
}
END_TEST

static const char compact[] =
    "  \"hosts\": [ { \"name\": \"a\", \"count\": 2, "
    "\"memory_bytes\": 1e9, \"train_positions_per_s\": 1000, "
    "\"forward_positions_per_s\": 3000, \"notes\": \"rack 4\" },\n"
    "    { \"name\": \"solo\", \"site\": \"b\", \"memory_bytes\": 1e9, "
    "\"train_positions_per_s\": 500, \"forward_positions_per_s\": "
    "1500 } ],\n"
    "  \"links\": [ { \"from\": \"site:a\", \"to\": \"site:a\", "
    "\"rtt_ms\": 0.01, \"stream_bytes_per_s\": 1e10 },\n"
    "    { \"from\": \"site:a\", \"to\": \"site:b\", \"rtt_ms\": 80, "
    "\"stream_bytes_per_s\": 1e8, \"streams\": 8, "
    "\"multi_bytes_per_s\": 1e9 },\n"
    "    { \"from\": \"site:b\", \"to\": \"site:a\", \"rtt_ms\": 80, "
    "\"stream_bytes_per_s\": 1e8 },\n"
    "    { \"from\": \"a-1\", \"to\": \"solo\", \"rtt_ms\": 30, "
    "\"stream_bytes_per_s\": 2e8 }%s ] }\n";

static void
compact_text(char *text, size_t len, const char *more)
{
	int n = snprintf(text, len, "%s", hand_head);

	snprintf(text + n, len - (size_t)n, compact, more);
}

/* Hosts with "count" and links between sites expand into the full form;
 * a host's own link overrides its site's, the same pair twice at one
 * level is refused, and what is written is the full form, which reads
 * back the same. */
START_TEST(test_compact_form)
{
	static const struct edit cases[] = {
		{ "\"count\": 2,", "\"count\": 2, \"id\": \"X\",",
		  "hosts[0] (\"a\"): \"count\" stands for several hosts" },
		{ "\"count\": 2,", "\"count\": 0,",
		  "\"count\" must be an integer" },
		{ "\"name\": \"solo\"", "\"name\": \"a-1\"",
		  "duplicate host \"a-1\" (also hosts[0])" },
		{ "\"name\": \"solo\"", "\"name\": \"site:x\"",
		  "cannot start with \"site:\"" },
	};
	char text[4096], err[KN_ERR_LEN], *dumped;
	topo_topology t, back;
	int i, j;

	compact_text(text, sizeof(text), "");
	ck_assert_msg(topo_parse(&t, text, strlen(text), "c.json", err) == 0,
	    "%s", err);
	ck_assert_int_eq(t.nhosts, 3);
	ck_assert_str_eq(t.hosts[0].name, "a-0");
	ck_assert_str_eq(t.hosts[1].name, "a-1");
	ck_assert_str_eq(t.hosts[1].site, "a");
	ck_assert_str_eq(t.hosts[1].notes, "rack 4");
	ck_assert_str_eq(t.hosts[2].site, "b");
	ck_assert(topo_link_at(&t, 0, 1)->rtt_ms == 0.01);
	ck_assert(topo_link_at(&t, 0, 2)->rtt_ms == 80);
	ck_assert_int_eq(topo_link_at(&t, 0, 2)->streams, 8);
	ck_assert(topo_link_at(&t, 0, 2)->multi_bytes_per_s == 1e9);
	ck_assert(topo_link_at(&t, 0, 2)->stream_bytes_per_s == 1e8);
	ck_assert(topo_link_at(&t, 1, 2)->rtt_ms == 30);
	ck_assert_int_eq(topo_link_at(&t, 1, 2)->streams, 1);
	ck_assert(topo_link_at(&t, 1, 2)->multi_bytes_per_s == 2e8);
	ck_assert(topo_link_at(&t, 2, 1)->rtt_ms == 80);
	dumped = topo_dump(&t, err);
	ck_assert_msg(dumped != NULL, "%s", err);
	ck_assert_ptr_null(strstr(dumped, "count"));
	ck_assert_ptr_null(strstr(dumped, "site:"));
	ck_assert_msg(topo_parse(&back, dumped, strlen(dumped), "dumped",
	    err) == 0, "%s", err);
	for (i = 0; i < 3; i++) {
		ck_assert_str_eq(back.hosts[i].name, t.hosts[i].name);
		for (j = 0; j < 3; j++)
			if (i != j)
				ck_assert(topo_link_at(&back, i, j)->rtt_ms ==
				    topo_link_at(&t, i, j)->rtt_ms);
	}
	topo_free(&back);
	free(dumped);
	topo_free(&t);

	compact_text(text, sizeof(text), ", { \"from\": \"a-1\", \"to\": "
	    "\"solo\", \"rtt_ms\": 31, \"stream_bytes_per_s\": 2e8 }");
	refused_text(text, "c.json", "links[4] (a-1 -> solo): a second link "
	    "a-1 -> solo (also links[3])");
	compact_text(text, sizeof(text), ", { \"from\": \"site:a\", \"to\": "
	    "\"site:zz\", \"rtt_ms\": 31, \"stream_bytes_per_s\": 2e8 }");
	refused_text(text, "c.json", "no host is in site \"zz\"");
	compact_text(text, sizeof(text), "");
	refused_edits(text, "c.json", cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_missing_file)
{
	char err[KN_ERR_LEN] = "";
	topo_topology t;

	ck_assert_int_ne(topo_load(&t, "/nonexistent/topology.json", err), 0);
	ck_assert_msg(strstr(err, "/nonexistent/topology.json") != NULL, "%s",
	    err);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("topology");
	TCase *tc = tcase_create("topology");

	tcase_add_test(tc, test_example_reads);
	tcase_add_test(tc, test_save_load_round_trip);
	tcase_add_test(tc, test_unknown_key);
	tcase_add_test(tc, test_bad_link_ends);
	tcase_add_test(tc, test_missing_pair);
	tcase_add_test(tc, test_bad_numbers);
	tcase_add_test(tc, test_duplicate_host);
	tcase_add_test(tc, test_bad_json);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_hand_written);
	tcase_add_test(tc, test_compact_form);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
