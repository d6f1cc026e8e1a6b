/*
 * Incremental SSE parser for the load generator. The hot path is a read of
 * many whole events: those are parsed in place, without a copy; only an
 * event split across two reads is assembled in the stream's pending buffer,
 * which is freed as soon as the event is complete, so that tens of
 * thousands of idle streams hold no parse memory. Lines end with LF. An
 * event longer than LG_SSE_MAX_EVENT is an error, never unbounded growth.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lg.h"

void lg_sse_init(lg_sse *p) {
  memset(p, 0, sizeof(*p));
}

void lg_sse_finish(lg_sse *p) {
  free(p->pending);
  memset(p, 0, sizeof(*p));
}

/* Value of a field line "name: value" (one optional space), or NULL. */
static const char *field_value(const char *line, size_t len, const char *name, size_t name_len,
                               size_t *value_len) {
  if (len < name_len + 1 || memcmp(line, name, name_len) != 0 || line[name_len] != ':') return NULL;
  const char *v = line + name_len + 1;
  const char *end = line + len;
  if (v < end && *v == ' ') v++;
  *value_len = (size_t)(end - v);
  return v;
}

/* Dispatches the event in [start, end): lines, the blank line excluded. */
static void dispatch(const char *start, const char *end, lg_sse_cb cb, void *data) {
  lg_sse_event ev = {0};
  bool any = false;
  const char *p = start;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = nl != NULL ? nl : end;
    size_t len = (size_t)(line_end - p);
    size_t vlen;
    const char *v;
    if (len > 0 && line_end[-1] == '\r') len--;
    if ((v = field_value(p, len, "data", 4, &vlen)) != NULL) {
      ev.data = v;
      ev.data_len = vlen;
      any = true;
    } else if ((v = field_value(p, len, "id", 2, &vlen)) != NULL) {
      ev.id = v;
      ev.id_len = vlen;
      any = true;
    }
    p = line_end + 1;
  }
  if (any) cb(&ev, data);
}

/* Index just past the first "\n\n" in buf, or 0 when there is none. */
static size_t event_end(const char *buf, size_t len) {
  const char *p = buf;
  const char *end = buf + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (nl == NULL || nl + 1 >= end) return 0;
    if (nl[1] == '\n') return (size_t)(nl + 2 - buf);
    p = nl + 1;
  }
  return 0;
}

static int pending_append(lg_sse *p, const char *bytes, size_t len) {
  if (p->pending_len + len > LG_SSE_MAX_EVENT) return -EMSGSIZE;
  if (p->pending_len + len > p->pending_cap) {
    size_t cap = p->pending_cap ? p->pending_cap : 256;
    while (cap < p->pending_len + len) cap *= 2;
    p->pending = lg_realloc(p->pending, cap);
    p->pending_cap = cap;
  }
  memcpy(p->pending + p->pending_len, bytes, len);
  p->pending_len += len;
  return 0;
}

int lg_sse_feed(lg_sse *p, const char *bytes, size_t len, lg_sse_cb cb, void *data) {
  size_t off = 0;
  if (p->pending_len > 0) {
    /* Finish the split event: its end may straddle the boundary. */
    size_t take;
    if (p->pending[p->pending_len - 1] == '\n' && len > 0 && bytes[0] == '\n') {
      take = 1;
    } else {
      size_t e = event_end(bytes, len);
      if (e == 0) return pending_append(p, bytes, len);
      take = e;
    }
    if (pending_append(p, bytes, take) != 0) return -EMSGSIZE;
    dispatch(p->pending, p->pending + p->pending_len - 1, cb, data);
    free(p->pending);
    p->pending = NULL;
    p->pending_len = p->pending_cap = 0;
    off = take;
  }
  while (off < len) {
    size_t e = event_end(bytes + off, len - off);
    if (e == 0) return pending_append(p, bytes + off, len - off);
    dispatch(bytes + off, bytes + off + e - 1, cb, data);
    off += e;
  }
  return 0;
}
