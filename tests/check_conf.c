/* The daemon's configuration file and peer list: what they accept, and
 * the messages for what they refuse. */
#include "config.h"

#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/core/conf.h"
#include "daemon/core/peers.h"
#include "tests/testutil.h"

static char dir[64];

static const char *
write_tmp(const char *name, const char *text)
{
	return tu_write_file(dir, name, text);
}

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_conf");
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

START_TEST(test_hostport)
{
	char host[64];
	int port;

	ck_assert_int_eq(cf_parse_hostport("127.0.0.1:7300", host, sizeof(host),
	    &port), 0);
	ck_assert_str_eq(host, "127.0.0.1");
	ck_assert_int_eq(port, 7300);
	ck_assert_int_eq(cf_parse_hostport("[::1]:80", host, sizeof(host),
	    &port), 0);
	ck_assert_str_eq(host, "::1");
	ck_assert_int_eq(cf_parse_hostport("gpu-3.example.org:1", host,
	    sizeof(host), &port), 0);
	ck_assert_int_ne(cf_parse_hostport("nohost", host, sizeof(host), &port),
	    0);
	ck_assert_int_ne(cf_parse_hostport("h:99999", host, sizeof(host),
	    &port), 0);
	ck_assert_int_ne(cf_parse_hostport(":80", host, sizeof(host), &port),
	    0);
	ck_assert_int_ne(cf_parse_hostport("h:8x", host, sizeof(host), &port),
	    0);
}
END_TEST

START_TEST(test_config)
{
	cf_config c;
	char err[PR_ERR_LEN];

	cf_defaults(&c);
	ck_assert_int_eq(cf_load(&c, write_tmp("a.conf",
	    "# blocktrain.conf\nlisten = 0.0.0.0:7301\nblock = 2\n"
	    "[blocktraind]\nstate_dir = /var/tmp/bt\nupdate_encoding = bf16\n"
	    "max_body = 64M\neval_every = 50\n"), err), 0);
	ck_assert_str_eq(c.listen_host, "0.0.0.0");
	ck_assert_int_eq(c.listen_port, 7301);
	ck_assert_int_eq(c.block, 2);
	ck_assert_str_eq(c.state_dir, "/var/tmp/bt");
	ck_assert_str_eq(c.update_encoding, "bf16");
	ck_assert_uint_eq(c.max_body, (size_t)64 << 20);
	ck_assert_int_eq(c.eval_every, 50);
	ck_assert_int_eq(c.checkpoint_every, 100);     /* default */
	ck_assert_str_eq(c.update_compression, "none"); /* default */
	ck_assert_int_eq(cf_load(&c, write_tmp("a2.conf",
	    "update_encoding = int8\nupdate_compression = zstd\n"), err), 0);
	ck_assert_str_eq(c.update_encoding, "int8");
	ck_assert_str_eq(c.update_compression, "zstd");
	ck_assert_int_eq(cf_load(&c, write_tmp("a3.conf",
	    "update_compression = none\n"), err), 0);
	ck_assert_str_eq(c.update_compression, "none");
	/* parallel streams: one, whole updates, unless asked */
	ck_assert_int_eq(c.update_streams, 1);
	ck_assert_uint_eq(c.update_chunk, (size_t)1 << 20);
	ck_assert_int_eq(cf_load(&c, write_tmp("a4.conf",
	    "update_streams = 16\nupdate_chunk = 4096\n"), err), 0);
	ck_assert_int_eq(c.update_streams, 16);
	ck_assert_uint_eq(c.update_chunk, 4096);
	ck_assert_int_eq(cf_load(&c, write_tmp("a5.conf",
	    "update_chunk = 1G\nupdate_streams = 4\n"), err), 0);
	ck_assert_uint_eq(c.update_chunk, (size_t)1 << 30);
	ck_assert_int_eq(c.update_streams, 4);
	ck_assert_int_ne(cf_load(&c, write_tmp("b.conf",
	    "blok = 2\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "b.conf:1: unknown key 'blok'"));
	ck_assert_int_ne(cf_load(&c, write_tmp("c.conf",
	    "\n\nblock = 0\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "c.conf:3"));
	ck_assert_int_ne(cf_load(&c, write_tmp("d.conf",
	    "device = tpu\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "'tpu' is not auto, cpu or cuda"));
	ck_assert_int_ne(cf_load(&c, write_tmp("e.conf",
	    "[other]\nblock = 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "unknown section [other]"));
	ck_assert_int_ne(cf_load(&c, "/nonexistent.conf", err), 0);
	ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

START_TEST(test_peers)
{
	peers_list pl;
	char err[PR_ERR_LEN];
	uint8_t a[ID_BYTES], b[ID_BYTES];
	char ida[ID_LEN], idb[ID_LEN], lower[ID_LEN], text[1024];
	size_t i;

	memset(a, 0x11, sizeof(a));
	memset(b, 0x22, sizeof(b));
	id_format(a, ida);
	id_format(b, idb);
	for (i = 0; i < sizeof(lower); i++)
		lower[i] = (char)tolower((unsigned char)idb[i]);
	snprintf(text, sizeof(text), "# three blocks, block 1 twice\n"
	    "10.0.0.1:7300 1\n  10.0.0.2:7300 2   # comment\n\n"
	    "10.0.0.3:7300 1 %s\n[::1]:7301 3\nclient %s alice\n", ida,
	    lower);
	ck_assert_int_eq(peers_load(&pl, write_tmp("peers", text), err), 0);
	ck_assert_int_eq(pl.n, 4);
	ck_assert_int_eq(pl.missing_ids, 3);
	ck_assert_int_eq(peers_find(&pl, "10.0.0.2:7300"), 1);
	ck_assert_int_eq(peers_find(&pl, "10.0.0.9:7300"), -1);
	ck_assert_int_eq(peers_replicas(&pl, 1), 2);
	ck_assert_int_eq(peers_replica_index(&pl, 0), 0);
	ck_assert_int_eq(peers_replica_index(&pl, 2), 1);
	ck_assert_str_eq(pl.v[2].id_text, ida);
	ck_assert_int_eq(peers_find_id(&pl, a), 2);
	ck_assert_int_eq(peers_find_id(&pl, b), -1);
	ck_assert_int_eq(pl.nclients, 1);
	ck_assert_int_eq(peers_client_find(&pl, b), 0);
	ck_assert_int_eq(peers_client_find(&pl, a), -1);
	ck_assert_str_eq(pl.clients[0].id_text, idb);
	ck_assert_str_eq(pl.clients[0].name, "alice");
	ck_assert_str_eq(pl.v[3].host, "::1");
	peers_free(&pl);
	ck_assert_int_ne(peers_load(&pl, write_tmp("p2", "h:1 1\nh:1 2\n"),
	    err), 0);
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	ck_assert_int_ne(peers_load(&pl, write_tmp("p3", "h 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "p3:1: 'h' is not host:port"));
	ck_assert_int_ne(peers_load(&pl, write_tmp("p4", "h:1 0\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "block '0'"));
	ck_assert_int_ne(peers_load(&pl, write_tmp("p4b", "h:1 +1\n"), err),
	    0);
	ck_assert_int_ne(peers_load(&pl, write_tmp("p5", "h:1 1 xyz\n"), err),
	    0);
	ck_assert_ptr_nonnull(strstr(err, "p5:1:"));
	snprintf(text, sizeof(text), "h:1 1 %s\nclient %s\n", ida, ida);
	ck_assert_int_ne(peers_load(&pl, write_tmp("p7", text), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "p7:2: peer id"));
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	ck_assert_int_ne(peers_load(&pl, write_tmp("p8", "h:1 1\nclient\n"),
	    err), 0);
	ck_assert_ptr_nonnull(strstr(err, "p8:2: expected 'client"));
	ck_assert_int_ne(peers_load(&pl, write_tmp("p6", "# none\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "no peers"));
}
END_TEST

/* Loading name, holding text, fails with a message that holds want. */
static void
refused(const char *name, const char *text, const char *want)
{
	cf_config c;
	char err[PR_ERR_LEN];

	cf_defaults(&c);
	ck_assert_int_ne(cf_load(&c, write_tmp(name, text), err), 0);
	ck_assert_msg(strstr(err, want) != NULL, "'%s' lacks '%s'", err, want);
}

START_TEST(test_range_errors)
{
	cf_config c;
	char err[PR_ERR_LEN];

	refused("r1.conf", "# x\nblock = 65\n",
	    "r1.conf:2: block: 65 is out of range (need 1 <= block <= 64)");
	refused("r2.conf", "[blocktraind]\nthreads = many\n",
	    "r2.conf:2: threads: 'many' is not an integer (need 0 <= threads "
	    "<= 256)");
	refused("r3.conf", "update_encoding = f64\n",
	    "r3.conf:1: update_encoding: 'f64' is not f32, f16, bf16 or int8");
	refused("r5.conf", "\nupdate_compression = lz4\n",
	    "r5.conf:2: update_compression: 'lz4' is not none or zstd");
	refused("r6.conf", "update_compression = ZSTD\n",
	    "r6.conf:1: update_compression: 'ZSTD' is not none or zstd");
	refused("r7.conf", "update_streams = 17\n",
	    "r7.conf:1: update_streams: 17 is out of range (need 1 <= "
	    "update_streams <= 16)");
	refused("r8.conf", "update_streams = 0\n", "r8.conf:1: update_streams");
	refused("r9.conf", "\nupdate_chunk = 4095\n",
	    "r9.conf:2: update_chunk: 4095 bytes is not from 4096 (4 KiB) to "
	    "1073741824 (1G)");
	refused("r10.conf", "update_chunk = 2G\n",
	    "r10.conf:1: update_chunk: 2147483648 bytes is not from 4096");
	refused("r11.conf", "update_chunk = 1K\n",
	    "r11.conf:1: update_chunk: '1K' is not a size");
	refused("r4.conf", "pipeline_max_frame = 0\n",
	    "need 1 <= pipeline_max_frame <= 1024");
	/* a struct filled in by flags is checked by the same rows */
	cf_defaults(&c);
	ck_assert_int_eq(cf_validate(&c, err), 0);
	c.block = 65;
	ck_assert_int_ne(cf_validate(&c, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "block: 65 is out of range"));
	cf_defaults(&c);
	c.update_chunk = 0;
	ck_assert_int_ne(cf_validate(&c, err), 0);
	ck_assert_ptr_nonnull(strstr(err, "update_chunk: 0 bytes is not"));
}
END_TEST

/* Prints c, and loads what was printed over the defaults into out. */
static void
reload_printed(const cf_config *c, cf_config *out, char *printed,
    size_t size)
{
	char err[PR_ERR_LEN];
	FILE *f;

	ck_assert_ptr_nonnull(f = tmpfile());
	ck_assert_int_eq(cf_print(f, c), 0);
	tu_read_back(f, printed, size);
	cf_defaults(out);
	ck_assert_msg(cf_load(out, write_tmp("printed.conf", printed),
	    err) == 0, "%s in\n%s", err, printed);
}

START_TEST(test_print_round_trip)
{
	cf_config c, d;
	char err[PR_ERR_LEN], printed[8192];

	cf_defaults(&c);
	reload_printed(&c, &d, printed, sizeof(printed));
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	ck_assert_ptr_nonnull(strstr(printed, "[blocktraind]\n"
	    "listen = 127.0.0.1:7300\nadvertise =\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\nmax_body = 0\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\npipeline_max_frame = 16\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\nupdate_streams = 1\n"
	    "update_chunk = 1M\n"));
	cf_defaults(&c);
	ck_assert_int_eq(cf_load(&c, write_tmp("all.conf",
	    "listen = [::1]:7301\nadvertise = gpu2.example.net:7301\n"
	    "spec = /s/run.conf\npeers = /s/peers\nstate_dir = /s/state\n"
	    "block = 7\ndevice = cuda\nthreads = 12\neval_every = 0\n"
	    "eval_windows = 9\ncheckpoint_every = 3\nupdate_encoding = bf16\n"
	    "update_compression = zstd\nmax_body = 3G\npeer_timeout_ms = 100\n"
	    "pipeline_listen = h:1\npipeline_hosts = /s/pipeline\n"
	    "pipeline_next = relay:9\npipeline_timeout_ms = 3600000\n"
	    "pipeline_max_frame = 1024\npipeline_batch = 1\n"
	    "pipeline_cache_mb = 1\npipeline_idle_s = 86400\n"), err), 0);
	reload_printed(&c, &d, printed, sizeof(printed));
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	ck_assert_ptr_nonnull(strstr(printed, "\nlisten = [::1]:7301\n"));
	ck_assert_ptr_nonnull(strstr(printed, "\nmax_body = 3G\n"));
	c.max_body = 12345;
	reload_printed(&c, &d, printed, sizeof(printed));
	ck_assert_uint_eq(d.max_body, 12345);
	c.update_streams = 7;
	c.update_chunk = 12345;
	reload_printed(&c, &d, printed, sizeof(printed));
	ck_assert_int_eq(d.update_streams, 7);
	ck_assert_uint_eq(d.update_chunk, 12345);
}
END_TEST

/* Whether needle occurs within [lo, hi). */
static int
occurs(const char *lo, const char *hi, const char *needle)
{
	size_t n = strlen(needle);

	for (; lo + n <= hi; lo++)
		if (memcmp(lo, needle, n) == 0)
			return 1;
	return 0;
}

/* blocktrain.conf(5) has an entry for every row, which gives its default
 * within a few words of "default". */
START_TEST(test_man_page)
{
	static char man[65536];
	char value[256], item[128];
	cf_config c;
	size_t len, i;
	FILE *f;

	ck_assert_ptr_nonnull(f = fopen(TOP_SRCDIR "/man/blocktrain.conf.5",
	    "r"));
	len = fread(man, 1, sizeof(man) - 1, f);
	fclose(f);
	man[len] = '\0';
	cf_defaults(&c);
	for (i = 0; i < cf_nkeys; i++) {
		const pr_key *k = &cf_keys[i];
		const char *start, *end, *at;
		int found = 0;

		snprintf(item, sizeof(item), "\n.It Ic %s ", k->name);
		start = strstr(man, item);
		ck_assert_msg(start != NULL, "no entry for %s", k->name);
		if ((end = strstr(start + 1, "\n.It ")) == NULL)
			end = man + len;
		pr_key_format(k, &c, value, sizeof(value));
		for (at = start; !found && (at = strstr(at + 1, "default")) !=
		    NULL && at < end;)
			found = occurs(at - start > 40 ? at - 40 : start,
			    at + 60 < end ? at + 60 : end, value);
		ck_assert_msg(found, "the entry of %s does not give its "
		    "default '%s'", k->name, value);
	}
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("conf");
	TCase *tc = tcase_create("conf");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_hostport);
	tcase_add_test(tc, test_config);
	tcase_add_test(tc, test_peers);
	tcase_add_test(tc, test_range_errors);
	tcase_add_test(tc, test_print_round_trip);
	tcase_add_test(tc, test_man_page);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
