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

/* Every error code of the project, the core's and those of the layers
 * above, in one list (the way libuv's UV_ERRNO_MAP lists its codes), so
 * that one number never means two things and every code has a name:
 * XX(name, status, text).  KN_ERRNO_MAP is the list; it is written in two
 * parts only for the numbers, which the list gives: the core's codes from
 * -1 down, the layers' from -16 down (the numbers they always had), one
 * less for each next entry.  Add a code at the end of its part, so that
 * no number moves.  A module's header names its codes by aliases of
 * these (#define TLS_EHANDSHAKE KN_E_TLS_HANDSHAKE).
 *
 * status is the HTTP status that answers a request which failed with
 * the code (daemon/net's hs_status_of_error reads it); the core only
 * carries it as data.  A code that cannot come from what a client sent
 * is 500 unless there is a better word for it.  text says what it means,
 * for a reader of a log; the err buffer says why. */
#define KN_ERRNO_MAP(XX) KN_ERRNO_CORE(XX) KN_ERRNO_MODULES(XX)

/* the core's: kernels/, proto/, and any layer's plain failures */
#define KN_ERRNO_CORE(XX)                                                   \
	/* what was sent is wrong: do not resend */                         \
	XX(KN_EINVAL, 400, "bad argument or shape")                         \
	/* a passing shortage here: try again later */                      \
	XX(KN_ENOMEM, 503, "allocation failed")                             \
	XX(KN_ENODEV, 503, "backend not available")                         \
	XX(KN_EIO, 500, "file or device error")                             \
	/* non-finite values in what was sent */                            \
	XX(KN_ENUM, 400, "non-finite value")                                \
	/* a write that may succeed once space is freed (or the quota       \
	 * raised): our disk, not the sender's fault */                     \
	XX(KN_ENOSPC, 507, "no space left on the device")

/* the layers', each module's together */
#define KN_ERRNO_MODULES(XX)                                                \
	/* daemon/pipeline/pipeline_client.h: PC_ETIMEDOUT */               \
	XX(KN_E_PC_TIMEDOUT, 500, "no answer from the pipeline in time")    \
	/* daemon/core/identity.h: ID_ENONE, ID_EEXIST */                   \
	XX(KN_E_ID_NONE, 500, "no identity in the directory")               \
	XX(KN_E_ID_EXIST, 500, "an identity is already there")              \
	/* daemon/net/tls.h: TLS_EHANDSHAKE, TLS_ECLOSED */                 \
	XX(KN_E_TLS_HANDSHAKE, 500, "the TLS handshake failed")             \
	XX(KN_E_TLS_CLOSED, 500, "the peer closed the TLS session")         \
	/* daemon/rounds/rounds_parts.h: RP_EHAVE, RP_ETOOLARGE */          \
	XX(KN_E_RP_HAVE, 409, "the part is one already held")               \
	XX(KN_E_RP_TOOLARGE, 413, "the update is above the largest one")    \
	/* daemon/node/probe.c: PB_EBUSY */                                 \
	XX(KN_E_PB_BUSY, 409, "training did not pause for the probe")       \
	/* daemon/net/http_client.h: what an outgoing request came to */    \
	XX(KN_E_HC_CONNECT, 502, "could not connect to the server")         \
	XX(KN_E_HC_TIMEDOUT, 504, "the request timed out")                  \
	XX(KN_E_HC_TLS, 502, "the TLS session with the server failed")      \
	XX(KN_E_HC_TOOLARGE, 502, "the response is above the body limit")   \
	XX(KN_E_HC_CANCELLED, 503, "the request was cancelled")

/* The place of each code in its part of the list: the core's from 1,
 * the layers' from 16.  A core grown past 15 codes would give two codes
 * one number, and kn_err_name's switch would not compile. */
enum kn__errno_place {
	KN__PLACE_CORE = 0,
#define KN__XX(name, status, text) KN__PLACE_##name,
	KN_ERRNO_CORE(KN__XX)
	KN__PLACE_MODULES = 15,
	KN_ERRNO_MODULES(KN__XX)
#undef KN__XX
	KN__PLACE_END
};

enum {
	KN_OK = 0,
#define KN__XX(name, status, text) name = -KN__PLACE_##name,
	KN_ERRNO_MAP(KN__XX)
#undef KN__XX
	/* the lowest code of the list */
	KN_ELAST = -(KN__PLACE_END - 1)
};

/* Formats into err (KN_ERR_LEN bytes; NULL is allowed) and returns code. */
int kn_error(char *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The name of code as the list spells it ("KN_EINVAL", "KN_OK"), or
 * NULL for a number that is not in the list (a libuv code, say). */
const char *kn_err_name(int code);
/* What code means, in a few words; NULL as above. */
const char *kn_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
