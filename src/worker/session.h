/*
 * Live MCP sessions of one worker: an id-keyed registry of session_t, each
 * with its negotiated protocol version, log level, activity time and, while
 * the client holds one open, its GET SSE stream. Everything here is the
 * live half of a session; the durable half is its mcp_session row (see
 * store.h), from which a session is restored when this worker has no live
 * state for an id the database still knows.
 *
 * The registry never does I/O besides writing frames to streams; callers
 * persist rows.
 */
#ifndef MCPSUB_SESSION_H
#define MCPSUB_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/session_id.h"
#include "worker/http.h"

/* MCP logging levels, in increasing severity (RFC 5424 names). */
enum session_log_level {
  SESSION_LOG_DEBUG = 0,
  SESSION_LOG_INFO,
  SESSION_LOG_NOTICE,
  SESSION_LOG_WARNING,
  SESSION_LOG_ERROR,
  SESSION_LOG_CRITICAL,
  SESSION_LOG_ALERT,
  SESSION_LOG_EMERGENCY,
};

typedef struct session_registry session_registry_t;

typedef struct session {
  char id[SESSION_ID_LEN + 1];
  char protocol_version[16];
  enum session_log_level log_level;
  int64_t created_ms;         /* Unix ms */
  int64_t last_seen_ms;       /* Unix ms of the last request or stream activity */
  int64_t persisted_seen_ms;  /* last_seen as last written to mcp_session */
  uint64_t next_event;        /* number of the next SSE frame */
  http_conn_t *stream;        /* open GET stream, or NULL */
  session_registry_t *registry;
  struct session *hash_next;
  struct session *stream_prev, *stream_next; /* registry's list of streaming sessions */
} session_t;

struct session_registry {
  session_t **buckets;
  size_t n_buckets;
  size_t count;
  session_t *streams; /* sessions with an open stream */
  size_t n_streams;
  unsigned sse_retry_ms;
};

void session_registry_init(session_registry_t *reg, unsigned sse_retry_ms);
/* Ends every stream and frees every session. */
void session_registry_finish(session_registry_t *reg);

/* Adds a new session with id (which must not be registered). Never NULL. */
session_t *session_registry_add(session_registry_t *reg, const char *id,
                                const char *protocol_version, int64_t now_ms);
/* The live session with this id, or NULL. len is the id's length. */
session_t *session_registry_find(session_registry_t *reg, const char *id, size_t len);
/* Ends the session's stream (if any) and frees it. */
void session_registry_remove(session_registry_t *reg, session_t *s);

/*
 * Makes c the session's SSE stream: sends the 200 response head, the
 * retry field and a priming event. An older stream of the session is ended
 * (superseded). The stream detaches itself when its connection closes.
 */
void session_stream_open(session_t *s, http_conn_t *c);
/* Ends the session's stream, if any (flushes, then closes the connection). */
void session_stream_close(session_t *s);

/*
 * Writes one JSON-RPC message (text, len) as an SSE event with the next
 * event id. Returns 0; -ENOTCONN when the session has no stream (the
 * message is dropped); -ENOBUFS when the stream was over its queue limit and
 * has been cut.
 */
int session_send(session_t *s, const char *json, size_t len);
/*
 * Sends notifications/message {level, logger, data} when level is at or
 * above the session's level and a stream is open. data is plain text.
 */
void session_log(session_t *s, enum session_log_level level, const char *logger, const char *data);

/* Writes a keepalive comment on every open stream. */
void session_registry_keepalive(session_registry_t *reg);

/* Parses an MCP level name; -EINVAL when unknown. */
int session_log_level_parse(const char *name, enum session_log_level *out);
const char *session_log_level_name(enum session_log_level level);

#endif
