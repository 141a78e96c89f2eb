/* The route table's dispatch (http_route.h): match the path, then the
 * method, then the caller, and only then the handler, so that every
 * endpoint refuses the same way. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "daemon/net/http_route.h"

int
hr_match_path(const char *pattern, const int64_t *max, const char *path,
    hr_match *m)
{
	hr_match got = *m;
	const char *p = pattern, *s = path;
	int k = 0;
	size_t used;

	while (*p != '\0') {
		if (strcmp(p, "{*}") == 0) {
			got.rest = s;
			*m = got;
			return 1;
		}
		if (strncmp(p, "{n}", 3) == 0) {
			if (got.nnum >= HR_MAX_NUMBERS ||
			    (used = hs_path_number(s, max != NULL ? max[k] :
			    INT64_MAX, &got.num[got.nnum])) == 0)
				return 0;
			got.nnum++;
			k++;
			s += used;
			p += 3;
			continue;
		}
		if (*p != *s)
			return 0;
		p++;
		s++;
	}
	if (*s != '\0')
		return 0;
	got.rest = "";
	*m = got;
	return 1;
}

/* Where a table's patterns are matched: the rest of the table above's
 * match, or the whole path. */
static const char *
subject(const hs_request *req, const hr_match *above)
{
	return above != NULL ? above->rest : req->path;
}

static int
method_matches(const char *row, const char *method)
{
	return row == NULL || strcmp(row, method) == 0 ||
	    (strcmp(row, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

/* Appends name to a ", "-separated list unless it is there already. */
static void
allow_add(char *buf, size_t len, const char *name)
{
	size_t have = strlen(buf), n = strlen(name);
	const char *p;

	for (p = buf; (p = strstr(p, name)) != NULL; p += n)
		if ((p == buf || p[-1] == ' ') && (p[n] == ',' ||
		    p[n] == '\0'))
			return;
	snprintf(buf + have, len - have, "%s%s", have > 0 ? ", " : "", name);
}

void
hr_allow(const hr_table *t, const char *path, const hr_match *above,
    char *buf, size_t len)
{
	hr_match m;
	size_t i;

	if (len == 0)
		return;
	buf[0] = '\0';
	for (i = 0; i < t->nrows; i++) {
		const hr_route *r = &t->rows[i];

		if (above != NULL)
			m = *above;
		else
			memset(&m, 0, sizeof(m));
		if (r->method == NULL ||
		    !hr_match_path(r->pattern, r->max, path, &m))
			continue;
		allow_add(buf, len, r->method);
		if (strcmp(r->method, "GET") == 0)
			allow_add(buf, len, "HEAD");
	}
}

void
hr_refuse_text(const hs_request *req, hs_response *res, int status)
{
	if (status == 405)
		hs_response_text(res, 405, "%s is not allowed on %s",
		    req->method, req->path);
	else
		hs_response_text(res, status, "%s on %s is not open to this "
		    "caller", req->method, req->path);
}

static void
refuse(const hr_table *t, const hs_request *req, hs_response *res,
    int status, const hr_route *row, const hr_match *m)
{
	if (t->refuse != NULL)
		t->refuse(t->ctx, req, res, status, row, m);
	else
		hr_refuse_text(req, res, status);
}

int
hr_dispatch(const hr_table *t, const hs_request *req, hs_response *res,
    const hr_match *above)
{
	const char *path = subject(req, above);
	const hr_route *first = NULL, *row = NULL;
	hr_match m, first_m, none;
	char allow[128];
	size_t i;

	if (above != NULL)
		none = *above;
	else
		memset(&none, 0, sizeof(none));
	none.rest = "";
	first_m = none;
	for (i = 0; i < t->nrows && row == NULL; i++) {
		m = none;
		if (!hr_match_path(t->rows[i].pattern, t->rows[i].max, path,
		    &m))
			continue;
		if (first == NULL) {
			first = &t->rows[i];
			first_m = m;
		}
		if (method_matches(t->rows[i].method, req->method))
			row = &t->rows[i];
	}
	if (first == NULL) {
		if (t->not_found == NULL)
			return 0;
		t->not_found(t->ctx, req, res, &none);
		return 1;
	}
	if (row == NULL) {
		if (t->meter != NULL && first->meter != HR_METER_KEEP)
			t->meter(t->ctx, req, res, first->meter);
		hr_allow(t, path, above, allow, sizeof(allow));
		hs_response_header(res, "Allow", allow);
		refuse(t, req, res, 405, first, &first_m);
		return 1;
	}
	if (t->meter != NULL && row->meter != HR_METER_KEEP)
		t->meter(t->ctx, req, res, row->meter);
	if (row->who != HR_ANYONE && ((t->who != NULL ? t->who(t->ctx, req) :
	    HR_EVERYONE) & row->who) == 0) {
		refuse(t, req, res, 403, row, &m);
		return 1;
	}
	row->fn(t->ctx, req, res, &m);
	return 1;
}
