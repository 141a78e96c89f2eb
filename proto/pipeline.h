/* The inference pipeline's frames (DESIGN sections 2 and 5): direct TCP
 * between the hosts and from clients, each frame a 4-byte big-endian
 * length and one msgpack map (proto/PROTOCOL.md, "Pipeline").  Encoding
 * and strict decoding only: the daemon moves the bytes, kernels/ reads
 * the hidden states. */
#ifndef PR_PIPELINE_H
#define PR_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#define PR_PIPELINE_VERSION 1
#define PL_HEADER 4
/* Frames are bounded before they are read: the default and the hard cap
 * of the length a host accepts. */
#define PL_FRAME_DEFAULT ((size_t)16 << 20)
#define PL_FRAME_MAX ((size_t)1 << 30)
#define PL_MSG_LEN 256
/* A request's denoising steps: the default of shardmeter generate and of
 * a completion, and the most a host takes (its cost grows with them:
 * proto/PROTOCOL.md, "Pipeline"). */
#define PL_STEPS_DEFAULT 64
/* A gen frame's length 0 asks for this many output bytes, or what the
 * window leaves after the prompt when that is less (as POST
 * /v1/completions without max_tokens). */
#define PL_LENGTH_DEFAULT 64
#define PL_STEPS_MAX (4 * PL_STEPS_DEFAULT)
/* The most alternatives per byte a request's logprobs may ask (OpenAI's
 * limit). */
#define PL_LOGPROBS_MAX 5
/* the index of the last decoder of pr_decoders (spec.h) */
#define PL_DECODE_MAX 3

typedef enum {
	PL_GEN = 0,     /* client -> entry host: a request */
	PL_BT,          /* host -> next host: a BlockTrain sequence */
	PL_AR,          /* host -> next host: hidden states of the causal LM */
	PL_TOK,         /* last host -> entry: the byte one traversal emits */
	PL_OUT,         /* entry -> client (and exit -> entry): the result */
	PL_ERR,         /* an error for the request id */
	PL_END,         /* entry -> the ring: request over, free its state;
			 * SOMA: client -> host, the id's sessions go */
	PL_SCORE,       /* SOMA client -> expert host: windows to score */
	PL_LOGP,        /* expert host -> client: their per-byte log-probs */
	PL_STEP,        /* SOMA client -> expert host: bytes for a session */
	PL_DIST,        /* expert host -> client: the next byte's log-probs */
	PL_PART,        /* host -> (ring) -> entry: a streamed request's
			 * window after that host's blocks */
	/* Between hosts of a block served by several (proto/PROTOCOL.md,
	 * "Failover"): the keep-alive of a link and its answer, and the
	 * word that a bt or ar frame of the id has been passed on, so its
	 * sender may forget it.  No keys but the id. */
	PL_PING,        /* host -> next host */
	PL_PONG,        /* next host -> host, the ping's id */
	PL_ACK,         /* next host -> host */
	/* host -> (ring) -> entry: an ar request lost the KV caches of its
	 * path with a host; the entry runs it again from position 0 */
	PL_REDO,
	PL_NTYPES
} pl_type;

typedef enum { PL_MODE_BT = 0, PL_MODE_AR = 1 } pl_mode;

typedef struct {
	pl_type type;
	uint64_t id;
	pl_mode mode;                   /* gen */
	int length, steps;              /* gen: output bytes, denoising steps */
	double temperature;             /* gen, bt, ar */
	/* gen, bt: 1 + the decoder's index in pr_decoders (spec.h), sent
	 * as that index under "decode"; 0: absent (gen: the run's
	 * [generate] decode; bt: random, index 0) */
	int decode;
	uint64_t seed;                  /* gen, bt, ar */
	int fixed, end;                 /* bt, ar: prompt length, prompt+output */
	int block;                      /* bt, part: the next block to run,
					 * 1-based */
	/* bt: the entry streams the request, so each host reports its
	 * window in a part frame (the key is absent when 0) */
	int stream;
	/* Position blocks (DESIGN section 2).  gen: the position block the
	 * client expects the run to have (0: the key is absent, whatever
	 * the run has).  bt: L below the window, and pblock, the position
	 * block this traversal denoises (both keys absent when 0: one
	 * traversal over the window, as always). */
	int pos_block, pblock;
	int host;                       /* part: its host line, from 1 */
	/* ar: first position, rows, d; tok: pos; score, logp: windows and
	 * bytes predicted per window; step: bytes the session had seen,
	 * dist: bytes it has seen now */
	int pos, count, width;
	int byte;                       /* tok */
	int expert;                     /* score, logp, step, dist */
	/* gen: the prompt; bt: the window's symbols (a byte each, 0 where
	 * masked), part: the same after the host's blocks; out: the output
	 * bytes; ar: hidden states, count x width little-endian float32;
	 * score: count windows of width + 1 bytes; logp: count x width
	 * little-endian float32; step: the bytes fed; dist: 256
	 * little-endian float32.  Owned by the frame. */
	unsigned char *data;
	size_t data_len;
	unsigned char *mask;            /* bt, part: one flag per position,
					 * 1 masked */
	size_t mask_len;
	uint64_t compute_us;            /* compute spent on the way so far */
	int hops;                       /* host-to-host frames so far */
	int traversals;                 /* out: traversals of the hosts */
	char message[PL_MSG_LEN];       /* err */
	/* Per-byte log-probabilities, only when a request asks for them
	 * (proto/PROTOCOL.md, "Logprobs"): lpk is k + 1, the figures kept
	 * per position (0: none asked, and the keys are absent, so the
	 * frames are as they always were).  gen, ar: lpk alone; bt, part,
	 * out: lp, lpk floats per position of data (those not decided yet,
	 * and the prompt's, 0), the chosen byte's log-probability then the
	 * k likeliest bytes', and lpb, those k bytes per position; tok: the
	 * same for its one byte.  Owned by the frame. */
	int lpk;
	float *lp;
	size_t lp_len;                  /* floats */
	unsigned char *lpb;
	size_t lpb_len;
} pl_frame;

const char *pl_type_name(pl_type t);
const char *pl_mode_name(pl_mode m);
int pl_mode_parse(const char *s, pl_mode *m);

/* Frees what the frame owns and zeroes it. */
void pl_frame_clear(pl_frame *f);
/* Header and body in one malloc'd buffer (caller frees). */
int pl_frame_encode(const pl_frame *f, char **buf, size_t *len, char *err);
/* The body length from a 4-byte header. */
uint32_t pl_frame_length(const unsigned char hdr[PL_HEADER]);
/* Decodes one body (without its header) into f, strictly: the fields of
 * its type and no others, each of its type and range, no trailing bytes.
 * On failure f is left cleared. */
int pl_frame_decode(const char *body, size_t len, pl_frame *f, char *err);

#endif
