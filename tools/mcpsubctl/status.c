/*
 * The server-wide commands: status, workers, stats and subs. Each asks the
 * running server first; status and subs fall back on the database when it
 * is stopped (durable counts; subscriptions as stored on mcp_session rows),
 * workers and stats need it. Output is column and field descriptions over
 * the JSON answer (output.c); --json prints the answer itself.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "common/strmap.h"
#include "worker/worker_ctl.h"
#include "ctl.h"

/* status ------------------------------------------------------------------ */

static const ctl_field ctl_status_fields[] = {
    {"pid", "pid", ctl_fmt_text},
    {"uptime", "uptimeMs", ctl_fmt_duration},
    {"version", "version", ctl_fmt_text},
    {"listen", "listen", ctl_fmt_text},
    {"db", "db", ctl_fmt_text},
    {"workers", "workers", ctl_fmt_text},
    {"sessions", "totals.sessions", ctl_fmt_text},
    {"streams", "totals.streams", ctl_fmt_text},
    {"listen streams", "totals.listens", ctl_fmt_text},
    {"subscriptions", "totals.subscriptions", ctl_fmt_text},
    {"waiters", "totals.waiters", ctl_fmt_text},
    {"connections", "totals.connections", ctl_fmt_text},
    {"queued", "totals.queuedBytes", ctl_fmt_bytes},
    {"requests", "totals.requests", ctl_fmt_text},
    {"notifications", "totals.notifications", ctl_fmt_text},
    {"frames sent", "totals.framesSent", ctl_fmt_text},
    {"frames replayed", "totals.framesReplayed", ctl_fmt_text},
    {"frames dropped", "totals.framesDropped", ctl_fmt_text},
};

static const ctl_field ctl_durable_fields[] = {
    {"db", "db", ctl_fmt_text},
    {"sessions", "sessions", ctl_fmt_text},
    {"audit rows", "auditRows", ctl_fmt_text},
    {"audit max seq", "auditMaxSeq", ctl_fmt_text},
};

/* Stopped: says so, with the durable counts when the database can tell. Exit 3 either way. */
static int ctl_status_stopped(ctl_context *ctx) {
  cJSON *obj = cJSON_CreateObject();
  cJSON_AddBoolToObject(obj, "running", false);
  cJSON_AddStringToObject(obj, "controlSocket", ctx->control_path);
  cJSON *counts = NULL;
  if (ctl_durable_counts(ctx, &counts) == CTL_EXIT_OK) ctl_json_merge(obj, counts);
  cJSON_Delete(counts);
  ctl_print_record(ctx, "mcpsubd: not running", ctl_durable_fields, ARRAY_LEN(ctl_durable_fields),
                   obj);
  cJSON_Delete(obj);
  return CTL_EXIT_NOT_RUNNING;
}

int ctl_cmd_status(ctl_context *ctx, int argc, char **argv) {
  int rc = ctl_parse_args("status", argc, argv, NULL, 0, NULL, 0);
  if (rc != 0) return rc;
  cJSON *reply = NULL;
  rc = ctl_server_request(ctx, "status", NULL, NULL, &reply);
  if (rc == CTL_SERVER_DOWN) return ctl_status_stopped(ctx);
  if (rc != 0) return rc;
  ctl_print_record(ctx, "mcpsubd: running", ctl_status_fields, ARRAY_LEN(ctl_status_fields), reply);
  cJSON_Delete(reply);
  return CTL_EXIT_OK;
}

/* workers ----------------------------------------------------------------- */

static const ctl_column ctl_worker_columns[] = {
    {"SLOT", "slot", ctl_fmt_text, true},
    {"PID", "pid", ctl_fmt_text, true},
    {"GEN", "generation", ctl_fmt_text, true},
    {"ALIVE", "alive", ctl_fmt_yes_no, false},
    {"UPTIME", "uptimeMs", ctl_fmt_duration, true},
    {"RESTARTS", "restarts", ctl_fmt_text, true},
    {"SESSIONS", "sessions", ctl_fmt_text, true},
    {"STREAMS", "streams", ctl_fmt_text, true},
    {"LISTENS", "listens", ctl_fmt_text, true},
    {"SUBS", "subscriptions", ctl_fmt_text, true},
    {"CONNS", "connections", ctl_fmt_text, true},
    {"QUEUED", "queuedBytes", ctl_fmt_bytes, true},
    {"NOTIFS", "notifications", ctl_fmt_text, true},
    {"SENT", "framesSent", ctl_fmt_text, true},
    {"DROPPED", "framesDropped", ctl_fmt_text, true},
    {"AUDIT", "auditPosition", ctl_fmt_text, true},
};

int ctl_cmd_workers(ctl_context *ctx, int argc, char **argv) {
  int rc = ctl_parse_args("workers", argc, argv, NULL, 0, NULL, 0);
  if (rc != 0) return rc;
  cJSON *reply = NULL;
  rc = ctl_server_request(ctx, "workers", NULL, NULL, &reply);
  if (rc != 0) return rc;
  ctl_print_list(ctx, reply, "workers", ctl_worker_columns, ARRAY_LEN(ctl_worker_columns), "worker",
                 "workers");
  cJSON_Delete(reply);
  return CTL_EXIT_OK;
}

/* stats ------------------------------------------------------------------- */

static const ctl_column ctl_stats_columns[] = {
    {"WORKER", "slot", ctl_fmt_text, true},
    {"PID", "pid", ctl_fmt_text, true},
    {"UP", "up", ctl_fmt_text, true},
    {"SESSIONS", "sessions", ctl_fmt_text, true},
    {"STREAMS", "streams", ctl_fmt_text, true},
    {"LISTENS", "listens", ctl_fmt_text, true},
    {"SUBS", "subscriptions", ctl_fmt_text, true},
    {"WAITERS", "waiters", ctl_fmt_text, true},
    {"CONNS", "connections", ctl_fmt_text, true},
    {"QUEUED", "queuedBytes", ctl_fmt_bytes, true},
    {"REQUESTS", "requests", ctl_fmt_text, true},
    {"NOTIFS", "notifications", ctl_fmt_text, true},
    {"SENT", "framesSent", ctl_fmt_text, true},
    {"REPLAYED", "framesReplayed", ctl_fmt_text, true},
    {"DROPPED", "framesDropped", ctl_fmt_text, true},
    {"LAG", "lag", ctl_fmt_text, true},
    {"RESTARTS", "restarts", ctl_fmt_text, true},
};

/* Members whose worker="all" value is the sum; lag's is the largest (as in /metrics). */
static const char *const ctl_stats_summed[] = {
    "up",         "sessions",       "streams",       "listens",  "subscriptions",
    "waiters",    "connections",    "queuedBytes",   "requests", "notifications",
    "framesSent", "framesReplayed", "framesDropped", "restarts",
};

static double ctl_number(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* One display row: the worker's report, its slot's facts and its tailer lag. */
static cJSON *ctl_stats_row(const cJSON *worker, const cJSON *slot) {
  cJSON *row = cJSON_Duplicate(worker, true);
  double lag = ctl_number(worker, "auditHead") - ctl_number(worker, "auditPosition");
  cJSON_AddNumberToObject(row, "lag", lag > 0 ? lag : 0);
  cJSON_AddNumberToObject(row, "restarts", ctl_number(slot, "restarts"));
  /* Without slot facts (one process) a worker that reported is up. */
  const cJSON *alive = cJSON_GetObjectItemCaseSensitive(slot, "alive");
  bool up =
      slot == NULL || cJSON_IsTrue(alive) || (cJSON_IsNumber(alive) && alive->valuedouble != 0);
  cJSON_AddNumberToObject(row, "up", up);
  return row;
}

/* The workers' rows, then the worker="all" row. */
static cJSON *ctl_stats_rows(const cJSON *reply) {
  const cJSON *slots = cJSON_GetObjectItemCaseSensitive(reply, "slots");
  cJSON *rows = cJSON_CreateArray();
  cJSON *all = cJSON_CreateObject();
  cJSON_AddStringToObject(all, "slot", "all");
  double total[ARRAY_LEN(ctl_stats_summed)] = {0}, max_lag = 0;
  int i = 0;
  const cJSON *worker;
  cJSON_ArrayForEach(worker, cJSON_GetObjectItemCaseSensitive(reply, "workers")) {
    cJSON *row = ctl_stats_row(worker, cJSON_GetArrayItem(slots, i++));
    for (size_t k = 0; k < ARRAY_LEN(ctl_stats_summed); k++)
      total[k] += ctl_number(row, ctl_stats_summed[k]);
    if (ctl_number(row, "lag") > max_lag) max_lag = ctl_number(row, "lag");
    cJSON_AddItemToArray(rows, row);
  }
  for (size_t k = 0; k < ARRAY_LEN(ctl_stats_summed); k++)
    cJSON_AddNumberToObject(all, ctl_stats_summed[k], total[k]);
  cJSON_AddNumberToObject(all, "lag", max_lag);
  cJSON_AddItemToArray(rows, all);
  return rows;
}

int ctl_cmd_stats(ctl_context *ctx, int argc, char **argv) {
  int rc = ctl_parse_args("stats", argc, argv, NULL, 0, NULL, 0);
  if (rc != 0) return rc;
  cJSON *reply = NULL;
  rc = ctl_server_request(ctx, "stats", NULL, NULL, &reply);
  if (rc != 0) return rc;
  if (ctx->json) {
    ctl_print_json(reply);
  } else {
    cJSON *rows = ctl_stats_rows(reply);
    ctl_print_table(ctl_stats_columns, ARRAY_LEN(ctl_stats_columns), rows);
    cJSON_Delete(rows);
  }
  cJSON_Delete(reply);
  return CTL_EXIT_OK;
}

/* subs -------------------------------------------------------------------- */

static const ctl_column ctl_subs_columns[] = {
    {"SESSIONS", "sessions", ctl_fmt_text, true},
    {"URI", "uri", ctl_fmt_text, false},
};

typedef struct ctl_uri_counts {
  strmap by_uri; /* uri -> cJSON row {uri, sessions} */
  cJSON **rows;
  size_t n, cap;
} ctl_uri_counts;

static void ctl_uri_count(ctl_uri_counts *c, const char *uri) {
  size_t len = strlen(uri);
  cJSON *row = strmap_get(&c->by_uri, uri, len);
  if (row == NULL) {
    row = cJSON_CreateObject();
    cJSON_AddStringToObject(row, "uri", uri);
    cJSON_AddNumberToObject(row, "sessions", 0);
    strmap_put(&c->by_uri, uri, len, row);
    if (c->n == c->cap) {
      c->cap = c->cap ? 2 * c->cap : 16;
      c->rows = mem_realloc(c->rows, c->cap * sizeof(*c->rows));
    }
    c->rows[c->n++] = row;
  }
  cJSON *n = cJSON_GetObjectItemCaseSensitive(row, "sessions");
  cJSON_SetNumberValue(n, n->valuedouble + 1);
}

/*
 * Stopped: {"subscriptions": [{uri, sessions}], more} from the stored
 * sessions' URIs, the most subscribed first, at most limit of them, as the
 * server answers. Only URI (and a row for it, maybe 0) when not NULL.
 */
static int ctl_durable_subscriptions(ctl_context *ctx, const char *only, size_t limit,
                                     cJSON **out) {
  cJSON *sessions = NULL;
  int rc = ctl_durable_sessions(ctx, 0, &sessions);
  if (rc != 0) return rc;
  ctl_uri_counts c = {.rows = NULL};
  strmap_init(&c.by_uri);
  if (only != NULL) {
    ctl_uri_count(&c, only);
    cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(c.rows[0], "sessions"), 0);
  }
  const cJSON *session, *uri;
  cJSON_ArrayForEach(session, sessions) {
    strmap seen; /* a session holds each URI once; count it once regardless */
    strmap_init(&seen);
    cJSON_ArrayForEach(uri, cJSON_GetObjectItemCaseSensitive(session, "subscriptions")) {
      if (!cJSON_IsString(uri) || (only != NULL && strcmp(uri->valuestring, only) != 0)) continue;
      size_t len = strlen(uri->valuestring);
      if (strmap_put(&seen, uri->valuestring, len, (void *)uri) != NULL) continue;
      ctl_uri_count(&c, uri->valuestring);
    }
    strmap_finish(&seen);
  }
  cJSON *list = cJSON_CreateArray();
  for (size_t i = 0; i < c.n; i++) cJSON_AddItemToArray(list, c.rows[i]);
  bool more = worker_ctl_subs_rank(list, limit);
  *out = cJSON_CreateObject();
  cJSON_AddItemToObject(*out, "subscriptions", list);
  if (only == NULL) cJSON_AddBoolToObject(*out, "more", more);
  strmap_finish(&c.by_uri);
  free(c.rows);
  cJSON_Delete(sessions);
  return CTL_EXIT_OK;
}

int ctl_cmd_subs(ctl_context *ctx, int argc, char **argv) {
  const char *uri = NULL, *limit_text = NULL;
  const ctl_flag flags[] = {{"--uri", NULL, &uri, NULL}, {"--limit", NULL, &limit_text, NULL}};
  int rc = ctl_parse_args("subs", argc, argv, flags, ARRAY_LEN(flags), NULL, 0);
  if (rc != 0) return rc;
  long limit = WORKER_CTL_SUBS_DEFAULT;
  if (limit_text != NULL) {
    rc = ctl_parse_count("subs", "--limit", limit_text, 1, WORKER_CTL_SUBS_MAX, "URIs", &limit);
    if (rc != 0) return rc;
  }
  cJSON *request = cJSON_CreateObject(), *subs = NULL;
  cJSON_AddStringToObject(request, "cmd", "subs");
  if (uri != NULL)
    cJSON_AddStringToObject(request, "uri", uri);
  else
    cJSON_AddNumberToObject(request, "limit", (double)limit);
  rc = ctl_server_call(ctx, request, &subs);
  cJSON_Delete(request);
  if (rc == CTL_SERVER_DOWN) rc = ctl_durable_subscriptions(ctx, uri, (size_t)limit, &subs);
  if (rc != 0) return rc;
  ctl_print_list(ctx, subs, "subscriptions", ctl_subs_columns, ARRAY_LEN(ctl_subs_columns), "URI",
                 "URIs");
  if (!ctx->json && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(subs, "more")))
    printf("(the %ld most subscribed: there are more; --limit shows up to %d)\n", limit,
           WORKER_CTL_SUBS_MAX);
  cJSON_Delete(subs);
  return CTL_EXIT_OK;
}
