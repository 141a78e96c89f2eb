/* Fuzz target: the inference pipeline's host list
 * (daemon/pipeline/pipeline_hosts.c), read from a file as blocktraind -S and
 * `shardmeter generate --peers` read it.  A list that loads must name
 * each host by one address and give it blocks and layers in range, or
 * (SOMA) experts in range. */
#include "config.h"

#include <stdlib.h>

#include "daemon/pipeline/pipeline_hosts.h"
#include "proto/router.h"
#include "kernels/error.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "hosts";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static ph_list pl;
	char err[KN_ERR_LEN];
	int i;

	if (ph_load(&pl, fz_file(data, size), err) != 0)
		return 0;
	if (pl.n < 1 || pl.n > PH_MAX_HOSTS)
		fz_fail("a host list loaded with %d hosts", pl.n);
	for (i = 0; i < pl.n; i++) {
		const ph_host *h = &pl.v[i];

		if (ph_find(&pl, h->addr) != i)
			fz_fail("address %s is not found at its line", h->addr);
		if (pl.soma) {
			if (h->expert_lo < 0 || h->expert_hi < h->expert_lo ||
			    h->expert_hi >= (int)PR_ROUTER_MAX_EXPERTS ||
			    ph_expert_host(&pl, h->expert_lo) < 0)
				fz_fail("host %d serves experts %d-%d", i,
				    h->expert_lo, h->expert_hi);
		} else if (h->block_lo < 1 || h->block_hi < h->block_lo ||
		    h->block_hi > PR_MAX_BLOCKS)
			fz_fail("host %d serves blocks %d-%d", i, h->block_hi,
			    h->block_lo);
	}
	for (i = 0; i < pl.nclients; i++)
		if (ph_client_find(&pl, pl.clients[i].id) != i)
			fz_fail("client %d is not found by its id", i);
	ph_free(&pl);
	return 0;
}
