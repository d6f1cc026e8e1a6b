/*
 * A worker's part of the control interface (mcpsubctl, through the
 * master's control socket): what this worker holds live — its sessions,
 * one session, its subscriptions — and evicting a session. The master asks
 * every worker (CTL_REQ) and merges the answers; in one process the
 * control socket calls this directly. Answers are built from live state
 * and, for a single session, its mcp_session row; nothing here waits.
 */
#ifndef MCPSUB_WORKER_CTL_H
#define MCPSUB_WORKER_CTL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "worker/worker.h"

/* Sessions of a "sessions" request: by default, and the most it may ask for ({limit}). */
#define WORKER_CTL_SESSIONS_DEFAULT 1000
#define WORKER_CTL_SESSIONS_MAX     10000
/*
 * Bytes of sessions one "sessions" answer holds, at most (counted as
 * printed JSON): a worker's answer and the master's merged one stay far
 * below IPC_MAX_TOTAL (16 MiB), however many sessions and URIs there are.
 */
#define WORKER_CTL_SESSIONS_BYTES ((size_t)4 * 1024 * 1024)
/* Most rows a "subs" {busiest} request may ask for. */
#define WORKER_CTL_BUSIEST_MAX 100
/* Rows of a plain "subs" request: by default, and the most it may ask for ({limit}). */
#define WORKER_CTL_SUBS_DEFAULT 1000
#define WORKER_CTL_SUBS_MAX     10000

/*
 * Answers req, a JSON object {"cmd": C, ...}:
 *   "sessions" {limit?}       -> {"sessions": [session...], more}: the limit (default
 *                                WORKER_CTL_SESSIONS_DEFAULT, at most WORKER_CTL_SESSIONS_MAX)
 *                                live sessions here seen most recently, most recent
 *                                first (then by id), while they fit in
 *                                WORKER_CTL_SESSIONS_BYTES; more is true when some
 *                                were left out. The first is always listed: when its
 *                                URIs alone would not fit, those that do are, and
 *                                subscriptionsOmitted counts the rest
 *   "session" {id, durable?}  -> {"session": session} or {}   live here; with durable
 *                                true, else from its mcp_session row (live: false)
 *   "evict" {id}              -> {"evicted": bool}             ends it here as DELETE
 *                                would, or deletes its row when no worker holds it
 *   "subs" {uri}              -> {"subscriptions": [{uri, sessions, notified}]}
 *   "subs" {limit?}           -> {"subscriptions": [...], uris}: the limit (default
 *                                WORKER_CTL_SUBS_DEFAULT, at most WORKER_CTL_SUBS_MAX)
 *                                URIs with the most sessions, most first, of the uris
 *                                subscribed here
 *   "subs" {busiest: N}       -> {"subscriptions": [{uri, sessions, notified, recent}],
 *                                 uris, windowMs}: the N (1..WORKER_CTL_BUSIEST_MAX) URIs
 *                                with the most updates (recent) in the windowMs since
 *                                the last such request, then the most sessions
 * A session is {id, worker, live, protocolVersion, createdMs, lastSeenMs,
 * stream, subscriptions: [uri...], ring, undelivered[, subscriptionsOmitted]}.
 * Anything else gets {"error": message}. The answer goes to answer(), now
 * or (an eviction of a live session: once its row is deleted) later; it
 * owns nothing of the object it is given, which is freed when it returns.
 */
typedef void (*worker_ctl_answer)(cJSON *rep, void *data);
void worker_ctl_handle(worker_t *w, const cJSON *req, worker_ctl_answer answer, void *data);

/*
 * Puts a "subs" listing (rows {uri, sessions, ...}) in its order, the most
 * sessions first, then by URI, and keeps its first limit rows: true when it
 * dropped some. The master's merged answer and mcpsubctl's listing from the
 * stored sessions both use it.
 */
bool worker_ctl_subs_rank(cJSON *list, size_t limit);

/*
 * Puts a "sessions" listing (sessions as above, from several workers) in
 * its order, the most recently seen first, then by id, and keeps its first
 * limit sessions, stopping before one that would pass
 * WORKER_CTL_SESSIONS_BYTES (the first is always kept: its worker made it
 * fit): true when it dropped some. The master's merged answer uses it.
 */
bool worker_ctl_sessions_rank(cJSON *list, size_t limit);

#endif
