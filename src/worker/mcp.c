/*
 * The MCP Streamable HTTP endpoint. POST validates the HTTP envelope
 * (Accept, Content-Type, protocol version, session), parses one JSON-RPC
 * message (or, for 2025-03-26, a batch) and dispatches each request through
 * a const method table; the reply is one application/json body. GET turns
 * the connection into the session's SSE stream; DELETE ends the session.
 *
 * Reads are answered from the loop as the handler returns (SQLite reads are
 * local and short and never wait for a lock). A handler that writes (a
 * write tool; initialize's, DELETE's, subscribe's and unsubscribe's session rows) or
 * waits (wait_and_read) marks its call pending and answers it later, from
 * the writer's completion or the tailer.
 */
#include "worker/mcp.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/session_id.h"
#include "worker/confirm.h"
#include "worker/listen.h"
#include "worker/subscriptions.h"
#include "worker/wait.h"

#include <llhttp.h>

/* Every revision mcpsub speaks, newest first; the first is stateless (no sessions). */
static const char *const supported_versions[] = {MCP_MODERN_VERSION, "2025-11-25", "2025-06-18",
                                                 "2025-03-26"};

/* A 2025 revision (sessions, GET streams, resources/subscribe)? */
static bool version_supported(const char *v) {
  for (size_t i = 1; i < ARRAY_LEN(supported_versions); i++) {
    if (strcmp(v, supported_versions[i]) == 0) return true;
  }
  return false;
}

#define META_PROTOCOL_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_SERVER_INFO      "io.modelcontextprotocol/serverInfo"

cJSON *mcp_call_fail(mcp_call *call, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call->err_msg, sizeof(call->err_msg), fmt, ap);
  va_end(ap);
  call->err_code = code;
  return NULL;
}

/* Method handlers ----------------------------------------------------------- */

#define MCP_INSTRUCTIONS                                                                           \
  "Database tables as MCP resources. Read a record, a collection or a filtered collection; the "   \
  "tools query and write records."

static cJSON *mcp_capabilities(void) {
  cJSON *caps = cJSON_CreateObject();
  cJSON *res = cJSON_AddObjectToObject(caps, "resources");
  cJSON_AddTrueToObject(res, "subscribe");
  cJSON_AddTrueToObject(res, "listChanged");
  /* The tool set is fixed (a tool takes its table as an argument): its list never changes. */
  cJSON_AddFalseToObject(cJSON_AddObjectToObject(caps, "tools"), "listChanged");
  cJSON_AddFalseToObject(cJSON_AddObjectToObject(caps, "prompts"), "listChanged");
  cJSON_AddObjectToObject(caps, "completions");
  cJSON_AddObjectToObject(caps, "logging");
  return caps;
}

static char *json_text_or_null(const cJSON *item) {
  return cJSON_IsObject(item) ? cJSON_PrintUnformatted(item) : NULL;
}

/* An initialize waiting for its session row: answered once the row is written. */
typedef struct mcp_init_wait {
  worker_t *w;
  http_conn_t *c;
  cJSON *id;
  cJSON *result;
  char session[SESSION_ID_LEN + 1];
} mcp_init_wait;

static void mcp_initialize_stored(int rc, void *data) {
  mcp_init_wait *iw = data;
  worker_t *w = iw->w;
  session_t *s = session_registry_find(&w->sessions, iw->session, strlen(iw->session));
  if (rc == 0 && s != NULL) {
    cJSON *msg = jsonrpc_result(iw->id, iw->result);
    http_header h = {"Mcp-Session-Id", iw->session};
    worker_respond_json(iw->c, 200, msg, &h, 1);
    cJSON_Delete(msg);
    log_info("session created", "session", iw->session, "protocol", s->protocol_version);
  } else {
    /* Without its row the session could not be restored, nor pruned: it never was. */
    if (s != NULL) worker_session_end(w, s);
    cJSON_Delete(iw->result);
    mcp_answer(iw->c, iw->id, NULL, JSONRPC_INTERNAL_ERROR,
               rc == -EBUSY      ? "cannot store the session: the database is busy; retry"
               : rc == -ENOTCONN ? "cannot store the session: the database is unavailable; retry"
                                 : "cannot store the session",
               false);
  }
  cJSON_Delete(iw->id);
  free(iw);
}

static cJSON *mcp_initialize(mcp_call *call) {
  worker_t *w = call->w;
  const cJSON *requested = cJSON_GetObjectItemCaseSensitive(call->params, "protocolVersion");
  if (!cJSON_IsString(requested))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "initialize requires params.protocolVersion");
  if (w->sessions.count >= w->cfg->max_sessions)
    return mcp_call_fail(call, -32000, "too many sessions (limit %zu)", w->cfg->max_sessions);
  /* Negotiation: the client's version when we speak it, else our latest. */
  const char *version =
      version_supported(requested->valuestring) ? requested->valuestring : MCP_LATEST_VERSION;

  store_session row = {0};
  if (session_id_generate(row.id, w->slot) != 0)
    return mcp_call_fail(call, JSONRPC_INTERNAL_ERROR, "cannot generate a session id");
  int64_t now = store_now_ms();
  row.created_at = row.last_seen = now;
  snprintf(row.protocol_version, sizeof(row.protocol_version), "%s", version);
  row.client_info = json_text_or_null(cJSON_GetObjectItemCaseSensitive(call->params, "clientInfo"));
  row.client_capabilities =
      json_text_or_null(cJSON_GetObjectItemCaseSensitive(call->params, "capabilities"));
  row.subscriptions = (char *)"[]";
  row.principal = (char *)call->principal->id;
  mcp_init_wait *iw = mem_calloc(1, sizeof(*iw));
  call->created = session_registry_add(&w->sessions, row.id, version, now);
  session_set_principal(call->created, call->principal->id);
  call->created->elicit_form =
      confirm_caps_form(cJSON_GetObjectItemCaseSensitive(call->params, "capabilities"));
  memcpy(call->created->credential, call->principal->credential, sizeof(call->created->credential));
  call->created->credential_expires_ms = call->principal->expires_ms;

  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "protocolVersion", version);
  cJSON_AddItemToObject(result, "capabilities", mcp_capabilities());
  cJSON *info = cJSON_AddObjectToObject(result, "serverInfo");
  cJSON_AddStringToObject(info, "name", "mcpsub");
  cJSON_AddStringToObject(info, "version", MCPSUB_VERSION);
  cJSON_AddStringToObject(result, "instructions", MCP_INSTRUCTIONS);
  /* Answered when the row is durable: the session id is usable on any worker from then on. */
  iw->w = w;
  iw->c = call->conn;
  iw->id = cJSON_Duplicate(call->id, true);
  iw->result = result;
  snprintf(iw->session, sizeof(iw->session), "%s", row.id);
  writer_session_insert_then(w->writer, &row, mcp_initialize_stored, iw);
  cJSON_free(row.client_info);
  cJSON_free(row.client_capabilities);
  call->pending = true;
  return NULL;
}

static cJSON *mcp_ping(mcp_call *call) {
  return cJSON_CreateObject();
}

static cJSON *mcp_set_level(mcp_call *call) {
  const cJSON *level = cJSON_GetObjectItemCaseSensitive(call->params, "level");
  enum session_log_level parsed;
  if (!cJSON_IsString(level) || session_log_level_parse(level->valuestring, &parsed) != 0)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "logging/setLevel requires params.level, one of debug, info, notice, "
                         "warning, error, critical, alert, emergency");
  call->session->log_level = parsed;
  writer_session_set_log_level(call->w->writer, call->session->id, level->valuestring);
  return cJSON_CreateObject();
}

/*
 * params.uri of resources/subscribe and unsubscribe (which needs no
 * right: it only ever removes). *key gets the topic key. NULL after
 * failing call.
 */
static const char *mcp_uri_param(mcp_call *call, uri_t *u, unsigned right, char **key) {
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(call->params, "uri");
  *key = NULL;
  if (!cJSON_IsString(uri)) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "%s requires params.uri", call->method);
    return NULL;
  }
  if (subs_resolve_for(call->w, call->principal, uri->valuestring, right, u, key) != 0) {
    const char *why = subs_resolve_error();
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "resource is not subscribable: %.400s%s%s%s",
                  uri->valuestring, why[0] ? " (" : "", why, why[0] ? ")" : "");
    return NULL;
  }
  return uri->valuestring;
}

/*
 * A subscribe or unsubscribe answered once the session's row says so: a
 * restore elsewhere agrees with the answer, and the per-principal count
 * (mcp_over_limits) sees it.
 */
typedef struct row_wait {
  http_conn_t *c;
  cJSON *id;
} row_wait;

static void mcp_row_stored(int rc, void *data) {
  row_wait *uw = data;
  /* The live session holds it either way; a failed row is written again (subs_row_unsaved). */
  (void)rc;
  mcp_answer(uw->c, uw->id, cJSON_CreateObject(), 0, NULL, false);
  cJSON_Delete(uw->id);
  free(uw);
}

static cJSON *mcp_subscribe(mcp_call *call) {
  worker_t *w = call->w;
  session_t *s = call->session;
  uri_t u;
  char *key;
  const char *uri = mcp_uri_param(call, &u, AUTH_SUBSCRIBE, &key);
  if (uri == NULL) return NULL;
  cJSON *result = NULL;
  int64_t since = 0; /* omitCurrent: changes committed up to now are not notified */
  debounce_t d;
  char why[160];
  if (debounce_parse(debounce_in(call->params), &d, why, sizeof(why)) != 0) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "%s", why);
  } else if (w->cfg->strict_subscribe && s->stream == NULL) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                  "open the GET SSE stream before subscribing to resources");
  } else if (!subs_session_has(s, uri) && s->n_subs >= w->cfg->max_subscriptions) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "too many subscriptions: at most %zu per session",
                  w->cfg->max_subscriptions);
  } else if (store_audit_max_seq(w->store, &since) != 0) {
    mcp_call_fail(call, JSONRPC_INTERNAL_ERROR, "database unavailable");
  } else if (call->conn == NULL) { /* in a batch: nothing can wait */
    subs_session_add(w, s, key, uri, &u, since, &d, NULL, NULL);
    result = cJSON_CreateObject();
  } else {
    row_wait *rw = mem_alloc(sizeof(*rw));
    rw->c = call->conn;
    rw->id = cJSON_Duplicate(call->id, true);
    subs_session_add(w, s, key, uri, &u, since, &d, mcp_row_stored, rw);
    call->pending = true;
  }
  uri_finish(&u);
  free(key);
  return result;
}

static cJSON *mcp_unsubscribe(mcp_call *call) {
  uri_t u;
  char *key;
  const char *uri = mcp_uri_param(call, &u, 0, &key);
  if (uri == NULL) return NULL;
  uri_finish(&u);
  free(key);
  if (call->conn == NULL) { /* in a batch: nothing can wait */
    subs_session_remove(call->w, call->session, uri, NULL, NULL);
    return cJSON_CreateObject();
  }
  /* Answered once the row says so too: a restore elsewhere will not bring it back. */
  row_wait *rw = mem_alloc(sizeof(*rw));
  rw->c = call->conn;
  rw->id = cJSON_Duplicate(call->id, true);
  if (!subs_session_remove(call->w, call->session, uri, mcp_row_stored, rw)) {
    cJSON_Delete(rw->id);
    free(rw);
    return cJSON_CreateObject();
  }
  call->pending = true;
  return NULL;
}

static cJSON *mcp_prompts_list(mcp_call *call) {
  cJSON *result = cJSON_CreateObject();
  cJSON_AddArrayToObject(result, "prompts");
  return result;
}

static cJSON *mcp_prompts_get(mcp_call *call) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(call->params, "name");
  return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "unknown prompt: %s",
                       cJSON_IsString(name) ? name->valuestring : "(none)");
}

/* server/discover (2026-07-28): what mcpsub speaks and can do, without a session. */
static cJSON *mcp_discover(mcp_call *call) {
  cJSON *result = cJSON_CreateObject();
  cJSON *versions = cJSON_AddArrayToObject(result, "supportedVersions");
  for (size_t i = 0; i < ARRAY_LEN(supported_versions); i++)
    cJSON_AddItemToArray(versions, cJSON_CreateString(supported_versions[i]));
  cJSON_AddItemToObject(result, "capabilities", mcp_capabilities());
  cJSON_AddStringToObject(result, "instructions", MCP_INSTRUCTIONS);
  return result;
}

/* Which protocol generations a method belongs to. */
enum { GEN_2025 = 1u << 0, GEN_2026 = 1u << 1, GEN_BOTH = GEN_2025 | GEN_2026 };

/*
 * The handlers, by the method's label (stats.h names every MCP method
 * once): a message's method is resolved once (mcp_msg_of), and the
 * metrics label, mcp_required_right and the dispatch all use the label.
 */
static const struct mcp_method {
  mcp_handler handler;
  unsigned gens;
  bool cacheable; /* 2026-07-28 results carry ttlMs and cacheScope */
} mcp_methods[STATS_M_LISTEN + 1] = {
    [STATS_M_INITIALIZE] = {mcp_initialize, GEN_2025, false},
    [STATS_M_PING] = {mcp_ping, GEN_BOTH, false},
    [STATS_M_SET_LEVEL] = {mcp_set_level, GEN_2025, false},
    [STATS_M_RESOURCES_LIST] = {resources_list, GEN_BOTH, true},
    [STATS_M_TEMPLATES_LIST] = {resources_templates_list, GEN_BOTH, true},
    [STATS_M_RESOURCES_READ] = {resources_read, GEN_BOTH, true},
    [STATS_M_SUBSCRIBE] = {mcp_subscribe, GEN_2025, false},
    [STATS_M_UNSUBSCRIBE] = {mcp_unsubscribe, GEN_2025, false},
    [STATS_M_TOOLS_LIST] = {tools_list, GEN_BOTH, true},
    [STATS_M_TOOLS_CALL] = {tools_call, GEN_BOTH, false},
    [STATS_M_COMPLETE] = {completion_complete, GEN_BOTH, false},
    [STATS_M_PROMPTS_LIST] = {mcp_prompts_list, GEN_BOTH, true},
    [STATS_M_PROMPTS_GET] = {mcp_prompts_get, GEN_BOTH, false},
    [STATS_M_DISCOVER] = {mcp_discover, GEN_2026, true},
    [STATS_M_LISTEN] = {listen_open, GEN_2026, false},
};

/* HTTP envelope --------------------------------------------------------------- */

/* Does the Accept header allow type ("application/json")? Wildcards count. */
static bool accept_allows(const char *accept, const char *type) {
  if (accept == NULL) return false;
  size_t slash = strcspn(type, "/");
  const char *p = accept;
  while (*p != '\0') {
    p += strspn(p, " \t,");
    size_t len = strcspn(p, ",;");
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    if ((len == strlen(type) && strncasecmp(p, type, len) == 0) ||
        (len == 3 && strncmp(p, "*/*", 3) == 0) ||
        (len == slash + 2 && strncasecmp(p, type, slash + 1) == 0 && p[slash + 1] == '*'))
      return true;
    p += strcspn(p, ",");
  }
  return false;
}

static bool content_type_is_json(const char *ct) {
  if (ct == NULL) return false;
  size_t len = strcspn(ct, "; \t");
  return len == 16 && strncasecmp(ct, "application/json", 16) == 0;
}

/* Answers an envelope failure with a JSON-RPC error body. */
static void mcp_respond_error(http_conn_t *c, int status, const cJSON *id, int code,
                              const char *message) {
  cJSON *err = jsonrpc_error(id, code, message);
  worker_respond_json(c, status, err, NULL, 0);
  cJSON_Delete(err);
}

/*
 * 400 for an MCP-Protocol-Version mcpsub does not speak: -32022 with the
 * versions it does, so that a client can pick one and retry.
 */
static void mcp_respond_unsupported_version(http_conn_t *c, const char *requested) {
  cJSON *err =
      jsonrpc_error(NULL, MCP_UNSUPPORTED_VERSION, "Bad Request: unsupported MCP-Protocol-Version");
  cJSON *data = cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(err, "error"), "data");
  cJSON *supported = cJSON_AddArrayToObject(data, "supported");
  for (size_t i = 0; i < ARRAY_LEN(supported_versions); i++)
    cJSON_AddItemToArray(supported, cJSON_CreateString(supported_versions[i]));
  cJSON_AddStringToObject(data, "requested", requested);
  worker_respond_json(c, 400, err, NULL, 0);
  cJSON_Delete(err);
}

/*
 * Finds the live session for id, restoring it from its mcp_session row when
 * this process holds no live state for it (a restart). -ENOENT when unknown
 * or expired.
 */
static int mcp_session_lookup(worker_t *w, const char *id, const auth_principal *p,
                              session_t **out) {
  size_t len = strlen(id);
  session_t *s = session_registry_find(&w->sessions, id, len);
  if (s != NULL) {
    /* Another principal's session does not exist for this one. */
    if (strcmp(s->principal, p->id) != 0) return -ENOENT;
    *out = s;
    return 0;
  }
  if (!session_id_valid(id, len) || worker_session_ending(w, id, len)) return -ENOENT;
  store_session row;
  if (store_session_load(w->store, id, &row) != 0) return -ENOENT;
  int64_t now = store_now_ms();
  int rc = -ENOENT;
  if (strcmp(row.principal, p->id) == 0 && now - row.last_seen < (int64_t)w->cfg->idle_timeout_ms &&
      w->sessions.count < w->cfg->max_sessions) {
    s = session_registry_add(&w->sessions, row.id, row.protocol_version, now);
    session_set_principal(s, row.principal);
    s->created_ms = row.created_at;
    s->persisted_seen_ms = row.last_seen;
    /*
     * Its own frames numbered past those a process before may have minted
     * (from 1, or from its own restore's time): an id the client holds
     * never names a frame of this process it has not seen.
     */
    s->next_frame = (uint64_t)now * 1000;
    if (row.log_level != NULL && session_log_level_parse(row.log_level, &s->log_level) != 0)
      s->log_level = SESSION_LOG_INFO;
    cJSON *caps = row.client_capabilities != NULL ? cJSON_Parse(row.client_capabilities) : NULL;
    s->elicit_form = confirm_caps_form(caps);
    cJSON_Delete(caps);
    subs_session_restore(w, s, p, row.subscriptions);
    log_info("session restored", "session", s->id);
    /* One live copy: a worker that restored it while this slot was down lets it go. */
    if (w->on_restored != NULL) w->on_restored(w, s->id);
    *out = s;
    rc = 0;
  }
  store_session_finish(&row);
  return rc;
}

/*
 * Resolves the request's session or answers 400/404. NULL when answered.
 * A session of another principal is answered as unknown (404), and is not
 * touched. The credential that worked last is remembered, so that its
 * revocation ends the session's stream.
 */
static session_t *mcp_require_session(worker_t *w, http_conn_t *c, const http_request_t *req,
                                      const auth_principal *p) {
  const char *id = http_request_header(req, "mcp-session-id");
  if (id == NULL) {
    mcp_respond_error(c, 400, NULL, -32000, "Bad Request: Mcp-Session-Id header is required");
    return NULL;
  }
  session_t *s;
  if (mcp_session_lookup(w, id, p, &s) != 0) {
    mcp_respond_error(c, 404, NULL, MCP_SESSION_NOT_FOUND, "Session not found");
    return NULL;
  }
  memcpy(s->credential, p->credential, sizeof(s->credential));
  s->credential_expires_ms = p->expires_ms;
  return s;
}

/*
 * One message of a POST with its members found once (jsonrpc_classify's
 * walk) and its method resolved once: what the checks, the metrics label
 * and the dispatch read. For a batch (an array), json is the array and
 * kind JSONRPC_INVALID; each item gets its own.
 */
typedef struct mcp_msg {
  const cJSON *json;
  jsonrpc_kind kind;
  const char *why; /* JSONRPC_INVALID: what is wrong */
  const cJSON *id, *params;
  const char *method; /* when a string (whatever the kind), else NULL */
  stats_method m;     /* method's label: STATS_M_OTHER when none of MCP's */
} mcp_msg;

/*
 * Tools/calls' arguments with integers beyond 2^53 as their digits
 * (jsonrpc_exact_integers): a row put_record writes keeps every digit.
 * Other numbers of a message stay doubles. Every call of a batch in one
 * pass over the body (a pass per call made a batch of 11,500 calls cost
 * 24 s of the worker).
 */
static void mcp_exact_arguments(const http_request_t *req, cJSON *root) {
  bool batch = cJSON_IsArray(root);
  const cJSON *args[MCP_MAX_BATCH]; /* a longer batch was refused */
  size_t n = 0;
  for (cJSON *msg = batch ? root->child : root; msg != NULL; msg = batch ? msg->next : NULL) {
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    if (!cJSON_IsString(method) || strcmp(method->valuestring, "tools/call") != 0) continue;
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(params, "arguments");
    if (a != NULL && n < ARRAY_LEN(args)) args[n++] = a; /* in the body's order: the messages' */
  }
  jsonrpc_exact_integers(req->body, req->body_len, root, args, n);
}

static mcp_msg mcp_msg_of(const cJSON *json) {
  jsonrpc_members members;
  mcp_msg v = {.json = json, .m = STATS_M_OTHER};
  v.kind = jsonrpc_classify_members(json, &v.why, &members);
  v.id = members.id;
  v.params = members.params;
  if (cJSON_IsString(members.method)) {
    v.method = members.method->valuestring;
    v.m = stats_method_of(v.method);
  }
  return v;
}

/*
 * The subscriptions v would add: 1 for a resources/subscribe of a URI the
 * session does not hold yet, the URIs of a subscriptions/listen, else 0.
 */
static int64_t mcp_adds_subscription(const session_t *s, const mcp_msg *v) {
  if (v->m == STATS_M_LISTEN)
    return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v->params, "notifications"), "resourceSubscriptions"));
  if (v->m != STATS_M_SUBSCRIBE) return 0;
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(v->params, "uri");
  if (!cJSON_IsString(uri) || s == NULL) return 1;
  return !subs_session_has((session_t *)s, uri->valuestring);
}

/*
 * The principal's session and subscription limits (limits.h), counted in
 * mcp_session over every worker. NULL when within them, else what is over.
 */
static const char *mcp_over_limits(worker_t *w, const auth_principal *p, const session_t *s,
                                   const mcp_msg *msgs, size_t n, bool has_init) {
  const config_t *cfg = w->cfg;
  int64_t adds = 0;
  for (size_t i = 0; i < n; i++) adds += mcp_adds_subscription(s, &msgs[i]);
  bool check_sessions = has_init && cfg->limit_sessions > 0;
  bool check_subs = adds > 0 && cfg->limit_subscriptions > 0;
  if (!check_sessions && !check_subs) return NULL;
  int64_t sessions = 0, subscriptions = 0;
  int64_t live_since = store_now_ms() - (int64_t)cfg->idle_timeout_ms;
  if (store_principal_usage(w->store, p->id, live_since, &sessions, &subscriptions) != 0)
    return NULL; /* the database is unavailable: the request itself will say so */
  subscriptions += (int64_t)listen_subscriptions_of(w, p->id); /* this worker's listen streams */
  if (check_sessions && sessions >= cfg->limit_sessions) return "sessions per principal";
  if (check_subs && subscriptions + adds > cfg->limit_subscriptions)
    return "subscriptions per principal";
  return NULL;
}

/*
 * The right a request needs (auth.h): reads need AUTH_READ (mcpsub's own
 * metadata resources AUTH_ADMIN), subscribing AUTH_SUBSCRIBE, the write
 * tools AUTH_WRITE; the session's own housekeeping needs none.
 */
static unsigned mcp_required_right(const mcp_msg *v) {
  const cJSON *params = v->params;
  switch (v->m) {
  case STATS_M_SUBSCRIBE: return AUTH_SUBSCRIBE;
  case STATS_M_RESOURCES_READ: {
    const cJSON *uri = cJSON_GetObjectItemCaseSensitive(params, "uri");
    bool meta = cJSON_IsString(uri) && strncmp(uri->valuestring, "mcpsub://", 9) == 0;
    return meta ? AUTH_ADMIN : AUTH_READ;
  }
  case STATS_M_TOOLS_CALL: {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    bool write = cJSON_IsString(name) && (strcmp(name->valuestring, "put_record") == 0 ||
                                          strcmp(name->valuestring, "delete_record") == 0);
    return write ? AUTH_WRITE : AUTH_READ;
  }
  case STATS_M_RESOURCES_LIST:
  case STATS_M_TEMPLATES_LIST:
  case STATS_M_COMPLETE: return AUTH_READ;
  case STATS_M_LISTEN: {
    const cJSON *uris = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(params, "notifications"), "resourceSubscriptions");
    return cJSON_GetArraySize(uris) > 0 ? AUTH_SUBSCRIBE : AUTH_READ;
  }
  default: return 0;
  }
}

/* Dispatch ---------------------------------------------------------------------- */

bool mcp_cancel_here(worker_t *w, const char *principal, const char *session, const char *id_json) {
  return listen_cancel(w, principal, id_json) || wait_cancel(w, principal, session, id_json) ||
         confirm_cancel(w, principal, session, id_json) ||
         tools_cancel(w, principal, session, id_json);
}

/*
 * Signals between hosts. Behind a balancer without session affinity, a
 * notifications/cancelled or an elicitation answer may reach another host
 * than the one holding the call. One that nothing here holds is written to
 * the signal log (a row of the audit log, which every worker of every host
 * tails), and the worker holding the call acts on it as if it had come
 * there (mcp_on_signal): within a host the master's routing, or the IPC
 * relay, gets there first, and what comes second finds nothing. At most
 * MCP_SIGNALS_MAX rows are being written per worker; past that a signal is
 * dropped, and its call ends by its own timeout. An answer travels as the
 * little confirm_answer reads of it, not as the client sent it; a cancel
 * whose request id is longer than MCP_SIGNAL_ID_MAX (as JSON) is not sent.
 */
#define MCP_SIGNALS_MAX   64
#define MCP_SIGNAL_ID_MAX 256

static void mcp_signal_written(int rc, void *data) {
  (void)rc; /* a failure is logged by the writer: the call ends by its timeout */
  worker_t *w = data;
  w->n_signals--;
}

/* Writes a signal {principal, <what>: value} for session; takes value. */
static void mcp_signal(worker_t *w, const char *principal, const char *session, const char *what,
                       cJSON *value) {
  if (w->n_signals >= MCP_SIGNALS_MAX || w->writer == NULL || w->closing) {
    cJSON_Delete(value);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "principal", principal);
  cJSON_AddItemToObject(o, what, value);
  char *image = jsonrpc_print_text(o);
  cJSON_Delete(o);
  if (image == NULL) abort(); /* an item that does not print: a bug here */
  w->n_signals++;
  writer_signal_then(w->writer, session, image, mcp_signal_written, w);
  free(image);
}

void mcp_on_signal(worker_t *w, const store_audit_row *row) {
  if ((row->principal != NULL && strcmp(row->principal, w->origin) == 0) || w->closing) return;
  const cJSON *old_row, *new_row;
  store_audit_row_images(row, &old_row, &new_row);
  const char *principal =
      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(new_row, "principal"));
  const char *session = row->key != NULL ? row->key : "";
  if (principal == NULL) return;
  const cJSON *cancel = cJSON_GetObjectItemCaseSensitive(new_row, "cancel");
  const cJSON *answer = cJSON_GetObjectItemCaseSensitive(new_row, "answer");
  if (cJSON_IsString(cancel) || cJSON_IsNumber(cancel)) {
    char *text = jsonrpc_print_text(cancel);
    if (text == NULL) abort(); /* an item that does not print: a bug here */
    (void)mcp_cancel_here(w, principal, session, text);
    free(text);
  } else if (cJSON_IsObject(answer) && session[0] != '\0') {
    (void)confirm_answer(w, principal, session, answer);
  }
}

static void mcp_notification(worker_t *w, const auth_principal *p, session_t *s, const cJSON *msg) {
  /* notifications/initialized needs no action; notifications/cancelled ends
   * the caller's listen stream or waiting wait_and_read of that id (a
   * pending write completes in milliseconds or at its deadline). */
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
  if (s != NULL) session_log(s, SESSION_LOG_DEBUG, "mcpsub", method->valuestring);
  if (strcmp(method->valuestring, "notifications/cancelled") != 0) return;
  const cJSON *rid = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(msg, "params"), "requestId");
  if (!cJSON_IsString(rid) && !cJSON_IsNumber(rid)) return;
  char *text = jsonrpc_print_text(rid);
  if (text == NULL) abort(); /* an item that does not print: a bug here */
  const char *sid = s != NULL ? s->id : "";
  bool found = mcp_cancel_here(w, p->id, sid, text);
  /* A session's requests all come here; a stateless one may be on another worker. */
  if (!found && s == NULL && w->on_unknown_cancel != NULL) w->on_unknown_cancel(w, p->id, text);
  if (!found && strlen(text) <= MCP_SIGNAL_ID_MAX) /* another host */
    mcp_signal(w, p->id, sid, "cancel", cJSON_Duplicate(rid, true));
  free(text);
}

/* Rows change at any time: not cacheable for long; per caller once callers differ. */
static const char *mcp_cache_scope(const worker_t *w) {
  return w->auth.enabled ? "private" : "public";
}

/* Adds what a 2026-07-28 result carries besides the 2025 one. */
static void mcp_modern_result(worker_t *w, cJSON *result, bool cacheable, bool discover) {
  if (cJSON_IsRaw(result)) return; /* printed with them (mcp_result_cacheable) */
  if (cJSON_HasObjectItem(result, "resultType")) return; /* input_required (confirm.h) */
  cJSON_AddStringToObject(result, "resultType", "complete");
  if (cacheable) {
    cJSON_AddNumberToObject(result, "ttlMs", 0);
    cJSON_AddStringToObject(result, "cacheScope", mcp_cache_scope(w));
  }
  if (discover) {
    cJSON *meta = cJSON_AddObjectToObject(result, "_meta");
    cJSON *info = cJSON_AddObjectToObject(meta, META_SERVER_INFO);
    cJSON_AddStringToObject(info, "name", "mcpsub");
    cJSON_AddStringToObject(info, "version", MCPSUB_VERSION);
  }
}

void mcp_result_cacheable(worker_t *w, buf_t *out) {
  buf_append_str(out, ",\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"");
  buf_append_str(out, mcp_cache_scope(w));
  buf_append_byte(out, '"');
}

/*
 * Sends a request's response message: the body of the answer, or its last
 * event when the handler made the answer an SSE stream (progress sent
 * before the result).
 */
static void mcp_respond_message(http_conn_t *c, int status, const cJSON *msg) {
  if (http_conn_streaming(c)) {
    worker_sse_send(c, msg);
    http_stream_end(c);
  } else {
    worker_respond_json(c, status, msg, NULL, 0);
  }
}

/* mcp_respond_message for a message printed already (len bytes of text). */
static void mcp_respond_text(http_conn_t *c, int status, const char *text, size_t len) {
  if (http_conn_streaming(c)) {
    worker_sse_send_text(c, text, len);
    http_stream_end(c);
  } else {
    http_header type = {"Content-Type", "application/json"};
    http_respond(c, status, &type, 1, text, len);
  }
}

/* The answer of a call: result (consumed), or the error when NULL. */
static cJSON *mcp_answer_message(const cJSON *id, cJSON *result, int code, const char *message,
                                 bool modern) {
  if (result != NULL && modern && !cJSON_IsRaw(result) &&
      !cJSON_HasObjectItem(result, "resultType"))
    cJSON_AddStringToObject(result, "resultType", "complete");
  return result != NULL ? jsonrpc_result(id, result) : jsonrpc_error(id, code, message);
}

void mcp_answer(http_conn_t *c, const cJSON *id, cJSON *result, int code, const char *message,
                bool modern) {
  cJSON *msg = mcp_answer_message(id, result, code, message, modern);
  mcp_respond_message(c, 200, msg);
  cJSON_Delete(msg);
}

/* Replies ------------------------------------------------------------------------ */

#define META_LOG_LEVEL "io.modelcontextprotocol/logLevel"

void mcp_reply_init(mcp_reply *r, const mcp_call *call) {
  memset(r, 0, sizeof(*r));
  r->conn = call->conn;
  r->id = cJSON_Duplicate(call->id, true);
  r->modern = call->modern;
  size_t len = strnlen(call->principal->id, sizeof(r->principal) - 1);
  memcpy(r->principal, call->principal->id, len); /* r is zeroed: the NUL is there */
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(call->params, "_meta");
  const cJSON *token = cJSON_GetObjectItemCaseSensitive(meta, "progressToken");
  if (cJSON_IsString(token) || cJSON_IsNumber(token))
    r->progress_token = cJSON_Duplicate(token, true);
  /* 2025: the session's logging/setLevel; 2026-07-28: the request's own, else none. */
  r->log_level = -1;
  enum session_log_level level;
  const cJSON *wanted = cJSON_GetObjectItemCaseSensitive(meta, META_LOG_LEVEL);
  if (call->session != NULL) {
    r->log_level = (int)call->session->log_level;
    memcpy(r->session, call->session->id, strnlen(call->session->id, sizeof(r->session) - 1));
  } else if (cJSON_IsString(wanted) && session_log_level_parse(wanted->valuestring, &level) == 0) {
    r->log_level = (int)level;
  }
}

bool mcp_reply_matches(const mcp_reply *r, const char *principal, const char *session,
                       const char *id_json) {
  if (r->conn == NULL || r->id == NULL || strcmp(r->principal, principal) != 0 ||
      strcmp(r->session, session) != 0)
    return false;
  char *text = jsonrpc_print_text(r->id);
  bool same = text != NULL && strcmp(text, id_json) == 0;
  free(text);
  return same;
}

void mcp_reply_finish(mcp_reply *r) {
  cJSON_Delete(r->id);
  cJSON_Delete(r->progress_token);
  r->id = r->progress_token = NULL;
  r->conn = NULL;
}

void mcp_reply_stream(mcp_reply *r) {
  if (r->conn != NULL && !http_conn_streaming(r->conn)) http_stream_begin_sse(r->conn);
}

void mcp_reply_progress(mcp_reply *r, double progress, double total, const char *message) {
  if (r->progress_token == NULL || r->conn == NULL) return;
  if (progress < r->progress) progress = r->progress;
  r->progress = progress;
  mcp_reply_stream(r);
  cJSON *params = cJSON_CreateObject();
  cJSON_AddItemToObject(params, "progressToken", cJSON_Duplicate(r->progress_token, true));
  cJSON_AddNumberToObject(params, "progress", progress);
  if (total >= 0) cJSON_AddNumberToObject(params, "total", total);
  if (message != NULL) cJSON_AddStringToObject(params, "message", message);
  cJSON *msg = jsonrpc_notification("notifications/progress", params);
  worker_sse_send(r->conn, msg);
  cJSON_Delete(msg);
}

void mcp_reply_log(worker_t *w, mcp_reply *r, int level, const char *logger, const char *data) {
  if (r->conn != NULL && http_conn_streaming(r->conn)) {
    if (r->log_level < 0 || level < r->log_level) return;
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "level", session_log_level_name((enum session_log_level)level));
    cJSON_AddStringToObject(params, "logger", logger);
    cJSON_AddStringToObject(params, "data", data);
    cJSON *msg = jsonrpc_notification("notifications/message", params);
    worker_sse_send(r->conn, msg);
    cJSON_Delete(msg);
    return;
  }
  session_t *s = r->session[0] != '\0'
                     ? session_registry_find(&w->sessions, r->session, strlen(r->session))
                     : NULL;
  if (s != NULL) session_log(s, (enum session_log_level)level, logger, data);
}

void mcp_end_unanswered(http_conn_t *c) {
  /*
   * A POST that carried a request is answered with JSON or an event
   * stream, nothing else (a client such as the official SDK takes any
   * other answer for an error): an event stream that ends without a
   * message is the answer that says nothing.
   */
  if (!http_conn_streaming(c)) http_stream_begin_sse(c);
  http_stream_end(c);
}

void mcp_reply_send_text(mcp_reply *r, const char *result, size_t len) {
  if (r->conn != NULL) {
    buf_t msg;
    buf_init(&msg);
    buf_reserve(&msg, len + 64); /* the envelope around it: one allocation */
    if (jsonrpc_print_result(&msg, r->id, result, len) == 0)
      mcp_respond_text(r->conn, 200, msg.data, msg.len);
    else
      mcp_answer(r->conn, r->id, NULL, JSONRPC_INTERNAL_ERROR, "cannot print the answer",
                 r->modern);
    buf_finish(&msg);
  }
  mcp_reply_finish(r);
}

void mcp_reply_send(mcp_reply *r, cJSON *result, int code, const char *message) {
  if (r->conn != NULL)
    mcp_answer(r->conn, r->id, result, code, message, r->modern);
  else
    cJSON_Delete(result);
  mcp_reply_finish(r);
}

/*
 * Runs one request; returns its response message, or NULL when the
 * handler will answer later on conn (*pending). conn is NULL in a batch.
 */
static cJSON *mcp_request(worker_t *w, const auth_principal *p, session_t *s, const mcp_msg *v,
                          session_t **created, http_conn_t *conn, bool *pending, bool modern) {
  const cJSON *id = v->id;
  const char *method = v->method;
  const cJSON *params = v->params;
  if (params != NULL && !cJSON_IsObject(params))
    return jsonrpc_error(id, JSONRPC_INVALID_PARAMS, "params must be an object");
  mcp_call call = {.w = w,
                   .principal = p,
                   .session = s,
                   .method = method,
                   .params = params,
                   .conn = conn,
                   .id = id,
                   .modern = modern};
  if (s != NULL) session_log(s, SESSION_LOG_DEBUG, "mcpsub", method);
  stats_method m = v->m;
  const struct mcp_method *e = m <= STATS_M_LISTEN ? &mcp_methods[m] : NULL;
  if (e != NULL && e->handler != NULL) {
    if (!(e->gens & (modern ? GEN_2026 : GEN_2025))) {
      char text[300];
      snprintf(text, sizeof(text), "Method not found: %.200s is not part of protocol %s", method,
               modern ? MCP_MODERN_VERSION : "2025-11-25 and earlier (use 2026-07-28)");
      return jsonrpc_error(id, JSONRPC_METHOD_NOT_FOUND, text);
    }
    bool is_init = e->handler == mcp_initialize;
    if (!modern && is_init != (s == NULL)) {
      return jsonrpc_error(id, JSONRPC_INVALID_REQUEST,
                           is_init ? "initialize must not carry an Mcp-Session-Id"
                                   : "Bad Request: Mcp-Session-Id header is required");
    }
    cJSON *result = e->handler(&call);
    if (call.created != NULL) *created = call.created;
    if (result == NULL && call.pending) {
      *pending = true;
      return NULL;
    }
    if (result == NULL) return jsonrpc_error(id, call.err_code, call.err_msg);
    if (modern) mcp_modern_result(w, result, e->cacheable, e->handler == mcp_discover);
    return jsonrpc_result(id, result);
  }
  char text[300];
  snprintf(text, sizeof(text), "Method not found: %.256s", method);
  return jsonrpc_error(id, JSONRPC_METHOD_NOT_FOUND, text);
}

/*
 * Handles one message of a POST. Returns the response to send (requests,
 * invalid messages) or NULL (notifications, responses). *invalid is set when
 * the message was not valid JSON-RPC.
 */
static cJSON *mcp_message(worker_t *w, const auth_principal *p, session_t *s, const mcp_msg *v,
                          session_t **created, bool *invalid, http_conn_t *conn, bool *pending,
                          bool modern) {
  const cJSON *msg = v->json;
  const char *why = v->why;
  switch (v->kind) {
  case JSONRPC_REQUEST: return mcp_request(w, p, s, v, created, conn, pending, modern);
  case JSONRPC_NOTIFICATION: mcp_notification(w, p, s, msg); return NULL;
  case JSONRPC_RESPONSE:
    /* An answer to an elicitation: the call waiting for it may be on another worker or host. */
    if (s != NULL && !confirm_answer(w, p->id, s->id, msg)) {
      if (w->on_unknown_answer != NULL) w->on_unknown_answer(w, p->id, s->id, msg);
      cJSON *brief = confirm_answer_brief(msg);
      if (brief != NULL) mcp_signal(w, p->id, s->id, "answer", brief);
    }
    return NULL;
  case JSONRPC_INVALID:
  default: {
    *invalid = true;
    const cJSON *id = v->id;
    bool usable = cJSON_IsString(id) || cJSON_IsNumber(id);
    char text[200];
    snprintf(text, sizeof(text), "Invalid Request: %s", why != NULL ? why : "not JSON-RPC 2.0");
    return jsonrpc_error(usable ? id : NULL, JSONRPC_INVALID_REQUEST, text);
  }
  }
}

/* The protocol version a 2026-07-28 request names in params._meta, or NULL (a 2025 message). */
static const char *mcp_envelope_version(const mcp_msg *v) {
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(v->params, "_meta"), META_PROTOCOL_VERSION);
  return cJSON_IsString(version) ? version->valuestring : NULL;
}

/* 400 with -32020: a standard header is missing or disagrees with the body. */
static void mcp_respond_mismatch(http_conn_t *c, const cJSON *id, const char *what) {
  char text[200];
  snprintf(text, sizeof(text), "Bad Request: %s", what);
  mcp_respond_error(c, 400, id, MCP_HEADER_MISMATCH, text);
}

/*
 * Does an Mcp-Name header value name want? Plain ASCII as is, anything
 * else as =?base64?…?= (the spec's encoding of header values).
 */
static bool mcp_name_matches(const char *header, const char *want) {
  size_t len = strlen(header);
  if (len < 12 || strncmp(header, "=?base64?", 9) != 0 || strcmp(header + len - 2, "?=") != 0)
    return strcmp(header, want) == 0;
  size_t n = len - 11;
  if (n % 4 != 0 || n / 4 * 3 > 4096) return false;
  unsigned char out[4096 + 3];
  int got = EVP_DecodeBlock(out, (const unsigned char *)header + 9, (int)n);
  if (got < 0) return false;
  while (n > 0 && header[9 + n - 1] == '=') { /* padding decodes to zero bytes that are not data */
    n--;
    got--;
  }
  return (size_t)got == strlen(want) && memcmp(out, want, (size_t)got) == 0;
}

/* Which body field each method's Mcp-Name header mirrors. */
static const char *mcp_name_field(stats_method m) {
  switch (m) {
  case STATS_M_TOOLS_CALL:
  case STATS_M_PROMPTS_GET: return "name";
  case STATS_M_RESOURCES_READ: return "uri";
  default: return NULL;
  }
}

/*
 * A 2026-07-28 POST: one message, no session. A request carries the _meta
 * envelope and the MCP-Protocol-Version, Mcp-Method (and, for some
 * methods, Mcp-Name) headers that mirror it; notifications need neither.
 */
static void mcp_post_modern(worker_t *w, http_conn_t *c, http_request_t *req,
                            const auth_principal *p, const mcp_msg *v, const char *envelope) {
  const cJSON *root = v->json;
  if (cJSON_IsArray(root)) {
    mcp_respond_error(c, 400, NULL, JSONRPC_INVALID_REQUEST,
                      "Invalid Request: protocol " MCP_MODERN_VERSION " has no batches");
    return;
  }
  jsonrpc_kind kind = v->kind;
  if (kind == JSONRPC_NOTIFICATION || kind == JSONRPC_RESPONSE) {
    if (kind == JSONRPC_NOTIFICATION) mcp_notification(w, p, NULL, root);
    http_respond(c, 202, NULL, 0, NULL, 0);
    return;
  }
  const cJSON *id = v->id;
  if (kind == JSONRPC_REQUEST) {
    const char *version = http_request_header(req, "mcp-protocol-version");
    const char *method = v->method;
    const char *header = http_request_header(req, "mcp-method");
    const char *field = mcp_name_field(v->m);
    const cJSON *named = field != NULL ? cJSON_GetObjectItemCaseSensitive(v->params, field) : NULL;
    const char *name = http_request_header(req, "mcp-name");
    if (envelope == NULL) {
      mcp_respond_mismatch(c, id,
                           "MCP-Protocol-Version " MCP_MODERN_VERSION
                           " needs params._meta[\"" META_PROTOCOL_VERSION "\"]");
      return;
    }
    if (strcmp(envelope, MCP_MODERN_VERSION) != 0) {
      mcp_respond_unsupported_version(c, envelope);
      return;
    }
    if (version == NULL || strcmp(version, envelope) != 0) {
      mcp_respond_mismatch(c, id,
                           version == NULL
                               ? "the MCP-Protocol-Version header is required"
                               : "MCP-Protocol-Version disagrees with the request's _meta");
      return;
    }
    if (header == NULL || strcmp(header, method) != 0) {
      mcp_respond_mismatch(c, id,
                           header == NULL ? "the Mcp-Method header is required"
                                          : "Mcp-Method disagrees with the request's method");
      return;
    }
    if (cJSON_IsString(named) && (name == NULL || !mcp_name_matches(name, named->valuestring))) {
      mcp_respond_mismatch(c, id,
                           name == NULL ? "the Mcp-Name header is required for this method"
                                        : "Mcp-Name disagrees with the request");
      return;
    }
    unsigned need = mcp_required_right(v);
    if ((p->rights & need) != need) {
      auth_respond_forbidden(w, c, need & ~p->rights);
      return;
    }
    const char *over = mcp_over_limits(w, p, NULL, v, 1, false);
    if (over != NULL) {
      limits_respond(w, c, over, 60);
      return;
    }
  }
  bool invalid = false, pending = false;
  session_t *unused = NULL;
  cJSON *reply = mcp_message(w, p, NULL, v, &unused, &invalid, c, &pending, true);
  if (!pending) mcp_respond_message(c, invalid ? 400 : 200, reply);
  cJSON_Delete(reply);
}

static void mcp_post(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p) {
  /* What the MCP SDKs send allows both at once; any other value is parsed. */
  const char *accept = http_request_header(req, "accept");
  bool sdk_accept = accept != NULL && strcmp(accept, "application/json, text/event-stream") == 0;
  if (!sdk_accept &&
      (!accept_allows(accept, "application/json") || !accept_allows(accept, "text/event-stream"))) {
    mcp_respond_error(c, 406, NULL, -32000,
                      "Not Acceptable: Accept must allow application/json and text/event-stream");
    return;
  }
  if (!content_type_is_json(http_request_header(req, "content-type"))) {
    mcp_respond_error(c, 415, NULL, -32000,
                      "Unsupported Media Type: Content-Type must be application/json");
    return;
  }
  const char *version = http_request_header(req, "mcp-protocol-version");
  bool modern_header = version != NULL && strcmp(version, MCP_MODERN_VERSION) == 0;
  if (version != NULL && !version_supported(version) && !modern_header) {
    mcp_respond_unsupported_version(c, version);
    return;
  }
  if (!jsonrpc_depth_ok(req->body, req->body_len, JSONRPC_MAX_DEPTH)) {
    mcp_respond_error(c, 400, NULL, JSONRPC_PARSE_ERROR, "Parse error: JSON nested too deeply");
    return;
  }
  if (!jsonrpc_strings_ok(req->body, req->body_len)) {
    /* An id with U+0000 could not be echoed exactly, a value not stored as sent. */
    mcp_respond_error(c, 400, NULL, JSONRPC_INVALID_REQUEST,
                      "Invalid Request: strings containing U+0000 are not supported");
    return;
  }
  cJSON *root = cJSON_ParseWithLength(req->body, req->body_len);
  if (root == NULL) {
    mcp_respond_error(c, 400, NULL, JSONRPC_PARSE_ERROR, "Parse error: invalid JSON");
    return;
  }
  if (cJSON_IsArray(root) && cJSON_GetArraySize(root) > MCP_MAX_BATCH) {
    char why[64]; /* every answer of a batch is built before any is sent, on the loop */
    snprintf(why, sizeof(why), "Invalid Request: a batch holds at most %d messages", MCP_MAX_BATCH);
    mcp_respond_error(c, 400, NULL, JSONRPC_INVALID_REQUEST, why);
    cJSON_Delete(root);
    return;
  }
  mcp_exact_arguments(req, root);

  mcp_msg v = mcp_msg_of(root);
  bool batch = cJSON_IsArray(root);
  /* A batch's messages, each looked at once for every check below; else the one. */
  mcp_msg *msgs = &v;
  size_t n = 1;
  /* The request's duration is counted under its method (or its kind). */
  http_conn_set_label(c, batch                              ? STATS_M_BATCH
                         : v.method != NULL && v.id != NULL ? v.m
                                                            : STATS_M_NOTIFICATION);

  /* 2026-07-28: the body's envelope says so (or the header, for a notification). */
  const char *envelope = mcp_envelope_version(&v);
  if (envelope != NULL || modern_header) {
    mcp_post_modern(w, c, req, p, &v, envelope);
    goto done;
  }

  if (batch) {
    n = (size_t)cJSON_GetArraySize(root);
    msgs = mem_calloc(n > 0 ? n : 1, sizeof(*msgs));
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) msgs[i++] = mcp_msg_of(item);
  }
  bool has_init = false;
  for (size_t i = 0; i < n; i++) has_init |= msgs[i].m == STATS_M_INITIALIZE;

  if (!batch && v.kind == JSONRPC_INVALID) {
    bool unused_invalid = false, unused_pending = false;
    session_t *unused = NULL;
    cJSON *reply =
        mcp_message(w, p, NULL, &v, &unused, &unused_invalid, NULL, &unused_pending, false);
    worker_respond_json(c, 400, reply, NULL, 0);
    cJSON_Delete(reply);
    goto done;
  }

  /* Rights first: a request the principal may not make is refused whole, before any effect. */
  unsigned need = 0;
  for (size_t i = 0; i < n; i++) need |= mcp_required_right(&msgs[i]);
  if ((p->rights & need) != need) {
    auth_respond_forbidden(w, c, need & ~p->rights);
    goto done;
  }

  session_t *s = NULL;
  if (!has_init || batch) {
    s = mcp_require_session(w, c, req, p);
    if (s == NULL) goto done;
  }
  const char *over = mcp_over_limits(w, p, s, msgs, n, has_init && !batch);
  if (over != NULL) {
    limits_respond(w, c, over, 60);
    goto done;
  }
  if (s != NULL) {
    worker_session_touch(w, s);
  } else if (http_request_header(req, "mcp-session-id") != NULL) {
    mcp_respond_error(c, 400, v.id, JSONRPC_INVALID_REQUEST,
                      "Invalid Request: initialize must not carry an Mcp-Session-Id");
    goto done;
  }

  if (batch) {
    const char *batch_version = version != NULL ? version : s->protocol_version;
    if (strcmp(batch_version, "2025-03-26") != 0 || n == 0 || has_init) {
      mcp_respond_error(c, 400, NULL, JSONRPC_INVALID_REQUEST,
                        has_init ? "Invalid Request: initialize cannot be batched"
                                 : "Invalid Request: JSON-RPC batches need protocol 2025-03-26 "
                                   "and at least one message");
      goto done;
    }
    cJSON *replies = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
      bool invalid = false, pending = false;
      session_t *unused = NULL;
      cJSON *reply = mcp_message(w, p, s, &msgs[i], &unused, &invalid, NULL, &pending, false);
      if (reply != NULL) cJSON_AddItemToArray(replies, reply);
    }
    if (cJSON_GetArraySize(replies) == 0)
      http_respond(c, 202, NULL, 0, NULL, 0);
    else
      worker_respond_json(c, 200, replies, NULL, 0);
    cJSON_Delete(replies);
    goto done;
  }

  bool invalid = false, pending = false;
  session_t *created = NULL;
  cJSON *reply = mcp_message(w, p, s, &v, &created, &invalid, c, &pending, false);
  if (pending) {
    /* The handler holds the request and answers it later. */
  } else if (reply == NULL) {
    http_respond(c, 202, NULL, 0, NULL, 0);
  } else {
    mcp_respond_message(c, invalid ? 400 : 200, reply);
  }
  cJSON_Delete(reply);
done:
  if (msgs != &v) free(msgs);
  cJSON_Delete(root);
}

static void mcp_get(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p) {
  if (!accept_allows(http_request_header(req, "accept"), "text/event-stream")) {
    mcp_respond_error(c, 406, NULL, -32000, "Not Acceptable: Accept must allow text/event-stream");
    return;
  }
  const char *version = http_request_header(req, "mcp-protocol-version");
  if (version != NULL && !version_supported(version)) {
    mcp_respond_unsupported_version(c, version);
    return;
  }
  session_t *s = mcp_require_session(w, c, req, p);
  if (s == NULL) return;
  if (s->stream == NULL &&
      w->cfg->limit_streams > 0) { /* a new GET of the same session supersedes */
    int64_t open = 0;
    for (const session_t *o = w->sessions.streams; o != NULL; o = o->stream_next)
      open += strcmp(o->principal, p->id) == 0;
    if (open >= w->cfg->limit_streams) {
      limits_respond(w, c, "open streams per principal", 60);
      return;
    }
  }
  worker_session_touch(w, s);
  /* Opening the stream frees the request: keep the id. */
  const char *header = http_request_header(req, "last-event-id");
  char last_event_id[128];
  bool has_id = header != NULL && strlen(header) < sizeof(last_event_id);
  if (has_id) snprintf(last_event_id, sizeof(last_event_id), "%s", header);
  subs_stream_open(w, s, c, has_id ? last_event_id : NULL);
}

/* A DELETE answered once the row is gone: no worker can restore the session after the 204. */
static void mcp_delete_stored(int rc, void *data) {
  http_conn_t *c = data;
  if (rc == 0)
    http_respond(c, 204, NULL, 0, NULL, 0);
  else
    mcp_respond_error(c, 503, NULL, JSONRPC_INTERNAL_ERROR,
                      "the session ended here but its record could not be removed; retry");
}

static void mcp_delete(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p) {
  session_t *s = mcp_require_session(w, c, req, p);
  if (s == NULL) return;
  log_info("session deleted", "session", s->id);
  worker_session_end_then(w, s, mcp_delete_stored, c);
}

/*
 * Under a master, a request for a session minted by another live worker
 * slot belongs there (it holds the session's stream, ring and
 * subscriptions): the connection is handed back to the master, which
 * routes it by the id's slot. Not when this worker holds the session live
 * itself (it restored it while its slot's worker was down), and not for a
 * request the master already routed once (its slot's worker was down):
 * that one is served here, restoring the session from its row.
 */
static bool mcp_reroute(worker_t *w, http_conn_t *c, const http_request_t *req) {
  if (w->reroute == NULL || (http_conn_request_flags(c) & HTTP_ADOPT_REROUTED)) return false;
  const char *id = http_request_header(req, "mcp-session-id");
  size_t len = id != NULL ? strlen(id) : 0;
  if (id == NULL || !session_id_valid(id, len)) return false;
  unsigned slot = session_id_slot(id);
  if (slot == w->slot || slot >= w->n_slots) return false;
  if (session_registry_find(&w->sessions, id, len) != NULL) return false;
  return w->reroute(w, c);
}

void mcp_handle_http(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p) {
  if (mcp_reroute(w, c, req)) return;
  http_conn_set_label(c, req->method == HTTP_GET      ? STATS_M_STREAM
                         : req->method == HTTP_DELETE ? STATS_M_DELETE
                                                      : STATS_M_OTHER);
  switch (req->method) {
  case HTTP_POST: mcp_post(w, c, req, p); break;
  case HTTP_GET: mcp_get(w, c, req, p); break;
  case HTTP_DELETE: mcp_delete(w, c, req, p); break;
  default: worker_respond_not_allowed(c, "GET, POST, DELETE"); break;
  }
}
