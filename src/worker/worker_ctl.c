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

/*
 * "subs" walks the worker's topics once and keeps the N best of them in a
 * heap (the least good at its root), allocating nothing per URI: listing
 * a worker's URIs costs time linear in them and an answer of N rows,
 * however many it holds. Plain "subs" keeps the URIs with the most
 * sessions (N up to WORKER_CTL_SUBS_MAX), "busiest" those with the most
 * updates since the last such request (mcpsubctl top's view; N up to
 * WORKER_CTL_BUSIEST_MAX). A topic is a URI, or a URI and a subscriber's
 * row scope: the master sums rows by URI.
 */
typedef struct ctl_pick {
  const sub_topic *topic;
  uint64_t recent; /* updates since the last "busiest" request */
} ctl_pick;

typedef struct ctl_top {
  ctl_pick *heap;
  size_t n, max;
  size_t topics; /* topics with sessions, walked */
  bool busiest;
} ctl_top;

/* Is a to be listed before b? */
static bool ctl_better(const ctl_top *top, const ctl_pick *a, const ctl_pick *b) {
  if (top->busiest && a->recent != b->recent) return a->recent > b->recent;
  if (a->topic->n_session_subs != b->topic->n_session_subs)
    return a->topic->n_session_subs > b->topic->n_session_subs;
  return a->topic->notified > b->topic->notified;
}

static void ctl_top_swap(ctl_top *top, size_t a, size_t b) {
  ctl_pick t = top->heap[a];
  top->heap[a] = top->heap[b];
  top->heap[b] = t;
}

/* Moves heap[i] down to its place (the least good at the root). */
static void ctl_top_sift(ctl_top *top, size_t i, size_t n) {
  for (;;) {
    size_t worst = i, l = 2 * i + 1, r = l + 1;
    if (l < n && ctl_better(top, &top->heap[worst], &top->heap[l])) worst = l;
    if (r < n && ctl_better(top, &top->heap[worst], &top->heap[r])) worst = r;
    if (worst == i) return;
    ctl_top_swap(top, i, worst);
    i = worst;
  }
}

static void ctl_top_offer(const char *key, size_t len, void *value, void *data) {
  (void)key;
  (void)len;
  ctl_top *top = data;
  sub_topic *t = value;
  ctl_pick p = {t, t->notified - t->busy_mark};
  if (top->busiest) t->busy_mark = t->notified;
  if (t->n_session_subs == 0) return; /* only wait_and_read calls */
  top->topics++;
  if (top->n < top->max) { /* still filling: up from the end */
    size_t i = top->n++;
    top->heap[i] = p;
    for (; i > 0 && ctl_better(top, &top->heap[(i - 1) / 2], &top->heap[i]); i = (i - 1) / 2)
      ctl_top_swap(top, i, (i - 1) / 2);
  } else if (ctl_better(top, &p, &top->heap[0])) {
    top->heap[0] = p;
    ctl_top_sift(top, 0, top->n);
  }
}

/* The worker's max best topics, best first: {"subscriptions": [...], "uris": topics walked}. */
static cJSON *ctl_subs_top(worker_t *w, size_t max, bool busiest) {
  ctl_top top = {mem_alloc(max * sizeof(ctl_pick)), 0, max, 0, busiest};
  strmap_foreach(&w->subs.topics, ctl_top_offer, &top);
  for (size_t n = top.n; n > 1; n--) { /* heap sort: the least good goes last */
    ctl_top_swap(&top, 0, n - 1);
    ctl_top_sift(&top, 0, n - 1);
  }
  cJSON *out = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(out, "subscriptions");
  for (size_t i = 0; i < top.n; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "uri", top.heap[i].topic->uri);
    cJSON_AddNumberToObject(o, "sessions", (double)top.heap[i].topic->n_session_subs);
    cJSON_AddNumberToObject(o, "notified", (double)top.heap[i].topic->notified);
    if (busiest) cJSON_AddNumberToObject(o, "recent", (double)top.heap[i].recent);
    cJSON_AddItemToArray(list, o);
  }
  cJSON_AddNumberToObject(out, "uris", (double)top.topics);
  if (busiest) {
    int64_t now = store_now_ms();
    int64_t since = w->busy_mark_ms != 0 ? w->busy_mark_ms : w->started_ms;
    cJSON_AddNumberToObject(out, "windowMs", (double)(now > since ? now - since : 0));
    w->busy_mark_ms = now;
  }
  free(top.heap);
  return out;
}

typedef struct ctl_uri_ctx {
  const char *uri;
  cJSON *list;
} ctl_uri_ctx;

/* The topics of one URI (one per row scope): a walk, as a scoped topic is not keyed by its URI. */
static void ctl_uri_topic(const char *key, size_t len, void *value, void *data) {
  (void)key;
  (void)len;
  ctl_uri_ctx *ctx = data;
  const sub_topic *t = value;
  if (t->n_session_subs == 0 || strcmp(ctx->uri, t->uri) != 0) return;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "uri", t->uri);
  cJSON_AddNumberToObject(o, "sessions", (double)t->n_session_subs);
  cJSON_AddNumberToObject(o, "notified", (double)t->notified);
  cJSON_AddItemToArray(ctx->list, o);
}

/* A whole number from 1 to max in req[name], else dflt (the master checked the request). */
static size_t ctl_count(const cJSON *req, const char *name, size_t dflt, size_t max) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, name);
  return cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= (double)max
             ? (size_t)v->valuedouble
             : dflt;
}

static cJSON *ctl_subs(worker_t *w, const cJSON *req) {
  if (cJSON_GetObjectItemCaseSensitive(req, "busiest") != NULL)
    return ctl_subs_top(w, ctl_count(req, "busiest", 5, WORKER_CTL_BUSIEST_MAX), true);
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(req, "uri");
  if (!cJSON_IsString(uri))
    return ctl_subs_top(w, ctl_count(req, "limit", WORKER_CTL_SUBS_DEFAULT, WORKER_CTL_SUBS_MAX),
                        false);
  cJSON *out = cJSON_CreateObject();
  ctl_uri_ctx ctx = {uri->valuestring, cJSON_AddArrayToObject(out, "subscriptions")};
  strmap_foreach(&w->subs.topics, ctl_uri_topic, &ctx);
  return out;
}

static double ctl_row_sessions(const cJSON *row) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(row, "sessions");
  return cJSON_IsNumber(n) ? n->valuedouble : 0;
}

static int ctl_row_rank(const void *a, const void *b) {
  const cJSON *ra = *(cJSON *const *)a, *rb = *(cJSON *const *)b;
  double sa = ctl_row_sessions(ra), sb = ctl_row_sessions(rb);
  if (sa != sb) return sa > sb ? -1 : 1;
  const char *ua = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ra, "uri"));
  const char *ub = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rb, "uri"));
  return strcmp(ua != NULL ? ua : "", ub != NULL ? ub : "");
}

bool worker_ctl_subs_rank(cJSON *list, size_t limit) {
  size_t n = (size_t)cJSON_GetArraySize(list);
  if (n == 0) return false;
  cJSON **rows = mem_alloc(n * sizeof(*rows));
  for (size_t i = 0; i < n; i++) rows[i] = cJSON_DetachItemViaPointer(list, list->child);
  qsort(rows, n, sizeof(*rows), ctl_row_rank);
  for (size_t i = 0; i < n; i++) {
    if (i < limit)
      cJSON_AddItemToArray(list, rows[i]);
    else
      cJSON_Delete(rows[i]);
  }
  free(rows);
  return n > limit;
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
