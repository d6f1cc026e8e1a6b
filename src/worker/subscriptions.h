/*
 * The subscription engine of a worker: resources/subscribe and
 * unsubscribe, the audit-log tailer's consumer that turns committed
 * changes into notifications/resources/updated, per-topic coalescing, the
 * resumption of a session's stream (replay ring, then the audit log), the
 * restore of a session's subscriptions from its mcp_session row, and
 * notifications/resources/list_changed. Owners of subscriptions are
 * sessions (2025: a GET stream), listen streams (2026-07-28: listen.h) and
 * wait_and_read waiters (wait.c). The engine speaks no protocol: the MCP
 * handlers (mcp.c) call it, it never calls them.
 */
#ifndef MCPSUB_SUBSCRIPTIONS_H
#define MCPSUB_SUBSCRIPTIONS_H

#include "worker/debounce.h"
#include "worker/listen.h"
#include "worker/session.h"
#include "worker/worker.h"

/* Largest number of distinct URIs a resumption replays from the audit log. */
#define SUBS_RECOVER_MAX 1000
/*
 * Most audit rows a resumption reads, on the worker's loop, before it
 * falls back to one re-read update per subscription: the bound of what
 * one reconnecting client can hold every other session of the worker up
 * (0.6 to 1.5 us a row, as the machine goes: 30 to 75 ms).
 */
#define SUBS_RECOVER_ROWS 50000
/*
 * The _meta key of the last update of a subscription that ended because its
 * URI stopped resolving (a dropped table or column); its value says why.
 */
#define SUBS_META_ENDED "io.mcpsub/subscriptionEnded"
/* The member of a stored subscription's options that makes it a tombstone (subs_list_prune). */
#define SUBS_ROW_ENDED "ended"

/* Longest record key a subscribed URI may name (bytes, decoded), as the tools' keys. */
#define SUBS_KEY_MAX 511

void subs_init(worker_t *w);
void subs_close(worker_t *w);
void subs_finish(worker_t *w);

/* Does session s hold a subscription to exactly this URI text? */
bool subs_session_has(session_t *s, const char *uri);
/*
 * Subscribes s to uri (parsed u, topic key as subs_resolve_for made it)
 * for the changes after audit position since, with debounce d (NULL:
 * none), replacing a subscription to the same text, and writes the
 * session's list to its row; then(rc, data) runs once it is written (then
 * may be NULL).
 */
void subs_session_add(worker_t *w, session_t *s, const char *key, const char *uri, const uri_t *u,
                      int64_t since, const debounce_t *d, void (*then)(int rc, void *data),
                      void *data);
/*
 * Adds owner o's subscription (as subs_session_add: key, uri, u, since, d)
 * to the index and to o's list *head (of *n). Returns it.
 */
sub_t *subs_owner_add(worker_t *w, sub_owner *o, sub_t **head, size_t *n, const char *key,
                      const char *uri, const uri_t *u, int64_t since, const debounce_t *d);
/* Removes every subscription of an owner's list *head (of *n), with its held updates. */
void subs_owner_drop(worker_t *w, sub_t **head, size_t *n);
/* Sends one held update of sub (debounce.c): record_uri changed at seq. */
void subs_deliver_held(worker_t *w, sub_t *sub, const char *record_uri, int64_t seq);
/*
 * Ends s's subscription to uri (false when it has none). What its stream
 * already queued is flushed; nothing more is sent for it. then(rc, data)
 * runs once the row no longer lists it (then may be NULL).
 */
bool subs_session_remove(worker_t *w, session_t *s, const char *uri,
                         void (*then)(int rc, void *data), void *data);

/*
 * Parses text as a subscribable resource URI: a record, collection or
 * filtered collection of an exported table, filters on its columns. A
 * record key of an integer-keyed table is normalised. 0, or -EINVAL.
 * Release u with uri_finish.
 */
int subs_resolve(worker_t *w, const char *text, uri_t *u) MCPSUB_NODISCARD; /* a miss: as below */
/*
 * store_find_table on the worker's store; a miss looks at the schema once
 * more first when the store reads it at its own pace (a table just created
 * by another connection is found).
 */
const store_table *subs_find_table(worker_t *w, const char *name);
#define SUBS_MISS_CHECK_MS 50

/* subs_resolve against base (the public URL) and st's schema (any thread's connection). */
int subs_resolve_in(const char *base, store_t *st, const char *text, uri_t *u) MCPSUB_NODISCARD;
/*
 * A session row's subscription list (JSON) with each URI that no longer
 * resolves against st's schema (a dropped table or column) made a
 * tombstone, {"uri": U, "debounce": {"ended": why}}: the session, restored
 * later, hears that the subscription ended and why (subs_session_restore),
 * and a table created again does not bring it back. A new string, or NULL
 * when nothing changes.
 */
char *subs_list_prune(const char *base, store_t *st, const char *json);

/*
 * subs_resolve for principal p and right (AUTH_SUBSCRIBE, AUTH_READ, or 0
 * for none): also -EINVAL when p may not, as for a table that does not
 * exist; a row scope of p's joins u's filters. *key gets the topic key
 * for sub_index_add (caller frees).
 */
int subs_resolve_for(worker_t *w, const auth_principal *p, const char *text, unsigned right,
                     uri_t *u, char **key) MCPSUB_NODISCARD;
/*
 * Why the last subs_resolve_for of this thread failed, for the client: the
 * URI's grammar (uri_error), a filter's unknown column on a table the
 * principal may use, or "" (no such table, or not for this principal).
 */
const char *subs_resolve_error(void);

/*
 * Restores subscriptions from a session row's JSON array of URIs, each
 * checked again against p's current grants (a URI p may no longer
 * subscribe to is dropped).
 */
void subs_session_restore(worker_t *w, session_t *s, const auth_principal *p,
                          const char *subscriptions);
/* Drops every subscription of the session (it is ending). */
void subs_session_drop(worker_t *w, session_t *s);

/*
 * Opens the session's stream on c and sends what the client missed:
 * frames after Last-Event-ID from the ring, or the changes since the
 * position it names from the audit log; without Last-Event-ID, the frames
 * no stream has taken yet. Then the priming event.
 */
void subs_stream_open(worker_t *w, session_t *s, http_conn_t *c, const char *last_event_id);

/*
 * Sends a listen stream what its subscriptions missed after audit position
 * after (the recovery extension; listen.h), up to what is delivered live.
 */
void subs_listen_recover(worker_t *w, listen_stream *l, int64_t after);
/* This process committed: have the tailer read it promptly. */
void subs_after_write(worker_t *w);
/* Another worker committed (the master said so): read it promptly. */
void subs_external_commit(worker_t *w);
/* Re-checks the schema now (a request is about to use it). */
void subs_refresh_schema(worker_t *w);
/* Starts or stops the tailer to match whether anything listens. */
void subs_update_active(worker_t *w);
/* The feed's audit position: the tailer has read every change up to it. */
int64_t subs_position(worker_t *w);
/*
 * The position through which every update has been sent (below the oldest
 * update coalescing holds back): what the ids of a session's own frames
 * name, and where a resumption from the audit log stops.
 */
int64_t subs_delivered_position(worker_t *w);
/* Sends every update coalescing holds back, now and in order (resumption). */
void subs_flush_held(worker_t *w);
/*
 * Delivers the updates of this loop turn held for delivery subscriber by
 * subscriber (the turn's fan-out, subscriptions.c) now. Called at the
 * turn's end, and by whatever must not overtake them: a change of any
 * topic's subscribers, a resumption, a drain.
 */
void subs_turn_settle(worker_t *w);
/* ...and every update debounce holds back too (a drain). */
void subs_flush_all_held(worker_t *w);

#endif
