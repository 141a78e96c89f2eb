/* The single place the core formats its error messages. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "kernels/error.h"

int
kn_error(char *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return code;
	va_start(ap, fmt);
	vsnprintf(err, KN_ERR_LEN, fmt, ap);
	va_end(ap);
	return code;
}
