/*
 * Peeking at a request's header block (see peek.h). One pass to find the
 * blank line that ends the block, one pass over its lines; every copy is
 * bounded by the fixed fields of peek_request.
 */
#include "master/peek.h"

#include "common/http_fields.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Offset just past the blank line ending the header block, or 0. Lines may end in CRLF or LF. */
static size_t peek_head_end(const char *buf, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (buf[i] != '\n') continue;
    if (i + 1 < len && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return 0;
}

static void peek_copy(char *dst, size_t cap, const char *src, size_t n) {
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static bool peek_token_has(const char *v, size_t n, const char *token) {
  size_t tl = strlen(token);
  for (size_t i = 0; i + tl <= n; i++)
    if (strncasecmp(v + i, token, tl) == 0) return true;
  return false;
}

static void peek_request_line(const char *line, size_t n, peek_request *out) {
  const char *sp1 = memchr(line, ' ', n);
  if (sp1 == NULL || (size_t)(sp1 - line) >= sizeof(out->method)) return;
  const char *target = sp1 + 1;
  const char *sp2 = memchr(target, ' ', n - (size_t)(target - line));
  if (sp2 == NULL) return;
  peek_copy(out->method, sizeof(out->method), line, (size_t)(sp1 - line));
  size_t tlen = (size_t)(sp2 - target);
  const char *q = memchr(target, '?', tlen);
  size_t plen = q != NULL ? (size_t)(q - target) : tlen;
  if (plen < sizeof(out->path)) peek_copy(out->path, sizeof(out->path), target, plen);
  const char *ver = sp2 + 1;
  size_t vlen = n - (size_t)(ver - line);
  if (vlen == 8 && strncmp(ver, "HTTP/1.", 7) == 0 && ver[7] >= '0' && ver[7] <= '9')
    out->http_minor = ver[7] - '0';
}

static void peek_header(const char *line, size_t n, peek_request *out, bool *conn_close,
                        bool *conn_keep_alive, unsigned *seen) {
  const char *colon = memchr(line, ':', n);
  if (colon == NULL) return;
  size_t nlen = (size_t)(colon - line);
  int single = http_field_single_index(line, nlen);
  if (single >= 0) {
    if (*seen & (1u << single)) out->duplicate = http_field_single_name(single);
    *seen |= 1u << single;
  }
  const char *v = colon + 1;
  size_t vlen = n - nlen - 1;
  while (vlen > 0 && (*v == ' ' || *v == '\t')) v++, vlen--;
  while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t')) vlen--;
#define IS(name) (nlen == sizeof(name) - 1 && strncasecmp(line, name, nlen) == 0)
  if (IS("mcp-session-id")) {
    out->has_session_header = true;
    if (vlen == SESSION_ID_LEN && session_id_valid(v, vlen))
      peek_copy(out->session_id, sizeof(out->session_id), v, vlen);
  } else if (IS("content-length")) {
    bool zero = vlen > 0;
    for (size_t i = 0; i < vlen; i++) zero = zero && v[i] == '0';
    if (!zero) out->has_body = true;
  } else if (IS("transfer-encoding")) {
    out->has_body = true;
  } else if (IS("connection")) {
    if (peek_token_has(v, vlen, "close")) *conn_close = true;
    if (peek_token_has(v, vlen, "keep-alive")) *conn_keep_alive = true;
  } else if (IS("host") || IS("origin")) {
    bool origin = IS("origin");
    if (vlen >= PEEK_MAX_FIELD) {
      out->oversized_field = true;
    } else {
      peek_copy(origin ? out->origin : out->host, PEEK_MAX_FIELD, v, vlen);
      if (origin) out->has_origin = true;
    }
  }
#undef IS
}

int peek_parse(const char *buf, size_t len, size_t max_header, peek_request *out) {
  size_t scan = len < max_header ? len : max_header;
  size_t end = peek_head_end(buf, scan);
  if (end == 0) return len >= max_header ? -E2BIG : -EAGAIN;
  memset(out, 0, sizeof(*out));
  out->head_len = end;
  out->http_minor = -1;
  bool conn_close = false, conn_keep_alive = false, first = true;
  unsigned seen = 0; /* single-valued fields met so far */
  size_t pos = 0;
  while (pos < end) {
    const char *nl = memchr(buf + pos, '\n', end - pos);
    size_t stop = (size_t)(nl - buf);
    size_t n = stop - pos;
    if (n > 0 && buf[pos + n - 1] == '\r') n--;
    if (n > 0) {
      if (first)
        peek_request_line(buf + pos, n, out);
      else
        peek_header(buf + pos, n, out, &conn_close, &conn_keep_alive, &seen);
      first = false;
    }
    pos = stop + 1;
  }
  if (out->http_minor >= 1)
    out->keep_alive = !conn_close;
  else
    out->keep_alive = out->http_minor == 0 && conn_keep_alive && !conn_close;
  return 0;
}
