/*
 * A worker: one libuv loop serving HTTP connections, with its own SQLite
 * connection and its live sessions. All live state of the server hangs off
 * a worker_t; nothing is global, so that several workers (processes) can
 * each own one. Requests are routed here to the MCP endpoint, the REST
 * API and the health/status endpoints, after the Host/Origin check.
 */
#ifndef MCPSUB_WORKER_H
#define MCPSUB_WORKER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/config.h"
#include "common/stats.h"
#include "common/store.h"
#include "worker/auth.h"
#include "worker/http.h"
#include "worker/lane.h"
#include "worker/limits.h"
#include "worker/session.h"
#include "worker/sub_index.h"
#include "worker/tailer.h"
#include "worker/reader.h"
#include "worker/writer.h"

typedef struct waiter waiter_t;
typedef struct coalesce_entry coalesce_entry;

typedef struct worker {
  uv_loop_t *loop;
  const config_t *cfg;
  store_t *store;       /* the loop's connection: reads (and writes that must not wait) */
  lane_t lane;          /* what may use it runs there, one job at a time (lane.h) */
  lane_task sweep_task; /* the idle sweep, a job on the lane */
  char origin[24]; /* "w" and 64 random bits in hex: this worker's writes in the subscription log */
  writer_t *writer; /* every other write, on its own thread and connection */
  reader_t *reader; /* PostgreSQL: reads of records and collections, off the lane (or NULL) */
  http_server_t *http;
  auth_state auth; /* API keys; who may do what */
  limits_t limits; /* per-principal limits */
  session_registry_t sessions;
  strmap ending;   /* ids of ended sessions whose rows are being deleted: never restored */
  sub_index subs;  /* every subscription of every owner */
  tailer_t tailer; /* the audit-log feed */
  struct listen_stream *listens; /* open subscriptions/listen streams (listen.h) */
  size_t n_listens;
  struct confirm_pending *confirms;   /* destructive calls waiting for the user (confirm.h) */
  struct tool_write_job *tool_writes; /* tool writes handed to the writer (tools_cancel) */
  size_t n_confirms;
  size_t n_signals;        /* signal-log rows being written (mcp.c, MCP_SIGNALS_MAX) */
  waiter_t *waiters;       /* pending wait_and_read calls */
  waiter_t *waiters_ready; /* of which saw a change in the current tailer batch */
  size_t n_waiters;
  strmap coalesce; /* "<topic id> <uri>" -> coalesce_entry (--coalesce-ms) */
  /* Held updates, in commit order (the head goes first), and open windows, by end. */
  coalesce_entry *coalesce_held_head, *coalesce_held_tail;
  coalesce_entry *coalesce_open_head, *coalesce_open_tail;
  uv_timer_t coalesce_timer;
  /* Subscription rows to write again (subscriptions.c, subs_row_unsaved): "<id>\n<uri>" -> w. */
  strmap subs_unsaved;
  uv_timer_t subs_retry;
  uint64_t subs_retry_ms; /* the next retry's delay: doubles while writes keep failing */
  /* Per-subscription debounce (debounce.h): queues that hold something, entries by key. */
  hold_queue *hold_queues;
  strmap holds; /* "<sub> <record uri>" -> hold_entry of a debounced subscription */
  uv_timer_t hold_timer;
  int64_t hold_due;        /* loop ms the timer is armed for */
  sub_topic **matched;     /* the topics one change matched (reused; grows) */
  buf_t fmt_uri, fmt_head; /* scratch of the update formatter: a record URI, a listen head */
  buf_t key_fold;          /* a change's key folded as its table's key compares (subscriptions.c) */
  size_t n_matched, matched_cap;
  /* The turn's fan-out (subscriptions.c): updates held for the loop turn's end. */
  struct {
    struct turn_update *updates; /* in commit order */
    size_t n, cap;               /* (cap: of updates, events and order) */
    sub_topic **topics;          /* the topics they are for, in the order of their first */
    size_t n_topics, topics_cap; /* (of topics and start) */
    frame_ev *events;            /* at the end: the updates' events, topic by topic, */
    uint32_t *order;             /* the index in updates of each, */
    uint32_t *slots;             /* and each one's change and kind (as turn_update's) */
    size_t *start;               /* (per topic, where its updates end: a counting sort) */
    frame_t **refs;              /* their whole frames, a reference each */
    size_t n_refs, refs_cap;
    struct turn_change *changes; /* their changes, in commit order */
    size_t n_changes, changes_cap;
    buf_t uris;  /* the record URIs of their changes, each once: as JSON, then as text, NUL-ended */
    buf_t bytes; /* a topic's updates' frames end to end, sent to each of its subscribers */
    size_t *ends; /* where each of those frames ends in bytes */
    /* A topic's listen heads end to end (listen_deliver_run), and where each ends. */
    buf_t listen_heads;
    size_t *listen_ends;
    size_t ends_cap; /* (of ends and listen_ends) */
    buf_t run;       /* one listen stream's events, put together from listen_heads */
    /* Streams of several subscriptions: their topics' updates, merged at the end. */
    struct turn_merge *merges;
    size_t n_merges, merges_cap;
    uint32_t *merge_pos; /* one session's updates merged: their places in events */
    frame_ev *merge_ev;  /* and the updates so */
    size_t merge_cap;    /* (of merge_pos and merge_ev) */
    /* For listen streams of several: their topics' listen heads, each update's in spans. */
    buf_t listen_all;
    struct listen_span *listen_spans; /* by place in events (cap of them) */
    size_t listen_spans_cap;
    bool settling;
  } turn;
  uint64_t notifications;      /* resource-update frames formatted */
  uint64_t schema_checked_at;  /* loop time of the last schema check */
  uint64_t schema_forced_at;   /* uv_now of the last look at the schema a miss asked for */
  int64_t schema_version_seen; /* the schema the writer was last asked to install triggers for */
  /*
   * Set by the process model when other workers share the database: called
   * after this worker committed, so that their tailers are woken at once.
   */
  void (*on_local_commit)(struct worker *w);
  /*
   * Set likewise: this worker restored a session from its row; another
   * worker may hold a live copy (restored while this one's slot was down).
   */
  void (*on_restored)(struct worker *w, const char *id);
  /* Set likewise: a notifications/cancelled for a listen stream this worker does not hold. */
  void (*on_unknown_cancel)(struct worker *w, const char *principal, const char *id_json);
  /* ...and an answer to an elicitation this worker did not send (confirm.h). */
  void (*on_unknown_answer)(struct worker *w, const char *principal, const char *session,
                            const cJSON *msg);
  void *ipc; /* the worker's end of the master pipe (multi-process mode) */
  /*
   * Set likewise: sends an ipc.h message to the worker of slot on their own
   * channel (the write home's and another worker's, forward.h); false when
   * there is none or it cannot go.
   */
  bool (*send_peer)(struct worker *w, unsigned slot, uint32_t cmd, const void *payload, size_t len);
  /* Record writes go to the write home (forward.h): those sent wait here, oldest first. */
  bool forwards;
  struct writer_record *fwd_head, *fwd_tail;
  int64_t fwd_seq;
  /*
   * What a loop turn gathers, sent as one message each at the turn's end
   * (fwd_idle): the writes for the home ("[w,w,", the first of them
   * fwd_unsent in the list above), and at the home the answers for each
   * sender slot ("[a,a,"; fwd_answers has n_slots, made at the first).
   */
  uv_idle_t fwd_idle;
  buf_t fwd_out;
  struct writer_record *fwd_unsent;
  buf_t *fwd_answers;
  uint64_t others_wrote_ms; /* loop time another worker last said it committed (IPC_COMMITTED) */
  uint64_t writes_forwarded, writes_taken;
  /*
   * Under a master: hands the connection of the request in hand back to the
   * master to be routed again (true), or declines (false: answer here).
   * NULL in one process. n_slots is the number of worker slots then.
   */
  bool (*reroute)(struct worker *w, http_conn_t *c);
  unsigned n_slots;
  uint32_t generation;  /* restarts of this slot before this worker */
  int64_t started_ms;   /* Unix ms */
  int64_t busy_mark_ms; /* when sub_topic.busy_mark was last taken (0: never) */
  /* Graceful stop (worker_drain). */
  bool draining;
  uv_timer_t drain_timer;  /* checks for the last connection, then the deadline */
  uint64_t drain_deadline; /* loop time */
  void (*drain_done)(struct worker *w);
  uv_timer_t sweep_timer;     /* idle-session prune and audit retention */
  uv_timer_t keepalive_timer; /* SSE keepalive comments */
  uv_timer_t auth_timer;      /* key file changes, revoked and expired credentials */
  uv_prepare_t auth_turn;     /* marks the key file unchecked at each loop turn */
  uv_signal_t sighup;         /* reload the key file */
  unsigned slot;              /* worker number, encoded in session ids */
  int64_t last_audit_prune_ms;
  uint64_t requests;                              /* requests served */
  stats_histogram notify_delay;                   /* commit -> updates queued (subscriptions.c) */
  stats_histogram request_seconds[STATS_METHODS]; /* by method (worker_on_answered) */
  bool closing;
} worker_t;

/*
 * Opens the store and creates the HTTP server on loop. err gets a message on
 * failure. Does not listen yet.
 */
int worker_init(worker_t *w, uv_loop_t *loop, const config_t *cfg, unsigned slot, char *err,
                size_t errlen) MCPSUB_NODISCARD;
/* Listens on cfg's address (one-process mode). */
int worker_listen(worker_t *w) MCPSUB_NODISCARD;
/* Stops listening, ends streams, closes connections and timers; run the loop to finish. */
void worker_shutdown(worker_t *w);
/* Frees what worker_init made, after the loop has run the closes. */
void worker_finish(worker_t *w);
/*
 * Graceful stop: no new connections are taken (the listener closes), every
 * SSE stream is told to retry and ended, pending wait_and_read calls are
 * answered (timedOut), idle connections close and the others close after
 * their in-flight response. Once no connection is left, or timeout_ms
 * passed (what is left is then closed), worker_shutdown runs and done(w)
 * is called; the owner then closes what it added to the loop.
 */
void worker_drain(worker_t *w, uint64_t timeout_ms, void (*done)(worker_t *w));
/* Fills st with the worker's counters (the report a worker sends its master). */
void worker_stats_collect(worker_t *w, worker_stats *st);
/* The DNS-rebinding guard of every request: may a request with these Host and Origin (NULL when
 * absent) be served? */
bool worker_host_origin_allowed(const config_t *cfg, const char *host, const char *origin);

/* Response helpers shared by the endpoint modules. ------------------------- */

/* Sends json (not consumed) with Content-Type application/json and extra headers. */
void worker_respond_json(http_conn_t *c, int status, const cJSON *json, const http_header *extra,
                         size_t n_extra);
/* Sends {"error": message} with status. */
void worker_respond_error(http_conn_t *c, int status, const char *message);
/* Writes one SSE event "data: <json>\n\n" on a stream begun with http_stream_begin_sse. */
void worker_sse_send(http_conn_t *c, const cJSON *json);
/* The same for json printed already (len bytes). */
void worker_sse_send_text(http_conn_t *c, const char *json, size_t len);
/* The same with extra headers (Retry-After, WWW-Authenticate, Allow). */
void worker_respond_error_with(http_conn_t *c, int status, const char *message,
                               const http_header *extra, size_t n_extra);
/* Sends 405 with an Allow header. */
void worker_respond_not_allowed(http_conn_t *c, const char *allow);

/* Durable session bookkeeping shared by MCP and the sweep. */
void worker_session_touch(worker_t *w, session_t *s);
/* Removes the live session and (on the writer) its row. */
void worker_session_end(worker_t *w, session_t *s);
/* The same, then then(rc, data) once the row is gone: nothing can restore the session after it. */
void worker_session_end_then(worker_t *w, session_t *s, void (*then)(int rc, void *data),
                             void *data);
/* Ends the live copy here and its stream; the row stays (another worker, or a restart, has it). */
void worker_session_forget(worker_t *w, session_t *s);
/* Was the session of this id ended here, its row not yet deleted? Then it is not restored. */
bool worker_session_ending(const worker_t *w, const char *id, size_t len);

#endif
