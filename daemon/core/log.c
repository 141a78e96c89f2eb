/* Log sink of the daemon: one line per message, a timestamp on stderr,
 * the priority on syslog; a detached daemon's stderr is its log file,
 * whose lines carry the date as well, and it logs to syslog too. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "daemon/core/log.h"

static int log_foreground = 1;
static int log_verbose;
static int log_dated;           /* the date too: a file read days later */
static int log_syslog;          /* syslog as well as stderr */

void
log_init(int foreground, int verbose, const char *ident)
{
	log_foreground = foreground;
	log_verbose = verbose;
	log_dated = 0;
	log_syslog = !foreground;
	if (!foreground)
		openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void
log_to_file(const char *ident)
{
	log_foreground = 1;
	log_dated = 1;
	log_syslog = 1;
	openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

static void
vlog(int pri, const char *fmt, va_list ap, const char *suffix)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (log_foreground) {
		struct timespec ts;
		struct tm tm;
		char when[32];

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), log_dated ? "%Y-%m-%d %H:%M:%S" :
		    "%H:%M:%S", &tm);
		fprintf(stderr, "%s.%03ld %s%s%s\n", when, ts.tv_nsec / 1000000,
		    msg, suffix ? ": " : "", suffix ? suffix : "");
	}
	if (log_syslog)
		syslog(pri, "%s%s%s", msg, suffix ? ": " : "",
		    suffix ? suffix : "");
}

void
log_warn(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_WARNING, fmt, ap, strerror(saved));
	va_end(ap);
	errno = saved;
}

void
log_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_WARNING, fmt, ap, NULL);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_INFO, fmt, ap, NULL);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list ap;

	if (!log_verbose)
		return;
	va_start(ap, fmt);
	vlog(LOG_DEBUG, fmt, ap, NULL);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, fmt, ap, strerror(saved));
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, fmt, ap, NULL);
	va_end(ap);
	exit(1);
}
