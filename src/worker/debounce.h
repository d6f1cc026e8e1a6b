/*
 * Per-subscription debounce and the per-stream queue that keeps it in
 * commit order.
 *
 * A subscription may ask (resources/subscribe or subscriptions/listen,
 * params._meta["io.mcpsub/debounce"] = {"quietMs": Q, "maxMs": M}) to hear
 * of a record once it has been quiet for Q ms, and at the latest M ms after
 * its first change held. Its updates then wait in its owner's hold queue (a
 * session's or a listen stream's): one entry per (subscription, record
 * URI), which a newer change of the same record replaces and moves to the
 * tail with its newer audit seq. Commit order on a stream is kept by the
 * queue itself: while a queue holds anything, every update for that owner
 * (debounced or not) joins its tail, and nothing leaves past the head. So
 * the queue is always in seq order, and what an owner has been sent never
 * passes its oldest held change: a session's own frames name a position
 * below it (subs_session_position), so a resumption from the audit log
 * after a crash recovers a held change like any other. A drain sends every
 * queue; a resumption from the audit log replaces a session's queue.
 *
 * Nothing here is on the hot path of an owner without debounce: its queue
 * is empty and one pointer test skips it. A queue is bounded
 * (HOLD_QUEUE_MAX entries): past it, the head goes out early.
 */
#ifndef MCPSUB_DEBOUNCE_H
#define MCPSUB_DEBOUNCE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"

typedef struct worker worker_t;
typedef struct sub sub_t;
typedef struct hold_entry hold_entry;

/* The _meta key of a subscription's debounce. */
#define DEBOUNCE_META      "io.mcpsub/debounce"
#define DEBOUNCE_QUIET_MAX 60000u  /* ms */
#define DEBOUNCE_MAX_MAX   600000u /* ms */
#define HOLD_QUEUE_MAX     4096

typedef struct debounce {
  uint32_t quiet_ms; /* 0: no debounce */
  uint32_t max_ms;
} debounce_t;

typedef struct hold_queue {
  hold_entry *head, *tail;
  size_t n;
  struct hold_queue *prev, *next; /* the worker's queues that hold something */
  bool linked;
} hold_queue;

/* A request's params._meta["io.mcpsub/debounce"], or NULL. */
const cJSON *debounce_in(const cJSON *params);
/*
 * Reads a debounce value v ({"quietMs": Q, "maxMs": M}; NULL: no debounce,
 * 0). -EINVAL with a reason in err for a value out of bounds: quietMs an
 * integer 1..60000, maxMs an integer quietMs..600000 (default 10 x quietMs,
 * at most 600000).
 */
int debounce_parse(const cJSON *v, debounce_t *d, char *err, size_t errlen) MCPSUB_NODISCARD;
/* The debounce as JSON ({"quietMs":Q,"maxMs":M}), for a session's row. */
cJSON *debounce_json(const debounce_t *d);

void hold_init(worker_t *w);
void hold_close(worker_t *w);

/*
 * Queues the update of sub for record_uri at change seq on q: a debounced
 * subscription's (merged with the record's entry when one is held), or any
 * update of an owner whose queue is not empty (it waits its turn).
 */
void hold_add(worker_t *w, hold_queue *q, sub_t *sub, const char *record_uri, int64_t seq);
/* Drops sub's entries (it is being removed). */
void hold_drop_sub(worker_t *w, hold_queue *q, const sub_t *sub);
/* Drops every entry (the owner ends, or a resumption covers them). */
void hold_clear(worker_t *w, hold_queue *q);
/* Sends every entry of every queue now, in order (a drain). */
void hold_flush_all(worker_t *w);
/* The audit seq of the oldest entry, or INT64_MAX when q is empty. */
int64_t hold_oldest(const hold_queue *q);

#endif
