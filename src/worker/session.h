/*
 * Live MCP sessions of one worker: an id-keyed registry of session_t, each
 * with its negotiated protocol version, log level, activity time, its
 * subscriptions, its replay ring and, while the client holds one open, its
 * GET SSE stream. Everything here is the live half of a session; the
 * durable half is its mcp_session row (see store.h), from which a session
 * is restored when this worker has no live state for an id the database
 * still knows.
 *
 * The replay ring keeps the session's last SESSION_RING_SIZE frames,
 * whether or not a stream was open when they were sent: it is how a
 * reconnect with Last-Event-ID is replayed exactly, and how updates for a
 * subscription made before the stream opened wait (bounded) for it.
 */
#ifndef MCPSUB_SESSION_H
#define MCPSUB_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/session_id.h"
#include "common/strmap.h"
#include "worker/frame.h"
#include "worker/http.h"
#include "worker/sub_index.h"

#define SESSION_RING_SIZE 100

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
  sub_owner owner; /* SUB_OWNER_SESSION; first, so a sub's owner is the session */
  char id[SESSION_ID_LEN + 1];
  char protocol_version[16];
  /* The small members together, after the id's odd length (every idle session holds one). */
  bool elicit_form;  /* the client declared form elicitation (confirm.h) */
  bool lost;         /* undelivered frames fell off the ring, from lost_from on */
  bool ring_paired;  /* the ring keeps a tail per slot too (session.c) */
  bool list_pending; /* a list_changed no stream has taken yet (session_notices_*) */
  enum session_log_level log_level;
  int64_t created_ms;            /* Unix ms */
  int64_t last_seen_ms;          /* Unix ms of the last request or stream activity */
  int64_t persisted_seen_ms;     /* last_seen as last written to mcp_session */
  uint64_t next_frame;           /* number for the session's own frames' ids */
  char *principal;               /* who created it (auth.h); only the same principal may use it */
  uint8_t credential[32];        /* hash of the API key last used on it (auth_still_valid) */
  int64_t credential_expires_ms; /* when that credential stops working, 0: not by time */
  http_conn_t *stream;           /* open GET stream, or NULL */
  session_registry_t *registry;  /* beside stream: a delivery reads both */
  sub_t *subs;                   /* subscriptions, through sub_t.owner_next */
  size_t n_subs;
  strmap *subs_by_uri; /* uri -> sub_t, once it holds many (subscriptions.c), or NULL */
  /* Of its subscriptions, those with a debounce of their own: the turn's fan-out holds none */
  size_t n_debounced;
  uint32_t turn_last; /* + 1: its last entry in the turn's merges (subscriptions.c), or 0 */
  frame_t **ring;     /* ring_cap slots (and as many tails after them when ring_paired):
                         grows on demand up to SESSION_RING_SIZE */
  unsigned ring_cap, ring_start, ring_count;
  unsigned undelivered;                      /* newest ring frames no stream has taken yet */
  hold_queue held;                           /* updates debounce holds back (debounce.h) */
  frame_pos lost_from;                       /* the oldest frame lost, when lost */
  struct session_ended *ended;               /* ended notices no stream has taken yet, or NULL */
  struct session *stream_prev, *stream_next; /* registry's list of streaming sessions */
} session_t;

struct session_registry {
  strmap by_id;
  size_t count;
  session_t *streams; /* sessions with an open stream */
  size_t n_streams;
  unsigned sse_retry_ms;
  /* The session's delivered position, for the ids of its own frames. */
  int64_t (*position)(const session_t *s, void *data);
  void *position_data;
  /*
   * Set while updates of this loop turn wait to be delivered subscriber by
   * subscriber (subscriptions.c: the turn's fan-out); settle(settle_data)
   * delivers them. Whatever delivers to a session, reads its ring or opens
   * or ends its stream settles first, so nothing overtakes them, but for a
   * delivery to a session that cannot be holding any (session_deliver_unheld).
   */
  bool turn_held;
  void (*settle)(void *data);
  void *settle_data;
  uint64_t frames_sent;     /* frames written to streams */
  uint64_t frames_dropped;  /* frames no stream took before they left the ring */
  uint64_t frames_replayed; /* frames sent again on a resumption (ring or audit log) */
};

void session_registry_init(session_registry_t *reg, unsigned sse_retry_ms,
                           int64_t (*position)(const session_t *s, void *data),
                           void *position_data);
/* Ends every stream and frees every session (their subscriptions must be gone). */
void session_registry_finish(session_registry_t *reg);

/* Adds a new session with id (which must not be registered). Never NULL. */
session_t *session_registry_add(session_registry_t *reg, const char *id,
                                const char *protocol_version, int64_t now_ms);
/* Records who owns the session (copied). */
void session_set_principal(session_t *s, const char *principal);

/* The live session with this id, or NULL. len is the id's length. */
session_t *session_registry_find(session_registry_t *reg, const char *id, size_t len);
/* Ends the session's stream (if any), drops its ring and frees it. Its subscriptions must be gone.
 */
void session_registry_remove(session_registry_t *reg, session_t *s);
/* Calls fn for every session; fn may remove the session it is given. */
void session_registry_foreach(session_registry_t *reg, void (*fn)(session_t *s, void *data),
                              void *data);

/*
 * Makes c the session's SSE stream: sends the 200 response head and the
 * retry field. An older stream of the session is ended (superseded). The
 * stream detaches itself when its connection closes. The caller then
 * replays what the client missed and calls session_stream_prime.
 */
void session_stream_open(session_t *s, http_conn_t *c);
/* Sends the priming event (an id naming the current position, empty data). */
void session_stream_prime(session_t *s);
/* Ends the session's stream, if any (flushes, then closes the connection). */
void session_stream_close(session_t *s);

/*
 * Starts loading what session_deliver reads and writes (a hint: it changes
 * nothing): the ring's next slots, as many as a turn brings a session of
 * one subscription, and the stream.
 */
void session_prefetch(const session_t *s);
/* Keeps the event (new references are taken) in the ring and writes it to the stream, if open. */
void session_deliver(session_t *s, frame_ev e);
/*
 * The same without settling the turn first, for a session none of whose
 * updates the turn's fan-out can be holding (subscriptions.c: a subscriber
 * of a topic it does not take; a session whose updates it holds has that
 * one subscription only).
 */
void session_deliver_unheld(session_t *s, frame_ev e);
/*
 * Delivers n events in order, as session_deliver does, and hands them to
 * the stream's socket at once rather than at the turn's end, while they
 * are in the cache. It does not settle: the turn's fan-out calls it.
 */
void session_deliver_now(session_t *s, const frame_ev *e, size_t n);
/*
 * The same, with the events' frames already laid end to end in bytes (len
 * of them), which many sessions are sent from (http_stream_send).
 */
void session_deliver_bytes(session_t *s, const frame_ev *e, size_t n, const char *bytes,
                           size_t len);
/*
 * When the ring holds the frame whose event id is id, writes every frame
 * after it to the stream and returns true; else writes nothing, false.
 */
bool session_replay_after(session_t *s, const char *id, size_t len);
/* Writes the ring's frames no stream has taken yet. */
void session_replay_undelivered(session_t *s);

/*
 * Sends one JSON-RPC message (text, len) as a frame of the session's own
 * (ring and stream). Without a stream it waits in the ring for the next
 * one when keep is set; else it is dropped (-ENOTCONN: only worth sending
 * live). Returns 0 otherwise.
 */
int session_send(session_t *s, const char *json, size_t len, bool keep);
/*
 * Sends notifications/message {level, logger, data} when level is at or
 * above the session's level and a stream is open. data is plain text.
 */
void session_log(session_t *s, enum session_log_level level, const char *logger, const char *data);

/*
 * Notices a session must hear even when they leave its ring unsent or a
 * resumption from the audit log passes over them: list_changed (one bit:
 * it means "re-list") and the end of a subscription (its URI and why). A
 * notice is noted as sent when no stream took it (s->undelivered > 0
 * after the send); the note goes once a stream has taken every frame the
 * ring held (session_notices_clear) or the notices are sent again after a
 * resumption (session_notices_take). Nothing is allocated for a session
 * that never had an ended notice wait.
 */
typedef struct session_ended {
  size_t n, cap;
  struct session_ended_notice {
    char *uri, *reason;
  } * items;
} session_ended;

/* Notes an ended notice for uri (copied); one per URI, at most max (the oldest goes). */
void session_notices_add_ended(session_t *s, const char *uri, const char *reason, size_t max);
/* Forgets the notes (a stream took them from the ring). */
void session_notices_clear(session_t *s);
/*
 * Hands the ended notes to the caller (release with session_ended_destroy;
 * NULL when none) and clears the list_changed bit into *list_changed.
 */
session_ended *session_notices_take(session_t *s, bool *list_changed);
void session_ended_destroy(session_ended *e); /* NULL: no-op */

/* Writes a keepalive comment on every open stream. */
void session_registry_keepalive(session_registry_t *reg);

/* Parses an MCP level name; -EINVAL when unknown. */
int session_log_level_parse(const char *name, enum session_log_level *out);
const char *session_log_level_name(enum session_log_level level);

#endif
