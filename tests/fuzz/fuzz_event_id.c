/*
 * libFuzzer target: Last-Event-ID. The id is parsed (worker/frame.h) and
 * looked up in a session's replay ring (worker/session.h), as a resuming
 * GET does, among whole frames and head and tail pairs; a parsed id must
 * print back to the same text.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/frame.h"
#include "worker/session.h"

static int64_t position(const session_t *s, void *data) {
  return 42;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 256) return 0;
  frame_pos pos;
  if (frame_id_parse((const char *)data, size, &pos) == 0) {
    char back[64];
    int n = snprintf(back, sizeof(back), "%lld-%c%llu", (long long)pos.seq, pos.tag,
                     (unsigned long long)pos.n);
    if ((size_t)n != size || memcmp(back, data, size) != 0) abort();
  }
  static session_registry_t reg;
  static session_t *s;
  if (s == NULL) {
    session_registry_init(&reg, 1000, position, NULL);
    s = session_registry_add(&reg, "00000000000000000000000000000000ab", "2025-11-25", 0);
    /* Past the ring, so that the oldest have left it; whole frames, then head and tail pairs. */
    for (int i = 0; i < 120; i++) {
      frame_part json = {"{}", 2};
      if (i < 60) {
        frame_t *f = frame_create_parts(i, i % 3 == 0 ? 's' : 't', (uint64_t)i * 7, &json, 1);
        session_deliver(s, frame_whole(f));
        frame_unref(f);
        continue;
      }
      frame_tag tag;
      frame_tag_init(&tag, 't', (uint64_t)i * 7);
      frame_t *head = frame_create_head(i, &json, 1), *tail = frame_create_tail(&tag, &json, 1);
      session_deliver(s, (frame_ev){head, tail});
      frame_unref(head);
      frame_unref(tail);
    }
  }
  (void)session_replay_after(s, (const char *)data, size); /* no stream: nothing written */
  return 0;
}
