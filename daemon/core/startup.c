/* The start-up of blocktraind, training and serving alike: one table of
 * flags, the configuration under them, and the backend. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/core/pidfile.h"
#include "daemon/core/startup.h"
#include "kernels/error.h"
#include "kernels/pool.h"

/* Which mode a flag belongs to. */
enum { BOTH, TRAIN, SERVE };

static const struct {
	char flag;
	int mode;
	size_t field;           /* offsetof(startup_flags, the override) */
} overrides[] = {
	{ 't', BOTH, offsetof(startup_flags, threads) },
	{ 'D', BOTH, offsetof(startup_flags, device) },
	{ 's', BOTH, offsetof(startup_flags, state_dir) },
	{ 'r', BOTH, offsetof(startup_flags, spec) },
	{ 'l', TRAIN, offsetof(startup_flags, listen) },
	{ 'b', TRAIN, offsetof(startup_flags, block) },
	{ 'p', TRAIN, offsetof(startup_flags, peers) },
	{ 'L', SERVE, offsetof(startup_flags, pipeline_listen) },
	{ 'N', SERVE, offsetof(startup_flags, pipeline_next) },
	{ 'P', SERVE, offsetof(startup_flags, pipeline_hosts) },
};
#define NOVERRIDES (sizeof(overrides) / sizeof(overrides[0]))

void
startup_usage(FILE *f, int serve)
{
	if (serve) {
		fprintf(f, "usage: blocktraind -S [-dfnv] [-c file] [-L host:port] "
		    "[-N host:port]\n"
		    "                  [-P hosts] [-s dir] [-r spec] "
		    "[-D auto|cpu|cuda]\n"
		    "                  [-t threads]\n"
		    "Serves the inference pipeline: this host's blocks and its "
		    "slice of the causal\nLM, over mutual TLS pinned to the "
		    "host list's peer ids (proto/PROTOCOL.md).\n"
		    "  -S        serve the pipeline instead of training\n"
		    "  -c file   configuration (default " STARTUP_DEFAULT_CONF
		    ")\n"
		    "  -L addr   pipeline address of this host, as the host "
		    "list writes it\n"
		    "  -P hosts  pipeline host list (pipeline_hosts)\n"
		    "  -N addr   reach the next host at addr instead "
		    "(pipeline_next: a relay, NAT)\n"
		    "  -s dir    the checkpoints (block-B.ckpt, causal.ckpt) and "
		    "the identity\n            (state_dir)\n"
		    "  -r spec   the run spec (not needed with a logical "
		    "shape)\n"
		    "  -d, -f    stay in the foreground, log to stderr (the "
		    "default under\n            systemd); otherwise the log is "
		    "pipeline.log in the state dir\n"
		    "  -n        check the configuration and the host list, "
		    "and exit\n"
		    "  -v        more detail in the log\n"
		    "See blocktraind(8) and blocktrain.conf(5).\n");
		return;
	}
	fprintf(f, "usage: blocktraind [-dfnv] [-c file] [-l host:port] "
	    "[-b block] [-s dir]\n"
	    "                  [-p peers] [-r spec] [-D auto|cpu|cuda] "
	    "[-t threads]\n"
	    "  -c file   configuration (default " STARTUP_DEFAULT_CONF ")\n"
	    "  -d, -f    stay in the foreground, log to stderr (the default "
	    "under systemd);\n            otherwise the log is "
	    "blocktraind.log in the state directory\n"
	    "  -n        check the configuration, spec and peer list, "
	    "and exit\n"
	    "  -v        more detail in the log\n"
	    "  -S        serve the inference pipeline instead "
	    "(blocktraind -S -h)\n"
	    "  -l, -b, -s, -p, -r, -D, -t   override listen, block, "
	    "state_dir, peers, spec,\n"
	    "            device, threads\n"
	    "See blocktraind(8) and blocktrain.conf(5).\n");
}

static int
set_override(startup_flags *f, int ch, const char *arg, char *err)
{
	size_t i;

	for (i = 0; i < NOVERRIDES; i++) {
		if (overrides[i].flag != ch)
			continue;
		if (overrides[i].mode == (f->serve ? TRAIN : SERVE))
			return kn_error(err, 2, "-%c is a flag of %s", ch,
			    f->serve ? "training (blocktraind without -S)" :
			    "the pipeline (blocktraind -S)");
		*(const char **)((char *)f + overrides[i].field) = arg;
		return 0;
	}
	return kn_error(err, 2, "unknown flag -%c", ch);
}

int
startup_parse(startup_flags *f, int argc, char **argv, char *err)
{
	int ch, i;

	memset(f, 0, sizeof(*f));
	/* the mode first: it decides which flags exist */
	for (i = 1; i < argc; i++)
		if (strcmp(argv[i], "-S") == 0)
			f->serve = 1;
	optind = 1;
	opterr = 0;
	while ((ch = getopt(argc, argv, "Sc:dfnvhl:b:s:p:r:D:t:L:N:P:")) != -1) {
		switch (ch) {
		case 'S': break;
		case 'c': f->conf = optarg; break;
		case 'd': case 'f': f->foreground = 1; break;
		case 'n': f->check_only = 1; break;
		case 'v': f->verbose++; break;
		case 'h': f->help = 1; break;
		case '?':
			return kn_error(err, 2, optopt && strchr("clbsprDtLNP",
			    optopt) ? "-%c needs a value" : "unknown flag -%c",
			    optopt);
		default:
			if (set_override(f, ch, optarg, err) != 0)
				return 2;
		}
	}
	if (optind != argc)
		return kn_error(err, 2, "unexpected argument '%s'", argv[optind]);
	return 0;
}

static void
copy(char *dst, size_t len, const char *src)
{
	if (src != NULL)
		snprintf(dst, len, "%s", src);
}

int
startup_config(cf_config *cfg, const startup_flags *f, char *err)
{
	const char *conf = f->conf;
	int rc;

	cf_defaults(cfg);
	if (conf == NULL && access(STARTUP_DEFAULT_CONF, F_OK) == 0)
		conf = STARTUP_DEFAULT_CONF;
	/* without a file, the defaults and the flags may be enough */
	if (conf != NULL && (rc = cf_load(cfg, conf, err)) != 0)
		return rc;
	if (f->listen != NULL && cf_parse_hostport(f->listen, cfg->listen_host,
	    sizeof(cfg->listen_host), &cfg->listen_port) != 0)
		return kn_error(err, KN_EINVAL, "-l: '%s' is not host:port",
		    f->listen);
	if (f->block != NULL) {
		cfg->block = atoi(f->block);
		if (cfg->block < 1)
			return kn_error(err, KN_EINVAL, "-b: block counts from 1");
	}
	if (f->threads != NULL) {
		char *end;
		long t = strtol(f->threads, &end, 10);

		if (end == f->threads || *end || t < 0 || t > 256)
			return kn_error(err, KN_EINVAL, "-t: threads is 0 (all "
			    "cores) to 256, not '%s'", f->threads);
		cfg->threads = (int)t;
	}
	copy(cfg->state_dir, sizeof(cfg->state_dir), f->state_dir);
	copy(cfg->peers, sizeof(cfg->peers), f->peers);
	copy(cfg->spec, sizeof(cfg->spec), f->spec);
	copy(cfg->device, sizeof(cfg->device), f->device);
	copy(cfg->pipeline_listen, sizeof(cfg->pipeline_listen),
	    f->pipeline_listen);
	copy(cfg->pipeline_next, sizeof(cfg->pipeline_next), f->pipeline_next);
	copy(cfg->pipeline_hosts, sizeof(cfg->pipeline_hosts),
	    f->pipeline_hosts);
	return cf_validate(cfg, err);
}

void
startup_print_config(FILE *out, const startup_flags *f,
    const cf_config *cfg, const pr_spec *spec)
{
	if (f->verbose == 0)
		return;
	fprintf(out, "# blocktrain.conf in effect\n");
	cf_print(out, cfg);
	if (spec != NULL) {
		fprintf(out, "\n# run spec %s\n", cfg->spec);
		pr_spec_print(out, spec);
	}
}

void
startup_log(const startup_flags *f)
{
	log_init(1, f->verbose, "blocktraind");
}

/* The pid file this daemon holds from startup_claim to startup_release. */
static pf_file pid_file = { .fd = -1 };

/* Its files in the state directory: a pipeline host may share one with
 * a training daemon (serving the checkpoints where they are trained). */
static const char *
file_name(const startup_flags *f, int log)
{
	if (f->serve)
		return log ? "pipeline.log" : "pipeline.pid";
	return log ? "blocktraind.log" : "blocktraind.pid";
}

int
startup_supervised(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (getenv("NOTIFY_SOCKET") != NULL)
		return 1;
	/* systemd's own test: stderr is the journal stream it names */
	if (js != NULL && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
	    fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev ==
	    dev && (unsigned long long)st.st_ino == ino)
		return 1;
	/* a unit's process; a shell that inherited the variable has a
	 * terminal */
	return getenv("INVOCATION_ID") != NULL && !isatty(STDIN_FILENO);
}

void
startup_claim(const startup_flags *f, const char *state_dir)
{
	char err[PR_ERR_LEN];

	if (pf_claim(&pid_file, state_dir, file_name(f, 0), err) != 0)
		fatalx("%s", err);
}

/* The write end of the pipe the detaching parent waits on; -1 when no
 * one waits. */
static int ready_fd = -1;

/* The parent's side: waits until the daemon says it is up (a byte on
 * the pipe), or until the pipe closes without it (the daemon exited),
 * and then prints what the daemon logged meanwhile, so that an error at
 * start shows where it was started.  Never returns. */
static void
wait_ready(int fd, const char *log, off_t from)
{
	char buf[4096];
	ssize_t n;
	int up = 0;
	FILE *f;

	while ((n = read(fd, buf, 1)) < 0 && errno == EINTR)
		;
	up = n == 1;
	if (!up && (f = fopen(log, "r")) != NULL) {
		fprintf(stderr, "blocktraind: did not start; from %s:\n", log);
		if (fseeko(f, from, SEEK_SET) == 0)
			while ((n = (ssize_t)fread(buf, 1, sizeof(buf), f)) > 0)
				fwrite(buf, 1, (size_t)n, stderr);
		fclose(f);
	}
	_exit(up ? 0 : 1);
}

void
startup_daemonize(const startup_flags *f, const char *state_dir)
{
	char err[PR_ERR_LEN], path[PR_PATH_LEN + 32];
	int fd, p[2];
	struct stat st;
	pid_t pid;

	if (f->foreground || startup_supervised()) {
		if (pf_write(&pid_file, err) != 0)
			fatalx("%s", err);
		return;
	}
	/* opened before detaching, so that a log that cannot be written
	 * is said where it can still be read */
	snprintf(path, sizeof(path), "%s/%s", state_dir, file_name(f, 1));
	if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
	    0640)) < 0)
		fatal("cannot open the log file %s", path);
	if (fstat(fd, &st) != 0 || pipe(p) != 0)
		fatal("cannot start");
	log_info("starting in the background: the log is %s, the pid file "
	    "%s", path, pid_file.path);
	if ((pid = fork()) < 0)
		fatal("fork");
	if (pid > 0) {
		close(p[1]);
		wait_ready(p[0], path, st.st_size);
	}
	close(p[0]);
	/* a session of its own, and a second fork so that it never gets a
	 * terminal back */
	if (setsid() < 0)
		fatal("setsid");
	if ((pid = fork()) < 0)
		fatal("fork");
	if (pid > 0)
		_exit(0);
	ready_fd = p[1];
	/* stray output of libraries lands in the log too */
	if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
		fatal("cannot write the log file %s", path);
	close(fd);
	if ((fd = open("/dev/null", O_RDONLY)) >= 0) {
		dup2(fd, STDIN_FILENO);
		if (fd > STDIN_FILENO)
			close(fd);
	}
	log_to_file("blocktraind");
	if (pf_write(&pid_file, err) != 0)
		fatalx("%s", err);
	log_info("blocktraind pid %ld in the background", (long)getpid());
}

void
startup_ready(void)
{
	if (ready_fd < 0)
		return;
	if (write(ready_fd, "1", 1) != 1)
		log_warn("could not tell the starting shell that this daemon "
		    "is up");
	close(ready_fd);
	ready_fd = -1;
}

static void
hup_mask(int how)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(how, &set, NULL);
}

void
startup_hold_hup(void)
{
	hup_mask(SIG_BLOCK);
}

void
startup_take_hup(void)
{
	hup_mask(SIG_UNBLOCK);
}

void
startup_release(void)
{
	pf_release(&pid_file);
}

const kn_backend *
startup_backend(const cf_config *cfg, char *desc, size_t desclen, char *err)
{
	char note[KN_ERR_LEN];
	kn_backend_kind kind;
	const kn_backend *be;

	kn_backend_parse(cfg->device, &kind);
	if (kn_pool_init(cfg->threads, err) != 0 ||
	    (be = kn_backend_get(kind, note, err)) == NULL)
		return NULL;
	if (note[0])
		log_info("%s", note);
	kn_backend_describe(be, desc, desclen);
	return be;
}
