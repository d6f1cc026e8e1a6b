/*
 * The load generator's run: its state and the parts the scenarios are made
 * of (see lg.h for the modules underneath). lg_run.c opens sessions, reads
 * their streams, drives the writers and measures; lg_scenarios.c holds the
 * scenarios, each a row of one const table of operations; loadgen.c parses
 * flags, runs the loop and prints the report. Internal to bench_loadgen.
 */
#ifndef MCPSUB_BENCH_LG_RUN_H
#define MCPSUB_BENCH_LG_RUN_H

#include <stdio.h>

#include "lg.h"

#define LG_PROTOCOL         "2025-06-18"
#define LG_PROTOCOL_MODERN  "2026-07-28"
#define LG_SETUP_SLOTS      32
#define LG_MAX_SESSIONS     200000u
#define LG_MAX_EVENTS       2000000u
#define LG_MAX_BITMAP_BYTES ((uint64_t)512 * 1024 * 1024)
#define LG_MAX_WRITERS      64u
#define LG_MAX_CONNS        1024u
#define LG_TICK_MS          1
#define LG_REQ_MAX          2048
/* read --target ceiling: the Mcp-Session-Id sent, as long as mcpsubd's (34 hex digits), so that
 * the read ceiling parses the same request bytes as mcpsubd does. */
#define LG_CEILING_SESSION_ID "0123456789abcdef0123456789abcdef01"

/* ---- options --------------------------------------------------------------- */

typedef struct lg_opts {
  int port;
  pid_t server_pid;
  pid_t store_pid; /* --store-pid: a database server's process tree (PostgreSQL), measured apart */
  bool ceiling;    /* --target ceiling: bare SSE streams, no MCP (read: bench_read_ceiling) */
  bool listen;     /* --target listen: MCP 2026-07-28 subscriptions/listen streams, no sessions */
  const char *label;
  const char *table;
  const char *read_uri; /* read: what follows the collection URI in each read (default "/r0") */
  const char *bearer;   /* --bearer TOKEN: sent as Authorization on every request */
  uint32_t sessions;
  uint32_t subs;      /* 1: the collection; 2: and the record <letter>0 */
  uint32_t filtered;  /* 1: session i subscribes to <collection>?v=ne=y<i> (matching every row) */
  uint32_t busy_poll; /* 1: poll without sleeping (the read runs: the server never wakes it) */
  /* Sessions 0..mixed-1 hold <collection>?v=ne=y<i> and <collection>/m<i> (never written). */
  uint32_t mixed;
  /* Sessions 0..beside-1 hold the collection and <collection>/m<i> (never written). */
  uint32_t beside;
  /* 1: every session holds the collection and <collection>?v=ne=y<i> (two updates a commit). */
  uint32_t both;
  uint64_t held; /* subscribe: subscriptions the session holds before measuring */
  uint64_t events;
  uint64_t window;
  uint32_t writers;
  uint32_t connections;
  double rate;
  bool sql_writer;  /* an external writer in a forked child: SQLite, or PostgreSQL with pg_writer */
  bool pg_writer;   /* --writer postgres: db_path is a libpq URI */
  bool tool_writer; /* --writer tool: each writer connection a session calling put_record */
  const char *db_path;
  double duration_s;
  uint64_t max_requests;
  uint32_t drop_percent;
  uint64_t behind;
  uint64_t gap_keys;
  uint64_t warm_events;
  double storm_min_s;
  double storm_max_s;
  double time_limit_s;
  uint32_t settle_ms;
  uint32_t workers;
  const char *commit_times; /* latency against the ceiling: its release times */
} lg_opts;

/* The Authorization line of every request ("" without --bearer); LG_AUTH_FMT's three arguments. */
#define LG_AUTH_FMT "%s%s%s"
#define LG_AUTH_ARGS(o)                                                                            \
  (o)->bearer ? "Authorization: Bearer " : "", (o)->bearer ? (o)->bearer : "",                     \
      (o)->bearer ? "\r\n" : ""

/* ---- state ----------------------------------------------------------------- */

enum session_state { SESS_NEW, SESS_SETUP, SESS_READY, SESS_DROPPED, SESS_RESUMING };

typedef struct lg lg_t;

typedef struct lg_session {
  lg_t *lg;
  uint32_t index;
  uint8_t state;
  bool caught;      /* storm: resumed and past the priming event */
  bool reread;      /* storm: got a "re-read" update for its subscription */
  char id[80];      /* Mcp-Session-Id */
  char last_id[80]; /* last SSE event id seen */
  lg_conn *stream;
  struct lg_slot *setup_slot;
  uint64_t segs_base;
  uint64_t gap_next; /* storm, others: gap events received */
  uint64_t caught_ns;
} lg_session;

typedef struct lg_update {
  char letter;
  uint64_t n;
  unsigned sub;   /* 0: the collection, 1: the record */
  bool recovered; /* on a resumed stream, before its priming event (from the audit log) */
  bool reread;    /* uri == subscribedUri */
} lg_update;

typedef struct lg_slot {
  lg_t *lg;
  lg_conn *conn;
  lg_session *s;
  unsigned step;
} lg_slot;

enum writer_mode { WR_OFF, WR_FLOW, WR_RATE, WR_LOOP };

typedef struct lg_writer {
  enum writer_mode mode;
  char letter;
  uint64_t next, total, acked;
  uint64_t key_mod; /* keys "<letter><n % key_mod>"; 0: "<letter><n>" */
  uint64_t window, low;
  uint32_t *delivered; /* FLOW: receivers per commit */
  uint32_t receivers;
  double rate;
  uint64_t rate_start_ns, rate_base;
  uint64_t stop_ns;
  uint64_t late; /* RATE: commits sent > 1 ms after their slot */
  uint64_t t_first_ns, t_last_ack_ns;
} lg_writer;

typedef struct lg_scenario lg_scenario;
/*
 * lg_scenario.sessions for one session per server worker (--workers; one
 * against a ceiling): each lands on its own worker, as an initialize goes
 * to the least loaded, so that reads keep every worker busy.
 */
#define LG_PER_WORKER UINT32_MAX

/* Where a --writer tool connection's session is (WS_READY for a REST writer from the start). */
enum wslot_state { WS_INITIALIZE, WS_INITIALIZED, WS_READY };

/* A writer connection and the commit it carries. */
typedef struct lg_wslot {
  lg_t *lg;
  lg_conn *conn;
  uint64_t n;
  bool busy;
  enum wslot_state state;
  char sid[64]; /* --writer tool: its session */
} lg_wslot;

/* A read connection (resources/read, closed loop). */
typedef struct lg_rslot {
  lg_t *lg;
  lg_conn *conn;
  bool busy;
} lg_rslot;

struct lg {
  lg_opts o;
  const lg_scenario *sc;
  uv_loop_t *loop;
  lg_client *cl;
  uv_timer_t tick;
  bool tick_open;
  char base[64]; /* http://127.0.0.1:PORT */
  char coll_uri[128];
  char rec_uri[160];

  lg_session *sessions;
  uint32_t n_sessions, ready, next_setup, setup_done;
  lg_slot slots[LG_SETUP_SLOTS];
  uint32_t n_slots;

  uint64_t *seen;       /* bitmap: session x (event * subs + sub) */
  uint64_t seen_words;  /* per session */
  uint64_t seen_events; /* events the bitmap covers */
  uint64_t received;    /* unique (session, event, sub) receipts */
  uint64_t expected;    /* receipts that complete the scenario (0: not yet known) */

  uint64_t *t_commit; /* shared mapping: commit start per event */
  size_t t_commit_len;
  lg_writer w;
  lg_wslot wslots[LG_MAX_WRITERS];
  uint32_t n_wconn;
  uint32_t n_wready;   /* writer connections in WS_READY */
  uint32_t *delivered; /* fan-out: receivers per commit (FLOW mode) */
  void (*on_ack)(lg_t *lg, uint64_t n);
  pid_t child; /* the forked SQLite or PostgreSQL writer, or 0 */

  lg_rslot rslots[LG_MAX_CONNS];
  uint32_t n_rconn;
  uint64_t requests;
  bool subscribing;      /* subscribe scenario: the readers subscribe instead of reading */
  uint64_t sub_next;     /* ...to <collection>/s<sub_next>, one new record URI each */
  uint64_t prefill_left; /* subscriptions still to make before measuring (--held) */

  lg_hist hist, hist2;
  uint64_t t_start_ns, t_end_ns, deadline_ns, t_setup_ns;
  lg_proc_sample cpu0, cpu1;
  double self_cpu0, self_cpu1;
  bool have_cpu;
  lg_proc_sample store0, store1; /* --store-pid's tree */
  bool have_store_cpu;

  uint64_t t_setup_begin_ns;
  uint64_t data_segments; /* stream segments received while measuring */

  /* scenario state */
  unsigned phase;
  uint64_t phase_ns;
  lg_proc_sample mem0, mem1; /* idle: before the sessions, after */
  lg_sockstat sock0, sock1;
  uint64_t slab0, slab1;
  uint64_t n_dropped, n_caught; /* storm */
  uint64_t recovered, rereads, f_total;
  uint8_t *gap_count; /* storm: per session and gap key, updates received */
  uint32_t *gap_delivered;

  bool finishing;
  bool failed;
  char error[512];
  uint64_t n_errors;
};

struct lg_scenario {
  const char *name;
  uint32_t sessions; /* 0: none, 1: exactly one, LG_PER_WORKER: one per --workers, else --sessions */
  bool streams;              /* each session opens a GET stream */
  void (*prepare)(lg_t *lg); /* before any session exists */
  void (*start)(lg_t *lg);   /* once every session is ready */
  void (*on_update)(lg_t *lg, lg_session *s, const lg_update *u);
  void (*on_prime)(lg_t *lg, lg_session *s);
  void (*on_tick)(lg_t *lg);
  void (*report)(lg_t *lg, FILE *j);
};

/* ---- lg_run.c ------------------------------------------------------------------ */

/* Records the first failure (the report's error), then stops the run. */
void lg_fail(lg_t *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A progress line on stderr. */
void lg_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double lg_secs(uint64_t ns);

/* The measured interval: wall clock, the server tree's CPU, our own CPU. */
void lg_measure_start(lg_t *lg);
void lg_measure_end(lg_t *lg);
double lg_server_cpu(const lg_t *lg);
/* Ends a measured scenario successfully: measure, count segments, finish. */
void lg_complete(lg_t *lg);
/* Stops everything; the loop ends once every handle is closed. Idempotent. */
void lg_finish(lg_t *lg);
void lg_on_tick(uv_timer_t *t);

/* Commit times, one per commit: shared with a forked writer, or the ceiling's file. */
int lg_commit_times_map(lg_t *lg, uint64_t n) LG_NODISCARD;
/* Commit -> now into h; false (after failing the run) when n has no commit time. */
bool lg_record_latency(lg_t *lg, lg_hist *h, uint64_t n);

/* The receipt bitmap: false when (s, n, sub) was already set. */
int lg_seen_alloc(lg_t *lg, uint64_t events) LG_NODISCARD;
bool lg_seen_set(lg_t *lg, const lg_session *s, uint64_t n, unsigned sub);

/* Sessions: set them all up (then sc->start runs), or (re)open one stream. */
extern const lg_conn_ops lg_stream_ops;
void lg_setup_begin(lg_t *lg);
int lg_get_stream(lg_t *lg, lg_conn *c, const lg_session *s,
                  const char *last_event_id) LG_NODISCARD;
void lg_segs_base(lg_t *lg);
uint64_t lg_segs_total(const lg_t *lg);

/* The REST writer: PUT /<table>/<letter><n>, n commits in the chosen mode. */
void lg_writer_start(lg_t *lg, enum writer_mode mode, char letter, uint64_t total);
void lg_writer_open(lg_t *lg, uint32_t connections);
void lg_writer_pump(lg_t *lg);
bool lg_writer_idle(const lg_t *lg);
/* FLOW mode: commit n reached one more subscriber. */
void lg_writer_delivered(lg_t *lg, uint64_t n);

/* The raw SQLite writer (or PostgreSQL writer, with --writer postgres), in a forked child,
 * on --db at rate. */
void lg_fork_sql_writer(lg_t *lg, uint64_t count, double rate);
/* Reaps it when it ended (or waits); true once it has. */
bool lg_reap_child(lg_t *lg, bool wait);

/* resources/read of <table>/r0 over n keep-alive connections until w.stop_ns. */
void lg_readers_start(lg_t *lg, uint32_t n);
bool lg_readers_idle(const lg_t *lg);

/* Report fields shared by scenarios. */
void lg_report_rates(lg_t *lg, FILE *j, uint64_t count, const char *what);
void lg_report_hist(FILE *j, const char *prefix, const lg_hist *h);

/* ---- lg_scenarios.c -------------------------------------------------------------- */

const lg_scenario *lg_scenario_find(const char *name);
/* Commit times the scenario needs room for. */
uint64_t lg_scenario_commits(const lg_t *lg);

#endif
