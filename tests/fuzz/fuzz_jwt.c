/*
 * libFuzzer target: access tokens and key sets (common/jwt.h). The first
 * byte picks what the rest is: a key set for jwks_parse, a token verified
 * against a fixed key set (an Ed25519 key, the RFC 8037 example), or text
 * for base64url decoding. A token cannot verify without the key's private
 * half, so anything but a refusal is a finding; the decoder must stay
 * within the room it was promised.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jwt.h"

static const char keys_text[] = "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"k\","
                                "\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static jwks_t *keys;
  if (keys == NULL) {
    char err[256];
    if (jwks_parse(keys_text, strlen(keys_text), &keys, err, sizeof(err)) != 0) abort();
  }
  if (size < 1 || size > JWKS_TEXT_MAX) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  switch (data[0] % 3) {
  case 0: {
    jwks_t *ks = NULL;
    char err[256];
    if (jwks_parse(text, len, &ks, err, sizeof(err)) == 0 && jwks_count(ks) == 0) abort();
    jwks_free(ks);
    break;
  }
  case 1: {
    static const jwt_rules rules = {"https://issuer", "https://mcp.example/mcp", 60};
    cJSON *claims = NULL;
    jwt_result r = jwt_verify(keys, text, len, &rules, 1800000000, &claims);
    if (r == JWT_OK || claims != NULL) abort();
    break;
  }
  default: {
    unsigned char *out = malloc(len * 3 / 4 + 3);
    long n = jwt_base64url_decode(text, len, out);
    if (n > (long)(len * 3 / 4 + 3)) abort();
    free(out);
    break;
  }
  }
  return 0;
}
