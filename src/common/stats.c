/*
 * Rendering of the workers' stats reports: Prometheus text for /metrics and
 * JSON for the control socket (and so for mcpsubctl). The master calls it
 * on every scrape with the latest report of each slot, so it is one pass
 * over a small const table of metric families and never fails; it reads
 * the reports and never keeps them. Adding a metric is one table row.
 */
#include "common/stats.h"

#include <inttypes.h>
#include <stdbool.h>

#include "common/mem.h"

typedef enum stats_metric_type {
  STATS_GAUGE,
  STATS_COUNTER,
} stats_metric_type;

/* How the worker="all" sample combines the per-worker values. */
typedef enum stats_total {
  STATS_TOTAL_SUM,
  STATS_TOTAL_MAX,
} stats_total;

/* One metric family: its value for worker w (slot may be NULL). */
typedef struct stats_metric {
  const char *name;
  const char *help;
  stats_metric_type type;
  stats_total total;
  uint64_t (*value)(const worker_stats *w, const slot_stats *slot);
} stats_metric;

static uint64_t stats_worker_up(const worker_stats *w, const slot_stats *slot) {
  /* Without slot facts (one process) a worker that reported is running. */
  return slot == NULL || slot->alive ? 1 : 0;
}

static uint64_t stats_sessions(const worker_stats *w, const slot_stats *slot) {
  return w->sessions;
}

static uint64_t stats_streams(const worker_stats *w, const slot_stats *slot) {
  return w->streams;
}

static uint64_t stats_subscriptions(const worker_stats *w, const slot_stats *slot) {
  return w->subscriptions;
}

static uint64_t stats_listens(const worker_stats *w, const slot_stats *slot) {
  return w->listens;
}

static uint64_t stats_waiters(const worker_stats *w, const slot_stats *slot) {
  return w->waiters;
}

static uint64_t stats_connections(const worker_stats *w, const slot_stats *slot) {
  return w->connections;
}

static uint64_t stats_queued_bytes(const worker_stats *w, const slot_stats *slot) {
  return w->queued_bytes;
}

/* Audit rows committed but not yet handed on; a report taken between the
 * tailer's read and the head's sampling may show the head behind: 0. */
static uint64_t stats_audit_lag(const worker_stats *w, const slot_stats *slot) {
  return w->audit_head > w->audit_position ? (uint64_t)(w->audit_head - w->audit_position) : 0;
}

static uint64_t stats_requests(const worker_stats *w, const slot_stats *slot) {
  return w->requests;
}

static uint64_t stats_frames_sent(const worker_stats *w, const slot_stats *slot) {
  return w->frames_sent;
}

static uint64_t stats_notifications(const worker_stats *w, const slot_stats *slot) {
  return w->notifications;
}

static uint64_t stats_frames_replayed(const worker_stats *w, const slot_stats *slot) {
  return w->frames_replayed;
}

static uint64_t stats_frames_dropped(const worker_stats *w, const slot_stats *slot) {
  return w->frames_dropped;
}

static uint64_t stats_connections_refused(const worker_stats *w, const slot_stats *slot) {
  return w->connections_refused;
}

static uint64_t stats_requests_refused(const worker_stats *w, const slot_stats *slot) {
  return w->requests_refused;
}

static uint64_t stats_restarts(const worker_stats *w, const slot_stats *slot) {
  return slot != NULL ? slot->restarts : 0;
}

static const stats_metric stats_metrics[] = {
    {"mcpsub_worker_up", "1 when a worker process runs in the slot.", STATS_GAUGE, STATS_TOTAL_SUM,
     stats_worker_up},
    {"mcpsub_sessions", "Live MCP sessions.", STATS_GAUGE, STATS_TOTAL_SUM, stats_sessions},
    {"mcpsub_streams", "Open SSE streams of sessions (GET).", STATS_GAUGE, STATS_TOTAL_SUM,
     stats_streams},
    {"mcpsub_listen_streams", "Open subscriptions/listen streams (2026-07-28).", STATS_GAUGE,
     STATS_TOTAL_SUM, stats_listens},
    {"mcpsub_subscriptions", "Live resource subscriptions (sessions and waiters).", STATS_GAUGE,
     STATS_TOTAL_SUM, stats_subscriptions},
    {"mcpsub_waiters", "Pending wait_and_read calls.", STATS_GAUGE, STATS_TOTAL_SUM, stats_waiters},
    {"mcpsub_connections", "Open HTTP connections.", STATS_GAUGE, STATS_TOTAL_SUM,
     stats_connections},
    {"mcpsub_stream_queue_bytes", "Bytes queued on SSE streams, not yet taken by the kernel.",
     STATS_GAUGE, STATS_TOTAL_SUM, stats_queued_bytes},
    {"mcpsub_audit_tailer_lag",
     "Audit rows committed but not yet handed on by the tailer (total: the largest).", STATS_GAUGE,
     STATS_TOTAL_MAX, stats_audit_lag},
    {"mcpsub_requests_total", "HTTP requests served.", STATS_COUNTER, STATS_TOTAL_SUM,
     stats_requests},
    {"mcpsub_notifications_sent_total", "SSE frames written to streams.", STATS_COUNTER,
     STATS_TOTAL_SUM, stats_frames_sent},
    {"mcpsub_notifications_formatted_total", "Resource-update frames formatted.", STATS_COUNTER,
     STATS_TOTAL_SUM, stats_notifications},
    {"mcpsub_notifications_replayed_total",
     "Frames sent again on resumption (replay ring or audit log).", STATS_COUNTER, STATS_TOTAL_SUM,
     stats_frames_replayed},
    {"mcpsub_notifications_dropped_total",
     "Frames that left a replay ring before any stream took them.", STATS_COUNTER, STATS_TOTAL_SUM,
     stats_frames_dropped},
    {"mcpsub_connections_refused_total",
     "Connections answered 503 and closed over --max-connections (total or per address).",
     STATS_COUNTER, STATS_TOTAL_SUM, stats_connections_refused},
    {"mcpsub_requests_refused_total",
     "Requests refused for their credentials or limits (401, 403, 429).", STATS_COUNTER,
     STATS_TOTAL_SUM, stats_requests_refused},
    {"mcpsub_worker_restarts_total", "Times the master restarted the slot's worker.", STATS_COUNTER,
     STATS_TOTAL_SUM, stats_restarts},
};

static void stats_render_family(buf_t *out, const stats_metric *m, const worker_stats *workers,
                                const slot_stats *slots, size_t n) {
  buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
             m->type == STATS_GAUGE ? "gauge" : "counter");
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t v = m->value(&workers[i], slots != NULL ? &slots[i] : NULL);
    buf_printf(out, "%s{worker=\"%" PRIu32 "\"} %" PRIu64 "\n", m->name, workers[i].slot, v);
    if (m->total == STATS_TOTAL_MAX)
      total = v > total ? v : total;
    else
      total += v;
  }
  buf_printf(out, "%s{worker=\"all\"} %" PRIu64 "\n", m->name, total);
}

void stats_render_prometheus(buf_t *out, const worker_stats *workers, const slot_stats *slots,
                             size_t n) {
  for (size_t i = 0; i < ARRAY_LEN(stats_metrics); i++)
    stats_render_family(out, &stats_metrics[i], workers, slots, n);
}

cJSON *stats_to_json(const worker_stats *w) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "slot", w->slot);
  cJSON_AddNumberToObject(o, "generation", w->generation);
  cJSON_AddNumberToObject(o, "pid", w->pid);
  cJSON_AddNumberToObject(o, "startedMs", (double)w->started_ms);
  cJSON_AddNumberToObject(o, "sessions", (double)w->sessions);
  cJSON_AddNumberToObject(o, "streams", (double)w->streams);
  cJSON_AddNumberToObject(o, "listens", (double)w->listens);
  cJSON_AddNumberToObject(o, "subscriptions", (double)w->subscriptions);
  cJSON_AddNumberToObject(o, "waiters", (double)w->waiters);
  cJSON_AddNumberToObject(o, "connections", (double)w->connections);
  cJSON_AddNumberToObject(o, "queuedBytes", (double)w->queued_bytes);
  cJSON_AddNumberToObject(o, "requests", (double)w->requests);
  cJSON_AddNumberToObject(o, "notifications", (double)w->notifications);
  cJSON_AddNumberToObject(o, "framesSent", (double)w->frames_sent);
  cJSON_AddNumberToObject(o, "framesReplayed", (double)w->frames_replayed);
  cJSON_AddNumberToObject(o, "framesDropped", (double)w->frames_dropped);
  cJSON_AddNumberToObject(o, "auditPosition", (double)w->audit_position);
  cJSON_AddNumberToObject(o, "auditHead", (double)w->audit_head);
  return o;
}
