/*
 * A raw SQLite writer: what any other process writing the server's
 * database file does. One row per transaction, with the connection set up
 * as mcpsubd sets up its own (WAL, synchronous=NORMAL, a 5 s busy
 * timeout), so that the triggers mcpsubd installed run exactly as they do
 * for its own commits. Used for the external-writer latency scenario (at a
 * fixed rate, each row carrying its commit time) and as the baseline of
 * the write-throughput scenario (as fast as possible).
 *
 * It runs in a process of its own (forked by the load generator, or as
 * `bench_loadgen sqlwrite`) and never touches the parent's event loop.
 */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lg.h"

/* Attempts per row when the database is busy beyond the busy timeout. */
#define SQLW_MAX_TRIES 20

static void lg_sleep_until(uint64_t t_ns) {
  uint64_t now = lg_now_ns();
  if (t_ns <= now) return;
  uint64_t d = t_ns - now;
  struct timespec ts = {(time_t)(d / 1000000000u), (long)(d % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

bool lg_writer_next(const lg_sqlwriter_opts *o, uint64_t start_ns, uint64_t n, uint64_t *t_ns) {
  if (o->rate > 0) lg_sleep_until(start_ns + (uint64_t)((double)n * 1e9 / o->rate));
  *t_ns = lg_now_ns();
  if (*t_ns >= start_ns + (uint64_t)(o->duration_s * 1e9)) return false;
  if (o->t_commit != NULL) __atomic_store_n(&o->t_commit[n], *t_ns, __ATOMIC_RELEASE);
  return true;
}

static int exec(sqlite3 *db, const char *sql) {
  char *err = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
    fprintf(stderr, "sqlwriter: %s: %s\n", sql, err ? err : sqlite3_errmsg(db));
    sqlite3_free(err);
    return -1;
  }
  return 0;
}

int lg_sqlwriter_run(const lg_sqlwriter_opts *o, uint64_t *written) {
  *written = 0;
  sqlite3 *db = NULL;
  sqlite3_stmt *st = NULL;
  int rc = -1;
  if (sqlite3_open_v2(o->db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    fprintf(stderr, "sqlwriter: cannot open %s: %s\n", o->db_path,
            db ? sqlite3_errmsg(db) : "no memory");
    goto out;
  }
  sqlite3_busy_timeout(db, 5000);
  if (exec(db, "PRAGMA journal_mode=WAL") != 0 || exec(db, "PRAGMA synchronous=NORMAL") != 0)
    goto out;
  char sql[256];
  snprintf(sql, sizeof(sql),
           "INSERT INTO \"%s\" (k, t, v) VALUES (?1, ?2, 'x') "
           "ON CONFLICT (k) DO UPDATE SET t = excluded.t, v = excluded.v",
           o->table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    fprintf(stderr, "sqlwriter: %s\n", sqlite3_errmsg(db));
    goto out;
  }
  uint64_t start = lg_now_ns(), t;
  for (uint64_t n = 0; n < o->count && lg_writer_next(o, start, n, &t); n++) {
    char key[32];
    snprintf(key, sizeof(key), "%c%llu", o->key_prefix, (unsigned long long)n);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)t);
    int s = SQLITE_BUSY;
    for (int tries = 0; tries < SQLW_MAX_TRIES && (s == SQLITE_BUSY || s == SQLITE_LOCKED);
         tries++) {
      s = sqlite3_step(st);
      sqlite3_reset(st);
    }
    if (s != SQLITE_DONE) {
      fprintf(stderr, "sqlwriter: insert %s: %s\n", key, sqlite3_errmsg(db));
      goto out;
    }
    (*written)++;
  }
  rc = 0;
out:
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rc;
}
