/*
 * Subscription index (see sub_index.h). Topics are refcounted by their
 * subscriptions: the first subscription to a URI creates the topic and
 * files it under its table (collection and filtered lists) or its record
 * bucket; the last one out frees it. Everything here runs on the worker's
 * loop; nothing blocks and nothing allocates per subscriber when matching.
 */
#include "worker/sub_index.h"

#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/mem.h"

/*
 * The columns a table's filtered topics test, each named once: a change
 * looks each up once in its old and new rows, not once per topic.
 * Kept until the table's last topic goes; a column beyond
 * SUB_MAX_COLUMNS is looked up per topic (SUB_NO_COLUMN).
 */
#define SUB_MAX_COLUMNS 32

typedef struct sub_table {
  char *columns[SUB_MAX_COLUMNS];
  size_t n_columns;
  sub_topic *collections;
  sub_topic *filtered; /* those without an equality filter: tested at every change */
  /* The equality index (below): value key -> eq_list; equality topics per column; all in it. */
  strmap eq;
  uint32_t eq_topics[SUB_MAX_COLUMNS];
  size_t n_eq;
  /* ne-only topics per column (filed in eq too, under upper-case kinds); the last match's mark. */
  uint32_t ne_topics[SUB_MAX_COLUMNS];
  size_t n_ne;
  uint64_t ne_mark;
  /*
   * The range index (below): per column, its gt/ge topics ([2 * col]) and
   * its lt/le topics ([2 * col + 1]) by their filter's number; NULL until
   * one is filed.
   */
  struct range_list *ranges;
  size_t n_range;
  /* The lengths of the indexed prefixes (sw), by column, with how many topics have each. */
  struct prefix_len {
    uint8_t col;
    uint32_t len, topics;
  } * prefix_lens;
  size_t n_prefix_lens, prefix_cap;
  /* The filtered topics in (order, uri) order, rebuilt at the first change after they changed. */
  sub_topic **filtered_sorted;
  size_t n_filtered, sorted_cap;
  bool sorted_stale;
  /*
   * Those tested at every change and those walked (sub_index_walk), each in
   * that order; parted again at the first change after either list or a
   * topic's walkable answer may have changed (walk_stale). walk_columns:
   * bits 2c and 2c + 1 for a column c of walked topics.
   */
  sub_topic **tested, **walked;
  size_t n_tested, n_walked, parts_cap;
  bool walk_stale;
  uint64_t walk_columns;
  /*
   * The changes kept for the walk: each one's walk_id, and which of its
   * rows have a value in each ne column (bit 2c: the old row in column c,
   * 2c + 1: the new); the walked topics their values exclude, each topic's
   * chained from its last (walk_except). In idx->walk_tables while some
   * are kept.
   */
  struct walk_change {
    uint64_t present;
    uint32_t id;
  } * walk;
  size_t n_walk, walk_cap;
  struct walk_except {
    sub_topic *t;
    uint32_t change, prev; /* its change's index in walk; + 1: the topic's exception before */
    unsigned row;          /* 1: the old row's value, 2: the new row's */
  } * except;
  size_t n_except, except_cap;
  struct sub_table *walk_next;
  size_t n_topics;         /* all topics on the table, records included */
  size_t n_scoped_records; /* record topics with filters (a row scope): they need rows */
} sub_table;

/* A topic in the range index, at its ordered filter's number. */
typedef struct range_entry {
  double at;
  sub_topic *t;
} range_entry;

/* One column's and direction's range-indexed topics, by at. */
typedef struct range_list {
  range_entry *e;
  size_t n, cap;
} range_list;

/* The topics filed under one key of the equality index (below). */
typedef struct eq_list {
  sub_topic **topics;
  size_t n, cap;
} eq_list;

void sub_index_init(sub_index *idx) {
  memset(idx, 0, sizeof(*idx));
  strmap_init(&idx->topics);
  strmap_init(&idx->tables);
  strmap_init(&idx->records);
  idx->next_topic_id = 1;
}

static void free_topic_cb(const char *key, size_t len, void *value, void *data) {
  sub_topic *t = value;
  sub_t *s = t->subs;
  while (s != NULL) {
    sub_t *next = s->topic_next;
    free(s);
    s = next;
  }
  uri_finish(&t->parsed);
  free(t->key);
  free(t->uri);
  frame_unref(t->tail);
  free(t);
}

static void table_free(sub_table *st);

static void free_table_cb(const char *key, size_t len, void *value, void *data) {
  table_free(value);
}

void sub_index_finish(sub_index *idx) {
  free(idx->walk_ids);
  strmap_foreach(&idx->topics, free_topic_cb, NULL);
  strmap_foreach(&idx->tables, free_table_cb, NULL);
  strmap_finish(&idx->topics);
  strmap_finish(&idx->tables);
  strmap_finish(&idx->records);
}

/* "table\0key": the records map's key. */
static void record_key(buf_t *b, const char *table, const char *key) {
  buf_append(b, table, strlen(table) + 1);
  buf_append_str(b, key);
}

/* Pushes t on the front of the list at *head. */
static void topic_link(sub_topic **head, sub_topic *t) {
  t->prev = NULL;
  t->next = *head;
  if (*head != NULL) (*head)->prev = t;
  *head = t;
}

static void topic_unlink(sub_topic **head, sub_topic *t) {
  if (t->prev != NULL)
    t->prev->next = t->next;
  else
    *head = t->next;
  if (t->next != NULL) t->next->prev = t->prev;
  t->next = t->prev = NULL;
}

uint64_t sub_topic_order(const char *uri) {
  return strmap_hash_stable(uri, strlen(uri));
}

int sub_topic_compare(const void *a, const void *b) {
  const sub_topic *x = *(const sub_topic *const *)a, *y = *(const sub_topic *const *)b;
  if (x->order != y->order) return x->order < y->order ? -1 : 1;
  return strcmp(x->uri, y->uri);
}

/* The index of the filter's column in st->columns, added if new; SUB_NO_COLUMN when full. */
static uint8_t table_column(sub_table *st, const uri_filter *f) {
  size_t i = 0;
  while (i < st->n_columns && strcmp(st->columns[i], f->column) != 0) i++;
  if (i == SUB_MAX_COLUMNS) return SUB_NO_COLUMN;
  if (i == st->n_columns) st->columns[st->n_columns++] = mem_strdup(f->column);
  return (uint8_t)i;
}

static void eq_list_free(const char *key, size_t len, void *value, void *data) {
  eq_list *l = value;
  free(l->topics);
  free(l);
}

static void table_free(sub_table *st) {
  for (size_t i = 0; i < st->n_columns; i++) free(st->columns[i]);
  strmap_foreach(&st->eq, eq_list_free, NULL); /* none left, but at sub_index_finish */
  strmap_finish(&st->eq);
  free(st->prefix_lens);
  free(st->filtered_sorted);
  free(st->tested);
  free(st->walked);
  free(st->walk);
  free(st->except);
  for (size_t i = 0; st->ranges != NULL && i < 2 * SUB_MAX_COLUMNS; i++) free(st->ranges[i].e);
  free(st->ranges);
  free(st);
}

/*
 * The equality index. A filtered topic with an eq or any-of filter on one
 * of the table's named columns is filed under every key of a value that
 * can satisfy that filter, and a change looks its rows' values up there
 * instead of testing every such topic. A key is the column's index, a kind
 * and bytes, so that when value_equals(v, text) holds, v's key is among
 * text's keys:
 *   's' and the text       a string equal to it
 *   'n' and the double     a number, when the text reads as one and the
 *                          column is not untyped (uri_number, as
 *                          value_equals reads it; -0 as 0): the number
 *                          rounded to a double, which several integers
 *                          beyond 2^53 share
 *   'b' and "1" or "0"     a boolean, when the text is "1" or "0"
 * A row's raw_number (an integer a double does not hold) is looked up
 * under 'n' by its double, which several such integers share.
 * A topic without an equality but with a starts-with filter (sw) is filed
 * under 'p' and its prefix, and a change looks up its string values cut
 * to each prefix length the column's topics have (prefix_lens). A topic
 * found there is then tested whole, as any other.
 *
 * A topic whose one filter is ne (ne-only: its column is ne_column)
 * matches every row with a value in its column (NULL matches no
 * operator) except the values its filter names. It stays with the topics
 * tested at every change, but is filed under its value's keys in upper
 * case ('S', 'N', 'B'): a change looks up its rows' values there once
 * and marks the topics it finds, and the test of each ne-only topic is
 * then a look at its marks, not a comparison. Its key must name the values
 * it excludes exactly: a value that reads as a number beyond 2^53, whose
 * double several integers share, is not filed so (ne_column_of). A walked
 * ne-only topic (sub_index.h) is not marked: the lookup of a change kept
 * for the walk notes it as one of the change's exceptions instead.
 */
#define EQ_KEY_STACK 256

typedef void (*eq_fn)(sub_table *st, const char *key, size_t len, void *data);

/* Calls fn with the key (col, kind, bytes), made on the stack when it fits. */
static void eq_key(sub_table *st, uint8_t col, char kind, const void *bytes, size_t n, eq_fn fn,
                   void *data) {
  char stack[EQ_KEY_STACK];
  char *k = n + 2 <= sizeof(stack) ? stack : mem_alloc(n + 2);
  k[0] = (char)col;
  k[1] = kind;
  memcpy(k + 2, bytes, n);
  fn(st, k, n + 2, data);
  if (k != stack) free(k);
}

/* A key's kind: k ('s', 'n' or 'b') for an equality, in upper case for an ne-only topic. */
#define EQ_KIND(k, ne) ((char)((ne) ? (k) - 'a' + 'A' : (k)))

static void eq_key_number(sub_table *st, uint8_t col, double d, bool ne, eq_fn fn, void *data) {
  if (d == 0) d = 0; /* -0 equals 0: one key */
  eq_key(st, col, EQ_KIND('n', ne), &d, sizeof(d), fn, data);
}

/* Does n lie beyond what a double holds every integer of (2^53), where integers share doubles? */
static bool num_beyond_double(const uri_num *n) {
  return !(fabs(n->d) < 9007199254740992.0);
}

/* A row's raw value: an integer a double does not hold, as images give one (store.h). */
static bool raw_number(const cJSON *v, uri_num *n) {
  return cJSON_IsRaw(v) && uri_number(v->valuestring, n);
}

/* fn for every key of a filter value's text; numbers: unless the column is untyped (uri_filter). */
static void eq_text_keys(sub_table *st, uint8_t col, const char *text, bool numbers, bool ne,
                         eq_fn fn, void *data) {
  eq_key(st, col, EQ_KIND('s', ne), text, strlen(text), fn, data);
  uri_num n;
  if (numbers && uri_number(text, &n)) eq_key_number(st, col, n.d, ne, fn, data);
  if (strcmp(text, "1") == 0 || strcmp(text, "0") == 0)
    eq_key(st, col, EQ_KIND('b', ne), text, 1, fn, data);
}

/* fn for the key of a row's value; none for a value no equality matches (NULL, an object). */
static void eq_value_key(sub_table *st, uint8_t col, const cJSON *v, bool ne, eq_fn fn,
                         void *data) {
  uri_num n;
  if (cJSON_IsString(v))
    eq_key(st, col, EQ_KIND('s', ne), v->valuestring, strlen(v->valuestring), fn, data);
  else if (raw_number(v, &n))
    eq_key_number(st, col, n.d, ne, fn, data);
  else if (cJSON_IsNumber(v))
    eq_key_number(st, col, v->valuedouble, ne, fn, data);
  else if (cJSON_IsBool(v))
    eq_key(st, col, EQ_KIND('b', ne), cJSON_IsTrue(v) ? "1" : "0", 1, fn, data);
}

static void eq_add(sub_table *st, const char *key, size_t len, void *t) {
  eq_list *l = strmap_get(&st->eq, key, len);
  if (l == NULL) {
    l = mem_calloc(1, sizeof(*l));
    strmap_put(&st->eq, key, len, l);
  }
  if (l->n == l->cap) {
    l->cap = l->cap > 0 ? l->cap * 2 : 2;
    l->topics = mem_realloc(l->topics, l->cap * sizeof(*l->topics));
  }
  l->topics[l->n++] = t;
}

static void eq_remove(sub_table *st, const char *key, size_t len, void *t) {
  eq_list *l = strmap_get(&st->eq, key, len);
  if (l == NULL) return;
  for (size_t i = 0; i < l->n; i++)
    if (l->topics[i] == t) {
      l->topics[i] = l->topics[--l->n];
      break;
    }
  if (l->n > 0) return;
  strmap_remove(&st->eq, key, len);
  free(l->topics);
  free(l);
}

/*
 * The filter a topic is indexed by, on a named column: its first eq or
 * any-of, else its first sw; or -1.
 */
static int8_t eq_filter_of(const sub_topic *t) {
  int8_t prefix = -1;
  for (size_t i = 0; i < t->parsed.n_filters; i++) {
    uri_op op = t->parsed.filters[i].op;
    if (t->columns[i] == SUB_NO_COLUMN) continue;
    if (op == URI_EQ || op == URI_IN) return (int8_t)i;
    if (op == URI_SW && prefix < 0) prefix = (int8_t)i;
  }
  return prefix;
}

/* Counts a topic's prefix length in (delta 1) or out (-1) of the table's prefix_lens. */
static void prefix_len_count(sub_table *st, uint8_t col, uint32_t len, int delta) {
  size_t i = 0;
  while (i < st->n_prefix_lens && (st->prefix_lens[i].col < col ||
                                   (st->prefix_lens[i].col == col && st->prefix_lens[i].len < len)))
    i++;
  bool found =
      i < st->n_prefix_lens && st->prefix_lens[i].col == col && st->prefix_lens[i].len == len;
  if (!found && delta < 0) return;
  if (!found) {
    if (st->n_prefix_lens == st->prefix_cap) {
      st->prefix_cap = st->prefix_cap > 0 ? st->prefix_cap * 2 : 4;
      st->prefix_lens = mem_realloc(st->prefix_lens, st->prefix_cap * sizeof(*st->prefix_lens));
    }
    memmove(&st->prefix_lens[i + 1], &st->prefix_lens[i],
            (st->n_prefix_lens - i) * sizeof(*st->prefix_lens));
    st->prefix_lens[i] = (struct prefix_len){col, len, 0};
    st->n_prefix_lens++;
  }
  st->prefix_lens[i].topics += (uint32_t)delta;
  if (st->prefix_lens[i].topics > 0) return;
  memmove(&st->prefix_lens[i], &st->prefix_lens[i + 1],
          (st->n_prefix_lens - i - 1) * sizeof(*st->prefix_lens));
  st->n_prefix_lens--;
}

/* Files t under (eq_add) or takes it from (eq_remove) every key of its filter's values. */
static void eq_file(sub_table *st, sub_topic *t, eq_fn fn) {
  const uri_filter *f = &t->parsed.filters[t->eq_filter];
  uint8_t col = t->columns[t->eq_filter];
  int delta = fn == eq_add ? 1 : -1;
  if (f->op == URI_SW) {
    size_t len = strlen(f->value);
    eq_key(st, col, 'p', f->value, len, fn, t);
    prefix_len_count(st, col, (uint32_t)len, delta);
    return;
  }
  if (f->op == URI_IN)
    for (size_t i = 0; i < f->n_alts; i++)
      eq_text_keys(st, col, f->alts[i], !f->untyped, false, fn, t);
  else
    eq_text_keys(st, col, f->value, !f->untyped, false, fn, t);
  st->eq_topics[col] += (uint32_t)delta;
}

/*
 * t's ne_column: its one filter's column if that filter is an ne on a named
 * column (after eq_filter_of found none to index) whose value is no number
 * beyond 2^53 (the equality index), else SUB_NO_COLUMN.
 */
static uint8_t ne_column_of(const sub_topic *t) {
  if (t->parsed.n_filters != 1) return SUB_NO_COLUMN;
  const uri_filter *f = &t->parsed.filters[0];
  bool exact = !(f->is_number && num_beyond_double(&f->number));
  return f->op == URI_NE && exact ? t->columns[0] : SUB_NO_COLUMN;
}

/* eq_file for an ne-only topic. */
static void ne_file(sub_table *st, sub_topic *t, eq_fn fn) {
  const uri_filter *f = &t->parsed.filters[0];
  eq_text_keys(st, t->columns[0], f->value, !f->untyped, true, fn, t);
  st->ne_topics[t->columns[0]] += (uint32_t)(fn == eq_add ? 1 : -1);
}

/*
 * The range index. A filtered topic with neither an equality nor a prefix
 * to be found by, but an ordered filter (gt, ge, lt, le) on a named numeric
 * column whose value reads as a number, is filed at that number: a gt or ge
 * filter can hold for a row's number x only if its number is at most x, a
 * lt or le filter only if its number is at least x, so a change looks for
 * its rows' values in the two sorted lists of the column (a prefix of one,
 * a suffix of the other) and tests only the topics found there whole, as
 * the equality index's. A text value is above every number
 * (ordered_compare): it can satisfy every gt and ge filter and no lt or le
 * one; a NULL, none. (A filter's number and a row's are compared as
 * doubles, which integers beyond 2^53 share, so the bounds hold ties and
 * the test whole decides.) Without it such topics were tested at every
 * change, each: a table of per-agent thresholds paid for every agent per
 * change.
 */
static int8_t range_filter_of(const sub_topic *t) {
  for (size_t i = 0; i < t->parsed.n_filters; i++) {
    const uri_filter *f = &t->parsed.filters[i];
    if (uri_op_ordered(f->op) && t->columns[i] != SUB_NO_COLUMN && f->numeric && f->is_number)
      return (int8_t)i;
  }
  return -1;
}

/* The list t is filed in (range_filter set), made at the first. */
static range_list *range_list_of(sub_table *st, const sub_topic *t) {
  const uri_filter *f = &t->parsed.filters[t->range_filter];
  bool upper = f->op == URI_LT || f->op == URI_LE;
  if (st->ranges == NULL) st->ranges = mem_calloc(2 * SUB_MAX_COLUMNS, sizeof(*st->ranges));
  return &st->ranges[2 * t->columns[t->range_filter] + upper];
}

/* The first entry of l at or above x (above x: strictly). */
static size_t range_bound(const range_list *l, double x, bool above) {
  size_t lo = 0, hi = l->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (above ? l->e[mid].at <= x : l->e[mid].at < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void range_add(sub_table *st, sub_topic *t) {
  range_list *l = range_list_of(st, t);
  double at = t->parsed.filters[t->range_filter].number.d;
  if (l->n == l->cap) {
    l->cap = l->cap == 0 ? 8 : l->cap * 2;
    l->e = mem_realloc(l->e, l->cap * sizeof(*l->e));
  }
  size_t i = range_bound(l, at, true);
  memmove(&l->e[i + 1], &l->e[i], (l->n - i) * sizeof(*l->e));
  l->e[i] = (range_entry){at, t};
  l->n++;
  st->n_range++;
}

static void range_remove(sub_table *st, sub_topic *t) {
  range_list *l = range_list_of(st, t);
  size_t i = range_bound(l, t->parsed.filters[t->range_filter].number.d, false);
  while (l->e[i].t != t) i++; /* among those at the same number */
  memmove(&l->e[i], &l->e[i + 1], (l->n - i - 1) * sizeof(*l->e));
  l->n--;
  st->n_range--;
}

static sub_topic *topic_create(sub_index *idx, const char *key, const char *uri,
                               const uri_t *parsed) {
  sub_topic *t = mem_calloc(1, sizeof(*t));
  t->id = idx->next_topic_id++;
  t->ne_column = SUB_NO_COLUMN;
  t->order = sub_topic_order(uri);
  frame_tag_init(&t->tag, 't', t->order);
  t->key = mem_strdup(key);
  t->uri = mem_strdup(uri);
  buf_t json;
  buf_init(&json);
  buf_append_json_string(&json, uri, strlen(uri));
  const frame_part tail[] = {{json.data, json.len}, {"}}", 2}};
  t->tail = frame_create_tail(&t->tag, tail, ARRAY_LEN(tail));
  t->uri_json = t->tail->data + t->tag.len;
  t->uri_json_len = (uint32_t)json.len; /* a URI is bounded far below */
  buf_finish(&json);
  t->parsed = uri_copy(parsed);
  strmap_put(&idx->topics, t->key, strlen(t->key), t);
  const char *table = t->parsed.table;
  sub_table *st = strmap_get(&idx->tables, table, strlen(table));
  if (st == NULL) {
    st = mem_calloc(1, sizeof(*st));
    strmap_init(&st->eq);
    strmap_put(&idx->tables, table, strlen(table), st);
  }
  st->n_topics++;
  if (t->parsed.kind == URI_RECORD) {
    if (t->parsed.n_filters > 0) st->n_scoped_records++;
    buf_t k;
    buf_init(&k);
    record_key(&k, table, t->parsed.key);
    sub_topic *head = strmap_get(&idx->records, k.data, k.len);
    topic_link(&head, t);
    strmap_put(&idx->records, k.data, k.len, head);
    buf_finish(&k);
  } else if (t->parsed.kind == URI_FILTERED) {
    for (size_t i = 0; i < t->parsed.n_filters; i++)
      t->columns[i] = table_column(st, &t->parsed.filters[i]);
    t->eq_filter = eq_filter_of(t);
    t->range_filter = t->eq_filter < 0 ? range_filter_of(t) : -1;
    if (t->eq_filter >= 0) {
      eq_file(st, t, eq_add);
      st->n_eq++;
    } else if (t->range_filter >= 0) {
      range_add(st, t);
    } else {
      topic_link(&st->filtered, t);
      st->n_filtered++;
      st->sorted_stale = true;
      t->ne_column = ne_column_of(t);
      if (t->ne_column != SUB_NO_COLUMN) {
        ne_file(st, t, eq_add);
        st->n_ne++;
      }
    }
  } else {
    topic_link(&st->collections, t);
  }
  return t;
}

static void topic_destroy(sub_index *idx, sub_topic *t) {
  const char *table = t->parsed.table;
  sub_table *st = strmap_get(&idx->tables, table, strlen(table));
  if (t->parsed.kind == URI_RECORD) {
    if (t->parsed.n_filters > 0) st->n_scoped_records--;
    buf_t k;
    buf_init(&k);
    record_key(&k, table, t->parsed.key);
    sub_topic *head = strmap_get(&idx->records, k.data, k.len);
    topic_unlink(&head, t);
    if (head != NULL)
      strmap_put(&idx->records, k.data, k.len, head);
    else
      strmap_remove(&idx->records, k.data, k.len);
    buf_finish(&k);
  } else if (t->parsed.kind == URI_FILTERED && t->eq_filter >= 0) {
    eq_file(st, t, eq_remove);
    st->n_eq--;
  } else if (t->parsed.kind == URI_FILTERED && t->range_filter >= 0) {
    range_remove(st, t);
  } else if (t->parsed.kind == URI_FILTERED) {
    topic_unlink(&st->filtered, t);
    st->n_filtered--;
    st->sorted_stale = true;
    if (t->ne_column != SUB_NO_COLUMN) {
      ne_file(st, t, eq_remove);
      st->n_ne--;
    }
  } else {
    topic_unlink(&st->collections, t);
  }
  if (--st->n_topics == 0) table_free(strmap_remove(&idx->tables, table, strlen(table)));
  strmap_remove(&idx->topics, t->key, strlen(t->key));
  uri_finish(&t->parsed);
  free(t->key);
  free(t->uri);
  frame_unref(t->tail);
  free(t);
}

/* Links s into t's subscribers, at the front or at the back. */
static void subs_link(sub_topic *t, sub_t *s, bool front) {
  if (front) {
    s->topic_prev = NULL;
    s->topic_next = t->subs;
    if (t->subs != NULL) t->subs->topic_prev = s;
    t->subs = s;
    if (t->subs_last == NULL) t->subs_last = s;
  } else {
    s->topic_next = NULL;
    s->topic_prev = t->subs_last;
    if (t->subs_last != NULL) t->subs_last->topic_next = s;
    t->subs_last = s;
    if (t->subs == NULL) t->subs = s;
  }
}

static void subs_unlink(sub_topic *t, sub_t *s) {
  if (s->topic_prev != NULL)
    s->topic_prev->topic_next = s->topic_next;
  else
    t->subs = s->topic_next;
  if (s->topic_next != NULL)
    s->topic_next->topic_prev = s->topic_prev;
  else
    t->subs_last = s->topic_prev;
}

void sub_index_move(sub_t *s, bool front) {
  subs_unlink(s->topic, s);
  subs_link(s->topic, s, front);
}

sub_t *sub_index_add(sub_index *idx, const char *key, const char *uri, const uri_t *parsed,
                     sub_owner *owner, int64_t since_seq) {
  sub_topic *t = strmap_get(&idx->topics, key, strlen(key));
  if (t == NULL) t = topic_create(idx, key, uri, parsed);
  sub_t *s = mem_calloc(1, sizeof(*s));
  s->topic = t;
  s->owner = owner;
  s->since_seq = since_seq;
  subs_link(t, s, true);
  t->n_subs++;
  if (owner->kind == SUB_OWNER_SESSION) t->n_session_subs++;
  sub_topic_recount(t);
  idx->n_subs++;
  sub_index_rewalk(idx, t);
  return s;
}

void sub_index_remove(sub_index *idx, sub_t *s) {
  sub_topic *t = s->topic;
  subs_unlink(t, s);
  if (s->owner->kind == SUB_OWNER_SESSION) t->n_session_subs--;
  free(s);
  idx->n_subs--;
  if (--t->n_subs == 0) {
    topic_destroy(idx, t);
  } else {
    sub_topic_recount(t);
    sub_index_rewalk(idx, t);
  }
}

void sub_index_rewalk(sub_index *idx, const sub_topic *t) {
  if (t->ne_column == SUB_NO_COLUMN || idx->walkable == NULL) return;
  sub_table *st = strmap_get(&idx->tables, t->parsed.table, strlen(t->parsed.table));
  st->walk_stale = true;
}

bool sub_index_needs_rows(const sub_index *idx, const char *table) {
  const sub_table *st = strmap_get(&idx->tables, table, strlen(table));
  return st != NULL &&
         (st->filtered != NULL || st->n_eq > 0 || st->n_range > 0 || st->n_scoped_records > 0);
}

bool sub_index_watches(const sub_index *idx, const char *table) {
  return strmap_get(&idx->tables, table, strlen(table)) != NULL;
}

/* The number a row's value is, if it is one: a number, a raw_number, a boolean (1/0). */
static bool value_num(const cJSON *v, uri_num *n) {
  if (cJSON_IsNumber(v)) {
    *n = uri_num_of(v->valuedouble);
    return true;
  }
  if (cJSON_IsBool(v)) {
    *n = uri_num_of(cJSON_IsTrue(v) ? 1 : 0);
    return true;
  }
  return raw_number(v, n);
}

/*
 * Does a column value (from a row as JSON) of f's column equal a filter
 * text (f's value or one of its alternatives)? Strings compare as text. A
 * number equals text that reads as that number (number: the text's
 * uri_number, or NULL; so "5" and "5.0" both match 5), exactly as SQLite
 * compares them, as SQLite converts the text it compares with a column of
 * numeric affinity; but not on an untyped column (uri_filter.untyped),
 * which holds numbers as written and converts nothing: there a number
 * equals no text. A boolean equals "1" or "0". NULL equals nothing.
 */
static bool value_equals(const cJSON *v, const uri_filter *f, const char *text,
                         const uri_num *number) {
  uri_num x;
  if (cJSON_IsBool(v)) return strcmp(text, cJSON_IsTrue(v) ? "1" : "0") == 0;
  if (value_num(v, &x)) return !f->untyped && number != NULL && uri_num_compare(&x, number) == 0;
  return cJSON_IsString(v) && strcmp(v->valuestring, text) == 0;
}

/* value_equals with one of f's alternatives, read as a number here when v is one. */
static bool value_equals_alt(const cJSON *v, const uri_filter *f, const char *text) {
  uri_num x, n;
  return value_equals(v, f, text, value_num(v, &x) && uri_number(text, &n) ? &n : NULL);
}

/*
 * An ordered comparison of a row's value with a filter's, as SQLite makes
 * it when resources_query binds the filter value (a number when the column
 * is numeric and the value reads as one): numbers by value, exactly,
 * numbers before text, text by bytes. 2 for a NULL (it compares with
 * nothing).
 */
static int ordered_compare(const cJSON *v, const uri_filter *f) {
  bool p_number = f->numeric && f->is_number;
  uri_num x;
  if (value_num(v, &x)) return p_number ? uri_num_compare(&x, &f->number) : -1;
  if (cJSON_IsString(v)) {
    if (p_number) return 1;
    int c = strcmp(v->valuestring, f->value);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  return 2;
}

static bool filter_matches(const uri_filter *f, const cJSON *v) {
  if (v == NULL || cJSON_IsNull(v)) return false; /* NULL matches no operator (as in SQL) */
  switch (f->op) {
  case URI_EQ: return value_equals(v, f, f->value, f->is_number ? &f->number : NULL);
  case URI_NE: return !value_equals(v, f, f->value, f->is_number ? &f->number : NULL);
  case URI_IN:
    for (size_t i = 0; i < f->n_alts; i++)
      if (value_equals_alt(v, f, f->alts[i])) return true;
    return false;
  case URI_SW: return cJSON_IsString(v) && strncmp(v->valuestring, f->value, strlen(f->value)) == 0;
  case URI_CT: return cJSON_IsString(v) && strstr(v->valuestring, f->value) != NULL;
  case URI_GT: return ordered_compare(v, f) == 1;
  case URI_GE: {
    int c = ordered_compare(v, f);
    return c == 1 || c == 0;
  }
  case URI_LT: return ordered_compare(v, f) == -1;
  case URI_LE: {
    int c = ordered_compare(v, f);
    return c == -1 || c == 0;
  }
  }
  return false;
}

bool sub_filters_match(const uri_t *parsed, const cJSON *row) {
  if (!cJSON_IsObject(row)) return false;
  for (size_t i = 0; i < parsed->n_filters; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, parsed->filters[i].column);
    if (!filter_matches(&parsed->filters[i], v)) return false;
  }
  return true;
}

/* The row's value of each of the table's filter columns (NULL: none, or no row). */
static void table_values(const sub_table *st, const cJSON *row, const cJSON **values) {
  for (size_t j = 0; j < st->n_columns; j++)
    values[j] = cJSON_IsObject(row) ? cJSON_GetObjectItemCaseSensitive(row, st->columns[j]) : NULL;
}

/* sub_filters_match for a filtered topic, its columns' values looked up already (table_values). */
static bool topic_filters_match(const sub_topic *t, const cJSON *row, const cJSON *const *values) {
  if (!cJSON_IsObject(row)) return false;
  for (size_t i = 0; i < t->parsed.n_filters; i++) {
    const uri_filter *f = &t->parsed.filters[i];
    const cJSON *v = t->columns[i] != SUB_NO_COLUMN
                         ? values[t->columns[i]]
                         : cJSON_GetObjectItemCaseSensitive(row, f->column);
    if (!filter_matches(f, v)) return false;
  }
  return true;
}

/* A record topic with filters (a row scope) matches a change of a row in it, before or after. */
static bool record_in_scope(const sub_topic *t, const sub_change *change) {
  return t->parsed.n_filters == 0 || sub_filters_match(&t->parsed, change->old_row) ||
         sub_filters_match(&t->parsed, change->new_row);
}

static void match_records(const sub_index *idx, const sub_change *change, const char *key,
                          void (*fn)(sub_topic *, void *), void *data) {
  const char *table = change->table;
  buf_t k;
  buf_init(&k);
  record_key(&k, table, key);
  for (sub_topic *t = strmap_get(&idx->records, k.data, k.len); t != NULL; t = t->next)
    if (record_in_scope(t, change)) fn(t, data);
  buf_finish(&k);
}

/* The record and collection topics one change matches (few: a change names one or two keys). */
typedef struct match_set {
  sub_topic **list;
  size_t n, cap;
  sub_topic *fixed[32];
} match_set;

static void match_collect(sub_topic *t, void *data) {
  match_set *m = data;
  if (m->n == m->cap) {
    size_t cap = m->cap * 2;
    sub_topic **list = mem_alloc(cap * sizeof(*list));
    memcpy(list, m->list, m->n * sizeof(*list));
    if (m->list != m->fixed) free(m->list);
    m->list = list;
    m->cap = cap;
  }
  m->list[m->n++] = t;
}

/*
 * sub_topic_compare, then the topic itself: topics of one URI under
 * different row scopes compare equal, and a topic found twice must sort
 * next to itself to be seen once.
 */
static int match_compare(const void *a, const void *b) {
  int c = sub_topic_compare(a, b);
  if (c != 0) return c;
  const sub_topic *x = *(sub_topic *const *)a, *y = *(sub_topic *const *)b;
  return (uintptr_t)x < (uintptr_t)y ? -1 : (uintptr_t)x > (uintptr_t)y;
}

/* What eq_match's lookups test the topics they find with. */
typedef struct eq_probe {
  const sub_change *change;
  const cJSON *const *old_values, *const *new_values;
  match_set *m;
} eq_probe;

/* Collects t, an indexed topic found for the change, if its old or new row matches it whole. */
static void probe_collect(const eq_probe *p, sub_topic *t) {
  if (topic_filters_match(t, p->change->old_row, p->old_values) ||
      topic_filters_match(t, p->change->new_row, p->new_values))
    match_collect(t, p->m);
}

static void eq_lookup(sub_table *st, const char *key, size_t len, void *data) {
  const eq_probe *p = data;
  const eq_list *l = strmap_get(&st->eq, key, len);
  for (size_t i = 0; l != NULL && i < l->n; i++) probe_collect(p, l->topics[i]);
}

/* Two row values with the same key: the second lookup would find what the first did. */
static bool eq_same_value(const cJSON *a, const cJSON *b) {
  if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
  if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
  return a == b;
}

/* The sw topics of one prefix length a row's value of that column can satisfy. */
static void eq_prefix(sub_table *st, const struct prefix_len *pl, const cJSON *v, eq_probe *p) {
  if (cJSON_IsString(v) && strlen(v->valuestring) >= pl->len)
    eq_key(st, pl->col, 'p', v->valuestring, pl->len, eq_lookup, p);
}

/*
 * The indexed topics the change's old or new row matches, into m
 * (unordered, maybe repeated): one lookup per equality column and row
 * value, one per prefix length and row value.
 */
static void eq_match(sub_table *st, const sub_change *change, const cJSON *const *old_values,
                     const cJSON *const *new_values, match_set *m) {
  eq_probe p = {change, old_values, new_values, m};
  for (size_t c = 0; c < st->n_columns; c++) {
    if (st->eq_topics[c] == 0) continue;
    eq_value_key(st, (uint8_t)c, old_values[c], false, eq_lookup, &p);
    if (!eq_same_value(old_values[c], new_values[c]))
      eq_value_key(st, (uint8_t)c, new_values[c], false, eq_lookup, &p);
  }
  for (size_t i = 0; i < st->n_prefix_lens; i++) {
    const struct prefix_len *pl = &st->prefix_lens[i];
    eq_prefix(st, pl, old_values[pl->col], &p);
    if (!eq_same_value(old_values[pl->col], new_values[pl->col]))
      eq_prefix(st, pl, new_values[pl->col], &p);
  }
}

/* The topics of l a row's value v can satisfy the indexed filter of, tested whole (range index). */
static void range_candidates(const range_list *l, bool upper, const cJSON *v, eq_probe *p) {
  size_t from = 0, to = 0;
  uri_num n;
  if (value_num(v, &n)) {
    /*
     * Inclusive at x: a filter's number and the row's may share a double and
     * differ. A NaN (above every number) is sought as an infinity: the
     * candidates' whole test tells the two apart.
     */
    double x = isnan(n.d) ? INFINITY : n.d;
    from = upper ? range_bound(l, x, false) : 0;
    to = upper ? l->n : range_bound(l, x, true);
  } else if (cJSON_IsString(v) && !upper) {
    to = l->n;
  }
  for (size_t i = from; i < to; i++) probe_collect(p, l->e[i].t);
}

/* The range-indexed topics the change's old or new row matches, into m (as eq_match). */
static void range_match(sub_table *st, const sub_change *change, const cJSON *const *old_values,
                        const cJSON *const *new_values, match_set *m) {
  eq_probe p = {change, old_values, new_values, m};
  for (size_t c = 0; c < st->n_columns; c++) {
    for (int upper = 0; upper < 2; upper++) {
      const range_list *l = &st->ranges[2 * c + (size_t)upper];
      if (l->n == 0) continue;
      range_candidates(l, upper, old_values[c], &p);
      if (!eq_same_value(old_values[c], new_values[c]))
        range_candidates(l, upper, new_values[c], &p);
    }
  }
}

/* What ne_lookup marks the topics it finds with. */
typedef struct ne_probe {
  uint64_t mark;
  int row;   /* 0: the old row's value, 1: the new row's */
  bool keep; /* the change is kept for the walk: note the walked topics found */
} ne_probe;

/* Notes that the change about to be kept (st->walk[st->n_walk]) excludes t by row's value. */
static void walk_except_add(sub_table *st, sub_topic *t, int row) {
  if (st->n_except == st->except_cap) {
    st->except_cap = st->except_cap == 0 ? 16 : st->except_cap * 2;
    st->except = mem_realloc(st->except, st->except_cap * sizeof(*st->except));
  }
  st->except[st->n_except] =
      (struct walk_except){t, (uint32_t)st->n_walk, t->walk_except, 1u << row};
  t->walk_except = (uint32_t)++st->n_except;
}

static void ne_lookup(sub_table *st, const char *key, size_t len, void *data) {
  const ne_probe *p = data;
  const eq_list *l = strmap_get(&st->eq, key, len);
  for (size_t i = 0; l != NULL && i < l->n; i++) {
    sub_topic *t = l->topics[i];
    if (!t->walked)
      t->ne_marks[p->row] = p->mark;
    else if (p->keep)
      walk_except_add(st, t, p->row);
  }
}

/*
 * Marks the ne-only topics whose filter names the old row's value or the
 * new row's (one lookup per row and column); returns this match's mark.
 * present[c] (of those columns) gets bit 0 when the old row has a value
 * in column c (not NULL), bit 1 when the new row has: asked once a
 * change here rather than once a topic. When some walked topic may match
 * the change, it is kept for the walk (st->walk), and the walked topics
 * found are its exceptions.
 */
static uint64_t ne_mark(sub_index *idx, sub_table *st, const sub_change *change,
                        const cJSON *const *old_values, const cJSON *const *new_values,
                        uint8_t present[SUB_MAX_COLUMNS]) {
  ne_probe p = {++st->ne_mark, 0, false};
  uint64_t bits = 0;
  for (size_t c = 0; c < st->n_columns; c++) {
    if (st->ne_topics[c] == 0) continue;
    present[c] = (uint8_t)((old_values[c] != NULL && !cJSON_IsNull(old_values[c])) |
                           (new_values[c] != NULL && !cJSON_IsNull(new_values[c])) << 1);
    bits |= (uint64_t)present[c] << 2 * c;
  }
  p.keep = (bits & st->walk_columns) != 0;
  for (size_t c = 0; c < st->n_columns; c++) {
    if (st->ne_topics[c] == 0) continue;
    p.row = 0;
    eq_value_key(st, (uint8_t)c, old_values[c], true, ne_lookup, &p);
    p.row = 1;
    eq_value_key(st, (uint8_t)c, new_values[c], true, ne_lookup, &p);
  }
  if (p.keep) {
    if (st->n_walk == st->walk_cap) {
      st->walk_cap = st->walk_cap == 0 ? 16 : st->walk_cap * 2;
      st->walk = mem_realloc(st->walk, st->walk_cap * sizeof(*st->walk));
    }
    if (st->n_walk == 0) {
      st->walk_next = idx->walk_tables;
      idx->walk_tables = st;
    }
    st->walk[st->n_walk++] = (struct walk_change){bits, change->walk_id};
  }
  return p.mark;
}

/* An ne-only topic's test (after ne_mark): a row with a value in its column it does not name. */
static bool ne_matches(const sub_topic *t, const uint8_t present[SUB_MAX_COLUMNS], uint64_t mark) {
  unsigned has = present[t->ne_column];
  return ((has & 1) && t->ne_marks[0] != mark) || ((has & 2) && t->ne_marks[1] != mark);
}

/* The table's filtered topics in (order, uri) order; sorted again only after they changed. */
static sub_topic *const *filtered_sorted(sub_table *st) {
  if (!st->sorted_stale) return st->filtered_sorted;
  if (st->sorted_cap < st->n_filtered) {
    free(st->filtered_sorted);
    st->sorted_cap = st->n_filtered * 2;
    st->filtered_sorted = mem_alloc(st->sorted_cap * sizeof(sub_topic *));
  }
  size_t n = 0;
  for (sub_topic *t = st->filtered; t != NULL; t = t->next) st->filtered_sorted[n++] = t;
  qsort(st->filtered_sorted, n, sizeof(sub_topic *), sub_topic_compare);
  st->sorted_stale = false;
  return st->filtered_sorted;
}

/* Parts the table's filtered topics into the tested and the walked, if they may have changed. */
static void filtered_parts(const sub_index *idx, sub_table *st) {
  if (!st->sorted_stale && !st->walk_stale) return;
  assert(st->n_walk == 0); /* walked before their topics changed (sub_index_walk) */
  st->n_tested = st->n_walked = 0;
  st->walk_columns = 0;
  st->walk_stale = false;
  if (st->n_filtered == 0) return;
  sub_topic *const *all = filtered_sorted(st);
  if (st->parts_cap < st->n_filtered) {
    free(st->tested);
    free(st->walked);
    st->parts_cap = st->n_filtered * 2;
    st->tested = mem_alloc(st->parts_cap * sizeof(sub_topic *));
    st->walked = mem_alloc(st->parts_cap * sizeof(sub_topic *));
  }
  for (size_t i = 0; i < st->n_filtered; i++) {
    sub_topic *t = all[i];
    t->walked = t->ne_column != SUB_NO_COLUMN && idx->walkable != NULL &&
                idx->walkable(t, idx->walkable_data);
    if (t->walked) {
      st->walked[st->n_walked++] = t;
      st->walk_columns |= (uint64_t)3 << 2 * t->ne_column;
    } else {
      st->tested[st->n_tested++] = t;
    }
  }
}

/*
 * The walk_ids of the kept changes in which some row has a value in
 * column col (an ne-only topic's, matched by all of them but its
 * exceptions) into ids; how many.
 */
static size_t walk_column(const sub_table *st, unsigned col, uint32_t *ids) {
  size_t n = 0;
  for (size_t j = 0; j < st->n_walk; j++)
    if ((st->walk[j].present >> 2 * col & 3) != 0) ids[n++] = st->walk[j].id;
  return n;
}

/* ...and those of t, a topic with exceptions, which it forgets. */
static size_t walk_excepted(const sub_table *st, sub_topic *t, uint32_t *ids) {
  size_t k = st->n_walk; /* filled from the end: the chain runs from the last change back */
  uint32_t e = t->walk_except;
  for (size_t j = st->n_walk; j-- > 0;) {
    unsigned has = (unsigned)(st->walk[j].present >> 2 * t->ne_column) & 3;
    for (; e != 0 && st->except[e - 1].change == j; e = st->except[e - 1].prev)
      has &= ~st->except[e - 1].row;
    if (has != 0) ids[--k] = st->walk[j].id;
  }
  t->walk_except = 0;
  memmove(ids, ids + k, (st->n_walk - k) * sizeof(*ids));
  return st->n_walk - k;
}

void sub_index_walk(sub_index *idx, sub_walk_fn *fn, void *data) {
  while (idx->walk_tables != NULL) {
    sub_table *st = idx->walk_tables;
    idx->walk_tables = st->walk_next;
    st->walk_next = NULL;
    if (idx->walk_ids_cap < 2 * st->n_walk) {
      idx->walk_ids_cap = 2 * st->n_walk;
      idx->walk_ids = mem_realloc(idx->walk_ids, idx->walk_ids_cap * sizeof(*idx->walk_ids));
    }
    /* A column's changes, for every topic on it without exceptions; and one topic's. */
    uint32_t *column_ids = idx->walk_ids, *own = idx->walk_ids + st->n_walk;
    unsigned col = SUB_NO_COLUMN;
    size_t n_column = 0;
    for (size_t i = 0; i < st->n_walked; i++) { /* fn starts the lines of those ahead */
      sub_topic *t = st->walked[i];
      if (t->walk_except != 0) {
        size_t n = walk_excepted(st, t, own);
        if (n > 0) fn(st->walked, st->n_walked, i, own, n, data);
        continue;
      }
      if (t->ne_column != col) {
        col = t->ne_column;
        n_column = walk_column(st, col, column_ids);
      }
      if (n_column > 0) fn(st->walked, st->n_walked, i, column_ids, n_column, data);
    }
    st->n_walk = st->n_except = 0;
  }
}

bool sub_index_match(sub_index *idx, const sub_change *change,
                     void (*fn)(sub_topic *topic, void *data), void *data) {
  sub_table *st = strmap_get(&idx->tables, change->table, strlen(change->table));
  if (st == NULL) return false;
  match_set m = {.n = 0, .cap = ARRAY_LEN(m.fixed)};
  m.list = m.fixed;
  match_records(idx, change, change->key, match_collect, &m);
  if (change->old_key != NULL && strcmp(change->old_key, change->key) != 0)
    match_records(idx, change, change->old_key, match_collect, &m);
  for (sub_topic *t = st->collections; t != NULL; t = t->next) match_collect(t, &m);
  const cJSON *old_values[SUB_MAX_COLUMNS], *new_values[SUB_MAX_COLUMNS];
  if (st->n_filtered > 0 || st->n_eq > 0 || st->n_range > 0) {
    table_values(st, change->old_row, old_values);
    table_values(st, change->new_row, new_values);
  }
  if (st->n_eq > 0) eq_match(st, change, old_values, new_values, &m);
  if (st->n_range > 0) range_match(st, change, old_values, new_values, &m);
  if (m.n > 1) {
    qsort(m.list, m.n, sizeof(sub_topic *), match_compare);
    size_t n = 1; /* an indexed topic found through both rows' values, or two keys, once */
    for (size_t j = 1; j < m.n; j++)
      if (m.list[j] != m.list[n - 1]) m.list[n++] = m.list[j];
    m.n = n;
  }
  /* Merged with the tested filtered topics that match, which are already in order. */
  filtered_parts(idx, st);
  sub_topic *const *filtered = st->tested;
  size_t n_walk = st->n_walk;
  uint8_t present[SUB_MAX_COLUMNS];
  uint64_t mark = st->n_ne > 0 ? ne_mark(idx, st, change, old_values, new_values, present) : 0;
  size_t i = 0;
  for (size_t j = 0; j < st->n_tested; j++) {
    sub_topic *t = filtered[j];
    /* A topic's line is needed at once: started 8 ahead, as the fan-out does (topics_prefetch). */
    if (j + 8 < st->n_tested) mem_prefetch(filtered[j + 8]);
    if (t->ne_column != SUB_NO_COLUMN ? !ne_matches(t, present, mark)
                                      : !topic_filters_match(t, change->old_row, old_values) &&
                                            !topic_filters_match(t, change->new_row, new_values))
      continue;
    while (i < m.n && sub_topic_compare(&m.list[i], &t) < 0) fn(m.list[i++], data);
    fn(t, data);
  }
  while (i < m.n) fn(m.list[i++], data);
  if (m.list != m.fixed) free(m.list);
  return st->n_walk > n_walk;
}

bool sub_topic_matches(const sub_topic *t, const sub_change *change) {
  if (strcmp(t->parsed.table, change->table) != 0) return false;
  switch (t->parsed.kind) {
  case URI_RECORD:
    return (strcmp(t->parsed.key, change->key) == 0 ||
            (change->old_key != NULL && strcmp(t->parsed.key, change->old_key) == 0)) &&
           record_in_scope(t, change);
  case URI_FILTERED:
    return sub_filters_match(&t->parsed, change->old_row) ||
           sub_filters_match(&t->parsed, change->new_row);
  default: return true;
  }
}

sub_topic *sub_index_find(const sub_index *idx, const char *key) {
  return strmap_get(&idx->topics, key, strlen(key));
}
