/*
 * API keys and the key file (see auth_keys.h). The file is operator input
 * and is bounded (AUTH_KEYFILE_MAX bytes, AUTH_KEYRING_MAX keys); a request
 * only ever meets auth_keyring_match, which hashes the presented token once
 * and compares it with every entry in constant time. Never logs or stores
 * a key itself.
 */
#include "common/auth_keys.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/errmsg.h"
#include "common/session_id.h"

bool auth_key_name_valid(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n == 0 || n > max) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  }
  return true;
}

void auth_sha256(const void *data, size_t len, uint8_t out[32]) {
  /*
   * On the request path: the implementation is fetched and the context made
   * once per thread (an implicit fetch on every EVP_Digest costs more than
   * hashing a key). Kept for the life of the thread.
   */
  static __thread EVP_MD *md;
  static __thread EVP_MD_CTX *ctx;
  if (md == NULL) md = EVP_MD_fetch(NULL, "SHA256", NULL);
  if (ctx == NULL) ctx = EVP_MD_CTX_new();
  unsigned int n = 32;
  if (md == NULL || ctx == NULL || EVP_DigestInit_ex2(ctx, md, NULL) != 1 ||
      EVP_DigestUpdate(ctx, data, len) != 1 || EVP_DigestFinal_ex(ctx, out, &n) != 1)
    abort(); /* out of memory, or an OpenSSL without SHA-256 */
}

static int hex_decode(const char *hex, uint8_t *out, size_t n) {
  if (strlen(hex) != 2 * n) return -EINVAL;
  for (size_t i = 0; i < 2 * n; i++) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return -EINVAL;
    out[i / 2] = (uint8_t)(i % 2 == 0 ? v << 4 : out[i / 2] | v);
  }
  return 0;
}

auth_key *auth_keyring_find(const auth_keyring *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->keys[i].name, name) == 0) return &r->keys[i];
  return NULL;
}

auth_key *auth_keyring_add(auth_keyring *r, const char *name, const char *role,
                           const uint8_t hash[32], int64_t created_ms) {
  r->keys = mem_realloc(r->keys, (r->n + 1) * sizeof(auth_key));
  auth_key *k = &r->keys[r->n++];
  memset(k, 0, sizeof(*k));
  snprintf(k->name, sizeof(k->name), "%s", name);
  snprintf(k->role, sizeof(k->role), "%s", role);
  memcpy(k->sha256, hash, 32);
  k->created_ms = created_ms;
  return k;
}

int auth_keyring_remove(auth_keyring *r, const char *name) {
  auth_key *k = auth_keyring_find(r, name);
  if (k == NULL) return -ENOENT;
  size_t i = (size_t)(k - r->keys);
  memmove(&r->keys[i], &r->keys[i + 1], (r->n - i - 1) * sizeof(auth_key));
  r->n--;
  return 0;
}

void auth_keyring_finish(auth_keyring *r) {
  if (r == NULL) return;
  free(r->keys);
  r->keys = NULL;
  r->n = 0;
}

int auth_keyring_parse(const char *text, size_t len, auth_keyring *out, char *err, size_t errlen) {
  out->keys = NULL;
  out->n = 0;
  if (len > AUTH_KEYFILE_MAX) return errmsg(err, errlen, -EINVAL, "key file is too large");
  cJSON *root = cJSON_ParseWithLength(text, len);
  const cJSON *keys = cJSON_GetObjectItemCaseSensitive(root, "keys");
  int rc = 0;
  if (!cJSON_IsArray(keys)) {
    rc = errmsg(err, errlen, -EINVAL, "key file: expected {\"keys\": [...]}");
    goto done;
  }
  if (cJSON_GetArraySize(keys) > AUTH_KEYRING_MAX) {
    rc = errmsg(err, errlen, -EINVAL, "key file: more than %d keys", AUTH_KEYRING_MAX);
    goto done;
  }
  const cJSON *k;
  cJSON_ArrayForEach(k, keys) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(k, "name");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(k, "role");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(k, "sha256");
    const cJSON *created = cJSON_GetObjectItemCaseSensitive(k, "created");
    uint8_t h[32];
    if (!cJSON_IsString(name) || !auth_key_name_valid(name->valuestring, AUTH_KEY_NAME_MAX)) {
      rc = errmsg(err, errlen, -EINVAL, "key file: a key without a valid name");
      goto done;
    }
    if (!cJSON_IsString(role) || !auth_key_name_valid(role->valuestring, AUTH_KEY_ROLE_MAX)) {
      rc = errmsg(err, errlen, -EINVAL, "key file: key %.64s has no valid role", name->valuestring);
      goto done;
    }
    if (!cJSON_IsString(hash) || hex_decode(hash->valuestring, h, sizeof(h)) != 0) {
      rc = errmsg(err, errlen, -EINVAL, "key file: key %.64s has no valid sha256",
                  name->valuestring);
      goto done;
    }
    if (auth_keyring_find(out, name->valuestring) != NULL) {
      rc = errmsg(err, errlen, -EINVAL, "key file: duplicate key name %.64s", name->valuestring);
      goto done;
    }
    auth_keyring_add(out, name->valuestring, role->valuestring, h,
                     /* A time this file could hold; else unknown (0). */
                     cJSON_IsNumber(created) && created->valuedouble >= 0 &&
                             created->valuedouble < 1e18
                         ? (int64_t)created->valuedouble
                         : 0);
  }
done:
  cJSON_Delete(root);
  if (rc != 0) auth_keyring_finish(out);
  return rc;
}

char *auth_keyring_format(const auth_keyring *r) {
  static const char hex[] = "0123456789abcdef";
  cJSON *root = cJSON_CreateObject();
  cJSON *keys = cJSON_AddArrayToObject(root, "keys");
  for (size_t i = 0; i < r->n; i++) {
    const auth_key *k = &r->keys[i];
    char h[65];
    for (size_t j = 0; j < 32; j++) {
      h[2 * j] = hex[k->sha256[j] >> 4];
      h[2 * j + 1] = hex[k->sha256[j] & 0xf];
    }
    h[64] = '\0';
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", k->name);
    cJSON_AddStringToObject(o, "role", k->role);
    cJSON_AddStringToObject(o, "sha256", h);
    cJSON_AddNumberToObject(o, "created", (double)k->created_ms);
    cJSON_AddItemToArray(keys, o);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (text == NULL) abort();
  char *copy = mem_strdup(text); /* one allocator for callers */
  cJSON_free(text);
  return copy;
}

int auth_keyring_load(const char *path, auth_keyring *out, char *err, size_t errlen) {
  out->keys = NULL;
  out->n = 0;
  buf_t b;
  buf_init(&b);
  int rc = buf_append_file(&b, path, AUTH_KEYFILE_MAX);
  if (rc == -EFBIG)
    rc = errmsg(err, errlen, -EINVAL, "%s: key file is too large", path);
  else if (rc != 0)
    errmsg(err, errlen, rc, "%s: %s", path, strerror(-rc));
  else
    rc = auth_keyring_parse(b.data != NULL ? b.data : "", b.len, out, err, errlen);
  buf_finish(&b);
  return rc;
}

int auth_keyring_save(const char *path, const auth_keyring *r, char *err, size_t errlen) {
  char *text = auth_keyring_format(r);
  buf_t tmp;
  buf_init(&tmp);
  buf_printf(&tmp, "%s.tmp.%ld", path, (long)getpid());
  int rc = 0;
  int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = -errno;
    goto out;
  }
  size_t len = strlen(text), off = 0;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      rc = -errno;
      break;
    }
    off += (size_t)w;
  }
  if (rc == 0 && (write(fd, "\n", 1) != 1 || fsync(fd) != 0)) rc = errno != 0 ? -errno : -EIO;
  if (close(fd) != 0 && rc == 0) rc = -errno;
  if (rc == 0 && rename(tmp.data, path) != 0) rc = -errno;
  if (rc != 0) unlink(tmp.data);
out:
  if (rc != 0 && err != NULL) snprintf(err, errlen, "%s: %s", path, strerror(-rc));
  buf_finish(&tmp);
  free(text);
  return rc;
}

const auth_key *auth_keyring_match(const auth_keyring *r, const char *token, size_t len) {
  uint8_t h[32];
  auth_sha256(token, len, h);
  const auth_key *found = NULL;
  for (size_t i = 0; i < r->n; i++) {
    /* No early exit: every entry costs the same whether or not it matched. */
    bool eq = CRYPTO_memcmp(h, r->keys[i].sha256, sizeof(h)) == 0;
    if (eq) found = &r->keys[i];
  }
  return found;
}

int auth_key_generate(char text[AUTH_KEY_TEXT_LEN + 1], uint8_t hash[32]) {
  unsigned char rnd[32];
  int rc = session_id_random(rnd, sizeof(rnd));
  if (rc != 0) return rc;
  unsigned char b64[4 * ((sizeof(rnd) + 2) / 3) + 1];
  int n = EVP_EncodeBlock(b64, rnd, (int)sizeof(rnd));
  /* base64url without padding: 43 characters for 32 bytes. */
  memcpy(text, AUTH_KEY_PREFIX, 7);
  size_t out = 7;
  for (int i = 0; i < n && b64[i] != '='; i++)
    text[out++] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : (char)b64[i];
  text[out] = '\0';
  OPENSSL_cleanse(rnd, sizeof(rnd));
  if (out != AUTH_KEY_TEXT_LEN) return -EIO;
  auth_sha256(text, out, hash);
  return 0;
}
