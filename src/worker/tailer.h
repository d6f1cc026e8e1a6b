/*
 * The audit-log tailer: one per worker. It keeps a cursor (the last audit
 * seq it has handed on) and reads audit_log forward in batches, handing
 * each change to its owner, which matches it against the subscription
 * index. It does not poll in a loop:
 *   - the worker's own commits kick it (tailer_kick), so they are read in
 *     the next loop turn;
 *   - another process's commits touch the database's -wal file; a libuv
 *     fs watcher on the database directory wakes the tailer, which
 *     confirms with PRAGMA data_version that the database really changed;
 *     a backend with a wake-up socket (PostgreSQL's LISTEN connection,
 *     store_wake_fd) is polled instead, and store_data_version drains it;
 *   - a slow safety poll (1 s) covers file systems without notifications
 *     (and, with a wake-up socket, checks the schema: DDL notifies nothing).
 * Every wake-up also checks the schema, so the owner hears of tables
 * created or dropped by anyone.
 *
 * It runs only while its owner says so (tailer_set_active): a worker with
 * no subscription, waiter or stream reads nothing.
 *
 * When the database is away (PostgreSQL: -ENOTCONN until the store has
 * reconnected), a read fails and the cursor stays where it was: the
 * tailer is then behind, and every wake-up (the safety poll included)
 * reads again, whether data_version moved or not, until a read succeeds
 * and it has caught up from its cursor. Nothing is skipped, nothing handed
 * on twice. The failure and the recovery are logged once each.
 */
#ifndef MCPSUB_TAILER_H
#define MCPSUB_TAILER_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/store.h"
#include "worker/lane.h"

#define TAILER_BATCH 256
/* Batches one run reads before it yields to the sockets (the rest: next turn). */
#define TAILER_MAX_BATCHES_PER_TURN 16
#define TAILER_SAFETY_POLL_MS       1000
/*
 * A writer appends its commit frame to the -wal file before it publishes
 * the commit in the -shm index (a memory map: no file event), so the event
 * may come just before data_version moves. Every event looks at once (a
 * commit of several pages is several writes: the look after the last one
 * sees it, where waiting for a timer armed at the first cost 1 ms more at
 * the 99th percentile). When nothing moved, the tailer looks again:
 * after 1 ms for the first TAILER_RECHECKS_FAST looks (a commit is
 * published microseconds after its last write, so the first catches it,
 * and the delay is what a subscriber of another worker waits), then every
 * TAILER_RECHECK_MS, TAILER_RECHECKS looks in all (about 100 ms).
 */
#define TAILER_RECHECK_MS    5
#define TAILER_RECHECKS      24
#define TAILER_RECHECKS_FAST 4

typedef struct tailer_ops {
  /* One committed change; row may be used only during the call. */
  void (*on_change)(const store_audit_row *row, void *data);
  /* After each batch of changes (a good time to flush streams and waiters). */
  void (*on_batch_end)(void *data);
  /* The set of exported tables changed. */
  void (*on_schema_change)(void *data);
  /*
   * Re-reads the schema (called on every wake-up): the owner decides what
   * follows, on_schema_change included. NULL: the tailer reads it itself.
   */
  void (*check_schema)(void *data);
} tailer_ops;

typedef struct tailer {
  uv_loop_t *loop;
  store_t *store;
  const tailer_ops *ops;
  void *data;
  char *db_dir;   /* directory watched */
  char *wal_name; /* basename of the -wal file */
  char *db_name;  /* basename of the database file */
  uv_fs_event_t watch;
  lane_t *lane;    /* the worker's store lane: every run of the tailer is a job on it */
  unsigned queued; /* TAILER_DO_* asked of the job since it last ran */
  lane_task job;   /* tailer_job, on the lane */
  uv_poll_t *wake; /* on store_wake_fd's socket, when the backend has one */
  int wake_fd;
  bool wake_socket; /* the backend has one (not SQLite), though it may be away now */
  uv_timer_t poll;
  uv_timer_t kick;    /* zero-delay timer: runs the tailer on the next loop turn */
  uv_timer_t recheck; /* re-reads data_version shortly after a file event */
  int rechecks_left;
  int64_t cursor;    /* last seq handed on */
  int64_t last_head; /* the newest position known (cursor, or the log's head when inactive) */
  int64_t data_version;
  bool behind;       /* the last read failed: read on every wake-up until one succeeds */
  bool unpositioned; /* started while the head could not be read (and none was known) */
  bool active;
  bool watching;
  bool closing;
  uint64_t changes; /* changes handed on since start */
} tailer_t;

/* Sets up handles (inactive). db_path is the database target (watched when a file). */
/*
 * Every run of the tailer from its own callbacks (wake-ups, timers) is a
 * job on lane (lane.h): they only queue one, which does what they asked.
 */
void tailer_init(tailer_t *t, uv_loop_t *loop, store_t *store, lane_t *lane, const char *db_path,
                 const tailer_ops *ops, void *data);
/*
 * Starts or stops following the log. Starting positions the cursor at the
 * newest change (omitCurrent: nothing older is handed on); when the log
 * cannot be read then, at the newest position it knew (or, knowing none,
 * at the newest change once the log can be read).
 */
void tailer_set_active(tailer_t *t, bool active);
/* Reads new changes on the next loop turn (after this process committed). */
void tailer_kick(tailer_t *t);
/* Reads everything committed so far, now. */
void tailer_run(tailer_t *t);
/*
 * The position of the feed: the cursor when active, else the newest seq
 * (the newest known when the log cannot be read).
 */
int64_t tailer_position(tailer_t *t);
/* Closes the handles; the loop finishes them. */
void tailer_close(tailer_t *t);
/* Frees strings after the loop ran the closes. */
void tailer_finish(tailer_t *t);

#endif
