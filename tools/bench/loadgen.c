/*
 * bench_loadgen: the benchmark suite's load generator. One libuv process
 * opens S MCP sessions against a server on 127.0.0.1 (initialize,
 * notifications/initialized, resources/subscribe, then a GET stream each),
 * drives commits (REST PUTs from this process, or raw SQLite inserts from
 * a forked child on the same file, or raw PostgreSQL inserts through libpq
 * from a forked child), and reads every SSE stream. Each run
 * is one scenario; it prints one JSON object on stdout and exits 0, or
 * exits 1 with "ok": false when anything was lost, duplicated, refused or
 * late past the time limit: a benchmark that loses events reports a
 * failure, not a number.
 *
 * Every event is accounted for: session i's receipt of commit n sets bit
 * (i, n) of a bitmap, so a loss or a duplicate is exact, not estimated.
 * Commit times are taken in this process's clock (CLOCK_MONOTONIC, shared
 * with the forked SQLite writer through a shared mapping), so latency is
 * "commit issued -> notification parsed" in one clock.
 *
 * Bounds: sessions, events, bitmaps, bytes per read and per event, and
 * wall time (--time-limit) are all capped; traffic goes to 127.0.0.1 only.
 * Variation between scenarios lives in one const table of operations.
 */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lg_run.h"

/* ---- the report ----------------------------------------------------------------------- */

static void json_string(FILE *j, const char *s) {
  fputc('"', j);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(j, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(j, "\\u%04x", ch);
    else
      fputc(ch, j);
  }
  fputc('"', j);
}

static void lg_report(lg_t *lg) {
  FILE *j = stdout;
  fprintf(j, "{\"scenario\":\"%s\",\"label\":", lg->sc->name);
  json_string(j, lg->o.label ? lg->o.label : "");
  fprintf(j, ",\"target\":\"%s\",\"ok\":%s",
          lg->o.ceiling  ? "ceiling"
          : lg->o.listen ? "listen"
                         : "server",
          lg->failed ? "false" : "true");
  fprintf(j, ",\"sessions\":%u", lg->n_sessions);
  if (lg->t_setup_ns > lg->t_setup_begin_ns && lg->t_setup_begin_ns > 0)
    fprintf(j, ",\"setup_s\":%.3f", lg_secs(lg->t_setup_ns - lg->t_setup_begin_ns));
  fprintf(j, ",\"loadgen_cpu_s\":%.3f", lg_proc_self_cpu());
  if (lg->failed) {
    fprintf(j, ",\"error\":");
    json_string(j, lg->error);
    fprintf(j, ",\"errors\":%llu,\"received\":%llu,\"expected\":%llu",
            (unsigned long long)lg->n_errors, (unsigned long long)lg->received,
            (unsigned long long)lg->expected);
  } else {
    lg->sc->report(lg, j);
    if (lg->have_cpu) fprintf(j, ",\"server_processes\":%u", lg->cpu1.nprocs);
    fprintf(j, ",\"loadgen_measured_cpu_s\":%.3f", lg->self_cpu1 - lg->self_cpu0);
  }
  fprintf(j, "}\n");
  fflush(j);
}

/* ---- flags ---------------------------------------------------------------------------- */

enum flag_kind { FLAG_INT, FLAG_U64, FLAG_DOUBLE, FLAG_STR, FLAG_TARGET, FLAG_WRITER };

typedef struct lg_flag {
  const char *name;
  enum flag_kind kind;
  size_t offset;
  const char *help;
} lg_flag;

/* At most max characters, none of which needs escaping in a JSON string. */
static bool json_safe(const char *s, size_t max) {
  size_t n = 0;
  for (; s[n] != '\0'; n++)
    if ((unsigned char)s[n] < 0x20 || s[n] == '"' || s[n] == '\\') return false;
  return n <= max;
}

#define OPT(field) offsetof(lg_opts, field)
static const lg_flag lg_flags[] = {
    {"--port", FLAG_INT, OPT(port), "server port on 127.0.0.1"},
    {"--server-pid", FLAG_INT, OPT(server_pid),
     "pid whose process tree's CPU and RSS are measured"},
    {"--store-pid", FLAG_INT, OPT(store_pid),
     "pid of a database server (PostgreSQL's postmaster) whose process tree's CPU\n"
     "is measured apart (store_cpu_s, per_total_cpu_s)"},
    {"--target", FLAG_TARGET, 0,
     "server (MCP 2025 sessions and GET streams), listen (MCP 2026-07-28\n"
     "subscriptions/listen streams) or ceiling (fanout, latency: bare SSE streams\n"
     "from bench_ceiling; read: bench_read_ceiling's canned answers)"},
    {"--label", FLAG_STR, OPT(label), "free text copied into the report"},
    {"--read-uri", FLAG_STR, OPT(read_uri),
     "read: appended to the collection URI, e.g. \"?k=gt=p150000&_limit=100\" for a page\n"
     "(default /r0, the record the scenario writes first)"},
    {"--table", FLAG_STR, OPT(table),
     "exported table with columns k (text key), t, v (default Bench)"},
    {"--bearer", FLAG_STR, OPT(bearer), "Authorization: Bearer TOKEN on every request"},
    {"--sessions", FLAG_U64, OPT(sessions), "sessions (each: initialize, subscribe, a GET stream)"},
    {"--subs", FLAG_U64, OPT(subs),
     "subscriptions per session: 1 (collection) or 2 (and a record)"},
    {"--filtered", FLAG_U64, OPT(filtered),
     "1: each session's collection subscription is a distinct filtered URI\n"
     "(<collection>?v=ne=y<i>, matching every row)"},
    {"--mixed", FLAG_U64, OPT(mixed),
     "fanout: the first N sessions each hold two other URIs instead of the collection:\n"
     "<collection>?v=ne=y<i> (matching every row) and <collection>/m<i> (never written)"},
    {"--beside", FLAG_U64, OPT(beside),
     "fanout: the first N sessions hold, beside the collection, <collection>/m<i> (never written)"},
    {"--both", FLAG_U64, OPT(both),
     "fanout: 1: every session (or listen stream) holds the collection and\n"
     "<collection>?v=ne=y<i> (matching every row): two updates a commit"},
    {"--held", FLAG_U64, OPT(held),
     "subscribe: subscriptions the session holds before the measured ones"},
    {"--events", FLAG_U64, OPT(events), "commits"},
    {"--window", FLAG_U64, OPT(window), "commits allowed ahead of the slowest subscriber"},
    {"--writers", FLAG_U64, OPT(writers), "REST writer connections"},
    {"--connections", FLAG_U64, OPT(connections),
     "read or write connections (pgwrite: writer processes, one connection each)"},
    {"--rate", FLAG_DOUBLE, OPT(rate), "commits per second"},
    {"--writer", FLAG_WRITER, 0,
     "rest, tool (each writer connection a session calling put_record), sqlite or postgres"},
    {"--db", FLAG_STR, OPT(db_path),
     "database file (sqlite writer, sqlwrite) or libpq URI (postgres writer, pgwrite)"},
    {"--duration", FLAG_DOUBLE, OPT(duration_s), "seconds of a throughput run"},
    {"--max-requests", FLAG_U64, OPT(max_requests), "bound on requests of a throughput run"},
    {"--drop-percent", FLAG_U64, OPT(drop_percent), "storm: sessions dropped (percent)"},
    {"--behind", FLAG_U64, OPT(behind), "storm: commits made while they are away"},
    {"--gap-keys", FLAG_U64, OPT(gap_keys), "storm: records those commits touch"},
    {"--warm-events", FLAG_U64, OPT(warm_events), "storm: commits before the drop"},
    {"--storm-min-s", FLAG_DOUBLE, OPT(storm_min_s),
     "storm: least time commits go on after the reconnect"},
    {"--storm-max-s", FLAG_DOUBLE, OPT(storm_max_s), "storm: time allowed to catch up"},
    {"--time-limit", FLAG_DOUBLE, OPT(time_limit_s), "hard bound on the whole run, seconds"},
    {"--settle-ms", FLAG_U64, OPT(settle_ms), "idle: wait before measuring memory"},
    {"--workers", FLAG_U64, OPT(workers), "server workers (for per-worker figures)"},
    {"--busy-poll", FLAG_U64, OPT(busy_poll),
     "1: poll the sockets without sleeping, so that the server never pays for waking\n"
     "this process (a server limited by its CPU leaves it idle: see docs/BENCHMARKS.md)"},
    {"--commit-times", FLAG_STR, OPT(commit_times),
     "latency --target ceiling: the ceiling's --times file"},
};

static void lg_usage(FILE *f) {
  fprintf(f,
          "Usage: bench_loadgen SCENARIO [FLAGS]\n"
          "Scenarios: fanout latency idle read write storm subscribe; also sqlwrite (raw SQLite\n"
          "insert loop), pgwrite (raw PostgreSQL insert loop, --db URI) and wait (until\n"
          "/healthz answers). Traffic goes to 127.0.0.1 only.\n");
  for (size_t i = 0; i < LG_ARRAY_LEN(lg_flags); i++)
    fprintf(f, "  %-16s %s\n", lg_flags[i].name, lg_flags[i].help);
}

static void lg_defaults(lg_opts *o) {
  memset(o, 0, sizeof(*o));
  o->table = "Bench";
  o->read_uri = "/r0";
  o->sessions = 20;
  o->subs = 1;
  o->events = 100;
  o->window = 32;
  o->writers = 4;
  o->connections = 16;
  o->rate = 100;
  o->duration_s = 5;
  o->max_requests = 10000000;
  o->drop_percent = 10;
  o->behind = 1000;
  o->gap_keys = 500;
  o->warm_events = 50;
  o->storm_min_s = 1;
  o->storm_max_s = 30;
  o->time_limit_s = 120;
  o->settle_ms = 1000;
  o->workers = 1;
}

static int lg_parse(int argc, char **argv, lg_opts *o) {
  for (int i = 2; i < argc; i++) {
    const char *arg = argv[i];
    const char *eq = strchr(arg, '=');
    size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
    const lg_flag *f = NULL;
    for (size_t k = 0; k < LG_ARRAY_LEN(lg_flags); k++)
      if (strlen(lg_flags[k].name) == nlen && strncmp(lg_flags[k].name, arg, nlen) == 0)
        f = &lg_flags[k];
    if (f == NULL) {
      fprintf(stderr, "bench_loadgen: unknown flag %s\n", arg);
      return -1;
    }
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
    if (v == NULL) {
      fprintf(stderr, "bench_loadgen: %s needs a value\n", f->name);
      return -1;
    }
    char *end = NULL;
    char *p = (char *)o + f->offset;
    errno = 0;
    switch (f->kind) {
    case FLAG_INT: *(int *)p = (int)strtol(v, &end, 10); break;
    case FLAG_U64: {
      unsigned long long x = strtoull(v, &end, 10);
      if (f->offset == OPT(sessions) || f->offset == OPT(subs) || f->offset == OPT(filtered) ||
          f->offset == OPT(mixed) || f->offset == OPT(beside) || f->offset == OPT(both) ||
          f->offset == OPT(writers) || f->offset == OPT(connections) ||
          f->offset == OPT(drop_percent) || f->offset == OPT(settle_ms) ||
          f->offset == OPT(workers) || f->offset == OPT(busy_poll))
        *(uint32_t *)p = (uint32_t)(x > UINT32_MAX ? UINT32_MAX : x);
      else
        *(uint64_t *)p = x;
      break;
    }
    case FLAG_DOUBLE: *(double *)p = strtod(v, &end); break;
    case FLAG_STR: *(const char **)p = v; break;
    case FLAG_TARGET:
      if (strcmp(v, "server") != 0 && strcmp(v, "ceiling") != 0 && strcmp(v, "listen") != 0)
        errno = EINVAL;
      o->ceiling = strcmp(v, "ceiling") == 0;
      o->listen = strcmp(v, "listen") == 0;
      break;
    case FLAG_WRITER:
      if (strcmp(v, "rest") != 0 && strcmp(v, "tool") != 0 && strcmp(v, "sqlite") != 0 &&
          strcmp(v, "postgres") != 0)
        errno = EINVAL;
      o->tool_writer = strcmp(v, "tool") == 0;
      o->pg_writer = strcmp(v, "postgres") == 0;
      o->sql_writer = strcmp(v, "sqlite") == 0 || o->pg_writer;
      break;
    }
    if (errno != 0 || (end != NULL && *end != '\0')) {
      fprintf(stderr, "bench_loadgen: bad value for %s: %s\n", f->name, v);
      return -1;
    }
  }
  const char *why = NULL;
  if (o->port <= 0 || o->port > 65535)
    why = "--port is required (1-65535)";
  else if (o->sessions > LG_MAX_SESSIONS)
    why = "--sessions is at most 200000";
  else if (o->subs < 1 || o->subs > 2)
    why = "--subs is 1 or 2";
  else if (o->filtered > 1 || (o->filtered && (o->listen || o->ceiling)))
    why = "--filtered is 0 or 1, with --target server";
  else if (o->mixed > 0 && (o->mixed > o->sessions || o->subs != 1 || o->listen || o->ceiling))
    why = "--mixed is at most --sessions, with --subs 1 and --target server";
  else if (o->beside > 0 && (o->beside > o->sessions || o->subs != 1 || o->mixed || o->filtered ||
                             o->listen || o->ceiling))
    why = "--beside is at most --sessions, with --subs 1, neither --mixed nor --filtered, and "
          "--target server";
  else if (o->both > 1 || (o->both && (strcmp(argv[1], "fanout") != 0 || o->subs != 1 || o->mixed ||
                                       o->beside || o->filtered || o->ceiling)))
    why = "--both is 0 or 1, for fanout, with --subs 1, none of --mixed, --beside and "
          "--filtered, and --target server or listen";
  else if (o->events == 0 || o->events > LG_MAX_EVENTS)
    why = "--events is 1 to 2000000";
  else if (o->window == 0)
    why = "--window is at least 1";
  else if (o->writers == 0 || o->writers > LG_MAX_WRITERS)
    why = "--writers is 1 to 64";
  else if (o->connections == 0 || o->connections > LG_MAX_CONNS)
    why = "--connections is 1 to 1024";
  else if (!(o->rate > 0) || o->rate > 100000)
    why = "--rate is in (0, 100000]";
  else if (o->sql_writer && o->db_path == NULL)
    why = "--writer sqlite or postgres needs --db";
  else if (!json_safe(o->read_uri, 256))
    why = "--read-uri is at most 256 characters, without quotes, backslashes or control ones";
  else if (!(o->duration_s > 0) || !(o->time_limit_s > 0) || o->time_limit_s > 3600)
    why = "bad --duration or --time-limit";
  else if (o->drop_percent == 0 || o->drop_percent >= 100)
    why = "--drop-percent is 1 to 99";
  else if (o->gap_keys == 0 || o->gap_keys > 100000 || o->behind == 0 ||
           o->behind > LG_MAX_EVENTS || o->behind / o->gap_keys >= UINT8_MAX)
    why = "bad --behind or --gap-keys (at most 254 commits per key)";
  else if (o->warm_events == 0 || o->warm_events > LG_MAX_EVENTS)
    why = "bad --warm-events";
  else if (!(o->storm_max_s > 0) || o->storm_max_s > 600)
    why = "bad --storm-max-s";
  else if (strspn(o->table, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
           strlen(o->table))
    why = "--table must be a plain identifier";
  if (why != NULL) {
    fprintf(stderr, "bench_loadgen: %s\n", why);
    return -1;
  }
  if (o->both) o->subs = 2; /* each session's second subscription (lg_seen_set) */
  return 0;
}

/* ---- sqlwrite and wait: no event loop ------------------------------------------------- */

static int lg_run_sqlwrite(const lg_opts *o) {
  if (o->db_path == NULL) {
    fprintf(stderr, "bench_loadgen sqlwrite: --db is required\n");
    return 2;
  }
  lg_sqlwriter_opts so = {o->db_path, o->table, 's', o->max_requests, 0, o->duration_s, NULL};
  uint64_t written = 0;
  double cpu0 = lg_proc_self_cpu();
  uint64_t t0 = lg_now_ns();
  int rc = lg_sqlwriter_run(&so, &written);
  double wall = lg_secs(lg_now_ns() - t0);
  double cpu = lg_proc_self_cpu() - cpu0;
  printf("{\"scenario\":\"sqlwrite\",\"label\":");
  json_string(stdout, o->label ? o->label : "");
  printf(",\"ok\":%s,\"inserts\":%llu,\"wall_s\":%.4f,\"per_wall_s\":%.1f,\"cpu_s\":%.3f}\n",
         rc == 0 ? "true" : "false", (unsigned long long)written, wall,
         wall > 0 ? (double)written / wall : 0, cpu);
  return rc == 0 ? 0 : 1;
}

/*
 * pgwrite: the raw PostgreSQL insert loop, on --connections writer processes
 * (one libpq connection each, distinct keys), for --duration. Wall time
 * runs from the first writer's first insert to the last one's end; CPU is
 * the writers' own and, with --store-pid, the database server's: its
 * process tree's growth plus each writer's backend, read before it closes
 * (a backend that has exited is no longer in the tree).
 */
typedef struct pgw_slot {
  uint64_t written, t0, t1;
  double backend_cpu_s; /* its connection's server process, which is gone by the end */
  int ok;
} pgw_slot;

static int lg_run_pgwrite(const lg_opts *o) {
  if (o->db_path == NULL) {
    fprintf(stderr, "bench_loadgen pgwrite: --db URI is required\n");
    return 2;
  }
  uint32_t n = o->connections;
  size_t len = sizeof(pgw_slot) * n;
  pgw_slot *slots = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (slots == MAP_FAILED) {
    fprintf(stderr, "bench_loadgen pgwrite: mmap: %s\n", strerror(errno));
    return 1;
  }
  memset(slots, 0, len);
  lg_proc_sample s0 = {0}, s1 = {0};
  bool have_store = o->store_pid > 0 && lg_proc_sample_tree(o->store_pid, &s0) == 0;
  struct rusage ru0, ru1;
  getrusage(RUSAGE_CHILDREN, &ru0);
  fflush(NULL);
  uint32_t started = 0;
  for (; started < n; started++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "bench_loadgen pgwrite: fork: %s\n", strerror(errno));
      break;
    }
    if (pid == 0) {
      pgw_slot *me = &slots[started];
      lg_sqlwriter_opts so = {.db_path = o->db_path,
                              .table = o->table,
                              .key_prefix = 's',
                              .count = o->max_requests,
                              .duration_s = o->duration_s,
                              .key_offset = started,
                              .key_stride = n,
                              .backend_cpu_s = &me->backend_cpu_s};
      me->t0 = lg_now_ns();
      int rc = lg_pgwriter_run(&so, &me->written);
      me->t1 = lg_now_ns();
      me->ok = rc == 0;
      _exit(rc == 0 ? 0 : 1);
    }
  }
  bool ok = started == n;
  for (uint32_t i = 0; i < started; i++) {
    int st;
    if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = false;
  }
  getrusage(RUSAGE_CHILDREN, &ru1);
  if (have_store) have_store = lg_proc_sample_tree(o->store_pid, &s1) == 0;
  uint64_t written = 0, t0 = UINT64_MAX, t1 = 0;
  double backends = 0;
  for (uint32_t i = 0; i < started; i++) {
    written += slots[i].written;
    backends += slots[i].backend_cpu_s;
    if (slots[i].t0 && slots[i].t0 < t0) t0 = slots[i].t0;
    if (slots[i].t1 > t1) t1 = slots[i].t1;
    if (!slots[i].ok) ok = false;
  }
  munmap(slots, len);
  double wall = t1 > t0 ? lg_secs(t1 - t0) : 0;
  double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
               (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6 +
               (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
               (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
  printf("{\"scenario\":\"pgwrite\",\"label\":");
  json_string(stdout, o->label ? o->label : "");
  printf(",\"ok\":%s,\"connections\":%u,\"inserts\":%llu,\"wall_s\":%.4f,\"per_wall_s\":%.1f,"
         "\"cpu_s\":%.3f",
         ok ? "true" : "false", n, (unsigned long long)written, wall,
         wall > 0 ? (double)written / wall : 0, cpu);
  if (have_store) { /* the cluster's processes that lasted, and the writers' own backends */
    double store = s1.cpu_s - s0.cpu_s + backends;
    printf(",\"store_cpu_s\":%.3f,\"per_store_cpu_s\":%.1f", store,
           store > 0 ? (double)written / store : 0);
  }
  if (!ok) printf(",\"error\":\"a PostgreSQL writer failed (see stderr)\"");
  printf("}\n");
  return ok ? 0 : 1;
}

/* true when GET /healthz on 127.0.0.1:port answers 200. */
static bool lg_healthy(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  struct sockaddr_in a;
  uv_ip4_addr(LG_HOST, port, &a);
  bool ok = false;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
    char req[128], buf[64];
    int n =
        snprintf(req, sizeof(req),
                 "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", port);
    if (write(fd, req, (size_t)n) == n) {
      ssize_t r = read(fd, buf, sizeof(buf) - 1);
      if (r > 12) {
        buf[r] = '\0';
        ok = strncmp(buf, "HTTP/1.1 200", 12) == 0;
      }
    }
  }
  close(fd);
  return ok;
}

static int lg_run_wait(const lg_opts *o) {
  uint64_t deadline = lg_now_ns() + (uint64_t)(o->time_limit_s * 1e9);
  while (lg_now_ns() < deadline) {
    if (lg_healthy(o->port)) return 0;
    usleep(50000);
  }
  fprintf(stderr, "bench_loadgen wait: nothing healthy on 127.0.0.1:%d after %.0f s\n", o->port,
          o->time_limit_s);
  return 1;
}

/* ---- main ----------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    lg_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  lg_opts o;
  lg_defaults(&o);
  bool no_port = strcmp(argv[1], "sqlwrite") == 0 || strcmp(argv[1], "pgwrite") == 0;
  if (no_port) {
    o.port = 1;
    o.connections = 1;
  }
  if (lg_parse(argc, argv, &o) != 0) return 2;
  if (strcmp(argv[1], "sqlwrite") == 0) return lg_run_sqlwrite(&o);
  if (strcmp(argv[1], "pgwrite") == 0) return lg_run_pgwrite(&o);
  if (strcmp(argv[1], "wait") == 0) return lg_run_wait(&o);
  const lg_scenario *sc = lg_scenario_find(argv[1]);
  if (sc == NULL) {
    fprintf(stderr, "bench_loadgen: unknown scenario %s\n", argv[1]);
    lg_usage(stderr);
    return 2;
  }
  if (o.listen && strcmp(sc->name, "fanout") != 0 && strcmp(sc->name, "latency") != 0 &&
      strcmp(sc->name, "idle") != 0) {
    fprintf(stderr, "bench_loadgen: --target listen runs fanout, latency and idle only\n");
    return 2;
  }

  uint64_t nofile = 0;
  lg_raise_nofile((uint64_t)o.sessions * 2 + 4096, &nofile);
  if ((uint64_t)o.sessions + 512 > nofile) {
    fprintf(stderr, "bench_loadgen: %u sessions need more file descriptors than the limit (%llu)\n",
            o.sessions, (unsigned long long)nofile);
    return 2;
  }

  lg_t *lg = lg_calloc(1, sizeof(*lg));
  lg->o = o;
  lg->sc = sc;
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) abort();
  lg->loop = &loop;
  lg->cl = lg_client_create(&loop, o.port);
  snprintf(lg->base, sizeof(lg->base), "http://127.0.0.1:%d", o.port);
  snprintf(lg->coll_uri, sizeof(lg->coll_uri), "%s/%s", lg->base, o.table);
  snprintf(lg->rec_uri, sizeof(lg->rec_uri), "%s/f0", lg->coll_uri);
  if (sc->sessions == LG_PER_WORKER)
    lg->n_sessions = o.ceiling || o.workers < 1 ? 1 : o.workers;
  else
    lg->n_sessions = sc->sessions > 1 ? o.sessions : sc->sessions;
  lg->sessions = lg_calloc(lg->n_sessions ? lg->n_sessions : 1, sizeof(lg_session));
  for (uint32_t i = 0; i < lg->n_sessions; i++) {
    lg->sessions[i].lg = lg;
    lg->sessions[i].index = i;
  }
  int rc = 2;
  if (lg_commit_times_map(lg, lg_scenario_commits(lg)) != 0) {
    fprintf(stderr, "bench_loadgen: cannot map the commit times\n");
    lg_client_destroy(lg->cl);
    goto out;
  }
  lg_hist_init(&lg->hist);
  lg_hist_init(&lg->hist2);
  lg->deadline_ns = lg_now_ns() + (uint64_t)(o.time_limit_s * 1e9);
  uv_timer_init(&loop, &lg->tick);
  lg->tick.data = lg;
  lg->tick_open = true;
  uv_timer_start(&lg->tick, lg_on_tick, LG_TICK_MS, LG_TICK_MS);
  if (sc->prepare != NULL) sc->prepare(lg);
  lg->t_setup_begin_ns = lg_now_ns();
  lg_setup_begin(lg);

  if (o.busy_poll) {
    while (uv_run(&loop, UV_RUN_NOWAIT) != 0) {
    }
  } else {
    uv_run(&loop, UV_RUN_DEFAULT);
  }

  if (lg->child > 0) {
    /* After a success it has written everything and is closing; after a failure, stop it. */
    if (lg->failed) kill(lg->child, SIGTERM);
    (void)lg_reap_child(lg, true);
  }
  lg_report(lg);
  rc = lg->failed ? 1 : 0;

  lg_client_destroy(lg->cl);
  munmap(lg->t_commit, lg->t_commit_len);
  lg_hist_finish(&lg->hist);
  lg_hist_finish(&lg->hist2);
out:
  if (uv_loop_close(&loop) != 0) fprintf(stderr, "bench_loadgen: loop closed with open handles\n");
  free(lg->delivered);
  free(lg->gap_delivered);
  free(lg->gap_count);
  free(lg->seen);
  free(lg->sessions);
  free(lg);
  return rc;
}
