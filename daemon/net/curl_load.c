/* Loading libcurl on first use (see curl_load.h): one dlopen and one
 * curl_global_init a process, whichever thread asks first. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "daemon/net/curl_load.h"
#include "kernels/error.h"

/* Each entry of the table has the type of curl.h's declaration; checked
 * here without referring to the function, so that nothing links it. */
#define CL_SAME_TYPE(field, fn) \
	_Static_assert(_Generic(&fn, __typeof__(((cl_curl *)0)->field): 1, \
	    default: 0), #fn " has another type in curl.h")

CL_SAME_TYPE(easy_init, curl_easy_init);
CL_SAME_TYPE(easy_setopt, curl_easy_setopt);
CL_SAME_TYPE(easy_getinfo, curl_easy_getinfo);
CL_SAME_TYPE(easy_perform, curl_easy_perform);
CL_SAME_TYPE(easy_cleanup, curl_easy_cleanup);
CL_SAME_TYPE(easy_strerror, curl_easy_strerror);
CL_SAME_TYPE(easy_header, curl_easy_header);
CL_SAME_TYPE(slist_append, curl_slist_append);
CL_SAME_TYPE(slist_free_all, curl_slist_free_all);
CL_SAME_TYPE(multi_init, curl_multi_init);
CL_SAME_TYPE(multi_setopt, curl_multi_setopt);
CL_SAME_TYPE(multi_add_handle, curl_multi_add_handle);
CL_SAME_TYPE(multi_remove_handle, curl_multi_remove_handle);
CL_SAME_TYPE(multi_info_read, curl_multi_info_read);
CL_SAME_TYPE(multi_socket_action, curl_multi_socket_action);
CL_SAME_TYPE(multi_assign, curl_multi_assign);
CL_SAME_TYPE(multi_cleanup, curl_multi_cleanup);
CL_SAME_TYPE(multi_strerror, curl_multi_strerror);

/* The names dlsym looks up, with where each pointer goes. */
static const struct {
	const char *name;
	size_t offset;
} symbols[] = {
#define CL_SYM(field) { "curl_" #field, offsetof(cl_curl, field) }
	CL_SYM(easy_init), CL_SYM(easy_setopt), CL_SYM(easy_getinfo),
	CL_SYM(easy_perform), CL_SYM(easy_cleanup), CL_SYM(easy_strerror),
	CL_SYM(easy_header), CL_SYM(slist_append), CL_SYM(slist_free_all),
	CL_SYM(multi_init), CL_SYM(multi_setopt), CL_SYM(multi_add_handle),
	CL_SYM(multi_remove_handle), CL_SYM(multi_info_read),
	CL_SYM(multi_socket_action), CL_SYM(multi_assign),
	CL_SYM(multi_cleanup), CL_SYM(multi_strerror),
#undef CL_SYM
};

/* The first call's outcome, for every later one. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cl_curl table;
static const cl_curl *loaded;
static int load_rc;
static char load_error[KN_ERR_LEN];

static void
load(void)
{
	CURLcode (*global_init)(long flags);
	CURLcode rc;
	size_t i;
	void *h, *sym;

	/* RTLD_NOW: a library of curl's own that is missing shows here */
	if ((h = dlopen(CL_LIBRARY, RTLD_NOW | RTLD_LOCAL)) == NULL) {
		load_rc = kn_error(load_error, KN_ENODEV, "cannot load %s: %s "
		    "(install the Debian package %s)", CL_LIBRARY, dlerror(),
		    CL_PACKAGE);
		return;
	}
	for (i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		if ((sym = dlsym(h, symbols[i].name)) == NULL) {
			load_rc = kn_error(load_error, KN_ENODEV, "%s has "
			    "no %s: too old a libcurl (install the Debian "
			    "package %s)", CL_LIBRARY, symbols[i].name,
			    CL_PACKAGE);
			return;
		}
		/* POSIX makes a function's address from dlsym usable as
		 * one; C alone does not convert void * to it */
		*(void **)((char *)&table + symbols[i].offset) = sym;
	}
	_Static_assert(_Generic(&curl_global_init, CURLcode (*)(long): 1,
	    default: 0), "curl_global_init has another type in curl.h");
	if ((sym = dlsym(h, "curl_global_init")) == NULL) {
		load_rc = kn_error(load_error, KN_ENODEV, "%s has no "
		    "curl_global_init (install the Debian package %s)",
		    CL_LIBRARY, CL_PACKAGE);
		return;
	}
	*(void **)&global_init = sym;
	/* once a process, never undone: the library stays loaded, and
	 * curl_global_cleanup at exit buys nothing */
	if ((rc = global_init(CURL_GLOBAL_DEFAULT)) != CURLE_OK) {
		load_rc = kn_error(load_error, KN_EIO, "curl_global_init "
		    "failed: %s", table.easy_strerror(rc));
		return;
	}
	loaded = &table;
}

const cl_curl *
cl_load(char *err)
{
	pthread_once(&load_once, load);
	if (loaded == NULL)
		kn_error(err, load_rc, "%s", load_error);
	return loaded;
}
