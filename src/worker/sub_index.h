/*
 * The subscription index of one worker: which subscriptions a committed
 * change matches. A topic is one subscribed URI, exactly as clients wrote
 * it; every subscription to that text shares the topic, so a notification
 * is formatted once per topic and the same frame goes to every subscriber.
 * Topics are found per change through:
 *   table name          -> collection topics and filtered topics
 *   (table, record key) -> record topics
 * and a filtered topic with an equality among its filters (col=v, col=eq=v,
 * col=v1|v2) under the values that can satisfy it, one with a starts-with
 * (col=sw=p) under its prefix:
 *   (table, column, value or prefix) -> filtered topics
 * and one with neither but an ordered filter on a numeric column at its
 * number (sub_index.c, the range index):
 *   (table, column, gt/ge or lt/le) -> filtered topics sorted by number
 * Matching a change costs one hash lookup per kind and per such column in
 * its old and new rows (and per prefix length), plus one filter test per
 * topic found there and per filtered topic without any: no SQL, no
 * allocation per subscriber, and a table of many selective topics (one
 * per customer, say) is not tested topic by topic. A topic whose one
 * filter is ne is filed under the values it excludes, so that its test is
 * a look at a mark the change's lookup left, not a comparison; and one
 * whose owner serves it alone is not looked at per change at all, but
 * once a turn, by the walk (sub_index_walk).
 *
 * The index knows nothing of sessions or streams: a subscription's owner is
 * an opaque pointer, so a session's GET stream, a wait_and_read call and a
 * listen stream subscribe alike.
 */
#ifndef MCPSUB_SUB_INDEX_H
#define MCPSUB_SUB_INDEX_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strmap.h"
#include "common/uri.h"
#include "worker/debounce.h"
#include "worker/frame.h"

typedef struct sub_topic sub_topic;
typedef struct sub sub_t;

/* What a subscription's owner is; every owner struct starts with one. */
typedef enum sub_owner_kind {
  SUB_OWNER_SESSION, /* a session: updates go to its stream and replay ring */
  SUB_OWNER_WAITER,  /* a wait_and_read call: the first update completes it */
  SUB_OWNER_LISTEN,  /* a subscriptions/listen stream (listen.h) */
} sub_owner_kind;

typedef struct sub_owner {
  sub_owner_kind kind;
} sub_owner;

#define SUB_NO_COLUMN 0xFF /* sub_topic.columns: looked up by name */

struct sub_topic {
  /*
   * What every change it matches reads and writes, and what the turn's
   * end reads, first: 64 bytes, one cache line. A change on a table of
   * 10,000 filtered topics goes through all of them (sub_index_match,
   * subs_on_change): a line each is what keeps that pass within the core's
   * cache.
   */
  sub_t *subs; /* subscribers (doubly linked through topic_prev/next) */
  /* Its updates' id end and JSON after the record URI (frame_create_tail): a sole subscriber's
   * half. */
  frame_t *tail;
  uint64_t notified;    /* updates formatted for it (mcpsubctl subs, top) */
  uint64_t ne_marks[2]; /* the match whose old [0] or new [1] row has the filter's value */
  debounce_t debounce;  /* its subscribers' own debounce (part of key), or none */
  uint32_t turn_index;  /* + 1: where the turn's fan-out keeps it (subscriptions.c), or 0 */
  /*
   * Here where a change reads them, of the counts below: are some of its
   * subscribers gathered (the turn's fan-out holds their updates), all of
   * them, how many gathered are sessions' (2 for more: a pair, a frame or
   * none), and are some gathered listen streams'.
   */
  bool some_gathered, all_gathered;
  uint8_t few_gathered_sessions;
  bool gathered_listens;
  /* An ne-only topic (its one filter ne on a named column): that column, whose value the marks
   * test (sub_index.c); SUB_NO_COLUMN for any other. */
  uint8_t ne_column;
  /* An ne-only topic matched by the turn's walk (sub_index_walk), not per change; and, while
   * the walk's changes are kept, + 1: its last exception among them (sub_index.c), or 0. */
  bool walked;
  uint32_t walk_except;
  /*
   * Then its counts (which the turn's end reads only of a topic not all
   * gathered: the flags above say the rest) and what its frames are made of.
   */
  uint64_t order;       /* sub_topic_order(uri): orders and names its updates in event ids */
  const char *uri_json; /* the uri as a JSON string (in tail): formatted once, copied per update */
  uint32_t uri_json_len;
  uint32_t id; /* unique within the index's lifetime */
  size_t n_subs;
  /*
   * Of its subscribers, those the turn's fan-out gathers for (sub_t.gathered),
   * and of those the sessions'. The others come first in subs
   * (sub_index_move).
   */
  size_t n_gathered, n_gathered_sessions;
  sub_t *subs_last; /* the last of subs */
  /* Filter i's column as an index into its table's columns (sub_index.c), or SUB_NO_COLUMN. */
  uint8_t columns[URI_MAX_FILTERS];
  /* The filter (eq, any of, or sw) the table's index finds it by, or -1: tested per change. */
  int8_t eq_filter;
  /* Else the ordered filter the table's range index files it by, or -1. */
  int8_t range_filter;
  frame_tag tag;          /* "-t<order>": its updates' event ids end with it */
  sub_topic *next, *prev; /* in its table's collection or filtered list, or its record bucket */
  uri_t parsed;           /* kind, table, key, filters */
  char *key; /* what the index knows it by: uri, or uri and the subscriber's row scope */
  char *uri; /* exactly as subscribed */
  size_t n_session_subs; /* of its subscribers, those owned by sessions */
  uint64_t busy_mark;    /* notified at the last {"cmd":"subs","busiest":N} (worker_ctl.c) */
};

/* Sets the flags above after n_subs, n_gathered or n_gathered_sessions changed. */
static inline void sub_topic_recount(sub_topic *t) {
  t->some_gathered = t->n_gathered > 0;
  t->all_gathered = t->n_subs > 0 && t->n_gathered == t->n_subs;
  t->few_gathered_sessions = (uint8_t)(t->n_gathered_sessions < 2 ? t->n_gathered_sessions : 2);
  t->gathered_listens = t->n_gathered > t->n_gathered_sessions;
}

struct sub {
  sub_topic *topic;
  sub_owner *owner;
  int64_t since_seq; /* omitCurrent: only changes with a greater audit seq notify */
  sub_t *topic_prev, *topic_next;
  sub_t *owner_next; /* the owner's own list; maintained by the owner */
  bool gathered;     /* counted in its topic's n_gathered (subscriptions.c) */
};

typedef struct sub_index {
  strmap topics;  /* uri -> sub_topic */
  strmap tables;  /* table name -> struct sub_table (collection + filtered lists) */
  strmap records; /* table \0 key -> sub_topic list head */
  uint32_t next_topic_id;
  size_t n_subs;
  /*
   * Which ne-only topics the walk takes (sub_index_walk), as the owner of
   * the index says (NULL: none); asked again of a topic after
   * sub_index_rewalk, and after its subscribers changed.
   */
  bool (*walkable)(const sub_topic *t, void *data);
  void *walkable_data;
  struct sub_table *walk_tables; /* those that kept changes for the walk, linked */
  uint32_t *walk_ids;            /* the walk's scratch: one topic's changes */
  size_t walk_ids_cap;
} sub_index;

/* One committed change, as the tailer read it from audit_log. */
typedef struct sub_change {
  int64_t seq;
  const char *table;
  const char *key;      /* key after the change (before it, for a DELETE) */
  const char *old_key;  /* key before an UPDATE that changed it, else NULL */
  const cJSON *old_row; /* NULL for INSERT, or when not needed */
  const cJSON *new_row; /* NULL for DELETE, or when not needed */
  uint32_t walk_id;     /* the caller's name for it, should the walk keep it (sub_index_match) */
} sub_change;

/*
 * The order key of a subscribed URI: a fixed (unseeded) 64-bit FNV-1a hash
 * of its text, the same in every process and after a restart. The updates
 * one change causes in a session are sent in (order, uri) order, and an
 * event id names its update by it, so that a stream resumed on another
 * worker knows which of them the client already has. It is not used to
 * index anything, so a crafted URI can only reorder its own updates.
 */
uint64_t sub_topic_order(const char *uri);
/* qsort comparator for an array of sub_topic pointers: by (order, uri). */
int sub_topic_compare(const void *a, const void *b);

void sub_index_init(sub_index *idx);
/* Frees every topic and subscription (owners must have dropped theirs). */
void sub_index_finish(sub_index *idx);

/*
 * Adds a subscription of owner to uri (parsed: its parsed form, which the
 * index copies). key names the topic: the URI text itself, unless parsed
 * carries a row scope too (then subscribers of the same URI with different
 * scopes need different topics; see auth_scope_topic_key). A record topic
 * whose parsed form has filters matches a change only when the row matches
 * them before or after it. Never fails; the caller checked the URI is
 * subscribable. The new sub is returned for the owner's list.
 */
sub_t *sub_index_add(sub_index *idx, const char *key, const char *uri, const uri_t *parsed,
                     sub_owner *owner, int64_t since_seq);
/* Removes and frees one subscription; frees its topic when it was the last. */
void sub_index_remove(sub_index *idx, sub_t *s);
/* Moves s to the front of its topic's subscribers, or to the back (sub_index_add: in front). */
void sub_index_move(sub_t *s, bool front);

/* True when some filtered topic exists on table (the change's rows are then needed). */
bool sub_index_needs_rows(const sub_index *idx, const char *table);
/* True when any topic exists on table. */
bool sub_index_watches(const sub_index *idx, const char *table);

/*
 * Calls fn once per topic the change matches (record, collection, and
 * filtered topics whose filters match the old or the new row), in
 * (order, uri) order (sub_topic_compare), but for the walked topics
 * (below). fn must not add or remove topics. True when the change was
 * kept for its table's walked topics, some of which may match it.
 */
bool sub_index_match(sub_index *idx, const sub_change *change,
                     void (*fn)(sub_topic *topic, void *data), void *data);

/*
 * The walk. A table of many ne-only topics (one filter, ne: each matches
 * nearly every change) costs a pass over all of them at every change,
 * each topic's line loaded again change after change. The topics the
 * owner calls walkable (idx->walkable: it serves them alone, in no order
 * shared with other topics) are instead left out of sub_index_match: a
 * change is kept (its walk_id, which of its rows have a value in each
 * column, and the few walked topics its values exclude, found by the same
 * lookup that marks the tested ones), and sub_index_walk then goes through
 * each walked topic once, calling fn with the walk_ids of the kept changes
 * it matches, in the order they were kept (fn gets the topic as walked[i]
 * of its table's n_walked, to start the lines of those ahead); and
 * forgets them. The owner walks before anything changes a topic's
 * subscribers or whether it is walkable (else kept changes would be
 * walked by the topics of another partition).
 */
typedef void sub_walk_fn(sub_topic *const *walked, size_t n_walked, size_t i, const uint32_t *ids,
                         size_t n, void *data);
void sub_index_walk(sub_index *idx, sub_walk_fn *fn, void *data);
/* Whether t is walkable may have changed (the owner's own reasons): asked again at the next
 * change of its table. */
void sub_index_rewalk(sub_index *idx, const sub_topic *t);

/* Does the change concern topic t (the same test sub_index_match applies)? */
bool sub_topic_matches(const sub_topic *t, const sub_change *change);
/* The topic with this key, or NULL. */
sub_topic *sub_index_find(const sub_index *idx, const char *key);

/*
 * True when every filter of parsed holds on row (a JSON object): equality
 * and one-of as before (a number equals text that reads as it), ordered
 * operators as SQLite compares (filter.numeric: the column is numeric), sw
 * and ct on text only; a NULL or missing value matches no filter.
 */
bool sub_filters_match(const uri_t *parsed, const cJSON *row);

#endif
