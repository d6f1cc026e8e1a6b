/*
 * The tailer on a real SQLite file with its store lane enabled (as on
 * PostgreSQL: a job waits its turn while another one runs, and what was
 * asked of it meanwhile is done by one job). Another connection commits a
 * backlog longer than one turn's reading; the turn ends by asking for more
 * (tailer_kick) while the lane is busy, and a file event that finds nothing
 * new comes in the same job. The rest of the backlog must still be read,
 * with no further commit to wake the tailer.
 */
#include <poll.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>
#include <utime.h>
#include <uv.h>

#include "check.h"
#include "common/store.h"
#include "worker/lane.h"
#include "worker/tailer.h"

/* More than one turn reads (TAILER_MAX_BATCHES_PER_TURN batches of TAILER_BATCH). */
#define BACKLOG 5000
_Static_assert(BACKLOG > TAILER_MAX_BATCHES_PER_TURN * TAILER_BATCH, "a backlog of one turn");
/* How long the blocking job holds the lane. */
#define HOLD_MS 100

static char tmp_dir[] = "/tmp/mcpsub-tailer-XXXXXX";
static char db_path[300];

typedef struct harness {
  uv_loop_t *loop;
  lane_t lane;
  tailer_t tailer;
  uv_timer_t hold; /* starts the job that holds the lane */
  uv_timer_t stop;
  int pipe_fd[2]; /* never written: the holding job waits on it until its timeout */
  int64_t changes;
  int batches;
  bool held;
  uint64_t started; /* loop time at the start */
} harness;

static void on_change(const store_audit_row *row, void *data) {
  harness *h = data;
  (void)row;
  h->changes++;
}

/* A job that keeps the lane for HOLD_MS, parked as a store call waiting for its socket would be. */
static void hold_job(void *arg) {
  harness *h = arg;
  CHECK_INT_EQ(lane_wait_fd(&h->lane, h->pipe_fd[0], POLLIN, HOLD_MS), 0);
}

static void on_hold(uv_timer_t *t) {
  harness *h = t->data;
  lane_run(&h->lane, hold_job, h);
}

/*
 * After the first turn's last batch: the turn will ask for more with a
 * zero-delay timer; a zero-delay timer started first takes the lane before
 * it, and a touch of the database file brings a file event meanwhile.
 */
static void on_batch_end(void *data) {
  harness *h = data;
  if (++h->batches != TAILER_MAX_BATCHES_PER_TURN || h->held) return;
  h->held = true;
  CHECK(uv_timer_start(&h->hold, on_hold, 0, 0) == 0);
  CHECK(utime(db_path, NULL) == 0);
}

static void check_schema(void *data) {
  (void)data; /* the tables do not change here */
}

static const tailer_ops ops = {on_change, on_batch_end, NULL, check_schema};

/*
 * Looks every 20 ms whether the backlog was read, for at most STOP_MS (slow
 * under valgrind). Nothing else reads the rest for the tailer: the
 * rechecks and the safety poll find data_version unmoved and only look.
 */
#define STOP_MS 20000

static void on_stop(uv_timer_t *t) {
  harness *h = t->data;
  if (h->changes < BACKLOG && uv_now(h->loop) < h->started + STOP_MS) return;
  tailer_close(&h->tailer);
  uv_close((uv_handle_t *)&h->hold, NULL);
  uv_close((uv_handle_t *)&h->stop, NULL);
}

static void exec_sql(sqlite3 *db, const char *sql) {
  char *err = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
  if (rc != SQLITE_OK) fprintf(stderr, "sqlite3_exec: %s\n", err ? err : "?");
  CHECK(rc == SQLITE_OK);
}

static void test_backlog_read_on_after_a_look_that_found_nothing(void) {
  char schema_path[300], err[256] = "";
  snprintf(db_path, sizeof(db_path), "%s/t.db", tmp_dir);
  snprintf(schema_path, sizeof(schema_path), "%s/schema.sql", tmp_dir);
  FILE *f = fopen(schema_path, "w");
  CHECK(f != NULL);
  fputs("CREATE TABLE Item (id INTEGER PRIMARY KEY, n INTEGER);\n", f);
  CHECK(fclose(f) == 0);
  store_t *store = NULL;
  CHECK(store_open(db_path, schema_path, &store, err, sizeof(err)) == 0);

  harness h = {.loop = uv_default_loop()};
  CHECK(pipe(h.pipe_fd) == 0);
  lane_init(&h.lane, h.loop, true);
  store_set_waiter(store, &(store_waiter){lane_wait_fd, lane_may_use, &h.lane});
  uv_timer_init(h.loop, &h.hold);
  uv_timer_init(h.loop, &h.stop);
  h.hold.data = h.stop.data = &h;
  tailer_init(&h.tailer, h.loop, store, &h.lane, db_path, &ops, &h);
  tailer_set_active(&h.tailer, true); /* positioned at the head: the empty log's 0 */
  CHECK_INT_EQ(tailer_position(&h.tailer), 0);

  /* Another connection commits the backlog: its file events wake the tailer. */
  sqlite3 *db = NULL;
  CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
  char sql[200];
  snprintf(sql, sizeof(sql),
           "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
           "INSERT INTO Item (id, n) SELECT i, i FROM n",
           BACKLOG);
  exec_sql(db, sql);
  sqlite3_close(db);

  h.started = uv_now(h.loop);
  uv_timer_start(&h.stop, on_stop, 20, 20);
  uv_run(h.loop, UV_RUN_DEFAULT);
  CHECK(h.held); /* the race was set up */
  CHECK_INT_EQ(h.changes, BACKLOG);
  CHECK_INT_EQ(h.tailer.cursor, BACKLOG);

  tailer_finish(&h.tailer);
  lane_finish(&h.lane);
  store_close(store);
  close(h.pipe_fd[0]);
  close(h.pipe_fd[1]);
  CHECK(uv_loop_close(h.loop) == 0);
}

int main(void) {
  CHECK(mkdtemp(tmp_dir) != NULL);
  RUN(test_backlog_read_on_after_a_look_that_found_nothing);
  char cmd[400];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
  return system(cmd) == 0 ? 0 : 1;
}
