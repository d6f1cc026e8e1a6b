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
 * An event is held as a frame_ev: one frame that holds its bytes, or two
 * shared halves (a change's head and a topic's tail) written one after the
 * other: what is written and what ids and positions are is the same for both.
 */
#ifndef MCPSUB_FRAME_H
#define MCPSUB_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/mem.h"

typedef struct frame {
  uint32_t refs;
  uint16_t id_len; /* the id is data + 4 ("id: ") */
  int64_t seq;     /* audit position named by the id */
  size_t len;      /* bytes on the wire */
  char data[];     /* the whole event, wire-ready (or a head's or a tail's part of it) */
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
 * An event in two shared halves, for the update of a topic with one
 * subscriber: the change's head, made once for every such topic ("id:
 * <seq>\ndata: " and the JSON up to the subscribed URI; id_len is the
 * seq's length) and the topic's tail, made once when the topic is
 * ("-t<order>" then the rest of the JSON and "\n\n"; id_len is the tag's
 * length, at data). The event's bytes are head's id, tail's id end,
 * head's JSON, tail's JSON (frame_pieces): nothing is copied or allocated
 * for the subscriber.
 */
frame_t *frame_create_head(int64_t seq, const frame_part *parts, size_t n_parts);
frame_t *frame_create_tail(const frame_tag *tag, const frame_part *parts, size_t n_parts);

/*
 * An event as rings and streams hold it, by value: a whole frame (tail
 * NULL), or a head and a tail. Holding the pair instead of a frame that
 * points to both is what keeps a topic's only subscriber free of an
 * allocation, and a ring's oldest event free of a cold frame to release.
 */
typedef struct frame_ev {
  frame_t *f;    /* the whole event, or its head */
  frame_t *tail; /* NULL, or the tail that completes f */
} frame_ev;
static inline frame_ev frame_whole(frame_t *f) {
  return (frame_ev){f, NULL};
}
/*
 * The event's bytes in order: one piece, or four for a head and a tail.
 * Returns the count; *len is their total.
 */
#define FRAME_MAX_PIECES 4
static inline size_t frame_pieces(frame_ev e, frame_part out[FRAME_MAX_PIECES], size_t *len) {
  const frame_t *head = e.f, *tail = e.tail;
  if (tail == NULL) {
    out[0] = (frame_part){head->data, head->len};
    *len = head->len;
    return 1;
  }
  *len = head->len + tail->len;
  size_t head_id = 4 + (size_t)head->id_len; /* "id: <seq>" */
  out[0] = (frame_part){head->data, head_id};
  out[1] = (frame_part){tail->data, tail->id_len};
  out[2] = (frame_part){head->data + head_id, head->len - head_id};
  out[3] = (frame_part){tail->data + tail->id_len, tail->len - tail->id_len};
  return 4;
}
/* The event's length on the wire. */
static inline size_t frame_ev_len(frame_ev e) {
  return e.f->len + (e.tail != NULL ? e.tail->len : 0);
}
/*
 * Copies n bytes; those of 8 to 32 (a pair's ids and its topic's URI) by
 * two overlapping fixed-size moves rather than a call per piece.
 */
static inline char *frame_copy(char *to, const char *from, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t a, b;
    memcpy(&a, from, 8);
    memcpy(&b, from + n - 8, 8);
    memcpy(to, &a, 8);
    memcpy(to + n - 8, &b, 8);
  } else if (n > 16 && n <= 32) {
    char a[16], b[16];
    memcpy(a, from, 16);
    memcpy(b, from + n - 16, 16);
    memcpy(to, a, 16);
    memcpy(to + n - 16, b, 16);
  } else {
    memcpy(to, from, n);
  }
  return to + n;
}
/* Copies the event's bytes to `to` (frame_ev_len of them); returns where they end. */
static inline char *frame_ev_copy(frame_ev e, char *to) {
  frame_part p[FRAME_MAX_PIECES];
  size_t len, n = frame_pieces(e, p, &len);
  for (size_t i = 0; i < n; i++) to = frame_copy(to, p[i].data, p[i].len);
  return to;
}
/* Frees a frame whose last reference was dropped (small ones are kept for reuse). */
void frame_release(frame_t *f);
static inline frame_t *frame_ref(frame_t *f) {
  f->refs++;
  return f;
}
/* Drops a reference; frees at zero. NULL is a no-op. */
static inline void frame_unref(frame_t *f) {
  if (f != NULL && --f->refs == 0) frame_release(f);
}
/* A reference to each frame of e; dropping them. */
static inline frame_ev frame_ev_ref(frame_ev e) {
  frame_ref(e.f);
  if (e.tail != NULL) frame_ref(e.tail);
  return e;
}
static inline void frame_ev_unref(frame_ev e) {
  frame_unref(e.f);
  frame_unref(e.tail);
}
/* Frees the frames kept for reuse (at exit). */
void frame_pool_drain(void);
/* Does the event's id equal id? */
bool frame_id_is(frame_ev e, const char *id, size_t len);

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
/* The position of an event's own id. */
frame_pos frame_position(frame_ev e);

#endif
