/* Reading and printing blocktrain.conf with inih, from one table of its
 * keys.  Unknown keys are errors: a typo in a daemon's configuration
 * should stop it at start, not be ignored. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/conf.h"
#include "daemon/core/strikes.h"
#include "kernels/error.h"

/* No blank, control byte, bracket or comment character in a host:
 * "[ 10.0.0.1]:7001", "[^::1]]:7001" or "[;]:7001" would print as a
 * host:port that reads back as another host, or not at all. */
static int
host_chars(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c >= 0x7f || strchr("[];#", c) != NULL)
			return 0;
	}
	return 1;
}

int
cf_parse_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon;
	char *end;
	long p;
	size_t n;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (close == NULL || close[1] != ':')
			return KN_EINVAL;
		n = (size_t)(close - s - 1);
		colon = close + 1;
		s++;
	} else {
		if ((colon = strrchr(s, ':')) == NULL)
			return KN_EINVAL;
		n = (size_t)(colon - s);
	}
	if (n == 0 || n >= hostlen || !host_chars(s, n))
		return KN_EINVAL;
	p = strtol(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
		return KN_EINVAL;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = (int)p;
	return KN_OK;
}

char *
cf_list_line(char *line)
{
	char *s = line, *hash = strchr(line, '#');
	size_t len;

	if (hash != NULL)
		*hash = '\0';
	len = strlen(s);
	while (len > 0 && isspace((unsigned char)s[len - 1]))
		s[--len] = '\0';
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

int
cf_is_loopback(const char *host)
{
	return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
	    strcmp(host, "localhost") == 0;
}

static int
set_listen(const pr_key *k, void *obj, void *ctx, const char *v, char *msg)
{
	cf_config *c = obj;

	(void)ctx;
	if (cf_parse_hostport(v, c->listen_host, sizeof(c->listen_host),
	    &c->listen_port) != 0)
		return kn_error(msg, KN_EINVAL, "%s: '%.64s' is not host:port",
		    k->name, v);
	return KN_OK;
}

static int
format_listen(const pr_key *k, const void *obj, char *buf, size_t len)
{
	const cf_config *c = obj;

	(void)k;
	/* an IPv6 address goes in brackets, as cf_parse_hostport reads it */
	snprintf(buf, len, strchr(c->listen_host, ':') != NULL ? "[%s]:%d" :
	    "%s:%d", c->listen_host, c->listen_port);
	return 0;
}

static const pr_key_ops listen_ops = { set_listen, format_listen };

/* update_chunk: a size (as max_body is written) with a range, checked
 * here so that the error names its line */
static int
chunk_in_range(size_t v, char *msg)
{
	if (v < CF_MIN_CHUNK || v > CF_MAX_CHUNK)
		return kn_error(msg, KN_EINVAL, "update_chunk: %zu bytes is not "
		    "from %zu (4 KiB) to %zu (1G)", v, (size_t)CF_MIN_CHUNK,
		    (size_t)CF_MAX_CHUNK);
	return KN_OK;
}

static int
set_chunk(const pr_key *k, void *obj, void *ctx, const char *v, char *msg)
{
	pr_key size = *k;
	int rc;

	(void)ctx;
	size.type = PR_KEY_SIZE;
	if ((rc = pr_key_set(&size, obj, NULL, v, msg)) != 0)
		return rc;
	return chunk_in_range(((cf_config *)obj)->update_chunk, msg);
}

static int
format_chunk(const pr_key *k, const void *obj, char *buf, size_t len)
{
	pr_key size = *k;

	size.type = PR_KEY_SIZE;
	return pr_key_format(&size, obj, buf, len);
}

static const pr_key_ops chunk_ops = { set_chunk, format_chunk };
static const char *const devices[] = { "auto", "cpu", "cuda", NULL };
static const char *const encodings[] = { "f32", "f16", "bf16", "int8",
	NULL };
static const char *const compressions[] = { "none", "zstd", NULL };
static const char *const yes_no[] = { "no", "yes", NULL };
static const char *const gemms[] = { "auto", "own", "blas", NULL };

#define FIELD(f) .offset = offsetof(cf_config, f), \
	.size = sizeof(((cf_config *)0)->f)

/* Every key of blocktrain.conf, before any section or under
 * [blocktraind]; blocktrain.conf(5) documents each with its default. */
const pr_key cf_keys[] = {
	{ .section = "", .name = "listen", .type = PR_KEY_CUSTOM,
	  FIELD(listen_host), .def_str = "127.0.0.1:7300", .ops = &listen_ops,
	  .doc = "the address the HTTP API listens on" },
	{ .section = "", .name = "advertise", .type = PR_KEY_STR,
	  FIELD(advertise), .def_str = "",
	  .doc = "the address peers reach this daemon by; empty: listen" },
	{ .section = "", .name = "spec", .type = PR_KEY_STR, FIELD(spec),
	  .def_str = "/etc/blocktrain/run.conf", .doc = "the run spec" },
	{ .section = "", .name = "peers", .type = PR_KEY_STR, FIELD(peers),
	  .def_str = "/etc/blocktrain/peers", .doc = "the peer list" },
	{ .section = "", .name = "state_dir", .type = PR_KEY_STR,
	  FIELD(state_dir), .def_str = "/var/lib/blocktrain",
	  .doc = "checkpoints, optimizer state, learning curve, journal, "
	  "pid file, and the log when detached" },
	{ .section = "", .name = "block", .type = PR_KEY_INT, FIELD(block),
	  .min = 1, .max = PR_MAX_BLOCKS, .def = 1,
	  .doc = "the block this daemon trains" },
	{ .section = "", .name = "device", .type = PR_KEY_CHOICE,
	  FIELD(device), .def_str = "auto", .choices = devices,
	  .doc = "the compute backend" },
	{ .section = "", .name = "threads", .type = PR_KEY_INT,
	  FIELD(threads), .min = 0, .max = 256, .def = 0,
	  .doc = "threads of the CPU backend; 0: KN_THREADS or all cores" },
	{ .section = "", .name = "gemm", .type = PR_KEY_CHOICE, FIELD(gemm),
	  .def_str = "auto", .choices = gemms,
	  .doc = "the CPU's GEMM: auto (the faster per shape, measured at "
	  "start), own or blas; SM_GEMM overrides" },
	{ .section = "", .name = "eval_every", .type = PR_KEY_INT,
	  FIELD(eval_every), .min = 0, .max = 1 << 30, .def = 200,
	  .doc = "steps between held-out shares; 0: none" },
	{ .section = "", .name = "eval_windows", .type = PR_KEY_INT,
	  FIELD(eval_windows), .min = 1, .max = 1 << 20, .def = 256,
	  .doc = "windows of the valid file a share is computed on" },
	{ .section = "", .name = "checkpoint_every", .type = PR_KEY_INT,
	  FIELD(checkpoint_every), .min = 1, .max = 1 << 30, .def = 100,
	  .doc = "steps between checkpoints of a block of one replica" },
	{ .section = "", .name = "strikes_quarantine", .type = PR_KEY_INT,
	  FIELD(strikes_quarantine), .min = 0, .max = STRIKES_MAX_THRESHOLD,
	  .def = 5,
	  .doc = "refused updates, checkpoints and claims of one peer after "
	  "which it is quarantined until the operator clears it; 0: never" },
	{ .section = "", .name = "overlap_rounds", .type = PR_KEY_CHOICE,
	  FIELD(overlap_rounds), .def_str = "no", .choices = yes_no,
	  .doc = "yes: with replicas, train on while a round's average is in "
	  "flight and apply it one round late (streaming DiLoCo)" },
	{ .section = "", .name = "update_encoding", .type = PR_KEY_CHOICE,
	  FIELD(update_encoding), .def_str = "f32", .choices = encodings,
	  .doc = "how the updates this daemon sends are encoded" },
	{ .section = "", .name = "update_compression", .type = PR_KEY_CHOICE,
	  FIELD(update_compression), .def_str = "none",
	  .choices = compressions,
	  .doc = "zstd: compress the updates this daemon sends" },
	{ .section = "", .name = "plan", .type = PR_KEY_STR, FIELD(plan),
	  .def_str = "", .flags = PR_KEY_PATH,
	  .doc = "the plan.json of shardmeter plan this run was started "
	  "from: its predictions are reported beside the measured figures; "
	  "empty: none" },
	{ .section = "", .name = "update_streams", .type = PR_KEY_INT,
	  FIELD(update_streams), .min = 1, .max = CF_MAX_STREAMS, .def = 1,
	  .doc = "parallel connections each update goes to a replica on, "
	  "as that many parts; 1: one POST" },
	{ .section = "", .name = "update_chunk", .type = PR_KEY_CUSTOM,
	  FIELD(update_chunk), .def_str = "1M", .ops = &chunk_ops,
	  .doc = "the smallest part of an update worth its own connection "
	  "(bytes, or with M or G)" },
	{ .section = "", .name = "max_body", .type = PR_KEY_SIZE,
	  FIELD(max_body), .def = 0,
	  .doc = "the largest request body; 0: the largest update + 1 MiB" },
	{ .section = "", .name = "max_connections", .type = PR_KEY_INT,
	  FIELD(max_connections), .min = 1, .max = 65536, .def = 256,
	  .doc = "HTTP connections held at once" },
	{ .section = "", .name = "max_connections_per_addr",
	  .type = PR_KEY_INT, FIELD(max_connections_per_addr), .min = 1,
	  .max = 65536, .def = 32,
	  .doc = "HTTP connections held at once from one address" },
	{ .section = "", .name = "max_buffered", .type = PR_KEY_SIZE,
	  FIELD(max_buffered), .def = 0,
	  .doc = "request bodies held at once, all connections together; "
	  "0: 4 x max_body" },
	{ .section = "", .name = "request_timeout_ms", .type = PR_KEY_INT,
	  FIELD(request_timeout_ms), .min = 100, .max = 3600000,
	  .def = 30000,
	  .doc = "time for a request's headers, and the period over which "
	  "a body's rate is measured" },
	{ .section = "", .name = "min_body_rate", .type = PR_KEY_INT,
	  FIELD(min_body_rate), .min = 1, .max = 1 << 30, .def = 1024,
	  .doc = "bytes per second below which a request body is cut off" },
	{ .section = "", .name = "peer_timeout_ms", .type = PR_KEY_INT,
	  FIELD(peer_timeout_ms), .min = 100, .max = 600000, .def = 5000,
	  .doc = "how long a peer has to answer a probe or a connection" },
	{ .section = "", .name = "insecure", .type = PR_KEY_CHOICE,
	  FIELD(insecure), .def_str = "no", .choices = yes_no,
	  .doc = "yes: plain TCP without TLS or peer ids, refused unless "
	  "listen is a loopback address" },
	{ .section = "", .name = "metrics_listen", .type = PR_KEY_STR,
	  FIELD(metrics_listen), .def_str = "",
	  .doc = "host:port of the plain-HTTP /metrics listener; empty: "
	  "127.0.0.1 on the API port + 2000; off: none" },
	{ .section = "", .name = "handshake_timeout_ms", .type = PR_KEY_INT,
	  FIELD(handshake_timeout_ms), .min = 100, .max = 600000,
	  .def = 5000,
	  .doc = "time for a connection's TLS handshake" },
	{ .section = "", .name = "header_timeout_ms", .type = PR_KEY_INT,
	  FIELD(header_timeout_ms), .min = 100, .max = 3600000,
	  .def = 10000,
	  .doc = "time for a request's headers (request_timeout_ms when "
	  "shorter)" },
	{ .section = "", .name = "max_connections_per_peer",
	  .type = PR_KEY_INT, FIELD(max_connections_per_peer), .min = 1,
	  .max = 65536, .def = 64,
	  .doc = "connections held at once by one daemon of the peer list "
	  "(a host of the pipeline host list)" },
	{ .section = "", .name = "max_connections_per_client",
	  .type = PR_KEY_INT, FIELD(max_connections_per_client), .min = 1,
	  .max = 65536, .def = 16,
	  .doc = "connections held at once by one client identity of the "
	  "list" },
	{ .section = "", .name = "max_requests_per_id", .type = PR_KEY_INT,
	  FIELD(max_requests_per_id), .min = 1, .max = 1 << 20, .def = 64,
	  .doc = "HTTP requests of one listed identity in flight at once" },
	{ .section = "", .name = "probe_compute_max_s", .type = PR_KEY_REAL,
	  FIELD(probe_compute_max_s), .min = 0.01, .max = 90, .def = 2,
	  .doc = "seconds x repeats of a compute probe at most (training "
	  "pauses about three times as long)" },
	{ .section = "", .name = "probe_compute_interval_s",
	  .type = PR_KEY_INT, FIELD(probe_compute_interval_s), .min = 1,
	  .max = 86400, .def = 60,
	  .doc = "seconds from one compute probe's start to the next" },
	{ .section = "", .name = "pipeline_listen", .type = PR_KEY_STR,
	  FIELD(pipeline_listen), .def_str = "",
	  .doc = "this host's address in the pipeline host list (-S)" },
	{ .section = "", .name = "pipeline_hosts", .type = PR_KEY_STR,
	  FIELD(pipeline_hosts), .def_str = "/etc/blocktrain/pipeline",
	  .doc = "the pipeline host list" },
	{ .section = "", .name = "pipeline_next", .type = PR_KEY_STR,
	  FIELD(pipeline_next), .def_str = "",
	  .doc = "the next host's address when not the list's; empty: the "
	  "list's" },
	{ .section = "", .name = "pipeline_timeout_ms", .type = PR_KEY_INT,
	  FIELD(pipeline_timeout_ms), .min = 100, .max = 3600000,
	  .def = 10000, .doc = "how long a request may go without progress" },
	{ .section = "", .name = "pipeline_max_frame", .type = PR_KEY_MIB,
	  FIELD(pipeline_max_frame), .min = 1, .max = 1024, .def = 16,
	  .doc = "the largest frame a host reads, in MiB" },
	{ .section = "", .name = "pipeline_batch", .type = PR_KEY_INT,
	  FIELD(pipeline_batch), .min = 1, .max = 256, .def = 16,
	  .doc = "the most windows of one forward pass" },
	{ .section = "", .name = "pipeline_cache_mb", .type = PR_KEY_INT,
	  FIELD(pipeline_cache_mb), .min = 1, .max = 1 << 20, .def = 1024,
	  .doc = "the memory of all KV caches, in MiB" },
	{ .section = "", .name = "pipeline_idle_s", .type = PR_KEY_INT,
	  FIELD(pipeline_idle_s), .min = 1, .max = 86400, .def = 60,
	  .doc = "seconds after which an unused KV cache is evicted" },
	{ .section = "", .name = "pipeline_open_entry", .type = PR_KEY_CHOICE,
	  FIELD(pipeline_open_entry), .def_str = "no", .choices = yes_no,
	  .doc = "yes: the entry takes requests from any TLS client, not "
	  "only the host list's clients" },
	{ .section = "", .name = "pipeline_client_requests",
	  .type = PR_KEY_INT, FIELD(pipeline_client_requests), .min = 1,
	  .max = 65536, .def = 4,
	  .doc = "requests in flight per connection of a client the host "
	  "list does not name (open entry)" },
	{ .section = "", .name = "pipeline_client_rate", .type = PR_KEY_INT,
	  FIELD(pipeline_client_rate), .min = 1024, .max = 1 << 30,
	  .def = 1048576,
	  .doc = "bytes per second read from each connection of a client the "
	  "host list does not name (open entry)" },
	{ .section = "", .name = "model_name", .type = PR_KEY_STR,
	  FIELD(model_name), .def_str = "",
	  .doc = "the model's name in completions and GET /v1/models; "
	  "empty: one made from the spec" },
	{ .section = "", .name = "mirrors", .type = PR_KEY_INT,
	  FIELD(mirrors), .min = 0, .max = CF_MAX_MIRRORS, .def = 1,
	  .doc = "hosts of other blocks that keep a copy of each block's "
	  "newest checkpoint and optimizer state; 0: none" },
	{ .section = "", .name = "mirror_budget", .type = PR_KEY_SIZE,
	  FIELD(mirror_budget), .def = 4.0 * 1024 * 1024 * 1024,
	  .doc = "the disk this host may fill with other blocks' copies "
	  "(bytes, or with M or G)" },
};

#define NKEYS (sizeof(cf_keys) / sizeof(cf_keys[0]))
const size_t cf_nkeys = NKEYS;

void
cf_defaults(cf_config *c)
{
	memset(c, 0, sizeof(*c));
	pr_key_defaults(cf_keys, NKEYS, c);
}

struct cfg_ctx {
	cf_config *c;
	char msg[PR_ERR_LEN];
	int failed;
};

static int
bad(struct cfg_ctx *x, const char *fmt, ...)
{
	va_list ap;

	if (!x->failed) {
		va_start(ap, fmt);
		vsnprintf(x->msg, sizeof(x->msg), fmt, ap);
		va_end(ap);
	}
	x->failed = 1;
	return 0;
}

static int
on_key(void *user, const char *sec, const char *key, const char *v)
{
	struct cfg_ctx *x = user;
	const pr_key *k;

	if (x->failed)
		return 0;
	if (sec[0] != '\0' && strcmp(sec, "blocktraind") != 0)
		return bad(x, "unknown section [%s] (keys go before any section "
		    "or under [blocktraind])", sec);
	if ((k = pr_key_find(cf_keys, NKEYS, "", key)) == NULL)
		return bad(x, "unknown key '%s'", key);
	if (pr_key_set(k, x->c, x, v, x->msg) != 0) {
		x->failed = 1;
		return 0;
	}
	return 1;
}

int
cf_validate(const cf_config *c, char *err)
{
	int rc;

	if ((rc = pr_key_check_all(cf_keys, NKEYS, c, err)) != 0)
		return rc;
	/* a custom row has no range the table checks */
	return chunk_in_range(c->update_chunk, err);
}

int
cf_print(FILE *f, const cf_config *c)
{
	/* the section is optional in the file; naming it says what the keys
	 * are to a reader of the daemon's log */
	fprintf(f, "[blocktraind]\n");
	return pr_key_print(cf_keys, NKEYS, c, f);
}

/* Keys marked PR_KEY_PATH name files beside the configuration: a
 * relative value is taken from the configuration file's folder. */
static int
beside(cf_config *c, const char *path, char *err)
{
	char folder[PR_PATH_LEN], value[PR_PATH_LEN];
	size_t i;

	snprintf(folder, sizeof(folder), "%s", path);
	for (i = 0; i < NKEYS; i++) {
		const pr_key *k = &cf_keys[i];
		char *v = (char *)c + k->offset, *at;

		if (!(k->flags & PR_KEY_PATH) || v[0] == '\0' || v[0] == '/')
			continue;
		snprintf(value, sizeof(value), "%s", v);
		at = dirname(folder);
		if (strcmp(at, ".") != 0 && (size_t)snprintf(v, k->size,
		    "%s/%s", at, value) >= k->size)
			return kn_error(err, KN_EINVAL, "%.200s: %s: path too "
			    "long", path, k->name);
		snprintf(folder, sizeof(folder), "%s", path);
	}
	return KN_OK;
}

int
cf_load(cf_config *c, const char *path, char *err)
{
	struct cfg_ctx x = { .c = c };
	FILE *f = fopen(path, "r");
	int line, rc;

	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open %s: %s", path,
		    strerror(errno));
	line = ini_parse_file(f, on_key, &x);
	fclose(f);
	if (x.failed)
		return kn_error(err, KN_EINVAL, "%.120s:%d: %s", path, line,
		    x.msg);
	if (line != 0)
		return kn_error(err, KN_EINVAL, "%.120s:%d: not 'key = value'",
		    path, line);
	if ((rc = beside(c, path, err)) != 0)
		return rc;
	return cf_validate(c, err);
}
