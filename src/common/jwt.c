/*
 * JWKS parsing and JWT verification (see jwt.h). Keys become EVP_PKEYs
 * through OpenSSL 3's EVP_PKEY_fromdata (RSA, EC) and raw public keys
 * (Ed25519); signatures are EVP_DigestVerify. The only work done here by
 * hand is the format: base64url, the three parts, the claims.
 */
#include "common/jwt.h"

#include <errno.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <stdio.h>
#include <string.h>

#include "common/errmsg.h"
#include "common/jsonrpc.h"

typedef enum jwk_kind { JWK_RSA, JWK_P256, JWK_ED25519 } jwk_kind;

typedef struct jwk {
  char kid[JWKS_KID_MAX + 1]; /* "" when the key has none */
  jwk_kind kind;
  EVP_PKEY *pkey;
} jwk;

struct jwks {
  jwk keys[JWKS_KEYS_MAX];
  size_t n;
};

static const struct {
  const char *alg;
  jwk_kind kind;
} jwt_algs[] = {{"RS256", JWK_RSA}, {"ES256", JWK_P256}, {"EdDSA", JWK_ED25519}};

const char *jwt_result_text(jwt_result r) {
  switch (r) {
  case JWT_OK: return "valid";
  case JWT_MALFORMED: return "malformed token";
  case JWT_ALGORITHM: return "signing algorithm not accepted";
  case JWT_UNKNOWN_KEY: return "signed by an unknown key";
  case JWT_SIGNATURE: return "bad signature";
  case JWT_ISSUER: return "wrong issuer";
  case JWT_AUDIENCE: return "token is for another resource";
  case JWT_EXPIRED: return "token expired";
  case JWT_NOT_YET: return "token not yet valid";
  case JWT_CLAIMS: return "token lacks a subject";
  }
  return "invalid token";
}

long jwt_base64url_decode(const char *in, size_t len, unsigned char *out) {
  if (len % 4 == 1) return -1;
  size_t padded = (len + 3) / 4 * 4;
  char stack[1024];
  char *std = padded + 1 <= sizeof(stack) ? stack : mem_alloc(padded + 1);
  for (size_t i = 0; i < len; i++) {
    char ch = in[i];
    if (ch == '-') {
      ch = '+';
    } else if (ch == '_') {
      ch = '/';
    } else if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                 (ch >= '0' && ch <= '9'))) {
      if (std != stack) free(std);
      return -1;
    }
    std[i] = ch;
  }
  for (size_t i = len; i < padded; i++) std[i] = '=';
  std[padded] = '\0';
  int n = padded == 0 ? 0 : EVP_DecodeBlock(out, (const unsigned char *)std, (int)padded);
  if (std != stack) free(std);
  if (n < 0) return -1;
  return (long)n - (long)(padded - len); /* the bytes the padding stood for are not data */
}

/* Decodes a base64url member of a JWK into a fresh buffer; NULL when absent or bad. */
static unsigned char *jwk_member(const cJSON *key, const char *name, size_t max, size_t *len) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(key, name);
  if (!cJSON_IsString(v)) return NULL;
  size_t in = strlen(v->valuestring);
  if (in == 0 || in > max * 4 / 3 + 4) return NULL;
  unsigned char *out = mem_alloc(in * 3 / 4 + 3);
  long n = jwt_base64url_decode(v->valuestring, in, out);
  if (n <= 0 || (size_t)n > max) {
    free(out);
    return NULL;
  }
  *len = (size_t)n;
  return out;
}

/* A public key from parameters, through the provider's fromdata. */
static EVP_PKEY *jwk_fromdata(const char *type, OSSL_PARAM_BLD *bld) {
  EVP_PKEY *pkey = NULL;
  OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
  EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, type, NULL);
  if (params == NULL || ctx == NULL || EVP_PKEY_fromdata_init(ctx) <= 0 ||
      EVP_PKEY_fromdata(ctx, &pkey, EVP_PKEY_PUBLIC_KEY, params) <= 0)
    pkey = NULL;
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  return pkey;
}

static EVP_PKEY *jwk_rsa(const cJSON *key) {
  size_t nlen = 0, elen = 0;
  unsigned char *n = jwk_member(key, "n", 1024, &nlen); /* up to 8192-bit moduli */
  unsigned char *e = jwk_member(key, "e", 16, &elen);
  EVP_PKEY *pkey = NULL;
  BIGNUM *bn = n != NULL ? BN_bin2bn(n, (int)nlen, NULL) : NULL;
  BIGNUM *be = e != NULL ? BN_bin2bn(e, (int)elen, NULL) : NULL;
  OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
  if (bn != NULL && be != NULL && bld != NULL &&
      OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) &&
      OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be))
    pkey = jwk_fromdata("RSA", bld);
  if (pkey != NULL && EVP_PKEY_get_bits(pkey) < 2048) {
    EVP_PKEY_free(pkey);
    pkey = NULL;
  }
  OSSL_PARAM_BLD_free(bld);
  BN_free(bn);
  BN_free(be);
  free(n);
  free(e);
  return pkey;
}

static EVP_PKEY *jwk_p256(const cJSON *key) {
  size_t xlen = 0, ylen = 0;
  unsigned char *x = jwk_member(key, "x", 32, &xlen);
  unsigned char *y = jwk_member(key, "y", 32, &ylen);
  EVP_PKEY *pkey = NULL;
  if (x != NULL && y != NULL && xlen == 32 && ylen == 32) {
    unsigned char point[65];
    point[0] = 0x04; /* uncompressed */
    memcpy(point + 1, x, 32);
    memcpy(point + 33, y, 32);
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    if (bld != NULL &&
        OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) &&
        OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof(point)))
      pkey = jwk_fromdata("EC", bld);
    OSSL_PARAM_BLD_free(bld);
  }
  if (pkey != NULL) { /* the point must be on the curve */
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_pkey(NULL, pkey, NULL);
    if (ctx == NULL || EVP_PKEY_public_check(ctx) != 1) {
      EVP_PKEY_free(pkey);
      pkey = NULL;
    }
    EVP_PKEY_CTX_free(ctx);
  }
  free(x);
  free(y);
  return pkey;
}

static EVP_PKEY *jwk_ed25519(const cJSON *key) {
  size_t xlen = 0;
  unsigned char *x = jwk_member(key, "x", 32, &xlen);
  EVP_PKEY *pkey =
      x != NULL && xlen == 32 ? EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, x, xlen) : NULL;
  free(x);
  return pkey;
}

static bool json_string_is(const cJSON *obj, const char *name, const char *value) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  return cJSON_IsString(v) && strcmp(v->valuestring, value) == 0;
}

/* Reads one JWK into k; false when it is not a usable signing key (skipped). */
static bool jwk_read(const cJSON *key, jwk *k) {
  const cJSON *use = cJSON_GetObjectItemCaseSensitive(key, "use");
  if (use != NULL && !json_string_is(key, "use", "sig")) return false;
  const cJSON *kid = cJSON_GetObjectItemCaseSensitive(key, "kid");
  if (kid != NULL && (!cJSON_IsString(kid) || strlen(kid->valuestring) > JWKS_KID_MAX))
    return false;
  memset(k, 0, sizeof(*k));
  if (kid != NULL) snprintf(k->kid, sizeof(k->kid), "%s", kid->valuestring);
  if (json_string_is(key, "kty", "RSA")) {
    k->kind = JWK_RSA;
    k->pkey = jwk_rsa(key);
  } else if (json_string_is(key, "kty", "EC") && json_string_is(key, "crv", "P-256")) {
    k->kind = JWK_P256;
    k->pkey = jwk_p256(key);
  } else if (json_string_is(key, "kty", "OKP") && json_string_is(key, "crv", "Ed25519")) {
    k->kind = JWK_ED25519;
    k->pkey = jwk_ed25519(key);
  }
  if (k->pkey == NULL) return false;
  const cJSON *alg = cJSON_GetObjectItemCaseSensitive(key, "alg");
  if (alg != NULL) {
    /* A key that names an alg is used for that one only, and it must be the one of its kind. */
    bool ok = false;
    for (size_t i = 0; i < sizeof(jwt_algs) / sizeof(jwt_algs[0]); i++)
      ok |= cJSON_IsString(alg) && strcmp(alg->valuestring, jwt_algs[i].alg) == 0 &&
            jwt_algs[i].kind == k->kind;
    if (!ok) {
      EVP_PKEY_free(k->pkey);
      k->pkey = NULL;
      return false;
    }
  }
  return true;
}

int jwks_parse(const char *text, size_t len, jwks_t **out, char *err, size_t errlen) {
  *out = NULL;
  if (len > JWKS_TEXT_MAX)
    return errmsg(err, errlen, -EINVAL, "key set larger than %d bytes", JWKS_TEXT_MAX);
  cJSON *doc = cJSON_ParseWithLength(text, len);
  const cJSON *keys = cJSON_GetObjectItemCaseSensitive(doc, "keys");
  if (!cJSON_IsArray(keys)) {
    cJSON_Delete(doc);
    return errmsg(err, errlen, -EINVAL, "not a JSON Web Key Set (an object with a \"keys\" array)");
  }
  jwks_t *ks = mem_calloc(1, sizeof(*ks));
  const cJSON *key;
  cJSON_ArrayForEach(key, keys) {
    if (ks->n == JWKS_KEYS_MAX) break;
    if (cJSON_IsObject(key) && jwk_read(key, &ks->keys[ks->n])) ks->n++;
  }
  cJSON_Delete(doc);
  if (ks->n == 0) {
    jwks_free(ks);
    return errmsg(err, errlen, -EINVAL,
                  "the key set holds no usable signing key (RSA of 2048 bits or more, EC "
                  "P-256, Ed25519)");
  }
  *out = ks;
  return 0;
}

void jwks_free(jwks_t *ks) {
  if (ks == NULL) return;
  for (size_t i = 0; i < ks->n; i++) EVP_PKEY_free(ks->keys[i].pkey);
  free(ks);
}

size_t jwks_count(const jwks_t *ks) {
  return ks != NULL ? ks->n : 0;
}

/*
 * Decodes a base64url part holding a JSON object. In the claims (claims
 * set), an integer beyond 2^53 keeps its digits (jsonrpc_exact_integers):
 * a row scope may bind it; but the time claims, compared with the clock,
 * stay numbers.
 */
static cJSON *jwt_part_json(const char *in, size_t len, bool claims) {
  unsigned char *raw = mem_alloc(len * 3 / 4 + 3);
  long n = jwt_base64url_decode(in, len, raw);
  cJSON *obj = NULL;
  if (n > 0)
    obj = claims ? jsonrpc_parse_exact((const char *)raw, (size_t)n)
                 : cJSON_ParseWithLength((const char *)raw, (size_t)n);
  if (obj != NULL && !cJSON_IsObject(obj)) {
    cJSON_Delete(obj);
    obj = NULL;
  }
  if (obj != NULL && claims) {
    static const char *const times[] = {"exp", "nbf", "iat"};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
      const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, times[i]);
      if (!jsonrpc_raw_integer(t, NULL, NULL)) continue;
      cJSON *number = cJSON_CreateNumber(strtod(t->valuestring, NULL));
      /* mem.h's policy: a claim left as digits would not be checked as a time */
      if (number == NULL) abort();
      cJSON_ReplaceItemInObjectCaseSensitive(obj, times[i], number);
    }
  }
  free(raw);
  return obj;
}

/* The key the header names for its alg, or why there is none. */
static jwt_result jwt_pick_key(const jwks_t *ks, const cJSON *header, const jwk **out) {
  const cJSON *alg = cJSON_GetObjectItemCaseSensitive(header, "alg");
  if (!cJSON_IsString(alg)) return JWT_MALFORMED;
  /* Critical extensions are ones this verifier would have to understand: it understands none. */
  if (cJSON_GetObjectItemCaseSensitive(header, "crit") != NULL) return JWT_ALGORITHM;
  jwk_kind kind = JWK_RSA;
  bool allowed = false;
  for (size_t i = 0; i < sizeof(jwt_algs) / sizeof(jwt_algs[0]); i++)
    if (strcmp(alg->valuestring, jwt_algs[i].alg) == 0) {
      kind = jwt_algs[i].kind;
      allowed = true;
    }
  if (!allowed) return JWT_ALGORITHM;
  const cJSON *kid = cJSON_GetObjectItemCaseSensitive(header, "kid");
  if (kid != NULL && !cJSON_IsString(kid)) return JWT_MALFORMED;
  const jwk *found = NULL;
  size_t candidates = 0;
  for (size_t i = 0; i < ks->n; i++) {
    if (kid != NULL) {
      if (strcmp(ks->keys[i].kid, kid->valuestring) == 0) {
        found = &ks->keys[i];
        break;
      }
    } else if (ks->keys[i].kind == kind) {
      /* Without a kid, only a set with a single key of the kind says which one. */
      found = &ks->keys[i];
      candidates++;
    }
  }
  if (found == NULL || candidates > 1) return JWT_UNKNOWN_KEY;
  if (found->kind != kind) return JWT_ALGORITHM; /* the key of another kind than alg */
  *out = found;
  return JWT_OK;
}

/* JWS's ES256 signature is r||s, 32 bytes each; OpenSSL verifies DER. */
static unsigned char *jwt_ecdsa_der(const unsigned char *sig, size_t len, size_t *der_len) {
  if (len != 64) return NULL;
  ECDSA_SIG *es = ECDSA_SIG_new();
  BIGNUM *r = BN_bin2bn(sig, 32, NULL);
  BIGNUM *s = BN_bin2bn(sig + 32, 32, NULL);
  unsigned char *der = NULL;
  if (es != NULL && r != NULL && s != NULL && ECDSA_SIG_set0(es, r, s) == 1) {
    r = s = NULL; /* owned by es now */
    int n = i2d_ECDSA_SIG(es, &der);
    if (n <= 0) der = NULL;
    *der_len = n > 0 ? (size_t)n : 0;
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(es);
  return der;
}

static bool jwt_signature_ok(const jwk *k, const char *input, size_t input_len,
                             const unsigned char *sig, size_t sig_len) {
  unsigned char *der = NULL;
  if (k->kind == JWK_P256) {
    der = jwt_ecdsa_der(sig, sig_len, &sig_len);
    if (der == NULL) return false;
    sig = der;
  }
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  const EVP_MD *md = k->kind == JWK_ED25519 ? NULL : EVP_sha256();
  bool ok = ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, md, NULL, k->pkey) == 1 &&
            EVP_DigestVerify(ctx, sig, sig_len, (const unsigned char *)input, input_len) == 1;
  EVP_MD_CTX_free(ctx);
  OPENSSL_free(der);
  return ok;
}

static bool jwt_audience_ok(const cJSON *aud, const char *audience) {
  if (cJSON_IsString(aud)) return strcmp(aud->valuestring, audience) == 0;
  const cJSON *one;
  if (!cJSON_IsArray(aud)) return false;
  cJSON_ArrayForEach(one, aud) {
    if (cJSON_IsString(one) && strcmp(one->valuestring, audience) == 0) return true;
  }
  return false;
}

static jwt_result jwt_check_claims(const cJSON *claims, const jwt_rules *rules, int64_t now_s) {
  if (rules->issuer != NULL && !json_string_is(claims, "iss", rules->issuer)) return JWT_ISSUER;
  if (rules->audience != NULL &&
      !jwt_audience_ok(cJSON_GetObjectItemCaseSensitive(claims, "aud"), rules->audience))
    return JWT_AUDIENCE;
  const cJSON *exp = cJSON_GetObjectItemCaseSensitive(claims, "exp");
  if (!cJSON_IsNumber(exp) || (double)now_s >= exp->valuedouble + (double)rules->leeway_s)
    return JWT_EXPIRED;
  const cJSON *nbf = cJSON_GetObjectItemCaseSensitive(claims, "nbf");
  if (nbf != NULL &&
      (!cJSON_IsNumber(nbf) || (double)now_s + (double)rules->leeway_s < nbf->valuedouble))
    return JWT_NOT_YET;
  const cJSON *sub = cJSON_GetObjectItemCaseSensitive(claims, "sub");
  if (!cJSON_IsString(sub) || sub->valuestring[0] == '\0') return JWT_CLAIMS;
  return JWT_OK;
}

jwt_result jwt_verify(const jwks_t *ks, const char *token, size_t len, const jwt_rules *rules,
                      int64_t now_s, cJSON **claims) {
  *claims = NULL;
  if (ks == NULL) return JWT_UNKNOWN_KEY;
  if (len == 0 || len > JWT_TOKEN_MAX) return JWT_MALFORMED;
  const char *dot1 = memchr(token, '.', len);
  const char *dot2 = dot1 != NULL ? memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token)) : NULL;
  if (dot1 == NULL || dot2 == NULL || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)))
    return JWT_MALFORMED;
  size_t sig_b64 = len - (size_t)(dot2 + 1 - token);
  if (dot1 == token || dot2 == dot1 + 1) return JWT_MALFORMED; /* an empty signature: see alg */

  cJSON *header = jwt_part_json(token, (size_t)(dot1 - token), false);
  if (header == NULL) return JWT_MALFORMED;
  const jwk *k = NULL;
  jwt_result r = jwt_pick_key(ks, header, &k);
  cJSON_Delete(header);
  if (r != JWT_OK) return r;

  unsigned char *sig = mem_alloc(sig_b64 * 3 / 4 + 3);
  long sig_len = jwt_base64url_decode(dot2 + 1, sig_b64, sig);
  bool ok = sig_len > 0 && jwt_signature_ok(k, token, (size_t)(dot2 - token), sig, (size_t)sig_len);
  free(sig);
  if (!ok) return JWT_SIGNATURE;

  cJSON *payload = jwt_part_json(dot1 + 1, (size_t)(dot2 - dot1 - 1), true);
  if (payload == NULL) return JWT_MALFORMED;
  r = jwt_check_claims(payload, rules, now_s);
  if (r != JWT_OK) {
    cJSON_Delete(payload);
    return r;
  }
  *claims = payload;
  return JWT_OK;
}
