/* Parsing the peer list, shared by blocktraind and the shardmeter tool. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/peers.h"
#include "kernels/error.h"

const char *
peers_kind_name(int kind)
{
	static const char *const names[PEERS_KINDS] = { "checkpoint", "update",
	    "other" };

	return kind >= 0 && kind < PEERS_KINDS ? names[kind] : "other";
}

int
peers_parse_client(peers_client *c, char **tok, int n, const char *path,
    int lineno, char *err)
{
	char why[KN_ERR_LEN];

	if (n < 2 || n > 3)
		return kn_error(err, KN_EINVAL, "%.150s:%d: expected 'client "
		    "peer-id [name]'", path, lineno);
	memset(c, 0, sizeof(*c));
	if (id_parse(tok[1], c->id, why) != 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: %.200s", path,
		    lineno, why);
	id_format(c->id, c->id_text);
	if (n == 3 && strlen(tok[2]) >= sizeof(c->name))
		return kn_error(err, KN_EINVAL, "%.150s:%d: a client name has "
		    "at most %d bytes", path, lineno, PEERS_NAME_LEN - 1);
	if (n == 3)
		snprintf(c->name, sizeof(c->name), "%s", tok[2]);
	return KN_OK;
}

/* "expert=E" of a SOMA run's line, E from 0. */
static int
parse_expert(peers_entry *p, const char *tok, const char *path, int lineno,
    char *err)
{
	const char *d = tok + 7;
	char *end;
	long e;

	errno = 0;
	e = strtol(d, &end, 10);
	if (!isdigit((unsigned char)d[0]) || *end || errno != 0 || e < 0 ||
	    e >= PR_MAX_BLOCKS || (d[0] == '0' && d[1] != '\0'))
		return kn_error(err, KN_EINVAL, "%.150s:%d: '%.20s' is not "
		    "expert=E with E from 0 to %d", path, lineno, tok,
		    PR_MAX_BLOCKS - 1);
	p->expert = (int)e;
	return KN_OK;
}

/* "host:port block [peer-id]" or "host:port expert=E [peer-id]" */
static int
parse_daemon(peers_entry *p, char **tok, int n, const char *path,
    int lineno, char *err)
{
	char why[KN_ERR_LEN];
	long b;
	char *end;

	if (n < 2 || n > 3)
		return kn_error(err, KN_EINVAL, "%.150s:%d: expected 'host:port "
		    "block peer-id', 'host:port expert=E peer-id' or 'client "
		    "peer-id [name]'", path, lineno);
	memset(p, 0, sizeof(*p));
	p->line = lineno;
	p->expert = -1;
	if (cf_parse_hostport(tok[0], p->host, sizeof(p->host), &p->port) != 0
	    || p->port == 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: '%.40s' is not "
		    "host:port", path, lineno, tok[0]);
	snprintf(p->addr, sizeof(p->addr), "%s", tok[0]);
	if (strncmp(tok[1], "expert=", 7) == 0) {
		if (parse_expert(p, tok[1], path, lineno, err) != 0)
			return KN_EINVAL;
	} else {
		errno = 0;
		b = strtol(tok[1], &end, 10);
		if (end == tok[1] || *end || errno != 0 || b < 1 ||
		    b > PR_MAX_BLOCKS || !isdigit((unsigned char)tok[1][0]))
			return kn_error(err, KN_EINVAL, "%.150s:%d: block "
			    "'%.20s' is not 1 to %d (or expert=E)", path,
			    lineno, tok[1], PR_MAX_BLOCKS);
		p->block = (int)b;
	}
	if (n == 3) {
		if (id_parse(tok[2], p->id, why) != 0)
			return kn_error(err, KN_EINVAL, "%.150s:%d: %.200s",
			    path, lineno, why);
		id_format(p->id, p->id_text);
		p->has_id = 1;
	}
	return KN_OK;
}

static int
grow(void **v, int n, int *cap, size_t size, char *err)
{
	void *nv;

	if (n < *cap)
		return KN_OK;
	if ((nv = realloc(*v, (size_t)(*cap ? *cap * 2 : 8) * size)) == NULL)
		return kn_error(err, KN_ENOMEM, "out of memory");
	*v = nv;
	*cap = *cap ? *cap * 2 : 8;
	return KN_OK;
}

/* Whether a line read so far names id. */
static int
id_taken(const peers_list *pl, const uint8_t id[ID_BYTES])
{
	return peers_find_id(pl, id) >= 0 || peers_client_find(pl, id) >= 0;
}

static int
parse_line(peers_list *pl, int *caps, char *line, const char *path,
    int lineno, char *err)
{
	char *tok[4] = { NULL }, *save = NULL, *t;
	int n = 0, rc, i;

	for (t = strtok_r(line, " \t", &save); t != NULL && n < 4;
	    t = strtok_r(NULL, " \t", &save))
		tok[n++] = t;
	if (n == 0)
		return KN_OK;
	if (strcmp(tok[0], "client") == 0) {
		peers_client c;

		if ((rc = peers_parse_client(&c, tok, n, path, lineno,
		    err)) != 0)
			return rc;
		if (id_taken(pl, c.id))
			return kn_error(err, KN_EINVAL, "%.150s:%d: peer id %s "
			    "is listed twice", path, lineno, c.id_text);
		if ((rc = grow((void **)&pl->clients, pl->nclients, &caps[1],
		    sizeof(c), err)) != 0)
			return rc;
		pl->clients[pl->nclients++] = c;
		return KN_OK;
	}
	if ((rc = grow((void **)&pl->v, pl->n, &caps[0], sizeof(*pl->v),
	    err)) != 0)
		return rc;
	if ((rc = parse_daemon(&pl->v[pl->n], tok, n, path, lineno, err)) != 0)
		return rc;
	if (pl->n > 0 && (pl->v[pl->n].expert >= 0) != pl->experts)
		return kn_error(err, KN_EINVAL, "%.150s:%d: %s line among %s "
		    "lines: a peer list is of one method (blocks for "
		    "blocktrain, expert=E for soma)", path, lineno,
		    pl->experts ? "a block" : "an expert", pl->experts ?
		    "expert" : "block");
	pl->experts = pl->v[pl->n].expert >= 0;
	for (i = 0; i < pl->n; i++)
		if (pl->experts && pl->v[i].expert == pl->v[pl->n].expert)
			return kn_error(err, KN_EINVAL, "%.150s:%d: expert %d is "
			    "already trained by %s (line %d): experts have no "
			    "replicas", path, lineno, pl->v[i].expert,
			    pl->v[i].addr, pl->v[i].line);
	for (i = 0; i < pl->n; i++)
		if (strcmp(pl->v[i].addr, pl->v[pl->n].addr) == 0)
			return kn_error(err, KN_EINVAL, "%.150s:%d: %s is "
			    "listed twice", path, lineno, pl->v[i].addr);
	if (pl->v[pl->n].has_id && id_taken(pl, pl->v[pl->n].id))
		return kn_error(err, KN_EINVAL, "%.150s:%d: peer id %s is "
		    "listed twice", path, lineno, pl->v[pl->n].id_text);
	pl->missing_ids += !pl->v[pl->n].has_id;
	pl->n++;
	return KN_OK;
}

int
peers_load(peers_list *pl, const char *path, char *err)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int lineno = 0, rc = KN_OK, caps[2] = { 0, 0 };

	memset(pl, 0, sizeof(*pl));
	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open peer list %s: %s", path,
		    strerror(errno));
	while (rc == KN_OK && fgets(line, sizeof(line), f) != NULL) {
		char *s = cf_list_line(line);

		lineno++;
		if (*s != '\0')
			rc = parse_line(pl, caps, s, path, lineno, err);
	}
	fclose(f);
	if (rc == 0 && pl->n == 0)
		rc = kn_error(err, KN_EINVAL, "%.150s: no peers listed", path);
	if (rc != 0)
		peers_free(pl);
	return rc;
}

void
peers_free(peers_list *pl)
{
	free(pl->v);
	free(pl->clients);
	memset(pl, 0, sizeof(*pl));
}

int
peers_find(const peers_list *pl, const char *addr)
{
	int i;

	for (i = 0; i < pl->n; i++)
		if (strcmp(pl->v[i].addr, addr) == 0)
			return i;
	return -1;
}

int
peers_find_id(const peers_list *pl, const uint8_t id[ID_BYTES])
{
	int i;

	for (i = 0; i < pl->n; i++)
		if (pl->v[i].has_id && id_equal(pl->v[i].id, id))
			return i;
	return -1;
}

int
peers_client_find(const peers_list *pl, const uint8_t id[ID_BYTES])
{
	int i;

	for (i = 0; i < pl->nclients; i++)
		if (id_equal(pl->clients[i].id, id))
			return i;
	return -1;
}

int
peers_replicas(const peers_list *pl, int block)
{
	int i, n = 0;

	for (i = 0; i < pl->n; i++)
		n += pl->v[i].block == block;
	return n;
}

int
peers_replica_index(const peers_list *pl, int i)
{
	int k, r = 0;

	for (k = 0; k < i; k++)
		r += pl->v[k].block == pl->v[i].block;
	return r;
}
