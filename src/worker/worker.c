/*
 * The worker: owns a loop's HTTP server, SQLite connection and live
 * sessions, routes each request to its endpoint, and runs the periodic
 * work (idle-session sweep, audit retention, SSE keepalives). Routing is a
 * few string compares; the Host/Origin check guards every endpoint against
 * DNS rebinding before anything else runs.
 */
#include "worker/worker.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/jsonrpc.h"
#include "common/log.h"
#include "common/mem.h"
#include "worker/confirm.h"
#include "worker/forward.h"
#include "worker/listen.h"
#include "worker/mcp.h"
#include "worker/rest.h"
#include "worker/subscriptions.h"
#include "worker/wait.h"

#include <llhttp.h>

/* Response helpers ---------------------------------------------------------- */

void worker_respond_json(http_conn_t *c, int status, const cJSON *json, const http_header *extra,
                         size_t n_extra) {
  http_header headers[8];
  size_t n = 0;
  headers[n++] = (http_header){"Content-Type", "application/json"};
  for (size_t i = 0; i < n_extra && n < ARRAY_LEN(headers); i++) headers[n++] = extra[i];
  buf_t text;
  buf_init(&text);
  buf_reserve(&text, 1023); /* most answers fit: one allocation */
  if (jsonrpc_print(&text, json) < 0)
    http_respond(c, 500, NULL, 0, NULL, 0);
  else
    http_respond(c, status, headers, n, text.data, text.len);
  buf_finish(&text);
}

void worker_respond_error_with(http_conn_t *c, int status, const char *message,
                               const http_header *extra, size_t n_extra) {
  cJSON *body = cJSON_CreateObject();
  cJSON_AddStringToObject(body, "error", message);
  worker_respond_json(c, status, body, extra, n_extra);
  cJSON_Delete(body);
}

void worker_sse_send(http_conn_t *c, const cJSON *json) {
  buf_t b;
  buf_init(&b);
  if (jsonrpc_print(&b, json) < 0) abort(); /* only an invalid item: a bug here */
  worker_sse_send_text(c, b.data, b.len);
  buf_finish(&b);
}

void worker_sse_send_text(http_conn_t *c, const char *json, size_t len) {
  uv_buf_t parts[3] = {uv_buf_init("data: ", 6),
                       uv_buf_init((char *)(uintptr_t)json, (unsigned)len), uv_buf_init("\n\n", 2)};
  if (http_stream_writev(c, parts, 3, len + 8) != 0) {
    /* cut or closing: its close callback runs */
  }
}

void worker_respond_error(http_conn_t *c, int status, const char *message) {
  worker_respond_error_with(c, status, message, NULL, 0);
}

void worker_respond_not_allowed(http_conn_t *c, const char *allow) {
  http_header h = {"Allow", allow};
  worker_respond_error_with(c, 405, "method not allowed", &h, 1);
}

/* Host and Origin ----------------------------------------------------------- */

/* Length of the host part of "host[:port]" or "[v6]:port". */
static size_t host_part_len(const char *hostport) {
  if (hostport[0] == '[') {
    const char *end = strchr(hostport, ']');
    return end != NULL ? (size_t)(end - hostport) + 1 : strlen(hostport);
  }
  const char *colon = strchr(hostport, ':');
  return colon != NULL ? (size_t)(colon - hostport) : strlen(hostport);
}

static bool host_is_loopback(const char *host, size_t len) {
  static const char *const names[] = {"localhost", "127.0.0.1", "[::1]"};
  for (size_t i = 0; i < ARRAY_LEN(names); i++) {
    if (len == strlen(names[i]) && strncasecmp(host, names[i], len) == 0) return true;
  }
  return false;
}

/* The authority ("host[:port]") of an http(s) URL, or NULL. */
static const char *url_authority(const char *url, size_t *len) {
  const char *p = NULL;
  if (strncasecmp(url, "http://", 7) == 0)
    p = url + 7;
  else if (strncasecmp(url, "https://", 8) == 0)
    p = url + 8;
  if (p == NULL) return NULL;
  *len = strcspn(p, "/?#");
  return p;
}

/* Is host (without port) the host of the public URL or of an allowed origin? */
static bool host_is_configured(const config_t *cfg, const char *host, size_t len) {
  size_t alen;
  const char *auth = url_authority(cfg->public_url, &alen);
  if (auth != NULL && host_part_len(auth) == len && strncasecmp(auth, host, len) == 0) return true;
  for (size_t i = 0; i < cfg->n_allowed_origins; i++) {
    auth = url_authority(cfg->allowed_origins[i], &alen);
    if (auth != NULL && host_part_len(auth) == len && strncasecmp(auth, host, len) == 0)
      return true;
  }
  return false;
}

static bool origin_allowed(const config_t *cfg, const char *origin) {
  size_t alen;
  const char *auth = url_authority(origin, &alen);
  if (auth == NULL || auth[alen] != '\0') return false; /* "null", paths, other schemes */
  if (host_is_loopback(auth, host_part_len(auth))) return true;
  for (size_t i = 0; i < cfg->n_allowed_origins; i++) {
    if (strcasecmp(origin, cfg->allowed_origins[i]) == 0) return true;
  }
  size_t plen = strlen(cfg->public_url);
  const char *pauth = url_authority(cfg->public_url, &alen);
  plen = (size_t)(pauth - cfg->public_url) + alen; /* scheme://authority of the public URL */
  return strlen(origin) == plen && strncasecmp(origin, cfg->public_url, plen) == 0;
}

bool worker_host_origin_allowed(const config_t *cfg, const char *host, const char *origin) {
  if (host != NULL) {
    size_t len = host_part_len(host);
    if (!host_is_loopback(host, len) && !host_is_configured(cfg, host, len)) return false;
  }
  return origin == NULL || origin_allowed(cfg, origin);
}

/* DNS-rebinding guard: a page served from another name must not reach us. */
static bool worker_request_allowed(const worker_t *w, const http_request_t *req) {
  return worker_host_origin_allowed(w->cfg, http_request_header(req, "host"),
                                    http_request_header(req, "origin"));
}

/* Health and status ----------------------------------------------------------- */

static void worker_handle_status(worker_t *w, http_conn_t *c, http_request_t *req,
                                 const char *which) {
  if (req->method != HTTP_GET) {
    worker_respond_not_allowed(c, "GET");
    return;
  }
  cJSON *body = cJSON_CreateObject();
  int status = 200;
  if (strcmp(which, "healthz") == 0) {
    cJSON_AddStringToObject(body, "status", "ok");
  } else if (strcmp(which, "readyz") == 0) {
    int64_t seq;
    bool ready = !w->closing && !w->draining && store_audit_max_seq(w->store, &seq) == 0;
    cJSON_AddStringToObject(body, "status", ready ? "ready" : "unavailable");
    status = ready ? 200 : 503;
  } else {
    cJSON_AddNumberToObject(body, "sessions", (double)w->sessions.count);
    cJSON_AddNumberToObject(body, "streams", (double)w->sessions.n_streams);
    cJSON_AddNumberToObject(body, "listens", (double)w->n_listens);
    cJSON_AddNumberToObject(body, "connections", (double)http_server_connections(w->http));
    cJSON_AddNumberToObject(body, "subscriptions", (double)w->subs.n_subs);
    cJSON_AddNumberToObject(body, "waiters", (double)w->n_waiters);
    cJSON_AddNumberToObject(body, "requests", (double)w->requests);
    cJSON_AddNumberToObject(body, "notifications", (double)w->notifications);
    cJSON_AddNumberToObject(body, "framesSent", (double)w->sessions.frames_sent);
    cJSON_AddNumberToObject(body, "framesDropped", (double)w->sessions.frames_dropped);
    cJSON_AddNumberToObject(body, "auditPosition", (double)subs_position(w));
  }
  worker_respond_json(c, status, body, NULL, 0);
  cJSON_Delete(body);
}

void worker_stats_collect(worker_t *w, worker_stats *st) {
  memset(st, 0, sizeof(*st));
  st->slot = w->slot;
  st->generation = w->generation;
  st->pid = (int32_t)getpid();
  st->started_ms = w->started_ms;
  st->sessions = w->sessions.count;
  st->streams = w->sessions.n_streams;
  st->listens = w->n_listens;
  st->subscriptions = w->subs.n_subs;
  st->waiters = w->n_waiters;
  st->connections = http_server_connections(w->http);
  st->lane_jobs = w->lane.jobs;
  st->lane_waits = w->lane.waits;
  st->lane_queued = w->lane.queued;
  st->lane_blocked = w->lane.blocked;
  reader_counts(w->reader, &st->reads_done, &st->reads_pending);
  st->statements_prepared = store_pg_prepared_total();
  st->connections_refused = http_server_refused(w->http);
  st->requests_refused = w->auth.denied + w->limits.refused;
  for (session_t *s = w->sessions.streams; s != NULL; s = s->stream_next)
    st->queued_bytes += http_conn_queued(s->stream);
  for (const listen_stream *l = w->listens; l != NULL; l = l->next)
    st->queued_bytes += http_conn_queued(l->conn);
  st->requests = w->requests;
  st->writes_forwarded = w->writes_forwarded;
  st->writes_taken = w->writes_taken;
  st->notifications = w->notifications;
  st->frames_sent = w->sessions.frames_sent;
  st->frames_replayed = w->sessions.frames_replayed;
  st->frames_dropped = w->sessions.frames_dropped;
  st->notify_delay = w->notify_delay;
  memcpy(st->request_seconds, w->request_seconds, sizeof(st->request_seconds));
  st->audit_position = w->store != NULL ? subs_position(w) : 0;
  int64_t head = 0;
  if (w->store != NULL && store_audit_max_seq(w->store, &head) == 0) st->audit_head = head;
}

/* A request was answered: its duration, by the method its handler labelled it with. */
static void worker_on_answered(void *data, int label, uint64_t ns) {
  worker_t *w = data;
  stats_method m = label >= 0 && label < STATS_METHODS ? (stats_method)label : STATS_M_OTHER;
  stats_observe(&w->request_seconds[m], (double)ns / 1e9);
}

/* GET /metrics of one process: its own counters in Prometheus text. */
static void worker_handle_metrics(worker_t *w, http_conn_t *c, http_request_t *req) {
  if (req->method != HTTP_GET) {
    worker_respond_not_allowed(c, "GET");
    return;
  }
  worker_stats st;
  worker_stats_collect(w, &st);
  buf_t out;
  buf_init(&out);
  stats_render_prometheus(&out, &st, NULL, 1);
  http_header h = {"Content-Type", "text/plain; version=0.0.4; charset=utf-8"};
  http_respond(c, 200, &h, 1, out.data ? out.data : "", out.len);
  buf_finish(&out);
}

/*
 * Under a master, /status and /metrics describe the whole server: only the
 * master has every worker's numbers, so a request for them that reached a
 * worker on a kept-alive connection goes back to the master.
 */
static bool worker_wants_master(worker_t *w, http_conn_t *c, http_request_t *req) {
  return w->reroute != NULL && req->method == HTTP_GET &&
         !(http_conn_request_flags(c) & HTTP_ADOPT_REROUTED) && w->reroute(w, c);
}

/* mcp: the path is /mcp (worker_serve compared it). */
static void worker_route(worker_t *w, http_conn_t *c, http_request_t *req,
                         const auth_principal *principal, bool public, bool mcp) {
  const char *p = req->path;
  unsigned retry_after;
  if (!public && !limits_take(&w->limits, principal, (int64_t)uv_now(w->loop), &retry_after)) {
    limits_respond(w, c, "request rate", retry_after);
    return;
  }
  if (mcp || strcmp(p, "/healthz") != 0) subs_refresh_schema(w); /* liveness never asks the db */
  if (mcp) {
    if (w->draining && req->method == HTTP_GET) {
      /* A stream opened now would be cut at once: come back to the next process. */
      http_header h[] = {{"Retry-After", "1"}, {"Connection", "close"}};
      cJSON *body = cJSON_CreateObject();
      cJSON_AddStringToObject(body, "error", "server is restarting; reconnect");
      worker_respond_json(c, 503, body, h, 2);
      cJSON_Delete(body);
      return;
    }
    mcp_handle_http(w, c, req, principal);
  } else if ((strcmp(p, "/status") == 0 || strcmp(p, "/metrics") == 0) &&
             worker_wants_master(w, c, req)) {
    /* handed back */
  } else if (strcmp(p, "/metrics") == 0) {
    worker_handle_metrics(w, c, req);
  } else if (strcmp(p, "/healthz") == 0 || strcmp(p, "/readyz") == 0 || strcmp(p, "/status") == 0) {
    worker_handle_status(w, c, req, p + 1);
  } else {
    http_conn_set_label(c, STATS_M_REST);
    rest_handle(w, c, req, principal);
  }
}

/*
 * Serves a request: from the HTTP layer, or again once the signing key its
 * token named was fetched (auth.h).
 */
static void worker_serve(http_conn_t *c, http_request_t *req, void *data) {
  worker_t *w = data;
  if (!worker_request_allowed(w, req)) {
    worker_respond_error(c, 403, "forbidden: Host or Origin not allowed");
    return;
  }
  const char *p = req->path;
  /* Most requests are MCP's: its path is none of the others below. */
  bool mcp = strcmp(p, "/mcp") == 0;
  if (!mcp && auth_serve_metadata(w, c, req)) return;
  /* /status and /metrics are operational counters, like the health checks (see docs/security.md).
   */
  bool public =
      !mcp && (auth_path_is_public(p) || strcmp(p, "/status") == 0 || strcmp(p, "/metrics") == 0);
  auth_principal principal;
  memset(&principal, 0, sizeof(principal));
  if (!public && auth_request(w, c, req, &principal) != AUTH_PASSED) return;
  worker_route(w, c, req, &principal, public, mcp);
}

/* A request as a job on the store lane: its connection is held until it is answered. */
typedef struct request_job {
  worker_t *w;
  http_conn_t *c;
  http_request_t *req;
} request_job;

static void worker_request_job(void *arg) {
  request_job j = *(request_job *)arg;
  free(arg);
  worker_serve(j.c, j.req, j.w);
}

/*
 * Serves a request as a job on the store lane; a request that waited for
 * JWT signing keys comes back here too (auth.h).
 */
static void worker_dispatch(http_conn_t *c, http_request_t *req, void *data) {
  worker_t *w = data;
  /* Liveness needs no database: answered at once even while the lane waits for one. */
  if (!w->lane.enabled || strcmp(req->path, "/healthz") == 0) {
    worker_serve(c, req, w);
    return;
  }
  request_job *j = mem_alloc(sizeof(*j));
  *j = (request_job){w, c, req};
  lane_run(&w->lane, worker_request_job, j);
}

static void worker_on_request(http_conn_t *c, http_request_t *req, void *data) {
  worker_t *w = data;
  w->requests++;
  if (log_enabled(LOG_DEBUG))
    log_debug("request", "method", req->method_name, "target", req->target);
  worker_dispatch(c, req, w);
}

/* Sessions: durable bookkeeping ---------------------------------------------- */

/* Writes last_seen to the row when it is a quarter idle-timeout newer. */
static void worker_session_persist_seen(worker_t *w, session_t *s) {
  if (s->last_seen_ms - s->persisted_seen_ms < (int64_t)(w->cfg->idle_timeout_ms / 4)) return;
  writer_session_touch(w->writer, s->id, s->last_seen_ms);
  s->persisted_seen_ms = s->last_seen_ms;
}

void worker_session_touch(worker_t *w, session_t *s) {
  /*
   * The row is written at most every quarter of the idle timeout: a bounded
   * write rate, and the sweep below brings every live row up to date before
   * it prunes, so no live session loses its row.
   */
  s->last_seen_ms = store_now_ms();
  worker_session_persist_seen(w, s);
}

/* A session's end, until its row is deleted. */
typedef struct session_ending {
  worker_t *w;
  void (*then)(int rc, void *data);
  void *data;
  char id[SESSION_ID_LEN + 1];
} session_ending;

static void worker_session_ended(int rc, void *data) {
  session_ending *e = data;
  strmap_remove(&e->w->ending, e->id, strlen(e->id));
  if (e->then != NULL) e->then(rc, e->data);
  free(e);
}

void worker_session_end_then(worker_t *w, session_t *s, void (*then)(int rc, void *data),
                             void *data) {
  /*
   * Until the row is gone, a request for the session must not restore it
   * from the row (it would outlive its own deletion): the id is kept aside.
   * Once per id: while it is, the session cannot be live here again to end.
   */
  session_ending *e = mem_alloc(sizeof(*e));
  *e = (session_ending){.w = w, .then = then, .data = data};
  snprintf(e->id, sizeof(e->id), "%s", s->id);
  strmap_put(&w->ending, e->id, strlen(e->id), e);
  subs_session_drop(w, s);
  writer_session_delete_then(w->writer, s->id, worker_session_ended, e);
  session_registry_remove(&w->sessions, s);
}

void worker_session_forget(worker_t *w, session_t *s) {
  subs_session_drop(w, s);
  session_registry_remove(&w->sessions, s); /* its stream too */
}

bool worker_session_ending(const worker_t *w, const char *id, size_t len) {
  return strmap_get(&w->ending, id, len) != NULL;
}

void worker_session_end(worker_t *w, session_t *s) {
  worker_session_end_then(w, s, NULL, NULL);
}

/* Periodic work ------------------------------------------------------------------ */

typedef struct sweep_ctx {
  worker_t *w;
  int64_t now;
  size_t evicted;
} sweep_ctx;

static void worker_sweep_session(session_t *s, void *data) {
  sweep_ctx *ctx = data;
  worker_t *w = ctx->w;
  int64_t idle = (int64_t)w->cfg->idle_timeout_ms;
  if (s->stream != NULL) s->last_seen_ms = ctx->now; /* an open stream keeps it alive */
  if (ctx->now - s->last_seen_ms >= idle) {
    /*
     * Only the live copy goes: the row is the prune's below, which spares
     * it while another worker or host still uses the session (the holder
     * refreshes it), and deletes it in this same sweep when nobody does.
     */
    worker_session_forget(w, s);
    ctx->evicted++;
  } else if (s->last_seen_ms != s->persisted_seen_ms &&
             ctx->now - s->persisted_seen_ms >= idle / 3) {
    /*
     * Rows older than the idle timeout are pruned below (on every host):
     * refresh in time. A third, with sweeps a quarter apart, leaves the row
     * at most 7/12 of the timeout old, the rest for a late sweep or write.
     */
    writer_session_touch(w->writer, s->id, s->last_seen_ms);
    s->persisted_seen_ms = s->last_seen_ms;
  }
}

static void worker_sweep_job(void *arg) {
  worker_t *w = arg;
  if (w->closing) return;
  int64_t now = store_now_ms();
  int64_t idle = (int64_t)w->cfg->idle_timeout_ms;
  sweep_ctx ctx = {w, now, 0};
  session_registry_foreach(&w->sessions, worker_sweep_session, &ctx);
  size_t evicted = ctx.evicted;
  subs_update_active(w); /* streams that ended since */
  limits_sweep(&w->limits, (int64_t)uv_now(w->loop));
  if (evicted > 0) {
    char a[32];
    snprintf(a, sizeof(a), "%zu", evicted);
    log_info("idle sessions ended", "live", a);
  }
  /*
   * Rows of sessions gone idle (also of processes that died), and retention
   * (one worker, slot 0, applies it for all: one writer, not N), after the
   * touches above, on the writer.
   */
  bool retain = now - w->last_audit_prune_ms >= 60000 && (w->n_slots == 0 || w->slot == 0);
  if (retain) w->last_audit_prune_ms = now;
  writer_sweep(w->writer, now - idle, w->slot, w->n_slots, retain, w->cfg->audit_retain_rows,
               w->cfg->audit_retain_ms, now);
}

/* Sessions leave the registry: a job on the lane, so that none goes while a job holds it. */
static void worker_sweep(uv_timer_t *t) {
  worker_t *w = t->data;
  lane_post(&w->lane, &w->sweep_task);
}

static void worker_keepalive(uv_timer_t *t) {
  worker_t *w = t->data;
  session_registry_keepalive(&w->sessions);
  listen_keepalive(w);
  wait_heartbeat(w);
}

/*
 * Once a second with authentication on: picks up a changed key file (a
 * request would too) and ends the streams of sessions whose credential was
 * revoked or has expired. The session itself stays: its owner may come
 * back with a working credential.
 */
static void worker_auth_check(void *arg) {
  worker_t *w = arg;
  auth_reload(&w->auth, false);
  int64_t now = store_now_ms();
  for (session_t *s = w->sessions.streams, *next; s != NULL; s = next) {
    next = s->stream_next;
    auth_principal p = {.expires_ms = s->credential_expires_ms};
    snprintf(p.id, sizeof(p.id), "%s", s->principal);
    memcpy(p.credential, s->credential, sizeof(p.credential));
    if (!auth_still_valid(&w->auth, &p, now)) {
      log_info("stream ended: its credential no longer works", "session", s->id, "principal",
               s->principal);
      session_stream_close(s);
    }
  }
  listen_check_credentials(w, now);
}

/* Ends streams, so not while a lane job holds state: skipped then (the next second checks). */
static void worker_auth_tick(uv_timer_t *t) {
  (void)lane_try(&((worker_t *)t->data)->lane, worker_auth_check, t->data);
}

/* Each loop turn, before the poll: the key file is looked at again by the turn's first key. */
static void worker_auth_turn(uv_prepare_t *h) {
  worker_t *w = h->data;
  w->auth.keys_checked = false;
}

/* SIGHUP: re-read the API key file now. */
static void worker_on_sighup(uv_signal_t *h, int signum) {
  worker_t *w = h->data;
  auth_reload(&w->auth, true);
  worker_auth_tick(&w->auth_timer);
}

/* Lifecycle ---------------------------------------------------------------------- */

int worker_init(worker_t *w, uv_loop_t *loop, const config_t *cfg, unsigned slot, char *err,
                size_t errlen) {
  memset(w, 0, sizeof(*w));
  w->loop = loop;
  w->cfg = cfg;
  w->slot = slot;
  w->started_ms = store_now_ms();
  unsigned char tag[8];
  if (session_id_random(tag, sizeof(tag)) != 0) {
    snprintf(err, errlen, "no random bytes for the worker's origin");
    return -EIO;
  }
  w->origin[0] = 'w';
  for (size_t i = 0; i < sizeof(tag); i++) snprintf(w->origin + 1 + 2 * i, 3, "%02x", tag[i]);
  int rc = store_open(cfg->db_path, cfg->schema_path, &w->store, err, errlen);
  if (rc != 0) return rc;
  /* SQLite reads a local file and never waits on the network: no lane. */
  lane_init(&w->lane, loop, strcmp(store_backend_name(cfg->db_path), "sqlite") != 0);
  rc = auth_init(&w->auth, w, worker_dispatch, err, errlen);
  if (rc == 0) rc = writer_start(w, &w->writer, err, errlen);
  if (rc == 0 && w->lane.enabled && cfg->db_readers > 0)
    rc = reader_start(w, cfg->db_readers, &w->reader, err, errlen);
  else if (rc == 0 && !w->lane.enabled)
    rc = reader_start_loop(w, &w->reader, err, errlen);
  if (rc != 0) {
    auth_finish(&w->auth); /* (a writer started stays: the process ends) */
    store_close(w->store);
    w->store = NULL;
    return rc;
  }
  /* The loop's connection never waits for a lock: its writes (triggers too) are the writer's. */
  store_set_busy_timeout(w->store, 0);
  store_leave_triggers(w->store);
  limits_init(&w->limits, w);
  session_registry_init(&w->sessions, cfg->sse_retry_ms, NULL, NULL);
  strmap_init(&w->ending);
  http_server_options opts = {
      .max_header = cfg->max_header,
      .max_body = cfg->max_body,
      .header_timeout_ms = cfg->header_timeout_ms,
      .keepalive_idle_ms = 5 * 60 * 1000,
      .max_stream_queue = cfg->max_stream_queue,
      /* With workers, each takes its share of the total (the master spreads connections). */
      .max_connections = cfg->max_connections == 0
                             ? 0
                             : (cfg->max_connections + (cfg->workers > 0 ? cfg->workers : 1) - 1) /
                                   (cfg->workers > 0 ? cfg->workers : 1),
      .max_per_address = cfg->max_connections_per_address,
      .on_answered = worker_on_answered,
  };
  w->http = http_server_create(loop, &opts, worker_on_request, w);
  subs_init(w);
  w->last_audit_prune_ms = store_now_ms() - 60000; /* first sweep applies retention */

  uint64_t sweep_ms = cfg->idle_timeout_ms / 4;
  if (sweep_ms > 60000) sweep_ms = 60000;
  if (sweep_ms < 100) sweep_ms = 100;
  uv_timer_init(loop, &w->sweep_timer);
  w->sweep_timer.data = w;
  w->sweep_task = (lane_task){worker_sweep_job, w, false};
  uv_timer_start(&w->sweep_timer, worker_sweep, sweep_ms, sweep_ms);
  uv_timer_init(loop, &w->keepalive_timer);
  w->keepalive_timer.data = w;
  uv_timer_start(&w->keepalive_timer, worker_keepalive, cfg->keepalive_ms, cfg->keepalive_ms);
  uv_timer_init(loop, &w->auth_timer);
  w->auth_timer.data = w;
  uv_signal_init(loop, &w->sighup);
  w->sighup.data = w;
  uv_signal_start(&w->sighup, worker_on_sighup, SIGHUP);
  uv_prepare_init(loop, &w->auth_turn);
  w->auth_turn.data = w;
  forward_init(w);
  if (w->auth.enabled) {
    uv_timer_start(&w->auth_timer, worker_auth_tick, 1000, 1000);
    uv_prepare_start(&w->auth_turn, worker_auth_turn);
    uv_unref((uv_handle_t *)&w->auth_turn);
  }
  if (w->lane.enabled) {
    /* From here on the store's waits park the lane's job instead of the loop. */
    store_waiter waiter = {lane_wait_fd, lane_may_use, &w->lane};
    store_set_waiter(w->store, &waiter);
  }
  return 0;
}

int worker_listen(worker_t *w) {
  return http_server_listen(w->http, w->cfg->listen_host, w->cfg->listen_port);
}

/* Drain ------------------------------------------------------------------------- */

static void worker_drain_end(worker_t *w) {
  size_t left = http_server_connections(w->http);
  if (left > 0) {
    char n[32];
    snprintf(n, sizeof(n), "%zu", left);
    log_warn("drain timeout: closing the connections left", "connections", n);
  }
  void (*done)(worker_t *) = w->drain_done;
  w->drain_done = NULL;
  worker_shutdown(w);
  if (done != NULL) done(w);
}

static void worker_drain_check(void *arg) {
  worker_t *w = arg;
  /* A wait_and_read that arrived on a connection still in flight: answer it too. */
  if (w->waiters != NULL) wait_finish_all(w);
  if (http_server_connections(w->http) == 0 || uv_now(w->loop) >= w->drain_deadline)
    worker_drain_end(w);
}

/* Answers waiters, which read: not while a lane job runs (the next tick, 20 ms later). */
static void worker_drain_tick(uv_timer_t *t) {
  (void)lane_try(&((worker_t *)t->data)->lane, worker_drain_check, t->data);
}

/* A drain or a shutdown asked for while a lane job waits for the database: after it. */
typedef struct stop_job {
  worker_t *w;
  uint64_t timeout_ms;
  void (*done)(worker_t *w);
  bool drain;
} stop_job;

static void worker_stop_job(void *arg) {
  stop_job j = *(stop_job *)arg;
  free(arg);
  if (j.drain)
    worker_drain(j.w, j.timeout_ms, j.done);
  else
    worker_shutdown(j.w);
}

static bool worker_stop_later(worker_t *w, bool drain, uint64_t timeout_ms,
                              void (*done)(worker_t *w)) {
  if (!lane_busy(&w->lane)) return false;
  stop_job *j = mem_alloc(sizeof(*j));
  *j = (stop_job){w, timeout_ms, done, drain};
  lane_run(&w->lane, worker_stop_job, j);
  return true;
}

void worker_drain(worker_t *w, uint64_t timeout_ms, void (*done)(worker_t *w)) {
  if (w->closing || w->draining || worker_stop_later(w, true, timeout_ms, done)) return;
  w->draining = true;
  w->drain_done = done;
  w->drain_deadline = uv_now(w->loop) + timeout_ms;
  http_server_drain(w->http);
  subs_flush_all_held(w); /* held updates go out before the streams end */
  char retry[32];
  int n = snprintf(retry, sizeof(retry), "retry: %u\n\n", w->cfg->sse_retry_ms);
  while (w->sessions.streams != NULL) {
    session_t *s = w->sessions.streams;
    if (http_stream_write(s->stream, retry, (size_t)n) != 0) {
      /* the stream is closing anyway */
    }
    session_stream_close(s);
  }
  listen_end_all(w); /* each with its request's result: the client knows it ended on purpose */
  wait_finish_all(w);
  confirm_finish_all(w); /* nothing changed: the client retries elsewhere */
  uv_timer_init(w->loop, &w->drain_timer);
  w->drain_timer.data = w;
  uv_timer_start(&w->drain_timer, worker_drain_tick, 0, 20);
}

void worker_shutdown(worker_t *w) {
  if (w->closing || worker_stop_later(w, false, 0, NULL)) return;
  w->closing = true;
  if (w->draining) {
    uv_timer_stop(&w->drain_timer);
    uv_close((uv_handle_t *)&w->drain_timer, NULL);
  }
  /* Streams end first so their close callbacks find their sessions alive. */
  while (w->sessions.streams != NULL) session_stream_close(w->sessions.streams);
  listen_close_all(w);
  confirm_finish_all(w);
  subs_close(w);
  uv_timer_stop(&w->sweep_timer);
  uv_timer_stop(&w->keepalive_timer);
  uv_close((uv_handle_t *)&w->sweep_timer, NULL);
  uv_close((uv_handle_t *)&w->keepalive_timer, NULL);
  uv_timer_stop(&w->auth_timer);
  uv_close((uv_handle_t *)&w->auth_timer, NULL);
  uv_close((uv_handle_t *)&w->auth_turn, NULL);
  forward_close(w);       /* writes sent to the write home: made here, once (forward.h) */
  writer_stop(w->writer); /* queued writes finish (or fail at their deadline) and are answered */
  reader_stop(w->reader); /* and so do queued reads */
  uv_close((uv_handle_t *)&w->sighup, NULL);
  http_server_close(w->http, NULL, NULL);
}

static void worker_drop_subs(session_t *s, void *data) {
  subs_session_drop(data, s);
}

void worker_finish(worker_t *w) {
  http_server_destroy(w->http);
  w->http = NULL;
  session_registry_foreach(&w->sessions, worker_drop_subs, w);
  session_registry_finish(&w->sessions);
  strmap_finish(&w->ending); /* after writer_stop: every deletion has been answered */
  subs_finish(w);
  forward_finish(w);
  store_close(w->store);
  w->store = NULL;
  lane_finish(&w->lane);
  writer_destroy(w->writer);
  w->writer = NULL;
  reader_destroy(w->reader);
  w->reader = NULL;
  auth_finish(&w->auth);
  limits_finish(&w->limits);
  frame_pool_drain(); /* every frame is back: sessions, rings and streams are gone */
}
