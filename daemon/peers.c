/* Parsing the peer list, shared by blocktraind and the shardmeter tool. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/peers.h"
#include "kernels/error.h"

const char *
peers_kind_name(int kind)
{
	static const char *const names[PEERS_KINDS] = { "checkpoint", "update",
	    "other" };

	return kind >= 0 && kind < PEERS_KINDS ? names[kind] : "other";
}

static int
parse_line(peers_entry *p, char *line, const char *path, int lineno, char *err)
{
	char *tok[4], *save = NULL, *t;
	int n = 0, i;
	long b;
	char *end;

	for (t = strtok_r(line, " \t", &save); t != NULL && n < 4;
	    t = strtok_r(NULL, " \t", &save))
		tok[n++] = t;
	if (n < 2 || n > 3)
		return kn_error(err, KN_EINVAL, "%.150s:%d: expected 'host:port "
		    "block [peer-id]'", path, lineno);
	memset(p, 0, sizeof(*p));
	if (cf_parse_hostport(tok[0], p->host, sizeof(p->host), &p->port) != 0
	    || p->port == 0)
		return kn_error(err, KN_EINVAL, "%.150s:%d: '%.40s' is not "
		    "host:port", path, lineno, tok[0]);
	snprintf(p->addr, sizeof(p->addr), "%s", tok[0]);
	b = strtol(tok[1], &end, 10);
	if (end == tok[1] || *end || b < 1 || b > PR_MAX_BLOCKS)
		return kn_error(err, KN_EINVAL, "%.150s:%d: block '%.20s' is not "
		    "1 to %d", path, lineno, tok[1], PR_MAX_BLOCKS);
	p->block = (int)b;
	if (n == 3) {
		if (strlen(tok[2]) != 64)
			return kn_error(err, KN_EINVAL, "%.150s:%d: a peer id is "
			    "the 64 hex digits of a SHA-256", path, lineno);
		for (i = 0; i < 64; i++)
			if (!isxdigit((unsigned char)tok[2][i]))
				return kn_error(err, KN_EINVAL, "%.150s:%d: peer "
				    "id is not hex", path, lineno);
		snprintf(p->id, sizeof(p->id), "%s", tok[2]);
	}
	return KN_OK;
}

int
peers_load(peers_list *pl, const char *path, char *err)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int lineno = 0, rc = KN_OK, cap = 0, i;

	pl->v = NULL;
	pl->n = 0;
	if (f == NULL)
		return kn_error(err, KN_EIO, "cannot open peer list %s: %s", path,
		    strerror(errno));
	while (fgets(line, sizeof(line), f) != NULL) {
		char *s = cf_list_line(line);

		lineno++;
		if (*s == '\0')
			continue;
		if (pl->n == cap) {
			peers_entry *v = realloc(pl->v,
			    (size_t)(cap ? cap * 2 : 8) * sizeof(*v));

			if (v == NULL) {
				rc = kn_error(err, KN_ENOMEM, "out of memory");
				break;
			}
			pl->v = v;
			cap = cap ? cap * 2 : 8;
		}
		if ((rc = parse_line(&pl->v[pl->n], s, path, lineno, err)) != 0)
			break;
		for (i = 0; i < pl->n; i++)
			if (strcmp(pl->v[i].addr, pl->v[pl->n].addr) == 0) {
				rc = kn_error(err, KN_EINVAL, "%.150s:%d: %s is "
				    "listed twice", path, lineno, pl->v[i].addr);
				break;
			}
		if (rc != 0)
			break;
		pl->n++;
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
	pl->v = NULL;
	pl->n = 0;
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
