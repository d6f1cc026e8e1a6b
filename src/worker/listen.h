/*
 * subscriptions/listen (MCP 2026-07-28): a long-lived POST whose answer is
 * an SSE stream of the changes it asked for. A listen stream is a
 * subscription owner like a session (sub_index.h): it subscribes to each
 * URI it honours through the same index, and the tailer's matches reach it
 * the way they reach sessions. What differs is only on the wire:
 *
 *   - the first event is notifications/subscriptions/acknowledged with the
 *     filter as honoured (URIs that are not subscribable are left out) and
 *     the stream's audit position under _meta["io.mcpsub/position"];
 *   - every notification carries _meta["io.modelcontextprotocol/
 *     subscriptionId"] = the listen request's id, and resource updates
 *     also _meta["io.mcpsub/position"] (the change's audit position);
 *   - events have no id: lines (2026-07-28 has no Last-Event-ID); a client
 *     that passes a position it saw as _meta["io.mcpsub/after"] on a new
 *     listen gets one update per URI changed since then, before live ones
 *     (the documented recovery extension);
 *   - the stream ends when the client closes it or cancels the request
 *     (notifications/cancelled, on any worker: listen_cancel), and when
 *     the server ends it — its credential stops working, or a drain —
 *     with the listen request's result.
 *
 * Per update, a listen stream costs three copies (the event's head, shared
 * by every listen stream of the topic and formatted once per change; its
 * own id; the tail): no allocation per subscriber. A stream gets its
 * updates of a loop turn at once (the turn's fan-out, subscriptions.c),
 * put together in one hot buffer and handed to the socket: from its
 * topic's heads (listen_deliver_run), or, holding several URIs, from its
 * topics' in commit order (listen_deliver_spans). A debounced stream's
 * updates come change by change, through its hold queue.
 */
#ifndef MCPSUB_LISTEN_H
#define MCPSUB_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/auth.h"
#include "worker/http.h"
#include "worker/sub_index.h"

typedef struct worker worker_t;
typedef struct mcp_call mcp_call;

#define LISTEN_ID_MAX 256 /* bytes of the listen request's id, as JSON */
/* The _meta key of a listen stream's audit position (the acknowledgement's, each update's). */
#define LISTEN_META_POSITION "io.mcpsub/position"

enum {
  LISTEN_RESOURCES_LIST = 1u << 0, /* the only list that changes (listen_lists_changed) */
};

typedef struct listen_stream {
  sub_owner owner; /* SUB_OWNER_LISTEN; first, so a sub's owner is the stream */
  worker_t *w;
  http_conn_t *conn;               /* NULL once closed (while a recovery still runs) */
  bool recovering;                 /* subs_listen_recover runs: a close leaves the freeing to it */
  char id_json[LISTEN_ID_MAX + 1]; /* the request id, as JSON (a string or a number) */
  size_t id_len;
  unsigned lists; /* LISTEN_* list_changed notifications wanted */
  char principal[AUTH_PRINCIPAL_MAX + 1];
  uint8_t credential[32];
  int64_t credential_expires_ms;
  sub_t *subs; /* through sub_t.owner_next */
  size_t n_subs;
  hold_queue held;    /* updates debounce holds back (debounce.h) */
  uint32_t turn_last; /* + 1: its last entry in the turn's merges (subscriptions.c), or 0 */
  struct listen_stream *prev, *next; /* the worker's list */
} listen_stream;

/* Where an event's head lies in a buffer of heads (listen_deliver_spans). */
typedef struct listen_span {
  uint32_t at, len;
} listen_span;

/* The subscriptions/listen handler: answers with the stream (call->pending). */
cJSON *listen_open(mcp_call *call);

/*
 * Appends, inside params._meta of a notification being formatted, the
 * member name of the subscription id: what ends the head listen_deliver
 * takes ("data: {...,"params":{...,"_meta":{...,"...subscriptionId":").
 */
void listen_append_id_key(buf_t *b);
/*
 * Writes one notification on the stream: head (formatted once for every
 * listen stream it goes to), the stream's own id, and the end of the event.
 */
void listen_deliver(listen_stream *l, const char *head, size_t head_len);
/*
 * Writes the events whose heads (as listen_deliver takes them) lie end to
 * end in heads, head i ending at ends[i], from head `from` to head n - 1:
 * put together with the stream's id in run, and handed to the socket now.
 */
void listen_deliver_run(listen_stream *l, buf_t *run, const char *heads, const size_t *ends,
                        size_t from, size_t n);
/* The same with the heads in spans[pos[0]], spans[pos[1]]... (m of them) of heads. */
void listen_deliver_spans(listen_stream *l, buf_t *run, const char *heads, const listen_span *spans,
                          const uint32_t *pos, size_t m);

/* Subscriptions of principal's listen streams on this worker (for --limit-subscriptions). */
size_t listen_subscriptions_of(const worker_t *w, const char *principal);
/* notifications/<what>/list_changed to every listen stream that asked for it (LISTEN_*). */
void listen_lists_changed(worker_t *w, unsigned what);
/* A keepalive comment on every listen stream. */
void listen_keepalive(worker_t *w);
/* Ends every listen stream with the listen request's result (a drain). */
void listen_end_all(worker_t *w);
/* Closes every listen stream and frees it now (the worker is shutting down). */
void listen_close_all(worker_t *w);
/* Closes the listen streams whose credential no longer works (auth_still_valid). */
void listen_check_credentials(worker_t *w, int64_t now_ms);
/*
 * notifications/cancelled for requestId (JSON text) from principal: ends
 * that principal's listen stream with this id on this worker. true when
 * one was found.
 */
bool listen_cancel(worker_t *w, const char *principal, const char *id_json);

#endif
