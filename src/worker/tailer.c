/*
 * Audit-log tailer (see tailer.h). A run reads batches of TAILER_BATCH rows
 * after the cursor until a short batch says it is caught up, at most a few
 * batches per loop turn so that a burst of commits cannot starve the
 * sockets; the rest is picked up on the next turn.
 */
#include "worker/tailer.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/mem.h"

static void tailer_on_kick(uv_timer_t *h);
static void tailer_on_poll(uv_timer_t *h);
static void tailer_on_fs(uv_fs_event_t *h, const char *filename, int events, int status);
static bool tailer_wake_external(tailer_t *t, bool run);
static bool tailer_watch_wake(tailer_t *t);
static void tailer_on_wake(uv_poll_t *h, int status, int events);
static void tailer_job(void *arg);

void tailer_init(tailer_t *t, uv_loop_t *loop, store_t *store, lane_t *lane, const char *db_path,
                 const tailer_ops *ops, void *data) {
  memset(t, 0, sizeof(*t));
  t->loop = loop;
  t->store = store;
  t->lane = lane;
  t->job = (lane_task){tailer_job, t, false};
  t->ops = ops;
  t->data = data;
  t->wake_fd = -1;
  t->wake_socket = strcmp(store_backend_name(db_path), "sqlite") != 0;
  char *a = mem_strdup(db_path), *b = mem_strdup(db_path);
  t->db_dir = mem_strdup(dirname(a));
  t->db_name = mem_strdup(basename(b));
  size_t n = strlen(t->db_name) + 5;
  t->wal_name = mem_alloc(n);
  snprintf(t->wal_name, n, "%s-wal", t->db_name);
  free(a);
  free(b);
  uv_fs_event_init(loop, &t->watch);
  uv_timer_init(loop, &t->poll);
  uv_timer_init(loop, &t->kick);
  uv_timer_init(loop, &t->recheck);
  t->watch.data = t->poll.data = t->kick.data = t->recheck.data = t;
}

/* Re-reads the schema; tells the owner when the exported tables changed. */
static void tailer_check_schema(tailer_t *t) {
  if (t->ops->check_schema != NULL) {
    t->ops->check_schema(t->data);
    return;
  }
  bool changed = false;
  if (store_refresh_schema(t->store, &changed) != 0) return;
  if (changed && t->ops->on_schema_change != NULL) t->ops->on_schema_change(t->data);
}

static int tailer_on_row(const store_audit_row *row, void *data) {
  tailer_t *t = data;
  t->cursor = t->last_head = row->seq;
  t->changes++;
  t->ops->on_change(row, t->data);
  return 0;
}

/* A read failed: behind until one succeeds (logged once per episode). */
static void tailer_fell_behind(tailer_t *t, int rc) {
  if (t->behind) return;
  t->behind = true;
  char pos[24];
  snprintf(pos, sizeof(pos), "%lld", (long long)t->cursor);
  log_warn("audit log read failed; retrying on every wake-up", "error", strerror(-rc), "cursor",
           pos);
}

/* A read succeeded after a failure: what was missed was read from the cursor on. */
static void tailer_caught_up(tailer_t *t) {
  if (!t->behind) return;
  t->behind = false;
  char pos[24];
  snprintf(pos, sizeof(pos), "%lld", (long long)t->cursor);
  log_info("audit log read again", "cursor", pos);
}

void tailer_run(tailer_t *t) {
  if (!t->active) return;
  tailer_check_schema(t);
  if (t->unpositioned) {
    int rc = store_audit_max_seq(t->store, &t->cursor);
    if (rc != 0) {
      tailer_fell_behind(t, rc);
      return;
    }
    t->unpositioned = false;
    t->last_head = t->cursor;
  }
  int batches = 0;
  for (;;) {
    int64_t before = t->cursor;
    int n = 0;
    int rc = store_audit_read(t->store, t->cursor, TAILER_BATCH, tailer_on_row, t, &n);
    if (rc != 0) {
      tailer_fell_behind(t, rc);
      return;
    }
    if (n > 0 && t->ops->on_batch_end != NULL) t->ops->on_batch_end(t->data);
    if (n < TAILER_BATCH || t->cursor == before) break;
    if (++batches == TAILER_MAX_BATCHES_PER_TURN) {
      tailer_kick(t); /* more to read: yield to the sockets, continue next turn */
      break;
    }
  }
  tailer_caught_up(t);
}

void tailer_kick(tailer_t *t) {
  if (t->active && !uv_is_active((uv_handle_t *)&t->kick))
    uv_timer_start(&t->kick, tailer_on_kick, 0, 0);
}

/* What a queued tailer job does (tailer_t.queued). */
#define TAILER_DO_RUN     1u /* read on: more was there */
#define TAILER_DO_WAKE    2u /* look whether another connection committed */
#define TAILER_DO_SCHEMA  4u /* look at the schema first (the safety poll) */
#define TAILER_DO_RECHECK 8u /* a file event's re-check (tailer_on_recheck) */

static void tailer_on_recheck(uv_timer_t *h);

static void tailer_job(void *arg) {
  tailer_t *t = arg;
  unsigned what = t->queued;
  t->queued = 0;
  if (t->closing || !t->active) return;
  if (what & TAILER_DO_SCHEMA) tailer_check_schema(t);
  if (what & (TAILER_DO_WAKE | TAILER_DO_RECHECK)) {
    /*
     * A run asked for with the look (tailer_kick: more was there at the last
     * run's end) reads on even when the look finds nothing new; else the
     * rest of a backlog waited for the next commit.
     */
    bool moved = tailer_wake_external(t, (what & TAILER_DO_RUN) != 0);
    if ((what & TAILER_DO_RECHECK) && !moved && --t->rechecks_left > 0) {
      bool fast = t->rechecks_left >= TAILER_RECHECKS - TAILER_RECHECKS_FAST;
      uv_timer_start(&t->recheck, tailer_on_recheck, fast ? 1 : TAILER_RECHECK_MS, 0);
    }
    /* The wake-up socket was left alone while the job waited its turn. */
    if (t->wake != NULL && !t->closing)
      (void)uv_poll_start(t->wake, UV_READABLE, tailer_on_wake); /* cannot fail on a live handle */
  } else if (what & TAILER_DO_RUN) {
    tailer_run(t);
  }
}

/* Asks for what (TAILER_DO_*) as a job on the lane: one job at a time does all that was asked. */
static void tailer_queue(tailer_t *t, unsigned what) {
  t->queued |= what;
  lane_post(t->lane, &t->job);
}

static void tailer_on_kick(uv_timer_t *h) {
  tailer_queue(h->data, TAILER_DO_RUN);
}

/*
 * Another connection committed iff data_version moved: then, while behind,
 * or when run is asked for, reads. Returns whether it moved.
 */
static bool tailer_wake_external(tailer_t *t, bool run) {
  int64_t v;
  int rc = store_data_version(t->store, &v);
  /*
   * The backend may have replaced its wake-up socket (a reconnection), or
   * have one again after it had none (it was away): follow it.
   */
  if (t->wake_socket) tailer_watch_wake(t);
  bool moved = rc == 0 && v != t->data_version;
  if (moved) t->data_version = v;
  if (moved || t->behind || run) tailer_run(t);
  return moved;
}

static void tailer_on_recheck(uv_timer_t *h) {
  tailer_queue(h->data, TAILER_DO_RECHECK);
}

static void tailer_on_poll(uv_timer_t *h) {
  tailer_t *t = h->data;
  /*
   * A schema change by another connection moves SQLite's data_version; on a
   * backend with a wake-up socket it sends nothing (DDL fires no trigger):
   * the safety poll looks at the schema itself.
   */
  tailer_queue(t, TAILER_DO_WAKE | (t->wake_socket ? TAILER_DO_SCHEMA : 0));
}

static void tailer_on_fs(uv_fs_event_t *h, const char *filename, int events, int status) {
  tailer_t *t = h->data;
  if (status < 0 || filename == NULL) return;
  if (strcmp(filename, t->wal_name) != 0 && strcmp(filename, t->db_name) != 0) return;
  /*
   * A commit of several pages is several writes, each an event, and is
   * published just after its last: every event looks at once (one job for
   * all those of a loop turn), and only if nothing moved yet does the job
   * look again shortly.
   */
  t->rechecks_left = TAILER_RECHECKS;
  uv_timer_stop(&t->recheck);
  tailer_queue(t, TAILER_DO_RECHECK);
}

static void tailer_free_poll(uv_handle_t *h) {
  free(h);
}

static void tailer_stop_wake(tailer_t *t) {
  if (t->wake == NULL) return;
  uv_close((uv_handle_t *)t->wake, tailer_free_poll);
  t->wake = NULL;
  t->wake_fd = -1;
}

static void tailer_on_wake(uv_poll_t *h, int status, int events) {
  tailer_t *t = h->data;
  /* Readable until the job drains it: not polled meanwhile (the job starts it again). */
  (void)uv_poll_stop(h);
  tailer_queue(t, TAILER_DO_WAKE);
}

/*
 * Polls the backend's wake-up socket, if it has one; again after the
 * backend replaced it (a reconnection). Returns whether one is polled.
 */
static bool tailer_watch_wake(tailer_t *t) {
  int fd = store_wake_fd(t->store);
  if (fd == t->wake_fd && t->wake != NULL) return true;
  tailer_stop_wake(t);
  if (fd < 0) return false;
  t->wake = mem_alloc(sizeof(*t->wake));
  int rc = uv_poll_init_socket(t->loop, t->wake, fd);
  if (rc == 0) rc = uv_poll_start(t->wake, UV_READABLE, tailer_on_wake);
  if (rc != 0) {
    log_warn("cannot poll the database's wake-up socket; polling only", "error", uv_strerror(rc));
    free(t->wake);
    t->wake = NULL;
    return false;
  }
  t->wake->data = t;
  t->wake_fd = fd;
  return true;
}

void tailer_set_active(tailer_t *t, bool active) {
  if (t->closing || active == t->active) return;
  t->active = active;
  if (!active) {
    uv_timer_stop(&t->poll);
    uv_timer_stop(&t->kick);
    uv_timer_stop(&t->recheck);
    if (t->watching) uv_fs_event_stop(&t->watch);
    t->watching = false;
    tailer_stop_wake(t);
    return;
  }
  int64_t head;
  int rc = store_audit_max_seq(t->store, &head);
  if (rc == 0) {
    t->cursor = t->last_head = head;
    t->unpositioned = false;
  } else {
    /*
     * The log cannot be read now (the database is away): start from the
     * newest position known, which is at or below the head, so nothing
     * committed after the start is missed; knowing none, from the head
     * once it can be read. Reading fails until then: behind.
     */
    t->cursor = t->last_head;
    t->unpositioned = t->last_head == 0;
    tailer_fell_behind(t, rc);
  }
  if (store_data_version(t->store, &t->data_version) != 0) t->data_version = 0;
  /* A wake-up socket that is away now: the safety poll watches it once it is back. */
  if (!tailer_watch_wake(t) && !t->wake_socket) {
    rc = uv_fs_event_start(&t->watch, tailer_on_fs, t->db_dir, 0);
    t->watching = rc == 0;
    if (rc != 0)
      log_warn("cannot watch the database directory; polling only", "error", uv_strerror(rc));
  }
  uv_timer_start(&t->poll, tailer_on_poll, TAILER_SAFETY_POLL_MS, TAILER_SAFETY_POLL_MS);
}

int64_t tailer_position(tailer_t *t) {
  if (t->active && !t->unpositioned) return t->cursor;
  /* Off the lane (a keepalive) the loop must not wait for the database: the newest known. */
  if (t->lane->enabled && !lane_on_fiber(t->lane)) return t->last_head;
  int64_t seq = 0;
  if (store_audit_max_seq(t->store, &seq) != 0) return t->last_head; /* the database is away */
  t->last_head = seq;
  return seq;
}

void tailer_close(tailer_t *t) {
  tailer_set_active(t, false);
  t->closing = true;
  tailer_stop_wake(t);
  uv_close((uv_handle_t *)&t->watch, NULL);
  uv_close((uv_handle_t *)&t->poll, NULL);
  uv_close((uv_handle_t *)&t->kick, NULL);
  uv_close((uv_handle_t *)&t->recheck, NULL);
}

void tailer_finish(tailer_t *t) {
  free(t->db_dir);
  free(t->db_name);
  free(t->wal_name);
  t->db_dir = t->db_name = t->wal_name = NULL;
}
