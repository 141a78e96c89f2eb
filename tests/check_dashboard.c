/* shardmeter dashboard end to end: a small run of real daemons on loopback
 * over mutual TLS (block 1 on two replicas, block 2 on one, and a listed
 * daemon that never starts), the dashboard polling them, and its data
 * checked against what the daemons themselves report: the losses the
 * test saw at each step, the final statuses, the composed bound summed
 * here.  Then the page in a headless Chromium 1400 pixels wide (skipped
 * without one): its curves hold the same points, the unreachable daemon
 * is named, every chart has its own axes with whole tick labels in one
 * format, the panels use the page's width, and a screenshot is saved.
 * Two more pages are drawn from statuses the test scripts (a long run
 * of six daemons, and one sample of each): how the page reads at 3000
 * steps, and that a series of one point shows. */
#include "config.h"

#include <check.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>

#include "daemon/cli/dashboard_history.h"
#include "tests/cdp.h"
#include "tests/testutil.h"

#define LIVE 3                  /* daemons started */
#define STEPS 300
#define MAXSTEP (STEPS + 1)
#define VIEW_W 1400             /* the browser's viewport, CSS pixels */
#define VIEW_H 2000

static char dir[64];
static int base_port, dash_port;
static pid_t pids[LIVE], dash_pid;
static const int block_of[LIVE] = { 1, 1, 2 };
/* what the test saw each daemon report at each step (NAN: not seen),
 * and when it first saw it, ms since the epoch */
static double seen_loss[LIVE][MAXSTEP], seen_at[LIVE][MAXSTEP];

static double
wall_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1e3 + tv.tv_usec / 1e3;
}

static void
setup(void)
{
	int i, j;

	tu_temp_dir(dir, sizeof(dir), "check_dashboard");
	tu_trust_init(dir);
	base_port = tu_port_base(LIVE + 3);
	dash_port = base_port + LIVE + 2;
	for (i = 0; i < LIVE; i++)
		for (j = 0; j < MAXSTEP; j++)
			seen_loss[i][j] = seen_at[i][j] = NAN;
}

static void
teardown(void)
{
	int i;

	for (i = 0; i < LIVE; i++)
		tu_stop(&pids[i], SIGKILL, 5);
	tu_stop(&dash_pid, SIGKILL, 5);
	tu_remove_dir(dir);
}

/* peers: the live daemons; dash_peers: the same and a block 2 replica
 * listed at a port where nothing listens. */
static void
write_peers(void)
{
	char text[4096] = "", state[128];
	int i;

	for (i = 0; i < LIVE; i++) {
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, block_of[i],
		    state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "peers", text);
	snprintf(state, sizeof(state), "%s/never", dir);
	tu_peer_line(text, sizeof(text), base_port + LIVE, 2, state);
	tu_write_file(dir, "dash_peers", text);
}

static void
start_run(void)
{
	char listen[32], blk[8], log[128], peers[128], spec[128];
	char conf[128], state[128];
	int i;

	for (i = 0; i < LIVE; i++) {
		snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
		snprintf(blk, sizeof(blk), "%d", block_of[i]);
		snprintf(log, sizeof(log), "%s/log%d", dir, i);
		snprintf(peers, sizeof(peers), "%s/peers", dir);
		snprintf(spec, sizeof(spec), "%s/run.conf", dir);
		snprintf(conf, sizeof(conf), "%s/daemon.conf", dir);
		snprintf(state, sizeof(state), "%s/state%d", dir, i);
		pids[i] = tu_daemon_start(log, base_port + i, "-f", "-c", conf,
		    "-l", listen, "-b", blk, "-s", state, "-p", peers, "-r",
		    spec, "-D", "cpu", "-t", "1", (char *)NULL);
	}
}

static void
start_dashboard(const char *interval)
{
	char peers[128], listen[32], log[128];
	const char *argv[] = { "shardmeter", "dashboard", "--peers", peers,
	    "--listen", listen, "--interval", interval, NULL };

	snprintf(peers, sizeof(peers), "%s/dash_peers", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", dash_port);
	snprintf(log, sizeof(log), "%s/dashboard.log", dir);
	dash_pid = tu_spawn(log, tu_shardmeter(), argv);
	ck_assert_msg(tu_wait_port(dash_port, dash_pid, 10),
	    "the dashboard did not listen (see %s)", log);
}

/* Polls every daemon until all are done, noting each step's loss. */
static void
follow_run(double limit)
{
	double end = wall_ms() + limit * 1e3;
	int i, done = 0;

	while (done < LIVE && wall_ms() < end) {
		done = 0;
		for (i = 0; i < LIVE; i++) {
			json_t *st = tu_status(base_port + i);
			long long s;

			if (st == NULL)
				continue;
			s = json_integer_value(json_object_get(st, "step"));
			if (s >= 0 && s < MAXSTEP && isnan(seen_at[i][s])) {
				seen_at[i][s] = wall_ms();
				seen_loss[i][s] = json_number_value(
				    json_object_get(st, "loss"));
			}
			done += strcmp(json_string_value(json_object_get(st,
			    "state")), "done") == 0;
			json_decref(st);
		}
		usleep(20000);
	}
	ck_assert_msg(done == LIVE, "the run was not done within %.0f s",
	    limit);
}

static json_t *
dashboard_get(const char *path)
{
	tu_body b = { 0 };
	json_t *o;

	ck_assert_int_eq(tu_http_get(dash_port, path, &b), 200);
	o = json_loads(b.data, 0, NULL);
	free(b.data);
	ck_assert_ptr_nonnull(o);
	return o;
}

static json_t *
at(json_t *o, const char *a, const char *b, const char *c)
{
	o = json_object_get(o, a);
	if (b != NULL)
		o = json_object_get(o, b);
	if (c != NULL)
		o = json_object_get(o, c);
	return o;
}

static json_t *
last(json_t *col)
{
	return json_array_get(col, json_array_size(col) - 1);
}

/* The figures of a final status the dashboard must repeat unchanged (the
 * "other" bytes move with every status request, ours included). */
static void
same_status(json_t *mine, json_t *theirs, int i)
{
	static const char *const keys[] = { "run_id", "state", "step",
	    "steps", "round", "loss", "positions_per_s", "steps_per_s",
	    "heldout_share", "heldout_share_step", "checkpoint" };
	static const char *const bytes[] = { "checkpoint", "update" };
	size_t k;

	for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
		ck_assert_msg(json_equal(json_object_get(mine, keys[k]),
		    json_object_get(theirs, keys[k])), "daemon %d: %s differs",
		    i, keys[k]);
	for (k = 0; k < 2; k++) {
		ck_assert(json_equal(at(mine, "bytes", "out", bytes[k]),
		    at(theirs, "bytes", "out", bytes[k])));
		ck_assert(json_equal(at(mine, "bytes", "in", bytes[k]),
		    at(theirs, "bytes", "in", bytes[k])));
	}
}

/* Whether daemon i's mirrors hold the final checkpoint of every block
 * they keep a copy of, with its optimizer state, by the statuses st of
 * all live daemons (the final checkpoint of a block as one of its hosts
 * reports it). */
static int
mirrors_caught_up(json_t **st, int i, int *copies)
{
	json_t *m = json_object_get(st[i], "mirrors"), *b, *h;
	size_t k, l;

	json_array_foreach(json_object_get(m, "blocks"), k, b) {
		int j, held = 0;

		json_array_foreach(json_object_get(m, "held"), l, h)
			for (j = 0; j < LIVE; j++)
				held |= block_of[j] == json_integer_value(b) &&
				    json_equal(json_object_get(h, "block"), b) &&
				    json_equal(json_object_get(h, "sha256"),
				    at(st[j], "checkpoint", "sha256", NULL)) &&
				    json_integer_value(json_object_get(h,
				    "optimizer_bytes")) > 0;
		if (!held)
			return 0;
		(*copies)++;
	}
	return 1;
}

/* Waits until the run is idle: every daemon done, and every mirror
 * holding its blocks' final checkpoints.  "done" alone is not idle: a
 * host that mirrors a block learns of the block's last checkpoint from
 * its peer watch, a poll later, and only then fetches it and its
 * optimizer state, moving the checkpoint bytes of both daemons after
 * every one of them said it was done; a comparison of two snapshots
 * taken about then failed now and then.  Once each copy is the final
 * one, nothing is left to fetch. */
static void
wait_idle(double limit)
{
	double end = wall_ms() + limit * 1e3;
	int idle = 0, copies = 0;

	while (!idle && wall_ms() < end) {
		json_t *st[LIVE];
		int i;

		copies = 0;
		for (i = 0; i < LIVE; i++)
			st[i] = tu_status(base_port + i);
		idle = 1;
		for (i = 0; i < LIVE; i++)
			idle &= st[i] != NULL && strcmp(json_string_value(
			    json_object_get(st[i], "state")) ?
			    json_string_value(json_object_get(st[i], "state")) :
			    "", "done") == 0;
		for (i = 0; i < LIVE && idle; i++)
			idle &= mirrors_caught_up(st, i, &copies);
		for (i = 0; i < LIVE; i++)
			json_decref(st[i]);
		if (!idle)
			usleep(100000);
	}
	ck_assert_msg(idle, "the run was not idle %.0f s after it was done "
	    "(a mirror without the final checkpoint)", limit);
	fprintf(stderr, "# the run is idle: %d mirror copies hold their "
	    "block's final checkpoint\n", copies);
	/* the test's run has mirrors: a check of none would prove nothing */
	ck_assert_int_gt(copies, 0);
}

/* Waits until the dashboard's latest status of every live daemon shows
 * the checkpoint and update bytes the daemon reports now.  Called once
 * the run is idle (wait_idle), when those bytes no longer move: what is
 * left is the dashboard's next poll. */
static void
settle(double limit)
{
	static const char *const kinds[] = { "checkpoint", "update" };
	static const char *const dirs[] = { "in", "out" };
	double end = wall_ms() + limit * 1e3;
	int same = 0;

	while (!same && wall_ms() < end) {
		json_t *latest = dashboard_get("/v1/dashboard/latest");
		int i, k;

		same = 1;
		for (i = 0; i < LIVE && same; i++) {
			json_t *st = tu_status(base_port + i);
			json_t *mine = at(json_array_get(json_object_get(latest,
			    "daemons"), i), "status", NULL, NULL);

			for (k = 0; k < 4 && st != NULL; k++)
				same &= json_equal(at(mine, "bytes", dirs[k / 2],
				    kinds[k % 2]), at(st, "bytes", dirs[k / 2],
				    kinds[k % 2]));
			same &= st != NULL;
			json_decref(st);
		}
		json_decref(latest);
		if (!same)
			usleep(200000);
	}
	ck_assert_msg(same, "the daemons' bytes still moved %.0f s after the "
	    "run", limit);
}

/* Daemon i's history against what the test saw and its final status;
 * returns the steps both saw. */
static int
check_series(json_t *d, json_t *final, int i)
{
	json_t *s = json_object_get(d, "series"), *p;
	json_t *steps = json_object_get(s, "step");
	json_t *loss = json_object_get(s, "loss");
	long long prev = -1;
	int both = 0;
	size_t j;

	ck_assert_uint_gt(json_array_size(steps), 1);
	ck_assert_uint_eq(json_array_size(steps), json_array_size(loss));
	for (j = 0; j < json_array_size(steps); j++) {
		long long st = json_integer_value(json_array_get(steps, j));

		ck_assert_int_ge(st, prev);
		prev = st;
		if (st < MAXSTEP && !isnan(seen_loss[i][st])) {
			ck_assert_double_eq(json_number_value(json_array_get(
			    loss, j)), seen_loss[i][st]);
			both++;
		}
	}
	ck_assert(json_equal(last(steps), json_object_get(final, "step")));
	ck_assert(json_equal(last(loss), json_object_get(final, "loss")));
	ck_assert(json_equal(last(at(d, "rounds", "round", NULL)),
	    json_object_get(final, "round")));
	/* each link's update bytes, as the daemon meters them */
	json_array_foreach(json_object_get(final, "peers"), j, p) {
		const char *addr = json_string_value(json_object_get(p,
		    "addr"));

		if (json_is_true(json_object_get(p, "self")))
			continue;
		ck_assert_msg(json_equal(last(at(s, "links", addr,
		    "out_update")), at(p, "bytes", "out", "update")),
		    "daemon %d, link to %s", i, addr);
	}
	return both;
}

/* The data endpoints against the daemons' own statuses; the composed
 * bound summed here into *bound. */
static void
check_endpoints(double *bound)
{
	json_t *all = dashboard_get("/v1/dashboard"), *d, *shares;
	json_t *latest = dashboard_get("/v1/dashboard/latest");
	double share[3] = { 0 };
	long long share_at[3] = { -1, -1, -1 };
	int i, both = 0;

	ck_assert_uint_eq(json_array_size(json_object_get(all, "daemons")),
	    LIVE + 1);
	for (i = 0; i < LIVE; i++) {
		json_t *final = tu_status(base_port + i);
		int b = block_of[i];

		ck_assert_ptr_nonnull(final);
		d = json_array_get(json_object_get(all, "daemons"), i);
		ck_assert(json_is_true(json_object_get(d, "up")));
		same_status(json_object_get(d, "status"), final, i);
		same_status(at(json_array_get(json_object_get(latest,
		    "daemons"), i), "status", NULL, NULL), final, i);
		both += check_series(d, final, i);
		if (json_integer_value(json_object_get(final,
		    "heldout_share_step")) > share_at[b]) {
			share_at[b] = json_integer_value(json_object_get(final,
			    "heldout_share_step"));
			share[b] = json_number_value(json_object_get(final,
			    "heldout_share"));
		}
		json_decref(final);
	}
	fprintf(stderr, "# dashboard: %d (step, loss) points also seen by "
	    "the test\n", both);
	ck_assert_int_ge(both, LIVE);
	/* the block's last share and the bound, as status composes them */
	shares = json_object_get(all, "shares");
	ck_assert_double_eq(json_number_value(last(at(shares, "1", "value",
	    NULL))), share[1]);
	ck_assert_double_eq(json_number_value(last(at(shares, "2", "value",
	    NULL))), share[2]);
	*bound = share[1] + share[2];
	ck_assert_double_eq_tol(json_number_value(json_object_get(all,
	    "bound_latest")), *bound, 1e-12);
	ck_assert_double_eq_tol(json_number_value(last(at(all, "bound",
	    "value", NULL))), *bound, 1e-12);
	ck_assert_int_eq(json_integer_value(last(at(all, "bound", "step",
	    NULL))), STEPS);
	/* the daemon that never started */
	d = json_array_get(json_object_get(all, "daemons"), LIVE);
	ck_assert(json_is_false(json_object_get(d, "up")));
	ck_assert(json_is_null(json_object_get(d, "status")));
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(d,
	    "error")), "unreachable"));
	json_decref(all);
	json_decref(latest);
}

/* What the page draws, as the browser laid it out: a JSON text
 * {vw, error (the page's own fault, or null), charts: [{id, left, right,
 * axes: {x, y: {title, labels,
 * clipped}}, sets: [{name, raw, smoothed, n, x, y, and for a series of
 * one point its radius, whether it is inside the plot, the canvas pixel
 * at its centre and its colour}]}]}.  A tick label is clipped when its
 * box leaves the canvas or the area Chart.js clips its axis's labels
 * to. */
static const char page_js[] =
    "JSON.stringify((() => {"
    " const rgb = s => { if (s[0] === '#') { const n = parseInt(s.slice(1),"
    "  16); return [n >> 16, (n >> 8) & 255, n & 255]; }"
    "  return s.match(/[\\d.]+/g).slice(0, 3).map(Number); };"
    " const out = { vw: document.documentElement.clientWidth, charts: [],"
    "  error: window.smError || null };"
    " if (typeof Chart === 'undefined') return out;"
    " for (const cv of document.querySelectorAll('canvas')) {"
    "  const ch = Chart.getChart(cv);"
    "  if (!ch || cv.offsetParent === null) continue;"
    "  const r = cv.getBoundingClientRect(), ctx = cv.getContext('2d');"
    "  const c = { id: cv.id.replace(/-canvas$/, ''), left: r.left,"
    "   right: r.right, axes: {}, sets: [] };"
    "  for (const k of ['x', 'y']) {"
    "   const s = ch.scales[k];"
    "   if (!s) continue;"
    "   const a = s._computeLabelArea() || { left: 0, top: 0,"
    "    right: ch.width, bottom: ch.height };"
    "   const ax = { title: s.options.title.display ?"
    "    s.options.title.text : '', labels: [], clipped: [] };"
    "   for (const it of s._labelItems || []) {"
    "    ctx.save(); ctx.font = it.font.string;"
    "    const w = ctx.measureText(it.label).width; ctx.restore();"
    "    const [x, y] = it.translation, h = it.font.lineHeight;"
    "    const l = it.textAlign === 'left' ? x : it.textAlign === 'right' ?"
    "     x - w : x - w / 2;"
    "    const t = it.textBaseline === 'top' ? y : it.textBaseline ==="
    "     'bottom' ? y - h : y - h / 2;"
    "    ax.labels.push(String(it.label));"
    "    if (l < Math.max(0, a.left) - 0.5 || l + w > Math.min(ch.width,"
    "     a.right) + 0.5 || t < -0.5 || t + h > ch.height + 0.5)"
    "     ax.clipped.push(String(it.label));"
    "   }"
    "   c.axes[k] = ax;"
    "  }"
    "  ch.data.datasets.forEach((d, i) => {"
    "   const e = { name: d.sm.name, raw: !!d.sm.raw, smoothed:"
    "    d.sm.smoothed ?? null, n: d.data.length,"
    "    x: d.data.map(p => p.x), y: d.data.map(p => p.y) };"
    "   const pt = ch.getDatasetMeta(i).data[0], A = ch.chartArea;"
    "   if (d.data.length === 1 && pt && e.smoothed === null) {"
    "    const dpr = ch.currentDevicePixelRatio;"
    "    e.radius = pt.options.radius;"
    "    e.inside = pt.x >= A.left && pt.x <= A.right && pt.y >= A.top &&"
    "     pt.y <= A.bottom;"
    "    e.pixel = [...ctx.getImageData(Math.round(pt.x * dpr),"
    "     Math.round(pt.y * dpr), 1, 1).data];"
    "    e.color = rgb(d.backgroundColor);"
    "   }"
    "   c.sets.push(e);"
    "  });"
    "  out.charts.push(c);"
    " }"
    " return out;"
    "})())";

static json_t *
page_charts(cdp *c)
{
	char *text = cdp_eval(c, page_js);
	json_t *page = text ? json_loads(text, 0, NULL) : NULL;

	free(text);
	ck_assert_msg(page != NULL, "the page's charts could not be read");
	return page;
}

static json_t *
chart_of(json_t *page, const char *id)
{
	json_t *ch;
	size_t i;

	json_array_foreach(json_object_get(page, "charts"), i, ch)
		if (strcmp(json_string_value(json_object_get(ch, "id")), id) ==
		    0)
			return ch;
	return NULL;
}

/* The format of a tick label: its decimals and its unit letter (k, M,
 * G or none); -1 when it is not a plain number so written. */
static int
label_format(const char *label, char *unit)
{
	const char *p = label + (label[0] == '-' || label[0] == '\xe2');
	int dec = -1;

	/* Chart.js may write a minus sign as U+2212 */
	if (strncmp(label, "\xe2\x88\x92", 3) == 0)
		p = label + 3;
	if (*p < '0' || *p > '9')
		return -1;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p == '.') {
		for (dec = 0, p++; *p >= '0' && *p <= '9'; p++)
			dec++;
		if (dec == 0)
			return -1;
	} else
		dec = 0;
	*unit = *p;
	if (*p != '\0' && (strchr("kMG", *p) == NULL || p[1] != '\0'))
		return -1;
	return dec;
}

/* Every chart of the page: its own x and y axes, titled, whose tick
 * labels are whole and all written alike; the named charts there; the
 * panels across most of the viewport; the composed bound alone on its
 * axes and the blocks' shares on theirs; each loss a smoothed line over
 * its raw points. */
static void
check_layout(json_t *page, const char *const *want, size_t nwant)
{
	double vw = json_number_value(json_object_get(page, "vw"));
	double left = vw, right = 0;
	json_t *ch, *set;
	size_t i, j, k;

	ck_assert_msg(json_is_null(json_object_get(page, "error")), "the page "
	    "failed: %s", json_string_value(json_object_get(page, "error")));
	ck_assert_msg(vw >= VIEW_W * 0.95 && vw <= VIEW_W, "viewport %g", vw);
	for (k = 0; k < nwant; k++)
		ck_assert_msg(chart_of(page, want[k]) != NULL, "no chart %s "
		    "with points on the page", want[k]);
	json_array_foreach(json_object_get(page, "charts"), i, ch) {
		const char *id = json_string_value(json_object_get(ch, "id"));
		const char *axis[2] = { "x", "y" };
		int raw = 0, smoothed = 0;

		for (k = 0; k < 2; k++) {
			json_t *ax = json_object_get(json_object_get(ch,
			    "axes"), axis[k]), *l;
			json_t *labels = json_object_get(ax, "labels");
			int dec = -2;
			char unit = 0, u;

			ck_assert_msg(ax != NULL, "%s: no %s axis", id, axis[k]);
			ck_assert_msg(json_string_length(json_object_get(ax,
			    "title")) > 0, "%s: its %s axis has no title", id,
			    axis[k]);
			ck_assert_msg(json_array_size(labels) >= 2, "%s: %zu "
			    "tick labels on %s", id, json_array_size(labels),
			    axis[k]);
			ck_assert_msg(json_array_size(json_object_get(ax,
			    "clipped")) == 0, "%s: tick labels of %s cut at "
			    "the edge: %s", id, axis[k], json_dumps(json_object_get(
			    ax, "clipped"), 0));
			json_array_foreach(labels, j, l) {
				int d = label_format(json_string_value(l), &u);

				/* zero stands alone ("0" below "20k") */
				if (strcmp(json_string_value(l), "0") == 0)
					continue;
				ck_assert_msg(d >= 0, "%s: tick label '%s' is not "
				    "a number", id, json_string_value(l));
				if (dec == -2) {
					dec = d;
					unit = u;
				}
				ck_assert_msg(d == dec && u == unit, "%s: tick "
				    "labels of %s in two formats: %s", id,
				    axis[k], json_dumps(labels, 0));
			}
		}
		if (json_number_value(json_object_get(ch, "left")) < left)
			left = json_number_value(json_object_get(ch, "left"));
		if (json_number_value(json_object_get(ch, "right")) > right)
			right = json_number_value(json_object_get(ch, "right"));
		json_array_foreach(json_object_get(ch, "sets"), j, set) {
			const char *name = json_string_value(json_object_get(set,
			    "name"));

			if (strcmp(id, "c-bound") == 0)
				ck_assert_str_eq(name, "composed bound");
			if (strcmp(id, "c-shares") == 0)
				ck_assert_msg(strncmp(name, "block ", 6) == 0 &&
				    strstr(name, " share") != NULL, "%s on the "
				    "shares' axes", name);
			raw += json_is_true(json_object_get(set, "raw"));
			smoothed += json_is_number(json_object_get(set,
			    "smoothed"));
		}
		if (strncmp(id, "c-loss-", 7) == 0)
			ck_assert_msg(raw > 0 && raw == smoothed, "%s: %d raw "
			    "series, %d smoothed", id, raw, smoothed);
		else
			ck_assert_int_eq(raw + smoothed, 0);
	}
	ck_assert_msg(left >= 0 && right <= vw && right - left >= 0.85 * vw,
	    "the charts span %.0f to %.0f of %.0f pixels", left, right, vw);
}

/* Every series of one point shows it: a dot of radius 3 or more inside
 * the plot, drawn in the series' colour. */
static int
check_one_points(json_t *page)
{
	json_t *ch, *set;
	size_t i, j;
	int n = 0;

	json_array_foreach(json_object_get(page, "charts"), i, ch)
		json_array_foreach(json_object_get(ch, "sets"), j, set) {
			json_t *px = json_object_get(set, "pixel");
			json_t *col = json_object_get(set, "color");
			const char *what = json_string_value(json_object_get(ch,
			    "id"));
			double d = 0;
			int k;

			if (px == NULL)
				continue;
			ck_assert_msg(json_number_value(json_object_get(set,
			    "radius")) >= 3, "%s: a lone point of radius %g",
			    what, json_number_value(json_object_get(set,
			    "radius")));
			ck_assert_msg(json_is_true(json_object_get(set,
			    "inside")), "%s: its lone point is outside the "
			    "plot", what);
			for (k = 0; k < 3; k++) {
				double e = json_number_value(json_array_get(px,
				    k)) - json_number_value(json_array_get(col,
				    k));

				d += e * e;
			}
			ck_assert_msg(json_integer_value(json_array_get(px,
			    3)) >= 200 && d <= 60 * 60, "%s: the pixel of its "
			    "lone point is %s, its colour %s", what,
			    json_dumps(px, 0), json_dumps(col, 0));
			n++;
		}
	return n;
}

/* The page's loss curves and composed bound against the dashboard's
 * history, which check_endpoints held to the daemons' numbers. */
static void
check_curves(json_t *page, double bound)
{
	json_t *all = dashboard_get("/v1/dashboard"), *set, *ch;
	char name[64], id[32];
	int i, found = 0;
	size_t j, k, h;

	for (i = 0; i < LIVE; i++) {
		json_t *s = at(json_array_get(json_object_get(all, "daemons"),
		    i), "series", NULL, NULL);

		snprintf(name, sizeof(name), "block %d replica %d",
		    block_of[i], i == 1);
		snprintf(id, sizeof(id), "c-loss-%d", block_of[i]);
		ck_assert_msg((ch = chart_of(page, id)) != NULL, "no %s", id);
		json_array_foreach(json_object_get(ch, "sets"), j, set) {
			json_t *xs = json_object_get(set, "x");
			json_t *ys = json_object_get(set, "y");

			if (!json_is_true(json_object_get(set, "raw")) ||
			    strcmp(json_string_value(json_object_get(set,
			    "name")), name) != 0)
				continue;
			found++;
			/* every point, in order, as the history has it (which
			 * may have gained one since the page's last fetch),
			 * but for step 0, whose loss is that of no step */
			ck_assert_uint_gt(json_array_size(xs), 1);
			for (h = 0; json_integer_value(json_array_get(
			    json_object_get(s, "step"), h)) == 0; h++)
				;
			ck_assert_uint_le(json_array_size(xs) + h,
			    json_array_size(json_object_get(s, "step")));
			for (k = 0; k < json_array_size(xs); k++) {
				ck_assert_double_eq(json_number_value(
				    json_array_get(xs, k)), json_number_value(
				    json_array_get(json_object_get(s, "step"),
				    h + k)));
				ck_assert_double_eq(json_number_value(
				    json_array_get(ys, k)), json_number_value(
				    json_array_get(json_object_get(s, "loss"),
				    h + k)));
			}
		}
	}
	ck_assert_int_eq(found, LIVE);
	ch = chart_of(page, "c-bound");
	ck_assert_msg(ch != NULL, "no composed bound chart on the page");
	set = json_array_get(json_object_get(ch, "sets"), 0);
	ck_assert_double_eq_tol(json_number_value(last(json_object_get(set,
	    "y"))), bound, 1e-12);
	ck_assert_double_eq(json_number_value(last(json_object_get(set,
	    "x"))), STEPS);
	json_decref(all);
}
static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* From a step first seen at a daemon to its point first drawn on the
 * page: reported, not asserted (a time). */
static void
report_latency(cdp *c, const char *interval)
{
	char *text = cdp_eval(c, "JSON.stringify(window.smSeen)"), key[64];
	json_t *seen = text ? json_loads(text, 0, NULL) : NULL;
	double lat[LIVE * MAXSTEP];
	int i, s, n = 0;

	free(text);
	for (i = 0; i < LIVE; i++)
		for (s = 0; s < MAXSTEP; s++) {
			json_t *v;

			snprintf(key, sizeof(key), "127.0.0.1:%d@%d",
			    base_port + i, s);
			if (!isnan(seen_at[i][s]) &&
			    (v = json_object_get(seen, key)) != NULL)
				lat[n++] = json_number_value(v) - seen_at[i][s];
		}
	json_decref(seen);
	if (n == 0)
		return;
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_double);
	fprintf(stderr, "# step to page (dashboard --interval %s): %d steps, "
	    "median %.0f ms, p90 %.0f ms, max %.0f ms\n", interval, n,
	    lat[n / 2], lat[n * 9 / 10], lat[n - 1]);
}

/* Waits until the page has drawn the composed bound and, in each of
 * the blocks' loss charts, every replica's raw points up to step last
 * (n of them in all). */
static int
page_caught_up(cdp *c, int n, int last_step, double limit)
{
	double end = wall_ms() + limit * 1e3;
	char expr[512];

	snprintf(expr, sizeof(expr), "String(typeof Chart !== 'undefined' && "
	    "!!Chart.getChart('c-bound-canvas') && [...document."
	    "querySelectorAll('#g-loss canvas')].flatMap(c => Chart.getChart"
	    "(c) ? Chart.getChart(c).data.datasets : []).filter(d => d.sm.raw"
	    " && d.data.length && d.data[d.data.length - 1].x == %d).length "
	    "== %d)", last_step, n);
	while (wall_ms() < end) {
		char *v = cdp_eval(c, expr);
		int ok = v != NULL && strcmp(v, "true") == 0;

		free(v);
		if (ok)
			return 1;
		usleep(100000);
	}
	return 0;
}

/* Where the screenshots go: $DASHBOARD_SHOTS, else tests/ of the build
 * tree when the test runs there (make check), else here. */
static void
shot_path(char *path, size_t size, const char *name)
{
	const char *d = getenv("DASHBOARD_SHOTS");

	if (d == NULL || d[0] == '\0')
		d = access("tests", W_OK) == 0 ? "tests" : ".";
	snprintf(path, size, "%s/dashboard-%s.png", d, name);
}

static void
screenshot(cdp *c, const char *name)
{
	char path[512];

	shot_path(path, sizeof(path), name);
	ck_assert_msg(cdp_screenshot(c, path) == 0, "no screenshot %s", path);
	fprintf(stderr, "# screenshot of the page: %s\n", path);
}

static cdp *
open_page(const char *browser, const char *name)
{
	char url[64], prof[128], log[128], err[256];
	cdp *c;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", dash_port);
	snprintf(prof, sizeof(prof), "%s/chromium-%s", dir, name);
	snprintf(log, sizeof(log), "%s/chromium.log", dir);
	c = cdp_open(browser, prof, log, url, VIEW_W, VIEW_H, err);
	ck_assert_msg(c != NULL, "%s", err);
	return c;
}
/* A listening socket on loopback; its port in *port. */
static int
listener(int *port)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(fd, 0);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

START_TEST(test_live_run)
{
	static const char *const want[] = { "c-bound", "c-shares", "c-loss-1",
	    "c-loss-2", "c-pps", "c-round", "c-bytes-0", "c-bytes-1",
	    "c-bytes-2" };
	const char *browser = cdp_browser(), *interval =
	    getenv("DASHBOARD_INTERVAL") ? getenv("DASHBOARD_INTERVAL") : "0.1";
	char addr[64], *alert;
	json_t *page;
	double bound;
	cdp *c = NULL;

	/* the dashboard first: on a fast machine the 300 steps take under
	 * a second, less than a shardmeter process linked with CUDA spends
	 * starting, and a dashboard started after the daemons saw the run
	 * only once it was done */
	tu_write_run(dir, 2, STEPS, 50, 5);
	write_peers();
	start_dashboard(interval);
	start_run();
	if (browser == NULL)
		fprintf(stderr, "# browser part skipped: no chromium (scripts/"
		    "install-deps --browser installs it, or set CHROMIUM)\n");
	else
		c = open_page(browser, "live");
	follow_run(60);
	wait_idle(60);
	usleep((useconds_t)(atof(interval) * 5e6));
	settle(10);
	check_endpoints(&bound);
	if (c == NULL)
		return;
	ck_assert_msg(page_caught_up(c, LIVE, STEPS, 30), "the page did not "
	    "draw the last step within 30 s");
	page = page_charts(c);
	check_curves(page, bound);
	check_layout(page, want, sizeof(want) / sizeof(want[0]));
	json_decref(page);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", base_port + LIVE);
	alert = cdp_eval(c, "document.getElementById('alerts').textContent");
	ck_assert_ptr_nonnull(alert);
	ck_assert_msg(strstr(alert, addr) && strstr(alert, "unreachable"),
	    "no message for the unreachable daemon: %s", alert);
	free(alert);
	report_latency(c, interval);
	screenshot(c, "live");
	cdp_close(c);
	ck_assert_int_eq(tu_stop(&dash_pid, SIGTERM, 5), 0);
}
END_TEST

/* Statuses the test scripts, for the pages of a run too long (3000
 * steps, six daemons) or too short (one sample) to train here: one
 * process answers GET /v1/status on each listener, in plain HTTP as an
 * insecure daemon does, with the figures a training daemon reports. */

#define SCRIPT_MAX 6
#define SCRIPT_STEPS 3000

struct script {
	int n, blocks, one_point;
	int fd[SCRIPT_MAX], port[SCRIPT_MAX], block[SCRIPT_MAX];
};

/* A number in [0, 1) from k and i, the same on every run. */
static double
noise(int k, int i)
{
	uint32_t h = (uint32_t)k * 2654435761u ^ (uint32_t)i * 40503u;

	h ^= h >> 15;
	h *= 2246822519u;
	h ^= h >> 13;
	return (h & 0xffffff) / (double)0x1000000;
}

/* Daemon k's status at its poll number i: its block's share falls from
 * about 4.5 to about 1 nats/byte, the training loss is that plus noise,
 * a held-out share every 250 steps, a round every 50 steps, bytes to the
 * other replica of its block (updates) and to the next block's first
 * daemon (checkpoints, as a mirror). */
static json_t *
script_status(const struct script *s, int k, int i)
{
	int step = s->one_point ? 100 : i * 30 < SCRIPT_STEPS ? i * 30 :
	    SCRIPT_STEPS, b = s->block[k], at = step / 250 * 250, j;
	double base = 0.85 + 0.08 * b, decay = 3.5 * exp(-step / 600.0);
	json_t *st, *peers = json_array();

	if (s->one_point)
		at = step;
	for (j = 0; j < s->n; j++) {
		char addr[32];
		double update = 0, checkpoint = 0;

		if (j == k)
			continue;
		if (s->block[j] == b)
			update = 180000.0 * (step / 50 + 1);
		else if (s->block[j] == b % s->blocks + 1 &&
		    (j == 0 || s->block[j - 1] != s->block[j]))
			checkpoint = 720000.0 * (step / 500 + 1);
		if (update == 0 && checkpoint == 0)
			continue;
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", s->port[j]);
		json_array_append_new(peers, json_pack("{s:s,s:s,s:{s:{s:f,"
		    "s:f,s:f}}}", "addr", addr, "state", "up", "bytes", "out",
		    "update", update, "checkpoint", checkpoint, "other", 0.0));
	}
	st = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:f,s:f,s:o}", "run_id",
	    "5c1e0b7a9d3f4e21b8a6c0d2e4f60718293a4b5c6d7e8f90a1b2c3d4e5f60718",
	    "state", step < SCRIPT_STEPS || s->one_point ? "training" : "done",
	    "blocks", s->blocks, "step", step, "steps", SCRIPT_STEPS, "round",
	    step / 50, "loss", base + decay + 0.9 * (noise(k, s->one_point ?
	    0 : i) - 0.5) *
	    (0.3 + decay / 3.5), "positions_per_s", 41000.0 + 3000.0 * b +
	    2500.0 * noise(k + 7, s->one_point ? 0 : i), "peers", peers);
	if (at > 0) {
		json_object_set_new(st, "heldout_share", json_real(base + 3.2 *
		    exp(-at / 600.0) + 0.02 * noise(b + 11, at)));
		json_object_set_new(st, "heldout_share_step", json_integer(at));
	}
	return st;
}

/* The scripted daemons' loop, in a child process: one status per
 * connection. */
static void
script_serve(const struct script *s)
{
	struct pollfd pfd[SCRIPT_MAX];
	int polls[SCRIPT_MAX] = { 0 }, k;

	for (k = 0; k < s->n; k++) {
		pfd[k].fd = s->fd[k];
		pfd[k].events = POLLIN;
	}
	for (;;) {
		if (poll(pfd, (nfds_t)s->n, -1) < 0)
			_exit(1);
		for (k = 0; k < s->n; k++) {
			char req[4096], *body, head[256];
			size_t got = 0;
			ssize_t r;
			json_t *st;
			int fd;

			if (!(pfd[k].revents & POLLIN) ||
			    (fd = accept(s->fd[k], NULL, NULL)) < 0)
				continue;
			while (got < sizeof(req) - 1 && (r = read(fd, req + got,
			    sizeof(req) - 1 - got)) > 0) {
				got += (size_t)r;
				req[got] = '\0';
				if (strstr(req, "\r\n\r\n") != NULL)
					break;
			}
			st = script_status(s, k, ++polls[k]);
			body = json_dumps(st, JSON_COMPACT);
			json_decref(st);
			snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n"
			    "Content-Type: application/json\r\nContent-Length:"
			    " %zu\r\nConnection: close\r\n\r\n", strlen(body));
			if (write(fd, head, strlen(head)) < 0 ||
			    write(fd, body, strlen(body)) < 0)
				_exit(1);
			free(body);
			close(fd);
		}
	}
}

/* Starts n scripted daemons (blocks of n / blocks replicas each) and a
 * dashboard watching them. */
static void
start_script(struct script *s, int n, int blocks, int one_point)
{
	char text[1024] = "", line[64], peers[128], listen[32], log[128];
	const char *argv[] = { "shardmeter", "dashboard", "--peers", peers,
	    "--listen", listen, "--interval", "0.05", NULL };
	int k;

	s->n = n;
	s->blocks = blocks;
	s->one_point = one_point;
	for (k = 0; k < n; k++) {
		s->fd[k] = listener(&s->port[k]);
		s->block[k] = 1 + k * blocks / n;
		/* no id: the dashboard asks in plain HTTP */
		snprintf(line, sizeof(line), "127.0.0.1:%d %d\n", s->port[k],
		    s->block[k]);
		strcat(text, line);
	}
	tu_write_file(dir, "script_peers", text);
	/* in pids[0], which teardown stops whatever happens */
	if ((pids[0] = fork()) == 0)
		script_serve(s);
	ck_assert_int_gt(pids[0], 0);
	for (k = 0; k < n; k++)
		close(s->fd[k]);
	snprintf(peers, sizeof(peers), "%s/script_peers", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", dash_port);
	snprintf(log, sizeof(log), "%s/dashboard.log", dir);
	dash_pid = tu_spawn(log, tu_shardmeter(), argv);
	ck_assert_msg(tu_wait_port(dash_port, dash_pid, 10),
	    "the dashboard did not listen (see %s)", log);
}

/* A run of 3000 steps on six daemons, three blocks of two replicas (the
 * shares near 1, their sum near 3): each quantity on its own axes, a
 * chart of the training loss per block, smoothed, and tick labels up to
 * 3000 whole. */
START_TEST(test_page_long_run)
{
	static const char *const want[] = { "c-bound", "c-shares", "c-loss-1",
	    "c-loss-2", "c-loss-3", "c-pps", "c-round", "c-bytes-0",
	    "c-bytes-5" };
	const char *browser = cdp_browser();
	struct script s;
	json_t *page, *ch;
	cdp *c;

	if (browser == NULL) {
		fprintf(stderr, "# skipped: no chromium (scripts/install-deps "
		    "--browser installs it, or set CHROMIUM)\n");
		return;
	}
	start_script(&s, 6, 3, 0);
	c = open_page(browser, "long-run");
	ck_assert_msg(page_caught_up(c, 6, SCRIPT_STEPS, 200), "the page did "
	    "not draw step %d within 200 s", SCRIPT_STEPS);
	page = page_charts(c);
	check_layout(page, want, sizeof(want) / sizeof(want[0]));
	/* the bound's axis is the bound's: about 3, not pulled to 1 */
	ch = chart_of(page, "c-bound");
	ck_assert_double_gt(json_number_value(last(json_object_get(
	    json_array_get(json_object_get(ch, "sets"), 0), "y"))), 2.5);
	ck_assert_int_eq(json_array_size(json_object_get(chart_of(page,
	    "c-shares"), "sets")), 3);
	json_decref(page);
	screenshot(c, "long-run");
	cdp_close(c);
	ck_assert_int_eq(tu_stop(&dash_pid, SIGTERM, 5), 0);
}
END_TEST

/* One sample of each of two daemons: every chart shows its lone point,
 * the composed bound's included.  And the chart library as served. */
START_TEST(test_page_one_point)
{
	static const char *const want[] = { "c-bound", "c-shares", "c-loss-1",
	    "c-loss-2", "c-pps", "c-bytes-0", "c-bytes-1" };
	const char *browser = cdp_browser();
	char out[4096], version[32] = "", *v;
	struct script s;
	json_t *page;
	cdp *c;

	start_script(&s, 2, 2, 1);
	/* Chart.js from the binary, kept by the browser by its version */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "curl -s -D - -o "
	    "/dev/null http://127.0.0.1:%d/chart.min.js", dash_port), 0);
	ck_assert_msg(strstr(out, "HTTP/1.1 200") && strcasestr(out,
	    "Content-Type: text/javascript") && strcasestr(out, "Cache-"
	    "Control: public, max-age=31536000, immutable"), "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "curl -s "
	    "http://127.0.0.1:%d/chart.min.js | head -c 200", dash_port), 0);
	ck_assert_msg((v = strstr(out, " * Chart.js v")) != NULL, "%s", out);
	sscanf(v, " * Chart.js v%31[0-9.]", version);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "curl -s "
	    "http://127.0.0.1:%d/ | grep -o 'src=\"[^\"]*\"'", dash_port), 0);
	ck_assert_msg(strstr(out, "/chart.min.js?v=") && strstr(out,
	    version), "the page asks for %s, Chart.js is %s", out, version);
	if (browser == NULL) {
		fprintf(stderr, "# browser part skipped: no chromium (scripts/"
		    "install-deps --browser installs it, or set CHROMIUM)\n");
		return;
	}
	c = open_page(browser, "one-point");
	ck_assert_msg(page_caught_up(c, 2, 100, 60), "the page did not draw "
	    "the lone points within 60 s");
	page = page_charts(c);
	check_layout(page, want, sizeof(want) / sizeof(want[0]));
	/* the bound, two shares, two losses, two positions/s, two links */
	ck_assert_int_ge(check_one_points(page), 9);
	json_decref(page);
	screenshot(c, "one-point");
	cdp_close(c);
	ck_assert_int_eq(tu_stop(&dash_pid, SIGTERM, 5), 0);
}
END_TEST

/* One poll of daemon i, its status written as JSON text. */
static void
feed(dash_history *h, int i, double t, const char *text)
{
	json_t *st = json_loads(text, 0, NULL);

	ck_assert_msg(st != NULL, "bad JSON in the test: %s", text);
	dash_history_record(h, i, t, st, 200, NULL);
	json_decref(st);
}

/* The numbers of column col, as "a,b,null,..." (a column ends where its
 * figure was last reported). */
static const char *
column(json_t *col)
{
	static char out[512];
	json_t *v;
	size_t i, used = 0;

	out[0] = '\0';
	json_array_foreach(col, i, v) {
		if (json_is_null(v))
			used += (size_t)snprintf(out + used, sizeof(out) - used,
			    "%snull", i ? "," : "");
		else
			used += (size_t)snprintf(out + used, sizeof(out) - used,
			    "%s%g", i ? "," : "", json_number_value(v));
	}
	return out;
}

/* The history on constructed statuses: a sample only when something
 * moved, columns padded and trimmed together, round periods between two
 * seen changes, a block's share from its first-listed replica, the
 * bound, and a serving host's numbers whatever their shape. */
START_TEST(test_history)
{
	char err[256];
	dash_history *h;
	json_t *o, *d0, *s0;
	unsigned long v;
	int k;

	ck_assert_int_eq(dash_history_new(&h, 3, 4, err), 0);
	dash_history_describe(h, 0, "A", DASH_TRAIN, 1, 0);
	dash_history_describe(h, 1, "B", DASH_TRAIN, 1, 1);
	dash_history_describe(h, 2, "S", DASH_SERVE, 2, 0);
	feed(h, 0, 1, "{\"blocks\":1,\"step\":10,\"round\":0,\"state\":"
	    "\"training\",\"loss\":2.5,\"peers\":[{\"addr\":\"B\",\"bytes\":"
	    "{\"out\":{\"update\":5}}}]}");
	v = dash_history_version(h);
	/* nothing moved: no sample, no new version */
	feed(h, 0, 2, "{\"blocks\":1,\"step\":10,\"round\":0,\"state\":"
	    "\"training\",\"loss\":2.5,\"peers\":[{\"addr\":\"B\",\"bytes\":"
	    "{\"out\":{\"update\":5}}}]}");
	ck_assert_uint_eq(dash_history_version(h), v);
	feed(h, 0, 3, "{\"blocks\":1,\"step\":20,\"round\":1,\"state\":"
	    "\"training\",\"loss\":2,\"heldout_share\":1.5,"
	    "\"heldout_share_step\":20,\"predicted\":{\"round_s\":{"
	    "\"predicted\":0.5,\"measured\":0.4}}}");
	ck_assert_uint_gt(dash_history_version(h), v);
	feed(h, 0, 5, "{\"blocks\":1,\"step\":30,\"round\":2,\"state\":"
	    "\"training\",\"loss\":1.5}");
	/* replica 1 scores step 20 too: replica 0, listed first, stays */
	feed(h, 1, 6, "{\"blocks\":1,\"step\":20,\"round\":1,\"state\":"
	    "\"training\",\"heldout_share\":1.4,\"heldout_share_step\":20}");
	/* replica 1 first at step 40, then replica 0 at the same step */
	feed(h, 1, 7, "{\"blocks\":1,\"step\":40,\"round\":3,\"state\":"
	    "\"training\",\"heldout_share\":1.3,\"heldout_share_step\":40}");
	feed(h, 0, 8, "{\"blocks\":1,\"step\":40,\"round\":3,\"state\":"
	    "\"training\",\"loss\":1.25,\"heldout_share\":1.35,"
	    "\"heldout_share_step\":40}");
	feed(h, 2, 1, "{\"requests\":5,\"latency_ms\":{\"p50\":1}}");
	feed(h, 2, 2, "{\"requests\":9,\"latency_ms\":{\"p50\":2},"
	    "\"bytes_out\":100,\"name\":\"x\"}");
	o = dash_history_json(h, 9);
	d0 = json_array_get(json_object_get(o, "daemons"), 0);
	s0 = json_object_get(d0, "series");
	ck_assert_str_eq(column(json_object_get(s0, "t")), "1,3,5,8");
	ck_assert_str_eq(column(json_object_get(s0, "loss")), "2.5,2,1.5,1.25");
	ck_assert_str_eq(column(at(s0, "predicted", "round_s_predicted",
	    NULL)), "null,0.5,null,null");
	ck_assert_str_eq(column(at(s0, "links", "B", "out_update")), "5");
	ck_assert_str_eq(column(at(d0, "rounds", "round", NULL)), "0,1,2,3");
	ck_assert_str_eq(column(at(d0, "rounds", "round_s", NULL)),
	    "null,null,2,3");
	ck_assert_str_eq(column(at(o, "shares", "1", "step")), "20,40");
	ck_assert_str_eq(column(at(o, "shares", "1", "value")), "1.5,1.35");
	ck_assert_str_eq(column(at(o, "bound", "value", NULL)), "1.5,1.35");
	ck_assert_double_eq(json_number_value(json_object_get(o,
	    "bound_latest")), 1.35);
	s0 = at(json_array_get(json_object_get(o, "daemons"), 2), "series",
	    "numbers", NULL);
	ck_assert_str_eq(column(json_object_get(s0, "requests")), "5,9");
	ck_assert_str_eq(column(json_object_get(s0, "latency_ms.p50")), "1,2");
	ck_assert_str_eq(column(json_object_get(s0, "bytes_out")), "null,100");
	ck_assert_ptr_null(json_object_get(s0, "name"));
	json_decref(o);
	/* past 4 samples, every second one of the older half goes, from
	 * every column at once */
	for (k = 0; k < 2; k++) {
		char text[128];

		snprintf(text, sizeof(text), "{\"step\":%d,\"round\":3,"
		    "\"state\":\"training\",\"loss\":1}", 50 + k);
		feed(h, 0, 10 + k, text);
	}
	dash_history_record(h, 1, 12, NULL, 0, "unreachable: refused");
	o = dash_history_json(h, 13);
	s0 = at(json_array_get(json_object_get(o, "daemons"), 0), "series",
	    NULL, NULL);
	ck_assert_str_eq(column(json_object_get(s0, "step")), "10,40,50,51");
	ck_assert_str_eq(column(json_object_get(s0, "loss")), "2.5,1.25,1,1");
	ck_assert_str_eq(column(at(s0, "predicted", "round_s_predicted",
	    NULL)), "null,null,null,null");
	ck_assert_str_eq(column(at(s0, "links", "B", "out_update")), "5");
	ck_assert_ptr_null(at(s0, "links", "B", "in_update"));
	d0 = json_array_get(json_object_get(o, "daemons"), 1);
	ck_assert(json_is_false(json_object_get(d0, "up")));
	ck_assert_str_eq(json_string_value(json_object_get(d0, "error")),
	    "unreachable: refused");
	json_decref(o);
	dash_history_free(h);
}
END_TEST

/* A serving host (blocktraind -S, a one-host ring of random weights):
 * the dashboard watches it from a host list given as --peers and shows
 * the requests it served, counted by the host's own /v1/status. */
START_TEST(test_serving_host)
{
	char text[2048] = "shape width=32 heads=2 layers=1 window=32 blocks=1 "
	    "seed=1\n", state[128], listen[32], hosts[128], log[128];
	const char *argv[] = { "shardmeter", "dashboard", "--peers", hosts,
	    "--listen", listen, "--interval", "0.1", NULL };
	json_t *all, *d;

	snprintf(state, sizeof(state), "%s/host", dir);
	tu_peer_line(text, sizeof(text), base_port, 1, state);
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, "hosts", text);
	snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port);
	snprintf(log, sizeof(log), "%s/host.log", dir);
	pids[0] = tu_daemon_start(log, base_port, "-S", "-f", "-L", listen,
	    "-P", hosts, "-s", state, "-D", "cpu", "-t", "1", (char *)NULL);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", dash_port);
	snprintf(log, sizeof(log), "%s/dashboard.log", dir);
	dash_pid = tu_spawn(log, tu_shardmeter(), argv);
	ck_assert_msg(tu_wait_port(dash_port, dash_pid, 10),
	    "the dashboard did not listen (see %s)", log);
	/* two requests through the host, then its numbers on the page */
	{
		char out[2048];
		int i;

		for (i = 0; i < 2; i++)
			ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate "
			    "--peers %s --length 8 --seed %d 'ab'", tu_shardmeter(),
			    hosts, i + 1), 0);
	}
	usleep(600000);
	all = dashboard_get("/v1/dashboard");
	d = json_array_get(json_object_get(all, "daemons"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(d, "kind")),
	    "serve");
	ck_assert_msg(json_is_true(json_object_get(d, "up")), "%s",
	    json_string_value(json_object_get(d, "error")));
	ck_assert(json_is_object(json_object_get(d, "status")));
	ck_assert_int_eq(json_integer_value(at(json_object_get(d, "status"),
	    "requests", "total", NULL)), 2);
	ck_assert_int_eq(json_integer_value(at(json_object_get(d, "status"),
	    "served", NULL, NULL)), 2);
	ck_assert_uint_gt(json_array_size(at(d, "series", "t", NULL)), 0);
	json_decref(all);
	/* a page of another name resolved to loopback (DNS rebinding) is
	 * refused; a loopback name on any port (ssh -L) is served */
	{
		char out[64];

		ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "curl -s -o "
		    "/dev/null -w '%%{http_code}' -H 'Host: rebind.example:%d' "
		    "http://127.0.0.1:%d/v1/dashboard", dash_port, dash_port),
		    0);
		ck_assert_str_eq(out, "403");
		ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "curl -s -o "
		    "/dev/null -w '%%{http_code}' -H 'Host: localhost:9' "
		    "http://127.0.0.1:%d/v1/dashboard", dash_port), 0);
		ck_assert_str_eq(out, "200");
	}
	/* the host's panels on the page, drawn as the training ones are */
	if (cdp_browser() != NULL) {
		/* requests, latency and bytes; no errors, so no chart */
		static const char *const want[] = { "c-serve-0-0",
		    "c-serve-0-2", "c-serve-0-3" };
		cdp *c = open_page(cdp_browser(), "serving");
		double end = wall_ms() + 20e3;
		char *v = NULL;

		while (wall_ms() < end) {
			free(v);
			v = cdp_eval(c, "String(typeof Chart !== 'undefined' && "
			    "[...document.querySelectorAll('#g-serve canvas')]."
			    "filter(c => Chart.getChart(c) && c.offsetParent)."
			    "length)");
			if (v != NULL && atoi(v) == 3)
				break;
			usleep(100000);
		}
		ck_assert_msg(v != NULL && atoi(v) == 3, "the serving host's "
		    "charts: %s", v ? v : "none");
		free(v);
		all = page_charts(c);
		check_layout(all, want, sizeof(want) / sizeof(want[0]));
		json_decref(all);
		screenshot(c, "serving");
		cdp_close(c);
	}
	ck_assert_int_eq(tu_stop(&dash_pid, SIGTERM, 5), 0);
}
END_TEST

/* The error the dashboard shows for daemon i, once it shows one. */
static char *
error_of(int i, double limit)
{
	double end = wall_ms() + limit * 1e3;
	char *why = NULL;

	while (why == NULL && wall_ms() < end) {
		json_t *all = dashboard_get("/v1/dashboard");
		const char *e = json_string_value(json_object_get(
		    json_array_get(json_object_get(all, "daemons"), i),
		    "error"));

		if (e != NULL)
			why = strdup(e);
		json_decref(all);
		if (why == NULL)
			usleep(100000);
	}
	ck_assert_msg(why != NULL, "no error shown for daemon %d", i);
	return why;
}

/* Serving hosts that do not answer /v1/status, told apart by what the
 * request came to (the code of hc_result), not by curl's words: nothing
 * listens (refused) and a host that never answers (timed out) are
 * unreachable; a host that answers, but not in HTTP, is up and does not
 * serve /v1/status. */
START_TEST(test_serve_failures)
{
	char text[256], hosts[128], listen[32], log[128], *why;
	const char *argv[] = { "shardmeter", "dashboard", "--hosts", hosts,
	    "--listen", listen, "--interval", "0.1", NULL };
	int silent, silent_port, junk, junk_port, refused_port;

	/* a port that was just listened on, and is no longer */
	close(listener(&refused_port));
	silent = listener(&silent_port);        /* never accepts */
	junk = listener(&junk_port);
	/* in pids[0], which teardown stops whatever happens */
	if ((pids[0] = fork()) == 0) {
		static const char line[] = "SSH-2.0-OpenSSH_9.2\r\n";

		for (;;) {
			int fd = accept(junk, NULL, NULL);

			if (fd < 0)
				_exit(1);
			if (write(fd, line, sizeof(line) - 1) < 0)
				_exit(1);
			close(fd);
		}
	}
	ck_assert_int_gt(pids[0], 0);
	close(junk);
	/* in traversal order: the last block first */
	snprintf(text, sizeof(text), "127.0.0.1:%d 3\n127.0.0.1:%d 2\n"
	    "127.0.0.1:%d 1\n", refused_port, silent_port, junk_port);
	tu_write_file(dir, "hosts", text);
	snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", dash_port);
	snprintf(log, sizeof(log), "%s/dashboard.log", dir);
	dash_pid = tu_spawn(log, tu_shardmeter(), argv);
	ck_assert_msg(tu_wait_port(dash_port, dash_pid, 10),
	    "the dashboard did not listen (see %s)", log);

	why = error_of(0, 20);
	ck_assert_msg(strncmp(why, "unreachable: ", 13) == 0, "%s", why);
	free(why);
	/* the dashboard gives up on the silent host after 3 s */
	why = error_of(1, 20);
	ck_assert_msg(strncmp(why, "unreachable: ", 13) == 0, "%s", why);
	free(why);
	why = error_of(2, 20);
	ck_assert_msg(strncmp(why, "no HTTP status (", 16) == 0 &&
	    strstr(why, "does not serve /v1/status") != NULL, "%s", why);
	free(why);

	ck_assert_int_eq(tu_stop(&dash_pid, SIGTERM, 5), 0);
	tu_stop(&pids[0], SIGKILL, 5);
	close(silent);
}
END_TEST

/* The listener serves the operator's browser only, unless told. */
START_TEST(test_listen)
{
	char out[2048];
	const char *tool = tu_shardmeter();

	tu_write_file(dir, "p", "127.0.0.1:9 1\n");
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s dashboard --peers "
	    "%s/p --listen 0.0.0.0:%d", tool, dir, dash_port), 2);
	ck_assert_ptr_nonnull(strstr(out, "not a loopback address"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s dashboard --peers "
	    "%s/p --listen 127.0.0.1", tool, dir), 2);
	ck_assert_ptr_nonnull(strstr(out, "HOST:PORT"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s dashboard", tool),
	    2);
	ck_assert_ptr_nonnull(strstr(out, "--peers FILE"));
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s dashboard --peers "
	    "%s/missing", tool, dir), 1);
	ck_assert_ptr_nonnull(strstr(out, "missing"));
}
END_TEST

int
main(void)
{
	Suite *s = suite_create("dashboard");
	TCase *tc = tcase_create("dashboard");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_history);
	tcase_add_test(tc, test_live_run);
	tcase_add_test(tc, test_page_long_run);
	tcase_add_test(tc, test_page_one_point);
	tcase_add_test(tc, test_serving_host);
	tcase_add_test(tc, test_serve_failures);
	tcase_add_test(tc, test_listen);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
