/*
 * Shared SSE frames (see frame.h). One allocation per frame, whatever the
 * number of streams and rings holding it.
 */
#include "worker/frame.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"

frame_t *frame_create(int64_t seq, char tag, uint64_t n, const char *json, size_t json_len) {
  char id[64];
  int id_len = snprintf(id, sizeof(id), "%lld-%c%llu", (long long)seq, tag, (unsigned long long)n);
  size_t len = 4 + (size_t)id_len + 1 + 6 + json_len + 2;
  frame_t *f = mem_alloc(sizeof(*f) + len + 1);
  f->refs = 1;
  f->id_len = (uint16_t)id_len;
  f->seq = seq;
  f->len = len;
  char *p = f->data;
  memcpy(p, "id: ", 4);
  memcpy(p + 4, id, (size_t)id_len);
  p += 4 + id_len;
  memcpy(p, "\ndata: ", 7);
  memcpy(p + 7, json, json_len);
  memcpy(p + 7 + json_len, "\n\n", 3); /* with the NUL */
  return f;
}

frame_t *frame_ref(frame_t *f) {
  f->refs++;
  return f;
}

void frame_unref(frame_t *f) {
  if (f != NULL && --f->refs == 0) free(f);
}

bool frame_id_is(const frame_t *f, const char *id, size_t len) {
  return len == f->id_len && memcmp(f->data + 4, id, len) == 0;
}

/* Digits of a decimal number without sign or leading zeros (except "0"), at most 20. */
static bool parse_decimal(const char *p, size_t len, uint64_t max, uint64_t *out) {
  if (len == 0 || len > 20 || (len > 1 && p[0] == '0')) return false;
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

int frame_id_parse(const char *id, size_t len, frame_pos *pos) {
  const char *dash = memchr(id, '-', len);
  if (dash == NULL || dash + 2 > id + len) return -EINVAL;
  uint64_t seq, n;
  char tag = dash[1];
  if (tag != 't' && tag != 's' && tag != 'r') return -EINVAL;
  if (!parse_decimal(id, (size_t)(dash - id), INT64_MAX, &seq) ||
      !parse_decimal(dash + 2, (size_t)(id + len - dash - 2), UINT64_MAX, &n))
    return -EINVAL;
  *pos = (frame_pos){(int64_t)seq, tag, n};
  return 0;
}

frame_pos frame_position(const frame_t *f) {
  frame_pos pos = {f->seq, 's', 0};
  if (frame_id_parse(f->data + 4, f->id_len, &pos) != 0) {
    /* Every frame's id is one of ours. */
  }
  return pos;
}
