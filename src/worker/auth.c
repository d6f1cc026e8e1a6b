/*
 * Identity and access on the request path (see auth.h). Per request with
 * an API key: one stat(2) of the key file (to see a revocation at once),
 * one SHA-256 of the presented key and a constant-time comparison with
 * every key; no allocation. The key file is re-read only when it changed.
 * With a JWT: one SHA-256 of the token and a lookup in the cache of
 * verified tokens; a signature verification and the parse of its claims
 * only on a token's first use (in this worker, with these keys).
 */
#include "worker/auth.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
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
    value = jsonrpc_text(v); /* text, or an integer's digits */
    if (value == NULL && cJSON_IsNumber(v)) {
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
  u->filters = mem_realloc(u->filters, (u->n_filters + 1) * sizeof(uri_filter));
  memmove(&u->filters[at + 1], &u->filters[at], (u->n_filters - at) * sizeof(uri_filter));
  u->filters[at] = (uri_filter){.column = mem_strdup(scope->column),
                                .value = mem_strdup(scope->value)}; /* equality */
  uri_filter_read_number(&u->filters[at]);
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
  uri_filter f = {.column = (char *)scope->column, .value = (char *)scope->value}; /* read only */
  uri_filter_read_number(&f);
  uri_t one;
  memset(&one, 0, sizeof(one));
  one.n_filters = 1;
  one.filters = &f;
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

void auth_scope_of_topic_key(const char *key, auth_scope *scope) {
  const char *nl = strchr(key, '\n');
  const char *eq = nl != NULL ? strchr(nl + 1, '=') : NULL;
  *scope = (auth_scope){.scoped = eq != NULL};
  if (eq == NULL) return;
  snprintf(scope->column, sizeof(scope->column), "%.*s", (int)(eq - nl - 1), nl + 1);
  snprintf(scope->value, sizeof(scope->value), "%s", eq + 1);
}

/* The scope an OAuth client asks for to get right (for 403 challenges). */
static const char *auth_scope_for(unsigned right) {
  if (right & AUTH_ADMIN) return "mcpsub:admin";
  if (right & AUTH_WRITE) return "mcpsub:write";
  return "mcpsub:read";
}

/* Reloads the API key file when it changed (or force). */
static void auth_reload_keys(auth_state *a, bool force) {
  if (a->keys_path == NULL) return;
  file_stamp now;
  if (!file_stamp_take(a->keys_path, &now)) {
    /* The file is gone: no key works any more (an operator removed them all). */
    if (a->keys.n == 0) return;
    log_warn("API key file is gone: no key is accepted", "file", a->keys_path);
    auth_keyring_finish(&a->keys);
    a->keys_stamp = now;
    return;
  }
  if (!force && file_stamp_same(&now, &a->keys_stamp)) return;
  auth_keyring fresh;
  char err[512];
  a->keys_stamp = now; /* a bad file is said once, not on every request */
  if (auth_keyring_load(a->keys_path, &fresh, err, sizeof(err)) != 0) {
    log_warn("API key file not reloaded; the keys loaded before stay", "error", err);
    return;
  }
  auth_keyring_finish(&a->keys);
  a->keys = fresh;
  char n[32];
  snprintf(n, sizeof(n), "%zu", a->keys.n);
  log_info("API keys loaded", "file", a->keys_path, "keys", n);
}

void auth_reload(auth_state *a, bool force) {
  auth_reload_keys(a, force);
  if (a->jwt) keyset_tick(&a->jwks, force);
}

int auth_init(auth_state *a, worker_t *w, keyset_resume_cb resume, char *err, size_t errlen) {
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
  int rc = 0;
  if (cfg->auth_keys != NULL) {
    a->keys_path = cfg->auth_keys;
    file_stamp_take(a->keys_path, &a->keys_stamp);
    rc = auth_keyring_load(a->keys_path, &a->keys, err, errlen);
  }
  if (rc == 0 && cfg->auth_jwks != NULL) {
    a->rules = (jwt_rules){cfg->auth_issuer, cfg->auth_audience, AUTH_JWT_LEEWAY_S};
    keyset_init(&a->jwks, w->loop, cfg->auth_jwks, resume, w);
    a->tokens = mem_calloc(AUTH_TOKEN_CACHE, sizeof(*a->tokens));
    a->jwt = true;
  }
  if (rc != 0) auth_finish(a);
  return rc;
}

int auth_check_config(const config_t *cfg, char *err, size_t errlen) {
  policy_t *policy = NULL;
  auth_keyring keys = {0};
  int rc = cfg->policy_path != NULL ? policy_load(cfg->policy_path, &policy, err, errlen) : 0;
  if (rc == 0 && cfg->auth_keys != NULL) rc = auth_keyring_load(cfg->auth_keys, &keys, err, errlen);
  if (rc == 0 && cfg->auth_jwks != NULL) rc = keyset_check(cfg->auth_jwks, err, errlen);
  policy_free(policy);
  auth_keyring_finish(&keys);
  return rc;
}

void auth_finish(auth_state *a) {
  if (a->jwt) keyset_finish(&a->jwks);
  for (size_t i = 0; a->tokens != NULL && i < AUTH_TOKEN_CACHE; i++)
    cJSON_Delete(a->tokens[i].claims);
  free(a->tokens);
  a->tokens = NULL;
  a->jwt = false;
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

/* Authenticates an API key; false when token is none of the keys. */
static bool auth_api_key(auth_state *a, const char *token, size_t len, auth_principal *p) {
  if (!a->keys_checked) { /* once per loop turn: a revocation is seen by the next request read */
    auth_reload_keys(a, false);
    a->keys_checked = true;
  }
  const auth_key *k = auth_keyring_match(&a->keys, token, len);
  if (k == NULL) return false;
  snprintf(p->id, sizeof(p->id), "key:%s", k->name);
  snprintf(p->name, sizeof(p->name), "%s", k->name);
  auth_set_role(a, p, k->role);
  p->attributes = policy_key_attributes(a->policy, k->name);
  memcpy(p->credential, k->sha256, sizeof(p->credential));
  return true;
}

/* The principal of a verified token (its cache entry). */
static void auth_token_principal(auth_state *a, const auth_token_entry *e, auth_principal *p) {
  const char *sub = cJSON_GetObjectItemCaseSensitive(e->claims, "sub")->valuestring;
  snprintf(p->id, sizeof(p->id), "jwt:%s", sub);
  snprintf(p->name, sizeof(p->name), "%s", sub);
  const cJSON *scope = cJSON_GetObjectItemCaseSensitive(e->claims, "scope");
  const char *role =
      cJSON_IsString(scope) ? policy_role_for_scopes(a->policy, scope->valuestring) : NULL;
  auth_set_role(a, p, role != NULL ? role : "");
  p->attributes = e->claims;
  p->expires_ms = e->expires_ms;
  memcpy(p->credential, e->hash, sizeof(p->credential));
}

/* The cache slot of a token's hash. */
static auth_token_entry *auth_token_slot(auth_state *a, const uint8_t hash[32]) {
  uint32_t i;
  memcpy(&i, hash, sizeof(i));
  return &a->tokens[i % AUTH_TOKEN_CACHE];
}

/*
 * Authenticates a JWT: from the cache when this very token was verified
 * with the current keys and has not expired, else by verification. A
 * token whose key is unknown may wait for a fetch of the key set.
 */
static auth_outcome auth_jwt(worker_t *w, http_conn_t *c, http_request_t *req, const char *token,
                             size_t len, auth_principal *p) {
  auth_state *a = &w->auth;
  uint8_t hash[32];
  auth_sha256(token, len, hash);
  int64_t now_ms = store_now_ms();
  auth_token_entry *e = auth_token_slot(a, hash);
  if (e->claims != NULL && memcmp(e->hash, hash, sizeof(hash)) == 0 &&
      e->generation == a->jwks.generation && now_ms < e->expires_ms) {
    auth_token_principal(a, e, p);
    return AUTH_PASSED;
  }
  cJSON *claims = NULL;
  jwt_result r = jwt_verify(a->jwks.keys, token, len, &a->rules, now_ms / 1000, &claims);
  if (r == JWT_UNKNOWN_KEY) {
    /* The issuer may have rotated its keys: look again (once, rate-limited) before refusing. */
    keyset_outcome o = keyset_unknown_key(&a->jwks, c, req);
    if (o == KEYSET_WAITING) return AUTH_WAITING;
    if (o == KEYSET_RELOADED)
      r = jwt_verify(a->jwks.keys, token, len, &a->rules, now_ms / 1000, &claims);
  }
  const char *why = jwt_result_text(r);
  if (r == JWT_OK && strlen(cJSON_GetObjectItemCaseSensitive(claims, "sub")->valuestring) + 4 >
                         AUTH_PRINCIPAL_MAX) {
    r = JWT_CLAIMS;
    why = "token subject too long";
  }
  if (r != JWT_OK) {
    cJSON_Delete(claims);
    a->token_refusals[r]++;
    auth_respond_unauthorized(w, c, why, true);
    return AUTH_ANSWERED;
  }
  cJSON_Delete(e->claims); /* whatever the slot held before */
  memcpy(e->hash, hash, sizeof(hash));
  e->claims = claims;
  e->generation = a->jwks.generation;
  const cJSON *exp = cJSON_GetObjectItemCaseSensitive(claims, "exp");
  /* jwt_verify checked exp against the clock; one past int64_t's milliseconds is held as 1e15 s. */
  double exp_s = exp->valuedouble < 1e15 ? exp->valuedouble : 1e15;
  e->expires_ms = (int64_t)exp_s * 1000 + AUTH_JWT_LEEWAY_S * 1000;
  auth_token_principal(a, e, p);
  return AUTH_PASSED;
}

auth_outcome auth_request(worker_t *w, http_conn_t *c, http_request_t *req, auth_principal *p) {
  auth_state *a = &w->auth;
  memset(p, 0, sizeof(*p));
  if (!a->enabled) {
    snprintf(p->id, sizeof(p->id), "anonymous");
    snprintf(p->name, sizeof(p->name), "anonymous");
    auth_set_role(a, p, "admin");
    return AUTH_PASSED;
  }
  const char *h = http_request_header(req, "authorization");
  if (h == NULL) {
    auth_respond_unauthorized(w, c, "authorization required", false);
    return AUTH_ANSWERED;
  }
  if (strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0') {
    auth_respond_unauthorized(w, c, "expected Authorization: Bearer TOKEN", true);
    return AUTH_ANSWERED;
  }
  const char *token = h + 7;
  while (*token == ' ') token++;
  size_t len = strlen(token);
  if (a->keys_path != NULL && len == AUTH_KEY_TEXT_LEN &&
      strncmp(token, AUTH_KEY_PREFIX, strlen(AUTH_KEY_PREFIX)) == 0) {
    if (auth_api_key(a, token, len, p)) return AUTH_PASSED;
    auth_respond_unauthorized(w, c, "unknown or revoked API key", true);
    return AUTH_ANSWERED;
  }
  if (!a->jwt || memchr(token, '.', len) == NULL) {
    auth_respond_unauthorized(w, c, "unknown, revoked or malformed token", true);
    return AUTH_ANSWERED;
  }
  return auth_jwt(w, c, req, token, len, p);
}

bool auth_still_valid(const auth_state *a, const auth_principal *p, int64_t now_ms) {
  if (!a->enabled) return true;
  if (p->expires_ms != 0 && now_ms >= p->expires_ms) return false;
  if (strncmp(p->id, "key:", 4) != 0) return true; /* a token works until it expires */
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
