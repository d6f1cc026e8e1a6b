/*
 * frame_t: one SSE event, formatted once ("id: ...\ndata: ...\n\n") and
 * shared by reference: by every stream it is written to and by every
 * session's replay ring that keeps it. A frame also remembers the audit
 * position its event id names, which is what resumption works from.
 *
 * Event ids have the form "<seq>-<tag>": seq is an audit_log seq (the
 * change a resource update is about, or the feed's position when another
 * frame was sent), tag tells frames with the same seq apart within one
 * session ("t<topic>" for resource updates, "s<n>" for a session's own
 * frames, "r<n>" for recovered updates). Clients treat ids as opaque.
 */
#ifndef MCPSUB_FRAME_H
#define MCPSUB_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct frame {
  uint32_t refs;
  uint16_t id_len; /* the id is data + 4 ("id: ") */
  int64_t seq;     /* audit position named by the id */
  size_t len;
  char data[]; /* the whole event, wire-ready */
} frame_t;

/*
 * Builds an event "id: <seq>-<tag><n>\ndata: <json>\n\n" with one
 * reference. json must be a single line (compact JSON has no newline).
 */
frame_t *frame_create(int64_t seq, char tag, uint64_t n, const char *json, size_t json_len);
frame_t *frame_ref(frame_t *f);
/* Drops a reference; frees at zero. NULL is a no-op. */
void frame_unref(frame_t *f);
/* Does the frame's event id equal id? */
bool frame_id_is(const frame_t *f, const char *id, size_t len);

/*
 * Parses the audit position out of an event id of ours. Returns 0, or
 * -EINVAL for an id this server did not mint.
 */
int frame_id_parse(const char *id, int64_t *seq);

#endif
