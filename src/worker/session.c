/*
 * Live session registry and the SSE side of a session. Sessions are found
 * by id through a strmap; a session with an open GET stream is also on a
 * doubly linked list so that keepalives and shutdown touch only streaming
 * sessions. Frames are shared (see frame.h): delivering one to a session
 * stores a reference in its ring and copies its bytes into the stream's
 * output buffer, which the HTTP layer flushes once per loop turn (or the
 * caller at once: session_deliver_now) and bounds; a stream over its bound
 * is cut and the client resumes.
 */
#include "worker/session.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonrpc.h"
#include "common/mem.h"
#include "common/sse.h"

static const char *const level_names[] = {
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency",
};

int session_log_level_parse(const char *name, enum session_log_level *out) {
  for (size_t i = 0; i < ARRAY_LEN(level_names); i++) {
    if (strcmp(name, level_names[i]) == 0) {
      *out = (enum session_log_level)i;
      return 0;
    }
  }
  return -EINVAL;
}

const char *session_log_level_name(enum session_log_level level) {
  return (size_t)level < ARRAY_LEN(level_names) ? level_names[level] : "info";
}

void session_registry_init(session_registry_t *reg, unsigned sse_retry_ms,
                           int64_t (*position)(const session_t *s, void *data),
                           void *position_data) {
  memset(reg, 0, sizeof(*reg));
  strmap_init(&reg->by_id);
  reg->sse_retry_ms = sse_retry_ms;
  reg->position = position;
  reg->position_data = position_data;
}

/*
 * A ring slot is the event's frame (frame_ev.f) and, once the session has
 * been sent a head and a tail, its tail in a second array after the first
 * (ring_paired): a session sent whole frames only (a collection's or a
 * record's subscriber, an idle session) keeps 8 bytes a slot.
 */
static frame_ev ring_slot(const session_t *s, unsigned k) {
  return (frame_ev){s->ring[k], s->ring_paired ? s->ring[s->ring_cap + k] : NULL};
}

static frame_ev ring_at(const session_t *s, unsigned i) {
  return ring_slot(s, (s->ring_start + i) % s->ring_cap);
}

/* The slot of k, an index below twice ring_cap: k past the ring's end starts over. */
static unsigned ring_wrap(const session_t *s, unsigned k) {
  return k >= s->ring_cap ? k - s->ring_cap : k;
}

/* The slot after the newest event (the oldest's, when the ring is full). ring_cap > 0. */
static unsigned ring_end(const session_t *s) {
  return ring_wrap(s, s->ring_start + s->ring_count); /* both at most ring_cap */
}

static void ring_resize(session_t *s, unsigned cap, bool paired) {
  frame_t **ring = mem_alloc(cap * sizeof(frame_t *) * (paired ? 2 : 1));
  for (unsigned i = 0; i < s->ring_count; i++) {
    frame_ev e = ring_at(s, i);
    ring[i] = e.f;
    if (paired) ring[cap + i] = e.tail;
  }
  free(s->ring);
  s->ring = ring;
  s->ring_cap = cap;
  s->ring_start = 0;
  s->ring_paired = paired;
}

static void session_free(session_t *s) {
  session_stream_close(s);
  if (s->subs_by_uri != NULL) {
    strmap_finish(s->subs_by_uri);
    free(s->subs_by_uri);
  }
  for (unsigned i = 0; i < s->ring_count; i++) frame_ev_unref(ring_at(s, i));
  free(s->ring);
  session_ended_destroy(s->ended);
  free(s->principal);
  free(s);
}

void session_set_principal(session_t *s, const char *principal) {
  free(s->principal);
  s->principal = mem_strdup(principal);
}

static void free_session_cb(const char *key, size_t len, void *value, void *data) {
  session_free(value);
}

void session_registry_finish(session_registry_t *reg) {
  strmap_foreach(&reg->by_id, free_session_cb, NULL);
  strmap_finish(&reg->by_id);
  memset(reg, 0, sizeof(*reg));
}

session_t *session_registry_add(session_registry_t *reg, const char *id,
                                const char *protocol_version, int64_t now_ms) {
  session_t *s = mem_calloc(1, sizeof(*s));
  s->owner.kind = SUB_OWNER_SESSION;
  snprintf(s->id, sizeof(s->id), "%s", id);
  snprintf(s->protocol_version, sizeof(s->protocol_version), "%s", protocol_version);
  s->log_level = SESSION_LOG_INFO;
  s->created_ms = now_ms;
  s->last_seen_ms = now_ms;
  s->persisted_seen_ms = now_ms;
  s->next_frame = 1;
  s->principal = mem_strdup("anonymous");
  s->registry = reg;
  strmap_put(&reg->by_id, s->id, strlen(s->id), s);
  reg->count++;
  return s;
}

session_t *session_registry_find(session_registry_t *reg, const char *id, size_t len) {
  return strmap_get(&reg->by_id, id, len);
}

void session_registry_remove(session_registry_t *reg, session_t *s) {
  if (strmap_remove(&reg->by_id, s->id, strlen(s->id)) != NULL) reg->count--;
  session_free(s);
}

typedef struct foreach_ctx {
  session_t **list;
  size_t n;
} foreach_ctx;

static void collect_cb(const char *key, size_t len, void *value, void *data) {
  foreach_ctx *ctx = data;
  ctx->list[ctx->n++] = value;
}

void session_registry_foreach(session_registry_t *reg, void (*fn)(session_t *s, void *data),
                              void *data) {
  /* A snapshot, so that fn may remove sessions. */
  foreach_ctx ctx = {mem_alloc((reg->count + 1) * sizeof(session_t *)), 0};
  strmap_foreach(&reg->by_id, collect_cb, &ctx);
  for (size_t i = 0; i < ctx.n; i++) fn(ctx.list[i], data);
  free(ctx.list);
}

/* Streams ------------------------------------------------------------------- */

/* What delivers to a session or reads its ring first delivers the turn's held-back updates. */
static void session_settle(session_registry_t *reg) {
  if (reg->turn_held) reg->settle(reg->settle_data);
}

static void session_stream_unlink(session_t *s) {
  session_registry_t *reg = s->registry;
  if (s->stream_prev != NULL)
    s->stream_prev->stream_next = s->stream_next;
  else
    reg->streams = s->stream_next;
  if (s->stream_next != NULL) s->stream_next->stream_prev = s->stream_prev;
  s->stream_prev = s->stream_next = NULL;
  s->stream = NULL;
  reg->n_streams--;
}

/* The connection under a stream went away (peer, error, limit, shutdown). */
static void session_stream_on_close(http_conn_t *c, void *data) {
  session_t *s = data;
  if (s->stream == c) session_stream_unlink(s);
}

void session_stream_close(session_t *s) {
  http_conn_t *c = s->stream;
  if (c == NULL) return;
  session_settle(s->registry); /* what this turn sent it goes out before the end */
  http_conn_set_close_cb(c, NULL, NULL);
  session_stream_unlink(s);
  http_stream_end(c);
}

void session_stream_open(session_t *s, http_conn_t *c) {
  session_settle(s->registry); /* the turn's updates precede the new stream's replay */
  session_stream_close(s);     /* a new GET supersedes the old stream */
  http_stream_begin_sse(c);
  s->stream = c;
  session_registry_t *reg = s->registry;
  s->stream_next = reg->streams;
  if (reg->streams != NULL) reg->streams->stream_prev = s;
  reg->streams = s;
  reg->n_streams++;
  http_conn_set_close_cb(c, session_stream_on_close, s);

  buf_t b;
  buf_init(&b);
  sse_format_retry(&b, reg->sse_retry_ms);
  if (http_stream_write(c, b.data, b.len) != 0) {
    /* Cut already; the close callback detaches the stream. */
  }
  buf_finish(&b);
}

/*
 * Writes e to the open stream: at the turn's end, or (at_turn_end unset)
 * when the caller offers the stream. false when there is none or it was cut.
 */
static bool session_write(session_t *s, frame_ev e, bool at_turn_end) {
  if (s->stream == NULL) return false;
  frame_part p[FRAME_MAX_PIECES];
  size_t len, n = frame_pieces(e, p, &len);
  uv_buf_t b[FRAME_MAX_PIECES];
  for (size_t i = 0; i < n; i++)
    b[i] = (uv_buf_t){.base = (char *)(uintptr_t)p[i].data, .len = p[i].len};
  int rc = at_turn_end ? http_stream_writev(s->stream, b, n, len)
                       : http_stream_append(s->stream, b, n, len);
  if (rc != 0) return false;
  s->registry->frames_sent++;
  return true;
}

void session_stream_prime(session_t *s) {
  if (s->stream == NULL) return;
  /* Kept in the ring too: a reconnect naming it is then replayed exactly. */
  frame_t *f = frame_create(s->registry->position(s, s->registry->position_data), 's',
                            s->next_frame++, "", 0);
  session_deliver(s, frame_whole(f));
  frame_unref(f);
}

/* Ring slots session_prefetch starts: a turn's updates of a distinct topic (~27 at 10,000). */
#define SESSION_PREFETCH_SLOTS 32
#define SLOTS_A_LINE           (64 / sizeof(frame_t *))

void session_prefetch(const session_t *s) {
  if (s->ring_cap > 0) {
    unsigned k = ring_end(s);
    for (unsigned j = 0; j < SESSION_PREFETCH_SLOTS && j < s->ring_cap; j += SLOTS_A_LINE) {
      unsigned at = ring_wrap(s, k + j); /* both below ring_cap */
      mem_prefetch(&s->ring[at]);
      if (s->ring_paired) mem_prefetch(&s->ring[s->ring_cap + at]);
    }
  }
  if (s->stream != NULL) http_stream_prefetch(s->stream);
}

/* Keeps e in the ring (new references), the oldest leaving a full one. */
static void session_keep(session_t *s, frame_ev e) {
  /* Doubled from 8 slots up to SESSION_RING_SIZE: an idle session pays for few. */
  if (s->ring_count == s->ring_cap && s->ring_cap < SESSION_RING_SIZE) {
    unsigned cap = s->ring_cap == 0 ? 8 : s->ring_cap * 2;
    ring_resize(s, cap < SESSION_RING_SIZE ? cap : SESSION_RING_SIZE, s->ring_paired);
  }
  if (e.tail != NULL && !s->ring_paired) ring_resize(s, s->ring_cap, true);
  if (s->ring_count == SESSION_RING_SIZE) {
    frame_ev oldest = ring_slot(s, s->ring_start);
    if (s->undelivered == s->ring_count) { /* it never reached a stream */
      s->undelivered--;
      s->registry->frames_dropped++;
      if (!s->lost) s->lost_from = frame_position(oldest); /* frames leave in order */
      s->lost = true;
    }
    frame_ev_unref(oldest);
    s->ring_start = (s->ring_start + 1) % s->ring_cap;
    s->ring_count--;
  }
  unsigned k = ring_end(s);
  frame_ev_ref(e);
  s->ring[k] = e.f;
  if (s->ring_paired) s->ring[s->ring_cap + k] = e.tail;
  s->ring_count++;
}

/* session_deliver without settling first; at_turn_end as for session_write. */
static void session_put(session_t *s, frame_ev e, bool at_turn_end) {
  session_keep(s, e);
  /* An event behind undelivered ones waits with them, in order. */
  if (s->undelivered > 0 || !session_write(s, e, at_turn_end)) s->undelivered++;
}

void session_deliver(session_t *s, frame_ev e) {
  session_settle(s->registry);
  session_put(s, e, true);
}

void session_deliver_unheld(session_t *s, frame_ev e) {
  session_put(s, e, true);
}

void session_deliver_now(session_t *s, const frame_ev *e, size_t n) {
  size_t len = 0;
  for (size_t i = 0; i < n; i++) len += frame_ev_len(e[i]);
  if (s->undelivered > 0 || !http_stream_takes(s->stream, len)) {
    /* Behind others, or no stream, or one to cut: event by event, as they come. */
    for (size_t i = 0; i < n; i++) session_put(s, e[i], false);
  } else {
    /* One check and one reserve for them all, copied straight in: session_put's result. */
    char *to = http_stream_extend(s->stream, len);
    for (size_t i = 0; i < n; i++) {
      session_keep(s, e[i]);
      to = frame_ev_copy(e[i], to);
    }
    s->registry->frames_sent += n;
  }
  if (s->stream != NULL) http_stream_offer(s->stream);
}

void session_deliver_bytes(session_t *s, const frame_ev *e, size_t n, const char *bytes,
                           size_t len) {
  if (s->undelivered > 0 || !http_stream_takes(s->stream, len)) {
    session_deliver_now(s, e, n); /* waits behind others, or cuts the stream, event by event */
    return;
  }
  for (size_t i = 0; i < n; i++) session_keep(s, e[i]);
  http_stream_send(s->stream, bytes, len);
  s->registry->frames_sent += n;
}

static void session_replay_from(session_t *s, unsigned first) {
  for (unsigned i = first; i < s->ring_count; i++) {
    if (!session_write(s, ring_at(s, i), true)) return;
    s->registry->frames_replayed++;
  }
  s->undelivered = 0;
}

bool session_replay_after(session_t *s, const char *id, size_t len) {
  session_settle(s->registry);
  for (unsigned i = s->ring_count; i-- > 0;) {
    if (frame_id_is(ring_at(s, i), id, len)) {
      session_replay_from(s, i + 1);
      return true;
    }
  }
  return false;
}

void session_replay_undelivered(session_t *s) {
  session_settle(s->registry);
  session_replay_from(s, s->ring_count - s->undelivered);
}

int session_send(session_t *s, const char *json, size_t len, bool keep) {
  if (s->stream == NULL && !keep) return -ENOTCONN;
  frame_t *f = frame_create(s->registry->position(s, s->registry->position_data), 's',
                            s->next_frame++, json, len);
  session_deliver(s, frame_whole(f));
  frame_unref(f);
  return 0;
}

void session_log(session_t *s, enum session_log_level level, const char *logger, const char *data) {
  if (s->stream == NULL || level < s->log_level) return;
  cJSON *params = cJSON_CreateObject();
  cJSON_AddStringToObject(params, "level", session_log_level_name(level));
  cJSON_AddStringToObject(params, "logger", logger);
  cJSON_AddStringToObject(params, "data", data);
  cJSON *msg = jsonrpc_notification("notifications/message", params);
  char *text = cJSON_PrintUnformatted(msg);
  cJSON_Delete(msg);
  if (text == NULL) return;
  if (session_send(s, text, strlen(text), false) != 0) {
    /* No stream: log messages are only worth sending live. */
  }
  cJSON_free(text);
}

/* Pending notices --------------------------------------------------------------------- */

void session_ended_destroy(session_ended *e) {
  if (e == NULL) return;
  for (size_t i = 0; i < e->n; i++) {
    free(e->items[i].uri);
    free(e->items[i].reason);
  }
  free(e->items);
  free(e);
}

void session_notices_add_ended(session_t *s, const char *uri, const char *reason, size_t max) {
  if (max == 0) return;
  if (s->ended == NULL) s->ended = mem_calloc(1, sizeof(*s->ended));
  session_ended *e = s->ended;
  for (size_t i = 0; i < e->n; i++) {
    if (strcmp(e->items[i].uri, uri) == 0) { /* the newest end of a URI says it all */
      free(e->items[i].reason);
      e->items[i].reason = mem_strdup(reason);
      return;
    }
  }
  if (e->n >= max) { /* bounded: the oldest goes */
    free(e->items[0].uri);
    free(e->items[0].reason);
    memmove(e->items, e->items + 1, (e->n - 1) * sizeof(e->items[0]));
    e->n--;
  }
  if (e->n == e->cap) {
    e->cap = e->cap == 0 ? 4 : e->cap * 2;
    e->items = mem_realloc(e->items, e->cap * sizeof(e->items[0]));
  }
  e->items[e->n].uri = mem_strdup(uri);
  e->items[e->n].reason = mem_strdup(reason);
  e->n++;
}

session_ended *session_notices_take(session_t *s, bool *list_changed) {
  *list_changed = s->list_pending;
  s->list_pending = false;
  session_ended *e = s->ended;
  s->ended = NULL;
  return e;
}

void session_notices_clear(session_t *s) {
  bool list_changed;
  session_ended_destroy(session_notices_take(s, &list_changed));
}

void session_registry_keepalive(session_registry_t *reg) {
  buf_t b;
  buf_init(&b);
  sse_format_comment(&b, "keepalive");
  session_t *s = reg->streams;
  while (s != NULL) {
    session_t *next = s->stream_next; /* a cut unlinks s later, but be safe */
    if (http_stream_write(s->stream, b.data, b.len) != 0) {
      /* Cut: its close callback unlinks it. */
    }
    s = next;
  }
  buf_finish(&b);
}
