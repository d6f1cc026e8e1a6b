/*
 * buf_t: a growable byte buffer, always NUL-terminated so that text can be
 * handed to C string functions. Growth goes through mem_realloc (aborting);
 * callers that fill a buffer from peer input check their own bound first.
 */
#ifndef MCPSUB_BUF_H
#define MCPSUB_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct buf {
  char *data; /* NULL until the first append */
  size_t len;
  size_t cap;
} buf_t;

void buf_init(buf_t *b);
void buf_finish(buf_t *b); /* frees the storage; b can be reused after buf_init */
void buf_reserve(buf_t *b, size_t extra);
void buf_append(buf_t *b, const void *data, size_t len);
void buf_append_str(buf_t *b, const char *s);
void buf_printf(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(buf_t *b, const char *fmt, va_list ap);
/* Appends s as a JSON string literal, quotes included. */
void buf_append_json_string(buf_t *b, const char *s, size_t len);
/* Appends v in decimal. */
void buf_append_int(buf_t *b, long long v);
/* Room for any long long in decimal, sign and NUL included. */
#define BUF_INT_TEXT 24
/* Writes v in decimal into text and returns where it starts (it ends at the NUL at the end). */
const char *buf_int_text(char text[BUF_INT_TEXT], long long v);
/*
 * Reads the len bytes at p as buf_int_text writes a value from 0 to max:
 * decimal digits, no sign, blank or leading zero (but "0"). false for
 * anything else, or a greater value.
 */
bool buf_parse_uint(const char *p, size_t len, uint64_t max, uint64_t *out);
/* Appends one byte; the common case (room left) is a store, not a call. */
static inline void buf_append_byte(buf_t *b, char ch) {
  if (b->len + 2 > b->cap) buf_reserve(b, 1);
  b->data[b->len++] = ch;
  b->data[b->len] = '\0';
}
void buf_reset(buf_t *b);             /* len = 0, keeps storage */
void buf_consume(buf_t *b, size_t n); /* drops the first n bytes */
/*
 * Appends the contents of the file at path, at most max bytes: 0, -errno,
 * or -EFBIG for a longer file (b then holds what was read so far).
 */
int buf_append_file(buf_t *b, const char *path, size_t max) __attribute__((warn_unused_result));
/* Hands the storage to the caller (who frees it) and resets b. Never NULL. */
char *buf_steal(buf_t *b);

#endif
