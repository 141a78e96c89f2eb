/* shardmeter cluster: SOMA's data clusters and router (DESIGN section 3).
 * Splits the input files into documents, weighs them by word tf-idf,
 * embeds them by a truncated SVD, clusters them by balanced spherical
 * k-means, and writes the router, the assignment and one training text
 * per expert. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/cli/cmd.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/pool.h"
#include "proto/checkpoint.h"
#include "proto/router.h"
#include "soma/docs.h"
#include "soma/kmeans.h"
#include "soma/router.h"
#include "soma/svd.h"
#include "soma/tfidf.h"

#define TOP_WORDS 8

struct cluster_args {
	const char *out;
	int experts, dims, vocab, chunk, threads;
	int skip;               /* --skip-dims: leading directions left out */
	int balance_bytes;      /* --balance bytes: equal bytes, not
	                         * equal documents */
	uint64_t seed;
	char **files;
	int nfiles;
};

/* What the steps make, freed by cluster_free. */
struct cluster_run {
	const struct cluster_args *a;
	double t0;
	char *text;             /* the input files, concatenated */
	size_t len;
	sa_docs docs;
	sa_vocab vocab;
	sa_csr rows;
	float *basis;           /* (V, D) */
	float *emb;             /* (ndocs, D) */
	double *weight;         /* (ndocs) bytes, with --balance bytes */
	int *assign;            /* (ndocs) */
	pr_router file;         /* until the router takes it over */
	sa_router router;
};

static int
cluster_parse(const struct cmd_entry *self, struct cluster_args *a,
    int argc, char **argv)
{
	static const struct option opts[] = {
		{ "experts", required_argument, NULL, 'n' },
		{ "out", required_argument, NULL, 'o' },
		{ "dims", required_argument, NULL, 'd' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "seed", required_argument, NULL, 's' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "threads", required_argument, NULL, 'T' },
		{ "balance", required_argument, NULL, 'b' },
		{ "skip-dims", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	char *end;
	int ch, rc = 0;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'n': rc = cli_parse_int("cluster", "experts", optarg, 1,
		    PR_ROUTER_MAX_EXPERTS, &a->experts); break;
		case 'o': a->out = optarg; break;
		case 'd': rc = cli_parse_int("cluster", "dims", optarg, 1,
		    PR_ROUTER_MAX_DIMS, &a->dims); break;
		case 'v': rc = cli_parse_int("cluster", "vocab", optarg, 1,
		    PR_ROUTER_MAX_WORDS, &a->vocab); break;
		case 'k': rc = cli_parse_int("cluster", "skip-dims", optarg,
		    0, PR_ROUTER_MAX_DIMS, &a->skip); break;
		case 'c': rc = cli_parse_int("cluster", "chunk", optarg, 1,
		    1 << 30, &a->chunk); break;
		case 'T': rc = cli_parse_int("cluster", "threads", optarg, 0,
		    1024, &a->threads); break;
		case 's':
			errno = 0;
			a->seed = strtoull(optarg, &end, 10);
			if (errno != 0 || end == optarg || *end != '\0' ||
			    optarg[0] == '-') {
				fprintf(stderr, "shardmeter cluster: --seed takes "
				    "an unsigned integer, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'b':
			if (strcmp(optarg, "docs") != 0 &&
			    strcmp(optarg, "bytes") != 0) {
				fprintf(stderr, "shardmeter cluster: --balance "
				    "takes docs or bytes, not '%s'\n", optarg);
				return 2;
			}
			a->balance_bytes = strcmp(optarg, "bytes") == 0;
			break;
		case 'h': return cli_help(self);
		default: return 2;
		}
		if (rc != 0)
			return 2;
	}
	if (a->experts == 0 || a->out == NULL || optind >= argc) {
		fprintf(stderr, "shardmeter cluster: --experts N, --out DIR and "
		    "at least one FILE are required\n");
		return 2;
	}
	a->files = argv + optind;
	a->nfiles = argc - optind;
	return CLI_CONTINUE;
}

static void
progress(const struct cluster_run *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
progress(const struct cluster_run *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "cluster: [%6.1f s] ", kn_now() - c->t0);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The files one after another in c->text, and their documents. */
static int
cluster_read(struct cluster_run *c, char *err)
{
	const struct cluster_args *a = c->a;
	size_t len;
	char *data, *grown;
	int i, rc;

	for (i = 0; i < a->nfiles; i++) {
		if ((rc = cli_read_file(a->files[i], &data, &len, err)) != 0)
			return rc;
		if ((grown = realloc(c->text, c->len + len + 1)) == NULL) {
			free(data);
			return kn_error(err, KN_ENOMEM, "out of memory reading "
			    "%s", a->files[i]);
		}
		c->text = grown;
		memcpy(c->text + c->len, data, len);
		free(data);
		if ((rc = sa_docs_split(&c->docs, c->text + c->len, len,
		    c->len, (size_t)a->chunk, err)) != 0)
			return rc;
		c->len += len;
	}
	progress(c, "%d file%s, %.1f MB, %zu documents", a->nfiles,
	    a->nfiles == 1 ? "" : "s", (double)c->len / 1e6, c->docs.n);
	if (c->docs.n < (size_t)a->experts)
		return kn_error(err, KN_EINVAL, "%d experts need at least %d "
		    "documents; the input has %zu", a->experts, a->experts,
		    c->docs.n);
	return 0;
}

static int
cluster_embed(struct cluster_run *c, char *err)
{
	const struct cluster_args *a = c->a;
	size_t n = c->docs.n, v;
	int rc, total = a->dims + a->skip;

	if ((rc = sa_vocab_build(&c->vocab, c->text, c->docs.v, n,
	    (size_t)a->vocab, err)) != 0 ||
	    (rc = sa_tfidf_rows(&c->rows, &c->vocab, c->text, c->docs.v, n,
	    err)) != 0)
		return rc;
	v = c->vocab.n;
	progress(c, "tf-idf: %zu words, %zu nonzeros", v,
	    c->rows.rowptr[n]);
	if ((size_t)total > n || (size_t)total > v)
		return kn_error(err, KN_EINVAL, "--dims %d with --skip-dims %d "
		    "needs at least %d documents and %d words; the input has "
		    "%zu and %zu", a->dims, a->skip, total, total, n, v);
	c->basis = malloc(v * (size_t)total * sizeof(*c->basis));
	c->emb = malloc(n * (size_t)a->dims * sizeof(*c->emb));
	if (c->basis == NULL || c->emb == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory for %zu "
		    "embeddings", n);
	if ((rc = sa_svd(&c->rows, total, SA_SVD_POWER_ITERS, a->seed,
	    c->basis, NULL, err)) != 0)
		return rc;
	sa_basis_skip(c->basis, v, total, a->skip);
	sa_embed_rows(&c->rows, c->basis, a->dims, c->emb);
	progress(c, "svd: %d dimensions after the leading %d", a->dims,
	    a->skip);
	return 0;
}

static void
kmeans_progress(void *ctx, int iter, size_t moved, double mean_cos)
{
	progress(ctx, "k-means iteration %d: %zu moved, mean cosine %.4f",
	    iter, moved, mean_cos);
}

/* The router file from the vocabulary, basis and centroids. */
static int
cluster_route(struct cluster_run *c, char *err)
{
	const struct cluster_args *a = c->a;
	pr_router *f = &c->file;
	char path[PR_PATH_LEN + 32], *buf;
	size_t len;
	int rc;

	if ((rc = pr_router_alloc(f, (uint32_t)c->vocab.n, (uint32_t)a->dims,
	    (uint32_t)a->experts, c->vocab.words_len, err)) != 0)
		return rc;
	f->prefix = SA_ROUTE_PREFIX;
	f->seed = a->seed;
	memcpy(f->words, c->vocab.words, c->vocab.words_len);
	memcpy(f->idf, c->vocab.idf, c->vocab.n * sizeof(float));
	memcpy(f->basis, c->basis, c->vocab.n * (size_t)a->dims *
	    sizeof(float));
	if (a->balance_bytes) {
		size_t i;

		if ((c->weight = malloc(c->docs.n * sizeof(*c->weight))) ==
		    NULL)
			return kn_error(err, KN_ENOMEM, "out of memory");
		for (i = 0; i < c->docs.n; i++)
			c->weight[i] = (double)c->docs.v[i].len;
	}
	if ((rc = sa_kmeans(c->emb, c->docs.n, a->dims, a->experts,
	    c->weight, SA_KMEANS_ITERS, a->seed, f->centroids, c->assign,
	    kmeans_progress, c, err)) != 0 ||
	    (rc = pr_router_encode(f, &buf, &len, err)) != 0)
		return rc;
	snprintf(path, sizeof(path), "%s/router.smr", a->out);
	rc = pr_ckpt_write_file(path, buf, len, err);
	free(buf);
	if (rc == 0)
		rc = sa_router_init(&c->router, f, err);
	return rc;
}

static int
write_close(FILE *f, const char *path, char *err)
{
	int bad = ferror(f);

	if (fclose(f) != 0 || bad)
		return kn_error(err, KN_EIO, "cannot write %s", path);
	return 0;
}

/* assignment.tsv and cluster-<e>.txt */
static int
cluster_write(struct cluster_run *c, char *err)
{
	const struct cluster_args *a = c->a;
	char path[PR_PATH_LEN + 32];
	size_t i;
	FILE *f;
	int e, rc;

	snprintf(path, sizeof(path), "%s/assignment.tsv", a->out);
	if ((f = fopen(path, "w")) == NULL)
		return kn_error(err, KN_EIO, "cannot create %s: %s", path,
		    strerror(errno));
	fprintf(f, "doc\toffset\tlength\tcluster\n");
	for (i = 0; i < c->docs.n; i++)
		fprintf(f, "%zu\t%zu\t%zu\t%d\n", i, c->docs.v[i].off,
		    c->docs.v[i].len, c->assign[i]);
	if ((rc = write_close(f, path, err)) != 0)
		return rc;
	for (e = 0; e < a->experts; e++) {
		snprintf(path, sizeof(path), "%s/cluster-%d.txt", a->out, e);
		if ((f = fopen(path, "w")) == NULL)
			return kn_error(err, KN_EIO, "cannot create %s: %s",
			    path, strerror(errno));
		for (i = 0; i < c->docs.n; i++)
			if (c->assign[i] == e)
				fwrite(c->text + c->docs.v[i].off, 1,
				    c->docs.v[i].len, f);
		if ((rc = write_close(f, path, err)) != 0)
			return rc;
	}
	return 0;
}

static void
cluster_report(const struct cluster_run *c)
{
	const struct cluster_args *a = c->a;
	int e, i, m, ids[TOP_WORDS];
	size_t k, size, bytes;

	printf("expert\tdocuments\tbytes\ttop words\n");
	for (e = 0; e < a->experts; e++) {
		for (k = 0, size = 0, bytes = 0; k < c->docs.n; k++)
			if (c->assign[k] == e) {
				size++;
				bytes += c->docs.v[k].len;
			}
		printf("%d\t%zu\t%zu\t", e, size, bytes);
		m = sa_router_top_words(&c->router, e, TOP_WORDS, ids);
		for (i = 0; i < m; i++)
			printf("%s%s", i ? " " : "", c->router.vocab.words +
			    c->router.vocab.start[ids[i]]);
		printf("\n");
	}
	printf("wrote %s/router.smr, %s/assignment.tsv and "
	    "%s/cluster-{0..%d}.txt\n", a->out, a->out, a->out,
	    a->experts - 1);
}

static void
cluster_free(struct cluster_run *c)
{
	free(c->text);
	sa_docs_free(&c->docs);
	sa_vocab_free(&c->vocab);
	sa_csr_free(&c->rows);
	free(c->basis);
	free(c->emb);
	free(c->weight);
	free(c->assign);
	pr_router_free(&c->file);
	sa_router_free(&c->router);
}

static int
cluster_exec(const struct cmd_entry *self, int argc, char **argv)
{
	struct cluster_args a = { .dims = SA_SVD_DIMS,
	    .vocab = SA_VOCAB_DEFAULT, .chunk = SA_DOCS_CHUNK, .seed = 1,
	    .skip = SA_SVD_SKIP };
	struct cluster_run c = { .a = &a };
	char err[KN_ERR_LEN];
	int rc;

	if ((rc = cluster_parse(self, &a, argc, argv)) != CLI_CONTINUE)
		return rc;
	c.t0 = kn_now();
	if (mkdir(a.out, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "shardmeter cluster: cannot create %s: %s\n",
		    a.out, strerror(errno));
		return 1;
	}
	if ((rc = kn_pool_init(a.threads, err)) == 0 &&
	    (rc = cluster_read(&c, err)) == 0 &&
	    (rc = cluster_embed(&c, err)) == 0) {
		if ((c.assign = malloc(c.docs.n * sizeof(*c.assign))) == NULL)
			rc = kn_error(err, KN_ENOMEM, "out of memory");
		else if ((rc = cluster_route(&c, err)) == 0 &&
		    (rc = cluster_write(&c, err)) == 0) {
			progress(&c, "done");
			cluster_report(&c);
		}
	}
	if (rc != 0)
		fprintf(stderr, "shardmeter cluster: %s\n", err);
	cluster_free(&c);
	return rc == 0 ? 0 : 1;
}

const struct cmd_entry cmd_cluster_entry = {
	"cluster",
	"split text into documents and cluster them for SOMA's experts",
	"usage: shardmeter cluster --experts N --out DIR [--dims D] "
	    "[--vocab V]\n"
	"                          [--seed S] [--chunk BYTES] "
	    "[--balance docs|bytes]\n"
	"                          [--skip-dims K] [--threads T] FILE...\n"
	"\n"
	"Splits the FILEs into documents (their <doc ...> ... </doc> entries,\n"
	"or else chunks of whole lines of at most BYTES bytes, default 4096),\n"
	"weighs each by word tf-idf over the V words in most documents\n"
	"(default 20000), embeds them by a truncated SVD of D dimensions\n"
	"(default 128) after the leading K (default 1: the direction of the\n"
	"words most documents share, which sorts documents by length, not\n"
	"topic), and clusters them by balanced spherical k-means with\n"
	"seed S (default 1) into N clusters, one per expert, of equal size:\n"
	"floor(n/N) or ceil(n/N) of the n documents, or with --balance bytes\n"
	"bytes within one document's length of an equal share.  Writes into\n"
	"DIR:\n"
	"  router.smr       the router: vocabulary, SVD basis, centroids\n"
	"  assignment.tsv   document, byte offset (into the FILEs as one\n"
	"                   text, in the order given), length, cluster\n"
	"  cluster-E.txt    expert E's documents, one after another\n"
	"and prints each cluster's size and top words.\n",
	cluster_exec
};
