/*
 * Unit tests of the SQLite store on temporary database files: which tables
 * are exported and how they are keyed, the audit triggers (for writes made
 * through the store and by an external sqlite3 connection), record reads,
 * filtered and paged queries, the three write modes and their errors,
 * schema refresh, audit retention and the mcp_session rows. Everything is
 * created under a mkdtemp() directory that is removed at the end.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "common/jsonrpc.h"
#include "common/store.h"

static char tmp_dir[] = "/tmp/test_store.XXXXXX";
static char db_path[256];
static char schema_path[256];

/*
 * The test application schema: a text key, an integer key, rowid-only and
 * composite-key rowid tables, a WITHOUT ROWID table with a single key and
 * one with a composite key (not exported), names needing quotes, an
 * INTEGER PRIMARY KEY DESC (not a rowid alias), a generated column, and
 * tables that must stay private.
 */
static const char test_schema[] =
    "CREATE TABLE Product (\n"
    "  sku TEXT PRIMARY KEY,\n"
    "  name TEXT NOT NULL,\n"
    "  price_cents INTEGER NOT NULL DEFAULT 0,\n"
    "  category TEXT,\n"
    "  in_stock INTEGER NOT NULL DEFAULT 1,\n"
    "  data BLOB\n"
    ");\n"
    "CREATE TABLE Event (id INTEGER PRIMARY KEY, note TEXT, qty REAL, big INTEGER,\n"
    "  twice REAL GENERATED ALWAYS AS (qty * 2) VIRTUAL);\n"
    "CREATE TABLE Note (body TEXT, tag TEXT DEFAULT 'none');\n"
    "CREATE TABLE Grid (x INTEGER, y INTEGER, label TEXT, PRIMARY KEY (x, y));\n"
    "CREATE TABLE Pair (a TEXT, b TEXT, v INTEGER, PRIMARY KEY (a, b)) WITHOUT ROWID;\n"
    "CREATE TABLE Code (code TEXT PRIMARY KEY, label TEXT) WITHOUT ROWID;\n"
    "CREATE TABLE \"Order Line\" (\"line id\" INTEGER PRIMARY KEY, \"it\"\"em\" TEXT);\n"
    "CREATE TABLE \"it's\" (k TEXT PRIMARY KEY, v);\n"
    "CREATE TABLE Ranked (id INTEGER PRIMARY KEY DESC, v);\n"
    "CREATE TABLE Odd (a TEXT, \"rowid\" TEXT);\n"
    "CREATE TABLE mcpsub_private (x);\n"
    "CREATE TABLE audit_log_archive (x);\n"
    "CREATE VIEW ProductView AS SELECT * FROM Product;\n"
    "INSERT INTO Product (sku, name, price_cents, category, in_stock) VALUES\n"
    "  ('A-100', 'Anvil', 4999, 'tools', 1),\n"
    "  ('B-200', 'Bucket', 899, 'garden', 1),\n"
    "  ('C-300', 'Chisel', 1299, 'tools', 0),\n"
    "  ('D-400', 'Dust pan', 450, NULL, 1);\n"
    "INSERT INTO Event (id, note) VALUES (1, 'first');\n";

/* Raw sqlite3 connection: the "external writer" ------------------------------ */

static sqlite3 *raw_open(const char *path) {
  sqlite3 *db = NULL;
  CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  return db;
}

static void raw_exec(sqlite3 *db, const char *sql) {
  char *msg = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK) fprintf(stderr, "raw_exec(%s): %s\n", sql, msg ? msg : "?");
  sqlite3_free(msg);
  CHECK(rc == SQLITE_OK);
}

static int64_t raw_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  CHECK(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
  int rc = sqlite3_step(st);
  CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE);
  int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  return v;
}

static int64_t audit_count(sqlite3 *db) {
  return raw_int(db, "SELECT count(*) FROM audit_log");
}

typedef struct audit_row {
  int64_t seq;
  char tbl[64];
  char key[64];
  char op[8];
  cJSON *old_row; /* NULL when SQL NULL */
  cJSON *new_row;
  int64_t committed_at;
} audit_row;

/* The audit row `back` places before the newest (0 = newest). */
static void audit_get(sqlite3 *db, int back, audit_row *out) {
  sqlite3_stmt *st = NULL;
  memset(out, 0, sizeof(*out));
  CHECK(sqlite3_prepare_v2(db,
                           "SELECT seq, tbl, key, op, old_row, new_row, committed_at "
                           "FROM audit_log "
                           "ORDER BY seq DESC LIMIT 1 OFFSET ?1",
                           -1, &st, NULL) == SQLITE_OK);
  sqlite3_bind_int(st, 1, back);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  out->seq = sqlite3_column_int64(st, 0);
  snprintf(out->tbl, sizeof(out->tbl), "%s", (const char *)sqlite3_column_text(st, 1));
  snprintf(out->key, sizeof(out->key), "%s", (const char *)sqlite3_column_text(st, 2));
  snprintf(out->op, sizeof(out->op), "%s", (const char *)sqlite3_column_text(st, 3));
  if (sqlite3_column_type(st, 4) != SQLITE_NULL) {
    out->old_row = cJSON_Parse((const char *)sqlite3_column_text(st, 4));
    CHECK(out->old_row != NULL);
  }
  if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
    out->new_row = cJSON_Parse((const char *)sqlite3_column_text(st, 5));
    CHECK(out->new_row != NULL);
  }
  out->committed_at = sqlite3_column_int64(st, 6);
  sqlite3_finalize(st);
}

static void audit_finish(audit_row *a) {
  cJSON_Delete(a->old_row);
  cJSON_Delete(a->new_row);
  a->old_row = a->new_row = NULL;
}

/* JSON helpers ------------------------------------------------------------------ */

static const char *json_str(const cJSON *obj, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  CHECK(cJSON_IsString(v));
  return v->valuestring;
}

static double json_num(const cJSON *obj, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
  CHECK(cJSON_IsNumber(v));
  return v->valuedouble;
}

static int json_is_null(const cJSON *obj, const char *name) {
  return cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(obj, name));
}

static cJSON *json(const char *text) {
  cJSON *v = cJSON_Parse(text);
  CHECK(v != NULL);
  return v;
}

/* Store helpers ------------------------------------------------------------------ */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  CHECK(fputs(text, f) >= 0);
  CHECK(fclose(f) == 0);
}

static store_t *open_store(const char *path) {
  store_t *s = NULL;
  char err[256] = "";
  int rc = store_open(path, schema_path, &s, err, sizeof(err));
  if (rc != 0) fprintf(stderr, "store_open: %d %s\n", rc, err);
  CHECK(rc == 0);
  CHECK(s != NULL);
  return s;
}

static const store_table *table(store_t *s, const char *name) {
  const store_table *t = store_find_table(s, name);
  CHECK(t != NULL);
  return t;
}

/* store_write with obj given as JSON text; returns the result, fills out_key/created/err. */
static int write_json(store_t *s, const char *tname, const char *key, const char *obj_text,
                      store_write_mode mode, char **out_key, bool *created, char *err,
                      size_t errlen) {
  cJSON *obj = json(obj_text);
  int rc = store_write(s, table(s, tname), key, obj, mode, out_key, created, err, errlen);
  cJSON_Delete(obj);
  return rc;
}

/* Writes and checks success; returns nothing. */
static void write_ok(store_t *s, const char *tname, const char *key, const char *obj_text,
                     store_write_mode mode) {
  char err[256] = "";
  int rc = write_json(s, tname, key, obj_text, mode, NULL, NULL, err, sizeof(err));
  if (rc != 0) fprintf(stderr, "write %s %s: %d %s\n", tname, obj_text, rc, err);
  CHECK(rc == 0);
}

static cJSON *get_ok(store_t *s, const char *tname, const char *key, int64_t *version) {
  cJSON *row = NULL;
  int64_t v = -1;
  CHECK(store_get_record(s, table(s, tname), key, &row, &v) == 0);
  CHECK(row != NULL);
  if (version) *version = v;
  return row;
}

static int64_t table_version(store_t *s, const char *tname) {
  int64_t v = -1;
  CHECK(store_table_version(s, table(s, tname), &v) == 0);
  return v;
}

/* Tests ------------------------------------------------------------------------------ */

static void test_open_and_tables(void) {
  store_t *s = open_store(db_path);
  int n = 0;
  const store_table *t = store_tables(s, &n);
  static const char *const names[] = {"Code",       "Event",   "Grid",   "Note",
                                      "Order Line", "Product", "Ranked", "it's"};
  CHECK_INT_EQ(n, 8);
  for (int i = 0; i < n; i++) CHECK_STR_EQ(t[i].name, names[i]);

  /* Not exported: composite WITHOUT ROWID, system/private names, views, a rowid clash. */
  CHECK(store_find_table(s, "Pair") == NULL);
  CHECK(store_find_table(s, "mcpsub_private") == NULL);
  CHECK(store_find_table(s, "audit_log") == NULL);
  CHECK(store_find_table(s, "audit_log_archive") == NULL);
  CHECK(store_find_table(s, "mcp_session") == NULL);
  CHECK(store_find_table(s, "ProductView") == NULL);
  CHECK(store_find_table(s, "Odd") == NULL);
  CHECK(store_find_table(s, "product") == NULL); /* exact names only */

  const store_table *p = table(s, "Product");
  CHECK_INT_EQ(p->n_cols, 6);
  CHECK_INT_EQ(p->key_col, 0);
  CHECK(!p->key_integer);
  CHECK_STR_EQ(p->cols[1].name, "name");
  CHECK(p->cols[1].notnull);
  CHECK(!p->cols[3].notnull);
  CHECK_STR_EQ(p->cols[2].decl_type, "INTEGER");
  CHECK_INT_EQ(store_column_index(p, "in_stock"), 4);
  CHECK_INT_EQ(store_column_index(p, "nope"), -1);

  const store_table *e = table(s, "Event");
  CHECK_INT_EQ(e->key_col, 0);
  CHECK(e->key_integer);
  CHECK_INT_EQ(e->n_cols, 5);
  CHECK(e->cols[4].generated);
  CHECK(!e->cols[2].generated);
  const store_table *note = table(s, "Note");
  CHECK_INT_EQ(note->key_col, -1);
  CHECK(note->key_integer);
  const store_table *grid = table(s, "Grid");
  CHECK_INT_EQ(grid->key_col, -1);
  CHECK(grid->key_integer);
  const store_table *code = table(s, "Code");
  CHECK_INT_EQ(code->key_col, 0);
  CHECK(!code->key_integer);
  const store_table *ranked = table(s, "Ranked");
  CHECK_INT_EQ(ranked->key_col, 0);
  CHECK(!ranked->key_integer); /* INTEGER PRIMARY KEY DESC does not alias the rowid */
  const store_table *ol = table(s, "Order Line");
  CHECK(ol->key_integer);
  CHECK_STR_EQ(ol->cols[1].name, "it\"em");

  int64_t count = 0;
  CHECK(store_table_count(s, p, &count) == 0);
  CHECK_INT_EQ(count, 4);

  sqlite3 *raw = raw_open(db_path);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' "
                            "AND name LIKE 'mcpsub\\_audit\\_%' ESCAPE '\\'"),
               3 * 8);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' "
                            "AND name = 'mcpsub_audit_Order Line_update'"),
               1);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'"),
               1);
  /* The schema's seed rows predate the triggers. */
  CHECK_INT_EQ(audit_count(raw), 0);

  /* Reopening neither re-applies the schema nor rewrites the triggers. */
  int64_t version = raw_int(raw, "PRAGMA schema_version");
  store_t *again = open_store(db_path);
  CHECK_INT_EQ(raw_int(raw, "PRAGMA schema_version"), version);
  CHECK(store_table_count(again, table(again, "Product"), &count) == 0);
  CHECK_INT_EQ(count, 4);
  bool changed = true;
  CHECK(store_refresh_schema(again, &changed) == 0);
  CHECK(!changed);
  store_close(again);

  sqlite3_close(raw);
  store_close(s);
  store_close(NULL);
}

static void test_open_errors(void) {
  char path[300], bad_schema[300], err[256] = "";
  store_t *s = NULL;

  snprintf(bad_schema, sizeof(bad_schema), "%s/bad.sql", tmp_dir);
  write_file(bad_schema, "CREATE TABLE Good (id INTEGER PRIMARY KEY);\nCREATE TABLE oops (;\n");
  snprintf(path, sizeof(path), "%s/bad.db", tmp_dir);
  CHECK(store_open(path, bad_schema, &s, err, sizeof(err)) < 0);
  CHECK(s == NULL);
  CHECK(strstr(err, "bad.sql") != NULL);
  CHECK(strstr(err, "syntax error") != NULL);
  /* The failed schema was rolled back as a whole: no half-created tables. */
  sqlite3 *raw = raw_open(path);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM sqlite_schema WHERE name = 'Good'"), 0);
  sqlite3_close(raw);

  snprintf(path, sizeof(path), "%s/missing.db", tmp_dir);
  snprintf(bad_schema, sizeof(bad_schema), "%s/no-such-schema.sql", tmp_dir);
  CHECK_INT_EQ(store_open(path, bad_schema, &s, err, sizeof(err)), -ENOENT);
  CHECK(s == NULL);

  /* A schema file may use legacy double-quoted strings. */
  snprintf(bad_schema, sizeof(bad_schema), "%s/legacy.sql", tmp_dir);
  write_file(bad_schema, "CREATE TABLE L (k TEXT PRIMARY KEY);\nINSERT INTO L VALUES (\"old\");\n");
  snprintf(path, sizeof(path), "%s/legacy.db", tmp_dir);
  CHECK(store_open(path, bad_schema, &s, err, sizeof(err)) == 0);
  cJSON *row = get_ok(s, "L", "old", NULL);
  cJSON_Delete(row);
  store_close(s);

  /* No schema file: only the system tables, nothing exported. */
  snprintf(path, sizeof(path), "%s/empty.db", tmp_dir);
  CHECK(store_open(path, NULL, &s, err, sizeof(err)) == 0);
  int n = -1;
  (void)store_tables(s, &n);
  CHECK_INT_EQ(n, 0);
  int64_t seq = -1;
  CHECK(store_audit_max_seq(s, &seq) == 0);
  CHECK_INT_EQ(seq, 0);
  store_close(s);
}

static void test_writes_are_audited(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  char *key = NULL;
  bool created = false;
  char err[256] = "";
  audit_row a;
  int64_t v1, v2, v3;

  /* INSERT */
  CHECK(write_json(s, "Product", NULL,
                   "{\"sku\":\"E-500\",\"name\":\"Easel\",\"price_cents\":2500}",
                   STORE_WRITE_INSERT, &key, &created, err, sizeof(err)) == 0);
  CHECK_STR_EQ(key, "E-500");
  CHECK(created);
  free(key);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "Product");
  CHECK_STR_EQ(a.key, "E-500");
  CHECK_STR_EQ(a.op, "INSERT");
  CHECK(a.old_row == NULL);
  CHECK_STR_EQ(json_str(a.new_row, "name"), "Easel");
  CHECK_INT_EQ(json_num(a.new_row, "price_cents"), 2500);
  CHECK_INT_EQ(json_num(a.new_row, "in_stock"), 1); /* the default, as stored */
  CHECK(json_is_null(a.new_row, "category"));
  CHECK_INT_EQ(cJSON_GetArraySize(a.new_row), 6);
  int64_t now = store_now_ms();
  CHECK(a.committed_at > now - 5000 && a.committed_at <= now + 5000);
  cJSON *row = get_ok(s, "Product", "E-500", &v1);
  CHECK_INT_EQ(v1, a.seq);
  CHECK_INT_EQ(table_version(s, "Product"), a.seq);
  cJSON_Delete(row);
  audit_finish(&a);

  /* PATCH */
  write_ok(s, "Product", "E-500", "{\"price_cents\":2600,\"category\":\"art\"}", STORE_WRITE_PATCH);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "UPDATE");
  CHECK_STR_EQ(a.key, "E-500");
  CHECK_INT_EQ(json_num(a.old_row, "price_cents"), 2500);
  CHECK_INT_EQ(json_num(a.new_row, "price_cents"), 2600);
  CHECK_STR_EQ(json_str(a.new_row, "category"), "art");
  row = get_ok(s, "Product", "E-500", &v2);
  CHECK(v2 > v1);
  CHECK_INT_EQ(v2, a.seq);
  CHECK_STR_EQ(json_str(row, "name"), "Easel"); /* untouched by the patch */
  cJSON_Delete(row);
  audit_finish(&a);
  /* Another record's version did not move. */
  CHECK_INT_EQ(table_version(s, "Event"), 0);

  /* REPLACE of an existing row: columns left out take their defaults. */
  write_ok(s, "Product", "E-500", "{\"in_stock\":0}", STORE_WRITE_PATCH);
  created = true;
  CHECK(write_json(s, "Product", "E-500", "{\"name\":\"Easel II\",\"sku\":\"E-500\"}",
                   STORE_WRITE_REPLACE, &key, &created, err, sizeof(err)) == 0);
  CHECK(!created);
  CHECK_STR_EQ(key, "E-500");
  free(key);
  row = get_ok(s, "Product", "E-500", &v3);
  CHECK(v3 > v2);
  CHECK_STR_EQ(json_str(row, "name"), "Easel II");
  CHECK_INT_EQ(json_num(row, "price_cents"), 0);
  CHECK_INT_EQ(json_num(row, "in_stock"), 1);
  CHECK(json_is_null(row, "category"));
  cJSON_Delete(row);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "UPDATE");
  CHECK_STR_EQ(json_str(a.old_row, "category"), "art");
  CHECK(json_is_null(a.new_row, "category"));
  audit_finish(&a);

  /* REPLACE of a new key inserts. */
  CHECK(write_json(s, "Product", "F-600", "{\"name\":\"Fan\"}", STORE_WRITE_REPLACE, NULL, &created,
                   err, sizeof(err)) == 0);
  CHECK(created);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "INSERT");
  CHECK_STR_EQ(a.key, "F-600");
  audit_finish(&a);

  /* DELETE */
  CHECK(store_delete(s, table(s, "Product"), "E-500") == 0);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "DELETE");
  CHECK_STR_EQ(a.key, "E-500");
  CHECK(a.new_row == NULL);
  CHECK_STR_EQ(json_str(a.old_row, "name"), "Easel II");
  CHECK_INT_EQ(table_version(s, "Product"), a.seq);
  audit_finish(&a);
  row = (cJSON *)1;
  int64_t v = -1;
  CHECK_INT_EQ(store_get_record(s, table(s, "Product"), "E-500", &row, &v), -ENOENT);
  CHECK(row == NULL);
  CHECK_INT_EQ(store_delete(s, table(s, "Product"), "E-500"), -ENOENT);

  /* A PATCH of nothing only checks that the row exists, and logs nothing. */
  int64_t before = audit_count(raw);
  CHECK(write_json(s, "Product", "A-100", "{}", STORE_WRITE_PATCH, NULL, NULL, err, sizeof(err)) ==
        0);
  CHECK_INT_EQ(
      write_json(s, "Product", "E-500", "{}", STORE_WRITE_PATCH, NULL, NULL, err, sizeof(err)),
      -ENOENT);
  CHECK_INT_EQ(write_json(s, "Product", "E-500", "{\"name\":\"x\"}", STORE_WRITE_PATCH, NULL, NULL,
                          err, sizeof(err)),
               -ENOENT);
  CHECK_INT_EQ(audit_count(raw), before);

  sqlite3_close(raw);
  store_close(s);
}

static void test_write_modes_and_errors(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  char *key = NULL;
  bool created = false;
  char err[256] = "";

  /* Generated integer keys, and a given one. */
  CHECK(write_json(s, "Event", NULL, "{\"note\":\"second\"}", STORE_WRITE_INSERT, &key, &created,
                   err, sizeof(err)) == 0);
  CHECK_STR_EQ(key, "2");
  CHECK(created);
  free(key);
  CHECK(write_json(s, "Event", NULL, "{\"id\":10,\"note\":\"ten\"}", STORE_WRITE_INSERT, &key, NULL,
                   err, sizeof(err)) == 0);
  CHECK_STR_EQ(key, "10");
  free(key);
  CHECK(write_json(s, "Event", NULL, "{}", STORE_WRITE_INSERT, &key, NULL, err, sizeof(err)) == 0);
  CHECK_STR_EQ(key, "11");
  free(key);

  /* A rowid table: the key is the rowid, reported as member "rowid". */
  CHECK(write_json(s, "Note", "7", "{\"body\":\"hello\"}", STORE_WRITE_REPLACE, NULL, &created, err,
                   sizeof(err)) == 0);
  CHECK(created);
  cJSON *row = get_ok(s, "Note", "7", NULL);
  CHECK_INT_EQ(json_num(row, "rowid"), 7);
  CHECK_STR_EQ(json_str(row, "tag"), "none");
  char *rk = store_row_key(table(s, "Note"), row);
  CHECK_STR_EQ(rk, "7");
  free(rk);
  cJSON_Delete(row);
  write_ok(s, "Note", "7", "{\"tag\":\"x\",\"rowid\":7}", STORE_WRITE_PATCH);
  CHECK(write_json(s, "Note", "7", "{\"body\":\"again\"}", STORE_WRITE_REPLACE, NULL, &created, err,
                   sizeof(err)) == 0);
  CHECK(!created);
  row = get_ok(s, "Note", "7", NULL);
  CHECK_STR_EQ(json_str(row, "body"), "again");
  CHECK_STR_EQ(json_str(row, "tag"), "none"); /* back to the default */
  cJSON_Delete(row);
  CHECK(write_json(s, "Note", NULL, "{\"body\":\"next\"}", STORE_WRITE_INSERT, &key, NULL, err,
                   sizeof(err)) == 0);
  CHECK_STR_EQ(key, "8");
  free(key);
  audit_row a;
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "Note");
  CHECK_STR_EQ(a.key, "8");
  audit_finish(&a);

  /* A text-keyed table needs its key on insert. */
  err[0] = '\0';
  CHECK_INT_EQ(write_json(s, "Product", NULL, "{\"name\":\"Nameless\"}", STORE_WRITE_INSERT, &key,
                          NULL, err, sizeof(err)),
               -EINVAL);
  CHECK(key == NULL);
  CHECK_STR_EQ(err, "missing key column sku");

  /* Constraints. */
  int64_t before = audit_count(raw);
  CHECK_INT_EQ(write_json(s, "Product", NULL, "{\"sku\":\"A-100\",\"name\":\"Dup\"}",
                          STORE_WRITE_INSERT, NULL, NULL, err, sizeof(err)),
               -EEXIST);
  CHECK_STR_EQ(err, "UNIQUE constraint failed: Product.sku");
  CHECK_INT_EQ(write_json(s, "Product", NULL, "{\"sku\":\"G-700\"}", STORE_WRITE_INSERT, NULL, NULL,
                          err, sizeof(err)),
               -EEXIST);
  CHECK_STR_EQ(err, "NOT NULL constraint failed: Product.name");
  /* A failed REPLACE changes nothing (name would fall back to its NULL default). */
  CHECK_INT_EQ(write_json(s, "Product", "A-100", "{\"price_cents\":1}", STORE_WRITE_REPLACE, NULL,
                          NULL, err, sizeof(err)),
               -EEXIST);
  CHECK_INT_EQ(audit_count(raw), before);
  row = get_ok(s, "Product", "A-100", NULL);
  CHECK_STR_EQ(json_str(row, "name"), "Anvil");
  CHECK_INT_EQ(json_num(row, "price_cents"), 4999);
  cJSON_Delete(row);

  /* Bad input. */
  CHECK_INT_EQ(write_json(s, "Product", "A-100", "{\"colour\":\"red\"}", STORE_WRITE_PATCH, NULL,
                          NULL, err, sizeof(err)),
               -EINVAL);
  CHECK_STR_EQ(err, "unknown column colour in table Product");
  CHECK_INT_EQ(write_json(s, "Product", "A-100", "{\"sku\":\"Z-1\",\"name\":\"x\"}",
                          STORE_WRITE_REPLACE, NULL, NULL, err, sizeof(err)),
               -EINVAL);
  CHECK_INT_EQ(
      write_json(s, "Product", "A-100", "[1,2]", STORE_WRITE_REPLACE, NULL, NULL, err, sizeof(err)),
      -EINVAL);
  CHECK_INT_EQ(write_json(s, "Product", "A-100", "{\"name\":\"a\",\"name\":\"b\"}",
                          STORE_WRITE_PATCH, NULL, NULL, err, sizeof(err)),
               -EINVAL);
  CHECK_INT_EQ(write_json(s, "Event", "abc", "{\"note\":\"x\"}", STORE_WRITE_REPLACE, NULL, NULL,
                          err, sizeof(err)),
               -EINVAL);
  CHECK_STR_EQ(err, "key must be an integer");
  CHECK_INT_EQ(write_json(s, "Event", "abc", "{\"note\":\"x\"}", STORE_WRITE_PATCH, NULL, NULL, err,
                          sizeof(err)),
               -ENOENT);
  CHECK_INT_EQ(write_json(s, "Event", NULL, "{\"id\":\"abc\"}", STORE_WRITE_INSERT, NULL, NULL, err,
                          sizeof(err)),
               -EINVAL);
  CHECK_INT_EQ(write_json(s, "Product", NULL, "{\"name\":\"x\"}", STORE_WRITE_PATCH, NULL, NULL,
                          err, sizeof(err)),
               -EINVAL);
  CHECK_INT_EQ(audit_count(raw), before);

  cJSON *r = NULL;
  int64_t v;
  CHECK_INT_EQ(store_get_record(s, table(s, "Event"), "abc", &r, &v), -ENOENT);
  CHECK_INT_EQ(store_get_record(s, table(s, "Event"), "01", &r, &v), -ENOENT); /* not canonical */
  CHECK_INT_EQ(store_get_record(s, table(s, "Event"), "1.0", &r, &v), -ENOENT);
  CHECK_INT_EQ(store_delete(s, table(s, "Event"), "x"), -ENOENT);
  row = get_ok(s, "Event", "1", NULL);
  CHECK_STR_EQ(json_str(row, "note"), "first");
  cJSON_Delete(row);

  /* Value conversions both ways. */
  write_ok(s, "Event", "2",
           "{\"qty\":1.5,\"big\":1152921504606846976,\"note\":{\"tags\":[1,\"a\"],\"ok\":true}}",
           STORE_WRITE_PATCH);
  row = get_ok(s, "Event", "2", NULL);
  CHECK(json_num(row, "qty") == 1.5);
  CHECK_STR_EQ(json_str(row, "big"), "1152921504606846976"); /* beyond 2^53: a string */
  CHECK_STR_EQ(json_str(row, "note"), "{\"tags\":[1,\"a\"],\"ok\":true}");
  CHECK_INT_EQ(json_num(row, "id"), 2);
  CHECK(json_num(row, "twice") == 3.0); /* generated columns are read... */
  cJSON_Delete(row);
  audit_get(raw, 0, &a);
  CHECK(json_num(a.new_row, "twice") == 3.0);
  audit_finish(&a);
  CHECK_INT_EQ(
      write_json(s, "Event", "2", "{\"twice\":1}", STORE_WRITE_PATCH, NULL, NULL, err, sizeof(err)),
      -EINVAL); /* ...never written */
  CHECK_STR_EQ(err, "column twice is generated");
  write_ok(s, "Event", "11", "{\"qty\":2}", STORE_WRITE_REPLACE);
  row = get_ok(s, "Event", "11", NULL);
  CHECK(json_num(row, "twice") == 4.0);
  cJSON_Delete(row);
  CHECK_INT_EQ(raw_int(raw, "SELECT typeof(big) = 'integer' AND typeof(qty) = 'real' FROM Event "
                            "WHERE id = 2"),
               1);
  write_ok(s, "Product", "B-200", "{\"in_stock\":false,\"price_cents\":900.0}", STORE_WRITE_PATCH);
  CHECK_INT_EQ(raw_int(raw, "SELECT in_stock = 0 AND typeof(price_cents) = 'integer' "
                            "AND price_cents = 900 FROM Product WHERE sku = 'B-200'"),
               1);
  raw_exec(raw, "UPDATE Product SET data = x'00FF10' WHERE sku = 'B-200'");
  row = get_ok(s, "Product", "B-200", NULL);
  CHECK_STR_EQ(json_str(row, "data"), "00FF10");
  CHECK_INT_EQ(json_num(row, "in_stock"), 0);
  cJSON_Delete(row);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(json_str(a.new_row, "data"), "00FF10");
  CHECK(json_is_null(a.old_row, "data"));
  audit_finish(&a);

  /* Tables whose names need quoting, and a text key in a WITHOUT ROWID table. */
  CHECK(write_json(s, "Order Line", NULL, "{\"it\\\"em\":\"bolt\"}", STORE_WRITE_INSERT, &key, NULL,
                   err, sizeof(err)) == 0);
  row = get_ok(s, "Order Line", key, NULL);
  CHECK_STR_EQ(json_str(row, "it\"em"), "bolt");
  cJSON_Delete(row);
  free(key);
  write_ok(s, "it's", "k'1", "{\"v\":\"it's\"}", STORE_WRITE_REPLACE);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "it's");
  CHECK_STR_EQ(a.key, "k'1");
  audit_finish(&a);
  write_ok(s, "Code", NULL, "{\"code\":\"X1\",\"label\":\"ex\"}", STORE_WRITE_INSERT);
  row = get_ok(s, "Code", "X1", NULL);
  CHECK_STR_EQ(json_str(row, "label"), "ex");
  cJSON_Delete(row);
  write_ok(s, "Ranked", "5", "{\"v\":1}", STORE_WRITE_REPLACE);
  row = get_ok(s, "Ranked", "5", NULL);
  CHECK_INT_EQ(json_num(row, "id"), 5);
  cJSON_Delete(row);

  sqlite3_close(raw);
  store_close(s);
}

static void test_external_writer(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  audit_row a;

  int64_t v0 = table_version(s, "Product");
  raw_exec(raw, "INSERT INTO Product (sku, name, price_cents) VALUES ('X-1', 'Ext', 10)");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "INSERT");
  CHECK_STR_EQ(a.key, "X-1");
  CHECK_STR_EQ(json_str(a.new_row, "name"), "Ext");
  int64_t v1 = table_version(s, "Product");
  CHECK(v1 > v0);
  CHECK_INT_EQ(v1, a.seq);
  int64_t rv;
  cJSON *row = get_ok(s, "Product", "X-1", &rv);
  CHECK_INT_EQ(rv, a.seq);
  cJSON_Delete(row);
  audit_finish(&a);

  raw_exec(raw, "UPDATE Product SET price_cents = 11 WHERE sku = 'X-1'");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "UPDATE");
  CHECK_INT_EQ(json_num(a.old_row, "price_cents"), 10);
  CHECK_INT_EQ(json_num(a.new_row, "price_cents"), 11);
  audit_finish(&a);

  /* A key change: the old key is deleted, the new one inserted. */
  raw_exec(raw, "UPDATE Product SET sku = 'X-2' WHERE sku = 'X-1'");
  audit_get(raw, 1, &a);
  CHECK_STR_EQ(a.op, "DELETE");
  CHECK_STR_EQ(a.key, "X-1");
  CHECK_STR_EQ(json_str(a.old_row, "sku"), "X-1");
  CHECK(a.new_row == NULL);
  audit_finish(&a);
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "INSERT");
  CHECK_STR_EQ(a.key, "X-2");
  CHECK(a.old_row == NULL);
  CHECK_INT_EQ(json_num(a.new_row, "price_cents"), 11);
  audit_finish(&a);

  raw_exec(raw, "DELETE FROM Product WHERE sku = 'X-2'");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.op, "DELETE");
  CHECK_STR_EQ(a.key, "X-2");
  CHECK_STR_EQ(json_str(a.old_row, "name"), "Ext");
  audit_finish(&a);

  /* Several rows in one statement: one audit row each. */
  int64_t before = audit_count(raw);
  raw_exec(raw, "UPDATE Product SET in_stock = 1 WHERE category = 'tools'");
  CHECK_INT_EQ(audit_count(raw), before + 2);

  /* Rowid keys, quoted names, a rollback leaves no audit row. */
  raw_exec(raw, "INSERT INTO Grid (rowid, x, y, label) VALUES (42, 1, 2, 'a')");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "Grid");
  CHECK_STR_EQ(a.key, "42");
  CHECK_INT_EQ(cJSON_GetArraySize(a.new_row), 3);
  audit_finish(&a);
  raw_exec(raw, "INSERT INTO \"Order Line\" (\"line id\", \"it\"\"em\") VALUES (900, 'nut')");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "Order Line");
  CHECK_STR_EQ(a.key, "900");
  CHECK_STR_EQ(json_str(a.new_row, "it\"em"), "nut");
  audit_finish(&a);
  before = audit_count(raw);
  raw_exec(raw, "BEGIN; INSERT INTO Event (note) VALUES ('gone'); ROLLBACK");
  CHECK_INT_EQ(audit_count(raw), before);

  sqlite3_close(raw);
  store_close(s);
}

static void test_query(void) {
  store_t *s = open_store(db_path);
  const store_table *p = table(s, "Product");
  cJSON *rows = NULL;
  char *next = NULL;

  /* Filter by a string: tools, in key order. */
  cJSON *tools = json("\"tools\"");
  store_filter f[2] = {{.col = store_column_index(p, "category"), .value = tools}};
  CHECK(store_query(s, p, f, 1, 100, NULL, &rows, &next) == 0);
  CHECK(next == NULL);
  CHECK_INT_EQ(cJSON_GetArraySize(rows), 2);
  CHECK_STR_EQ(json_str(cJSON_GetArrayItem(rows, 0), "sku"), "A-100");
  CHECK_STR_EQ(json_str(cJSON_GetArrayItem(rows, 1), "sku"), "C-300");
  cJSON_Delete(rows);

  /* Two filters, one a boolean. */
  cJSON *no = json("false");
  f[1] = (store_filter){.col = store_column_index(p, "in_stock"), .value = no};
  sqlite3 *raw = raw_open(db_path);
  raw_exec(raw, "UPDATE Product SET in_stock = 0 WHERE sku = 'C-300'");
  CHECK(store_query(s, p, f, 2, 100, NULL, &rows, &next) == 0);
  CHECK_INT_EQ(cJSON_GetArraySize(rows), 1);
  CHECK_STR_EQ(json_str(cJSON_GetArrayItem(rows, 0), "sku"), "C-300");
  cJSON_Delete(rows);

  /* A null filter matches NULLs. */
  cJSON *null = json("null");
  store_filter fn = {.col = store_column_index(p, "category"), .value = null};
  CHECK(store_query(s, p, &fn, 1, 100, NULL, &rows, &next) == 0);
  int n_null = cJSON_GetArraySize(rows);
  CHECK(n_null >= 1);
  for (int i = 0; i < n_null; i++) CHECK(json_is_null(cJSON_GetArrayItem(rows, i), "category"));
  CHECK_INT_EQ(n_null, raw_int(raw, "SELECT count(*) FROM Product WHERE category IS NULL"));
  cJSON_Delete(rows);

  /* Paging through every row, two at a time. */
  int64_t total = 0;
  CHECK(store_table_count(s, p, &total) == 0);
  CHECK(total >= 5);
  char *after = NULL, *prev = NULL;
  int seen = 0, pages = 0;
  do {
    CHECK(store_query(s, p, NULL, 0, 2, after, &rows, &next) == 0);
    int got = cJSON_GetArraySize(rows);
    CHECK(got >= 1 && got <= 2);
    for (int i = 0; i < got; i++) {
      const char *sku = json_str(cJSON_GetArrayItem(rows, i), "sku");
      if (prev) CHECK(strcmp(prev, sku) < 0);
      free(prev);
      prev = strdup(sku);
      seen++;
    }
    if (next)
      CHECK_STR_EQ(next, prev);
    else
      CHECK(seen == total);
    cJSON_Delete(rows);
    free(after);
    after = next;
    pages++;
  } while (after != NULL);
  CHECK_INT_EQ(seen, total);
  CHECK_INT_EQ(pages, (total + 1) / 2);
  free(prev);

  /* Integer keys compare as integers (10 after 2), the limit clamps to 1. */
  const store_table *e = table(s, "Event");
  CHECK(store_query(s, e, NULL, 0, 0, "2", &rows, &next) == 0);
  CHECK_INT_EQ(cJSON_GetArraySize(rows), 1);
  CHECK_INT_EQ(json_num(cJSON_GetArrayItem(rows, 0), "id"), 10);
  CHECK_STR_EQ(next, "10");
  cJSON_Delete(rows);
  free(next);
  CHECK_INT_EQ(store_query(s, e, NULL, 0, 10, "x", &rows, &next), -EINVAL);

  /* Rowid tables page by rowid. */
  const store_table *note = table(s, "Note");
  CHECK(store_query(s, note, NULL, 0, 1, NULL, &rows, &next) == 0);
  CHECK_STR_EQ(next, "7");
  cJSON_Delete(rows);
  CHECK(store_query(s, note, NULL, 0, 1, next, &rows, &after) == 0);
  CHECK_INT_EQ(json_num(cJSON_GetArrayItem(rows, 0), "rowid"), 8);
  CHECK(after == NULL);
  cJSON_Delete(rows);
  free(next);

  cJSON_Delete(tools);
  cJSON_Delete(no);
  cJSON_Delete(null);
  sqlite3_close(raw);
  store_close(s);
}

/* The keys (the first column) of the rows a sw filter on column col matches, comma-joined. */
static void sw_keys(store_t *s, const store_table *t, const char *col, const char *prefix,
                    char *out, size_t cap) {
  cJSON *value = cJSON_CreateString(prefix), *rows = NULL;
  char *next = NULL;
  store_filter f = {.col = store_column_index(t, col), .op = STORE_SW, .value = value};
  CHECK(store_query(s, t, &f, 1, 100, NULL, &rows, &next) == 0);
  out[0] = '\0';
  const cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "",
             json_str(row, t->cols[0].name));
  }
  cJSON_Delete(rows);
  cJSON_Delete(value);
  free(next);
}

/*
 * A prefix (sw) matches the same rows whether the store narrows it to a
 * range of the column (BINARY text: an index seeks) or not (another
 * collation, numeric affinity): byte for byte, text only.
 */
static void test_prefix_filter(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  bool changed = false;
  raw_exec(raw, "CREATE TABLE Words (w TEXT PRIMARY KEY, ci TEXT COLLATE NOCASE, n INTEGER);"
                "INSERT INTO Words VALUES ('a', 'a', NULL), ('ap', 'ap', 12), "
                "('apple', 'Apple', '12abc'), ('apricot', 'APRICOT', 120), ('aq', 'aq', 3), "
                "('A-up', 'A-up', '12'), ('b', 'b', 'x12'), ('az', 'AZ1', NULL), "
                "('a[', 'A[', NULL), ('az2', 'aZ2', NULL);"
                "CREATE INDEX words_ci ON Words (ci);");
  CHECK(store_refresh_schema(s, &changed) == 0);
  const store_table *t = table(s, "Words");
  CHECK(t->cols[store_column_index(t, "w")].binary);
  CHECK(!t->cols[store_column_index(t, "ci")].binary);
  CHECK(t->cols[store_column_index(t, "ci")].nocase);
  char got[256];
  sw_keys(s, t, "w", "ap", got, sizeof(got));
  CHECK_STR_EQ(got, "ap,apple,apricot"); /* not aq: the range ends before it */
  sw_keys(s, t, "w", "a", got, sizeof(got));
  CHECK_STR_EQ(got, "a,a[,ap,apple,apricot,aq,az,az2"); /* not A-up */
  sw_keys(s, t, "w", "zz", got, sizeof(got));
  CHECK_STR_EQ(got, "");
  /* A prefix ending in byte 0xFF has no successor: read without a range, it still matches. */
  raw_exec(raw, "INSERT INTO Words (w) VALUES (CAST(X'61FF41' AS TEXT))");
  cJSON *ff = cJSON_CreateString("a\xff");
  store_filter f_ff = {.col = store_column_index(t, "w"), .op = STORE_SW, .value = ff};
  int64_t n_ff = 0;
  CHECK(store_count_where(s, t, &f_ff, 1, &n_ff) == 0);
  CHECK_INT_EQ(n_ff, 1);
  cJSON_Delete(ff);
  /* NOCASE orders (and narrows the range: folded bounds), but the test is byte for byte. */
  sw_keys(s, t, "ci", "A", got, sizeof(got));
  CHECK_STR_EQ(got, "A-up,a[,apple,apricot,az");
  sw_keys(s, t, "ci", "AZ", got, sizeof(got)); /* bounds "az" and "a{", not "A[" */
  CHECK_STR_EQ(got, "az");
  sw_keys(s, t, "ci", "aZ", got, sizeof(got));
  CHECK_STR_EQ(got, "az2");
  sw_keys(s, t, "ci", "A[", got, sizeof(got));
  CHECK_STR_EQ(got, "a[");
  sw_keys(s, t, "n", "12", got, sizeof(got)); /* text values only, where "12" would bind as 12 */
  CHECK_STR_EQ(got, "apple");                 /* A-up's "12" was stored as 12 */
  /* Equality and order on NOCASE are byte for byte too, as the subscriptions compare. */
  struct {
    store_op op;
    const char *value;
    int64_t want;
  } exact[] = {{STORE_EQ, "apple", 0},
               {STORE_EQ, "Apple", 1},
               {STORE_NE, "Apple", 9},
               {STORE_GT, "a", 4},
               {STORE_LT, "B", 5}};
  for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
    cJSON *v = cJSON_CreateString(exact[i].value);
    store_filter f = {.col = store_column_index(t, "ci"), .op = exact[i].op, .value = v};
    int64_t n = -1;
    CHECK(store_count_where(s, t, &f, 1, &n) == 0);
    CHECK_INT_EQ(n, exact[i].want);
    cJSON_Delete(v);
  }
  cJSON *any = cJSON_Parse("[\"apricot\", \"APRICOT\", \"az1\"]");
  store_filter f_in = {.col = store_column_index(t, "ci"), .op = STORE_IN, .value = any};
  int64_t n_in = -1;
  CHECK(store_count_where(s, t, &f_in, 1, &n_in) == 0);
  CHECK_INT_EQ(n_in, 1); /* APRICOT, not AZ1 */
  cJSON_Delete(any);
  raw_exec(raw, "DROP TABLE Words");
  CHECK(store_refresh_schema(s, &changed) == 0);
  sqlite3_close(raw);
  store_close(s);
}

static void test_refresh_schema(void) {
  store_t *s = open_store(db_path);
  store_t *s2 = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  bool changed = true;
  audit_row a;

  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(!changed);

  raw_exec(raw, "CREATE TABLE Gadget (id TEXT PRIMARY KEY, size INTEGER)");
  CHECK(store_find_table(s, "Gadget") == NULL);
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(changed);
  CHECK_INT_EQ(table(s, "Gadget")->n_cols, 2);
  raw_exec(raw, "INSERT INTO Gadget VALUES ('g1', 3)");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "Gadget");
  CHECK_STR_EQ(a.key, "g1");
  CHECK_INT_EQ(json_num(a.new_row, "size"), 3);
  audit_finish(&a);

  /* Nothing changed now: no DDL from either store, so no endless reloads. */
  int64_t version = raw_int(raw, "PRAGMA schema_version");
  CHECK(store_refresh_schema(s2, &changed) == 0);
  CHECK(changed); /* s2 learns about Gadget... */
  CHECK(store_find_table(s2, "Gadget") != NULL);
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(!changed);
  CHECK(store_refresh_schema(s2, &changed) == 0);
  CHECK(!changed);
  CHECK_INT_EQ(raw_int(raw, "PRAGMA schema_version"), version); /* ...without touching the schema */

  /* A trigger dropped behind our back comes back. */
  raw_exec(raw, "DROP TRIGGER \"mcpsub_audit_Gadget_update\"");
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(!changed);
  int64_t before = audit_count(raw);
  raw_exec(raw, "UPDATE Gadget SET size = 4");
  CHECK_INT_EQ(audit_count(raw), before + 1);

  /* A new column changes the table and its triggers. */
  raw_exec(raw, "ALTER TABLE Gadget ADD COLUMN color TEXT DEFAULT 'red'");
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(changed);
  CHECK_INT_EQ(table(s, "Gadget")->n_cols, 3);
  raw_exec(raw, "INSERT INTO Gadget (id) VALUES ('g2')");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(json_str(a.new_row, "color"), "red");
  audit_finish(&a);
  cJSON *row = get_ok(s, "Gadget", "g2", NULL);
  CHECK_STR_EQ(json_str(row, "color"), "red");
  cJSON_Delete(row);

  /* A renamed column: an error until the refresh (never the old name as a string), then fine. */
  raw_exec(raw, "ALTER TABLE Gadget RENAME COLUMN size TO sz");
  int64_t v;
  row = NULL;
  CHECK_INT_EQ(store_get_record(s, table(s, "Gadget"), "g1", &row, &v), -EIO);
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(changed);
  row = get_ok(s, "Gadget", "g1", NULL);
  CHECK_INT_EQ(json_num(row, "sz"), 4);
  cJSON_Delete(row);
  raw_exec(raw, "UPDATE Gadget SET sz = 5 WHERE id = 'g1'");
  audit_get(raw, 0, &a);
  CHECK_INT_EQ(json_num(a.old_row, "sz"), 4);
  CHECK_INT_EQ(json_num(a.new_row, "sz"), 5);
  CHECK(cJSON_GetObjectItemCaseSensitive(a.new_row, "size") == NULL);
  audit_finish(&a);

  /* A table wider than one json_object() call can take. */
  char sql[4096];
  int len = snprintf(sql, sizeof(sql), "CREATE TABLE Wide (id INTEGER PRIMARY KEY");
  for (int i = 1; i <= 130; i++) len += snprintf(sql + len, sizeof(sql) - (size_t)len, ", c%d", i);
  snprintf(sql + len, sizeof(sql) - (size_t)len, ")");
  raw_exec(raw, sql);
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(changed);
  raw_exec(raw, "INSERT INTO Wide (id, c1, c50, c51, c101, c130) "
                "VALUES (1, 'first', '}{', 51, x'AB', 'last')");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(a.tbl, "Wide");
  CHECK_INT_EQ(cJSON_GetArraySize(a.new_row), 131);
  CHECK_STR_EQ(json_str(a.new_row, "c1"), "first");
  CHECK_STR_EQ(json_str(a.new_row, "c50"), "}{");
  CHECK_INT_EQ(json_num(a.new_row, "c51"), 51);
  CHECK_STR_EQ(json_str(a.new_row, "c101"), "AB");
  CHECK_STR_EQ(json_str(a.new_row, "c130"), "last");
  CHECK(json_is_null(a.new_row, "c2"));
  CHECK(json_is_null(a.new_row, "c100"));
  audit_finish(&a);
  raw_exec(raw, "UPDATE Wide SET c130 = 'changed'");
  audit_get(raw, 0, &a);
  CHECK_STR_EQ(json_str(a.old_row, "c130"), "last");
  CHECK_STR_EQ(json_str(a.new_row, "c130"), "changed");
  audit_finish(&a);

  /* Dropping a table unexports it. */
  raw_exec(raw, "DROP TABLE Wide");
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(changed);
  CHECK(store_find_table(s, "Wide") == NULL);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM sqlite_schema "
                            "WHERE name LIKE 'mcpsub_audit_Wide%'"),
               0);

  sqlite3_close(raw);
  store_close(s2);
  store_close(s);
}

/* One prune of the whole log, in one step: the rows it deleted. */
static int64_t prune_all(store_t *s, int64_t retain_rows, int64_t retain_ms, int64_t now_ms) {
  store_prune p = {.retain_rows = retain_rows, .retain_ms = retain_ms, .now_ms = now_ms};
  CHECK(store_audit_prune(s, &p) == 0);
  CHECK(!p.more);
  return p.deleted;
}

/* One step of span rows after *after: the rows it deleted; *after moves on. */
static int64_t prune_step(store_t *s, int64_t span, int64_t *after, bool more) {
  store_prune p = {
      .retain_ms = 3600 * 1000, .now_ms = store_now_ms(), .span = span, .after = *after};
  CHECK(store_audit_prune(s, &p) == 0);
  CHECK(p.more == more);
  *after = p.after;
  return p.deleted;
}

/* Retention in steps, oldest first; by age, up to the first row that is recent. */
static void test_audit_prune_steps(void) {
  char path[300];
  snprintf(path, sizeof(path), "%s/prune_steps.db", tmp_dir);
  store_t *s = open_store(path);
  sqlite3 *raw = raw_open(path);
  int64_t through = -1, after = 0;
  for (int i = 0; i < 7; i++) { /* seven rows, each inserted then changed: seven prunable rows */
    char json[96], key[16];
    snprintf(key, sizeof(key), "B%d", i);
    snprintf(json, sizeof(json), "{\"sku\":\"%s\",\"name\":\"b\"}", key);
    write_ok(s, "Product", NULL, json, STORE_WRITE_INSERT);
    write_ok(s, "Product", key, "{\"price_cents\":5}", STORE_WRITE_PATCH);
  }
  CHECK_INT_EQ(audit_count(raw), 14);
  int64_t first = raw_int(raw, "SELECT min(seq) FROM audit_log");

  /* By age, read in seq order: a recent first row holds back the old rows after it. */
  raw_exec(raw, "UPDATE audit_log SET committed_at = 1000");
  char sql[128];
  snprintf(sql, sizeof(sql), "UPDATE audit_log SET committed_at = %lld WHERE seq = %lld",
           (long long)store_now_ms(), (long long)first);
  raw_exec(raw, sql);
  CHECK_INT_EQ(prune_step(s, 3, &after, false), 0);
  CHECK_INT_EQ(after, 0);
  raw_exec(raw, "UPDATE audit_log SET committed_at = 1000");

  /* Three rows examined a step, the oldest first: insert, update, insert, ... */
  CHECK_INT_EQ(prune_step(s, 3, &after, true), 2);
  CHECK_INT_EQ(after, first + 2);
  CHECK(store_audit_pruned_through(s, &through) == 0);
  CHECK_INT_EQ(through, first + 2); /* B1's insert */
  CHECK_INT_EQ(prune_step(s, 3, &after, true), 1);
  CHECK_INT_EQ(prune_step(s, 3, &after, true), 2);
  CHECK_INT_EQ(prune_step(s, 3, &after, true), 1);
  CHECK_INT_EQ(prune_step(s, 3, &after, false), 1); /* the last two rows */
  CHECK_INT_EQ(after, first + 13);
  CHECK_INT_EQ(audit_count(raw), 7); /* each row's newest change */
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM audit_log WHERE op = 'UPDATE'"), 7);

  /* A row a newer change makes prunable after its step waits for a step from the start. */
  write_ok(s, "Product", "B0", "{\"price_cents\":6}", STORE_WRITE_PATCH);
  CHECK_INT_EQ(prune_step(s, 3, &after, false), 0);
  CHECK_INT_EQ(after, first + 13);
  after = 0;
  CHECK_INT_EQ(prune_step(s, 0, &after, false), 1);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM audit_log WHERE key = 'B0'"), 1);

  sqlite3_close(raw);
  store_close(s);
}

static void test_audit_prune(void) {
  char path[300], err[256];
  snprintf(path, sizeof(path), "%s/prune.db", tmp_dir);
  store_t *s = open_store(path);
  sqlite3 *raw = raw_open(path);
  int64_t deleted = -1, seq, v;

  write_ok(s, "Product", NULL, "{\"sku\":\"P1\",\"name\":\"one\"}", STORE_WRITE_INSERT);
  write_ok(s, "Product", "P1", "{\"price_cents\":1}", STORE_WRITE_PATCH);
  write_ok(s, "Product", "P1", "{\"price_cents\":2}", STORE_WRITE_PATCH);
  int64_t p1_last = raw_int(raw, "SELECT max(seq) FROM audit_log");
  write_ok(s, "Product", NULL, "{\"sku\":\"P2\",\"name\":\"two\"}", STORE_WRITE_INSERT);
  CHECK(store_delete(s, table(s, "Product"), "P2") == 0);
  write_ok(s, "Event", NULL, "{\"note\":\"e\"}", STORE_WRITE_INSERT);
  int64_t event_last = raw_int(raw, "SELECT max(seq) FROM audit_log");
  write_ok(s, "Product", NULL, "{\"sku\":\"P3\",\"name\":\"three\"}", STORE_WRITE_INSERT);
  write_ok(s, "Product", "P3", "{\"price_cents\":3}", STORE_WRITE_PATCH);
  int64_t last = raw_int(raw, "SELECT max(seq) FROM audit_log");
  CHECK_INT_EQ(audit_count(raw), 8);

  /* Both bounds off, or not reached: nothing goes. */
  deleted = prune_all(s, 0, 0, store_now_ms());
  CHECK_INT_EQ(deleted, 0);
  deleted = prune_all(s, 0, 3600 * 1000, store_now_ms());
  CHECK_INT_EQ(deleted, 0);
  deleted = prune_all(s, 100, 0, store_now_ms());
  CHECK_INT_EQ(deleted, 0);

  /* Keep the newest row: older ones go, except live rows' newest changes. */
  deleted = prune_all(s, 1, 0, store_now_ms());
  CHECK_INT_EQ(deleted, 5);
  CHECK_INT_EQ(audit_count(raw), 3);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM audit_log WHERE seq IN ("
                            "(SELECT max(seq) FROM audit_log WHERE key = 'P1'),"
                            "(SELECT max(seq) FROM audit_log WHERE tbl = 'Event'),"
                            "(SELECT max(seq) FROM audit_log))"),
               3);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM audit_log WHERE key = 'P2'"), 0);
  cJSON *row = get_ok(s, "Product", "P1", &v);
  CHECK_INT_EQ(v, p1_last);
  cJSON_Delete(row);
  row = get_ok(s, "Event", "2", &v);
  CHECK_INT_EQ(v, event_last);
  cJSON_Delete(row);
  CHECK_INT_EQ(table_version(s, "Product"), last);

  /* By age: a deleted row's history goes, but a table's newest row stays. */
  CHECK(store_delete(s, table(s, "Product"), "P3") == 0);
  int64_t p3_deleted = raw_int(raw, "SELECT max(seq) FROM audit_log");
  deleted = prune_all(s, 0, 1, store_now_ms() + 60000);
  CHECK_INT_EQ(deleted, 1); /* P3's update */
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM audit_log WHERE key = 'P3'"), 1);
  CHECK_INT_EQ(table_version(s, "Product"), p3_deleted);
  row = get_ok(s, "Product", "P1", &v);
  CHECK_INT_EQ(v, p1_last);
  cJSON_Delete(row);

  /* A dropped table's history is not protected. */
  raw_exec(raw, "CREATE TABLE Tmp (id INTEGER PRIMARY KEY)");
  bool changed;
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(changed);
  raw_exec(raw, "INSERT INTO Tmp VALUES (1)");
  raw_exec(raw, "DROP TABLE Tmp");
  CHECK(store_refresh_schema(s, &changed) == 0);
  deleted = prune_all(s, 0, 1, store_now_ms() + 60000);
  CHECK_INT_EQ(deleted, 1);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM audit_log WHERE tbl = 'Tmp'"), 0);

  /* The high-water mark survives pruning, and seq never goes back. */
  int64_t high = raw_int(raw, "SELECT seq FROM sqlite_sequence WHERE name = 'audit_log'");
  CHECK(store_audit_max_seq(s, &seq) == 0);
  CHECK_INT_EQ(seq, high);
  CHECK(seq > raw_int(raw, "SELECT max(seq) FROM audit_log"));
  write_ok(s, "Product", "P1", "{\"price_cents\":9}", STORE_WRITE_PATCH);
  CHECK_INT_EQ(raw_int(raw, "SELECT max(seq) FROM audit_log"), high + 1);
  (void)err;

  sqlite3_close(raw);
  store_close(s);
}

typedef struct read_log {
  int calls;
  int stop_at; /* stop after this many calls; 0 = never */
  int64_t seqs[8];
  char keys[8][16];
  char ops[8][8];
  char names[8][16]; /* new_row.name, or old_row.name for a DELETE */
} read_log;

static int record_audit(const store_audit_row *row, void *data) {
  read_log *log = data;
  int i = log->calls++;
  CHECK(i < 8);
  log->seqs[i] = row->seq;
  snprintf(log->keys[i], sizeof(log->keys[i]), "%s", row->key);
  snprintf(log->ops[i], sizeof(log->ops[i]), "%s", row->op);
  CHECK_STR_EQ(row->table, "Product");
  CHECK(row->committed_at > 0);
  const cJSON *old_row, *new_row, *again_old, *again_new;
  store_audit_row_images(row, &old_row, &new_row); /* parsed on demand, once */
  store_audit_row_images(row, &again_old, &again_new);
  CHECK(old_row == again_old && new_row == again_new);
  const cJSON *image = strcmp(row->op, "DELETE") == 0 ? old_row : new_row;
  CHECK((old_row == NULL) == (row->old_json == NULL));
  CHECK((new_row == NULL) == (row->new_json == NULL));
  snprintf(log->names[i], sizeof(log->names[i]), "%s", json_str(image, "name"));
  return log->stop_at != 0 && log->calls >= log->stop_at;
}

static void test_audit_read_and_data_version(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  int64_t start, dv0, dv1, seq;
  int n = -1;

  CHECK(store_audit_max_seq(s, &start) == 0);
  CHECK(store_data_version(s, &dv0) == 0);
  write_ok(s, "Product", NULL, "{\"sku\":\"R-1\",\"name\":\"r1\"}", STORE_WRITE_INSERT);
  CHECK(store_data_version(s, &dv1) == 0);
  CHECK_INT_EQ(dv1, dv0); /* our own commits do not move it */
  raw_exec(raw, "UPDATE Product SET name = 'r1b' WHERE sku = 'R-1'");
  raw_exec(raw, "DELETE FROM Product WHERE sku = 'R-1'");
  CHECK(store_data_version(s, &dv1) == 0);
  CHECK(dv1 != dv0); /* another connection's do */
  CHECK(store_audit_max_seq(s, &seq) == 0);
  CHECK_INT_EQ(seq, start + 3);

  read_log log = {0};
  CHECK(store_audit_read(s, start, 10, record_audit, &log, &n) == 0);
  CHECK_INT_EQ(n, 3);
  CHECK_INT_EQ(log.calls, 3);
  CHECK_INT_EQ(log.seqs[0], start + 1);
  CHECK_INT_EQ(log.seqs[2], start + 3);
  CHECK_STR_EQ(log.ops[0], "INSERT");
  CHECK_STR_EQ(log.ops[1], "UPDATE");
  CHECK_STR_EQ(log.ops[2], "DELETE");
  CHECK_STR_EQ(log.keys[1], "R-1");
  CHECK_STR_EQ(log.names[0], "r1");
  CHECK_STR_EQ(log.names[1], "r1b");
  CHECK_STR_EQ(log.names[2], "r1b");

  /* Batches: the limit, then the rest after the last seq seen. */
  memset(&log, 0, sizeof(log));
  CHECK(store_audit_read(s, start, 2, record_audit, &log, &n) == 0);
  CHECK_INT_EQ(n, 2);
  CHECK(store_audit_read(s, log.seqs[1], 2, record_audit, &log, &n) == 0);
  CHECK_INT_EQ(n, 1);
  CHECK_INT_EQ(log.seqs[2], start + 3);
  CHECK(store_audit_read(s, start + 3, 2, record_audit, &log, &n) == 0);
  CHECK_INT_EQ(n, 0);
  /* The callback stops the walk. */
  memset(&log, 0, sizeof(log));
  log.stop_at = 1;
  CHECK(store_audit_read(s, start, 10, record_audit, &log, &n) == 0);
  CHECK_INT_EQ(n, 1);
  CHECK_INT_EQ(log.calls, 1);

  sqlite3_close(raw);
  store_close(s);
}

/* What check_image_numbers expects of each Event row it is handed, by id. */
#define IMAGE_ROWS 3000
typedef struct image_numbers {
  double qty[IMAGE_ROWS];
  int64_t big[IMAGE_ROWS];
  int seen;
  bool wide; /* SQLite's long double is wider than a double: its printf is exact */
} image_numbers;

static int check_image_numbers(const store_audit_row *row, void *data) {
  image_numbers *want = data;
  const cJSON *old_row, *new_row;
  store_audit_row_images(row, &old_row, &new_row);
  CHECK(new_row != NULL);
  int id = (int)json_num(new_row, "id");
  CHECK(id >= 1000 && id < 1000 + IMAGE_ROWS);
  /* A REAL reads back as the same double; an infinity as one. */
  const cJSON *qty = cJSON_GetObjectItemCaseSensitive(new_row, "qty");
  CHECK(cJSON_IsNumber(qty));
  double q = want->qty[id - 1000];
  if (want->wide ? qty->valuedouble != q : fabs(qty->valuedouble - q) > 1e-14 * fabs(q)) {
    fprintf(stderr, "qty %.17g read back as %.17g (%s)\n", want->qty[id - 1000], qty->valuedouble,
            row->new_json);
    CHECK(false);
  }
  /* An integer beyond 2^53 is a raw item of its digits; others numbers. */
  const cJSON *big = cJSON_GetObjectItemCaseSensitive(new_row, "big");
  int64_t b = want->big[id - 1000];
  if (b >= -(INT64_C(1) << 53) && b <= (INT64_C(1) << 53)) {
    CHECK(cJSON_IsNumber(big) && big->valuedouble == (double)b);
  } else {
    char digits[24];
    snprintf(digits, sizeof(digits), "%" PRId64, b);
    CHECK(cJSON_IsRaw(big));
    CHECK_STR_EQ(big->valuestring, digits);
  }
  CHECK_STR_EQ(json_str(new_row, "note"), "n");
  want->seen++;
  return 0;
}

/*
 * Row images hold numbers exactly, so that the subscriptions compare what
 * SQL does: every REAL (random bits, and the infinities, which SQLite's
 * JSON writes as no JSON reader takes), and integers beyond 2^53.
 */
static void test_audit_image_numbers(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  static image_numbers want;
  memset(&want, 0, sizeof(want));
  /*
   * Where SQLite's long double is no wider than a double (valgrind carries
   * it out so), its printf is only close, and its text of a number near
   * the double's range may be Inf (the image then lost, as json_object()
   * loses it): the REALs are then short ones, and compared as close.
   */
  want.wide = raw_int(raw, "SELECT 9007199254740993 = 9007199254740992.0") == 0;
  int64_t start;
  CHECK(store_audit_max_seq(s, &start) == 0);
  sqlite3_stmt *ins;
  CHECK(sqlite3_prepare_v2(raw, "INSERT INTO Event (id, note, qty, big) VALUES (?1, 'n', ?2, ?3)",
                           -1, &ins, NULL) == SQLITE_OK);
  raw_exec(raw, "BEGIN");
  uint64_t x = 88172645463325252u; /* xorshift64 */
  for (int i = 0; i < IMAGE_ROWS; i++) {
    double d;
    do {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      memcpy(&d, &x, sizeof(d));
    } while (!isfinite(d));
    want.qty[i] = i == 0                     ? HUGE_VAL
                  : i == 1                   ? -HUGE_VAL
                  : i % 3 == 0 || !want.wide ? 0.1 * (i % 97)
                                             : d;
    want.big[i] = i % 4 == 0 ? (int64_t)(x >> 1) * (i % 8 == 0 ? -1 : 1) : (int64_t)(x % 1000);
    if (i == 2) want.big[i] = (INT64_C(1) << 53) + 1;
    if (i == 3) want.big[i] = INT64_MIN;
    sqlite3_bind_int(ins, 1, 1000 + i);
    sqlite3_bind_double(ins, 2, want.qty[i]);
    sqlite3_bind_int64(ins, 3, want.big[i]);
    CHECK(sqlite3_step(ins) == SQLITE_DONE);
    sqlite3_reset(ins);
  }
  raw_exec(raw, "COMMIT");
  sqlite3_finalize(ins);
  int n = -1;
  for (int64_t after = start; n != 0; after += n)
    CHECK(store_audit_read(s, after, 500, check_image_numbers, &want, &n) == 0);
  CHECK_INT_EQ(want.seen, IMAGE_ROWS);
  raw_exec(raw, "DELETE FROM Event WHERE id >= 1000");
  sqlite3_close(raw);
  store_close(s);
}

static int collect_ids(const store_session *ss, void *data) {
  char *out = data;
  CHECK(ss->subscriptions != NULL);
  strcat(out, ss->id + 32);
  strcat(out, ",");
  return 0;
}

static int stop_after_first(const store_session *ss, void *data) {
  (*(int *)data)++;
  return 1;
}

static void set_session(store_session *ss, const char *suffix, int64_t last_seen) {
  memset(ss, 0, sizeof(*ss));
  snprintf(ss->id, sizeof(ss->id), "00000000000000000000000000000000%s", suffix);
  ss->created_at = 1000;
  ss->last_seen = last_seen;
  snprintf(ss->protocol_version, sizeof(ss->protocol_version), "2025-06-18");
}

/* A principal's usage, as the --limit-* checks read it. */
static void check_usage(store_t *s, const char *principal, int64_t sessions, int64_t subs) {
  int64_t n_sessions = -1, n_subs = -1;
  CHECK(store_principal_usage(s, principal, 0, &n_sessions, &n_subs) == 0);
  CHECK_INT_EQ(n_sessions, sessions);
  CHECK_INT_EQ(n_subs, subs);
}

/*
 * Each session's subscription count follows its subscription rows through
 * every way they change, and a database made before the count gets it.
 */
static void test_subscription_count(void) {
  char path[300];
  snprintf(path, sizeof(path), "%s/count.db", tmp_dir);
  store_t *s = open_store(path);
  store_session a, b;
  set_session(&a, "1a", 1000);
  set_session(&b, "1b", 1000);
  a.principal = b.principal = "key:p";
  CHECK(store_session_insert(s, &a) == 0);
  CHECK(store_session_insert(s, &b) == 0);
  check_usage(s, "key:p", 2, 0);
  CHECK(store_session_sub_put(s, a.id, "u1", NULL, "k1") == 0);
  CHECK(store_session_sub_put(s, a.id, "u1", "{\"ms\":5}", "k1") == 0); /* the same URI again */
  CHECK(store_session_sub_put(s, a.id, "u2", NULL, "k2") == 0);
  check_usage(s, "key:p", 2, 2);
  CHECK(store_session_sub_delete(s, a.id, "u1") == 0);
  CHECK(store_session_sub_delete(s, a.id, "u1") == 0); /* not there any more */
  check_usage(s, "key:p", 2, 1);
  CHECK(store_session_set_subscriptions(s, b.id, "[\"x\",\"y\",\"x\"]") == 0);
  check_usage(s, "key:p", 2, 3);
  CHECK(store_session_set_subscriptions(s, b.id, "[\"z\"]") == 0);
  check_usage(s, "key:p", 2, 2);
  check_usage(s, "anonymous", 0, 0);
  CHECK(store_session_delete(s, b.id) == 0);
  check_usage(s, "key:p", 1, 1);

  store_close(s);

  /* A database from before the count (its session rows and subscriptions as they were). */
  snprintf(path, sizeof(path), "%s/count_old.db", tmp_dir);
  sqlite3 *raw = NULL;
  CHECK(sqlite3_open(path, &raw) == SQLITE_OK);
  raw_exec(raw, "CREATE TABLE mcp_session (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, "
                "last_seen INTEGER NOT NULL, protocol_version TEXT NOT NULL, client_info TEXT, "
                "client_capabilities TEXT, log_level TEXT, subscriptions TEXT NOT NULL DEFAULT "
                "'[]', principal TEXT NOT NULL DEFAULT 'anonymous') WITHOUT ROWID; "
                "CREATE TABLE mcpsub_subscription (session TEXT NOT NULL, uri TEXT NOT NULL, "
                "debounce TEXT, PRIMARY KEY (session, uri)) WITHOUT ROWID; "
                "INSERT INTO mcp_session (id, created_at, last_seen, protocol_version, principal) "
                "VALUES ('000000000000000000000000000000001a', 1000, 1000, '2025-06-18', 'key:p'); "
                "INSERT INTO mcpsub_subscription (session, uri) VALUES "
                "('000000000000000000000000000000001a', 'v1'), "
                "('000000000000000000000000000000001a', 'v2'), "
                "('000000000000000000000000000000001a', 'v3')");
  sqlite3_close(raw);
  s = open_store(path);
  check_usage(s, "key:p", 1, 3);
  CHECK(store_session_sub_put(s, a.id, "v4", NULL, "k4") == 0);
  check_usage(s, "key:p", 1, 4);
  store_close(s);
}

static void test_sessions(void) {
  store_t *s = open_store(db_path);
  store_session a, b, c, got;

  set_session(&a, "0a", 1000);
  a.client_info = "{\"name\":\"cli\"}";
  a.subscriptions = "[\"http://x/Product\"]";
  set_session(&b, "0b", 3000);
  set_session(&c, "0c", 2000);
  c.log_level = "info";
  CHECK(store_session_insert(s, &a) == 0);
  CHECK(store_session_insert(s, &b) == 0);
  CHECK(store_session_insert(s, &c) == 0);
  CHECK_INT_EQ(store_session_insert(s, &a), -EEXIST);

  CHECK(store_session_load(s, a.id, &got) == 0);
  CHECK_STR_EQ(got.id, a.id);
  CHECK_INT_EQ(got.created_at, 1000);
  CHECK_INT_EQ(got.last_seen, 1000);
  CHECK_STR_EQ(got.protocol_version, "2025-06-18");
  CHECK_STR_EQ(got.client_info, "{\"name\":\"cli\"}");
  CHECK(got.client_capabilities == NULL);
  CHECK(got.log_level == NULL);
  CHECK_STR_EQ(got.subscriptions, "[\"http://x/Product\"]");
  store_session_finish(&got);
  CHECK(store_session_load(s, b.id, &got) == 0);
  CHECK_STR_EQ(got.subscriptions, "[]");
  store_session_finish(&got);
  CHECK_INT_EQ(store_session_load(s, "nope", &got), -ENOENT);

  CHECK(store_session_touch(s, a.id, 4000) == 0);
  CHECK(store_session_set_log_level(s, a.id, "debug") == 0);
  CHECK(store_session_set_subscriptions(s, b.id, "[\"u1\",\"u2\"]") == 0);
  CHECK(store_session_load(s, a.id, &got) == 0);
  CHECK_INT_EQ(got.last_seen, 4000);
  CHECK_STR_EQ(got.log_level, "debug");
  store_session_finish(&got);
  CHECK(store_session_load(s, b.id, &got) == 0);
  CHECK_STR_EQ(got.subscriptions, "[\"u1\",\"u2\"]");
  store_session_finish(&got);
  CHECK_INT_EQ(store_session_touch(s, "nope", 1), -ENOENT);
  CHECK_INT_EQ(store_session_set_log_level(s, "nope", "info"), -ENOENT);
  CHECK_INT_EQ(store_session_set_subscriptions(s, "nope", "[]"), -ENOENT);

  char order[64] = "";
  CHECK(store_session_foreach(s, 0, collect_ids, order) == 0);
  CHECK_STR_EQ(order, "0a,0b,0c,");
  order[0] = '\0';
  CHECK(store_session_foreach(s, 2, collect_ids, order) == 0);
  CHECK_STR_EQ(order, "0a,0b,");
  int calls = 0;
  CHECK(store_session_foreach(s, 0, stop_after_first, &calls) == 0);
  CHECK_INT_EQ(calls, 1);

  CHECK(store_session_delete(s, c.id) == 0);
  CHECK_INT_EQ(store_session_delete(s, c.id), -ENOENT);
  int64_t deleted = -1;
  CHECK(store_session_prune(s, 3500, &deleted) == 0);
  CHECK_INT_EQ(deleted, 1);
  CHECK_INT_EQ(store_session_load(s, b.id, &got), -ENOENT);
  CHECK(store_session_load(s, a.id, &got) == 0);
  store_session_finish(&got);
  store_session_finish(NULL);
  /* The sweeps find the idle sessions by an index, not by reading every row. */
  sqlite3 *raw = raw_open(db_path);
  sqlite3_stmt *st = NULL;
  CHECK(sqlite3_prepare_v2(raw,
                           "EXPLAIN QUERY PLAN DELETE FROM mcp_session WHERE last_seen < 1 AND "
                           "(substr(id, 1, 2) = '00' OR substr(id, 1, 2) >= '02')",
                           -1, &st, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  CHECK(strstr((const char *)sqlite3_column_text(st, 3), "INDEX mcp_session_by_last_seen ("));
  sqlite3_finalize(st);
  sqlite3_close(raw);

  store_close(s);
}

/* Group commit: one transaction, a savepoint per call; a failing call fails alone. */
static void test_batch(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  char err[256] = "";
  int64_t audit_before = audit_count(raw);
  int64_t rows_before = raw_int(raw, "SELECT count(*) FROM Product");

  CHECK(store_batch_begin(s) == 0);
  CHECK(store_batch_begin(s) != 0); /* no batch inside a batch */
  write_ok(s, "Product", "G-1", "{\"name\":\"Gauge\"}", STORE_WRITE_REPLACE);
  /* The same key inserted again: refused, and only this call is undone. */
  CHECK(write_json(s, "Product", NULL, "{\"sku\":\"G-1\",\"name\":\"Again\"}", STORE_WRITE_INSERT,
                   NULL, NULL, err, sizeof(err)) == -EEXIST);
  CHECK(!store_batch_broken(s));
  write_ok(s, "Product", "G-2", "{\"name\":\"Gimlet\"}", STORE_WRITE_REPLACE);
  CHECK(store_delete(s, table(s, "Product"), "no-such") == -ENOENT);
  /* Nothing is visible to another connection before the commit. */
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product"), rows_before);
  CHECK(store_batch_end(s, true) == 0);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product"), rows_before + 2);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product WHERE name = 'Again'"), 0);
  CHECK_INT_EQ(audit_count(raw), audit_before + 2);

  /* A batch ended without commit leaves nothing. */
  CHECK(store_batch_begin(s) == 0);
  write_ok(s, "Product", "G-3", "{\"name\":\"Grater\"}", STORE_WRITE_REPLACE);
  CHECK(store_batch_end(s, false) == 0);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product WHERE sku = 'G-3'"), 0);
  CHECK_INT_EQ(audit_count(raw), audit_before + 2);

  /* Outside a batch, calls commit on their own again. */
  write_ok(s, "Product", "G-3", "{\"name\":\"Grater\"}", STORE_WRITE_REPLACE);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product WHERE sku = 'G-3'"), 1);
  sqlite3_close(raw);
  store_close(s);
}

/* store_write_as with row: the row as that write left it, read in its own transaction. */
static void test_written_row(void) {
  store_t *s = open_store(db_path);
  char err[256] = "";
  cJSON *row1 = NULL, *row2 = NULL, *row3 = NULL, *obj;
  int64_t v1 = -1, v2 = -1, v3 = -1;
  char *key = NULL;

  /* Two puts of one record in one batch: each gets its own row, not the later one. */
  CHECK(store_batch_begin(s) == 0);
  obj = json("{\"name\":\"Rasp\",\"price_cents\":3}");
  CHECK(store_write_as(s, table(s, "Product"), "W-1", obj, STORE_WRITE_REPLACE, NULL, NULL, NULL,
                       &row1, &v1, err, sizeof(err)) == 0);
  cJSON_Delete(obj);
  obj = json("{\"name\":\"Rasp II\"}");
  CHECK(store_write_as(s, table(s, "Product"), "W-1", obj, STORE_WRITE_PATCH, NULL, NULL, NULL,
                       &row2, &v2, err, sizeof(err)) == 0);
  cJSON_Delete(obj);
  CHECK(store_batch_end(s, true) == 0);
  CHECK(row1 != NULL && row2 != NULL);
  CHECK_STR_EQ(cJSON_GetObjectItem(row1, "name")->valuestring, "Rasp");
  CHECK_STR_EQ(cJSON_GetObjectItem(row2, "name")->valuestring, "Rasp II");
  CHECK(cJSON_GetObjectItem(row2, "price_cents")->valuedouble == 3); /* PATCH kept it */
  CHECK(v1 > 0 && v2 > v1);
  /* The last is what a read finds now, version included. */
  int64_t v = 0;
  cJSON *now = get_ok(s, "Product", "W-1", &v);
  CHECK(cJSON_Compare(now, row2, true));
  CHECK_INT_EQ(v, v2);
  cJSON_Delete(now);

  /* An insert with a generated key: the row carries it. */
  obj = json("{\"note\":\"tick\"}");
  CHECK(store_write_as(s, table(s, "Event"), NULL, obj, STORE_WRITE_INSERT, NULL, &key, NULL, &row3,
                       &v3, err, sizeof(err)) == 0);
  cJSON_Delete(obj);
  CHECK(key != NULL && row3 != NULL && v3 > v2);
  char id[24];
  snprintf(id, sizeof(id), "%lld", (long long)cJSON_GetObjectItem(row3, "id")->valuedouble);
  CHECK_STR_EQ(id, key);

  /* A refused write gives no row. */
  cJSON *none = NULL;
  obj = json("{\"nope\":1}");
  CHECK(store_write_as(s, table(s, "Product"), "W-2", obj, STORE_WRITE_REPLACE, NULL, NULL, NULL,
                       &none, &v, err, sizeof(err)) == -EINVAL);
  cJSON_Delete(obj);
  CHECK(none == NULL);

  free(key);
  cJSON_Delete(row1);
  cJSON_Delete(row2);
  cJSON_Delete(row3);
  store_close(s);
}

/* store_get_record_text prints what printing store_get_record's row prints, every type of value. */
static void test_record_text(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  raw_exec(raw, "INSERT INTO Product (sku, name, price_cents, category, in_stock, data) VALUES "
                "('TX-1', 'quo\"te \\ caf' || char(233) || char(1), 9007199254740993, NULL, -3, "
                "X'00FF10');"
                "INSERT INTO Event (id, note, qty, big) VALUES (77, 'n', 1.5, -12);"
                "INSERT INTO Note (rowid, body) VALUES (41, 'b');"
                "INSERT INTO \"it's\" (k, v) VALUES ('x', 0.1);");
  sqlite3_close(raw);
  const char *reads[][2] = {{"Product", "TX-1"}, {"Event", "77"}, {"Note", "41"}, {"it's", "x"}};
  for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
    int64_t v1 = -1, v2 = -1;
    cJSON *row = NULL;
    CHECK_INT_EQ(store_get_record(s, table(s, reads[i][0]), reads[i][1], &row, &v1), 0);
    buf_t want, got;
    buf_init(&want);
    buf_init(&got);
    CHECK(jsonrpc_print(&want, row) == 0);
    CHECK_INT_EQ(store_get_record_text(s, table(s, reads[i][0]), reads[i][1], &got, &v2), 0);
    CHECK(got.len == want.len && memcmp(got.data, want.data, got.len) == 0);
    if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0)
      fprintf(stderr, "want %.*s\n got %.*s\n", (int)want.len, want.data, (int)got.len, got.data);
    CHECK(v1 == v2);
    buf_finish(&want);
    buf_finish(&got);
    cJSON_Delete(row);
  }
  buf_t none;
  buf_init(&none);
  int64_t v = -1;
  CHECK_INT_EQ(store_get_record_text(s, table(s, "Product"), "no-such", &none, &v), -ENOENT);
  CHECK(none.len == 0);
  CHECK_INT_EQ(store_get_record_text(s, table(s, "Event"), "07", &none, &v), -ENOENT);
  CHECK(none.len == 0);
  store_close(s);
}

/* Exactly-once writes: a second run of the same once id finds the first and writes nothing. */
static void test_once(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  int64_t audit_before = audit_count(raw);
  store_once o = {"wtest", 7, 7};
  store_once_result prior;
  store_once_result res = {"O-1", true, 0};

  CHECK(store_once_begin(s, &o, &prior) == -EBUSY); /* only inside a batch */
  CHECK(store_batch_begin(s) == 0);
  CHECK(store_once_begin(s, &o, &prior) == 0); /* not made before: made now */
  write_ok(s, "Product", "O-1", "{\"name\":\"Once\"}", STORE_WRITE_REPLACE);
  CHECK(store_once_end(s, &o, &res, true) == 0);
  /* A write that failed records nothing, and what it did in its savepoint is undone. */
  store_once failed = {"wtest", 8, 7};
  CHECK(store_once_begin(s, &failed, &prior) == 0);
  write_ok(s, "Product", "O-2", "{\"name\":\"Undone\"}", STORE_WRITE_REPLACE);
  CHECK(store_once_end(s, &failed, NULL, false) == 0);
  CHECK(store_batch_end(s, true) == 0);
  CHECK_INT_EQ(audit_count(raw), audit_before + 1);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product WHERE sku = 'O-2'"), 0);

  /* Sent again (its answer lost): found, with its result; nothing written twice. */
  CHECK(store_batch_begin(s) == 0);
  CHECK(store_once_begin(s, &o, &prior) == 1);
  CHECK(prior.out_key != NULL && strcmp(prior.out_key, "O-1") == 0);
  CHECK(prior.created);
  free(prior.out_key);
  CHECK(store_once_begin(s, &failed, &prior) == 0); /* the failed one may go again */
  CHECK(store_once_end(s, &failed, &res, true) == 0);
  CHECK(store_batch_end(s, true) == 0);
  CHECK_INT_EQ(audit_count(raw), audit_before + 1);
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM mcpsub_once WHERE origin = 'wtest'"), 2);

  /* A later write of the origin says the earlier ones were answered: their rows go. */
  store_once later = {"wtest", 9, 9};
  CHECK(store_batch_begin(s) == 0);
  CHECK(store_once_begin(s, &later, &prior) == 0);
  CHECK(store_once_end(s, &later, &res, true) == 0);
  CHECK(store_batch_end(s, true) == 0);
  CHECK_INT_EQ(raw_int(raw, "SELECT group_concat(seq) FROM mcpsub_once WHERE origin = 'wtest'"), 9);
  sqlite3_close(raw);
  store_close(s);
}

static int64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static int write_checkpoint_rows(store_t *s, int from, int n) {
  char key[32];
  for (int i = from; i < from + n; i++) {
    snprintf(key, sizeof(key), "CK-%d", i);
    write_ok(s, "Product", key, "{\"name\":\"Checkpoint\"}", STORE_WRITE_REPLACE);
  }
  return from + n;
}

/* Checkpoints apart from commits: the log grows past SQLite's size until one is made. */
static void test_deferred_checkpoints(void) {
  store_t *s = open_store(db_path);
  sqlite3 *raw = raw_open(db_path);
  char wal[4096];
  snprintf(wal, sizeof(wal), "%s-wal", db_path);
  int64_t frame = 24 + raw_int(raw, "PRAGMA page_size");
  CHECK(store_checkpoint(s) == 0);
  CHECK(store_defer_checkpoints(s) == 0);
  CHECK(!store_checkpoint_due(s));
  int n = 0;
  while (!store_checkpoint_due(s) && n < 5000) n = write_checkpoint_rows(s, n, 1);
  CHECK(store_checkpoint_due(s));
  /* As many commits again: no commit checkpoints on its own, so the log never starts again
   * (auto-checkpoint would have at 1,000 frames, and the file would stay near that size). */
  n = write_checkpoint_rows(s, n, n);
  CHECK(store_checkpoint_due(s));
  CHECK(file_size(wal) >= 32 + 1900 * frame);
  CHECK(store_checkpoint(s) == 0);
  CHECK(!store_checkpoint_due(s));
  /* Checkpointed whole: the next commits write the log from its start, the file does not grow. */
  int64_t size = file_size(wal);
  n = write_checkpoint_rows(s, n, 10);
  CHECK_INT_EQ(file_size(wal), size);
  CHECK(!store_checkpoint_due(s));
  CHECK_INT_EQ(raw_int(raw, "SELECT count(*) FROM Product WHERE name = 'Checkpoint'"), n);
  sqlite3_close(raw);
  store_close(s);
}

/*
 * A read batch may be kept (store_batch_current) only while nothing has been
 * committed since it began, by this process's connections or any other,
 * and while the log is under the checkpoint's size.
 */
static void test_read_batch_current(void) {
  store_t *s = open_store(db_path), *r = NULL;
  sqlite3 *raw = raw_open(db_path);
  char err[256] = "";
  cJSON *row = NULL;
  int64_t v = 0;
  CHECK(store_checkpoint(s) == 0);
  CHECK(store_defer_checkpoints(s) == 0);
  write_ok(s, "Product", "RB-1", "{\"name\":\"Before\"}", STORE_WRITE_REPLACE);
  CHECK(store_open_readonly(db_path, &r, err, sizeof(err)) == 0);
  CHECK(!store_batch_current(r)); /* no batch */

  CHECK(store_batch_begin_read(r) == 0);
  CHECK(store_batch_current(r));
  CHECK(store_get_record(r, table(r, "Product"), "RB-1", &row, &v) == 0);
  cJSON_Delete(row);
  CHECK(store_batch_current(r)); /* reads change nothing */
  /* Another connection of this process commits: the batch's snapshot is no longer the newest. */
  write_ok(s, "Product", "RB-1", "{\"name\":\"After\"}", STORE_WRITE_REPLACE);
  CHECK(!store_batch_current(r));
  CHECK(store_get_record(r, table(r, "Product"), "RB-1", &row, &v) == 0);
  CHECK_STR_EQ(json_str(row, "name"), "Before"); /* what keeping it would have served */
  cJSON_Delete(row);
  CHECK(store_batch_end(r, true) == 0);

  /* So does a commit of any other connection that writes the file. */
  CHECK(store_batch_begin_read(r) == 0);
  CHECK(store_get_record(r, table(r, "Product"), "RB-1", &row, &v) == 0);
  CHECK_STR_EQ(json_str(row, "name"), "After");
  cJSON_Delete(row);
  CHECK(store_batch_current(r));
  raw_exec(raw, "UPDATE Product SET name = 'Raw' WHERE sku = 'RB-1'");
  CHECK(!store_batch_current(r));
  CHECK(store_batch_end(r, true) == 0);

  /* A log at the checkpoint's size is let go: a reader's mark keeps it from starting over. */
  int n = 0;
  while (!store_checkpoint_due(s) && n < 5000) n = write_checkpoint_rows(s, n, 1);
  CHECK(store_batch_begin_read(r) == 0);
  CHECK(!store_batch_current(r));
  CHECK(store_batch_end(r, true) == 0);
  CHECK(store_checkpoint(s) == 0);
  write_ok(s, "Product", "RB-2", "{\"name\":\"Restarted\"}", STORE_WRITE_REPLACE);
  CHECK(store_batch_begin_read(r) == 0);
  CHECK(store_batch_current(r)); /* the log started over */
  CHECK(store_batch_end(r, true) == 0);

  /* A write batch is never kept. */
  CHECK(store_batch_begin(s) == 0);
  CHECK(!store_batch_current(s));
  CHECK(store_batch_end(s, true) == 0);
  store_close(r);
  sqlite3_close(raw);
  store_close(s);
}

static void test_readonly(void) {
  store_t *s = NULL;
  char err[256] = "";
  CHECK(store_open_readonly(db_path, &s, err, sizeof(err)) == 0);
  int n = 0;
  (void)store_tables(s, &n);
  CHECK(n >= 8);
  int64_t v = -1;
  cJSON *row = NULL;
  CHECK(store_get_record(s, table(s, "Product"), "A-100", &row, &v) == 0);
  CHECK_STR_EQ(json_str(row, "name"), "Anvil");
  cJSON_Delete(row);
  CHECK(store_table_version(s, table(s, "Product"), &v) == 0);
  CHECK(v > 0);
  cJSON *obj = json("{\"name\":\"no\"}");
  CHECK(store_write(s, table(s, "Product"), "A-100", obj, STORE_WRITE_PATCH, NULL, NULL, err,
                    sizeof(err)) < 0);
  cJSON_Delete(obj);
  bool changed = true;
  CHECK(store_refresh_schema(s, &changed) == 0);
  CHECK(!changed);
  store_close(s);

  char path[300];
  snprintf(path, sizeof(path), "%s/absent.db", tmp_dir);
  CHECK(store_open_readonly(path, &s, err, sizeof(err)) < 0);
  CHECK(s == NULL);
}

/* The shipped example schema, when the source tree is known. */
static void test_example_schema(void) {
  const char *root = getenv("MCPSUB_SOURCE_ROOT");
  if (root == NULL || root[0] == '\0') return;
  char example[512], path[300], err[256] = "";
  store_t *s = NULL;
  snprintf(example, sizeof(example), "%s/schema/example.sql", root);
  snprintf(path, sizeof(path), "%s/example.db", tmp_dir);
  CHECK(store_open(path, example, &s, err, sizeof(err)) == 0);
  CHECK(table(s, "Product")->key_col == 0);
  CHECK(table(s, "StockEvent")->key_integer);
  int64_t count = 0;
  CHECK(store_table_count(s, table(s, "Product"), &count) == 0);
  CHECK_INT_EQ(count, 4);
  store_close(s);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  return remove(path);
}

int main(void) {
  CHECK(mkdtemp(tmp_dir) != NULL);
  snprintf(db_path, sizeof(db_path), "%s/data/mcpsub.db", tmp_dir); /* data/ does not exist yet */
  snprintf(schema_path, sizeof(schema_path), "%s/schema.sql", tmp_dir);
  write_file(schema_path, test_schema);

  RUN(test_open_and_tables);
  RUN(test_open_errors);
  RUN(test_writes_are_audited);
  RUN(test_write_modes_and_errors);
  RUN(test_external_writer);
  RUN(test_audit_read_and_data_version);
  RUN(test_audit_image_numbers);
  RUN(test_query);
  RUN(test_prefix_filter);
  RUN(test_refresh_schema);
  RUN(test_audit_prune);
  RUN(test_audit_prune_steps);
  RUN(test_sessions);
  RUN(test_subscription_count);
  RUN(test_batch);
  RUN(test_written_row);
  RUN(test_record_text);
  RUN(test_once);
  RUN(test_deferred_checkpoints);
  RUN(test_read_batch_current);
  RUN(test_readonly);
  RUN(test_example_schema);

  CHECK(nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
  return 0;
}
