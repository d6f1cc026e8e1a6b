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

#include "common/buf.h"
#include "common/uri.h"
#include "worker/auth.h"
#include "worker/session.h"
#include "worker/worker.h"

#define MCP_LATEST_VERSION  "2025-11-25"
#define MCP_DEFAULT_VERSION "2025-03-26" /* assumed without MCP-Protocol-Version */
#define MCP_MODERN_VERSION  "2026-07-28" /* stateless requests and subscriptions/listen */
/*
 * Messages in one JSON-RPC batch (2025-03-26). Its answers are all built
 * before any is sent, each request run at once on the worker's loop: 100
 * reads of a page each is a bounded answer, the 11,000 a 1 MiB body holds
 * is not (400, -32600 beyond it).
 */
#define MCP_MAX_BATCH 100

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
 * resultType). When the answer became an SSE stream (progress, an
 * elicitation), the message is its last event and the stream ends.
 */
void mcp_answer(http_conn_t *c, const cJSON *id, cJSON *result, int code, const char *message,
                bool modern);

/*
 * Where a pending call's answer goes, and what may go there before it:
 * notifications/progress when the request carried _meta.progressToken, and
 * the log records that belong to the request. Once the answer has become
 * an SSE stream (progress, an elicitation), those go on it; before, a
 * record goes to the session's GET stream (2025) or nowhere (2026-07-28).
 */
typedef struct mcp_reply {
  http_conn_t *conn; /* NULL once the client went away */
  cJSON *id;         /* the request id (owned) */
  bool modern;
  cJSON *progress_token; /* owned, or NULL */
  double progress;       /* the last progress sent (it only grows) */
  int log_level;         /* least severe record the request hears (session_log_level); -1: none */
  char session[SESSION_ID_LEN + 1]; /* "" for none */
  char principal[AUTH_PRINCIPAL_MAX + 1];
} mcp_reply;

/*
 * Is r the answer to principal's request with id (JSON text) in session
 * ("": none)? What notifications/cancelled names. false once the client
 * went away or the call was cancelled already.
 */
bool mcp_reply_matches(const mcp_reply *r, const char *principal, const char *session,
                       const char *id_json);
/* Copies what the answer to call needs (conn may be NULL: a batch). */
void mcp_reply_init(mcp_reply *r, const mcp_call *call);
void mcp_reply_finish(mcp_reply *r);
/* Turns the answer into an SSE stream (once). */
void mcp_reply_stream(mcp_reply *r);
/*
 * notifications/progress (progress only grows; total < 0: unknown), on the
 * answer's stream, begun here; nothing without a progress token.
 */
void mcp_reply_progress(mcp_reply *r, double progress, double total, const char *message);
/* A log record of the request (see above); level is a session_log_level. */
void mcp_reply_log(worker_t *w, mcp_reply *r, int level, const char *logger, const char *data);
/*
 * Ends the HTTP exchange of a call that gets no JSON-RPC answer (it was
 * cancelled): the end of its SSE stream, begun here when it had not been.
 */
void mcp_end_unanswered(http_conn_t *c);
/* mcp_answer on the reply's connection (if it is still there), then mcp_reply_finish. */
void mcp_reply_send(mcp_reply *r, cJSON *result, int code, const char *message);
/* mcp_reply_send of a result printed already: len bytes of one JSON object (text). */
void mcp_reply_send_text(mcp_reply *r, const char *result, size_t len);

/*
 * notifications/cancelled by principal for the call with id_json (JSON
 * text) of session ("": none): ends it when it is pending on this worker
 * (a listen stream, a wait, a confirmation, a tool write). True if it was.
 */
bool mcp_cancel_here(worker_t *w, const char *principal, const char *session, const char *id_json);
/*
 * A row of the signal log (store.h's STORE_SIGNAL_LOG), read by the tailer:
 * a cancel or an elicitation answer that reached a worker, perhaps on
 * another host, that did not hold the call. Acted on when it holds it here.
 */
void mcp_on_signal(worker_t *w, const store_audit_row *row);

/*
 * What a 2026-07-28 result of a cacheable method (a list, a read) carries
 * besides the 2025 one, for a result printed rather than built: appends
 * its members, each after a comma, before the result's closing brace.
 */
void mcp_result_cacheable(worker_t *w, buf_t *out);

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
 * The store filters of u's filters on table t (filters: URI_MAX_FILTERS
 * slots), their values added to values (which owns them). -ENOENT when a
 * filter names no column of t (*bad_column then points at its name).
 */
int resources_filters(const store_table *t, const uri_t *u, store_filter *filters, cJSON *values,
                      const char **bad_column) MCPSUB_NODISCARD;
/*
 * One page of the rows a collection or filtered-collection URI u of table t
 * (t of s) names, after cursor (NULL: from the start). Returns
 * store_query's result, or -ENOENT when a filter names no column of t
 * (*bad_column then points at its name in u).
 */
int resources_query(store_t *s, const store_table *t, const uri_t *u, long limit,
                    const char *cursor, cJSON **rows, char **next,
                    const char **bad_column) MCPSUB_NODISCARD;

/*
 * A read of a record, or of a page of a collection, from the store: what
 * resources/read and REST GET share, on the loop's connection or on a
 * reader's (reader.h).
 */
typedef struct read_fetch {
  /* in */
  uri_t *scoped;      /* the URI narrowed to the caller's row scope: what is read */
  long limit;         /* a collection's page size */
  const char *cursor; /* a collection's cursor, or NULL */
  const cJSON *where; /* a collection's equality filters, column: value (query_records), or NULL */
  bool want_total;    /* a collection's: count the matching rows too */
  bool want_text;     /* a record's row as text (below) when no row scope filters it */
  /* out (read_fetch_finish frees them) */
  cJSON *data; /* the row (a record), or the rows; NULL when the row is in text */
  buf_t text;  /* with want_text, the record's row printed (store_get_record_text) */
  char *next;  /* a collection's next cursor when more rows follow, else NULL */
  int64_t version;
  int64_t total;          /* with want_total: the rows that match, or -1 (the count failed) */
  const char *bad_column; /* with -ENOENT: a filter's unknown column, in scoped or where */
} read_fetch;

/* At most this many equality filters in a read_fetch's where. */
#define READ_MAX_WHERE 32

/*
 * Runs f on s (t is s's table): 0, -ENOENT (no such record, or outside the
 * row scope; or an unknown column, bad_column set), -EINVAL (a bad cursor
 * or filter value), or the store's error.
 */
int read_fetch_run(store_t *s, const store_table *t, read_fetch *f) MCPSUB_NODISCARD;
void read_fetch_finish(read_fetch *f);

/* A read_fetch as a reader's job: a caller's struct starts with it. */
typedef struct read_job {
  reader_job job; /* job.rc is read_fetch_run's result (or -ENOENT: no such table there) */
  read_fetch f;
  char *table;
  uri_t scoped;
  char *cursor;
  cJSON *where;
  void (*answer)(struct read_job *rj); /* loop: answers, then read_job_free */
} read_job;

/*
 * A read job of size bytes (zeroed) for table that fetches what f asks,
 * answered by answer. Give it to reader_submit. The job takes *f->scoped
 * over (the caller's is left empty: uri_finish on it does nothing) and
 * copies the other inputs.
 */
read_job *read_job_create(size_t size, const char *table, const read_fetch *f,
                          void (*answer)(read_job *rj));
void read_job_free(read_job *rj);

/* tools.c */
cJSON *tools_list(mcp_call *call);
cJSON *tools_call(mcp_call *call);
/*
 * notifications/cancelled for the tool write with id (JSON text) of
 * principal in session: its answer ends now without a result, and the
 * write does not run unless the database is already running it. true when
 * found.
 */
bool tools_cancel(worker_t *w, const char *principal, const char *session, const char *id_json);
/* A tool result with one text content (isError when is_error). */
cJSON *tools_result_text(const char *text, bool is_error);
/* A successful tool result whose text content is value as JSON; consumes value. */
cJSON *tools_result_json(cJSON *value);

#endif
