/*
 * The master (see master.h). One libuv loop runs everything here:
 *
 *   accept -> read the first header block (bounded: max header, 10 s)
 *          -> GET /status, /metrics: ask every worker for a fresh report,
 *             answer, keep the connection for its next request
 *          -> anything else: CONN {fd, bytes} to a worker, close our copy
 *   REROUTE from a worker -> the same path, with the bytes it sent back
 *   COMMITTED from a worker -> to every other worker, at once
 *   a worker exits -> restart its slot (generation + 1, backoff)
 *   SIGTERM/SIGINT -> drain; a second one forces
 *
 * Workers are processes started with uv_spawn (fork + exec of this very
 * binary), so nothing live crosses a fork: every fd the master holds is
 * close-on-exec except the worker's end of its socketpair, which becomes
 * the child's fd 3. The master never blocks: IPC sends are queued (bounded)
 * and every wait (for a worker, for reports) has a timer.
 */
#include "master/master.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/session_id.h"
#include "common/stats.h"
#include "common/store.h"
#include "common/strmap.h"
#include "master/control.h"
#include "master/peek.h"
#include "worker/forward.h"
#include "worker/http.h"
#include "worker/worker.h"
#include "worker/worker_ctl.h"
#include "worker/worker_ipc.h"

/* How long /status and /metrics wait for fresh reports. */
#define MASTER_STATS_WAIT_MS 200
/* How long a control request waits for the workers' answers. */
#define MASTER_CTL_WAIT_MS 1000
/* How long a connection waits for a worker to be ready (start-up, all restarting). */
#define MASTER_WORKER_WAIT_MS 10000
/*
 * How long a request for a session waits for its own slot's worker while
 * that worker is starting (start-up, a restart) before another worker
 * takes it (restoring the session from its row).
 */
#define MASTER_SLOT_WAIT_MS 2000
#define MASTER_KEEPALIVE_MS (5 * 60 * 1000)
#define MASTER_LINGER_MS    2000
/* Restart backoff: the first restart is immediate, then 100 ms doubling to 10 s. */
#define MASTER_BACKOFF_FIRST_MS 100
#define MASTER_BACKOFF_MAX_MS   10000
/* A worker up this long has proven itself: its next death restarts at once. */
#define MASTER_STABLE_MS 30000
/* Re-serialised headers of a re-routed request may be a little longer than the client's. */
#define MASTER_REROUTE_SLACK 1024

typedef struct master master_t;
typedef struct master_slot master_slot;
typedef struct master_worker master_worker;
typedef struct master_conn master_conn;
typedef struct master_gather master_gather;

/* One worker process: one generation of a slot. Freed when its handles are closed. */
struct master_worker {
  master_slot *slot;
  uint32_t generation;
  uv_process_t proc;
  ipc_channel_t ch;
  bool ch_open;
  int handles; /* process handle and channel not yet closed */
  int pid;
};

struct master_slot {
  master_t *m;
  unsigned index;
  uint32_t generation; /* of the current (or next) worker */
  master_worker *w;    /* the running worker, or NULL */
  bool ready;          /* it has reported: connections may go to it */
  ipc_stats last;      /* its latest report */
  uint64_t assigned;   /* CONN messages sent to it */
  int64_t started_ms;  /* Unix ms */
  uint64_t started_at; /* loop ms */
  uint64_t restarts;
  uint64_t backoff_ms;
  uv_timer_t restart_timer;
};

enum master_conn_state {
  MC_HEAD,        /* reading a request's header block */
  MC_WAIT_WORKER, /* complete head, no worker ready yet */
  MC_WAIT_STATS,  /* GET /status or /metrics waiting for reports */
  MC_WRITE,       /* our answer is being written */
  MC_LINGER,      /* answered and shut down; the peer's last bytes are dropped */
};

struct master_conn {
  master_t *m;
  master_conn *prev, *next;
  uv_tcp_t tcp;
  uv_timer_t timer;
  int handles;
  enum master_conn_state state;
  buf_t in;
  peek_request pk;
  bool rerouted;   /* the first request came back from a worker */
  bool any_worker; /* its session's slot did not come up in time: any worker will do */
  bool close_after_write;
  bool closing;
  bool reading;
  uint64_t answered;     /* requests the master answered on this connection */
  master_gather *gather; /* the reports this connection waits for */
  uv_write_t write_req;
  uv_shutdown_t shutdown_req;
  char *wbuf;
};

enum master_gather_kind { GATHER_STATS, GATHER_CTL };

/* A question to every ready worker, answered when all replied or at the deadline. */
struct master_gather {
  master_t *m;
  master_gather *prev, *next;
  uint64_t id;
  enum master_gather_kind kind;
  size_t pending;
  uint8_t *want;   /* per slot: still waiting for it */
  cJSON **replies; /* per slot: its CTL_REP (GATHER_CTL) */
  uv_timer_t timer;
  bool finished;
  void (*done)(master_gather *g);
  master_conn *conn;       /* for /status, /metrics (NULL once it closed) */
  control_request_t *creq; /* for a control request */
  cJSON *req;              /* the control request */
  int path;                /* for an HTTP answer: 's' /status, 'm' /metrics */
};

struct master {
  uv_loop_t *loop;
  const config_t *cfg;
  int argc;
  char **argv;
  unsigned n; /* worker slots; 0 in one process */
  master_slot *slots;
  worker_t *local; /* --workers 0: the one worker */
  uv_tcp_t listener;
  bool listening;
  master_conn *conns;
  size_t n_conns;
  master_gather *gathers;
  uint64_t next_id;
  uint64_t requests; /* requests the master answered itself */
  control_server_t *ctl;
  uv_signal_t sigterm, sigint, sighup;
  uv_timer_t drain_timer; /* the deadline of a drain */
  bool draining;
  bool unready; /* --drain-grace-ms: /readyz answers 503, all else as usual, then the drain */
  bool forced;
  bool stopped;    /* master_stop ran */
  bool write_home; /* SQLite, several workers: REST writes gather on one (master_pick) */
  int exit_code;
  int64_t started_ms;
  char listen_addr[128];
};

static void master_conn_process(master_conn *c);
static void master_conn_close(master_conn *c);
static void master_route(master_conn *c);
static void master_check_drained(master_t *m);
static void master_spawn(master_slot *s);

/* ---- small helpers ------------------------------------------------------------ */

static const char *master_fmt_u(char *buf, size_t n, unsigned long long v) {
  snprintf(buf, n, "%llu", v);
  return buf;
}

static size_t master_alive(const master_t *m) {
  size_t k = 0;
  for (unsigned i = 0; i < m->n; i++) k += m->slots[i].ready;
  return k;
}

/* ---- gathers ------------------------------------------------------------------ */

static void master_gather_on_closed(uv_handle_t *h) {
  master_gather *g = h->data;
  if (g->replies != NULL) {
    for (unsigned i = 0; i < g->m->n; i++) cJSON_Delete(g->replies[i]);
  }
  free(g->replies);
  free(g->want);
  cJSON_Delete(g->req);
  free(g);
}

static void master_gather_finish(master_gather *g) {
  if (g->finished) return;
  g->finished = true;
  master_t *m = g->m;
  if (g->prev)
    g->prev->next = g->next;
  else
    m->gathers = g->next;
  if (g->next) g->next->prev = g->prev;
  uv_timer_stop(&g->timer);
  g->done(g);
  uv_close((uv_handle_t *)&g->timer, master_gather_on_closed);
}

static void master_gather_on_timer(uv_timer_t *t) {
  master_gather_finish(t->data);
}

/* One awaited answer arrived (or will not: its worker died). */
static void master_gather_got(master_gather *g, unsigned slot) {
  if (g->finished || slot >= g->m->n || !g->want[slot]) return;
  g->want[slot] = 0;
  if (--g->pending == 0) uv_timer_start(&g->timer, master_gather_on_timer, 0, 0);
}

/*
 * Asks every ready worker: a fresh STATS report (GATHER_STATS) or req as a
 * CTL_REQ (GATHER_CTL; req is consumed). For GATHER_CTL, durable_slot gets
 * "durable": true in its copy (-1: none). done(g) runs from the loop once
 * every worker answered or after wait_ms.
 */
static master_gather *master_gather_start(master_t *m, enum master_gather_kind kind, cJSON *req,
                                          int durable_slot, uint64_t wait_ms,
                                          void (*done)(master_gather *g)) {
  master_gather *g = mem_calloc(1, sizeof(*g));
  g->m = m;
  g->id = ++m->next_id;
  g->kind = kind;
  g->done = done;
  g->req = req;
  g->want = mem_calloc(m->n ? m->n : 1, 1);
  if (kind == GATHER_CTL) g->replies = mem_calloc(m->n ? m->n : 1, sizeof(cJSON *));
  uv_timer_init(m->loop, &g->timer);
  g->timer.data = g;
  g->next = m->gathers;
  if (m->gathers) m->gathers->prev = g;
  m->gathers = g;
  for (unsigned i = 0; i < m->n; i++) {
    master_slot *s = &m->slots[i];
    if (!s->ready || s->w == NULL || !s->w->ch_open) continue;
    int rc;
    if (kind == GATHER_STATS) {
      rc = ipc_channel_send(&s->w->ch, IPC_STATS_REQ, 0, &g->id, sizeof(g->id), -1);
    } else {
      cJSON *copy = cJSON_Duplicate(req, true);
      cJSON_DeleteItemFromObjectCaseSensitive(copy, "rid");
      cJSON_AddNumberToObject(copy, "rid", (double)g->id);
      if ((int)i == durable_slot) cJSON_AddTrueToObject(copy, "durable");
      char *text = cJSON_PrintUnformatted(copy);
      cJSON_Delete(copy);
      rc = text != NULL ? ipc_channel_send(&s->w->ch, IPC_CTL_REQ, 0, text, strlen(text), -1)
                        : -ENOMEM;
      cJSON_free(text);
    }
    if (rc == 0) {
      g->want[i] = 1;
      g->pending++;
    }
  }
  uv_timer_start(&g->timer, master_gather_on_timer, g->pending > 0 ? wait_ms : 0, 0);
  return g;
}

/* ---- reports: the numbers behind /status, /metrics and the control socket ----------- */

/* The latest report of every slot (one process: the local worker's, fresh). n entries. */
static size_t master_snapshot(master_t *m, worker_stats **stats, slot_stats **slots) {
  size_t n = m->local != NULL ? 1 : m->n;
  *stats = mem_calloc(n ? n : 1, sizeof(worker_stats));
  *slots = mem_calloc(n ? n : 1, sizeof(slot_stats));
  if (m->local != NULL) {
    worker_stats_collect(m->local, &(*stats)[0]);
    (*slots)[0].alive = 1;
    return 1;
  }
  for (unsigned i = 0; i < m->n; i++) {
    master_slot *s = &m->slots[i];
    worker_stats *st = &(*stats)[i];
    if (s->ready) {
      *st = s->last.stats;
    } else {
      memset(st, 0, sizeof(*st)); /* a dead worker holds nothing */
      st->slot = i;
      st->generation = s->generation;
    }
    (*slots)[i].restarts = s->restarts;
    (*slots)[i].alive = s->ready;
  }
  return n;
}

/* The sum of the live workers' reports; audit position the lowest, head the highest. */
static void master_totals(master_t *m, const worker_stats *st, const slot_stats *sl, size_t n,
                          worker_stats *t) {
  memset(t, 0, sizeof(*t));
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    if (!sl[i].alive) continue;
    const worker_stats *s = &st[i];
    t->sessions += s->sessions;
    t->streams += s->streams;
    t->listens += s->listens;
    t->subscriptions += s->subscriptions;
    t->waiters += s->waiters;
    t->connections += s->connections;
    t->queued_bytes += s->queued_bytes;
    t->requests += s->requests;
    t->notifications += s->notifications;
    t->frames_sent += s->frames_sent;
    t->frames_replayed += s->frames_replayed;
    t->frames_dropped += s->frames_dropped;
    if (first || s->audit_position < t->audit_position) t->audit_position = s->audit_position;
    if (s->audit_head > t->audit_head) t->audit_head = s->audit_head;
    first = false;
  }
  if (m->local == NULL) {
    t->connections += m->n_conns; /* connections the master itself holds */
    t->requests += m->requests;
  }
}

/* ---- connections: writing ------------------------------------------------------- */

static void master_conn_on_closed(uv_handle_t *h) {
  master_conn *c = h->data;
  if (--c->handles > 0) return;
  master_t *m = c->m;
  if (c->prev)
    c->prev->next = c->next;
  else
    m->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  m->n_conns--;
  buf_finish(&c->in);
  free(c->wbuf);
  free(c);
}

/* Closes our handles (and our copy of the fd). */
static void master_conn_close(master_conn *c) {
  if (c->closing) return;
  c->closing = true;
  if (c->gather != NULL) c->gather->conn = NULL;
  c->gather = NULL;
  uv_close((uv_handle_t *)&c->tcp, master_conn_on_closed);
  uv_close((uv_handle_t *)&c->timer, master_conn_on_closed);
}

static void master_conn_on_timer(uv_timer_t *t);

static void master_conn_timer(master_conn *c, uint64_t ms) {
  if (c->closing) return;
  if (ms == 0)
    uv_timer_stop(&c->timer);
  else
    uv_timer_start(&c->timer, master_conn_on_timer, ms, 0);
}

static void master_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  master_conn *c = h->data;
  static char discard[4096];
  if (c->state == MC_LINGER) {
    *b = uv_buf_init(discard, sizeof(discard));
    return;
  }
  /* Never more than the header bound: the rest stays in the kernel for the worker. */
  size_t limit = c->m->cfg->max_header + (c->rerouted ? MASTER_REROUTE_SLACK : 0);
  size_t room = c->in.len < limit ? limit - c->in.len : 0;
  if (room == 0) room = 1;
  buf_reserve(&c->in, room);
  *b = uv_buf_init(c->in.data + c->in.len, (unsigned)room);
}

static void master_conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

static void master_conn_read(master_conn *c, bool on) {
  if (c->closing || c->reading == on) return;
  if (on) {
    if (uv_read_start((uv_stream_t *)&c->tcp, master_conn_on_alloc, master_conn_on_read) < 0) {
      master_conn_close(c);
      return;
    }
  } else {
    uv_read_stop((uv_stream_t *)&c->tcp);
  }
  c->reading = on;
}

static void master_conn_on_shutdown(uv_shutdown_t *req, int status) {
  master_conn *c = req->data;
  if (c->closing) return;
  if (status < 0) {
    master_conn_close(c);
    return;
  }
  /* Lingering close: read and drop what the peer still sends, so it sees our answer, not a reset.
   */
  c->state = MC_LINGER;
  master_conn_timer(c, MASTER_LINGER_MS);
  master_conn_read(c, true);
}

static void master_conn_on_write(uv_write_t *req, int status) {
  master_conn *c = req->data;
  free(c->wbuf);
  c->wbuf = NULL;
  if (c->closing) return;
  if (status < 0) {
    master_conn_close(c);
    return;
  }
  if (c->close_after_write || c->m->draining) {
    c->shutdown_req.data = c;
    if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, master_conn_on_shutdown) < 0)
      master_conn_close(c);
    return;
  }
  /* Kept alive: the next request may already be buffered. */
  c->answered++;
  c->state = MC_HEAD;
  c->rerouted = false;
  c->any_worker = false;
  master_conn_timer(c, c->in.len > 0 ? c->m->cfg->header_timeout_ms : MASTER_KEEPALIVE_MS);
  master_conn_read(c, true);
  master_conn_process(c);
}

/*
 * Answers the request in hand with a complete response; the request's
 * bytes (a header block without a body) leave the input first.
 */
static void master_conn_respond(master_conn *c, int status, const char *ctype, const char *body,
                                size_t len, bool close, const char *extra) {
  if (c->closing) return;
  master_conn_read(c, false);
  c->close_after_write = close || !c->pk.keep_alive || c->m->draining;
  buf_t b;
  buf_init(&b);
  buf_printf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n", status,
             http_status_text(status), ctype, len, extra != NULL ? extra : "",
             c->close_after_write ? "Connection: close\r\n" : "");
  if (strcmp(c->pk.method, "HEAD") != 0) buf_append(&b, body, len);
  size_t n = b.len;
  c->wbuf = buf_steal(&b);
  c->state = MC_WRITE;
  master_conn_timer(c, 0);
  c->write_req.data = c;
  uv_buf_t ub = uv_buf_init(c->wbuf, (unsigned)n);
  if (uv_write(&c->write_req, (uv_stream_t *)&c->tcp, &ub, 1, master_conn_on_write) < 0) {
    free(c->wbuf);
    c->wbuf = NULL;
    master_conn_close(c);
  }
}

/* An error of the master's own (403, 408, 431, 503), as {"error": "..."} like the workers'. */
static void master_conn_fail(master_conn *c, int status, const char *message, bool close) {
  cJSON *body = cJSON_CreateObject();
  if (message != NULL) {
    cJSON_AddStringToObject(body, "error", message);
  } else {
    char reason[64];
    snprintf(reason, sizeof(reason), "%s", http_status_text(status));
    for (char *p = reason; *p; p++)
      if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    cJSON_AddStringToObject(body, "error", reason);
  }
  char *text = cJSON_PrintUnformatted(body);
  cJSON_Delete(body);
  master_conn_respond(c, status, "application/json", text, strlen(text), close,
                      status == 503 ? "Retry-After: 1\r\n" : NULL);
  cJSON_free(text);
}

/* ---- connections: /status and /metrics -------------------------------------------- */

static void master_answer_stats(master_gather *g) {
  master_conn *c = g->conn;
  if (c == NULL || c->closing) return;
  c->gather = NULL;
  master_t *m = c->m;
  m->requests++;
  worker_stats *st;
  slot_stats *sl;
  size_t n = master_snapshot(m, &st, &sl);
  if (g->path == 'm') {
    buf_t out;
    buf_init(&out);
    stats_render_prometheus(&out, st, sl, n);
    master_conn_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8",
                        out.data ? out.data : "", out.len, false, NULL);
    buf_finish(&out);
  } else {
    worker_stats t;
    master_totals(m, st, sl, n, &t);
    cJSON *body = cJSON_CreateObject();
    cJSON_AddNumberToObject(body, "sessions", (double)t.sessions);
    cJSON_AddNumberToObject(body, "streams", (double)t.streams);
    cJSON_AddNumberToObject(body, "listens", (double)t.listens);
    cJSON_AddNumberToObject(body, "connections", (double)t.connections);
    cJSON_AddNumberToObject(body, "subscriptions", (double)t.subscriptions);
    cJSON_AddNumberToObject(body, "waiters", (double)t.waiters);
    cJSON_AddNumberToObject(body, "requests", (double)t.requests);
    cJSON_AddNumberToObject(body, "notifications", (double)t.notifications);
    cJSON_AddNumberToObject(body, "framesSent", (double)t.frames_sent);
    cJSON_AddNumberToObject(body, "framesDropped", (double)t.frames_dropped);
    cJSON_AddNumberToObject(body, "auditPosition", (double)t.audit_position);
    cJSON_AddNumberToObject(body, "workers", (double)master_alive(m));
    char *text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    master_conn_respond(c, 200, "application/json", text, strlen(text), false, NULL);
    cJSON_free(text);
  }
  free(st);
  free(sl);
}

/* GET /status or /metrics: answered here when the request is one we can read whole. */
static bool master_conn_own_request(master_conn *c) {
  const peek_request *pk = &c->pk;
  if (c->m->unready && strcmp(pk->path, "/readyz") == 0) {
    /* The grace before a drain: balancers take the host out while it still serves. */
    buf_consume(&c->in, pk->head_len);
    master_conn_read(c, false);
    master_conn_fail(c, 503, "draining", true);
    return true;
  }
  bool status = strcmp(pk->path, "/status") == 0, metrics = strcmp(pk->path, "/metrics") == 0;
  if (!(status || metrics) || strcmp(pk->method, "GET") != 0 || pk->has_body ||
      pk->oversized_field || pk->http_minor < 0)
    return false;
  buf_consume(&c->in, pk->head_len);
  master_conn_read(c, false);
  master_conn_timer(c, 0);
  if (!worker_host_origin_allowed(c->m->cfg, pk->host[0] ? pk->host : NULL,
                                  pk->has_origin ? pk->origin : NULL)) {
    master_conn_fail(c, 403, "forbidden: Host or Origin not allowed", false);
    return true;
  }
  c->state = MC_WAIT_STATS;
  master_gather *g =
      master_gather_start(c->m, GATHER_STATS, NULL, -1, MASTER_STATS_WAIT_MS, master_answer_stats);
  g->conn = c;
  g->path = metrics ? 'm' : 's';
  c->gather = g;
  return true;
}

/* ---- connections: routing ----------------------------------------------------------- */

/*
 * SQLite takes one writer at a time. REST writes spread over the workers
 * make their writers take its lock in turn, and a worker that finds it
 * taken waits a few milliseconds: two workers commit less together than one
 * alone (docs/BENCHMARKS.md, Writes). So a connection whose first request
 * is a REST write goes to the write home, slot 0, while that worker holds
 * at most MASTER_WRITE_HOME_BIAS connections more than the least loaded;
 * past that (many writers at once, where one worker's CPU would be the
 * limit) it goes to the least loaded, as any other. PostgreSQL takes
 * writers side by side: there, none of this.
 */
#define MASTER_WRITE_HOME_BIAS 16

static bool master_rest_write(const peek_request *pk) {
  static const char *const methods[] = {"PUT", "PATCH", "POST", "DELETE"};
  if (pk->session_id[0] != '\0' || pk->path[0] != '/' || strcmp(pk->path, "/mcp") == 0)
    return false;
  for (size_t i = 0; i < ARRAY_LEN(methods); i++)
    if (strcmp(pk->method, methods[i]) == 0) return true;
  return false;
}

/* Connections a worker reported, plus those handed over since (in flight, not yet counted). */
static uint64_t master_load(const master_slot *s) {
  uint64_t in_flight = s->assigned > s->last.adopted ? s->assigned - s->last.adopted : 0;
  return s->last.stats.connections + in_flight;
}

/*
 * The worker for a request: its session's slot when that worker is ready,
 * else the least loaded (or the write home, above). *wait is set (and NULL
 * returned) when the session's slot has a worker starting: better to wait a
 * moment for it than to restore the session on another worker.
 */
static master_slot *master_pick(master_t *m, const peek_request *pk, bool any, bool *wait) {
  const char *session_id = pk->session_id;
  *wait = false;
  if (session_id[0] != '\0') {
    unsigned slot = session_id_slot(session_id);
    if (slot < m->n && m->slots[slot].ready) return &m->slots[slot];
    if (slot < m->n && !any && m->slots[slot].w != NULL && !m->draining) {
      *wait = true;
      return NULL;
    }
  }
  master_slot *best = NULL;
  uint64_t best_load = 0;
  for (unsigned i = 0; i < m->n; i++) {
    master_slot *s = &m->slots[i];
    if (!s->ready) continue;
    uint64_t load = master_load(s);
    if (best == NULL || load < best_load) {
      best = s;
      best_load = load;
    }
  }
  master_slot *home = &m->slots[0];
  if (m->write_home && best != NULL && home->ready && master_rest_write(pk) &&
      master_load(home) <= best_load + MASTER_WRITE_HOME_BIAS)
    return home;
  return best;
}

static void master_route(master_conn *c) {
  master_t *m = c->m;
  master_conn_read(c, false);
  bool wait_slot;
  master_slot *s = master_pick(m, &c->pk, c->any_worker, &wait_slot);
  if (s == NULL) {
    if (m->draining) {
      master_conn_fail(c, 503, "server is stopping", true);
      return;
    }
    c->state = MC_WAIT_WORKER; /* routed when a worker reports ready */
    master_conn_timer(c, wait_slot ? MASTER_SLOT_WAIT_MS : MASTER_WORKER_WAIT_MS);
    return;
  }
  uv_os_fd_t own;
  int fd = uv_fileno((uv_handle_t *)&c->tcp, &own) == 0 ? fcntl(own, F_DUPFD_CLOEXEC, 0) : -1;
  if (fd < 0) {
    master_conn_fail(c, 503, "cannot hand the connection over", true);
    return;
  }
  /*
   * A request that came back from a worker and now goes to a worker other
   * than its session's is served there (restored from its row), never
   * handed back again: one request is re-routed at most once.
   */
  uint32_t flags = c->rerouted || c->any_worker ? IPC_F_REROUTED : 0;
  int rc = ipc_channel_send(&s->w->ch, IPC_CONN, flags, c->in.data, c->in.len, fd);
  if (rc != 0) {
    char slot[16];
    log_warn("cannot hand a connection to a worker", "slot",
             master_fmt_u(slot, sizeof(slot), s->index), "error", strerror(-rc));
    master_conn_fail(c, 503, "worker unavailable", true);
    return;
  }
  s->assigned++;
  master_conn_close(c); /* the worker's copy keeps the connection open */
}

/* Acts on the input: a complete header block is answered or routed; else keep reading. */
static void master_conn_process(master_conn *c) {
  if (c->closing || c->state != MC_HEAD) return;
  size_t limit = c->m->cfg->max_header + (c->rerouted ? MASTER_REROUTE_SLACK : 0);
  int rc = peek_parse(c->in.data ? c->in.data : "", c->in.len, limit, &c->pk);
  if (rc == -EAGAIN) return;
  if (rc == -E2BIG) {
    c->pk.keep_alive = false;
    master_conn_fail(c, 431, NULL, true);
    return;
  }
  if (c->pk.duplicate != NULL) {
    /* Routing by one copy while a worker serves by another must not happen: refuse. */
    char msg[96];
    snprintf(msg, sizeof(msg), "Bad Request: more than one %s header", c->pk.duplicate);
    c->pk.keep_alive = false;
    master_conn_fail(c, 400, msg, true);
    return;
  }
  if (master_conn_own_request(c)) return;
  if (c->m->draining && c->answered == 0 && !c->rerouted) {
    master_conn_fail(c, 503, "server is stopping", true);
    return;
  }
  master_route(c);
}

static void master_conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  master_conn *c = s->data;
  if (nread == 0 || c->closing) return;
  if (nread < 0) {
    master_conn_close(c); /* EOF or error: nothing complete to answer */
    return;
  }
  if (c->state == MC_LINGER) return;
  bool first_byte = c->in.len == 0;
  c->in.len += (size_t)nread;
  c->in.data[c->in.len] = '\0';
  if (first_byte && c->answered > 0) master_conn_timer(c, c->m->cfg->header_timeout_ms);
  master_conn_process(c);
}

static void master_conn_on_timer(uv_timer_t *t) {
  master_conn *c = t->data;
  switch (c->state) {
  case MC_HEAD:
    if (c->in.len == 0 && c->answered > 0) {
      master_conn_close(c); /* idle keep-alive */
    } else {
      c->pk.keep_alive = false;
      master_conn_fail(c, 408, NULL, true);
    }
    break;
  case MC_WAIT_WORKER:
    if (!c->any_worker && master_alive(c->m) > 0) {
      c->any_worker = true; /* its session's worker is slow to start: another one restores it */
      c->state = MC_HEAD;
      master_route(c);
    } else {
      master_conn_fail(c, 503, "no worker available", true);
    }
    break;
  default: master_conn_close(c); break;
  }
}

/* A new connection linked into the master's list, its handles initialised; NULL on failure. */
static master_conn *master_conn_create(master_t *m) {
  master_conn *c = mem_calloc(1, sizeof(*c));
  c->m = m;
  buf_init(&c->in);
  if (uv_tcp_init(m->loop, &c->tcp) < 0) {
    free(c);
    return NULL;
  }
  uv_timer_init(m->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles = 2;
  c->state = MC_HEAD;
  c->next = m->conns;
  if (m->conns) m->conns->prev = c;
  m->conns = c;
  m->n_conns++;
  return c;
}

static void master_on_connection(uv_stream_t *listener, int status) {
  master_t *m = listener->data;
  if (status < 0) {
    log_warn("accept failed", "error", uv_strerror(status));
    return;
  }
  master_conn *c = master_conn_create(m);
  if (c == NULL) return;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
    master_conn_close(c);
    return;
  }
  (void)uv_tcp_nodelay(&c->tcp, 1);
  master_conn_timer(c, m->cfg->header_timeout_ms);
  master_conn_read(c, true);
}

/* REROUTE: a worker gives back a connection with its unanswered request. */
static void master_adopt(master_t *m, int fd, const char *bytes, size_t len) {
  master_conn *c = master_conn_create(m);
  if (c == NULL) {
    close(fd);
    return;
  }
  if (uv_tcp_open(&c->tcp, fd) < 0) {
    close(fd);
    master_conn_close(c);
    return;
  }
  c->rerouted = true;
  buf_append(&c->in, bytes, len);
  master_conn_timer(c, m->cfg->header_timeout_ms);
  master_conn_process(c);
  if (!c->closing && c->state == MC_HEAD) master_conn_read(c, true);
}

/* Workers became ready: route the connections that waited for one. */
static void master_route_waiting(master_t *m) {
  for (master_conn *c = m->conns, *next; c != NULL; c = next) {
    next = c->next;
    if (!c->closing && c->state == MC_WAIT_WORKER) {
      c->state = MC_HEAD;
      master_conn_timer(c, 0);
      master_route(c);
    }
  }
}

/* ---- workers ---------------------------------------------------------------------- */

static void master_worker_on_closed(master_worker *w) {
  if (--w->handles == 0) free(w);
}

static void master_worker_proc_closed(uv_handle_t *h) {
  master_worker_on_closed(h->data);
}

static void master_worker_ch_closed(ipc_channel_t *ch) {
  master_worker_on_closed(ch->data);
}

static void master_worker_close_channel(master_worker *w) {
  if (!w->ch_open) return;
  w->ch_open = false;
  ipc_channel_close(&w->ch, master_worker_ch_closed);
}

static void master_on_stats(master_slot *s, const ipc_msg *msg) {
  memcpy(&s->last, msg->payload, sizeof(s->last));
  for (master_gather *g = s->m->gathers; g != NULL; g = g->next)
    if (g->kind == GATHER_STATS && g->id == s->last.request) master_gather_got(g, s->index);
  if (!s->ready) {
    s->ready = true;
    char slot[16], gen[16], pid[16];
    log_info("worker ready", "slot", master_fmt_u(slot, sizeof(slot), s->index), "generation",
             master_fmt_u(gen, sizeof(gen), s->generation), "pid",
             master_fmt_u(pid, sizeof(pid), (unsigned long long)s->last.stats.pid));
    master_route_waiting(s->m);
  }
}

static void master_on_ctl_rep(master_slot *s, const ipc_msg *msg) {
  cJSON *rep = cJSON_ParseWithLength(msg->payload, msg->len);
  const cJSON *rid = cJSON_GetObjectItemCaseSensitive(rep, "rid");
  if (cJSON_IsNumber(rid)) {
    for (master_gather *g = s->m->gathers; g != NULL; g = g->next) {
      if (g->kind != GATHER_CTL || (double)g->id != rid->valuedouble || !g->want[s->index])
        continue;
      g->replies[s->index] = rep;
      rep = NULL;
      master_gather_got(g, s->index);
      break;
    }
  }
  cJSON_Delete(rep);
}

/*
 * A channel of their own between the write home (slot 0) and the worker of
 * slot o (forward.h): a socketpair, an end to each with IPC_PEER, stamped
 * with o's slot and generation. Made when the later of the two starts.
 */
static void master_link_home(master_t *m, master_slot *o) {
  master_slot *home = &m->slots[0];
  if (!m->write_home || o == home || home->w == NULL || !home->w->ch_open || o->w == NULL ||
      !o->w->ch_open)
    return;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
    /* the worker makes its writes itself */
    log_warn("cannot create a channel to the write home", "error", strerror(errno));
    return;
  }
  char stamp[32];
  int n = snprintf(stamp, sizeof(stamp), "%u %u", o->index, o->generation);
  /* Each send owns its fd, sent or not; a worker left without its end makes its writes itself. */
  if (ipc_channel_send(&home->w->ch, IPC_PEER, 0, stamp, (size_t)n, sv[0]) != 0 ||
      ipc_channel_send(&o->w->ch, IPC_PEER, 0, stamp, (size_t)n, sv[1]) != 0) {
    /* the other end then sees its peer gone at once */
  }
}

static void master_on_msg(ipc_channel_t *ch, ipc_msg *msg, void *data) {
  master_worker *w = data;
  master_slot *s = w->slot;
  master_t *m = s->m;
  if (s->w != w) { /* an old generation's last words */
    if (msg->fd >= 0) close(msg->fd);
    return;
  }
  switch (msg->cmd) {
  case IPC_STATS: master_on_stats(s, msg); break;
  case IPC_COMMITTED:
    /* Wake every other worker's tailer now: no coalescing here, the workers already did. */
    for (unsigned i = 0; i < m->n; i++) {
      master_slot *o = &m->slots[i];
      if (o != s && o->w != NULL && o->w->ch_open &&
          ipc_channel_send(&o->w->ch, IPC_COMMITTED, 0, NULL, 0, -1) != 0) {
        /* its WAL watcher still notices within milliseconds */
      }
    }
    break;
  case IPC_CANCEL:
  case IPC_ANSWER:
  case IPC_RESTORED:
    /*
     * A cancel for a listen stream, or an elicitation's answer, that the
     * sender does not hold: whoever holds it takes it. A session the sender
     * restored: whoever else holds it live lets it go.
     */
    for (unsigned i = 0; i < m->n; i++) {
      master_slot *o = &m->slots[i];
      if (o != s && o->w != NULL && o->w->ch_open &&
          ipc_channel_send(&o->w->ch, msg->cmd, 0, msg->payload, msg->len, -1) != 0) {
        /* a cancel: the client's closing its connection ends the stream too; an answer: the
         * confirmation times out, changing nothing; a restore: the copy idles out */
      }
    }
    break;
  case IPC_REROUTE: master_adopt(m, msg->fd, msg->payload, msg->len); break;
  case IPC_CTL_REP: master_on_ctl_rep(s, msg); break;
  default:
    if (msg->fd >= 0) close(msg->fd);
    log_warn("ipc: unexpected message from a worker", "cmd", ipc_cmd_name(msg->cmd));
    break;
  }
}

static void master_on_eof(ipc_channel_t *ch, void *data) {
  /* The worker closed its end: it is on its way out; its exit is handled when it comes. */
  master_worker_close_channel(data);
}

static void master_on_restart_timer(uv_timer_t *t) {
  master_slot *s = t->data;
  if (!s->m->draining && s->w == NULL) master_spawn(s);
}

/* The slot has no worker: start the next generation, at once or after the backoff. */
static void master_schedule_restart(master_slot *s, uint64_t uptime_ms) {
  if (s->m->draining) return;
  if (uptime_ms >= MASTER_STABLE_MS) s->backoff_ms = 0;
  uint64_t delay = s->backoff_ms;
  s->backoff_ms = s->backoff_ms == 0 ? MASTER_BACKOFF_FIRST_MS : s->backoff_ms * 2;
  if (s->backoff_ms > MASTER_BACKOFF_MAX_MS) s->backoff_ms = MASTER_BACKOFF_MAX_MS;
  s->generation++;
  s->restarts++;
  uv_timer_start(&s->restart_timer, master_on_restart_timer, delay, 0);
}

static void master_on_exit(uv_process_t *p, int64_t status, int term_signal) {
  master_worker *w = p->data;
  master_slot *s = w->slot;
  master_t *m = s->m;
  uint64_t uptime = uv_now(m->loop) - s->started_at;
  char slot[16], st[16], sig[16], pid[16];
  master_fmt_u(slot, sizeof(slot), s->index);
  master_fmt_u(st, sizeof(st), (unsigned long long)status);
  master_fmt_u(sig, sizeof(sig), (unsigned long long)term_signal);
  master_fmt_u(pid, sizeof(pid), (unsigned long long)w->pid);
  bool clean = status == 0 && term_signal == 0;
  if (m->draining) {
    if (clean)
      log_info("worker exited", "slot", slot, "pid", pid);
    else
      log_warn("worker exited", "slot", slot, "pid", pid, "status", st, "signal", sig);
    if (!clean && !m->forced) m->exit_code = 1;
  } else {
    log_error("worker died; restarting", "slot", slot, "pid", pid, "status", st, "signal", sig);
  }
  s->w = NULL;
  s->ready = false;
  memset(&s->last, 0, sizeof(s->last));
  master_worker_close_channel(w);
  uv_close((uv_handle_t *)&w->proc, master_worker_proc_closed);
  for (master_gather *g = m->gathers, *next; g != NULL; g = next) {
    next = g->next;
    master_gather_got(g, s->index);
  }
  if (m->draining)
    master_check_drained(m);
  else
    master_schedule_restart(s, uptime);
}

/* Starts the slot's current generation. On failure the slot is scheduled to try again. */
static void master_spawn(master_slot *s) {
  master_t *m = s->m;
  char slot[16], gen[16], workers[16];
  master_fmt_u(slot, sizeof(slot), s->index);
  master_fmt_u(gen, sizeof(gen), s->generation);
  master_fmt_u(workers, sizeof(workers), m->n);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) {
    log_error("cannot create a worker channel", "slot", slot, "error", strerror(errno));
    master_schedule_restart(s, 0);
    return;
  }
  /* The original command line, then what makes it a worker (later flags win). */
  char **args = mem_calloc((size_t)m->argc + 8, sizeof(char *));
  int k = 0;
  for (int i = 0; i < m->argc; i++) args[k++] = m->argv[i];
  args[k++] = (char *)"--workers";
  args[k++] = workers;
  args[k++] = (char *)"--worker-slot";
  args[k++] = slot;
  args[k++] = (char *)"--worker-generation";
  args[k++] = gen;
  args[k] = NULL;
  uv_stdio_container_t stdio[4] = {
      {.flags = UV_INHERIT_FD, .data.fd = 0},
      {.flags = UV_INHERIT_FD, .data.fd = 1},
      {.flags = UV_INHERIT_FD, .data.fd = 2},
      {.flags = UV_INHERIT_FD, .data.fd = sv[1]}, /* becomes the worker's fd 3 */
  };
  uv_process_options_t opts = {
      .exit_cb = master_on_exit,
      .file = "/proc/self/exe", /* this very binary, even if the file was replaced since */
      .args = args,
      .stdio_count = 4,
      .stdio = stdio,
  };
  master_worker *w = mem_calloc(1, sizeof(*w));
  w->slot = s;
  w->generation = s->generation;
  w->proc.data = w;
  int rc = uv_spawn(m->loop, &w->proc, &opts);
  free(args);
  close(sv[1]);
  if (rc < 0) {
    log_error("cannot start a worker", "slot", slot, "error", uv_strerror(rc));
    close(sv[0]);
    w->handles = 1;
    uv_close((uv_handle_t *)&w->proc, master_worker_proc_closed);
    master_schedule_restart(s, 0);
    return;
  }
  w->pid = w->proc.pid;
  w->handles = 1;
  rc = ipc_channel_init(&w->ch, m->loop, sv[0], s->index, s->generation, master_on_msg,
                        master_on_eof, w);
  if (rc == 0) {
    w->ch_open = true;
    w->handles++;
  } else {
    log_error("cannot watch a worker channel", "slot", slot, "error", uv_strerror(rc));
    uv_process_kill(&w->proc, SIGKILL); /* its exit restarts the slot */
  }
  s->w = w;
  s->ready = false;
  s->assigned = 0;
  memset(&s->last, 0, sizeof(s->last));
  s->started_ms = store_now_ms();
  s->started_at = uv_now(m->loop);
  if (s->index == 0)
    for (unsigned i = 1; i < m->n; i++) master_link_home(m, &m->slots[i]);
  else
    master_link_home(m, s);
  char pid[16];
  log_debug("worker started", "slot", slot, "generation", gen, "pid",
            master_fmt_u(pid, sizeof(pid), (unsigned long long)w->pid));
}

/* ---- the control socket's commands ------------------------------------------------- */

static cJSON *master_slot_json(master_t *m, unsigned i, const worker_stats *st,
                               const slot_stats *sl) {
  cJSON *o = cJSON_CreateObject();
  bool local = m->local != NULL;
  const master_slot *s = local ? NULL : &m->slots[i];
  cJSON_AddNumberToObject(o, "slot", i);
  cJSON_AddNumberToObject(o, "pid", local ? (double)getpid() : s->w ? (double)s->w->pid : 0);
  cJSON_AddNumberToObject(o, "generation", local ? 0 : s->generation);
  cJSON_AddBoolToObject(o, "alive", sl->alive);
  int64_t started = local ? m->started_ms : s->started_ms;
  cJSON_AddNumberToObject(o, "uptimeMs", sl->alive ? (double)(store_now_ms() - started) : 0);
  cJSON_AddNumberToObject(o, "restarts", (double)sl->restarts);
  cJSON_AddNumberToObject(o, "sessions", (double)st->sessions);
  cJSON_AddNumberToObject(o, "streams", (double)st->streams);
  cJSON_AddNumberToObject(o, "listens", (double)st->listens);
  cJSON_AddNumberToObject(o, "subscriptions", (double)st->subscriptions);
  cJSON_AddNumberToObject(o, "queuedBytes", (double)st->queued_bytes);
  cJSON_AddNumberToObject(o, "notifications", (double)st->notifications);
  cJSON_AddNumberToObject(o, "framesSent", (double)st->frames_sent);
  cJSON_AddNumberToObject(o, "framesDropped", (double)st->frames_dropped);
  cJSON_AddNumberToObject(o, "connections", (double)st->connections);
  cJSON_AddNumberToObject(o, "auditPosition", (double)st->audit_position);
  return o;
}

/* Answers status, workers and stats from fresh reports. */
static void master_ctl_answer_stats(master_t *m, control_request_t *r, const char *cmd) {
  worker_stats *st;
  slot_stats *sl;
  size_t n = master_snapshot(m, &st, &sl);
  cJSON *out = cJSON_CreateObject();
  if (strcmp(cmd, "status") == 0) {
    cJSON_AddNumberToObject(out, "pid", getpid());
    cJSON_AddNumberToObject(out, "uptimeMs", (double)(store_now_ms() - m->started_ms));
    /* One process counts as one worker: the entries of "workers" and "stats". */
    cJSON_AddNumberToObject(out, "workers", m->local != NULL ? 1 : m->n);
    cJSON_AddNumberToObject(out, "workersAlive", m->local != NULL ? 1 : (double)master_alive(m));
    cJSON_AddStringToObject(out, "processModel", m->local != NULL ? "single" : "prefork");
    cJSON_AddStringToObject(out, "version", MCPSUB_VERSION);
    cJSON_AddStringToObject(out, "listen", m->listen_addr);
    cJSON_AddStringToObject(out, "db", m->cfg->db_path);
    cJSON_AddBoolToObject(out, "draining", m->draining);
    worker_stats t;
    master_totals(m, st, sl, n, &t);
    cJSON *totals = stats_to_json(&t);
    static const char *const per_worker[] = {"slot", "generation", "pid", "startedMs",
                                             "notifyDelay"};
    for (size_t i = 0; i < ARRAY_LEN(per_worker); i++)
      cJSON_DeleteItemFromObjectCaseSensitive(totals, per_worker[i]);
    cJSON_AddItemToObject(out, "totals", totals);
  } else if (strcmp(cmd, "workers") == 0) {
    cJSON *list = cJSON_AddArrayToObject(out, "workers");
    for (size_t i = 0; i < n; i++)
      cJSON_AddItemToArray(list, master_slot_json(m, (unsigned)i, &st[i], &sl[i]));
  } else {
    cJSON *list = cJSON_AddArrayToObject(out, "workers");
    cJSON *slots = cJSON_AddArrayToObject(out, "slots");
    for (size_t i = 0; i < n; i++) {
      cJSON_AddItemToArray(list, stats_to_json(&st[i]));
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "restarts", (double)sl[i].restarts);
      cJSON_AddBoolToObject(o, "alive", sl[i].alive);
      cJSON_AddItemToArray(slots, o);
    }
  }
  free(st);
  free(sl);
  control_answer(r, out);
}

static void master_ctl_stats_done(master_gather *g) {
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(g->req, "cmd");
  master_ctl_answer_stats(g->m, g->creq, cmd->valuestring);
}

/* A listing's "limit" (checked by master_ctl_count), or its default. */
static size_t master_ctl_limit(const cJSON *req, size_t fallback) {
  const cJSON *limit = cJSON_GetObjectItemCaseSensitive(req, "limit");
  return cJSON_IsNumber(limit) ? (size_t)limit->valuedouble : fallback;
}

/* Merges the workers' answers (replies[0..n)) to a fanned-out request into one answer. */
static void master_ctl_merge(master_t *m, control_request_t *r, const cJSON *req, cJSON **replies,
                             size_t n) {
  const char *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd")->valuestring;
  /* Workers that did not answer in time (or were not ready): the answer lacks their part. */
  char missing[256] = "";
  cJSON *unanswered = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    if (replies[i] != NULL) continue;
    cJSON_AddItemToArray(unanswered, cJSON_CreateNumber((double)i));
    size_t len = strlen(missing);
    snprintf(missing + len, sizeof(missing) - len, "%s%zu", len > 0 ? ", " : "", i);
  }
  char no_answer[320];
  snprintf(no_answer, sizeof(no_answer),
           "no answer from worker %s in time: it may hold the session; try again", missing);
  cJSON *out = cJSON_CreateObject();
  if (strcmp(cmd, "sessions") == 0) {
    /* Each worker's most recent, bounded; together, the most recent of them all. */
    cJSON *all = cJSON_AddArrayToObject(out, "sessions");
    bool more = false; /* a worker left sessions out */
    for (size_t i = 0; i < n; i++) {
      cJSON *list = cJSON_GetObjectItemCaseSensitive(replies[i], "sessions");
      while (cJSON_IsArray(list) && list->child != NULL)
        cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(list, list->child));
      more |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(replies[i], "more"));
    }
    more |= worker_ctl_sessions_rank(all, master_ctl_limit(req, WORKER_CTL_SESSIONS_DEFAULT));
    cJSON_AddBoolToObject(out, "more", more);
  } else if (strcmp(cmd, "session") == 0) {
    cJSON *found = NULL;
    for (size_t i = 0; i < n; i++) {
      cJSON *s = cJSON_GetObjectItemCaseSensitive(replies[i], "session");
      if (s == NULL) continue;
      bool live = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "live"));
      if (found == NULL || live) found = s; /* a live copy wins over the row */
    }
    if (found == NULL) {
      cJSON_Delete(out);
      cJSON_Delete(unanswered);
      control_answer_error(r, missing[0] != '\0' ? no_answer : "unknown session");
      return;
    }
    cJSON_AddItemToObject(out, "session", cJSON_Duplicate(found, true));
  } else if (strcmp(cmd, "evict") == 0) {
    bool evicted = false;
    const char *failed = NULL; /* a worker ended the session but could not delete its row */
    for (size_t i = 0; i < n; i++) {
      evicted |= cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(replies[i], "evicted"));
      const cJSON *error = cJSON_GetObjectItemCaseSensitive(replies[i], "error");
      if (cJSON_IsString(error)) failed = error->valuestring;
    }
    if (!evicted) {
      cJSON_Delete(out);
      cJSON_Delete(unanswered);
      control_answer_error(r, failed != NULL       ? failed
                              : missing[0] != '\0' ? no_answer
                                                   : "unknown session");
      return;
    }
    cJSON_AddTrueToObject(out, "evicted");
  } else { /* subs: one row per URI, summed over the workers (a map: URIs can be many) */
    cJSON *all = cJSON_AddArrayToObject(out, "subscriptions");
    strmap rows;
    strmap_init(&rows);
    bool more = false; /* a worker left URIs out */
    for (size_t i = 0; i < n; i++) {
      const cJSON *uris = cJSON_GetObjectItemCaseSensitive(replies[i], "uris");
      const cJSON *listed = cJSON_GetObjectItemCaseSensitive(replies[i], "subscriptions");
      if (cJSON_IsNumber(uris) && uris->valuedouble > cJSON_GetArraySize(listed)) more = true;
      const cJSON *item;
      cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(replies[i], "subscriptions")) {
        const cJSON *uri = cJSON_GetObjectItemCaseSensitive(item, "uri");
        const cJSON *count = cJSON_GetObjectItemCaseSensitive(item, "sessions");
        if (!cJSON_IsString(uri) || !cJSON_IsNumber(count)) continue;
        const cJSON *notified = cJSON_GetObjectItemCaseSensitive(item, "notified");
        size_t len = strlen(uri->valuestring);
        cJSON *row = strmap_get(&rows, uri->valuestring, len);
        if (row == NULL) {
          row = cJSON_CreateObject();
          cJSON_AddStringToObject(row, "uri", uri->valuestring);
          cJSON_AddNumberToObject(row, "sessions", 0);
          cJSON_AddNumberToObject(row, "notified", 0);
          cJSON_AddItemToArray(all, row);
          strmap_put(&rows, uri->valuestring, len, row);
        }
        cJSON *sum = cJSON_GetObjectItemCaseSensitive(row, "sessions");
        cJSON_SetNumberValue(sum, sum->valuedouble + count->valuedouble);
        cJSON *total = cJSON_GetObjectItemCaseSensitive(row, "notified");
        if (cJSON_IsNumber(notified))
          cJSON_SetNumberValue(total, total->valuedouble + notified->valuedouble);
        const cJSON *recent = cJSON_GetObjectItemCaseSensitive(item, "recent");
        if (cJSON_IsNumber(recent)) { /* busiest: each worker's own, summed where they meet */
          cJSON *sum_recent = cJSON_GetObjectItemCaseSensitive(row, "recent");
          if (sum_recent == NULL) sum_recent = cJSON_AddNumberToObject(row, "recent", 0);
          cJSON_SetNumberValue(sum_recent, sum_recent->valuedouble + recent->valuedouble);
        }
      }
      const cJSON *window = cJSON_GetObjectItemCaseSensitive(replies[i], "windowMs");
      if (cJSON_IsNumber(window)) {
        cJSON *longest = cJSON_GetObjectItemCaseSensitive(out, "windowMs");
        if (longest == NULL) longest = cJSON_AddNumberToObject(out, "windowMs", 0);
        if (window->valuedouble > longest->valuedouble)
          cJSON_SetNumberValue(longest, window->valuedouble);
      }
    }
    strmap_finish(&rows);
    /* The plain listing: the most subscribed first, as many as asked for. */
    if (cJSON_GetObjectItemCaseSensitive(req, "busiest") == NULL &&
        !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(req, "uri"))) {
      more |= worker_ctl_subs_rank(all, master_ctl_limit(req, WORKER_CTL_SUBS_DEFAULT));
      cJSON_AddBoolToObject(out, "more", more);
    }
  }
  if (cJSON_GetArraySize(unanswered) > 0)
    cJSON_AddItemToObject(out, "unanswered", unanswered);
  else
    cJSON_Delete(unanswered);
  control_answer(r, out);
}

static void master_ctl_fanout_done(master_gather *g) {
  master_ctl_merge(g->m, g->creq, g->req, g->replies, g->m->n);
}

/* A control command in one process: a job on the worker's store lane (it reads the store). */
typedef struct master_local_ctl {
  master_t *m;
  control_request_t *r;
  cJSON *req; /* a copy */
} master_local_ctl;

static void master_ctl_local_answer(cJSON *rep, void *data) {
  master_local_ctl *j = data;
  master_ctl_merge(j->m, j->r, j->req, &rep, 1);
  cJSON_Delete(j->req);
  free(j);
}

static void master_ctl_local(void *arg) {
  master_local_ctl *j = arg;
  const char *cmd = cJSON_GetObjectItemCaseSensitive(j->req, "cmd")->valuestring;
  if (strcmp(cmd, "status") == 0 || strcmp(cmd, "workers") == 0 || strcmp(cmd, "stats") == 0) {
    master_ctl_answer_stats(j->m, j->r, cmd);
    cJSON_Delete(j->req);
    free(j);
    return;
  }
  cJSON *copy = cJSON_Duplicate(j->req, true);
  cJSON_AddTrueToObject(copy, "durable");
  worker_ctl_handle(j->m->local, copy, master_ctl_local_answer, j);
  cJSON_Delete(copy);
}

/* Is req[name] absent, or a whole number from 1 to max? */
static bool master_ctl_count(const cJSON *req, const char *name, int max) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, name);
  return v == NULL || (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= max &&
                       v->valuedouble == (double)(int)v->valuedouble);
}

static void master_ctl_handle(control_request_t *r, const cJSON *req, void *data) {
  master_t *m = data;
  const char *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd")->valuestring;
  bool stats =
      strcmp(cmd, "status") == 0 || strcmp(cmd, "workers") == 0 || strcmp(cmd, "stats") == 0;
  bool fanout = strcmp(cmd, "sessions") == 0 || strcmp(cmd, "session") == 0 ||
                strcmp(cmd, "evict") == 0 || strcmp(cmd, "subs") == 0;
  if (!stats && !fanout) {
    char msg[128];
    snprintf(msg, sizeof(msg), "unknown command: %.64s", cmd);
    control_answer_error(r, msg);
    return;
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
  if ((strcmp(cmd, "session") == 0 || strcmp(cmd, "evict") == 0) && !cJSON_IsString(id)) {
    control_answer_error(r, "this command needs a string \"id\"");
    return;
  }
  const cJSON *uri = cJSON_GetObjectItemCaseSensitive(req, "uri");
  if (strcmp(cmd, "subs") == 0 && uri != NULL && !cJSON_IsString(uri) && !cJSON_IsNull(uri)) {
    control_answer_error(r, "\"uri\" must be a string");
    return;
  }
  if (strcmp(cmd, "sessions") == 0 && !master_ctl_count(req, "limit", WORKER_CTL_SESSIONS_MAX)) {
    char msg[64];
    snprintf(msg, sizeof(msg), "\"limit\" must be a whole number from 1 to %d",
             WORKER_CTL_SESSIONS_MAX);
    control_answer_error(r, msg);
    return;
  }
  if (strcmp(cmd, "subs") == 0 && (!master_ctl_count(req, "busiest", WORKER_CTL_BUSIEST_MAX) ||
                                   !master_ctl_count(req, "limit", WORKER_CTL_SUBS_MAX))) {
    char msg[96];
    snprintf(msg, sizeof(msg),
             "\"busiest\" must be a whole number from 1 to %d, \"limit\" from 1 to %d",
             WORKER_CTL_BUSIEST_MAX, WORKER_CTL_SUBS_MAX);
    control_answer_error(r, msg);
    return;
  }
  if (m->local != NULL) { /* one process: the worker is right here, and so is its store lane */
    master_local_ctl *j = mem_alloc(sizeof(*j));
    *j = (master_local_ctl){m, r, cJSON_Duplicate(req, true)};
    lane_run(&m->local->lane, master_ctl_local, j);
    return;
  }
  int durable = -1;
  if (strcmp(cmd, "session") == 0) {
    /* The id's slot reads the row when no worker holds the session live; else the first ready one.
     */
    const char *text = id->valuestring;
    unsigned slot = session_id_valid(text, strlen(text)) ? session_id_slot(text) : m->n;
    for (unsigned i = 0; i < m->n && durable < 0; i++)
      if (m->slots[i].ready) durable = (int)i;
    if (slot < m->n && m->slots[slot].ready) durable = (int)slot;
  }
  master_gather *g =
      master_gather_start(m, stats ? GATHER_STATS : GATHER_CTL, cJSON_Duplicate(req, true), durable,
                          stats ? MASTER_STATS_WAIT_MS : MASTER_CTL_WAIT_MS,
                          stats ? master_ctl_stats_done : master_ctl_fanout_done);
  g->creq = r;
}

/* ---- drain and stop ------------------------------------------------------------------ */

/* Closes everything of the master's own; the loop then ends. */
static void master_stop(master_t *m) {
  if (m->stopped) return;
  m->stopped = true;
  while (m->gathers != NULL) master_gather_finish(m->gathers); /* answers what waits */
  uv_close((uv_handle_t *)&m->sigterm, NULL);
  uv_close((uv_handle_t *)&m->sigint, NULL);
  uv_close((uv_handle_t *)&m->sighup, NULL);
  uv_timer_stop(&m->drain_timer);
  uv_close((uv_handle_t *)&m->drain_timer, NULL);
  control_server_close(m->ctl);
  m->ctl = NULL;
  if (m->listening) {
    m->listening = false;
    uv_close((uv_handle_t *)&m->listener, NULL);
  }
  for (master_conn *c = m->conns; c != NULL; c = c->next) master_conn_close(c);
  for (unsigned i = 0; i < m->n; i++) {
    uv_timer_stop(&m->slots[i].restart_timer);
    uv_close((uv_handle_t *)&m->slots[i].restart_timer, NULL);
  }
}

static void master_check_drained(master_t *m) {
  if (!m->draining) return;
  for (unsigned i = 0; i < m->n; i++)
    if (m->slots[i].w != NULL) return;
  log_info(m->forced ? "stopped (forced)" : "all workers stopped");
  master_stop(m);
}

static void master_kill_all(master_t *m) {
  for (unsigned i = 0; i < m->n; i++) {
    master_slot *s = &m->slots[i];
    if (s->w != NULL) uv_process_kill(&s->w->proc, SIGKILL);
  }
}

static void master_force(master_t *m, const char *why) {
  m->forced = true;
  m->exit_code = 1;
  log_warn("stopping now", "reason", why);
  if (m->local != NULL) {
    worker_shutdown(m->local);
    master_stop(m);
    return;
  }
  master_kill_all(m);
  master_check_drained(m);
}

static void master_on_drain_deadline(uv_timer_t *t) {
  master_force(t->data, "drain deadline passed");
}

/* The master of the one-process mode, for the worker's drain callback. */
static master_t *master_of_local;

static void master_local_drained(worker_t *w) {
  master_t *m = master_of_local;
  log_info("drained");
  master_stop(m);
}

static void master_drain(master_t *m, const char *why) {
  m->draining = true;
  log_info("draining", "reason", why);
  if (m->local != NULL) {
    worker_drain(m->local, m->cfg->drain_timeout_ms, master_local_drained);
    return;
  }
  if (m->listening) {
    m->listening = false;
    uv_close((uv_handle_t *)&m->listener, NULL);
  }
  /* Connections that have not sent a complete request: nothing is in flight on them. */
  for (master_conn *c = m->conns, *next; c != NULL; c = next) {
    next = c->next;
    if (c->state == MC_HEAD)
      master_conn_close(c);
    else if (c->state == MC_WAIT_WORKER)
      master_conn_fail(c, 503, "server is stopping", true);
  }
  for (unsigned i = 0; i < m->n; i++) {
    master_slot *s = &m->slots[i];
    uv_timer_stop(&s->restart_timer);
    if (s->w != NULL &&
        (!s->w->ch_open || ipc_channel_send(&s->w->ch, IPC_DRAIN, 0, NULL, 0, -1) != 0))
      uv_process_kill(&s->w->proc, SIGTERM); /* no channel: the signal says the same */
  }
  uv_timer_start(&m->drain_timer, master_on_drain_deadline, m->cfg->drain_timeout_ms + 1000, 0);
  master_check_drained(m);
}

static void master_on_grace_end(uv_timer_t *t) {
  master_t *m = t->data;
  if (!m->draining) master_drain(m, "the drain grace ended");
}

static void master_on_signal(uv_signal_t *h, int signum) {
  master_t *m = h->data;
  const char *name = signum == SIGTERM ? "SIGTERM" : "SIGINT";
  if (!m->draining && !m->unready && m->local == NULL && m->cfg->drain_grace_ms > 0) {
    /*
     * First out of the balancer, then the drain: a connection it opens or
     * reuses meanwhile is served, not refused or reset (a request on it may
     * not be retried safely).
     */
    char ms[24];
    log_info("not ready: /readyz answers 503, the drain follows", "reason", name, "grace_ms",
             master_fmt_u(ms, sizeof(ms), m->cfg->drain_grace_ms));
    m->unready = true;
    uv_timer_start(&m->drain_timer, master_on_grace_end, m->cfg->drain_grace_ms, 0);
  } else if (!m->draining) {
    master_drain(m, name); /* a second signal during the grace: at once */
  } else if (!m->forced) {
    master_force(m, name);
  }
}

/* SIGHUP: the workers re-read the API key file (they also notice a change by themselves). */
static void master_on_sighup(uv_signal_t *h, int signum) {
  master_t *m = h->data;
  log_info("SIGHUP: reloading the API keys");
  for (unsigned i = 0; i < m->n; i++)
    if (m->slots[i].w != NULL) uv_process_kill(&m->slots[i].w->proc, SIGHUP);
}

/* ---- start ------------------------------------------------------------------------------ */

static int master_listen(master_t *m) {
  const config_t *cfg = m->cfg;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  int rc = uv_ip4_addr(cfg->listen_host, cfg->listen_port, (struct sockaddr_in *)&ss);
  if (rc != 0) rc = uv_ip6_addr(cfg->listen_host, cfg->listen_port, (struct sockaddr_in6 *)&ss);
  if (rc != 0) return rc;
  if ((rc = uv_tcp_init(m->loop, &m->listener)) != 0) return rc;
  m->listening = true;
  m->listener.data = m;
  /* libuv: non-blocking, close-on-exec, SO_REUSEADDR */
  if ((rc = uv_tcp_bind(&m->listener, (const struct sockaddr *)&ss, 0)) != 0) return rc;
  return uv_listen((uv_stream_t *)&m->listener, 511, master_on_connection);
}

static void master_start_control(master_t *m) {
  char err[256] = "";
  int rc = control_server_start(m->loop, m->cfg->control_socket, master_ctl_handle, m, &m->ctl, err,
                                sizeof(err));
  if (rc != 0) log_warn("no control socket", "path", m->cfg->control_socket, "error", err);
}

static void master_signals(master_t *m) {
  uv_signal_init(m->loop, &m->sigterm);
  uv_signal_init(m->loop, &m->sigint);
  uv_signal_init(m->loop, &m->sighup);
  m->sigterm.data = m->sigint.data = m->sighup.data = m;
  uv_signal_start(&m->sigterm, master_on_signal, SIGTERM);
  uv_signal_start(&m->sigint, master_on_signal, SIGINT);
  if (m->n > 0) uv_signal_start(&m->sighup, master_on_sighup, SIGHUP);
  uv_timer_init(m->loop, &m->drain_timer);
  m->drain_timer.data = m;
}

/* --workers 0: today's one process, with drain and the control socket. */
static int master_run_local(master_t *m) {
  static worker_t w;
  char err[512];
  if (worker_init(&w, m->loop, m->cfg, 0, err, sizeof(err)) != 0) {
    log_error("cannot open the database", "db", m->cfg->db_path, "error", err);
    return 1;
  }
  m->local = &w;
  master_of_local = m;
  int rc = worker_listen(&w);
  if (rc != 0) {
    log_error("cannot listen", "addr", m->listen_addr, "error", uv_strerror(rc));
    worker_shutdown(&w);
    uv_run(m->loop, UV_RUN_DEFAULT);
    worker_finish(&w);
    return 1;
  }
  master_signals(m);
  master_start_control(m);
  log_info("listening", "addr", m->listen_addr, "db", m->cfg->db_path, "public_url",
           m->cfg->public_url, "workers", "0");
  uv_run(m->loop, UV_RUN_DEFAULT);
  worker_finish(&w);
  return m->exit_code;
}

static int master_run_prefork(master_t *m) {
  /* The schema is applied once, here, before any worker opens the file. */
  char err[512];
  store_t *store = NULL;
  if (store_open(m->cfg->db_path, m->cfg->schema_path, &store, err, sizeof(err)) != 0) {
    log_error("cannot open the database", "db", m->cfg->db_path, "error", err);
    return 1;
  }
  store_close(store);
  int rc = master_listen(m);
  if (rc != 0) {
    log_error("cannot listen", "addr", m->listen_addr, "error", uv_strerror(rc));
    if (m->listening) uv_close((uv_handle_t *)&m->listener, NULL);
    uv_run(m->loop, UV_RUN_DEFAULT);
    return 1;
  }
  master_signals(m);
  m->slots = mem_calloc(m->n, sizeof(master_slot));
  for (unsigned i = 0; i < m->n; i++) {
    master_slot *s = &m->slots[i];
    s->m = m;
    s->index = i;
    uv_timer_init(m->loop, &s->restart_timer);
    s->restart_timer.data = s;
    master_spawn(s);
  }
  master_start_control(m);
  char workers[16];
  log_info("listening", "addr", m->listen_addr, "db", m->cfg->db_path, "public_url",
           m->cfg->public_url, "workers", master_fmt_u(workers, sizeof(workers), m->n));
  uv_run(m->loop, UV_RUN_DEFAULT);
  free(m->slots);
  return m->exit_code;
}

int master_main(const config_t *cfg, int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  static master_t m;
  memset(&m, 0, sizeof(m));
  m.loop = uv_default_loop();
  m.cfg = cfg;
  m.argc = argc;
  m.argv = argv;
  m.n = cfg->workers > 0 ? (unsigned)cfg->workers : 0;
  m.write_home = forward_write_home(cfg);
  m.started_ms = store_now_ms();
  bool v6 = strchr(cfg->listen_host, ':') != NULL;
  snprintf(m.listen_addr, sizeof(m.listen_addr), "%s%s%s:%d", v6 ? "[" : "", cfg->listen_host,
           v6 ? "]" : "", cfg->listen_port);
  char err[512];
  if (auth_check_config(cfg, err, sizeof(err)) != 0) {
    /* Workers would fail on it one after another: refuse now, saying why. */
    log_error("cannot start", "error", err);
    return 1;
  }
  int code = m.n == 0 ? master_run_local(&m) : master_run_prefork(&m);
  int rc = uv_loop_close(m.loop);
  if (rc != 0) log_warn("loop closed with open handles", "error", uv_strerror(rc));
  log_info("stopped");
  return code;
}
