/* Trains one SOMA model in this process (DESIGN section 3): the N = 1
 * seed (body by SPSA, decoder by the delta rule), an expert (its cluster,
 * SPSA, the seed's frozen decoder), or a monolithic control of N experts'
 * parameters (SPSA at any P, EGGROLL, or backpropagation through time).
 * `shardmeter train` drives it; the daemon will. */
#ifndef SA_TRAINER_H
#define SA_TRAINER_H

#include <signal.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/soma_model.h"
#include "proto/spec.h"

typedef enum {
	SA_SEED = 0,
	SA_EXPERT,
	SA_SPSA,        /* control: one model, SPSA */
	SA_EGGROLL,     /* control: one model, low-rank ES */
	SA_BPTT         /* reference: one model, exact gradients */
} sa_kind;

/* "seed", "expert", "spsa", "eggroll", "bptt": the checkpoint kind */
const char *sa_kind_name(sa_kind k);

/* The expert's shape from [soma], and the control's: the widest whose
 * body has at most N experts' body parameters. */
kn_soma_shape sa_expert_shape(const pr_spec *s);
kn_soma_shape sa_control_shape(const pr_spec *s);

/* Byte positions one step evaluates (the forward compute the controls
 * are matched on): 2P B T for SPSA and EGGROLL, plus B T where the
 * decoder learns by the delta rule (the seed, the controls, and experts
 * where sa_expert_decoder_learns), B T for BPTT (the backward pass is not
 * counted). */
uint64_t sa_step_positions(const pr_spec *s, sa_kind k, int P);
/* Whether s has each expert learn its own decoder ([soma]
 * expert_decoder = delta). */
int sa_expert_decoder_learns(const pr_spec *s);
/* SOMA's whole training compute: the seed, then N experts. */
uint64_t sa_soma_positions(const pr_spec *s);
/* The same in forward multiply-adds (kn_soma_forward_macs of the expert
 * shape a position), and the positions a control spends for as many:
 * fewer, as a control position costs more (1.86x at the shipped
 * sizes). */
double sa_soma_macs(const pr_spec *s);
uint64_t sa_control_equal_macs_positions(const pr_spec *s);

typedef struct {
	long step, steps;
	double loss;            /* the step's training loss */
	double val;             /* the last validation loss; NAN before one */
	double lr, eps;
	uint64_t positions;     /* evaluated so far */
	double positions_per_s; /* of the steps so far, validation excluded */
} sa_progress;

typedef struct {
	const pr_spec *spec;
	const char *run_id;
	sa_kind kind;
	int expert;             /* SA_EXPERT: 0 .. N-1 */
	int P;                  /* SPSA and EGGROLL directions; 0: [soma] */
	/* > 0: instead of [soma] lr and eps (EGGROLL: its sigma), to tune a
	 * control; they are not in the run id, so the caller names the file */
	double lr, eps;
	long steps;             /* < 0: seed_steps, steps, or from budget */
	/* SPSA and EGGROLL controls: the decoder learns by the delta rule
	 * for this many steps, then stays as it is; 0: every step.  The
	 * seed always learns it, an expert where [soma] expert_decoder =
	 * delta (every step). */
	long decoder_steps;
	uint64_t budget;        /* controls: positions to spend (0: none) */
	/* > 0: also write the model to snapshot_path after the first step
	 * at which this many positions are spent (what a run of this budget
	 * would write, bit for bit) */
	uint64_t snapshot_at;
	const char *snapshot_path;
	const char *const *train;       /* the text files */
	int ntrain;
	const char *seed_path;  /* SA_EXPERT: the seed's checkpoint */
	const char *out_path;   /* the checkpoint written at the end */
	const char *log_path;   /* CSV step,loss,val,lr,eps,positions; or NULL */
	int valid_windows;      /* per validation; 0: 64 */
	const kn_backend *be;
	void (*progress)(void *user, const sa_progress *p);
	/* After each validation, on this thread: the model as it is (to
	 * score it, or save it with sa_train_checkpoint) and the progress
	 * (p->step + 1 steps done).  Non-zero ends training with that code
	 * and err.  NULL: none.  The daemon publishes from here. */
	int (*validated)(void *user, kn_soma_model *m, const sa_progress *p,
	    char *err);
	void *user;
	volatile sig_atomic_t *stop;    /* set: checkpoint and return */
} sa_train_opts;

typedef struct {
	long steps;
	uint64_t positions;
	double val;             /* the final validation loss */
	double seconds;
	long snapshot_steps;    /* when snapshot_path was written; 0: never */
	uint64_t snapshot_positions;
} sa_result;

int sa_train(const sa_train_opts *o, sa_result *res, char *err);
/* Writes m as o's checkpoint (kind, expert, run id) after steps steps
 * to path, atomically; what sa_train writes at its end.  0 or KN_E*. */
int sa_train_checkpoint(const sa_train_opts *o, kn_soma_model *m,
    long steps, const char *path, char *err);

#endif
