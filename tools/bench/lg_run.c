/*
 * The machinery of a load-generator run (see lg_run.h): sessions set up
 * over LG_SETUP_SLOTS keep-alive connections, their GET streams read and
 * every update accounted for in the receipt bitmap, the REST writers, the
 * forked SQLite writer, read connections, and the measured interval.
 * Nothing here blocks the loop; every peer-sized input is bounded by the
 * client (lg_client.c); failures end the run with an error, never a number.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lg_run.h"

/* ---- failure and small helpers ---------------------------------------------- */

void lg_fail(lg_t *lg, const char *fmt, ...) {
  lg->n_errors++;
  if (!lg->failed) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lg->error, sizeof(lg->error), fmt, ap);
    va_end(ap);
    lg->failed = true;
    fprintf(stderr, "loadgen: %s\n", lg->error);
  }
  lg_finish(lg);
}

void lg_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("loadgen: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

double lg_secs(uint64_t ns) {
  return (double)ns / 1e9;
}

static void lg_sample_cpu(lg_t *lg, lg_proc_sample *out, double *self, lg_proc_sample *store) {
  *self = lg_proc_self_cpu();
  if (lg->o.server_pid <= 0 || lg_proc_sample_tree(lg->o.server_pid, out) != 0) {
    memset(out, 0, sizeof(*out));
    lg->have_cpu = false;
  }
  if (lg->o.store_pid <= 0 || lg_proc_sample_tree(lg->o.store_pid, store) != 0) {
    memset(store, 0, sizeof(*store));
    lg->have_store_cpu = false;
  }
}

void lg_measure_start(lg_t *lg) {
  lg->have_cpu = lg->o.server_pid > 0;
  lg->have_store_cpu = lg->o.store_pid > 0;
  lg_sample_cpu(lg, &lg->cpu0, &lg->self_cpu0, &lg->store0);
  lg->t_start_ns = lg_now_ns();
}

void lg_measure_end(lg_t *lg) {
  lg->t_end_ns = lg_now_ns();
  lg_sample_cpu(lg, &lg->cpu1, &lg->self_cpu1, &lg->store1);
}

double lg_server_cpu(const lg_t *lg) {
  return lg->have_cpu ? lg->cpu1.cpu_s - lg->cpu0.cpu_s : 0;
}

/* ---- the shared commit-time mapping -------------------------------------------- */

/* Anonymous and shared with a forked writer, or the kernel ceiling's file of release times. */
int lg_commit_times_map(lg_t *lg, uint64_t n) {
  lg->t_commit_len = (size_t)(n ? n : 1) * sizeof(uint64_t);
  int fd = -1;
  if (lg->o.commit_times != NULL) {
    fd = open(lg->o.commit_times, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < lg->t_commit_len) {
      fprintf(stderr, "bench_loadgen: %s: not a file of %llu commit times\n", lg->o.commit_times,
              (unsigned long long)n);
      if (fd >= 0) close(fd);
      return -1;
    }
  }
  void *p = fd >= 0 ? mmap(NULL, lg->t_commit_len, PROT_READ, MAP_SHARED, fd, 0)
                    : mmap(NULL, lg->t_commit_len, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (fd >= 0) close(fd);
  if (p == MAP_FAILED) return -1;
  lg->t_commit = p;
  return 0;
}

/* ---- bitmaps --------------------------------------------------------------------- */

/* Sets (s, n, sub); false when it was already set. */
bool lg_seen_set(lg_t *lg, const lg_session *s, uint64_t n, unsigned sub) {
  uint64_t bit = n * lg->o.subs + sub;
  uint64_t *w = &lg->seen[(uint64_t)s->index * lg->seen_words + bit / 64];
  uint64_t m = (uint64_t)1 << (bit % 64);
  if (*w & m) return false;
  *w |= m;
  return true;
}

int lg_seen_alloc(lg_t *lg, uint64_t events) {
  uint64_t words = (events * lg->o.subs + 63) / 64;
  if (words == 0) words = 1;
  if (words * 8 * (lg->n_sessions ? lg->n_sessions : 1) > LG_MAX_BITMAP_BYTES) return -ENOMEM;
  free(lg->seen);
  lg->seen_words = words;
  lg->seen_events = events;
  lg->seen = lg_calloc((size_t)(words * (lg->n_sessions ? lg->n_sessions : 1)), sizeof(uint64_t));
  return 0;
}

/* ---- requests -------------------------------------------------------------------- */

/* A session's first two messages: the client's (2025) initialize, and its notification. */
static const char lg_initialize_body[] =
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
    "\"" LG_PROTOCOL
    "\",\"capabilities\":{},\"clientInfo\":{\"name\":\"mcpsub-bench\",\"version\":\"1\"}}}";
static const char lg_initialized_body[] =
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";

static int lg_post(lg_t *lg, lg_conn *c, const char *sid, const char *body) {
  char req[LG_REQ_MAX];
  int n = snprintf(req, sizeof(req),
                   "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                   "Accept: application/json, text/event-stream\r\n%s%s%s%s" LG_AUTH_FMT
                   "Content-Length: %zu\r\n\r\n%s",
                   lg->o.port, sid ? "MCP-Protocol-Version: " LG_PROTOCOL "\r\n" : "",
                   sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "",
                   LG_AUTH_ARGS(&lg->o), strlen(body), body);
  if (n < 0 || (size_t)n >= sizeof(req)) return -E2BIG;
  return lg_conn_send(c, req, (size_t)n);
}

int lg_get_stream(lg_t *lg, lg_conn *c, const lg_session *s, const char *last_event_id) {
  char req[LG_REQ_MAX];
  int n;
  if (lg->o.ceiling) {
    n = snprintf(req, sizeof(req),
                 "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\n\r\n",
                 lg->o.port);
  } else if (lg->o.listen) {
    /* 2026-07-28: the stream is the answer to subscriptions/listen; the envelope in _meta. */
    char body[LG_REQ_MAX / 2], second[LG_REQ_MAX / 4] = "";
    if (lg->o.both) /* --both: its own filtered URI, matching every row */
      snprintf(second, sizeof(second), ",\"%s?v=ne=y%u\"", lg->coll_uri, s->index);
    else if (lg->o.subs > 1)
      snprintf(second, sizeof(second), ",\"%s\"", lg->rec_uri);
    int blen = snprintf(
        body, sizeof(body),
        "{\"jsonrpc\":\"2.0\",\"id\":%u,\"method\":\"subscriptions/listen\",\"params\":{"
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"" LG_PROTOCOL_MODERN "\","
        "\"io.modelcontextprotocol/clientCapabilities\":{}},"
        "\"notifications\":{\"resourceSubscriptions\":[\"%s\"%s]}}}",
        s->index, lg->coll_uri, second);
    if (blen < 0 || (size_t)blen >= sizeof(body)) return -E2BIG;
    n = snprintf(req, sizeof(req),
                 "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                 "Accept: application/json, text/event-stream\r\n"
                 "MCP-Protocol-Version: " LG_PROTOCOL_MODERN "\r\n"
                 "Mcp-Method: subscriptions/listen\r\n" LG_AUTH_FMT "Content-Length: %d\r\n\r\n%s",
                 lg->o.port, LG_AUTH_ARGS(&lg->o), blen, body);
  } else {
    n = snprintf(
        req, sizeof(req),
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: text/event-stream\r\n"
        "MCP-Protocol-Version: " LG_PROTOCOL "\r\nMcp-Session-Id: %s\r\n%s%s%s" LG_AUTH_FMT "\r\n",
        lg->o.port, s->id, last_event_id ? "Last-Event-ID: " : "",
        last_event_id ? last_event_id : "", last_event_id ? "\r\n" : "", LG_AUTH_ARGS(&lg->o));
  }
  if (n < 0 || (size_t)n >= sizeof(req)) return -E2BIG;
  return lg_conn_send(c, req, (size_t)n);
}

/* ---- SSE events ------------------------------------------------------------------ */

/* The string value of "name":"..." in data, or NULL. */
static const char *json_str(const char *data, size_t len, const char *name, size_t *vlen) {
  const char *p = memmem(data, len, name, strlen(name));
  if (p == NULL) return NULL;
  p += strlen(name);
  const char *end = memchr(p, '"', (size_t)(data + len - p));
  if (end == NULL) return NULL;
  *vlen = (size_t)(end - p);
  return p;
}

static const char updated_method[] = "notifications/resources/updated";

/* Parses an update notification; 1 when it is one, 0 when it is another message, -1 when malformed.
 */
static int lg_parse_update(lg_t *lg, const lg_sse_event *ev, lg_update *u) {
  if (memmem(ev->data, ev->data_len, updated_method, sizeof(updated_method) - 1) == NULL) return 0;
  size_t ulen = 0, slen = 0; /* set with their pointers (gcc -O3 cannot tell) */
  const char *uri = json_str(ev->data, ev->data_len, "\"uri\":\"", &ulen);
  const char *sub = json_str(ev->data, ev->data_len, "\"subscribedUri\":\"", &slen);
  if (uri == NULL || sub == NULL) return -1;
  memset(u, 0, sizeof(*u));
  size_t clen = strlen(lg->coll_uri);
  /* The collection, or (--filtered, --mixed) one of its filtered URIs. */
  bool coll = slen >= clen && memcmp(sub, lg->coll_uri, clen) == 0 &&
              (slen == clen || ((lg->o.filtered || lg->o.mixed) && sub[clen] == '?'));
  u->sub = coll ? 0 : 1;
  /* A collection subscription told to re-read itself (resumption could not be exact). */
  u->reread = u->sub == 0 && ulen == slen && memcmp(uri, sub, ulen) == 0;
  if (u->reread) return 1;
  const char *slash = NULL;
  for (const char *p = uri; p < uri + ulen; p++)
    if (*p == '/') slash = p;
  if (slash == NULL || slash + 2 > uri + ulen) return -1;
  u->letter = slash[1];
  uint64_t n = 0;
  const char *p = slash + 2;
  if (p == uri + ulen) return -1;
  for (; p < uri + ulen; p++) {
    if (*p < '0' || *p > '9' || n > UINT64_MAX / 10 - 10) return -1;
    n = n * 10 + (uint64_t)(*p - '0');
  }
  u->n = n;
  return 1;
}

static void stream_on_open(lg_conn *c, int status, void *data);
static void stream_on_event(lg_conn *c, const lg_sse_event *ev, void *data);
static void stream_on_error(lg_conn *c, int error, void *data);

const lg_conn_ops lg_stream_ops = {
    .on_stream_open = stream_on_open,
    .on_event = stream_on_event,
    .on_error = stream_on_error,
};

static void lg_check_ready(lg_t *lg);
static void slot_next(lg_slot *sl);

static void stream_on_open(lg_conn *c, int status, void *data) {
  lg_session *s = data;
  lg_t *lg = s->lg;
  if (lg->finishing) return;
  if (status != 200) {
    lg_fail(lg, "session %u: GET stream answered HTTP %d", s->index, status);
    return;
  }
  if (s->state != SESS_SETUP) return; /* a resumed stream is caught up at its priming event */
  s->state = SESS_READY;
  lg->ready++;
  lg_slot *sl = s->setup_slot;
  s->setup_slot = NULL;
  if (sl != NULL) slot_next(sl);
  lg_check_ready(lg);
}

static void stream_on_event(lg_conn *c, const lg_sse_event *ev, void *data) {
  lg_session *s = data;
  lg_t *lg = s->lg;
  if (lg->finishing) return;
  if (ev->id != NULL && ev->id_len < sizeof(s->last_id)) {
    memcpy(s->last_id, ev->id, ev->id_len);
    s->last_id[ev->id_len] = '\0';
  }
  if (ev->data == NULL || ev->data_len == 0) { /* a priming event */
    if (lg->sc->on_prime != NULL) lg->sc->on_prime(lg, s);
    return;
  }
  lg_update u;
  int r = lg_parse_update(lg, ev, &u);
  if (r < 0) {
    lg_fail(lg, "session %u: malformed update: %.*s", s->index,
            (int)(ev->data_len > 300 ? 300 : ev->data_len), ev->data);
    return;
  }
  if (r == 0) return; /* list_changed, log messages: not what is measured */
  /* A resumed stream sends what it recovered from the audit log before its priming event. */
  u.recovered = s->state == SESS_RESUMING;
  lg->sc->on_update(lg, s, &u);
}

static void stream_on_error(lg_conn *c, int error, void *data) {
  lg_session *s = data;
  lg_t *lg = s->lg;
  if (s->stream == c) s->stream = NULL;
  lg_conn_close(c, false);
  if (lg->finishing) return;
  if (lg->o.ceiling && lg->expected > 0 && lg->received == lg->expected)
    return; /* the ceiling hung up */
  lg_fail(lg, "session %u: stream lost: %s", s->index, uv_strerror(error));
}

/* ---- session setup: LG_SETUP_SLOTS chains over keep-alive connections ----------- */

static void ctl_on_response(lg_conn *c, const lg_response *r, void *data);
static void ctl_on_error(lg_conn *c, int error, void *data) {
  lg_slot *sl = data;
  lg_fail(sl->lg, "setup connection failed: %s", uv_strerror(error));
}

static const lg_conn_ops ctl_ops = {.on_response = ctl_on_response, .on_error = ctl_on_error};

static unsigned lg_setup_subs(const lg_t *lg) {
  return lg->sc->streams ? lg->o.subs : 0;
}

static void slot_step(lg_slot *sl) {
  lg_t *lg = sl->lg;
  lg_session *s = sl->s;
  bool mixed = s->index < lg->o.mixed, beside = s->index < lg->o.beside;
  unsigned subs = lg_setup_subs(lg) + ((mixed || beside) && lg->sc->streams ? 1 : 0);
  int r = 0;
  char body[512];
  if (sl->step == 0) {
    r = lg_post(lg, sl->conn, NULL, lg_initialize_body);
  } else if (sl->step == 1) {
    r = lg_post(lg, sl->conn, s->id, lg_initialized_body);
  } else if (sl->step < 2 + subs) {
    char filter[32] = "";
    if (sl->step == 2 && (lg->o.filtered || mixed))
      snprintf(filter, sizeof(filter), "?v=ne=y%u", s->index);
    else if (sl->step == 3 && lg->o.both)
      snprintf(filter, sizeof(filter), "?v=ne=y%u", s->index);
    else if (sl->step == 3 && (mixed || beside))
      snprintf(filter, sizeof(filter), "/m%u", s->index);
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":%u,\"method\":\"resources/"
             "subscribe\",\"params\":{\"uri\":\"%s%s\"}}",
             sl->step, sl->step == 2 || mixed || beside || lg->o.both ? lg->coll_uri : lg->rec_uri,
             filter);
    r = lg_post(lg, sl->conn, s->id, body);
  } else if (lg->sc->streams) {
    s->stream = lg_conn_create(lg->cl, true, s->index, &lg_stream_ops, s);
    s->setup_slot = sl;
    r = lg_get_stream(lg, s->stream, s, NULL);
  } else {
    s->state = SESS_READY;
    lg->ready++;
    slot_next(sl);
    lg_check_ready(lg);
    return;
  }
  if (r != 0) lg_fail(lg, "session %u: cannot send setup request: %s", s->index, strerror(-r));
}

static void ctl_on_response(lg_conn *c, const lg_response *r, void *data) {
  lg_slot *sl = data;
  lg_t *lg = sl->lg;
  lg_session *s = sl->s;
  if (lg->finishing || s == NULL) return;
  bool ok;
  if (sl->step == 0) {
    ok = r->status == 200 && r->session_id != NULL && strlen(r->session_id) < sizeof(s->id);
    if (ok) snprintf(s->id, sizeof(s->id), "%s", r->session_id);
  } else if (sl->step == 1) {
    ok = r->status == 202 || r->status == 200;
  } else {
    ok = r->status == 200 && strstr(r->body, "\"error\"") == NULL;
  }
  if (!ok) {
    lg_fail(lg, "session %u: setup step %u answered HTTP %d: %.300s", s->index, sl->step, r->status,
            r->body);
    return;
  }
  sl->step++;
  slot_step(sl);
}

static void slot_next(lg_slot *sl) {
  lg_t *lg = sl->lg;
  if (lg->finishing || lg->next_setup >= lg->n_sessions) {
    sl->s = NULL;
    return;
  }
  lg_session *s = &lg->sessions[lg->next_setup++];
  s->state = SESS_SETUP;
  sl->s = s;
  /* The ceiling and listen streams need no session: straight to the stream. */
  sl->step = lg->o.ceiling || lg->o.listen ? 2 + lg_setup_subs(lg) : 0;
  slot_step(sl);
}

static void lg_check_ready(lg_t *lg) {
  if (lg->finishing || lg->ready != lg->n_sessions || lg->t_setup_ns != 0) return;
  lg->t_setup_ns = lg_now_ns();
  lg->sc->start(lg);
}

void lg_setup_begin(lg_t *lg) {
  lg->n_slots = lg->n_sessions < LG_SETUP_SLOTS ? lg->n_sessions : LG_SETUP_SLOTS;
  for (uint32_t i = 0; i < lg->n_slots; i++) {
    lg_slot *sl = &lg->slots[i];
    sl->lg = lg;
    sl->conn = lg->o.ceiling ? NULL : lg_conn_create(lg->cl, false, 0, &ctl_ops, sl);
  }
  for (uint32_t i = 0; i < lg->n_slots && !lg->finishing; i++) slot_next(&lg->slots[i]);
  lg_check_ready(lg); /* no sessions at all */
}

/* ---- the REST writer ------------------------------------------------------------ */

static void writer_on_response(lg_conn *c, const lg_response *r, void *data);
static void writer_on_error(lg_conn *c, int error, void *data) {
  lg_wslot *ws = data;
  lg_fail(ws->lg, "writer connection failed: %s", uv_strerror(error));
}

static const lg_conn_ops writer_ops = {.on_response = writer_on_response,
                                       .on_error = writer_on_error};

/*
 * Opens writer connections up to n. A REST writer is ready at once; a
 * --writer tool connection first opens a session of its own (initialize,
 * notifications/initialized: not counted as writes), and lg->n_wready says
 * how many are ready.
 */
void lg_writer_open(lg_t *lg, uint32_t n) {
  if (n > LG_MAX_WRITERS) n = LG_MAX_WRITERS;
  for (uint32_t i = lg->n_wconn; i < n; i++) {
    lg_wslot *ws = &lg->wslots[i];
    *ws = (lg_wslot){.lg = lg, .state = lg->o.tool_writer ? WS_INITIALIZE : WS_READY};
    ws->conn = lg_conn_create(lg->cl, false, 0, &writer_ops, ws);
    if (ws->state == WS_READY) {
      lg->n_wready++;
      continue;
    }
    ws->busy = true;
    int r = lg_post(lg, ws->conn, NULL, lg_initialize_body);
    if (r != 0) lg_fail(lg, "writer: cannot send: %s", strerror(-r));
  }
  if (n > lg->n_wconn) lg->n_wconn = n;
}

static bool writer_may_send(lg_t *lg, uint64_t now) {
  lg_writer *w = &lg->w;
  if (w->mode == WR_OFF || w->next >= w->total) return false;
  switch (w->mode) {
  case WR_FLOW: return w->next - w->low < w->window;
  case WR_RATE:
    if (w->stop_ns != 0 && now >= w->stop_ns) return false;
    return now >= w->rate_start_ns + (uint64_t)((double)(w->next - w->rate_base) * 1e9 / w->rate);
  case WR_LOOP: return now < w->stop_ns;
  default: return false;
  }
}

static void writer_send(lg_t *lg, lg_wslot *ws, uint64_t now) {
  lg_writer *w = &lg->w;
  uint64_t n = w->next++;
  uint64_t key = w->key_mod ? n % w->key_mod : n;
  if (w->mode == WR_RATE) {
    uint64_t slot = w->rate_start_ns + (uint64_t)((double)(n - w->rate_base) * 1e9 / w->rate);
    if (now > slot + 1000000) w->late++;
  }
  char body[96], req[LG_REQ_MAX];
  int blen = snprintf(body, sizeof(body), "{\"t\":%llu,\"v\":\"x\"}", (unsigned long long)now);
  int len = 0;
  if (!lg->o.tool_writer)
    len = snprintf(req, sizeof(req),
                   "PUT /%s/%c%llu HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                   "application/json\r\n" LG_AUTH_FMT "Content-Length: %d\r\n\r\n%s",
                   lg->o.table, w->letter, (unsigned long long)key, lg->o.port,
                   LG_AUTH_ARGS(&lg->o), blen, body);
  else /* the same record through the put_record tool, on the connection's session */
    snprintf(req, sizeof(req),
             "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"method\":\"tools/call\",\"params\":{\"name\":"
             "\"put_record\",\"arguments\":{\"table\":\"%s\",\"key\":\"%c%llu\",\"record\":%s}}}",
             (unsigned long long)n + 2, lg->o.table, w->letter, (unsigned long long)key, body);
  if (n < lg->t_commit_len / sizeof(uint64_t) && w->letter == 'f')
    __atomic_store_n(&lg->t_commit[n], now, __ATOMIC_RELEASE);
  if (w->t_first_ns == 0) w->t_first_ns = now;
  ws->n = n;
  ws->busy = true;
  int r = lg->o.tool_writer ? lg_post(lg, ws->conn, ws->sid, req)
                            : lg_conn_send(ws->conn, req, (size_t)len);
  if (r != 0) lg_fail(lg, "writer: cannot send: %s", strerror(-r));
}

void lg_writer_pump(lg_t *lg) {
  if (lg->finishing) return;
  uint64_t now = lg_now_ns();
  for (uint32_t i = 0; i < lg->n_wconn && !lg->finishing; i++) {
    if (lg->wslots[i].busy || lg->wslots[i].state != WS_READY) continue;
    if (!writer_may_send(lg, now)) break;
    writer_send(lg, &lg->wslots[i], now);
  }
}

bool lg_writer_idle(const lg_t *lg) {
  for (uint32_t i = 0; i < lg->n_wconn; i++)
    if (lg->wslots[i].busy) return false;
  return true;
}

static void writer_on_response(lg_conn *c, const lg_response *r, void *data) {
  lg_wslot *ws = data;
  lg_t *lg = ws->lg;
  ws->busy = false;
  if (lg->finishing) return;
  if (ws->state == WS_INITIALIZE) {
    if (r->status != 200 || r->session_id == NULL || strlen(r->session_id) >= sizeof(ws->sid)) {
      lg_fail(lg, "writer: initialize answered HTTP %d: %.300s", r->status, r->body);
      return;
    }
    snprintf(ws->sid, sizeof(ws->sid), "%s", r->session_id);
    ws->state = WS_INITIALIZED;
    ws->busy = true;
    int rc = lg_post(lg, ws->conn, ws->sid, lg_initialized_body);
    if (rc != 0) lg_fail(lg, "writer: cannot send: %s", strerror(-rc));
    return;
  }
  if (ws->state == WS_INITIALIZED) {
    if (r->status != 202) {
      lg_fail(lg, "writer: notifications/initialized answered HTTP %d", r->status);
      return;
    }
    ws->state = WS_READY;
    lg->n_wready++;
    lg_writer_pump(lg);
    return;
  }
  if (r->status != 200 && r->status != 201) {
    lg_fail(lg, "writer: %s answered HTTP %d: %.300s", lg->o.tool_writer ? "put_record" : "PUT",
            r->status, r->body);
    return;
  }
  if (lg->o.tool_writer &&
      (strstr(r->body, "\"result\"") == NULL || strstr(r->body, "\"isError\":true") != NULL)) {
    lg_fail(lg, "writer: put_record failed: %.300s", r->body);
    return;
  }
  lg->w.acked++;
  lg->w.t_last_ack_ns = lg_now_ns();
  if (lg->on_ack != NULL) lg->on_ack(lg, ws->n);
  lg_writer_pump(lg);
}

/* FLOW mode: commit n reached one more receiver. */
void lg_writer_delivered(lg_t *lg, uint64_t n) {
  lg_writer *w = &lg->w;
  if (w->mode != WR_FLOW || w->delivered == NULL || n >= w->total) return;
  w->delivered[n]++;
  bool moved = false;
  while (w->low < w->next && w->delivered[w->low] >= w->receivers) {
    w->low++;
    moved = true;
  }
  if (moved) lg_writer_pump(lg);
}

void lg_writer_start(lg_t *lg, enum writer_mode mode, char letter, uint64_t total) {
  lg_writer *w = &lg->w;
  w->mode = mode;
  w->letter = letter;
  w->total = total;
  w->next = 0;
  w->low = 0;
  w->acked = 0;
  w->key_mod = 0;
  w->stop_ns = 0;
  w->t_first_ns = 0;
}

/* ---- the SQLite writer child ---------------------------------------------------- */

void lg_fork_sql_writer(lg_t *lg, uint64_t count, double rate) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    lg_fail(lg, "fork: %s", strerror(errno));
    return;
  }
  if (pid == 0) {
    /* Nothing of the parent's loop is used here: only this process's own SQLite connection. */
    close_range(3, ~0U, 0);
    lg_sqlwriter_opts so = {lg->o.db_path, lg->o.table,        'f',         count,
                            rate,          lg->o.time_limit_s, lg->t_commit};
    uint64_t written = 0;
    int rc = lg->o.pg_writer ? lg_pgwriter_run(&so, &written) : lg_sqlwriter_run(&so, &written);
    _exit(rc == 0 && written == count ? 0 : 1);
  }
  lg->child = pid;
}

/* Reaps the child when it ended; true once it has. */
bool lg_reap_child(lg_t *lg, bool wait) {
  if (lg->child <= 0) return true;
  int st;
  pid_t r = waitpid(lg->child, &st, wait ? 0 : WNOHANG);
  if (r == lg->child) {
    lg->child = 0;
    if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && !lg->failed)
      lg_fail(lg, "the %s writer failed (status %d)", lg->o.pg_writer ? "PostgreSQL" : "SQLite",
              st);
    return true;
  }
  return false;
}

/* ---- read connections (resources/read over keep-alive) ---------------------------- */

static void reader_on_response(lg_conn *c, const lg_response *r, void *data);
static void reader_on_error(lg_conn *c, int error, void *data) {
  lg_rslot *rs = data;
  lg_fail(rs->lg, "read connection failed: %s", uv_strerror(error));
}

static const lg_conn_ops reader_ops = {.on_response = reader_on_response,
                                       .on_error = reader_on_error};

static void reader_send(lg_t *lg, lg_rslot *rs) {
  char body[512];
  if (lg->subscribing) /* a record URI never subscribed before: each adds one */
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/subscribe\",\"params\":{"
             "\"uri\":\"%s/s%llu\"}}",
             lg->coll_uri, (unsigned long long)lg->sub_next++);
  else
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/read\",\"params\":{"
             "\"uri\":\"%s%s\"}}",
             lg->coll_uri, lg->o.read_uri);
  rs->busy = true;
  /* Connection i reads in session i mod n: the read scenario has one session per worker. */
  int r = lg_post(lg, rs->conn, lg->sessions[(size_t)(rs - lg->rslots) % lg->n_sessions].id, body);
  if (r != 0) lg_fail(lg, "reader: cannot send: %s", strerror(-r));
}

static bool reader_may_send(const lg_t *lg) {
  if (lg->prefill_left > 0) return true; /* not measured yet */
  return lg_now_ns() < lg->w.stop_ns && lg->requests + lg->n_rconn <= lg->o.max_requests;
}

static void reader_on_response(lg_conn *c, const lg_response *r, void *data) {
  lg_rslot *rs = data;
  lg_t *lg = rs->lg;
  rs->busy = false;
  if (lg->finishing) return;
  if (r->status != 200 ||
      strstr(r->body, lg->subscribing ? "\"result\"" : "\"contents\"") == NULL ||
      strstr(r->body, "\"error\"") != NULL) {
    lg_fail(lg, "reader: %s answered HTTP %d: %.300s",
            lg->subscribing ? "resources/subscribe" : "resources/read", r->status, r->body);
    return;
  }
  if (lg->prefill_left > 0) { /* the subscriptions held before measuring */
    if (--lg->prefill_left == 0) {
      lg_measure_start(lg);
      lg->w.stop_ns = lg->t_start_ns + (uint64_t)(lg->o.duration_s * 1e9);
      lg->phase = 1;
    }
  } else {
    lg->requests++;
  }
  if (reader_may_send(lg)) reader_send(lg, rs);
}

void lg_segs_base(lg_t *lg) {
  for (uint32_t i = 0; i < lg->n_sessions; i++)
    lg->sessions[i].segs_base =
        lg->sessions[i].stream ? lg_conn_segs_in(lg->sessions[i].stream) : 0;
}

uint64_t lg_segs_total(const lg_t *lg) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < lg->n_sessions; i++) {
    const lg_session *s = &lg->sessions[i];
    uint64_t now = s->stream ? lg_conn_segs_in(s->stream) : 0;
    if (now > s->segs_base) total += now - s->segs_base;
  }
  return total;
}

void lg_complete(lg_t *lg) {
  lg_measure_end(lg);
  lg->data_segments = lg_segs_total(lg);
  lg_finish(lg);
}

void lg_report_rates(lg_t *lg, FILE *j, uint64_t count, const char *what) {
  double wall = lg_secs(lg->t_end_ns - lg->t_start_ns);
  double cpu = lg_server_cpu(lg);
  fprintf(j, ",\"%s\":%llu,\"wall_s\":%.6f,\"server_cpu_s\":%.3f", what, (unsigned long long)count,
          wall, cpu);
  if (lg->have_cpu) fprintf(j, ",\"server_user_s\":%.3f", lg->cpu1.user_s - lg->cpu0.user_s);
  fprintf(j, ",\"per_wall_s\":%.1f", wall > 0 ? (double)count / wall : 0);
  if (cpu > 0)
    fprintf(j, ",\"per_server_cpu_s\":%.1f", (double)count / cpu);
  else
    fprintf(j, ",\"per_server_cpu_s\":null");
  if (lg->have_store_cpu) { /* the database server's own CPU, and the two together */
    double store = lg->store1.cpu_s - lg->store0.cpu_s;
    fprintf(j, ",\"store_cpu_s\":%.3f,\"store_processes\":%u", store, lg->store1.nprocs);
    if (cpu + store > 0) fprintf(j, ",\"per_total_cpu_s\":%.1f", (double)count / (cpu + store));
  }
}

/* Records commit -> receipt of event n; false (after failing) when n has no commit time. */
bool lg_record_latency(lg_t *lg, lg_hist *h, uint64_t n) {
  uint64_t t0 = n < lg->t_commit_len / sizeof(uint64_t)
                    ? __atomic_load_n(&lg->t_commit[n], __ATOMIC_ACQUIRE)
                    : 0;
  if (t0 == 0) {
    lg_fail(lg, "update for f%llu before its commit was issued", (unsigned long long)n);
    return false;
  }
  uint64_t now = lg_now_ns();
  lg_hist_add(h, now > t0 ? now - t0 : 0);
  return true;
}

void lg_report_hist(FILE *j, const char *prefix, const lg_hist *h) {
  fprintf(j, ",\"%ssamples\":%llu", prefix, (unsigned long long)h->count);
  if (h->count == 0) return;
  fprintf(j,
          ",\"%sp50_us\":%.1f,\"%sp99_us\":%.1f,\"%sp999_us\":%.1f,\"%smax_us\":%.1f,\"%smean_us\":"
          "%.1f",
          prefix, (double)lg_hist_quantile(h, 0.50) / 1e3, prefix,
          (double)lg_hist_quantile(h, 0.99) / 1e3, prefix, (double)lg_hist_quantile(h, 0.999) / 1e3,
          prefix, (double)h->max_ns / 1e3, prefix, (double)h->sum_ns / (double)h->count / 1e3);
}

/* ---- the loop: tick, finish ----------------------------------------------------------- */

void lg_on_tick(uv_timer_t *t) {
  lg_t *lg = t->data;
  if (lg->finishing) return;
  if (lg_now_ns() >= lg->deadline_ns) {
    lg_fail(lg,
            "time limit of %.0f s reached (%llu of %llu updates received, %u of %u sessions ready)",
            lg->o.time_limit_s, (unsigned long long)lg->received, (unsigned long long)lg->expected,
            lg->ready, lg->n_sessions);
    return;
  }
  if (lg->child > 0) (void)lg_reap_child(lg, false);
  if (lg->finishing) return;
  if (lg->w.mode == WR_RATE || lg->w.mode == WR_LOOP) lg_writer_pump(lg);
  if (lg->sc->on_tick != NULL && !lg->finishing) lg->sc->on_tick(lg);
}

/* Stops everything; the loop then ends once every handle is closed. */
void lg_finish(lg_t *lg) {
  if (lg->finishing) return;
  lg->finishing = true;
  lg_client_close_all(lg->cl, true); /* RST: leave no TIME_WAIT behind for the next run */
  if (lg->tick_open) {
    uv_timer_stop(&lg->tick);
    uv_close((uv_handle_t *)&lg->tick, NULL);
    lg->tick_open = false;
  }
}

void lg_readers_start(lg_t *lg, uint32_t n) {
  lg->n_rconn = n > LG_MAX_CONNS ? LG_MAX_CONNS : n;
  for (uint32_t i = 0; i < lg->n_rconn; i++) {
    lg->rslots[i] = (lg_rslot){lg, NULL, false};
    lg->rslots[i].conn = lg_conn_create(lg->cl, false, 0, &reader_ops, &lg->rslots[i]);
  }
  for (uint32_t i = 0; i < lg->n_rconn && !lg->finishing; i++) reader_send(lg, &lg->rslots[i]);
}

bool lg_readers_idle(const lg_t *lg) {
  for (uint32_t i = 0; i < lg->n_rconn; i++)
    if (lg->rslots[i].busy) return false;
  return true;
}
