/* The pid file of a daemon in its state directory: held under an
 * advisory lock for the daemon's life, so that a second daemon on the
 * same directory is refused with the first one's pid, and a file left by
 * a daemon that died (kill -9) is taken over without fuss.  Called by
 * startup.c for both kinds of blocktraind. */
#ifndef SM_PIDFILE_H
#define SM_PIDFILE_H

#include <sys/types.h>

#include "proto/spec.h"

typedef struct {
	int fd;                 /* -1: none held */
	char path[PR_PATH_LEN + 32];
} pf_file;

/* Opens and locks path (made if missing, with its directory dir).
 * 0; KN_EINVAL when another process holds it, err naming its pid and
 * the file; KN_EIO with the reason otherwise.  Writes nothing yet. */
int pf_claim(pf_file *p, const char *dir, const char *name, char *err);
/* Writes the calling process's pid into the claimed file (after a fork:
 * the lock goes with the open file). */
int pf_write(pf_file *p, char *err);
/* The pid the file names, or 0 when it names none (for messages). */
pid_t pf_read(const char *path);
/* Removes the file and lets the lock go (a clean exit). */
void pf_release(pf_file *p);

#endif
