/*
 * The worker's writer thread (see writer.h). The queue and the completion
 * list are guarded by one mutex; the thread sleeps on a condition variable
 * when there is nothing to do, and wakes the loop with uv_async_send when
 * something completed. While a job meets a lock, the connection's busy
 * handler sleeps in short steps on this thread, never on the loop, until
 * the job's deadline.
 *
 * The writer's connection is used by one side at a time: the thread, or
 * the loop for a turn's quick writes (writer_flush); store_taken, under
 * the mutex, says that one of them has it. Its checkpoints are deferred
 * (store_defer_checkpoints) and made by the thread after a batch, so that
 * a commit on the loop never syncs the database file.
 *
 * A full disk (SQLITE_FULL) is logged once when it starts and once when
 * writes succeed again, not once per request.
 */
#include "worker/writer.h"

#include "common/uri.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "worker/subscriptions.h"
#include "worker/worker.h"

/* Jobs at most in one group commit: bounds the wait of the first for the last. */
#define WRITER_BATCH_MAX 64
/*
 * Jobs at most in a turn that the loop commits itself (writer.h). More
 * arrive together only under many concurrent writers: the thread then
 * commits them beside the loop's fan-out, in larger batches that the
 * tailer reads together (committed on the loop, REST fan-out with 32
 * writers lost ~15% per CPU-second; docs/BENCHMARKS.md).
 */
#define WRITER_HERE_MAX 8

/*
 * Audit rows one retention step examines at most, in one transaction: a
 * prune holds the database's write lock, so a long log (a backlog, or a
 * million rows each of which is some record's newest change, which stays)
 * is gone through in steps WRITER_PRUNE_GAP_MS apart, so that the writers
 * of other processes, which poll for the lock, get it in between. The next
 * sweep goes on from the last row examined; once an hour it starts again
 * from the oldest, for the rows that a newer change has made prunable.
 */
#define WRITER_PRUNE_SPAN    1000
#define WRITER_PRUNE_GAP_MS  20
#define WRITER_PRUNE_PASS_MS (60 * 60 * 1000)

struct writer {
  worker_t *w;
  uv_thread_t thread;
  uv_mutex_t lock;
  uv_cond_t wake;
  uv_async_t async;
  /*
   * The thread is woken once per loop turn, after the turn's callbacks
   * queued what they had (writer_submit): the check phase runs right after
   * them; the idle handle keeps the loop from waiting in poll when a job
   * was queued after that phase.
   */
  uv_check_t kick;
  uv_idle_t kick_idle;
  writer_job *turn_head, *turn_tail;   /* loop only: queued this turn (or kept, writer_flush) */
  writer_job *queue_head, *queue_tail; /* handed to the thread */
  writer_job *done_head, *done_tail;   /* done by the thread, for the loop */
  bool stopping;
  bool thread_running;
  bool here;           /* quick writes may run on the loop (SQLite: checkpoints deferred) */
  bool running_here;   /* they do now: the busy handler gives up at once */
  bool store_taken;    /* the connection is in use, by the thread or the loop (mutex) */
  bool checkpoint_due; /* a commit on the loop left the WAL at checkpoint size (mutex) */
  bool loop_waits;     /* the loop keeps jobs until the thread gives the connection back (mutex) */
  lane_task completions; /* writer_completions, a job on the worker's lane */
  uint64_t deadline;     /* of the job running now (busy handler) */
  store_t *store;        /* the thread's own */
  char open_err[256];
  int open_rc;
  bool disk_full; /* loop side: an episode of SQLITE_FULL is going on */
  /* Loop side: retention's steps (WRITER_PRUNE_SPAN). */
  bool pruning;           /* a sweep's steps are queued, running or waiting for the timer */
  int64_t prune_after;    /* the last audit row they examined */
  int64_t prune_pass_ms;  /* when they last started again from the oldest row */
  uv_timer_t prune_timer; /* the gap before the next step */
  store_prune prune_next; /* that step */
  int64_t prune_sessions; /* session rows the sweep deleted */
  int64_t prune_earlier;  /* audit rows its earlier steps deleted */
  void (*unsaved)(const char *id, const char *uri, void *data); /* writer_on_subscription_unsaved */
  void *unsaved_data;
};

static void writer_push(writer_job **head, writer_job **tail, writer_job *j) {
  j->next = NULL;
  if (*tail != NULL)
    (*tail)->next = j;
  else
    *head = j;
  *tail = j;
}

static writer_job *writer_pop(writer_job **head, writer_job **tail) {
  writer_job *j = *head;
  if (j == NULL) return NULL;
  *head = j->next;
  if (*head == NULL) *tail = NULL;
  j->next = NULL;
  return j;
}

/* SQLite's busy handler on the writer's connection: wait in steps until the job's deadline. */
static int writer_busy(void *data, int count) {
  writer_t *wr = data;
  uint64_t now = uv_hrtime();
  if (wr->running_here || now >= wr->deadline) return 0; /* give up: SQLITE_BUSY */
  uint64_t step = 5 * 1000 * 1000;                       /* 5 ms */
  if (wr->deadline - now < step) step = wr->deadline - now;
  struct timespec ts = {0, (long)step};
  nanosleep(&ts, NULL);
  return 1;
}

/* Runs j alone (its own transactions), waiting for a lock until its deadline. */
static void writer_run_one(writer_t *wr, writer_job *j) {
  wr->deadline = j->deadline;
  if (atomic_load(&j->cancelled))
    j->rc = -ECANCELED; /* the caller gave up before it ran: nothing is written */
  else
    j->rc = wr->store != NULL ? j->run(j, wr->store) : -EIO;
}

/*
 * Group commit: the jobs queued together (list, n of them, in queue order)
 * run in one transaction, each in its own savepoint, so that one failing
 * job fails alone; none is done before the commit, whose failure fails
 * them all. Alone, or when the backend offers no batch or the lock is not
 * to be had by the earliest deadline, each job runs by itself. On the loop
 * (running_here), the batch's lock is had at once or nothing runs: false.
 */
static bool writer_run_batch(writer_t *wr, writer_job *list, size_t n) {
  writer_job *j;
  uint64_t earliest = UINT64_MAX;
  for (j = list; j != NULL; j = j->next)
    if (j->deadline < earliest) earliest = j->deadline;
  wr->deadline = earliest;
  bool here = wr->running_here, batched = false;
  for (j = list; j != NULL; j = j->next) batched |= j->batched;
  bool batch =
      (here || n >= 2 || batched) && wr->store != NULL && store_batch_begin(wr->store) == 0;
  if (!batch) {
    if (here) return false;
    for (j = list; j != NULL; j = j->next) writer_run_one(wr, j);
    return true;
  }
  for (j = list; j != NULL; j = j->next) {
    writer_run_one(wr, j);
    if (!store_batch_broken(wr->store)) continue;
    /* The database dropped the whole transaction: what ran before is gone with it. */
    int rc = j->rc != 0 ? j->rc : -EIO;
    for (writer_job *k = list; k != j; k = k->next)
      if (k->rc == 0) k->rc = rc;
    int ret = store_batch_end(wr->store, false);
    (void)ret;
    for (j = j->next; j != NULL; j = j->next) writer_run_one(wr, j);
    return true;
  }
  int rc = store_batch_end(wr->store, true);
  if (rc != 0)
    for (j = list; j != NULL; j = j->next)
      if (j->rc == 0) j->rc = rc;
  return true;
}

/* A checkpoint is due (store_defer_checkpoints); its failure is SQLite's to retry next time. */
static void writer_checkpoint(writer_t *wr) {
  if (wr->store != NULL && store_checkpoint_due(wr->store) && store_checkpoint(wr->store) != 0)
    log_debug("checkpoint not made", "error", "busy or failed");
}

static void writer_thread(void *arg) {
  writer_t *wr = arg;
  uv_mutex_lock(&wr->lock);
  for (;;) {
    while ((wr->store_taken || (wr->queue_head == NULL && !wr->checkpoint_due)) && !wr->stopping)
      uv_cond_wait(&wr->wake, &wr->lock);
    if (wr->queue_head == NULL && !wr->checkpoint_due) break; /* stopping, and nothing left */
    /* Everything queued, up to WRITER_BATCH_MAX jobs, goes in one batch. */
    writer_job *list = NULL, *tail = NULL, *j;
    size_t n = 0;
    while (n < WRITER_BATCH_MAX && (j = writer_pop(&wr->queue_head, &wr->queue_tail)) != NULL) {
      writer_push(&list, &tail, j);
      n++;
    }
    wr->store_taken = true;
    wr->checkpoint_due = false;
    uv_mutex_unlock(&wr->lock);
    if (n > 0) {
      bool ran = writer_run_batch(wr, list, n);
      (void)ran; /* always, off the loop */
      uv_mutex_lock(&wr->lock);
      while ((j = writer_pop(&list, &tail)) != NULL) writer_push(&wr->done_head, &wr->done_tail, j);
      uv_async_send(&wr->async);
      uv_mutex_unlock(&wr->lock);
    }
    writer_checkpoint(wr); /* after the answers went */
    uv_mutex_lock(&wr->lock);
    wr->store_taken = false;
    if (wr->loop_waits) uv_async_send(&wr->async); /* writer_completions kicks the loop's jobs */
    wr->loop_waits = false;
  }
  uv_mutex_unlock(&wr->lock);
}

static void writer_kick(writer_t *wr);

/* The loop's side: completions, in queue order. */
/* Completions run as a job on the worker's store lane (they answer requests, which may read). */
static void writer_completions(void *arg) {
  writer_t *wr = arg;
  uv_mutex_lock(&wr->lock);
  writer_job *list = wr->done_head;
  wr->done_head = wr->done_tail = NULL;
  uv_mutex_unlock(&wr->lock);
  bool committed = false;
  while (list != NULL) {
    writer_job *j = list;
    list = j->next;
    if (j->rc == 0 && j->app_write) committed = true;
    if (j->app_write && j->rc == -ENOSPC && !wr->disk_full) {
      wr->disk_full = true;
      log_warn("database or disk is full: writes fail (507) until space is freed");
    } else if (j->app_write && j->rc == 0 && wr->disk_full) {
      wr->disk_full = false;
      log_info("writes succeed again after the disk was full");
    }
    j->done(j);
  }
  /* Once per batch of completions: the tailer reads them, other workers are told. */
  if (committed) subs_after_write(wr->w);
  /* What waited for the connection (writer_flush), or was queued by a done: at this turn's end. */
  if (wr->turn_head != NULL) writer_kick(wr);
}

static void writer_on_async(uv_async_t *h) {
  writer_t *wr = h->data;
  lane_post(&wr->w->lane, &wr->completions);
}

int writer_start(worker_t *w, writer_t **out, char *err, size_t errlen) {
  writer_t *wr = mem_calloc(1, sizeof(*wr));
  wr->w = w;
  wr->completions = (lane_task){writer_completions, wr, false};
  *out = NULL;
  /* The connection is opened here, before the loop runs: it may wait for a lock at start. */
  int rc = store_open(w->cfg->db_path, NULL, &wr->store, err, errlen);
  if (rc != 0) {
    free(wr);
    return rc;
  }
  store_set_busy_handler(wr->store, writer_busy, wr);
  wr->here = store_defer_checkpoints(wr->store) == 0; /* SQLite */
  store_set_origin(wr->store, w->origin); /* the tailer knows its own subscription log rows */
  if (uv_mutex_init(&wr->lock) != 0 || uv_cond_init(&wr->wake) != 0) abort();
  rc = uv_async_init(w->loop, &wr->async, writer_on_async);
  if (rc != 0) abort(); /* only on exhausted fds at start */
  wr->async.data = wr;
  uv_check_init(w->loop, &wr->kick); /* cannot fail */
  uv_idle_init(w->loop, &wr->kick_idle);
  wr->kick.data = wr->kick_idle.data = wr;
  uv_timer_init(w->loop, &wr->prune_timer);
  wr->prune_timer.data = wr;
  rc = uv_thread_create(&wr->thread, writer_thread, wr);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the writer thread: %s", uv_strerror(rc));
    abort(); /* nothing sensible to serve without one */
  }
  wr->thread_running = true;
  *out = wr;
  return 0;
}

/* Hands the turn's jobs to the thread, after those it has (queue order is kept). */
static void writer_hand_over(writer_t *wr) {
  uv_mutex_lock(&wr->lock);
  if (wr->queue_tail != NULL)
    wr->queue_tail->next = wr->turn_head;
  else
    wr->queue_head = wr->turn_head;
  wr->queue_tail = wr->turn_tail;
  wr->turn_head = wr->turn_tail = NULL;
  uv_cond_signal(&wr->wake);
  uv_mutex_unlock(&wr->lock);
}

/*
 * The turn's jobs (writer.h): run on the loop when they all are quick and
 * the lock is free now, else handed to the thread. While the thread has
 * the connection, quick jobs wait for its completions (writer_completions
 * flushes again), so that a turn's writes do not go to the thread only
 * because the last turn's did.
 */
static void writer_flush(writer_t *wr) {
  uv_check_stop(&wr->kick);
  uv_idle_stop(&wr->kick_idle);
  if (wr->turn_head == NULL) return;
  size_t n = 0;
  bool quick = wr->here;
  for (writer_job *j = wr->turn_head; quick && j != NULL; j = j->next)
    quick = j->quick && ++n <= WRITER_HERE_MAX;
  if (!quick) {
    writer_hand_over(wr);
    return;
  }
  uv_mutex_lock(&wr->lock);
  bool taken = wr->store_taken || wr->queue_head != NULL || wr->checkpoint_due;
  wr->loop_waits = taken;
  if (!taken) wr->store_taken = true;
  uv_mutex_unlock(&wr->lock);
  if (taken) return; /* the thread's completions come back here */
  writer_job *list = wr->turn_head, *tail = wr->turn_tail, *j;
  wr->turn_head = wr->turn_tail = NULL;
  wr->running_here = true;
  bool ran = writer_run_batch(wr, list, n);
  wr->running_here = false;
  uv_mutex_lock(&wr->lock);
  wr->store_taken = false;
  if (ran) {
    while ((j = writer_pop(&list, &tail)) != NULL) writer_push(&wr->done_head, &wr->done_tail, j);
    wr->checkpoint_due = store_checkpoint_due(wr->store);
    if (wr->checkpoint_due) uv_cond_signal(&wr->wake);
  }
  uv_mutex_unlock(&wr->lock);
  if (ran) {
    writer_on_async(&wr->async); /* the completions, now */
    return;
  }
  /* The lock is taken: the thread waits for it (nothing was queued meanwhile: only the loop
   * queues). */
  wr->turn_head = list;
  wr->turn_tail = tail;
  writer_hand_over(wr);
}

static void writer_on_kick(uv_check_t *h) {
  writer_flush(h->data);
}

static void writer_on_kick_idle(uv_idle_t *h) {
  writer_flush(h->data);
}

static void writer_kick(writer_t *wr) {
  if (wr->thread_running && !uv_is_active((uv_handle_t *)&wr->kick)) { /* not after writer_stop */
    uv_check_start(&wr->kick, writer_on_kick);
    uv_idle_start(&wr->kick_idle, writer_on_kick_idle);
  }
}

void writer_submit(writer_t *wr, writer_job *j, uint64_t timeout_ms) {
  j->deadline = uv_hrtime() + timeout_ms * 1000000ull;
  writer_push(&wr->turn_head, &wr->turn_tail, j);
  writer_kick(wr); /* the writes of this loop turn go together (group commit) */
}

void writer_stop(writer_t *wr) {
  if (wr == NULL || !wr->thread_running) return;
  if (wr->turn_head != NULL) writer_hand_over(wr);
  uv_mutex_lock(&wr->lock);
  wr->stopping = true;
  uv_cond_signal(&wr->wake);
  uv_mutex_unlock(&wr->lock);
  uv_thread_join(&wr->thread);
  wr->thread_running = false;
  writer_on_async(&wr->async); /* the completions the thread left */
  uv_close((uv_handle_t *)&wr->async, NULL);
  uv_close((uv_handle_t *)&wr->kick, NULL);
  uv_close((uv_handle_t *)&wr->kick_idle, NULL);
  uv_close((uv_handle_t *)&wr->prune_timer, NULL); /* a step it waited for is not taken */
}

void writer_destroy(writer_t *wr) {
  if (wr == NULL) return;
  store_close(wr->store);
  uv_cond_destroy(&wr->wake);
  uv_mutex_destroy(&wr->lock);
  free(wr);
}

static char *dup_or_null(const char *s) {
  return s != NULL ? mem_strdup(s) : NULL;
}

/* Record writes ---------------------------------------------------------------- */

/* A bulk write: its filters resolved on the writer's own view of the table. */
static int writer_bulk_run(writer_record *r, store_t *s, const store_table *t,
                           const store_guard *g) {
  store_filter filters[URI_MAX_FILTERS + 1];
  size_t n = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, r->where) {
    const cJSON *name = cJSON_GetArrayItem(f, 0);
    int col = cJSON_IsString(name) ? store_column_index(t, name->valuestring) : -1;
    if (col < 0 || n == ARRAY_LEN(filters)) {
      snprintf(r->err, sizeof(r->err), "no column %s in table %s",
               cJSON_IsString(name) ? name->valuestring : "?", t->name);
      return -EINVAL;
    }
    filters[n++] =
        (store_filter){col, cJSON_GetArrayItem(f, 2), (store_op)cJSON_GetArrayItem(f, 1)->valueint};
  }
  return store_bulk_as(s, t, filters, n, r->is_delete ? NULL : r->record, g, &r->changed, r->err,
                       sizeof(r->err));
}

/* The write itself, on t, inside r's row scope. */
static int writer_record_write(writer_record *r, store_t *s, const store_table *t) {
  store_guard g = {r->principal, r->scope_column, r->scope_value};
  if (r->where != NULL) return writer_bulk_run(r, s, t, &g);
  if (r->is_delete) return store_delete_as(s, t, r->key, &g, r->err, sizeof(r->err));
  return store_write_as(s, t, r->key, r->record, r->mode, &g, &r->out_key, &r->created, &r->row,
                        &r->version, r->err, sizeof(r->err));
}

static int writer_record_run(writer_job *j, store_t *s) {
  if (store_refresh_schema(s, NULL) != 0) {
    /* A failed check keeps the tables known before; the write says what it meets. */
  }
  return writer_record_apply((writer_record *)j, s);
}

int writer_record_apply(writer_record *r, store_t *s) {
  const store_table *t = store_find_table(s, r->table);
  /* The loop found it: this connection's view is behind (PostgreSQL reads the schema at a pace). */
  if (t == NULL && store_schema_stale(s) && store_refresh_schema(s, NULL) == 0)
    t = store_find_table(s, r->table);
  if (t == NULL) {
    snprintf(r->err, sizeof(r->err), "no table %s", r->table);
    return -EINVAL;
  }
  if (r->once.origin == NULL) return writer_record_write(r, s, t);
  /* Sent here by another worker: made once, however often it comes (forward.h). */
  store_once_result res;
  int rc = store_once_begin(s, &r->once, &res);
  if (rc == 1) {
    r->out_key = res.out_key;
    r->created = res.created;
    r->changed = res.changed;
    return 0;
  }
  if (rc < 0) {
    snprintf(r->err, sizeof(r->err), "the write could not begin: %s", strerror(-rc));
    return rc;
  }
  rc = writer_record_write(r, s, t);
  res = (store_once_result){r->out_key, r->created, r->changed};
  int end = store_once_end(s, &r->once, &res, rc == 0);
  return rc != 0 ? rc : end;
}

writer_record *writer_record_create(size_t size, const char *table, const char *key, cJSON *record,
                                    store_write_mode mode, bool is_delete, const store_guard *guard,
                                    void (*done)(writer_job *j)) {
  writer_record *r = mem_calloc(1, size);
  r->job.run = writer_record_run;
  r->job.done = done;
  r->job.app_write = true;
  r->job.quick = true; /* one row (a bulk write clears it) */
  r->table = mem_strdup(table);
  r->key = key != NULL ? mem_strdup(key) : NULL;
  r->record = record;
  r->mode = mode;
  r->is_delete = is_delete;
  if (guard != NULL) {
    r->principal = dup_or_null(guard->principal);
    r->scope_column = dup_or_null(guard->scope_column);
    r->scope_value = dup_or_null(guard->scope_value);
  }
  return r;
}

void writer_record_free(writer_record *r) {
  if (r == NULL) return;
  free(r->table);
  free(r->key);
  free(r->out_key);
  free(r->principal);
  free(r->scope_column);
  free(r->scope_value);
  free((char *)r->once.origin);
  cJSON_Delete(r->record);
  cJSON_Delete(r->where);
  cJSON_Delete(r->row);
  free(r);
}

int writer_record_take_row(writer_record *r, store_t *s, const store_table *t, cJSON **row,
                           int64_t *version) {
  if (r->row == NULL) return store_get_record(s, t, r->out_key ? r->out_key : r->key, row, version);
  *row = r->row;
  *version = r->version;
  r->row = NULL;
  return 0;
}

/* Session rows and retention ------------------------------------------------------ */

typedef enum session_op {
  SESSION_INSERT,
  SESSION_TOUCH,
  SESSION_LOG_LEVEL,
  SESSION_SUBSCRIPTIONS,
  SESSION_SUB_PUT,
  SESSION_SUB_DELETE,
  SESSION_DELETE,
  SESSION_SWEEP,
  AUDIT_PRUNE, /* retention's next step (the sweep's prune examined WRITER_PRUNE_SPAN rows) */
  SCHEMA_TRIGGERS,
  SIGNAL, /* a row of the signal log (store_signal) */
} session_op;

typedef struct writer_session_job {
  writer_job job;
  session_op op;
  store_session row; /* INSERT: every field; others: id (and the one value) */
  char *text;        /* log level, subscriptions, or one subscribed URI */
  char *text2;       /* SUB_PUT: its debounce (JSON), or NULL */
  char *text3;       /* SUB_PUT: its topic key */
  int64_t number;    /* last_seen, or the sweep's before_ms */
  unsigned slot, n_slots;
  bool retain;
  store_prune prune;                /* retain, AUDIT_PRUNE: this step */
  int64_t pruned;                   /* session rows */
  int64_t audit_earlier;            /* audit rows deleted by the sweep's steps before this one */
  void (*then)(int rc, void *data); /* INSERT: the caller waits for it */
  void *then_data;
  writer_t *wr; /* SUB_PUT, SUB_DELETE: whose unsaved hook hears of a failure; SWEEP: queues more */
} writer_session_job;

/* Session rows whose stored subscriptions lost URIs (writer_prune_session_rows). */
typedef struct pruned_row {
  char *id, *subscriptions;
  struct pruned_row *next;
} pruned_row;

typedef struct prune_ctx {
  const char *base; /* the public URL the URIs are resolved against */
  store_t *s;
  pruned_row *rows;
} prune_ctx;

static int collect_pruned(const store_session *ss, void *data) {
  prune_ctx *ctx = data;
  char *kept = subs_list_prune(ctx->base, ctx->s, ss->subscriptions);
  if (kept == NULL) return 0;
  pruned_row *r = mem_calloc(1, sizeof(*r));
  r->id = mem_strdup(ss->id);
  r->subscriptions = kept;
  r->next = ctx->rows;
  ctx->rows = r;
  return 0;
}

/*
 * After a schema change: every session row, live here or not, forgets the
 * subscribed URIs that no longer resolve, so that a table created again
 * does not bring back subscriptions that ended with the old one.
 */
static int writer_prune_session_rows(const char *base, store_t *s) {
  prune_ctx ctx = {base, s, NULL};
  int rc = store_session_foreach(s, 0, collect_pruned, &ctx);
  for (pruned_row *r = ctx.rows, *next; r != NULL; r = next) {
    next = r->next;
    if (rc == 0) rc = store_session_set_subscriptions(s, r->id, r->subscriptions);
    if (rc == -ENOENT) rc = 0; /* ended meanwhile */
    free(r->id);
    free(r->subscriptions);
    free(r);
  }
  return rc;
}

static int writer_session_run(writer_job *j, store_t *s) {
  writer_session_job *sj = (writer_session_job *)j;
  const char *id = sj->row.id;
  switch (sj->op) {
  case SESSION_INSERT: return store_session_insert(s, &sj->row);
  case SESSION_TOUCH: return store_session_touch(s, id, sj->number);
  case SESSION_LOG_LEVEL: return store_session_set_log_level(s, id, sj->text);
  case SESSION_SUBSCRIPTIONS: return store_session_set_subscriptions(s, id, sj->text);
  case SESSION_SUB_PUT: return store_session_sub_put(s, id, sj->text, sj->text2, sj->text3);
  case SESSION_SUB_DELETE: return store_session_sub_delete(s, id, sj->text);
  case SESSION_DELETE: {
    int rc = store_session_delete(s, id);
    return rc == -ENOENT ? 0 : rc; /* already gone: nothing durable to remove */
  }
  case SCHEMA_TRIGGERS: {
    int rc = store_refresh_schema(s, NULL);
    return rc == 0 ? writer_prune_session_rows(sj->text, s) : rc;
  }
  case SESSION_SWEEP: {
    int rc = sj->n_slots > 0
                 ? store_session_prune_slot(s, sj->number, sj->slot, sj->n_slots, &sj->pruned)
                 : store_session_prune(s, sj->number, &sj->pruned);
    if (rc == 0 && sj->retain) rc = store_audit_prune(s, &sj->prune);
    return rc;
  }
  case AUDIT_PRUNE: return store_audit_prune(s, &sj->prune);
  case SIGNAL: return store_signal(s, id, sj->text);
  }
  return -EINVAL;
}

static writer_session_job *writer_session_job_create(session_op op, const char *id);
static void writer_session_submit(writer_t *wr, writer_session_job *sj);

/* Retention's next step, after WRITER_PRUNE_GAP_MS. */
static void writer_prune_step(uv_timer_t *t) {
  writer_t *wr = t->data;
  if (wr->stopping || wr->w->draining || wr->w->closing) {
    wr->pruning = false;
    return;
  }
  writer_session_job *sj = writer_session_job_create(AUDIT_PRUNE, NULL);
  sj->wr = wr;
  sj->prune = wr->prune_next;
  sj->pruned = wr->prune_sessions;
  sj->audit_earlier = wr->prune_earlier;
  writer_session_submit(wr, sj);
}

static void writer_session_done(writer_job *j) {
  writer_session_job *sj = (writer_session_job *)j;
  static const char *const names[] = {
      [SESSION_INSERT] = "insert",
      [SESSION_TOUCH] = "touch",
      [SESSION_LOG_LEVEL] = "log level",
      [SESSION_SUBSCRIPTIONS] = "subscriptions",
      [SESSION_SUB_PUT] = "subscription",
      [SESSION_SUB_DELETE] = "unsubscription",
      [SESSION_DELETE] = "delete",
      [SESSION_SWEEP] = "sweep",
      [AUDIT_PRUNE] = "audit prune",
      [SCHEMA_TRIGGERS] = "triggers",
      [SIGNAL] = "signal",
  };
  writer_t *wr = sj->wr;
  bool pruning = (sj->op == SESSION_SWEEP && sj->retain) || sj->op == AUDIT_PRUNE;
  bool more = pruning && j->rc == 0 && sj->prune.more && !wr->stopping && !wr->w->draining &&
              !wr->w->closing;
  if (pruning && j->rc == 0) wr->prune_after = sj->prune.after;
  if (pruning && !more) wr->pruning = false;
  if (j->rc != 0) {
    log_warn("session row not written", "op", names[sj->op], "session", sj->row.id, "error",
             strerror(-j->rc));
  } else if (more) { /* the next step after a gap (a drain leaves it) */
    wr->prune_next = sj->prune;
    wr->prune_sessions = sj->pruned;
    wr->prune_earlier = sj->audit_earlier + sj->prune.deleted;
    uv_timer_start(&wr->prune_timer, writer_prune_step, WRITER_PRUNE_GAP_MS, 0);
  } else if (pruning || sj->op == SESSION_SWEEP) {
    int64_t audit = sj->audit_earlier + sj->prune.deleted;
    if (sj->pruned > 0 || audit > 0) {
      char a[32], b[32];
      snprintf(a, sizeof(a), "%lld", (long long)sj->pruned);
      snprintf(b, sizeof(b), "%lld", (long long)audit);
      log_info("sweep", "session_rows", a, "audit_rows", b);
    }
  }
  /* -ENOENT: the session's row is gone, and no retry brings a subscription row back. */
  if (j->rc != 0 && j->rc != -ENOENT &&
      (sj->op == SESSION_SUB_PUT || sj->op == SESSION_SUB_DELETE) && wr->unsaved != NULL)
    wr->unsaved(sj->row.id, sj->text, wr->unsaved_data);
  if (sj->then != NULL) sj->then(j->rc, sj->then_data);
  free(sj->text);
  free(sj->text2);
  free(sj->text3);
  store_session_finish(&sj->row);
  free(sj);
}

static writer_session_job *writer_session_job_create(session_op op, const char *id) {
  writer_session_job *sj = mem_calloc(1, sizeof(*sj));
  sj->job.run = writer_session_run;
  sj->job.done = writer_session_done;
  sj->job.quick = op != SESSION_SWEEP && op != AUDIT_PRUNE && op != SCHEMA_TRIGGERS; /* one row */
  sj->op = op;
  if (id != NULL) snprintf(sj->row.id, sizeof(sj->row.id), "%s", id);
  return sj;
}

static void writer_session_submit(writer_t *wr, writer_session_job *sj) {
  writer_submit(wr, &sj->job, wr->w->cfg->write_timeout_ms);
}

void writer_session_insert(writer_t *wr, const store_session *row) {
  writer_session_insert_then(wr, row, NULL, NULL);
}

void writer_session_insert_then(writer_t *wr, const store_session *row,
                                void (*then)(int rc, void *data), void *data) {
  writer_session_job *sj = writer_session_job_create(SESSION_INSERT, NULL);
  sj->then = then;
  sj->then_data = data;
  sj->row = *row;
  sj->row.client_info = dup_or_null(row->client_info);
  sj->row.client_capabilities = dup_or_null(row->client_capabilities);
  sj->row.log_level = dup_or_null(row->log_level);
  sj->row.subscriptions = dup_or_null(row->subscriptions);
  sj->row.principal = dup_or_null(row->principal);
  writer_session_submit(wr, sj);
}

void writer_signal_then(writer_t *wr, const char *session, const char *image,
                        void (*then)(int rc, void *data), void *data) {
  writer_session_job *sj = writer_session_job_create(SIGNAL, session);
  sj->text = mem_strdup(image);
  sj->then = then;
  sj->then_data = data;
  writer_session_submit(wr, sj);
}

void writer_session_touch(writer_t *wr, const char *id, int64_t last_seen) {
  writer_session_job *sj = writer_session_job_create(SESSION_TOUCH, id);
  sj->number = last_seen;
  writer_session_submit(wr, sj);
}

void writer_session_set_log_level(writer_t *wr, const char *id, const char *level) {
  writer_session_job *sj = writer_session_job_create(SESSION_LOG_LEVEL, id);
  sj->text = mem_strdup(level);
  writer_session_submit(wr, sj);
}

void writer_session_set_subscriptions(writer_t *wr, const char *id, const char *json) {
  writer_session_job *sj = writer_session_job_create(SESSION_SUBSCRIPTIONS, id);
  sj->text = mem_strdup(json);
  writer_session_submit(wr, sj);
}

void writer_session_subscription_then(writer_t *wr, const char *id, const char *uri,
                                      const char *key, const char *debounce, bool remove,
                                      void (*then)(int rc, void *data), void *data) {
  writer_session_job *sj =
      writer_session_job_create(remove ? SESSION_SUB_DELETE : SESSION_SUB_PUT, id);
  sj->text = mem_strdup(uri);
  sj->text2 = dup_or_null(debounce);
  sj->text3 = dup_or_null(key);
  sj->then = then;
  sj->then_data = data;
  sj->wr = wr;
  writer_session_submit(wr, sj);
}

void writer_on_subscription_unsaved(writer_t *wr,
                                    void (*fn)(const char *id, const char *uri, void *data),
                                    void *data) {
  wr->unsaved = fn;
  wr->unsaved_data = data;
}

void writer_session_delete(writer_t *wr, const char *id) {
  writer_session_delete_then(wr, id, NULL, NULL);
}

void writer_session_delete_then(writer_t *wr, const char *id, void (*then)(int rc, void *data),
                                void *data) {
  writer_session_job *sj = writer_session_job_create(SESSION_DELETE, id);
  sj->then = then;
  sj->then_data = data;
  writer_session_submit(wr, sj);
}

void writer_sync_triggers(writer_t *wr) {
  writer_session_job *sj = writer_session_job_create(SCHEMA_TRIGGERS, NULL);
  sj->text = mem_strdup(wr->w->cfg->public_url); /* what the stored URIs are resolved against */
  writer_session_submit(wr, sj);
}

void writer_sweep(writer_t *wr, int64_t before_ms, unsigned slot, unsigned n_slots, bool retain,
                  int64_t retain_rows, int64_t retain_ms, int64_t now_ms) {
  writer_session_job *sj = writer_session_job_create(SESSION_SWEEP, NULL);
  sj->number = before_ms;
  sj->slot = slot;
  sj->n_slots = n_slots;
  sj->retain = retain && !wr->pruning; /* not while the last sweep's steps go on */
  if (sj->retain) {
    wr->pruning = true;
    if (now_ms - wr->prune_pass_ms >= WRITER_PRUNE_PASS_MS) {
      wr->prune_after = 0;
      wr->prune_pass_ms = now_ms;
    }
    sj->prune = (store_prune){.retain_rows = retain_rows,
                              .retain_ms = retain_ms,
                              .now_ms = now_ms,
                              .span = WRITER_PRUNE_SPAN,
                              .after = wr->prune_after};
  }
  sj->wr = wr;
  writer_session_submit(wr, sj);
}
