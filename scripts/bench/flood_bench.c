/* A flood against one blocktraind, for scripts/bench/flood: idle and
 * slowloris connections from many loopback addresses held open, the
 * daemon's memory read from /proc, and the time a listed operator waits
 * for GET /v1/status over TLS before and during the flood. */
#include "config.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/core/identity.h"
#include "kernels/clock.h"

static size_t
discard(char *p, size_t size, size_t n, void *u)
{
	(void)p;
	(void)u;
	return size * n;
}

/* One status request as the operator; milliseconds, or -1. */
static double
status_ms(CURL *h)
{
	long code = 0;
	double t0 = kn_now();

	if (curl_easy_perform(h) != CURLE_OK)
		return -1;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	return code == 200 ? 1000 * (kn_now() - t0) : -1;
}

static long
rss_kb(int pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static int
connect_from(int port, int host)
{
	struct sockaddr_in sa = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + (uint32_t)host);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		goto fail;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		goto fail;
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	return -1;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median and the worst of reps status requests. */
static void
measure(CURL *h, int reps, double *median, double *worst, int *failed)
{
	double *t = calloc((size_t)reps, sizeof(double));
	int i, n = 0;

	*failed = 0;
	for (i = 0; i < reps; i++) {
		double ms = status_ms(h);

		if (ms < 0)
			(*failed)++;
		else
			t[n++] = ms;
		usleep(20000);
	}
	qsort(t, (size_t)n, sizeof(double), cmp_double);
	*median = n ? t[n / 2] : -1;
	*worst = n ? t[n - 1] : -1;
	free(t);
}

int
main(int argc, char **argv)
{
	int port, pid, idle, slow, hosts = 40, reps = 20, i, n = 0, *fds;
	char url[128], cert[1024], key[1024], pin[ID_PIN_LEN], err[256];
	uint8_t id[ID_BYTES];
	double med0, worst0, med1, worst1;
	int fail0, fail1, held;
	long rss0, rss1;
	struct rlimit rl;
	CURL *h;

	if (argc != 8) {
		fprintf(stderr, "usage: flood-bench PORT PID PEER-ID "
		    "OPERATOR-DIR IDLE SLOWLORIS SECONDS\n");
		return 2;
	}
	port = atoi(argv[1]);
	pid = atoi(argv[2]);
	if (id_parse(argv[3], id, err) != 0) {
		fprintf(stderr, "flood-bench: %s\n", err);
		return 2;
	}
	idle = atoi(argv[5]);
	slow = atoi(argv[6]);
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	id_pin(id, pin);
	snprintf(cert, sizeof(cert), "%s/%s", argv[4], ID_CERT_FILE);
	snprintf(key, sizeof(key), "%s/%s", argv[4], ID_KEY_FILE);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/v1/status", port);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	h = curl_easy_init();
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_SSLCERT, cert);
	curl_easy_setopt(h, CURLOPT_SSLKEY, key);
	curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, pin);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
	curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	/* a new connection each time: the flood is at the door */
	curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);

	rss0 = rss_kb(pid);
	measure(h, reps, &med0, &worst0, &fail0);
	fds = calloc((size_t)(idle + slow), sizeof(int));
	for (i = 0; i < idle + slow; i++)
		if ((fds[n] = connect_from(port, 2 + i % hosts)) >= 0)
			n++;
	/* slowloris: a byte of a TLS record now and then, forever */
	{
		double end = kn_now() + atof(argv[7]);

		while (kn_now() < end) {
			for (i = idle; i < n; i++)
				if (fds[i] >= 0 && send(fds[i], "\x16", 1,
				    MSG_NOSIGNAL) != 1) {
					close(fds[i]);
					fds[i] = -1;
				}
			sleep(1);
		}
	}
	rss1 = rss_kb(pid);
	measure(h, reps, &med1, &worst1, &fail1);
	for (i = held = 0; i < n; i++) {
		char c;

		/* still open on our side and not closed by the daemon */
		if (fds[i] >= 0 && recv(fds[i], &c, 1, MSG_DONTWAIT) < 0)
			held++;
		if (fds[i] >= 0)
			close(fds[i]);
	}
	printf("flood: %d idle + %d slowloris connections from %d addresses "
	    "(%d made; at the end %d still open, the rest closed by the "
	    "daemon: limits, eviction, handshake timeout)\n", idle, slow,
	    hosts, n, held);
	printf("daemon RSS: %ld kB before, %ld kB during (+%ld kB)\n", rss0,
	    rss1, rss1 - rss0);
	printf("operator GET /v1/status over TLS, new connection each: "
	    "median %.2f ms, worst %.2f ms, %d failed (before); median %.2f "
	    "ms, worst %.2f ms, %d failed (during)\n", med0, worst0, fail0,
	    med1, worst1, fail1);
	printf("ratio during/before (median): %.2f\n", med1 / med0);
	curl_easy_cleanup(h);
	curl_global_cleanup();
	free(fds);
	return fail1 > 0;
}
