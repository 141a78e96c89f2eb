/* libcurl, loaded with dlopen on first use rather than linked: its
 * libraries (Kerberos, LDAP, SSH, nghttp2, ...) cost every start of the
 * programs about 15 ms, which the commands that make no request (--help,
 * id, init, spec, ...) should not pay.  curl.h still gives the types and
 * constants; the functions are called through this table. */
#ifndef SM_DAEMON_NET_CURL_LOAD_H
#define SM_DAEMON_NET_CURL_LOAD_H

#include <curl/curl.h>

/* The soname loaded, and the Debian package that installs it. */
#define CL_LIBRARY "libcurl.so.4"
#define CL_PACKAGE "libcurl4"

/* The functions of libcurl that the tree calls, typed as curl.h declares
 * them (curl_load.c checks each against its declaration): the variadic
 * ones too, so that their arguments are passed as to curl's own. */
typedef struct {
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *easy, CURLoption option, ...);
	CURLcode (*easy_getinfo)(CURL *easy, CURLINFO info, ...);
	CURLcode (*easy_perform)(CURL *easy);
	void (*easy_cleanup)(CURL *easy);
	const char *(*easy_strerror)(CURLcode code);
	CURLHcode (*easy_header)(CURL *easy, const char *name, size_t index,
	    unsigned int origin, int request, struct curl_header **hout);
	struct curl_slist *(*slist_append)(struct curl_slist *list,
	    const char *data);
	void (*slist_free_all)(struct curl_slist *list);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_setopt)(CURLM *multi, CURLMoption option, ...);
	CURLMcode (*multi_add_handle)(CURLM *multi, CURL *easy);
	CURLMcode (*multi_remove_handle)(CURLM *multi, CURL *easy);
	CURLMsg *(*multi_info_read)(CURLM *multi, int *msgs_in_queue);
	CURLMcode (*multi_socket_action)(CURLM *multi, curl_socket_t s,
	    int ev_bitmask, int *running_handles);
	CURLMcode (*multi_assign)(CURLM *multi, curl_socket_t sockfd,
	    void *sockp);
	CURLMcode (*multi_cleanup)(CURLM *multi);
	const char *(*multi_strerror)(CURLMcode code);
} cl_curl;

/* Loads libcurl and runs curl_global_init, once per process (any thread;
 * later calls return the first's outcome).  Returns the table, or NULL
 * with the reason in err (KN_ERR_LEN bytes, NULL allowed): KN_ENODEV when
 * the library or one of its functions is missing, naming the package to
 * install, KN_EIO when curl_global_init failed. */
const cl_curl *cl_load(char *err);

#endif
