/* The DevTools protocol over a pipe (cdp.h): one command at a time, the
 * events Chromium sends between answers skipped. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "tests/cdp.h"

struct cdp {
	pid_t pid;
	int to, from;           /* its fd 3 and fd 4, from our side */
	char *buf;              /* what came in and was not yet a message */
	size_t len, cap;
	int next_id;
	char session[128];
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

const char *
cdp_browser(void)
{
	static const char *const names[] = { "chromium", "chromium-browser" };
	static char found[512];
	const char *env = getenv("CHROMIUM"), *path = getenv("PATH");
	size_t k;

	if (env != NULL && env[0] != '\0')
		return access(env, X_OK) == 0 ? env : NULL;
	for (k = 0; path != NULL && k < sizeof(names) / sizeof(names[0]);
	    k++) {
		const char *p = path;

		while (*p) {
			size_t n = strcspn(p, ":");

			snprintf(found, sizeof(found), "%.*s/%s", (int)n, p,
			    names[k]);
			if (n > 0 && access(found, X_OK) == 0)
				return found;
			p += n + (p[n] == ':');
		}
	}
	return NULL;
}

/* The next message, parsed, waiting up to limit seconds; NULL if none. */
static json_t *
next_message(cdp *c, double limit)
{
	double end = now_s() + limit;

	for (;;) {
		char *nul = c->len ? memchr(c->buf, '\0', c->len) : NULL;
		struct pollfd pfd = { .fd = c->from, .events = POLLIN };
		double left = end - now_s();
		ssize_t n;

		if (nul != NULL) {
			size_t used = (size_t)(nul - c->buf) + 1;
			json_t *m = json_loads(c->buf, 0, NULL);

			memmove(c->buf, c->buf + used, c->len - used);
			c->len -= used;
			return m;
		}
		if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
			return NULL;
		if (c->cap - c->len < 65536) {
			char *grown = realloc(c->buf, c->cap * 2 + 65536);

			if (grown == NULL)
				return NULL;
			c->buf = grown;
			c->cap = c->cap * 2 + 65536;
		}
		n = read(c->from, c->buf + c->len, c->cap - c->len - 1);
		if (n <= 0)
			return NULL;
		c->len += (size_t)n;
	}
}

/* Sends method with params (taken; NULL: {}) in the page's session
 * when there is one; its "result" (the caller's), or NULL. */
static json_t *
call(cdp *c, const char *method, json_t *params, double limit)
{
	json_t *m = json_pack("{s:i,s:s,s:o}", "id", ++c->next_id, "method",
	    method, "params", params ? params : json_object()), *r;
	char *text;
	size_t off = 0, len;
	double end = now_s() + limit;

	if (c->session[0])
		json_object_set_new(m, "sessionId", json_string(c->session));
	text = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	if (text == NULL)
		return NULL;
	len = strlen(text) + 1;         /* the NUL ends the message */
	while (off < len) {
		ssize_t n = write(c->to, text + off, len - off);

		if (n <= 0 && errno != EINTR) {
			free(text);
			return NULL;
		}
		off += n > 0 ? (size_t)n : 0;
	}
	free(text);
	while ((r = next_message(c, end - now_s())) != NULL) {
		json_t *id = json_object_get(r, "id");

		if (json_integer_value(id) == c->next_id) {
			json_t *res = json_incref(json_object_get(r, "result"));

			json_decref(r);
			return res;
		}
		json_decref(r);
	}
	return NULL;
}

cdp *
cdp_open(const char *browser, const char *profile_dir, const char *log,
    const char *url, int width, int height, char *err)
{
	int to[2], from[2];
	char prof[600], size[64];
	json_t *r;
	cdp *c;

	if ((c = calloc(1, sizeof(*c))) == NULL || pipe(to) != 0 ||
	    pipe(from) != 0) {
		snprintf(err, 256, "no memory or no pipes");
		free(c);
		return NULL;
	}
	snprintf(prof, sizeof(prof), "--user-data-dir=%s", profile_dir);
	snprintf(size, sizeof(size), "--window-size=%d,%d", width, height);
	if ((c->pid = fork()) == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/* to[0] becomes its fd 3, from[1] its fd 4 */
		dup2(to[0], 10);
		dup2(from[1], 11);
		dup2(10, 3);
		dup2(11, 4);
		execl(browser, browser, "--headless", "--no-sandbox",
		    "--disable-gpu", "--no-first-run", "--disable-extensions",
		    "--remote-debugging-pipe", prof, size, "about:blank",
		    (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	c->to = to[1];
	c->from = from[0];
	signal(SIGPIPE, SIG_IGN);
	r = call(c, "Target.createTarget", json_pack("{s:s}", "url",
	    "about:blank"), 30);
	if (r == NULL) {
		snprintf(err, 256, "%s did not answer on its DevTools pipe "
		    "(see %s)", browser, log);
		cdp_close(c);
		return NULL;
	}
	{
		json_t *a = call(c, "Target.attachToTarget", json_pack(
		    "{s:s,s:b}", "targetId", json_string_value(json_object_get(
		    r, "targetId")), "flatten", 1), 10);

		json_decref(r);
		if (a == NULL || json_string_value(json_object_get(a,
		    "sessionId")) == NULL) {
			snprintf(err, 256, "cannot attach to the page");
			json_decref(a);
			cdp_close(c);
			return NULL;
		}
		snprintf(c->session, sizeof(c->session), "%s",
		    json_string_value(json_object_get(a, "sessionId")));
		json_decref(a);
	}
	/* the viewport exactly (the window's size includes no frame in
	 * headless mode, but a scale factor may come from the display),
	 * before the page lays itself out */
	r = call(c, "Emulation.setDeviceMetricsOverride", json_pack(
	    "{s:i,s:i,s:f,s:b}", "width", width, "height", height,
	    "deviceScaleFactor", 1.0, "mobile", 0), 10);
	if (r != NULL) {
		json_decref(r);
		r = call(c, "Page.navigate", json_pack("{s:s}", "url", url),
		    30);
	}
	if (r == NULL) {
		snprintf(err, 256, "cannot size the page or open %s", url);
		cdp_close(c);
		return NULL;
	}
	json_decref(r);
	return c;
}

char *
cdp_eval(cdp *c, const char *expr)
{
	json_t *r = call(c, "Runtime.evaluate", json_pack("{s:s,s:b}",
	    "expression", expr, "returnByValue", 1), 10);
	const char *v = json_string_value(json_object_get(json_object_get(r,
	    "result"), "value"));
	char *out = v ? strdup(v) : NULL;

	json_decref(r);
	return out;
}

int
cdp_screenshot(cdp *c, const char *path)
{
	json_t *m = call(c, "Page.getLayoutMetrics", NULL, 10);
	json_t *view = json_object_get(m, "cssLayoutViewport");
	double w = json_number_value(json_object_get(view, "clientWidth"));
	double h = json_number_value(json_object_get(view, "clientHeight"));
	/* where the body ends: the document is at least the viewport */
	char *end = cdp_eval(c, "String(Math.ceil(document.body."
	    "getBoundingClientRect().bottom))");
	double page = end ? atof(end) : 0;
	json_t *r;

	free(end);
	if (page > 0 && page < h)
		h = page;
	r = call(c, "Page.captureScreenshot", w > 0 && h > 0 ? json_pack(
	    "{s:s,s:{s:i,s:i,s:f,s:f,s:i}}", "format", "png", "clip", "x", 0,
	    "y", 0, "width", w, "height", h, "scale", 1) : json_pack("{s:s}",
	    "format", "png"), 20);
	json_decref(m);
	const char *b64 = json_string_value(json_object_get(r, "data"));
	size_t n = b64 ? strlen(b64) : 0;
	unsigned char *png = malloc(n / 4 * 3 + 3);
	int len, rc = -1;
	FILE *f;

	if (b64 != NULL && png != NULL &&
	    (len = EVP_DecodeBlock(png, (const unsigned char *)b64,
	    (int)n)) > 0 && (f = fopen(path, "wb")) != NULL) {
		/* DecodeBlock counts the padding as zero bytes */
		len -= (n > 0 && b64[n - 1] == '=') + (n > 1 &&
		    b64[n - 2] == '=');
		rc = fwrite(png, 1, (size_t)len, f) == (size_t)len ? 0 : -1;
		if (fclose(f) != 0)
			rc = -1;
	}
	free(png);
	json_decref(r);
	return rc;
}

void
cdp_close(cdp *c)
{
	int status, i;

	if (c == NULL)
		return;
	if (c->pid > 0) {
		c->session[0] = '\0';
		json_decref(call(c, "Browser.close", NULL, 3));
		for (i = 0; i < 50 && waitpid(c->pid, &status, WNOHANG) == 0;
		    i++)
			usleep(100000);
		if (i == 50) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &status, 0);
		}
	}
	close(c->to);
	close(c->from);
	free(c->buf);
	free(c);
}
