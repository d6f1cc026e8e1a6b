/*
 * MCP tools over the store: list_tables, get_record, query_records,
 * put_record and delete_record. Each tool is a row of a const table: its
 * name, description, JSON Schema of its input (as text, parsed on demand),
 * and handler. Wrong arguments (missing, wrong type) are JSON-RPC -32602;
 * everything the database refuses (unknown table or column, constraint,
 * missing record) is an isError result with a message a model can act on.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/uri.h"
#include "worker/mcp.h"
#include "worker/subscriptions.h"
#include "worker/wait.h"

#define QUERY_MAX_LIMIT 1000

typedef struct tool_args {
  const cJSON *args;        /* the arguments object */
  const store_table *table; /* resolved "table", when the tool has one */
  auth_scope scope;         /* the caller's row scope on table (reads) */
  auth_scope write_scope;   /* ... and for writes (the write tools) */
  char key[512];            /* "key" as text, when the tool has one */
} tool_args;

/* A tool returns a result (text JSON or isError), or NULL after mcp_call_fail. */
typedef cJSON *(*tool_handler)(mcp_call *call, tool_args *a);

static cJSON *tool_text(const char *text, bool is_error) {
  cJSON *result = cJSON_CreateObject();
  cJSON *content = cJSON_AddArrayToObject(result, "content");
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "type", "text");
  cJSON_AddStringToObject(item, "text", text);
  cJSON_AddItemToArray(content, item);
  if (is_error) cJSON_AddTrueToObject(result, "isError");
  return result;
}

cJSON *tools_result_json(cJSON *value) {
  char *text = cJSON_PrintUnformatted(value);
  cJSON_Delete(value);
  cJSON *result = tool_text(text != NULL ? text : "null", false);
  cJSON_free(text);
  return result;
}

static cJSON *tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static cJSON *tool_error(const char *fmt, ...) {
  char text[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return tool_text(text, true);
}

/* Maps a store failure to a tool error. */
static cJSON *tool_store_error(int rc, const char *err, const store_table *t, const char *key) {
  switch (rc) {
  case -ENOENT: return tool_error("no record %s/%s", t->name, key);
  case -EINVAL:
  case -EEXIST: return tool_error("%s", err[0] != '\0' ? err : "invalid record");
  case -EBUSY: return tool_error("the database is busy (another process holds it locked); retry");
  case -ENOSPC: return tool_error("insufficient storage: the database or the disk is full");
  case -EACCES: return tool_error("forbidden: %s", err[0] != '\0' ? err : "outside your row scope");
  default: return tool_error("database error: %s", err[0] != '\0' ? err : "unknown");
  }
}

static cJSON *tool_list_tables(mcp_call *call, tool_args *a) {
  int n;
  const store_table *tables = store_tables(call->w->store, &n);
  cJSON *list = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    const store_table *t = &tables[i];
    auth_scope scope;
    if (auth_table_access(call->principal, t->name, AUTH_READ, &scope) != 0) continue;
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "name", t->name);
    cJSON_AddStringToObject(item, "key", t->key_col >= 0 ? t->cols[t->key_col].name : "rowid");
    cJSON *cols = cJSON_AddArrayToObject(item, "columns");
    for (int j = 0; j < t->n_cols; j++)
      cJSON_AddItemToArray(cols, cJSON_CreateString(t->cols[j].name));
    int64_t count = 0;
    if (!scope.scoped && store_table_count(call->w->store, t, &count) == 0)
      cJSON_AddNumberToObject(item, "rows",
                              (double)count); /* not for a row scope: it is all rows */
    char *uri = uri_format_collection(call->w->cfg->public_url, t->name);
    cJSON_AddStringToObject(item, "uri", uri);
    free(uri);
    cJSON_AddItemToArray(list, item);
  }
  return tools_result_json(list);
}

static cJSON *tool_get_record(mcp_call *call, tool_args *a) {
  cJSON *row = NULL;
  int64_t version = 0;
  int rc = store_get_record(call->w->store, a->table, a->key, &row, &version);
  if (rc == 0 && !auth_scope_matches(&a->scope, row)) {
    cJSON_Delete(row); /* outside the caller's row scope: not there for it */
    rc = -ENOENT;
  }
  if (rc != 0) return tool_store_error(rc, "", a->table, a->key);
  return tools_result_json(row);
}

static cJSON *tool_query_records(mcp_call *call, tool_args *a) {
  const cJSON *where = cJSON_GetObjectItemCaseSensitive(a->args, "where");
  const cJSON *limit_item = cJSON_GetObjectItemCaseSensitive(a->args, "limit");
  const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(a->args, "cursor");
  if ((where != NULL && !cJSON_IsObject(where)) ||
      (limit_item != NULL && (!cJSON_IsNumber(limit_item) || limit_item->valuedouble < 1 ||
                              limit_item->valuedouble != floor(limit_item->valuedouble))) ||
      (cursor != NULL && !cJSON_IsString(cursor)))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "query_records: where must be an object, limit a positive integer, "
                         "cursor a string");
  store_filter filters[33];
  size_t n = 0;
  cJSON *scope_value = NULL;
  if (a->scope.scoped) { /* the caller's row scope is one more filter, always */
    int col = store_column_index(a->table, a->scope.column);
    if (col < 0) return tool_error("unknown table: %s", a->table->name);
    scope_value = cJSON_CreateString(a->scope.value);
    filters[n++] = (store_filter){col, scope_value};
  }
  const cJSON *f;
  cJSON_ArrayForEach(f, where) {
    if (n == ARRAY_LEN(filters)) {
      cJSON_Delete(scope_value);
      return tool_error("too many filters (at most 32)");
    }
    int col = store_column_index(a->table, f->string);
    if (cJSON_IsObject(f) || cJSON_IsArray(f) || col < 0) {
      cJSON_Delete(scope_value);
      if (col < 0) return tool_error("unknown column %s in table %s", f->string, a->table->name);
      return tool_error("filter on %s: value must be a string, number, boolean or null", f->string);
    }
    filters[n++] = (store_filter){col, f};
  }
  int limit = call->w->cfg->page_size;
  if (limit_item != NULL)
    limit =
        limit_item->valuedouble > QUERY_MAX_LIMIT ? QUERY_MAX_LIMIT : (int)limit_item->valuedouble;
  cJSON *rows = NULL;
  char *next = NULL;
  int rc = store_query(call->w->store, a->table, filters, n, limit,
                       cursor != NULL ? cursor->valuestring : NULL, &rows, &next);
  cJSON_Delete(scope_value);
  if (rc == -EINVAL) return tool_error("invalid cursor");
  if (rc != 0) return tool_store_error(rc, "", a->table, "");
  cJSON *out = cJSON_CreateObject();
  cJSON_AddItemToObject(out, "rows", rows);
  if (next != NULL) cJSON_AddStringToObject(out, "nextCursor", next);
  free(next);
  return tools_result_json(out);
}

/* The answer of a record write: put_record's {created, record}, or delete_record's {deleted}. */
static cJSON *tool_write_result(worker_t *w, const writer_record *r, const char *session_id) {
  const store_table *t = store_find_table(w->store, r->table);
  if (r->job.rc != 0 || t == NULL)
    return tool_store_error(t == NULL && r->job.rc == 0 ? -EIO : r->job.rc, r->err,
                            t != NULL ? t : &(store_table){.name = r->table}, r->key);
  cJSON *out = cJSON_CreateObject();
  if (r->is_delete) {
    cJSON_AddTrueToObject(out, "deleted");
    return tools_result_json(out);
  }
  cJSON *row = NULL;
  int64_t version = 0;
  int rc = store_get_record(w->store, t, r->key, &row, &version);
  if (rc != 0) {
    cJSON_Delete(out);
    return tool_store_error(rc, "", t, r->key);
  }
  session_t *s = session_id != NULL && session_id[0] != '\0'
                     ? session_registry_find(&w->sessions, session_id, strlen(session_id))
                     : NULL;
  if (s != NULL) {
    char note[600];
    snprintf(note, sizeof(note), "put_record %s %s/%s", r->created ? "inserted" : "replaced",
             t->name, r->key);
    session_log(s, SESSION_LOG_INFO, "mcpsub.tools", note);
  }
  cJSON_AddBoolToObject(out, "created", r->created);
  cJSON_AddItemToObject(out, "record", row);
  return tools_result_json(out);
}

/* A tool's write on the writer: the pending call is answered from its completion. */
typedef struct tool_write_job {
  writer_record rec;
  worker_t *w;
  http_conn_t *c;
  cJSON *id;
  bool modern;
  char session_id[SESSION_ID_LEN + 1];
} tool_write_job;

static void tool_write_done(writer_job *j) {
  tool_write_job *tw = (tool_write_job *)j;
  mcp_answer(tw->c, tw->id, tool_write_result(tw->w, &tw->rec, tw->session_id), 0, NULL,
             tw->modern);
  cJSON_Delete(tw->id);
  writer_record_free(&tw->rec);
}

/*
 * Writes a record for a tool: on the writer, the call answered when it is
 * done; inside a batch (nothing can wait there) at once on the loop's
 * connection, which does not wait for a lock (-EBUSY instead).
 */
static cJSON *tool_write(mcp_call *call, tool_args *a, cJSON *record, bool is_delete) {
  worker_t *w = call->w;
  store_guard g = auth_guard(call->principal, &a->write_scope);
  if (call->conn == NULL) {
    writer_record r = {.table = (char *)a->table->name, .key = a->key, .is_delete = is_delete};
    r.job.rc = is_delete ? store_delete_as(w->store, a->table, a->key, &g, r.err, sizeof(r.err))
                         : store_write_as(w->store, a->table, a->key, record, STORE_WRITE_REPLACE,
                                          &g, NULL, &r.created, r.err, sizeof(r.err));
    cJSON_Delete(record);
    if (r.job.rc == 0) subs_after_write(w);
    return tool_write_result(w, &r, call->session != NULL ? call->session->id : NULL);
  }
  tool_write_job *tw =
      (tool_write_job *)writer_record_create(sizeof(tool_write_job), a->table->name, a->key, record,
                                             STORE_WRITE_REPLACE, is_delete, &g, tool_write_done);
  tw->w = w;
  tw->c = call->conn;
  tw->id = cJSON_Duplicate(call->id, true);
  tw->modern = call->modern;
  if (call->session != NULL)
    snprintf(tw->session_id, sizeof(tw->session_id), "%s", call->session->id);
  writer_submit(w->writer, &tw->rec.job, w->cfg->write_timeout_ms);
  call->pending = true;
  return NULL;
}

static cJSON *tool_put_record(mcp_call *call, tool_args *a) {
  const cJSON *record = cJSON_GetObjectItemCaseSensitive(a->args, "record");
  if (!cJSON_IsObject(record))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                         "put_record requires arguments.record (an object)");
  return tool_write(call, a, cJSON_Duplicate(record, true), false);
}

static cJSON *tool_delete_record(mcp_call *call, tool_args *a) {
  return tool_write(call, a, NULL, true);
}

static cJSON *tool_wait_and_read(mcp_call *call, tool_args *a) {
  return wait_tool(call, a->args);
}

#define TABLE_PROP                                                                                 \
  "\"table\":{\"type\":\"string\",\"description\":\"Table name (see list_tables)\"}"
#define KEY_PROP                                                                                   \
  "\"key\":{\"type\":[\"string\",\"integer\"],\"description\":\"Primary key of the record\"}"

static const struct tool {
  const char *name;
  const char *description;
  const char *input_schema;
  bool needs_table;
  bool needs_key;
  tool_handler handler;
  bool writes; /* needs the write right on its table */
} tools[] = {
    {"list_tables",
     "List the exported tables with their key, columns, row count and collection URI.",
     "{\"type\":\"object\",\"properties\":{}}", false, false, tool_list_tables},
    {"get_record", "Read one record by table and primary key.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," KEY_PROP
     "},\"required\":[\"table\",\"key\"]}",
     true, true, tool_get_record},
    {"query_records",
     "Query records of a table with equality filters, in key order, paged with a cursor.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP
     ",\"where\":{\"type\":\"object\",\"description\":\"column: value equality filters\"},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000},"
     "\"cursor\":{\"type\":\"string\",\"description\":\"nextCursor of the previous page\"}},"
     "\"required\":[\"table\"]}",
     true, false, tool_query_records},
    {"put_record", "Insert a record or replace it whole: columns not given take their default.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," KEY_PROP
     ",\"record\":{\"type\":\"object\",\"description\":\"column: value\"}},"
     "\"required\":[\"table\",\"key\",\"record\"]}",
     true, true, tool_put_record, true},
    {"delete_record", "Delete one record by table and primary key.",
     "{\"type\":\"object\",\"properties\":{" TABLE_PROP "," KEY_PROP
     "},\"required\":[\"table\",\"key\"]}",
     true, true, tool_delete_record, true},
    {"wait_and_read",
     "Wait for any of several resources to change: returns at once those whose version differs "
     "from sinceVersion (all of them when none is given), else waits up to timeoutMs for one to "
     "change. For clients that cannot keep an SSE stream open.",
     wait_input_schema, false, false, tool_wait_and_read},
};

cJSON *tools_list(mcp_call *call) {
  cJSON *result = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(result, "tools");
  for (size_t i = 0; i < ARRAY_LEN(tools); i++) {
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "name", tools[i].name);
    cJSON_AddStringToObject(item, "description", tools[i].description);
    cJSON_AddItemToObject(item, "inputSchema", cJSON_Parse(tools[i].input_schema));
    cJSON_AddItemToArray(list, item);
  }
  return result;
}

cJSON *tools_call(mcp_call *call) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(call->params, "name");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(call->params, "arguments");
  if (!cJSON_IsString(name))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "tools/call requires params.name");
  if (args != NULL && !cJSON_IsObject(args))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "tools/call: arguments must be an object");
  const struct tool *tool = NULL;
  for (size_t i = 0; i < ARRAY_LEN(tools); i++) {
    if (strcmp(tools[i].name, name->valuestring) == 0) tool = &tools[i];
  }
  if (tool == NULL)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "Unknown tool: %s", name->valuestring);

  tool_args a = {.args = args};
  if (tool->needs_table) {
    const cJSON *table = cJSON_GetObjectItemCaseSensitive(args, "table");
    if (!cJSON_IsString(table))
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "%s requires arguments.table (a string)",
                           tool->name);
    a.table = store_find_table(call->w->store, table->valuestring);
    /* A table the caller may not read is unknown to it. */
    if (a.table == NULL ||
        auth_table_access(call->principal, a.table->name, AUTH_READ, &a.scope) != 0)
      return tool_error("unknown table: %s", table->valuestring);
    /* A write's row scope is checked in the write's own transaction. */
    if (tool->writes &&
        auth_table_access(call->principal, a.table->name, AUTH_WRITE, &a.write_scope) != 0)
      return tool_error("forbidden: no write access to table %s", a.table->name);
  }
  if (tool->needs_key) {
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(args, "key");
    if (cJSON_IsString(key) && strlen(key->valuestring) < sizeof(a.key)) {
      snprintf(a.key, sizeof(a.key), "%s", key->valuestring);
    } else if (cJSON_IsNumber(key) && key->valuedouble == floor(key->valuedouble) &&
               fabs(key->valuedouble) < 9007199254740992.0) {
      snprintf(a.key, sizeof(a.key), "%.0f", key->valuedouble);
    } else {
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS,
                           "%s requires arguments.key (a string or an integer, under 512 bytes)",
                           tool->name);
    }
  }
  return tool->handler(call, &a);
}
