/* Fuzz target: the peer list (daemon/core/peers.c), read from a file as
 * blocktraind and shardmeter read it.  A list that loads must name each
 * daemon by one address and each peer id once, with blocks in range and
 * replica indexes that count the block's lines (a SOMA run's list: expert
 * lines, block 0, each expert in range). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "daemon/core/peers.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "peers";

static void
check_daemons(const peers_list *pl)
{
	int i, missing = 0, seen[PR_MAX_BLOCKS + 1] = { 0 };
	int experts[PR_MAX_BLOCKS] = { 0 };

	for (i = 0; i < pl->n; i++) {
		const peers_entry *p = &pl->v[i];

		/* a SOMA run's list: expert lines only, block 0, each
		 * expert once; a BlockTrain run's: block lines only */
		if ((pl->experts ? p->block != 0 || p->expert < 0 ||
		    p->expert >= PR_MAX_BLOCKS : p->expert != -1 ||
		    p->block < 1 || p->block > PR_MAX_BLOCKS) ||
		    p->port < 1 || p->port > 65535)
			fz_fail("line %d: block %d, expert %d or port %d out of "
			    "range", i, p->block, p->expert, p->port);
		if (pl->experts && experts[p->expert]++)
			fz_fail("expert %d on two lines", p->expert);
		if (peers_find(pl, p->addr) != i)
			fz_fail("address %s is not found at its line", p->addr);
		if (peers_replica_index(pl, i) != seen[p->block]++)
			fz_fail("replica index of line %d is wrong", i);
		if (p->has_id && (peers_find_id(pl, p->id) != i ||
		    peers_client_find(pl, p->id) >= 0))
			fz_fail("peer id %s is not unique", p->id_text);
		missing += !p->has_id;
	}
	if (missing != pl->missing_ids)
		fz_fail("%d daemon lines lack an id, not %d", missing,
		    pl->missing_ids);
	for (i = 1; i <= PR_MAX_BLOCKS; i++)
		if (peers_replicas(pl, i) != seen[i])
			fz_fail("block %d has %d replicas, not %d", i,
			    peers_replicas(pl, i), seen[i]);
}

static void
check_clients(const peers_list *pl)
{
	uint8_t id[ID_BYTES];
	char err[KN_ERR_LEN];
	int i;

	for (i = 0; i < pl->nclients; i++) {
		const peers_client *c = &pl->clients[i];

		if (peers_client_find(pl, c->id) != i ||
		    peers_find_id(pl, c->id) >= 0)
			fz_fail("client id %s is not unique", c->id_text);
		if (id_parse(c->id_text, id, err) != 0 ||
		    !id_equal(id, c->id))
			fz_fail("client id %s does not read back", c->id_text);
		if (strlen(c->name) >= PEERS_NAME_LEN)
			fz_fail("client name too long");
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	peers_list pl;
	char err[KN_ERR_LEN];

	if (peers_load(&pl, fz_file(data, size), err) != 0)
		return 0;
	if (pl.n < 1)
		fz_fail("a peer list loaded without peers");
	check_daemons(&pl);
	check_clients(&pl);
	peers_free(&pl);
	return 0;
}
