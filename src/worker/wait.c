/*
 * wait_and_read (see wait.h). A waiter is a subscription owner like a
 * session: each resource it waits on is a subscription in the index, made
 * with the audit position read before the versions were compared, so a
 * change landing between the comparison and the wait still wakes it. The
 * call's HTTP request is held open meanwhile; the waiter answers it when a
 * tailer batch brought a change, when its timer fires, or at shutdown, and
 * vanishes quietly if the client goes away first.
 */
#include "worker/wait.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "worker/subscriptions.h"

#define WAIT_DEFAULT_TIMEOUT_MS 30000

typedef struct wait_item {
  char *uri;
  char *key; /* its topic's key (the caller's row scope included) */
  uri_t parsed;
  char *since; /* sinceVersion, or NULL */
  sub_t *sub;
  bool changed;
} wait_item;

struct waiter {
  sub_owner owner; /* SUB_OWNER_WAITER */
  worker_t *w;
  waiter_t *prev, *next; /* the worker's pending waiters */
  waiter_t *ready_next;  /* on the worker's ready list */
  bool ready;
  bool completing; /* its answer is being read (the lane's job may wait for the database) */
  mcp_reply reply; /* with a progress token, the answer is an SSE stream */
  bool include_state;
  uv_timer_t timer;
  size_t n;
  wait_item items[];
};

const char wait_input_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"resources\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":100,\"items\":{\"type\":"
    "\"object\","
    "\"properties\":{\"uri\":{\"type\":\"string\"},\"sinceVersion\":{\"type\":\"string\","
    "\"description\":\"version last seen (from _meta.version of a read, or an earlier wait)\"}},"
    "\"required\":[\"uri\"]}},"
    "\"timeoutMs\":{\"type\":\"integer\",\"minimum\":0,\"description\":\"how long to wait for a "
    "change (capped by the server); 0 = do not wait\"},"
    "\"includeState\":{\"type\":\"boolean\",\"description\":\"include each changed resource's "
    "content\"}},\"required\":[\"resources\"]}";

/* Current version (and, if state is not NULL, content) of a resolved URI. */
static int resource_version(worker_t *w, const uri_t *u, int64_t *version, cJSON **state) {
  const store_table *t = subs_find_table(w, u->table);
  if (t == NULL) return -ENOENT;
  if (u->kind == URI_RECORD) {
    cJSON *row = NULL;
    int rc = store_get_record(w->store, t, u->key, &row, version);
    if (rc == 0 && u->n_filters > 0 && !sub_filters_match(u, row)) {
      cJSON_Delete(row); /* outside the caller's row scope: as if absent */
      row = NULL;
      rc = -ENOENT;
    }
    if (rc == -ENOENT) {
      *version = 0; /* absent */
      row = cJSON_CreateNull();
      rc = 0;
    }
    if (state != NULL)
      *state = row;
    else
      cJSON_Delete(row);
    return rc;
  }
  int rc = store_table_version(w->store, t, version);
  if (rc != 0 || state == NULL) return rc;
  char *next = NULL;
  const char *bad_column = NULL; /* none: subs_resolve checked the columns */
  rc = resources_query(w->store, t, u, w->cfg->page_size, NULL, state, &next, &bad_column);
  free(next);
  return rc;
}

/* {uri, version[, state]} */
static cJSON *result_row(worker_t *w, const char *uri, const uri_t *u, bool include_state) {
  int64_t version = 0;
  cJSON *state = NULL;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddStringToObject(row, "uri", uri);
  if (resource_version(w, u, &version, include_state ? &state : NULL) != 0) {
    cJSON_AddStringToObject(row, "error", "cannot read the resource");
    return row;
  }
  char text[32];
  snprintf(text, sizeof(text), "%lld", (long long)version);
  cJSON_AddStringToObject(row, "version", text);
  if (state != NULL) cJSON_AddItemToObject(row, "state", state);
  return row;
}

static cJSON *wait_result(cJSON *rows, bool timed_out) {
  cJSON *out = cJSON_CreateObject();
  cJSON_AddItemToObject(out, "resources", rows);
  cJSON_AddBoolToObject(out, "timedOut", timed_out);
  return tools_result_json(out);
}

static void free_items(wait_item *items, size_t n);

static void waiter_on_timer_closed(uv_handle_t *h) {
  waiter_t *wt = h->data;
  free_items(wt->items, wt->n);
  mcp_reply_finish(&wt->reply);
  free(wt);
}

void wait_heartbeat(worker_t *w) {
  for (waiter_t *wt = w->waiters; wt != NULL; wt = wt->next) {
    /* Below 1 while nothing changed: a heartbeat, not a resource. */
    double next = wt->reply.progress + (1 - wt->reply.progress) / 2;
    mcp_reply_progress(&wt->reply, next, (double)wt->n, "waiting for a change");
  }
}

/* Leaves the index and the worker's lists; frees once the timer closed. */
static void waiter_destroy(waiter_t *wt) {
  worker_t *w = wt->w;
  subs_turn_settle(w); /* a held topic's subscribers stay as they were (subscriptions.c) */
  for (size_t i = 0; i < wt->n; i++) {
    if (wt->items[i].sub != NULL) sub_index_remove(&w->subs, wt->items[i].sub);
    wt->items[i].sub = NULL;
  }
  if (wt->prev != NULL)
    wt->prev->next = wt->next;
  else
    w->waiters = wt->next;
  if (wt->next != NULL) wt->next->prev = wt->prev;
  w->n_waiters--;
  if (wt->ready) {
    waiter_t **p = &w->waiters_ready;
    while (*p != wt) p = &(*p)->ready_next;
    *p = wt->ready_next;
  }
  if (wt->reply.conn != NULL) http_conn_set_close_cb(wt->reply.conn, NULL, NULL);
  uv_close((uv_handle_t *)&wt->timer, waiter_on_timer_closed);
  subs_update_active(w);
}

static void waiter_complete(waiter_t *wt, bool timed_out) {
  worker_t *w = wt->w;
  wt->completing = true;
  uv_timer_stop(&wt->timer);
  cJSON *rows = cJSON_CreateArray();
  for (size_t i = 0; i < wt->n; i++) {
    if (wt->items[i].changed)
      cJSON_AddItemToArray(
          rows, result_row(w, wt->items[i].uri, &wt->items[i].parsed, wt->include_state));
  }
  size_t changed = (size_t)cJSON_GetArraySize(rows);
  if (changed > 0) {
    char text[64];
    snprintf(text, sizeof(text), "%zu of %zu resources changed", changed, wt->n);
    mcp_reply_progress(&wt->reply, (double)changed, (double)wt->n, text);
  }
  mcp_reply reply = wt->reply; /* the waiter goes (freed later); the answer is still to send */
  waiter_destroy(wt);
  memset(&wt->reply, 0, sizeof(wt->reply));
  mcp_reply_send(&reply, wait_result(rows, timed_out), 0, NULL);
}

static void waiter_timed_out(void *arg) {
  waiter_complete(arg, true);
}

static void waiter_on_timeout(uv_timer_t *h) {
  waiter_t *wt = h->data;
  if (!lane_try(&wt->w->lane, waiter_timed_out, wt))
    uv_timer_start(h, waiter_on_timeout, LANE_RETRY_MS, 0); /* after the lane's job */
}

/* The client went away: nothing to answer (a completion under way finishes without it). */
static void waiter_on_close(http_conn_t *c, void *data) {
  waiter_t *wt = data;
  wt->reply.conn = NULL;
  if (!wt->completing) waiter_destroy(wt);
}

bool wait_cancel(worker_t *w, const char *principal, const char *session, const char *id_json) {
  for (waiter_t *wt = w->waiters; wt != NULL; wt = wt->next) {
    if (!mcp_reply_matches(&wt->reply, principal, session, id_json)) continue;
    http_conn_t *c = wt->reply.conn;
    waiter_destroy(wt);
    mcp_end_unanswered(c);
    return true;
  }
  return false;
}

void wait_on_match(worker_t *w, sub_t *sub) {
  waiter_t *wt = (waiter_t *)sub->owner;
  for (size_t i = 0; i < wt->n; i++) {
    if (wt->items[i].sub == sub) wt->items[i].changed = true;
  }
  if (!wt->ready) {
    wt->ready = true;
    wt->ready_next = w->waiters_ready;
    w->waiters_ready = wt;
  }
}

void wait_flush(worker_t *w) {
  while (w->waiters_ready != NULL) waiter_complete(w->waiters_ready, false);
}

void wait_finish_all(worker_t *w) {
  while (w->waiters != NULL) waiter_complete(w->waiters, true);
}

/* Reads arguments.resources into items (uri, parsed, since). -32602 on failure. */
static int parse_items(mcp_call *call, const cJSON *resources, wait_item *items, size_t *n) {
  const cJSON *r;
  *n = 0;
  cJSON_ArrayForEach(r, resources) {
    const cJSON *uri = cJSON_GetObjectItemCaseSensitive(r, "uri");
    const cJSON *since = cJSON_GetObjectItemCaseSensitive(r, "sinceVersion");
    if (!cJSON_IsString(uri) || (since != NULL && !cJSON_IsString(since) && !cJSON_IsNull(since))) {
      mcp_call_fail(
          call, JSONRPC_INVALID_PARAMS,
          "wait_and_read: each resource needs a string uri and an optional string sinceVersion");
      return -EINVAL;
    }
    wait_item *it = &items[*n];
    if (subs_resolve_for(call->w, call->principal, uri->valuestring, AUTH_READ, &it->parsed,
                         &it->key) != 0) {
      const char *why = subs_resolve_error();
      mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                    "wait_and_read: not a record or collection URI: %.400s%s%s%s", uri->valuestring,
                    why[0] ? " (" : "", why, why[0] ? ")" : "");
      return -EINVAL;
    }
    it->uri = mem_strdup(uri->valuestring);
    it->since = cJSON_IsString(since) ? mem_strdup(since->valuestring) : NULL;
    (*n)++;
  }
  return 0;
}

static void free_items(wait_item *items, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(items[i].uri);
    free(items[i].key);
    free(items[i].since);
    uri_finish(&items[i].parsed);
  }
}

cJSON *wait_tool(mcp_call *call, const cJSON *args) {
  worker_t *w = call->w;
  const cJSON *resources = cJSON_GetObjectItemCaseSensitive(args, "resources");
  const cJSON *timeout = cJSON_GetObjectItemCaseSensitive(args, "timeoutMs");
  const cJSON *include = cJSON_GetObjectItemCaseSensitive(args, "includeState");
  int count = cJSON_GetArraySize(resources);
  if (!cJSON_IsArray(resources) || count < 1 || count > WAIT_MAX_RESOURCES ||
      (timeout != NULL && (!cJSON_IsNumber(timeout) || timeout->valuedouble < 0 ||
                           timeout->valuedouble != floor(timeout->valuedouble))) ||
      (include != NULL && !cJSON_IsBool(include)))
    return mcp_call_fail(
        call, JSONRPC_INVALID_PARAMS,
        "wait_and_read requires resources (1 to %d of {uri, sinceVersion}), an optional "
        "integer timeoutMs >= 0 and an optional boolean includeState",
        WAIT_MAX_RESOURCES);
  /* Held to --max-wait as a double: a number past uint64_t's range has no conversion. */
  double want = timeout != NULL ? timeout->valuedouble : (double)WAIT_DEFAULT_TIMEOUT_MS;
  uint64_t timeout_ms = want >= (double)w->cfg->max_wait_ms ? w->cfg->max_wait_ms : (uint64_t)want;
  bool include_state = cJSON_IsTrue(include);

  waiter_t *wt = mem_calloc(1, sizeof(*wt) + (size_t)count * sizeof(wait_item));
  if (parse_items(call, resources, wt->items, &wt->n) != 0) {
    free_items(wt->items, wt->n);
    free(wt);
    return NULL;
  }
  /* The position first, then the versions: a change in between shows in both. */
  int64_t since_seq = 0;
  if (store_audit_max_seq(w->store, &since_seq) != 0) {
    free_items(wt->items, wt->n);
    free(wt);
    return mcp_call_fail(call, JSONRPC_INTERNAL_ERROR, "database unavailable");
  }
  bool any = false;
  for (size_t i = 0; i < wt->n; i++) {
    wait_item *it = &wt->items[i];
    int64_t version = 0;
    char text[32];
    if (resource_version(w, &it->parsed, &version, NULL) != 0) continue;
    snprintf(text, sizeof(text), "%lld", (long long)version);
    it->changed = it->since == NULL || strcmp(it->since, text) != 0;
    any |= it->changed;
  }
  if (any || timeout_ms == 0 || call->conn == NULL) {
    cJSON *rows = cJSON_CreateArray();
    for (size_t i = 0; i < wt->n; i++) {
      if (wt->items[i].changed)
        cJSON_AddItemToArray(rows,
                             result_row(w, wt->items[i].uri, &wt->items[i].parsed, include_state));
    }
    free_items(wt->items, wt->n);
    free(wt);
    return wait_result(rows, !any);
  }

  wt->owner.kind = SUB_OWNER_WAITER;
  wt->w = w;
  mcp_reply_init(&wt->reply, call);
  wt->include_state = include_state;
  subs_turn_settle(w); /* a held topic's subscribers stay as they were (subscriptions.c) */
  for (size_t i = 0; i < wt->n; i++)
    wt->items[i].sub = sub_index_add(&w->subs, wt->items[i].key, wt->items[i].uri,
                                     &wt->items[i].parsed, &wt->owner, since_seq);
  wt->next = w->waiters;
  if (w->waiters != NULL) w->waiters->prev = wt;
  w->waiters = wt;
  w->n_waiters++;
  uv_timer_init(w->loop, &wt->timer);
  wt->timer.data = wt;
  uv_timer_start(&wt->timer, waiter_on_timeout, timeout_ms, 0);
  http_conn_set_close_cb(call->conn, waiter_on_close, wt);
  /* With a progress token the answer is an SSE stream: progress while it waits, then the result. */
  mcp_reply_progress(&wt->reply, 0, (double)wt->n, "waiting for a change");
  subs_update_active(w);
  call->pending = true;
  return NULL;
}
