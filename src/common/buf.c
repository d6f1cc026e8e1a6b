/*
 * buf_t, the growable byte buffer every formatter in mcpsub writes into:
 * JSON replies, SSE frames, HTTP heads, log lines. The invariant is that
 * once anything was appended, data[len] is a NUL, so the content can be
 * read as a C string. Growth aborts on OOM through mem_realloc; callers
 * that fill a buffer from peer input must check their own bound first —
 * this module never refuses to grow.
 */
#include "common/buf.h"

#include <errno.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"

/* Starts b empty; no allocation until the first append. */
void buf_init(buf_t *b) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

/* Frees b's storage and leaves it empty; NULL-safe on b->data. */
void buf_finish(buf_t *b) {
  free(b->data);
  buf_init(b);
}

/*
 * Ensures room for extra more bytes plus the terminating NUL. Grows
 * geometrically so that a sequence of appends is amortised O(1).
 */
void buf_reserve(buf_t *b, size_t extra) {
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  b->data = mem_realloc(b->data, cap);
  b->cap = cap;
}

/* Appends len bytes of data (which may contain NULs). */
void buf_append(buf_t *b, const void *data, size_t len) {
  buf_reserve(b, len);
  if (len) memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
}

/* Appends the NUL-terminated s without its NUL. */
void buf_append_str(buf_t *b, const char *s) {
  buf_append(b, s, strlen(s));
}

/* Appends printf-formatted text. */
void buf_printf(buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  buf_vprintf(b, fmt, ap);
  va_end(ap);
}

/* Appends vprintf-formatted text; ap is consumed. */
void buf_vprintf(buf_t *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  buf_reserve(b, 0);
  size_t room = b->cap - b->len;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  int n = vsnprintf(b->data + b->len, room, fmt, ap);
  if (n < 0) {
    b->data[b->len] = '\0';
    va_end(ap2);
    return;
  }
  if ((size_t)n >= room) {
    buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
  }
#pragma GCC diagnostic pop
  va_end(ap2);
  b->len += (size_t)n;
}

/* Bytes c takes inside a JSON string literal: 1, 2 (a short escape) or 6 (\u00XX). */
static size_t buf_json_width(unsigned char c) {
  if (c >= 0x20) return c == '"' || c == '\\' ? 2 : 1;
  switch (c) {
  case '\b':
  case '\f':
  case '\n':
  case '\r':
  case '\t': return 2;
  default: return 6;
  }
}

/*
 * Appends s[0..len) as a JSON string literal with its quotes. Escapes the
 * quote, the backslash and every control character below 0x20 (short forms
 * where JSON has them); bytes >= 0x80 pass through, so valid UTF-8 stays
 * valid and readable. One pass measures, one writes: a single reservation,
 * and a single copy when nothing needs escaping.
 */
void buf_append_json_string(buf_t *b, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  size_t need = len + 2;
  for (size_t i = 0; i < len; i++) need += buf_json_width((unsigned char)s[i]) - 1;
  buf_reserve(b, need);
  char *o = b->data + b->len;
  *o++ = '"';
  if (need == len + 2) {
    if (len) memcpy(o, s, len);
    o += len;
  } else {
    for (size_t i = 0; i < len; i++) {
      unsigned char c = (unsigned char)s[i];
      switch (buf_json_width(c)) {
      case 1: *o++ = (char)c; break;
      case 2:
        *o++ = '\\';
        *o++ = c == '\b'   ? 'b'
               : c == '\f' ? 'f'
               : c == '\n' ? 'n'
               : c == '\r' ? 'r'
               : c == '\t' ? 't'
                           : (char)c;
        break;
      default:
        memcpy(o, "\\u00", 4);
        o[4] = hex[c >> 4];
        o[5] = hex[c & 0xf];
        o += 6;
        break;
      }
    }
  }
  *o++ = '"';
  b->len = (size_t)(o - b->data);
  b->data[b->len] = '\0';
}

/* v in decimal, without printf: the text ends text[BUF_INT_TEXT - 1] (a NUL). */
const char *buf_int_text(char text[BUF_INT_TEXT], long long v) {
  char *p = text + BUF_INT_TEXT - 1;
  *p = '\0';
  unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0) *--p = '-';
  return p;
}

bool buf_parse_uint(const char *p, size_t len, uint64_t max, uint64_t *out) {
  if (len == 0 || (len > 1 && p[0] == '0')) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (p[i] < '0' || p[i] > '9') return false;
    unsigned d = (unsigned)(p[i] - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

void buf_append_int(buf_t *b, long long v) {
  char text[BUF_INT_TEXT];
  const char *p = buf_int_text(text, v);
  buf_append(b, p, (size_t)(text + BUF_INT_TEXT - 1 - p));
}

/* Empties b but keeps its storage for reuse. */
void buf_reset(buf_t *b) {
  b->len = 0;
  if (b->data) b->data[0] = '\0';
}

/* Drops the first n bytes (all of them when n >= len), keeping the rest. */
void buf_consume(buf_t *b, size_t n) {
  if (n >= b->len) {
    buf_reset(b);
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = '\0';
}

/*
 * Returns b's NUL-terminated content as a malloc'd string the caller frees
 * (an empty string when nothing was appended, never NULL), and leaves b
 * empty and reusable.
 */
char *buf_steal(buf_t *b) {
  char *p = b->data;
  if (p == NULL) p = mem_strdup("");
  buf_init(b);
  return p;
}

int buf_append_file(buf_t *b, const char *path, size_t max) {
  FILE *f = fopen(path, "re");
  if (f == NULL) return -errno;
  char chunk[8192];
  size_t n, total = 0;
  int rc = 0;
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    if (total + n > max) {
      rc = -EFBIG;
      break;
    }
    buf_append(b, chunk, n);
    total += n;
  }
  if (rc == 0 && ferror(f)) rc = -EIO;
  fclose(f);
  return rc;
}
