/*
 * The session commands. `sessions` lists the durable mcp_session rows
 * (whether or not the server runs), newest last_seen first, all of them or
 * the --limit N first; `sessions --live` what the workers
 * hold, the N most recently seen (--limit, as bounded as the server's
 * answer). `session show` joins both views of one session: its durable
 * record and, when the server runs and holds it, its live state (worker,
 * stream, replay ring). `session evict` asks the server to end a live
 * session.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "worker/worker_ctl.h"
#include "ctl.h"

/* sessions ---------------------------------------------------------------- */

/* --limit without --live: up to this many stored rows (the default is all of them). */
#define CTL_STORED_SESSIONS_MAX 100000000L

static const ctl_column ctl_durable_session_columns[] = {
    {"ID", "id", ctl_fmt_text, false},
    {"CREATED", "createdAt", ctl_fmt_time, false},
    {"LAST SEEN", "lastSeen", ctl_fmt_time, false},
    {"PROTOCOL", "protocolVersion", ctl_fmt_text, false},
    {"PRINCIPAL", "principal", ctl_fmt_text, false},
    {"SUBS", "subscriptions", ctl_fmt_count, true},
    {"CLIENT", "clientInfo", ctl_fmt_client, false},
};

/* A live session's subscriptions: those listed and those its worker left out to fit. */
static void ctl_fmt_live_subs(const cJSON *session, char *out, size_t n) {
  const cJSON *omitted = cJSON_GetObjectItemCaseSensitive(session, "subscriptionsOmitted");
  double count = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(session, "subscriptions"));
  snprintf(out, n, "%.0f", count + (cJSON_IsNumber(omitted) ? omitted->valuedouble : 0));
}

static const ctl_column ctl_live_session_columns[] = {
    {"ID", "id", ctl_fmt_text, false},
    {"WORKER", "worker", ctl_fmt_text, true},
    {"PROTOCOL", "protocolVersion", ctl_fmt_text, false},
    {"PRINCIPAL", "principal", ctl_fmt_text, false},
    {"CREATED", "createdMs", ctl_fmt_time, false},
    {"LAST SEEN", "lastSeenMs", ctl_fmt_time, false},
    {"STREAM", "stream", ctl_fmt_yes_no, false},
    {"SUBS", NULL, ctl_fmt_live_subs, true},
    {"RING", "ring", ctl_fmt_text, true},
    {"UNDELIVERED", "undelivered", ctl_fmt_text, true},
};

/* Says why a live listing stopped short, and how to see more. */
static void ctl_print_sessions_cut(const cJSON *reply, long limit) {
  int listed = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(reply, "sessions"));
  if (listed >= limit)
    printf("(the %ld most recently seen: there are more; --limit shows up to %d)\n", limit,
           WORKER_CTL_SESSIONS_MAX);
  else
    printf("(the %d most recently seen, all an answer holds (%zu MiB): there are more; "
           "sessions without --live lists the stored ones)\n",
           listed, WORKER_CTL_SESSIONS_BYTES >> 20);
}

static int ctl_sessions_live(ctl_context *ctx, long limit) {
  ctx->server_required = true;
  cJSON *request = cJSON_CreateObject(), *reply = NULL;
  cJSON_AddStringToObject(request, "cmd", "sessions");
  cJSON_AddNumberToObject(request, "limit", (double)limit);
  int rc = ctl_server_call(ctx, request, &reply);
  cJSON_Delete(request);
  if (rc != 0) return rc;
  ctl_print_list(ctx, reply, "sessions", ctl_live_session_columns,
                 ARRAY_LEN(ctl_live_session_columns), "live session", "live sessions");
  if (!ctx->json && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "more")))
    ctl_print_sessions_cut(reply, limit);
  cJSON_Delete(reply);
  return CTL_EXIT_OK;
}

int ctl_cmd_sessions(ctl_context *ctx, int argc, char **argv) {
  bool live = false;
  const char *limit_text = NULL;
  const ctl_flag flags[] = {{"--live", NULL, NULL, &live}, {"--limit", NULL, &limit_text, NULL}};
  int rc = ctl_parse_args("sessions", argc, argv, flags, ARRAY_LEN(flags), NULL, 0);
  if (rc != 0) return rc;
  /* Live: through the server's bounded answer. Stored: all of them unless asked for fewer. */
  long limit = live ? WORKER_CTL_SESSIONS_DEFAULT : 0;
  if (limit_text != NULL) {
    rc = ctl_parse_count("sessions", "--limit", limit_text, 1,
                         live ? WORKER_CTL_SESSIONS_MAX : CTL_STORED_SESSIONS_MAX, "sessions",
                         &limit);
    if (rc != 0) return rc;
  }
  if (live) return ctl_sessions_live(ctx, limit);
  cJSON *list = NULL;
  rc = ctl_durable_sessions(ctx, limit > 0 ? limit + 1 : 0, &list); /* one more: are there more? */
  if (rc != 0) return rc;
  bool more = limit > 0 && cJSON_GetArraySize(list) > limit;
  if (more) cJSON_DeleteItemFromArray(list, (int)limit);
  /* The durable list stays a bare array in JSON, as it always was. */
  if (ctx->json) {
    ctl_print_json(list);
  } else {
    ctl_print_table(ctl_durable_session_columns, ARRAY_LEN(ctl_durable_session_columns), list);
    if (more)
      printf("(the %ld most recently seen of the stored sessions: there are more)\n", limit);
    else
      ctl_print_count(cJSON_GetArraySize(list), "session", "sessions");
  }
  cJSON_Delete(list);
  return CTL_EXIT_OK;
}

/* session show ------------------------------------------------------------ */

/* "live": true with "worker", false (the server holds it nowhere), or null (not running). */
static void ctl_fmt_session_live(const cJSON *session, char *out, size_t n) {
  const cJSON *live = cJSON_GetObjectItemCaseSensitive(session, "live");
  char worker[32];
  if (cJSON_IsTrue(live)) {
    ctl_fmt_text(cJSON_GetObjectItemCaseSensitive(session, "worker"), worker, sizeof(worker));
    snprintf(out, n, "yes (worker %s)", worker);
  } else if (cJSON_IsFalse(live)) {
    snprintf(out, n, "no (no worker holds it)");
  } else {
    snprintf(out, n, "unknown (mcpsubd not running)");
  }
}

static void ctl_fmt_stream(const cJSON *v, char *out, size_t n) {
  snprintf(out, n, "%s",
           cJSON_IsTrue(v) || (cJSON_IsNumber(v) && v->valuedouble != 0) ? "open" : "none");
}

static const ctl_field ctl_session_fields[] = {
    {"id", "id", ctl_fmt_text},
    {"live", NULL, ctl_fmt_session_live},
    {"created", "createdAt", ctl_fmt_time},
    {"last seen", "lastSeen", ctl_fmt_time},
    {"protocol", "protocolVersion", ctl_fmt_text},
    {"principal", "principal", ctl_fmt_text},
    {"client", "clientInfo", ctl_fmt_client},
    {"log level", "logLevel", ctl_fmt_text},
    {"stream", "stream", ctl_fmt_stream},
    {"ring", "ring", ctl_fmt_text},
    {"undelivered", "undelivered", ctl_fmt_text},
    {"subscriptions", "subscriptions", ctl_fmt_count},
};

/* The durable record of id as JSON in *out, or NULL when there is none. */
static int ctl_durable_session(ctl_context *ctx, const char *id, cJSON **out) {
  *out = NULL;
  store_t *store = ctl_store(ctx);
  if (store == NULL) return CTL_EXIT_ERROR;
  store_session ss;
  memset(&ss, 0, sizeof(ss));
  int rc = store_session_load(store, id, &ss);
  if (rc == -ENOENT) return CTL_EXIT_OK;
  if (rc != 0) {
    ctl_error("cannot read session %s from %s", id, ctx->db_path);
    return CTL_EXIT_ERROR;
  }
  *out = ctl_session_to_json(&ss);
  store_session_finish(&ss);
  return CTL_EXIT_OK;
}

/* A record in the durable shape from a live session the database does not hold. */
static cJSON *ctl_session_from_live(const cJSON *live) {
  static const char *const renames[][2] = {
      {"id", "id"},
      {"createdMs", "createdAt"},
      {"lastSeenMs", "lastSeen"},
      {"protocolVersion", "protocolVersion"},
      {"principal", "principal"},
      {"subscriptions", "subscriptions"},
      {"subscriptionsOmitted", "subscriptionsOmitted"},
  };
  cJSON *session = cJSON_CreateObject();
  for (size_t i = 0; i < ARRAY_LEN(renames); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(live, renames[i][0]);
    if (v != NULL) cJSON_AddItemToObject(session, renames[i][1], cJSON_Duplicate(v, true));
  }
  return session;
}

/* Adds what only the live state knows to session: live, worker, stream, ring, undelivered. */
static void ctl_session_add_live(cJSON *session, bool running, const cJSON *live) {
  static const char *const live_keys[] = {"worker", "stream", "ring", "undelivered"};
  if (!running) {
    cJSON_AddNullToObject(session, "live");
    return;
  }
  cJSON_AddBoolToObject(session, "live", live != NULL);
  for (size_t i = 0; live != NULL && i < ARRAY_LEN(live_keys); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(live, live_keys[i]);
    if (v != NULL) cJSON_AddItemToObject(session, live_keys[i], cJSON_Duplicate(v, true));
  }
}

static void ctl_print_session(const ctl_context *ctx, const cJSON *session) {
  ctl_print_record(ctx, NULL, ctl_session_fields, ARRAY_LEN(ctl_session_fields), session);
  if (ctx->json) return;
  const cJSON *uri;
  cJSON_ArrayForEach(uri, cJSON_GetObjectItemCaseSensitive(session, "subscriptions")) {
    if (cJSON_IsString(uri)) printf("  %s\n", uri->valuestring);
  }
  const cJSON *omitted = cJSON_GetObjectItemCaseSensitive(session, "subscriptionsOmitted");
  if (cJSON_IsNumber(omitted))
    printf("  (and %.0f more, left out of the answer)\n", omitted->valuedouble);
}

int ctl_cmd_session_show(ctl_context *ctx, int argc, char **argv) {
  const char *id = NULL;
  int rc = ctl_parse_args("session show", argc, argv, NULL, 0, &id, 1);
  if (rc != 0) return rc;
  cJSON *session = NULL, *reply = NULL;
  rc = ctl_durable_session(ctx, id, &session);
  if (rc != 0) return rc;
  rc = ctl_server_request(ctx, "session", "id", id, &reply);
  bool running = rc != CTL_SERVER_DOWN;
  if (rc != 0 && rc != CTL_SERVER_DOWN && rc != CTL_EXIT_UNKNOWN_SESSION) {
    cJSON_Delete(session);
    return rc;
  }
  const cJSON *live = cJSON_GetObjectItemCaseSensitive(reply, "session");
  if (session == NULL && cJSON_IsObject(live)) session = ctl_session_from_live(live);
  if (session == NULL) {
    ctl_error("unknown session %s", id);
    rc = CTL_EXIT_UNKNOWN_SESSION;
  } else {
    ctl_session_add_live(session, running, cJSON_IsObject(live) ? live : NULL);
    ctl_print_session(ctx, session);
    rc = CTL_EXIT_OK;
  }
  cJSON_Delete(session);
  cJSON_Delete(reply);
  return rc;
}

/* session evict ----------------------------------------------------------- */

int ctl_cmd_session_evict(ctl_context *ctx, int argc, char **argv) {
  const char *id = NULL;
  int rc = ctl_parse_args("session evict", argc, argv, NULL, 0, &id, 1);
  if (rc != 0) return rc;
  cJSON *reply = NULL;
  rc = ctl_server_request(ctx, "evict", "id", id, &reply);
  if (rc == CTL_EXIT_UNKNOWN_SESSION) ctl_error("unknown session %s", id);
  if (rc != 0) return rc;
  if (ctx->json)
    ctl_print_json(reply);
  else
    printf("evicted %s\n", id);
  cJSON_Delete(reply);
  return CTL_EXIT_OK;
}
