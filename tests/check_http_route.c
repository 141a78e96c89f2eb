/* The route table (daemon/net/http_route.h): patterns matched segment by
 * segment with numbers of one spelling, and the dispatch's uniform
 * answers (404, 405 with Allow, 403, the owner's meter) checked through
 * a real hs_server and hc_client on one loop over 127.0.0.1. */
#include "config.h"

#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon/net/http_client.h"
#include "daemon/net/http_route.h"
#include "daemon/net/http_server.h"

/* ---- matching ---- */

START_TEST(test_match_literal)
{
	hr_match m = { .nnum = 0 };

	ck_assert(hr_match_path("/v1/status", NULL, "/v1/status", &m));
	ck_assert_str_eq(m.rest, "");
	ck_assert_int_eq(m.nnum, 0);
	ck_assert(!hr_match_path("/v1/status", NULL, "/v1/status/", &m));
	ck_assert(!hr_match_path("/v1/status", NULL, "/v1/statu", &m));
	ck_assert(!hr_match_path("/v1/status", NULL, "/v1/Status", &m));
	ck_assert(!hr_match_path("/v1/status", NULL, "", &m));
}
END_TEST

START_TEST(test_match_numbers)
{
	static const int64_t max[] = { INT_MAX, INT64_MAX, 64 };
	const char *pat = "/b/{n}/r/{n}/u/{n}";
	hr_match m = { .nnum = 0 };

	ck_assert(hr_match_path(pat, max, "/b/1/r/0/u/64", &m));
	ck_assert_int_eq(m.nnum, 3);
	ck_assert_int_eq(m.num[0], 1);
	ck_assert_int_eq(m.num[1], 0);
	ck_assert_int_eq(m.num[2], 64);
	/* a mismatch leaves m as it was */
	ck_assert(!hr_match_path(pat, max, "/b/1/r/0/u/65", &m));
	ck_assert_int_eq(m.nnum, 3);
	m.nnum = 0;
	/* one spelling: no sign, no leading zero, no wrap, each bound */
	ck_assert(!hr_match_path(pat, max, "/b/01/r/0/u/1", &m));
	ck_assert(!hr_match_path(pat, max, "/b/+1/r/0/u/1", &m));
	ck_assert(!hr_match_path(pat, max, "/b/-1/r/0/u/1", &m));
	ck_assert(!hr_match_path(pat, max, "/b/2147483648/r/0/u/1", &m));
	ck_assert(hr_match_path(pat, max, "/b/2147483647/r/0/u/1", &m));
	m.nnum = 0;
	ck_assert(!hr_match_path(pat, max,
	    "/b/1/r/9223372036854775808/u/1", &m));
	ck_assert(hr_match_path(pat, max,
	    "/b/1/r/9223372036854775807/u/1", &m));
	ck_assert_int_eq(m.num[1], INT64_MAX);
	m.nnum = 0;
	ck_assert(!hr_match_path(pat, max, "/b//r/0/u/1", &m));
	ck_assert(!hr_match_path(pat, max, "/b/1x/r/0/u/1", &m));
	ck_assert(!hr_match_path(pat, max, "/b/1/r/0/u/1/", &m));
	ck_assert_int_eq(m.nnum, 0);
	/* no bounds: INT64_MAX for each */
	ck_assert(hr_match_path("/x/{n}", NULL, "/x/9223372036854775807",
	    &m));
	ck_assert(!hr_match_path("/x/{n}", NULL, "/x/9223372036854775808",
	    &m));
}
END_TEST

START_TEST(test_match_rest)
{
	hr_match m = { .nnum = 0 }, sub;

	ck_assert(hr_match_path("/v1/blocks/{n}/{*}", NULL,
	    "/v1/blocks/3/rounds/7/updates/1", &m));
	ck_assert_int_eq(m.nnum, 1);
	ck_assert_int_eq(m.num[0], 3);
	ck_assert_str_eq(m.rest, "rounds/7/updates/1");
	/* a table below matches the rest, its numbers after those above */
	sub = m;
	ck_assert(hr_match_path("rounds/{n}/{*}", NULL, m.rest, &sub));
	ck_assert_int_eq(sub.nnum, 2);
	ck_assert_int_eq(sub.num[0], 3);
	ck_assert_int_eq(sub.num[1], 7);
	ck_assert_str_eq(sub.rest, "updates/1");
	/* the rest may be empty, the literal before it may not be */
	m.nnum = 0;
	ck_assert(hr_match_path("/v1/probe/{*}", NULL, "/v1/probe/", &m));
	ck_assert_str_eq(m.rest, "");
	ck_assert(!hr_match_path("/v1/probe/{*}", NULL, "/v1/probe", &m));
	ck_assert(!hr_match_path("/v1/probe/{*}", NULL, "/v1/prob/x", &m));
}
END_TEST

/* ---- dispatch, over a server ---- */

#define ROLE_REPLICA HR_ROLE(0)

struct owner {
	unsigned roles;                 /* what who() says of every caller */
	int meter_kind, meter_calls;
	int refusals;                   /* through the owner's refuse */
	char last[128];                 /* the last handler and its numbers */
};

static uv_loop_t loop;
static uv_timer_t tick;
static hs_server *srv;
static hc_client *cli;
static int port, srv_closed, cli_closed;
static struct owner own;

static void
note(const char *what, const hr_match *m)
{
	int i;

	snprintf(own.last, sizeof(own.last), "%s", what);
	for (i = 0; i < m->nnum; i++)
		snprintf(own.last + strlen(own.last), sizeof(own.last) -
		    strlen(own.last), " %lld", (long long)m->num[i]);
	if (m->rest[0] != '\0')
		snprintf(own.last + strlen(own.last), sizeof(own.last) -
		    strlen(own.last), " [%s]", m->rest);
}

/* Every row's handler: what it was asked and what matched, so that a
 * test sees which row answered. */
static void
handled(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	char what[64];

	(void)ctx;
	snprintf(what, sizeof(what), "%s %s", req->method, req->path);
	note(what, m);
	hs_response_text(res, 200, "%s", own.last);
}

static unsigned
who(void *ctx, const hs_request *req)
{
	(void)req;
	return ((struct owner *)ctx)->roles;
}

static void
meter(void *ctx, const hs_request *req, hs_response *res, int kind)
{
	struct owner *o = ctx;

	(void)req;
	o->meter_kind = kind;
	o->meter_calls++;
	hs_response_meter(res, kind, 0);
}

static void
not_found(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)ctx;
	note("not_found", m);
	hs_response_text(res, 404, "nothing at %s", req->path);
}

/* The sub-tree's refusals say what it is about; the rest default. */
static void
sub_refuse(void *ctx, const hs_request *req, hs_response *res, int status,
    const hr_route *row, const hr_match *m)
{
	struct owner *o = ctx;

	o->refusals++;
	if (status == 403)
		hs_response_text(res, 403, "only the replicas of %lld post "
		    "%s", (long long)m->num[0], row->pattern);
	else
		hr_refuse_text(req, res, status);
}

static const hr_route sub_rows[] = {
	{ "POST", "rounds/{n}/updates", ROLE_REPLICA, 2, handled, NULL },
	{ "GET", "rounds/{n}/commit", HR_ANYONE, HR_METER_KEEP, handled,
	    NULL },
};

static const hr_table sub_table = {
	sub_rows, sizeof(sub_rows) / sizeof(sub_rows[0]), &own, who, meter,
	sub_refuse, NULL
};

static void
sub_tree(void *ctx, const hs_request *req, hs_response *res,
    const hr_match *m)
{
	(void)ctx;
	if (!hr_dispatch(&sub_table, req, res, m))
		not_found(&own, req, res, m);
}

static const int64_t item_max[] = { 100 };

static const hr_route rows[] = {
	{ "GET", "/a", HR_ANYONE, 1, handled, NULL },
	{ "POST", "/a", HR_ANYONE, 5, handled, NULL },
	{ "POST", "/op", HR_OPERATOR, 1, handled, NULL },
	{ "GET", "/items/{n}", HR_PEER | HR_OPERATOR, 3, handled, item_max },
	{ NULL, "/blocks/{n}/{*}", HR_ANYONE, 4, sub_tree, NULL },
};

static const hr_table table = {
	rows, sizeof(rows) / sizeof(rows[0]), &own, who, meter, NULL,
	not_found
};

static void
handler(void *ctx, const hs_request *req, hs_response *res)
{
	ck_assert_int_eq(hr_dispatch(ctx, req, res, NULL), 1);
}

static void
on_tick(uv_timer_t *t)
{
	(void)t;
}

static void
set_flag(void *arg)
{
	*(int *)arg = 1;
}

static void
setup(void)
{
	char err[HS_ERR_LEN];

	memset(&own, 0, sizeof(own));
	own.roles = HR_EVERYONE;
	ck_assert_int_eq(uv_loop_init(&loop), 0);
	uv_timer_init(&loop, &tick);
	srv_closed = cli_closed = 0;
	ck_assert_msg(hc_client_new(&cli, &loop, err) == 0, "%s", err);
	ck_assert_int_eq(hs_server_new(&srv, &loop, NULL, handler,
	    (void *)&table, err), 0);
	ck_assert_msg(hs_server_listen(srv, "127.0.0.1", 0, err) == 0, "%s",
	    err);
	port = hs_server_port(srv);
	ck_assert_int_gt(port, 0);
}

static int
run_until(int *flag, int ms)
{
	uint64_t end;

	uv_update_time(&loop);
	end = uv_now(&loop) + (uint64_t)ms;
	uv_timer_start(&tick, on_tick, 5, 5);
	while (!*flag && uv_now(&loop) < end)
		uv_run(&loop, UV_RUN_ONCE);
	uv_timer_stop(&tick);
	return *flag;
}

static void
teardown(void)
{
	hc_client_close(cli, set_flag, &cli_closed);
	hs_server_close(srv, set_flag, &srv_closed);
	ck_assert(run_until(&cli_closed, 5000));
	ck_assert(run_until(&srv_closed, 5000));
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}

struct reply {
	int done;
	long status;
	char body[256];
	char allow[128];
	int has_allow;
};

static void
on_done(void *ctx, hc_result *r)
{
	struct reply *p = ctx;

	p->done = 1;
	p->status = r->status;
	snprintf(p->body, sizeof(p->body), "%s", r->body ? r->body : "");
	p->has_allow = r->header != NULL;
	snprintf(p->allow, sizeof(p->allow), "%s", r->header ? r->header :
	    "");
}

/* One exchange; the body of the answer in p. */
static long
ask(struct reply *p, const char *method, const char *path)
{
	hc_request_opts o;
	char url[256], err[HC_ERR_LEN];

	memset(&o, 0, sizeof(o));
	memset(p, 0, sizeof(*p));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	o.method = method;
	o.url = url;
	o.want_header = "Allow";
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		o.body = "x";
		o.body_len = 1;
	}
	ck_assert_msg(hc_request(cli, &o, on_done, p, err) == 0, "%s", err);
	ck_assert_msg(run_until(&p->done, 5000), "no answer to %s", path);
	return p->status;
}

START_TEST(test_dispatch_rows)
{
	struct reply r;

	ck_assert_int_eq(ask(&r, "GET", "/a"), 200);
	ck_assert_str_eq(r.body, "GET /a\n");
	ck_assert_int_eq(own.meter_kind, 1);
	/* the row of the method, with its own meter kind */
	ck_assert_int_eq(ask(&r, "POST", "/a"), 200);
	ck_assert_str_eq(r.body, "POST /a\n");
	ck_assert_int_eq(own.meter_kind, 5);
	/* HEAD goes where GET does */
	own.last[0] = '\0';
	ck_assert_int_eq(ask(&r, "HEAD", "/a"), 200);
	ck_assert_str_eq(own.last, "HEAD /a");
	ck_assert_int_eq(own.meter_kind, 1);
	ck_assert_int_eq(ask(&r, "GET", "/items/100"), 200);
	ck_assert_str_eq(r.body, "GET /items/100 100\n");
	ck_assert_int_eq(own.meter_kind, 3);
	ck_assert(!r.has_allow);
}
END_TEST

START_TEST(test_dispatch_404)
{
	struct reply r;

	ck_assert_int_eq(ask(&r, "GET", "/nothing"), 404);
	ck_assert_str_eq(r.body, "nothing at /nothing\n");
	/* beyond a number's bound, or not its one spelling */
	ck_assert_int_eq(ask(&r, "GET", "/items/101"), 404);
	ck_assert_int_eq(ask(&r, "GET", "/items/07"), 404);
	ck_assert_int_eq(ask(&r, "GET", "/a/"), 404);
	/* the owner's not_found meters what it will: nothing here */
	ck_assert_int_eq(own.meter_calls, 0);
	ck_assert(!r.has_allow);
}
END_TEST

START_TEST(test_dispatch_405)
{
	struct reply r;

	ck_assert_int_eq(ask(&r, "PUT", "/a"), 405);
	ck_assert_str_eq(r.allow, "GET, HEAD, POST");
	ck_assert_str_eq(r.body, "PUT is not allowed on /a\n");
	/* metered as the path's first row */
	ck_assert_int_eq(own.meter_kind, 1);
	ck_assert_int_eq(ask(&r, "GET", "/op"), 405);
	ck_assert_str_eq(r.allow, "POST");
	ck_assert_int_eq(ask(&r, "POST", "/items/3"), 405);
	ck_assert_str_eq(r.allow, "GET, HEAD");
	ck_assert_int_eq(own.meter_kind, 3);
}
END_TEST

START_TEST(test_dispatch_403)
{
	struct reply r;

	own.roles = HR_PEER;
	ck_assert_int_eq(ask(&r, "POST", "/op"), 403);
	ck_assert_str_eq(r.body, "POST on /op is not open to this caller\n");
	ck_assert_int_eq(own.meter_kind, 1);
	ck_assert_int_eq(ask(&r, "GET", "/items/1"), 200);
	own.roles = HR_OPERATOR;
	ck_assert_int_eq(ask(&r, "POST", "/op"), 200);
	ck_assert_int_eq(ask(&r, "GET", "/items/1"), 200);
	own.roles = 0;
	ck_assert_int_eq(ask(&r, "GET", "/items/1"), 403);
	/* a row open to anyone asks no one */
	ck_assert_int_eq(ask(&r, "GET", "/a"), 200);
	/* the method is checked before the caller */
	ck_assert_int_eq(ask(&r, "GET", "/op"), 405);
	ck_assert_int_eq(own.refusals, 0);
}
END_TEST

START_TEST(test_dispatch_sub_tree)
{
	struct reply r;

	ck_assert_int_eq(ask(&r, "POST", "/blocks/5/rounds/9/updates"), 200);
	ck_assert_str_eq(r.body, "POST /blocks/5/rounds/9/updates 5 9\n");
	ck_assert_int_eq(own.meter_kind, 2);
	ck_assert_int_eq(ask(&r, "GET", "/blocks/5/rounds/9/commit"), 200);
	ck_assert_str_eq(r.body, "GET /blocks/5/rounds/9/commit 5 9\n");
	/* kept as the row above set it */
	ck_assert_int_eq(own.meter_kind, 4);
	/* the sub-tree's own refusals, its Allow of its own paths */
	ck_assert_int_eq(ask(&r, "GET", "/blocks/5/rounds/9/updates"), 405);
	ck_assert_str_eq(r.allow, "POST");
	ck_assert_str_eq(r.body,
	    "GET is not allowed on /blocks/5/rounds/9/updates\n");
	own.roles = HR_PEER;
	ck_assert_int_eq(ask(&r, "POST", "/blocks/5/rounds/9/updates"), 403);
	ck_assert_str_eq(r.body,
	    "only the replicas of 5 post rounds/{n}/updates\n");
	ck_assert_int_eq(own.refusals, 2);
	own.roles = ROLE_REPLICA;
	ck_assert_int_eq(ask(&r, "POST", "/blocks/5/rounds/9/updates"), 200);
	/* nothing below: the handler above answers, with the numbers */
	ck_assert_int_eq(ask(&r, "GET", "/blocks/5/rounds/9/nothing"), 404);
	ck_assert_str_eq(own.last, "not_found 5 [rounds/9/nothing]");
	ck_assert_int_eq(ask(&r, "GET", "/blocks/5/"), 404);
	ck_assert_str_eq(own.last, "not_found 5");
}
END_TEST

START_TEST(test_allow_list)
{
	char buf[64];

	hr_allow(&table, "/a", NULL, buf, sizeof(buf));
	ck_assert_str_eq(buf, "GET, HEAD, POST");
	hr_allow(&table, "/op", NULL, buf, sizeof(buf));
	ck_assert_str_eq(buf, "POST");
	hr_allow(&table, "/nothing", NULL, buf, sizeof(buf));
	ck_assert_str_eq(buf, "");
	/* a sub-tree row, open to every method, lists none */
	hr_allow(&table, "/blocks/1/x", NULL, buf, sizeof(buf));
	ck_assert_str_eq(buf, "");
}
END_TEST

static Suite *
route_suite(void)
{
	Suite *s = suite_create("http_route");
	TCase *tc = tcase_create("match"), *td = tcase_create("dispatch");

	tcase_add_test(tc, test_match_literal);
	tcase_add_test(tc, test_match_numbers);
	tcase_add_test(tc, test_match_rest);
	tcase_add_test(tc, test_allow_list);
	suite_add_tcase(s, tc);
	tcase_add_checked_fixture(td, setup, teardown);
	tcase_set_timeout(td, 30);
	tcase_add_test(td, test_dispatch_rows);
	tcase_add_test(td, test_dispatch_404);
	tcase_add_test(td, test_dispatch_405);
	tcase_add_test(td, test_dispatch_403);
	tcase_add_test(td, test_dispatch_sub_tree);
	suite_add_tcase(s, td);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(route_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
