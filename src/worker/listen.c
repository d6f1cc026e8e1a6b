/*
 * subscriptions/listen streams (see listen.h).
 */
#include "worker/listen.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "worker/mcp.h"
#include "worker/subscriptions.h"
#include "worker/worker.h"

#define META_SUBSCRIPTION_ID "io.modelcontextprotocol/subscriptionId"
#define META_AFTER           "io.mcpsub/after"

static void listen_write(listen_stream *l, const char *data, size_t len) {
  if (l->conn != NULL && http_stream_write(l->conn, data, len) != 0) {
    /* Cut (its queue passed --max-stream-queue) or closing: the close callback frees it. */
  }
}

/* Writes "data: " + json + the subscription id + tail + "\n\n" (json ends inside _meta). */
static void listen_write_event(listen_stream *l, const char *head, size_t head_len,
                               const char *tail) {
  listen_write(l, head, head_len);
  listen_write(l, l->id_json, l->id_len);
  listen_write(l, tail, strlen(tail));
}

void listen_append_id_key(buf_t *b) {
  buf_append_str(b, ",\"" META_SUBSCRIPTION_ID "\":");
}

void listen_deliver(listen_stream *l, const char *head, size_t head_len) {
  listen_write_event(l, head, head_len, "}}}\n\n");
  l->w->sessions.frames_sent++;
}

/* Appends to run one event of the stream: head, its id, the event's end. */
static void run_append(const listen_stream *l, buf_t *run, const char *head, size_t len) {
  static const char tail[] = "}}}\n\n";
  buf_reserve(run, len + l->id_len + sizeof(tail) - 1);
  char *p = run->data + run->len;
  memcpy(p, head, len);
  memcpy(p + len, l->id_json, l->id_len);
  memcpy(p + len + l->id_len, tail, sizeof(tail) - 1);
  run->len += len + l->id_len + sizeof(tail) - 1;
}

/* Hands the n events put together in run to the socket. */
static void run_send(listen_stream *l, const buf_t *run, size_t n) {
  if (http_stream_takes(l->conn, run->len))
    http_stream_send(l->conn, run->data, run->len);
  else /* cut at its bound (or gone, or closing): as the events one by one would be */
    listen_write(l, run->data, run->len);
  l->w->sessions.frames_sent += n;
}

void listen_deliver_run(listen_stream *l, buf_t *run, const char *heads, const size_t *ends,
                        size_t from, size_t n) {
  buf_reset(run);
  for (size_t i = from; i < n; i++) {
    size_t start = i == 0 ? 0 : ends[i - 1];
    run_append(l, run, heads + start, ends[i] - start);
  }
  run_send(l, run, n - from);
}

void listen_deliver_spans(listen_stream *l, buf_t *run, const char *heads, const listen_span *spans,
                          const uint32_t *pos, size_t m) {
  buf_reset(run);
  for (size_t i = 0; i < m; i++) run_append(l, run, heads + spans[pos[i]].at, spans[pos[i]].len);
  run_send(l, run, m);
}

/* Unsubscribes everything and unlinks the stream; its connection is closing or closed. */
static void listen_free(listen_stream *l) {
  worker_t *w = l->w;
  subs_owner_drop(w, &l->subs, &l->n_subs);
  hold_clear(w, &l->held);
  if (l->prev != NULL)
    l->prev->next = l->next;
  else
    w->listens = l->next;
  if (l->next != NULL) l->next->prev = l->prev;
  w->n_listens--;
  subs_update_active(w);
  free(l);
}

static void listen_on_close(http_conn_t *c, void *data) {
  listen_stream *l = data;
  l->conn = NULL;
  if (!l->recovering) listen_free(l); /* else once the recovery returns */
}

/* Ends the stream: flushes what is queued, then closes (the close callback frees it). */
static void listen_close(listen_stream *l) {
  http_stream_end(l->conn);
}

/* The filter's boolean member name, when true. */
static bool flag_set(const cJSON *filter, const char *name) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(filter, name));
}

/* Is uri already among the stream's subscriptions (a URI listed twice is honoured once)? */
static bool listen_has(const listen_stream *l, const char *uri) {
  for (const sub_t *sub = l->subs; sub != NULL; sub = sub->owner_next)
    if (strcmp(sub->topic->uri, uri) == 0) return true;
  return false;
}

/* Counts the principal's open streams on this worker: GET streams and listen streams. */
static int64_t listen_streams_of(const worker_t *w, const char *principal) {
  int64_t n = 0;
  for (const session_t *s = w->sessions.streams; s != NULL; s = s->stream_next)
    n += strcmp(s->principal, principal) == 0;
  for (const listen_stream *l = w->listens; l != NULL; l = l->next)
    n += strcmp(l->principal, principal) == 0;
  return n;
}

size_t listen_subscriptions_of(const worker_t *w, const char *principal) {
  size_t n = 0;
  for (const listen_stream *l = w->listens; l != NULL; l = l->next)
    if (strcmp(l->principal, principal) == 0) n += l->n_subs;
  return n;
}

/* A position as this server writes it (buf_parse_uint), within a long long. */
static bool listen_position(const char *text, long long *out) {
  uint64_t v;
  if (!buf_parse_uint(text, strlen(text), LLONG_MAX, &v)) return false;
  *out = (long long)v;
  return true;
}

cJSON *listen_open(mcp_call *call) {
  worker_t *w = call->w;
  const config_t *cfg = w->cfg;
  if (call->conn == NULL)
    return mcp_call_fail(call, JSONRPC_INVALID_REQUEST, "subscriptions/listen cannot be batched");
  const cJSON *filter = cJSON_GetObjectItemCaseSensitive(call->params, "notifications");
  if (!cJSON_IsObject(filter))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "subscriptions/listen requires params.notifications (an object)");
  const cJSON *uris = cJSON_GetObjectItemCaseSensitive(filter, "resourceSubscriptions");
  if (uris != NULL && !cJSON_IsArray(uris))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "notifications.resourceSubscriptions must be an array of URIs");
  if (cJSON_GetArraySize(uris) > (int)cfg->max_subscriptions)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "too many resourceSubscriptions: at most %zu per listen",
                         cfg->max_subscriptions);
  const cJSON *item;
  cJSON_ArrayForEach(item, uris) {
    if (!cJSON_IsString(item))
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                           "notifications.resourceSubscriptions must hold strings");
    /*
     * A URI that does not parse is an error, with its reason, as for
     * resources/subscribe; one that parses but cannot be subscribed to (no
     * such table or column, not ours, not for this principal) is left out
     * of the acknowledgement.
     */
    uri_t u;
    int rc = uri_parse(cfg->public_url, item->valuestring, &u);
    if (rc == -EINVAL)
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                           "notifications.resourceSubscriptions: %.400s is not a valid URI%s%s%s",
                           item->valuestring, uri_error()[0] ? " (" : "", uri_error(),
                           uri_error()[0] ? ")" : "");
    if (rc == 0) uri_finish(&u);
  }
  debounce_t debounce;
  char why[160];
  if (debounce_parse(debounce_in(call->params), &debounce, why, sizeof(why)) != 0)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "%s", why);
  char *id_text = jsonrpc_print_text(call->id);
  if (id_text == NULL) abort(); /* an item that does not print: a bug here */
  size_t id_len = strlen(id_text);
  if (id_len > LISTEN_ID_MAX) {
    free(id_text);
    return mcp_call_fail(call, JSONRPC_INVALID_REQUEST, "request id longer than %d bytes",
                         LISTEN_ID_MAX);
  }
  /* Where the stream starts, and where a recovery from the client's position ends. */
  const cJSON *after = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(call->params, "_meta"), META_AFTER);
  long long after_seq = -1;
  if (after != NULL &&
      (!cJSON_IsString(after) || !listen_position(after->valuestring, &after_seq))) {
    free(id_text);
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "_meta." META_AFTER " must be a position this server gave (a string)");
  }
  /*
   * The stream's position: changes after it are sent live. A fresh listen
   * starts at the newest commit (as resources/subscribe: what is committed
   * is read, not notified); a recovering one where delivery stands, the
   * gap from the client's position to there being sent from the audit log.
   */
  int64_t since = 0;
  if (after_seq >= 0) {
    since = subs_delivered_position(w);
  } else if (store_audit_max_seq(w->store, &since) != 0) {
    free(id_text);
    return mcp_call_fail(call, JSONRPC_INTERNAL_ERROR, "database unavailable");
  }
  if (w->n_listens >= cfg->max_sessions ||
      (cfg->limit_streams > 0 && listen_streams_of(w, call->principal->id) >= cfg->limit_streams)) {
    free(id_text);
    return mcp_call_fail(call, -32000,
                         "too many open streams (listen streams are bounded per "
                         "principal by --limit-streams, in all by --max-sessions)");
  }

  listen_stream *l = mem_calloc(1, sizeof(*l));
  l->owner.kind = SUB_OWNER_LISTEN;
  l->w = w;
  memcpy(l->id_json, id_text, id_len + 1);
  l->id_len = id_len;
  free(id_text);
  snprintf(l->principal, sizeof(l->principal), "%s", call->principal->id);
  memcpy(l->credential, call->principal->credential, sizeof(l->credential));
  l->credential_expires_ms = call->principal->expires_ms;
  /* Only the resource list ever changes here (a tool takes its table as an argument): tools
   * and prompts list changes are not announced, so not honoured. */
  if (flag_set(filter, "resourcesListChanged")) l->lists |= LISTEN_RESOURCES_LIST;

  /* The filter as honoured: subscribable URIs (each once) and the lists mcpsub announces. */
  cJSON *honoured = cJSON_CreateObject();
  cJSON *kept = cJSON_AddArrayToObject(honoured, "resourceSubscriptions");
  cJSON_ArrayForEach(item, uris) {
    uri_t u;
    char *key;
    if (listen_has(l, item->valuestring) ||
        subs_resolve_for(w, call->principal, item->valuestring, AUTH_SUBSCRIBE, &u, &key) != 0)
      continue;
    /* Recovering: the audit log covers what came after the client's position, up to since. */
    (void)subs_owner_add(w, &l->owner, &l->subs, &l->n_subs, key, item->valuestring, &u,
                         after_seq >= 0 ? (int64_t)after_seq : since, &debounce);
    cJSON_AddItemToArray(kept, cJSON_CreateString(item->valuestring));
    uri_finish(&u);
    free(key);
  }
  if (l->lists & LISTEN_RESOURCES_LIST) cJSON_AddTrueToObject(honoured, "resourcesListChanged");

  /* The stream: the POST's answer from here on. */
  l->conn = call->conn;
  http_stream_begin_sse(l->conn);
  l->next = w->listens;
  if (w->listens != NULL) w->listens->prev = l;
  w->listens = l;
  w->n_listens++;
  http_conn_set_close_cb(l->conn, listen_on_close, l);

  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/"
                     "acknowledged\",\"params\":{\"notifications\":");
  if (jsonrpc_print(&b, honoured) < 0) abort(); /* an item that does not print: a bug here */
  cJSON_Delete(honoured);
  /* What the stream delivers from here: after since, and never what the client already had. */
  buf_printf(&b, ",\"_meta\":{\"" LISTEN_META_POSITION "\":\"%lld\",\"" META_SUBSCRIPTION_ID "\":",
             (long long)(after_seq > since ? after_seq : since));
  listen_write_event(l, b.data, b.len, "}}}\n\n");
  buf_finish(&b);
  /* Nothing before the acknowledgement; then what the client missed, then live updates. */
  if (after_seq >= 0) {
    /* The recovery is bounded (SUBS_RECOVER_MAX updates): let it all through, as a resumption. */
    http_stream_exempt(l->conn, true);
    l->recovering = true;
    subs_listen_recover(w, l, after_seq); /* may wait for the database (lane.h) */
    l->recovering = false;
    if (l->conn == NULL) {
      listen_free(l); /* the client left meanwhile: its connection is gone, nothing to answer */
      call->pending = true;
      return NULL;
    }
    http_stream_exempt(l->conn, false);
  }
  subs_update_active(w);
  call->pending = true; /* answered: the stream is the answer */
  return NULL;
}

void listen_lists_changed(worker_t *w, unsigned what) {
  static const struct {
    unsigned bit;
    const char *head;
  } kinds[] = {
      {LISTEN_RESOURCES_LIST,
       "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/"
       "list_changed\",\"params\":{\"_meta\":{\"" META_SUBSCRIPTION_ID "\":"},
  };
  subs_turn_settle(w); /* after the updates before it */
  for (listen_stream *l = w->listens; l != NULL; l = l->next)
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
      if ((what & kinds[i].bit) && (l->lists & kinds[i].bit))
        listen_write_event(l, kinds[i].head, strlen(kinds[i].head), "}}}\n\n");
}

void listen_keepalive(worker_t *w) {
  for (listen_stream *l = w->listens; l != NULL; l = l->next)
    listen_write(l, ": keepalive\n\n", 13);
}

/*
 * Ends the stream with the listen request's result
 * {"jsonrpc":"2.0","id":ID,"result":{..."_meta":{"...subscriptionId":ID}}}: the
 * server ended it on purpose (a drain, a credential that no longer works).
 */
static void listen_end(listen_stream *l) {
  static const char head[] = "data: {\"jsonrpc\":\"2.0\",\"id\":";
  static const char result[] =
      ",\"result\":{\"resultType\":\"complete\",\"_meta\":{\"" META_SUBSCRIPTION_ID "\":";
  subs_turn_settle(l->w); /* the updates before it go first */
  listen_write(l, head, sizeof(head) - 1);
  listen_write(l, l->id_json, l->id_len);
  listen_write_event(l, result, sizeof(result) - 1, "}}}\n\n");
  listen_close(l);
}

void listen_end_all(worker_t *w) {
  for (listen_stream *l = w->listens, *next; l != NULL; l = next) {
    next = l->next;
    listen_end(l);
  }
}

void listen_close_all(worker_t *w) {
  while (w->listens != NULL) {
    listen_stream *l = w->listens;
    http_conn_set_close_cb(l->conn, NULL, NULL);
    http_stream_end(l->conn);
    listen_free(l);
  }
}

void listen_check_credentials(worker_t *w, int64_t now_ms) {
  for (listen_stream *l = w->listens, *next; l != NULL; l = next) {
    next = l->next;
    auth_principal p = {.expires_ms = l->credential_expires_ms};
    snprintf(p.id, sizeof(p.id), "%s", l->principal);
    memcpy(p.credential, l->credential, sizeof(p.credential));
    if (!auth_still_valid(&w->auth, &p, now_ms)) {
      log_info("listen stream ended: its credential no longer works", "principal", l->principal);
      listen_end(l);
    }
  }
}

bool listen_cancel(worker_t *w, const char *principal, const char *id_json) {
  for (listen_stream *l = w->listens; l != NULL; l = l->next) {
    if (strcmp(l->principal, principal) == 0 && strcmp(l->id_json, id_json) == 0) {
      listen_close(l); /* nothing more is sent on it */
      return true;
    }
  }
  return false;
}
