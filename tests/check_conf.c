/* The daemon's configuration file and peer list: what they accept, and
 * the messages for what they refuse. */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/conf.h"
#include "daemon/peers.h"
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

	ck_assert_int_eq(sm_parse_hostport("127.0.0.1:7300", host, sizeof(host),
	    &port), 0);
	ck_assert_str_eq(host, "127.0.0.1");
	ck_assert_int_eq(port, 7300);
	ck_assert_int_eq(sm_parse_hostport("[::1]:80", host, sizeof(host),
	    &port), 0);
	ck_assert_str_eq(host, "::1");
	ck_assert_int_eq(sm_parse_hostport("gpu-3.example.org:1", host,
	    sizeof(host), &port), 0);
	ck_assert_int_ne(sm_parse_hostport("nohost", host, sizeof(host), &port),
	    0);
	ck_assert_int_ne(sm_parse_hostport("h:99999", host, sizeof(host),
	    &port), 0);
	ck_assert_int_ne(sm_parse_hostport(":80", host, sizeof(host), &port), 0);
	ck_assert_int_ne(sm_parse_hostport("h:8x", host, sizeof(host), &port),
	    0);
}
END_TEST

START_TEST(test_config)
{
	sm_config c;
	char err[PR_ERR_LEN];

	sm_config_defaults(&c);
	ck_assert_int_eq(sm_config_load(&c, write_tmp("a.conf",
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
	ck_assert_int_ne(sm_config_load(&c, write_tmp("b.conf",
	    "blok = 2\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "b.conf:1: unknown key 'blok'"));
	ck_assert_int_ne(sm_config_load(&c, write_tmp("c.conf",
	    "\n\nblock = 0\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "c.conf:3"));
	ck_assert_int_ne(sm_config_load(&c, write_tmp("d.conf",
	    "device = tpu\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "'tpu' is not auto, cpu or cuda"));
	ck_assert_int_ne(sm_config_load(&c, write_tmp("e.conf",
	    "[other]\nblock = 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "unknown section [other]"));
	ck_assert_int_ne(sm_config_load(&c, "/nonexistent.conf", err), 0);
	ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

START_TEST(test_peers)
{
	sm_peer_list pl;
	char err[PR_ERR_LEN];
	const char *id = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	    "ab12ab12ab12";
	char text[512];

	snprintf(text, sizeof(text), "# three blocks, block 1 twice\n"
	    "10.0.0.1:7300 1\n  10.0.0.2:7300 2   # comment\n\n"
	    "10.0.0.3:7300 1 %s\n[::1]:7301 3\n", id);
	ck_assert_int_eq(sm_peers_load(&pl, write_tmp("peers", text), err), 0);
	ck_assert_int_eq(pl.n, 4);
	ck_assert_int_eq(sm_peers_find(&pl, "10.0.0.2:7300"), 1);
	ck_assert_int_eq(sm_peers_find(&pl, "10.0.0.9:7300"), -1);
	ck_assert_int_eq(sm_peers_replicas(&pl, 1), 2);
	ck_assert_int_eq(sm_peers_replica_index(&pl, 0), 0);
	ck_assert_int_eq(sm_peers_replica_index(&pl, 2), 1);
	ck_assert_str_eq(pl.v[2].id, id);
	ck_assert_str_eq(pl.v[3].host, "::1");
	sm_peers_free(&pl);
	ck_assert_int_ne(sm_peers_load(&pl, write_tmp("p2", "h:1 1\nh:1 2\n"),
	    err), 0);
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	ck_assert_int_ne(sm_peers_load(&pl, write_tmp("p3", "h 1\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "p3:1: 'h' is not host:port"));
	ck_assert_int_ne(sm_peers_load(&pl, write_tmp("p4", "h:1 0\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "block '0'"));
	ck_assert_int_ne(sm_peers_load(&pl, write_tmp("p5", "h:1 1 xyz\n"), err),
	    0);
	ck_assert_ptr_nonnull(strstr(err, "peer id"));
	ck_assert_int_ne(sm_peers_load(&pl, write_tmp("p6", "# none\n"), err), 0);
	ck_assert_ptr_nonnull(strstr(err, "no peers"));
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
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
