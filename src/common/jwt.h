/*
 * JWT access tokens (RFC 7519, RFC 9068) as an OAuth resource server sees
 * them: a JSON Web Key Set (RFC 7517) parsed into OpenSSL public keys, and
 * the verification of a compact JWS (RFC 7515) against it — signature,
 * issuer, audience (RFC 8707), expiry and not-before. Pure apart from
 * OpenSSL: no I/O, no clock (the caller passes the time).
 *
 * Signatures are OpenSSL's; nothing here is cryptography. The algorithms
 * are an allow-list, each tied to one kind of key:
 *   RS256  RSA (at least 2048 bits), PKCS#1 v1.5 with SHA-256
 *   ES256  EC on P-256, ECDSA with SHA-256 (JWS's raw r||s form)
 *   EdDSA  OKP Ed25519
 * "none", HMAC and everything else are refused, and so is a key of
 * another kind than its token's alg names (the classic confusion of a
 * public RSA key used as an HMAC secret cannot arise).
 */
#ifndef MCPSUB_JWT_H
#define MCPSUB_JWT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"

#define JWT_TOKEN_MAX 8192         /* bytes of a compact token */
#define JWKS_TEXT_MAX (256 * 1024) /* bytes of a key set document */
#define JWKS_KEYS_MAX 64           /* keys kept from one set */
#define JWKS_KID_MAX  128

typedef struct jwks jwks_t;

/*
 * Parses a key set ({"keys": [...]}). Keys of a kind or curve not listed
 * above, or meant for another use ("use" other than "sig"), are skipped; a
 * set without one usable key is an error. -EINVAL with a message in err.
 */
int jwks_parse(const char *text, size_t len, jwks_t **out, char *err,
               size_t errlen) MCPSUB_NODISCARD;
void jwks_free(jwks_t *ks); /* NULL is a no-op */
/* Number of usable keys. */
size_t jwks_count(const jwks_t *ks);

typedef struct jwt_rules {
  const char *issuer;   /* iss must equal it (NULL: not checked) */
  const char *audience; /* aud (a string or an array) must contain it */
  int64_t leeway_s;     /* clock skew allowed on exp and nbf */
} jwt_rules;

typedef enum jwt_result {
  JWT_OK = 0,
  JWT_MALFORMED,   /* not three base64url parts of JSON objects, or too long */
  JWT_ALGORITHM,   /* alg not allowed, or not the alg of the key it names */
  JWT_UNKNOWN_KEY, /* no key with the token's kid (a fetched set may be stale) */
  JWT_SIGNATURE,   /* the signature does not verify */
  JWT_ISSUER,
  JWT_AUDIENCE,
  JWT_EXPIRED, /* exp missing or passed */
  JWT_NOT_YET, /* nbf in the future */
  JWT_CLAIMS,  /* sub missing or not a string */
} jwt_result;

/* A short English reason, for logs and error_description. */
const char *jwt_result_text(jwt_result r);

/*
 * Verifies token (len bytes) at Unix time now_s. JWT_OK with the claims
 * object in *claims (the caller's to free); otherwise *claims is NULL.
 * The signature is checked before any claim is believed.
 */
jwt_result jwt_verify(const jwks_t *ks, const char *token, size_t len, const jwt_rules *rules,
                      int64_t now_s, cJSON **claims) MCPSUB_NODISCARD;

/*
 * Decodes base64url without padding (RFC 7515 §2) into out (room for
 * len * 3 / 4 + 3 bytes). Returns the decoded length, or -1 for a
 * character outside the alphabet, padding, or an impossible length.
 */
long jwt_base64url_decode(const char *in, size_t len, unsigned char *out);

#endif
