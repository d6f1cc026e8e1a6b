/*
 * Durable state, read from the SQLite file read-only: what mcpsubctl can
 * report whether or not mcpsubd runs. Sessions go through the store
 * (src/common/store.h) like the server's own reads. Counting rows and
 * reading the audit log backwards or by table are operator queries the
 * store does not offer, so they run on a second read-only connection here;
 * they are parameterised and touch only mcpsub's own tables. Nothing here
 * ever writes, and opening never creates a missing file.
 */
#include <errno.h>
#include <stdio.h>

#include "ctl.h"

store_t *ctl_store(ctl_context *ctx) {
  if (ctx->store != NULL) return ctx->store;
  char err[512];
  if (store_open_readonly(ctx->db_path, &ctx->store, err, sizeof(err)) != 0) {
    ctl_error("%s", err); /* it names the file */
    ctx->store = NULL;
  }
  return ctx->store;
}

sqlite3 *ctl_db(ctl_context *ctx) {
  if (ctx->db != NULL) return ctx->db;
  int rc = sqlite3_open_v2(ctx->db_path, &ctx->db, SQLITE_OPEN_READONLY, NULL);
  if (rc != SQLITE_OK) {
    ctl_error("cannot open %s: %s", ctx->db_path,
              ctx->db != NULL ? sqlite3_errmsg(ctx->db) : sqlite3_errstr(rc));
    sqlite3_close(ctx->db);
    ctx->db = NULL;
    return NULL;
  }
  sqlite3_busy_timeout(ctx->db, 5000);
  return ctx->db;
}

void ctl_close(ctl_context *ctx) {
  store_close(ctx->store);
  ctx->store = NULL;
  sqlite3_close_v2(ctx->db);
  ctx->db = NULL;
}

/* Parsed JSON text, or null when absent or unparsable. */
static cJSON *ctl_parse_or_null(const char *text) {
  cJSON *v = text != NULL ? cJSON_Parse(text) : NULL;
  return v != NULL ? v : cJSON_CreateNull();
}

cJSON *ctl_session_to_json(const store_session *ss) {
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "id", ss->id);
  cJSON_AddNumberToObject(item, "createdAt", (double)ss->created_at);
  cJSON_AddNumberToObject(item, "lastSeen", (double)ss->last_seen);
  cJSON_AddStringToObject(item, "protocolVersion", ss->protocol_version);
  cJSON_AddStringToObject(item, "principal", ss->principal != NULL ? ss->principal : "anonymous");
  cJSON_AddItemToObject(item, "clientInfo", ctl_parse_or_null(ss->client_info));
  cJSON_AddStringToObject(item, "logLevel", ss->log_level != NULL ? ss->log_level : "info");
  cJSON *subs = ctl_parse_or_null(ss->subscriptions);
  if (!cJSON_IsArray(subs)) {
    cJSON_Delete(subs);
    subs = cJSON_CreateArray();
  }
  cJSON_AddItemToObject(item, "subscriptions", subs);
  return item;
}

static int ctl_collect_session(const store_session *ss, void *data) {
  cJSON_AddItemToArray(data, ctl_session_to_json(ss));
  return 0;
}

int ctl_durable_sessions(ctl_context *ctx, cJSON **out) {
  *out = NULL;
  store_t *store = ctl_store(ctx);
  if (store == NULL) return CTL_EXIT_ERROR;
  cJSON *list = cJSON_CreateArray();
  if (store_session_foreach(store, ctl_collect_session, list) != 0) {
    ctl_error("cannot read sessions from %s", ctx->db_path);
    cJSON_Delete(list);
    return CTL_EXIT_ERROR;
  }
  *out = list;
  return CTL_EXIT_OK;
}

int ctl_durable_counts(ctl_context *ctx, cJSON **out) {
  *out = NULL;
  store_t *store = ctl_store(ctx);
  sqlite3 *db = store != NULL ? ctl_db(ctx) : NULL;
  if (db == NULL) return CTL_EXIT_ERROR;
  int64_t max_seq = 0;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT (SELECT count(*) FROM mcp_session), "
                              "(SELECT count(*) FROM audit_log)",
                              -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  if (rc != SQLITE_ROW || store_audit_max_seq(store, &max_seq) != 0) {
    ctl_error("cannot count rows in %s: %s", ctx->db_path, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return CTL_EXIT_ERROR;
  }
  cJSON *counts = cJSON_CreateObject();
  cJSON_AddStringToObject(counts, "db", ctx->db_path);
  cJSON_AddNumberToObject(counts, "sessions", (double)sqlite3_column_int64(st, 0));
  cJSON_AddNumberToObject(counts, "auditRows", (double)sqlite3_column_int64(st, 1));
  cJSON_AddNumberToObject(counts, "auditMaxSeq", (double)max_seq);
  sqlite3_finalize(st);
  *out = counts;
  return CTL_EXIT_OK;
}
