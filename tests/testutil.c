/* Shared helpers of the check programs (see testutil.h): every suite
 * links them from tests/libtestutil.a. */
#include "config.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <math.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

int
tu_connect(int port)
{
	struct sockaddr_in sa = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
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

long
tu_http(const char *method, int port, const char *path, const char *header,
    const void *body, size_t len, tu_body *out)
{
	CURL *h = curl_easy_init();
	struct curl_slist *headers = NULL;
	char url[512];
	long status = 0;

	memset(out, 0, sizeof(*out));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
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
