/*
 * The load generator's scenarios, one row each in a const table of
 * operations (see lg_run.h): fan-out (also against the kernel ceiling),
 * latency at a fixed commit rate (REST or raw SQLite writer, or the
 * ceiling's own releases), idle memory, read and write throughput, and the
 * reconnect storm. Each decides when it is complete and what it reports;
 * each fails, rather than reports, when an update is lost or duplicated.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lg_run.h"

/* ---- scenario: fan-out (and the kernel ceiling) ------------------------------------- */

/* Before the streams open: the ceiling starts writing the moment the last one asked. */
static void events_prepare(lg_t *lg) {
  lg->expected = (uint64_t)lg->n_sessions * lg->o.events * (lg->o.both ? 2 : 1);
  if (lg_seen_alloc(lg, lg->o.events) != 0)
    lg_fail(lg, "sessions x events too large for the bitmap bound");
}

static void fanout_start(lg_t *lg) {
  uint64_t n = lg->o.events;
  lg_segs_base(lg);
  lg_note("fanout: %u sessions ready in %.2f s; %llu events", lg->n_sessions,
          lg_secs(lg->t_setup_ns - lg->t_setup_begin_ns), (unsigned long long)n);
  lg_measure_start(lg);
  if (lg->o.ceiling) return; /* it writes once every stream is open */
  lg_writer_start(lg, WR_FLOW, 'f', n);
  lg->w.window = lg->o.window;
  lg->w.receivers = lg->n_sessions;
  lg->delivered = lg_calloc((size_t)n, sizeof(uint32_t));
  lg->w.delivered = lg->delivered;
  lg_writer_open(lg, lg->o.writers);
  lg_writer_pump(lg);
}

static void fanout_on_update(lg_t *lg, lg_session *s, const lg_update *u) {
  if (u->letter != 'f' || u->n >= lg->seen_events || u->sub > (lg->o.both ? 1 : 0) || u->reread) {
    lg_fail(lg, "session %u: unexpected update %c%llu", s->index, u->letter,
            (unsigned long long)u->n);
    return;
  }
  if (!lg_seen_set(lg, s, u->n, u->sub)) {
    lg_fail(lg, "session %u: duplicate update for f%llu", s->index, (unsigned long long)u->n);
    return;
  }
  lg->received++;
  if (u->sub == 0) lg_writer_delivered(lg, u->n); /* the writers' window: once per session */
  if (lg->received == lg->expected) lg_complete(lg);
}

static void fanout_report(lg_t *lg, FILE *j) {
  lg_report_rates(lg, j, lg->expected, "notifications");
  fprintf(j, ",\"events\":%llu,\"writers\":%u,\"window\":%llu", (unsigned long long)lg->o.events,
          lg->o.ceiling ? 0 : lg->o.writers, (unsigned long long)lg->o.window);
  uint64_t segs = lg->data_segments;
  if (segs > 0)
    fprintf(j, ",\"data_segments\":%llu,\"frames_per_segment\":%.3f", (unsigned long long)segs,
            (double)lg->expected / (double)segs);
}

/* ---- scenario: latency -------------------------------------------------------------- */

static void latency_start(lg_t *lg) {
  uint64_t n = lg->o.events;
  lg_note("latency: %u sessions ready in %.2f s; %llu commits at %.0f/s by %s", lg->n_sessions,
          lg_secs(lg->t_setup_ns - lg->t_setup_begin_ns), (unsigned long long)n, lg->o.rate,
          lg->o.pg_writer    ? "postgres"
          : lg->o.sql_writer ? "sqlite"
                             : "rest");
  lg_measure_start(lg);
  if (lg->o.ceiling) return; /* it releases at its own --rate once every stream is open */
  if (lg->o.sql_writer) {
    lg_fork_sql_writer(lg, n, lg->o.rate);
    return;
  }
  lg_writer_start(lg, WR_RATE, 'f', n);
  lg->w.rate = lg->o.rate;
  lg->w.rate_start_ns = lg_now_ns();
  lg->w.rate_base = 0;
  lg_writer_open(lg, lg->o.writers);
  lg_writer_pump(lg);
}

static void latency_on_update(lg_t *lg, lg_session *s, const lg_update *u) {
  if (u->letter != 'f' || u->n >= lg->seen_events || u->sub != 0 || u->reread) {
    lg_fail(lg, "session %u: unexpected update %c%llu", s->index, u->letter,
            (unsigned long long)u->n);
    return;
  }
  if (!lg_record_latency(lg, &lg->hist, u->n)) return;
  if (!lg_seen_set(lg, s, u->n, 0)) {
    lg_fail(lg, "session %u: duplicate update for f%llu", s->index, (unsigned long long)u->n);
    return;
  }
  lg->received++;
  if (lg->received == lg->expected) lg_complete(lg);
}

static void latency_report(lg_t *lg, FILE *j) {
  fprintf(j, ",\"writer\":\"%s\",\"rate\":%.1f,\"events\":%llu,\"late_commits\":%llu",
          lg->o.ceiling      ? "kernel"
          : lg->o.pg_writer  ? "postgres"
          : lg->o.sql_writer ? "sqlite"
                             : "rest",
          lg->o.rate, (unsigned long long)lg->o.events, (unsigned long long)lg->w.late);
  lg_report_rates(lg, j, lg->expected, "notifications");
  lg_report_hist(j, "", &lg->hist);
}

/* ---- scenario: idle memory -------------------------------------------------------- */

/* Server RSS, socket counters and socket slabs, now. */
static void idle_sample(lg_t *lg, lg_proc_sample *mem, lg_sockstat *sock, uint64_t *slab) {
  if (lg->o.server_pid <= 0 || lg_proc_sample_tree(lg->o.server_pid, mem) != 0)
    memset(mem, 0, sizeof(*mem));
  if (lg_sockstat_read(sock) != 0) memset(sock, 0, sizeof(*sock));
  if (lg_slab_socket_bytes(slab) != 0) *slab = 0;
}

static void idle_prepare(lg_t *lg) {
  idle_sample(lg, &lg->mem0, &lg->sock0, &lg->slab0);
}

static void idle_start(lg_t *lg) {
  lg_note("idle: %u sessions (%u subscriptions and a stream each) ready in %.2f s", lg->n_sessions,
          lg->o.subs, lg_secs(lg->t_setup_ns - lg->t_setup_begin_ns));
  lg->phase = 1;
  lg->phase_ns = lg_now_ns() + (uint64_t)lg->o.settle_ms * 1000000u;
}

static void idle_on_tick(lg_t *lg) {
  if (lg->phase != 1 || lg_now_ns() < lg->phase_ns) return;
  lg->phase = 2;
  idle_sample(lg, &lg->mem1, &lg->sock1, &lg->slab1);
  /* Still alive? One commit to the watched record: every session must hear it twice. */
  lg->expected = (uint64_t)lg->n_sessions * lg->o.subs;
  if (lg_seen_alloc(lg, 1) != 0) {
    lg_fail(lg, "bitmap bound");
    return;
  }
  lg_measure_start(lg);
  lg_writer_start(lg, WR_FLOW, 'f', 1);
  lg->w.window = 1;
  lg_writer_open(lg, 1);
  lg_writer_pump(lg);
}

static void idle_on_update(lg_t *lg, lg_session *s, const lg_update *u) {
  if (u->letter != 'f' || u->n != 0 || u->sub >= lg->o.subs || u->reread) {
    lg_fail(lg, "session %u: unexpected update %c%llu", s->index, u->letter,
            (unsigned long long)u->n);
    return;
  }
  if (!lg_seen_set(lg, s, 0, u->sub)) {
    lg_fail(lg, "session %u: duplicate update", s->index);
    return;
  }
  if (++lg->received == lg->expected) lg_complete(lg);
}

static void idle_report(lg_t *lg, FILE *j) {
  double n = lg->n_sessions ? (double)lg->n_sessions : 1;
  double page = (double)sysconf(_SC_PAGESIZE);
  double rss0 = (double)lg->mem0.rss_bytes, rss1 = (double)lg->mem1.rss_bytes;
  double tcp_mem = (double)(lg->sock1.tcp_mem_pages - lg->sock0.tcp_mem_pages) * page;
  double slab = (double)lg->slab1 - (double)lg->slab0;
  fprintf(j,
          ",\"subscriptions_per_session\":%u,\"server_rss_before\":%.0f,\"server_rss_after\":%.0f",
          lg->o.subs, rss0, rss1);
  fprintf(j, ",\"server_rss_per_session\":%.1f", (rss1 - rss0) / n);
  fprintf(j, ",\"kernel_tcp_mem_bytes\":%.0f,\"kernel_tcp_mem_per_session\":%.1f", tcp_mem,
          tcp_mem / n);
  fprintf(j, ",\"sockets_used_delta\":%ld", lg->sock1.sockets_used - lg->sock0.sockets_used);
  if (lg->slab0 > 0 || lg->slab1 > 0)
    fprintf(j, ",\"kernel_socket_slab_bytes\":%.0f,\"kernel_socket_slab_per_session\":%.1f", slab,
            slab / n);
  fprintf(j, ",\"check_notifications\":%llu", (unsigned long long)lg->expected);
}

/* ---- scenario: read throughput ------------------------------------------------------ */

static void read_on_ack(lg_t *lg, uint64_t n) {
  if (lg->phase != 0) return;
  lg->phase = 1; /* the record exists: read it */
  lg->on_ack = NULL;
  lg_measure_start(lg);
  lg->w.stop_ns = lg->t_start_ns + (uint64_t)(lg->o.duration_s * 1e9);
  lg_readers_start(lg, lg->o.connections);
}

static void read_start(lg_t *lg) {
  if (lg->o.ceiling) { /* bench_read_ceiling: no record to write, no session to open */
    snprintf(lg->sessions[0].id, sizeof(lg->sessions[0].id), "%s", LG_CEILING_SESSION_ID);
    read_on_ack(lg, 0);
    return;
  }
  lg->on_ack = read_on_ack;
  lg_writer_start(lg, WR_FLOW, 'r', 1);
  lg->w.window = 1;
  lg_writer_open(lg, 1);
  lg_writer_pump(lg);
}

static void read_on_tick(lg_t *lg) {
  if (lg->phase != 1 || !lg_readers_idle(lg)) return;
  lg->phase = 2;
  lg_complete(lg);
}

static void read_report(lg_t *lg, FILE *j) {
  /* read_uri holds no quote, backslash or control character (loadgen.c). */
  fprintf(j, ",\"connections\":%u,\"workers\":%u,\"read_uri\":\"%s\"", lg->n_rconn, lg->o.workers,
          lg->o.read_uri);
  /* The workers the reads' sessions are on: a session id starts with its worker's slot. */
  uint32_t slots = 0;
  for (uint32_t i = 0; i < lg->n_sessions && !lg->o.ceiling; i++) {
    bool seen = false;
    for (uint32_t k = 0; k < i && !seen; k++)
      seen = strncmp(lg->sessions[k].id, lg->sessions[i].id, 2) == 0;
    slots += !seen;
  }
  fprintf(j, ",\"read_sessions\":%u,\"read_slots\":%u", lg->o.ceiling ? 0 : lg->n_sessions, slots);
  lg_report_rates(lg, j, lg->requests, "requests");
  double wall = lg_secs(lg->t_end_ns - lg->t_start_ns);
  if (wall > 0)
    fprintf(j, ",\"per_worker_wall_s\":%.1f",
            (double)lg->requests / wall / (lg->o.workers ? lg->o.workers : 1));
}

/* ---- scenario: subscribe cost --------------------------------------------------------- */

/*
 * One session on --connections connections, each with one subscribe in
 * flight (a session's requests may come on several connections, as from
 * an agent's concurrent tool calls): --held subscriptions to new record
 * URIs first (give or take the connections' last ones in flight), then
 * --max-requests more (or --duration), measured: subscribes per second,
 * and the server's CPU per subscribe, at that many held. With one
 * connection each subscribe waits for the one before it and its commit;
 * with more, the writer commits those that arrive together at once.
 */
static void subscribe_start(lg_t *lg) {
  lg->subscribing = true;
  lg->prefill_left = lg->o.held;
  lg->w.stop_ns = UINT64_MAX;
  if (lg->prefill_left == 0) {
    lg_measure_start(lg);
    lg->w.stop_ns = lg->t_start_ns + (uint64_t)(lg->o.duration_s * 1e9);
    lg->phase = 1;
  }
  lg_readers_start(lg, lg->o.connections);
}

static void subscribe_on_tick(lg_t *lg) {
  if (lg->phase != 1 || !lg_readers_idle(lg)) return;
  lg->phase = 2;
  lg_complete(lg);
}

static void subscribe_report(lg_t *lg, FILE *j) {
  fprintf(j, ",\"held\":%llu,\"connections\":%u,\"workers\":%u", (unsigned long long)lg->o.held,
          lg->n_rconn, lg->o.workers);
  lg_report_rates(lg, j, lg->requests, "subscribes");
}

/* ---- scenario: write throughput ------------------------------------------------------ */

/* Measured from when every writer connection is ready (--writer tool: its session opened). */
static void write_measure(lg_t *lg) {
  lg_measure_start(lg);
  lg->w.stop_ns = lg->t_start_ns + (uint64_t)(lg->o.duration_s * 1e9);
  lg_writer_pump(lg);
  lg->phase = 1;
}

static void write_start(lg_t *lg) {
  lg_writer_start(lg, WR_LOOP, 'w', lg->o.max_requests);
  lg->w.stop_ns = 0; /* nothing is sent before write_measure */
  lg_writer_open(lg, lg->o.connections);
  if (lg->n_wready == lg->n_wconn) write_measure(lg);
}

static void write_on_tick(lg_t *lg) {
  if (lg->phase == 0 && lg->n_wready == lg->n_wconn) write_measure(lg);
  if (lg->phase != 1) return;
  lg_writer_pump(lg);
  if ((lg_now_ns() >= lg->w.stop_ns || lg->w.next >= lg->w.total) && lg_writer_idle(lg)) {
    lg->phase = 2;
    lg_complete(lg);
  }
}

static void write_report(lg_t *lg, FILE *j) {
  fprintf(j, ",\"connections\":%u,\"writer\":\"%s\"", lg->n_wconn,
          lg->o.tool_writer ? "tool" : "rest");
  lg_report_rates(lg, j, lg->w.acked, "puts");
}

static void no_update(lg_t *lg, lg_session *s, const lg_update *u) {
  lg_fail(lg, "session %u: an update nobody subscribed to", s->index);
}

/* ---- scenario: reconnect storm -------------------------------------------------------
 * Phase 1: every session hears warm_events commits at --rate (baseline latency).
 * Phase 2: drop_percent of the sessions close their streams.
 * Phase 3: --behind commits land as fast as the others take them (--writers
 *          connections, --window ahead), on --gap-keys records (so the audit
 *          log can name each changed URI).
 * Phase 4: the dropped sessions reconnect at once with Last-Event-ID while
 *          commits go on at --rate; the others' latency is recorded.
 * Phase 5: commits stop once all caught up (and at least --storm-min-s passed);
 *          every session must end up with every commit, the resumed ones with
 *          every gap key too (or a "re-read" update).
 */

enum { STORM_WARM = 1, STORM_GAP = 3, STORM_STORM = 4, STORM_DRAIN = 5 };

/* Every (100 / p)-th session, for p dividing 100: an even spread at any size. */
static bool storm_dropped(const lg_t *lg, const lg_session *s) {
  return ((uint64_t)s->index * lg->o.drop_percent) % 100 < lg->o.drop_percent;
}

static uint64_t storm_capacity(const lg_t *lg) {
  return lg->o.warm_events + (uint64_t)(lg->o.rate * lg->o.storm_max_s) + 16;
}

/* How many of the gap's commits write key g<k>. */
static uint64_t storm_key_commits(const lg_t *lg, uint64_t k) {
  return lg->o.behind / lg->o.gap_keys + (k < lg->o.behind % lg->o.gap_keys ? 1 : 0);
}

static void storm_start(lg_t *lg) {
  uint64_t cap = storm_capacity(lg);
  if (lg_seen_alloc(lg, cap) != 0) {
    lg_fail(lg, "sessions x events too large for the bitmap bound");
    return;
  }
  lg->gap_count = lg_calloc((size_t)lg->n_sessions, (size_t)lg->o.gap_keys);
  lg->gap_delivered = lg_calloc((size_t)lg->o.behind, sizeof(uint32_t));
  lg_note("storm: %u sessions ready in %.2f s", lg->n_sessions,
          lg_secs(lg->t_setup_ns - lg->t_setup_begin_ns));
  lg->phase = STORM_WARM;
  lg->expected = (uint64_t)lg->n_sessions * lg->o.warm_events;
  lg_writer_start(lg, WR_RATE, 'f', lg->o.warm_events);
  lg->w.rate = lg->o.rate;
  lg->w.rate_start_ns = lg_now_ns();
  lg_writer_open(lg, lg->o.writers);
  lg_writer_pump(lg);
}

static void storm_begin_gap(lg_t *lg) {
  uint32_t dropped = 0;
  for (uint32_t i = 0; i < lg->n_sessions; i++) {
    lg_session *s = &lg->sessions[i];
    if (!storm_dropped(lg, s)) continue;
    lg_conn_close(s->stream, false);
    s->stream = NULL;
    s->state = SESS_DROPPED;
    dropped++;
  }
  lg->n_dropped = dropped;
  lg_note("storm: %u streams dropped; %llu commits behind them", dropped,
          (unsigned long long)lg->o.behind);
  lg->phase = STORM_GAP;
  lg_writer_start(lg, WR_FLOW, 'g', lg->o.behind);
  lg->w.key_mod = lg->o.gap_keys;
  lg->w.window = lg->o.window;
  lg->w.receivers = lg->n_sessions - dropped;
  lg->w.delivered = lg->gap_delivered;
  lg_writer_pump(lg);
}

static void storm_begin_storm(lg_t *lg) {
  lg->phase = STORM_STORM;
  lg_measure_start(lg);
  lg->phase_ns = lg->t_start_ns;
  for (uint32_t i = 0; i < lg->n_sessions && !lg->finishing; i++) {
    lg_session *s = &lg->sessions[i];
    if (s->state != SESS_DROPPED) continue;
    s->state = SESS_RESUMING;
    s->stream = lg_conn_create(lg->cl, true, s->index + lg->n_sessions, &lg_stream_ops, s);
    int r = lg_get_stream(lg, s->stream, s, s->last_id);
    if (r != 0) lg_fail(lg, "session %u: cannot reconnect: %s", s->index, strerror(-r));
  }
  lg_writer_start(lg, WR_RATE, 'f', storm_capacity(lg));
  lg->w.next = lg->o.warm_events;
  lg->w.rate = lg->o.rate;
  lg->w.rate_start_ns = lg_now_ns();
  lg->w.rate_base = lg->o.warm_events;
  lg_writer_pump(lg);
}

static void storm_on_prime(lg_t *lg, lg_session *s) {
  if (s->state != SESS_RESUMING) return;
  s->state = SESS_READY;
  s->caught = true;
  s->caught_ns = lg_now_ns();
  lg->n_caught++;
}

/* Everything arrived: did every resumed session hear of every gap key? */
static void storm_verify(lg_t *lg) {
  for (uint32_t i = 0; i < lg->n_sessions; i++) {
    const lg_session *x = &lg->sessions[i];
    if (!storm_dropped(lg, x) || x->reread) continue;
    for (uint64_t k = 0; k < lg->o.gap_keys && k < lg->o.behind; k++) {
      if (lg->gap_count[(uint64_t)x->index * lg->o.gap_keys + k] == 0) {
        lg_fail(lg, "session %u resumed without hearing of g%llu", x->index, (unsigned long long)k);
        return;
      }
    }
  }
  lg_finish(lg);
}

static void storm_on_f(lg_t *lg, lg_session *s, const lg_update *u) {
  if (u->n >= lg->seen_events) {
    lg_fail(lg, "session %u: update for f%llu, never committed", s->index,
            (unsigned long long)u->n);
    return;
  }
  bool resumed = storm_dropped(lg, s);
  if (!lg_seen_set(lg, s, u->n, 0)) { /* exactly once, resumed or not */
    lg_fail(lg, "session %u: duplicate update for f%llu", s->index, (unsigned long long)u->n);
    return;
  }
  lg->received++;
  if (u->recovered) lg->recovered++;
  lg_hist *h = NULL;
  if (lg->phase == STORM_WARM)
    h = &lg->hist;
  else if (!resumed && u->n >= lg->o.warm_events)
    h = &lg->hist2;
  if (h != NULL && !lg_record_latency(lg, h, u->n)) return;
  if (lg->phase == STORM_WARM && lg->received == lg->expected)
    storm_begin_gap(lg);
  else if (lg->phase == STORM_DRAIN && lg->received == lg->expected)
    storm_verify(lg);
}

static void storm_on_update(lg_t *lg, lg_session *s, const lg_update *u) {
  if (u->sub != 0) {
    lg_fail(lg, "session %u: update for a subscription it never made", s->index);
    return;
  }
  if (u->reread) {
    if (!u->recovered || !storm_dropped(lg, s)) {
      lg_fail(lg, "session %u: unexpected re-read update", s->index);
      return;
    }
    s->reread = true;
    lg->rereads++;
    return;
  }
  if (u->letter == 'f') {
    storm_on_f(lg, s, u);
  } else if (u->letter == 'g' && storm_dropped(lg, s)) {
    if (!u->recovered || u->n >= lg->o.gap_keys) {
      lg_fail(lg, "session %u: gap update g%llu outside its resumption", s->index,
              (unsigned long long)u->n);
      return;
    }
    uint8_t *count = &lg->gap_count[(uint64_t)s->index * lg->o.gap_keys + u->n];
    if (*count < UINT8_MAX) (*count)++;
    lg->recovered++;
  } else if (u->letter == 'g') {
    /* Commits of the gap may land in any order (several writers), but each
     * key is written exactly storm_key_commits() times: no more may arrive. */
    uint8_t *count =
        u->n < lg->o.gap_keys ? &lg->gap_count[(uint64_t)s->index * lg->o.gap_keys + u->n] : NULL;
    if (lg->phase != STORM_GAP || count == NULL || *count >= storm_key_commits(lg, u->n)) {
      lg_fail(lg, "session %u: gap update g%llu beyond the commits made", s->index,
              (unsigned long long)u->n);
      return;
    }
    (*count)++;
    lg_writer_delivered(lg, s->gap_next++); /* flow control: the n-th gap update reached one more */
    if (lg->w.low == lg->o.behind) storm_begin_storm(lg);
  } else {
    lg_fail(lg, "session %u: unexpected update %c%llu", s->index, u->letter,
            (unsigned long long)u->n);
  }
}

static void storm_on_tick(lg_t *lg) {
  if (lg->phase != STORM_STORM) return;
  uint64_t now = lg_now_ns();
  bool all_caught = lg->n_caught == lg->n_dropped;
  if (all_caught && now >= lg->phase_ns + (uint64_t)(lg->o.storm_min_s * 1e9)) {
    lg->w.stop_ns = now; /* no more commits */
    if (!lg_writer_idle(lg)) return;
    lg_measure_end(lg);
    lg->phase = STORM_DRAIN;
    lg->expected = (uint64_t)lg->n_sessions * lg->w.next;
    lg->f_total = lg->w.next;
    if (lg->received == lg->expected) storm_verify(lg);
  } else if (now >= lg->phase_ns + (uint64_t)(lg->o.storm_max_s * 1e9)) {
    lg_fail(lg, "storm: %llu of %llu resumed sessions caught up after %.0f s",
            (unsigned long long)lg->n_caught, (unsigned long long)lg->n_dropped, lg->o.storm_max_s);
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void storm_report(lg_t *lg, FILE *j) {
  uint64_t nd = lg->n_dropped;
  fprintf(j, ",\"dropped\":%llu,\"behind\":%llu,\"gap_keys\":%llu,\"rate\":%.1f,\"commits\":%llu",
          (unsigned long long)nd, (unsigned long long)lg->o.behind,
          (unsigned long long)lg->o.gap_keys, lg->o.rate,
          (unsigned long long)(lg->f_total + lg->o.behind));
  uint64_t *t = lg_calloc((size_t)(nd ? nd : 1), sizeof(uint64_t));
  uint64_t k = 0;
  for (uint32_t i = 0; i < lg->n_sessions && k < nd; i++)
    if (storm_dropped(lg, &lg->sessions[i]) && lg->sessions[i].caught)
      t[k++] = lg->sessions[i].caught_ns - lg->phase_ns;
  qsort(t, (size_t)k, sizeof(uint64_t), cmp_u64);
  if (k > 0)
    fprintf(j, ",\"catchup_p50_s\":%.4f,\"catchup_all_s\":%.4f", lg_secs(t[(k - 1) / 2]),
            lg_secs(t[k - 1]));
  free(t);
  fprintf(j, ",\"recovered_updates\":%llu,\"reread_updates\":%llu",
          (unsigned long long)lg->recovered, (unsigned long long)lg->rereads);
  fprintf(j, ",\"storm_wall_s\":%.4f,\"server_cpu_s\":%.3f", lg_secs(lg->t_end_ns - lg->t_start_ns),
          lg_server_cpu(lg));
  lg_report_hist(j, "baseline_", &lg->hist);
  lg_report_hist(j, "storm_", &lg->hist2);
}

/* ---- the scenario table ------------------------------------------------------------- */

static const lg_scenario lg_scenarios[] = {
    {"fanout", 2, true, events_prepare, fanout_start, fanout_on_update, NULL, NULL, fanout_report},
    {"latency", 2, true, events_prepare, latency_start, latency_on_update, NULL, NULL,
     latency_report},
    {"idle", 2, true, idle_prepare, idle_start, idle_on_update, NULL, idle_on_tick, idle_report},
    {"read", LG_PER_WORKER, false, NULL, read_start, no_update, NULL, read_on_tick, read_report},
    {"write", 0, false, NULL, write_start, no_update, NULL, write_on_tick, write_report},
    {"subscribe", 1, false, NULL, subscribe_start, no_update, NULL, subscribe_on_tick,
     subscribe_report},
    {"storm", 2, true, NULL, storm_start, storm_on_update, storm_on_prime, storm_on_tick,
     storm_report},
};

const lg_scenario *lg_scenario_find(const char *name) {
  for (size_t i = 0; i < LG_ARRAY_LEN(lg_scenarios); i++)
    if (strcmp(name, lg_scenarios[i].name) == 0) return &lg_scenarios[i];
  return NULL;
}

uint64_t lg_scenario_commits(const lg_t *lg) {
  return strcmp(lg->sc->name, "storm") == 0 ? storm_capacity(lg) : lg->o.events;
}
