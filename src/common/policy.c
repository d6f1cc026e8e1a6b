/*
 * The access policy (see policy.h). Built-in roles are ordinary roles with
 * one "*" grant, so that lookups need no special case; a file may define
 * more roles but not redefine these three.
 */
#include "common/policy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/errmsg.h"
#include "common/jsonrpc.h"

struct policy {
  policy_role *roles;
  size_t n_roles;
  cJSON *scopes; /* object: scope -> role name */
  cJSON *keys;   /* object: key name -> attributes object */
};

static const struct {
  const char *name;
  unsigned rights;
} policy_builtins[] = {
    {"reader", POLICY_READ | POLICY_SUBSCRIBE},
    {"writer", POLICY_READ | POLICY_SUBSCRIBE | POLICY_WRITE},
    {"admin", POLICY_READ | POLICY_SUBSCRIBE | POLICY_WRITE | POLICY_ADMIN},
};

static policy_role *policy_add_role(policy_t *p, const char *name) {
  p->roles = mem_realloc(p->roles, (p->n_roles + 1) * sizeof(policy_role));
  policy_role *r = &p->roles[p->n_roles++];
  memset(r, 0, sizeof(*r));
  r->name = mem_strdup(name);
  return r;
}

static policy_grant *policy_add_grant(policy_role *r, const char *table, unsigned rights) {
  r->grants = mem_realloc(r->grants, (r->n_grants + 1) * sizeof(policy_grant));
  policy_grant *g = &r->grants[r->n_grants++];
  memset(g, 0, sizeof(*g));
  g->table = mem_strdup(table);
  g->rights = rights;
  return g;
}

policy_t *policy_builtin(void) {
  policy_t *p = mem_calloc(1, sizeof(*p));
  for (size_t i = 0; i < ARRAY_LEN(policy_builtins); i++)
    policy_add_grant(policy_add_role(p, policy_builtins[i].name), "*", policy_builtins[i].rights);
  return p;
}

void policy_free(policy_t *p) {
  if (p == NULL) return;
  for (size_t i = 0; i < p->n_roles; i++) {
    policy_role *r = &p->roles[i];
    for (size_t j = 0; j < r->n_grants; j++) {
      free(r->grants[j].table);
      free(r->grants[j].scope_column);
      free(r->grants[j].scope_bind);
    }
    free(r->grants);
    free(r->name);
  }
  free(p->roles);
  cJSON_Delete(p->scopes);
  cJSON_Delete(p->keys);
  free(p);
}

static bool policy_name_ok(const char *s) {
  size_t n = strlen(s);
  return n > 0 && n <= POLICY_NAME_MAX && strpbrk(s, "\"\\\n\r\t ") == NULL;
}

static int policy_parse_rights(const cJSON *list, unsigned *rights, char *err, size_t errlen,
                               const char *where) {
  *rights = 0;
  if (!cJSON_IsArray(list))
    return errmsg(err, errlen, -EINVAL, "%s: \"rights\" must be an array", where);
  const cJSON *item;
  cJSON_ArrayForEach(item, list) {
    const char *v = cJSON_IsString(item) ? item->valuestring : "";
    if (strcmp(v, "read") == 0)
      *rights |= POLICY_READ;
    else if (strcmp(v, "subscribe") == 0)
      *rights |= POLICY_SUBSCRIBE;
    else if (strcmp(v, "write") == 0)
      *rights |= POLICY_WRITE;
    else
      return errmsg(err, errlen, -EINVAL, "%s: unknown right \"%.32s\" (read, subscribe, write)",
                    where, v);
  }
  return 0;
}

static int policy_parse_grant(policy_role *r, const cJSON *g, char *err, size_t errlen) {
  char where[160];
  snprintf(where, sizeof(where), "role %s, table %s", r->name, g->string);
  if (!cJSON_IsObject(g)) return errmsg(err, errlen, -EINVAL, "%s: expected an object", where);
  if (!policy_name_ok(g->string)) return errmsg(err, errlen, -EINVAL, "%s: bad table name", where);
  unsigned rights;
  int rc = policy_parse_rights(cJSON_GetObjectItemCaseSensitive(g, "rights"), &rights, err, errlen,
                               where);
  if (rc != 0) return rc;
  policy_grant *grant = policy_add_grant(r, g->string, rights);
  const cJSON *scope = cJSON_GetObjectItemCaseSensitive(g, "scope");
  if (scope == NULL) return 0;
  const cJSON *col = cJSON_GetObjectItemCaseSensitive(scope, "column");
  const cJSON *bind = cJSON_GetObjectItemCaseSensitive(scope, "bind");
  if (!cJSON_IsString(col) || !policy_name_ok(col->valuestring))
    return errmsg(err, errlen, -EINVAL, "%s: scope needs a \"column\"", where);
  if (!cJSON_IsString(bind) ||
      !(strcmp(bind->valuestring, "name") == 0 ||
        (strncmp(bind->valuestring, "claim:", 6) == 0 && policy_name_ok(bind->valuestring + 6))))
    return errmsg(err, errlen, -EINVAL, "%s: scope \"bind\" must be \"name\" or \"claim:NAME\"",
                  where);
  grant->scope_column = mem_strdup(col->valuestring);
  grant->scope_bind = mem_strdup(bind->valuestring);
  return 0;
}

static int policy_parse_roles(policy_t *p, const cJSON *roles, char *err, size_t errlen) {
  if (roles == NULL) return 0;
  if (!cJSON_IsObject(roles)) return errmsg(err, errlen, -EINVAL, "\"roles\" must be an object");
  const cJSON *role;
  cJSON_ArrayForEach(role, roles) {
    if (!policy_name_ok(role->string))
      return errmsg(err, errlen, -EINVAL, "a role with a bad name");
    if (policy_role_find(p, role->string) != NULL)
      return errmsg(err, errlen, -EINVAL, "role %s is defined twice or is built in", role->string);
    if (p->n_roles >= POLICY_MAX_ROLES) return errmsg(err, errlen, -EINVAL, "too many roles");
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(role, "tables");
    if (!cJSON_IsObject(tables))
      return errmsg(err, errlen, -EINVAL, "role %s: \"tables\" must be an object", role->string);
    if (cJSON_GetArraySize(tables) > POLICY_MAX_GRANTS)
      return errmsg(err, errlen, -EINVAL, "role %s: too many tables", role->string);
    policy_role *r = policy_add_role(p, role->string);
    const cJSON *g;
    cJSON_ArrayForEach(g, tables) {
      int rc = policy_parse_grant(r, g, err, errlen);
      if (rc != 0) return rc;
    }
  }
  return 0;
}

int policy_parse(const char *text, size_t len, policy_t **out, char *err, size_t errlen) {
  *out = NULL;
  if (len > POLICY_FILE_MAX) return errmsg(err, errlen, -EINVAL, "policy file is too large");
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return errmsg(err, errlen, -EINVAL, "policy file: expected a JSON object");
  }
  policy_t *p = policy_builtin();
  int rc = policy_parse_roles(p, cJSON_GetObjectItemCaseSensitive(root, "roles"), err, errlen);
  cJSON *scopes = cJSON_DetachItemFromObjectCaseSensitive(root, "scopes");
  /* A key's attributes, which a row scope may bind: an integer beyond 2^53 with its digits. */
  const cJSON *key_list = cJSON_GetObjectItemCaseSensitive(root, "keys");
  jsonrpc_exact_integers(text, len, root, &key_list, key_list != NULL);
  cJSON *keys = cJSON_DetachItemFromObjectCaseSensitive(root, "keys");
  p->scopes = scopes;
  p->keys = keys;
  if (rc == 0 && scopes != NULL && !cJSON_IsObject(scopes))
    rc = errmsg(err, errlen, -EINVAL, "\"scopes\" must be an object");
  for (const cJSON *m = rc == 0 && scopes != NULL ? scopes->child : NULL; m != NULL; m = m->next) {
    if (!cJSON_IsString(m) || policy_role_find(p, m->valuestring) == NULL) {
      rc = errmsg(err, errlen, -EINVAL, "scope %.64s maps to no known role", m->string);
      break;
    }
  }
  if (rc == 0 && keys != NULL && !cJSON_IsObject(keys))
    rc = errmsg(err, errlen, -EINVAL, "\"keys\" must be an object");
  for (const cJSON *k = rc == 0 && keys != NULL ? keys->child : NULL; k != NULL; k = k->next) {
    if (!cJSON_IsObject(k)) {
      rc = errmsg(err, errlen, -EINVAL, "keys.%.64s must be an object of attributes", k->string);
      break;
    }
  }
  cJSON_Delete(root);
  if (rc != 0) {
    policy_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

int policy_load(const char *path, policy_t **out, char *err, size_t errlen) {
  *out = NULL;
  buf_t b;
  buf_init(&b);
  int rc = buf_append_file(&b, path, POLICY_FILE_MAX);
  if (rc == -EFBIG)
    rc = errmsg(err, errlen, -EINVAL, "%s: too large", path);
  else if (rc != 0)
    snprintf(err, errlen, "%s: %s", path, strerror(-rc));
  else
    rc = policy_parse(b.data != NULL ? b.data : "", b.len, out, err, errlen);
  buf_finish(&b);
  return rc;
}

const policy_role *policy_role_find(const policy_t *p, const char *name) {
  for (size_t i = 0; i < p->n_roles; i++)
    if (strcmp(p->roles[i].name, name) == 0) return &p->roles[i];
  return NULL;
}

const policy_grant *policy_grant_for(const policy_role *r, const char *table) {
  const policy_grant *any = NULL;
  for (size_t i = 0; i < r->n_grants; i++) {
    if (strcmp(r->grants[i].table, table) == 0) return &r->grants[i];
    if (strcmp(r->grants[i].table, "*") == 0) any = &r->grants[i];
  }
  return any;
}

const char *policy_scope_role(const policy_t *p, const char *scope) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(p->scopes, scope);
  if (cJSON_IsString(m)) return m->valuestring;
  if (strcmp(scope, "mcpsub:admin") == 0) return "admin";
  if (strcmp(scope, "mcpsub:write") == 0) return "writer";
  if (strcmp(scope, "mcpsub:read") == 0) return "reader";
  return NULL;
}

/* Does the space-separated list hold scope? */
static bool policy_scopes_hold(const char *scopes, const char *scope) {
  size_t n = strlen(scope);
  for (const char *at = scopes; *at != '\0';) {
    while (*at == ' ') at++;
    size_t len = strcspn(at, " ");
    if (len == n && len > 0 && memcmp(at, scope, n) == 0) return true;
    at += len;
  }
  return false;
}

const char *policy_role_for_scopes(const policy_t *p, const char *scopes) {
  const cJSON *m;
  cJSON_ArrayForEach(m, p->scopes) {
    if (cJSON_IsString(m) && policy_scopes_hold(scopes, m->string)) return m->valuestring;
  }
  static const char *const builtin[] = {"mcpsub:admin", "mcpsub:write", "mcpsub:read"};
  for (size_t i = 0; i < sizeof(builtin) / sizeof(builtin[0]); i++)
    if (policy_scopes_hold(scopes, builtin[i])) return policy_scope_role(p, builtin[i]);
  return NULL;
}

const cJSON *policy_key_attributes(const policy_t *p, const char *name) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(p->keys, name);
  return cJSON_IsObject(a) ? a : NULL;
}
