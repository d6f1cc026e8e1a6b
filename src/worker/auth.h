/*
 * Who is calling, and may they: the worker's side of identity and access.
 * Every request except the health checks and the protected-resource
 * metadata carries `Authorization: Bearer TOKEN` when authentication is
 * configured. The token is an API key (--auth-keys), checked against the
 * key file on every request, or a JWT access token from an OAuth
 * authorization server (--auth-jwks, --auth-issuer, --auth-audience; see
 * jwt.h and keyset.h), whose scope claim maps to a role (policy.h).
 * Without any authentication configured (only allowed on loopback, or
 * with --allow-anonymous) every caller is the anonymous principal with
 * every right.
 *
 * A principal has a role; the built-in roles grant, on every table:
 *   reader  read and subscribe
 *   writer  read, subscribe and write
 *   admin   everything, including mcpsub's metadata resources
 * A session belongs to the principal that created it (session.h).
 *
 * Failures are answered here, with the statuses and WWW-Authenticate
 * challenges of RFC 6750 and the MCP authorization spec: 401 (no or a bad
 * credential) pointing at the resource metadata (RFC 9728), 403
 * insufficient_scope naming the scope that would do.
 */
#ifndef MCPSUB_AUTH_H
#define MCPSUB_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/auth_keys.h"
#include "common/config.h"
#include "common/file_stamp.h"
#include "common/jwt.h"
#include "common/policy.h"
#include "common/store.h"
#include "common/uri.h"
#include "worker/http.h"
#include "worker/keyset.h"

typedef struct worker worker_t;

/* Rights; a role is a set of them. */
enum {
  AUTH_READ = 1u << 0,
  AUTH_SUBSCRIBE = 1u << 1,
  AUTH_WRITE = 1u << 2,
  AUTH_ADMIN = 1u << 3, /* metadata resources, and whatever later needs an operator */
  AUTH_ALL = AUTH_READ | AUTH_SUBSCRIBE | AUTH_WRITE | AUTH_ADMIN,
};

#define AUTH_PRINCIPAL_MAX 200
#define AUTH_JWT_LEEWAY_S  60   /* clock skew allowed on a token's exp and nbf */
#define AUTH_TOKEN_CACHE   1024 /* verified tokens remembered (slots, by hash) */

typedef struct auth_principal {
  char id[AUTH_PRINCIPAL_MAX +
          1]; /* "anonymous", "key:NAME", "jwt:SUB"; what sessions are bound to */
  char name[AUTH_PRINCIPAL_MAX + 1]; /* the key's name or the token's sub (a "name" binding) */
  char role[AUTH_KEY_ROLE_MAX + 1];
  const policy_role *role_def; /* NULL: a role nobody defined (no rights) */
  const cJSON *attributes;     /* what "claim:NAME" bindings read; NULL: none */
  unsigned rights;             /* every right the role has on some table */
  uint8_t credential[32];      /* the hash of the key or token (a revoked key ends its streams) */
  int64_t expires_ms;          /* when the credential stops working (Unix ms), 0: not by time */
} auth_principal;

/*
 * A verified token: its next use costs a hash, not a signature check. It
 * stands while it has not expired and the keys are those it was verified
 * with (a key withdrawn from the set ends the tokens it signed).
 */
typedef struct auth_token_entry {
  uint8_t hash[32];    /* SHA-256 of the token */
  cJSON *claims;       /* NULL: an empty slot */
  int64_t expires_ms;  /* exp + leeway */
  uint64_t generation; /* keyset_t.generation it was verified under */
} auth_token_entry;

typedef struct auth_state {
  bool enabled;
  policy_t *policy; /* the built-in roles, and --policy's */
  const char *keys_path;
  auth_keyring keys;
  file_stamp keys_stamp; /* of the key file as loaded */
  bool keys_checked;     /* the file was stat'ed in this loop turn (worker's auth_turn clears it) */
  bool jwt;              /* --auth-jwks: access tokens are accepted */
  keyset_t jwks;
  jwt_rules rules;
  auth_token_entry *tokens;                /* AUTH_TOKEN_CACHE slots, with jwt */
  char challenge[1200];                    /* Bearer resource_metadata="..." */
  uint64_t denied;                         /* 401 and 403 answers */
  uint64_t token_refusals[JWT_CLAIMS + 1]; /* refused access tokens, by reason */
} auth_state;

/*
 * Loads the key file and the JWT signing keys (when configured). A request
 * that waited for signing keys is handed to resume. -errno with a message
 * in err.
 */
int auth_init(auth_state *a, worker_t *w, keyset_resume_cb resume, char *err,
              size_t errlen) MCPSUB_NODISCARD;
void auth_finish(auth_state *a);
/*
 * Loads once what auth_init will (policy, key file, JWT signing keys) to
 * refuse a bad configuration before any worker starts. -errno with a
 * message in err.
 */
int auth_check_config(const config_t *cfg, char *err, size_t errlen) MCPSUB_NODISCARD;

/*
 * Reloads the key file when it changed on disk (or force), and keeps the
 * JWT signing keys fresh (keyset_tick). A file that no longer parses keeps
 * the keys loaded before (logged).
 */
void auth_reload(auth_state *a, bool force);

/* Rights of role r on some table (the union of its grants); 0 for NULL. */
unsigned auth_role_rights(const policy_role *r);

/* A row scope: only rows whose column equals value. */
typedef struct auth_scope {
  bool scoped;
  char column[POLICY_NAME_MAX + 1];
  char value[256];
} auth_scope;

/*
 * May p use right on table? 0 with *scope filled (scoped or not), or
 * -EACCES: no such grant, or a scope whose binding p lacks (a key without
 * the attribute, a token without the claim).
 */
int auth_table_access(const auth_principal *p, const char *table, unsigned right,
                      auth_scope *scope) MCPSUB_NODISCARD;

/*
 * Narrows a parsed URI to a scope: the scope's equality joins its filters
 * (a collection becomes a filtered collection; a record keeps its kind and
 * must match them too). -E2BIG when u has no room for one more filter.
 */
int auth_scope_apply(const auth_scope *scope, uri_t *u) MCPSUB_NODISCARD;
/* The store's guard for a write by p within scope (pointers into both). */
store_guard auth_guard(const auth_principal *p, const auth_scope *scope);
/* Is row (a JSON object) inside the scope? Always for an unscoped one. */
bool auth_scope_matches(const auth_scope *scope, const cJSON *row);
/* The key of a subscription topic: the URI text, with the scope when scoped (caller frees). */
char *auth_scope_topic_key(const auth_scope *scope, const char *uri);
/* The scope a topic key of auth_scope_topic_key carries (unscoped when it names none). */
void auth_scope_of_topic_key(const char *key, auth_scope *scope);

typedef enum auth_outcome {
  AUTH_PASSED,   /* *p is the caller (valid for this request only) */
  AUTH_ANSWERED, /* refused (401) */
  AUTH_WAITING,  /* the token's signing key is being fetched; the request is resumed later */
} auth_outcome;

/*
 * Authenticates req into *p. Reloads the key file first if it changed, so
 * a revoked key fails on its next request.
 */
auth_outcome auth_request(worker_t *w, http_conn_t *c, http_request_t *req,
                          auth_principal *p) MCPSUB_NODISCARD;

/* Does the credential p was authenticated with still work (not revoked, not expired)? */
bool auth_still_valid(const auth_state *a, const auth_principal *p, int64_t now_ms);

/*
 * Answers 403 with WWW-Authenticate error="insufficient_scope" and the
 * scope that grants right (mcpsub:read, mcpsub:write, mcpsub:admin).
 */
void auth_respond_forbidden(worker_t *w, http_conn_t *c, unsigned right);

/* Is this path answered without credentials (health, resource metadata)? */
bool auth_path_is_public(const char *path);
/* Serves /.well-known/oauth-protected-resource[/mcp]; false when path is not one. */
bool auth_serve_metadata(worker_t *w, http_conn_t *c, const http_request_t *req);

#endif
