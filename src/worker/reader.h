/*
 * The worker's readers (PostgreSQL): connections of their own, each on a
 * thread, that serve the reads of records and collections in parallel and
 * off the store lane (lane.h). On the lane, one slow read (a scan of a
 * large table, a lock held by a migration, a database far away) held up
 * every request of the worker behind it, subscribes and writes included,
 * and reads went one round trip at a time. A read given to the readers
 * holds up only the reads queued behind it once all of them are busy.
 *
 * A job is a struct the caller allocates with a reader_job first: run is
 * called on a reader's thread with its connection (whose schema it may
 * refresh: a table is found by its name there, never by a pointer from
 * the loop's connection), done on the loop, directly and not as a lane job
 * (so it must not use the store), where it answers and frees the job.
 * Jobs run in the order they were queued, as readers become free.
 *
 * SQLite reads a local file and never waits on the network: its reader
 * is the loop's (reader_start_loop), a connection of its own whose jobs
 * run on the loop at the end of the turn's I/O, together in one read
 * transaction: one snapshot and one WAL read lock for the turn's reads
 * (each taken after all of their requests arrived), not one a statement;
 * kept for the turns after while nothing is committed.
 */
#ifndef MCPSUB_READER_H
#define MCPSUB_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/mem.h"
#include "common/store.h"

typedef struct worker worker_t;
typedef struct reader reader_t;
typedef struct reader_job reader_job;

struct reader_job {
  /*
   * A reader's thread: 0 or -errno (store.h's codes). Run again (on the
   * same connection, or another) after -ENOTCONN: it must start afresh.
   */
  int (*run)(reader_job *j, store_t *s);
  void (*done)(reader_job *j); /* loop: sees j->rc; frees j */
  int rc;
  int avoid; /* private: the reader that failed it once (-1: none) */
  reader_job *next;
};

/*
 * Starts n readers for w (n >= 1), each with its own read-only connection,
 * opened here. 0, or -errno with a message in err.
 */
int reader_start(worker_t *w, int n, reader_t **out, char *err, size_t errlen) MCPSUB_NODISCARD;
/*
 * The loop's reader (SQLite): its own read-only connection, no thread.
 * 0, or -errno with a message in err.
 */
int reader_start_loop(worker_t *w, reader_t **out, char *err, size_t errlen) MCPSUB_NODISCARD;
/* Queues j; takes ownership of it: done runs exactly once. Loop thread only. */
void reader_submit(reader_t *rd, reader_job *j);
/* Jobs done, and jobs queued and not done yet (for /metrics); 0 and 0 for NULL. */
void reader_counts(const reader_t *rd, uint64_t *done, uint64_t *pending);
/*
 * Runs what is queued, stops the threads and runs the last completions on
 * the loop (so every request given to the readers is answered); the
 * handle closes with the loop. NULL is a no-op.
 */
void reader_stop(reader_t *rd);
/* Closes the connections and frees rd after the loop closed its handle. NULL is a no-op. */
void reader_destroy(reader_t *rd);

/*
 * The table named name on a reader's connection s: refreshing its view of
 * the schema first (cheap unless it moved), and once more when the name
 * is not found (the table may be newer than that view). -ENOENT when s
 * does not export it, or the store's error.
 */
int reader_table(store_t *s, const char *name, const store_table **t) MCPSUB_NODISCARD;

#endif
