/* The pipeline host's caches for requests of position blocks (DESIGN
 * section 2), on the compute thread: for each request, the keys and
 * values of the clean context over every block this host serves, kept
 * from one traversal of the ring to the next.  serve_bt.c denoises; the
 * caches go with the request's last traversal, its end frame, or when
 * idle.  A host without one (evicted, restarted) rebuilds it from the
 * context the frame carries, so the output never depends on it. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "daemon/blocktrain/blockgen.h"
#include "daemon/core/log.h"
#include "daemon/pipeline/internal.h"
#include "kernels/clock.h"
#include "kernels/error.h"

struct spb_cache {
	uint64_t id;
	kn_kv *kv[PR_MAX_BLOCKS + 1];   /* by 1-based block served here */
	double used;
	struct spb_cache *next;
};

static void
spb_cache_free(sc *c, struct spb_cache *e)
{
	for (int b = c->o.block_lo; b <= c->o.block_hi; b++)
		kn_kv_free(e->kv[b]);
	free(e);
	atomic_fetch_sub(&c->ncaches, 1);
}

void
sc__pb_drop(sc *c, uint64_t id)
{
	struct spb_cache **prev, *e;

	for (prev = &c->spb_caches; (e = *prev) != NULL; prev = &e->next)
		if (e->id == id) {
			*prev = e->next;
			spb_cache_free(c, e);
			return;
		}
}

void
sc__pb_evict_idle(sc *c, double t)
{
	struct spb_cache **prev, *e;
	int evicted = 0;

	for (prev = &c->spb_caches; (e = *prev) != NULL;)
		if (t - e->used > c->o.idle_s) {
			*prev = e->next;
			spb_cache_free(c, e);
			evicted++;
		} else
			prev = &e->next;
	if (evicted)
		log_info("pipeline: evicted %d idle position-block cache%s",
		    evicted, evicted == 1 ? "" : "s");
}

void
sc__pb_free_all(sc *c)
{
	struct spb_cache *e, *next;

	for (e = c->spb_caches; e != NULL; e = next) {
		next = e->next;
		spb_cache_free(c, e);
	}
	c->spb_caches = NULL;
}

/* A new entry with a cache per block served, under the memory the
 * caches may take; NULL with why set. */
static struct spb_cache *
spb_cache_new(sc *c, uint64_t id, char *why, size_t len)
{
	int held = atomic_load(&c->ncaches), b;
	size_t need = 0;
	struct spb_cache *e;
	char err[KN_ERR_LEN];

	/* blocks may differ in layers, so each counts at its own size */
	for (b = c->o.block_lo; b <= c->o.block_hi; b++)
		need += kn_kv_bytes(kn_model_get_shape(c->blocks[b]));
	/* the causal LM's caches count at their own size */
	if ((size_t)held * (need > c->kv_bytes ? need : c->kv_bytes) + need >
	    c->o.cache_bytes) {
		snprintf(why, len, "busy: the KV caches are full (%d requests "
		    "hold them); try again", held);
		return NULL;
	}
	if ((e = calloc(1, sizeof(*e))) == NULL) {
		snprintf(why, len, "out of memory");
		return NULL;
	}
	atomic_fetch_add(&c->ncaches, 1);
	e->id = id;
	for (b = c->o.block_lo; b <= c->o.block_hi; b++)
		if (kn_kv_create(&e->kv[b], c->blocks[b], err) != 0) {
			spb_cache_free(c, e);
			snprintf(why, len, "cannot allocate a KV cache: %.150s",
			    err);
			return NULL;
		}
	e->next = c->spb_caches;
	c->spb_caches = e;
	return e;
}

kn_kv *
sc__pb_kv(sc *c, uint64_t id, int block)
{
	struct spb_cache *e;

	for (e = c->spb_caches; e != NULL; e = e->next)
		if (e->id == id) {
			e->used = kn_now();
			return e->kv[block];
		}
	return NULL;
}

int
sc__pb_begin(sc *c, uint64_t id, const int32_t *seq, int p, char *why,
    size_t len)
{
	int L = bg_pos_block(&c->spec), b, stale = 0;
	struct spb_cache *e;
	char err[KN_ERR_LEN];

	for (e = c->spb_caches; e != NULL && e->id != id; e = e->next)
		;
	/* an id seen before whose cache is past this traversal: not this
	 * request's (ids restart with the entry) */
	for (b = c->o.block_lo; e != NULL && b <= c->o.block_hi; b++)
		stale |= kn_kv_len(e->kv[b]) > p * L;
	if (stale) {
		sc__pb_drop(c, id);
		e = NULL;
	}
	if (e == NULL && (e = spb_cache_new(c, id, why, len)) == NULL)
		return -1;
	e->used = kn_now();
	for (b = c->o.block_lo; b <= c->o.block_hi; b++)
		if (bg_extend(c->blocks[b], e->kv[b], &c->spec, p, seq,
		    err) != 0) {
			snprintf(why, len, "%.200s", err);
			sc__pb_drop(c, id);
			return -1;
		}
	return 0;
}
