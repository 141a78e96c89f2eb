/* The start-up both kinds of blocktraind share (blocktraind.c trains,
 * serve_main.c serves the pipeline): the flags by name, the configuration
 * with the flags over it, the move to the background, and the compute
 * backend.  Start-up may exit (fatal); nothing after it does. */
#ifndef SM_STARTUP_H
#define SM_STARTUP_H

#include <stddef.h>
#include <stdio.h>

#include "daemon/core/conf.h"
#include "kernels/backend.h"
#include "proto/spec.h"

#define STARTUP_DEFAULT_CONF "/etc/blocktrain/blocktrain.conf"

typedef struct {
	int serve;                      /* -S: the pipeline, not training */
	const char *conf;               /* -c; NULL: the default, if there */
	int foreground;                 /* -d, -f */
	int check_only;                 /* -n */
	int verbose;                    /* -v, counted */
	int help;                       /* -h */
	/* overrides of configuration keys; NULL: as configured */
	const char *threads;            /* -t threads */
	const char *device;             /* -D device */
	const char *state_dir;          /* -s state_dir */
	const char *spec;               /* -r spec */
	const char *listen;             /* -l listen (training) */
	const char *block;              /* -b block (training) */
	const char *peers;              /* -p peers (training) */
	const char *pipeline_listen;    /* -L (serving) */
	const char *pipeline_next;      /* -N (serving) */
	const char *pipeline_hosts;     /* -P (serving) */
} startup_flags;

/* Reads argv into f.  0, or 2 with a reason in err (PR_ERR_LEN) for a
 * usage error: an unknown flag, an operand, or a flag of the other
 * mode. */
int startup_parse(startup_flags *f, int argc, char **argv, char *err);
/* The configuration: defaults, then the file (-c, or the default one if
 * it exists), then the flags, validated. */
int startup_config(cf_config *cfg, const startup_flags *f, char *err);
/* -n: with -v, the effective configuration (every key, defaults
 * included) and, when there is one, the run spec, as files that would
 * give the same. */
void startup_print_config(FILE *out, const startup_flags *f,
    const cf_config *cfg, const pr_spec *spec);
/* The usage of either mode, to out. */
void startup_usage(FILE *out, int serve);
/* Logging to stderr. */
void startup_log(const startup_flags *f);
/* Whether a service manager started us (systemd: NOTIFY_SOCKET, a
 * JOURNAL_STREAM that is our stderr, or INVOCATION_ID without a
 * terminal): blocktraind then stays in the foreground as with -f. */
int startup_supervised(void);
/* The pid file in state_dir (blocktraind.pid; -S: pipeline.pid), locked
 * for the daemon's life: a second daemon on the directory exits here
 * naming the first one's pid. */
void startup_claim(const startup_flags *f, const char *state_dir);
/* Unless -d, -f or a service manager: the move to the background, with
 * stdout and stderr on the log file in state_dir (blocktraind.log; -S:
 * pipeline.log), opened first, and logging there and to syslog.  The
 * shell that started it waits until startup_ready, exiting 0, or until
 * the daemon exits, printing what it logged and exiting 1.  Then the pid
 * written.  The working directory stays: the spec, the lists (read
 * again on SIGHUP) and the state may be relative. */
void startup_daemonize(const startup_flags *f, const char *state_dir);
/* The daemon listens: the shell that started it may return. */
void startup_ready(void);

/* A SIGHUP (a peer list changed) that comes before the daemon's handler
 * is set would end it, SIGHUP's default action.  startup_hold_hup blocks
 * it from the start, so it waits pending; startup_take_hup, once the
 * loop's handler is set, lets it in.  Threads started in between keep it
 * blocked, so the main thread, whose loop handles it, takes it. */
void startup_hold_hup(void);
void startup_take_hup(void);
/* A clean exit: the pid file removed. */
void startup_release(void);
/* The thread pool and the backend the configuration names; its one-line
 * description in desc.  NULL with a reason in err. */
const kn_backend *startup_backend(const cf_config *cfg, char *desc,
    size_t desclen, char *err);

#endif
