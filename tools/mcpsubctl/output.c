/*
 * mcpsubctl's output, in one place so that every command looks alike:
 * aligned tables with headers, "label  value" records, short units, and
 * pretty-printed JSON. Everything a command shows is first a cJSON value
 * (as the server sent it, or as built from the database); the human form
 * is a description of columns or fields over it, never ad-hoc printf.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "ctl.h"

/* Cell text bound: long enough for any URI a session can subscribe to. */
#define CTL_CELL_MAX 2048

const cJSON *ctl_json_get(const cJSON *obj, const char *path) {
  char key[128];
  while (obj != NULL && path != NULL) {
    const char *dot = strchr(path, '.');
    size_t len = dot != NULL ? (size_t)(dot - path) : strlen(path);
    if (len >= sizeof(key)) return NULL;
    memcpy(key, path, len);
    key[len] = '\0';
    obj = cJSON_GetObjectItemCaseSensitive(obj, key);
    path = dot != NULL ? dot + 1 : NULL;
  }
  return obj;
}

static bool ctl_json_int(const cJSON *v, int64_t *out) {
  if (!cJSON_IsNumber(v)) return false;
  *out = (int64_t)v->valuedouble;
  return true;
}

void ctl_fmt_text(const cJSON *v, char *out, size_t n) {
  int64_t i;
  if (cJSON_IsString(v))
    snprintf(out, n, "%s", v->valuestring);
  else if (ctl_json_int(v, &i) && (double)i == v->valuedouble)
    snprintf(out, n, "%" PRId64, i);
  else if (cJSON_IsNumber(v))
    snprintf(out, n, "%g", v->valuedouble);
  else if (cJSON_IsBool(v))
    snprintf(out, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
  else
    snprintf(out, n, "-");
}

void ctl_fmt_bytes(const cJSON *v, char *out, size_t n) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  int64_t b;
  if (!ctl_json_int(v, &b)) {
    ctl_fmt_text(v, out, n);
    return;
  }
  if (b < 1024) {
    snprintf(out, n, "%" PRId64 "B", b);
    return;
  }
  double x = (double)b / 1024;
  size_t u = 0;
  while (x >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
    x /= 1024;
    u++;
  }
  snprintf(out, n, "%.1f%s", x, units[u]);
}

void ctl_fmt_duration(const cJSON *v, char *out, size_t n) {
  int64_t ms;
  if (!ctl_json_int(v, &ms)) {
    ctl_fmt_text(v, out, n);
    return;
  }
  int64_t s = ms / 1000;
  if (ms < 1000)
    snprintf(out, n, "%" PRId64 "ms", ms);
  else if (s < 60)
    snprintf(out, n, "%" PRId64 "s", s);
  else if (s < 3600)
    snprintf(out, n, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  else if (s < 86400)
    snprintf(out, n, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
  else
    snprintf(out, n, "%" PRId64 "d%02" PRId64 "h", s / 86400, s / 3600 % 24);
}

static void ctl_format_utc(const cJSON *v, char *out, size_t n, bool millis) {
  int64_t ms;
  if (!ctl_json_int(v, &ms) || ms <= 0) {
    ctl_fmt_text(v, out, n);
    return;
  }
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char date[32];
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
  if (millis)
    snprintf(out, n, "%s.%03dZ", date, (int)(ms % 1000));
  else
    snprintf(out, n, "%sZ", date);
}

void ctl_fmt_time(const cJSON *v, char *out, size_t n) {
  ctl_format_utc(v, out, n, false);
}

void ctl_fmt_time_ms(const cJSON *v, char *out, size_t n) {
  ctl_format_utc(v, out, n, true);
}

void ctl_fmt_yes_no(const cJSON *v, char *out, size_t n) {
  if (v == NULL || cJSON_IsNull(v))
    snprintf(out, n, "-");
  else
    snprintf(out, n, "%s",
             cJSON_IsTrue(v) || (cJSON_IsNumber(v) && v->valuedouble != 0) ? "yes" : "no");
}

void ctl_fmt_count(const cJSON *v, char *out, size_t n) {
  if (cJSON_IsArray(v))
    snprintf(out, n, "%d", cJSON_GetArraySize(v));
  else
    ctl_fmt_text(v, out, n);
}

void ctl_fmt_client(const cJSON *v, char *out, size_t n) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(v, "name");
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(v, "version");
  if (!cJSON_IsString(name))
    snprintf(out, n, "-");
  else if (cJSON_IsString(version))
    snprintf(out, n, "%s %s", name->valuestring, version->valuestring);
  else
    snprintf(out, n, "%s", name->valuestring);
}

/* Width on a terminal: UTF-8 continuation bytes take no column. */
static int ctl_text_width(const char *s) {
  int w = 0;
  for (; *s != '\0'; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

static void ctl_cell(const ctl_column *col, const cJSON *row, char *out, size_t n) {
  col->format(col->key != NULL ? ctl_json_get(row, col->key) : row, out, n);
}

void ctl_table_init(ctl_table *t, const ctl_column *cols, size_t n_cols) {
  t->cols = cols;
  t->n_cols = n_cols < CTL_MAX_COLUMNS ? n_cols : CTL_MAX_COLUMNS;
  for (size_t c = 0; c < t->n_cols; c++) t->width[c] = ctl_text_width(cols[c].header);
}

void ctl_table_measure(ctl_table *t, const cJSON *rows) {
  char cell[CTL_CELL_MAX];
  const cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    for (size_t c = 0; c < t->n_cols; c++) {
      ctl_cell(&t->cols[c], row, cell, sizeof(cell));
      int w = ctl_text_width(cell);
      if (w > t->width[c]) t->width[c] = w;
    }
  }
}

/* One line of cells; the last column is not padded. */
static void ctl_table_line(const ctl_table *t, const char *const *cells) {
  for (size_t c = 0; c < t->n_cols; c++) {
    bool last = c + 1 == t->n_cols;
    int pad = t->width[c] - ctl_text_width(cells[c]);
    if (pad < 0) pad = 0;
    if (t->cols[c].right)
      printf("%*s%s", pad, "", cells[c]);
    else if (last)
      printf("%s", cells[c]);
    else
      printf("%s%*s", cells[c], pad, "");
    fputs(last ? "\n" : "  ", stdout);
  }
}

void ctl_table_print_header(const ctl_table *t) {
  const char *cells[CTL_MAX_COLUMNS];
  for (size_t c = 0; c < t->n_cols; c++) cells[c] = t->cols[c].header;
  ctl_table_line(t, cells);
}

void ctl_table_print_rows(const ctl_table *t, const cJSON *rows) {
  static char storage[CTL_MAX_COLUMNS][CTL_CELL_MAX];
  const char *cells[CTL_MAX_COLUMNS];
  const cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    for (size_t c = 0; c < t->n_cols; c++) {
      ctl_cell(&t->cols[c], row, storage[c], sizeof(storage[c]));
      cells[c] = storage[c];
    }
    ctl_table_line(t, cells);
  }
}

void ctl_print_table(const ctl_column *cols, size_t n_cols, const cJSON *rows) {
  ctl_table t;
  ctl_table_init(&t, cols, n_cols);
  ctl_table_measure(&t, rows);
  ctl_table_print_header(&t);
  ctl_table_print_rows(&t, rows);
}

void ctl_print_count(int count, const char *one, const char *many) {
  printf("(%d %s)\n", count, count == 1 ? one : many);
}

void ctl_print_fields(const ctl_field *fields, size_t n, const cJSON *obj) {
  int width = 0;
  for (size_t i = 0; i < n; i++) {
    int w = ctl_text_width(fields[i].label);
    if (w > width) width = w;
  }
  char value[CTL_CELL_MAX];
  for (size_t i = 0; i < n; i++) {
    const cJSON *v = fields[i].key != NULL ? ctl_json_get(obj, fields[i].key) : obj;
    if (v == NULL) continue;
    fields[i].format(v, value, sizeof(value));
    printf("%-*s  %s\n", width, fields[i].label, value);
  }
}

void ctl_print_record(const ctl_context *ctx, const char *headline, const ctl_field *fields,
                      size_t n, const cJSON *obj) {
  if (ctx->json) {
    ctl_print_json(obj);
    return;
  }
  if (headline != NULL) printf("%s\n", headline);
  ctl_print_fields(fields, n, obj);
}

void ctl_print_list(const ctl_context *ctx, const cJSON *obj, const char *key,
                    const ctl_column *cols, size_t n_cols, const char *one, const char *many) {
  if (ctx->json) {
    ctl_print_json(obj);
    return;
  }
  const cJSON *rows = cJSON_GetObjectItemCaseSensitive(obj, key);
  ctl_print_table(cols, n_cols, rows);
  ctl_print_count(cJSON_GetArraySize(rows), one, many);
}

void ctl_json_merge(cJSON *dst, const cJSON *src) {
  const cJSON *item;
  cJSON_ArrayForEach(item, src) {
    cJSON_AddItemToObject(dst, item->string, cJSON_Duplicate(item, true));
  }
}

/* Appends v indented by depth levels of two spaces, jq style. */
static void ctl_json_pretty(buf_t *out, const cJSON *v, int depth) {
  bool container = cJSON_IsArray(v) || cJSON_IsObject(v);
  if (!container || v->child == NULL) {
    char *text = container ? NULL : cJSON_PrintUnformatted(v);
    buf_append_str(out, container ? (cJSON_IsArray(v) ? "[]" : "{}") : text ? text : "null");
    cJSON_free(text);
    return;
  }
  buf_append_str(out, cJSON_IsArray(v) ? "[\n" : "{\n");
  for (const cJSON *item = v->child; item != NULL; item = item->next) {
    buf_printf(out, "%*s", 2 * (depth + 1), "");
    if (cJSON_IsObject(v)) {
      buf_append_json_string(out, item->string, strlen(item->string));
      buf_append_str(out, ": ");
    }
    ctl_json_pretty(out, item, depth + 1);
    buf_append_str(out, item->next != NULL ? ",\n" : "\n");
  }
  buf_printf(out, "%*s%s", 2 * depth, "", cJSON_IsArray(v) ? "]" : "}");
}

void ctl_print_json(const cJSON *v) {
  buf_t out;
  buf_init(&out);
  ctl_json_pretty(&out, v, 0);
  printf("%s\n", out.data);
  buf_finish(&out);
}
