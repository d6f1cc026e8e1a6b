/*
 * Durable state, read from the database read-only (through the store,
 * src/common/store.h, on either backend): what mcpsubctl can report whether
 * or not mcpsubd runs. Nothing here ever writes, and opening never creates
 * a missing SQLite file.
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

void ctl_close(ctl_context *ctx) {
  store_close(ctx->store);
  ctx->store = NULL;
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

int ctl_durable_sessions(ctl_context *ctx, long limit, cJSON **out) {
  *out = NULL;
  store_t *store = ctl_store(ctx);
  if (store == NULL) return CTL_EXIT_ERROR;
  cJSON *list = cJSON_CreateArray();
  if (store_session_foreach(store, limit, ctl_collect_session, list) != 0) {
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
  if (store == NULL) return CTL_EXIT_ERROR;
  int64_t max_seq = 0, sessions = 0, audit_rows = 0;
  if (store_counts(store, &sessions, &audit_rows) != 0 ||
      store_audit_max_seq(store, &max_seq) != 0) {
    ctl_error("cannot count rows in %s", ctx->db_path);
    return CTL_EXIT_ERROR;
  }
  cJSON *counts = cJSON_CreateObject();
  cJSON_AddStringToObject(counts, "db", ctx->db_path);
  cJSON_AddNumberToObject(counts, "sessions", (double)sessions);
  cJSON_AddNumberToObject(counts, "auditRows", (double)audit_rows);
  cJSON_AddNumberToObject(counts, "auditMaxSeq", (double)max_seq);
  *out = counts;
  return CTL_EXIT_OK;
}
