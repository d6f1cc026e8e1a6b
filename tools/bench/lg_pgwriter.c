/*
 * A raw PostgreSQL writer: what any other client of the server's database
 * does, the PostgreSQL counterpart of lg_sqlwriter.c. One libpq connection
 * to the URI given as --db, one prepared upsert, one row per transaction
 * (autocommit), with the server's own durability settings (the benchmark
 * runs its cluster with synchronous_commit=on, fsync=on): the audit
 * trigger mcpsubd installed fires and sends its NOTIFY exactly as for
 * mcpsubd's own commits. Used for the external-writer latency scenario (at
 * a fixed rate, each row carrying its commit time) and as the baseline of
 * the write-throughput scenario (as fast as possible, on one or several
 * connections).
 *
 * It runs in a process of its own (forked by the load generator, or by
 * `bench_loadgen pgwrite`) and never touches the parent's event loop.
 * The connection goes wherever the URI says; tools/bench/run gives it a
 * cluster on 127.0.0.1 only.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "lg.h"

static void pgw_notice_ignore(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

int lg_pgwriter_run(const lg_sqlwriter_opts *o, uint64_t *written) {
  *written = 0;
  int rc = -1;
  PGresult *r = NULL;
  PGconn *conn = PQconnectdb(o->db_path);
  if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
    fprintf(stderr, "pgwriter: cannot connect: %s\n",
            conn ? PQerrorMessage(conn) : "out of memory");
    goto out;
  }
  PQsetNoticeProcessor(conn, pgw_notice_ignore, NULL);
  char sql[256];
  snprintf(sql, sizeof(sql),
           "INSERT INTO \"%s\" (k, t, v) VALUES ($1, $2::bigint, 'x') "
           "ON CONFLICT (k) DO UPDATE SET t = excluded.t, v = excluded.v",
           o->table);
  r = PQprepare(conn, "lg_put", sql, 2, NULL);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) {
    fprintf(stderr, "pgwriter: prepare: %s", PQerrorMessage(conn));
    goto out;
  }
  PQclear(r);
  r = NULL;
  int backend = PQbackendPID(conn); /* the server process of this connection (same machine) */
  uint64_t stride = o->key_stride ? o->key_stride : 1;
  uint64_t start = lg_now_ns(), t;
  for (uint64_t n = 0; n < o->count && lg_writer_next(o, start, n, &t); n++) {
    char key[32], tval[24];
    snprintf(key, sizeof(key), "%c%llu", o->key_prefix,
             (unsigned long long)(n * stride + o->key_offset));
    snprintf(tval, sizeof(tval), "%llu", (unsigned long long)t);
    const char *values[2] = {key, tval};
    r = PQexecPrepared(conn, "lg_put", 2, values, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      fprintf(stderr, "pgwriter: insert %s: %s", key, PQerrorMessage(conn));
      goto out;
    }
    PQclear(r);
    r = NULL;
    (*written)++;
  }
  rc = 0;
  lg_proc_sample own;
  if (o->backend_cpu_s != NULL && backend > 0 && lg_proc_sample_tree(backend, &own) == 0)
    *o->backend_cpu_s = own.cpu_s;
out:
  PQclear(r);
  PQfinish(conn);
  return rc;
}
