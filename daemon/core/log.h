/* Logging for blocktraind, after OpenSMTPD's log.c: to stderr in the
 * foreground, to syslog otherwise; log_to_file, for a daemon that
 * detached with its stderr on its log file: to stderr with the date, and
 * to syslog.  log_warn adds strerror(errno); fatal/fatalx exit and are
 * for start-up only. */
#ifndef SM_LOG_H
#define SM_LOG_H

void log_init(int foreground, int verbose, const char *ident);
void log_to_file(const char *ident);
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fatal(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));

#endif
