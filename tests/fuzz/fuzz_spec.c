/* Fuzz target: the run spec's INI text (proto/spec.c), as blocktraind and
 * shardmeter read a spec file.  The file is read through pr_spec_load, so
 * the data paths are resolved too.  A spec that loads must print to text
 * that parses to the same run id and prints the same again, when its
 * lines are short enough for inih.  (The
 * canonical msgpack form is only ever encoded: no peer decodes it.) */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/spec.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "spec";

static int
print(FILE *f, const void *s)
{
	return pr_spec_print(f, s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static pr_spec s, again;
	char err[PR_ERR_LEN], id[PR_RUN_ID_LEN], id2[PR_RUN_ID_LEN];
	char *text, *text2;
	size_t len, len2;

	if (pr_spec_load(&s, fz_file(data, size), err) != 0)
		return 0;
	if (pr_spec_run_id(&s, id, err) != 0)
		fz_fail("a loaded spec has no run id: %s", err);
	text = fz_print(print, &s, &len);
	if (!fz_ini_lines_fit(text, len)) {
		free(text);
		return 0;
	}
	if (pr_spec_parse(&again, text, len, err) != 0)
		fz_fail("a printed spec does not parse: %s", err);
	if (pr_spec_run_id(&again, id2, err) != 0 || strcmp(id, id2) != 0)
		fz_fail("a printed spec parses to another run id");
	text2 = fz_print(print, &again, &len2);
	if (len != len2 || memcmp(text, text2, len) != 0)
		fz_fail("a printed spec prints differently once parsed");
	free(text);
	free(text2);
	return 0;
}
