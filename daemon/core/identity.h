/* Node identities: an Ed25519 key pair and a self-signed certificate in a
 * directory, made by `shardmeter init`, and the peer id that names them.
 * The CLI makes and shows them; the daemon will pin its TLS peers to ids.
 *
 * A peer id is the SHA-256 of the certificate's public key in DER
 * SubjectPublicKeyInfo form (the same hash libcurl pins with "sha256//"),
 * printed as its 52 base32 characters (RFC 4648 alphabet A-Z 2-7, no
 * padding) in 13 upper-case groups of 4 joined by dashes:
 * "ABCD-EFGH-...-WXYZ" (64 characters). */
#ifndef SM_IDENTITY_H
#define SM_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/types.h>

#include "kernels/error.h"

#define ID_BYTES 32             /* a peer id: a SHA-256 */
#define ID_LEN 65               /* a printed peer id and its NUL */
#define ID_KEY_FILE "key.pem"   /* the private key, PKCS#8 PEM, 0600 */
#define ID_CERT_FILE "cert.pem" /* the certificate, PEM, 0600 */

/* Its codes in the list of kernels/error.h: no identity in the directory (no key file);
 * an identity already there, kept without force. */
#define ID_ENONE KN_E_ID_NONE
#define ID_EEXIST KN_E_ID_EXIST

/* Makes an identity in dir (created 0700 with its parents if missing): a
 * new key pair and a certificate valid for 100 years, each written to a
 * temporary file and renamed.  An identity already there is replaced only
 * with force, else ID_EEXIST.  0 or a negative code with the reason in
 * err (KN_ERR_LEN). */
int id_create(const char *dir, int force, char *err);
/* The key and certificate of dir, the certificate's public key checked
 * against the key; the caller frees them (EVP_PKEY_free, X509_free).
 * ID_ENONE when dir has no key file. */
int id_load(const char *dir, EVP_PKEY **key, X509 **cert, char *err);
/* The printed peer id of dir's identity, the pair checked as id_load does. */
int id_of_dir(const char *dir, char out[ID_LEN], char *err);

/* The peer id of a certificate, as bytes and printed. */
int id_digest(X509 *cert, uint8_t id[ID_BYTES], char *err);
int id_of_cert(X509 *cert, char out[ID_LEN], char *err);
/* The printed peer id of the certificate in the PEM file path. */
int id_of_pem(const char *path, char out[ID_LEN], char *err);

/* The printed form of id. */
void id_format(const uint8_t id[ID_BYTES], char out[ID_LEN]);
/* A printed peer id back into bytes: any case, each dash between groups
 * optional; anything else is refused with the reason (KN_EINVAL). */
int id_parse(const char *text, uint8_t id[ID_BYTES], char *err);
/* 1 when a and b are the same id, else 0. */
int id_equal(const uint8_t a[ID_BYTES], const uint8_t b[ID_BYTES]);

/* The pin libcurl's CURLOPT_PINNEDPUBLICKEY takes for id:
 * "sha256//" and the base64 of its bytes. */
#define ID_PIN_LEN (8 + 44 + 1)
void id_pin(const uint8_t id[ID_BYTES], char out[ID_PIN_LEN]);

/* RFC 4648 base32 without padding.  Encodes n bytes into out (room for
 * (8 n + 4) / 5 characters and a NUL); returns the characters written, or
 * KN_EINVAL when out (size bytes) is too small. */
int id_base32_encode(const uint8_t *in, size_t n, char *out, size_t size);
/* Decodes len characters (any case) into out (size bytes), the byte count
 * in *n.  Refuses a length no encoding has, a character outside the
 * alphabet and unused trailing bits that are not zero, so that every byte
 * string has exactly one text. */
int id_base32_decode(const char *in, size_t len, uint8_t *out, size_t size,
    size_t *n, char *err);

#endif
