/*
 * Resource URIs: parsing a URI a client sent (resources/read, subscribe,
 * wait_and_read) into a uri_t, and formatting the canonical text we send
 * back in lists and notifications. Every URI a peer sends passes through
 * uri_parse, so it is strict: bounded length, bounded filters, no
 * ambiguous shapes (unencoded '/' in a key, a repeated _limit or _cursor,
 * a fragment), and it never consults the schema — table and column names
 * are checked by the caller against the store. Canonical form: table, key,
 * filter names and values percent-encoded with only RFC 3986 unreserved
 * characters left bare, filters sorted by column (then operator and
 * value), then _limit and _cursor;
 * uri_format(uri_parse(x)) is a fixed point.
 */
#include "common/uri.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define URI_META_SCHEME   "mcpsub://"
#define URI_ABOUT_TEXT    "mcpsub://about"
#define URI_SCHEMA_PREFIX "mcpsub://schema/"

/* Value of one hex digit, or -1. */
static int uri_hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* RFC 3986 unreserved: ALPHA / DIGIT / "-" / "." / "_" / "~". */
static bool uri_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

/*
 * Appends s[0..len) with every byte but the unreserved ones written as
 * %XX (uppercase hex). Bytes of UTF-8 sequences are encoded one by one.
 */
void uri_encode_component(buf_t *out, const char *s, size_t len) {
  static const char hex[] = "0123456789ABCDEF";
  buf_reserve(out, len);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (uri_unreserved(c)) {
      buf_append(out, &s[i], 1);
    } else {
      char esc[3] = {'%', hex[c >> 4], hex[c & 0xf]};
      buf_append(out, esc, 3);
    }
  }
}

/*
 * Is s[0..n) UTF-8 (RFC 3629): no stray continuation byte, no truncated or
 * overlong sequence, no surrogate, nothing above U+10FFFF?
 */
static bool uri_utf8(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k = c >= 0xC2 && c <= 0xDF   ? 1
               : c >= 0xE0 && c <= 0xEF ? 2
               : c >= 0xF0 && c <= 0xF4 ? 3
                                        : 0;
    if (k == 0 || n - i <= k) return false;
    /* The second byte's range is narrower after E0 (overlong), ED (surrogates), F0, F4. */
    unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t j = 2; j <= k; j++)
      if ((s[i + j] & 0xC0) != 0x80) return false;
    i += k + 1;
  }
  return true;
}

/*
 * Returns a new NUL-terminated string with each %XX of s[0..len) decoded
 * (either hex case). '+' is not a space. NULL when a '%' is not followed by
 * two hex digits, when the result would contain a NUL byte, or when it is
 * not UTF-8 (a name or value that no JSON answer could carry, and that
 * SQL's character functions and the subscriptions' byte comparisons would
 * read differently).
 */
char *uri_decode_component(const char *s, size_t len) {
  char *out = mem_alloc(len + 1);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (c == '\0') goto bad;
    if (c == '%') {
      if (len - i < 3) goto bad;
      int h = uri_hex_value(s[i + 1]), l = uri_hex_value(s[i + 2]);
      if (h < 0 || l < 0 || (h == 0 && l == 0)) goto bad;
      c = (char)(h << 4 | l);
      i += 2;
    }
    out[n++] = c;
  }
  out[n] = '\0';
  if (!uri_utf8((const unsigned char *)out, n)) goto bad;
  return out;
bad:
  free(out);
  return NULL;
}

/* Decodes s[0..len) as a table name: non-empty, no '/'. NULL when not. */
static char *uri_decode_table(const char *s, size_t len) {
  char *table = uri_decode_component(s, len);
  if (table && (table[0] == '\0' || strchr(table, '/'))) {
    free(table);
    return NULL;
  }
  return table;
}

/* Parses a _limit value: a positive decimal integer within long. */
static int uri_parse_limit(const char *v, long *out) {
  if (*v < '0' || *v > '9') return -EINVAL;
  long n = 0;
  for (; *v; v++) {
    if (*v < '0' || *v > '9') return -EINVAL;
    if (n > (LONG_MAX - (*v - '0')) / 10) return -EINVAL;
    n = n * 10 + (*v - '0');
  }
  if (n <= 0) return -EINVAL;
  *out = n;
  return 0;
}

static __thread const char *uri_last_error = "";

const char *uri_error(void) {
  return uri_last_error;
}

/* Records why parsing failed; returns -EINVAL. */
static int uri_fail(const char *why) {
  uri_last_error = why;
  return -EINVAL;
}

static const char *const uri_op_names[] = {
    [URI_EQ] = "",   [URI_NE] = "ne", [URI_GT] = "gt", [URI_GE] = "ge", [URI_LT] = "lt",
    [URI_LE] = "le", [URI_SW] = "sw", [URI_CT] = "ct", [URI_IN] = "",
};

const char *uri_op_name(uri_op op) {
  return uri_op_names[op];
}

/* SQLite's white space (sqlite3Isspace): what its numeric affinity skips around a number. */
static bool uri_number_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static const char *uri_digits(const char *p, size_t *n) {
  while (*p >= '0' && *p <= '9') {
    p++;
    (*n)++;
  }
  return p;
}

bool uri_number(const char *s, uri_num *n) {
  const char *p = s;
  while (uri_number_space(*p)) p++;
  const char *start = p;
  if (*p == '+' || *p == '-') p++;
  size_t digits = 0;
  p = uri_digits(p, &digits);
  bool integer = *p != '.' && *p != 'e' && *p != 'E';
  if (*p == '.') p = uri_digits(p + 1, &digits);
  if (digits == 0) return false;
  if (*p == 'e' || *p == 'E') {
    p++;
    if (*p == '+' || *p == '-') p++;
    size_t exp = 0;
    p = uri_digits(p, &exp);
    if (exp == 0) return false;
  }
  while (uri_number_space(*p)) p++;
  if (*p != '\0') return false;
  /* strtod reads the number from start as the grammar above did (out of range: +-HUGE_VAL). */
  n->d = strtod(start, NULL);
  n->is_int = false;
  if (integer) { /* as SQLite's text to integer: within 64 bits, else a real */
    errno = 0;
    long long i = strtoll(start, NULL, 10);
    n->is_int = errno == 0;
    n->i = (int64_t)i;
  }
  return true;
}

/* An integer with a double, as SQLite's sqlite3IntFloatCompare. */
static int uri_int_double_compare(int64_t i, double r) {
  if (r < -9223372036854775808.0) return 1;
  if (r >= 9223372036854775808.0 || isnan(r)) return -1; /* NaN: above every number */
  int64_t y = (int64_t)r; /* r toward zero: i differs from it, or r is i and maybe a fraction */
  if (i != y) return i < y ? -1 : 1;
  double s = (double)i; /* i is y, which r held: a double exactly */
  return s < r ? -1 : s > r;
}

int uri_num_compare(const uri_num *a, const uri_num *b) {
  if (a->is_int && b->is_int) return a->i < b->i ? -1 : a->i > b->i;
  if (a->is_int) return uri_int_double_compare(a->i, b->d);
  if (b->is_int) return -uri_int_double_compare(b->i, a->d);
  if (isnan(a->d) || isnan(b->d)) return (isnan(a->d) != 0) - (isnan(b->d) != 0);
  return a->d < b->d ? -1 : a->d > b->d;
}

void uri_filter_read_number(uri_filter *f) {
  f->is_number = uri_number(f->value, &f->number);
}

void uri_filter_free(uri_filter *f) {
  free(f->column);
  free(f->value);
  for (size_t i = 0; i < f->n_alts; i++) free(f->alts[i]);
  free(f->alts);
  memset(f, 0, sizeof(*f));
}

/*
 * Reads a filter's value text (undecoded, len bytes) into f: an operator
 * prefix, alternatives, or a plain value; each value decoded.
 */
static int uri_parse_filter_value(const char *v, size_t len, uri_filter *f) {
  f->op = URI_EQ;
  bool spelled = len >= 3 && memcmp(v, "eq=", 3) == 0; /* equality spelled out: the same filter */
  if (spelled) {
    v += 3;
    len -= 3;
  }
  for (uri_op op = URI_NE; !spelled && op <= URI_CT; op++) {
    if (len >= 3 && memcmp(v, uri_op_names[op], 2) == 0 && v[2] == '=') {
      f->op = op;
      v += 3;
      len -= 3;
      break;
    }
  }
  if (memchr(v, '=', len) != NULL)
    return uri_fail(
        "a filter has an unknown operator (use eq, ne, gt, ge, lt, le, sw, ct; a literal "
        "'=' is %3D)");
  if (memchr(v, '*', len) != NULL)
    return uri_fail("a filter has a bare '*': there are no wildcards (use sw= or ct=; a literal "
                    "'*' is %2A)");
  const char *bar = memchr(v, '|', len);
  if (bar != NULL && f->op != URI_EQ) return uri_fail("alternatives (v1|v2) go with equality only");
  if ((f->op == URI_SW || f->op == URI_CT) && len == 0) return uri_fail("sw= and ct= need a value");
  if (bar == NULL) {
    f->value = uri_decode_component(v, len);
    if (f->value == NULL) return uri_fail("a filter value has a bad %-escape or is not UTF-8");
    uri_filter_read_number(f);
    return 0;
  }
  f->op = URI_IN;
  f->alts = mem_calloc(URI_MAX_ALTS, sizeof(char *));
  for (const char *p = v, *end = v + len;;) {
    const char *next = memchr(p, '|', (size_t)(end - p));
    size_t n = next != NULL ? (size_t)(next - p) : (size_t)(end - p);
    if (n == 0) return uri_fail("a filter has an empty alternative");
    if (f->n_alts == URI_MAX_ALTS) return uri_fail("a filter has more than 32 alternatives");
    char *one = uri_decode_component(p, n);
    if (one == NULL) return uri_fail("a filter value has a bad %-escape or is not UTF-8");
    f->alts[f->n_alts++] = one;
    if (next == NULL) break;
    p = next + 1;
  }
  f->value = mem_strdup(f->alts[0]);
  uri_filter_read_number(f);
  return 0;
}

/*
 * Filters in the order of their columns, those of one column (a range,
 * several exclusions) by operator, then value: one order whatever the
 * query's, for the canonical form.
 */
static int uri_filter_cmp(const void *a, const void *b) {
  const uri_filter *fa = a, *fb = b;
  int c = strcmp(fa->column, fb->column);
  if (c != 0) return c;
  if (fa->op != fb->op) return fa->op < fb->op ? -1 : 1;
  return strcmp(fa->value, fb->value);
}

/*
 * Parses one "name=value" query parameter (undecoded, len bytes) into out:
 * _limit, _cursor or a filter. Rejects a repeated _limit or _cursor, empty
 * names, bad escapes.
 */
static int uri_parse_param(const char *p, size_t len, uri_t *out) {
  const char *eq = memchr(p, '=', len);
  if (eq == NULL || eq == p) return uri_fail("a query parameter without a name or a value");
  char *name = uri_decode_component(p, (size_t)(eq - p));
  char *value = NULL;
  int rc = -EINVAL;
  if (name == NULL) {
    rc = uri_fail("a query parameter name has a bad %-escape or is not UTF-8");
    goto out;
  }
  if (strcmp(name, "_limit") != 0 && strcmp(name, "_cursor") != 0) {
    /* A filter (a column may have several, all of which hold: a range): its value has a
     * grammar of its own, read before decoding. */
    if (out->n_filters == URI_MAX_FILTERS) {
      rc = uri_fail("more than 16 filters");
      goto out;
    }
    uri_filter f = {0};
    rc = uri_parse_filter_value(eq + 1, len - (size_t)(eq - p) - 1, &f);
    if (rc != 0) {
      uri_filter_free(&f);
      goto out;
    }
    f.column = name;
    name = NULL;
    /* Allocated to size: a topic keeps its copy for as long as it is subscribed. */
    out->filters = mem_realloc(out->filters, (out->n_filters + 1) * sizeof(uri_filter));
    out->filters[out->n_filters++] = f;
    goto out;
  }
  value = uri_decode_component(eq + 1, len - (size_t)(eq - p) - 1);
  rc = uri_fail("_limit must be a positive integer given once, _cursor given once");
  if (value == NULL) goto out;
  if (strcmp(name, "_limit") == 0) {
    if (out->limit != 0 || uri_parse_limit(value, &out->limit) < 0) goto out;
  } else {
    if (out->cursor) goto out;
    out->cursor = value;
    value = NULL;
  }
  rc = 0;
  uri_last_error = "";
out:
  free(name);
  free(value);
  return rc;
}

/* Parses the part after "{base}/": Table, Table/key, or Table?query. */
static int uri_parse_path(const char *path, uri_t *out) {
  if (strchr(path, '#')) return -EINVAL;
  const char *query = strchr(path, '?');
  size_t path_len = query ? (size_t)(query - path) : strlen(path);
  const char *slash = memchr(path, '/', path_len);
  size_t table_len = slash ? (size_t)(slash - path) : path_len;
  out->table = uri_decode_table(path, table_len);
  if (out->table == NULL) return -EINVAL;
  if (slash) {
    const char *key = slash + 1;
    size_t key_len = path_len - table_len - 1;
    if (key_len == 0 || memchr(key, '/', key_len) || query) return -EINVAL;
    out->key = uri_decode_component(key, key_len);
    if (out->key == NULL) return -EINVAL;
    out->kind = URI_RECORD;
    return 0;
  }
  if (query) {
    const char *p = query + 1;
    for (;;) {
      const char *amp = strchr(p, '&');
      size_t len = amp ? (size_t)(amp - p) : strlen(p);
      int rc = uri_parse_param(p, len, out);
      if (rc < 0) return rc;
      if (amp == NULL) break;
      p = amp + 1;
    }
    if (out->n_filters > 1)
      qsort(out->filters, out->n_filters, sizeof(out->filters[0]), uri_filter_cmp);
  }
  out->kind = out->n_filters > 0 ? URI_FILTERED : URI_COLLECTION;
  return 0;
}

/* Parses the mcpsub:// metadata URIs. */
static int uri_parse_meta(const char *text, uri_t *out) {
  if (strcmp(text, URI_ABOUT_TEXT) == 0) {
    out->kind = URI_ABOUT;
    return 0;
  }
  size_t plen = strlen(URI_SCHEMA_PREFIX);
  if (strncmp(text, URI_SCHEMA_PREFIX, plen) != 0) return -ENOENT;
  const char *name = text + plen;
  if (strpbrk(name, "/?#")) return -EINVAL;
  out->table = uri_decode_table(name, strlen(name));
  if (out->table == NULL) return -EINVAL;
  out->kind = URI_SCHEMA;
  return 0;
}

/*
 * See uri.h. Raw control characters are malformed; other bytes that should
 * have been percent-encoded (a space, UTF-8) are tolerated as they are and
 * encoded by uri_format. On failure out is left zeroed (uri_finish on it
 * is harmless).
 */
int uri_parse(const char *base, const char *text, uri_t *out) {
  memset(out, 0, sizeof(*out));
  uri_last_error = "";
  if (text == NULL || strnlen(text, URI_MAX_LEN + 1) > URI_MAX_LEN) return -EINVAL;
  for (const char *p = text; *p; p++) {
    if ((unsigned char)*p < 0x20 || *p == 0x7f) return -EINVAL;
  }
  int rc;
  size_t blen = base ? strlen(base) : 0;
  if (strncmp(text, URI_META_SCHEME, strlen(URI_META_SCHEME)) == 0)
    rc = uri_parse_meta(text, out);
  else if (strncmp(text, base ? base : "", blen) == 0 && text[blen] == '/')
    rc = uri_parse_path(text + blen + 1, out);
  else
    rc = -ENOENT;
  if (rc < 0) uri_finish(out);
  return rc;
}

/* Frees every string in u and zeroes it; safe on a zeroed or finished u. */
void uri_finish(uri_t *u) {
  if (u == NULL) return;
  free(u->table);
  free(u->key);
  free(u->cursor);
  for (size_t i = 0; i < u->n_filters; i++) uri_filter_free(&u->filters[i]);
  free(u->filters);
  memset(u, 0, sizeof(*u));
}

/* Appends base + "/" + encoded table. */
static void uri_append_collection(buf_t *b, const char *base, const char *table) {
  buf_append_str(b, base);
  buf_append(b, "/", 1);
  uri_encode_component(b, table, strlen(table));
}

char *uri_format_collection(const char *base, const char *table) {
  buf_t b;
  buf_init(&b);
  uri_append_collection(&b, base, table);
  return buf_steal(&b);
}

char *uri_format_record(const char *base, const char *table, const char *key) {
  buf_t b;
  buf_init(&b);
  uri_append_collection(&b, base, table);
  buf_append(&b, "/", 1);
  uri_encode_component(&b, key, strlen(key));
  return buf_steal(&b);
}

/* Appends "?" or "&" then name=value, both encoded. */
static void uri_append_param(buf_t *b, bool *first, const char *name, const char *value) {
  buf_append(b, *first ? "?" : "&", 1);
  *first = false;
  uri_encode_component(b, name, strlen(name));
  buf_append(b, "=", 1);
  uri_encode_component(b, value, strlen(value));
}

/* Appends "?" or "&" then a filter: column=[op=]value, or column=v1|v2, each part encoded. */
static void uri_append_filter(buf_t *b, bool *first, const uri_filter *f) {
  buf_append(b, *first ? "?" : "&", 1);
  *first = false;
  uri_encode_component(b, f->column, strlen(f->column));
  buf_append(b, "=", 1);
  if (f->op == URI_IN) {
    for (size_t i = 0; i < f->n_alts; i++) {
      if (i > 0) buf_append(b, "|", 1);
      uri_encode_component(b, f->alts[i], strlen(f->alts[i]));
    }
    return;
  }
  if (f->op != URI_EQ) {
    buf_append_str(b, uri_op_names[f->op]);
    buf_append(b, "=", 1);
  }
  uri_encode_component(b, f->value, strlen(f->value));
}

/*
 * Canonical text of u. Filters are written sorted by column whatever their
 * order in u (a caller may fill a uri_t by hand); _limit only when > 0,
 * _cursor only when not NULL. A record ignores query fields.
 */
char *uri_format(const char *base, const uri_t *u) {
  buf_t b;
  buf_init(&b);
  switch (u->kind) {
  case URI_ABOUT: buf_append_str(&b, URI_ABOUT_TEXT); break;
  case URI_SCHEMA:
    buf_append_str(&b, URI_SCHEMA_PREFIX);
    uri_encode_component(&b, u->table, strlen(u->table));
    break;
  case URI_RECORD:
    uri_append_collection(&b, base, u->table);
    buf_append(&b, "/", 1);
    uri_encode_component(&b, u->key, strlen(u->key));
    break;
  case URI_COLLECTION:
  case URI_FILTERED: {
    uri_append_collection(&b, base, u->table);
    uri_filter sorted[URI_MAX_FILTERS];
    size_t n = u->n_filters < URI_MAX_FILTERS ? u->n_filters : URI_MAX_FILTERS;
    if (n > 0) memcpy(sorted, u->filters, n * sizeof(sorted[0])); /* filters: NULL when none */
    if (n > 1) qsort(sorted, n, sizeof(sorted[0]), uri_filter_cmp);
    bool first = true;
    for (size_t i = 0; i < n; i++) uri_append_filter(&b, &first, &sorted[i]);
    if (u->limit > 0) {
      char num[24];
      snprintf(num, sizeof(num), "%ld", u->limit);
      uri_append_param(&b, &first, "_limit", num);
    }
    if (u->cursor) uri_append_param(&b, &first, "_cursor", u->cursor);
    break;
  }
  }
  return buf_steal(&b);
}

uri_t uri_copy(const uri_t *u) {
  uri_t c = *u;
  c.table = u->table != NULL ? mem_strdup(u->table) : NULL;
  c.key = u->key != NULL ? mem_strdup(u->key) : NULL;
  c.cursor = NULL;
  c.limit = 0;
  c.filters = u->n_filters > 0 ? mem_alloc(u->n_filters * sizeof(uri_filter)) : NULL;
  for (size_t i = 0; i < u->n_filters; i++) {
    const uri_filter *f = &u->filters[i];
    c.filters[i] = *f; /* op, numeric, n_alts */
    c.filters[i].column = mem_strdup(f->column);
    c.filters[i].value = mem_strdup(f->value);
    if (f->alts != NULL) {
      c.filters[i].alts = mem_alloc(f->n_alts * sizeof(char *));
      for (size_t j = 0; j < f->n_alts; j++) c.filters[i].alts[j] = mem_strdup(f->alts[j]);
    }
  }
  return c;
}
