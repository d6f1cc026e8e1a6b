/*
 * The MCP endpoint (/mcp, Streamable HTTP): POST carries JSON-RPC messages
 * (JSON responses), GET opens the session's SSE stream, DELETE ends the
 * session. Method handlers live in a const table; resources.c and tools.c
 * provide the resource and tool families through the mcp_call interface
 * declared here.
 */
#ifndef MCPSUB_MCP_H
#define MCPSUB_MCP_H

#include <cjson/cJSON.h>
#include <stdarg.h>

#include "common/uri.h"
#include "worker/auth.h"
#include "worker/session.h"
#include "worker/worker.h"

#define MCP_LATEST_VERSION  "2025-11-25"
#define MCP_DEFAULT_VERSION "2025-03-26" /* assumed without MCP-Protocol-Version */
#define MCP_MODERN_VERSION  "2026-07-28" /* stateless requests and subscriptions/listen */

/* One JSON-RPC request being handled. */
typedef struct mcp_call {
  worker_t *w;
  const auth_principal *principal; /* who is calling */
  session_t *session;              /* NULL only for initialize */
  const char *method;
  const cJSON *params; /* object, or NULL when absent */
  int err_code;        /* set with err_msg when a handler returns NULL */
  char err_msg[512];
  session_t *created; /* initialize: the new session */
  http_conn_t *conn;  /* where the answer goes; NULL inside a batch (no waiting) */
  const cJSON *id;    /* the request id */
  bool pending;       /* the handler will answer later (it returned NULL) */
  bool modern;        /* a 2026-07-28 request: stateless, session NULL */
} mcp_call;

/* A handler returns the result (a new cJSON), or NULL after mcp_call_fail. */
typedef cJSON *(*mcp_handler)(mcp_call *call);

/* Records a JSON-RPC error on call and returns NULL, for `return mcp_call_fail(...)`. */
cJSON *mcp_call_fail(mcp_call *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Answers a pending call later: result (consumed) or, when NULL, the error
 * code/message. modern: the call was a 2026-07-28 request (its result gets
 * resultType).
 */
void mcp_answer(http_conn_t *c, const cJSON *id, cJSON *result, int code, const char *message,
                bool modern);
/* The same as the last event of an SSE answer (after progress notifications), then its end. */
void mcp_answer_event(http_conn_t *c, const cJSON *id, cJSON *result, int code,
                      const char *message, bool modern);

/* Serves a request for /mcp made by principal p. */
void mcp_handle_http(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p);

/* resources.c */
cJSON *resources_list(mcp_call *call);
cJSON *resources_templates_list(mcp_call *call);
cJSON *resources_read(mcp_call *call);
cJSON *completion_complete(mcp_call *call);
/* Rows per page for a collection URI: its _limit, else --page-size; at most 1000. */
long resources_page_limit(const worker_t *w, const uri_t *u);
/*
 * One page of the rows a collection or filtered-collection URI u of table t
 * names (equality on each filter), after cursor (NULL: from the start).
 * Returns store_query's result, or -ENOENT when a filter names no column of
 * t (*bad_column then points at its name in u).
 */
int resources_query(worker_t *w, const store_table *t, const uri_t *u, long limit,
                    const char *cursor, cJSON **rows, char **next,
                    const char **bad_column) MCPSUB_NODISCARD;

/* tools.c */
cJSON *tools_list(mcp_call *call);
cJSON *tools_call(mcp_call *call);
/* A successful tool result whose text content is value as JSON; consumes value. */
cJSON *tools_result_json(cJSON *value);

#endif
