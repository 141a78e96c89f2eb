/* What shardmeter plan writes for its first choice: the run spec, the
 * peer list, the pipeline's host list, each host's daemon configuration
 * lines for the network options, and every prediction as JSON
 * (plan.json) so that a run can report predicted beside measured. */
#ifndef PN_OUTPUT_H
#define PN_OUTPUT_H

#include <jansson.h>

#include "plan/search.h"

/* The daemon configuration keys (blocktrain.conf(5)) of the network
 * options a plan sets in conf/HOST.conf. */
#define PN_KEY_ENCODING "update_encoding"       /* f32|f16|bf16|int8 */
#define PN_KEY_COMPRESSION "update_compression" /* none|zstd */
#define PN_KEY_STREAMS "update_streams"         /* N */
#define PN_KEY_OVERLAP "overlap_rounds"         /* no|yes */

/* The options of the issue that this build's daemon has keys (and
 * values) for, found in its key table (keys, n: the caller hands in the
 * daemon's); the planner tries only these unless told otherwise. */
typedef struct {
	int int8;       /* update_encoding = int8 */
	int zstd;       /* update_compression = zstd */
	int streams;    /* update_streams = N */
	int overlap;    /* overlap_rounds = yes */
} pn_support;

void pn_support_detect(pn_support *sup, const pr_key *keys, int n);

/* host:port of host h: its address, else its name when that is one,
 * else NAME:7300 (the daemon's default port), a placeholder. */
void pn_host_addr(const topo_topology *t, int h, char *buf, size_t len);

/* The spec that runs c: s with c's steps, replicas, local steps and
 * layers of each block (equal ones as layers_per_block), data
 * paths made absolute (the other options are daemon keys, in
 * conf/HOST.conf). */
int pn_candidate_spec(const pr_spec *s, const pn_candidate *c, pr_spec *out,
    char *err);

/* The predictions of r for spec s as JSON (the caller's reference);
 * def, when not NULL, gives the speedup. */
json_t *pn_result_json(const topo_topology *t, const pr_spec *s,
    const pn_result *r, const pn_result *def);
json_t *pn_plan_json(const topo_topology *t, const pr_spec *s,
    const pn_options *o, const pn_plan *plan);

/* Writes dir/spec.conf, dir/peers, dir/pipeline, dir/conf/HOST.conf and
 * dir/plan.json for plan->v[plan->chosen] (dir is made if missing).  0,
 * or a negative KN_E* code with the path at fault in err. */
int pn_write(const char *dir, const topo_topology *t, const pr_spec *s,
    const pn_options *o, const pn_plan *plan, char *err);
/* The same for another row: pick 0 the default configuration (plan->def),
 * K the K-th of the ranked table (plan->v[K - 1]); plan.json then says
 * "written": K.  KN_EINVAL for a row the table does not show. */
int pn_write_pick(const char *dir, const topo_topology *t, const pr_spec *s,
    const pn_options *o, const pn_plan *plan, int pick, char *err);

#endif
