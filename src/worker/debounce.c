/*
 * Per-subscription debounce (see debounce.h). One timer per worker serves
 * every queue: it is armed for the earliest head it knows of, and when it
 * fires it walks the queues that hold something, sends their due heads and
 * re-arms for the next. Entries of debounced subscriptions are also in a
 * map by (subscription, record URI), so that a change merges into the
 * record's held entry in O(1).
 */
#include "worker/debounce.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/mem.h"
#include "worker/subscriptions.h"

struct hold_entry {
  hold_entry *prev, *next;
  sub_t *sub;
  char *record_uri;
  char *map_key;      /* debounced: its key in w->holds; NULL: it only waits its turn */
  int64_t seq;        /* the newest change it announces */
  int64_t release_at; /* loop ms when it may go (0: as soon as it is the head) */
  int64_t deadline;   /* loop ms by which it goes however busy the record is */
};

static bool read_ms(const cJSON *item, uint32_t lo, uint32_t hi, uint32_t *out) {
  if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) ||
      item->valuedouble < lo || item->valuedouble > hi)
    return false;
  *out = (uint32_t)item->valuedouble;
  return true;
}

const cJSON *debounce_in(const cJSON *params) {
  return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(params, "_meta"),
                                          DEBOUNCE_META);
}

int debounce_parse(const cJSON *v, debounce_t *d, char *err, size_t errlen) {
  *d = (debounce_t){0, 0};
  if (v == NULL) return 0;
  const cJSON *max = cJSON_GetObjectItemCaseSensitive(v, "maxMs");
  if (!cJSON_IsObject(v) || !read_ms(cJSON_GetObjectItemCaseSensitive(v, "quietMs"), 1,
                                     DEBOUNCE_QUIET_MAX, &d->quiet_ms)) {
    snprintf(err, errlen, "_meta." DEBOUNCE_META ".quietMs must be an integer from 1 to %u",
             DEBOUNCE_QUIET_MAX);
    return -EINVAL;
  }
  uint64_t dflt = (uint64_t)d->quiet_ms * 10;
  d->max_ms = dflt > DEBOUNCE_MAX_MAX ? DEBOUNCE_MAX_MAX : (uint32_t)dflt;
  if (max != NULL && !read_ms(max, d->quiet_ms, DEBOUNCE_MAX_MAX, &d->max_ms)) {
    snprintf(err, errlen, "_meta." DEBOUNCE_META ".maxMs must be an integer from quietMs to %u",
             DEBOUNCE_MAX_MAX);
    *d = (debounce_t){0, 0};
    return -EINVAL;
  }
  return 0;
}

cJSON *debounce_json(const debounce_t *d) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "quietMs", d->quiet_ms);
  cJSON_AddNumberToObject(o, "maxMs", d->max_ms);
  return o;
}

static void hold_on_timer(uv_timer_t *h);

void hold_init(worker_t *w) {
  strmap_init(&w->holds);
  uv_timer_init(w->loop, &w->hold_timer);
  w->hold_timer.data = w;
}

void hold_close(worker_t *w) {
  while (w->hold_queues != NULL) hold_clear(w, w->hold_queues);
  strmap_finish(&w->holds);
  uv_close((uv_handle_t *)&w->hold_timer, NULL);
}

/* Arms the timer for due (loop ms) unless it fires sooner already. */
static void hold_arm(worker_t *w, int64_t due) {
  if (uv_is_active((uv_handle_t *)&w->hold_timer) && w->hold_due <= due) return;
  int64_t now = (int64_t)uv_now(w->loop);
  w->hold_due = due;
  uv_timer_start(&w->hold_timer, hold_on_timer, due > now ? (uint64_t)(due - now) : 0, 0);
}

static void queue_link(worker_t *w, hold_queue *q) {
  if (q->linked) return;
  q->linked = true;
  q->prev = NULL;
  q->next = w->hold_queues;
  if (w->hold_queues != NULL) w->hold_queues->prev = q;
  w->hold_queues = q;
}

static void queue_unlink(worker_t *w, hold_queue *q) {
  if (!q->linked) return;
  q->linked = false;
  if (q->prev != NULL)
    q->prev->next = q->next;
  else
    w->hold_queues = q->next;
  if (q->next != NULL) q->next->prev = q->prev;
  q->prev = q->next = NULL;
}

static void entry_append(hold_queue *q, hold_entry *e) {
  e->next = NULL;
  e->prev = q->tail;
  if (q->tail != NULL)
    q->tail->next = e;
  else
    q->head = e;
  q->tail = e;
  q->n++;
}

static void entry_unlink(hold_queue *q, hold_entry *e) {
  if (e->prev != NULL)
    e->prev->next = e->next;
  else
    q->head = e->next;
  if (e->next != NULL)
    e->next->prev = e->prev;
  else
    q->tail = e->prev;
  q->n--;
}

static void entry_free(worker_t *w, hold_entry *e) {
  if (e->map_key != NULL) {
    strmap_remove(&w->holds, e->map_key, strlen(e->map_key));
    free(e->map_key);
  }
  free(e->record_uri);
  free(e);
}

/* Sends the heads that are due (all of them when force), in order. */
static void queue_release(worker_t *w, hold_queue *q, int64_t now, bool force) {
  while (q->head != NULL && (force || q->head->release_at <= now)) {
    hold_entry *e = q->head;
    entry_unlink(q, e);
    subs_deliver_held(w, e->sub, e->record_uri, e->seq);
    entry_free(w, e);
  }
  if (q->head == NULL)
    queue_unlink(w, q);
  else
    hold_arm(w, q->head->release_at);
}

static void hold_release(void *arg) {
  worker_t *w = arg;
  int64_t now = (int64_t)uv_now(w->loop);
  for (hold_queue *q = w->hold_queues, *next; q != NULL; q = next) {
    next = q->next;
    queue_release(w, q, now, false);
  }
}

/* Releases change sessions' streams: a job on the lane, or again shortly while one runs. */
static void hold_on_timer(uv_timer_t *h) {
  worker_t *w = h->data;
  if (!lane_try(&w->lane, hold_release, w)) {
    w->hold_due = (int64_t)uv_now(w->loop) + LANE_RETRY_MS;
    uv_timer_start(h, hold_on_timer, LANE_RETRY_MS, 0);
  }
}

void hold_add(worker_t *w, hold_queue *q, sub_t *sub, const char *record_uri, int64_t seq) {
  const debounce_t *d = &sub->topic->debounce;
  int64_t now = (int64_t)uv_now(w->loop);
  hold_entry *e = NULL;
  buf_t k;
  buf_init(&k);
  if (d->quiet_ms > 0) {
    buf_printf(&k, "%p %s", (void *)sub, record_uri);
    e = strmap_get(&w->holds, k.data, k.len);
  }
  if (e != NULL) { /* merge: the held entry now announces this newer change */
    entry_unlink(q, e);
    buf_finish(&k);
  } else {
    e = mem_calloc(1, sizeof(*e));
    e->sub = sub;
    e->record_uri = mem_strdup(record_uri);
    if (d->quiet_ms > 0) {
      e->map_key = buf_steal(&k);
      strmap_put(&w->holds, e->map_key, strlen(e->map_key), e);
      e->deadline = now + d->max_ms;
    }
  }
  e->seq = seq;
  if (d->quiet_ms > 0) {
    int64_t quiet_end = now + d->quiet_ms;
    e->release_at = quiet_end < e->deadline ? quiet_end : e->deadline;
  }
  entry_append(q, e);
  queue_link(w, q);
  /* Bounded: an over-full queue lets its head go early. */
  if (q->n > HOLD_QUEUE_MAX) q->head->release_at = 0;
  queue_release(w, q, now, false);
}

void hold_drop_sub(worker_t *w, hold_queue *q, const sub_t *sub) {
  for (hold_entry *e = q->head, *next; e != NULL; e = next) {
    next = e->next;
    if (e->sub != sub) continue;
    entry_unlink(q, e);
    entry_free(w, e);
  }
  if (q->head == NULL) queue_unlink(w, q);
}

void hold_clear(worker_t *w, hold_queue *q) {
  while (q->head != NULL) {
    hold_entry *e = q->head;
    entry_unlink(q, e);
    entry_free(w, e);
  }
  queue_unlink(w, q);
}

void hold_flush_all(worker_t *w) {
  int64_t now = (int64_t)uv_now(w->loop);
  while (w->hold_queues != NULL) queue_release(w, w->hold_queues, now, true);
}

int64_t hold_oldest(const hold_queue *q) {
  return q->head != NULL ? q->head->seq : INT64_MAX;
}
