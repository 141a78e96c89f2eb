/* shardmeter eval --samples: what a run's samples are worth.  From fixed
 * prompts of the split, it draws a window's continuation per prompt with
 * the causal LM (the anchor) and with the blocks under each decoder and
 * step count, and reports for each set the generative cross-entropy (the
 * samples scored by the run's causal LM, nats per byte), their own byte
 * entropy (so that a decoder that repeats itself cannot win the first by
 * it), the share of their words found in a word list and the time of one
 * sample.  The split's own continuations are scored alike, as the
 * ceiling.  When the run's directory holds the end-to-end reference (one
 * network of the blocks' depth on all of (0, 1], trained with the same
 * steps), it draws the same sets in every block's place: what the same
 * compute buys a masked-diffusion model not cut into blocks. */
#include "config.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "daemon/blocktrain/train.h"
#include "daemon/cli/cmd_eval_samples.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"

/* A word: a run of ASCII letters; those of ES_MIN_WORD or more count. */
#define ES_MIN_WORD 3
#define ES_MAX_WORD 64

/* The word list, sorted for bsearch. */
struct es_words {
	char *buf;
	char **v;
	size_t n;
};

static int
es_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
es_words_load(struct es_words *w, const char *path, char *err)
{
	FILE *f = fopen(path, "rb");
	long len;
	size_t i, n = 0;

	memset(w, 0, sizeof(*w));
	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open the word list %s "
		    "(install wamerican, or give --words FILE)", path);
	if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 ||
	    (w->buf = malloc((size_t)len + 1)) == NULL ||
	    fread(w->buf, 1, (size_t)len, f) != (size_t)len) {
		fclose(f);
		free(w->buf);
		w->buf = NULL;
		return kn_error(err, KN_EIO, "cannot read the word list %s",
		    path);
	}
	fclose(f);
	w->buf[len] = '\0';
	for (i = 0; i < (size_t)len; i++)
		n += w->buf[i] == '\n';
	if ((w->v = malloc((n + 1) * sizeof(char *))) == NULL) {
		free(w->buf);
		return kn_error(err, KN_ENOMEM, "out of memory");
	}
	for (i = 0; i < (size_t)len;) {
		char *line = w->buf + i, *nl = strchr(line, '\n');

		if (nl != NULL)
			*nl = '\0';
		if (*line != '\0')
			w->v[w->n++] = line;
		i += strlen(line) + 1;
	}
	qsort(w->v, w->n, sizeof(char *), es_cmp);
	if (w->n == 0) {
		free(w->v);
		free(w->buf);
		return kn_error(err, KN_EINVAL, "the word list %s is empty",
		    path);
	}
	return 0;
}

static void
es_words_free(struct es_words *w)
{
	free(w->v);
	free(w->buf);
}

static int
es_known(const struct es_words *w, const char *word)
{
	char low[ES_MAX_WORD + 1];
	const char *key = word;
	size_t i;

	if (bsearch(&key, w->v, w->n, sizeof(char *), es_cmp) != NULL)
		return 1;
	/* "The" at a sentence's start is the word "the" */
	for (i = 0; word[i] != '\0'; i++)
		low[i] = (char)tolower((unsigned char)word[i]);
	low[i] = '\0';
	key = low;
	return bsearch(&key, w->v, w->n, sizeof(char *), es_cmp) != NULL;
}

/* The words of ES_MIN_WORD letters or more wholly in x[from, to) of a
 * window: one that goes on past either edge is cut and not counted. */
static void
es_count_words(const struct es_words *w, const unsigned char *x, int from,
    int to, long *words, long *known)
{
	int i = from, j;

	while (i < to) {
		if (!isalpha(x[i]) || x[i] > 127) {
			i++;
			continue;
		}
		for (j = i; j < to && isalpha(x[j]) && x[j] <= 127; j++)
			;
		if (i > 0 && isalpha(x[i - 1]) && x[i - 1] <= 127)
			;       /* begins before from */
		else if (j >= to)
			;       /* may go on past the window */
		else if (j - i >= ES_MIN_WORD && j - i <= ES_MAX_WORD) {
			char word[ES_MAX_WORD + 1];

			memcpy(word, x + i, (size_t)(j - i));
			word[j - i] = '\0';
			(*words)++;
			*known += es_known(w, word);
		}
		i = j;
	}
}

/* Bytes no text has: controls other than tab and line ends, DEL, and
 * those that UTF-8 never uses; what a collapsing sampler emits. */
static int
es_odd(unsigned char c)
{
	return (c < 32 && c != '\t' && c != '\n' && c != '\r') || c == 127 ||
	    c == 0xc0 || c == 0xc1 || c >= 0xf5;
}

/* The byte entropy of x[0, len), in nats. */
static double
es_entropy(const unsigned char *x, int len)
{
	int count[256] = { 0 }, i;
	double h = 0.0;

	for (i = 0; i < len; i++)
		count[x[i]]++;
	for (i = 0; i < 256; i++)
		if (count[i] > 0) {
			double p = (double)count[i] / len;

			h -= p * log(p);
		}
	return h;
}

/* One set of samples and its figures. */
struct es_row {
	char what[48];
	int steps, traversals;
	double temp;
	double gen_ce, entropy, dict, ms;
	double odd;             /* the share of es_odd bytes */
	long words;
	unsigned char *x;       /* N windows */
};

static int
es_have(const char *dir, bt_kind kind)
{
	char path[PR_PATH_LEN + 32];

	tr_model_path(path, sizeof(path), dir, kind, 0, "ckpt");
	return access(path, F_OK) == 0;
}

/* The causal LM that draws the anchor and scores every set: the run's,
 * or (--causal-spec, --causal-dir) another run's of the same window, so
 * that runs of other position blocks are scored by one judge.  *lm
 * stays NULL when the run has none and no other is named. */
static int
es_load_causal(const struct cli_run *run, const es_opts *o, kn_model **lm,
    char *err)
{
	char run_id[PR_RUN_ID_LEN];
	pr_spec cs;
	int rc;

	*lm = NULL;
	if (o->causal_dir == NULL)
		return es_have(run->dir, BT_CAUSAL) ? tr_load_model(lm, &run->spec,
		    run->run_id, run->dir, BT_CAUSAL, 0, run->be, 32, err) : 0;
	if ((rc = pr_spec_load(&cs, o->causal_spec, err)) != 0 ||
	    (rc = pr_spec_run_id(&cs, run_id, err)) != 0)
		return rc;
	if (cs.window != run->spec.window)
		return kn_error(err, KN_EINVAL, "the causal LM of %s has a "
		    "window of %d bytes; this run's is %d", o->causal_spec,
		    cs.window, run->spec.window);
	return tr_load_model(lm, &cs, run_id, o->causal_dir, BT_CAUSAL, 0,
	    run->be, 32, err);
}

/* The prompt of sample i: at the start of a word of the text, spread
 * evenly over it; the window from there is the text's own continuation. */
static void
es_prompt(const corpus *c, int n, int i, int N, unsigned char *x)
{
	size_t span = c->len - (size_t)n - 1, off, k;

	off = (size_t)((double)span * i / N);
	for (k = off; k < span && k < off + 256; k++)
		if ((k == 0 || c->data[k - 1] == ' ' || c->data[k - 1] == '\n') &&
		    isalpha(c->data[k]))
			break;
	if (k >= span || k >= off + 256)
		k = off;
	memcpy(x, c->data + k, (size_t)n);
}

/* Scores the N windows of row under the causal LM: the mean over samples
 * of the nats per generated byte given all before it. */
static int
es_score(kn_model *lm, const es_opts *o, int n, struct es_row *row,
    char *err)
{
	int B = lm == NULL || kn_model_max_batch(lm) > 32 ? 32 :
	    kn_model_max_batch(lm);
	int32_t *in = malloc((size_t)B * n * 4), *tg = malloc((size_t)B * n * 4);
	float *w = malloc((size_t)B * n * 4), *wl = malloc((size_t)B * 4);
	int e, b, i, P = o->prompt_bytes, rc = 0;
	double sum = 0.0;

	row->gen_ce = NAN;
	if (lm == NULL)
		goto out;
	if (in == NULL || tg == NULL || w == NULL || wl == NULL)
		rc = kn_error(err, KN_ENOMEM, "out of memory");
	for (e = 0; e < o->samples && rc == 0; e += B) {
		int nb = o->samples - e < B ? o->samples - e : B;
		kn_batch batch = { in, tg, w, nb };

		for (b = 0; b < nb; b++) {
			const unsigned char *x = row->x + (size_t)(e + b) * n;
			size_t r = (size_t)b * n;

			/* position i predicts byte i + 1: the generated
			 * bytes P..n-1 are the targets of positions P-1..n-2 */
			for (i = 0; i < n; i++) {
				in[r + i] = x[i];
				tg[r + i] = i + 1 < n ? x[i + 1] : 0;
				w[r + i] = i >= P - 1 && i + 1 < n ?
				    (float)(1.0 / (n - P)) : 0.0f;
			}
		}
		rc = kn_model_eval(lm, &batch, wl, err);
		for (b = 0; b < nb && rc == 0; b++)
			sum += wl[b];
	}
	row->gen_ce = sum / o->samples;
out:
	free(in); free(tg); free(w); free(wl);
	return rc;
}

static void
es_text_figures(const struct es_words *words, const es_opts *o, int n,
    struct es_row *row)
{
	long known = 0, odd = 0;
	double h = 0.0;
	int i, j, P = o->prompt_bytes;

	row->words = 0;
	for (i = 0; i < o->samples; i++) {
		const unsigned char *x = row->x + (size_t)i * n;

		for (j = P; j < n; j++)
			odd += es_odd(x[j]);
		h += es_entropy(x + P, n - P);
		es_count_words(words, x, P, n, &row->words, &known);
	}
	row->entropy = h / o->samples;
	row->odd = (double)odd / ((double)o->samples * (n - P));
	row->dict = row->words > 0 ? (double)known / row->words : 0.0;
}

/* The samples of one row into row->x (the prompts there already). */
static int
es_draw(kn_model *const *blocks, kn_model *lm, const pr_spec *s,
    const es_opts *o, int ar, bt_decode dec, struct es_row *row, char *err)
{
	int n = s->window, P = o->prompt_bytes, i, j, rc = 0, trav = 1;
	int32_t *seq = malloc((size_t)n * sizeof(int32_t));
	double t0 = kn_now();

	if (seq == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	for (i = 0; i < o->samples && rc == 0; i++) {
		unsigned char *x = row->x + (size_t)i * n;

		for (j = 0; j < n; j++)
			seq[j] = j < P ? x[j] : KN_MASK;
		/* sample i's seed is i + 1, the same in every row */
		rc = ar ? bt_generate_ar(lm, seq, P, n, (float)row->temp,
		    (uint64_t)i + 1, err) : bg_generate(blocks, s, row->steps,
		    seq, P, n, (float)row->temp, (uint64_t)i + 1, dec, 1, &trav,
		    err);
		for (j = P; j < n && rc == 0; j++)
			x[j] = (unsigned char)seq[j];
	}
	row->traversals = ar ? n - P : trav;
	row->ms = (kn_now() - t0) * 1e3 / o->samples;
	free(seq);
	return rc;
}

static void
es_print_line(const struct es_row *r, int json, json_t *arr)
{
	char steps[16], ce[16];

	if (json) {
		json_t *o = json_pack("{s:s,s:i,s:i,s:f,s:f,s:f,s:I,s:f,s:f}",
		    "samples", r->what, "steps", r->steps, "traversals",
		    r->traversals, "temperature", r->temp, "entropy",
		    r->entropy, "dict_share", r->dict, "words",
		    (json_int_t)r->words, "odd_share", r->odd,
		    "ms_per_sample", r->ms);

		json_object_set_new(o, "gen_ce", isnan(r->gen_ce) ?
		    json_null() : json_real(r->gen_ce));
		json_array_append_new(arr, o);
		return;
	}
	if (isnan(r->gen_ce))
		snprintf(ce, sizeof(ce), "-");
	else
		snprintf(ce, sizeof(ce), "%.3f", r->gen_ce);
	if (r->steps > 0)
		snprintf(steps, sizeof(steps), "%d", r->steps);
	else
		snprintf(steps, sizeof(steps), "-");
	printf("  %-22s %5s %6d %8s %8.3f %7.3f %6ld %6.3f %9.1f\n", r->what,
	    steps, r->traversals, ce, r->entropy, r->dict, r->words, r->odd,
	    r->ms);
	fflush(stdout);
}

static void
es_show(const unsigned char *x, int n, int P)
{
	int i;

	printf("    \"");
	for (i = 0; i < n; i++) {
		if (i == P)
			printf("|");
		putchar(x[i] >= 32 && x[i] < 127 && x[i] != '"' ? x[i] : '.');
	}
	printf("\"\n");
}

/* One row: the causal LM's samples at temperature 1 (di < 0), or the
 * models of blocks under decoder di at step count si, named with the
 * prefix; drawn from the prompts, scored and printed. */
static int
es_row(kn_model *const *blocks, kn_model *lm, const pr_spec *s,
    const corpus *c, const es_opts *o, const struct es_words *words,
    const char *prefix, int di, int si, struct es_row *row, json_t *arr,
    char *err)
{
	int n = s->window, ar = di < 0, i, rc;

	for (i = 0; i < o->samples; i++)
		es_prompt(c, n, i, o->samples, row->x + (size_t)i * n);
	row->temp = ar ? 1.0 : o->temperature;
	row->steps = ar ? 0 : o->steps[si];
	if (ar)
		snprintf(row->what, sizeof(row->what), "causal LM, T=1");
	else
		snprintf(row->what, sizeof(row->what), "%s%s, T=%g",
		    prefix != NULL ? prefix : "",
		    bt_decode_name(o->decoders[di]), o->temperature);
	rc = es_draw(blocks, lm, s, o, ar, ar ? BT_DECODE_RANDOM :
	    o->decoders[di], row, err);
	if (rc == 0)
		rc = es_score(lm, o, n, row, err);
	if (rc != 0)
		return rc;
	es_text_figures(words, o, n, row);
	es_print_line(row, o->json, arr);
	if (o->show > 0 && !o->json)
		for (i = 0; i < o->show && i < o->samples; i++)
			es_show(row->x + (size_t)i * n, n, o->prompt_bytes);
	return 0;
}

int
cli_eval_samples(const struct cli_run *run, const corpus *c,
    const char *path, const es_opts *o)
{
	const pr_spec *s = &run->spec;
	int n = s->window, T = s->blocks, b, di, si, rc = 0, i;
	kn_model *blocks[PR_MAX_BLOCKS] = { NULL }, *lm = NULL, *e2e = NULL;
	kn_model *every[PR_MAX_BLOCKS] = { NULL };
	struct es_words words;
	struct es_row row;
	json_t *arr = o->json ? json_array() : NULL;
	char err[KN_ERR_LEN];

	if (o->prompt_bytes < 1 || o->prompt_bytes >= n) {
		fprintf(stderr, "shardmeter eval: --prompt-bytes must be 1 to "
		    "%d (the window less one)\n", n - 1);
		return 2;
	}
	if (c->len < (size_t)n + 2) {
		fprintf(stderr, "shardmeter eval: %s is shorter than a window\n",
		    path);
		return 1;
	}
	if (es_words_load(&words, o->words, err) != 0) {
		fprintf(stderr, "shardmeter eval: %s\n", err);
		return 1;
	}
	memset(&row, 0, sizeof(row));
	if ((row.x = malloc((size_t)o->samples * n)) == NULL) {
		es_words_free(&words);
		fprintf(stderr, "shardmeter eval: out of memory\n");
		return 1;
	}
	/* without the causal LM: no anchor and no cross-entropy, the rest
	 * as it is */
	rc = es_load_causal(run, o, &lm, err);
	for (b = 0; b < T && rc == 0; b++)
		rc = tr_load_model(&blocks[b], s, run->run_id, run->dir,
		    BT_BLOCK, b + 1, run->be, 1, err);
	if (rc != 0)
		goto out;
	if (!o->json) {
		printf("%d samples of %d bytes after prompts of %d bytes from "
		    "%s; %s%s; words of %d+ letters against %s\n", o->samples,
		    n - o->prompt_bytes, o->prompt_bytes, path, lm != NULL ?
		    "scored by the causal LM of " : "not scored: no causal LM "
		    "in ", o->causal_dir != NULL ? o->causal_dir : run->dir,
		    ES_MIN_WORD, o->words);
		printf("  %-22s %5s %6s %8s %8s %7s %6s %6s %9s\n", "samples",
		    "steps", "trav", "gen_ce", "entropy", "dict", "words", "odd",
		    "ms/sample");
	}
	/* the text itself, then the causal LM's samples at temperature 1 */
	for (i = 0; i < o->samples; i++)
		es_prompt(c, n, i, o->samples, row.x + (size_t)i * n);
	snprintf(row.what, sizeof(row.what), "text (the split)");
	row.steps = 0;
	row.traversals = 0;
	row.temp = 0.0;
	if ((rc = es_score(lm, o, n, &row, err)) != 0)
		goto out;
	if (lm == NULL && !o->json)
		printf("  (no anchor row and no cross-entropy; --causal-spec "
		    "and --causal-dir name another run's LM)\n");
	es_text_figures(&words, o, n, &row);
	es_print_line(&row, o->json, arr);
	if (o->show > 0 && !o->json)
		for (i = 0; i < o->show && i < o->samples; i++)
			es_show(row.x + (size_t)i * n, n, o->prompt_bytes);
	if (lm != NULL && (rc = es_row(blocks, lm, s, c, o, &words, NULL, -1,
	    0, &row, arr, err)) != 0)
		goto out;
	for (di = 0; di < o->ndecoders && rc == 0; di++)
		for (si = 0; si < o->nsteps && rc == 0; si++)
			rc = es_row(blocks, lm, s, c, o, &words, NULL, di, si,
			    &row, arr, err);
	/* the reference's rows, the same sets with it in every block's
	 * place, after the blocks' so that their rows keep their places */
	if (rc == 0 && es_have(run->dir, BT_E2E)) {
		rc = tr_load_model(&e2e, s, run->run_id, run->dir, BT_E2E, 0,
		    run->be, 1, err);
		for (b = 0; b < T && rc == 0; b++)
			every[b] = e2e;
		for (di = 0; di < o->ndecoders && rc == 0; di++)
			for (si = 0; si < o->nsteps && rc == 0; si++)
				rc = es_row(every, lm, s, c, o, &words, "e2e ",
				    di, si, &row, arr, err);
	}
out:
	if (rc == 0 && o->json) {
		json_t *top = json_pack("{s:s,s:s,s:i,s:i,s:i,s:s,s:o}",
		    "run_id", run->run_id, "path", path, "samples", o->samples,
		    "prompt_bytes", o->prompt_bytes, "window", n, "words",
		    o->words, "rows", arr);
		char *text = json_dumps(top, JSON_COMPACT |
		    JSON_REAL_PRECISION(9));

		arr = NULL;
		if (text != NULL)
			printf("%s\n", text);
		free(text);
		json_decref(top);
	}
	json_decref(arr);
	if (rc != 0)
		fprintf(stderr, "shardmeter eval: %s\n", err);
	for (b = 0; b < T; b++)
		kn_model_free(blocks[b]);
	kn_model_free(lm);
	kn_model_free(e2e);
	free(row.x);
	es_words_free(&words);
	return rc != 0 ? 1 : 0;
}
