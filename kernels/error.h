/* Error reporting for the compute core: functions return 0 or a negative
 * KN_E* code and write a one-line reason into a caller-owned buffer, so the
 * core never prints and never exits. */
#ifndef KN_ERROR_H
#define KN_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KN_ERR_LEN 256

enum {
	KN_OK = 0,
	KN_EINVAL = -1,   /* bad argument or shape */
	KN_ENOMEM = -2,   /* allocation failed */
	KN_ENODEV = -3,   /* backend not available */
	KN_EIO = -4,      /* file or device error */
	KN_ENUM = -5,     /* non-finite value */
	KN_ENOSPC = -6    /* no space left on the device (or quota): a
	                   * write that may succeed once space is freed */
};

/* Codes of the layers above take numbers from KN_E_MODULE down, each
 * module its own, so that one code never means two things. */
#define KN_E_MODULE (-16)

/* Formats into err (KN_ERR_LEN bytes; NULL is allowed) and returns code. */
int kn_error(char *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
