/*
 * A worker's answers to control requests (see worker_ctl.h). Cold path:
 * each request walks the live sessions or the subscription topics once;
 * nothing is cached and nothing here runs on a request's or a change's hot
 * path.
 */
#include "worker/worker_ctl.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/mem.h"
#include "common/session_id.h"
#include "common/store.h"

static cJSON *ctl_session_json(worker_t *w, const session_t *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", s->id);
  cJSON_AddNumberToObject(o, "worker", w->slot);
  cJSON_AddTrueToObject(o, "live");
  cJSON_AddStringToObject(o, "protocolVersion", s->protocol_version);
  cJSON_AddStringToObject(o, "principal", s->principal);
  cJSON_AddNumberToObject(o, "createdMs", (double)s->created_ms);
  cJSON_AddNumberToObject(o, "lastSeenMs", (double)s->last_seen_ms);
  cJSON_AddBoolToObject(o, "stream", s->stream != NULL);
  cJSON *subs = cJSON_AddArrayToObject(o, "subscriptions");
  for (const sub_t *sub = s->subs; sub != NULL; sub = sub->owner_next)
    cJSON_AddItemToArray(subs, cJSON_CreateString(sub->topic->uri));
  cJSON_AddNumberToObject(o, "ring", s->ring_count);
  cJSON_AddNumberToObject(o, "undelivered", s->undelivered);
  return o;
}

/* The durable record of a session no worker holds live, in the same shape. */
static cJSON *ctl_session_row_json(const store_session *row) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", row->id);
  cJSON_AddNullToObject(o, "worker");
  cJSON_AddFalseToObject(o, "live");
  cJSON_AddStringToObject(o, "protocolVersion", row->protocol_version);
  cJSON_AddStringToObject(o, "principal", row->principal != NULL ? row->principal : "anonymous");
  cJSON_AddNumberToObject(o, "createdMs", (double)row->created_at);
  cJSON_AddNumberToObject(o, "lastSeenMs", (double)row->last_seen);
  cJSON_AddFalseToObject(o, "stream");
  cJSON *subs = cJSON_Parse(row->subscriptions != NULL ? row->subscriptions : "[]");
  if (!cJSON_IsArray(subs)) {
    cJSON_Delete(subs);
    subs = cJSON_CreateArray();
  }
  cJSON_AddItemToObject(o, "subscriptions", subs);
  cJSON_AddNumberToObject(o, "ring", 0);
  cJSON_AddNumberToObject(o, "undelivered", 0);
  return o;
}

typedef struct ctl_list_ctx {
  worker_t *w;
  cJSON *list;
} ctl_list_ctx;

static void ctl_add_session(session_t *s, void *data) {
  ctl_list_ctx *ctx = data;
  cJSON_AddItemToArray(ctx->list, ctl_session_json(ctx->w, s));
}

static cJSON *ctl_sessions(worker_t *w) {
  cJSON *out = cJSON_CreateObject();
  ctl_list_ctx ctx = {w, cJSON_AddArrayToObject(out, "sessions")};
  session_registry_foreach(&w->sessions, ctl_add_session, &ctx);
  return out;
}

/* The session named by req's "id", live here, or NULL. */
static session_t *ctl_find(worker_t *w, const cJSON *req, const char **id) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(req, "id");
  *id = cJSON_IsString(item) ? item->valuestring : NULL;
  if (*id == NULL) return NULL;
  return session_registry_find(&w->sessions, *id, strlen(*id));
}

static cJSON *ctl_session(worker_t *w, const cJSON *req) {
  const char *id;
  session_t *s = ctl_find(w, req, &id);
  cJSON *out = cJSON_CreateObject();
  if (s != NULL) {
    cJSON_AddItemToObject(out, "session", ctl_session_json(w, s));
  } else if (id != NULL && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "durable")) &&
             session_id_valid(id, strlen(id))) {
    store_session row;
    if (store_session_load(w->store, id, &row) == 0) {
      cJSON_AddItemToObject(out, "session", ctl_session_row_json(&row));
      store_session_finish(&row);
    }
  }
  return out;
}

static cJSON *ctl_evict(worker_t *w, const cJSON *req) {
  const char *id;
  session_t *s = ctl_find(w, req, &id);
  bool evicted = false;
  if (s != NULL) {
    log_info("session evicted", "session", s->id);
    worker_session_end(w, s);
    evicted = true;
  } else if (id != NULL && session_id_valid(id, strlen(id))) {
    /* Not live here: its row alone would let a client bring it back. */
    evicted = store_session_delete(w->store, id) == 0;
    if (evicted) log_info("session evicted (row only)", "session", id);
  }
  cJSON *out = cJSON_CreateObject();
  cJSON_AddBoolToObject(out, "evicted", evicted);
  return out;
}

typedef struct ctl_subs_ctx {
  const char *only; /* a URI, or NULL for all */
  cJSON *list;
} ctl_subs_ctx;

static void ctl_add_topic(const char *key, size_t len, void *value, void *data) {
  ctl_subs_ctx *ctx = data;
  const sub_topic *t = value;
  if (t->n_session_subs == 0) return; /* only wait_and_read calls */
  if (ctx->only != NULL && strcmp(ctx->only, t->uri) != 0) return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "uri", t->uri);
  cJSON_AddNumberToObject(o, "sessions", (double)t->n_session_subs);
  cJSON_AddNumberToObject(o, "notified", (double)t->notified);
  cJSON_AddItemToArray(ctx->list, o);
}

/*
 * {"cmd":"subs","busiest":N}: the N topics with the most updates since the
 * last such request (mcpsubctl top's view), then the most sessions. One walk
 * that allocates nothing per URI, so that a live view costs the worker
 * little however many URIs it holds; listing them all (ctl_add_topic) is
 * for the operator's explicit `subs`.
 */
typedef struct ctl_busy {
  const sub_topic *topic;
  uint64_t recent;
} ctl_busy;

typedef struct ctl_busiest_ctx {
  ctl_busy best[WORKER_CTL_BUSIEST_MAX]; /* busiest first */
  size_t n, max;
} ctl_busiest_ctx;

static bool ctl_busier(const ctl_busy *a, const ctl_busy *b) {
  if (a->recent != b->recent) return a->recent > b->recent;
  return a->topic->n_session_subs > b->topic->n_session_subs;
}

static void ctl_busy_topic(const char *key, size_t len, void *value, void *data) {
  ctl_busiest_ctx *ctx = data;
  sub_topic *t = value;
  ctl_busy b = {t, t->notified - t->busy_mark};
  t->busy_mark = t->notified;
  if (t->n_session_subs == 0) return;
  if (ctx->n == ctx->max && !ctl_busier(&b, &ctx->best[ctx->n - 1])) return;
  size_t i = ctx->n < ctx->max ? ctx->n++ : ctx->n - 1;
  for (; i > 0 && ctl_busier(&b, &ctx->best[i - 1]); i--) ctx->best[i] = ctx->best[i - 1];
  ctx->best[i] = b;
}

static cJSON *ctl_subs_busiest(worker_t *w, size_t max) {
  ctl_busiest_ctx *ctx = mem_alloc(sizeof(*ctx));
  ctx->n = 0;
  ctx->max = max;
  strmap_foreach(&w->subs.topics, ctl_busy_topic, ctx);
  int64_t now = store_now_ms();
  cJSON *out = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(out, "subscriptions");
  for (size_t i = 0; i < ctx->n; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "uri", ctx->best[i].topic->uri);
    cJSON_AddNumberToObject(o, "sessions", (double)ctx->best[i].topic->n_session_subs);
    cJSON_AddNumberToObject(o, "notified", (double)ctx->best[i].topic->notified);
    cJSON_AddNumberToObject(o, "recent", (double)ctx->best[i].recent);
    cJSON_AddItemToArray(list, o);
  }
  int64_t since = w->busy_mark_ms != 0 ? w->busy_mark_ms : w->started_ms;
  cJSON_AddNumberToObject(out, "windowMs", (double)(now > since ? now - since : 0));
  w->busy_mark_ms = now;
  free(ctx);
  return out;
}

static cJSON *ctl_subs(worker_t *w, const cJSON *req) {
  const cJSON *busiest = cJSON_GetObjectItemCaseSensitive(req, "busiest");
  if (cJSON_IsNumber(busiest) && busiest->valuedouble >= 1 &&
      busiest->valuedouble <= WORKER_CTL_BUSIEST_MAX)
    return ctl_subs_busiest(w, (size_t)busiest->valuedouble);
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(req, "uri");
  cJSON *out = cJSON_CreateObject();
  ctl_subs_ctx ctx = {cJSON_IsString(uri) ? uri->valuestring : NULL,
                      cJSON_AddArrayToObject(out, "subscriptions")};
  strmap_foreach(&w->subs.topics, ctl_add_topic, &ctx);
  return out;
}

cJSON *worker_ctl_handle(worker_t *w, const cJSON *req) {
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
  const char *name = cJSON_IsString(cmd) ? cmd->valuestring : "";
  if (strcmp(name, "sessions") == 0) return ctl_sessions(w);
  if (strcmp(name, "session") == 0) return ctl_session(w, req);
  if (strcmp(name, "evict") == 0) return ctl_evict(w, req);
  if (strcmp(name, "subs") == 0) return ctl_subs(w, req);
  cJSON *out = cJSON_CreateObject();
  cJSON_AddStringToObject(out, "error", "unknown command");
  return out;
}
