/*
 * A worker's answers to control requests (see worker_ctl.h). Cold path:
 * each request walks the live sessions or the subscription topics once;
 * nothing is cached and nothing here runs on a request's or a change's hot
 * path.
 */
#include "worker/worker_ctl.h"

#include <stdlib.h>
#include <string.h>

#include "common/ipc.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/session_id.h"
#include "common/store.h"

/*
 * Bytes a string takes in printed JSON, at most: its quotes, a comma, and
 * each character as cJSON escapes it ("\\n" two bytes, "\\u0001" six).
 */
static size_t ctl_text_cost(const char *s) {
  size_t n = 3;
  for (; *s != '\0'; s++) n += (unsigned char)*s < 0x20 ? 6 : (*s == '"' || *s == '\\') ? 2 : 1;
  return n;
}

/*
 * What a listed session's members other than its strings take at most:
 * the names, numbers of up to 24 characters, booleans and punctuation
 * come to about 320 bytes.
 */
#define CTL_SESSION_FIXED_COST 512

/* Bytes session s takes in a "sessions" answer without its URIs, at most. */
static size_t ctl_session_head_cost(const session_t *s) {
  return CTL_SESSION_FIXED_COST + ctl_text_cost(s->id) + ctl_text_cost(s->protocol_version) +
         ctl_text_cost(s->principal != NULL ? s->principal : "");
}

/* ...and with them: as worker_ctl_sessions_rank counts the session's JSON. */
static size_t ctl_session_cost(const session_t *s) {
  size_t n = ctl_session_head_cost(s);
  for (const sub_t *sub = s->subs; sub != NULL; sub = sub->owner_next)
    n += ctl_text_cost(sub->topic->uri);
  return n;
}

/*
 * A live session as JSON, with the URIs of its subscriptions that fit in
 * uri_room bytes (SIZE_MAX: all of them); when some do not,
 * "subscriptionsOmitted" says how many were left out.
 */
static cJSON *ctl_session_json(worker_t *w, const session_t *s, size_t uri_room) {
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
  size_t omitted = 0; /* once one is, all that follow are: a prefix is listed */
  for (const sub_t *sub = s->subs; sub != NULL; sub = sub->owner_next) {
    size_t cost = uri_room == SIZE_MAX ? 0 : ctl_text_cost(sub->topic->uri);
    if (omitted == 0 && cost <= uri_room) {
      uri_room -= cost;
      cJSON_AddItemToArray(subs, cJSON_CreateString(sub->topic->uri));
    } else {
      omitted++;
    }
  }
  cJSON_AddNumberToObject(o, "ring", s->ring_count);
  cJSON_AddNumberToObject(o, "undelivered", s->undelivered);
  if (omitted > 0) cJSON_AddNumberToObject(o, "subscriptionsOmitted", (double)omitted);
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
    size_t head = ctl_session_head_cost(s); /* bounded like a listing's first session */
    cJSON_AddItemToObject(out, "session", ctl_session_json(w, s, WORKER_CTL_SESSIONS_BYTES - head));
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

/* An eviction of a live session, answered once its row is gone (as a DELETE is). */
typedef struct ctl_evicting {
  worker_ctl_answer answer;
  void *data;
} ctl_evicting;

static void ctl_evict_answer(worker_ctl_answer answer, void *data, bool evicted,
                             const char *error) {
  cJSON *out = cJSON_CreateObject();
  cJSON_AddBoolToObject(out, "evicted", evicted);
  if (error != NULL) cJSON_AddStringToObject(out, "error", error);
  answer(out, data);
  cJSON_Delete(out);
}

static void ctl_evicted(int rc, void *data) {
  ctl_evicting ev = *(ctl_evicting *)data;
  free(data);
  ctl_evict_answer(ev.answer, ev.data, rc == 0,
                   rc == 0 ? NULL : "the session ended but its record could not be removed; retry");
}

static void ctl_evict(worker_t *w, const cJSON *req, worker_ctl_answer answer, void *data) {
  const char *id;
  session_t *s = ctl_find(w, req, &id);
  if (s != NULL) {
    log_info("session evicted", "session", s->id);
    ctl_evicting *ev = mem_alloc(sizeof(*ev));
    *ev = (ctl_evicting){answer, data};
    worker_session_end_then(w, s, ctl_evicted, ev);
    return;
  }
  bool evicted = false;
  if (id != NULL && session_id_valid(id, strlen(id))) {
    /* Not live here: its row alone would let a client bring it back. */
    evicted = store_session_delete(w->store, id) == 0;
    if (evicted) log_info("session evicted (row only)", "session", id);
  }
  ctl_evict_answer(answer, data, evicted, NULL);
}

/*
 * "sessions" answers with the N sessions seen most recently (N up to
 * WORKER_CTL_SESSIONS_MAX), and no more of them than fit in
 * WORKER_CTL_SESSIONS_BYTES: a worker holding a hundred thousand sessions
 * with a thousand URIs each still answers well within the IPC message
 * bound. The walk keeps the best N in a heap of pointers (the least recent
 * at its root) and allocates nothing per session.
 */
_Static_assert(2 * WORKER_CTL_SESSIONS_BYTES <= IPC_MAX_TOTAL,
               "a \"sessions\" answer fits an IPC message with room to spare");

typedef struct ctl_recent {
  const session_t **heap;
  size_t n, max;
  size_t sessions; /* sessions walked */
} ctl_recent;

/* Is a listed before b? The most recently seen first, then by id. */
static bool ctl_more_recent(const session_t *a, const session_t *b) {
  if (a->last_seen_ms != b->last_seen_ms) return a->last_seen_ms > b->last_seen_ms;
  return strcmp(a->id, b->id) < 0;
}

static void ctl_recent_swap(ctl_recent *r, size_t a, size_t b) {
  const session_t *t = r->heap[a];
  r->heap[a] = r->heap[b];
  r->heap[b] = t;
}

/* Moves heap[i] down to its place among heap[0..n) (the least recent at the root). */
static void ctl_recent_sift(ctl_recent *r, size_t i, size_t n) {
  for (;;) {
    size_t least = i, l = 2 * i + 1, rt = l + 1;
    if (l < n && ctl_more_recent(r->heap[least], r->heap[l])) least = l;
    if (rt < n && ctl_more_recent(r->heap[least], r->heap[rt])) least = rt;
    if (least == i) return;
    ctl_recent_swap(r, i, least);
    i = least;
  }
}

static void ctl_recent_offer(const char *key, size_t len, void *value, void *data) {
  (void)key;
  (void)len;
  ctl_recent *r = data;
  const session_t *s = value;
  r->sessions++;
  if (r->n < r->max) { /* still filling: up from the end */
    size_t i = r->n++;
    r->heap[i] = s;
    for (; i > 0 && ctl_more_recent(r->heap[(i - 1) / 2], r->heap[i]); i = (i - 1) / 2)
      ctl_recent_swap(r, i, (i - 1) / 2);
  } else if (r->n > 0 && ctl_more_recent(s, r->heap[0])) {
    r->heap[0] = s;
    ctl_recent_sift(r, 0, r->n);
  }
}

/*
 * {"sessions": [...], "more": bool}: the max most recent, most recent
 * first, while they fit in WORKER_CTL_SESSIONS_BYTES. The first session
 * always goes in, its URIs cut to what fits when they alone would not.
 */
static cJSON *ctl_sessions(worker_t *w, size_t max) {
  if (max > w->sessions.count) max = w->sessions.count; /* no room for sessions not there */
  ctl_recent r = {mem_alloc(max * sizeof(*r.heap)), 0, max, 0};
  strmap_foreach(&w->sessions.by_id, ctl_recent_offer, &r);
  for (size_t n = r.n; n > 1; n--) { /* heap sort: the least recent goes last */
    ctl_recent_swap(&r, 0, n - 1);
    ctl_recent_sift(&r, 0, n - 1);
  }
  cJSON *out = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(out, "sessions");
  bool more = r.sessions > r.n;
  size_t room = WORKER_CTL_SESSIONS_BYTES;
  for (size_t i = 0; i < r.n; i++) {
    size_t cost = ctl_session_cost(r.heap[i]);
    if (cost <= room) {
      cJSON_AddItemToArray(list, ctl_session_json(w, r.heap[i], SIZE_MAX));
      room -= cost;
      continue;
    }
    more = true;
    if (i == 0) { /* the most recent is listed, with as many of its URIs as fit */
      size_t head = ctl_session_head_cost(r.heap[i]);
      cJSON_AddItemToArray(list, ctl_session_json(w, r.heap[i], room > head ? room - head : 0));
    }
    break;
  }
  cJSON_AddBoolToObject(out, "more", more);
  free(r.heap);
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

static const char *ctl_member_text(const cJSON *o, const char *name) {
  const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
  return text != NULL ? text : "";
}

static double ctl_member_number(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* A listed session's bytes, counted as ctl_session_cost counts a live one. */
static size_t ctl_row_cost(const cJSON *session) {
  size_t n = CTL_SESSION_FIXED_COST + ctl_text_cost(ctl_member_text(session, "id")) +
             ctl_text_cost(ctl_member_text(session, "protocolVersion")) +
             ctl_text_cost(ctl_member_text(session, "principal"));
  const cJSON *uri;
  cJSON_ArrayForEach(uri, cJSON_GetObjectItemCaseSensitive(session, "subscriptions")) {
    if (cJSON_IsString(uri)) n += ctl_text_cost(uri->valuestring);
  }
  return n;
}

static int ctl_row_recent(const void *a, const void *b) {
  const cJSON *ra = *(cJSON *const *)a, *rb = *(cJSON *const *)b;
  double sa = ctl_member_number(ra, "lastSeenMs"), sb = ctl_member_number(rb, "lastSeenMs");
  if (sa != sb) return sa > sb ? -1 : 1;
  return strcmp(ctl_member_text(ra, "id"), ctl_member_text(rb, "id"));
}

bool worker_ctl_sessions_rank(cJSON *list, size_t limit) {
  size_t n = (size_t)cJSON_GetArraySize(list);
  if (n == 0) return false;
  cJSON **rows = mem_alloc(n * sizeof(*rows));
  for (size_t i = 0; i < n; i++) rows[i] = cJSON_DetachItemViaPointer(list, list->child);
  qsort(rows, n, sizeof(*rows), ctl_row_recent);
  size_t kept = 0, room = WORKER_CTL_SESSIONS_BYTES;
  for (; kept < n && kept < limit; kept++) {
    size_t cost = ctl_row_cost(rows[kept]);
    if (cost > room && kept > 0) break; /* the first goes in: its worker made it fit */
    room = cost < room ? room - cost : 0;
    cJSON_AddItemToArray(list, rows[kept]);
  }
  for (size_t i = kept; i < n; i++) cJSON_Delete(rows[i]);
  free(rows);
  return kept < n;
}

void worker_ctl_handle(worker_t *w, const cJSON *req, worker_ctl_answer answer, void *data) {
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
  const char *name = cJSON_IsString(cmd) ? cmd->valuestring : "";
  if (strcmp(name, "evict") == 0) {
    ctl_evict(w, req, answer, data);
    return;
  }
  cJSON *out;
  if (strcmp(name, "sessions") == 0) {
    out = ctl_sessions(
        w, ctl_count(req, "limit", WORKER_CTL_SESSIONS_DEFAULT, WORKER_CTL_SESSIONS_MAX));
  } else if (strcmp(name, "session") == 0) {
    out = ctl_session(w, req);
  } else if (strcmp(name, "subs") == 0) {
    out = ctl_subs(w, req);
  } else {
    out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "error", "unknown command");
  }
  answer(out, data);
  cJSON_Delete(out);
}
