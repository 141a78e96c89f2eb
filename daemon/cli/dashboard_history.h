/* The memory of `shardmeter dashboard`: what each daemon's /v1/status
 * said over the run, kept as columns of numbers (one array per figure,
 * aligned on the poll times) so that the page's JSON is the history
 * itself.  Knows nothing of the network: the command feeds it. */
#ifndef SM_DASHBOARD_HISTORY_H
#define SM_DASHBOARD_HISTORY_H

#include <stddef.h>

struct json_t;

typedef struct dash_history dash_history;

/* What a watched daemon is. */
enum { DASH_TRAIN, DASH_SERVE };

/* n daemons, each keeping at most max_points samples (the oldest go
 * first).  0 or KN_ENOMEM with the reason in err. */
int dash_history_new(dash_history **out, int n, int max_points, char *err);
void dash_history_free(dash_history *h);
/* Daemon i: its address, kind (DASH_*), block and replica (0 when
 * serving, or experts). */
void dash_history_describe(dash_history *h, int i, const char *addr,
    int kind, int block, int replica);
/* One poll of daemon i at time t (seconds since the epoch): its status
 * (borrowed; NULL when it did not answer, with why saying what happened,
 * and http its HTTP status or 0).  A training daemon adds a sample when
 * its step, round, state or bytes moved; a serving host on every poll. */
void dash_history_record(dash_history *h, int i, double t,
    struct json_t *status, long http, const char *why);
/* A number that changes whenever a sample was added or a daemon went
 * up or down, so that a page can ask cheaply whether to fetch again. */
unsigned long dash_history_version(const dash_history *h);
/* Everything the page draws at time now: a new JSON object. */
struct json_t *dash_history_json(const dash_history *h, double now);
/* The latest status of each daemon as it was received, with whether it
 * answered: a new JSON object. */
struct json_t *dash_history_latest(const dash_history *h, double now);

#endif
