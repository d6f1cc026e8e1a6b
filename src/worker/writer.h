/*
 * The worker's writer: one thread with its own SQLite connection that
 * makes every write the worker makes (application rows from REST and the
 * tools, session rows, audit retention), in the order they were queued.
 * The loop never waits on a database lock: its own connection only reads,
 * with no busy timeout, while a writer that meets a lock held by another
 * process (a backup, a batch job, the sqlite3 CLI) waits on its thread,
 * until the job's deadline (--write-timeout). Completions come back to the
 * loop through a uv_async and run there, in queue order.
 *
 * On SQLite, the writes of a loop turn that are all quick (one row each,
 * a few of them) run on the loop itself when the thread is idle and the
 * database's write lock is free at that moment (it is tried, never waited
 * for): handing them to the thread and its answer back costs two thread
 * wake-ups, more than such a commit. The connection's checkpoints, which
 * write the database file and sync it, stay on the thread. When the lock
 * is taken, the jobs go to the thread as above.
 *
 * A job is a struct the caller allocates with a writer_job first; run is
 * called with the writer's store on the writer thread (or, for a quick
 * job, on the loop), done on the loop (which frees the job). A job must
 * not touch loop state in run.
 */
#ifndef MCPSUB_WRITER_H
#define MCPSUB_WRITER_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/mem.h"
#include "common/store.h"

typedef struct worker worker_t;
typedef struct writer writer_t;
typedef struct writer_job writer_job;

struct writer_job {
  int (*run)(writer_job *j, store_t *s); /* writer thread: 0 or -errno (store.h's codes) */
  void (*done)(writer_job *j);           /* loop: sees j->rc; frees j */
  int rc;
  bool app_write;        /* commits application rows: the feed is woken after it */
  bool quick;            /* small and bounded (one row): may run on the loop (above) */
  bool batched;          /* runs only inside a batch's transaction (an exactly-once write) */
  uint64_t deadline;     /* uv_hrtime() past which a lock is not waited for */
  atomic_bool cancelled; /* set on the loop: a job not started yet is not run (-ECANCELED) */
  writer_job *next;
};

/*
 * Starts the writer of w: its thread opens its own connection to the
 * database. 0, or -errno with a message in err.
 */
int writer_start(worker_t *w, writer_t **out, char *err, size_t errlen) MCPSUB_NODISCARD;
/*
 * Queues j, to be given up (-EBUSY) when the database stays locked for
 * timeout_ms from now. Takes ownership of j: done runs exactly once. Loop
 * thread only: the thread starts on the jobs of a loop turn once the
 * turn's callbacks are done, so that they share one transaction.
 */
void writer_submit(writer_t *wr, writer_job *j, uint64_t timeout_ms);
/*
 * Runs what is queued (each job until its deadline), stops the thread and
 * runs the last completions; the handle closes with the loop. NULL is a
 * no-op.
 */
void writer_stop(writer_t *wr);
/* Frees the writer after the loop closed its handle. NULL is a no-op. */
void writer_destroy(writer_t *wr);

/* A write of one record, the job the REST API and the tools share. ------ */

typedef struct writer_record {
  writer_job job;
  char *table;   /* table name (resolved on the writer's connection) */
  char *key;     /* NULL for an insert with a generated key */
  cJSON *record; /* the row (owned); NULL for a delete */
  store_write_mode mode;
  bool is_delete;
  char *principal;    /* recorded on its audit rows */
  char *scope_column; /* the writer's row scope, or NULL */
  char *scope_value;
  cJSON *where; /* a bulk write (store_bulk_as): [[column, op, value], ...] (owned); else NULL */
  /*
   * A write sent to the write home (forward.h): its once id (origin owned;
   * NULL for any other write), and its place among the sender's writes
   * waiting for their answers.
   */
  store_once once;
  struct writer_record *fwd_prev, *fwd_next;
  /* Made here after all (its answer is this worker's writer's): the caller's done, kept while
   * forward.c's runs; NULL while the home is to answer. */
  void (*fwd_done)(writer_job *job);
  struct worker *fwd_w; /* the worker it belongs to (the sender's, or the home's for its job) */
  /* results */
  char *out_key; /* the written row's key (new string) */
  /*
   * A put's row as its write left it, and its version (store_write_as);
   * NULL for a delete or a bulk write, on PostgreSQL, and for a write
   * answered from the write home's record of it (forward.h): the answer
   * then reads the record after the commit.
   */
  cJSON *row;
  int64_t version;
  bool created;
  int64_t changed; /* a bulk write's rows */
  char err[256];
} writer_record;

/*
 * A record write job (zeroed, run set); done is the caller's. table, key
 * and guard's strings are copied (guard may be NULL); record is taken. The
 * write runs as store_write_as / store_delete_as with the guard. Free with
 * writer_record_free from done.
 */
writer_record *writer_record_create(size_t size, const char *table, const char *key, cJSON *record,
                                    store_write_mode mode, bool is_delete, const store_guard *guard,
                                    void (*done)(writer_job *j));
void writer_record_free(writer_record *r);
/*
 * The row r's put left and its version (taken from r: the caller owns
 * *row), or when r has none (see row above) read from s as stored now.
 * Returns store_get_record's rc.
 */
int writer_record_take_row(writer_record *r, store_t *s, const store_table *t, cJSON **row,
                           int64_t *version) MCPSUB_NODISCARD;
/*
 * Runs r's write on s now, as the writer would (without re-reading s's
 * schema): for a write that cannot wait, on the loop's connection. Returns
 * its rc (r->err says why).
 */
int writer_record_apply(writer_record *r, store_t *s) MCPSUB_NODISCARD;

/*
 * Session-row and retention writes: queued, their failures logged; nothing
 * waits for them. Copies its arguments.
 */
void writer_session_insert(writer_t *wr, const store_session *row);
/* The same, then then(rc, data) on the loop once the row is written (or not). */
void writer_session_insert_then(writer_t *wr, const store_session *row,
                                void (*then)(int rc, void *data), void *data);
void writer_session_touch(writer_t *wr, const char *id, int64_t last_seen);
void writer_session_set_log_level(writer_t *wr, const char *id, const char *level);
/* The whole subscription list (cold paths; a subscribe writes its own change below). */
void writer_session_set_subscriptions(writer_t *wr, const char *id, const char *json);
/*
 * One subscription of a session's row: added or replaced (key: its topic
 * key, debounce: its JSON or NULL), or removed; then(rc, data) on the loop
 * once written (then may be NULL). Other workers and hosts learn of it from
 * the audit log (store_session_sub_put).
 */
void writer_session_subscription_then(writer_t *wr, const char *id, const char *uri,
                                      const char *key, const char *debounce, bool remove,
                                      void (*then)(int rc, void *data), void *data);
/*
 * fn(id, uri, data) runs on the loop whenever such a subscription change
 * could not be written (the database refused it or it timed out; not when
 * the session's row is gone), before the change's then.
 */
void writer_on_subscription_unsaved(writer_t *wr,
                                    void (*fn)(const char *id, const char *uri, void *data),
                                    void *data);
void writer_session_delete(writer_t *wr, const char *id);
/* The same, then then(rc, data) on the loop once the row is gone (or not). */
void writer_session_delete_then(writer_t *wr, const char *id, void (*then)(int rc, void *data),
                                void *data);
/*
 * A signal to the worker that holds a call of session ("": none), on any
 * host: store_signal's row, image its JSON; then(rc, data) on the loop once
 * written (or not).
 */
void writer_signal_then(writer_t *wr, const char *session, const char *image,
                        void (*then)(int rc, void *data), void *data);
/* Brings the audit triggers up to date with the schema (after a schema change). */
void writer_sync_triggers(writer_t *wr);
/*
 * The sweep: prunes session rows (of this slot when n_slots > 0) and, when
 * retain, the audit log, in batches (each queued behind the writes waiting
 * then) until none is left.
 */
void writer_sweep(writer_t *wr, int64_t before_ms, unsigned slot, unsigned n_slots, bool retain,
                  int64_t retain_rows, int64_t retain_ms, int64_t now_ms);

#endif
