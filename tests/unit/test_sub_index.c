/*
 * Unit tests of the subscription index: adding and removing
 * subscriptions, topics shared by every subscription to the same URI text
 * (two owners, one topic; the topic and its table entry freed with the
 * last subscription), what a change matches (record topics by key and by
 * the key before a rename, collection topics, filtered topics on the old
 * or the new row, so a row leaving the filter matches too), the filter
 * value comparison (text against numbers: "5" matches 5 and 5.0), tables
 * nobody watches, moving a subscriber to either end of its topic's list,
 * and sub_topic_matches agreeing with sub_index_match,
 * also for random topics and rows through the equality and prefix index.
 * ASan checks that removal and sub_index_finish free everything.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/uri.h"
#include "worker/sub_index.h"

#define BASE "http://127.0.0.1:9926"

static sub_owner session_a = {SUB_OWNER_SESSION};
static sub_owner session_b = {SUB_OWNER_SESSION};
static sub_owner waiter = {SUB_OWNER_WAITER};

/*
 * Marks the filters on the test tables' columns as subs_resolve_in does from
 * the store: T.w and Product.b untyped, and the numeric ones (Product.a
 * among them: the range index files only filters on numeric columns).
 */
static void resolve_columns(uri_t *u) {
  static const char *const numeric[] = {"a", "v", "delta", "in_stock", "price_cents", "qty"};
  for (size_t i = 0; i < u->n_filters; i++) {
    uri_filter *f = &u->filters[i];
    f->untyped = strcmp(f->column, "w") == 0 || strcmp(f->column, "b") == 0;
    for (size_t j = 0; j < sizeof(numeric) / sizeof(numeric[0]); j++)
      f->numeric = f->numeric || strcmp(f->column, numeric[j]) == 0;
  }
}

static sub_t *add(sub_index *idx, const char *uri, sub_owner *owner) {
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, uri, &u), 0);
  resolve_columns(&u);
  sub_t *s = sub_index_add(idx, uri, uri, &u, owner, 0);
  uri_finish(&u); /* the index keeps its own copy */
  CHECK(s != NULL);
  CHECK(s->owner == owner);
  CHECK_STR_EQ(s->topic->uri, uri);
  return s;
}

/* The topics a change matched, in call order. */
typedef struct matches {
  sub_topic *topics[32];
  int n;
} matches;

static void collect(sub_topic *t, void *data) {
  matches *m = data;
  CHECK(m->n < 32);
  m->topics[m->n++] = t;
}

static int count_topic(const matches *m, const sub_topic *t) {
  int n = 0;
  for (int i = 0; i < m->n; i++) n += m->topics[i] == t;
  return n;
}

static cJSON *row(const char *json) {
  cJSON *r = cJSON_Parse(json);
  CHECK(r != NULL);
  return r;
}

/* Matches a change on table/key with optional old and new rows (JSON text or NULL). */
static matches match(sub_index *idx, const char *table, const char *key, const char *old_key,
                     const char *old_json, const char *new_json) {
  cJSON *old_row = old_json != NULL ? row(old_json) : NULL;
  cJSON *new_row = new_json != NULL ? row(new_json) : NULL;
  sub_change c = {100, table, key, old_key, old_row, new_row};
  matches m = {0};
  sub_index_match(idx, &c, collect, &m);
  /* Every matched topic passes sub_topic_matches with the same change; in (order, uri) order. */
  for (int i = 0; i < m.n; i++) CHECK(sub_topic_matches(m.topics[i], &c));
  for (int i = 1; i < m.n; i++) CHECK(sub_topic_compare(&m.topics[i - 1], &m.topics[i]) <= 0);
  cJSON_Delete(old_row);
  cJSON_Delete(new_row);
  return m;
}

/* sub_topic_matches alone, for a topic and a change. */
static bool topic_matches(const sub_topic *t, const char *table, const char *key,
                          const char *old_key, const char *old_json, const char *new_json) {
  cJSON *old_row = old_json != NULL ? row(old_json) : NULL;
  cJSON *new_row = new_json != NULL ? row(new_json) : NULL;
  sub_change c = {100, table, key, old_key, old_row, new_row};
  bool r = sub_topic_matches(t, &c);
  cJSON_Delete(old_row);
  cJSON_Delete(new_row);
  return r;
}

static void test_add_remove(void) {
  sub_index idx;
  sub_index_init(&idx);
  CHECK_INT_EQ(idx.n_subs, 0);
  CHECK(!sub_index_watches(&idx, "Product"));
  CHECK(sub_index_find(&idx, BASE "/Product/A-100") == NULL);

  sub_t *rec = add(&idx, BASE "/Product/A-100", &session_a);
  sub_t *coll = add(&idx, BASE "/Product", &session_a);
  sub_t *filt = add(&idx, BASE "/Product?category=tools", &session_a);
  CHECK_INT_EQ(idx.n_subs, 3);
  CHECK_INT_EQ(idx.topics.count, 3);
  CHECK(sub_index_watches(&idx, "Product"));
  CHECK(!sub_index_watches(&idx, "StockEvent"));
  CHECK(sub_index_find(&idx, BASE "/Product/A-100") == rec->topic);
  CHECK(sub_index_find(&idx, BASE "/Product") == coll->topic);
  CHECK(sub_index_find(&idx, BASE "/Product?category=tools") == filt->topic);
  CHECK_INT_EQ(rec->topic->parsed.kind, URI_RECORD);
  CHECK_STR_EQ(rec->topic->parsed.key, "A-100");
  CHECK_INT_EQ(filt->topic->parsed.kind, URI_FILTERED);
  /* Distinct topics have distinct ids (they name topics in event ids). */
  CHECK(rec->topic->id != coll->topic->id);
  CHECK(rec->topic->id != filt->topic->id);
  CHECK(coll->topic->id != filt->topic->id);
  uint32_t coll_id = coll->topic->id;

  sub_index_remove(&idx, coll);
  CHECK_INT_EQ(idx.n_subs, 2);
  CHECK(sub_index_find(&idx, BASE "/Product") == NULL);
  CHECK(sub_index_watches(&idx, "Product"));
  sub_index_remove(&idx, filt);
  CHECK(!sub_index_needs_rows(&idx, "Product"));
  sub_index_remove(&idx, rec);
  CHECK_INT_EQ(idx.n_subs, 0);
  CHECK_INT_EQ(idx.topics.count, 0);
  CHECK_INT_EQ(idx.tables.count, 0);
  CHECK_INT_EQ(idx.records.count, 0);
  CHECK(!sub_index_watches(&idx, "Product"));

  /* A URI subscribed again gets a new topic with a new id. */
  sub_t *again = add(&idx, BASE "/Product", &session_a);
  CHECK(again->topic->id != coll_id);
  sub_index_remove(&idx, again);
  sub_index_finish(&idx);
}

static void test_topic_sharing(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *a = add(&idx, BASE "/Product/A-100", &session_a);
  sub_t *b = add(&idx, BASE "/Product/A-100", &session_b);
  sub_t *w = add(&idx, BASE "/Product/A-100", &waiter);
  CHECK(a->topic == b->topic);
  CHECK(a->topic == w->topic);
  sub_topic *t = a->topic;
  CHECK_INT_EQ(t->n_subs, 3);
  CHECK_INT_EQ(t->n_session_subs, 2);
  CHECK_INT_EQ(idx.n_subs, 3);
  CHECK_INT_EQ(idx.topics.count, 1);
  CHECK_INT_EQ(idx.records.count, 1);

  /* A change reaches the topic once, whatever the number of subscribers. */
  matches m = match(&idx, "Product", "A-100", NULL, NULL, "{\"sku\":\"A-100\"}");
  CHECK_INT_EQ(m.n, 1);
  CHECK(m.topics[0] == t);
  /* Each subscriber is on the topic's list exactly once. */
  int seen_a = 0, seen_b = 0, seen_w = 0;
  for (sub_t *s = t->subs; s != NULL; s = s->topic_next) {
    seen_a += s == a;
    seen_b += s == b;
    seen_w += s == w;
    CHECK(s->topic == t);
    if (s->topic_next != NULL) CHECK(s->topic_next->topic_prev == s);
  }
  CHECK(seen_a == 1 && seen_b == 1 && seen_w == 1);

  /* Removing from the middle of the list keeps the topic. */
  sub_index_remove(&idx, b);
  CHECK(sub_index_find(&idx, BASE "/Product/A-100") == t);
  CHECK_INT_EQ(t->n_subs, 2);
  CHECK_INT_EQ(t->n_session_subs, 1);
  sub_index_remove(&idx, w);
  CHECK(sub_index_find(&idx, BASE "/Product/A-100") == t);
  CHECK_INT_EQ(t->n_subs, 1);
  CHECK_INT_EQ(t->n_session_subs, 1);
  CHECK(t->subs == a && a->topic_prev == NULL && a->topic_next == NULL);
  /* The last one out frees the topic, its record bucket and its table entry. */
  sub_index_remove(&idx, a);
  CHECK(sub_index_find(&idx, BASE "/Product/A-100") == NULL);
  CHECK_INT_EQ(idx.topics.count, 0);
  CHECK_INT_EQ(idx.records.count, 0);
  CHECK(!sub_index_watches(&idx, "Product"));
  m = match(&idx, "Product", "A-100", NULL, NULL, "{\"sku\":\"A-100\"}");
  CHECK_INT_EQ(m.n, 0);

  /* Different texts for the same resource are different topics (exact URI text). */
  sub_t *x = add(&idx, BASE "/Product?category=tools&in_stock=1", &session_a);
  sub_t *y = add(&idx, BASE "/Product?in_stock=1&category=tools", &session_a);
  CHECK(x->topic != y->topic);
  m = match(&idx, "Product", "A-100", NULL, NULL, "{\"category\":\"tools\",\"in_stock\":1}");
  CHECK_INT_EQ(m.n, 2);
  sub_index_remove(&idx, y);
  sub_index_remove(&idx, x);
  sub_index_finish(&idx);
}

/* Two record topics for the same key (different texts) share a bucket. */
static void test_record_bucket(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *a = add(&idx, BASE "/Product/A-100", &session_a);
  sub_t *b = add(&idx, BASE "/Product/A%2D100", &session_a); /* same key, other text */
  sub_t *c = add(&idx, BASE "/Product/B-200", &session_a);
  CHECK(a->topic != b->topic);
  CHECK_INT_EQ(idx.records.count, 2);
  matches m = match(&idx, "Product", "A-100", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 2);
  CHECK_INT_EQ(count_topic(&m, a->topic), 1);
  CHECK_INT_EQ(count_topic(&m, b->topic), 1);
  sub_index_remove(&idx, a); /* the head of the bucket */
  m = match(&idx, "Product", "A-100", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 1);
  CHECK(m.topics[0] == b->topic);
  sub_index_remove(&idx, b);
  CHECK_INT_EQ(idx.records.count, 1);
  m = match(&idx, "Product", "A-100", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 0);
  sub_index_remove(&idx, c);
  sub_index_finish(&idx);
}

static void test_match_kinds(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *rec = add(&idx, BASE "/Product/A-100", &session_a);
  sub_t *coll = add(&idx, BASE "/Product", &session_a);
  sub_t *tools = add(&idx, BASE "/Product?category=tools", &session_a);
  sub_t *garden = add(&idx, BASE "/Product?category=garden", &session_a);
  sub_t *stock = add(&idx, BASE "/StockEvent", &session_b);
  static const char *const anvil =
      "{\"sku\":\"A-100\",\"category\":\"tools\",\"price_cents\":4999}";
  static const char *const anvil_garden =
      "{\"sku\":\"A-100\",\"category\":\"garden\",\"price_cents\":4999}";
  static const char *const dust = "{\"sku\":\"D-400\",\"category\":\"home\"}";

  /* UPDATE of A-100 inside the tools filter: record, collection, tools. */
  matches m = match(&idx, "Product", "A-100", NULL, anvil, anvil);
  CHECK_INT_EQ(m.n, 3);
  CHECK_INT_EQ(count_topic(&m, rec->topic), 1);
  CHECK_INT_EQ(count_topic(&m, coll->topic), 1);
  CHECK_INT_EQ(count_topic(&m, tools->topic), 1);

  /* INSERT (no old row) of a tools row with another key. */
  m = match(&idx, "Product", "E-500", NULL, NULL, "{\"sku\":\"E-500\",\"category\":\"tools\"}");
  CHECK_INT_EQ(m.n, 2);
  CHECK_INT_EQ(count_topic(&m, coll->topic), 1);
  CHECK_INT_EQ(count_topic(&m, tools->topic), 1);

  /* DELETE (no new row) of a tools row: the old row matches. */
  m = match(&idx, "Product", "C-300", NULL, "{\"sku\":\"C-300\",\"category\":\"tools\"}", NULL);
  CHECK_INT_EQ(m.n, 2);
  CHECK_INT_EQ(count_topic(&m, tools->topic), 1);

  /* A row leaving the filter (tools -> garden) matches tools (old) and garden (new). */
  m = match(&idx, "Product", "A-100", NULL, anvil, anvil_garden);
  CHECK_INT_EQ(m.n, 4);
  CHECK_INT_EQ(count_topic(&m, tools->topic), 1);
  CHECK_INT_EQ(count_topic(&m, garden->topic), 1);
  /* ... and one entering it (garden -> tools). */
  m = match(&idx, "Product", "A-100", NULL, anvil_garden, anvil);
  CHECK_INT_EQ(count_topic(&m, tools->topic), 1);
  CHECK_INT_EQ(count_topic(&m, garden->topic), 1);

  /* A row matching neither before nor after: collection only. */
  m = match(&idx, "Product", "D-400", NULL, dust, dust);
  CHECK_INT_EQ(m.n, 1);
  CHECK(m.topics[0] == coll->topic);
  /* Without rows, no filtered topic can match. */
  m = match(&idx, "Product", "D-400", NULL, NULL, NULL);
  CHECK_INT_EQ(m.n, 1);
  CHECK(m.topics[0] == coll->topic);

  /* A key change: the record topic of the old key matches too. */
  m = match(&idx, "Product", "Z-999", "A-100", anvil, "{\"sku\":\"Z-999\",\"category\":\"home\"}");
  CHECK_INT_EQ(count_topic(&m, rec->topic), 1);
  CHECK_INT_EQ(count_topic(&m, coll->topic), 1);
  CHECK_INT_EQ(count_topic(&m, tools->topic), 1);
  CHECK(topic_matches(rec->topic, "Product", "Z-999", "A-100", NULL, NULL));
  CHECK(!topic_matches(rec->topic, "Product", "Z-999", "B-200", NULL, NULL));
  /* old_key equal to key is not matched twice. */
  m = match(&idx, "Product", "A-100", "A-100", anvil, anvil);
  CHECK_INT_EQ(count_topic(&m, rec->topic), 1);

  /* Another table's topics are independent. */
  m = match(&idx, "StockEvent", "7", NULL, NULL, "{\"id\":7,\"sku\":\"A-100\"}");
  CHECK_INT_EQ(m.n, 1);
  CHECK(m.topics[0] == stock->topic);
  CHECK(!topic_matches(coll->topic, "StockEvent", "7", NULL, NULL, NULL));
  CHECK(!topic_matches(rec->topic, "StockEvent", "A-100", NULL, NULL, NULL));
  CHECK(topic_matches(stock->topic, "StockEvent", "8", NULL, NULL, NULL));

  /* needs_rows: only tables with filtered topics. */
  CHECK(sub_index_needs_rows(&idx, "Product"));
  CHECK(!sub_index_needs_rows(&idx, "StockEvent"));
  CHECK(!sub_index_needs_rows(&idx, "Nope"));

  sub_index_remove(&idx, rec);
  sub_index_remove(&idx, coll);
  sub_index_remove(&idx, tools);
  sub_index_remove(&idx, garden);
  sub_index_remove(&idx, stock);
  sub_index_finish(&idx);
}

static void test_multiple_filters(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *f = add(&idx, BASE "/Product?category=tools&in_stock=1", &session_a);
  CHECK_INT_EQ(f->topic->parsed.n_filters, 2);
  matches m =
      match(&idx, "Product", "A-100", NULL, NULL, "{\"category\":\"tools\",\"in_stock\":1}");
  CHECK_INT_EQ(m.n, 1);
  m = match(&idx, "Product", "C-300", NULL, NULL, "{\"category\":\"tools\",\"in_stock\":0}");
  CHECK_INT_EQ(m.n, 0);
  m = match(&idx, "Product", "C-300", NULL, "{\"category\":\"tools\",\"in_stock\":0}",
            "{\"category\":\"tools\",\"in_stock\":1}");
  CHECK_INT_EQ(m.n, 1);
  /* A column missing from the row does not match. */
  m = match(&idx, "Product", "C-300", NULL, NULL, "{\"category\":\"tools\"}");
  CHECK_INT_EQ(m.n, 0);
  sub_index_remove(&idx, f);
  sub_index_finish(&idx);
}

/* sub_filters_match on one filter col=text against a row {"col": <json>}: w is untyped. */
static bool column_filter_holds(const char *col, const char *text, const char *json_value) {
  char uri[256], json[256];
  snprintf(uri, sizeof(uri), BASE "/T?%s=%s", col, text);
  snprintf(json, sizeof(json), "{\"%s\":%s}", col, json_value);
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, uri, &u), 0);
  resolve_columns(&u);
  cJSON *r = row(json);
  bool ok = sub_filters_match(&u, r);
  cJSON_Delete(r);
  uri_finish(&u);
  return ok;
}

static bool filter_holds(const char *text, const char *json_value) {
  return column_filter_holds("v", text, json_value);
}

static void test_filter_values(void) {
  /* Numbers compare numerically with numeric text. */
  CHECK(filter_holds("5", "5"));
  CHECK(filter_holds("5.0", "5"));
  CHECK(filter_holds("5", "5.0"));
  CHECK(filter_holds("-3", "-3"));
  CHECK(filter_holds("0.5", "0.5"));
  CHECK(filter_holds("1e2", "100"));
  CHECK(!filter_holds("6", "5"));
  CHECK(!filter_holds("5x", "5"));
  CHECK(!filter_holds("abc", "5"));
  CHECK(!filter_holds("", "0"));
  /* Strings compare as text, exactly. */
  CHECK(filter_holds("5", "\"5\""));
  CHECK(!filter_holds("5.0", "\"5\""));
  CHECK(filter_holds("tools", "\"tools\""));
  CHECK(!filter_holds("Tools", "\"tools\""));
  CHECK(!filter_holds("tool", "\"tools\""));
  CHECK(filter_holds("a%20b", "\"a b\"")); /* the filter value is decoded */
  /* Booleans as 1/0; NULL equals nothing. */
  CHECK(filter_holds("1", "true"));
  CHECK(filter_holds("0", "false"));
  CHECK(!filter_holds("true", "true"));
  CHECK(!filter_holds("null", "null"));
  CHECK(!filter_holds("", "null"));
  CHECK(!filter_holds("0", "null"));
  /*
   * A column without a type converts nothing: a number there equals no
   * text (SQL's 5 = '5' is false), whatever the text reads as.
   */
  CHECK(!column_filter_holds("w", "5", "5"));
  CHECK(column_filter_holds("w", "5", "\"5\""));
  CHECK(column_filter_holds("w", "ne=5", "5"));
  CHECK(!column_filter_holds("w", "5|6", "5"));
  CHECK(column_filter_holds("w", "5|6", "\"6\""));
  CHECK(column_filter_holds("v", "5|6", "5"));

  /* Not an object: nothing matches. */
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?v=1", &u), 0);
  CHECK(!sub_filters_match(&u, NULL));
  cJSON *arr = row("[1]");
  CHECK(!sub_filters_match(&u, arr));
  cJSON_Delete(arr);
  uri_finish(&u);

  /* Through the index: a numeric filter subscribed as text matches a number column. */
  sub_index idx;
  sub_index_init(&idx);
  sub_t *f = add(&idx, BASE "/StockEvent?delta=5", &session_a);
  matches m = match(&idx, "StockEvent", "3", NULL, NULL, "{\"id\":3,\"delta\":5}");
  CHECK_INT_EQ(m.n, 1);
  m = match(&idx, "StockEvent", "4", NULL, NULL, "{\"id\":4,\"delta\":6}");
  CHECK_INT_EQ(m.n, 0);
  m = match(&idx, "StockEvent", "3", NULL, "{\"id\":3,\"delta\":5}", "{\"id\":3,\"delta\":6}");
  CHECK_INT_EQ(m.n, 1); /* leaving */
  sub_index_remove(&idx, f);
  sub_index_finish(&idx);
}

/*
 * PostgreSQL's non-finite values, as a change's images hold them
 * (store_audit_row_images makes its "NaN" and "Infinity" numbers): an
 * infinity by value, NaN above every number, through the range index and
 * the topics tested at every change alike.
 */
static void test_nonfinite(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *gt = add(&idx, BASE "/T?v=gt=5", &session_a);
  sub_t *le = add(&idx, BASE "/T?v=le=1e999", &session_a);
  sub_t *lt = add(&idx, BASE "/T?v=lt=0", &session_a);
  sub_t *eq = add(&idx, BASE "/T?v=1e999", &session_a);
  sub_t *ne = add(&idx, BASE "/T?v=ne=5", &session_a);
  sub_t *const subs[] = {gt, le, lt, eq, ne};
  const double values[] = {NAN, INFINITY, -INFINITY};
  /* What each value matches, in the order of subs. */
  const bool want[][5] = {{true, false, false, false, true},
                          {true, true, false, true, true},
                          {false, true, true, false, true}};
  for (size_t i = 0; i < ARRAY_LEN(values); i++) {
    cJSON *r = cJSON_CreateObject();
    CHECK(cJSON_AddNumberToObject(r, "v", values[i]) != NULL);
    sub_change c = {100, "T", "1", NULL, NULL, r};
    matches m = {0};
    sub_index_match(&idx, &c, collect, &m);
    int n = 0;
    for (size_t j = 0; j < ARRAY_LEN(subs); j++) {
      CHECK_INT_EQ(count_topic(&m, subs[j]->topic), want[i][j]);
      CHECK(sub_topic_matches(subs[j]->topic, &c) == want[i][j]);
      n += want[i][j];
    }
    CHECK_INT_EQ(m.n, n);
    cJSON_Delete(r);
  }
  sub_index_finish(&idx);
}

static void test_unwatched(void) {
  sub_index idx;
  sub_index_init(&idx);
  matches m = match(&idx, "Product", "A-100", NULL, "{}", "{}");
  CHECK_INT_EQ(m.n, 0);
  sub_t *s = add(&idx, BASE "/Product/A-100", &session_a);
  CHECK(!sub_index_watches(&idx, "StockEvent"));
  CHECK(!sub_index_watches(&idx, "product")); /* names are exact */
  m = match(&idx, "StockEvent", "A-100", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 0);
  m = match(&idx, "product", "A-100", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 0);
  /* A watched table, but another key and no collection topic. */
  m = match(&idx, "Product", "B-200", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 0);
  m = match(&idx, "Product", "A-1000", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 0);
  sub_index_remove(&idx, s);
  sub_index_finish(&idx);
}

/* since_seq is stored for the engine's omitCurrent check. */
static void test_since_seq(void) {
  sub_index idx;
  sub_index_init(&idx);
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Product", &u), 0);
  sub_t *s = sub_index_add(&idx, BASE "/Product", BASE "/Product", &u, &session_a, 41);
  uri_finish(&u);
  CHECK_INT_EQ(s->since_seq, 41);
  sub_index_remove(&idx, s);
  sub_index_finish(&idx);
}

/* Finishing an index that still has subscriptions frees them all (ASan: no leak). */
static void test_finish_with_subs(void) {
  sub_index idx;
  sub_index_init(&idx);
  (void)add(&idx, BASE "/Product/A-100", &session_a);
  (void)add(&idx, BASE "/Product/A-100", &session_b);
  (void)add(&idx, BASE "/Product", &session_a);
  (void)add(&idx, BASE "/Product?category=tools", &waiter);
  char uri[128];
  for (int i = 0; i < 200; i++) {
    snprintf(uri, sizeof(uri), BASE "/StockEvent/%d", i);
    (void)add(&idx, uri, i % 2 ? &session_a : &session_b);
  }
  CHECK_INT_EQ(idx.n_subs, 204);
  CHECK_INT_EQ(idx.topics.count, 203);
  matches m = match(&idx, "StockEvent", "150", NULL, NULL, "{}");
  CHECK_INT_EQ(m.n, 1);
  CHECK_STR_EQ(m.topics[0]->uri, BASE "/StockEvent/150");
  sub_index_finish(&idx);
}

/*
 * Row scopes: subscribers of one URI text with different scopes (a tenant
 * column) are different topics under different keys, each with the URI
 * as written; a scoped record matches only while the row is in its scope
 * (entering or leaving it counts once), a scoped collection is a filtered
 * one.
 */
static sub_t *add_scoped(sub_index *idx, const char *uri, const char *tenant, sub_owner *owner) {
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, uri, &u), 0);
  if (u.kind == URI_COLLECTION) u.kind = URI_FILTERED;
  u.filters = realloc(u.filters, (u.n_filters + 1) * sizeof(uri_filter));
  CHECK(u.filters != NULL);
  u.filters[u.n_filters] = (uri_filter){.column = strdup("category"), .value = strdup(tenant)};
  uri_filter_read_number(&u.filters[u.n_filters]); /* as auth_scope_apply makes it */
  u.n_filters++;
  char key[256];
  snprintf(key, sizeof(key), "%s\ncategory=%s", uri, tenant);
  sub_t *s = sub_index_add(idx, key, uri, &u, owner, 0);
  uri_finish(&u);
  CHECK_STR_EQ(s->topic->uri, uri);
  CHECK_STR_EQ(s->topic->key, key);
  return s;
}

static void test_scoped_topics(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *ca = add_scoped(&idx, BASE "/Product", "acme", &session_a);
  sub_t *cb = add_scoped(&idx, BASE "/Product", "bolt", &session_b);
  sub_t *ra = add_scoped(&idx, BASE "/Product/A-100", "acme", &session_a);
  CHECK(ca->topic != cb->topic);
  CHECK(sub_index_find(&idx, BASE "/Product") == NULL); /* only by key */
  CHECK(sub_index_find(&idx, BASE "/Product\ncategory=acme") == ca->topic);
  CHECK(sub_index_needs_rows(&idx, "Product"));
  /* A row of acme's changes: acme's collection and record, not bolt's. */
  matches m = match(&idx, "Product", "A-100", NULL, "{\"category\":\"acme\"}",
                    "{\"category\":\"acme\",\"price\":1}");
  CHECK_INT_EQ(m.n, 2);
  CHECK(count_topic(&m, ca->topic) == 1 && count_topic(&m, ra->topic) == 1);
  /* The row moves from acme to bolt: both hear of it once (old and new owner). */
  m = match(&idx, "Product", "A-100", NULL, "{\"category\":\"acme\"}", "{\"category\":\"bolt\"}");
  CHECK_INT_EQ(m.n, 3);
  CHECK(count_topic(&m, cb->topic) == 1 && count_topic(&m, ra->topic) == 1);
  /* Then a change while it is bolt's: acme hears nothing, not even on the record. */
  m = match(&idx, "Product", "A-100", NULL, "{\"category\":\"bolt\"}", "{\"category\":\"bolt\"}");
  CHECK_INT_EQ(m.n, 1);
  CHECK(count_topic(&m, cb->topic) == 1);
  /* A scope of a number column: its value, text, equals the number, as in SQL. */
  sub_t *c7 = add_scoped(&idx, BASE "/Product", "7", &session_a);
  m = match(&idx, "Product", "A-100", NULL, "{\"category\":7}", "{\"category\":7.0}");
  CHECK_INT_EQ(m.n, 1);
  CHECK(count_topic(&m, c7->topic) == 1);
  sub_index_remove(&idx, c7);
  sub_index_remove(&idx, ra);
  sub_index_remove(&idx, ca);
  sub_index_remove(&idx, cb);
  CHECK_INT_EQ(idx.topics.count, 0);
  sub_index_finish(&idx);
}

/*
 * Record, collection and filtered topics of one change come in (order,
 * uri) order, also after filtered topics come and go (their sorted view is
 * rebuilt), and a topic whose filter does not match is left out.
 */
static void test_match_order(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *subs[24];
  int n = 0;
  char uri[128];
  for (int i = 0; i < 20; i++) {
    snprintf(uri, sizeof(uri), BASE "/Product?name=ne=z%d", i);
    subs[n++] = add(&idx, uri, &session_a);
  }
  subs[n++] = add(&idx, BASE "/Product?name=ne=Anvil", &session_a); /* never matches */
  subs[n++] = add(&idx, BASE "/Product", &session_a);
  subs[n++] = add(&idx, BASE "/Product/A-100", &session_a);
  const char *r = "{\"sku\":\"A-100\",\"name\":\"Anvil\"}";
  matches m = match(&idx, "Product", "A-100", NULL, r, r);
  CHECK_INT_EQ(m.n, 22);
  CHECK_INT_EQ(count_topic(&m, subs[20]->topic), 0);
  sub_index_remove(&idx, subs[3]);
  sub_index_remove(&idx, subs[11]);
  subs[3] = add(&idx, BASE "/Product?name=ne=late", &session_a);
  m = match(&idx, "Product", "A-100", NULL, r, r);
  CHECK_INT_EQ(m.n, 21);
  CHECK_INT_EQ(count_topic(&m, subs[3]->topic), 1);
  for (int i = 0; i < n; i++)
    if (i != 11) sub_index_remove(&idx, subs[i]);
  sub_index_finish(&idx);
}

/*
 * Filtered topics on many columns: a change looks each column up once for
 * every topic that tests it, and the columns past the table's first 32
 * are looked up by name; both give what sub_topic_matches gives (match
 * checks that), on the old row, the new row, or neither.
 */
static void test_many_columns(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_t *subs[41];
  char uri[128];
  for (int i = 0; i < 40; i++) {
    snprintf(uri, sizeof(uri), BASE "/Product?c%d=x", i);
    subs[i] = add(&idx, uri, &session_a);
  }
  subs[40] = add(&idx, BASE "/Product?c1=x&c39=x", &session_a); /* one column of each kind */
  /* c1 (an interned column) and c39 (past the first 32) hold in the new row only. */
  matches m = match(&idx, "Product", "A", NULL, "{\"c1\":\"y\",\"c39\":\"y\"}",
                    "{\"c1\":\"x\",\"c39\":\"x\",\"c2\":\"y\"}");
  CHECK_INT_EQ(m.n, 3);
  CHECK_INT_EQ(count_topic(&m, subs[1]->topic), 1);
  CHECK_INT_EQ(count_topic(&m, subs[39]->topic), 1);
  CHECK_INT_EQ(count_topic(&m, subs[40]->topic), 1);
  /* c0 in the old row only (a row leaving the filter); c39 in neither. */
  m = match(&idx, "Product", "A", NULL, "{\"c0\":\"x\",\"c39\":\"y\"}", "{\"c0\":\"y\"}");
  CHECK_INT_EQ(m.n, 1);
  CHECK_INT_EQ(count_topic(&m, subs[0]->topic), 1);
  /* An insert (no old row) and a delete (no new row). */
  m = match(&idx, "Product", "A", NULL, NULL, "{\"c5\":\"x\"}");
  CHECK_INT_EQ(m.n, 1);
  m = match(&idx, "Product", "A", NULL, "{\"c38\":\"x\",\"c1\":\"x\"}", NULL);
  CHECK_INT_EQ(m.n, 2);
  /* Once every topic is gone, the table starts afresh with its own columns. */
  for (int i = 0; i < 41; i++) sub_index_remove(&idx, subs[i]);
  CHECK(!sub_index_watches(&idx, "Product"));
  subs[0] = add(&idx, BASE "/Product?name=Anvil", &session_a);
  m = match(&idx, "Product", "A", NULL, NULL, "{\"name\":\"Anvil\"}");
  CHECK_INT_EQ(m.n, 1);
  sub_index_remove(&idx, subs[0]);
  sub_index_finish(&idx);
}

/* The equality index against the definition: random topics and rows. ------------ */

#define EQ_TOPICS 300

typedef struct found {
  sub_topic *topics[EQ_TOPICS];
  int n;
} found;

static void collect_found(sub_topic *t, void *data) {
  found *f = data;
  CHECK(f->n < EQ_TOPICS);
  f->topics[f->n++] = t;
}

/*
 * A filter value: texts that read as numbers in several ways, booleans'
 * "1"/"0", plain text, and integers beyond 2^53 that share a double.
 */
static const char *eq_text(void) {
  static const char *const texts[] = {"5",
                                      "5.0",
                                      "%205",
                                      "0x5",
                                      "1",
                                      "0",
                                      "-0",
                                      "x",
                                      "X",
                                      "10",
                                      "nan",
                                      "inf",
                                      "1e1",
                                      "9007199254740993",
                                      "9007199254740992",
                                      "1152921504606846976.0",
                                      "1152921504606846977",
                                      "-1152921504606846977"};
  return texts[rand() % (int)(sizeof(texts) / sizeof(texts[0]))];
}

/* A starts-with prefix, of several lengths; some prefixes of others. */
static const char *eq_prefix(void) {
  static const char *const prefixes[] = {"a", "ab", "abc", "x", "5", "1", "b"};
  return prefixes[rand() % (int)(sizeof(prefixes) / sizeof(prefixes[0]))];
}

/* A random filtered URI on columns a and b; most have a filter the index files them by. */
static void eq_uri(char *uri, size_t len) {
  const char *a = eq_text(), *b = eq_text(), *c = eq_text();
  switch (rand() % 13) {
  case 10: snprintf(uri, len, BASE "/Product?a=gt=%s", a); break; /* the range index */
  case 11: snprintf(uri, len, BASE "/Product?a=le=%s&b=ne=%s", a, b); break;
  case 12: snprintf(uri, len, BASE "/Product?a=ge=%s&b=lt=%s", a, b); break;
  case 0: snprintf(uri, len, BASE "/Product?a=%s", a); break;
  case 1: snprintf(uri, len, BASE "/Product?a=eq=%s", a); break;
  case 2: snprintf(uri, len, BASE "/Product?a=%s|%s|%s", a, b, c); break;
  case 3: snprintf(uri, len, BASE "/Product?a=%s&b=ne=%s", a, b); break;
  case 4: snprintf(uri, len, BASE "/Product?a=gt=%s&b=%s", a, b); break;
  case 5: snprintf(uri, len, BASE "/Product?b=ne=%s", a); break; /* ne-only: tested by its marks */
  case 8: snprintf(uri, len, BASE "/Product?a=ne=%s", a); break; /* beside a's equality keys */
  case 6: snprintf(uri, len, BASE "/Product?a=sw=%s", eq_prefix()); break;
  case 7:
    snprintf(uri, len, BASE "/Product?a=sw=%s&b=%s", eq_prefix(), b);
    break; /* b indexes it */
  default: snprintf(uri, len, BASE "/Product?b=%s|%s", a, b); break;
  }
}

/*
 * A random row value of a column: absent, null, text, a number, a boolean,
 * an integer beyond 2^53 as images give one (a raw item of its digits).
 */
static void eq_value(cJSON *row, const char *column) {
  static const char *const texts[] = {"5",  "5.0", " 5",  "x",   "X", "1", "0",
                                      "10", "ab",  "abc", "abd", "a", "x1"};
  static const char *const raws[] = {"9007199254740993", "1152921504606846976",
                                     "1152921504606846977", "-1152921504606846977"};
  static const double numbers[] = {5, 5.5, 0, -0.0, 1, 10, 9007199254740992.0};
  switch (rand() % 6) {
  case 0: break;
  case 1: cJSON_AddNullToObject(row, column); break;
  case 2: cJSON_AddStringToObject(row, column, texts[rand() % (int)ARRAY_LEN(texts)]); break;
  case 3: cJSON_AddNumberToObject(row, column, numbers[rand() % (int)ARRAY_LEN(numbers)]); break;
  case 4: cJSON_AddRawToObject(row, column, raws[rand() % (int)ARRAY_LEN(raws)]); break;
  default: cJSON_AddBoolToObject(row, column, rand() % 2); break;
  }
}

static cJSON *eq_row(void) {
  if (rand() % 8 == 0) return NULL; /* an insert's old row, a delete's new one */
  cJSON *r = cJSON_CreateObject();
  eq_value(r, "a");
  eq_value(r, "b");
  return r;
}

/* Every change matches exactly the topics sub_topic_matches says, each once. */
static void eq_check(sub_index *idx, sub_t *const *subs, int n) {
  for (int round = 0; round < 200; round++) {
    cJSON *old_row = eq_row(), *new_row = eq_row();
    sub_change c = {100, "Product", "A", NULL, old_row, new_row};
    found f = {.n = 0};
    sub_index_match(idx, &c, collect_found, &f);
    for (int i = 1; i < f.n; i++) CHECK(sub_topic_compare(&f.topics[i - 1], &f.topics[i]) < 0);
    for (int i = 0; i < n; i++) {
      if (subs[i] == NULL) continue;
      sub_topic *t = subs[i]->topic;
      int times = 0;
      for (int j = 0; j < f.n; j++) times += f.topics[j] == t;
      CHECK_INT_EQ(times, sub_topic_matches(t, &c) ? 1 : 0);
    }
    cJSON_Delete(old_row);
    cJSON_Delete(new_row);
  }
}

/* Subscribes owner to random URIs until subs holds upto of them (from *n on). */
static void eq_fill(sub_index *idx, sub_t **subs, int *n, int upto, sub_owner *owner) {
  char uri[256];
  while (*n < upto) {
    eq_uri(uri, sizeof(uri));
    uri_t u;
    if (uri_parse(BASE, uri, &u) != 0) continue;
    resolve_columns(&u);
    subs[(*n)++] = sub_index_add(idx, uri, uri, &u, owner, 0);
    uri_finish(&u);
  }
}

/* The walk against the definition: random topics, some walked, and turns of changes. ---- */

#define WALK_CHANGES 6

static bool walk_even(const sub_topic *t, void *data) {
  return t->id % 2 == 0;
}

static bool walk_all(const sub_topic *t, void *data) {
  return true;
}

typedef struct walk_seen {
  sub_t *const *subs;
  int n_subs;
  int hits[EQ_TOPICS][WALK_CHANGES]; /* by place in subs and walk_id */
} walk_seen;

static void walk_collect(sub_topic *const *walked, size_t n_walked, size_t at, const uint32_t *ids,
                         size_t n, void *data) {
  walk_seen *w = data;
  sub_topic *t = walked[at];
  CHECK(at < n_walked);
  CHECK(t->walked && n > 0);
  for (size_t i = 0; i < n; i++) {
    CHECK(ids[i] < WALK_CHANGES);
    if (i > 0) CHECK(ids[i - 1] < ids[i]); /* each once, in the order kept */
    for (int k = 0; k < w->n_subs; k++)
      if (w->subs[k] != NULL && w->subs[k]->topic == t) w->hits[k][ids[i]]++;
  }
}

/*
 * Turns of up to WALK_CHANGES changes: each topic is found by
 * sub_index_match (a tested one) or by the walk (a walked one) for exactly
 * the changes sub_topic_matches says, once; the match says when it kept one.
 */
static void walk_check(sub_index *idx, sub_t *const *subs, int n) {
  for (int round = 0; round < 100; round++) {
    int k = 1 + rand() % WALK_CHANGES;
    cJSON *rows[WALK_CHANGES][2];
    sub_change c[WALK_CHANGES];
    static found f[WALK_CHANGES];
    bool kept[WALK_CHANGES];
    for (int j = 0; j < k; j++) {
      rows[j][0] = eq_row();
      rows[j][1] = eq_row();
      c[j] = (sub_change){100 + j, "Product", "A", NULL, rows[j][0], rows[j][1], (uint32_t)j};
      f[j].n = 0;
      kept[j] = sub_index_match(idx, &c[j], collect_found, &f[j]);
      for (int i = 0; i < f[j].n; i++) CHECK(!f[j].topics[i]->walked);
    }
    static walk_seen seen;
    memset(&seen, 0, sizeof(seen));
    seen.subs = subs;
    seen.n_subs = n;
    sub_index_walk(idx, walk_collect, &seen);
    for (int j = 0; j < k; j++) {
      bool some_walked = false;
      for (int i = 0; i < n; i++) {
        if (subs[i] == NULL) continue;
        sub_topic *t = subs[i]->topic;
        int times = seen.hits[i][j];
        for (int m = 0; m < f[j].n; m++) times += f[j].topics[m] == t;
        bool match_it = sub_topic_matches(t, &c[j]);
        CHECK_INT_EQ(times, match_it ? 1 : 0);
        some_walked = some_walked || (match_it && t->walked);
      }
      if (some_walked) CHECK(kept[j]);
      cJSON_Delete(rows[j][0]);
      cJSON_Delete(rows[j][1]);
    }
  }
}

/*
 * Random topics checked by check: half of EQ_TOPICS, then every other one
 * gone (an any-of topic leaves every one of its values' lists) and more
 * come until subs holds EQ_TOPICS, checked again. *n: how many subs holds.
 */
static void eq_churn(sub_index *idx, sub_t **subs, int *n,
                     void (*check)(sub_index *idx, sub_t *const *subs, int n)) {
  eq_fill(idx, subs, n, EQ_TOPICS / 2, &session_a);
  check(idx, subs, *n);
  for (int i = 0; i < *n; i += 2) {
    sub_index_remove(idx, subs[i]);
    subs[i] = NULL;
  }
  eq_fill(idx, subs, n, EQ_TOPICS, &session_b);
  check(idx, subs, *n);
}

static void test_walk(void) {
  srand(11);
  sub_index idx;
  sub_index_init(&idx);
  idx.walkable = walk_even;
  sub_t *subs[EQ_TOPICS] = {0};
  int n = 0;
  eq_churn(&idx, subs, &n, walk_check); /* parted again as topics come and go */
  /* Then every ne-only topic walked. */
  idx.walkable = walk_all;
  for (int i = 0; i < n; i++)
    if (subs[i] != NULL) sub_index_rewalk(&idx, subs[i]->topic);
  walk_check(&idx, subs, n);
  int walked = 0;
  for (int i = 0; i < n; i++) walked += subs[i] != NULL && subs[i]->topic->walked;
  CHECK(walked > 10);
  for (int i = 0; i < n; i++)
    if (subs[i] != NULL) sub_index_remove(&idx, subs[i]);
  sub_index_finish(&idx);
}

static void test_equality_index(void) {
  srand(7);
  sub_index idx;
  sub_index_init(&idx);
  sub_t *subs[EQ_TOPICS] = {0};
  int n = 0;
  eq_churn(&idx, subs, &n, eq_check);
  for (int i = 0; i < n; i++)
    if (subs[i] != NULL) sub_index_remove(&idx, subs[i]);
  CHECK(!sub_index_watches(&idx, "Product"));
  sub_index_finish(&idx);
}

/*
 * Topics of one URI under eight keys (as row scopes make them), which
 * compare equal in order: a change from a=5 to a=6 finds each through
 * both values, and each matches once.
 */
static void test_equality_same_uri(void) {
  sub_index idx;
  sub_index_init(&idx);
  const char *uri = BASE "/Product?a=5|6";
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, uri, &u), 0);
  resolve_columns(&u);
  sub_t *subs[8];
  char key[128];
  for (int i = 0; i < 8; i++) {
    snprintf(key, sizeof(key), "%s\nscope%d", uri, i);
    subs[i] = sub_index_add(&idx, key, uri, &u, &session_a, 0);
  }
  uri_finish(&u);
  found f = {.n = 0};
  cJSON *r = row("{\"a\":5}"), *r2 = row("{\"a\":6}");
  sub_change c = {100, "Product", "A", NULL, r, r2};
  sub_index_match(&idx, &c, collect_found, &f);
  CHECK_INT_EQ(f.n, 8);
  for (int i = 0; i < 8; i++) {
    int times = 0;
    for (int j = 0; j < f.n; j++) times += f.topics[j] == subs[i]->topic;
    CHECK_INT_EQ(times, 1);
  }
  cJSON_Delete(r);
  cJSON_Delete(r2);
  for (int i = 0; i < 8; i++) sub_index_remove(&idx, subs[i]);
  sub_index_finish(&idx);
}

/* Checks t's subscribers read want[0..n) front to back, and the same back to front. */
static void check_order(const sub_topic *t, sub_t *const *want, int n) {
  int i = 0;
  for (sub_t *s = t->subs; s != NULL; s = s->topic_next, i++) {
    CHECK(i < n);
    CHECK(s == want[i]);
    CHECK(s->topic_prev == (i == 0 ? NULL : want[i - 1]));
  }
  CHECK_INT_EQ(i, n);
  CHECK(t->subs_last == (n == 0 ? NULL : want[n - 1]));
}

/* sub_index_move: to the front or the back, from any place, with the last kept right. */
static void test_move(void) {
  sub_index idx;
  sub_index_init(&idx);
  sub_owner owners[4] = {
      {SUB_OWNER_SESSION}, {SUB_OWNER_SESSION}, {SUB_OWNER_LISTEN}, {SUB_OWNER_WAITER}};
  sub_t *a = add(&idx, BASE "/Product", &owners[0]);
  check_order(a->topic, (sub_t *[]){a}, 1);
  sub_index_move(a, false); /* alone on the list: stays */
  check_order(a->topic, (sub_t *[]){a}, 1);
  sub_t *b = add(&idx, BASE "/Product", &owners[1]); /* in front */
  sub_t *c = add(&idx, BASE "/Product", &owners[2]);
  sub_topic *t = a->topic;
  check_order(t, (sub_t *[]){c, b, a}, 3);
  sub_index_move(c, false); /* the first to the back */
  check_order(t, (sub_t *[]){b, a, c}, 3);
  sub_index_move(a, false); /* a middle one to the back */
  check_order(t, (sub_t *[]){b, c, a}, 3);
  sub_index_move(a, true); /* the last to the front */
  check_order(t, (sub_t *[]){a, b, c}, 3);
  sub_index_move(b, true); /* a middle one to the front */
  check_order(t, (sub_t *[]){b, a, c}, 3);
  sub_index_move(b, true); /* the first to the front: stays */
  check_order(t, (sub_t *[]){b, a, c}, 3);
  sub_t *w = add(&idx, BASE "/Product", &owners[3]);
  check_order(t, (sub_t *[]){w, b, a, c}, 4);
  sub_index_remove(&idx, c); /* the last: the one before it is last now */
  check_order(t, (sub_t *[]){w, b, a}, 3);
  sub_index_remove(&idx, w); /* the first */
  check_order(t, (sub_t *[]){b, a}, 2);
  sub_index_move(b, false);
  check_order(t, (sub_t *[]){a, b}, 2);
  sub_index_remove(&idx, b);
  check_order(t, (sub_t *[]){a}, 1);
  sub_index_remove(&idx, a); /* the topic goes with it */
  CHECK_INT_EQ(idx.topics.count, 0);
  sub_index_finish(&idx);
}

int main(void) {
  RUN(test_equality_index);
  RUN(test_equality_same_uri);
  RUN(test_walk);
  RUN(test_match_order);
  RUN(test_many_columns);
  RUN(test_add_remove);
  RUN(test_topic_sharing);
  RUN(test_record_bucket);
  RUN(test_match_kinds);
  RUN(test_multiple_filters);
  RUN(test_filter_values);
  RUN(test_nonfinite);
  RUN(test_unwatched);
  RUN(test_since_seq);
  RUN(test_finish_with_subs);
  RUN(test_scoped_topics);
  RUN(test_move);
  return 0;
}
