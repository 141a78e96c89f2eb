/* The TLS engine (daemon/net/tls.c) on its own: two connections in one
 * process, their ciphertext carried between them by the test, so each
 * refusal is seen from both sides with its reason.  The same refusals
 * over real sockets against a daemon are in check_trust.c. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/identity.h"
#include "daemon/net/tls.h"
#include "tests/testutil.h"

static char dir[64];
static char server_dir[128], client_dir[128];
static uint8_t server_id[ID_BYTES], client_id[ID_BYTES];
static tls_ctx *sctx, *cctx;
static const uint8_t *allowed;  /* the one id the server lets in */

static int
allow_one(void *arg, const uint8_t id[ID_BYTES])
{
	(void)arg;
	return allowed != NULL && id_equal(id, allowed);
}

static void
make_identity(char *path, size_t size, const char *name, uint8_t id[ID_BYTES])
{
	char err[KN_ERR_LEN], text[ID_LEN];

	snprintf(path, size, "%s/%s", dir, name);
	ck_assert_msg(id_create(path, 0, err) == 0, "%s", err);
	ck_assert_int_eq(id_of_dir(path, text, err), 0);
	ck_assert_int_eq(id_parse(text, id, err), 0);
}

static tls_ctx *
ctx_of(const char *path)
{
	char err[KN_ERR_LEN];
	tls_ctx *ctx;

	ck_assert_msg(tls_ctx_new(&ctx, path, err) == 0, "%s", err);
	tls_ctx_set_allow(ctx, allow_one, NULL);
	return ctx;
}

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_tls");
	make_identity(server_dir, sizeof(server_dir), "server", server_id);
	make_identity(client_dir, sizeof(client_dir), "client", client_id);
	sctx = ctx_of(server_dir);
	cctx = ctx_of(client_dir);
	allowed = client_id;
}

static void
teardown(void)
{
	tls_ctx_free(sctx);
	tls_ctx_free(cctx);
	tu_remove_dir(dir);
}

/* Carries ciphertext from a to b; returns the bytes carried. */
static size_t
carry(tls_conn *a, tls_conn *b)
{
	size_t len;
	char *buf = tls_conn_take(a, &len);

	if (buf == NULL)
		return 0;
	ck_assert_int_eq(tls_conn_feed(b, buf, len), 0);
	tls_buf_free(buf);
	return len;
}

/* Runs both sides until nothing moves; each side's last read result in
 * rc[0] (client) and rc[1] (server), plaintext in got[] (NUL-ended). */
static void
converse(tls_conn *cl, tls_conn *sv, int rc[2], char got[2][256])
{
	size_t len[2] = { 0, 0 };
	int moved = 1, i;
	tls_conn *side[2] = { cl, sv };

	rc[0] = rc[1] = 0;
	ck_assert_int_eq(tls_conn_start(cl), 0);
	while (moved) {
		moved = carry(cl, sv) > 0;
		moved |= carry(sv, cl) > 0;
		for (i = 0; i < 2; i++) {
			ssize_t n;

			if (rc[i] < 0)
				continue;
			n = tls_conn_read(side[i], got[i] + len[i],
			    255 - len[i]);
			if (n > 0) {
				len[i] += (size_t)n;
				moved = 1;
			} else
				rc[i] = (int)n;
		}
	}
	got[0][len[0]] = got[1][len[1]] = '\0';
}

static void
pair(tls_conn **cl, tls_conn **sv, tls_ctx *client, const uint8_t *pin)
{
	char err[KN_ERR_LEN];

	ck_assert_int_eq(tls_conn_new(cl, client, 0, pin, err), 0);
	ck_assert_int_eq(tls_conn_new(sv, sctx, 1, NULL, err), 0);
}

START_TEST(test_mutual)
{
	tls_conn *cl, *sv;
	int rc[2];
	char got[2][256];

	pair(&cl, &sv, cctx, server_id);
	/* written before the handshake: held, then sent */
	ck_assert_int_eq(tls_conn_write(cl, "hello", 5), 0);
	converse(cl, sv, rc, got);
	ck_assert_int_eq(rc[0], 0);
	ck_assert_int_eq(rc[1], 0);
	ck_assert(tls_conn_established(cl) && tls_conn_established(sv));
	ck_assert_str_eq(got[1], "hello");
	ck_assert(id_equal(tls_conn_peer_id(sv), client_id));
	ck_assert(id_equal(tls_conn_peer_id(cl), server_id));
	ck_assert_int_eq(tls_conn_write(sv, "world", 5), 0);
	converse(cl, sv, rc, got);
	ck_assert_str_eq(got[0], "world");
	/* a close_notify ends the other side's reading */
	tls_conn_shutdown(sv);
	converse(cl, sv, rc, got);
	ck_assert_int_eq(rc[0], TLS_ECLOSED);
	tls_conn_free(cl);
	tls_conn_free(sv);
}
END_TEST

/* The server refuses and says whom; the client learns of it too. */
static void
refused(tls_ctx *client, const uint8_t *pin, int by_server,
    const char *why)
{
	tls_conn *cl, *sv;
	int rc[2];
	char got[2][256];

	pair(&cl, &sv, client, pin);
	ck_assert_int_eq(tls_conn_write(cl, "secret", 6), 0);
	converse(cl, sv, rc, got);
	ck_assert_str_eq(got[1], "");
	ck_assert_int_lt(rc[0], 0);
	if (by_server) {
		ck_assert_int_eq(rc[1], TLS_EHANDSHAKE);
		ck_assert_ptr_null(tls_conn_peer_id(sv));
		ck_assert_msg(strstr(tls_conn_error(sv), why) != NULL,
		    "server says '%s'", tls_conn_error(sv));
	} else
		ck_assert_msg(strstr(tls_conn_error(cl), why) != NULL,
		    "client says '%s'", tls_conn_error(cl));
	tls_conn_free(cl);
	tls_conn_free(sv);
}

START_TEST(test_unlisted)
{
	char text[ID_LEN];

	allowed = NULL;
	id_format(client_id, text);
	refused(cctx, server_id, 1, text);
	refused(cctx, server_id, 1, "is not in the peer list");
}
END_TEST

START_TEST(test_wrong_pin)
{
	refused(cctx, client_id, 0, "expected");
}
END_TEST

/* A client identity of a kind (testutil.h) the server must refuse. */
static void
bad_client(int kind, const char *why)
{
	char path[160], err[KN_ERR_LEN];
	tls_ctx *bad;

	snprintf(path, sizeof(path), "%s/bad%d", dir, kind);
	tu_bad_identity(path, kind);
	ck_assert_int_eq(tls_ctx_new(&bad, path, err), 0);
	refused(bad, server_id, 1, why);
	tls_ctx_free(bad);
}

START_TEST(test_expired)
{
	allowed = NULL;         /* not even asked: the dates come first */
	bad_client(TU_ID_EXPIRED, "out of its dates");
}
END_TEST

START_TEST(test_not_self_signed)
{
	bad_client(TU_ID_NOT_SELF_SIGNED, "not signed by its own key");
}
END_TEST

/* Plain HTTP sent to a TLS server ends the connection with a reason. */
START_TEST(test_plain_bytes)
{
	static const char req[] = "GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n";
	char err[KN_ERR_LEN], buf[64];
	tls_conn *sv;

	ck_assert_int_eq(tls_conn_new(&sv, sctx, 1, NULL, err), 0);
	ck_assert_int_eq(tls_conn_feed(sv, req, sizeof(req) - 1), 0);
	ck_assert_int_eq(tls_conn_read(sv, buf, sizeof(buf)), TLS_EHANDSHAKE);
	ck_assert_ptr_nonnull(strstr(tls_conn_error(sv), "handshake failed"));
	tls_conn_free(sv);
}
END_TEST

START_TEST(test_no_identity)
{
	char err[KN_ERR_LEN], path[160];
	tls_ctx *ctx;

	snprintf(path, sizeof(path), "%s/none", dir);
	ck_assert_int_eq(tls_ctx_new(&ctx, path, err), ID_ENONE);
	ck_assert_ptr_nonnull(strstr(err, "no identity"));
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("tls");
	TCase *tc = tcase_create("engine");

	tcase_set_timeout(tc, 30);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_mutual);
	tcase_add_test(tc, test_unlisted);
	tcase_add_test(tc, test_wrong_pin);
	tcase_add_test(tc, test_expired);
	tcase_add_test(tc, test_not_self_signed);
	tcase_add_test(tc, test_plain_bytes);
	tcase_add_test(tc, test_no_identity);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
