/* Node identities (identity.h): the key pair and certificate files that
 * `shardmeter init` writes and `shardmeter id` reads, the peer id of a
 * certificate, and its printed base32 form. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "daemon/core/identity.h"
#include "kernels/error.h"

#define ID_CHARS 52             /* base32 characters of 32 bytes */
#define ID_GROUP 4              /* characters between dashes */
#define ID_PATH_LEN 1024
#define ID_CN "shardmeter"
/* A certificate nobody has to renew: the pin is the key, not a date. */
#define ID_VALID_DAYS (100 * 365 + 25)
/* notBefore is set back a day, so that a peer whose clock is behind ours
 * does not see a certificate from the future. */
#define ID_BACKDATE_S (24 * 60 * 60)

static const char b32_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/* Base32 */

static int
b32_value(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a';
	if (c >= '2' && c <= '7')
		return 26 + c - '2';
	return -1;
}

/* c as a message shows it: 'c', or \xNN when it does not print. */
static const char *
show_char(int c, char buf[8])
{
	unsigned char u = (unsigned char)c;

	if (u >= 0x20 && u < 0x7f)
		snprintf(buf, 8, "'%c'", u);
	else
		snprintf(buf, 8, "\\x%02x", u);
	return buf;
}

int
id_base32_encode(const uint8_t *in, size_t n, char *out, size_t size)
{
	size_t i, o = 0;
	uint32_t acc = 0;       /* only its low `bits` bits are pending */
	int bits = 0;

	if (size < (8 * n + 4) / 5 + 1)
		return KN_EINVAL;
	for (i = 0; i < n; i++) {
		acc = (acc << 8) | in[i];
		bits += 8;
		while (bits >= 5) {
			out[o++] = b32_alphabet[(acc >> (bits - 5)) & 31];
			bits -= 5;
		}
	}
	if (bits > 0)
		out[o++] = b32_alphabet[(acc << (5 - bits)) & 31];
	out[o] = '\0';
	return (int)o;
}

int
id_base32_decode(const char *in, size_t len, uint8_t *out, size_t size,
    size_t *n, char *err)
{
	size_t i, o = 0;
	uint32_t acc = 0;
	int bits = 0, v;
	char shown[8];

	/* 1, 3 or 6 characters past a multiple of 8 hold no whole byte */
	if (len % 8 == 1 || len % 8 == 3 || len % 8 == 6)
		return kn_error(err, KN_EINVAL, "%zu base32 characters are no "
		    "whole number of bytes", len);
	if (len * 5 / 8 > size)
		return kn_error(err, KN_EINVAL, "%zu base32 characters are "
		    "more than %zu bytes", len, size);
	for (i = 0; i < len; i++) {
		if ((v = b32_value((unsigned char)in[i])) < 0)
			return kn_error(err, KN_EINVAL, "%s (character %zu) "
			    "is not base32 (A-Z, 2-7)",
			    show_char(in[i], shown), i + 1);
		acc = (acc << 5) | (uint32_t)v;
		bits += 5;
		if (bits >= 8) {
			out[o++] = (uint8_t)(acc >> (bits - 8));
			bits -= 8;
		}
	}
	if ((acc & ((1u << bits) - 1)) != 0)
		return kn_error(err, KN_EINVAL, "the last base32 character has "
		    "unused bits that are not zero");
	*n = o;
	return 0;
}

/* Peer ids */

void
id_format(const uint8_t id[ID_BYTES], char out[ID_LEN])
{
	char plain[ID_CHARS + 1];
	int i, o = 0;

	id_base32_encode(id, ID_BYTES, plain, sizeof(plain));
	for (i = 0; i < ID_CHARS; i++) {
		if (i > 0 && i % ID_GROUP == 0)
			out[o++] = '-';
		out[o++] = plain[i];
	}
	out[o] = '\0';
}

int
id_parse(const char *text, uint8_t id[ID_BYTES], char *err)
{
	char plain[ID_CHARS], shown[8];
	size_t i, n = 0, got;
	int dash_before = 0;

	for (i = 0; text[i] != '\0'; i++)
		if (text[i] != '-' && b32_value((unsigned char)text[i]) < 0)
			return kn_error(err, KN_EINVAL, "not a peer id: %s "
			    "(character %zu) is not in A-Z, 2-7",
			    show_char(text[i], shown), i + 1);
		else if (text[i] != '-')
			n++;
	if (n != ID_CHARS)
		return kn_error(err, KN_EINVAL, "not a peer id: %zu characters "
		    "besides dashes, not %d", n, ID_CHARS);
	for (i = 0, n = 0; text[i] != '\0'; i++) {
		if (text[i] != '-') {
			plain[n++] = text[i];
			dash_before = 0;
		} else if (n == 0 || n == ID_CHARS || n % ID_GROUP != 0 ||
		    dash_before) {
			return kn_error(err, KN_EINVAL, "not a peer id: the dash "
			    "at character %zu is not between groups of %d",
			    i + 1, ID_GROUP);
		} else {
			dash_before = 1;
		}
	}
	if (id_base32_decode(plain, ID_CHARS, id, ID_BYTES, &got, err) != 0)
		return kn_error(err, KN_EINVAL, "not a peer id: its last "
		    "character must be A or Q (it holds one bit of the id)");
	return 0;
}

int
id_equal(const uint8_t a[ID_BYTES], const uint8_t b[ID_BYTES])
{
	return CRYPTO_memcmp(a, b, ID_BYTES) == 0;
}

/* OpenSSL's reason for the failure of what, as the error. */
static int
ossl_error(char *err, int code, const char *what)
{
	unsigned long e = ERR_peek_last_error();
	const char *why = e != 0 ? ERR_reason_error_string(e) : NULL;

	ERR_clear_error();
	return kn_error(err, code, "%s: %s", what, why != NULL ? why :
	    "unknown OpenSSL error");
}

int
id_digest(X509 *cert, uint8_t id[ID_BYTES], char *err)
{
	EVP_PKEY *pub = X509_get0_pubkey(cert);
	unsigned char *der = NULL;
	int len, rc = 0;

	ERR_clear_error();
	if (pub == NULL)
		return ossl_error(err, KN_EINVAL, "the certificate's public "
		    "key");
	/* DER SubjectPublicKeyInfo: the key and its algorithm */
	if ((len = i2d_PUBKEY(pub, &der)) <= 0)
		return ossl_error(err, KN_EINVAL, "encoding the certificate's "
		    "public key");
	if (EVP_Digest(der, (size_t)len, id, NULL, EVP_sha256(), NULL) != 1)
		rc = ossl_error(err, KN_EIO, "SHA-256");
	OPENSSL_free(der);
	return rc;
}

void
id_pin(const uint8_t id[ID_BYTES], char out[ID_PIN_LEN])
{
	memcpy(out, "sha256//", 8);
	EVP_EncodeBlock((unsigned char *)out + 8, id, ID_BYTES);
}

int
id_of_cert(X509 *cert, char out[ID_LEN], char *err)
{
	uint8_t id[ID_BYTES];
	int rc;

	if ((rc = id_digest(cert, id, err)) != 0)
		return rc;
	id_format(id, out);
	return 0;
}

/* Files */

/* dir/name into out, or KN_EINVAL when it does not fit. */
static int
id_path(char out[ID_PATH_LEN], const char *dir, const char *name, char *err)
{
	if (snprintf(out, ID_PATH_LEN, "%s/%s", dir, name) >= ID_PATH_LEN)
		return kn_error(err, KN_EINVAL, "%.64s...: path too long", dir);
	return 0;
}

/* A key file must never ask for a passphrase on the terminal. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1;
}

static int
id_read_key(const char *path, EVP_PKEY **key, char *err)
{
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return kn_error(err, errno == ENOENT ? ID_ENONE : KN_EIO,
		    "cannot open %s: %s", path, strerror(errno));
	ERR_clear_error();
	*key = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
	fclose(f);
	if (*key == NULL) {
		char what[ID_PATH_LEN + 64];

		snprintf(what, sizeof(what), "%s: no unencrypted private key "
		    "in PEM", path);
		return ossl_error(err, KN_EINVAL, what);
	}
	return 0;
}

static int
id_read_cert(const char *path, X509 **cert, char *err)
{
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open %s: %s", path,
		    strerror(errno));
	ERR_clear_error();
	*cert = PEM_read_X509(f, NULL, no_passphrase, NULL);
	fclose(f);
	if (*cert == NULL) {
		char what[ID_PATH_LEN + 64];

		snprintf(what, sizeof(what), "%s: no certificate in PEM",
		    path);
		return ossl_error(err, KN_EINVAL, what);
	}
	return 0;
}

int
id_of_pem(const char *path, char out[ID_LEN], char *err)
{
	X509 *cert;
	int rc;

	if ((rc = id_read_cert(path, &cert, err)) != 0)
		return rc;
	rc = id_of_cert(cert, out, err);
	X509_free(cert);
	return rc;
}

int
id_load(const char *dir, EVP_PKEY **key, X509 **cert, char *err)
{
	char key_path[ID_PATH_LEN], cert_path[ID_PATH_LEN];
	int rc;

	*key = NULL;
	*cert = NULL;
	if ((rc = id_path(key_path, dir, ID_KEY_FILE, err)) != 0 ||
	    (rc = id_path(cert_path, dir, ID_CERT_FILE, err)) != 0)
		return rc;
	if (access(key_path, F_OK) != 0 && errno == ENOENT)
		return kn_error(err, ID_ENONE, "no identity in %s (no %s)", dir,
		    ID_KEY_FILE);
	if ((rc = id_read_key(key_path, key, err)) != 0 ||
	    (rc = id_read_cert(cert_path, cert, err)) != 0)
		goto fail;
	if (EVP_PKEY_eq(X509_get0_pubkey(*cert), *key) != 1) {
		rc = kn_error(err, KN_EINVAL, "%s does not match %s: the "
		    "certificate is another key's", cert_path, key_path);
		goto fail;
	}
	return 0;
fail:
	EVP_PKEY_free(*key);
	X509_free(*cert);
	*key = NULL;
	*cert = NULL;
	return rc;
}

int
id_of_dir(const char *dir, char out[ID_LEN], char *err)
{
	EVP_PKEY *key;
	X509 *cert;
	int rc;

	if ((rc = id_load(dir, &key, &cert, err)) != 0)
		return rc;
	rc = id_of_cert(cert, out, err);
	EVP_PKEY_free(key);
	X509_free(cert);
	return rc;
}

/* Making an identity */

/* The v3 extensions of a certificate for TLS both ways, not a CA. */
static int
id_extensions(X509 *x)
{
	static const struct {
		int nid;
		const char *value;
	} ext[] = {
		{ NID_basic_constraints, "critical,CA:FALSE" },
		{ NID_key_usage, "critical,digitalSignature" },
		{ NID_ext_key_usage, "serverAuth,clientAuth" },
		{ NID_subject_key_identifier, "hash" },
	};
	X509V3_CTX ctx;
	X509_EXTENSION *e;
	size_t i;
	int ok;

	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
	for (i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		e = X509V3_EXT_conf_nid(NULL, &ctx, ext[i].nid, ext[i].value);
		if (e == NULL)
			return 0;
		ok = X509_add_ext(x, e, -1);
		X509_EXTENSION_free(e);
		if (!ok)
			return 0;
	}
	return 1;
}

/* A self-signed certificate for key, subject and issuer CN=shardmeter,
 * with a random serial; NULL with the reason in err. */
static X509 *
id_certificate(EVP_PKEY *key, char *err)
{
	unsigned char serial[20];       /* RFC 5280's most */
	X509 *x = X509_new();
	X509_NAME *name;
	BIGNUM *bn = NULL;
	int ok;

	ok = x != NULL && RAND_bytes(serial, sizeof(serial)) == 1;
	if (ok)         /* positive and all 20 bytes long */
		serial[0] = (serial[0] & 0x7f) | 0x40;
	ok = ok && X509_set_version(x, X509_VERSION_3) &&
	    (bn = BN_bin2bn(serial, sizeof(serial), NULL)) != NULL &&
	    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL &&
	    X509_gmtime_adj(X509_getm_notBefore(x), -ID_BACKDATE_S) != NULL &&
	    X509_time_adj_ex(X509_getm_notAfter(x), ID_VALID_DAYS, 0,
	    NULL) != NULL &&
	    (name = X509_get_subject_name(x)) != NULL &&
	    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
	    (const unsigned char *)ID_CN, -1, -1, 0) &&
	    X509_set_issuer_name(x, name) && X509_set_pubkey(x, key) &&
	    id_extensions(x) &&
	    /* Ed25519 signs the message itself: no digest */
	    X509_sign(x, key, NULL) > 0;
	BN_free(bn);
	if (!ok) {
		ossl_error(err, KN_EIO, "cannot make the certificate");
		X509_free(x);
		return NULL;
	}
	return x;
}

/* Makes dir and its missing parents, each 0700. */
static int
id_mkdirs(const char *dir, char *err)
{
	char path[ID_PATH_LEN], *p;
	struct stat st;

	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return kn_error(err, KN_EINVAL, "%.64s...: path too long", dir);
	for (p = path + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		if (p[-1] != '/') {
			char end = *p;

			*p = '\0';
			if (mkdir(path, 0700) != 0 && errno != EEXIST)
				return kn_error(err, KN_EIO, "cannot make %s: "
				    "%s", path, strerror(errno));
			*p = end;
		}
		if (*p == '\0')
			break;
	}
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return kn_error(err, KN_EIO, "%s is not a directory", dir);
	return 0;
}

/* An identity that is there stays unless forced: the key is the peer id
 * that others trust, and a lost key cannot be made again. */
static int
id_refuse_existing(const char *path, char *err)
{
	struct stat st;

	if (lstat(path, &st) == 0)
		return kn_error(err, ID_EEXIST, "%s exists: an identity is "
		    "already there (--force replaces it, and its peer id)",
		    path);
	/* not a directory: id_mkdirs says so */
	if (errno != ENOENT && errno != ENOTDIR)
		return kn_error(err, KN_EIO, "cannot look at %s: %s", path,
		    strerror(errno));
	return 0;
}

typedef int (*id_pem_writer)(FILE *f, void *obj);

static int
write_key(FILE *f, void *key)
{
	/* PKCS#8, unencrypted: the daemon starts unattended */
	return PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
}

static int
write_cert(FILE *f, void *cert)
{
	return PEM_write_X509(f, cert);
}

/* obj written by w to a new file beside path, 0600 and on disk, whose
 * name is left in tmp (ID_PATH_LEN) for id_install to rename. */
static int
id_write_temp(const char *path, id_pem_writer w, void *obj, char *tmp,
    char *err)
{
	FILE *f;
	int fd, ok;

	if (snprintf(tmp, ID_PATH_LEN, "%s.XXXXXX", path) >= ID_PATH_LEN)
		return kn_error(err, KN_EINVAL, "%.64s...: path too long",
		    path);
	if ((fd = mkstemp(tmp)) < 0)
		return kn_error(err, KN_EIO, "cannot create %s: %s", tmp,
		    strerror(errno));
	if (fchmod(fd, 0600) != 0 || (f = fdopen(fd, "w")) == NULL) {
		kn_error(err, KN_EIO, "cannot write %s: %s", tmp,
		    strerror(errno));
		close(fd);
		unlink(tmp);
		return KN_EIO;
	}
	ERR_clear_error();
	errno = 0;
	ok = w(f, obj) == 1 && fflush(f) == 0 && fsync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok) {
		kn_error(err, KN_EIO, "cannot write %s: %s", tmp, errno != 0 ?
		    strerror(errno) : "PEM encoding failed");
		unlink(tmp);
		return KN_EIO;
	}
	return 0;
}

/* Renames the two written files into place, the key first, and syncs dir
 * so that the names last.  Two renames are not one: a crash between them
 * leaves a pair that id_load refuses, never a key that was not asked to
 * be replaced. */
static int
id_install(const char *dir, char tmp[2][ID_PATH_LEN],
    char path[2][ID_PATH_LEN], char *err)
{
	int i, fd;

	for (i = 0; i < 2; i++)
		if (rename(tmp[i], path[i]) != 0) {
			kn_error(err, KN_EIO, "cannot rename %s to %s: %s",
			    tmp[i], path[i], strerror(errno));
			for (; i < 2; i++)
				unlink(tmp[i]);
			return KN_EIO;
		}
	if ((fd = open(dir, O_RDONLY)) >= 0) {
		fsync(fd);
		close(fd);
	}
	return 0;
}

int
id_create(const char *dir, int force, char *err)
{
	char path[2][ID_PATH_LEN], tmp[2][ID_PATH_LEN];
	id_pem_writer writers[2] = { write_key, write_cert };
	void *objs[2];
	EVP_PKEY *key = NULL;
	X509 *cert = NULL;
	int i, rc;

	if ((rc = id_path(path[0], dir, ID_KEY_FILE, err)) != 0 ||
	    (rc = id_path(path[1], dir, ID_CERT_FILE, err)) != 0)
		return rc;
	if (!force && ((rc = id_refuse_existing(path[0], err)) != 0 ||
	    (rc = id_refuse_existing(path[1], err)) != 0))
		return rc;
	if ((rc = id_mkdirs(dir, err)) != 0)
		return rc;
	ERR_clear_error();
	if ((key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519")) == NULL)
		return ossl_error(err, KN_EIO, "cannot make an Ed25519 key");
	if ((cert = id_certificate(key, err)) == NULL) {
		EVP_PKEY_free(key);
		return KN_EIO;
	}
	objs[0] = key;
	objs[1] = cert;
	for (i = 0; rc == 0 && i < 2; i++)
		if ((rc = id_write_temp(path[i], writers[i], objs[i], tmp[i],
		    err)) != 0 && i > 0)
			unlink(tmp[0]);
	if (rc == 0)
		rc = id_install(dir, tmp, path, err);
	EVP_PKEY_free(key);
	X509_free(cert);
	return rc;
}
