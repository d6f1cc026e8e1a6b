/*
 * Unit tests of resource URIs: every accepted form (collection, record
 * with encoded keys, filtered, paged, about, schema), every malformed
 * case (-EINVAL), foreign URIs (-ENOENT), percent-coding both ways, and
 * that uri_format(uri_parse(x)) is canonical and a fixed point, and
 * that a filter value reads as a number exactly when SQLite reads it so.
 */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/uri.h"

#define BASE "http://127.0.0.1:9926"

static void expect_rc(const char *text, int want) {
  uri_t u;
  int rc = uri_parse(BASE, text, &u);
  if (rc != want) {
    fprintf(stderr, "uri_parse(\"%s\") = %d, wanted %d\n", text, rc, want);
    CHECK(rc == want);
  }
  uri_finish(&u);
}

/* Parses text, formats it, checks the canonical text and that it is a fixed point. */
static void expect_canonical(const char *text, const char *want) {
  uri_t u, v;
  CHECK_INT_EQ(uri_parse(BASE, text, &u), 0);
  char *once = uri_format(BASE, &u);
  CHECK_STR_EQ(once, want);
  CHECK_INT_EQ(uri_parse(BASE, once, &v), 0);
  char *twice = uri_format(BASE, &v);
  CHECK_STR_EQ(twice, once);
  CHECK_INT_EQ(u.kind, v.kind);
  free(once);
  free(twice);
  uri_finish(&u);
  uri_finish(&v);
}

static void test_collection(void) {
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Dog", &u), 0);
  CHECK_INT_EQ(u.kind, URI_COLLECTION);
  CHECK_STR_EQ(u.table, "Dog");
  CHECK(u.key == NULL);
  CHECK_INT_EQ(u.n_filters, 0);
  CHECK_INT_EQ(u.limit, 0);
  CHECK(u.cursor == NULL);
  uri_finish(&u);
  CHECK(u.table == NULL);

  CHECK_INT_EQ(uri_parse(BASE, BASE "/My%20Table", &u), 0);
  CHECK_STR_EQ(u.table, "My Table");
  uri_finish(&u);
}

static void test_record(void) {
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Dog/42", &u), 0);
  CHECK_INT_EQ(u.kind, URI_RECORD);
  CHECK_STR_EQ(u.table, "Dog");
  CHECK_STR_EQ(u.key, "42");
  uri_finish(&u);

  /* encoded '/', space, '+', '%' and UTF-8 in the key */
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Doc/a%2Fb%20c+d%25e%C3%A9", &u), 0);
  CHECK_INT_EQ(u.kind, URI_RECORD);
  CHECK_STR_EQ(u.key, "a/b c+d%e\xc3\xa9");
  uri_finish(&u);

  /* lowercase hex decodes too */
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Doc/%c3%a9", &u), 0);
  CHECK_STR_EQ(u.key, "\xc3\xa9");
  uri_finish(&u);

  /* uri_format_record encodes what parse decodes */
  char *s = uri_format_record(BASE, "Doc", "a/b c+d%e\xc3\xa9");
  CHECK_STR_EQ(s, BASE "/Doc/a%2Fb%20c%2Bd%25e%C3%A9");
  CHECK_INT_EQ(uri_parse(BASE, s, &u), 0);
  CHECK_STR_EQ(u.key, "a/b c+d%e\xc3\xa9");
  uri_finish(&u);
  free(s);

  s = uri_format_collection(BASE, "My Table");
  CHECK_STR_EQ(s, BASE "/My%20Table");
  free(s);
}

static void test_filtered_and_paging(void) {
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Dog?owner=Ann&breed=lab%20mix&age=", &u), 0);
  CHECK_INT_EQ(u.kind, URI_FILTERED);
  CHECK_STR_EQ(u.table, "Dog");
  CHECK_INT_EQ(u.n_filters, 3);
  CHECK_STR_EQ(u.filters[0].column, "age");
  CHECK_STR_EQ(u.filters[0].value, "");
  CHECK_STR_EQ(u.filters[1].column, "breed");
  CHECK_STR_EQ(u.filters[1].value, "lab mix");
  CHECK_STR_EQ(u.filters[2].column, "owner");
  CHECK_STR_EQ(u.filters[2].value, "Ann");
  uri_finish(&u);

  /* '+' is not a space; '=' inside an encoded value is kept; a bare one is an operator */
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?q=a+b%3Dc&x=1%3D2", &u), 0);
  CHECK_STR_EQ(u.filters[0].column, "q");
  CHECK_STR_EQ(u.filters[0].value, "a+b=c");
  CHECK_INT_EQ(u.filters[0].op, URI_EQ);
  CHECK_STR_EQ(u.filters[1].value, "1=2");
  uri_finish(&u);
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?x=1=2", &u), -EINVAL);
  CHECK(strstr(uri_error(), "unknown operator") != NULL);

  /* _limit and _cursor page a collection and are not filters */
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Dog?_limit=10&_cursor=abc%3D", &u), 0);
  CHECK_INT_EQ(u.kind, URI_COLLECTION);
  CHECK_INT_EQ(u.n_filters, 0);
  CHECK_INT_EQ(u.limit, 10);
  CHECK_STR_EQ(u.cursor, "abc=");
  uri_finish(&u);

  CHECK_INT_EQ(uri_parse(BASE, BASE "/Dog?_cursor=c&name=Rex&_limit=5", &u), 0);
  CHECK_INT_EQ(u.kind, URI_FILTERED);
  CHECK_INT_EQ(u.n_filters, 1);
  CHECK_STR_EQ(u.filters[0].column, "name");
  CHECK_INT_EQ(u.limit, 5);
  CHECK_STR_EQ(u.cursor, "c");
  uri_finish(&u);

  /* an encoded reserved name is still reserved */
  CHECK_INT_EQ(uri_parse(BASE, BASE "/Dog?%5Flimit=3", &u), 0);
  CHECK_INT_EQ(u.limit, 3);
  CHECK_INT_EQ(u.kind, URI_COLLECTION);
  uri_finish(&u);

  /* exactly URI_MAX_FILTERS filters are accepted */
  char text[1024] = BASE "/T?";
  for (int i = 0; i < URI_MAX_FILTERS; i++)
    sprintf(text + strlen(text), "%sc%02d=%d", i ? "&" : "", URI_MAX_FILTERS - i, i);
  CHECK_INT_EQ(uri_parse(BASE, text, &u), 0);
  CHECK_INT_EQ(u.n_filters, URI_MAX_FILTERS);
  CHECK_STR_EQ(u.filters[0].column, "c01");
  /* A copy owns its filters: it outlives the original and formats the same. */
  char *want = uri_format(BASE, &u);
  uri_t c = uri_copy(&u);
  uri_finish(&u);
  CHECK_INT_EQ(c.n_filters, URI_MAX_FILTERS);
  char *got = uri_format(BASE, &c);
  CHECK_STR_EQ(got, want);
  free(got);
  free(want);
  uri_finish(&c);
  strcat(text, "&c99=x");
  expect_rc(text, -EINVAL);
}

static void test_meta(void) {
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, "mcpsub://about", &u), 0);
  CHECK_INT_EQ(u.kind, URI_ABOUT);
  CHECK(u.table == NULL);
  uri_finish(&u);
  CHECK_INT_EQ(uri_parse(BASE, "mcpsub://schema/Dog", &u), 0);
  CHECK_INT_EQ(u.kind, URI_SCHEMA);
  CHECK_STR_EQ(u.table, "Dog");
  uri_finish(&u);
  CHECK_INT_EQ(uri_parse(BASE, "mcpsub://schema/My%20Table", &u), 0);
  CHECK_STR_EQ(u.table, "My Table");
  uri_finish(&u);
  /* the metadata URIs do not depend on the base */
  CHECK_INT_EQ(uri_parse("https://other.example", "mcpsub://about", &u), 0);
  uri_finish(&u);

  expect_rc("mcpsub://schema/", -EINVAL);
  expect_rc("mcpsub://schema/A/B", -EINVAL);
  expect_rc("mcpsub://schema/A%2FB", -EINVAL);
  expect_rc("mcpsub://schema/A?x=1", -EINVAL);
  expect_rc("mcpsub://schema/%zz", -EINVAL);
  expect_rc("mcpsub://nothing", -ENOENT);
  expect_rc("mcpsub://schema", -ENOENT);
  expect_rc("mcpsub://about/more", -ENOENT);
  expect_rc("mcpsub://aboutx", -ENOENT);
}

static void test_malformed(void) {
  expect_rc(BASE "/", -EINVAL);          /* empty table */
  expect_rc(BASE "//42", -EINVAL);       /* empty table with key */
  expect_rc(BASE "/?a=1", -EINVAL);      /* empty table with query */
  expect_rc(BASE "/Dog/", -EINVAL);      /* empty key */
  expect_rc(BASE "/Dog/a/b", -EINVAL);   /* unencoded '/' in key */
  expect_rc(BASE "/Dog%2FCat", -EINVAL); /* '/' in a table name */
  expect_rc(BASE "/Dog#frag", -EINVAL);
  expect_rc(BASE "/Dog/1#frag", -EINVAL);
  expect_rc(BASE "/Dog?a=1#frag", -EINVAL);
  expect_rc(BASE "/Dog/1?a=1", -EINVAL); /* query on a record */
  expect_rc(BASE "/Dog/1?_limit=1", -EINVAL);
  expect_rc(BASE "/Dog?a", -EINVAL); /* no '=' */
  expect_rc(BASE "/Dog?", -EINVAL);
  expect_rc(BASE "/Dog?a=1&", -EINVAL);
  expect_rc(BASE "/Dog?a=1&&b=2", -EINVAL);
  expect_rc(BASE "/Dog?=1", -EINVAL);                    /* empty name */
  expect_rc(BASE "/Dog?_limit=1&_limit=2", -EINVAL);     /* repeated */
  expect_rc(BASE "/Dog?_cursor=a&%5Fcursor=b", -EINVAL); /* repeated once decoded */
  expect_rc(BASE "/Dog?_limit=0", -EINVAL);
  expect_rc(BASE "/Dog?_limit=-1", -EINVAL);
  expect_rc(BASE "/Dog?_limit=abc", -EINVAL);
  expect_rc(BASE "/Dog?_limit=", -EINVAL);
  expect_rc(BASE "/Dog?_limit=5x", -EINVAL);
  expect_rc(BASE "/Dog?_limit=99999999999999999999999", -EINVAL);
  expect_rc(BASE "/Dog?_limit=1&_limit=2", -EINVAL);
  expect_rc(BASE "/Dog?_cursor=a&_cursor=b", -EINVAL);
  expect_rc(BASE "/Dog/%", -EINVAL); /* bad escapes */
  expect_rc(BASE "/Dog/%4", -EINVAL);
  expect_rc(BASE "/Dog/%G0", -EINVAL);
  expect_rc(BASE "/Dog/a%00b", -EINVAL); /* encoded NUL */
  expect_rc(BASE "/D%og", -EINVAL);
  expect_rc(BASE "/Dog?a=%ZZ", -EINVAL);
  expect_rc(BASE "/Dog?a%=1", -EINVAL);
  expect_rc(BASE "/Dog/a\nb", -EINVAL); /* raw control character */

  /* length bound */
  size_t n = URI_MAX_LEN + 1;
  char *big = malloc(n + 1);
  memset(big, 'k', n);
  memcpy(big, BASE "/T/", strlen(BASE "/T/"));
  big[n] = '\0';
  expect_rc(big, -EINVAL);
  big[n - 1] = '\0'; /* exactly URI_MAX_LEN */
  expect_rc(big, 0);
  free(big);
}

static void test_foreign(void) {
  expect_rc("http://127.0.0.1:9927/Dog", -ENOENT);
  expect_rc("https://127.0.0.1:9926/Dog", -ENOENT);
  expect_rc("http://127.0.0.1:99261/Dog", -ENOENT); /* base is a prefix, not a match */
  expect_rc(BASE, -ENOENT);
  expect_rc(BASE "?a=1", -ENOENT);
  expect_rc("file:///etc/passwd", -ENOENT);
  expect_rc("", -ENOENT);
  expect_rc("Dog", -ENOENT);
  expect_rc("MCPSUB://about", -ENOENT);

  /* a base with a path works the same */
  uri_t u;
  CHECK_INT_EQ(uri_parse("https://h.example/api", "https://h.example/api/T/1", &u), 0);
  CHECK_INT_EQ(u.kind, URI_RECORD);
  CHECK_STR_EQ(u.key, "1");
  uri_finish(&u);
  CHECK_INT_EQ(uri_parse("https://h.example/api", "https://h.example/T/1", &u), -ENOENT);
  uri_finish(&u);
}

static void test_codec(void) {
  buf_t b;
  buf_init(&b);
  const char *all = "AZaz09-._~ /?#[]@!$&'()*+,;=%\"<>\\^`{|}";
  uri_encode_component(&b, all, strlen(all));
  CHECK_STR_EQ(b.data, "AZaz09-._~%20%2F%3F%23%5B%5D%40%21%24%26%27%28%29%2A%2B%2C%3B%3D%25"
                       "%22%3C%3E%5C%5E%60%7B%7C%7D");
  char *back = uri_decode_component(b.data, b.len);
  CHECK_STR_EQ(back, all);
  free(back);
  buf_reset(&b);
  uri_encode_component(&b, "\xc3\xa9\x01\x7f\xff", 5);
  CHECK_STR_EQ(b.data, "%C3%A9%01%7F%FF");
  buf_finish(&b);

  char *d = uri_decode_component("a%2fb+c", 7);
  CHECK_STR_EQ(d, "a/b+c");
  free(d);
  d = uri_decode_component("abc%41", 6);
  CHECK_STR_EQ(d, "abcA");
  free(d);
  CHECK(uri_decode_component("abc%41", 4) == NULL); /* len honoured: "%" cut short */
  d = uri_decode_component("abcdef", 3);
  CHECK_STR_EQ(d, "abc");
  free(d);
  d = uri_decode_component("", 0);
  CHECK_STR_EQ(d, "");
  free(d);
  CHECK(uri_decode_component("%", 1) == NULL);
  CHECK(uri_decode_component("%a", 2) == NULL);
  CHECK(uri_decode_component("%ag", 3) == NULL);
  CHECK(uri_decode_component("%00", 3) == NULL);
  /* UTF-8 only, escaped or not: whole sequences of one to four bytes. */
  static const char *const utf8[] = {"%C3%A9",       "\xc3\xa9",     "%E2%82%AC",
                                     "%F0%9F%98%80", "%F4%8F%BF%BF", "%ED%9F%BF"};
  for (size_t i = 0; i < sizeof(utf8) / sizeof(utf8[0]); i++) {
    d = uri_decode_component(utf8[i], strlen(utf8[i]));
    CHECK(d != NULL);
    free(d);
  }
  static const char *const not_utf8[] = {
      "%C3",       "\xc3",         "%A9",          "%C3%A9%A9",    "%C1%81", "%E0%80%80",
      "%ED%A0%80", "%F0%80%80%80", "%F4%90%80%80", "%F5%80%80%80", "%E2%82", "%FF"};
  for (size_t i = 0; i < sizeof(not_utf8) / sizeof(not_utf8[0]); i++)
    CHECK(uri_decode_component(not_utf8[i], strlen(not_utf8[i])) == NULL);
}

static void test_canonical(void) {
  expect_canonical(BASE "/Dog", BASE "/Dog");
  expect_canonical(BASE "/Dog/42", BASE "/Dog/42");
  expect_canonical(BASE "/My%20Table/a%2fb", BASE "/My%20Table/a%2Fb");
  expect_canonical(BASE "/Doc/%7Euser%2Dx", BASE "/Doc/~user-x");
  expect_canonical(BASE "/Doc/caf\xc3\xa9 x", BASE "/Doc/caf%C3%A9%20x"); /* raw bytes tolerated */
  expect_canonical(BASE "/Dog?z=1&a=b%20c&m=%2B", BASE "/Dog?a=b%20c&m=%2B&z=1");
  expect_canonical(BASE "/Dog?_cursor=xy%3D&_limit=20&b=1",
                   BASE "/Dog?b=1&_limit=20&_cursor=xy%3D");
  expect_canonical(BASE "/Dog?_limit=007", BASE "/Dog?_limit=7");
  expect_canonical(BASE "/Dog?a=", BASE "/Dog?a=");
  expect_canonical("mcpsub://about", "mcpsub://about");
  expect_canonical("mcpsub://schema/My%20Table", "mcpsub://schema/My%20Table");

  /* uri_format sorts filters of a hand-built uri_t */
  uri_t u = {0};
  u.kind = URI_FILTERED;
  u.table = "T";
  uri_filter filters[] = {{.column = "z", .value = "1"}, {.column = "a", .value = "2"}};
  u.n_filters = 2;
  u.filters = filters;
  char *s = uri_format(BASE, &u);
  CHECK_STR_EQ(s, BASE "/T?a=2&z=1");
  free(s);
}

static void expect_bad_filter(const char *query, const char *why) {
  char text[512];
  snprintf(text, sizeof(text), BASE "/T?%s", query);
  uri_t u;
  int rc = uri_parse(BASE, text, &u);
  if (rc != -EINVAL || strstr(uri_error(), why) == NULL)
    fprintf(stderr, "%s: %d \"%s\", wanted -EINVAL with \"%s\"\n", query, rc, uri_error(), why);
  CHECK(rc == -EINVAL && strstr(uri_error(), why) != NULL);
}

static void test_operators(void) {
  static const struct {
    const char *query;
    uri_op op;
    const char *value;
  } ok[] = {
      {"n=gt=5", URI_GT, "5"},   {"n=ge=-1.5", URI_GE, "-1.5"},   {"n=lt=10", URI_LT, "10"},
      {"n=le=x", URI_LE, "x"},   {"n=ne=", URI_NE, ""},           {"s=sw=ab%20c", URI_SW, "ab c"},
      {"s=ct=%7C", URI_CT, "|"}, {"s=gt%3D5", URI_EQ, "gt=5"},    {"s=%2A", URI_EQ, "*"},
      {"s=gx=1", URI_EQ, NULL}, /* not an operator: then the '=' is bare (below) */
      {"n=eq=5", URI_EQ, "5"},   {"s=eq=gt%3D5", URI_EQ, "gt=5"}, {"s=eq=", URI_EQ, ""},
  };
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    if (ok[i].value == NULL) continue;
    char text[256];
    snprintf(text, sizeof(text), BASE "/T?%s", ok[i].query);
    uri_t u;
    CHECK_INT_EQ(uri_parse(BASE, text, &u), 0);
    CHECK_INT_EQ(u.kind, URI_FILTERED);
    CHECK_INT_EQ(u.filters[0].op, ok[i].op);
    CHECK_STR_EQ(u.filters[0].value, ok[i].value);
    /* The canonical form reads back the same. */
    char *again = uri_format(BASE, &u);
    uri_t v;
    CHECK_INT_EQ(uri_parse(BASE, again, &v), 0);
    CHECK_INT_EQ(v.filters[0].op, ok[i].op);
    CHECK_STR_EQ(v.filters[0].value, ok[i].value);
    uri_finish(&v);
    free(again);
    uri_finish(&u);
  }
  /* Alternatives, each decoded; the canonical form keeps their order. */
  uri_t u;
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?c=red|gr%C3%A9en|a%7Cb", &u), 0);
  CHECK_INT_EQ(u.filters[0].op, URI_IN);
  CHECK_INT_EQ(u.filters[0].n_alts, 3);
  CHECK_STR_EQ(u.filters[0].alts[1], "gr\xc3\xa9"
                                     "en");
  CHECK_STR_EQ(u.filters[0].alts[2], "a|b");
  CHECK_STR_EQ(u.filters[0].value, "red");
  uri_t c = uri_copy(&u);
  char *text = uri_format(BASE, &c);
  CHECK_STR_EQ(text, BASE "/T?c=red|gr%C3%A9en|a%7Cb");
  free(text);
  uri_finish(&c);
  uri_finish(&u);
  expect_bad_filter("s=gx=1", "unknown operator");
  expect_bad_filter("s=re*", "wildcards");
  expect_bad_filter("s=a||b", "empty alternative");
  expect_bad_filter("s=a|", "empty alternative");
  expect_bad_filter("n=gt=1|2", "equality only");
  expect_bad_filter("s=sw=", "need a value");
  expect_bad_filter("s=gt=%ZZ", "%-escape");
  /* A column's several filters: all kept, in one order whatever the query's (a range). */
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?n=lt=9&m=1&n=ge=1&n=ne=5", &u), 0);
  CHECK_INT_EQ(u.n_filters, 4);
  char *canon = uri_format(BASE, &u);
  CHECK_STR_EQ(canon, BASE "/T?m=1&n=ne=5&n=ge=1&n=lt=9");
  uri_finish(&u);
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?n=ne=5&n=ge=1&m=1&n=lt=9", &u), 0);
  char *again = uri_format(BASE, &u);
  CHECK_STR_EQ(again, canon);
  free(again);
  free(canon);
  uri_finish(&u);
  expect_bad_filter("s=eq=gt=5", "unknown operator"); /* one operator: the rest is the value */
  expect_bad_filter("s=eq=sw=a", "unknown operator");
  /* Not UTF-8: a lone lead byte, a stray continuation byte, an overlong, a surrogate, > U+10FFFF.
   */
  expect_bad_filter("s=sw=%C3", "UTF-8");
  expect_bad_filter("s=ct=%A9", "UTF-8");
  expect_bad_filter("s=%C0%AF", "UTF-8");
  expect_bad_filter("s=%ED%A0%80", "UTF-8");
  expect_bad_filter("s=%F4%90%80%80", "UTF-8");
  expect_bad_filter("s=a|%E9", "UTF-8");
  expect_bad_filter("%FF=1", "UTF-8");
  CHECK_INT_EQ(uri_parse(BASE, BASE "/T?c=eq=a|b", &u), 0); /* spelled-out equality, alternatives */
  CHECK_INT_EQ(u.filters[0].op, URI_IN);
  CHECK_INT_EQ(u.filters[0].n_alts, 2);
  uri_finish(&u);
  char many[512] = "s=0";
  for (int i = 1; i <= 32; i++)
    snprintf(many + strlen(many), sizeof(many) - strlen(many), "|%d", i);
  expect_bad_filter(many, "more than 32 alternatives");
}

/*
 * SQLite's own reading of text as a number, the one uri_number promises to
 * make: text put into a column of NUMERIC affinity is stored as a number
 * exactly when it reads as one (*i: as an integer, when it is one).
 */
static bool sqlite_number(sqlite3 *db, const char *text, double *d, bool *is_int, int64_t *i) {
  sqlite3_stmt *ins, *sel;
  CHECK(sqlite3_prepare_v2(db, "INSERT INTO t VALUES (?1)", -1, &ins, NULL) == SQLITE_OK);
  CHECK(sqlite3_bind_text(ins, 1, text, -1, SQLITE_STATIC) == SQLITE_OK);
  CHECK(sqlite3_step(ins) == SQLITE_DONE);
  sqlite3_finalize(ins);
  CHECK(sqlite3_prepare_v2(db, "SELECT n FROM t", -1, &sel, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(sel) == SQLITE_ROW);
  int type = sqlite3_column_type(sel, 0);
  *d = sqlite3_column_double(sel, 0);
  *is_int = type == SQLITE_INTEGER;
  *i = sqlite3_column_int64(sel, 0);
  sqlite3_finalize(sel);
  CHECK(sqlite3_exec(db, "DELETE FROM t", NULL, NULL, NULL) == SQLITE_OK);
  return type == SQLITE_INTEGER || type == SQLITE_FLOAT;
}

/*
 * Whether the text is a number must agree exactly, and an integer's value
 * (SQLite keeps one that reads as an integer within 64 bits as one, and a
 * real of an integer's value as that integer); a real's to the last bit
 * need not: SQLite converts with its own arithmetic (long double, which
 * valgrind, say, carries out as double), uri_number with strtod.
 */
static bool same_value(double a, double b) {
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= 1e-15 * fmax(fabs(a), fabs(b));
}

static void check_number_as_sqlite(sqlite3 *db, const char *text) {
  uri_num ours = {0};
  double theirs = 0;
  bool their_int = false;
  int64_t their_i = 0;
  bool a = uri_number(text, &ours), b = sqlite_number(db, text, &theirs, &their_int, &their_i);
  bool same = ours.is_int ? their_int && ours.i == their_i : same_value(ours.d, theirs);
  if (a != b || (a && !same)) {
    fprintf(stderr, "uri_number(\"%s\"): %d %g, SQLite: %d %g\n", text, a, ours.d, b, theirs);
    CHECK(false);
  }
}

/* SQLite's comparison of two numbers (bound as an integer when is_int). */
static int sqlite_compare(sqlite3 *db, const uri_num *x, const uri_num *y) {
  sqlite3_stmt *st;
  CHECK(sqlite3_prepare_v2(db, "SELECT (?1 > ?2) - (?1 < ?2)", -1, &st, NULL) == SQLITE_OK);
  const uri_num *v[] = {x, y};
  for (int k = 0; k < 2; k++)
    CHECK((v[k]->is_int ? sqlite3_bind_int64(st, k + 1, v[k]->i)
                        : sqlite3_bind_double(st, k + 1, v[k]->d)) == SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  int c = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return c;
}

/*
 * uri_num_compare against SQLite, on integers and doubles at a double's
 * edges of exactness; by hand first. SQLite compares an integer with a
 * double in long double: where that is no wider than a double (valgrind
 * carries it out so), SQLite itself cannot tell them apart, and only the
 * cases by hand are checked.
 */
static void test_number_compare(sqlite3 *db) {
  uri_num big = {9007199254740992.0, 9007199254740993, true},
          two53 = uri_num_of(9007199254740992.0);
  uri_num max = {9223372036854775808.0, INT64_MAX, true}, two63 = uri_num_of(9223372036854775808.0);
  CHECK(uri_num_compare(&big, &two53) > 0 && uri_num_compare(&two53, &big) < 0);
  CHECK(uri_num_compare(&max, &two63) < 0 && uri_num_compare(&two63, &max) > 0);
  uri_num half = uri_num_of(0.5), zero = {0, 0, true};
  CHECK(uri_num_compare(&half, &zero) > 0 && uri_num_compare(&zero, &zero) == 0);
  /* PostgreSQL's non-finite values: NaN above everything, infinity included, and equal to NaN. */
  uri_num nan = uri_num_of(NAN), inf = uri_num_of(INFINITY), ninf = uri_num_of(-INFINITY);
  CHECK(uri_num_compare(&nan, &nan) == 0);
  CHECK(uri_num_compare(&nan, &inf) > 0 && uri_num_compare(&inf, &nan) < 0);
  CHECK(uri_num_compare(&nan, &max) > 0 && uri_num_compare(&max, &nan) < 0);
  CHECK(uri_num_compare(&ninf, &zero) < 0 && uri_num_compare(&zero, &ninf) > 0);
  CHECK(uri_num_compare(&inf, &max) > 0 && uri_num_compare(&ninf, &half) < 0);
  sqlite3_stmt *st;
  CHECK(sqlite3_prepare_v2(db, "SELECT 9007199254740993 = 9007199254740992.0", -1, &st, NULL) ==
        SQLITE_OK);
  CHECK(sqlite3_step(st) == SQLITE_ROW);
  bool wide = sqlite3_column_int(st, 0) == 0;
  sqlite3_finalize(st);
  if (!wide) {
    fprintf(stderr, "test_number_compare: SQLite's long double is a double here: by hand only\n");
    return;
  }
  const int64_t ints[] = {0,
                          1,
                          -1,
                          9007199254740991,
                          9007199254740992,
                          9007199254740993,
                          -9007199254740993,
                          1152921504606846976,
                          1152921504606846977,
                          -1152921504606846977,
                          INT64_MAX,
                          INT64_MAX - 1,
                          INT64_MIN,
                          INT64_MIN + 1};
  const double doubles[] = {0.0,
                            0.5,
                            -0.5,
                            9007199254740992.0,
                            9007199254740994.0,
                            -9007199254740992.0,
                            1152921504606846976.0,
                            1152921504606847232.0,
                            -1152921504606846976.0,
                            9223372036854775808.0,
                            9223372036854774784.0,
                            -9223372036854775808.0,
                            1e300,
                            -1e300,
                            HUGE_VAL,
                            -HUGE_VAL};
  size_t ni = sizeof(ints) / sizeof(ints[0]), nd = sizeof(doubles) / sizeof(doubles[0]);
  uri_num all[64];
  size_t n = 0;
  for (size_t k = 0; k < ni; k++) all[n++] = (uri_num){(double)ints[k], ints[k], true};
  for (size_t k = 0; k < nd; k++) all[n++] = uri_num_of(doubles[k]);
  for (size_t a = 0; a < n; a++)
    for (size_t b = 0; b < n; b++) {
      int ours = uri_num_compare(&all[a], &all[b]), theirs = sqlite_compare(db, &all[a], &all[b]);
      if ((ours > 0) - (ours < 0) != theirs) {
        fprintf(stderr, "uri_num_compare(%d:%lld/%.17g, %d:%lld/%.17g): %d, SQLite: %d\n",
                all[a].is_int, (long long)all[a].i, all[a].d, all[b].is_int, (long long)all[b].i,
                all[b].d, ours, theirs);
        CHECK(false);
      }
    }
}

static void test_number(void) {
  uri_num d;
  CHECK(uri_number("12", &d) && d.d == 12 && d.is_int && d.i == 12);
  CHECK(uri_number(" -1.5e2 ", &d) && d.d == -150 && !d.is_int);
  CHECK(uri_number(".5", &d) && d.d == 0.5);
  CHECK(uri_number("5.", &d) && d.d == 5 && !d.is_int);
  CHECK(uri_number("1e999", &d) && isinf(d.d) && d.d > 0);
  CHECK(uri_number(" +1152921504606846977 ", &d) && d.is_int && d.i == 1152921504606846977);
  CHECK(uri_number("-9223372036854775808", &d) && d.is_int && d.i == INT64_MIN);
  CHECK(uri_number("9223372036854775808", &d) && !d.is_int && d.d == 9223372036854775808.0);
  CHECK(!uri_number("0x10", &d));
  CHECK(!uri_number("inf", &d));
  CHECK(!uri_number("NaN", &d));
  CHECK(!uri_number("", &d));
  CHECK(!uri_number(" ", &d));
  CHECK(!uri_number("1e", &d));
  CHECK(!uri_number("1 2", &d));
  CHECK(!uri_number("- 1", &d));
  CHECK(!uri_number("12abc", &d));

  /* Against SQLite itself: the cases above, and many made of a number's characters. */
  sqlite3 *db;
  CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db, "CREATE TABLE t (n NUMERIC)", NULL, NULL, NULL) == SQLITE_OK);
  static const char *const fixed[] = {"12",
                                      " -1.5e2 ",
                                      ".5",
                                      "5.",
                                      "1e999",
                                      "-1e999",
                                      "0x10",
                                      "inf",
                                      "Infinity",
                                      "NaN",
                                      "",
                                      " ",
                                      "1e",
                                      "1 2",
                                      "- 1",
                                      "12abc",
                                      "+.5e-3",
                                      "\t7\n",
                                      "\v8\f",
                                      "1.e5",
                                      ".",
                                      "+",
                                      "-0",
                                      "00",
                                      "1e+",
                                      "1E-2",
                                      "\r9\r",
                                      "1152921504606846977",
                                      " +1152921504606846977 ",
                                      "-1152921504606846977",
                                      "1152921504606846977.0",
                                      "9223372036854775807",
                                      "9223372036854775808",
                                      "-9223372036854775808",
                                      "-9223372036854775809",
                                      "0000000000000000000000009",
                                      "9007199254740993"};
  for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
    check_number_as_sqlite(db, fixed[i]);
  static const char alphabet[] = " \t+-.0123456789eEx";
  unsigned seed = 12345;
  for (int i = 0; i < 20000; i++) {
    char text[9];
    size_t len = (size_t)(i % 9);
    for (size_t j = 0; j < len; j++) {
      seed = seed * 1103515245u + 12345u;
      text[j] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
    }
    text[len] = '\0';
    check_number_as_sqlite(db, text);
  }
  test_number_compare(db);
  sqlite3_close(db);

  /* A filter keeps its value's number from the parse. */
  uri_t u;
  CHECK(uri_parse(BASE, BASE "/T?a=gt=%201.5&b=0x10&c=7|x", &u) == 0);
  CHECK(u.filters[0].is_number && u.filters[0].number.d == 1.5);
  CHECK(!u.filters[1].is_number);
  CHECK(u.filters[2].is_number && u.filters[2].number.is_int && u.filters[2].number.i == 7);
  uri_t c = uri_copy(&u);
  CHECK(c.filters[0].is_number && c.filters[0].number.d == 1.5);
  uri_finish(&c);
  uri_finish(&u);
}

int main(void) {
  RUN(test_collection);
  RUN(test_record);
  RUN(test_filtered_and_paging);
  RUN(test_meta);
  RUN(test_malformed);
  RUN(test_foreign);
  RUN(test_codec);
  RUN(test_canonical);
  RUN(test_operators);
  RUN(test_number);
  return 0;
}
