/* Generation with position blocks (issue 14, DESIGN section 2): the
 * cached decoding against the uncached one (every step a pass over the
 * whole window with the block-causal mask), bitwise; the number of
 * traversals; every decoder (issue 39) deterministic, complete and its
 * own; and the pipeline of two blocktraind -S hosts on loopback against
 * shardmeter generate in one process, byte for byte and for every
 * decoder, with the requests a host must refuse refused and the ring
 * unchanged after. */
#include "config.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/blocktrain/blocktrain.h"
#include "daemon/pipeline/pipeline_client.h"
#include "daemon/net/tls.h"
#include "kernels/backend.h"
#include "kernels/clock.h"
#include "kernels/error.h"
#include "kernels/model.h"
#include "kernels/model_blockdecode.h"
#include "proto/pipeline.h"
#include "proto/spec.h"
#include "tests/testutil.h"

static void
spec_of(pr_spec *s, int blocks, int window, int pos_block)
{
	char text[256], err[PR_ERR_LEN] = "";

	snprintf(text, sizeof(text), "[model]\nblocks = %d\nwidth = 32\n"
	    "heads = 2\nlayers_per_block = 2\nwindow = %d\n"
	    "position_block = %d\n", blocks, window, pos_block);
	ck_assert_msg(pr_spec_parse(s, text, strlen(text), err) == 0, "%s",
	    err);
}

/* Serving models of the spec's blocks, seeded, weights 3x GPT-2's so
 * that the context moves the predictions a lot. */
static void
make_blocks(const pr_spec *s, kn_model **blocks, uint64_t seed)
{
	char err[KN_ERR_LEN];
	float *p;
	size_t i, np;
	int b;

	for (b = 0; b < s->blocks; b++) {
		kn_model_shape shape = pr_spec_block_shape(s, b);

		ck_assert_int_eq(kn_model_create_inference(&blocks[b], &shape,
		    kn_cpu_backend(), 2, KN_STORE_F32, err), 0);
		kn_model_init(blocks[b], seed + (uint64_t)b);
		np = kn_model_num_params(blocks[b]);
		p = malloc(np * sizeof(float));
		kn_model_get_params(blocks[b], p);
		for (i = 0; i < np; i++)
			p[i] *= 3.0f;
		ck_assert_int_eq(kn_model_set_params(blocks[b], p, err), 0);
		free(p);
	}
}

static void
free_blocks(const pr_spec *s, kn_model **blocks)
{
	for (int b = 0; b < s->blocks; b++)
		kn_model_free(blocks[b]);
}

static void
start_seq(int32_t *seq, int n, const char *prompt)
{
	int i, plen = (int)strlen(prompt);

	for (i = 0; i < n; i++)
		seq[i] = i < plen ? (unsigned char)prompt[i] : KN_MASK;
}

/* Cached and uncached decoding give the same bytes, for every position
 * block size, prompt length (ending inside a position block or on its
 * edge), seed and decoder; every output byte is decided, the prompt
 * untouched. */
START_TEST(test_cached_is_uncached)
{
	static const int sizes[] = { 1, 4, 8 };
	static const char *prompts[] = { "", "ab", "abcdefgh", "abcdefghijk" };
	char err[KN_ERR_LEN];
	int32_t a[32], b[32];
	kn_model *blocks[3];
	pr_spec s;
	int si, pi, seed, i, ta, tb, differ = 0;
	bt_decode dec;

	for (si = 0; si < 3; si++) {
		spec_of(&s, 3, 32, sizes[si]);
		make_blocks(&s, blocks, 40 + (uint64_t)si);
		for (pi = 0; pi < 4; pi++)
			for (seed = 1; seed <= 12; seed++) {
				int plen = (int)strlen(prompts[pi]), end = plen + 13;

				dec = (bt_decode)((seed - 1) / 3);
				start_seq(a, 32, prompts[pi]);
				start_seq(b, 32, prompts[pi]);
				ck_assert_msg(bg_generate(blocks, &s, 12, a, plen, end,
				    1.0f, (uint64_t)seed, dec, 1, &ta, err) == 0, "%s",
				    err);
				ck_assert_msg(bg_generate(blocks, &s, 12, b, plen, end,
				    1.0f, (uint64_t)seed, dec, 0, &tb, err) == 0, "%s",
				    err);
				ck_assert_msg(memcmp(a, b, sizeof(a)) == 0, "L = %d, "
				    "prompt %d, seed %d, %s: cached and uncached "
				    "differ", sizes[si], plen, seed,
				    bt_decode_name(dec));
				/* ceil(end / L) - floor(plen / L) */
				ck_assert_int_eq(ta, (end + sizes[si] - 1) / sizes[si] -
				    plen / sizes[si]);
				ck_assert_int_eq(tb, ta);
				for (i = 0; i < end; i++)
					ck_assert(i < plen ? a[i] == prompts[pi][i] :
					    a[i] >= 0 && a[i] < 256);
				differ += seed > 1 && a[plen] != a[plen + 1];
			}
		free_blocks(&s, blocks);
	}
	/* the draws do move the output */
	ck_assert_int_gt(differ, 0);
}
END_TEST

/* In the next-byte form the pass that picks a byte keeps its row in the
 * cache, so per output byte the ring runs T passes, not T + 1: the host
 * that picked it extends nothing at the next byte.  With a prompt of P
 * bytes and m output bytes: T passes take in the prompt, m pick, and
 * each of the m - 1 later bytes is extended by the T - 1 other hosts.
 * The output is the uncached one (test_cached_is_uncached). */
START_TEST(test_next_byte_passes)
{
	enum { T = 3, M = 13 };
	static const char prompt[] = "abcdefgh";
	int plen = (int)sizeof(prompt) - 1, b, t;
	char err[KN_ERR_LEN];
	uint64_t before = 0, after = 0;
	kn_model *blocks[T];
	int32_t seq[32];
	pr_spec s;

	spec_of(&s, T, 32, 1);
	make_blocks(&s, blocks, 7);
	start_seq(seq, 32, prompt);
	for (b = 0; b < T; b++)
		before += kn_model_passes(blocks[b]);
	ck_assert_msg(bg_generate(blocks, &s, 12, seq, plen, plen + M, 1.0f,
	    3, BT_DECODE_RANDOM, 1, &t, err) == 0, "%s", err);
	for (b = 0; b < T; b++)
		after += kn_model_passes(blocks[b]);
	ck_assert_int_eq(t, M);
	ck_assert_uint_eq(after - before, T + M + (M - 1) * (T - 1));
	free_blocks(&s, blocks);
}
END_TEST

/* The cache is filled from clean context only, in whole position
 * blocks, and the pass refuses what does not follow it. */
START_TEST(test_bad_passes_refused)
{
	char err[KN_ERR_LEN];
	kn_model *blocks[1];
	int32_t seq[32];
	kn_kv *kv;
	kn_decode_seq q;
	pr_spec s;

	spec_of(&s, 1, 32, 4);
	make_blocks(&s, blocks, 7);
	ck_assert_int_eq(kn_kv_create(&kv, blocks[0], err), 0);
	start_seq(seq, 32, "abcdef");
	/* position 6 is masked: position block 2's context is not clean */
	ck_assert_int_ne(bg_extend(blocks[0], kv, &s, 2, seq, err), 0);
	ck_assert_int_eq(kn_kv_len(kv), 0);
	ck_assert_int_eq(bg_extend(blocks[0], kv, &s, 1, seq, err), 0);
	ck_assert_int_eq(kn_kv_len(kv), 4);
	/* not at the cache's end, not a whole block to commit */
	q = (kn_decode_seq){ kv, 0, 4 };
	ck_assert_int_ne(kn_model_blockdecode(blocks[0], &q, 1, seq, 1, NULL,
	    0, NULL, 0.0f, NULL, err), 0);
	q = (kn_decode_seq){ kv, 4, 3 };
	ck_assert_int_ne(kn_model_blockdecode(blocks[0], &q, 1, seq + 4, 1,
	    NULL, 0, NULL, 0.0f, NULL, err), 0);
	ck_assert_int_eq(kn_kv_len(kv), 4);
	kn_kv_free(kv);
	free_blocks(&s, blocks);
}
END_TEST

/* The whole-window traversal of three blocks (bt_denoise_block, the last
 * block first) on seq from prompt, by decoder dec. */
static void
traverse(kn_model **blocks, const pr_spec *s, int32_t *seq,
    const char *prompt, float temp, uint64_t seed, bt_decode dec)
{
	char err[KN_ERR_LEN];
	int b;

	start_seq(seq, s->window, prompt);
	for (b = s->blocks - 1; b >= 0; b--)
		ck_assert_msg(bt_denoise_block(blocks[b], s, 12, b, seq,
		    (int)strlen(prompt), temp, seed, dec, err) == 0, "%s: %s",
		    bt_decode_name(dec), err);
}

/* Every decoder in one process: the same seed gives the same bytes, at
 * temperature 1 and 0; every byte after the prompt is decided and a byte,
 * the prompt untouched; and the decoders are not one another (each pair
 * differs for some seed), whole window or position blocks. */
/* Every two of the n decoders give other bytes for at least one of the
 * three seeds (out[decoder][seed]); where names the case. */
static void
decoders_differ(int32_t out[][3][32], int n, const char *where)
{
	int d, e, seed, differ;

	for (d = 0; d < n; d++)
		for (e = d + 1; e < n; e++) {
			differ = 0;
			for (seed = 0; seed < 3; seed++)
				differ |= memcmp(out[d][seed], out[e][seed],
				    sizeof(out[d][seed])) != 0;
			ck_assert_msg(differ, "%s%s and %s give the same bytes "
			    "for every seed", where, pr_decoders[d],
			    pr_decoders[e]);
		}
}

START_TEST(test_decoders_in_process)
{
	static const char *prompts[] = { "", "Th", "The quick " };
	static const float temps[] = { 1.0f, 0.0f };
	int32_t a[32], b[32], out[8][3][32];
	kn_model *blocks[3];
	pr_spec s;
	bt_decode dec;
	char err[KN_ERR_LEN];
	int n, d, pi, ti, seed, i, ta, tb;

	for (n = 0; pr_decoders[n] != NULL; n++) {
		ck_assert_int_eq(bt_decode_parse(pr_decoders[n], &dec), 0);
		ck_assert_int_eq((int)dec, n);
		ck_assert_str_eq(bt_decode_name(dec), pr_decoders[n]);
	}
	ck_assert_int_ge(n, 3);
	ck_assert_int_le(n, 8);
	ck_assert_int_ne(bt_decode_parse("foo", &dec), 0);
	ck_assert_int_ne(bt_decode_parse("", &dec), 0);
	ck_assert_int_ne(bt_decode_parse("Random", &dec), 0);
	spec_of(&s, 3, 32, 32);
	make_blocks(&s, blocks, 70);
	for (pi = 0; pi < 3; pi++)
		for (ti = 0; ti < 2; ti++)
			for (seed = 1; seed <= 3; seed++)
				for (d = 0; d < n; d++) {
					int plen = (int)strlen(prompts[pi]);

					traverse(blocks, &s, a, prompts[pi], temps[ti],
					    (uint64_t)seed, (bt_decode)d);
					traverse(blocks, &s, b, prompts[pi], temps[ti],
					    (uint64_t)seed, (bt_decode)d);
					ck_assert_msg(memcmp(a, b, sizeof(a)) == 0,
					    "%s, seed %d, T %g: two runs differ",
					    pr_decoders[d], seed, temps[ti]);
					for (i = 0; i < 32; i++)
						if (i < plen)
							ck_assert_int_eq(a[i],
							    (unsigned char)prompts[pi][i]);
						else
							ck_assert_msg(a[i] >= 0 && a[i] < 256,
							    "%s: position %d is %d",
							    pr_decoders[d], i, a[i]);
					if (ti == 0 && pi == 1)
						memcpy(out[d][seed - 1], a, sizeof(a));
				}
	decoders_differ(out, n, "");
	free_blocks(&s, blocks);
	/* position blocks of 8: the same, each position block's traversal
	 * the one count it always was */
	spec_of(&s, 3, 32, 8);
	make_blocks(&s, blocks, 71);
	for (seed = 1; seed <= 3; seed++)
		for (d = 0; d < n; d++) {
			start_seq(a, 32, "Th");
			start_seq(b, 32, "Th");
			ck_assert_msg(bg_generate(blocks, &s, 12, a, 2, 30, 1.0f,
			    (uint64_t)seed, (bt_decode)d, 1, &ta, err) == 0, "%s",
			    err);
			ck_assert_msg(bg_generate(blocks, &s, 12, b, 2, 30, 1.0f,
			    (uint64_t)seed, (bt_decode)d, 1, &tb, err) == 0, "%s",
			    err);
			ck_assert_mem_eq(a, b, sizeof(a));
			ck_assert_int_eq(ta, 4);
			ck_assert_int_eq(tb, 4);
			for (i = 0; i < 2; i++)
				ck_assert_int_eq(a[i], "Th"[i]);
			for (i = 2; i < 30; i++)
				ck_assert_msg(a[i] >= 0 && a[i] < 256, "%s: position "
				    "%d is %d", pr_decoders[d], i, a[i]);
			memcpy(out[d][seed - 1], a, sizeof(a));
		}
	decoders_differ(out, n, "position blocks: ");
	free_blocks(&s, blocks);
}
END_TEST

/* The span of traversals. */
START_TEST(test_traversals)
{
	pr_spec s;

	spec_of(&s, 2, 64, 16);
	ck_assert_int_eq(bg_traversals(&s, 0, 64), 4);
	ck_assert_int_eq(bg_traversals(&s, 8, 24), 2);
	ck_assert_int_eq(bg_traversals(&s, 16, 17), 1);
	ck_assert_int_eq(bg_traversals(&s, 15, 17), 2);
	spec_of(&s, 2, 64, 64);
	ck_assert_int_eq(bg_traversals(&s, 8, 24), 1);
	spec_of(&s, 2, 64, 1);
	ck_assert_int_eq(bg_traversals(&s, 8, 24), 16);
}
END_TEST

/* A bt frame of position blocks of L over a window of 24: prompt 3
 * bytes, output to 20, position block p, decided before it. */
static pl_frame
bt_frame(int L, int p)
{
	pl_frame f = { .type = PL_BT, .id = 9, .steps = 8, .temperature = 1.0,
	    .seed = 2, .fixed = 3, .end = 20, .block = 2, .pos_block = L,
	    .pblock = p };
	int i;

	f.data_len = f.mask_len = 24;
	f.data = calloc(24, 1);
	f.mask = calloc(24, 1);
	for (i = 0; i < 24; i++) {
		f.mask[i] = L > 0 && i >= p * L;
		f.data[i] = f.mask[i] ? 0 : 'a' + i;
	}
	return f;
}

/* Decodes what f encodes to (the body after the length); f cleared. */
static int
through(pl_frame *f, pl_frame *g, const char *from, const char *to)
{
	char *buf, err[KN_ERR_LEN], *k;
	size_t len;
	int rc;

	ck_assert_int_eq(pl_frame_encode(f, &buf, &len, err), 0);
	pl_frame_clear(f);
	if (from != NULL) {
		k = memmem(buf, len, from, strlen(from));
		ck_assert_ptr_nonnull(k);
		memcpy(k, to, strlen(to));
	}
	rc = pl_frame_decode(buf + PL_HEADER, len - PL_HEADER, g, err);
	free(buf);
	return rc;
}

/* The position-block keys: there when set, absent otherwise (so other
 * frames keep their bytes), strictly checked. */
START_TEST(test_frames)
{
	pl_frame f, g;
	char *buf, err[KN_ERR_LEN];
	size_t len;

	f = bt_frame(4, 2);
	ck_assert_int_eq(through(&f, &g, NULL, NULL), 0);
	ck_assert_int_eq(g.pos_block, 4);
	ck_assert_int_eq(g.pblock, 2);
	pl_frame_clear(&g);
	f = bt_frame(4, 0);
	f.fixed = 0;
	ck_assert_int_eq(through(&f, &g, NULL, NULL), 0);
	ck_assert_int_eq(g.pblock, 0);
	pl_frame_clear(&g);
	/* without position blocks: no such key on the wire */
	f = bt_frame(0, 0);
	ck_assert_int_eq(pl_frame_encode(&f, &buf, &len, err), 0);
	ck_assert_ptr_null(memmem(buf, len, "pblock", 6));
	ck_assert_ptr_null(memmem(buf, len, "pos_block", 9));
	free(buf);
	ck_assert_int_eq(through(&f, &g, NULL, NULL), 0);
	ck_assert_int_eq(g.pos_block, 0);
	pl_frame_clear(&g);
	/* L not dividing the window, or the window itself */
	f = bt_frame(5, 1);
	ck_assert_int_ne(through(&f, &g, NULL, NULL), 0);
	f = bt_frame(24, 0);
	ck_assert_int_ne(through(&f, &g, NULL, NULL), 0);
	/* a position block before the prompt's, or past the output */
	f = bt_frame(2, 0);
	ck_assert_int_ne(through(&f, &g, NULL, NULL), 0);
	f = bt_frame(4, 5);
	ck_assert_int_ne(through(&f, &g, NULL, NULL), 0);
	/* a masked position in the context */
	f = bt_frame(4, 2);
	f.mask[5] = 1;
	ck_assert_int_ne(through(&f, &g, NULL, NULL), 0);
	/* pblock without pos_block */
	f = bt_frame(4, 2);
	ck_assert_int_ne(through(&f, &g, "pos_block", "pos_blocX"), 0);
	/* gen: pos_block only when asked for, at least 1 */
	f = (pl_frame){ .type = PL_GEN, .id = 1, .length = 4, .steps = 2,
	    .pos_block = 16 };
	ck_assert_int_eq(through(&f, &g, NULL, NULL), 0);
	ck_assert_int_eq(g.pos_block, 16);
	pl_frame_clear(&g);
	f = (pl_frame){ .type = PL_GEN, .id = 1, .length = 4, .steps = 2 };
	ck_assert_int_eq(pl_frame_encode(&f, &buf, &len, err), 0);
	ck_assert_ptr_null(memmem(buf, len, "pos_block", 9));
	free(buf);
}
END_TEST

/* The pipeline ------------------------------------------------------- */

#define WINDOW 24
#define POS_BLOCK 4

static char dir[64];
static const char *tool;
static int base_port;
static pid_t host_pid[6];
/* the run the checks read (run: position blocks of 4; run1: of one
 * byte, the next-byte form), the ring's entry and its position block */
static const char *run = "run";
static int entry_port, run_block = POS_BLOCK;
static tls_ctx *operator_tls;

/* A run of two blocks of one layer with position blocks of 4, trained a
 * few steps on system text, and the trust of two hosts and the test. */
static void
train_once(void)
{
	char out[4096], err[KN_ERR_LEN];

	tool = tu_shardmeter();
	tu_temp_dir(dir, sizeof(dir), "check_blockdecode");
	tu_write_file(dir, "run.conf", "seed = 3\n[model]\nblocks = 2\n"
	    "width = 32\nheads = 2\nlayers_per_block = 1\nwindow = 24\n"
	    "position_block = 4\np_prefix = 0.2\n"
	    "[data]\ntrain = /usr/share/common-licenses/GPL-3\n"
	    "valid = /usr/share/common-licenses/GPL-2\n"
	    "test = /usr/share/common-licenses/GPL-2\n"
	    "[optim]\nbatch = 8\nsteps = 20\nwarmup = 5\nlr = 3e-3\n");
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/run.conf --dir %s/run --all --quiet --threads 2", tool, dir,
	    dir) == 0, "training: %s", out);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "sed 's/^position_block = 4$/"
	    "position_block = 1/' %s/run.conf > %s/run1.conf", dir, dir), 0);
	ck_assert_msg(tu_run_cmd(out, sizeof(out), "%s train --spec "
	    "%s/run1.conf --dir %s/run1 --all --quiet --threads 2", tool, dir,
	    dir) == 0, "training: %s", out);
	ck_assert_int_eq(tu_run_cmd(NULL, 0, "for i in 0 1 2 3 4 5; do "
	    "r=run; [ $i -lt 4 ] || r=run1; mkdir -p %s/host$i && ln -sf "
	    "%s/$r/*.ckpt %s/host$i/ || exit 1; done", dir, dir, dir), 0);
	tu_trust_init(dir);
	ck_assert_msg(tls_ctx_new(&operator_tls, tu_client_dir(), err) == 0,
	    "%s", err);
	base_port = tu_port_base(6);
}

static void
cleanup_once(void)
{
	tls_ctx_free(operator_tls);
	tu_remove_dir(dir);
}

static void
setup(void)
{
	memset(host_pid, 0, sizeof(host_pid));
	signal(SIGPIPE, SIG_IGN);
	run = "run";
	run_block = POS_BLOCK;
	entry_port = base_port;
}

static void
teardown(void)
{
	for (int i = 0; i < 6; i++)
		tu_stop(&host_pid[i], SIGTERM, 15);
}

/* Host i of the ring of hosts i0, i0 + 1 (block 2, then block 1), on
 * the host list `list` and the spec (NULL: the list's logical shape). */
static void
start_host(int i, int i0, const char *list, const char *spec)
{
	char listen[32], next[32], hosts[128], log[128], state[128];
	char conf[128], specpath[128];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", base_port + i);
	snprintf(next, sizeof(next), "127.0.0.1:%d", base_port + i0 +
	    (i - i0 + 1) % 2);
	snprintf(hosts, sizeof(hosts), "%s/%s", dir, list);
	snprintf(log, sizeof(log), "%s/log%d", dir, i);
	snprintf(state, sizeof(state), "%s/host%d", dir, i);
	snprintf(conf, sizeof(conf), "%s/serve.conf", dir);
	snprintf(specpath, sizeof(specpath), "%s/%s", dir, spec ? spec : "");
	if (spec != NULL)
		host_pid[i] = tu_daemon_start(log, base_port + i, "-S", "-f",
		    "-c", conf, "-L", listen, "-N", next, "-P", hosts, "-s",
		    state, "-r", specpath, "-D", "cpu", "-t", "1", (char *)NULL);
	else
		host_pid[i] = tu_daemon_start(log, base_port + i, "-S", "-f",
		    "-c", conf, "-L", listen, "-N", next, "-P", hosts, "-s",
		    state, "-D", "cpu", "-t", "1", (char *)NULL);
}

/* The host list of hosts i0 and i0 + 1, with a first line (a shape, or
 * ""). */
static void
write_hosts(const char *name, int i0, const char *first)
{
	char text[2048], state[128];
	int i;

	snprintf(text, sizeof(text), "%s", first);
	for (i = i0; i < i0 + 2; i++) {
		snprintf(state, sizeof(state), "%s/host%d", dir, i);
		tu_peer_line(text, sizeof(text), base_port + i, 2 - (i - i0),
		    state);
	}
	tu_client_line(text, sizeof(text));
	tu_write_file(dir, name, text);
}

static pc_request
request_for(const char *prompt, int length, uint64_t seed, int pos_block)
{
	pc_request r = { 0 };

	r.mode = PL_MODE_BT;
	r.prompt = prompt;
	r.prompt_len = strlen(prompt);
	r.length = length;
	r.steps = 16;
	r.temperature = 0.9;
	r.seed = seed;
	r.pos_block = pos_block;
	return r;
}

static int
ask(int port, const pc_request *r, pc_result *res, char *err)
{
	char addr[32];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	return pc_generate(addr, operator_tls, tu_port_pin(port), r, res,
	    10000, err);
}

static void
wait_ring(int port)
{
	double t0 = kn_now();
	pc_request r = request_for("a", 2, 1, 0);
	pc_result res;
	char err[KN_ERR_LEN];
	int ok = 0, answered = 0;

	while (!answered && kn_now() - t0 < 20) {
		if (ask(port, &r, &res, err) == 0) {
			answered = 1;
			ok = res.ok;
		} else
			usleep(100000);
		pc_result_clear(&res);
	}
	ck_assert_msg(answered, "the ring on %d did not come up", port);
	(void)ok;
}

/* shardmeter generate in one process, cached or not, by decoder dec:
 * the output bytes after the prompt in out (read as hex: the model may
 * emit any byte, NUL included); their count. */
static size_t
single_process_by(const char *prompt, int length, uint64_t seed, int cached,
    int dec, unsigned char *out, size_t outlen)
{
	char raw[8192], decode[48] = "";
	size_t n, plen = strlen(prompt);

	/* dec: 1 + the decoder's index (--decode), 0 none named */
	if (dec > 0)
		snprintf(decode, sizeof(decode), "--decode %s",
		    pr_decoders[dec - 1]);
	ck_assert_int_eq(tu_run_cmd(raw, sizeof(raw), "%s generate --spec "
	    "%s/%s.conf --dir %s/%s --length %d --steps 16 --temperature "
	    "0.9 --seed %llu %s %s '%s' 2>/dev/null | od -An -v -tx1", tool,
	    dir, run, dir, run, length, (unsigned long long)seed, cached ? "" :
	    "--no-cache", decode, prompt), 0);
	/* the prompt, the output, a newline */
	n = tu_od_bytes(raw, plen, out, outlen);
	ck_assert_uint_eq(n, plen + (size_t)length + 1);
	return n - plen - 1;
}

/* check_same by decoder dec (1 + its index; 0 none named, the run's
 * default), the one-process output into out (may be NULL). */
static void
check_same_by(const char *prompt, int length, uint64_t seed, int pos_block,
    int dec, unsigned char *out)
{
	pc_request r = request_for(prompt, length, seed, pos_block);
	pc_result res;
	char err[KN_ERR_LEN];
	unsigned char expect[64], uncached[64];
	int plen = (int)strlen(prompt);
	const char *name = dec > 0 ? pr_decoders[dec - 1] : "default";

	r.decode = dec;
	ck_assert_uint_eq(single_process_by(prompt, length, seed, 1, dec,
	    expect, sizeof(expect)), (size_t)length);
	single_process_by(prompt, length, seed, 0, dec, uncached,
	    sizeof(uncached));
	ck_assert_msg(memcmp(expect, uncached, (size_t)length) == 0, "prompt "
	    "'%s' seed %llu %s: cached and uncached differ", prompt,
	    (unsigned long long)seed, name);
	ck_assert_msg(ask(entry_port, &r, &res, err) == 0, "%s", err);
	ck_assert_msg(res.ok, "%s", res.error);
	ck_assert_uint_eq(res.len, (size_t)length);
	ck_assert_msg(memcmp(res.output, expect, (size_t)length) == 0,
	    "prompt '%s' seed %llu %s: the pipeline and one process differ",
	    prompt, (unsigned long long)seed, name);
	ck_assert_int_eq(res.traversals, (plen + length + run_block - 1) /
	    run_block - plen / run_block);
	if (out != NULL)
		memcpy(out, expect, (size_t)length);
	pc_result_clear(&res);
}

static void
check_same(const char *prompt, int length, uint64_t seed, int pos_block)
{
	check_same_by(prompt, length, seed, pos_block, 0, NULL);
}

/* Every decoder through the ring as in one process, by name and
 * unnamed (the run's [generate] decode); the decoders' outputs not all
 * one. */
static void
check_decoders(const char *prompt, int length, int pos_block)
{
	unsigned char out[8][64] = { { 0 } }, none[64];
	char path[128], err[PR_ERR_LEN];
	int d, n, differ = 0;
	uint64_t seed;
	bt_decode def;
	pr_spec spec;

	snprintf(path, sizeof(path), "%s/%s.conf", dir, run);
	ck_assert_msg(pr_spec_load(&spec, path, err) == 0, "%s", err);
	ck_assert_int_eq(bt_decode_parse(spec.decode, &def), 0);
	for (seed = 11; seed <= 12; seed++) {
		for (n = 0; pr_decoders[n] != NULL && n < 8; n++)
			check_same_by(prompt, length, seed, pos_block, n + 1,
			    out[n]);
		ck_assert_int_lt((int)def, n);
		check_same_by(prompt, length, seed, pos_block, 0, none);
		ck_assert_msg(memcmp(none, out[def], (size_t)length) == 0,
		    "seed %llu: unnamed is not the run's %s",
		    (unsigned long long)seed, spec.decode);
		for (d = 1; d < n; d++)
			differ += memcmp(out[d], out[0], (size_t)length) != 0;
	}
	ck_assert_msg(differ > 0, "prompt '%s': every decoder gives random's "
	    "bytes", prompt);
}

/* The ring of hosts i0 and i0 + 1 on the host list name (first line
 * first) serving the run of spec, up and answering. */
static void
start_ring(int i0, const char *name, const char *first, const char *spec)
{
	write_hosts(name, i0, first);
	tu_write_file(dir, "serve.conf", "pipeline_timeout_ms = 5000\n"
	    "pipeline_idle_s = 5\npipeline_batch = 4\nmetrics_listen = off\n");
	start_host(i0, i0, name, spec);
	start_host(i0 + 1, i0, name, spec);
	wait_ring(base_port + i0);
}

/* Requests in flight together share the hosts' passes (each against
 * its own caches and with its own decoder) and still give what one
 * process gives. */
static void
many_at_once(void)
{
	static const char *prompts[5] = { "Id ", "I", "Tomorrow", "", "ab" };
	unsigned char expect[5][64];
	char addr[32], err[KN_ERR_LEN];
	pc_request r[5];
	pc_result res;
	uint64_t id[5];
	pc_conn *c;
	int i, k, n, seen = 0;

	for (n = 0; pr_decoders[n] != NULL; n++)
		;
	/* each its own decoder, so one batch mixes them */
	for (i = 0; i < 5; i++) {
		r[i] = request_for(prompts[i], 6 + i, 40 + (uint64_t)i, 0);
		r[i].decode = 1 + i % n;
		single_process_by(prompts[i], 6 + i, 40 + (uint64_t)i, 1,
		    r[i].decode, expect[i], sizeof(expect[i]));
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", base_port);
	ck_assert_msg(pc_connect(&c, addr, operator_tls, tu_port_pin(base_port),
	    2000, err) == 0, "%s", err);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(pc_send(c, &r[i], &id[i], err), 0);
	for (k = 0; k < 5; k++) {
		ck_assert_int_eq(pc_recv(c, &res, 10000, err), 0);
		ck_assert_msg(res.ok, "%s", res.error);
		for (i = 0; i < 5 && id[i] != res.id; i++)
			;
		ck_assert_int_lt(i, 5);
		ck_assert(!(seen & 1 << i));
		seen |= 1 << i;
		ck_assert_uint_eq(res.len, (size_t)(6 + i));
		ck_assert_msg(memcmp(res.output, expect[i], res.len) == 0,
		    "request %d at once: the pipeline and one process differ", i);
		pc_result_clear(&res);
	}
	pc_close(c);
}

/* Two hosts over mutual TLS give what one process gives, cached or not,
 * for prompts that end inside a position block, on its edge, or are
 * empty; a request for another position block is refused, and the ring
 * answers as before after it. */
START_TEST(test_pipeline_same_as_one_process)
{
	pc_request r;
	pc_result res;
	char err[KN_ERR_LEN];
	uint64_t seed;

	start_ring(0, "hosts", "# position blocks of 4\n", "run.conf");
	for (seed = 1; seed <= 2; seed++) {
		check_same("The ", 13, seed, 0);
		check_same("Th", 9, seed, POS_BLOCK);
	}
	check_same("", WINDOW, 5, 0);
	/* the client asks for position blocks the run does not have */
	r = request_for("The ", 8, 1, 8);
	ck_assert_msg(ask(base_port, &r, &res, err) == 0, "%s", err);
	ck_assert(!res.ok);
	ck_assert_msg(strstr(res.error, "position blocks of 8") != NULL,
	    "%s", res.error);
	pc_result_clear(&res);
	r.pos_block = WINDOW;
	ck_assert_msg(ask(base_port, &r, &res, err) == 0, "%s", err);
	ck_assert(!res.ok);
	pc_result_clear(&res);
	/* and nothing has changed */
	check_same("The ", 13, 1, 0);
	many_at_once();
	/* every decoder, on a prompt inside a position block and on none */
	check_decoders("Th", 17, POS_BLOCK);
	check_decoders("", 12, 0);
}
END_TEST

/* The same at one byte per position block, the next-byte form: a
 * traversal per output byte, each host reading the byte before the one
 * it decides. */
START_TEST(test_pipeline_next_byte)
{
	uint64_t seed;
	int d;

	run = "run1";
	run_block = 1;
	entry_port = base_port + 4;
	start_ring(4, "hosts1", "# position blocks of one byte\n",
	    "run1.conf");
	for (seed = 1; seed <= 2; seed++) {
		check_same("The ", 9, seed, 0);
		check_same("", 6, seed, 1);
	}
	for (seed = 1; seed <= 2; seed++)
		for (d = 0; pr_decoders[d] != NULL; d++)
			check_same_by("The ", 7, seed, 1, d + 1, NULL);
}
END_TEST

/* shardmeter generate --decode: a name that is no decoder's exits 2
 * naming every decoder, in one process and with --peers alike, before
 * anything runs; --help tells of it; each decoder's output is the
 * length asked, and the run's [generate] decode is what no --decode
 * takes. */
START_TEST(test_generate_decode_option)
{
	char out[4096], conf[8192];
	unsigned char a[64], b[64];
	int i, n;

	for (n = 0; pr_decoders[n] != NULL; n++)
		;
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --spec "
	    "%s/run.conf --dir %s/run --length 8 --decode foo 'ab'", tool, dir,
	    dir), 2);
	ck_assert_msg(strstr(out, "--decode") != NULL && strstr(out, "'foo'")
	    != NULL, "%s", out);
	for (i = 0; i < n; i++)
		ck_assert_msg(strstr(out, pr_decoders[i]) != NULL, "'%s' lacks %s",
		    out, pr_decoders[i]);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --peers "
	    "127.0.0.1:1 --length 8 --decode Margin 'ab'", tool), 2);
	ck_assert_msg(strstr(out, "'Margin'") != NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --spec "
	    "%s/run.conf --dir %s/run --length 8 'ab' --decode", tool, dir, dir),
	    2);
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --spec "
	    "%s/run.conf --dir %s/run --length 8 --decode '' 'ab'", tool, dir,
	    dir), 2);
	/* ar samples a byte at a time: a decoder there is a mistake */
	ck_assert_int_eq(tu_run_cmd(out, sizeof(out), "%s generate --spec "
	    "%s/run.conf --dir %s/run --length 8 --mode ar --decode margin "
	    "'ab'", tool, dir, dir), 2);
	ck_assert_msg(strstr(out, "--mode ar") != NULL, "%s", out);
	ck_assert_int_eq(tu_run_cmd(conf, sizeof(conf), "%s generate --help",
	    tool), 0);
	ck_assert_ptr_nonnull(strstr(conf, "--decode"));
	for (i = 0; i < n; i++)
		ck_assert_msg(strstr(conf, pr_decoders[i]) != NULL, "--help lacks "
		    "%s", pr_decoders[i]);
	/* the spec's [generate] decode, unless --decode says otherwise */
	for (i = 0; i < n; i++) {
		/* the run's checkpoints under the name of the spec */
		ck_assert_int_eq(tu_run_cmd(NULL, 0, "cd %s && ln -sfn run dec && "
		    "cp run.conf dec.conf && printf '[generate]\\ndecode = "
		    "%s\\n' >> dec.conf", dir, pr_decoders[i]), 0);
		run = "dec";
		single_process_by("Th", 17, 5, 1, 0, a, sizeof(a));
		run = "run";
		ck_assert_uint_eq(single_process_by("Th", 17, 5, 1, i + 1, b,
		    sizeof(b)), 17);
		ck_assert_msg(memcmp(a, b, 17) == 0, "[generate] decode = %s is "
		    "not --decode %s", pr_decoders[i], pr_decoders[i]);
	}
}
END_TEST

/* A host whose checkpoints have another position block than the frame
 * refuses it, and says so: a ring of logical shapes whose second host
 * was given position blocks of 8 where the entry has 4. */
START_TEST(test_host_refuses_other_pos_block)
{
	pc_request r = request_for("The ", 12, 1, 0);
	pc_result res;
	char err[KN_ERR_LEN];

	write_hosts("hosts4", 2, "shape width=32 heads=2 layers=1 window=24 "
	    "blocks=2 position_block=4\n");
	write_hosts("hosts8", 2, "shape width=32 heads=2 layers=1 window=24 "
	    "blocks=2 position_block=8\n");
	tu_write_file(dir, "serve.conf", "pipeline_timeout_ms = 5000\n"
	    "pipeline_idle_s = 5\nmetrics_listen = off\n");
	start_host(2, 2, "hosts4", NULL);
	start_host(3, 2, "hosts8", NULL);
	ck_assert_msg(ask(base_port + 2, &r, &res, err) == 0, "%s", err);
	ck_assert(!res.ok);
	ck_assert_msg(strstr(res.error, "position blocks of 4; this host's "
	    "checkpoints have 8") != NULL, "%s", res.error);
	pc_result_clear(&res);
	/* the same ring without position blocks on the entry's side:
	 * refused the other way round */
	tu_stop(&host_pid[2], SIGTERM, 15);
	write_hosts("hosts24", 2, "shape width=32 heads=2 layers=1 window=24 "
	    "blocks=2\n");
	start_host(2, 2, "hosts24", NULL);
	ck_assert_msg(ask(base_port + 2, &r, &res, err) == 0, "%s", err);
	ck_assert(!res.ok);
	ck_assert_msg(strstr(res.error, "position blocks of 24; this host's "
	    "checkpoints have 8") != NULL, "%s", res.error);
	pc_result_clear(&res);
}
END_TEST

int
main(void)
{
	Suite *su = suite_create("blockdecode");
	TCase *tc = tcase_create("decode");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cached_is_uncached);
	tcase_add_test(tc, test_bad_passes_refused);
	tcase_add_test(tc, test_traversals);
	tcase_add_test(tc, test_next_byte_passes);
	tcase_add_test(tc, test_decoders_in_process);
	tcase_add_test(tc, test_frames);
	suite_add_tcase(su, tc);
	tc = tcase_create("pipeline");
	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, train_once, cleanup_once);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pipeline_same_as_one_process);
	tcase_add_test(tc, test_host_refuses_other_pos_block);
	tcase_add_test(tc, test_generate_decode_option);
	tcase_add_test(tc, test_pipeline_next_byte);
	suite_add_tcase(su, tc);
	return tu_run_suite(su);
}
