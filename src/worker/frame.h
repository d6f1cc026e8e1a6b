/*
 * frame_t: one SSE event, formatted once ("id: ...\ndata: ...\n\n") and
 * shared by reference: by every stream it is written to and by every
 * session's replay ring that keeps it. A frame also remembers the audit
 * position its event id names, which is what resumption works from.
 *
 * Event ids have the form "<seq>-<tag><n>" and name a position in the
 * session's stream, ordered by (seq, tag, n):
 *   t<h>  a resource update; seq is the audit_log seq of the newest change
 *         it announces, h the subscription's order key (a stable hash of
 *         the subscribed URI, the same on every worker and after a
 *         restart), so the updates of one change are ordered the same
 *         everywhere;
 *   s<n>  a frame of the session's own (priming, log message,
 *         list_changed); seq is the position through which every update
 *         had been delivered when it was sent;
 *   r<h>  a "re-read" update, sent when the log cannot say what changed;
 *         seq is the position it brings the client to, h as for t.
 * Resumption is exclusive: it sends what comes after the position an id
 * names. Clients treat ids as opaque.
 *
 * A frame either holds its bytes or joins two shared halves (frame_join):
 * what is written and what ids and positions are is the same for both.
 */
#ifndef MCPSUB_FRAME_H
#define MCPSUB_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"

typedef struct frame {
  uint32_t refs;
  uint16_t id_len; /* the id is data + 4 ("id: ") */
  bool joined;     /* a head and a tail (frame_join), not bytes of its own */
  int64_t seq;     /* audit position named by the id */
  size_t len;      /* bytes on the wire (a joined frame's: its head's and tail's) */
  char data[];     /* the whole event, wire-ready; a joined frame: its head and tail */
} frame_t;

/*
 * Builds an event "id: <seq>-<tag><n>\ndata: <json>\n\n" with one
 * reference. json must be a single line (compact JSON has no newline).
 */
frame_t *frame_create(int64_t seq, char tag, uint64_t n, const char *json, size_t json_len);
/* The same with the JSON in pieces, copied in order (no intermediate buffer). */
typedef struct frame_part {
  const char *data;
  size_t len;
} frame_part;
frame_t *frame_create_parts(int64_t seq, char tag, uint64_t n, const frame_part *parts,
                            size_t n_parts);
/*
 * The "-<tag><n>" end of an event id, formatted once for every frame that
 * shares it (a topic's updates: formatting a 20-digit n per frame cost as
 * much as the rest of the frame).
 */
typedef struct frame_tag {
  uint8_t len;
  char text[23];
} frame_tag;
void frame_tag_init(frame_tag *t, char tag, uint64_t n);
frame_t *frame_create_tagged(int64_t seq, const frame_tag *tag, const frame_part *parts,
                             size_t n_parts);
/*
 * A frame in two shared halves, for the update of a topic with one
 * subscriber: the change's head, made once for every such topic ("id:
 * <seq>\ndata: " and the JSON up to the subscribed URI; id_len is the
 * seq's length) and the topic's tail, made once when the topic is
 * ("-t<order>" then the rest of the JSON and "\n\n"; id_len is the tag's
 * length, at data). frame_join makes a small frame that references both
 * (one reference each) instead of copying them: the event's bytes are
 * head's id, tail's id end, head's JSON, tail's JSON (frame_pieces).
 */
frame_t *frame_create_head(int64_t seq, const frame_part *parts, size_t n_parts);
frame_t *frame_create_tail(const frame_tag *tag, const frame_part *parts, size_t n_parts);
frame_t *frame_join(frame_t *head, frame_t *tail);
/* The event's bytes in order: one piece, or four for a joined frame. Returns the count. */
#define FRAME_MAX_PIECES 4
size_t frame_pieces(const frame_t *f, frame_part out[FRAME_MAX_PIECES]);
frame_t *frame_ref(frame_t *f);
/* Drops a reference; frees at zero (small frames are kept for reuse). NULL is a no-op. */
void frame_unref(frame_t *f);
/* Frees the frames kept for reuse (at exit). */
void frame_pool_drain(void);
/* Does the frame's event id equal id? */
bool frame_id_is(const frame_t *f, const char *id, size_t len);

/* The position an event id names (see above). */
typedef struct frame_pos {
  int64_t seq;
  char tag; /* 't', 's' or 'r' */
  uint64_t n;
} frame_pos;

/*
 * Parses an event id of ours (len bytes, no NUL needed) into *pos. Returns
 * 0, or -EINVAL for an id this server did not mint.
 */
int frame_id_parse(const char *id, size_t len, frame_pos *pos) MCPSUB_NODISCARD;
/* The position of a frame's own id. */
frame_pos frame_position(const frame_t *f);

#endif
