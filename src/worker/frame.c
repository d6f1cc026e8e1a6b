/*
 * Shared SSE frames (see frame.h). One allocation per frame, whatever the
 * number of streams and rings holding it.
 */
#include "worker/frame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/mem.h"

/*
 * Frames are made and freed by the thousand per change when every
 * subscriber has its own topic (distinct filtered URIs): small ones are
 * recycled through free lists by size class (FRAME_CLASS bytes each, up to
 * FRAME_POOLED), so that malloc and free stay off the hot path. A worker
 * is one thread: the lists are per process. Not under AddressSanitizer,
 * which should see every use after free.
 */
#define FRAME_CLASS  64
#define FRAME_POOLED 1024 /* largest allocation recycled */
#define FRAME_KEEP   4096 /* frames kept per class */
#if defined(__SANITIZE_ADDRESS__)
#define FRAME_POOL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FRAME_POOL 0
#endif
#endif
#ifndef FRAME_POOL
#define FRAME_POOL 1
#endif

typedef struct frame_free {
  struct frame_free *next;
} frame_free;

static struct {
  frame_free *head;
  size_t n;
} frame_pool[FRAME_POOLED / FRAME_CLASS];

/* The pool class of an allocation of size bytes, or -1 when it is not pooled. */
static int frame_class(size_t size) {
  if (!FRAME_POOL || size > FRAME_POOLED) return -1;
  return (int)((size + FRAME_CLASS - 1) / FRAME_CLASS) - 1;
}

static frame_t *frame_alloc(size_t size) {
  int c = frame_class(size);
  if (c >= 0 && frame_pool[c].head != NULL) {
    frame_free *f = frame_pool[c].head;
    frame_pool[c].head = f->next;
    frame_pool[c].n--;
    return (frame_t *)f;
  }
  return mem_alloc(c >= 0 ? (size_t)(c + 1) * FRAME_CLASS : size);
}

void frame_release(frame_t *f) {
  int c = frame_class(sizeof(*f) + f->len + 1); /* what f was allocated with */
  if (c < 0 || frame_pool[c].n >= FRAME_KEEP) {
    free(f);
    return;
  }
  frame_free *e = (frame_free *)f;
  e->next = frame_pool[c].head;
  frame_pool[c].head = e;
  frame_pool[c].n++;
}

void frame_pool_drain(void) {
  for (size_t c = 0; c < ARRAY_LEN(frame_pool); c++) {
    while (frame_pool[c].head != NULL) {
      frame_free *f = frame_pool[c].head;
      frame_pool[c].head = f->next;
      free(f);
    }
    frame_pool[c].n = 0;
  }
}

/* The number of decimal digits of v (1 to 20). */
static int decimal_digits(uint64_t v) {
  int n = 1;
  while (v >= 10) {
    v /= 10;
    n++;
  }
  return n;
}

/* Writes v, of digits decimal digits, at p (from its last digit back). */
static void write_decimal(char *p, uint64_t v, int digits) {
  for (int i = digits; i-- > 0; v /= 10) p[i] = (char)('0' + v % 10);
}

void frame_tag_init(frame_tag *t, char tag, uint64_t n) {
  int digits = decimal_digits(n);
  t->text[0] = '-';
  t->text[1] = tag;
  write_decimal(t->text + 2, n, digits);
  t->len = (uint8_t)(2 + digits);
}

/*
 * "id: <seq><tag>\ndata: <parts>", then "\n\n" when end (a whole event;
 * without it, an event's head (frame_create_head).
 */
static frame_t *frame_build(int64_t seq, const frame_tag *tag, const frame_part *parts,
                            size_t n_parts, bool end) {
  /* The id "<seq><tag>" is written in place, by hand: snprintf costs more than the rest. */
  uint64_t mag = seq < 0 ? (uint64_t)0 - (uint64_t)seq : (uint64_t)seq;
  int digits = decimal_digits(mag);
  size_t id_len = (seq < 0) + (size_t)digits + tag->len;
  size_t json_len = 0;
  for (size_t i = 0; i < n_parts; i++) json_len += parts[i].len;
  size_t len = 4 + id_len + 1 + 6 + json_len + (end ? 2 : 0);
  frame_t *f = frame_alloc(sizeof(*f) + len + 1);
  f->refs = 1;
  f->id_len = (uint16_t)id_len;
  f->seq = seq;
  f->len = len;
  char *p = f->data;
  memcpy(p, "id: ", 4);
  p += 4;
  if (seq < 0) *p++ = '-';
  write_decimal(p, mag, digits);
  p += digits;
  /*
   * A copy of a length known only at run time compiles to rep movs, whose
   * start-up costs more than the copy: the tag goes whole (its fixed size)
   * when the frame has room after it, and what follows overwrites the excess.
   */
  if ((size_t)(f->data + len - p) >= sizeof(tag->text))
    memcpy(p, tag->text, sizeof(tag->text));
  else
    memcpy(p, tag->text, tag->len);
  p += tag->len;
  memcpy(p, "\ndata: ", 7);
  p += 7;
  for (size_t i = 0; i < n_parts; i++) {
    memcpy(p, parts[i].data, parts[i].len);
    p += parts[i].len;
  }
  if (end)
    memcpy(p, "\n\n", 3); /* with the NUL */
  else
    *p = '\0';
  return f;
}

frame_t *frame_create_tagged(int64_t seq, const frame_tag *tag, const frame_part *parts,
                             size_t n_parts) {
  return frame_build(seq, tag, parts, n_parts, true);
}

frame_t *frame_create_head(int64_t seq, const frame_part *parts, size_t n_parts) {
  static const frame_tag none = {0, ""};
  return frame_build(seq, &none, parts, n_parts, false);
}

frame_t *frame_create_tail(const frame_tag *tag, const frame_part *parts, size_t n_parts) {
  size_t len = tag->len + 2;
  for (size_t i = 0; i < n_parts; i++) len += parts[i].len;
  frame_t *f = frame_alloc(sizeof(*f) + len + 1);
  f->refs = 1;
  f->id_len = tag->len;
  f->seq = 0;
  f->len = len;
  char *p = f->data;
  memcpy(p, tag->text, tag->len);
  p += tag->len;
  for (size_t i = 0; i < n_parts; i++) {
    memcpy(p, parts[i].data, parts[i].len);
    p += parts[i].len;
  }
  memcpy(p, "\n\n", 3); /* with the NUL */
  return f;
}

/*
 * e's id (*len bytes): in place for a whole frame, put together in buf for
 * a head and a tail (a seq of at most 20 characters and a tag of at most
 * 22: frame_tag).
 */
#define FRAME_ID_MAX 48
static const char *frame_id(frame_ev e, char buf[FRAME_ID_MAX], size_t *len) {
  const frame_t *head = e.f, *tail = e.tail;
  if (tail == NULL) {
    *len = head->id_len;
    return head->data + 4;
  }
  memcpy(buf, head->data + 4, head->id_len);
  memcpy(buf + head->id_len, tail->data, tail->id_len);
  *len = (size_t)head->id_len + tail->id_len;
  return buf;
}

frame_t *frame_create_parts(int64_t seq, char tag, uint64_t n, const frame_part *parts,
                            size_t n_parts) {
  frame_tag t;
  frame_tag_init(&t, tag, n);
  return frame_create_tagged(seq, &t, parts, n_parts);
}

frame_t *frame_create(int64_t seq, char tag, uint64_t n, const char *json, size_t json_len) {
  frame_part part = {json, json_len};
  return frame_create_parts(seq, tag, n, &part, 1);
}

bool frame_id_is(frame_ev e, const char *id, size_t len) {
  char buf[FRAME_ID_MAX];
  size_t id_len;
  const char *own = frame_id(e, buf, &id_len);
  return len == id_len && memcmp(own, id, len) == 0;
}

int frame_id_parse(const char *id, size_t len, frame_pos *pos) {
  const char *dash = memchr(id, '-', len);
  if (dash == NULL || dash + 2 > id + len) return -EINVAL;
  uint64_t seq, n;
  char tag = dash[1];
  if (tag != 't' && tag != 's' && tag != 'r') return -EINVAL;
  if (!buf_parse_uint(id, (size_t)(dash - id), INT64_MAX, &seq) ||
      !buf_parse_uint(dash + 2, (size_t)(id + len - dash - 2), UINT64_MAX, &n))
    return -EINVAL;
  *pos = (frame_pos){(int64_t)seq, tag, n};
  return 0;
}

frame_pos frame_position(frame_ev e) {
  frame_pos pos = {e.f->seq, 's', 0};
  char buf[FRAME_ID_MAX];
  size_t len;
  const char *id = frame_id(e, buf, &len);
  if (frame_id_parse(id, len, &pos) != 0) {
    /* Every frame's id is one of ours. */
  }
  return pos;
}
