/* Node identities: base32 against RFC 4648's vectors, the printed peer id
 * and what its parser refuses, the key and certificate files (made,
 * loaded, kept, replaced, refused when they do not match), the id against
 * one computed by the openssl tool, and `shardmeter init` and `id`. */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include "daemon/core/identity.h"
#include "kernels/error.h"
#include "tests/testutil.h"

static char dir[64];

static void
setup(void)
{
	tu_temp_dir(dir, sizeof(dir), "check_identity");
}

static void
teardown(void)
{
	tu_remove_dir(dir);
}

/* dir/name; four at a time stay valid. */
static const char *
sub(const char *name)
{
	static char paths[4][256];
	static int next;
	char *p = paths[next++ % 4];

	snprintf(p, sizeof(paths[0]), "%s/%s", dir, name);
	return p;
}

/* The peer id of the identity in d, as bytes. */
static void
id_bytes_of_dir(const char *d, uint8_t id[ID_BYTES])
{
	char text[ID_LEN], err[KN_ERR_LEN];

	ck_assert_msg(id_of_dir(d, text, err) == 0, "%s", err);
	ck_assert_msg(id_parse(text, id, err) == 0, "%s", err);
}

static const struct {
	const char *plain, *coded;
} rfc4648[] = {
	{ "", "" },
	{ "f", "MY" },
	{ "fo", "MZXQ" },
	{ "foo", "MZXW6" },
	{ "foob", "MZXW6YQ" },
	{ "fooba", "MZXW6YTB" },
	{ "foobar", "MZXW6YTBOI" },
};

START_TEST(test_base32_vectors)
{
	size_t i, j, n, len;
	char text[32], lower[32], err[KN_ERR_LEN];
	uint8_t bytes[16];

	for (i = 0; i < sizeof(rfc4648) / sizeof(rfc4648[0]); i++) {
		len = strlen(rfc4648[i].plain);
		ck_assert_int_eq(id_base32_encode((const uint8_t *)
		    rfc4648[i].plain, len, text, sizeof(text)),
		    (int)strlen(rfc4648[i].coded));
		ck_assert_str_eq(text, rfc4648[i].coded);
		for (j = 0; j <= strlen(text); j++)
			lower[j] = (char)(text[j] >= 'A' && text[j] <= 'Z' ?
			    text[j] - 'A' + 'a' : text[j]);
		ck_assert_int_eq(id_base32_decode(lower, strlen(lower), bytes,
		    sizeof(bytes), &n, err), 0);
		ck_assert_uint_eq(n, len);
		ck_assert_int_eq(memcmp(bytes, rfc4648[i].plain, len), 0);
	}
	/* "foobar" needs 10 characters and a NUL */
	ck_assert_int_eq(id_base32_encode((const uint8_t *)"foobar", 6, text,
	    10), KN_EINVAL);
}
END_TEST

START_TEST(test_base32_refused)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "M", "no whole number of bytes" },
		{ "MZX", "no whole number of bytes" },
		{ "MZXW6Y", "no whole number of bytes" },
		{ "MZ", "unused bits" },        /* Z leaves 01 over */
		{ "M1", "'1' (character 2) is not base32" },
		{ "MZXW=", "'=' (character 5)" },
	};
	uint8_t bytes[16];
	char err[KN_ERR_LEN];
	size_t i, n;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(id_base32_decode(bad[i].text,
		    strlen(bad[i].text), bytes, sizeof(bytes), &n, err),
		    KN_EINVAL);
		tu_assert_refused(err, bad[i].why);
	}
	ck_assert_int_eq(id_base32_decode("MZXW6YTBOI", 10, bytes, 5, &n,
	    err), KN_EINVAL);
	tu_assert_refused(err, "more than 5 bytes");
}
END_TEST

START_TEST(test_id_round_trip)
{
	uint8_t ids[3][ID_BYTES], back[ID_BYTES];
	char text[ID_LEN], other[ID_LEN + 8], err[KN_ERR_LEN];
	size_t i, j, o;
	int k;

	memset(ids[0], 0, ID_BYTES);
	memset(ids[1], 0xff, ID_BYTES);
	for (i = 0; i < ID_BYTES; i++)
		ids[2][i] = (uint8_t)(i * 37 + 11);
	for (k = 0; k < 3; k++) {
		id_format(ids[k], text);
		ck_assert_uint_eq(strlen(text), ID_LEN - 1);
		for (i = 0; i < ID_LEN - 1; i++)
			ck_assert_int_eq(text[i] == '-', i % 5 == 4);
		ck_assert_msg(id_parse(text, back, err) == 0, "%s", err);
		ck_assert(id_equal(ids[k], back));
		/* lower case, without dashes, with some of them */
		for (i = 0, o = 0; text[i] != '\0'; i++)
			if (text[i] != '-')
				other[o++] = (char)(text[i] >= 'A' &&
				    text[i] <= 'Z' ? text[i] - 'A' + 'a' :
				    text[i]);
		other[o] = '\0';
		memset(back, 0, sizeof(back));
		ck_assert_msg(id_parse(other, back, err) == 0, "%s", err);
		ck_assert(id_equal(ids[k], back));
		for (i = 0, o = 0; text[i] != '\0'; i++)
			if (text[i] != '-' || i < 20)
				other[o++] = text[i];
		other[o] = '\0';
		memset(back, 0, sizeof(back));
		ck_assert_msg(id_parse(other, back, err) == 0, "%s", err);
		ck_assert(id_equal(ids[k], back));
	}
	/* as Python's base64.b32encode gives it */
	ck_assert_str_eq(text, "BMYF-K6U7-YTUQ-4M2Y-PWRM-P3AR-GZNY-BJOK-54KD-"
	    "SXUD-VDG7-EFZ4-MGDA");
	id_format(ids[0], text);
	ck_assert_str_eq(text, "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
	    "AAAA-AAAA-AAAA-AAAA");
	back[0] ^= 1;
	ck_assert(!id_equal(ids[2], back));
	for (j = 0; j < ID_BYTES; j++)
		back[j] = ids[2][j];
	back[ID_BYTES - 1] ^= 0x80;
	ck_assert(!id_equal(ids[2], back));
}
END_TEST

START_TEST(test_id_refused)
{
	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "", "0 characters besides dashes, not 52" },
		/* 51 and 53 characters */
		{ "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAA", "51 characters besides dashes" },
		{ "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAAA", "53 characters besides dashes" },
		{ "AAAA-AAAA-AAAA-AAA0-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAA", "'0' (character 19) is not in A-Z, 2-7" },
		{ "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAA!", "'!' (character 64)" },
		{ " AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAA", "' ' (character 1)" },
		{ "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAA\n", "\\x0a (character 64)" },
		{ "-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAA", "dash at character 1" },
		{ "AAAA--AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAA", "dash at character 6" },
		{ "AAA-AAAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAA", "dash at character 4" },
		{ "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAA-", "dash at character 65" },
		/* the last character holds one bit: only A or Q */
		{ "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
		  "AAAA-AAAB", "last character must be A or Q" },
	};
	uint8_t id[ID_BYTES];
	char err[KN_ERR_LEN];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		ck_assert_int_eq(id_parse(bad[i].text, id, err), KN_EINVAL);
		tu_assert_refused(err, bad[i].why);
	}
	ck_assert_int_eq(id_parse("AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-AAAA-"
	    "AAAA-AAAA-AAAA-AAAA-AAAQ", id, err), 0);
	ck_assert_int_eq(id[ID_BYTES - 1], 1);
}
END_TEST

START_TEST(test_create_load)
{
	char err[KN_ERR_LEN], a[ID_LEN], b[ID_LEN], c[ID_LEN], cn[64];
	EVP_PKEY *key, *key2;
	X509 *cert, *cert2;
	BIGNUM *serial;
	int days, secs;

	ck_assert_msg(id_create(sub("one"), 0, err) == 0, "%s", err);
	ck_assert_msg(id_load(sub("one"), &key, &cert, err) == 0, "%s", err);
	ck_assert_int_eq(EVP_PKEY_get_id(key), EVP_PKEY_ED25519);
	ck_assert_int_eq(X509_get_version(cert), X509_VERSION_3);
	ck_assert_int_eq(X509_verify(cert, key), 1);
	ck_assert_int_gt(X509_NAME_get_text_by_NID(X509_get_subject_name(cert),
	    NID_commonName, cn, sizeof(cn)), 0);
	ck_assert_str_eq(cn, "shardmeter");
	ck_assert_int_eq(X509_NAME_cmp(X509_get_subject_name(cert),
	    X509_get_issuer_name(cert)), 0);
	ck_assert_int_eq(ASN1_TIME_diff(&days, &secs,
	    X509_get0_notBefore(cert), X509_get0_notAfter(cert)), 1);
	ck_assert_int_ge(days, 100 * 365);
	ck_assert_int_lt(X509_cmp_current_time(X509_get0_notBefore(cert)), 0);
	ck_assert_ptr_nonnull(serial = ASN1_INTEGER_to_BN(
	    X509_get0_serialNumber(cert), NULL));
	ck_assert(!BN_is_negative(serial));
	ck_assert_int_eq(BN_num_bytes(serial), 20);
	BN_free(serial);
	/* the three ways to an id agree */
	ck_assert_msg(id_of_cert(cert, a, err) == 0, "%s", err);
	ck_assert_msg(id_of_dir(sub("one"), b, err) == 0, "%s", err);
	ck_assert_msg(id_of_pem(sub("one/cert.pem"), c, err) == 0, "%s", err);
	ck_assert_str_eq(a, b);
	ck_assert_str_eq(a, c);
	/* another identity: another key, another serial */
	ck_assert_msg(id_create(sub("two"), 0, err) == 0, "%s", err);
	ck_assert_msg(id_load(sub("two"), &key2, &cert2, err) == 0, "%s", err);
	ck_assert_int_ne(EVP_PKEY_eq(key, key2), 1);
	ck_assert_int_ne(ASN1_INTEGER_cmp(X509_get0_serialNumber(cert),
	    X509_get0_serialNumber(cert2)), 0);
	ck_assert_msg(id_of_dir(sub("two"), b, err) == 0, "%s", err);
	ck_assert_str_ne(a, b);
	EVP_PKEY_free(key);
	EVP_PKEY_free(key2);
	X509_free(cert);
	X509_free(cert2);
}
END_TEST

/* The id against SHA-256 of the public key as the openssl tool sees it. */
START_TEST(test_id_independent)
{
	char out[256], err[KN_ERR_LEN];
	uint8_t id[ID_BYTES];
	unsigned byte;
	int i;

	ck_assert_msg(id_create(dir, 0, err) == 0, "%s", err);
	id_bytes_of_dir(dir, id);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "openssl x509 -in "
	    "%s/cert.pem -pubkey -noout | openssl pkey -pubin -outform DER | "
	    "sha256sum", dir), 0);
	ck_assert_msg(strlen(out) >= 2 * ID_BYTES, "openssl: %s", out);
	for (i = 0; i < ID_BYTES; i++) {
		ck_assert_int_eq(sscanf(out + 2 * i, "%2x", &byte), 1);
		ck_assert_int_eq(id[i], byte);
	}
	/* shardmeter id --pin, of the identity and of its id, is what
	 * curl's --pinnedpubkey takes: the digest's base64 by openssl */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "printf 'sha256//'; "
	    "openssl x509 -in %s/cert.pem -pubkey -noout | openssl pkey "
	    "-pubin -outform DER | openssl dgst -sha256 -binary | base64; "
	    "%s id --pin --dir %s; %s id --pin $(%s id --dir %s)", dir,
	    tu_shardmeter(), dir, tu_shardmeter(), tu_shardmeter(), dir), 0);
	{
		char a[64], b[64], c[64];

		ck_assert_int_eq(sscanf(out, "%63s %63s %63s", a, b, c), 3);
		ck_assert_uint_eq(strlen(a), 8 + 44);
		ck_assert_str_eq(a, b);
		ck_assert_str_eq(a, c);
	}
}
END_TEST

START_TEST(test_file_modes)
{
	char err[KN_ERR_LEN];
	struct stat st;
	struct dirent *e;
	DIR *d;
	int n = 0;

	ck_assert_msg(id_create(sub("made/on/demand"), 0, err) == 0, "%s",
	    err);
	ck_assert_int_eq(stat(sub("made/on/demand/key.pem"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(stat(sub("made/on/demand/cert.pem"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(stat(sub("made/on/demand"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(stat(sub("made"), &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	/* no temporary file is left behind */
	ck_assert_ptr_nonnull(d = opendir(sub("made/on/demand")));
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	ck_assert_int_eq(n, 2);
	/* a file where the directory should be */
	tu_write_file(dir, "plain", "x\n");
	err[0] = '\0';
	ck_assert_int_eq(id_create(sub("plain"), 0, err), KN_EIO);
	tu_assert_refused(err, "plain is not a directory");
}
END_TEST

START_TEST(test_kept_without_force)
{
	uint8_t first[ID_BYTES], again[ID_BYTES];
	char err[KN_ERR_LEN];

	ck_assert_msg(id_create(dir, 0, err) == 0, "%s", err);
	id_bytes_of_dir(dir, first);
	err[0] = '\0';
	ck_assert_int_eq(id_create(dir, 0, err), ID_EEXIST);
	tu_assert_refused(err, "key.pem exists");
	tu_assert_refused(err, "--force");
	id_bytes_of_dir(dir, again);
	ck_assert(id_equal(first, again));
	ck_assert_msg(id_create(dir, 1, err) == 0, "%s", err);
	id_bytes_of_dir(dir, again);
	ck_assert(!id_equal(first, again));
	/* a certificate alone is kept too */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "rm %s/key.pem", dir), 0);
	ck_assert_int_eq(id_create(dir, 0, err), ID_EEXIST);
	tu_assert_refused(err, "cert.pem exists");
}
END_TEST

START_TEST(test_refused_on_load)
{
	char err[KN_ERR_LEN], id[ID_LEN];
	EVP_PKEY *key = (EVP_PKEY *)1;
	X509 *cert = (X509 *)1;

	ck_assert_int_eq(id_load(dir, &key, &cert, err), ID_ENONE);
	tu_assert_refused(err, "no identity in");
	ck_assert_ptr_null(key);
	ck_assert_ptr_null(cert);
	ck_assert_int_eq(id_of_dir(dir, id, err), ID_ENONE);
	/* one identity's key with another's certificate */
	ck_assert_msg(id_create(sub("a"), 0, err) == 0, "%s", err);
	ck_assert_msg(id_create(sub("b"), 0, err) == 0, "%s", err);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "cp %s/b/cert.pem %s/a/cert.pem",
	    dir, dir), 0);
	err[0] = '\0';
	ck_assert_int_eq(id_load(sub("a"), &key, &cert, err), KN_EINVAL);
	tu_assert_refused(err, "a/cert.pem does not match");
	ck_assert_ptr_null(key);
	ck_assert_ptr_null(cert);
	ck_assert_int_eq(id_of_dir(sub("a"), id, err), KN_EINVAL);
	/* no certificate, and no key in the key file */
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "rm %s/b/cert.pem", dir), 0);
	ck_assert_int_eq(id_load(sub("b"), &key, &cert, err), KN_EIO);
	tu_assert_refused(err, "b/cert.pem");
	tu_write_file(sub("b"), "key.pem", "not a key\n");
	ck_assert_int_eq(id_load(sub("b"), &key, &cert, err), KN_EINVAL);
	tu_assert_refused(err, "b/key.pem: no unencrypted private key");
	ck_assert_int_eq(id_of_pem(sub("b/key.pem"), id, err), KN_EINVAL);
	tu_assert_refused(err, "no certificate");
}
END_TEST

/* `shardmeter ARGS` with its standard output only in out; exit status. */
static int
shardmeter(char *out, size_t len, const char *env, const char *args)
{
	return tu_run_cmd(out, len, "%s %s %s 2>/dev/null", env,
	    tu_shardmeter(), args);
}

START_TEST(test_cli)
{
	char made[128], shown[128], again[128], args[256], out[1024];
	uint8_t id[ID_BYTES];
	char err[KN_ERR_LEN];

	snprintf(args, sizeof(args), "init --dir %s/node", dir);
	ck_assert_int_eq(shardmeter(made, sizeof(made), "", args), 0);
	ck_assert_uint_eq(strlen(made), ID_LEN);        /* and a newline */
	made[ID_LEN - 1] = '\0';
	ck_assert_msg(id_parse(made, id, err) == 0, "%s", err);
	snprintf(args, sizeof(args), "id --dir %s/node", dir);
	ck_assert_int_eq(shardmeter(shown, sizeof(shown), "", args), 0);
	shown[ID_LEN - 1] = '\0';
	ck_assert_str_eq(made, shown);
	/* kept without --force, replaced with it */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s init --dir %s/node",
	    tu_shardmeter(), dir), 1);
	ck_assert_ptr_nonnull(strstr(out, "--force"));
	snprintf(args, sizeof(args), "init --force --dir %s/node", dir);
	ck_assert_int_eq(shardmeter(again, sizeof(again), "", args), 0);
	again[ID_LEN - 1] = '\0';
	ck_assert_str_ne(made, again);
	snprintf(args, sizeof(args), "id --dir %s/node", dir);
	ck_assert_int_eq(shardmeter(shown, sizeof(shown), "", args), 0);
	shown[ID_LEN - 1] = '\0';
	ck_assert_str_eq(again, shown);
	/* none yet */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s id --dir %s/none",
	    tu_shardmeter(), dir), 1);
	ck_assert_ptr_nonnull(strstr(out, "shardmeter init --dir"));
	/* usage */
	ck_assert_int_eq(shardmeter(out, sizeof(out), "", "id --force"), 2);
	ck_assert_int_eq(shardmeter(out, sizeof(out), "", "id extra"), 2);
	ck_assert_int_eq(shardmeter(out, sizeof(out), "", "init --dir ''"), 2);
	ck_assert_int_eq(shardmeter(out, sizeof(out), "", "init --help"), 0);
	ck_assert_ptr_nonnull(strstr(out, "usage: shardmeter init"));
}
END_TEST

/* --client: under $XDG_CONFIG_HOME when it is absolute, else ~/.config. */
START_TEST(test_cli_client)
{
	char env[256], out[256], made[128];
	struct stat st;

	snprintf(env, sizeof(env), "env -u XDG_CONFIG_HOME HOME=%s/home", dir);
	ck_assert_int_eq(shardmeter(made, sizeof(made), env, "init --client"),
	    0);
	ck_assert_int_eq(stat(sub("home/.config/shardmeter/key.pem"), &st), 0);
	snprintf(env, sizeof(env), "env XDG_CONFIG_HOME=relative HOME=%s/home",
	    dir);
	ck_assert_int_eq(shardmeter(out, sizeof(out), env, "id --client"), 0);
	ck_assert_str_eq(out, made);
	snprintf(env, sizeof(env), "env XDG_CONFIG_HOME=%s/xdg HOME=%s/home",
	    dir, dir);
	ck_assert_int_eq(shardmeter(out, sizeof(out), env, "id --client"), 1);
	ck_assert_int_eq(shardmeter(out, sizeof(out), env, "init --client"), 0);
	ck_assert_int_eq(stat(sub("xdg/shardmeter/cert.pem"), &st), 0);
	ck_assert_str_ne(out, made);
	ck_assert_int_eq(shardmeter(out, sizeof(out), "env -u XDG_CONFIG_HOME "
	    "-u HOME", "id --client"), 1);
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("identity");
	TCase *tc = tcase_create("identity");
	/* key generation and the commands it runs take seconds under load */
	tcase_set_timeout(tc, 60);

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_base32_vectors);
	tcase_add_test(tc, test_base32_refused);
	tcase_add_test(tc, test_id_round_trip);
	tcase_add_test(tc, test_id_refused);
	tcase_add_test(tc, test_create_load);
	tcase_add_test(tc, test_id_independent);
	tcase_add_test(tc, test_file_modes);
	tcase_add_test(tc, test_kept_without_force);
	tcase_add_test(tc, test_refused_on_load);
	tcase_add_test(tc, test_cli);
	tcase_add_test(tc, test_cli_client);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
