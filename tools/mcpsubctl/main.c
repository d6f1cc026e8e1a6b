/*
 * mcpsubctl: the operator CLI. For now it reads the SQLite file read-only
 * (it works whether mcpsubd runs or not) and reports durable state:
 *   mcpsubctl [--db PATH] [--json] sessions
 * Exit codes: 0 success, 1 the database cannot be read, 2 bad usage.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/store.h"

typedef struct ctl_options {
  const char *db;
  bool json;
  const char *command;
} ctl_options;

static void ctl_usage(FILE *out) {
  fprintf(out,
          "usage: mcpsubctl [--db PATH] [--json] COMMAND\n"
          "\n"
          "commands:\n"
          "  sessions     list durable MCP sessions (the mcp_session table)\n"
          "\n"
          "options:\n"
          "  --db PATH    database file (default data/mcpsub.db)\n"
          "  --json       print JSON instead of a table\n"
          "  --help       this text\n");
}

static void format_time(int64_t ms, char *out, size_t n) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Name of the client from its clientInfo JSON, or "-". */
static void client_name(const char *info, char *out, size_t n) {
  snprintf(out, n, "-");
  cJSON *doc = info != NULL ? cJSON_Parse(info) : NULL;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(doc, "name");
  if (cJSON_IsString(name)) snprintf(out, n, "%s", name->valuestring);
  cJSON_Delete(doc);
}

static int print_session_json(const store_session *ss, void *data) {
  cJSON *list = data;
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "id", ss->id);
  cJSON_AddNumberToObject(item, "createdAt", (double)ss->created_at);
  cJSON_AddNumberToObject(item, "lastSeen", (double)ss->last_seen);
  cJSON_AddStringToObject(item, "protocolVersion", ss->protocol_version);
  cJSON_AddItemToObject(item, "clientInfo", ss->client_info ? cJSON_Parse(ss->client_info) : cJSON_CreateNull());
  cJSON_AddStringToObject(item, "logLevel", ss->log_level ? ss->log_level : "info");
  cJSON_AddItemToObject(item, "subscriptions", cJSON_Parse(ss->subscriptions));
  cJSON_AddItemToArray(list, item);
  return 0;
}

static int print_session_row(const store_session *ss, void *data) {
  char created[32], seen[32], client[64];
  format_time(ss->created_at, created, sizeof(created));
  format_time(ss->last_seen, seen, sizeof(seen));
  client_name(ss->client_info, client, sizeof(client));
  cJSON *subs = cJSON_Parse(ss->subscriptions);
  int n_subs = cJSON_GetArraySize(subs);
  cJSON_Delete(subs);
  printf("%-34s  %-20s  %-20s  %-10s  %4d  %s\n", ss->id, created, seen, ss->protocol_version,
         n_subs, client);
  (*(int *)data)++;
  return 0;
}

static int ctl_sessions(store_t *store, const ctl_options *o) {
  if (o->json) {
    cJSON *list = cJSON_CreateArray();
    int rc = store_session_foreach(store, print_session_json, list);
    char *text = cJSON_Print(list);
    if (rc == 0) printf("%s\n", text);
    cJSON_free(text);
    cJSON_Delete(list);
    return rc == 0 ? 0 : 1;
  }
  printf("%-34s  %-20s  %-20s  %-10s  %4s  %s\n", "ID", "CREATED", "LAST SEEN", "PROTOCOL", "SUBS",
         "CLIENT");
  int count = 0;
  int rc = store_session_foreach(store, print_session_row, &count);
  if (rc == 0) printf("(%d session%s)\n", count, count == 1 ? "" : "s");
  return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  ctl_options o = {.db = "data/mcpsub.db"};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--db") == 0 && i + 1 < argc) o.db = argv[++i];
    else if (strncmp(argv[i], "--db=", 5) == 0) o.db = argv[i] + 5;
    else if (strcmp(argv[i], "--json") == 0) o.json = true;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      ctl_usage(stdout);
      return 0;
    } else if (argv[i][0] != '-' && o.command == NULL) o.command = argv[i];
    else {
      fprintf(stderr, "mcpsubctl: unexpected argument '%s'\n", argv[i]);
      ctl_usage(stderr);
      return 2;
    }
  }
  if (o.command == NULL || strcmp(o.command, "sessions") != 0) {
    if (o.command != NULL) fprintf(stderr, "mcpsubctl: unknown command '%s'\n", o.command);
    ctl_usage(stderr);
    return 2;
  }
  store_t *store = NULL;
  char err[512];
  if (store_open_readonly(o.db, &store, err, sizeof(err)) != 0) {
    fprintf(stderr, "mcpsubctl: cannot open %s: %s\n", o.db, err);
    return 1;
  }
  int rc = ctl_sessions(store, &o);
  if (rc != 0) fprintf(stderr, "mcpsubctl: cannot read sessions from %s\n", o.db);
  store_close(store);
  return rc;
}
