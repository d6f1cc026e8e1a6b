/*
 * Identity and access on the request path (see auth.h). Per request: one
 * stat(2) of the key file (to see a revocation at once), one SHA-256 of
 * the presented key and a constant-time comparison with every key; no
 * allocation. The key file is re-read only when it changed.
 */
#include "worker/auth.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/log.h"
#include "worker/sub_index.h"
#include "worker/worker.h"

#include <llhttp.h>

unsigned auth_role_rights(const policy_role *r) {
  unsigned rights = 0;
  for (size_t i = 0; r != NULL && i < r->n_grants; i++) rights |= r->grants[i].rights;
  return rights;
}

/* Gives p its role (from the policy) and what follows from it. */
static void auth_set_role(const auth_state *a, auth_principal *p, const char *role) {
  snprintf(p->role, sizeof(p->role), "%s", role);
  p->role_def = policy_role_find(a->policy, role);
  p->rights = auth_role_rights(p->role_def);
}

int auth_table_access(const auth_principal *p, const char *table, unsigned right,
                      auth_scope *scope) {
  memset(scope, 0, sizeof(*scope));
  const policy_grant *g = p->role_def != NULL ? policy_grant_for(p->role_def, table) : NULL;
  if (g == NULL || (g->rights & right) != right) return -EACCES;
  if (g->scope_column == NULL) return 0;
  const char *value = NULL;
  char number[64];
  if (strcmp(g->scope_bind, "name") == 0) {
    value = p->name;
  } else {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p->attributes, g->scope_bind + 6);
    if (cJSON_IsString(v)) {
      value = v->valuestring;
    } else if (cJSON_IsNumber(v)) {
      snprintf(number, sizeof(number), "%.17g", v->valuedouble);
      value = number;
    }
  }
  if (value == NULL || value[0] == '\0' || strlen(value) >= sizeof(scope->value)) return -EACCES;
  scope->scoped = true;
  snprintf(scope->column, sizeof(scope->column), "%s", g->scope_column);
  snprintf(scope->value, sizeof(scope->value), "%s", value);
  return 0;
}

int auth_scope_apply(const auth_scope *scope, uri_t *u) {
  if (!scope->scoped) return 0;
  if (u->n_filters == URI_MAX_FILTERS) return -E2BIG;
  size_t at = 0; /* filters stay sorted by column */
  while (at < u->n_filters && strcmp(u->filters[at].column, scope->column) <= 0) at++;
  memmove(&u->filters[at + 1], &u->filters[at], (u->n_filters - at) * sizeof(uri_filter));
  u->filters[at].column = mem_strdup(scope->column);
  u->filters[at].value = mem_strdup(scope->value);
  u->n_filters++;
  if (u->kind == URI_COLLECTION) u->kind = URI_FILTERED;
  return 0;
}

store_guard auth_guard(const auth_principal *p, const auth_scope *scope) {
  return (store_guard){p->id, scope->scoped ? scope->column : NULL,
                       scope->scoped ? scope->value : NULL};
}

bool auth_scope_matches(const auth_scope *scope, const cJSON *row) {
  if (!scope->scoped) return true;
  uri_t one;
  memset(&one, 0, sizeof(one));
  one.n_filters = 1;
  one.filters[0].column = (char *)scope->column; /* read only */
  one.filters[0].value = (char *)scope->value;
  return sub_filters_match(&one, row);
}

char *auth_scope_topic_key(const auth_scope *scope, const char *uri) {
  buf_t b;
  buf_init(&b);
  if (scope->scoped)
    buf_printf(&b, "%s\n%s=%s", uri, scope->column, scope->value);
  else
    buf_append_str(&b, uri);
  return buf_steal(&b);
}

/* The scope an OAuth client asks for to get right (for 403 challenges). */
static const char *auth_scope_for(unsigned right) {
  if (right & AUTH_ADMIN) return "mcpsub:admin";
  if (right & AUTH_WRITE) return "mcpsub:write";
  return "mcpsub:read";
}

static bool auth_stat(const char *path, struct stat *st) {
  return stat(path, st) == 0;
}

static void auth_remember_stat(auth_state *a, const struct stat *st) {
  a->keys_stat.dev = (uint64_t)st->st_dev;
  a->keys_stat.ino = (uint64_t)st->st_ino;
  a->keys_stat.size = (uint64_t)st->st_size;
  a->keys_stat.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  a->keys_stat.valid = true;
}

static bool auth_stat_changed(const auth_state *a, const struct stat *st) {
  return !a->keys_stat.valid || a->keys_stat.dev != (uint64_t)st->st_dev ||
         a->keys_stat.ino != (uint64_t)st->st_ino || a->keys_stat.size != (uint64_t)st->st_size ||
         a->keys_stat.mtime_ns != (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

bool auth_reload(auth_state *a, bool force) {
  if (a->keys_path == NULL) return false;
  struct stat st;
  if (!auth_stat(a->keys_path, &st)) {
    /* The file is gone: no key works any more (an operator removed them all). */
    if (a->keys.n == 0) return false;
    log_warn("API key file is gone: no key is accepted", "file", a->keys_path);
    auth_keyring_finish(&a->keys);
    a->keys_stat.valid = false;
    return true;
  }
  if (!force && !auth_stat_changed(a, &st)) return false;
  auth_keyring fresh;
  char err[512];
  if (auth_keyring_load(a->keys_path, &fresh, err, sizeof(err)) != 0) {
    log_warn("API key file not reloaded; the keys loaded before stay", "error", err);
    auth_remember_stat(a, &st); /* say it once, not on every request */
    return false;
  }
  auth_keyring_finish(&a->keys);
  a->keys = fresh;
  auth_remember_stat(a, &st);
  char n[32];
  snprintf(n, sizeof(n), "%zu", a->keys.n);
  log_info("API keys loaded", "file", a->keys_path, "keys", n);
  return true;
}

int auth_init(auth_state *a, const worker_t *w, char *err, size_t errlen) {
  memset(a, 0, sizeof(*a));
  const config_t *cfg = w->cfg;
  a->enabled = config_auth_enabled(cfg);
  if (cfg->policy_path != NULL) {
    int rc = policy_load(cfg->policy_path, &a->policy, err, errlen);
    if (rc != 0) return rc;
  } else {
    a->policy = policy_builtin();
  }
  snprintf(a->challenge, sizeof(a->challenge),
           "Bearer resource_metadata=\"%s/.well-known/oauth-protected-resource/mcp\"",
           cfg->public_url);
  if (cfg->auth_jwks != NULL) {
    snprintf(err, errlen, "--auth-jwks: JWT access tokens are not supported by this build");
    policy_free(a->policy);
    a->policy = NULL;
    return -ENOTSUP;
  }
  if (cfg->auth_keys == NULL) return 0;
  a->keys_path = cfg->auth_keys;
  int rc = auth_keyring_load(a->keys_path, &a->keys, err, errlen);
  if (rc != 0) {
    policy_free(a->policy);
    a->policy = NULL;
    return rc;
  }
  struct stat st;
  if (auth_stat(a->keys_path, &st)) auth_remember_stat(a, &st);
  return 0;
}

void auth_finish(auth_state *a) {
  auth_keyring_finish(&a->keys);
  policy_free(a->policy);
  a->policy = NULL;
}

bool auth_path_is_public(const char *path) {
  return strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0 ||
         strncmp(path, "/.well-known/oauth-protected-resource", 37) == 0;
}

/* 401 with the challenge; error="invalid_token" when a token was presented. */
static void auth_respond_unauthorized(worker_t *w, http_conn_t *c, const char *why,
                                      bool had_token) {
  char value[1400];
  if (had_token)
    snprintf(value, sizeof(value), "%s, error=\"invalid_token\", error_description=\"%s\"",
             w->auth.challenge, why);
  else
    snprintf(value, sizeof(value), "%s", w->auth.challenge);
  http_header h = {"WWW-Authenticate", value};
  worker_respond_error_with(c, 401, why, &h, 1);
  w->auth.denied++;
}

void auth_respond_forbidden(worker_t *w, http_conn_t *c, unsigned right) {
  char value[1400];
  const char *scope = auth_scope_for(right);
  snprintf(value, sizeof(value), "Bearer error=\"insufficient_scope\", scope=\"%s\", %s", scope,
           w->auth.challenge + 7 /* after "Bearer " */);
  http_header h = {"WWW-Authenticate", value};
  char msg[128];
  snprintf(msg, sizeof(msg), "forbidden: this needs %s", scope);
  worker_respond_error_with(c, 403, msg, &h, 1);
  w->auth.denied++;
}

bool auth_request(worker_t *w, http_conn_t *c, const http_request_t *req, auth_principal *p) {
  auth_state *a = &w->auth;
  memset(p, 0, sizeof(*p));
  if (!a->enabled) {
    snprintf(p->id, sizeof(p->id), "anonymous");
    snprintf(p->name, sizeof(p->name), "anonymous");
    auth_set_role(a, p, "admin");
    return true;
  }
  const char *h = http_request_header(req, "authorization");
  if (h == NULL) {
    auth_respond_unauthorized(w, c, "authorization required", false);
    return false;
  }
  if (strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0') {
    auth_respond_unauthorized(w, c, "expected Authorization: Bearer TOKEN", true);
    return false;
  }
  const char *token = h + 7;
  while (*token == ' ') token++;
  size_t len = strlen(token);
  if (a->keys_path != NULL && len == AUTH_KEY_TEXT_LEN &&
      strncmp(token, AUTH_KEY_PREFIX, strlen(AUTH_KEY_PREFIX)) == 0) {
    auth_reload(a, false);
    const auth_key *k = auth_keyring_match(&a->keys, token, len);
    if (k != NULL) {
      snprintf(p->id, sizeof(p->id), "key:%s", k->name);
      snprintf(p->name, sizeof(p->name), "%s", k->name);
      auth_set_role(a, p, k->role);
      p->attributes = policy_key_attributes(a->policy, k->name);
      memcpy(p->credential, k->sha256, sizeof(p->credential));
      return true;
    }
  }
  auth_respond_unauthorized(w, c, "unknown, revoked or malformed token", true);
  return false;
}

bool auth_still_valid(const auth_state *a, const auth_principal *p, int64_t now_ms) {
  if (!a->enabled) return true;
  if (p->expires_ms != 0 && now_ms >= p->expires_ms) return false;
  if (strncmp(p->id, "key:", 4) != 0) return true;
  for (size_t i = 0; i < a->keys.n; i++)
    if (memcmp(a->keys.keys[i].sha256, p->credential, sizeof(p->credential)) == 0) return true;
  return false;
}

bool auth_serve_metadata(worker_t *w, http_conn_t *c, const http_request_t *req) {
  static const char base[] = "/.well-known/oauth-protected-resource";
  const char *p = req->path;
  if (strncmp(p, base, sizeof(base) - 1) != 0) return false;
  const char *rest = p + sizeof(base) - 1;
  if (strcmp(rest, "") != 0 && strcmp(rest, "/mcp") != 0) return false;
  if (req->method != HTTP_GET) {
    worker_respond_not_allowed(c, "GET");
    return true;
  }
  const config_t *cfg = w->cfg;
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "resource", cfg->auth_audience);
  cJSON *servers = cJSON_AddArrayToObject(doc, "authorization_servers");
  if (cfg->auth_issuer != NULL) cJSON_AddItemToArray(servers, cJSON_CreateString(cfg->auth_issuer));
  cJSON *scopes = cJSON_AddArrayToObject(doc, "scopes_supported");
  static const char *const names[] = {"mcpsub:read", "mcpsub:write", "mcpsub:admin"};
  for (size_t i = 0; i < ARRAY_LEN(names); i++)
    cJSON_AddItemToArray(scopes, cJSON_CreateString(names[i]));
  cJSON *methods = cJSON_AddArrayToObject(doc, "bearer_methods_supported");
  cJSON_AddItemToArray(methods, cJSON_CreateString("header"));
  cJSON_AddStringToObject(doc, "resource_name", "mcpsub");
  worker_respond_json(c, 200, doc, NULL, 0);
  cJSON_Delete(doc);
  return true;
}
