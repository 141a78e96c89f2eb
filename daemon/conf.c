/* Reading blocktrain.conf with inih.  Unknown keys are errors: a typo in a
 * daemon's configuration should stop it at start, not be ignored. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/conf.h"
#include "kernels/error.h"

void
sm_config_defaults(sm_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen_host, sizeof(c->listen_host), "127.0.0.1");
	c->listen_port = 7300;
	snprintf(c->spec, sizeof(c->spec), "/etc/blocktrain/run.conf");
	snprintf(c->peers, sizeof(c->peers), "/etc/blocktrain/peers");
	snprintf(c->state_dir, sizeof(c->state_dir), "/var/lib/blocktrain");
	c->block = 1;
	snprintf(c->device, sizeof(c->device), "auto");
	c->eval_every = 200;
	c->eval_windows = 256;
	c->checkpoint_every = 100;
	snprintf(c->update_encoding, sizeof(c->update_encoding), "f32");
	c->peer_timeout_ms = 5000;
	snprintf(c->pipeline_hosts, sizeof(c->pipeline_hosts),
	    "/etc/blocktrain/pipeline");
	c->pipeline_timeout_ms = 10000;
	c->pipeline_max_frame = (size_t)16 << 20;
	c->pipeline_batch = 16;
	c->pipeline_cache_mb = 1024;
	c->pipeline_idle_s = 60;
}

int
sm_parse_hostport(const char *s, char *host, size_t hostlen, int *port)
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
	if (n == 0 || n >= hostlen)
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
sm_list_line(char *line)
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

struct cfg_ctx {
	sm_config *c;
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
int_value(struct cfg_ctx *x, const char *key, const char *v, long lo,
    long hi, int *out)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi)
		return bad(x, "%s: '%s' is not an integer from %ld to %ld", key,
		    v, lo, hi);
	*out = (int)n;
	return 1;
}

static int
str_value(struct cfg_ctx *x, const char *key, const char *v, char *out,
    size_t len)
{
	if (strlen(v) >= len)
		return bad(x, "%s: value too long", key);
	memcpy(out, v, strlen(v) + 1);
	return 1;
}

static int
on_key(void *user, const char *sec, const char *key, const char *v)
{
	struct cfg_ctx *x = user;
	sm_config *c = x->c;

	if (x->failed)
		return 0;
	if (sec[0] != '\0' && strcmp(sec, "blocktraind") != 0)
		return bad(x, "unknown section [%s] (keys go before any section "
		    "or under [blocktraind])", sec);
	if (strcmp(key, "listen") == 0) {
		if (sm_parse_hostport(v, c->listen_host, sizeof(c->listen_host),
		    &c->listen_port) != 0)
			return bad(x, "listen: '%s' is not host:port", v);
		return 1;
	}
	if (strcmp(key, "advertise") == 0)
		return str_value(x, key, v, c->advertise, sizeof(c->advertise));
	if (strcmp(key, "spec") == 0)
		return str_value(x, key, v, c->spec, sizeof(c->spec));
	if (strcmp(key, "peers") == 0)
		return str_value(x, key, v, c->peers, sizeof(c->peers));
	if (strcmp(key, "state_dir") == 0)
		return str_value(x, key, v, c->state_dir, sizeof(c->state_dir));
	if (strcmp(key, "block") == 0)
		return int_value(x, key, v, 1, PR_MAX_BLOCKS, &c->block);
	if (strcmp(key, "device") == 0)
		return str_value(x, key, v, c->device, sizeof(c->device));
	if (strcmp(key, "threads") == 0)
		return int_value(x, key, v, 0, 256, &c->threads);
	if (strcmp(key, "eval_every") == 0)
		return int_value(x, key, v, 0, 1 << 30, &c->eval_every);
	if (strcmp(key, "eval_windows") == 0)
		return int_value(x, key, v, 1, 1 << 20, &c->eval_windows);
	if (strcmp(key, "checkpoint_every") == 0)
		return int_value(x, key, v, 1, 1 << 30, &c->checkpoint_every);
	if (strcmp(key, "update_encoding") == 0)
		return str_value(x, key, v, c->update_encoding,
		    sizeof(c->update_encoding));
	if (strcmp(key, "peer_timeout_ms") == 0)
		return int_value(x, key, v, 100, 600000, &c->peer_timeout_ms);
	if (strcmp(key, "pipeline_listen") == 0)
		return str_value(x, key, v, c->pipeline_listen,
		    sizeof(c->pipeline_listen));
	if (strcmp(key, "pipeline_next") == 0)
		return str_value(x, key, v, c->pipeline_next,
		    sizeof(c->pipeline_next));
	if (strcmp(key, "pipeline_hosts") == 0)
		return str_value(x, key, v, c->pipeline_hosts,
		    sizeof(c->pipeline_hosts));
	if (strcmp(key, "pipeline_timeout_ms") == 0)
		return int_value(x, key, v, 100, 3600000,
		    &c->pipeline_timeout_ms);
	if (strcmp(key, "pipeline_max_frame") == 0) {
		int mb;

		if (!int_value(x, key, v, 1, 1024, &mb))
			return 0;
		c->pipeline_max_frame = (size_t)mb << 20;
		return 1;
	}
	if (strcmp(key, "pipeline_batch") == 0)
		return int_value(x, key, v, 1, 256, &c->pipeline_batch);
	if (strcmp(key, "pipeline_cache_mb") == 0)
		return int_value(x, key, v, 1, 1 << 20, &c->pipeline_cache_mb);
	if (strcmp(key, "pipeline_idle_s") == 0)
		return int_value(x, key, v, 1, 86400, &c->pipeline_idle_s);
	if (strcmp(key, "max_body") == 0) {
		char *end;
		unsigned long long n = strtoull(v, &end, 10);

		if (end == v || (*end && strcmp(end, "M") && strcmp(end, "G")))
			return bad(x, "max_body: '%s' is not a size (bytes, or "
			    "with M or G)", v);
		c->max_body = (size_t)n << (*end == 'M' ? 20 : *end == 'G' ?
		    30 : 0);
		return 1;
	}
	return bad(x, "unknown key '%s'", key);
}

int
sm_config_validate(const sm_config *c, char *err)
{
	if (strcmp(c->device, "auto") && strcmp(c->device, "cpu") &&
	    strcmp(c->device, "cuda"))
		return kn_error(err, KN_EINVAL, "device: '%s' is not auto, cpu "
		    "or cuda", c->device);
	if (strcmp(c->update_encoding, "f32") &&
	    strcmp(c->update_encoding, "f16") &&
	    strcmp(c->update_encoding, "bf16"))
		return kn_error(err, KN_EINVAL, "update_encoding: '%s' is not "
		    "f32, f16 or bf16", c->update_encoding);
	return KN_OK;
}

int
sm_config_load(sm_config *c, const char *path, char *err)
{
	struct cfg_ctx x = { .c = c };
	FILE *f = fopen(path, "r");
	int line;

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
	return sm_config_validate(c, err);
}
