/*
 * Unit tests of JWT verification (jwt.h): base64url, key sets (RSA, EC
 * P-256, Ed25519; weak, foreign and malformed keys skipped), tokens signed
 * here with OpenSSL for each algorithm, and every refusal: alg none, HMAC,
 * a key of the wrong kind, an unknown kid, a bad signature, iss, aud,
 * exp/nbf with the leeway, a missing subject, malformed shapes.
 */
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/buf.h"
#include "common/jwt.h"

#define NOW 1800000000

/* base64url of n bytes, no padding (through OpenSSL's base64). */
static void b64url(buf_t *out, const unsigned char *in, size_t n) {
  char *tmp = malloc(4 * ((n + 2) / 3) + 1);
  int len = EVP_EncodeBlock((unsigned char *)tmp, in, (int)n);
  for (int i = 0; i < len; i++) {
    if (tmp[i] == '=') break;
    char ch = tmp[i] == '+' ? '-' : tmp[i] == '/' ? '_' : tmp[i];
    buf_append(out, &ch, 1);
  }
  free(tmp);
}

static void b64url_bn(buf_t *out, const BIGNUM *bn, int width) {
  unsigned char raw[1024];
  int n = width > 0 ? BN_bn2binpad(bn, raw, width) : BN_bn2bin(bn, raw);
  b64url(out, raw, (size_t)n);
}

typedef struct key {
  EVP_PKEY *pkey;
  const char *alg, *kid;
} key;

static key make_key(const char *alg, const char *kid, size_t rsa_bits) {
  key k = {NULL, alg, kid};
  if (strcmp(alg, "RS256") == 0)
    k.pkey = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", rsa_bits);
  else if (strcmp(alg, "ES256") == 0)
    k.pkey = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  else
    k.pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  CHECK(k.pkey != NULL);
  return k;
}

/* Appends ,"name":"..." with the key's parameter param in base64url (width bytes, 0: its own). */
static void bn_member(buf_t *b, const EVP_PKEY *pkey, const char *param, const char *name,
                      int width) {
  BIGNUM *v = NULL;
  CHECK(EVP_PKEY_get_bn_param(pkey, param, &v) == 1);
  buf_printf(b, ",\"%s\":\"", name);
  b64url_bn(b, v, width);
  buf_append_str(b, "\"");
  BN_free(v);
}

/* Appends k's public JWK. */
static void jwk_of(buf_t *b, const key *k) {
  buf_printf(b, "{\"kid\":\"%s\",\"use\":\"sig\",", k->kid);
  if (strcmp(k->alg, "RS256") == 0) {
    buf_append_str(b, "\"kty\":\"RSA\"");
    bn_member(b, k->pkey, OSSL_PKEY_PARAM_RSA_N, "n", 0);
    bn_member(b, k->pkey, OSSL_PKEY_PARAM_RSA_E, "e", 0);
    buf_append_str(b, "}");
  } else if (strcmp(k->alg, "ES256") == 0) {
    buf_append_str(b, "\"kty\":\"EC\",\"crv\":\"P-256\"");
    bn_member(b, k->pkey, OSSL_PKEY_PARAM_EC_PUB_X, "x", 32);
    bn_member(b, k->pkey, OSSL_PKEY_PARAM_EC_PUB_Y, "y", 32);
    buf_append_str(b, "}");
  } else {
    unsigned char raw[32];
    size_t n = sizeof(raw);
    CHECK(EVP_PKEY_get_raw_public_key(k->pkey, raw, &n) == 1);
    buf_append_str(b, "\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"");
    b64url(b, raw, n);
    buf_append_str(b, "\"}");
  }
}

static jwks_t *set_of(const key *keys, size_t n) {
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "{\"keys\":[");
  for (size_t i = 0; i < n; i++) {
    if (i > 0) buf_append_str(&b, ",");
    jwk_of(&b, &keys[i]);
  }
  buf_append_str(&b, "]}");
  jwks_t *ks = NULL;
  char err[256] = "";
  int rc = jwks_parse(b.data, b.len, &ks, err, sizeof(err));
  if (rc != 0) fprintf(stderr, "jwks_parse: %s\n", err);
  CHECK(rc == 0);
  buf_finish(&b);
  return ks;
}

/* A compact token: header JSON and claims JSON, signed with k (as alg, which may lie). */
static char *token(const key *k, const char *header, const char *claims) {
  buf_t b;
  buf_init(&b);
  b64url(&b, (const unsigned char *)header, strlen(header));
  buf_append_str(&b, ".");
  b64url(&b, (const unsigned char *)claims, strlen(claims));
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  const EVP_MD *md = strcmp(k->alg, "EdDSA") == 0 ? NULL : EVP_sha256();
  CHECK(EVP_DigestSignInit(ctx, NULL, md, NULL, k->pkey) == 1);
  unsigned char sig[1024];
  size_t n = sizeof(sig);
  CHECK(EVP_DigestSign(ctx, sig, &n, (const unsigned char *)b.data, b.len) == 1);
  EVP_MD_CTX_free(ctx);
  buf_append_str(&b, ".");
  if (strcmp(k->alg, "ES256") == 0) { /* DER to JWS's r||s */
    const unsigned char *p = sig;
    ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)n);
    unsigned char raw[64];
    BN_bn2binpad(ECDSA_SIG_get0_r(es), raw, 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(es), raw + 32, 32);
    ECDSA_SIG_free(es);
    b64url(&b, raw, 64);
  } else {
    b64url(&b, sig, n);
  }
  return buf_steal(&b);
}

static const jwt_rules rules = {"https://issuer", "https://mcp.example/mcp", 60};

#define CLAIMS(extra)                                                                              \
  "{\"iss\":\"https://issuer\",\"aud\":\"https://mcp.example/mcp\",\"sub\":\"alice\","             \
  "\"exp\":1800000100" extra "}"

static jwt_result verify(const jwks_t *ks, const char *t) {
  cJSON *claims = NULL;
  jwt_result r = jwt_verify(ks, t, strlen(t), &rules, NOW, &claims);
  CHECK((r == JWT_OK) == (claims != NULL));
  cJSON_Delete(claims);
  return r;
}

static void test_base64url(void) {
  unsigned char out[16];
  CHECK_INT_EQ(jwt_base64url_decode("", 0, out), 0);
  CHECK_INT_EQ(jwt_base64url_decode("Zg", 2, out), 1);
  CHECK(out[0] == 'f');
  CHECK_INT_EQ(jwt_base64url_decode("Zm8", 3, out), 2);
  CHECK_INT_EQ(jwt_base64url_decode("Zm9v", 4, out), 3);
  CHECK(memcmp(out, "foo", 3) == 0);
  CHECK_INT_EQ(jwt_base64url_decode("-_8", 3, out), 2); /* the URL alphabet */
  CHECK(out[0] == 0xfb && out[1] == 0xff);
  CHECK_INT_EQ(jwt_base64url_decode("Z", 1, out), -1);     /* impossible length */
  CHECK_INT_EQ(jwt_base64url_decode("Zm9v=", 5, out), -1); /* padding */
  CHECK_INT_EQ(jwt_base64url_decode("Zm+v", 4, out), -1);  /* the other alphabet */
  CHECK_INT_EQ(jwt_base64url_decode("Zm v", 4, out), -1);
}

static void test_each_algorithm(void) {
  key keys[] = {make_key("RS256", "r", 2048), make_key("ES256", "e", 0), make_key("EdDSA", "d", 0)};
  jwks_t *ks = set_of(keys, 3);
  CHECK_INT_EQ(jwks_count(ks), 3);
  static const char *headers[] = {"{\"alg\":\"RS256\",\"kid\":\"r\"}",
                                  "{\"alg\":\"ES256\",\"kid\":\"e\"}",
                                  "{\"alg\":\"EdDSA\",\"kid\":\"d\"}"};
  for (int i = 0; i < 3; i++) {
    char *t = token(&keys[i], headers[i], CLAIMS(",\"scope\":\"mcpsub:read\""));
    cJSON *claims = NULL;
    CHECK_INT_EQ(jwt_verify(ks, t, strlen(t), &rules, NOW, &claims), JWT_OK);
    CHECK_STR_EQ(cJSON_GetObjectItemCaseSensitive(claims, "sub")->valuestring, "alice");
    cJSON_Delete(claims);
    /* One flipped bit in the signature. */
    size_t n = strlen(t);
    t[n - 3] = t[n - 3] == 'A' ? 'B' : 'A';
    CHECK_INT_EQ(verify(ks, t), JWT_SIGNATURE);
    free(t);
  }
  /* The alg of one kind with the key of another: refused before any verification. */
  char *t = token(&keys[1], "{\"alg\":\"ES256\",\"kid\":\"r\"}", CLAIMS(""));
  CHECK_INT_EQ(verify(ks, t), JWT_ALGORITHM);
  free(t);
  /* Signed by a key the set does not hold, under a kid it does hold. */
  key stranger = make_key("EdDSA", "d", 0);
  t = token(&stranger, headers[2], CLAIMS(""));
  CHECK_INT_EQ(verify(ks, t), JWT_SIGNATURE);
  free(t);
  t = token(&keys[2], "{\"alg\":\"EdDSA\",\"kid\":\"zz\"}", CLAIMS(""));
  CHECK_INT_EQ(verify(ks, t), JWT_UNKNOWN_KEY);
  free(t);
  /* Without a kid: the set's only key of the alg's kind. */
  t = token(&keys[0], "{\"alg\":\"RS256\"}", CLAIMS(""));
  CHECK_INT_EQ(verify(ks, t), JWT_OK);
  free(t);
  key two[] = {keys[2], stranger};
  jwks_t *pair = set_of(two, 2);
  t = token(&keys[2], "{\"alg\":\"EdDSA\"}", CLAIMS(""));
  CHECK_INT_EQ(verify(pair, t), JWT_UNKNOWN_KEY); /* two candidates: which? */
  free(t);
  jwks_free(pair);
  EVP_PKEY_free(stranger.pkey);
  jwks_free(ks);
  for (int i = 0; i < 3; i++) EVP_PKEY_free(keys[i].pkey);
}

static void test_refused_algorithms(void) {
  key k = make_key("EdDSA", "d", 0);
  jwks_t *ks = set_of(&k, 1);
  static const char *bad[] = {
      "{\"alg\":\"none\",\"kid\":\"d\"}", "{\"alg\":\"HS256\",\"kid\":\"d\"}",
      "{\"alg\":\"RS384\",\"kid\":\"d\"}", "{\"alg\":\"ES256K\",\"kid\":\"d\"}",
      "{\"alg\":\"EdDSA\",\"kid\":\"d\",\"crit\":[\"b64\"]}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *t = token(&k, bad[i], CLAIMS(""));
    CHECK_INT_EQ(verify(ks, t), JWT_ALGORITHM);
    free(t);
  }
  /* alg none with an empty signature, the way it is sent. */
  char *t = token(&k, "{\"alg\":\"none\"}", CLAIMS(""));
  *(strrchr(t, '.') + 1) = '\0';
  CHECK_INT_EQ(verify(ks, t), JWT_ALGORITHM);
  free(t);
  jwks_free(ks);
  EVP_PKEY_free(k.pkey);
}

static void test_claims(void) {
  key k = make_key("ES256", "e", 0);
  jwks_t *ks = set_of(&k, 1);
  const char *h = "{\"alg\":\"ES256\",\"kid\":\"e\"}";
  static const struct {
    const char *claims;
    jwt_result want;
  } cases[] = {
      {CLAIMS(""), JWT_OK},
      {"{\"iss\":\"https://other\",\"aud\":\"https://mcp.example/"
       "mcp\",\"sub\":\"a\",\"exp\":1800000100}",
       JWT_ISSUER},
      {"{\"aud\":\"https://mcp.example/mcp\",\"sub\":\"a\",\"exp\":1800000100}", JWT_ISSUER},
      {"{\"iss\":\"https://issuer\",\"aud\":\"https://else/mcp\",\"sub\":\"a\",\"exp\":1800000100}",
       JWT_AUDIENCE},
      {"{\"iss\":\"https://issuer\",\"aud\":[\"x\",\"https://mcp.example/mcp\"],\"sub\":\"a\","
       "\"exp\":1800000100}",
       JWT_OK},
      {"{\"iss\":\"https://issuer\",\"aud\":[\"x\"],\"sub\":\"a\",\"exp\":1800000100}",
       JWT_AUDIENCE},
      {"{\"iss\":\"https://issuer\",\"sub\":\"a\",\"exp\":1800000100}", JWT_AUDIENCE},
      {"{\"iss\":\"https://issuer\",\"aud\":\"https://mcp.example/mcp\",\"sub\":\"a\"}",
       JWT_EXPIRED},
      /* exp in the past, within the leeway: still good; past it: expired. */
      {"{\"iss\":\"https://issuer\",\"aud\":\"https://mcp.example/"
       "mcp\",\"sub\":\"a\",\"exp\":1799999950}",
       JWT_OK},
      {"{\"iss\":\"https://issuer\",\"aud\":\"https://mcp.example/"
       "mcp\",\"sub\":\"a\",\"exp\":1799999940}",
       JWT_EXPIRED},
      {CLAIMS(",\"nbf\":1800000050"), JWT_OK},
      {CLAIMS(",\"nbf\":1800000061"), JWT_NOT_YET},
      {CLAIMS(",\"nbf\":\"soon\""), JWT_NOT_YET},
      {"{\"iss\":\"https://issuer\",\"aud\":\"https://mcp.example/mcp\",\"exp\":1800000100}",
       JWT_CLAIMS},
      {"{\"iss\":\"https://issuer\",\"aud\":\"https://mcp.example/"
       "mcp\",\"sub\":7,\"exp\":1800000100}",
       JWT_CLAIMS},
      {"[1,2]", JWT_MALFORMED},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *t = token(&k, h, cases[i].claims);
    jwt_result r = verify(ks, t);
    if (r != cases[i].want) fprintf(stderr, "%s: %s\n", cases[i].claims, jwt_result_text(r));
    CHECK_INT_EQ(r, cases[i].want);
    free(t);
  }
  jwks_free(ks);
  EVP_PKEY_free(k.pkey);
}

static void test_malformed_tokens(void) {
  key k = make_key("EdDSA", "d", 0);
  jwks_t *ks = set_of(&k, 1);
  static const char *bad[] = {"",     "abc",  "a.b",         "a.b.c.d",
                              ".b.c", "a..c", "e30.e30.e30", "!!.e30.AA"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    CHECK(verify(ks, bad[i]) == JWT_MALFORMED || verify(ks, bad[i]) == JWT_UNKNOWN_KEY);
  CHECK_INT_EQ(verify(ks, "a.b"), JWT_MALFORMED);
  char *big = malloc(JWT_TOKEN_MAX + 2);
  memset(big, 'A', JWT_TOKEN_MAX + 1);
  big[10] = big[20] = '.';
  big[JWT_TOKEN_MAX + 1] = '\0';
  CHECK_INT_EQ(verify(ks, big), JWT_MALFORMED);
  free(big);
  CHECK_INT_EQ(verify(NULL, "a.b.c"), JWT_UNKNOWN_KEY); /* no keys loaded yet */
  jwks_free(ks);
  EVP_PKEY_free(k.pkey);
}

static void expect_no_key(const char *text) {
  jwks_t *ks = NULL;
  char err[256] = "";
  int rc = jwks_parse(text, strlen(text), &ks, err, sizeof(err));
  if (rc == 0) fprintf(stderr, "jwks_parse accepted %s\n", text);
  CHECK(rc != 0 && ks == NULL && err[0] != '\0');
}

static void test_key_sets(void) {
  expect_no_key("");
  expect_no_key("[]");
  expect_no_key("{\"keys\":{}}");
  expect_no_key("{\"keys\":[]}");
  expect_no_key("{\"keys\":[{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"}]}");
  expect_no_key("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":\"AA\",\"y\":\"AA\"}]}");
  /* A point off the curve. */
  expect_no_key("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\""
                "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\",\"y\":\""
                "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}");
  /* An RSA key under 2048 bits beside an encryption key, or a key for an alg not allowed. */
  key small = make_key("RS256", "s", 1024);
  key ed = make_key("EdDSA", "d", 0);
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "{\"keys\":[");
  jwk_of(&b, &small);
  buf_append_str(&b, ",");
  size_t at = b.len;
  jwk_of(&b, &ed);
  buf_append_str(&b, "]}");
  char *text = buf_steal(&b);
  char *use = strstr(text + at, "\"use\":\"sig\"");
  memcpy(use, "\"use\":\"enc\"", 11);
  expect_no_key(text);
  memcpy(use, "\"alg\":\"RS2\"", 11);
  expect_no_key(text);
  free(text);
  /* Unusable keys are skipped beside a usable one. */
  buf_init(&b);
  buf_append_str(&b, "{\"keys\":[{\"kty\":\"oct\",\"k\":\"c2VjcmV0\"},");
  jwk_of(&b, &ed);
  buf_append_str(&b, "]}");
  jwks_t *ks = NULL;
  char err[256];
  CHECK_INT_EQ(jwks_parse(b.data, b.len, &ks, err, sizeof(err)), 0);
  CHECK_INT_EQ(jwks_count(ks), 1);
  jwks_free(ks);
  jwks_free(NULL);
  buf_finish(&b);
  EVP_PKEY_free(small.pkey);
  EVP_PKEY_free(ed.pkey);
}

int main(void) {
  RUN(test_base64url);
  RUN(test_each_algorithm);
  RUN(test_refused_algorithms);
  RUN(test_claims);
  RUN(test_malformed_tokens);
  RUN(test_key_sets);
  return 0;
}
