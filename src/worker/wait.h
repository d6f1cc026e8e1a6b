/*
 * wait_and_read: the wait-many fallback for clients without SSE. A call
 * names resources with the version it last saw; it returns at once the
 * ones whose version moved, or waits (without blocking the worker) as a
 * subscriber of each until one changes or the timeout passes. Changes that
 * arrive in one tailer batch are answered together, one row per resource
 * with its newest version.
 */
#ifndef MCPSUB_WAIT_H
#define MCPSUB_WAIT_H

#include "worker/mcp.h"

#define WAIT_MAX_RESOURCES 100

/* The tool. May leave the call pending (call->pending) and answer later. */
cJSON *wait_tool(mcp_call *call, const cJSON *args);
/* The tool's input schema (JSON text). */
extern const char wait_input_schema[];

/*
 * notifications/cancelled for request id_json (JSON text) of principal in
 * session ("": a 2026-07-28 request): ends that waiting call at once,
 * without a JSON-RPC answer (HTTP 204), and frees it. true when found.
 */
bool wait_cancel(worker_t *w, const char *principal, const char *session, const char *id_json);
/* A subscription owned by a waiter matched a change. */
void wait_on_match(worker_t *w, sub_t *sub);
/* After a tailer batch: answers the waiters that saw a change. */
void wait_flush(worker_t *w);
/* A progress heartbeat on every waiting call that asked for progress (the keepalive tick). */
void wait_heartbeat(worker_t *w);
/* Answers every pending waiter now (shutdown). */
void wait_finish_all(worker_t *w);

#endif
