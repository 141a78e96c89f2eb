/* The blocking libcurl GET of the commands that ask running daemons
 * (status, assemble).  Blocking is fine in a command; the daemon's event
 * loop uses the multi interface instead (daemon/http_client.c). */
#include "config.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "kernels/error.h"

static size_t
on_data(char *ptr, size_t size, size_t nmemb, void *user)
{
	struct cli_body *b = user;
	size_t n = size * nmemb;
	char *grown;

	if (b->len + n > b->max)
		return 0;	/* aborts the transfer */
	if ((grown = realloc(b->data, b->len + n + 1)) == NULL)
		return 0;
	b->data = grown;
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

long
cli_http_get(const char *url, size_t max, long timeout_ms,
    struct cli_body *out, char *err)
{
	CURL *h = curl_easy_init();
	char cerr[CURL_ERROR_SIZE] = "";
	long status = 0;
	CURLcode rc;

	memset(out, 0, sizeof(*out));
	out->max = max;
	if (h == NULL) {
		kn_error(err, KN_ENOMEM, "curl_easy_init failed");
		return 0;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	rc = curl_easy_perform(h);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	else
		kn_error(err, KN_EIO, "%s", cerr[0] ? cerr :
		    curl_easy_strerror(rc));
	curl_easy_cleanup(h);
	return status;
}
