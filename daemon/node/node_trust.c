/* Who the daemon is and who may talk to it (DESIGN section 5): its TLS
 * identity from the state directory, the peer list's ids checked against
 * it at start and on SIGHUP, and the one function the TLS layer asks
 * during every handshake.  insecure = yes is the only way around it. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/net/http_route.h"
#include "daemon/node/node.h"
#include "kernels/error.h"

/* A quarantined identity (strikes.h), whose connections are refused:
 * named in the log at its first refusal and every hundredth. */
static int
quarantined(node *n, const char *id_text)
{
	uint64_t k;

	if (!strikes_quarantined(n->trust.strikes, id_text))
		return 0;
	k = strikes_refused(n->trust.strikes, id_text);
	if (k == 1 || k % 100 == 0)
		log_warnx("refused a connection of quarantined peer %s (%llu "
		    "so far); 'shardmeter strikes --clear' or SIGHUP lifts it",
		    id_text, (unsigned long long)k);
	return 1;
}

int
node_trust_allows(node *n, const uint8_t id[ID_BYTES])
{
	int i;

	if ((i = peers_find_id(&n->peers, id)) >= 0)
		return !quarantined(n, n->peers.v[i].id_text);
	if ((i = peers_client_find(&n->peers, id)) >= 0)
		return !quarantined(n, n->peers.clients[i].id_text);
	return 0;
}

static int
node_allows(void *arg, const uint8_t id[ID_BYTES])
{
	return node_trust_allows(arg, id);
}

int
node_trust_role(void *ctx, const uint8_t *id)
{
	const node *n = ctx;

	return peers_find_id(&n->peers, id) >= 0 ? HS_ROLE_PEER :
	    HS_ROLE_CLIENT;
}

int
node_trust_is_operator(const node *n, const uint8_t *id)
{
	if (id == NULL)
		return n->trust.tls == NULL;
	return peers_find_id(&n->peers, id) < 0 &&
	    peers_client_find(&n->peers, id) >= 0;
}

unsigned
node_trust_who(void *ctx, const hs_request *req)
{
	node *n = ctx;
	unsigned who = 0;

	if (n->trust.tls == NULL)
		return HR_EVERYONE;
	if (req->peer_id == NULL)
		return 0;
	if (peers_find_id(&n->peers, req->peer_id) >= 0)
		who |= HR_PEER;
	if (node_trust_is_operator(n, req->peer_id))
		who |= HR_OPERATOR;
	return who;
}

int
node_trust_check(const node *n, const peers_list *pl, int self, char *err)
{
	int i;

	if (n->trust.tls == NULL)
		return 0;
	for (i = 0; i < pl->n; i++)
		if (!pl->v[i].has_id)
			return kn_error(err, KN_EINVAL, "%s:%d: %s has no peer "
			    "id; each line is 'host:port %s peer-id' (the id "
			    "'shardmeter id' prints on that host)",
			    n->cfg.peers, pl->v[i].line, pl->v[i].addr,
			    pl->experts ? "expert=E" : "block");
	if (strcmp(pl->v[self].id_text, tls_ctx_id(n->trust.tls)) != 0)
		return kn_error(err, KN_EINVAL, "%s: the line of %s names peer "
		    "id %s, but this daemon's identity (%s) is %s",
		    n->cfg.peers, pl->v[self].addr, pl->v[self].id_text,
		    n->cfg.state_dir, tls_ctx_id(n->trust.tls));
	return 0;
}

tls_ctx *
node_trust_tls(const node *n)
{
	return n->trust.tls;
}

strikes *
node_trust_strikes(const node *n)
{
	return n->trust.strikes;
}

/* The strikes of this run, with those an earlier start of it left in
 * state_dir/strikes: a quarantine lasts the run, restarts included. */
static int
setup_strikes(node *n, char *err)
{
	char path[PR_PATH_LEN + 16], why[KN_ERR_LEN];
	int rc, i;

	if ((rc = strikes_new(&n->trust.strikes, n->cfg.strikes_quarantine,
	    err)) != 0)
		return rc;
	strikes_on_quarantine(n->trust.strikes, node_trust_quarantined, n);
	snprintf(path, sizeof(path), "%s/strikes", n->cfg.state_dir);
	if (strikes_load(n->trust.strikes, path, n->run_id, why) != 0)
		log_warnx("%s; starting without strikes", why);
	for (i = 0; i < strikes_count(n->trust.strikes); i++)
		if (strikes_at(n->trust.strikes, i)->quarantined)
			log_warnx("peer %s stays quarantined (%s): clear it with "
			    "'shardmeter strikes --clear' or SIGHUP",
			    strikes_at(n->trust.strikes, i)->id, path);
	strikes_set_file(n->trust.strikes, path, n->run_id);
	return KN_OK;
}

int
node_trust_setup(node *n, char *err)
{
	char why[KN_ERR_LEN];
	int rc;

	if ((rc = setup_strikes(n, err)) != 0)
		return rc;

	if (strcmp(n->cfg.insecure, "yes") == 0) {
		if (!cf_is_loopback(n->cfg.listen_host))
			return kn_error(err, KN_EINVAL, "insecure = yes is "
			    "refused on %s: plain TCP is for loopback only",
			    n->cfg.listen_host);
		return 0;
	}
	if ((rc = tls_ctx_new(&n->trust.tls, n->cfg.state_dir, why)) != 0)
		return kn_error(err, rc, "%s%s", why, rc == ID_ENONE ?
		    ": make one with 'shardmeter init --dir <state_dir>'" : "");
	tls_ctx_set_allow(n->trust.tls, node_allows, n);
	return node_trust_check(n, &n->peers, n->self, err);
}

void
node_trust_reloaded(node *n)
{
	int cut;

	if (n->http == NULL || (cut = hs_server_recheck(n->http)) == 0)
		return;
	log_info("SIGHUP: cut off %d connection(s) of peers no longer "
	    "listed", cut);
}

void
node_trust_quarantined(void *arg, const char *peer_id)
{
	node *n = arg;

	/* new connections are refused in their handshake from now on; the
	 * open ones are cut at the next housekeeping tick, not here: the
	 * refusal that quarantined the peer may be noted inside a handler
	 * of one of them */
	(void)peer_id;
	n->trust.recheck = 1;
}

void
node_trust_cut_quarantined(node *n)
{
	int cut;

	if (!n->trust.recheck)
		return;
	n->trust.recheck = 0;
	if (n->http == NULL || (cut = hs_server_recheck(n->http)) == 0)
		return;
	log_warnx("cut off %d connection(s) of quarantined peers", cut);
}

void
node_trust_free(node *n)
{
	tls_ctx_free(n->trust.tls);
	n->trust.tls = NULL;
	strikes_free(n->trust.strikes);
	n->trust.strikes = NULL;
}
