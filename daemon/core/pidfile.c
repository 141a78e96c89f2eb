/* The state directory's pid file: flock(2) on it tells a live daemon from
 * a file a dead one left, whatever pid the file holds. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/pidfile.h"
#include "kernels/error.h"

pid_t
pf_read(const char *path)
{
	char buf[32];
	ssize_t n;
	long v;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	v = strtol(buf, NULL, 10);
	/* a file anyone could have written: a pid that fits, or none */
	return v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

static int claim_once(pf_file *p, const char *dir, char *err);

/* Whether fd is still the file at path: the daemon before us may have
 * removed it between our open and our lock. */
static int
still_there(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int
pf_claim(pf_file *p, const char *dir, const char *name, char *err)
{
	int tries;

	p->fd = -1;
	snprintf(p->path, sizeof(p->path), "%s/%s", dir, name);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return kn_error(err, KN_EIO, "cannot make the state directory "
		    "%s: %s", dir, strerror(errno));
	for (tries = 0; tries < 3; tries++) {
		int rc = claim_once(p, dir, err);

		if (rc != KN_OK || still_there(p->fd, p->path))
			return rc;
		close(p->fd);
		p->fd = -1;
	}
	return kn_error(err, KN_EIO, "the pid file %s keeps changing under "
	    "this daemon", p->path);
}

static int
claim_once(pf_file *p, const char *dir, char *err)
{
	if ((p->fd = open(p->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
		return kn_error(err, KN_EIO, "cannot open the pid file %s: %s",
		    p->path, strerror(errno));
	if (flock(p->fd, LOCK_EX | LOCK_NB) != 0) {
		int saved = errno;
		pid_t other = pf_read(p->path);

		close(p->fd);
		p->fd = -1;
		if (saved != EWOULDBLOCK)
			return kn_error(err, KN_EIO, "cannot lock the pid file "
			    "%s: %s", p->path, strerror(saved));
		if (other > 0)
			return kn_error(err, KN_EINVAL, "another blocktraind "
			    "(pid %ld) runs on the state directory %s (%s); "
			    "stop it first, or give this one another state_dir",
			    (long)other, dir, p->path);
		return kn_error(err, KN_EINVAL, "another blocktraind runs on "
		    "the state directory %s (it holds %s); stop it first, or "
		    "give this one another state_dir", dir, p->path);
	}
	return KN_OK;
}

int
pf_write(pf_file *p, char *err)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());

	if (p->fd < 0)
		return KN_OK;
	if (ftruncate(p->fd, 0) != 0 || pwrite(p->fd, buf, (size_t)n, 0) != n)
		return kn_error(err, KN_EIO, "cannot write the pid file %s: %s",
		    p->path, strerror(errno));
	return KN_OK;
}

void
pf_release(pf_file *p)
{
	if (p->fd < 0)
		return;
	/* unlinked while still locked: a daemon starting now either sees
	 * the lock or makes a new file */
	unlink(p->path);
	close(p->fd);
	p->fd = -1;
}
