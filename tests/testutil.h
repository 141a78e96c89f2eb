/* Helpers shared by the check programs: seeded inputs, error measures and
 * a gradient checker; the byte surgery of the message tests; files,
 * commands and the daemons under test (start, wait, stop, HTTP, status);
 * and the suite runner every main() ends with.  Helpers that check
 * something fail the calling test through check's assertions. */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#include <check.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Numbers */

void tu_fill(float *x, size_t n, float lo, float hi, uint64_t seed);
float *tu_alloc_fill(size_t n, float lo, float hi, uint64_t seed);
/* max |a-b| / max(|a|, |b|, floor) */
double tu_max_rel_err(const float *a, const float *b, size_t n, double floor);

/* Loss as a function of the current contents of some buffer. */
typedef double (*tu_loss_fn)(void *ctx);

/* Checks grad (n) against central differences of loss() in x (n), at up
 * to max_probe evenly spread indices; returns the largest relative error
 * |g - fd| / max(|g|, |fd|, floor). */
double tu_gradcheck(tu_loss_fn loss, void *ctx, float *x, const float *grad,
    size_t n, size_t max_probe, float eps, double floor);

/* Records the largest error of a named check in the log, one line each,
 * for the closing note. */
void tu_report(const char *what, double err);

/* Messages and files in msgpack (checkpoints, updates) */

/* What a decoder's outputs are filled with before a call that must fail,
 * so that any byte it wrote shows. */
#define TU_SENTINEL 0x5a

/* A copy of buf (len) with room for extra more bytes and one more. */
char *tu_dup_buf(const char *buf, size_t len, size_t extra);
/* Offset of the bytes of str (a msgpack string's body) in buf. */
size_t tu_find(const char *buf, size_t len, const char *str);
/* Offset and size of the body of the "payload" bin (bin8 or bin16). */
size_t tu_payload_at(const char *buf, size_t len, size_t *size);
/* Writes the SHA-256 of the payload into the last 32 bytes of buf, where
 * the hash field ends a message, so a changed payload passes the hash. */
void tu_rehash(char *buf, size_t len);
/* After a refused decode: its message err is not empty and holds want
 * (NULL: anything). */
void tu_assert_refused(const char *err, const char *want);
/* The n bytes at p all still hold TU_SENTINEL. */
void tu_assert_untouched(const void *p, size_t n);

/* Files and commands */

/* Makes a fresh directory /tmp/name.XXXXXX into dir (size bytes). */
void tu_temp_dir(char *dir, size_t size, const char *name);
/* Removes dir and all it holds, unless KEEP_TEST_DIRS is set. */
void tu_remove_dir(const char *dir);
/* What was written to f (a tmpfile), read back into buf (size bytes,
 * NUL-terminated) and f closed; returns its length. */
size_t tu_read_back(FILE *f, char *buf, size_t size);
/* Writes text to dir/name; returns the path, valid until the next call. */
const char *tu_write_file(const char *dir, const char *name,
    const char *text);
/* Runs a shell command line made from fmt; returns its exit status (-1
 * if it did not exit), its standard output and standard error in out
 * (outlen bytes, NUL-terminated; NULL: discarded).  A command that
 * redirects its own standard error keeps that. */
int tu_run_cmd(char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The bytes that `od -An -v -tx1` printed in raw, from the skip-th on,
 * into out (at most outlen of them): a program's output read whole, NUL
 * bytes included.  Returns how many od printed in all. */
size_t tu_od_bytes(const char *raw, size_t skip, unsigned char *out,
    size_t outlen);

/* The daemons under test */

/* The programs: $BLOCKTRAIND, $SHARDMETER and $WAN_RELAY as `make check`
 * sets them, else their places in the build tree. */
const char *tu_blocktraind(void);
const char *tu_shardmeter(void);
const char *tu_wan_relay(void);

/* Starts prog with argv (argv[0] first, NULL-terminated), its standard
 * error appended to log (NULL: left as it is); returns the pid. */
pid_t tu_spawn(const char *log, const char *prog, const char *const argv[]);
/* The first of n ports in a row that are free on loopback now, below
 * the ephemeral range and spread by pid; $TU_PORT_BASE, when set, is
 * taken as it is (to keep runs that share a machine apart). */
int tu_port_base(int n);
/* A connected TCP socket to 127.0.0.1:port, or -1. */
int tu_connect(int port);
/* The same from 127.0.0.<host> (1 to 254): another address to the
 * daemon's per-address limits. */
int tu_connect_from(int port, int host);
/* Waits until 127.0.0.1:port takes a connection (1), or until pid (if
 * > 0) has exited or limit seconds have passed (0).  Reaps nothing. */
int tu_wait_port(int port, pid_t pid, double limit);
/* Starts blocktraind with the arguments after port (NULL-terminated,
 * argv[0] apart), its standard error appended to log, and, with port >
 * 0, waits for it to listen on 127.0.0.1:port: the test fails if it
 * exits first or does not listen within 30 s.  Returns the pid. */
pid_t tu_daemon_start(const char *log, int port, ...)
    __attribute__((sentinel));
/* Sends sig to *pid and waits up to limit seconds for it to end, then
 * kills it; *pid becomes 0.  Returns its exit status, 128 when a signal
 * ended it, -1 when it had to be killed, 0 when *pid was not running. */
int tu_stop(pid_t *pid, int sig, double limit);

/* A run of tiny blocks on system text, so that a test takes seconds:
 * dir/run.conf (the spec) and dir/daemon.conf (blocktrain.conf). */
void tu_write_run(const char *dir, int blocks, int steps, int local_steps,
    double deadline);

/* Trust (DESIGN section 5): every daemon under test has an identity in
 * its state directory and a peer-id line in its peer list, and the test
 * itself is an operator listed as a client.  tu_http then speaks mutual
 * TLS to those daemons' ports, pinned to their ids. */

/* Makes the test's operator identity in dir/xdg/shardmeter and points
 * XDG_CONFIG_HOME there, so the shardmeter commands the test runs use it
 * too.  Call once, before any line below. */
void tu_trust_init(const char *dir);
/* Appends "127.0.0.1:port block PEER-ID
" to text (size bytes) for a
 * daemon whose state directory is state (its identity made there if
 * missing), and pins port to that id for tu_http. */
void tu_peer_line(char *text, size_t size, int port, int block,
    const char *state);
/* Appends "client PEER-ID test
" (the test's operator identity). */
void tu_client_line(char *text, size_t size);
/* Copies the identity files of directory from into directory to (made if
 * missing), for a daemon started on another state directory. */
void tu_copy_identity(const char *from, const char *to);
/* From now on tu_http and tu_raw_request present the identity in dir (a
 * daemon's, to act as that peer); NULL: the operator's again. */
void tu_act_as(const char *dir);
/* Identities a careful daemon refuses, written to dir (key.pem, cert.pem,
 * the key matching the certificate): a certificate out of date, and one
 * signed by another key than its own. */
enum { TU_ID_EXPIRED, TU_ID_NOT_SELF_SIGNED };
void tu_bad_identity(const char *dir, int kind);
/* From now on tu_raw_request presents the certificate of the identity in
 * dir with a key of its own whose public half is the certificate's (what
 * someone who copied a listed certificate, not its key, can make); NULL:
 * back to tu_act_as's.  tu_http cannot do this (libcurl refuses). */
void tu_act_forged(const char *dir);
/* The operator identity's directory, and a port's pin (NULL if none). */
const char *tu_client_dir(void);
const uint8_t *tu_port_pin(int port);

/* An HTTP answer's body, NUL-terminated; the caller frees data. */
typedef struct {
	char *data;
	size_t len;
} tu_body;

/* One request to 127.0.0.1:port with an optional extra header line and
 * body (NULL: none), 10 s at most: https as the test's operator when the
 * port is pinned (tu_peer_line), else plain http.  Returns the status
 * code, 0 when no answer came; out receives the body. */
long tu_http(const char *method, int port, const char *path,
    const char *header, const void *body, size_t len, tu_body *out);
long tu_http_get(int port, const char *path, tu_body *out);
/* Sends text as it is (TLS as the test's operator when port is pinned)
 * and reads what comes back until the connection closes or 0.5 s pass
 * without a byte; the answer NUL-terminated in answer (alen bytes).
 * Returns the status of its first line, 0 when there is none. */
int tu_raw_request(int port, const char *text, char *answer, size_t alen);
/* The same in steps, on a connection kept open: TLS as tu_http would
 * present itself when port is pinned (NULL if the handshake fails), plain
 * TCP when it is not or plain is set. */
typedef struct tu_conn tu_conn;
tu_conn *tu_conn_open(int port, int plain);
int tu_conn_request(tu_conn *c, const char *text, char *answer,
    size_t alen);
/* Seconds until the daemon closes c, or -1 when it has not within limit. */
double tu_conn_closed_within(tu_conn *c, double limit);
void tu_conn_close(tu_conn *c);
/* A raw TLS 1.3 connection to 127.0.0.1:port presenting the identity
 * tu_act_as names (the operator's by default), for bytes that are not
 * HTTP (the pipeline's frames); the server's key is not checked. */
typedef struct tu_tls tu_tls;
/* NULL when no TCP connection or no handshake could be made. */
tu_tls *tu_tls_connect(int port);
/* Writes all len bytes; 0, or -1 when the connection failed. */
int tu_tls_write(tu_tls *t, const void *data, size_t len);
/* Reads what arrives within limit seconds, up to len bytes: the count,
 * 0 when the peer closed the connection (an alert, close_notify or EOF),
 * -1 when nothing came in time. */
ssize_t tu_tls_read(tu_tls *t, void *buf, size_t len, double limit);
void tu_tls_close(tu_tls *t);
/* GET /v1/status of the daemon on port: the JSON object, or NULL when it
 * did not answer 200 with JSON.  The caller json_decref()s it. */
json_t *tu_status(int port);
/* An integer field of the status, -1 without an answer. */
long long tu_status_int(int port, const char *key);
/* Whether the status says state (its "state" field). */
int tu_status_is(int port, const char *state);

/* Prometheus text */

/* The value of the first sample of text whose name is want's and whose
 * labels include each of want's ("name" or "name{a=\"x\",b=\"y\"}";
 * other labels, such as the run, block and replica every daemon adds,
 * may stand beside them) into *v: 1, or 0 when there is none. */
int tu_sample(const char *text, const char *want, double *v);
/* Whether the daemons on ports first..first+n-1 all say state within
 * limit seconds (polled every 0.1 s). */
int tu_wait_state(int first, int n, const char *state, double limit);

/* Suites */

/* Runs every test of s with check's defaults; returns EXIT_SUCCESS when
 * none failed, else EXIT_FAILURE. */
int tu_run_suite(Suite *s);

#endif
