/*
 * The worker side of the master/worker channel (see worker_ipc.h). All of
 * it runs on the worker's one loop; nothing blocks: sends go through the
 * channel's bounded queue, and a message the worker cannot use is dropped
 * by the channel layer with its fd closed.
 */
#include "worker/worker_ipc.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/ipc.h"
#include "common/log.h"
#include "common/mem.h"
#include "worker/confirm.h"
#include "worker/forward.h"
#include "worker/mcp.h"
#include "worker/subscriptions.h"
#include "worker/worker.h"
#include "worker/worker_ctl.h"

/* A channel of the write home's with another worker (forward.h): the home holds one per slot. */
typedef struct worker_peer {
  ipc_channel_t ch;
  struct worker_ipc *wi;
  unsigned slot; /* the worker at the other end: 0 (the home) on the others' side */
} worker_peer;

typedef struct worker_ipc {
  worker_t w;
  const config_t *cfg;
  ipc_channel_t ch;
  bool ch_open;
  worker_peer **peers; /* n_slots, by the other end's slot; NULL where there is none */
  uv_timer_t stats_timer;
  uv_signal_t sigterm;
  uint64_t adopted; /* CONN messages taken */
  bool draining;
  bool stopped;         /* the handles of this file are closed or closing */
  lane_task stats_task; /* the report reads the log's head from the store: a lane job */
} worker_ipc_t;

static void worker_peer_closed(ipc_channel_t *ch) {
  free(ch->data);
}

/* Closes the channel to the worker of slot, if any. */
static void worker_peer_drop(worker_ipc_t *wi, unsigned slot) {
  worker_peer *p = wi->peers != NULL ? wi->peers[slot] : NULL;
  if (p == NULL) return;
  wi->peers[slot] = NULL;
  ipc_channel_close(&p->ch, worker_peer_closed);
}

static void worker_ipc_send_stats(worker_ipc_t *wi, uint64_t request) {
  if (!wi->ch_open) return;
  ipc_stats st;
  memset(&st, 0, sizeof(st));
  worker_stats_collect(&wi->w, &st.stats);
  st.adopted = wi->adopted;
  st.request = request;
  if (ipc_channel_send(&wi->ch, IPC_STATS, 0, &st, sizeof(st), -1) != 0) {
    /* queue full or master gone: the next report will do */
  }
}

static void worker_ipc_stats_job(void *arg) {
  worker_ipc_t *wi = arg;
  if (!wi->stopped) worker_ipc_send_stats(wi, 0);
}

static void worker_ipc_on_stats_timer(uv_timer_t *t) {
  worker_ipc_t *wi = t->data;
  lane_post(&wi->w.lane, &wi->stats_task);
}

/* Closes what this file added to the loop; the loop then ends once the worker's own handles are
 * closed. */
static void worker_ipc_stop(worker_ipc_t *wi) {
  if (wi->stopped) return;
  wi->stopped = true;
  uv_timer_stop(&wi->stats_timer);
  uv_close((uv_handle_t *)&wi->stats_timer, NULL);
  uv_close((uv_handle_t *)&wi->sigterm, NULL);
  if (wi->ch_open) {
    wi->ch_open = false;
    ipc_channel_close(&wi->ch, NULL);
  }
  for (unsigned i = 0; wi->peers != NULL && i < wi->w.n_slots; i++) worker_peer_drop(wi, i);
}

static const char *worker_ipc_slot(const worker_ipc_t *wi) {
  static char slot[16];
  snprintf(slot, sizeof(slot), "%u", wi->w.slot);
  return slot;
}

static void worker_ipc_drained(worker_t *w) {
  worker_ipc_t *wi = w->ipc;
  log_info("worker stopped", "slot", worker_ipc_slot(wi), "reason", "drained");
  worker_ipc_stop(wi);
}

static void worker_ipc_drain(worker_ipc_t *wi, const char *why) {
  if (wi->draining) return;
  wi->draining = true;
  log_info("worker draining", "slot", worker_ipc_slot(wi), "reason", why);
  worker_drain(&wi->w, wi->cfg->drain_timeout_ms, worker_ipc_drained);
}

/* Commits ---------------------------------------------------------------------------- */

/* Sends a message without an fd to the master: false when it cannot go (channel closed, queue
 * full). */
static bool worker_ipc_send(worker_t *w, uint32_t cmd, const void *payload, size_t len) {
  worker_ipc_t *wi = w->ipc;
  return wi->ch_open && ipc_channel_send(&wi->ch, cmd, 0, payload, len, -1) == 0;
}

static bool worker_ipc_send_peer(worker_t *w, unsigned slot, uint32_t cmd, const void *payload,
                                 size_t len) {
  worker_ipc_t *wi = w->ipc;
  worker_peer *p = wi->peers != NULL && slot < w->n_slots ? wi->peers[slot] : NULL;
  return p != NULL && ipc_channel_send(&p->ch, cmd, 0, payload, len, -1) == 0;
}

/*
 * Once per batch of completions (subs_after_write), at once: the other
 * workers read the commit while this one fans it out to its own streams,
 * not after. The write home tells them on its own channels (one hop, not
 * two through the master): with the answers to the writes they sent, when
 * there are some, or else with IPC_COMMITTED; the master only when a
 * channel is missing.
 */
static void worker_ipc_on_local_commit(worker_t *w) {
  worker_ipc_t *wi = w->ipc;
  if (wi->stopped || w->n_slots < 2) return;
  bool all = wi->peers != NULL && w->slot == 0;
  for (unsigned i = 1; all && i < w->n_slots; i++)
    all = forward_tell(w, i) || worker_ipc_send_peer(w, i, IPC_COMMITTED, NULL, 0);
  if (!all && !worker_ipc_send(w, IPC_COMMITTED, NULL, 0)) {
    /* the others' WAL watchers still see the commit within milliseconds */
  }
}

/* Another worker committed (through the master, or the write home on its channel). */
static void worker_ipc_on_committed(worker_t *w) {
  w->others_wrote_ms = uv_now(w->loop); /* forward.h: they write too */
  if (!w->closing) subs_external_commit(w);
}

/* A cancel this worker's listen streams did not match: the other workers may hold it. */
static void worker_ipc_on_cancel(worker_t *w, const char *principal, const char *id_json) {
  buf_t b;
  buf_init(&b);
  buf_append(&b, principal, strlen(principal) + 1);
  buf_append_str(&b, id_json);
  if (b.len <= 1024 && !worker_ipc_send(w, IPC_CANCEL, b.data, b.len)) {
    /* the client's closing its connection ends the stream too */
  }
  buf_finish(&b);
}

/* A session restored here: the other workers end their live copies of it. */
static void worker_ipc_on_restored(worker_t *w, const char *id) {
  if (!worker_ipc_send(w, IPC_RESTORED, id, strlen(id))) {
    /* the other copy idles out; its stream stays until then */
  }
}

/* An elicitation answer this worker did not ask for: the one that did may be another. */
static void worker_ipc_on_answer(worker_t *w, const char *principal, const char *session,
                                 const cJSON *msg) {
  char *text = cJSON_PrintUnformatted(msg);
  if (text == NULL) abort(); /* cJSON out of memory: mem.h's policy */
  buf_t b;
  buf_init(&b);
  buf_append(&b, principal, strlen(principal) + 1);
  buf_append(&b, session, strlen(session) + 1);
  buf_append_str(&b, text);
  cJSON_free(text);
  if (b.len <= 16384 && !worker_ipc_send(w, IPC_ANSWER, b.data, b.len)) {
    /* lost: the confirmation times out, changing nothing */
  }
  buf_finish(&b);
}

/* Re-routing ------------------------------------------------------------------------- */

static bool worker_ipc_reroute(worker_t *w, http_conn_t *c) {
  worker_ipc_t *wi = w->ipc;
  if (!wi->ch_open || wi->ch.eof || wi->draining) return false;
  buf_t bytes;
  buf_init(&bytes);
  uv_os_sock_t fd;
  int rc = http_conn_detach(c, IPC_MAX_TOTAL, &fd, &bytes);
  if (rc != 0) {
    buf_finish(&bytes);
    return false; /* served here instead */
  }
  rc = ipc_channel_send(&wi->ch, IPC_REROUTE, 0, bytes.data, bytes.len, fd);
  buf_finish(&bytes);
  if (rc != 0) log_warn("cannot hand a connection back to the master", "error", strerror(-rc));
  return true;
}

/* The write home's channels (forward.h) ------------------------------------------------- */

/*
 * Writes, their answers and the home's commits, handled at once: there is
 * a write home only on SQLite, whose workers run no store lane.
 */
static void worker_peer_on_msg(ipc_channel_t *ch, ipc_msg *msg, void *data) {
  worker_peer *p = data;
  worker_t *w = &p->wi->w;
  (void)ch;
  if (msg->cmd == IPC_WRITE && w->slot == 0) {
    forward_run(w, p->slot, msg->payload, msg->len);
  } else if (msg->cmd == IPC_WRITTEN && p->slot == 0) {
    forward_answered(w, msg->payload, msg->len);
    worker_ipc_on_committed(w); /* answers come at the home's commits (forward_tell) */
  } else if (msg->cmd == IPC_COMMITTED && p->slot == 0) {
    worker_ipc_on_committed(w);
  } else {
    if (msg->fd >= 0) close(msg->fd);
    log_warn("ipc: unexpected message from another worker", "cmd", ipc_cmd_name(msg->cmd));
  }
}

static void worker_peer_on_eof(ipc_channel_t *ch, void *data) {
  worker_peer *p = data;
  worker_ipc_t *wi = p->wi;
  (void)ch;
  unsigned slot = p->slot;
  worker_peer_drop(wi, slot);
  /* The home went: what it was sent and did not answer is made here, once. */
  if (slot == 0 && !wi->w.closing) forward_lost(&wi->w);
}

/*
 * IPC_PEER: this worker's end of a channel between the write home and the
 * worker whose "slot generation" the payload holds (stamped on its
 * packets). It replaces the channel it had to the same slot: a new home's,
 * or a new generation's of that worker.
 */
static void worker_ipc_on_peer(worker_ipc_t *wi, ipc_msg *msg) {
  worker_t *w = &wi->w;
  /* "<slot> <generation>", as the master writes them */
  const char *text = msg->payload, *space = memchr(text, ' ', msg->len);
  uint64_t s = 0, g = 0;
  bool parsed = space != NULL && buf_parse_uint(text, (size_t)(space - text), UINT_MAX, &s) &&
                buf_parse_uint(space + 1, msg->len - (size_t)(space + 1 - text), UINT_MAX, &g);
  unsigned slot = (unsigned)s, generation = (unsigned)g;
  bool mine = parsed && slot > 0 && slot < w->n_slots &&
              (w->slot == 0 || (slot == w->slot && generation == w->generation));
  if (!mine || w->closing) {
    if (!mine) log_warn("ipc: malformed channel to another worker");
    close(msg->fd);
    return;
  }
  unsigned at = w->slot == 0 ? slot : 0; /* the other end's slot */
  if (wi->peers == NULL) wi->peers = mem_calloc(w->n_slots, sizeof(worker_peer *));
  bool replaced = wi->peers[at] != NULL;
  worker_peer_drop(wi, at);
  if (replaced && at == 0) forward_lost(w); /* sent to the home before: made here, once */
  worker_peer *p = mem_calloc(1, sizeof(*p));
  p->wi = wi;
  p->slot = at;
  int rc = ipc_channel_init(&p->ch, w->loop, msg->fd, slot, generation, worker_peer_on_msg,
                            worker_peer_on_eof, p);
  if (rc != 0) {
    log_warn("ipc: cannot watch a channel to another worker", "error", uv_strerror(rc));
    free(p);
    return;
  }
  wi->peers[at] = p;
}

/* Messages from the master -------------------------------------------------------------- */

/* A control request being answered: the master matches the answer by rid. */
typedef struct worker_ipc_ctl {
  worker_ipc_t *wi;
  double rid;
} worker_ipc_ctl;

static void worker_ipc_ctl_answer(cJSON *rep, void *data) {
  worker_ipc_ctl *q = data;
  cJSON_AddNumberToObject(rep, "rid", q->rid);
  char *text = cJSON_PrintUnformatted(rep);
  if (text != NULL && ipc_channel_send(&q->wi->ch, IPC_CTL_REP, 0, text, strlen(text), -1) != 0)
    log_warn("ipc: cannot send a control answer");
  cJSON_free(text);
  free(q);
}

static void worker_ipc_on_ctl(worker_ipc_t *wi, const ipc_msg *msg) {
  cJSON *req = cJSON_ParseWithLength(msg->payload, msg->len);
  const cJSON *rid = cJSON_GetObjectItemCaseSensitive(req, "rid");
  if (!cJSON_IsObject(req) || !cJSON_IsNumber(rid)) {
    log_warn("ipc: malformed control request");
    cJSON_Delete(req);
    return;
  }
  worker_ipc_ctl *q = mem_alloc(sizeof(*q));
  *q = (worker_ipc_ctl){wi, rid->valuedouble};
  worker_ctl_handle(&wi->w, req, worker_ipc_ctl_answer, q);
  cJSON_Delete(req);
}

/* A message from the master as a job on the store lane: a copy, since it outlives the callback. */
typedef struct ipc_job {
  worker_ipc_t *wi;
  ipc_msg msg;
  char payload[]; /* msg.payload points here */
} ipc_job;

static void worker_ipc_handle(worker_ipc_t *wi, ipc_msg *msg);

static void worker_ipc_job(void *arg) {
  ipc_job *j = arg;
  worker_ipc_handle(j->wi, &j->msg);
  free(j);
}

static void worker_ipc_on_msg(ipc_channel_t *ch, ipc_msg *msg, void *data) {
  worker_ipc_t *wi = data;
  worker_t *w = &wi->w;
  if (msg->cmd == IPC_PEER) {
    worker_ipc_on_peer(wi, msg);
    return;
  }
  if (msg->cmd == IPC_CONN) {
    /* A connection to serve: taken at once (its requests are lane jobs themselves). */
    unsigned flags = (msg->flags & IPC_F_REROUTED) ? HTTP_ADOPT_REROUTED : 0;
    wi->adopted++;
    if (http_server_adopt_flags(w->http, msg->fd, msg->payload, msg->len, flags) != 0)
      log_warn("cannot take a connection from the master");
    return;
  }
  if (!w->lane.enabled) {
    worker_ipc_handle(wi, msg);
    return;
  }
  ipc_job *j = mem_alloc(sizeof(*j) + msg->len + 1);
  j->wi = wi;
  j->msg = *msg;
  memcpy(j->payload, msg->payload, msg->len);
  j->payload[msg->len] = '\0';
  j->msg.payload = j->payload;
  lane_run(&w->lane, worker_ipc_job, j);
}

/* The master's requests: control commands, stats, drains, routed cancels and answers. */
static void worker_ipc_handle(worker_ipc_t *wi, ipc_msg *msg) {
  worker_t *w = &wi->w;
  switch (msg->cmd) {
  case IPC_COMMITTED: worker_ipc_on_committed(w); break;
  case IPC_STATS_REQ: {
    uint64_t request;
    memcpy(&request, msg->payload, sizeof(request));
    worker_ipc_send_stats(wi, request);
    break;
  }
  case IPC_CTL_REQ:
    if (!w->closing) worker_ipc_on_ctl(wi, msg);
    break;
  case IPC_DRAIN: worker_ipc_drain(wi, "master"); break;
  case IPC_CANCEL: {
    const char *f[2]; /* principal, request id */
    char *copy = ipc_fields(msg->payload, msg->len, f, 2);
    /* Not here either: it already ended, or never was. */
    if (copy != NULL && !w->closing) (void)mcp_cancel_here(w, f[0], "", f[1]);
    free(copy);
    break;
  }
  case IPC_RESTORED: {
    /* Another worker restored it (its own slot's, back up): the client goes there now. */
    session_t *s = w->closing ? NULL : session_registry_find(&w->sessions, msg->payload, msg->len);
    if (s != NULL) {
      log_info("session restored by another worker: its copy here ends", "session", s->id);
      worker_session_forget(w, s);
      subs_update_active(w);
    }
    break;
  }
  case IPC_ANSWER: {
    const char *f[3]; /* principal, session, response */
    char *copy = ipc_fields(msg->payload, msg->len, f, 3);
    cJSON *answer = copy != NULL && !w->closing ? cJSON_Parse(f[2]) : NULL;
    if (answer != NULL && !confirm_answer(w, f[0], f[1], answer)) {
      /* not here either: already ended, or never was */
    }
    cJSON_Delete(answer);
    free(copy);
    break;
  }
  default:
    if (msg->fd >= 0) close(msg->fd);
    log_warn("ipc: unexpected message", "cmd", ipc_cmd_name(msg->cmd));
    break;
  }
}

static void worker_ipc_on_eof(ipc_channel_t *ch, void *data) {
  worker_ipc_t *wi = data;
  /* The master is gone: finish what is in flight, then go too. */
  if (wi->ch_open) {
    wi->ch_open = false;
    ipc_channel_close(&wi->ch, NULL);
  }
  forward_lost(&wi->w); /* no answer comes from the write home now */
  worker_ipc_drain(wi, "master gone");
}

static void worker_ipc_on_sigterm(uv_signal_t *h, int signum) {
  worker_ipc_t *wi = h->data;
  if (!wi->draining) {
    worker_ipc_drain(wi, "SIGTERM");
    return;
  }
  log_warn("second SIGTERM: stopping now");
  worker_shutdown(&wi->w);
  worker_ipc_stop(wi);
}

/* Process ------------------------------------------------------------------------------- */

int worker_ipc_main(const config_t *cfg) {
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  /* Sessions are spread over the workers: each takes its share of the limit. */
  config_t wcfg = *cfg;
  unsigned n = cfg->workers > 0 ? (unsigned)cfg->workers : 1;
  wcfg.max_sessions = (cfg->max_sessions + n - 1) / n;

  uv_loop_t *loop = uv_default_loop();
  static worker_ipc_t wi;
  wi.cfg = &wcfg;
  char err[512];
  char slot[16];
  snprintf(slot, sizeof(slot), "%d", cfg->worker_slot);
  if (worker_init(&wi.w, loop, &wcfg, (unsigned)cfg->worker_slot, err, sizeof(err)) != 0) {
    log_error("worker cannot open the database", "slot", slot, "db", cfg->db_path, "error", err);
    close(WORKER_IPC_FD);
    return 1;
  }
  worker_t *w = &wi.w;
  w->generation = cfg->worker_generation;
  w->n_slots = n;
  w->ipc = &wi;
  w->reroute = worker_ipc_reroute;
  w->on_local_commit = worker_ipc_on_local_commit;
  w->on_unknown_cancel = worker_ipc_on_cancel;
  w->on_restored = worker_ipc_on_restored;
  w->on_unknown_answer = worker_ipc_on_answer;
  w->send_peer = worker_ipc_send_peer;
  /* SQLite, one writer at a time: the others' record writes go to slot 0 (forward.h). */
  w->forwards = forward_write_home(cfg) && cfg->worker_slot != 0;

  int rc = ipc_channel_init(&wi.ch, loop, WORKER_IPC_FD, (uint32_t)cfg->worker_slot,
                            cfg->worker_generation, worker_ipc_on_msg, worker_ipc_on_eof, &wi);
  wi.ch_open = rc == 0;
  bool failed = !wi.ch_open;
  uv_timer_init(loop, &wi.stats_timer);
  wi.stats_timer.data = &wi;
  uv_signal_init(loop, &wi.sigterm);
  wi.sigterm.data = &wi;
  uv_signal_start(&wi.sigterm, worker_ipc_on_sigterm, SIGTERM);
  if (!wi.ch_open) {
    log_error("worker has no channel to its master", "slot", slot, "error", uv_strerror(rc));
    worker_shutdown(w);
    worker_ipc_stop(&wi);
  } else {
    /* The first report says "ready": the master routes nothing here before it. */
    wi.stats_task = (lane_task){worker_ipc_stats_job, &wi, false};
    lane_post(&w->lane, &wi.stats_task);
    uv_timer_start(&wi.stats_timer, worker_ipc_on_stats_timer, WORKER_IPC_STATS_MS,
                   WORKER_IPC_STATS_MS);
  }

  uv_run(loop, UV_RUN_DEFAULT);
  worker_finish(w);
  free(wi.peers); /* each closed with the loop's handles */
  wi.peers = NULL;
  rc = uv_loop_close(loop);
  if (rc != 0) log_warn("worker loop closed with open handles", "error", uv_strerror(rc));
  return failed ? 1 : 0;
}
