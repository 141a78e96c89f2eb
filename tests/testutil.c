/* Shared helpers of the check programs (see testutil.h): every suite
 * links them from tests/libtestutil.a. */
#include "config.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/identity.h"
#include "kernels/clock.h"
#include "kernels/rng.h"
#include "tests/testutil.h"

void
tu_fill(float *x, size_t n, float lo, float hi, uint64_t seed)
{
	size_t i;

	kn_rng_fill_uniform(x, n, seed, 77);
	for (i = 0; i < n; i++)
		x[i] = lo + (hi - lo) * x[i];
}

float *
tu_alloc_fill(size_t n, float lo, float hi, uint64_t seed)
{
	float *x = malloc((n ? n : 1) * sizeof(float));

	if (x == NULL)
		abort();
	tu_fill(x, n, lo, hi, seed);
	return x;
}

double
tu_max_rel_err(const float *a, const float *b, size_t n, double floor)
{
	double worst = 0.0;
	size_t i;

	for (i = 0; i < n; i++) {
		double scale = fmax(fmax(fabs(a[i]), fabs(b[i])), floor);
		double e = fabs((double)a[i] - b[i]) / scale;

		if (!(e <= worst))
			worst = e;
	}
	return worst;
}

double
tu_gradcheck(tu_loss_fn loss, void *ctx, float *x, const float *grad,
    size_t n, size_t max_probe, float eps, double floor)
{
	size_t step = n > max_probe ? n / max_probe : 1, i;
	double worst = 0.0;

	for (i = 0; i < n; i += step) {
		float keep = x[i];
		double up, down, fd, e;

		x[i] = keep + eps;
		up = loss(ctx);
		x[i] = keep - eps;
		down = loss(ctx);
		x[i] = keep;
		fd = (up - down) / (2.0 * eps);
		e = fabs(fd - grad[i]) / fmax(fmax(fabs(fd), fabs(grad[i])),
		    floor);
		if (!(e <= worst))
			worst = e;
	}
	return worst;
}

void
tu_report(const char *what, double err)
{
	fprintf(stderr, "# %-28s max relative error %.3e\n", what, err);
}

char *
tu_dup_buf(const char *buf, size_t len, size_t extra)
{
	char *b = malloc(len + extra + 1);

	ck_assert_ptr_nonnull(b);
	memcpy(b, buf, len);
	return b;
}

size_t
tu_find(const char *buf, size_t len, const char *str)
{
	const char *p = memmem(buf, len, str, strlen(str));

	ck_assert_ptr_nonnull(p);
	return (size_t)(p - buf);
}

size_t
tu_payload_at(const char *buf, size_t len, size_t *size)
{
	size_t at = tu_find(buf, len, "payload") + strlen("payload");
	const unsigned char *p = (const unsigned char *)buf + at;

	switch (p[0]) {
	case 0xc4:
		*size = p[1];
		return at + 2;
	case 0xc5:
		*size = (size_t)p[1] << 8 | p[2];
		return at + 3;
	default:
		ck_abort_msg("payload is not a small bin");
		return 0;
	}
}

void
tu_rehash(char *buf, size_t len)
{
	size_t size, at = tu_payload_at(buf, len, &size);
	unsigned int mdlen;

	ck_assert_int_eq(EVP_Digest(buf + at, size,
	    (unsigned char *)buf + len - 32, &mdlen, EVP_sha256(), NULL), 1);
}

void
tu_assert_refused(const char *err, const char *want)
{
	if (want != NULL && strstr(err, want) == NULL)
		ck_abort_msg("message '%s' lacks '%s'", err, want);
	ck_assert_uint_gt(strlen(err), 0);
}

void
tu_assert_untouched(const void *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		ck_assert_int_eq(((const unsigned char *)p)[i], TU_SENTINEL);
}

void
tu_temp_dir(char *dir, size_t size, const char *name)
{
	snprintf(dir, size, "/tmp/%s.XXXXXX", name);
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

void
tu_remove_dir(const char *dir)
{
	char cmd[512];

	if (getenv("KEEP_TEST_DIRS") != NULL)
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

const char *
tu_write_file(const char *dir, const char *name, const char *text)
{
	static char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	return path;
}

int
tu_run_cmd(char *out, size_t outlen, const char *fmt, ...)
{
	char cmd[2048], line[2100], sink[4096];
	va_list ap;
	FILE *p;
	size_t n;
	int status;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	/* first, so that the command's own redirections come after it */
	snprintf(line, sizeof(line), "exec 2>&1; %s", cmd);
	p = popen(line, "r");
	ck_assert_ptr_nonnull(p);
	if (out != NULL) {
		n = fread(out, 1, outlen - 1, p);
		out[n] = '\0';
	}
	/* the rest, so the command never stops on a full pipe */
	while (fread(sink, 1, sizeof(sink), p) > 0)
		;
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

size_t
tu_od_bytes(const char *raw, size_t skip, unsigned char *out, size_t outlen)
{
	size_t n = 0;
	unsigned v;
	int used;

	for (; sscanf(raw, " %2x%n", &v, &used) == 1; raw += used, n++)
		if (n >= skip && n - skip < outlen)
			out[n - skip] = (unsigned char)v;
	return n;
}

static const char *
program(const char *env, const char *in_build_tree)
{
	const char *path = getenv(env);

	return path != NULL ? path : in_build_tree;
}

const char *
tu_blocktraind(void)
{
	return program("BLOCKTRAIND", "./blocktraind");
}

const char *
tu_shardmeter(void)
{
	return program("SHARDMETER", "./shardmeter");
}

const char *
tu_wan_relay(void)
{
	return program("WAN_RELAY", "./scripts/wan-relay");
}

pid_t
tu_spawn(const char *log, const char *prog, const char *const argv[])
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (log != NULL) {
			FILE *f = freopen(log, "a", stderr);

			(void)f;
		}
		execv(prog, (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Whether nothing listens on or holds 127.0.0.1:port now. */
static int
port_free(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	if (fd < 0)
		return 0;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

int
tu_port_base(int n)
{
	/* below the kernel's ephemeral range (32768 up), where outgoing
	 * connections take their ports; spread by pid so that test
	 * programs running at once start apart */
	int span = 32000 - 10000 - n, base, tries, i;
	const char *env = getenv("TU_PORT_BASE");

	if (env != NULL && atoi(env) > 0)
		return atoi(env);
	base = 10000 + (int)((unsigned)getpid() * 7919u % (unsigned)span);
	for (tries = 0; tries < 200; tries++) {
		for (i = 0; i < n && port_free(base + i); i++)
			;
		if (i == n)
			return base;
		base = 10000 + (base - 10000 + n + 17) % span;
	}
	ck_abort_msg("no %d free ports in a row on loopback", n);
	return -1;
}

int
tu_connect(int port)
{
	return tu_connect_from(port, 1);
}

int
tu_connect_from(int port, int host)
{
	struct sockaddr_in sa = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	if (host != 1) {
		sa.sin_family = AF_INET;
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + (uint32_t)host);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
			close(fd);
			return -1;
		}
		memset(&sa, 0, sizeof(sa));
	}
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
tu_wait_port(int port, pid_t pid, double limit)
{
	double t0 = kn_now();
	siginfo_t info;
	int fd;

	for (;;) {
		if ((fd = tu_connect(port)) >= 0) {
			close(fd);
			return 1;
		}
		/* WNOWAIT: the caller still reaps it, with its status */
		memset(&info, 0, sizeof(info));
		if (pid > 0 && waitid(P_PID, (id_t)pid, &info, WEXITED |
		    WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
			return 0;
		if (kn_now() - t0 >= limit)
			return 0;
		usleep(20000);
	}
}

pid_t
tu_daemon_start(const char *log, int port, ...)
{
	const char *argv[64];
	va_list ap;
	pid_t pid;
	int n = 0;

	argv[n++] = "blocktraind";
	va_start(ap, port);
	while (n < 63 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	ck_assert_msg(n < 63, "too many arguments for blocktraind");
	pid = tu_spawn(log, tu_blocktraind(), argv);
	if (port > 0 && !tu_wait_port(port, pid, 30)) {
		tu_stop(&pid, SIGKILL, 5);
		ck_abort_msg("blocktraind did not listen on port %d (see %s)",
		    port, log != NULL ? log : "its output");
	}
	return pid;
}

int
tu_stop(pid_t *pid, int sig, double limit)
{
	double t0 = kn_now();
	int status = -1;

	if (*pid <= 0)
		return 0;
	kill(*pid, sig);
	while (kn_now() - t0 < limit) {
		if (waitpid(*pid, &status, WNOHANG) == *pid) {
			*pid = 0;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
		}
		usleep(20000);
	}
	kill(*pid, SIGKILL);
	waitpid(*pid, &status, 0);
	*pid = 0;
	return -1;
}

static size_t
on_data(char *p, size_t size, size_t nmemb, void *user)
{
	tu_body *b = user;

	b->data = realloc(b->data, b->len + size * nmemb + 1);
	memcpy(b->data + b->len, p, size * nmemb);
	b->len += size * nmemb;
	b->data[b->len] = '\0';
	return size * nmemb;
}

void
tu_write_run(const char *dir, int blocks, int steps, int local_steps,
    double deadline)
{
	char text[1024];

	snprintf(text, sizeof(text), "seed = 3\n[model]\nblocks = %d\n"
	    "width = 32\nheads = 2\nlayers_per_block = 1\nwindow = 32\n"
	    "[data]\ntrain = /usr/share/common-licenses/GPL-3\n"
	    "valid = /usr/share/common-licenses/GPL-2\n"
	    "test = /usr/share/common-licenses/GPL-2\n"
	    "[optim]\nbatch = 16\nsteps = %d\nwarmup = 20\nlr = 3e-3\n"
	    "[sync]\nlocal_steps = %d\nround_deadline = %g\n", blocks, steps,
	    local_steps, deadline);
	tu_write_file(dir, "run.conf", text);
	/* the metrics listener on a free port: the status says which */
	tu_write_file(dir, "daemon.conf", "eval_every = 100\n"
	    "eval_windows = 64\ncheckpoint_every = 100\n"
	    "peer_timeout_ms = 2000\nmetrics_listen = 127.0.0.1:0\n");
}

/* Trust */

#define TU_MAX_PINS 64

static char tu_client[512];
static char tu_acting[512];     /* the identity presented; "": tu_client */
static char tu_forged[512];     /* a certificate presented without its key */
static struct {
	int port;
	uint8_t id[ID_BYTES];
} tu_pins[TU_MAX_PINS];
static int tu_npins;

void
tu_trust_init(const char *dir)
{
	char xdg[400], err[KN_ERR_LEN];

	snprintf(xdg, sizeof(xdg), "%s/xdg", dir);
	snprintf(tu_client, sizeof(tu_client), "%s/shardmeter", xdg);
	ck_assert_msg(id_create(tu_client, 0, err) == 0, "%s", err);
	setenv("XDG_CONFIG_HOME", xdg, 1);
	tu_npins = 0;
	tu_acting[0] = '\0';
	tu_forged[0] = '\0';
}

const char *
tu_client_dir(void)
{
	return tu_client;
}

void
tu_act_as(const char *dir)
{
	snprintf(tu_acting, sizeof(tu_acting), "%s", dir ? dir : "");
}

void
tu_act_forged(const char *dir)
{
	snprintf(tu_forged, sizeof(tu_forged), "%s", dir ? dir : "");
}

static void
write_pem(const char *dir, EVP_PKEY *key, X509 *cert)
{
	char path[600];
	FILE *f;

	ck_assert_int_eq(tu_run_cmd(NULL, 0, "mkdir -p -m 700 '%s'", dir), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, ID_KEY_FILE);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	ck_assert_int_eq(PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL,
	    NULL), 1);
	fclose(f);
	chmod(path, 0600);
	snprintf(path, sizeof(path), "%s/%s", dir, ID_CERT_FILE);
	ck_assert_ptr_nonnull(f = fopen(path, "w"));
	ck_assert_int_eq(PEM_write_X509(f, cert), 1);
	fclose(f);
	chmod(path, 0600);
}

void
tu_bad_identity(const char *dir, int kind)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	EVP_PKEY *other = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	X509 *cert = X509_new();
	X509_NAME *name = X509_NAME_new();
	long day = 24 * 60 * 60;

	ck_assert(key != NULL && other != NULL && cert != NULL && name);
	X509_set_version(cert, 2);
	ASN1_INTEGER_set(X509_get_serialNumber(cert), 7);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
	    (const unsigned char *)"shardmeter", -1, -1, 0);
	X509_set_subject_name(cert, name);
	X509_set_issuer_name(cert, name);
	X509_gmtime_adj(X509_getm_notBefore(cert), kind == TU_ID_EXPIRED ?
	    -10 * day : -day);
	X509_gmtime_adj(X509_getm_notAfter(cert), kind == TU_ID_EXPIRED ?
	    -day : 365 * day);
	X509_set_pubkey(cert, key);
	ck_assert_int_gt(X509_sign(cert, kind == TU_ID_NOT_SELF_SIGNED ?
	    other : key, NULL), 0);
	write_pem(dir, key, cert);
	X509_NAME_free(name);
	X509_free(cert);
	EVP_PKEY_free(key);
	EVP_PKEY_free(other);
}

/* A key whose public half is cert's and whose private half is random:
 * OpenSSL takes the pair as given, so the TLS signature it makes is one
 * the certificate's real key never made. */
static EVP_PKEY *
forged_key(X509 *cert)
{
	unsigned char pub[32], priv[32];
	size_t publen = sizeof(pub);
	EVP_PKEY_CTX *pctx = EVP_PKEY_CTX_new_from_name(NULL, "ED25519", NULL);
	EVP_PKEY *key = NULL;
	OSSL_PARAM params[3];

	ck_assert_int_eq(EVP_PKEY_get_raw_public_key(X509_get0_pubkey(cert),
	    pub, &publen), 1);
	ck_assert_int_eq(RAND_bytes(priv, sizeof(priv)), 1);
	params[0] = OSSL_PARAM_construct_octet_string(OSSL_PKEY_PARAM_PUB_KEY,
	    pub, publen);
	params[1] = OSSL_PARAM_construct_octet_string(
	    OSSL_PKEY_PARAM_PRIV_KEY, priv, sizeof(priv));
	params[2] = OSSL_PARAM_construct_end();
	ck_assert_int_eq(EVP_PKEY_fromdata_init(pctx), 1);
	ck_assert_int_eq(EVP_PKEY_fromdata(pctx, &key, EVP_PKEY_KEYPAIR,
	    params), 1);
	EVP_PKEY_CTX_free(pctx);
	return key;
}

/* The identity tu_http presents. */
static const char *
acting(void)
{
	return tu_acting[0] ? tu_acting : tu_client;
}

/* The id of the identity in dir, made if missing. */
static void
identity_of(const char *dir, uint8_t id[ID_BYTES], char text[ID_LEN])
{
	char err[KN_ERR_LEN];
	int rc = id_create(dir, 0, err);

	ck_assert_msg(rc == 0 || rc == ID_EEXIST, "%s", err);
	ck_assert_msg(id_of_dir(dir, text, err) == 0, "%s", err);
	ck_assert_int_eq(id_parse(text, id, err), 0);
}

void
tu_peer_line(char *text, size_t size, int port, int block,
    const char *state)
{
	char idtext[ID_LEN];
	uint8_t id[ID_BYTES];
	size_t used = strlen(text);
	int i;

	identity_of(state, id, idtext);
	snprintf(text + used, size - used, "127.0.0.1:%d %d %s\n", port, block,
	    idtext);
	for (i = 0; i < tu_npins && tu_pins[i].port != port; i++)
		;
	ck_assert_int_lt(i, TU_MAX_PINS);
	tu_pins[i].port = port;
	memcpy(tu_pins[i].id, id, ID_BYTES);
	if (i == tu_npins)
		tu_npins++;
}

void
tu_client_line(char *text, size_t size)
{
	char idtext[ID_LEN];
	uint8_t id[ID_BYTES];
	size_t used = strlen(text);

	ck_assert_msg(tu_client[0] != '\0', "tu_trust_init first");
	identity_of(tu_client, id, idtext);
	snprintf(text + used, size - used, "client %s test\n", idtext);
}

const uint8_t *
tu_port_pin(int port)
{
	int i;

	for (i = 0; i < tu_npins; i++)
		if (tu_pins[i].port == port)
			return tu_pins[i].id;
	return NULL;
}

void
tu_copy_identity(const char *from, const char *to)
{
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "mkdir -p '%s' && cp -p "
	    "'%s/%s' '%s/%s' '%s' && chmod 700 '%s'", to, from, ID_KEY_FILE,
	    from, ID_CERT_FILE, to, to), 0);
}

long
tu_http(const char *method, int port, const char *path, const char *header,
    const void *body, size_t len, tu_body *out)
{
	CURL *h = curl_easy_init();
	struct curl_slist *headers = NULL;
	const uint8_t *pin = tu_port_pin(port);
	char url[512], cert[600], key[600], pinned[ID_PIN_LEN];
	long status = 0;

	memset(out, 0, sizeof(*out));
	snprintf(url, sizeof(url), "%s://127.0.0.1:%d%s", pin ? "https" :
	    "http", port, path);
	if (pin != NULL) {
		snprintf(cert, sizeof(cert), "%s/%s", acting(), ID_CERT_FILE);
		snprintf(key, sizeof(key), "%s/%s", acting(), ID_KEY_FILE);
		id_pin(pin, pinned);
		curl_easy_setopt(h, CURLOPT_SSLCERT, cert);
		curl_easy_setopt(h, CURLOPT_SSLKEY, key);
		curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, pinned);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 10L);
	if (header != NULL) {
		headers = curl_slist_append(headers, header);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	}
	if (body != NULL) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
	}
	if (curl_easy_perform(h) == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(h);
	return status;
}

/* A TLS 1.3 client on fd presenting the test's operator identity; the
 * server is not checked (tu_http pins; this is for raw bytes). */
static SSL *
raw_tls(int fd, SSL_CTX **ctxp)
{
	char cert[600], key[600];
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	SSL *ssl;

	ck_assert_ptr_nonnull(ctx);
	snprintf(cert, sizeof(cert), "%s/%s", acting(), ID_CERT_FILE);
	snprintf(key, sizeof(key), "%s/%s", acting(), ID_KEY_FILE);
	SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	if (tu_forged[0] != '\0') {
		X509 *x;
		EVP_PKEY *k;
		FILE *f;

		snprintf(cert, sizeof(cert), "%s/%s", tu_forged, ID_CERT_FILE);
		ck_assert_ptr_nonnull(f = fopen(cert, "r"));
		ck_assert_ptr_nonnull(x = PEM_read_X509(f, NULL, NULL, NULL));
		fclose(f);
		k = forged_key(x);
		ck_assert_int_eq(SSL_CTX_use_cert_and_key(ctx, x, k, NULL, 1),
		    1);
		X509_free(x);
		EVP_PKEY_free(k);
	} else {
		ck_assert_int_eq(SSL_CTX_use_certificate_file(ctx, cert,
		    SSL_FILETYPE_PEM), 1);
		ck_assert_int_eq(SSL_CTX_use_PrivateKey_file(ctx, key,
		    SSL_FILETYPE_PEM), 1);
	}
	ssl = SSL_new(ctx);
	SSL_set_fd(ssl, fd);
	*ctxp = ctx;
	if (SSL_connect(ssl) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

struct tu_conn {
	int fd;
	SSL_CTX *ctx;
	SSL *ssl;       /* NULL: plain TCP */
};

tu_conn *
tu_conn_open(int port, int plain)
{
	struct timeval tv = { 0, 500000 };
	tu_conn *c = calloc(1, sizeof(*c));

	ck_assert_ptr_nonnull(c);
	c->fd = tu_connect(port);
	ck_assert_int_ge(c->fd, 0);
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (plain || tu_port_pin(port) == NULL)
		return c;
	if ((c->ssl = raw_tls(c->fd, &c->ctx)) == NULL) {
		tu_conn_close(c);
		return NULL;
	}
	return c;
}

int
tu_conn_request(tu_conn *c, const char *text, char *answer, size_t alen)
{
	size_t len = 0, n = strlen(text);
	int code = 0;
	ssize_t r;

	answer[0] = '\0';
	/* in TLS 1.3 a refused client certificate shows on writing or
	 * reading, not in SSL_connect */
	if (c->ssl ? SSL_write(c->ssl, text, (int)n) <= 0 :
	    write(c->fd, text, n) != (ssize_t)n)
		return 0;
	while (len < alen - 1) {
		r = c->ssl ? SSL_read(c->ssl, answer + len, (int)(alen - 1 -
		    len)) : read(c->fd, answer + len, alen - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	answer[len] = '\0';
	sscanf(answer, "HTTP/1.1 %d", &code);
	return code;
}

double
tu_conn_closed_within(tu_conn *c, double limit)
{
	double t0 = kn_now();
	char buf[4096];
	ssize_t r;

	while (kn_now() - t0 < limit) {
		ERR_clear_error();
		r = c->ssl ? SSL_read(c->ssl, buf, sizeof(buf)) :
		    read(c->fd, buf, sizeof(buf));
		if (r > 0)
			continue;
		if (r == 0 || (c->ssl ? SSL_get_error(c->ssl, (int)r) !=
		    SSL_ERROR_WANT_READ && errno != EAGAIN : errno != EAGAIN))
			return kn_now() - t0;
	}
	return -1;
}

void
tu_conn_close(tu_conn *c)
{
	if (c == NULL)
		return;
	SSL_free(c->ssl);
	SSL_CTX_free(c->ctx);
	close(c->fd);
	free(c);
}

int
tu_raw_request(int port, const char *text, char *answer, size_t alen)
{
	tu_conn *c = tu_conn_open(port, 0);
	int code;

	if (c == NULL) {
		answer[0] = '\0';
		return 0;
	}
	code = tu_conn_request(c, text, answer, alen);
	tu_conn_close(c);
	return code;
}

struct tu_tls {
	int fd;
	SSL_CTX *ctx;
	SSL *ssl;
};

tu_tls *
tu_tls_connect(int port)
{
	char cert[600], key[600];
	tu_tls *t = calloc(1, sizeof(*t));

	ck_assert_ptr_nonnull(t);
	if ((t->fd = tu_connect(port)) < 0) {
		free(t);
		return NULL;
	}
	snprintf(cert, sizeof(cert), "%s/%s", acting(), ID_CERT_FILE);
	snprintf(key, sizeof(key), "%s/%s", acting(), ID_KEY_FILE);
	ck_assert_ptr_nonnull(t->ctx = SSL_CTX_new(TLS_client_method()));
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION);
	ck_assert_int_eq(SSL_CTX_use_certificate_file(t->ctx, cert,
	    SSL_FILETYPE_PEM), 1);
	ck_assert_int_eq(SSL_CTX_use_PrivateKey_file(t->ctx, key,
	    SSL_FILETYPE_PEM), 1);
	ck_assert_ptr_nonnull(t->ssl = SSL_new(t->ctx));
	SSL_set_fd(t->ssl, t->fd);
	if (SSL_connect(t->ssl) != 1) {
		tu_tls_close(t);
		return NULL;
	}
	return t;
}

int
tu_tls_write(tu_tls *t, const void *data, size_t len)
{
	return SSL_write(t->ssl, data, (int)len) == (int)len ? 0 : -1;
}

ssize_t
tu_tls_read(tu_tls *t, void *buf, size_t len, double limit)
{
	struct timeval tv = { (time_t)limit, (suseconds_t)((limit -
	    (double)(time_t)limit) * 1e6) };
	int n;

	setsockopt(t->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if ((n = SSL_read(t->ssl, buf, (int)len)) > 0)
		return n;
	/* a receive timeout, else the peer's alert, close_notify or EOF */
	return SSL_get_error(t->ssl, n) == SSL_ERROR_WANT_READ ? -1 : 0;
}

void
tu_tls_close(tu_tls *t)
{
	if (t == NULL)
		return;
	SSL_free(t->ssl);
	SSL_CTX_free(t->ctx);
	close(t->fd);
	free(t);
}

long
tu_http_get(int port, const char *path, tu_body *out)
{
	return tu_http("GET", port, path, NULL, NULL, 0, out);
}

json_t *
tu_status(int port)
{
	tu_body b;
	json_t *j = NULL;

	if (tu_http_get(port, "/v1/status", &b) == 200)
		j = json_loadb(b.data, b.len, 0, NULL);
	free(b.data);
	return j;
}

long long
tu_status_int(int port, const char *key)
{
	json_t *j = tu_status(port);
	long long v = -1;

	if (j != NULL)
		v = json_integer_value(json_object_get(j, key));
	json_decref(j);
	return v;
}

int
tu_status_is(int port, const char *state)
{
	json_t *j = tu_status(port);
	const char *s = json_string_value(json_object_get(j, "state"));
	int yes = s != NULL && strcmp(s, state) == 0;

	json_decref(j);
	return yes;
}

int
tu_wait_state(int first, int n, const char *state, double limit)
{
	double t0 = kn_now();
	int i, all;

	do {
		usleep(100000);
		for (all = 1, i = 0; i < n; i++)
			all &= tu_status_is(first + i, state);
	} while (!all && kn_now() - t0 < limit);
	return all;
}

int
tu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

size_t
tu_read_back(FILE *f, char *buf, size_t size)
{
	size_t len;

	rewind(f);
	len = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[len] = '\0';
	return len;
}

/* Prometheus text */

/* Whether the label list [p, end) holds the pair item (len bytes) as a
 * whole element. */
static int
tu_has_pair(const char *p, const char *end, const char *item, size_t len)
{
	const char *at;

	for (at = p; at + len <= end; at++)
		if ((at == p || at[-1] == ',') && memcmp(at, item, len) == 0 &&
		    (at + len == end || at[len] == ','))
			return 1;
	return 0;
}

int
tu_sample(const char *text, const char *want, double *v)
{
	const char *brace = strchr(want, '{'), *line, *eol, *lb, *le;
	size_t nlen = brace ? (size_t)(brace - want) : strlen(want);

	for (line = text; line != NULL && *line; line = eol ? eol + 1 : NULL) {
		const char *w, *wend, *q;
		int all = 1, inq;

		eol = strchr(line, '\n');
		if (*line == '#' || strncmp(line, want, nlen) != 0 ||
		    (line[nlen] != '{' && line[nlen] != ' '))
			continue;
		lb = line[nlen] == '{' ? line + nlen + 1 : line + nlen;
		/* the closing brace outside the quoted values */
		for (le = lb, inq = 0; line[nlen] == '{' && *le && *le != '\n' &&
		    (inq || *le != '}'); le++) {
			if (inq && *le == '\\' && le[1] != '\0')
				le++;
			else if (*le == '"')
				inq = !inq;
		}
		if (line[nlen] == '{' && *le != '}')
			continue;
		if (brace != NULL) {
			w = brace + 1;
			wend = want + strlen(want) - 1;     /* its '}' */
			while (w < wend && all) {
				/* one pair: up to the comma after its value */
				for (q = w; q < wend && *q != '"'; q++)
					;
				for (q++; q < wend && *q != '"'; q++)
					if (*q == '\\')
						q++;
				q++;
				all = tu_has_pair(lb, le, w, (size_t)(q - w));
				w = q < wend && *q == ',' ? q + 1 : q;
			}
		}
		if (all) {
			q = line[nlen] == '{' ? le + 1 : lb;
			*v = strtod(q, NULL);
			return 1;
		}
	}
	return 0;
}
