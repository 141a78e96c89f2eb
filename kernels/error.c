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

const char *
kn_err_name(int code)
{
	switch (code) {
	case KN_OK:
		return "KN_OK";
#define KN__XX(name, status, text) case name: return #name;
	KN_ERRNO_MAP(KN__XX)
#undef KN__XX
	}
	return NULL;
}

const char *
kn_strerror(int code)
{
	switch (code) {
	case KN_OK:
		return "success";
#define KN__XX(name, status, text) case name: return text;
	KN_ERRNO_MAP(KN__XX)
#undef KN__XX
	}
	return NULL;
}
