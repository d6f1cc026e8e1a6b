/*
 * The control socket: a unix stream socket (mode 0600) on which mcpsubctl
 * sends JSON lines — one object {"cmd": ...} per line — and reads one JSON
 * line back per request, {"ok": true, ...} or {"ok": false, "error": ...}.
 * This file owns the socket, the framing and the bounds (request lines of
 * 64 KiB, 16 connections at a time, requests of one connection answered in
 * order); what a command means is the handler's business (master.c).
 */
#ifndef MCPSUB_CONTROL_H
#define MCPSUB_CONTROL_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "common/mem.h"

#define CONTROL_MAX_LINE  ((size_t)64 * 1024)
#define CONTROL_MAX_CONNS 16

typedef struct control_server control_server_t;
typedef struct control_request control_request_t;

/*
 * Called once per request line that parsed as a JSON object with a string
 * "cmd". The handler must call control_answer(r, ...) exactly once, now or
 * later (also when the client has gone: the answer is then dropped).
 */
typedef void (*control_handler)(control_request_t *r, const cJSON *req, void *data);

/*
 * Listens on path. A stale socket file there (nothing accepts on it) is
 * replaced; a live one is left alone (-EADDRINUSE). 0 with *out, or a
 * negative errno with a message in err.
 */
int control_server_start(uv_loop_t *loop, const char *path, control_handler handler, void *data,
                         control_server_t **out, char *err, size_t errlen) MCPSUB_NODISCARD;
/* Sends reply (consumed; "ok": true is added unless it has "ok") and frees r. */
void control_answer(control_request_t *r, cJSON *reply);
/* Sends {"ok": false, "error": message} and frees r. */
void control_answer_error(control_request_t *r, const char *message);
/*
 * Stops listening, removes the socket file (when it is still ours), closes
 * the connections and frees srv once the loop ran the closes. Requests
 * still waiting for an answer stay valid until answered. NULL is a no-op.
 */
void control_server_close(control_server_t *srv);

#endif
