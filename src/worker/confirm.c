/*
 * Confirmation of destructive tool calls (see confirm.h). A 2025 session's
 * confirmation in flight is a confirm_pending on its worker's list: the
 * held write, the call's answer (an SSE stream by now), the elicitation's
 * id and a timer. It ends exactly once: answered, timed out, cancelled,
 * the client gone, or the worker stopping. A 2026-07-28 confirmation holds
 * nothing between the two calls: the requestState names the call.
 */
#include "worker/confirm.h"

#include <stdio.h>
#include <string.h>

#include "common/auth_keys.h"
#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/session_id.h"
#include "worker/subscriptions.h"

#define CONFIRM_ID_PREFIX   "mcpsub-confirm-"
#define CONFIRM_MAX_PENDING 1024 /* per worker */
#define META_CLIENT_CAPS    "io.modelcontextprotocol/clientCapabilities"

struct confirm_pending {
  worker_t *w;
  char eid[64]; /* the elicitation's request id */
  confirm_write cw;
  uv_timer_t timer;
  confirm_pending *prev, *next;
};

/* The requested schema: one boolean the user must tick. */
static cJSON *confirm_elicit_params(const char *message, bool with_mode) {
  cJSON *params = cJSON_CreateObject();
  if (with_mode) cJSON_AddStringToObject(params, "mode", "form");
  cJSON_AddStringToObject(params, "message", message);
  cJSON *schema = cJSON_AddObjectToObject(params, "requestedSchema");
  cJSON_AddStringToObject(schema, "type", "object");
  cJSON *confirm =
      cJSON_AddObjectToObject(cJSON_AddObjectToObject(schema, "properties"), "confirm");
  cJSON_AddStringToObject(confirm, "type", "boolean");
  cJSON_AddStringToObject(confirm, "title", "Confirm");
  cJSON_AddStringToObject(confirm, "description", "Go ahead? Nothing changes unless this is set.");
  cJSON_AddFalseToObject(confirm, "default");
  cJSON_AddItemToArray(cJSON_AddArrayToObject(schema, "required"), cJSON_CreateString("confirm"));
  return params;
}

/* Is an elicitation result {action: "accept", content: {confirm: true}}? */
static bool confirm_accepted(const cJSON *result) {
  const cJSON *action = cJSON_GetObjectItemCaseSensitive(result, "action");
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(result, "content");
  return cJSON_IsString(action) && strcmp(action->valuestring, "accept") == 0 &&
         cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(content, "confirm"));
}

bool confirm_caps_form(const cJSON *caps) {
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(caps, "elicitation");
  if (!cJSON_IsObject(e)) return false;
  return cJSON_HasObjectItem(e, "form") || !cJSON_HasObjectItem(e, "url");
}

static cJSON *confirm_drop(const confirm_write *cw, const char *text) {
  if (cw->job != NULL) cw->discard(cw->job);
  return tools_result_text(text, true);
}

/* 2025 sessions ----------------------------------------------------------------- */

static void pending_on_timer_closed(uv_handle_t *h) {
  free(h->data);
}

/* Takes p off the list and stops its timer and close callback; freed once the timer closed. */
static void pending_unlink(confirm_pending *p) {
  worker_t *w = p->w;
  if (p->prev != NULL)
    p->prev->next = p->next;
  else
    w->confirms = p->next;
  if (p->next != NULL) p->next->prev = p->prev;
  w->n_confirms--;
  subs_update_active(w);
  if (p->cw.reply->conn != NULL) http_conn_set_close_cb(p->cw.reply->conn, NULL, NULL);
  uv_close((uv_handle_t *)&p->timer, pending_on_timer_closed);
}

/* Ends p with a tool error (nothing changed). */
static void pending_refuse(confirm_pending *p, const char *text) {
  pending_unlink(p);
  mcp_reply_send(p->cw.reply, tools_result_text(text, true), 0, NULL);
  p->cw.discard(p->cw.job);
}

static void pending_timed_out(void *arg) {
  confirm_pending *p = arg;
  log_info("confirmation timed out", "session", p->cw.reply->session);
  pending_refuse(p, "no answer from the user in time: nothing changed");
}

static void pending_on_timeout(uv_timer_t *h) {
  confirm_pending *p = h->data;
  if (!lane_try(&p->w->lane, pending_timed_out, p))
    uv_timer_start(h, pending_on_timeout, LANE_RETRY_MS, 0); /* after the lane's job */
}

/* The client closed the call's connection: nobody waits for the answer. */
static void pending_on_close(http_conn_t *c, void *data) {
  confirm_pending *p = data;
  p->cw.reply->conn = NULL;
  pending_unlink(p);
  p->cw.discard(p->cw.job);
}

static cJSON *confirm_ask_session(mcp_call *call, const confirm_write *cw) {
  worker_t *w = call->w;
  if (w->n_confirms >= CONFIRM_MAX_PENDING)
    return confirm_drop(cw, "too many confirmations pending on this server; retry later");
  unsigned char random[16];
  if (session_id_random(random, sizeof(random)) != 0)
    return confirm_drop(cw, "cannot ask for a confirmation now (no randomness); nothing changed");
  confirm_pending *p = mem_calloc(1, sizeof(*p));
  p->w = w;
  int at = snprintf(p->eid, sizeof(p->eid), CONFIRM_ID_PREFIX "%02x-", w->slot & 0xffu);
  for (size_t i = 0; i < sizeof(random); i++)
    at += snprintf(p->eid + at, sizeof(p->eid) - (size_t)at, "%02x", random[i]);
  p->cw = *cw;
  p->cw.message = NULL; /* the caller's: sent below, not kept */
  p->next = w->confirms;
  if (w->confirms != NULL) w->confirms->prev = p;
  w->confirms = p;
  w->n_confirms++;
  subs_update_active(w);
  uv_timer_init(w->loop, &p->timer);
  p->timer.data = p;
  uv_timer_start(&p->timer, pending_on_timeout, w->cfg->confirm_timeout_ms, 0);
  http_conn_set_close_cb(cw->reply->conn, pending_on_close, p);

  /* The answer is a stream now: the question, then (later) the result. */
  mcp_reply_stream(cw->reply);
  bool with_mode = strcmp(call->session->protocol_version, "2025-11-25") >= 0;
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "jsonrpc", "2.0");
  cJSON_AddStringToObject(req, "id", p->eid);
  cJSON_AddStringToObject(req, "method", "elicitation/create");
  cJSON_AddItemToObject(req, "params", confirm_elicit_params(cw->message, with_mode));
  worker_sse_send(cw->reply->conn, req);
  cJSON_Delete(req);
  call->pending = true;
  return NULL;
}

static confirm_pending *pending_find(worker_t *w, const char *principal, const char *session,
                                     const char *eid) {
  for (confirm_pending *p = w->confirms; p != NULL; p = p->next)
    if (strcmp(p->eid, eid) == 0 && strcmp(p->cw.reply->principal, principal) == 0 &&
        strcmp(p->cw.reply->session, session) == 0)
      return p;
  return NULL;
}

/*
 * The id of an answer (a JSON-RPC response) when it can be one of the
 * confirmations' (their prefix, and short enough for an eid); else NULL.
 */
static const char *confirm_answer_id(const cJSON *msg) {
  const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "id"));
  if (id == NULL || strncmp(id, CONFIRM_ID_PREFIX, sizeof(CONFIRM_ID_PREFIX) - 1) != 0 ||
      strlen(id) >= sizeof(((confirm_pending *)NULL)->eid))
    return NULL;
  return id;
}

bool confirm_answer(worker_t *w, const char *principal, const char *session, const cJSON *msg) {
  const char *id = confirm_answer_id(msg);
  if (id == NULL) return false;
  confirm_pending *p = pending_find(w, principal, session, id);
  if (p == NULL) return false;
  const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
  if (result == NULL) {
    pending_refuse(p, "the client could not ask the user: nothing changed");
  } else if (!confirm_accepted(result)) {
    pending_refuse(p, "cancelled by the user: nothing changed");
  } else {
    pending_unlink(p);
    p->cw.submit(p->cw.job);
  }
  return true;
}

cJSON *confirm_answer_brief(const cJSON *msg) {
  const char *id = confirm_answer_id(msg);
  if (id == NULL) return NULL;
  cJSON *brief = cJSON_CreateObject();
  cJSON_AddStringToObject(brief, "id", id);
  const cJSON *result = cJSON_GetObjectItemCaseSensitive(msg, "result");
  if (result == NULL) {
    cJSON_AddObjectToObject(brief, "error");
  } else if (!confirm_accepted(result)) {
    cJSON_AddStringToObject(cJSON_AddObjectToObject(brief, "result"), "action", "decline");
  } else {
    cJSON *r = cJSON_AddObjectToObject(brief, "result");
    cJSON_AddStringToObject(r, "action", "accept");
    cJSON_AddTrueToObject(cJSON_AddObjectToObject(r, "content"), "confirm");
  }
  return brief;
}

bool confirm_cancel(worker_t *w, const char *principal, const char *session, const char *id_json) {
  for (confirm_pending *p = w->confirms; p != NULL; p = p->next) {
    if (!mcp_reply_matches(p->cw.reply, principal, session, id_json)) continue;
    http_conn_t *c = p->cw.reply->conn;
    pending_unlink(p);
    mcp_end_unanswered(c); /* cancelled: no answer, and nothing changed */
    p->cw.reply->conn = NULL;
    p->cw.discard(p->cw.job);
    return true;
  }
  return false;
}

void confirm_finish_all(worker_t *w) {
  while (w->confirms != NULL)
    pending_refuse(w->confirms, "the server is stopping: nothing changed; retry");
}

/* 2026-07-28 ------------------------------------------------------------------- */

/* The requestState of this call: hex SHA-256 of who, which tool, its arguments, the rows. */
static void confirm_state(const mcp_call *call, int64_t rows, char out[65]) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(call->params, "name");
  char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(call->params, "arguments"));
  buf_t b;
  buf_init(&b);
  buf_printf(&b, "%s\n%s\n%s\n%lld", call->principal->id,
             cJSON_IsString(name) ? name->valuestring : "", args != NULL ? args : "null",
             (long long)rows);
  cJSON_free(args);
  uint8_t digest[32];
  auth_sha256(b.data, b.len, digest);
  buf_finish(&b);
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

static cJSON *confirm_ask_modern(mcp_call *call, const confirm_write *cw, bool *go) {
  char state[65];
  confirm_state(call, cw->rows, state);
  const cJSON *given = cJSON_GetObjectItemCaseSensitive(call->params, "requestState");
  const cJSON *answer = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(call->params, "inputResponses"), "confirm");
  if (answer != NULL && cJSON_IsString(given) && strcmp(given->valuestring, state) == 0) {
    if (confirm_accepted(answer)) {
      *go = true;
      return NULL;
    }
    return confirm_drop(cw, "cancelled by the user: nothing changed");
  }
  /* First call, or the call changed since the question (arguments, rows): ask. */
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "resultType", "input_required");
  cJSON *ask = cJSON_AddObjectToObject(cJSON_AddObjectToObject(result, "inputRequests"), "confirm");
  cJSON_AddStringToObject(ask, "method", "elicitation/create");
  cJSON_AddItemToObject(ask, "params", confirm_elicit_params(cw->message, true));
  cJSON_AddStringToObject(result, "requestState", state);
  if (cw->job != NULL) cw->discard(cw->job);
  return result;
}

/* Policy -------------------------------------------------------------------------- */

cJSON *confirm_check(mcp_call *call, const confirm_write *cw, bool *go) {
  int policy = call->w->cfg->confirm_destructive;
  *go = false;
  if (policy == CONFIRM_NEVER) {
    *go = true;
    return NULL;
  }
  if (call->modern) {
    const cJSON *caps = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(call->params, "_meta"), META_CLIENT_CAPS);
    if (confirm_caps_form(caps)) return confirm_ask_modern(call, cw, go);
  } else if (call->session != NULL && call->session->elicit_form && cw->job != NULL) {
    return confirm_ask_session(call, cw);
  }
  if (policy == CONFIRM_ELICIT) {
    *go = true;
    return NULL;
  }
  return confirm_drop(cw, "this action needs the user's confirmation, and this client cannot ask "
                          "(it declared no form elicitation); the server is configured to refuse "
                          "then (--confirm-destructive=refuse): nothing changed");
}
