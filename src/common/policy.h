/*
 * The access policy (--policy FILE): roles beyond the built-in reader,
 * writer and admin, each granting read, subscribe and write per table,
 * optionally with a row scope (equality on a column, bound to the
 * principal), the mapping of OAuth scopes to roles, and attributes of API
 * keys that a row scope can bind to. Pure: parsing and lookups, no I/O but
 * policy_load. The file is operator input and is bounded.
 *
 *   {
 *     "roles": {
 *       "tenant-user": {
 *         "tables": {
 *           "Widget": {"rights": ["read", "subscribe", "write"],
 *                      "scope": {"column": "tenant", "bind": "claim:tenant"}},
 *           "*":      {"rights": ["read"]}
 *         }
 *       }
 *     },
 *     "scopes": {"widgets:tenant": "tenant-user"},
 *     "keys":   {"acme-agent": {"tenant": "acme"}}
 *   }
 *
 * "bind" is "name" (the key's name, or the token's sub) or "claim:NAME" (a
 * token claim, or for an API key the attribute NAME under "keys").
 */
#ifndef MCPSUB_POLICY_H
#define MCPSUB_POLICY_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/mem.h"

#define POLICY_FILE_MAX   (1 << 20)
#define POLICY_NAME_MAX   64
#define POLICY_MAX_ROLES  256
#define POLICY_MAX_GRANTS 1024 /* per role */

/* Rights a grant gives (the same bits as auth.h's). */
enum {
  POLICY_READ = 1u << 0,
  POLICY_SUBSCRIBE = 1u << 1,
  POLICY_WRITE = 1u << 2,
  POLICY_ADMIN = 1u << 3,
};

typedef struct policy_grant {
  char *table; /* a table name, or "*" for every table not named */
  unsigned rights;
  char *scope_column; /* NULL: every row */
  char *scope_bind;   /* "name" or "claim:NAME" */
} policy_grant;

typedef struct policy_role {
  char *name;
  policy_grant *grants;
  size_t n_grants;
} policy_role;

typedef struct policy policy_t;

/* Parses a policy file's text. -EINVAL with a message in err. */
int policy_parse(const char *text, size_t len, policy_t **out, char *err,
                 size_t errlen) MCPSUB_NODISCARD;
/* Reads and parses path. */
int policy_load(const char *path, policy_t **out, char *err, size_t errlen) MCPSUB_NODISCARD;
/* The built-in roles only (no file). Never NULL. */
policy_t *policy_builtin(void);
void policy_free(policy_t *p); /* NULL is a no-op */

/* The role named name (built-in or defined), or NULL. */
const policy_role *policy_role_find(const policy_t *p, const char *name);
/*
 * The grant of role r on table: the table's own, else "*", else NULL (no
 * rights). The built-in roles are one "*" grant each, without a scope.
 */
const policy_grant *policy_grant_for(const policy_role *r, const char *table);
/* The role an OAuth scope maps to ("scopes", then the built-in mcpsub:*), or NULL. */
const char *policy_scope_role(const policy_t *p, const char *scope);
/*
 * The role of an access token whose scope claim is scopes (space-separated
 * scope names): the first mapping, in the file's order, whose scope the
 * token holds, else the strongest built-in one it holds (mcpsub:admin,
 * mcpsub:write, mcpsub:read), else NULL (no rights).
 */
const char *policy_role_for_scopes(const policy_t *p, const char *scopes);
/* The attributes of API key name ("keys"), or NULL. */
const cJSON *policy_key_attributes(const policy_t *p, const char *name);

#endif
