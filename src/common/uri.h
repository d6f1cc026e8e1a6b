/*
 * Resource URIs and percent-encoding. Pure: no I/O, no schema knowledge
 * (callers check table and column names against the store).
 *
 *   {base}/{Table}                 collection
 *   {base}/{Table}/{key}           record; key percent-encoded
 *   {base}/{Table}?col=v&col2=v2   filtered collection (every filter holds)
 *
 * A filter is col=v (equals), col=v1|v2 (any of), or col=OP=v with OP one
 * of gt, ge, lt, le (ordered), ne (not equal), sw (text starting with),
 * ct (text containing). The grammar is read before percent-decoding: a
 * value holding a literal '=', '|' or '*' percent-encodes it (%3D, %7C,
 * %2A); a bare '=' after the first, a bare '*', or an empty alternative is
 * malformed (uri_error says why).
 *   mcpsub://about                 metadata
 *   mcpsub://schema/{Table}        metadata
 *
 * In a collection URI, the reserved query parameters "_limit" and
 * "_cursor" page a read; they are not filters. Either of them repeated, an
 * empty name, or a "/" in a table name is malformed; a column may have
 * several filters, all of which hold (a range: ?n=ge=1&n=lt=9).
 */
#ifndef MCPSUB_URI_H
#define MCPSUB_URI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/mem.h"

#define URI_MAX_LEN     4096
#define URI_MAX_FILTERS 16
#define URI_MAX_ALTS    32 /* values of one col=v1|v2|... */

typedef enum uri_kind {
  URI_COLLECTION,
  URI_RECORD,
  URI_FILTERED,
  URI_ABOUT,
  URI_SCHEMA,
} uri_kind;

typedef enum uri_op {
  URI_EQ = 0,
  URI_NE,
  URI_GT,
  URI_GE,
  URI_LT,
  URI_LE,
  URI_SW,
  URI_CT,
  URI_IN
} uri_op;

/*
 * A number as SQLite holds one: an integer of 64 bits exactly, or a double.
 * A double holds integers exactly only up to 2^53, and SQLite compares an
 * integer with an integer, or with a real, exactly (uri_num_compare).
 */
typedef struct uri_num {
  double d;  /* the value (rounded, beyond 2^53, when is_int) */
  int64_t i; /* is_int: the value exactly */
  bool is_int;
} uri_num;

/* A double as a uri_num. */
static inline uri_num uri_num_of(double d) {
  return (uri_num){d, 0, false};
}

typedef struct uri_filter {
  char *column; /* decoded */
  char *value;  /* decoded; URI_IN: the first value */
  uri_op op;
  char **alts; /* URI_IN: every value (n_alts >= 2), each decoded; else NULL */
  size_t n_alts;
  bool numeric; /* set by whoever knows the column: its values compare as numbers */
  /*
   * Set likewise: the column has no type (SQLite's BLOB affinity, as one
   * declared without a type), holds numbers and text as they were written
   * and converts neither: a number there equals no text.
   */
  bool untyped;
  /*
   * The value read as a number (uri_number), once, for every change it is
   * tested against: uri_parse reads it; a filter made otherwise calls
   * uri_filter_read_number.
   */
  bool is_number;
  uri_num number;
} uri_filter;

typedef struct uri {
  uri_kind kind;
  char *table;         /* decoded; NULL for URI_ABOUT */
  char *key;           /* decoded; URI_RECORD only */
  size_t n_filters;    /* at most URI_MAX_FILTERS */
  uri_filter *filters; /* URI_FILTERED: n_filters of them, sorted by column; else NULL */
  long limit;          /* _limit, or 0 when absent */
  char *cursor;        /* _cursor, or NULL */
} uri_t;

/*
 * Parses text against the public base URL (no trailing '/'); an empty
 * base parses server-relative paths ("/Table/key"), as the REST API does.
 * Returns 0 and fills out (release with uri_finish), -EINVAL when text is
 * malformed, -ENOENT when it is well-formed but not one of ours (another
 * base, another scheme, an unknown mcpsub:// path).
 */
int uri_parse(const char *base, const char *text, uri_t *out) MCPSUB_NODISCARD;
/* Why the last uri_parse of this thread returned -EINVAL (a static string), or "". */
const char *uri_error(void);
/* Is op one of the ordered comparisons (gt, ge, lt, le)? */
static inline bool uri_op_ordered(uri_op op) {
  return op == URI_GT || op == URI_GE || op == URI_LT || op == URI_LE;
}
/* The text of op ("gt", ...; "" for URI_EQ and URI_IN). */
const char *uri_op_name(uri_op op);
/*
 * Does a filter value read as a number, as SQLite's numeric affinity reads
 * text: decimal digits with an optional sign, fraction and exponent, and
 * white space around them; not hexadecimal, not the words Inf or NaN. One
 * beyond a double's range reads as an infinity, as in SQLite. Digits with
 * an optional sign and nothing else, within 64 bits, read as that integer
 * exactly (is_int); any other number as the nearest double.
 * Every evaluation of a filter (SQL on either store, the subscriptions'
 * in C) takes a value for a number exactly when this says so.
 */
bool uri_number(const char *s, uri_num *n);
/*
 * Compares two numbers as SQLite does (sqlite3IntFloatCompare): integers
 * and doubles each exactly, an integer with a double by value; <0, 0, >0.
 * A NaN (PostgreSQL's; SQLite never holds one) is above every other number
 * and equal to itself, as PostgreSQL orders it.
 */
int uri_num_compare(const uri_num *a, const uri_num *b);
/* Sets f's is_number and number from its value. */
void uri_filter_read_number(uri_filter *f);
/* Frees a filter's strings. */
void uri_filter_free(uri_filter *f);
void uri_finish(uri_t *u);
/* A deep copy of u without its paging (_limit, _cursor); release with uri_finish. */
uri_t uri_copy(const uri_t *u);

/* Percent-encodes s (RFC 3986 unreserved characters pass) onto out. */
void uri_encode_component(buf_t *out, const char *s, size_t len);
/* Decodes %XX and returns a new string, or NULL for a bad escape or an encoded NUL. */
char *uri_decode_component(const char *s, size_t len);

/* New strings (caller frees): {base}/{Table}, {base}/{Table}/{key}. */
char *uri_format_collection(const char *base, const char *table);
char *uri_format_record(const char *base, const char *table, const char *key);
/* Canonical form of a parsed URI (filters sorted); new string. */
char *uri_format(const char *base, const uri_t *u);

#endif
