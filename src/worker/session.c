/*
 * Live session registry and the SSE side of a session. A session is found
 * by id through a chained hash table sized to grow with the count; a
 * session with an open GET stream is also on a doubly linked list so that
 * keepalives and shutdown touch only streaming sessions. Frames are
 * formatted into one buffer and handed to the HTTP layer, which bounds each
 * stream's queue; a stream over its bound is cut and the client resumes.
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

/* FNV-1a over the id: ids are random, so any cheap mix spreads them. */
static size_t session_hash(const char *id, size_t len) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)id[i];
    h *= 1099511628211ULL;
  }
  return (size_t)h;
}

void session_registry_init(session_registry_t *reg, unsigned sse_retry_ms) {
  memset(reg, 0, sizeof(*reg));
  reg->n_buckets = 64;
  reg->buckets = mem_calloc(reg->n_buckets, sizeof(*reg->buckets));
  reg->sse_retry_ms = sse_retry_ms;
}

static void session_free(session_t *s) {
  session_stream_close(s);
  free(s);
}

void session_registry_finish(session_registry_t *reg) {
  for (size_t i = 0; i < reg->n_buckets; i++) {
    session_t *s = reg->buckets[i];
    while (s != NULL) {
      session_t *next = s->hash_next;
      session_free(s);
      s = next;
    }
  }
  free(reg->buckets);
  memset(reg, 0, sizeof(*reg));
}

static void session_registry_grow(session_registry_t *reg) {
  size_t n = reg->n_buckets * 2;
  session_t **buckets = mem_calloc(n, sizeof(*buckets));
  for (size_t i = 0; i < reg->n_buckets; i++) {
    session_t *s = reg->buckets[i];
    while (s != NULL) {
      session_t *next = s->hash_next;
      size_t b = session_hash(s->id, strlen(s->id)) & (n - 1);
      s->hash_next = buckets[b];
      buckets[b] = s;
      s = next;
    }
  }
  free(reg->buckets);
  reg->buckets = buckets;
  reg->n_buckets = n;
}

session_t *session_registry_add(session_registry_t *reg, const char *id,
                                const char *protocol_version, int64_t now_ms) {
  if (reg->count + 1 > reg->n_buckets) session_registry_grow(reg);
  session_t *s = mem_calloc(1, sizeof(*s));
  snprintf(s->id, sizeof(s->id), "%s", id);
  snprintf(s->protocol_version, sizeof(s->protocol_version), "%s", protocol_version);
  s->log_level = SESSION_LOG_INFO;
  s->created_ms = now_ms;
  s->last_seen_ms = now_ms;
  s->persisted_seen_ms = now_ms;
  s->next_event = 1;
  s->registry = reg;
  size_t b = session_hash(s->id, strlen(s->id)) & (reg->n_buckets - 1);
  s->hash_next = reg->buckets[b];
  reg->buckets[b] = s;
  reg->count++;
  return s;
}

session_t *session_registry_find(session_registry_t *reg, const char *id, size_t len) {
  if (len != SESSION_ID_LEN) return NULL;
  size_t b = session_hash(id, len) & (reg->n_buckets - 1);
  for (session_t *s = reg->buckets[b]; s != NULL; s = s->hash_next) {
    if (memcmp(s->id, id, len) == 0) return s;
  }
  return NULL;
}

void session_registry_remove(session_registry_t *reg, session_t *s) {
  size_t b = session_hash(s->id, strlen(s->id)) & (reg->n_buckets - 1);
  for (session_t **p = &reg->buckets[b]; *p != NULL; p = &(*p)->hash_next) {
    if (*p == s) {
      *p = s->hash_next;
      reg->count--;
      break;
    }
  }
  session_free(s);
}

static void session_stream_unlink(session_t *s) {
  session_registry_t *reg = s->registry;
  if (s->stream_prev != NULL) s->stream_prev->stream_next = s->stream_next;
  else reg->streams = s->stream_next;
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
  http_conn_set_close_cb(c, NULL, NULL);
  session_stream_unlink(s);
  http_stream_end(c);
}

static void session_event_id(session_t *s, char *out, size_t n) {
  snprintf(out, n, "%llu", (unsigned long long)s->next_event++);
}

void session_stream_open(session_t *s, http_conn_t *c) {
  session_stream_close(s); /* a new GET supersedes the old stream */
  static const http_header head[] = {
      {"Content-Type", "text/event-stream"},
      {"Cache-Control", "no-cache, no-transform"},
      {"X-Accel-Buffering", "no"},
  };
  http_stream_begin(c, 200, head, ARRAY_LEN(head));
  s->stream = c;
  session_registry_t *reg = s->registry;
  s->stream_next = reg->streams;
  if (reg->streams != NULL) reg->streams->stream_prev = s;
  reg->streams = s;
  reg->n_streams++;
  http_conn_set_close_cb(c, session_stream_on_close, s);

  /* retry: first, then a priming event whose id a reconnect can name. */
  buf_t b;
  buf_init(&b);
  char id[32];
  session_event_id(s, id, sizeof(id));
  sse_format_retry(&b, reg->sse_retry_ms);
  sse_format_event(&b, id, NULL, "", 0);
  if (http_stream_write(c, b.data, b.len) != 0) {
    /* Cut already; the close callback detaches the stream. */
  }
  buf_finish(&b);
}

int session_send(session_t *s, const char *json, size_t len) {
  if (s->stream == NULL) return -ENOTCONN;
  buf_t b;
  buf_init(&b);
  char id[32];
  session_event_id(s, id, sizeof(id));
  sse_format_event(&b, id, NULL, json, len);
  int rc = http_stream_write(s->stream, b.data, b.len);
  buf_finish(&b);
  return rc;
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
  if (session_send(s, text, strlen(text)) != 0) {
    /* No stream, or cut for its queue: the client resumes; nothing to do here. */
  }
  cJSON_free(text);
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
