/* The blocking libcurl GET of the commands that ask running daemons
 * (status, assemble): over mutual TLS with the operator's identity, the
 * daemon pinned to its id in the peer list.  Blocking is fine in a
 * command; the daemon's event loop uses the multi interface instead
 * (daemon/net/http_client.c). */
#include "config.h"

#include <curl/curl.h>
#include <jansson.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/cli/cmd.h"
#include "daemon/core/identity.h"
#include "daemon/net/curl_load.h"
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

/* The operator's identity, looked for once per command. */
static int
client_identity(char cert[PR_PATH_LEN + 16], char key[PR_PATH_LEN + 16],
    char *err)
{
	char dir[PR_PATH_LEN];
	char why[KN_ERR_LEN], id[ID_LEN];

	if (cli_client_dir(dir, err) != 0)
		return -1;
	if (id_of_dir(dir, id, why) != 0) {
		kn_error(err, KN_EINVAL, "%s: make an operator identity with "
		    "'shardmeter init --client' and list it in the peer list "
		    "as 'client <its id>'", why);
		return -1;
	}
	snprintf(cert, PR_PATH_LEN + 16, "%s/%s", dir, ID_CERT_FILE);
	snprintf(key, PR_PATH_LEN + 16, "%s/%s", dir, ID_KEY_FILE);
	return 0;
}

/* The fatal TLS alert the daemon sent, kept by OpenSSL's info callback
 * in the request's int (its SSL_CTX's ex data): its description, or 0
 * when none came. */
static int alert_index = -1;

static void
on_tls_info(const SSL *ssl, int where, int ret)
{
	int *alert;

	if (!(where & SSL_CB_READ_ALERT) || (ret >> 8) != SSL3_AL_FATAL)
		return;
	alert = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), alert_index);
	if (alert != NULL && *alert == 0)
		*alert = ret & 0xff;
}

static CURLcode
on_ssl_ctx(CURL *h, void *ssl_ctx, void *alert)
{
	(void)h;
	SSL_CTX_set_ex_data(ssl_ctx, alert_index, alert);
	SSL_CTX_set_info_callback(ssl_ctx, on_tls_info);
	return CURLE_OK;
}

/* Whether the daemon's alert refused the certificate we presented: its
 * peer list does not hold our identity (tls.c's check refuses it with
 * bad_certificate), or holds it quarantined or out of date. */
static int
alert_refuses_us(int alert)
{
	switch (alert) {
	case SSL_AD_BAD_CERTIFICATE:
	case SSL_AD_UNSUPPORTED_CERTIFICATE:
	case SSL_AD_CERTIFICATE_REVOKED:
	case SSL_AD_CERTIFICATE_EXPIRED:
	case SSL_AD_CERTIFICATE_UNKNOWN:
	case SSL_AD_UNKNOWN_CA:
	case SSL_AD_ACCESS_DENIED:
	case SSL_AD_CERTIFICATE_REQUIRED:
		return 1;
	}
	return 0;
}

/* What a failed request means for the operator, in the words of the
 * peer list: the two failures of trust get a line that says what to do,
 * anything else curl's text.  Decided on curl's code and the TLS alert,
 * never on curl's text. */
static void
tls_failure(const cl_curl *curl, const peers_entry *p, CURLcode rc,
    int alert, const char *cerr, char *err)
{
	char dir[PR_PATH_LEN], id[ID_LEN], why[KN_ERR_LEN];

	if (rc == CURLE_SSL_PINNEDPUBKEYNOTMATCH)
		kn_error(err, KN_EIO, "%s presented another key than peer id "
		    "%.14s... of the peer list", p->addr, p->id_text);
	else if (p->has_id && alert_refuses_us(alert) &&
	    cli_client_dir(dir, why) == 0 && id_of_dir(dir, id, why) == 0)
		kn_error(err, KN_EIO, "refused this operator (%s): its peer "
		    "list needs 'client %s'", cerr, id);
	else
		kn_error(err, KN_EIO, "%s", cerr[0] ? cerr :
		    curl->easy_strerror(rc));
}

long
cli_peer_get(const peers_entry *p, const char *path, size_t max,
    long timeout_ms, struct cli_body *out, char *err)
{
	return cli_peer_request(p, "GET", path, max, timeout_ms, out, err);
}

long
cli_peer_request(const peers_entry *p, const char *method, const char *path,
    size_t max, long timeout_ms, struct cli_body *out, char *err)
{
	const cl_curl *curl;
	CURL *h;
	char cerr[CURL_ERROR_SIZE] = "", url[CF_HOST_LEN + 256];
	char cert[PR_PATH_LEN + 16], key[PR_PATH_LEN + 16], pin[ID_PIN_LEN];
	long status = 0;
	int alert = 0;
	CURLcode rc;

	memset(out, 0, sizeof(*out));
	out->max = max;
	if (p->has_id && client_identity(cert, key, err) != 0)
		return 0;
	if ((curl = cl_load(err)) == NULL)
		return 0;
	if ((h = curl->easy_init()) == NULL) {
		kn_error(err, KN_ENOMEM, "curl_easy_init failed");
		return 0;
	}
	snprintf(url, sizeof(url), "%s://%s%s", p->has_id ? "https" : "http",
	    p->addr, path);
	if (p->has_id) {
		/* no CA: the daemon's key is pinned to its listed id */
		id_pin(p->id, pin);
		curl->easy_setopt(h, CURLOPT_SSLCERT, cert);
		curl->easy_setopt(h, CURLOPT_SSLKEY, key);
		curl->easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, pin);
		curl->easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl->easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
		curl->easy_setopt(h, CURLOPT_SSLVERSION,
		    (long)(CURL_SSLVERSION_TLSv1_3 |
		    CURL_SSLVERSION_MAX_TLSv1_3));
		if (alert_index < 0)
			alert_index = SSL_CTX_get_ex_new_index(0, NULL, NULL,
			    NULL, NULL);
		if (alert_index >= 0) {
			curl->easy_setopt(h, CURLOPT_SSL_CTX_FUNCTION,
			    on_ssl_ctx);
			curl->easy_setopt(h, CURLOPT_SSL_CTX_DATA, &alert);
		}
	}
	curl->easy_setopt(h, CURLOPT_PROXY, "");
	curl->easy_setopt(h, CURLOPT_URL, url);
	curl->easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl->easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl->easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl->easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl->easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	if (strcmp(method, "POST") == 0)	/* with an empty body */
		curl->easy_setopt(h, CURLOPT_POSTFIELDS, "");
	rc = curl->easy_perform(h);
	if (rc == CURLE_OK)
		curl->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	else
		tls_failure(curl, p, rc, alert, cerr, err);
	curl->easy_cleanup(h);
	return status;
}

/* GET /v1/status of p, parsed: what status, strikes and the pipeline
 * and SOMA views of status all start from. */
json_t *
cli_status_fetch(const peers_entry *p, char *err)
{
	struct cli_body b;
	json_error_t jerr;
	json_t *root = NULL;
	long st;

	st = cli_peer_get(p, "/v1/status", 1 << 20, 3000, &b, err);
	if (st == 200 && (root = json_loadb(b.data, b.len, 0, &jerr)) == NULL)
		kn_error(err, KN_EINVAL, "bad status JSON: %s", jerr.text);
	else if (st != 200 && st != 0)
		kn_error(err, KN_EIO, "HTTP %ld", st);
	free(b.data);
	return root;
}
