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

int frame_id_parse(const char *id, int64_t *seq) {
  char *end;
  if (id[0] < '0' || id[0] > '9') return -EINVAL;
  errno = 0;
  long long v = strtoll(id, &end, 10);
  if (errno != 0 || *end != '-' || (end[1] != 't' && end[1] != 's' && end[1] != 'r'))
    return -EINVAL;
  const char *p = end + 2;
  if (*p < '0' || *p > '9') return -EINVAL;
  while (*p >= '0' && *p <= '9') p++;
  if (*p != '\0') return -EINVAL;
  *seq = v;
  return 0;
}
