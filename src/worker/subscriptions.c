/*
 * The subscription engine (see subscriptions.h).
 *
 * Hot path: the tailer hands over one committed change; the index yields
 * the topics it matches; for each topic one frame is formatted
 * ({"method":"notifications/resources/updated","params":{"uri":U,
 * "subscribedUri":S}} with event id "<seq>-t<topic>") and the same frame is
 * delivered to every subscriber whose subscription is older than the
 * change. Per subscriber that is a ring slot and a copy into the stream's
 * output buffer: no SQL, no allocation.
 *
 * Cold paths (subscribe, resumption from the audit log, restore) may
 * query the database; they run once per request, not per change.
 */
#include "worker/subscriptions.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "worker/wait.h"

/* Coalescing ---------------------------------------------------------------
 * With --coalesce-ms W, the first change to a URI within a topic is sent at
 * once and opens a window of W ms; further changes in the window are held,
 * and when it closes the last of them is sent (trailing edge) and a new
 * window opens. Windows all have the same length, so entries sit in one
 * FIFO ordered by window start and one timer serves them all.
 */
struct coalesce_entry {
  coalesce_entry *next;
  char *map_key;   /* "<topic id> <record uri>" */
  char *topic_uri; /* the topic may be gone when the window closes */
  char *record_uri;
  int64_t window_start; /* loop time, ms */
  int64_t held_seq;     /* newest change held back, or 0 */
};

static void subs_send_topic(worker_t *w, sub_topic *t, const char *record_uri, int64_t seq);
static void coalesce_on_timer(uv_timer_t *h);

static void coalesce_arm(worker_t *w) {
  if (w->coalesce_head == NULL) {
    uv_timer_stop(&w->coalesce_timer);
    return;
  }
  int64_t now = (int64_t)uv_now(w->loop);
  int64_t due = w->coalesce_head->window_start + (int64_t)w->cfg->coalesce_ms;
  uv_timer_start(&w->coalesce_timer, coalesce_on_timer, due > now ? (uint64_t)(due - now) : 0, 0);
}

static void coalesce_push(worker_t *w, coalesce_entry *e) {
  e->next = NULL;
  if (w->coalesce_tail != NULL)
    w->coalesce_tail->next = e;
  else
    w->coalesce_head = e;
  w->coalesce_tail = e;
}

static void coalesce_free(coalesce_entry *e) {
  free(e->map_key);
  free(e->topic_uri);
  free(e->record_uri);
  free(e);
}

static void coalesce_on_timer(uv_timer_t *h) {
  worker_t *w = h->data;
  int64_t now = (int64_t)uv_now(w->loop);
  while (w->coalesce_head != NULL &&
         w->coalesce_head->window_start + (int64_t)w->cfg->coalesce_ms <= now) {
    coalesce_entry *e = w->coalesce_head;
    w->coalesce_head = e->next;
    if (w->coalesce_head == NULL) w->coalesce_tail = NULL;
    sub_topic *t = e->held_seq > 0 ? sub_index_find(&w->subs, e->topic_uri) : NULL;
    if (t != NULL) {
      /* Trailing edge: the held change goes now and opens the next window. */
      subs_send_topic(w, t, e->record_uri, e->held_seq);
      e->held_seq = 0;
      e->window_start = now;
      coalesce_push(w, e);
    } else {
      strmap_remove(&w->coalesce, e->map_key, strlen(e->map_key));
      coalesce_free(e);
    }
  }
  coalesce_arm(w);
}

/* true when the change is held for the window's trailing edge. */
static bool coalesce_hold(worker_t *w, sub_topic *t, const char *record_uri, int64_t seq) {
  buf_t k;
  buf_init(&k);
  buf_printf(&k, "%u %s", t->id, record_uri);
  coalesce_entry *e = strmap_get(&w->coalesce, k.data, k.len);
  if (e != NULL) {
    e->held_seq = seq;
    buf_finish(&k);
    return true;
  }
  e = mem_calloc(1, sizeof(*e));
  e->map_key = buf_steal(&k);
  e->topic_uri = mem_strdup(t->uri);
  e->record_uri = mem_strdup(record_uri);
  e->window_start = (int64_t)uv_now(w->loop);
  strmap_put(&w->coalesce, e->map_key, strlen(e->map_key), e);
  bool was_empty = w->coalesce_head == NULL;
  coalesce_push(w, e);
  if (was_empty) coalesce_arm(w);
  return false;
}

static void coalesce_finish(worker_t *w) {
  while (w->coalesce_head != NULL) {
    coalesce_entry *e = w->coalesce_head;
    w->coalesce_head = e->next;
    coalesce_free(e);
  }
  w->coalesce_tail = NULL;
  strmap_finish(&w->coalesce);
}

/* Frames -------------------------------------------------------------------- */

/* {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":U,"subscribedUri":S}}
 */
static void format_updated(buf_t *b, const char *uri, const char *subscribed) {
  buf_append_str(
      b,
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":");
  buf_append_json_string(b, uri, strlen(uri));
  buf_append_str(b, ",\"subscribedUri\":");
  buf_append_json_string(b, subscribed, strlen(subscribed));
  buf_append_str(b, "}}");
}

static void subs_deliver(worker_t *w, sub_t *sub, frame_t *f) {
  if (sub->owner->kind == SUB_OWNER_SESSION)
    session_deliver((session_t *)sub->owner, f);
  else
    wait_on_match(w, sub);
}

/* Formats the topic's frame for this change once and hands it to every subscriber. */
static void subs_send_topic(worker_t *w, sub_topic *t, const char *record_uri, int64_t seq) {
  frame_t *f = NULL;
  for (sub_t *sub = t->subs, *next; sub != NULL; sub = next) {
    next = sub->topic_next;              /* a waiter may leave the topic when it completes */
    if (sub->since_seq >= seq) continue; /* omitCurrent: subscribed after this change */
    if (f == NULL && t->n_session_subs > 0) {
      buf_t b;
      buf_init(&b);
      format_updated(&b, record_uri, t->uri);
      f = frame_create(seq, 't', t->id, b.data, b.len);
      buf_finish(&b);
      w->notifications++;
    }
    subs_deliver(w, sub, f);
  }
  frame_unref(f);
}

/* The tailer's consumer --------------------------------------------------------- */

typedef struct change_ctx {
  worker_t *w;
  const store_audit_row *row;
  char *record_uri; /* formatted on first use, once per change */
} change_ctx;

static void on_topic(sub_topic *t, void *data) {
  change_ctx *ctx = data;
  worker_t *w = ctx->w;
  if (ctx->record_uri == NULL)
    ctx->record_uri = uri_format_record(w->cfg->public_url, ctx->row->table, ctx->row->key);
  if (w->cfg->coalesce_ms > 0 && coalesce_hold(w, t, ctx->record_uri, ctx->row->seq)) return;
  subs_send_topic(w, t, ctx->record_uri, ctx->row->seq);
}

static sub_change change_of(const store_audit_row *row) {
  return (sub_change){row->seq, row->table, row->key, NULL, row->old_row, row->new_row};
}

static void subs_on_change(const store_audit_row *row, void *data) {
  worker_t *w = data;
  if (!sub_index_watches(&w->subs, row->table)) return;
  change_ctx ctx = {w, row, NULL};
  sub_change change = change_of(row);
  sub_index_match(&w->subs, &change, on_topic, &ctx);
  free(ctx.record_uri);
}

static void subs_on_batch_end(void *data) {
  wait_flush(data);
}

static void subs_on_schema_change(void *data) {
  worker_t *w = data;
  static const char msg[] =
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}";
  log_info("exported tables changed");
  for (session_t *s = w->sessions.streams, *next; s != NULL; s = next) {
    next = s->stream_next;
    if (session_send(s, msg, sizeof(msg) - 1) != 0) {
      /* Only streaming sessions are on this list. */
    }
  }
}

static const tailer_ops subs_tailer_ops = {
    .on_change = subs_on_change,
    .on_batch_end = subs_on_batch_end,
    .on_schema_change = subs_on_schema_change,
};

static int64_t subs_position_cb(void *data) {
  return subs_position(data);
}

int64_t subs_position(worker_t *w) {
  return tailer_position(&w->tailer);
}

void subs_init(worker_t *w) {
  sub_index_init(&w->subs);
  strmap_init(&w->coalesce);
  tailer_init(&w->tailer, w->loop, w->store, w->cfg->db_path, &subs_tailer_ops, w);
  uv_timer_init(w->loop, &w->coalesce_timer);
  w->coalesce_timer.data = w;
  w->sessions.position = subs_position_cb;
  w->sessions.position_data = w;
}

void subs_close(worker_t *w) {
  wait_finish_all(w);
  tailer_close(&w->tailer);
  uv_close((uv_handle_t *)&w->coalesce_timer, NULL);
}

void subs_finish(worker_t *w) {
  coalesce_finish(w);
  tailer_finish(&w->tailer);
  sub_index_finish(&w->subs);
}

void subs_update_active(worker_t *w) {
  tailer_set_active(&w->tailer, w->subs.n_subs > 0 || w->sessions.n_streams > 0);
}

void subs_after_write(worker_t *w) {
  tailer_kick(&w->tailer);
  if (w->on_local_commit != NULL) w->on_local_commit(w);
}

void subs_external_commit(worker_t *w) {
  tailer_kick(&w->tailer);
}

void subs_refresh_schema(worker_t *w) {
  /* Once per loop tick is enough: requests of the same tick see the same schema. */
  uint64_t now = uv_now(w->loop);
  if (now == w->schema_checked_at) return;
  w->schema_checked_at = now;
  bool changed = false;
  if (store_refresh_schema(w->store, &changed) == 0 && changed) subs_on_schema_change(w);
}

/* subscribe / unsubscribe ----------------------------------------------------------- */

int subs_resolve(worker_t *w, const char *text, uri_t *u) {
  if (uri_parse(w->cfg->public_url, text, u) != 0) return -EINVAL;
  const store_table *t = NULL;
  if (u->kind == URI_COLLECTION || u->kind == URI_RECORD || u->kind == URI_FILTERED)
    t = store_find_table(w->store, u->table);
  bool ok = t != NULL;
  for (size_t i = 0; ok && i < u->n_filters; i++)
    ok = store_column_index(t, u->filters[i].column) >= 0;
  if (ok && u->kind == URI_RECORD && t->key_integer) {
    /* The audit log spells integer keys canonically; so must the topic. */
    char *end;
    errno = 0;
    long long k = strtoll(u->key, &end, 10);
    ok = errno == 0 && end != u->key && *end == '\0';
    if (ok) {
      char canon[32];
      snprintf(canon, sizeof(canon), "%lld", k);
      free(u->key);
      u->key = mem_strdup(canon);
    }
  }
  if (!ok) {
    uri_finish(u);
    return -EINVAL;
  }
  return 0;
}

/* The session's subscription to exactly this URI text, and the link to it. */
static sub_t **session_sub_slot(session_t *s, const char *uri) {
  sub_t **p = &s->subs;
  while (*p != NULL && strcmp((*p)->topic->uri, uri) != 0) p = &(*p)->owner_next;
  return p;
}

static void session_unsubscribe(worker_t *w, session_t *s, sub_t **slot) {
  sub_t *sub = *slot;
  *slot = sub->owner_next;
  s->n_subs--;
  sub_index_remove(&w->subs, sub);
}

static void session_subscribe(worker_t *w, session_t *s, const char *uri, const uri_t *u,
                              int64_t since) {
  sub_t *sub = sub_index_add(&w->subs, uri, u, &s->owner, since);
  sub->owner_next = s->subs;
  s->subs = sub;
  s->n_subs++;
}

/* Writes the session's subscribed URIs to its row, for restore elsewhere. */
static void session_persist_subs(worker_t *w, session_t *s) {
  cJSON *list = cJSON_CreateArray();
  for (sub_t *sub = s->subs; sub != NULL; sub = sub->owner_next)
    cJSON_AddItemToArray(list, cJSON_CreateString(sub->topic->uri));
  char *text = cJSON_PrintUnformatted(list);
  cJSON_Delete(list);
  if (text == NULL || store_session_set_subscriptions(w->store, s->id, text) != 0)
    log_warn("cannot store the session's subscriptions", "session", s->id);
  cJSON_free(text);
}

/* params.uri, checked the same way by subscribe and unsubscribe. NULL after failing call. */
static const char *subs_uri_param(mcp_call *call, uri_t *u) {
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(call->params, "uri");
  if (!cJSON_IsString(uri)) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "%s requires params.uri", call->method);
    return NULL;
  }
  if (subs_resolve(call->w, uri->valuestring, u) != 0) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "resource is not subscribable: %.400s",
                  uri->valuestring);
    return NULL;
  }
  return uri->valuestring;
}

cJSON *subs_subscribe(mcp_call *call) {
  worker_t *w = call->w;
  session_t *s = call->session;
  uri_t u;
  const char *uri = subs_uri_param(call, &u);
  if (uri == NULL) return NULL;
  cJSON *result = NULL;
  sub_t **slot = session_sub_slot(s, uri);
  if (w->cfg->strict_subscribe && s->stream == NULL) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                  "open the GET SSE stream before subscribing to resources");
  } else if (*slot == NULL && s->n_subs >= w->cfg->max_subscriptions) {
    mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "too many subscriptions: at most %zu per session",
                  w->cfg->max_subscriptions);
  } else {
    /* omitCurrent: changes committed up to now are not notified. */
    int64_t since = 0;
    if (store_audit_max_seq(w->store, &since) != 0) {
      mcp_call_fail(call, JSONRPC_INTERNAL_ERROR, "database unavailable");
    } else {
      if (*slot != NULL) session_unsubscribe(w, s, slot); /* re-subscribing replaces */
      session_subscribe(w, s, uri, &u, since);
      session_persist_subs(w, s);
      subs_update_active(w);
      result = cJSON_CreateObject();
    }
  }
  uri_finish(&u);
  return result;
}

cJSON *subs_unsubscribe(mcp_call *call) {
  worker_t *w = call->w;
  session_t *s = call->session;
  uri_t u;
  const char *uri = subs_uri_param(call, &u);
  if (uri == NULL) return NULL;
  uri_finish(&u);
  sub_t **slot = session_sub_slot(s, uri);
  if (*slot != NULL) {
    session_unsubscribe(w, s, slot);
    session_persist_subs(w, s);
    subs_update_active(w);
    /* Updates already queued go out before the response, none after it. */
    if (s->stream != NULL) http_stream_flush(s->stream);
  }
  return cJSON_CreateObject();
}

void subs_session_drop(worker_t *w, session_t *s) {
  while (s->subs != NULL) session_unsubscribe(w, s, &s->subs);
  subs_update_active(w);
}

void subs_session_restore(worker_t *w, session_t *s, const char *subscriptions) {
  cJSON *list = cJSON_Parse(subscriptions != NULL ? subscriptions : "[]");
  const cJSON *item;
  size_t dropped = 0;
  cJSON_ArrayForEach(item, list) {
    uri_t u;
    if (!cJSON_IsString(item) || s->n_subs >= w->cfg->max_subscriptions ||
        subs_resolve(w, item->valuestring, &u) != 0) {
      dropped++; /* no longer subscribable (a dropped table or column) */
      continue;
    }
    if (*session_sub_slot(s, item->valuestring) == NULL) {
      /* Since 0: what it missed is decided by the stream's Last-Event-ID. */
      session_subscribe(w, s, item->valuestring, &u, 0);
    }
    uri_finish(&u);
  }
  cJSON_Delete(list);
  if (dropped > 0) session_persist_subs(w, s);
  subs_update_active(w);
}

/* Resumption --------------------------------------------------------------------- */

typedef struct recover_ctx {
  worker_t *w;
  session_t *s;
  int64_t from; /* the resume point */
  int64_t upto; /* the tailer sends what is after this live */
  strmap seen;  /* "<record uri>\n<subscribed uri>" already collected */
  buf_t key;
  char **pending; /* notification JSON texts, in change order */
  size_t n_pending;
  int64_t last; /* last seq read */
  bool overflow;
} recover_ctx;

static int recover_row(const store_audit_row *row, void *data) {
  recover_ctx *ctx = data;
  if (row->seq > ctx->upto) return 1;
  ctx->last = row->seq;
  sub_change change = change_of(row);
  char *record_uri = NULL;
  for (sub_t *sub = ctx->s->subs; sub != NULL; sub = sub->owner_next) {
    if (sub->since_seq >= row->seq || !sub_topic_matches(sub->topic, &change)) continue;
    if (record_uri == NULL)
      record_uri = uri_format_record(ctx->w->cfg->public_url, row->table, row->key);
    buf_reset(&ctx->key);
    buf_printf(&ctx->key, "%s\n%s", record_uri, sub->topic->uri);
    if (strmap_get(&ctx->seen, ctx->key.data, ctx->key.len) != NULL) continue;
    if (ctx->n_pending == SUBS_RECOVER_MAX) {
      ctx->overflow = true;
      break;
    }
    strmap_put(&ctx->seen, ctx->key.data, ctx->key.len, ctx);
    buf_t json;
    buf_init(&json);
    format_updated(&json, record_uri, sub->topic->uri);
    ctx->pending[ctx->n_pending++] = buf_steal(&json);
  }
  free(record_uri);
  return ctx->overflow ? 1 : 0;
}

/* Sends one recovered notification (JSON text) as a frame of the session. */
static void recover_send(recover_ctx *ctx, const char *json, uint64_t n) {
  frame_t *f = frame_create(ctx->from, 'r', n, json, strlen(json));
  ctx->s->registry->frames_replayed++;
  session_deliver(ctx->s, f);
  frame_unref(f);
}

/*
 * The client's subscriptions may have changed anywhere: one update per
 * subscription, naming the subscribed URI itself, tells it to re-read.
 */
static void recover_everything(recover_ctx *ctx) {
  uint64_t n = 0;
  for (sub_t *sub = ctx->s->subs; sub != NULL; sub = sub->owner_next) {
    buf_t json;
    buf_init(&json);
    format_updated(&json, sub->topic->uri, sub->topic->uri);
    recover_send(ctx, json.data, n++);
    buf_finish(&json);
  }
}

/*
 * Sends one update per (changed URI, subscription) for the changes after
 * position from (inclusive of from itself: its frame may have been one of
 * several for that change). Falls back to one update per subscription
 * when the log no longer holds the whole gap or the gap is too wide.
 */
static void subs_recover(worker_t *w, session_t *s, int64_t from) {
  if (s->subs == NULL) return;
  recover_ctx ctx = {.w = w, .s = s, .from = from, .upto = subs_position(w)};
  strmap_init(&ctx.seen);
  buf_init(&ctx.key);
  ctx.pending = mem_alloc(SUBS_RECOVER_MAX * sizeof(char *));
  int64_t pruned = 0;
  /* Exact unless retention deleted a change at or after from (0: it never deleted any). */
  bool exact = store_audit_pruned_through(w->store, &pruned) == 0 && (pruned == 0 || pruned < from);
  ctx.last = from - 1;
  while (exact && !ctx.overflow && ctx.last < ctx.upto) {
    int n = 0;
    int64_t before = ctx.last;
    if (store_audit_read(w->store, before, TAILER_BATCH, recover_row, &ctx, &n) != 0) exact = false;
    if (n < TAILER_BATCH || ctx.last == before) break;
  }
  /* All or nothing: a partial list would look complete to the client. */
  if (!exact || ctx.overflow)
    recover_everything(&ctx);
  else
    for (size_t i = 0; i < ctx.n_pending; i++) recover_send(&ctx, ctx.pending[i], i);
  char from_text[32], n_text[32];
  snprintf(from_text, sizeof(from_text), "%lld", (long long)from);
  snprintf(n_text, sizeof(n_text), "%zu",
           exact && !ctx.overflow ? ctx.n_pending : (size_t)s->n_subs);
  log_info("stream resumed from the audit log", "session", s->id, "from", from_text, "updates",
           n_text, "exact", exact && !ctx.overflow ? "true" : "false");
  for (size_t i = 0; i < ctx.n_pending; i++) free(ctx.pending[i]);
  free(ctx.pending);
  buf_finish(&ctx.key);
  strmap_finish(&ctx.seen);
}

void subs_stream_open(worker_t *w, session_t *s, http_conn_t *c, const char *last_event_id) {
  session_stream_open(s, c);
  subs_update_active(w); /* streams keep the feed alive (list_changed) */
  /* The replay is bounded (the ring, or SUBS_RECOVER_MAX updates): let it all through. */
  http_stream_exempt(c, true);
  int64_t from = 0;
  if (last_event_id != NULL && session_replay_after(s, last_event_id, strlen(last_event_id))) {
    /* Exact: the ring still held it. */
  } else if (last_event_id != NULL && frame_id_parse(last_event_id, &from) == 0) {
    s->undelivered = 0; /* the audit log covers them */
    subs_recover(w, s, from);
  } else if (s->lost_from_seq >= 0) {
    /* No id (or one we did not mint), and updates fell off the ring unsent. */
    s->undelivered = 0;
    subs_recover(w, s, s->lost_from_seq);
  } else {
    /* A first stream, or an id we cannot place: what no stream has taken yet. */
    session_replay_undelivered(s);
  }
  s->lost_from_seq = -1;
  session_stream_prime(s);
  http_stream_exempt(c, false);
}
