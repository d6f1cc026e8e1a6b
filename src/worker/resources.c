/*
 * MCP resources over the store: resources/list (metadata and collection
 * URIs, paged), resources/templates/list (one record template per table,
 * plus a generic one), resources/read of records, collections, filtered
 * collections and metadata, and completion/complete for template
 * arguments. Every read carries the resource's version in _meta.
 *
 * Records are not listed one by one: a table can hold millions of rows, and
 * the templates (with completion of keys) are how a client finds them.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/jsonrpc.h"
#include "common/mem.h"
#include "common/strmap.h"
#include "common/uri.h"
#include "worker/mcp.h"
#include "worker/reader.h"
#include "worker/subscriptions.h"

#define READ_MAX_LIMIT 1000
#define COMPLETION_MAX 100

static const char *base_url(const mcp_call *call) {
  return call->w->cfg->public_url;
}

/* A metadata document's version: a hash of its text, so it moves exactly when the text does. */
static int64_t text_version(const char *text) {
  return (int64_t)(strmap_hash_stable(text, strlen(text)) >> 12); /* the same on every worker */
}

/* resources/list ------------------------------------------------------------- */

static cJSON *resource_item(const char *uri, const char *name, const char *description) {
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "uri", uri);
  cJSON_AddStringToObject(item, "name", name);
  cJSON_AddStringToObject(item, "description", description);
  cJSON_AddStringToObject(item, "mimeType", "application/json");
  return item;
}

/* The i-th listed resource: 0 is mcpsub://about, then a collection and a schema per table. */
static cJSON *resource_list_item(const mcp_call *call, const store_table *tables, int i) {
  if (i == 0)
    return resource_item("mcpsub://about", "about", "Server, protocol and table overview");
  const store_table *t = &tables[(i - 1) / 2];
  buf_t b;
  buf_init(&b);
  cJSON *item;
  if ((i - 1) % 2 == 0) {
    char *uri = uri_format_collection(base_url(call), t->name);
    buf_printf(&b, "All rows of table %s", t->name);
    item = resource_item(uri, t->name, b.data);
    free(uri);
  } else {
    buf_append_str(&b, "mcpsub://schema/");
    uri_encode_component(&b, t->name, strlen(t->name));
    char *uri = buf_steal(&b);
    buf_printf(&b, "Columns and key of table %s", t->name);
    char name[300];
    snprintf(name, sizeof(name), "%.280s schema", t->name);
    item = resource_item(uri, name, b.data);
    free(uri);
  }
  buf_finish(&b);
  return item;
}

/* Does the caller see item i of the list (metadata: admins; a table: a read grant)? */
static bool resource_list_visible(const mcp_call *call, const store_table *tables, int i) {
  const auth_principal *p = call->principal;
  if (i == 0 || (i - 1) % 2 == 1) return (p->rights & AUTH_ADMIN) != 0;
  auth_scope scope;
  return auth_table_access(p, tables[(i - 1) / 2].name, AUTH_READ, &scope) == 0;
}

/* Cursors are "o<offset>", as this server writes them; anything else is an invalid cursor. */
static int parse_cursor(const cJSON *params, long *offset) {
  const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(params, "cursor");
  *offset = 0;
  if (cursor == NULL || cJSON_IsNull(cursor)) return 0;
  uint64_t v;
  if (!cJSON_IsString(cursor) || cursor->valuestring[0] != 'o' ||
      !buf_parse_uint(cursor->valuestring + 1, strlen(cursor->valuestring + 1), LONG_MAX, &v))
    return -EINVAL;
  *offset = (long)v;
  return 0;
}

cJSON *resources_list(mcp_call *call) {
  long offset;
  if (parse_cursor(call->params, &offset) != 0)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "invalid cursor");
  int n_tables;
  const store_table *tables = store_tables(call->w->store, &n_tables);
  /* Offsets count what this caller sees: metadata and the tables it may read. */
  long total = 1 + 2L * n_tables, seen = 0, page = call->w->cfg->page_size;
  cJSON *result = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(result, "resources");
  for (long i = 0; i < total; i++) {
    if (!resource_list_visible(call, tables, (int)i)) continue;
    if (seen >= offset + page) {
      char next[32];
      snprintf(next, sizeof(next), "o%ld", seen);
      cJSON_AddStringToObject(result, "nextCursor", next);
      break;
    }
    if (seen++ >= offset) cJSON_AddItemToArray(list, resource_list_item(call, tables, (int)i));
  }
  return result;
}

cJSON *resources_templates_list(mcp_call *call) {
  int n_tables;
  const store_table *tables = store_tables(call->w->store, &n_tables);
  cJSON *result = cJSON_CreateObject();
  cJSON *list = cJSON_AddArrayToObject(result, "resourceTemplates");
  buf_t b;
  buf_init(&b);
  for (int i = 0; i < n_tables; i++) {
    auth_scope scope;
    if (auth_table_access(call->principal, tables[i].name, AUTH_READ, &scope) != 0) continue;
    char *coll = uri_format_collection(base_url(call), tables[i].name);
    buf_printf(&b, "%s/{key}", coll);
    free(coll);
    cJSON *item = cJSON_CreateObject();
    cJSON_AddStringToObject(item, "uriTemplate", b.data);
    buf_reset(&b);
    buf_printf(&b, "%s record", tables[i].name);
    cJSON_AddStringToObject(item, "name", b.data);
    buf_reset(&b);
    buf_printf(&b, "One row of %s by its key (%s), percent-encoded", tables[i].name,
               tables[i].key_col >= 0 ? tables[i].cols[tables[i].key_col].name : "rowid");
    cJSON_AddStringToObject(item, "description", b.data);
    buf_reset(&b);
    cJSON_AddStringToObject(item, "mimeType", "application/json");
    cJSON_AddItemToArray(list, item);
  }
  buf_printf(&b, "%s/{table}/{key}", base_url(call));
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "uriTemplate", b.data);
  cJSON_AddStringToObject(item, "name", "record");
  cJSON_AddStringToObject(item, "description", "One row of any exported table by its key");
  cJSON_AddStringToObject(item, "mimeType", "application/json");
  cJSON_AddItemToArray(list, item);
  buf_finish(&b);
  return result;
}

/* resources/read -------------------------------------------------------------- */

/*
 * Appends a read's result to out: {"contents":[{uri, mimeType, text,
 * _meta:{version}}],"_meta":{version[, nextCursor, nextUri]}}, and in
 * 2026-07-28 what a cacheable result carries (mcp_result_cacheable); data
 * is the resource's JSON text (len bytes). Printed, not built: as trees of
 * items the result and its answer were about twenty allocations a read,
 * each freed once printed.
 */
static void read_result(worker_t *w, buf_t *out, const char *uri, const char *data, size_t len,
                        int64_t version, const char *next, const char *next_uri, bool modern) {
  char vtext[BUF_INT_TEXT];
  const char *v = buf_int_text(vtext, (long long)version);
  size_t ulen = strlen(uri);
  buf_reserve(out, 192 + ulen + len + len / 4); /* one allocation for most (quotes escaped) */
  buf_append_str(out, "{\"contents\":[{\"uri\":");
  buf_append_json_string(out, uri, ulen);
  buf_append_str(out, ",\"mimeType\":\"application/json\",\"text\":");
  buf_append_json_string(out, data, len);
  buf_append_str(out, ",\"_meta\":{\"version\":\"");
  buf_append_str(out, v);
  buf_append_str(out, "\"}}],\"_meta\":{\"version\":\"");
  buf_append_str(out, v);
  buf_append_byte(out, '"');
  if (next != NULL) {
    buf_append_str(out, ",\"nextCursor\":");
    buf_append_json_string(out, next, strlen(next));
    buf_append_str(out, ",\"nextUri\":");
    buf_append_json_string(out, next_uri, strlen(next_uri));
  }
  buf_append_byte(out, '}');
  if (modern) mcp_result_cacheable(w, out);
  buf_append_byte(out, '}');
}

static cJSON *table_schema_json(const store_table *t) {
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "table", t->name);
  cJSON_AddStringToObject(doc, "key", t->key_col >= 0 ? t->cols[t->key_col].name : "rowid");
  cJSON_AddStringToObject(doc, "keyType", t->key_integer ? "integer" : "text");
  cJSON *cols = cJSON_AddArrayToObject(doc, "columns");
  for (int i = 0; i < t->n_cols; i++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", t->cols[i].name);
    cJSON_AddStringToObject(c, "type", t->cols[i].decl_type);
    cJSON_AddBoolToObject(c, "notNull", t->cols[i].notnull);
    cJSON_AddBoolToObject(c, "key", i == t->key_col);
    cJSON_AddItemToArray(cols, c);
  }
  return doc;
}

static cJSON *about_json(const mcp_call *call) {
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "server", "mcpsub");
  cJSON_AddStringToObject(doc, "version", MCPSUB_VERSION);
  cJSON_AddStringToObject(doc, "publicUrl", base_url(call));
  cJSON *versions = cJSON_AddArrayToObject(doc, "protocolVersions");
  cJSON_AddItemToArray(versions, cJSON_CreateString("2025-03-26"));
  cJSON_AddItemToArray(versions, cJSON_CreateString("2025-06-18"));
  cJSON_AddItemToArray(versions, cJSON_CreateString("2025-11-25"));
  cJSON *list = cJSON_AddArrayToObject(doc, "tables");
  int n;
  const store_table *tables = store_tables(call->w->store, &n);
  for (int i = 0; i < n; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", tables[i].name);
    char *uri = uri_format_collection(base_url(call), tables[i].name);
    cJSON_AddStringToObject(t, "uri", uri);
    free(uri);
    cJSON_AddStringToObject(
        t, "key", tables[i].key_col >= 0 ? tables[i].cols[tables[i].key_col].name : "rowid");
    cJSON_AddItemToArray(list, t);
  }
  return doc;
}

/* Reads a metadata document; takes ownership of doc. */
static cJSON *read_document(const mcp_call *call, const char *uri, cJSON *doc) {
  char *text = cJSON_PrintUnformatted(doc);
  cJSON_Delete(doc);
  buf_t result;
  buf_init(&result);
  read_result(call->w, &result, uri, text, strlen(text), text_version(text), NULL, NULL,
              call->modern);
  cJSON_free(text);
  return jsonrpc_raw(buf_steal(&result));
}

long resources_page_limit(const worker_t *w, const uri_t *u) {
  long limit = u->limit > 0 ? u->limit : w->cfg->page_size;
  return limit > READ_MAX_LIMIT ? READ_MAX_LIMIT : limit;
}

/*
 * The value a filter binds: its alternatives for one-of; a number for an
 * ordered comparison on a numeric column when the value reads as one (so
 * that SQL compares as sub_index.c does), but the text for an integer a
 * double does not hold (beyond 2^53), which both stores read exactly (as
 * SQLite's numeric affinity does: uri_number); else the text.
 */
static cJSON *resources_filter_value(const uri_filter *f, bool numeric) {
  if (f->op == URI_IN) {
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; i < f->n_alts; i++)
      cJSON_AddItemToArray(list, cJSON_CreateString(f->alts[i]));
    return list;
  }
  bool exact = !f->number.is_int || jsonrpc_int_exact(f->number.i);
  if (uri_op_ordered(f->op) && numeric && f->is_number && exact)
    return cJSON_CreateNumber(f->number.d);
  return cJSON_CreateString(f->value);
}

int resources_filters(const store_table *t, const uri_t *u, store_filter *filters, cJSON *values,
                      const char **bad_column) {
  for (size_t i = 0; i < u->n_filters; i++) {
    int col = store_column_index(t, u->filters[i].column);
    if (col < 0) {
      *bad_column = u->filters[i].column;
      return -ENOENT;
    }
    cJSON *v = resources_filter_value(&u->filters[i], store_column_numeric(t, col));
    cJSON_AddItemToArray(values, v);
    filters[i] = (store_filter){col, v, (store_op)u->filters[i].op};
  }
  return 0;
}

/*
 * A page of t's rows that match u's filters and where's equality filters
 * (column: value; NULL for none), counted first into *total when it is not
 * NULL (-1 when the count fails: the page is read all the same).
 */
static int query_where(store_t *s, const store_table *t, const uri_t *u, const cJSON *where,
                       long limit, const char *cursor, int64_t *total, cJSON **rows, char **next,
                       const char **bad_column) {
  store_filter filters[URI_MAX_FILTERS + READ_MAX_WHERE];
  cJSON *values = cJSON_CreateArray(); /* owns the URI's filter values */
  int rc = resources_filters(t, u, filters, values, bad_column);
  size_t n = u->n_filters;
  const cJSON *item;
  cJSON_ArrayForEach(item, where) {
    if (rc != 0) break;
    int col = store_column_index(t, item->string);
    if (col < 0) {
      *bad_column = item->string;
      rc = -ENOENT;
    } else if (n == ARRAY_LEN(filters)) {
      rc = -EINVAL; /* bounded by the caller: READ_MAX_WHERE */
    } else {
      filters[n++] = (store_filter){col, item, STORE_EQ};
    }
  }
  if (rc == 0 && total != NULL && store_count_where(s, t, filters, n, total) != 0) *total = -1;
  if (rc == 0) rc = store_query(s, t, filters, n, (int)limit, cursor, rows, next);
  cJSON_Delete(values);
  return rc;
}

int resources_query(store_t *s, const store_table *t, const uri_t *u, long limit,
                    const char *cursor, cJSON **rows, char **next, const char **bad_column) {
  return query_where(s, t, u, NULL, limit, cursor, NULL, rows, next, bad_column);
}

int read_fetch_run(store_t *s, const store_table *t, read_fetch *f) {
  if (f->scoped->kind == URI_RECORD) {
    if (f->want_text && f->scoped->n_filters == 0) /* nothing to match the row against */
      return store_get_record_text(s, t, f->scoped->key, &f->text, &f->version);
    int rc = store_get_record(s, t, f->scoped->key, &f->data, &f->version);
    /* Outside the caller's row scope is not there. */
    return rc == 0 && !sub_filters_match(f->scoped, f->data) ? -ENOENT : rc;
  }
  f->total = -1;
  int rc = query_where(s, t, f->scoped, f->where, f->limit, f->cursor,
                       f->want_total ? &f->total : NULL, &f->data, &f->next, &f->bad_column);
  return rc == 0 ? store_table_version(s, t, &f->version) : rc;
}

void read_fetch_finish(read_fetch *f) {
  cJSON_Delete(f->data);
  f->data = NULL;
  buf_finish(&f->text);
  free(f->next);
  f->next = NULL;
}

/* On a reader: the table found by its name on the reader's connection, then the fetch. */
static int read_job_run(reader_job *j, store_t *s) {
  read_job *rj = (read_job *)j;
  read_fetch_finish(&rj->f); /* what a first try left (reader.h: a job may run twice) */
  rj->f.bad_column = NULL;
  const store_table *t;
  int rc = reader_table(s, rj->table, &t);
  return rc == 0 ? read_fetch_run(s, t, &rj->f) : rc;
}

static void read_job_done(reader_job *j) {
  read_job *rj = (read_job *)j;
  rj->answer(rj);
}

read_job *read_job_create(size_t size, const char *table, const read_fetch *f,
                          void (*answer)(read_job *rj)) {
  size_t tlen = strlen(table);
  read_job *rj = mem_calloc(1, size + tlen + 1); /* the table's name after the caller's struct */
  rj->job.run = read_job_run;
  rj->job.done = read_job_done;
  rj->answer = answer;
  rj->table = memcpy((char *)rj + size, table, tlen + 1);
  rj->scoped = *f->scoped;
  memset(f->scoped, 0, sizeof(*f->scoped));
  rj->cursor = f->cursor != NULL ? mem_strdup(f->cursor) : NULL;
  rj->where = f->where != NULL ? cJSON_Duplicate(f->where, true) : NULL;
  rj->f = (read_fetch){.scoped = &rj->scoped,
                       .limit = f->limit,
                       .cursor = rj->cursor,
                       .where = rj->where,
                       .want_total = f->want_total,
                       .want_text = f->want_text};
  return rj;
}

void read_job_free(read_job *rj) {
  read_fetch_finish(&rj->f);
  uri_finish(&rj->scoped);
  cJSON_Delete(rj->where);
  free(rj->cursor);
  free(rj);
}

/*
 * A read's answer: 0 with its result appended to out (read_result), or -1
 * with the error in *code and msg. u is the URI as the client wrote it
 * (text), for the next page's URI.
 */
static int read_answer(worker_t *w, const char *text, const uri_t *u, read_fetch *f, int rc,
                       bool modern, buf_t *out, int *code, char *msg, size_t msglen) {
  *code = JSONRPC_INTERNAL_ERROR;
  if (rc == -ENOENT && f->bad_column != NULL) {
    *code = JSONRPC_INVALID_PARAMS;
    snprintf(msg, msglen, "unknown column %s in table %s", f->bad_column, u->table);
    return -1;
  }
  if (rc == -ENOENT) {
    *code = MCP_RESOURCE_NOT_FOUND;
    snprintf(msg, msglen, "Resource not found: %s", text);
    return -1;
  }
  if (rc == -EINVAL && u->kind != URI_RECORD) {
    *code = JSONRPC_INVALID_PARAMS;
    snprintf(msg, msglen, "invalid cursor");
    return -1;
  }
  if (rc != 0) {
    snprintf(msg, msglen, "%s reading %s",
             rc == -ENOTCONN ? "database unavailable (retry)" : "database error", text);
    return -1;
  }
  buf_t json;
  buf_init(&json);
  if (f->data == NULL) { /* printed as read (want_text) */
    json = f->text;
    buf_init(&f->text);
  } else if (jsonrpc_print(&json, f->data) < 0) {
    snprintf(msg, msglen, "cannot print what %s holds", text);
    buf_finish(&json);
    return -1;
  }
  char *next_uri = NULL;
  if (f->next != NULL) {
    uri_t page = *u;
    page.cursor = f->next;
    page.limit = f->limit;
    next_uri = uri_format(w->cfg->public_url, &page);
  }
  read_result(w, out, text, json.data, json.len, f->version, f->next, next_uri, modern);
  free(next_uri);
  buf_finish(&json);
  return 0;
}

/* resources/read on a reader: answered from its completion. */
typedef struct resources_read_job {
  read_job rj;
  worker_t *w;
  mcp_reply reply;
  const char *text; /* the URI as the client wrote it (after the struct) */
  uri_t u;          /* parsed from it; empty when no row scope narrowed it (rj.scoped is it) */
} resources_read_job;

static void resources_read_answer(read_job *rj) {
  resources_read_job *r = (resources_read_job *)rj;
  int code;
  char msg[600];
  buf_t result;
  buf_init(&result);
  const uri_t *u = r->u.table != NULL ? &r->u : &rj->scoped;
  if (read_answer(r->w, r->text, u, &rj->f, rj->job.rc, r->reply.modern, &result, &code, msg,
                  sizeof(msg)) == 0)
    mcp_reply_send_text(&r->reply, result.data, result.len);
  else
    mcp_reply_send(&r->reply, NULL, code, msg);
  buf_finish(&result);
  uri_finish(&r->u);
  read_job_free(rj);
}

cJSON *resources_read(mcp_call *call) {
  const cJSON *uri_item = cJSON_GetObjectItemCaseSensitive(call->params, "uri");
  if (!cJSON_IsString(uri_item))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "resources/read requires params.uri");
  const char *text = uri_item->valuestring;
  uri_t u;
  int rc = uri_parse(base_url(call), text, &u);
  if (rc == -ENOENT)
    return mcp_call_fail(call, MCP_RESOURCE_NOT_FOUND, "Resource not found: %s", text);
  if (rc != 0)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "malformed resource URI: %.400s%s%s%s", text,
                         uri_error()[0] ? " (" : "", uri_error(), uri_error()[0] ? ")" : "");

  cJSON *result = NULL;
  const store_table *t = u.table != NULL ? subs_find_table(call->w, u.table) : NULL;
  /* A table the caller may not read does not exist for it; its row scope narrows the rest. */
  auth_scope scope = {0};
  if (t != NULL && u.kind != URI_SCHEMA &&
      auth_table_access(call->principal, t->name, AUTH_READ, &scope) != 0)
    t = NULL;
  /*
   * What a read of a record or a collection fetches: the URI narrowed to
   * the caller's row scope (a copy), or without a scope the URI itself.
   */
  uri_t scoped = {0};
  if (scope.scoped) scoped = uri_copy(&u);
  read_fetch f = {.scoped = scope.scoped ? &scoped : &u,
                  .limit = resources_page_limit(call->w, &u),
                  .cursor = u.cursor,
                  .want_text = true};
  if (t != NULL && auth_scope_apply(&scope, &scoped) != 0) t = NULL;
  if (u.kind == URI_ABOUT) {
    result = read_document(call, text, about_json(call));
  } else if (t == NULL) {
    mcp_call_fail(call, MCP_RESOURCE_NOT_FOUND, "Resource not found: %s", text);
  } else if (u.kind == URI_SCHEMA) {
    result = read_document(call, text, table_schema_json(t));
  } else if (call->w->reader != NULL && call->conn != NULL) {
    /* On a reader, off the lane (reader.h); inside a batch nothing can wait: on the lane. */
    size_t len = strlen(text);
    resources_read_job *r = (resources_read_job *)read_job_create(sizeof(*r) + len + 1, t->name, &f,
                                                                  resources_read_answer);
    r->w = call->w;
    mcp_reply_init(&r->reply, call);
    r->text = memcpy(r + 1, text, len + 1);
    r->u = u;                 /* empty when the job took it over as f.scoped */
    memset(&u, 0, sizeof(u)); /* r owns it now */
    reader_submit(call->w->reader, &r->rj.job);
    call->pending = true;
  } else {
    int code;
    char msg[600];
    buf_t printed;
    buf_init(&printed);
    if (read_answer(call->w, text, &u, &f, read_fetch_run(call->w->store, t, &f), call->modern,
                    &printed, &code, msg, sizeof(msg)) == 0)
      result = jsonrpc_raw(buf_steal(&printed));
    else
      mcp_call_fail(call, code, "%s", msg);
    buf_finish(&printed);
    read_fetch_finish(&f);
  }
  uri_finish(&scoped);
  uri_finish(&u);
  return result;
}

/* completion/complete ------------------------------------------------------------ */

static void add_completion(cJSON *values, int *total, const char *candidate, const char *prefix) {
  if (strncmp(candidate, prefix, strlen(prefix)) != 0) return;
  if (*total < COMPLETION_MAX) cJSON_AddItemToArray(values, cJSON_CreateString(candidate));
  (*total)++;
}

/*
 * A completion of keys: what finds them, on the loop's connection or on a
 * reader's (reader.h: a scan of a large table holds up nothing else).
 */
typedef struct key_completion {
  reader_job job; /* on a reader */
  mcp_reply reply;
  char *table;
  uri_t scoped; /* the table (text keys: those starting with prefix) in the caller's row scope */
  bool text;    /* a text key and a prefix: the store finds them; else the first pages are read */
  char *prefix;
  cJSON *values; /* out: at most COMPLETION_MAX */
  int total;     /* out: how many matched (at most COMPLETION_MAX + 1 for text keys) */
} key_completion;

static void key_completion_free(key_completion *kc);

/* NULL when the caller's row scope leaves nothing of t to offer. */
static key_completion *key_completion_create(const store_table *t, const auth_scope *scope,
                                             const char *prefix) {
  key_completion *kc = mem_calloc(1, sizeof(*kc));
  kc->table = mem_strdup(t->name);
  kc->prefix = mem_strdup(prefix);
  kc->text = prefix[0] != '\0' && t->key_col >= 0 && !store_column_numeric(t, t->key_col);
  /* Text keys by a `sw` filter on the key, as a read's: every key counts, not the first pages. */
  uri_filter f = {.column = t->key_col >= 0 ? t->cols[t->key_col].name : NULL,
                  .value = kc->prefix,
                  .op = URI_SW};
  uri_t u = {.kind = kc->text ? URI_FILTERED : URI_COLLECTION,
             .table = kc->table,
             .n_filters = kc->text ? 1 : 0,
             .filters = kc->text ? &f : NULL};
  kc->scoped = uri_copy(&u);
  kc->values = cJSON_CreateArray();
  if (auth_scope_apply(scope, &kc->scoped) != 0) {
    key_completion_free(kc);
    return NULL;
  }
  return kc;
}

static void key_completion_free(key_completion *kc) {
  mcp_reply_finish(&kc->reply);
  uri_finish(&kc->scoped);
  cJSON_Delete(kc->values);
  free(kc->prefix);
  free(kc->table);
  free(kc);
}

/*
 * Keys of t (s's table) in kc's scope starting with its prefix, in key
 * order, bounded: text keys at once, numbers (whose text prefixes are no
 * range) and an empty prefix from the first 10 pages of 1,000 rows.
 */
static int key_completion_run(store_t *s, const store_table *t, key_completion *kc) {
  cJSON_Delete(kc->values); /* what a first try left (a reader's job may run twice) */
  kc->values = cJSON_CreateArray();
  kc->total = 0;
  char *after = NULL;
  int rc = 0;
  for (int page = 0; page < (kc->text ? 1 : 10) && kc->total <= COMPLETION_MAX; page++) {
    cJSON *rows = NULL;
    char *next = NULL;
    const char *bad_column = NULL;
    rc = resources_query(s, t, &kc->scoped, kc->text ? COMPLETION_MAX + 1 : 1000, after, &rows,
                         &next, &bad_column);
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
      char *key = store_row_key(t, row);
      add_completion(kc->values, &kc->total, key, kc->prefix);
      free(key);
    }
    cJSON_Delete(rows);
    free(after);
    after = next;
    if (rc != 0 || after == NULL) break;
  }
  free(after);
  return rc;
}

static cJSON *completion_result(cJSON *values, int total) {
  cJSON *result = cJSON_CreateObject();
  cJSON *completion = cJSON_AddObjectToObject(result, "completion");
  cJSON_AddItemToObject(completion, "values", values);
  cJSON_AddNumberToObject(completion, "total", total);
  cJSON_AddBoolToObject(completion, "hasMore", total > cJSON_GetArraySize(values));
  return result;
}

static int key_completion_job_run(reader_job *j, store_t *s) {
  key_completion *kc = (key_completion *)j;
  const store_table *t;
  int rc = reader_table(s, kc->table, &t);
  return rc == 0 ? key_completion_run(s, t, kc) : rc;
}

static void key_completion_job_done(reader_job *j) {
  key_completion *kc = (key_completion *)j;
  /* A completion that failed offers nothing, as on the loop. */
  mcp_reply_send(&kc->reply, completion_result(kc->values, kc->total), 0, NULL);
  kc->values = NULL;
  key_completion_free(kc);
}

cJSON *completion_complete(mcp_call *call) {
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(call->params, "ref");
  const cJSON *arg = cJSON_GetObjectItemCaseSensitive(call->params, "argument");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(ref, "type");
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(arg, "name");
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(arg, "value");
  if (!cJSON_IsString(type) || !cJSON_IsString(name) || !cJSON_IsString(value))
    return mcp_call_fail(
        call, JSONRPC_INVALID_PARAMS,
        "completion/complete requires params.ref.type and params.argument {name, value}");
  if (strcmp(type->valuestring, "ref/resource") != 0)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "no completions for %s", type->valuestring);
  const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(ref, "uri");
  if (!cJSON_IsString(tmpl))
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "ref/resource requires ref.uri");

  /* Which table: from the template ({base}/{Table}/{key}) or from context.arguments.table. */
  const char *base = base_url(call);
  size_t blen = strlen(base);
  const store_table *t = NULL;
  const cJSON *ctx_table = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(call->params, "context"),
                                       "arguments"),
      "table");
  if (strncmp(tmpl->valuestring, base, blen) != 0 || tmpl->valuestring[blen] != '/')
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "unknown template: %s", tmpl->valuestring);
  const char *rest = tmpl->valuestring + blen + 1;
  bool generic = strcmp(rest, "{table}/{key}") == 0;
  /* A table the caller may not read does not exist for it; its row scope narrows the keys. */
  auth_scope scope = {0};
  if (generic) {
    if (cJSON_IsString(ctx_table)) t = subs_find_table(call->w, ctx_table->valuestring);
  } else {
    size_t tlen = strlen(rest);
    if (tlen < 6 || strcmp(rest + tlen - 6, "/{key}") != 0)
      return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "unknown template: %s", tmpl->valuestring);
    char *table = uri_decode_component(rest, tlen - 6);
    t = table != NULL ? subs_find_table(call->w, table) : NULL;
    free(table);
  }
  if (t != NULL && auth_table_access(call->principal, t->name, AUTH_READ, &scope) != 0) t = NULL;
  if (!generic && t == NULL)
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "unknown template: %s", tmpl->valuestring);

  cJSON *values = cJSON_CreateArray();
  int total = 0;
  if (generic && strcmp(name->valuestring, "table") == 0) {
    int n;
    const store_table *tables = store_tables(call->w->store, &n);
    for (int i = 0; i < n; i++) {
      auth_scope any;
      if (auth_table_access(call->principal, tables[i].name, AUTH_READ, &any) == 0)
        add_completion(values, &total, tables[i].name, value->valuestring);
    }
  } else if (strcmp(name->valuestring, "key") == 0 && t != NULL) {
    key_completion *kc = key_completion_create(t, &scope, value->valuestring);
    if (kc != NULL && call->w->reader != NULL && call->conn != NULL) {
      cJSON_Delete(values);
      kc->job = (reader_job){.run = key_completion_job_run, .done = key_completion_job_done};
      mcp_reply_init(&kc->reply, call);
      reader_submit(call->w->reader, &kc->job);
      call->pending = true;
      return NULL;
    }
    if (kc != NULL) {
      (void)key_completion_run(call->w->store, t, kc);
      cJSON_Delete(values);
      values = kc->values;
      total = kc->total;
      kc->values = NULL;
      key_completion_free(kc);
    }
  } else if (strcmp(name->valuestring, "key") != 0) {
    cJSON_Delete(values);
    return mcp_call_fail(call, JSONRPC_INVALID_PARAMS, "unknown argument: %s", name->valuestring);
  }
  return completion_result(values, total);
}
