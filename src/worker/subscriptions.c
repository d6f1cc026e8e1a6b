/*
 * The subscription engine (see subscriptions.h).
 *
 * Hot path: the tailer hands over one committed change; the index yields
 * the topics it matches; for each topic one frame is formatted
 * ({"method":"notifications/resources/updated","params":{"uri":U,
 * "subscribedUri":S}} with event id "<seq>-t<topic>") and the same frame is
 * delivered to every subscriber whose subscription is older than the
 * change. Per subscriber that is a ring slot and a copy into the stream's
 * output buffer: no SQL, no allocation.
 *
 * Cold paths (subscribe, resumption from the audit log, restore) may
 * query the database; they run once per request, not per change.
 */
#include "worker/subscriptions.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/mem.h"
#include "worker/debounce.h"
#include "worker/mcp.h"
#include "worker/listen.h"
#include "worker/wait.h"

/* Coalescing ---------------------------------------------------------------
 * With --coalesce-ms W, updates are rate-limited per topic and record URI
 * (a key): one sent update opens a window of W ms for its key; a change of
 * the key inside the window is held, later ones merge into it, and the held
 * update is sent when the window closes (trailing edge, opening the next
 * window). The final state is always announced.
 *
 * Held updates wait in one FIFO in commit order, and nothing is sent past
 * the FIFO's head: an update for a key that is not held waits behind a
 * held one, so every session still sees its updates in commit order. A
 * merge moves the key's held update to the tail with the newer seq. An
 * entry is in exactly one list: held (the FIFO) or open (sent, its window
 * running; windows all last W, so this list is ordered by window end). One
 * timer serves both lists.
 *
 * Held updates are not delivered: the position the session frames name
 * (subs_delivered_position) stays below the oldest of them, so a resumption
 * from the audit log covers them if the worker dies; a drain sends them.
 */
struct coalesce_entry {
  coalesce_entry *prev, *next; /* in the held or the open list */
  bool held;
  char *map_key;   /* "<topic id> <record uri>" */
  char *topic_key; /* the topic may be gone when the update goes out */
  char *record_uri;
  int64_t seq;        /* held: the newest change merged in */
  int64_t release_at; /* held: loop ms when it may go */
  int64_t window_end; /* open: loop ms when its window closes */
};

static bool subs_send_topic(worker_t *w, sub_topic *t, size_t n, const char *record_uri,
                            const buf_t *record_json, int64_t seq, frame_t **change_head,
                            frame_t **frame);
static void topic_count(worker_t *w, sub_topic *t);
static void coalesce_on_timer(uv_timer_t *h);
/* What a topic's key adds for its subscribers' own debounce (subs_owner_add). */
#define SUBS_DEBOUNCE_KEY "\n~debounce "
/* Subscription rows written again after a failure (see subs_row_unsaved). */
#define SUBS_RETRY_MS     1000
#define SUBS_RETRY_MAX_MS 30000
static void subs_row_unsaved(const char *id, const char *uri, void *data);

static void coalesce_link(coalesce_entry **head, coalesce_entry **tail, coalesce_entry *e) {
  e->next = NULL;
  e->prev = *tail;
  if (*tail != NULL)
    (*tail)->next = e;
  else
    *head = e;
  *tail = e;
}

static void coalesce_unlink(worker_t *w, coalesce_entry *e) {
  coalesce_entry **head = e->held ? &w->coalesce_held_head : &w->coalesce_open_head;
  coalesce_entry **tail = e->held ? &w->coalesce_held_tail : &w->coalesce_open_tail;
  if (e->prev != NULL)
    e->prev->next = e->next;
  else
    *head = e->next;
  if (e->next != NULL)
    e->next->prev = e->prev;
  else
    *tail = e->prev;
  e->prev = e->next = NULL;
}

static void coalesce_hold_entry(worker_t *w, coalesce_entry *e, int64_t seq, int64_t release_at) {
  e->held = true;
  e->seq = seq;
  e->release_at = release_at;
  coalesce_link(&w->coalesce_held_head, &w->coalesce_held_tail, e);
}

static void coalesce_open_window(worker_t *w, coalesce_entry *e, int64_t now) {
  e->held = false;
  e->window_end = now + (int64_t)w->cfg->coalesce_ms;
  coalesce_link(&w->coalesce_open_head, &w->coalesce_open_tail, e);
}

/* A key with no window open: sent at once (held if an older held update must go first). */
static void coalesce_start(worker_t *w, coalesce_entry *e, int64_t seq, int64_t now) {
  if (w->coalesce_held_head != NULL)
    coalesce_hold_entry(w, e, seq, now);
  else
    coalesce_open_window(w, e, now);
}

static void coalesce_free(worker_t *w, coalesce_entry *e) {
  strmap_remove(&w->coalesce, e->map_key, strlen(e->map_key));
  free(e->map_key);
  free(e->topic_key);
  free(e->record_uri);
  free(e);
}

static void coalesce_arm(worker_t *w) {
  int64_t due = INT64_MAX;
  if (w->coalesce_held_head != NULL) due = w->coalesce_held_head->release_at;
  if (w->coalesce_open_head != NULL && w->coalesce_open_head->window_end < due)
    due = w->coalesce_open_head->window_end;
  if (due == INT64_MAX) {
    uv_timer_stop(&w->coalesce_timer);
    return;
  }
  int64_t now = (int64_t)uv_now(w->loop);
  uv_timer_start(&w->coalesce_timer, coalesce_on_timer, due > now ? (uint64_t)(due - now) : 0, 0);
}

/* Sends the head of the held list; its key's next window opens (or, topic gone, it ends). */
static void coalesce_release_head(worker_t *w, int64_t now) {
  coalesce_entry *e = w->coalesce_held_head;
  coalesce_unlink(w, e);
  sub_topic *t = sub_index_find(&w->subs, e->topic_key);
  if (t == NULL) {
    coalesce_free(w, e);
    return;
  }
  buf_t json;
  buf_init(&json);
  buf_append_json_string(&json, e->record_uri, strlen(e->record_uri));
  frame_t *change_head = NULL, *f = NULL;
  if (subs_send_topic(w, t, t->n_subs, e->record_uri, &json, e->seq, &change_head, &f))
    topic_count(w, t);
  frame_unref(f);
  frame_unref(change_head);
  buf_finish(&json);
  coalesce_open_window(w, e, now);
}

static void coalesce_release(void *arg) {
  worker_t *w = arg;
  int64_t now = (int64_t)uv_now(w->loop);
  while (w->coalesce_held_head != NULL && w->coalesce_held_head->release_at <= now)
    coalesce_release_head(w, now);
  while (w->coalesce_open_head != NULL && w->coalesce_open_head->window_end <= now) {
    coalesce_entry *e = w->coalesce_open_head;
    coalesce_unlink(w, e);
    coalesce_free(w, e);
  }
  wait_flush(w);
  coalesce_arm(w);
}

/* Releases wake waiters, which read: a job on the lane, or again shortly while one runs. */
static void coalesce_on_timer(uv_timer_t *h) {
  worker_t *w = h->data;
  if (!lane_try(&w->lane, coalesce_release, w))
    uv_timer_start(h, coalesce_on_timer, LANE_RETRY_MS, 0);
}

/*
 * Routes one change of a topic through coalescing: true when it is held (or
 * merged into a held update), false when it is to be sent now.
 */
static bool coalesce_hold(worker_t *w, sub_topic *t, const char *record_uri, int64_t seq) {
  int64_t now = (int64_t)uv_now(w->loop);
  buf_t k;
  buf_init(&k);
  buf_printf(&k, "%u %s", t->id, record_uri);
  coalesce_entry *e = strmap_get(&w->coalesce, k.data, k.len);
  if (e != NULL) {
    buf_finish(&k);
    if (e->held) { /* merge: the held update now announces this newer change */
      coalesce_unlink(w, e);
      coalesce_hold_entry(w, e, seq, e->release_at);
    } else if (e->window_end > now) { /* in its window: held to the trailing edge */
      coalesce_unlink(w, e);
      coalesce_hold_entry(w, e, seq, e->window_end);
    } else { /* its window is over (the timer has not run yet): as if new */
      coalesce_unlink(w, e);
      coalesce_start(w, e, seq, now);
    }
    coalesce_arm(w);
    return e->held;
  }
  e = mem_calloc(1, sizeof(*e));
  e->map_key = buf_steal(&k);
  e->topic_key = mem_strdup(t->key);
  e->record_uri = mem_strdup(record_uri);
  strmap_put(&w->coalesce, e->map_key, strlen(e->map_key), e);
  coalesce_start(w, e, seq, now);
  coalesce_arm(w);
  return e->held;
}

void subs_flush_held(worker_t *w) {
  subs_turn_settle(w);
  int64_t now = (int64_t)uv_now(w->loop);
  bool any = w->coalesce_held_head != NULL;
  while (w->coalesce_held_head != NULL) coalesce_release_head(w, now);
  if (any) {
    wait_flush(w);
    coalesce_arm(w);
  }
}

void subs_flush_all_held(worker_t *w) {
  subs_flush_held(w);
  hold_flush_all(w);
}

int64_t subs_delivered_position(worker_t *w) {
  if (w->coalesce_held_head != NULL) return w->coalesce_held_head->seq - 1;
  return tailer_position(&w->tailer);
}

static void coalesce_finish(worker_t *w) {
  while (w->coalesce_held_head != NULL) {
    coalesce_entry *e = w->coalesce_held_head;
    coalesce_unlink(w, e);
    coalesce_free(w, e);
  }
  while (w->coalesce_open_head != NULL) {
    coalesce_entry *e = w->coalesce_open_head;
    coalesce_unlink(w, e);
    coalesce_free(w, e);
  }
  strmap_finish(&w->coalesce);
}

/* Frames -------------------------------------------------------------------- */

/*
 * {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":U,"subscribedUri":S
 * — params left open: every update, to a session or a listen stream, live, recovered or the
 * last of a subscription, starts so.
 */
static const char updated_head[] =
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":";
static const char updated_mid[] = ",\"subscribedUri\":";

static void format_updated_open_json(buf_t *b, const char *uri_json, size_t uri_len,
                                     const char *subscribed_json, size_t subscribed_len) {
  buf_append(b, updated_head, sizeof(updated_head) - 1);
  buf_append(b, uri_json, uri_len);
  buf_append(b, updated_mid, sizeof(updated_mid) - 1);
  buf_append(b, subscribed_json, subscribed_len);
}

/* The same from the URIs' text (cold paths: the hot one has them as JSON already). */
static void format_updated_open(buf_t *b, const char *uri, const char *subscribed) {
  buf_t u, sub;
  buf_init(&u);
  buf_init(&sub);
  buf_append_json_string(&u, uri, strlen(uri));
  buf_append_json_string(&sub, subscribed, strlen(subscribed));
  format_updated_open_json(b, u.data, u.len, sub.data, sub.len);
  buf_finish(&u);
  buf_finish(&sub);
}

/* An update as a session sends it (a frame's JSON). */
static void format_updated(buf_t *b, const char *uri, const char *subscribed) {
  format_updated_open(b, uri, subscribed);
  buf_append_str(b, "}}");
}

/* An update's head for listen streams (listen_deliver): its change's audit position in _meta. */
static void format_listen_meta(buf_t *b, int64_t seq) {
  buf_append_str(b, ",\"_meta\":{\"" LISTEN_META_POSITION "\":\"");
  buf_append_int(b, seq);
  buf_append(b, "\"", 1);
  listen_append_id_key(b);
}

/* A topic's listen head for a change (listen_deliver's head), from its record URI as JSON. */
static void format_listen_head(buf_t *b, const char *record_json, size_t record_len,
                               const sub_topic *t, int64_t seq) {
  buf_append(b, "data: ", 6);
  format_updated_open_json(b, record_json, record_len, t->uri_json, t->uri_json_len);
  format_listen_meta(b, seq);
}

static void format_listen_updated(buf_t *b, const char *uri, const char *subscribed, int64_t seq) {
  buf_append_str(b, "data: ");
  format_updated_open(b, uri, subscribed);
  format_listen_meta(b, seq);
}

/* The first of a stream owner's subscriptions (its own list); NULL for a waiter. */
static sub_t *owner_first(sub_owner *o) {
  switch (o->kind) {
  case SUB_OWNER_SESSION: return ((session_t *)o)->subs;
  case SUB_OWNER_LISTEN: return ((listen_stream *)o)->subs;
  case SUB_OWNER_WAITER: break;
  }
  return NULL;
}

/* The hold queue of a subscription's owner (debounce.h); NULL for a waiter. */
static hold_queue *owner_queue(sub_owner *o) {
  switch (o->kind) {
  case SUB_OWNER_SESSION: return &((session_t *)o)->held;
  case SUB_OWNER_LISTEN: return &((listen_stream *)o)->held;
  case SUB_OWNER_WAITER: break;
  }
  return NULL;
}

void subs_deliver_held(worker_t *w, sub_t *sub, const char *record_uri, int64_t seq) {
  buf_t b;
  buf_init(&b);
  if (sub->owner->kind == SUB_OWNER_SESSION) {
    format_updated(&b, record_uri, sub->topic->uri);
    frame_t *f = frame_create(seq, 't', sub->topic->order, b.data, b.len);
    session_deliver((session_t *)sub->owner, frame_whole(f));
    frame_unref(f);
  } else {
    format_listen_updated(&b, record_uri, sub->topic->uri, seq);
    listen_deliver((listen_stream *)sub->owner, b.data, b.len);
  }
  buf_finish(&b);
  /* An update a debounce held is counted as it goes; one queued behind it was, as it came. */
  if (sub->topic->debounce.quiet_ms > 0) topic_count(w, sub->topic);
}

/* The change's head (frame_create_head), shared by its sole subscribers' pairs. */
__attribute__((noinline)) static frame_t *change_head_create(const buf_t *record_json,
                                                             int64_t seq) {
  frame_part parts[] = {{updated_head, sizeof(updated_head) - 1},
                        {record_json->data, record_json->len},
                        {updated_mid, sizeof(updated_mid) - 1}};
  return frame_create_head(seq, parts, ARRAY_LEN(parts));
}

/* ...made at the first that needs it: once a change, asked for once a topic. */
static inline frame_t *change_head_of(frame_t **head, const buf_t *record_json, int64_t seq) {
  if (*head == NULL) *head = change_head_create(record_json, seq);
  return *head;
}

/* The topic's update of a change as a whole frame: format_updated's, put together in the frame. */
static frame_t *topic_frame(sub_topic *t, const buf_t *record_json, int64_t seq) {
  frame_part parts[] = {{updated_head, sizeof(updated_head) - 1},
                        {record_json->data, record_json->len},
                        {updated_mid, sizeof(updated_mid) - 1},
                        {t->uri_json, t->uri_json_len},
                        {"}}", 2}};
  return frame_create_tagged(seq, &t->tag, parts, ARRAY_LEN(parts));
}

/* Starts loading what delivering to o will read: a session's (session_prefetch), a stream's. */
static inline void owner_prefetch(const sub_owner *o) {
  if (o->kind == SUB_OWNER_SESSION) {
    session_prefetch((const session_t *)o);
  } else if (o->kind == SUB_OWNER_LISTEN) {
    const listen_stream *l = (const listen_stream *)o;
    if (l->conn != NULL) http_stream_prefetch(l->conn);
  }
}

/* The subscriber n after s in its topic's list, or NULL. */
static sub_t *sub_nth(sub_t *s, int n) {
  while (s != NULL && n-- > 0) s = s->topic_next;
  return s;
}

/* Along a topic's subscribers, the owner 4 ahead and the one 2 ahead whose loads are started. */
typedef struct subs_ahead {
  sub_t *owner, *slot;
} subs_ahead;

static subs_ahead subs_ahead_start(sub_t *first) {
  return (subs_ahead){sub_nth(first, 4), sub_nth(first, 2)};
}

/* Starts the owner's load of the one 4 ahead, and its ring slot and stream's of the one 2 ahead. */
static void subs_ahead_step(subs_ahead *a) {
  if (a->owner != NULL) {
    mem_prefetch(a->owner->owner);
    a->owner = a->owner->topic_next;
  }
  if (a->slot != NULL) {
    owner_prefetch(a->slot->owner);
    a->slot = a->slot->topic_next;
  }
}

/* One update formatted for t, whatever reached its subscribers: once per topic and change. */
static void topic_count(worker_t *w, sub_topic *t) {
  w->notifications++;
  t->notified++;
}

/*
 * Formats the topic's update for this change once per kind of owner — a
 * frame for sessions (*frame: made at the first that needs it, or the
 * caller's), an event head for listen streams — and hands it to the first
 * n of its subscribers (all, or those the turn's fan-out does not
 * hold for); to a subscriber's owner's hold queue instead when the topic
 * is debounced or the queue already holds something (commit order). A
 * stream reached here has none of the turn's updates held (the turn's
 * fan-out holds every update of a gathered stream, and none of the
 * others'), so the turn is not settled first: a change for a stream that
 * is not gathered leaves the others' updates gathering.
 */
static bool subs_send_topic(worker_t *w, sub_topic *t, size_t n, const char *record_uri,
                            const buf_t *record_json, int64_t seq, frame_t **change_head,
                            frame_t **frame) {
  bool sent = false;  /* to a session or a listen stream (topic_count) */
  buf_t *head = NULL; /* a listen stream's head, formatted at the first one */
  bool debounced = t->debounce.quiet_ms > 0;
  /*
   * As across topics (topics_prefetch), along the subscribers: the owner 4
   * ahead, and the ring slot and stream of the one 2 ahead, are started
   * while one is served. Only the subscriber served can leave the topic
   * here (a waiter completes later, a stream's close is a callback).
   */
  subs_ahead ahead = subs_ahead_start(t->subs);
  for (sub_t *sub = t->subs, *next; sub != NULL && n > 0; sub = next, n--) {
    next = sub->topic_next;
    subs_ahead_step(&ahead);
    if (sub->since_seq >= seq) continue; /* omitCurrent: subscribed after this change */
    hold_queue *q = owner_queue(sub->owner);
    if (q != NULL && (debounced || q->head != NULL)) {
      hold_add(w, q, sub, record_uri, seq);
      sent = sent || !debounced; /* behind a held update: counted now, as the others' */
      continue;
    }
    switch (sub->owner->kind) {
    case SUB_OWNER_SESSION:
      sent = true;
      if (*frame == NULL && sub == t->subs && (next == NULL || n == 1)) {
        /*
         * The only subscriber served: the change's head and the topic's
         * tail. A distinct topic per subscriber costs no copy of its update
         * and no allocation: its replay ring holds the pair.
         */
        session_deliver_unheld((session_t *)sub->owner,
                               (frame_ev){change_head_of(change_head, record_json, seq), t->tail});
        break;
      }
      if (*frame == NULL) *frame = topic_frame(t, record_json, seq);
      session_deliver_unheld((session_t *)sub->owner, frame_whole(*frame));
      break;
    case SUB_OWNER_LISTEN:
      if (head == NULL) {
        head = &w->fmt_head;
        buf_reset(head);
        format_listen_head(head, record_json->data, record_json->len, t, seq);
      }
      sent = true;
      listen_deliver((listen_stream *)sub->owner, head->data, head->len);
      break;
    case SUB_OWNER_WAITER: wait_on_match(w, sub); break;
    }
  }
  return sent;
}

/* The turn's fan-out ------------------------------------------------------------ */

/*
 * A gathered subscriber — a session's with no subscription of its own
 * debounce, or a listen stream's (owner_gathered) — on a topic which
 * neither debounce nor coalescing holds back, is not delivered change by
 * change: its topic's updates of the loop turn are kept (w->turn), and at
 * the turn's end, after the turn's responses, each such subscriber is
 * given all of them at once and its stream hands them to the socket right
 * away (session_deliver_now). A stream of several subscriptions gets the
 * updates of all its topics merged in the order they were held
 * (turn_deliver_merged). The topic's other subscribers (a session with a
 * debounced subscription, a wait_and_read call), which its list keeps in
 * front of the gathered (sub_set_gathered), are served as the change comes
 * (subs_send_topic). Change by change, every subscriber's session, ring
 * and stream were fetched once per change, and every stream's buffer was
 * filled before any was written, so that the kernel's copy of the bytes
 * found them out of every cache (9% of a worker at 10,000 sessions, 1% for
 * the kernel ceiling's one hot buffer). Here each subscriber is fetched
 * once a turn, and the buffer its stream is written from is hot: for a
 * topic of several sessions, the topic's updates laid end to end once
 * (turn_lay_out), which a stream of one subscription with nothing queued
 * is written from without a copy of its own; for the others, the spare
 * output buffer the stream before gave back. A listen stream's events
 * differ from the topic's other listen streams' only by its id: the
 * topic's listen heads are laid end to end once (turn_lay_out_listen), and
 * each stream's events are put together from them in one hot buffer
 * (w->turn.run) and written at once (listen_deliver_run); a stream of
 * several URIs, from the heads of its topics kept for the turn's end
 * (turn_keep_listen_heads). Change by change, listen streams cost 1.3 to
 * 1.6 times the CPU of GET streams per notification, and streams of two
 * subscriptions with an update on each 1.5 times what merged ones do
 * (BENCHMARKS.md).
 *
 * An ne-only topic whose one subscriber is a gathered stream of no other
 * subscription (topic_walkable) holds no update at all: the index keeps
 * the turn's changes for it and the turn's end walks such topics once
 * each (sub_index_walk, turn_deliver_walked), where every change would
 * otherwise load all of them and hold an update for each, which the
 * turn's end then sorted by topic (at 10,000 such sessions, half of the
 * worker's own time: BENCHMARKS.md). Its stream gets nothing else, so
 * its updates need no order among other topics'.
 *
 * Commit order holds: a gathered stream's updates are all gathered, in
 * the order they were held, and whatever else would deliver to it, read a
 * session's ring, or change a topic's subscribers settles the turn first
 * (subs_turn_settle; for sessions, through the registry's hook; for listen
 * streams, their list changes, ends, recoveries and ended subscriptions).
 * So does a turn that reaches TURN_MAX updates, which bounds what one holds
 * (40 bytes an update: 21 MB). It is that large because a change reaches
 * every topic it matches: at 10,000 distinct topics 32,768 updates were
 * three changes, and a stream written three frames at a time costs the
 * kernel six times what one written thirty at a time does (BENCHMARKS.md).
 */
#define TURN_MAX 524288
/* And the most changes (a change kept only for the walk holds no update of its own). */
#define TURN_MAX_CHANGES 65536
/* Arrays for more updates than this are freed by a turn that uses less than an eighth of them. */
#define TURN_KEEP 4096
/* The most of a topic's laid-out updates (turn_lay_out) whose buffer is kept for the next turn. */
#define TURN_BYTES_KEEP (256 * 1024)

/* A change the turn holds updates of: each once, in commit order. */
typedef struct turn_change {
  int64_t seq;
  frame_t *head; /* its head, of its sole subscribers' pairs (a reference), or NULL */
  uint32_t uri;  /* where its record URI starts in w->turn.uris (turn_record_json) */
} turn_change;

/*
 * An update as the turn holds it: 16 bytes, which the turn's end sorts by
 * topic (at 10,000 distinct topics, 300,000 of them a turn). Its event is
 * not carried: a sole subscriber's pair is its change's head and its
 * topic's tail, which keeps its subscribers until the turn is settled; a
 * whole frame (a topic of several sessions) is borrowed from w->turn.refs.
 */
typedef struct turn_update {
  frame_t *whole; /* TURN_WHOLE's frame */
  uint32_t topic; /* index in w->turn.topics */
  uint32_t slot;  /* TURN_SLOT(its change's index in w->turn.changes, its kind) */
} turn_update;

/* What event an update is: none (for listen streams only), a pair, a whole frame. */
enum { TURN_NONE, TURN_PAIR, TURN_WHOLE };
#define TURN_SLOT(change, kind) ((uint32_t)(change) << 2 | (uint32_t)(kind))
#define TURN_SLOT_CHANGE(slot)  ((slot) >> 2)
#define TURN_SLOT_KIND(slot)    ((slot)&3)

/* The change of a slot (an update's, or one of w->turn.slots). */
static const turn_change *turn_change_of(const worker_t *w, uint32_t slot) {
  return &w->turn.changes[TURN_SLOT_CHANGE(slot)];
}

/* The record URI of c as JSON, as the turn keeps it once per change. */
static const char *turn_record_json(const worker_t *w, const turn_change *c) {
  return w->turn.uris.data + c->uri;
}

/* ...and as text, kept after it. */
static const char *turn_record_uri(const worker_t *w, const turn_change *c) {
  const char *json = turn_record_json(w, c);
  return json + strlen(json) + 1;
}

/* A range of a topic's updates for a stream of several subscriptions (turn_deliver_merged). */
typedef struct turn_merge {
  sub_t *sub;     /* of the stream (its owner) to the topic */
  uint32_t at, n; /* in w->turn.events */
  uint32_t prev;  /* + 1: the stream's entry before, or 0 */
} turn_merge;

/* Where o, a stream, keeps its last entry in w->turn.merges. */
static uint32_t *owner_turn_last(sub_owner *o) {
  if (o->kind == SUB_OWNER_SESSION) return &((session_t *)o)->turn_last;
  return &((listen_stream *)o)->turn_last;
}

/* Does the turn's fan-out take t's updates (above)? */
static bool turn_takes(const worker_t *w, const sub_topic *t) {
  return t->some_gathered && t->debounce.quiet_ms == 0 && w->cfg->coalesce_ms == 0 &&
         !w->turn.settling;
}

/*
 * Matched topics are served in (order, uri) order, which is no order in
 * memory: each is a chain of loads (topic, subscription, owner, the
 * owner's ring slot and stream), too long for the CPU to look ahead
 * through on its own. While topic i is served, the chains of the next ones
 * are started, a link further for each step ahead. A topic the turn's
 * fan-out takes all of is not served now: only its line is (held: a
 * change touches nothing else of it), unless held is unset (the turn's
 * end, serving them).
 */
static bool topic_served_now(const worker_t *w, const sub_topic *t, bool held) {
  return !held || !turn_takes(w, t) || !t->all_gathered;
}

static inline void topics_prefetch(const worker_t *w, sub_topic *const *m, size_t n, size_t i,
                                   bool held) {
  if (i + 8 < n) mem_prefetch(m[i + 8]);
  if (i + 6 < n && topic_served_now(w, m[i + 6], held)) {
    mem_prefetch(m[i + 6]->tail);
    mem_prefetch(m[i + 6]->subs);
  }
  if (i + 4 < n && m[i + 4]->subs != NULL && topic_served_now(w, m[i + 4], held))
    mem_prefetch(m[i + 4]->subs->owner);
  if (i + 2 < n && m[i + 2]->subs != NULL && topic_served_now(w, m[i + 2], held))
    owner_prefetch(m[i + 2]->subs->owner);
}

static void subs_turn_end(void *data) {
  subs_turn_settle(data);
}

/* Room for n updates in the turn's arrays of them (updates, events, order, slots). */
static void turn_reserve(worker_t *w, size_t n) {
  if (n <= w->turn.cap) return;
  while (w->turn.cap < n) w->turn.cap = w->turn.cap == 0 ? 64 : w->turn.cap * 2;
  w->turn.updates = mem_realloc(w->turn.updates, w->turn.cap * sizeof(*w->turn.updates));
  w->turn.events = mem_realloc(w->turn.events, w->turn.cap * sizeof(*w->turn.events));
  w->turn.order = mem_realloc(w->turn.order, w->turn.cap * sizeof(*w->turn.order));
  w->turn.slots = mem_realloc(w->turn.slots, w->turn.cap * sizeof(*w->turn.slots));
}

/*
 * The index the change seq has among the turn's changes, or will have once
 * one of its updates is held (turn_change_add): what the walk keeps it by.
 */
static uint32_t turn_change_next(const worker_t *w, int64_t seq) {
  size_t n = w->turn.n_changes;
  return (uint32_t)(n > 0 && w->turn.changes[n - 1].seq == seq ? n - 1 : n);
}

/* The change seq among the turn's changes (its record URI kept once), opening the turn. */
static turn_change *turn_change_add(worker_t *w, const char *record_uri, const buf_t *record_json,
                                    int64_t seq) {
  if (w->turn.n_changes == 0) {
    w->sessions.turn_held = true;
    http_server_at_turn_end(w->http, subs_turn_end, w);
    buf_reset(&w->turn.uris);
  }
  if (turn_change_next(w, seq) == w->turn.n_changes) {
    if (w->turn.n_changes == w->turn.changes_cap) {
      w->turn.changes_cap = w->turn.changes_cap == 0 ? 16 : w->turn.changes_cap * 2;
      w->turn.changes =
          mem_realloc(w->turn.changes, w->turn.changes_cap * sizeof(*w->turn.changes));
    }
    /* Each change's URI once: as JSON, then as text. */
    w->turn.changes[w->turn.n_changes++] = (turn_change){seq, NULL, (uint32_t)w->turn.uris.len};
    buf_append(&w->turn.uris, record_json->data, record_json->len);
    buf_append(&w->turn.uris, "", 1);
    buf_append(&w->turn.uris, record_uri, strlen(record_uri) + 1);
  }
  return &w->turn.changes[w->turn.n_changes - 1];
}

/* Keeps e (as subs_on_change makes it), t's update for the change seq, for the turn's end. */
static void turn_hold(worker_t *w, sub_topic *t, frame_ev e, const char *record_uri,
                      const buf_t *record_json, int64_t seq) {
  if (w->turn.n == TURN_MAX) subs_turn_settle(w);
  turn_change *c = turn_change_add(w, record_uri, record_json, seq);
  turn_reserve(w, w->turn.n + 1);
  if (t->turn_index == 0) {
    if (w->turn.n_topics == w->turn.topics_cap) {
      w->turn.topics_cap = w->turn.topics_cap == 0 ? 64 : w->turn.topics_cap * 2;
      w->turn.topics = mem_realloc(w->turn.topics, w->turn.topics_cap * sizeof(*w->turn.topics));
      /* one count past the last */
      w->turn.start = mem_realloc(w->turn.start, (w->turn.topics_cap + 1) * sizeof(*w->turn.start));
    }
    w->turn.topics[w->turn.n_topics] = t;
    t->turn_index = (uint32_t)++w->turn.n_topics;
  }
  int kind = TURN_NONE; /* e.f is NULL for listen streams only: their heads are laid out later */
  if (e.tail != NULL) {
    kind = TURN_PAIR; /* the head shared by the change's topics, kept once */
    if (c->head == NULL) c->head = frame_ref(e.f);
  } else if (e.f != NULL) {
    kind = TURN_WHOLE; /* the topic's own, a reference dropped at the turn's end */
    if (w->turn.n_refs == w->turn.refs_cap) {
      w->turn.refs_cap = w->turn.refs_cap == 0 ? 16 : w->turn.refs_cap * 2;
      w->turn.refs = mem_realloc(w->turn.refs, w->turn.refs_cap * sizeof(*w->turn.refs));
    }
    w->turn.refs[w->turn.n_refs++] = frame_ref(e.f);
  }
  w->turn.updates[w->turn.n++] = (turn_update){kind == TURN_WHOLE ? e.f : NULL, t->turn_index - 1,
                                               TURN_SLOT(w->turn.n_changes - 1, kind)};
}

/*
 * Lays the n frames of events end to end in w->turn.bytes (their ends in
 * w->turn.ends), once for all of a topic's subscribers: each stream is
 * then written from this one buffer, which stays in the cache, as the
 * kernel ceiling writes its streams, rather than from a copy of its own.
 */
static void turn_lay_out(worker_t *w, const frame_ev *events, size_t n) {
  buf_reset(&w->turn.bytes);
  for (size_t i = 0; i < n; i++) {
    frame_part p[FRAME_MAX_PIECES];
    size_t len, k = frame_pieces(events[i], p, &len);
    buf_reserve(&w->turn.bytes, len);
    for (size_t j = 0; j < k; j++) {
      memcpy(w->turn.bytes.data + w->turn.bytes.len, p[j].data, p[j].len);
      w->turn.bytes.len += p[j].len;
    }
    w->turn.ends[i] = w->turn.bytes.len;
  }
}

/*
 * Lays t's listen heads for its n updates (slots: theirs) end to end in
 * w->turn.listen_heads, their ends in w->turn.listen_ends: once for all
 * of the topic's listen streams.
 */
static void turn_lay_out_listen(worker_t *w, const sub_topic *t, const uint32_t *slots, size_t n) {
  buf_t *b = &w->turn.listen_heads;
  buf_reset(b);
  for (size_t i = 0; i < n; i++) {
    const turn_change *c = turn_change_of(w, slots[i]);
    const char *json = turn_record_json(w, c);
    format_listen_head(b, json, strlen(json), t, c->seq);
    w->turn.listen_ends[i] = b->len;
  }
}

/* Notes that sub's stream gets w->turn.events[at, at + n) once its other topics' are known. */
static void turn_merge_add(worker_t *w, sub_t *sub, size_t at, size_t n) {
  if (w->turn.n_merges == w->turn.merges_cap) {
    w->turn.merges_cap = w->turn.merges_cap == 0 ? 64 : w->turn.merges_cap * 2;
    w->turn.merges = mem_realloc(w->turn.merges, w->turn.merges_cap * sizeof(*w->turn.merges));
  }
  uint32_t *last = owner_turn_last(sub->owner);
  w->turn.merges[w->turn.n_merges] = (turn_merge){sub, (uint32_t)at, (uint32_t)n, *last};
  *last = (uint32_t)++w->turn.n_merges;
}

/*
 * Keeps the topic's listen heads, just laid out (turn_lay_out_listen) for
 * its n updates at w->turn.events[at], for the listen streams of several
 * subscriptions merged at the end: in w->turn.listen_all, each one's span
 * by its place in events.
 */
static void turn_keep_listen_heads(worker_t *w, size_t at, size_t n) {
  if (w->turn.listen_spans_cap < w->turn.cap) {
    w->turn.listen_spans_cap = w->turn.cap;
    w->turn.listen_spans =
        mem_realloc(w->turn.listen_spans, w->turn.cap * sizeof(*w->turn.listen_spans));
  }
  size_t base = w->turn.listen_all.len;
  buf_append(&w->turn.listen_all, w->turn.listen_heads.data, w->turn.listen_heads.len);
  for (size_t i = 0; i < n; i++) {
    size_t start = i == 0 ? 0 : w->turn.listen_ends[i - 1];
    w->turn.listen_spans[at + i] =
        (listen_span){(uint32_t)(base + start), (uint32_t)(w->turn.listen_ends[i] - start)};
  }
}

/*
 * Puts the events of t's n updates at w->turn.events[at] (w->turn.slots
 * say what each is, w->turn.order where a whole frame's update is).
 */
static void turn_events_of(worker_t *w, const sub_topic *t, size_t at, size_t n) {
  for (size_t i = at; i < at + n; i++) {
    uint32_t slot = w->turn.slots[i];
    switch (TURN_SLOT_KIND(slot)) {
    case TURN_PAIR: w->turn.events[i] = (frame_ev){turn_change_of(w, slot)->head, t->tail}; break;
    case TURN_WHOLE:
      w->turn.events[i] = frame_whole(w->turn.updates[w->turn.order[i]].whole);
      break;
    default: w->turn.events[i] = (frame_ev){NULL, NULL}; break;
    }
  }
}

/*
 * Gives every gathered subscriber of t its n updates, w->turn.events[at]
 * on (w->turn.slots: their changes): a stream of one subscription now, one
 * of several once every topic is through (turn_deliver_merged).
 */
static void turn_deliver_topic(worker_t *w, sub_topic *t, size_t at, size_t n) {
  turn_events_of(w, t, at, n);
  const frame_ev *events = w->turn.events + at;
  const uint32_t *slots = w->turn.slots + at;
  if (n > w->turn.ends_cap) {
    w->turn.ends_cap = n;
    w->turn.ends = mem_realloc(w->turn.ends, n * sizeof(*w->turn.ends));
    w->turn.listen_ends = mem_realloc(w->turn.listen_ends, n * sizeof(*w->turn.listen_ends));
  }
  /* From the topic's first line only, when all its subscribers are gathered (sub_index.h). */
  bool laid_out = t->few_gathered_sessions > 1;
  if (laid_out) turn_lay_out(w, events, n);
  if (t->gathered_listens) turn_lay_out_listen(w, t, slots, n);
  /* The gathered, after the others (served as their changes came). */
  sub_t *first = t->subs;
  if (!t->all_gathered)
    for (size_t k = t->n_subs - t->n_gathered; k > 0; k--) first = first->topic_next;
  bool heads_kept = false; /* for listen streams of several (turn_keep_listen_heads) */
  subs_ahead ahead = subs_ahead_start(first); /* as in subs_send_topic */
  for (sub_t *sub = first; sub != NULL; sub = sub->topic_next) {
    subs_ahead_step(&ahead);
    /* omitCurrent: the updates after its since_seq, a suffix (they are in commit order). */
    size_t from = 0;
    while (from < n && turn_change_of(w, slots[from])->seq <= sub->since_seq) from++;
    if (from == n) continue;
    bool listen = sub->owner->kind == SUB_OWNER_LISTEN;
    listen_stream *l = (listen_stream *)sub->owner;
    session_t *s = (session_t *)sub->owner;
    if ((listen ? l->n_subs : s->n_subs) > 1) { /* merged with its other topics' at the end */
      if (listen && !heads_kept) turn_keep_listen_heads(w, at, n);
      heads_kept = heads_kept || listen;
      turn_merge_add(w, sub, at + from, n - from);
      continue;
    }
    hold_queue *q = owner_queue(sub->owner);
    if (q->head != NULL) {
      /* Behind what a debounced subscription, since dropped, left queued: in order (debounce.h). */
      for (size_t i = from; i < n; i++) {
        const turn_change *c = turn_change_of(w, slots[i]);
        hold_add(w, q, sub, turn_record_uri(w, c), c->seq);
      }
    } else if (listen) {
      listen_deliver_run(l, &w->turn.run, w->turn.listen_heads.data, w->turn.listen_ends, from, n);
    } else if (laid_out) {
      size_t off = from == 0 ? 0 : w->turn.ends[from - 1];
      session_deliver_bytes(s, events + from, n - from, w->turn.bytes.data + off,
                            w->turn.ends[n - 1] - off);
    } else {
      session_deliver_now(s, events + from, n - from);
    }
  }
}

/* Compares two places in w->turn.events by the index their update was held at (data: order). */
static int merge_pos_compare(const void *a, const void *b, void *data) {
  const uint32_t *order = data;
  uint32_t x = order[*(const uint32_t *)a], y = order[*(const uint32_t *)b];
  return x < y ? -1 : x > y;
}

/* Up to this many topics a stream's updates are merged by looking at each one's next. */
#define TURN_MERGE_SCAN 8

/*
 * Gives o, a stream of several subscriptions, the turn's updates of all
 * its topics at once, in the order they were held: commit order, and the
 * topics of one change in the order every worker sends them (frame.h).
 */
static void turn_deliver_merged(worker_t *w, sub_owner *o) {
  const turn_merge *merges = w->turn.merges;
  const uint32_t *order = w->turn.order;
  uint32_t last = *owner_turn_last(o);
  *owner_turn_last(o) = 0;
  size_t k = 0, m = 0;
  for (uint32_t i = last; i != 0; i = merges[i - 1].prev) {
    k++;
    m += merges[i - 1].n;
  }
  if (m > w->turn.merge_cap) {
    w->turn.merge_cap = m;
    w->turn.merge_pos = mem_realloc(w->turn.merge_pos, m * sizeof(*w->turn.merge_pos));
    w->turn.merge_ev = mem_realloc(w->turn.merge_ev, m * sizeof(*w->turn.merge_ev));
  }
  uint32_t *pos = w->turn.merge_pos;
  if (k <= TURN_MERGE_SCAN) {
    uint32_t next[TURN_MERGE_SCAN], end[TURN_MERGE_SCAN];
    size_t j = 0;
    for (uint32_t i = last; i != 0; i = merges[i - 1].prev, j++) {
      next[j] = merges[i - 1].at;
      end[j] = merges[i - 1].at + merges[i - 1].n;
    }
    for (size_t out = 0; out < m; out++) {
      size_t best = k;
      for (j = 0; j < k; j++)
        if (next[j] < end[j] && (best == k || order[next[j]] < order[next[best]])) best = j;
      pos[out] = next[best]++;
    }
  } else {
    size_t out = 0;
    for (uint32_t i = last; i != 0; i = merges[i - 1].prev)
      for (uint32_t p = merges[i - 1].at; p < merges[i - 1].at + merges[i - 1].n; p++)
        pos[out++] = p;
    qsort_r(pos, m, sizeof(*pos), merge_pos_compare, (void *)order);
  }
  hold_queue *q = owner_queue(o);
  if (q->head != NULL) {
    /* Behind what a debounced subscription, since dropped, left queued: in order (debounce.h). */
    for (size_t i = 0; i < m; i++) {
      const turn_merge *r = &merges[last - 1];
      while (pos[i] < r->at || pos[i] >= r->at + r->n) r = &merges[r->prev - 1];
      const turn_change *c = turn_change_of(w, w->turn.slots[pos[i]]);
      hold_add(w, q, r->sub, turn_record_uri(w, c), c->seq);
    }
  } else if (o->kind == SUB_OWNER_LISTEN) {
    listen_deliver_spans((listen_stream *)o, &w->turn.run, w->turn.listen_all.data,
                         w->turn.listen_spans, pos, m);
  } else {
    for (size_t i = 0; i < m; i++) w->turn.merge_ev[i] = w->turn.events[pos[i]];
    session_deliver_now((session_t *)o, w->turn.merge_ev, m);
  }
}

/* Frees the arrays of a turn's updates and frames, of a topic's frame ends, and of merges. */
static void turn_arrays_free(worker_t *w) {
  free(w->turn.updates);
  free(w->turn.events);
  free(w->turn.order);
  free(w->turn.slots);
  free(w->turn.changes);
  free(w->turn.ends);
  free(w->turn.listen_ends);
  free(w->turn.merges);
  free(w->turn.merge_pos);
  free(w->turn.merge_ev);
  free(w->turn.listen_spans);
  free(w->turn.refs);
  w->turn.refs = NULL;
  w->turn.refs_cap = 0;
  w->turn.updates = NULL;
  w->turn.events = NULL;
  w->turn.order = NULL;
  w->turn.slots = NULL;
  w->turn.changes = NULL;
  w->turn.changes_cap = 0;
  w->turn.ends = NULL;
  w->turn.listen_ends = NULL;
  w->turn.merges = NULL;
  w->turn.merge_pos = NULL;
  w->turn.merge_ev = NULL;
  w->turn.listen_spans = NULL;
  w->turn.cap = w->turn.ends_cap = w->turn.merges_cap = w->turn.merge_cap = 0;
  w->turn.listen_spans_cap = 0;
}

/* The n held updates (of nt topics) to their subscribers, topic by topic, then merged streams'. */
static void turn_deliver_held(worker_t *w, size_t n, size_t nt) {
  /* The updates topic by topic, each topic's in commit order: a counting sort by topic. */
  size_t *start = w->turn.start;
  memset(start, 0, (nt + 1) * sizeof(*start));
  for (size_t i = 0; i < n; i++) start[w->turn.updates[i].topic + 1]++;
  for (size_t k = 0; k < nt; k++) start[k + 1] += start[k];
  for (size_t i = 0; i < n; i++) { /* start[k] moves from topic k's first slot to its end */
    size_t at = start[w->turn.updates[i].topic]++;
    w->turn.slots[at] = w->turn.updates[i].slot;
    w->turn.order[at] = (uint32_t)i;
  }
  for (size_t k = 0; k < nt; k++) {
    sub_topic *t = w->turn.topics[k];
    topics_prefetch(w, w->turn.topics, nt, k, false);
    t->turn_index = 0;
    size_t at = k == 0 ? 0 : start[k - 1];
    turn_deliver_topic(w, t, at, start[k] - at);
  }
  for (size_t i = 0; i < w->turn.n_merges; i++) { /* each stream of several, at its first entry */
    sub_owner *o = w->turn.merges[i].sub->owner;
    if (*owner_turn_last(o) != 0) turn_deliver_merged(w, o);
  }
  w->turn.n_merges = 0;
  buf_reset(&w->turn.listen_all);
}

/*
 * The walk's (sub_index_walk) delivery to t, a walked topic: its sole
 * subscriber gets its updates of the turn's changes ids (a session's
 * pairs, a listen stream's heads laid out from the changes), put in the
 * turn's arrays after the held updates (turn_reserve'd for every change).
 */
static void turn_deliver_walked(sub_topic *const *walked, size_t n_walked, size_t at,
                                const uint32_t *ids, size_t n, void *data) {
  worker_t *w = data;
  sub_topic *t = walked[at];
  topics_prefetch(w, walked, n_walked, at, false);
  uint32_t *slots = w->turn.slots + w->turn.n;
  int kind = t->few_gathered_sessions == 1 ? TURN_PAIR : TURN_NONE;
  for (size_t i = 0; i < n; i++) slots[i] = TURN_SLOT(ids[i], kind);
  w->notifications += n;
  t->notified += n;
  turn_deliver_topic(w, t, w->turn.n, n);
}

void subs_turn_settle(worker_t *w) {
  if (w->turn.n_changes == 0 || w->turn.settling) return;
  w->turn.settling = true; /* nothing delivering does holds more (turn_takes) */
  w->sessions.turn_held = false;
  size_t n = w->turn.n, nt = w->turn.n_topics;
  turn_reserve(w, n + w->turn.n_changes);
  sub_index_walk(&w->subs, turn_deliver_walked, w);
  if (n > 0) turn_deliver_held(w, n, nt);
  for (size_t i = 0; i < w->turn.n_refs; i++) frame_unref(w->turn.refs[i]);
  for (size_t i = 0; i < w->turn.n_changes; i++) frame_unref(w->turn.changes[i].head);
  /* A burst's, not kept. */
  if (w->turn.bytes.cap > TURN_BYTES_KEEP) buf_finish(&w->turn.bytes);
  if (w->turn.listen_heads.cap > TURN_BYTES_KEEP) buf_finish(&w->turn.listen_heads);
  if (w->turn.run.cap > TURN_BYTES_KEEP) buf_finish(&w->turn.run);
  if (w->turn.listen_all.cap > TURN_BYTES_KEEP) buf_finish(&w->turn.listen_all);
  if (w->turn.cap > TURN_KEEP && n + w->turn.n_changes < w->turn.cap / 8)
    turn_arrays_free(w); /* a burst's */
  w->turn.n = w->turn.n_topics = w->turn.n_refs = w->turn.n_changes = 0;
  w->turn.settling = false;
}

/* The tailer's consumer --------------------------------------------------------- */

static void collect_topic(sub_topic *t, void *data) {
  worker_t *w = data;
  if (w->n_matched == w->matched_cap) {
    w->matched_cap = w->matched_cap == 0 ? 16 : w->matched_cap * 2;
    w->matched = mem_realloc(w->matched, w->matched_cap * sizeof(sub_topic *));
  }
  w->matched[w->n_matched++] = t;
}

/*
 * Does t's key column compare as SQLite's NOCASE? Reads and writes find a
 * record by its key so (/T/apple names the row stored as 'Apple'), so a
 * record topic's key and a change's are compared folded (subs_resolve_in,
 * change_of). Other collations compare as stored.
 */
static bool subs_key_folds(const store_table *t) {
  return t != NULL && t->key_col >= 0 && t->cols[t->key_col].nocase;
}

/* Folds key in place as NOCASE does: ASCII letters to lower case. */
static void subs_key_fold(char *key) {
  for (char *p = key; *p != '\0'; p++)
    if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
}

/*
 * A change for the index; its row images only when some topic must test
 * them (rows); its key folded into fold when its table's key folds.
 */
static sub_change change_of(worker_t *w, const store_audit_row *row, bool rows, buf_t *fold) {
  sub_change c = {row->seq, row->table, row->key, NULL, NULL, NULL};
  if (subs_key_folds(store_find_table(w->store, row->table))) {
    buf_reset(fold);
    buf_append_str(fold, row->key);
    subs_key_fold(fold->data);
    c.key = fold->data;
  }
  if (rows) store_audit_row_images(row, &c.old_row, &c.new_row);
  return c;
}

/*
 * One committed change: the topics it matches, in (order, uri) order so
 * that every worker sends a change's updates in the same order (see
 * frame.h), each through coalescing or straight to its subscribers.
 */
static void subs_on_subscription_log(worker_t *w, const store_audit_row *row);

static void subs_on_change(const store_audit_row *row, void *data) {
  worker_t *w = data;
  if (strcmp(row->table, STORE_SUBSCRIPTION_LOG) == 0) {
    subs_on_subscription_log(w, row);
    return;
  }
  if (strcmp(row->table, STORE_SIGNAL_LOG) == 0) {
    mcp_on_signal(w, row);
    return;
  }
  if (!sub_index_watches(&w->subs, row->table)) return;
  assert(!w->turn.settling); /* the walk's changes are the turn's (subs_turn_settle) */
  if (w->turn.n_changes == TURN_MAX_CHANGES) subs_turn_settle(w);
  /* The row images are parsed only for a table with filtered (or row-scoped) topics. */
  sub_change change = change_of(w, row, sub_index_needs_rows(&w->subs, row->table), &w->key_fold);
  change.walk_id = turn_change_next(w, row->seq);
  w->n_matched = 0;
  bool walked = sub_index_match(&w->subs, &change, collect_topic, w);
  if (w->n_matched == 0 && !walked) return; /* in (order, uri) order, as the index matches */
  char *record_uri = uri_format_record(w->cfg->public_url, row->table, row->key);
  buf_t *record_json = &w->fmt_uri; /* escaped once for every topic */
  buf_reset(record_json);
  buf_append_json_string(record_json, record_uri, strlen(record_uri));
  frame_t *change_head = NULL; /* the change's head (frame_create_head), made at the first */
  if (walked) { /* kept as change.walk_id for the walked topics' pairs (turn_deliver_walked) */
    turn_change *c = turn_change_add(w, record_uri, record_json, row->seq);
    if (c->head == NULL) c->head = frame_ref(change_head_of(&change_head, record_json, row->seq));
  }
  for (size_t i = 0; i < w->n_matched; i++) {
    sub_topic *t = w->matched[i];
    topics_prefetch(w, w->matched, w->n_matched, i, true);
    /* A subscription's own debounce replaces the server-wide coalescing. */
    if (w->cfg->coalesce_ms > 0 && t->debounce.quiet_ms == 0 &&
        coalesce_hold(w, t, record_uri, row->seq))
      continue;
    frame_t *f = NULL; /* the topic's frame for this change, once for all its sessions */
    if (!turn_takes(w, t)) {
      if (subs_send_topic(w, t, t->n_subs, record_uri, record_json, row->seq, &change_head, &f))
        topic_count(w, t);
    } else {
      /* Those not gathered, now; for the gathered sessions, a sole one's pair or a frame. */
      if (!t->all_gathered)
        (void)subs_send_topic(w, t, t->n_subs - t->n_gathered, record_uri, record_json, row->seq,
                              &change_head, &f);
      frame_ev e = {NULL, NULL}; /* for listen streams only (turn_hold) */
      if (t->few_gathered_sessions == 1) {
        e = (frame_ev){change_head_of(&change_head, record_json, row->seq), t->tail};
      } else if (t->few_gathered_sessions == 2) {
        if (f == NULL) f = topic_frame(t, record_json, row->seq);
        e = frame_whole(f);
      }
      topic_count(w, t);
      turn_hold(w, t, e, record_uri, record_json, row->seq);
    }
    frame_unref(f);
  }
  frame_unref(change_head);
  free(record_uri);
  /* Commit (the trigger's clock, ms) -> its updates queued; they are written this loop turn. */
  stats_observe(&w->notify_delay, (double)(store_now_ms() - row->committed_at) / 1000);
}

static void subs_on_batch_end(void *data) {
  wait_flush(data);
}

/* The session's subscription to exactly this URI text, and the link to it. */
static sub_t **session_sub_slot(session_t *s, const char *uri) {
  sub_t **p = &s->subs;
  while (*p != NULL && strcmp((*p)->topic->uri, uri) != 0) p = &(*p)->owner_next;
  return p;
}

/*
 * A session that holds many subscriptions finds one by URI in a map, made
 * when it reaches SESSION_SUBS_INDEXED and kept up to date after; fewer are
 * searched in the list (an idle session pays no map).
 */
#define SESSION_SUBS_INDEXED 16

static void session_index_drop(session_t *s) {
  if (s->subs_by_uri == NULL) return;
  strmap_finish(s->subs_by_uri);
  free(s->subs_by_uri);
  s->subs_by_uri = NULL;
}

static sub_t *session_sub_find(session_t *s, const char *uri) {
  if (s->subs_by_uri == NULL && s->n_subs >= SESSION_SUBS_INDEXED) {
    s->subs_by_uri = mem_alloc(sizeof(strmap));
    strmap_init(s->subs_by_uri);
    for (sub_t *sub = s->subs; sub != NULL; sub = sub->owner_next)
      strmap_put(s->subs_by_uri, sub->topic->uri, strlen(sub->topic->uri), sub);
  }
  if (s->subs_by_uri != NULL) return strmap_get(s->subs_by_uri, uri, strlen(uri));
  sub_t **slot = session_sub_slot(s, uri);
  return *slot;
}

/*
 * Does the turn's fan-out gather o's updates: a session's with no
 * subscription of its own debounce (whose hold queue would have to be
 * merged with them), a listen stream's (its debounce, if any, is all its
 * URIs': the turn takes none of their topics)?
 */
static bool owner_gathered(const sub_owner *o) {
  switch (o->kind) {
  case SUB_OWNER_SESSION: return ((const session_t *)o)->n_debounced == 0;
  case SUB_OWNER_LISTEN: return true;
  case SUB_OWNER_WAITER: break;
  }
  return false;
}

/*
 * Counts sub among its topic's gathered subscribers or no longer, and
 * places it in its topic's list: the gathered at the back, after the
 * others, where the turn's fan-out finds them (turn_deliver_topic).
 */
static void sub_set_gathered(sub_t *sub, bool gathered) {
  if (sub->gathered == gathered) return;
  sub_topic *t = sub->topic;
  bool session = sub->owner->kind == SUB_OWNER_SESSION;
  if (gathered) {
    t->n_gathered++;
    t->n_gathered_sessions += session;
  } else {
    t->n_gathered--;
    t->n_gathered_sessions -= session;
  }
  sub->gathered = gathered;
  sub_index_move(sub, !gathered);
  sub_topic_recount(t);
}

/* After o became gathered or stopped being: each of its subscriptions so. */
static void owner_regather(sub_owner *o) {
  bool gathered = owner_gathered(o);
  for (sub_t *sub = owner_first(o); sub != NULL; sub = sub->owner_next)
    sub_set_gathered(sub, gathered);
}

/*
 * Does the turn's walk take t's updates (sub_index.h), rather than the
 * index matching it at every change? When its one subscriber is gathered
 * (a session's or a listen stream's) and its owner holds no other
 * subscription: that stream gets the topic's updates alone, so they need
 * no order among other topics'.
 */
static bool topic_walkable(const sub_topic *t, void *data) {
  const worker_t *w = data;
  if (t->n_subs != 1 || t->n_gathered != 1 || t->debounce.quiet_ms != 0 || w->cfg->coalesce_ms != 0)
    return false;
  const sub_owner *o = t->subs->owner;
  return (o->kind == SUB_OWNER_SESSION ? ((const session_t *)o)->n_subs
                                       : ((const listen_stream *)o)->n_subs) == 1;
}

/*
 * After o's subscriptions changed to n: whether its topics are walkable
 * may have (the index asks again of the added or removed one's itself).
 */
static void owner_rewalk(worker_t *w, sub_owner *o, size_t n) {
  if (n > 2) return; /* it held several before and after: none of its topics was or is walkable */
  for (sub_t *sub = owner_first(o); sub != NULL; sub = sub->owner_next)
    sub_index_rewalk(&w->subs, sub->topic);
}

/* Counts a subscription of o's own debounce (owner_gathered) in or out. */
static void owner_count_debounced(sub_owner *o, const sub_t *sub, bool in) {
  if (o->kind != SUB_OWNER_SESSION || sub->topic->debounce.quiet_ms == 0) return;
  session_t *s = (session_t *)o;
  if (in)
    s->n_debounced++;
  else
    s->n_debounced--;
}

/*
 * Removes the subscription *slot links to from its owner's list (of *n),
 * its held updates, and from the index.
 */
static void owner_unsubscribe(worker_t *w, sub_t **slot, size_t *n) {
  subs_turn_settle(w); /* the turn's fan-out is for the subscribers it was held for */
  sub_t *sub = *slot;
  bool was = owner_gathered(sub->owner);
  *slot = sub->owner_next;
  (*n)--;
  owner_count_debounced(sub->owner, sub, false);
  sub_set_gathered(sub, false);
  if (owner_gathered(sub->owner) != was) owner_regather(sub->owner);
  hold_queue *q = owner_queue(sub->owner);
  if (q != NULL && q->head != NULL) hold_drop_sub(w, q, sub);
  sub_owner *o = sub->owner;
  sub_index_remove(&w->subs, sub);
  owner_rewalk(w, o, *n);
}

sub_t *subs_owner_add(worker_t *w, sub_owner *o, sub_t **head, size_t *n, const char *key,
                      const char *uri, const uri_t *u, int64_t since, const debounce_t *d) {
  buf_t k;
  buf_init(&k);
  buf_append_str(&k, key);
  /* Subscribers with their own debounce share a topic only with the same debounce. */
  if (d != NULL && d->quiet_ms > 0)
    buf_printf(&k, "%s%u %u", SUBS_DEBOUNCE_KEY, d->quiet_ms, d->max_ms);
  subs_turn_settle(w);
  sub_t *sub = sub_index_add(&w->subs, k.data, uri, u, o, since);
  buf_finish(&k);
  if (d != NULL) sub->topic->debounce = *d;
  bool was = owner_gathered(o);
  sub->owner_next = *head;
  *head = sub;
  (*n)++;
  owner_count_debounced(o, sub, true);
  if (owner_gathered(o) != was)
    owner_regather(o);
  else
    sub_set_gathered(sub, was);
  owner_rewalk(w, o, *n);
  return sub;
}

void subs_owner_drop(worker_t *w, sub_t **head, size_t *n) {
  while (*head != NULL) owner_unsubscribe(w, head, n);
}

static void session_unsubscribe(worker_t *w, session_t *s, sub_t **slot) {
  if (s->subs_by_uri != NULL) {
    const char *uri = (*slot)->topic->uri;
    strmap_remove(s->subs_by_uri, uri, strlen(uri));
  }
  owner_unsubscribe(w, slot, &s->n_subs);
}

static void session_subscribe(worker_t *w, session_t *s, const char *key, const char *uri,
                              const uri_t *u, int64_t since, const debounce_t *d) {
  sub_t *sub = subs_owner_add(w, &s->owner, &s->subs, &s->n_subs, key, uri, u, since, d);
  if (s->subs_by_uri != NULL) strmap_put(s->subs_by_uri, sub->topic->uri, strlen(uri), sub);
}

/*
 * Writes the session's whole subscription list to its row (cold paths: a
 * restore that dropped some, a schema change that ended some; a subscribe
 * or an unsubscribe writes its own change alone).
 */
static void session_persist_subs(worker_t *w, session_t *s) {
  cJSON *list = cJSON_CreateArray();
  for (sub_t *sub = s->subs; sub != NULL; sub = sub->owner_next) {
    const debounce_t *d = &sub->topic->debounce;
    if (d->quiet_ms == 0) {
      cJSON_AddItemToArray(list, cJSON_CreateString(sub->topic->uri));
      continue;
    }
    cJSON *item = cJSON_CreateObject(); /* {"uri": U, "debounce": {...}} */
    cJSON_AddStringToObject(item, "uri", sub->topic->uri);
    cJSON_AddItemToObject(item, "debounce", debounce_json(d));
    cJSON_AddItemToArray(list, item);
  }
  char *text = cJSON_PrintUnformatted(list);
  cJSON_Delete(list);
  if (text == NULL) abort(); /* cJSON ran out of memory: the policy of mem.h */
  writer_session_set_subscriptions(w->writer, s->id, text);
  cJSON_free(text);
}

/*
 * Why u, parsed but not resolved against the schema of st, is not
 * subscribable: its table or a filtered column gone, or anything else
 * (a metadata URI, a grant taken away, a key out of bounds).
 */
static const char *gone_reason_of(store_t *st, const uri_t *u) {
  if (u->table == NULL) return "it is no longer subscribable";
  const store_table *table = store_find_table(st, u->table);
  if (table == NULL) return "its table no longer exists";
  for (size_t i = 0; i < u->n_filters; i++)
    if (store_column_index(table, u->filters[i].column) < 0)
      return "a column it filters on no longer exists";
  return "it is no longer subscribable";
}

/* gone_reason_of for a URI as text: one that no longer parses is no longer subscribable. */
static const char *gone_reason_in(const char *base, store_t *st, const char *text) {
  uri_t u;
  if (uri_parse(base, text, &u) != 0) return "it is no longer subscribable";
  const char *why = gone_reason_of(st, &u);
  uri_finish(&u);
  return why;
}

/*
 * Why a subscribed URI no longer resolves after a schema change, or NULL
 * when it still does.
 */
static const char *subs_gone_reason(worker_t *w, const sub_topic *t) {
  uri_t u;
  if (subs_resolve(w, t->uri, &u) == 0) {
    uri_finish(&u);
    return NULL;
  }
  return gone_reason_of(w->store, &t->parsed);
}

/*
 * The last update of a subscription that ends: names the subscribed URI
 * itself (read it: it is gone), and says why in _meta, left open.
 */
static void format_ended_open(buf_t *b, const char *uri, const char *reason) {
  format_updated_open(b, uri, uri);
  buf_append_str(b, ",\"_meta\":{\"" SUBS_META_ENDED "\":");
  buf_append_json_string(b, reason, strlen(reason));
}

/*
 * Kept in the ring without a stream, and noted until a stream takes it
 * (session_notices_*): it reaches the next stream even when it leaves the
 * ring unsent or a resumption from the audit log passes over it.
 */
static void end_to_session(worker_t *w, void *owner, const char *uri, const char *reason) {
  session_t *s = owner;
  buf_t b;
  buf_init(&b);
  format_ended_open(&b, uri, reason);
  buf_append_str(&b, "}}}");
  if (session_send(s, b.data, b.len, true) != 0) {
    /* kept: cannot fail */
  }
  buf_finish(&b);
  if (s->undelivered > 0) session_notices_add_ended(s, uri, reason, w->cfg->max_subscriptions);
}

static void end_to_listen(worker_t *w, void *owner, const char *uri, const char *reason) {
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "data: ");
  format_ended_open(&b, uri, reason);
  listen_append_id_key(&b);
  listen_deliver(owner, b.data, b.len);
  buf_finish(&b);
}

/*
 * Ends the subscriptions of one owner's list (*head, *n of them) that no
 * longer resolve, each with one last update through end. Returns how many.
 */
static size_t subs_end_gone(worker_t *w, sub_t **head, size_t *n,
                            void (*end)(worker_t *w, void *owner, const char *uri,
                                        const char *reason),
                            void *owner) {
  size_t ended = 0;
  for (sub_t **slot = head; *slot != NULL;) {
    const char *why = subs_gone_reason(w, (*slot)->topic);
    if (why == NULL) {
      slot = &(*slot)->owner_next;
      continue;
    }
    end(w, owner, (*slot)->topic->uri, why);
    owner_unsubscribe(w, slot, n);
    ended++;
  }
  return ended;
}

static void subs_end_gone_session(session_t *s, void *data) {
  worker_t *w = data;
  /* Persisted: a table created again does not bring them back. */
  if (subs_end_gone(w, &s->subs, &s->n_subs, end_to_session, s) > 0) {
    session_index_drop(s); /* made again when next needed */
    session_persist_subs(w, s);
  }
}

static void subs_end_gone_listens(worker_t *w) {
  for (listen_stream *l = w->listens; l != NULL; l = l->next)
    subs_end_gone(w, &l->subs, &l->n_subs, end_to_listen, l);
}

/*
 * The resource list changed: every session hears of it, streaming or not.
 * Kept in the ring without a stream, and noted until a stream takes it, as
 * end_to_session's notices are.
 */
static void subs_tell_session(session_t *s, void *data) {
  static const char msg[] =
      "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/list_changed\"}";
  if (session_send(s, msg, sizeof(msg) - 1, true) != 0) {
    /* kept: cannot fail */
  }
  if (s->undelivered > 0) s->list_pending = true;
}

/*
 * After a resumption from the audit log, which passes over the ring's
 * unsent frames: the notices they held, sent again (after the updates).
 */
static void subs_send_notices(worker_t *w, session_t *s) {
  bool list_changed;
  session_ended *e = session_notices_take(s, &list_changed);
  for (size_t i = 0; e != NULL && i < e->n; i++)
    end_to_session(w, s, e->items[i].uri, e->items[i].reason);
  if (list_changed) subs_tell_session(s, NULL);
  session_ended_destroy(e);
}

static void subs_on_schema_change(void *data) {
  worker_t *w = data;
  log_info("exported tables changed");
  subs_turn_settle(w); /* the ends below come after the updates before them */
  /* Subscriptions to what is gone end visibly, before the list says it changed. */
  session_registry_foreach(&w->sessions, subs_end_gone_session, w);
  subs_end_gone_listens(w);
  subs_update_active(w);
  session_registry_foreach(&w->sessions, subs_tell_session, NULL);
  listen_lists_changed(w, LISTEN_RESOURCES_LIST);
}

static void subs_check_schema(void *data);

static const tailer_ops subs_tailer_ops = {
    .on_change = subs_on_change,
    .on_batch_end = subs_on_batch_end,
    .on_schema_change = subs_on_schema_change,
    .check_schema = subs_check_schema,
};

/* A session's delivered position: below its own oldest held update too. */
static int64_t subs_position_cb(const session_t *s, void *data) {
  int64_t pos = subs_delivered_position(data);
  int64_t held = hold_oldest(&s->held);
  return held <= pos ? held - 1 : pos;
}

int64_t subs_position(worker_t *w) {
  return tailer_position(&w->tailer);
}

void subs_init(worker_t *w) {
  sub_index_init(&w->subs);
  w->subs.walkable = topic_walkable;
  w->subs.walkable_data = w;
  buf_init(&w->fmt_uri);
  buf_init(&w->key_fold);
  buf_init(&w->fmt_head);
  buf_init(&w->turn.uris);
  buf_init(&w->turn.bytes);
  buf_init(&w->turn.listen_heads);
  buf_init(&w->turn.run);
  buf_init(&w->turn.listen_all);
  strmap_init(&w->coalesce);
  tailer_init(&w->tailer, w->loop, w->store, &w->lane, w->cfg->db_path, &subs_tailer_ops, w);
  uv_timer_init(w->loop, &w->coalesce_timer);
  w->coalesce_timer.data = w;
  strmap_init(&w->subs_unsaved);
  uv_timer_init(w->loop, &w->subs_retry);
  w->subs_retry.data = w;
  w->subs_retry_ms = SUBS_RETRY_MS;
  writer_on_subscription_unsaved(w->writer, subs_row_unsaved, w);
  hold_init(w);
  w->sessions.position = subs_position_cb;
  w->sessions.position_data = w;
  w->sessions.settle = subs_turn_end;
  w->sessions.settle_data = w;
}

void subs_close(worker_t *w) {
  subs_turn_settle(w);
  wait_finish_all(w);
  tailer_close(&w->tailer);
  uv_close((uv_handle_t *)&w->coalesce_timer, NULL);
  uv_close((uv_handle_t *)&w->subs_retry, NULL);
  hold_close(w);
}

void subs_finish(worker_t *w) {
  coalesce_finish(w);
  strmap_finish(&w->subs_unsaved);
  buf_finish(&w->fmt_uri);
  buf_finish(&w->key_fold);
  buf_finish(&w->fmt_head);
  free(w->matched);
  w->matched = NULL;
  turn_arrays_free(w);
  free(w->turn.topics);
  free(w->turn.start);
  buf_finish(&w->turn.uris);
  buf_finish(&w->turn.bytes);
  buf_finish(&w->turn.listen_heads);
  buf_finish(&w->turn.run);
  buf_finish(&w->turn.listen_all);
  tailer_finish(&w->tailer);
  sub_index_finish(&w->subs);
}

void subs_update_active(worker_t *w) {
  /* A confirmation waits for an answer that may come through the log (mcp_on_signal). */
  tailer_set_active(&w->tailer, w->subs.n_subs > 0 || w->sessions.n_streams > 0 ||
                                    w->n_listens > 0 || w->n_confirms > 0);
}

void subs_after_write(worker_t *w) {
  tailer_kick(&w->tailer);
  if (w->on_local_commit != NULL) w->on_local_commit(w);
}

void subs_external_commit(worker_t *w) {
  tailer_kick(&w->tailer);
}

/* Re-reads the schema now: list_changed when the exported tables changed, triggers by the writer.
 */
static void subs_check_schema(void *data) {
  worker_t *w = data;
  bool changed = false;
  int64_t before = w->schema_version_seen;
  if (store_refresh_schema(w->store, &changed) != 0) return;
  /* A new schema: the writer brings the audit triggers up to date (the loop never writes). */
  w->schema_version_seen = store_schema_generation(w->store);
  if (w->schema_version_seen != before) writer_sync_triggers(w->writer);
  if (changed) subs_on_schema_change(w);
}

void subs_refresh_schema(worker_t *w) {
  /* Once per loop tick is enough: requests of the same tick see the same schema. */
  uint64_t now = uv_now(w->loop);
  if (now == w->schema_checked_at) return;
  w->schema_checked_at = now;
  subs_check_schema(w);
}

/* subscribe / unsubscribe ----------------------------------------------------------- */

/*
 * A name was not found: on a store whose refreshes keep their own pace
 * (PostgreSQL), look at the schema now, at most every SUBS_MISS_CHECK_MS
 * (a client asking for tables that do not exist must not cost a catalog
 * query each). Returns whether it looked.
 */
static bool subs_schema_after_miss(worker_t *w) {
  uint64_t now = uv_now(w->loop);
  if (w->schema_forced_at != 0 && now - w->schema_forced_at < SUBS_MISS_CHECK_MS) return false;
  if (!store_schema_stale(w->store)) return false;
  w->schema_forced_at = now;
  subs_check_schema(w);
  return true;
}

const store_table *subs_find_table(worker_t *w, const char *name) {
  const store_table *t = store_find_table(w->store, name);
  if (t == NULL && subs_schema_after_miss(w)) t = store_find_table(w->store, name);
  return t;
}

int subs_resolve(worker_t *w, const char *text, uri_t *u) {
  int rc = subs_resolve_in(w->cfg->public_url, w->store, text, u);
  if (rc != 0 && subs_schema_after_miss(w))
    rc = subs_resolve_in(w->cfg->public_url, w->store, text, u);
  return rc;
}

/* Why the last subs_resolve_in of this thread failed beyond the grammar, and on which table. */
static __thread char subs_why[256], subs_why_table[128];

int subs_resolve_in(const char *base, store_t *st, const char *text, uri_t *u) {
  subs_why[0] = subs_why_table[0] = '\0';
  if (uri_parse(base, text, u) != 0) return -EINVAL;
  const store_table *t = NULL;
  if (u->kind == URI_COLLECTION || u->kind == URI_RECORD || u->kind == URI_FILTERED)
    t = store_find_table(st, u->table);
  bool ok = t != NULL;
  for (size_t i = 0; ok && i < u->n_filters; i++) {
    int col = store_column_index(t, u->filters[i].column);
    ok = col >= 0;
    if (!ok) {
      snprintf(subs_why, sizeof(subs_why), "unknown column %.100s in table %.100s",
               u->filters[i].column, t->name);
      snprintf(subs_why_table, sizeof(subs_why_table), "%s", t->name);
    }
    /* Ordered operators compare as the column's affinity says (sub_filters_match). */
    if (ok) u->filters[i].numeric = store_column_numeric(t, col);
    if (ok) u->filters[i].untyped = t->cols[col].untyped;
  }
  /* A record key is checked against its table: bounded, and canonical for an integer key. */
  if (ok && u->kind == URI_RECORD && strlen(u->key) > SUBS_KEY_MAX) ok = false;
  if (ok && u->kind == URI_RECORD && t->key_integer) {
    /* The audit log spells integer keys canonically; so must the topic. */
    char *end;
    errno = 0;
    long long k = strtoll(u->key, &end, 10);
    ok = errno == 0 && end != u->key && *end == '\0';
    if (ok) {
      char canon[32];
      snprintf(canon, sizeof(canon), "%lld", k);
      free(u->key);
      u->key = mem_strdup(canon);
    }
  }
  if (ok && u->kind == URI_RECORD && subs_key_folds(t)) subs_key_fold(u->key);
  if (!ok) {
    uri_finish(u);
    return -EINVAL;
  }
  return 0;
}

const char *subs_resolve_error(void) {
  return uri_error()[0] != '\0' ? uri_error() : subs_why;
}

int subs_resolve_for(worker_t *w, const auth_principal *p, const char *text, unsigned right,
                     uri_t *u, char **key) {
  *key = NULL;
  if (subs_resolve(w, text, u) != 0) {
    auth_scope scope;
    /* A column's name only to whom may see the table: to others it is as if it did not exist. */
    if (subs_why[0] != '\0' && auth_table_access(p, subs_why_table, right, &scope) != 0)
      subs_why[0] = '\0';
    return -EINVAL;
  }
  auth_scope scope;
  if (auth_table_access(p, u->table, right, &scope) != 0 || auth_scope_apply(&scope, u) != 0) {
    uri_finish(u);
    return -EINVAL; /* as if the table did not exist: access says nothing of what is there */
  }
  *key = auth_scope_topic_key(&scope, text);
  return 0;
}

/* The reason a tombstone of a session row's list gives (subs_list_prune), or NULL. */
static const char *row_ended_reason(const cJSON *item) {
  const cJSON *opts =
      cJSON_IsObject(item) ? cJSON_GetObjectItemCaseSensitive(item, "debounce") : NULL;
  const cJSON *why =
      cJSON_IsObject(opts) ? cJSON_GetObjectItemCaseSensitive(opts, SUBS_ROW_ENDED) : NULL;
  return cJSON_IsString(why) ? why->valuestring : NULL;
}

char *subs_list_prune(const char *base, store_t *st, const char *json) {
  cJSON *list = cJSON_Parse(json != NULL ? json : "[]");
  if (!cJSON_IsArray(list)) {
    cJSON_Delete(list);
    return NULL;
  }
  bool changed = false;
  for (cJSON *item = list->child, *next; item != NULL; item = next) {
    next = item->next;
    const cJSON *text = cJSON_IsObject(item) ? cJSON_GetObjectItemCaseSensitive(item, "uri") : item;
    if (row_ended_reason(item) != NULL) continue; /* ended already: stays so */
    uri_t u;
    if (cJSON_IsString(text) && subs_resolve_in(base, st, text->valuestring, &u) == 0) {
      uri_finish(&u);
      continue;
    }
    if (cJSON_IsString(text)) {
      cJSON *tomb = cJSON_CreateObject();
      cJSON_AddStringToObject(tomb, "uri", text->valuestring);
      cJSON *opts = cJSON_AddObjectToObject(tomb, "debounce");
      cJSON_AddStringToObject(opts, SUBS_ROW_ENDED, gone_reason_in(base, st, text->valuestring));
      if (!cJSON_ReplaceItemViaPointer(list, item, tomb)) abort(); /* item is list's */
    } else {
      cJSON_Delete(cJSON_DetachItemViaPointer(list, item)); /* not a URI: nothing to tell */
    }
    changed = true;
  }
  char *out = changed ? cJSON_PrintUnformatted(list) : NULL;
  cJSON_Delete(list);
  if (!changed) return NULL;
  if (out == NULL) abort(); /* cJSON out of memory: mem.h's policy */
  char *copy = mem_strdup(out);
  cJSON_free(out);
  return copy;
}

/*
 * A subscription of a session changed on another worker or host (the
 * subscription log, store.h): when the session is live here, its
 * subscription follows, effective from the log row's position, so that
 * the host holding its stream notifies exactly the changes committed
 * after the subscribe, wherever the subscribe was served.
 */
static void subs_on_subscription_log(worker_t *w, const store_audit_row *row) {
  if (row->principal != NULL && strcmp(row->principal, w->origin) == 0) return; /* ours */
  session_t *s = session_registry_find(&w->sessions, row->key, strlen(row->key));
  if (s == NULL) return;
  const cJSON *old_row, *new_row;
  store_audit_row_images(row, &old_row, &new_row);
  bool put = new_row != NULL;
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(put ? new_row : old_row, "uri");
  if (!cJSON_IsString(uri)) return;
  if (!put) {
    sub_t **slot = session_sub_slot(s, uri->valuestring);
    if (*slot == NULL) return;
    session_unsubscribe(w, s, slot);
    if (s->stream != NULL) http_stream_flush(s->stream);
    subs_update_active(w);
    return;
  }
  /* The topic key carries the row scope the subscribing host applied ("uri\ncolumn=value"). */
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(new_row, "key");
  const cJSON *debounce = cJSON_GetObjectItemCaseSensitive(new_row, "debounce");
  debounce_t d;
  char why[160];
  uri_t u;
  if (!cJSON_IsString(key) ||
      debounce_parse(cJSON_IsObject(debounce) ? debounce : NULL, &d, why, sizeof(why)) != 0 ||
      subs_resolve(w, uri->valuestring, &u) != 0)
    return;
  auth_scope scope;
  auth_scope_of_topic_key(key->valuestring, &scope);
  if (auth_scope_apply(&scope, &u) == 0) {
    if (session_sub_find(s, uri->valuestring) != NULL)
      session_unsubscribe(w, s, session_sub_slot(s, uri->valuestring));
    session_subscribe(w, s, key->valuestring, uri->valuestring, &u, row->seq, &d);
    subs_update_active(w);
  }
  uri_finish(&u);
}

bool subs_session_has(session_t *s, const char *uri) {
  return session_sub_find(s, uri) != NULL;
}

/* Writes one subscription's row: key and d as subscribed. */
static void session_put_row(worker_t *w, session_t *s, const char *uri, const char *key,
                            const debounce_t *d, void (*then)(int rc, void *data), void *data) {
  char *debounce = NULL;
  if (d != NULL && d->quiet_ms > 0) {
    cJSON *j = debounce_json(d);
    debounce = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
  }
  writer_session_subscription_then(w->writer, s->id, uri, key, debounce, false, then, data);
  cJSON_free(debounce);
}

void subs_session_add(worker_t *w, session_t *s, const char *key, const char *uri, const uri_t *u,
                      int64_t since, const debounce_t *d, void (*then)(int rc, void *data),
                      void *data) {
  /* Re-subscribing replaces (finding its link is a list walk, but only then). */
  if (session_sub_find(s, uri) != NULL) session_unsubscribe(w, s, session_sub_slot(s, uri));
  session_subscribe(w, s, key, uri, u, since, d);
  /* The change alone goes to the row: a subscribe costs the same whatever the session holds. */
  session_put_row(w, s, uri, key, d, then, data);
  subs_update_active(w);
}

/*
 * Subscription rows that could not be written ----------------------------------
 *
 * A subscribe or unsubscribe is answered once its row is written or its
 * write failed (the database away, locked past --write-timeout): the live
 * session holds the change either way. A failed row would otherwise stay
 * wrong: an unsubscribed URI would come back with a restore (another
 * worker, another host, a restart), a subscribed one would be missing. So
 * each failure is noted by session and URI, and a timer writes the row
 * again from what the session holds then: the subscription's row when it
 * holds the URI, none when it does not. Writing the present state makes
 * the retry right whatever changed meanwhile and in whatever order the
 * failures came. It runs after SUBS_RETRY_MS, doubling up to
 * SUBS_RETRY_MAX_MS while writes keep failing. A session that is gone
 * (closed, expired) is left alone: its row went with it, or another
 * worker owns it now.
 */
static void subs_on_retry(uv_timer_t *h);

static void subs_row_unsaved(const char *id, const char *uri, void *data) {
  worker_t *w = data;
  if (w->closing) return;
  buf_t k;
  buf_init(&k);
  buf_printf(&k, "%s\n%s", id, uri);
  strmap_put(&w->subs_unsaved, k.data, k.len, w); /* noted once however often it failed */
  buf_finish(&k);
  if (!uv_is_active((uv_handle_t *)&w->subs_retry))
    uv_timer_start(&w->subs_retry, subs_on_retry, w->subs_retry_ms, 0);
}

/* The row is written: a later failure starts from the first delay again. */
static void subs_row_retried(int rc, void *data) {
  worker_t *w = data;
  if (rc == 0) w->subs_retry_ms = SUBS_RETRY_MS;
}

static void subs_retry_one(const char *key, size_t len, void *value, void *data) {
  worker_t *w = data;
  (void)value;
  const char *nl = memchr(key, '\n', len);
  session_t *s = nl == NULL ? NULL : session_registry_find(&w->sessions, key, (size_t)(nl - key));
  if (s == NULL) return;
  char *uri = mem_strndup(nl + 1, len - (size_t)(nl + 1 - key));
  sub_t *sub = session_sub_find(s, uri);
  if (sub == NULL) {
    writer_session_subscription_then(w->writer, s->id, uri, NULL, NULL, true, subs_row_retried, w);
  } else { /* the row's key is the topic's without its debounce (subs_owner_add) */
    const char *tk = sub->topic->key, *cut = strstr(tk, SUBS_DEBOUNCE_KEY);
    char *key_text = mem_strndup(tk, cut != NULL ? (size_t)(cut - tk) : strlen(tk));
    session_put_row(w, s, uri, key_text, &sub->topic->debounce, subs_row_retried, w);
    free(key_text);
  }
  free(uri);
}

static void subs_on_retry(uv_timer_t *h) {
  worker_t *w = h->data;
  strmap pending = w->subs_unsaved; /* failures of these writes note themselves anew */
  strmap_init(&w->subs_unsaved);
  w->subs_retry_ms =
      w->subs_retry_ms * 2 > SUBS_RETRY_MAX_MS ? SUBS_RETRY_MAX_MS : w->subs_retry_ms * 2;
  strmap_foreach(&pending, subs_retry_one, w);
  strmap_finish(&pending);
}

bool subs_session_remove(worker_t *w, session_t *s, const char *uri,
                         void (*then)(int rc, void *data), void *data) {
  if (session_sub_find(s, uri) == NULL) return false;
  sub_t **slot = session_sub_slot(s, uri);
  session_unsubscribe(w, s, slot);
  subs_update_active(w);
  /* Updates already queued go out before the caller answers, none after. */
  if (s->stream != NULL) http_stream_flush(s->stream);
  writer_session_subscription_then(w->writer, s->id, uri, NULL, NULL, true, then, data);
  return true;
}

void subs_session_drop(worker_t *w, session_t *s) {
  session_index_drop(s);
  subs_owner_drop(w, &s->subs, &s->n_subs);
  hold_clear(w, &s->held);
  subs_update_active(w);
}

/*
 * Restores the subscriptions of a session's row. Each that no longer
 * resolves (or that the prune of a schema change left as a tombstone,
 * subs_list_prune) ends as a live one does: one last update, kept for the
 * next stream, and gone from the row. This process cannot know which
 * list_changed the session heard before it: it gets one (a spare one is
 * harmless, a lost one is not).
 */
void subs_session_restore(worker_t *w, session_t *s, const auth_principal *p,
                          const char *subscriptions) {
  cJSON *list = cJSON_Parse(subscriptions != NULL ? subscriptions : "[]");
  const cJSON *item;
  size_t dropped = 0;
  cJSON_ArrayForEach(item, list) {
    uri_t u;
    char *key;
    /* A URI, or {"uri": U, "debounce": {...}} for a subscription with its own debounce. */
    const cJSON *text = cJSON_IsObject(item) ? cJSON_GetObjectItemCaseSensitive(item, "uri") : item;
    if (!cJSON_IsString(text)) {
      dropped++;
      continue;
    }
    const char *ended = row_ended_reason(item);
    if (ended != NULL) {
      end_to_session(w, s, text->valuestring, ended);
      dropped++;
      continue;
    }
    debounce_t d;
    char why[160];
    const cJSON *debounce =
        cJSON_IsObject(item) ? cJSON_GetObjectItemCaseSensitive(item, "debounce") : NULL;
    if (debounce_parse(debounce, &d, why, sizeof(why)) != 0 ||
        s->n_subs >= w->cfg->max_subscriptions ||
        subs_resolve_for(w, p, text->valuestring, AUTH_SUBSCRIBE, &u, &key) != 0) {
      /* No longer subscribable (a dropped table or column, a grant taken away, a lower limit). */
      end_to_session(w, s, text->valuestring,
                     gone_reason_in(w->cfg->public_url, w->store, text->valuestring));
      dropped++;
      continue;
    }
    if (session_sub_find(s, text->valuestring) == NULL) {
      /* Since 0: what it missed is decided by the stream's Last-Event-ID. */
      session_subscribe(w, s, key, text->valuestring, &u, 0, &d);
    }
    uri_finish(&u);
    free(key);
  }
  cJSON_Delete(list);
  if (dropped > 0) session_persist_subs(w, s);
  subs_tell_session(s, NULL);
  subs_update_active(w);
}

/* Resumption ---------------------------------------------------------------------
 * A stream resumes after a position (frame.h): the updates the session's
 * subscriptions would have received since, and nothing the client already
 * has. Each (record URI, subscription) pair changed since is sent once,
 * named by its newest change, in (seq, order) order like live updates, so
 * a client cut off in the middle resumes exactly from where it was.
 */

/* Where recovered updates go: a session's stream (frames) or a listen stream. */
typedef struct recover_sink {
  sub_t *subs; /* the owner's subscriptions (through owner_next) */
  size_t n_subs;
  void (*send)(worker_t *w, void *owner, int64_t seq, char tag, uint64_t order, const char *uri,
               const char *subscribed);
  void *owner;
  const char *who; /* for the log */
} recover_sink;

typedef struct recover_item {
  char *uri;              /* the record changed */
  const char *subscribed; /* its topic's URI */
  int64_t seq;            /* its newest change */
  uint64_t order;
} recover_item;

typedef struct recover_ctx {
  worker_t *w;
  const recover_sink *sink;
  frame_pos after; /* send what comes after this position... */
  bool inclusive;  /* ...or at it */
  int64_t upto;    /* what is after this goes live */
  strmap seen;     /* "<record uri>\n<subscribed uri>" -> index + 1 in items */
  buf_t key;
  buf_t fold;          /* a change's key folded (change_of) */
  recover_item *items; /* SUBS_RECOVER_MAX slots */
  size_t n_items;
  int64_t last;     /* last seq read */
  size_t rows_read; /* of SUBS_RECOVER_ROWS */
  bool rows;        /* the row images are parsed (the table has filtered or row-scoped topics) */
  bool overflow;    /* too many URIs or rows: the re-read fallback */
} recover_ctx;

/* Does the update (seq, order) of a pair come after the resume point? */
static bool recover_wanted(const recover_ctx *ctx, int64_t seq, uint64_t order) {
  if (seq != ctx->after.seq) return seq > ctx->after.seq;
  if (ctx->after.tag != 't') return false; /* s and r positions: every update of seq is had */
  return ctx->inclusive ? order >= ctx->after.n : order > ctx->after.n;
}

static int recover_row(const store_audit_row *row, void *data) {
  recover_ctx *ctx = data;
  if (row->seq > ctx->upto) return 1;
  if (++ctx->rows_read > SUBS_RECOVER_ROWS) {
    ctx->overflow = true;
    return 1;
  }
  ctx->last = row->seq;
  sub_change change = change_of(ctx->w, row, ctx->rows, &ctx->fold);
  char *record_uri = NULL;
  for (sub_t *sub = ctx->sink->subs; sub != NULL; sub = sub->owner_next) {
    if (sub->since_seq >= row->seq || !recover_wanted(ctx, row->seq, sub->topic->order) ||
        !sub_topic_matches(sub->topic, &change))
      continue;
    if (record_uri == NULL)
      record_uri = uri_format_record(ctx->w->cfg->public_url, row->table, row->key);
    buf_reset(&ctx->key);
    buf_printf(&ctx->key, "%s\n%s", record_uri, sub->topic->uri);
    uintptr_t at = (uintptr_t)strmap_get(&ctx->seen, ctx->key.data, ctx->key.len);
    if (at != 0) { /* one update per pair, named by its newest change */
      ctx->items[at - 1].seq = row->seq;
      continue;
    }
    if (ctx->n_items == SUBS_RECOVER_MAX) {
      ctx->overflow = true;
      break;
    }
    ctx->items[ctx->n_items++] =
        (recover_item){mem_strdup(record_uri), sub->topic->uri, row->seq, sub->topic->order};
    strmap_put(&ctx->seen, ctx->key.data, ctx->key.len, (void *)(uintptr_t)ctx->n_items);
  }
  free(record_uri);
  return ctx->overflow ? 1 : 0;
}

static int recover_item_compare(const void *a, const void *b) {
  const recover_item *x = a, *y = b;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  if (x->order != y->order) return x->order < y->order ? -1 : 1;
  int c = strcmp(x->uri, y->uri);
  return c != 0 ? c : strcmp(x->subscribed, y->subscribed);
}

/* A session's sink: one recovered notification as a frame of the session. */
static void recover_to_session(worker_t *w, void *owner, int64_t seq, char tag, uint64_t order,
                               const char *uri, const char *subscribed) {
  session_t *s = owner;
  buf_t json;
  buf_init(&json);
  format_updated(&json, uri, subscribed);
  frame_t *f = frame_create(seq, tag, order, json.data, json.len);
  buf_finish(&json);
  s->registry->frames_replayed++;
  session_deliver(s, frame_whole(f));
  frame_unref(f);
}

/* A listen stream's sink: the update as a live one (no ids on listen streams). */
static void recover_to_listen(worker_t *w, void *owner, int64_t seq, char tag, uint64_t order,
                              const char *uri, const char *subscribed) {
  buf_t head;
  buf_init(&head);
  format_listen_updated(&head, uri, subscribed, seq);
  listen_deliver(owner, head.data, head.len);
  buf_finish(&head);
  w->sessions.frames_replayed++;
}

/*
 * The client's subscriptions may have changed anywhere: one update per
 * subscription, naming the subscribed URI itself, tells it to re-read as
 * of position seq. When rest is set, the client was cut off inside such a
 * series at ctx->after: only the subscriptions after that point get one.
 */
static size_t recover_reread(recover_ctx *ctx, int64_t seq, bool rest) {
  const recover_sink *sink = ctx->sink;
  sub_topic **topics = mem_alloc((sink->n_subs + 1) * sizeof(sub_topic *));
  size_t n = 0;
  for (sub_t *sub = sink->subs; sub != NULL; sub = sub->owner_next) topics[n++] = sub->topic;
  qsort(topics, n, sizeof(sub_topic *), sub_topic_compare);
  size_t sent = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t order = topics[i]->order;
    if (rest && (ctx->inclusive ? order < ctx->after.n : order <= ctx->after.n)) continue;
    sink->send(ctx->w, sink->owner, seq, 'r', order, topics[i]->uri, topics[i]->uri);
    sent++;
  }
  free(topics);
  return sent;
}

/*
 * Reads the gap's rows of table (of key's record, when not NULL) after seq
 * after into ctx. False when the store fails.
 */
static bool recover_read_of(recover_ctx *ctx, const char *table, const char *key, int64_t after) {
  ctx->rows = sub_index_needs_rows(&ctx->w->subs, table);
  ctx->last = after;
  while (!ctx->overflow && ctx->last < ctx->upto) {
    int n = 0;
    int64_t before = ctx->last;
    if (store_audit_read_of(ctx->w->store, table, key, before, ctx->upto, TAILER_BATCH, recover_row,
                            ctx, &n) != 0)
      return false;
    if (n < TAILER_BATCH || ctx->last == before) break;
  }
  return true;
}

/*
 * Reads what the sink's subscriptions may want of the gap after seq after:
 * every row of a table one of them watches whole (a collection, a filter),
 * else only their records' rows. The indexes make that cost what it
 * yields: a gap of a million changes elsewhere costs nothing, where reading
 * the whole gap held the worker up for most of a second. The updates are
 * sorted afterwards, so the order of reading does not matter.
 */
static bool recover_read(recover_ctx *ctx, int64_t after) {
  strmap whole; /* tables read whole */
  strmap_init(&whole);
  bool ok = true;
  for (sub_t *sub = ctx->sink->subs; ok && !ctx->overflow && sub != NULL; sub = sub->owner_next) {
    const uri_t *u = &sub->topic->parsed;
    if (u->table == NULL || u->kind == URI_RECORD) continue;
    if (strmap_put(&whole, u->table, strlen(u->table), (void *)u) == NULL)
      ok = recover_read_of(ctx, u->table, NULL, after);
  }
  strmap records; /* "table\nkey" read */
  strmap_init(&records);
  for (sub_t *sub = ctx->sink->subs; ok && !ctx->overflow && sub != NULL; sub = sub->owner_next) {
    const uri_t *u = &sub->topic->parsed;
    if (u->kind != URI_RECORD || strmap_get(&whole, u->table, strlen(u->table)) != NULL) continue;
    buf_reset(&ctx->key);
    buf_printf(&ctx->key, "%s\n%s", u->table, u->key);
    if (strmap_put(&records, ctx->key.data, ctx->key.len, (void *)u) == NULL)
      ok = recover_read_of(ctx, u->table, u->key, after);
  }
  strmap_finish(&records);
  strmap_finish(&whole);
  return ok;
}

/*
 * Sends what the owner's subscriptions missed after (or, inclusive, at)
 * position after, up to what is delivered live. Falls back to one re-read
 * update per subscription when the log no longer holds the whole gap or
 * the gap is too wide (SUBS_RECOVER_MAX URIs, SUBS_RECOVER_ROWS rows).
 */
static void subs_recover(worker_t *w, const recover_sink *sink, frame_pos after, bool inclusive) {
  if (sink->subs == NULL) return;
  /* Held updates go out first: a resumption must not overtake them. */
  subs_turn_settle(w);
  subs_flush_held(w);
  recover_ctx ctx = {.w = w,
                     .sink = sink,
                     .after = after,
                     .inclusive = inclusive,
                     .upto = subs_delivered_position(w)};
  strmap_init(&ctx.seen);
  buf_init(&ctx.key);
  buf_init(&ctx.fold);
  ctx.items = mem_alloc(SUBS_RECOVER_MAX * sizeof(recover_item));
  /* The first change that may be wanted. */
  int64_t first = after.tag == 't' ? after.seq : after.seq + 1;
  int64_t pruned = 0;
  /* Exact unless retention deleted a wanted change (0: it never deleted any). */
  bool exact =
      store_audit_pruned_through(w->store, &pruned) == 0 && (pruned == 0 || pruned < first);
  if (exact) exact = recover_read(&ctx, first - 1);
  exact = exact && !ctx.overflow;
  /* All or nothing: a partial list would look complete to the client. */
  size_t sent = 0;
  if (!exact) {
    sent = recover_reread(&ctx, ctx.upto, false);
  } else {
    if (after.tag == 'r') sent = recover_reread(&ctx, after.seq, true); /* finish the series */
    qsort(ctx.items, ctx.n_items, sizeof(recover_item), recover_item_compare);
    for (size_t i = 0; i < ctx.n_items; i++)
      sink->send(w, sink->owner, ctx.items[i].seq, 't', ctx.items[i].order, ctx.items[i].uri,
                 ctx.items[i].subscribed);
    sent += ctx.n_items;
  }
  char from_text[32], n_text[32];
  snprintf(from_text, sizeof(from_text), "%lld", (long long)after.seq);
  snprintf(n_text, sizeof(n_text), "%zu", sent);
  log_info("stream resumed from the audit log", "stream", sink->who, "from", from_text, "updates",
           n_text, "exact", exact ? "true" : "false");
  for (size_t i = 0; i < ctx.n_items; i++) free(ctx.items[i].uri);
  free(ctx.items);
  buf_finish(&ctx.key);
  buf_finish(&ctx.fold);
  strmap_finish(&ctx.seen);
}

static void subs_session_recover(worker_t *w, session_t *s, frame_pos after, bool inclusive) {
  hold_clear(w, &s->held); /* what it holds is in the log: recovered below, at once */
  recover_sink sink = {s->subs, s->n_subs, recover_to_session, s, s->id};
  subs_recover(w, &sink, after, inclusive);
}

void subs_listen_recover(worker_t *w, listen_stream *l, int64_t after) {
  recover_sink sink = {l->subs, l->n_subs, recover_to_listen, l, "listen"};
  subs_recover(w, &sink, (frame_pos){after, 's', 0}, false);
}

void subs_stream_open(worker_t *w, session_t *s, http_conn_t *c, const char *last_event_id) {
  session_stream_open(s, c);
  subs_update_active(w); /* streams keep the feed alive (list_changed) */
  /* The replay is bounded (the ring, or SUBS_RECOVER_MAX updates): let it all through. */
  http_stream_exempt(c, true);
  size_t id_len = last_event_id != NULL ? strlen(last_event_id) : 0;
  frame_pos after;
  bool recovered = false;
  if (last_event_id != NULL && session_replay_after(s, last_event_id, id_len)) {
    /* Exact: the ring still held it. */
  } else if (last_event_id != NULL && frame_id_parse(last_event_id, id_len, &after) == 0) {
    s->undelivered = 0; /* the audit log covers the updates; the notices follow them */
    subs_session_recover(w, s, after, false);
    recovered = true;
  } else if (s->lost) {
    /* No id (or one we did not mint), and updates fell off the ring unsent. */
    s->undelivered = 0;
    subs_session_recover(w, s, s->lost_from, true);
    recovered = true;
  } else {
    /* A first stream, or an id we cannot place: what no stream has taken yet. */
    session_replay_undelivered(s);
  }
  s->lost = false;
  if (recovered)
    subs_send_notices(w, s); /* the ring's unsent notices, passed over above */
  else if (s->undelivered == 0)
    session_notices_clear(s); /* the ring held every unsent frame: they went out */
  session_stream_prime(s);
  /* The recovery may have waited for the database (lane.h): the stream may be gone since. */
  if (s->stream == c) http_stream_exempt(c, false);
}
