/*
 * API keys: the key file (--auth-keys) that mcpsubctl writes and mcpsubd
 * reads. A key is "mcpsub_" and 43 base64url characters (256 bits from the
 * OS CSPRNG); the file keeps only its SHA-256, with a name and a role, so
 * that reading the file never reveals a key. Keys are high-entropy random
 * strings, so an unsalted hash is enough: there is nothing to guess.
 *
 * The file is JSON: {"keys":[{"name":N,"role":R,"sha256":HEX,"created":MS}]}.
 * It is written whole to a temporary file and renamed over the old one
 * (mode 0600), so a reader sees the old or the new file, never half.
 * Pure apart from auth_keyring_load/save (file I/O) and auth_key_generate
 * (the CSPRNG). Hashes and comparisons are OpenSSL's.
 */
#ifndef MCPSUB_AUTH_KEYS_H
#define MCPSUB_AUTH_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"

#define AUTH_KEY_PREFIX   "mcpsub_"
#define AUTH_KEY_TEXT_LEN (7 + 43) /* prefix + base64url of 32 bytes, no padding */
#define AUTH_KEY_NAME_MAX 64
#define AUTH_KEY_ROLE_MAX 32
#define AUTH_KEYRING_MAX  10000     /* keys in one file */
#define AUTH_KEYFILE_MAX  (4 << 20) /* bytes of one file */

typedef struct auth_key {
  char name[AUTH_KEY_NAME_MAX + 1];
  char role[AUTH_KEY_ROLE_MAX + 1];
  uint8_t sha256[32];
  int64_t created_ms;
} auth_key;

typedef struct auth_keyring {
  auth_key *keys;
  size_t n;
} auth_keyring;

/* A name or role: 1..max characters of [A-Za-z0-9._-]. */
bool auth_key_name_valid(const char *s, size_t max);

/*
 * Parses the file's text into *out (release with auth_keyring_finish).
 * -EINVAL with a message in err for anything malformed (a bad name, role
 * or hash, a duplicate name, too many keys).
 */
int auth_keyring_parse(const char *text, size_t len, auth_keyring *out, char *err,
                       size_t errlen) MCPSUB_NODISCARD;
/* The file's text for r (caller frees). */
char *auth_keyring_format(const auth_keyring *r);
/*
 * Reads and parses path. A missing file is -ENOENT (err says so); anything
 * else as auth_keyring_parse, or -errno.
 */
int auth_keyring_load(const char *path, auth_keyring *out, char *err,
                      size_t errlen) MCPSUB_NODISCARD;
/* Writes r to path atomically (temporary file, fsync, rename), mode 0600. */
int auth_keyring_save(const char *path, const auth_keyring *r, char *err,
                      size_t errlen) MCPSUB_NODISCARD;
void auth_keyring_finish(auth_keyring *r); /* NULL-safe, idempotent */

/* The key named name, or NULL. */
auth_key *auth_keyring_find(const auth_keyring *r, const char *name);
/* Appends a key (the name must be new); returns it. */
auth_key *auth_keyring_add(auth_keyring *r, const char *name, const char *role,
                           const uint8_t sha256[32], int64_t created_ms);
/* Removes the key named name; -ENOENT if there is none. */
int auth_keyring_remove(auth_keyring *r, const char *name) MCPSUB_NODISCARD;

/* SHA-256 of data (OpenSSL; the implementation fetched once per thread). */
void auth_sha256(const void *data, size_t len, uint8_t out[32]);
/*
 * The key whose hash is SHA-256(token), or NULL. Every entry is compared,
 * in constant time (CRYPTO_memcmp), whichever matches: the time taken says
 * nothing about which key, or how much of one, a guess got right.
 */
const auth_key *auth_keyring_match(const auth_keyring *r, const char *token, size_t len);

/*
 * A new key: text (AUTH_KEY_TEXT_LEN characters and a NUL) and its
 * SHA-256. 0, or -errno when the CSPRNG fails.
 */
int auth_key_generate(char text[AUTH_KEY_TEXT_LEN + 1], uint8_t sha256[32]) MCPSUB_NODISCARD;

#endif
