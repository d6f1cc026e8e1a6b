/*
 * The worker's readers (see reader.h): n threads, each with its own
 * connection, taking jobs from one queue; their completions come back to
 * the loop through a uv_async, and run there in the order they finished.
 * Or (SQLite) the loop's reader: one connection, whose jobs run on the
 * loop at the end of the turn's I/O, all in one read transaction.
 */
#include "worker/reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

#include "worker/worker.h"

typedef struct reader_thread {
  reader_t *rd;
  int index;
  uv_thread_t thread;
  store_t *store;
  bool running;
} reader_thread;

struct reader {
  uv_mutex_t lock;
  uv_cond_t wake;
  uv_async_t async;
  reader_job *queue_head, *queue_tail; /* waiting for a reader (mutex) */
  reader_job *done_head, *done_tail;   /* done, for the loop (mutex) */
  bool stopping;                       /* (mutex) */
  int lost;                            /* the reader that found the database gone, or -1 (mutex) */
  uint64_t ok_ms;                      /* when a job last got through (mutex; 0: never) */
  uint64_t pending;                    /* loop only: submitted, done not yet run */
  uint64_t done;                       /* loop only: done run */
  /* The loop's reader (reader_start_loop): its connection, and what runs its turn's jobs. */
  store_t *store;
  uv_check_t check;
  uv_idle_t idle;
  bool held;        /* a read batch of an earlier turn is open (reader_run_turn) */
  uv_timer_t limit; /* lets it go READER_HOLD_MS after it was first kept */
  int n;
  reader_thread threads[];
};

static void reader_push(reader_job **head, reader_job **tail, reader_job *j) {
  j->next = NULL;
  if (*tail != NULL)
    (*tail)->next = j;
  else
    *head = j;
  *tail = j;
}

/*
 * A read that failed with -ENOTCONN (its connection broke: the server
 * restarted, a connection was killed) while another reader got through
 * within READER_RETRY_MS is given to another reader, once: the database
 * answers, and only this connection has yet to be made again.
 *
 * Otherwise the database is taken to be gone (no answer within the
 * statement deadline, every connection broken), and only the reader that
 * found it so takes jobs: its connection is known lost, and each call then
 * fails at once with -ENOTCONN (or makes one step of connecting again),
 * where another reader's connection, not known lost yet, could wait out
 * the whole deadline again. The first call of any reader that gets
 * through ends it.
 */
#define READER_RETRY_MS 1000

/*
 * The longest a read transaction of the loop's reader is kept across turns
 * (reader_run_turn) while nothing is committed. A WAL cannot start over
 * while a reader holds a mark in it, nor be checkpointed past that mark:
 * a worker that no more reads come to lets it go after this, however
 * much other workers and processes write meanwhile. (A turn that finds a
 * commit lets it go at once.)
 */
#define READER_HOLD_MS 100

static bool reader_may_take(const reader_thread *t) {
  const reader_t *rd = t->rd;
  const reader_job *j = rd->queue_head;
  if (j == NULL) return false;
  if (rd->stopping) return true;
  if (rd->lost >= 0) return rd->lost == t->index; /* the job it was to avoid too */
  return j->avoid != t->index;
}

static void reader_thread_main(void *arg) {
  reader_thread *t = arg;
  reader_t *rd = t->rd;
  uv_mutex_lock(&rd->lock);
  for (;;) {
    while (!reader_may_take(t) && !rd->stopping) uv_cond_wait(&rd->wake, &rd->lock);
    reader_job *j = rd->queue_head;
    if (j == NULL) break; /* stopping, and nothing left */
    rd->queue_head = j->next;
    if (rd->queue_head == NULL) rd->queue_tail = NULL;
    uv_mutex_unlock(&rd->lock);
    j->rc = j->run(j, t->store);
    /*
     * Once more: a connection found broken (the server restarted) is made
     * again by the next call, at once when the server answers. A read is
     * safe to repeat; while the database is away this fails as fast.
     */
    if (j->rc == -ENOTCONN) j->rc = j->run(j, t->store);
    uint64_t now = uv_hrtime() / 1000000;
    uv_mutex_lock(&rd->lock);
    if (j->rc != -ENOTCONN) {
      rd->ok_ms = now;
      if (rd->lost >= 0) {
        rd->lost = -1;
        uv_cond_broadcast(&rd->wake); /* the database answers: every reader takes jobs again */
      }
    } else if (j->avoid < 0 && rd->lost < 0 && rd->n > 1 && !rd->stopping && rd->ok_ms != 0 &&
               now - rd->ok_ms < READER_RETRY_MS) {
      j->avoid = t->index; /* to another reader, first in line */
      j->next = rd->queue_head;
      rd->queue_head = j;
      if (rd->queue_tail == NULL) rd->queue_tail = j;
      uv_cond_broadcast(&rd->wake);
      continue;
    } else if (rd->lost < 0) {
      rd->lost = t->index;
    }
    reader_push(&rd->done_head, &rd->done_tail, j);
    uv_async_send(&rd->async);
  }
  uv_mutex_unlock(&rd->lock);
}

/* The loop's side: completions of the jobs of list, directly (they answer without the store). */
static void reader_complete(reader_t *rd, reader_job *list) {
  while (list != NULL) {
    reader_job *j = list;
    list = j->next;
    rd->pending--;
    rd->done++;
    j->done(j);
  }
}

static void reader_on_async(uv_async_t *h) {
  reader_t *rd = h->data;
  uv_mutex_lock(&rd->lock);
  reader_job *list = rd->done_head;
  rd->done_head = rd->done_tail = NULL;
  uv_mutex_unlock(&rd->lock);
  reader_complete(rd, list);
}

int reader_start(worker_t *w, int n, reader_t **out, char *err, size_t errlen) {
  reader_t *rd = mem_calloc(1, sizeof(*rd) + (size_t)n * sizeof(rd->threads[0]));
  rd->n = n;
  rd->lost = -1;
  *out = NULL;
  for (int i = 0; i < n; i++) {
    rd->threads[i].rd = rd;
    rd->threads[i].index = i;
    int rc = store_open_readonly(w->cfg->db_path, &rd->threads[i].store, err, errlen);
    if (rc != 0) {
      for (int k = 0; k < i; k++) store_close(rd->threads[k].store);
      free(rd);
      return rc;
    }
  }
  if (uv_mutex_init(&rd->lock) != 0 || uv_cond_init(&rd->wake) != 0) abort();
  if (uv_async_init(w->loop, &rd->async, reader_on_async) != 0) abort(); /* exhausted fds */
  rd->async.data = rd;
  for (int i = 0; i < n; i++) {
    int rc = uv_thread_create(&rd->threads[i].thread, reader_thread_main, &rd->threads[i]);
    if (rc != 0) {
      snprintf(err, errlen, "cannot start a reader thread: %s", uv_strerror(rc));
      abort(); /* as for the writer: only when the process is out of resources at start */
    }
    rd->threads[i].running = true;
  }
  *out = rd;
  return 0;
}

/* Ends the read batch kept from an earlier turn. */
static void reader_let_go(reader_t *rd) {
  if (!rd->held) return;
  rd->held = false;
  (void)uv_timer_stop(&rd->limit);
  (void)store_batch_end(rd->store, true); /* nothing to commit: the read lock's release */
}

static void reader_on_limit(uv_timer_t *h) {
  reader_let_go(h->data);
}

/*
 * The loop's reader: the jobs submitted until now, in one read transaction
 * (store_batch_begin_read), then their completions. Each was submitted
 * after its request had arrived, and the snapshot begins after all of them
 * were: a read sees every commit acknowledged before its request came
 * (what a read on its own sees), and the read lock is taken once a turn
 * instead of once a statement (BENCHMARKS.md). Jobs submitted from here
 * (a completion's next request) wait for the next turn's snapshot.
 *
 * The transaction is kept for the next turns while it stays current
 * (store_batch_current: nothing committed since it began, by anyone), for
 * at most READER_HOLD_MS: their reads see what a snapshot begun for them
 * would, and while only reads come the lock is taken once in that time.
 */
static void reader_run_turn(reader_t *rd) {
  (void)uv_check_stop(&rd->check);
  (void)uv_idle_stop(&rd->idle);
  reader_job *list = rd->queue_head;
  rd->queue_head = rd->queue_tail = NULL;
  if (list == NULL) return;
  bool batch = rd->held && store_batch_current(rd->store);
  if (!batch) {
    reader_let_go(rd);
    batch = store_batch_begin_read(rd->store) == 0; /* else each read on its own */
  }
  for (reader_job *j = list; j != NULL; j = j->next) {
    j->rc = j->run(j, rd->store);
    if (batch && store_batch_broken(rd->store)) { /* an I/O error: the rest in a new one */
      (void)store_batch_end(rd->store, false);
      batch = store_batch_begin_read(rd->store) == 0;
    }
  }
  rd->held = batch;
  if (!batch || rd->stopping || !store_batch_current(rd->store))
    reader_let_go(rd);
  else if (!uv_is_active((uv_handle_t *)&rd->limit))
    (void)uv_timer_start(&rd->limit, reader_on_limit, READER_HOLD_MS, 0);
  reader_complete(rd, list);
}

static void reader_on_check(uv_check_t *h) {
  reader_run_turn(h->data);
}

/* One submitted after the turn's I/O (a deferred parse): the loop must not wait in poll. */
static void reader_on_idle(uv_idle_t *h) {
  reader_run_turn(h->data);
}

int reader_start_loop(worker_t *w, reader_t **out, char *err, size_t errlen) {
  reader_t *rd = mem_calloc(1, sizeof(*rd));
  rd->lost = -1;
  *out = NULL;
  int rc = store_open_readonly(w->cfg->db_path, &rd->store, err, errlen);
  if (rc != 0) {
    free(rd);
    return rc;
  }
  store_set_busy_timeout(rd->store, 0); /* on the loop: never waits, as the loop's own connection */
  uv_check_init(w->loop, &rd->check);   /* cannot fail */
  uv_idle_init(w->loop, &rd->idle);
  uv_timer_init(w->loop, &rd->limit);
  rd->check.data = rd->idle.data = rd->limit.data = rd;
  *out = rd;
  return 0;
}

void reader_submit(reader_t *rd, reader_job *j) {
  rd->pending++;
  j->avoid = -1;
  if (rd->store != NULL) { /* the loop's: at the end of the turn's I/O */
    reader_push(&rd->queue_head, &rd->queue_tail, j);
    if (rd->stopping) {
      reader_run_turn(rd); /* its handles are closing */
    } else if (!uv_is_active((uv_handle_t *)&rd->check)) {
      (void)uv_check_start(&rd->check, reader_on_check); /* fails only on a closing handle */
      (void)uv_idle_start(&rd->idle, reader_on_idle);
    }
    return;
  }
  uv_mutex_lock(&rd->lock);
  reader_push(&rd->queue_head, &rd->queue_tail, j);
  /* All: a signal could wake a reader that may not take it (reader_may_take). */
  if (rd->lost < 0)
    uv_cond_signal(&rd->wake);
  else
    uv_cond_broadcast(&rd->wake);
  uv_mutex_unlock(&rd->lock);
}

void reader_counts(const reader_t *rd, uint64_t *done, uint64_t *pending) {
  *done = rd != NULL ? rd->done : 0;
  *pending = rd != NULL ? rd->pending : 0;
}

void reader_stop(reader_t *rd) {
  if (rd == NULL || rd->stopping) return;
  if (rd->store != NULL) {
    rd->stopping = true;
    reader_run_turn(rd); /* what is queued */
    reader_let_go(rd);
    uv_close((uv_handle_t *)&rd->check, NULL);
    uv_close((uv_handle_t *)&rd->idle, NULL);
    uv_close((uv_handle_t *)&rd->limit, NULL);
    return;
  }
  uv_mutex_lock(&rd->lock);
  rd->stopping = true;
  uv_cond_broadcast(&rd->wake);
  uv_mutex_unlock(&rd->lock);
  for (int i = 0; i < rd->n; i++) {
    if (rd->threads[i].running) uv_thread_join(&rd->threads[i].thread);
    rd->threads[i].running = false;
  }
  reader_on_async(&rd->async); /* the completions the threads left */
  uv_close((uv_handle_t *)&rd->async, NULL);
}

void reader_destroy(reader_t *rd) {
  if (rd == NULL) return;
  if (rd->store != NULL) {
    store_close(rd->store);
    free(rd);
    return;
  }
  for (int i = 0; i < rd->n; i++) store_close(rd->threads[i].store);
  uv_cond_destroy(&rd->wake);
  uv_mutex_destroy(&rd->lock);
  free(rd);
}

int reader_table(store_t *s, const char *name, const store_table **t) {
  int rc = store_refresh_schema(s, NULL);
  *t = rc == 0 ? store_find_table(s, name) : NULL;
  if (rc == 0 && *t == NULL && store_schema_stale(s)) {
    rc = store_refresh_schema(s, NULL);
    if (rc == 0) *t = store_find_table(s, name);
  }
  return rc != 0 ? rc : *t != NULL ? 0 : -ENOENT;
}
