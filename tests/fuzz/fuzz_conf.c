/* Fuzz target: blocktrain.conf (daemon/core/conf.c), read from a file as the
 * daemon reads it.  A configuration that loads must print to a file that
 * loads again and prints the same, when its lines are short enough for
 * inih. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/conf.h"
#include "tests/fuzz/fuzz.h"

const char fz_target[] = "conf";

static int
print(FILE *f, const void *c)
{
	return cf_print(f, c);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static cf_config c, again;
	char err[PR_ERR_LEN], *text, *text2;
	size_t len, len2;

	cf_defaults(&c);
	if (cf_load(&c, fz_file(data, size), err) != 0)
		return 0;
	text = fz_print(print, &c, &len);
	if (!fz_ini_lines_fit(text, len)) {
		free(text);
		return 0;
	}
	cf_defaults(&again);
	if (cf_load(&again, fz_file((const uint8_t *)text, len), err) != 0)
		fz_fail("a printed configuration does not load: %s", err);
	text2 = fz_print(print, &again, &len2);
	if (len != len2 || memcmp(text, text2, len) != 0)
		fz_fail("a printed configuration prints differently once "
		    "loaded");
	free(text);
	free(text2);
	return 0;
}
