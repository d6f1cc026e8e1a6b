/*
 * `audit tail`: the change feed as the operator sees it. The audit log is
 * durable state, so it is read from the database whether or not mcpsubd
 * runs: the last N rows (optionally of one table), oldest first, then with
 * -f every new row as it commits, polled every 200 ms until SIGINT or
 * SIGTERM, read the way the server's tailer reads them (store_audit_read:
 * never a row skipped, on either backend). With
 * --json, a plain tail prints one array; -f prints one object per line,
 * which a consumer can read as rows arrive.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mem.h"
#include "ctl.h"

#define CTL_AUDIT_DEFAULT_ROWS 20
#define CTL_AUDIT_MAX_ROWS     100000
#define CTL_AUDIT_POLL_MS      200
#define CTL_AUDIT_BATCH        1000
/* Characters of a row image shown in the table (--json shows it whole). */
#define CTL_AUDIT_ROW_CHARS 80

static volatile sig_atomic_t ctl_audit_stop;

static void ctl_audit_on_signal(int signum) {
  ctl_audit_stop = 1;
}

/* The row image of a change: the new row, or the old one of a DELETE, compact and cut short. */
static void ctl_fmt_audit_image(const cJSON *row, char *out, size_t n) {
  const cJSON *image = cJSON_GetObjectItemCaseSensitive(row, "newRow");
  if (cJSON_IsNull(image) || image == NULL) image = cJSON_GetObjectItemCaseSensitive(row, "oldRow");
  char *text = image != NULL && !cJSON_IsNull(image) ? cJSON_PrintUnformatted(image) : NULL;
  if (text == NULL) {
    snprintf(out, n, "-");
    return;
  }
  if (strlen(text) > CTL_AUDIT_ROW_CHARS)
    snprintf(out, n, "%.*s...", CTL_AUDIT_ROW_CHARS - 3, text);
  else
    snprintf(out, n, "%s", text);
  cJSON_free(text);
}

static const ctl_column ctl_audit_columns[] = {
    {"SEQ", "seq", ctl_fmt_text, true},        {"COMMITTED", "committedAt", ctl_fmt_time_ms, false},
    {"TABLE", "table", ctl_fmt_text, false},   {"OP", "op", ctl_fmt_text, false},
    {"KEY", "key", ctl_fmt_text, false},       {"BY", "principal", ctl_fmt_text, false},
    {"ROW", NULL, ctl_fmt_audit_image, false},
};

/* text as a JSON string, or null. */
static cJSON *ctl_string_or_null(const char *text) {
  return text != NULL ? cJSON_CreateString(text) : cJSON_CreateNull();
}

/* JSON text parsed, or null. */
static cJSON *ctl_json_or_null(const char *text) {
  cJSON *v = text != NULL ? cJSON_Parse(text) : NULL;
  return v != NULL ? v : cJSON_CreateNull();
}

typedef struct ctl_audit_batch {
  const char *table; /* only this table's rows, or NULL */
  cJSON *rows;
  int64_t last; /* the greatest seq read */
} ctl_audit_batch;

static int ctl_audit_collect(const store_audit_row *r, void *data) {
  ctl_audit_batch *b = data;
  b->last = r->seq;
  if (b->table != NULL && strcmp(r->table, b->table) != 0) return 0;
  cJSON *row = cJSON_CreateObject();
  cJSON_AddNumberToObject(row, "seq", (double)r->seq);
  cJSON_AddItemToObject(row, "table", ctl_string_or_null(r->table));
  cJSON_AddItemToObject(row, "key", ctl_string_or_null(r->key));
  cJSON_AddItemToObject(row, "op", ctl_string_or_null(r->op));
  cJSON_AddNumberToObject(row, "committedAt", (double)r->committed_at);
  cJSON_AddItemToObject(row, "oldRow", ctl_json_or_null(r->old_json));
  cJSON_AddItemToObject(row, "newRow", ctl_json_or_null(r->new_json));
  /* null: not written through mcpsubd */
  cJSON_AddItemToObject(row, "principal", ctl_string_or_null(r->principal));
  cJSON_AddItemToArray(b->rows, row);
  return 0;
}

/*
 * Rows into a new array *out, oldest first: with after < 0 the newest
 * limit rows, otherwise the rows the change feed hands out after after
 * (as the server's tailer reads them: in commit order on every backend),
 * at most limit read. table NULL means every table. *last gets the
 * greatest seq read (unchanged if none).
 */
static int ctl_audit_read(ctl_context *ctx, const char *table, int64_t after, int limit,
                          cJSON **out, int64_t *last) {
  *out = NULL;
  store_t *store = ctl_store(ctx);
  if (store == NULL) return CTL_EXIT_ERROR;
  ctl_audit_batch b = {.table = table, .rows = cJSON_CreateArray(), .last = *last};
  int rc = after < 0 ? store_audit_list(store, table, limit, ctl_audit_collect, &b)
                     : store_audit_read(store, after, limit, ctl_audit_collect, &b, NULL);
  if (rc != 0) {
    ctl_error("cannot read audit_log from %s", ctx->db_path);
    cJSON_Delete(b.rows);
    return CTL_EXIT_ERROR;
  }
  *last = b.last;
  *out = b.rows;
  return CTL_EXIT_OK;
}

/* -f output: one compact JSON object per line, or table rows under the first header. */
static void ctl_audit_emit(const ctl_context *ctx, const ctl_table *t, const cJSON *rows) {
  if (!ctx->json) {
    ctl_table_print_rows(t, rows);
  } else {
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
      char *text = cJSON_PrintUnformatted(row);
      if (text != NULL) printf("%s\n", text);
      cJSON_free(text);
    }
  }
  fflush(stdout);
}

static void ctl_audit_sleep(void) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = CTL_AUDIT_POLL_MS * 1000000L};
  nanosleep(&ts, NULL); /* a signal cuts it short, which is what we want */
}

/* Prints rows after last as they commit, until SIGINT or SIGTERM. */
static int ctl_audit_follow(ctl_context *ctx, const ctl_table *t, const char *table, int64_t last) {
  struct sigaction sa = {.sa_handler = ctl_audit_on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  while (!ctl_audit_stop) {
    cJSON *rows = NULL;
    int rc = ctl_audit_read(ctx, table, last, CTL_AUDIT_BATCH, &rows, &last);
    if (rc != 0) return rc;
    int n = cJSON_GetArraySize(rows);
    ctl_audit_emit(ctx, t, rows);
    cJSON_Delete(rows);
    if (ferror(stdout)) return CTL_EXIT_ERROR;
    if (n < CTL_AUDIT_BATCH) ctl_audit_sleep();
  }
  return CTL_EXIT_OK;
}

static int ctl_parse_row_count(const char *text, int *out) {
  long n;
  int rc = ctl_parse_count("audit tail", "-n", text, 0, CTL_AUDIT_MAX_ROWS, "rows", &n);
  if (rc == 0) *out = (int)n;
  return rc;
}

int ctl_cmd_audit_tail(ctl_context *ctx, int argc, char **argv) {
  bool follow = false;
  const char *table = NULL, *count = NULL;
  const ctl_flag flags[] = {
      {"--follow", "-f", NULL, &follow},
      {"--table", NULL, &table, NULL},
      {"--lines", "-n", &count, NULL},
  };
  int limit = CTL_AUDIT_DEFAULT_ROWS;
  int rc = ctl_parse_args("audit tail", argc, argv, flags, ARRAY_LEN(flags), NULL, 0);
  if (rc == 0 && count != NULL) rc = ctl_parse_row_count(count, &limit);
  if (rc != 0) return rc;
  cJSON *rows = NULL;
  int64_t last = 0;
  rc = limit > 0 ? ctl_audit_read(ctx, table, -1, limit, &rows, &last) : CTL_EXIT_OK;
  if (rc != 0) return rc;
  if (rows == NULL) rows = cJSON_CreateArray();
  if (follow && limit == 0) {
    /* Only what commits from now on: start at the head of the log. */
    store_t *store = ctl_store(ctx);
    if (store == NULL || store_audit_max_seq(store, &last) != 0) {
      if (store != NULL) ctl_error("cannot read audit_log from %s", ctx->db_path);
      cJSON_Delete(rows);
      return CTL_EXIT_ERROR;
    }
  }
  ctl_table t;
  ctl_table_init(&t, ctl_audit_columns, ARRAY_LEN(ctl_audit_columns));
  ctl_table_measure(&t, rows);
  if (!ctx->json) ctl_table_print_header(&t);
  if (follow)
    ctl_audit_emit(ctx, &t, rows);
  else if (ctx->json)
    ctl_print_json(rows);
  else
    ctl_table_print_rows(&t, rows);
  cJSON_Delete(rows);
  return follow ? ctl_audit_follow(ctx, &t, table, last) : CTL_EXIT_OK;
}
