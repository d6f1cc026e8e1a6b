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
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/mem.h"

const double stats_bucket_le[STATS_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                               0.05,   0.1,   0.25,   0.5,   1,    2.5};

const char *const stats_method_names[STATS_METHODS] = {
    [STATS_M_INITIALIZE] = "initialize",
    [STATS_M_PING] = "ping",
    [STATS_M_SET_LEVEL] = "logging/setLevel",
    [STATS_M_RESOURCES_LIST] = "resources/list",
    [STATS_M_TEMPLATES_LIST] = "resources/templates/list",
    [STATS_M_RESOURCES_READ] = "resources/read",
    [STATS_M_SUBSCRIBE] = "resources/subscribe",
    [STATS_M_UNSUBSCRIBE] = "resources/unsubscribe",
    [STATS_M_TOOLS_LIST] = "tools/list",
    [STATS_M_TOOLS_CALL] = "tools/call",
    [STATS_M_COMPLETE] = "completion/complete",
    [STATS_M_PROMPTS_LIST] = "prompts/list",
    [STATS_M_PROMPTS_GET] = "prompts/get",
    [STATS_M_DISCOVER] = "server/discover",
    [STATS_M_LISTEN] = "subscriptions/listen",
    [STATS_M_NOTIFICATION] = "notification",
    [STATS_M_BATCH] = "batch",
    [STATS_M_STREAM] = "stream",
    [STATS_M_DELETE] = "delete",
    [STATS_M_REST] = "rest",
    [STATS_M_OTHER] = "other",
};

stats_method stats_method_of(const char *name) {
  for (int i = 0; i <= STATS_M_LISTEN; i++) /* the first byte rules out most without a call */
    if (stats_method_names[i][0] == name[0] && strcmp(stats_method_names[i], name) == 0)
      return (stats_method)i;
  return STATS_M_OTHER;
}

void stats_observe(stats_histogram *h, double seconds) {
  if (!(seconds >= 0)) seconds = 0; /* a clock step back, or NaN */
  size_t i = 0;
  while (i < STATS_BUCKETS && seconds > stats_bucket_le[i]) i++;
  h->counts[i]++;
  h->count++;
  h->sum += seconds;
}

typedef enum stats_metric_type {
  STATS_GAUGE,
  STATS_COUNTER,
} stats_metric_type;

/* One metric family: its value for worker w (slot may be NULL). */
typedef struct stats_metric {
  const char *name;
  const char *help;
  stats_metric_type type;
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

static uint64_t stats_writes_forwarded(const worker_stats *w, const slot_stats *slot) {
  return w->writes_forwarded;
}

static uint64_t stats_writes_taken(const worker_stats *w, const slot_stats *slot) {
  return w->writes_taken;
}

static uint64_t stats_lane_jobs(const worker_stats *w, const slot_stats *slot) {
  return w->lane_jobs;
}

static uint64_t stats_lane_waits(const worker_stats *w, const slot_stats *slot) {
  return w->lane_waits;
}

static uint64_t stats_lane_queued(const worker_stats *w, const slot_stats *slot) {
  return w->lane_queued;
}

static uint64_t stats_lane_blocked(const worker_stats *w, const slot_stats *slot) {
  return w->lane_blocked;
}

static uint64_t stats_reads_done(const worker_stats *w, const slot_stats *slot) {
  return w->reads_done;
}

static uint64_t stats_reads_pending(const worker_stats *w, const slot_stats *slot) {
  return w->reads_pending;
}

static uint64_t stats_statements_prepared(const worker_stats *w, const slot_stats *slot) {
  return w->statements_prepared;
}

static uint64_t stats_restarts(const worker_stats *w, const slot_stats *slot) {
  return slot != NULL ? slot->restarts : 0;
}

static const stats_metric stats_metrics[] = {
    {"mcpsub_worker_up", "1 when a worker process runs in the slot.", STATS_GAUGE, stats_worker_up},
    {"mcpsub_sessions", "Live MCP sessions.", STATS_GAUGE, stats_sessions},
    {"mcpsub_streams", "Open SSE streams of sessions (GET).", STATS_GAUGE, stats_streams},
    {"mcpsub_listen_streams", "Open subscriptions/listen streams (2026-07-28).", STATS_GAUGE,
     stats_listens},
    {"mcpsub_subscriptions", "Live resource subscriptions (sessions and waiters).", STATS_GAUGE,
     stats_subscriptions},
    {"mcpsub_waiters", "Pending wait_and_read calls.", STATS_GAUGE, stats_waiters},
    {"mcpsub_connections", "Open HTTP connections.", STATS_GAUGE, stats_connections},
    {"mcpsub_stream_queue_bytes", "Bytes queued on SSE streams, not yet taken by the kernel.",
     STATS_GAUGE, stats_queued_bytes},
    {"mcpsub_audit_tailer_lag", "Audit rows committed but not yet handed on by the tailer.",
     STATS_GAUGE, stats_audit_lag},
    {"mcpsub_requests_total", "HTTP requests served.", STATS_COUNTER, stats_requests},
    {"mcpsub_notifications_sent_total", "SSE frames written to streams.", STATS_COUNTER,
     stats_frames_sent},
    {"mcpsub_notifications_formatted_total", "Resource-update frames formatted.", STATS_COUNTER,
     stats_notifications},
    {"mcpsub_notifications_replayed_total",
     "Frames sent again on resumption (replay ring or audit log).", STATS_COUNTER,
     stats_frames_replayed},
    {"mcpsub_notifications_dropped_total",
     "Frames that left a replay ring before any stream took them.", STATS_COUNTER,
     stats_frames_dropped},
    {"mcpsub_connections_refused_total",
     "Connections answered 503 and closed over --max-connections (total or per address).",
     STATS_COUNTER, stats_connections_refused},
    {"mcpsub_requests_refused_total",
     "Requests refused for their credentials or limits (401, 403, 429).", STATS_COUNTER,
     stats_requests_refused},
    {"mcpsub_writes_forwarded_total",
     "Record writes sent to the write home, slot 0 (SQLite, several workers).", STATS_COUNTER,
     stats_writes_forwarded},
    {"mcpsub_writes_taken_total", "Record writes the write home made for other workers.",
     STATS_COUNTER, stats_writes_taken},
    {"mcpsub_store_lane_jobs_total",
     "Jobs run on the store lane (PostgreSQL: requests, tailer runs, control commands).",
     STATS_COUNTER, stats_lane_jobs},
    {"mcpsub_store_lane_waits_total",
     "Waits for the database during which the worker's loop kept running (PostgreSQL).",
     STATS_COUNTER, stats_lane_waits},
    {"mcpsub_store_lane_queued", "Store lane jobs waiting for the one running (PostgreSQL).",
     STATS_GAUGE, stats_lane_queued},
    {"mcpsub_store_lane_blocked_total",
     "Database calls made outside the store lane, which blocked the loop or were refused (a bug: "
     "stays 0).",
     STATS_COUNTER, stats_lane_blocked},
    {"mcpsub_db_reads_total",
     "Reads of records and collections answered by the worker's reader connections (PostgreSQL).",
     STATS_COUNTER, stats_reads_done},
    {"mcpsub_db_reads_pending", "Reads given to the reader connections and not answered yet.",
     STATS_GAUGE, stats_reads_pending},
    {"mcpsub_db_statements_prepared_total",
     "Statements the worker's PostgreSQL connections prepared (each text a connection runs "
     "twice).",
     STATS_COUNTER, stats_statements_prepared},
    {"mcpsub_worker_restarts_total", "Times the master restarted the slot's worker.", STATS_COUNTER,
     stats_restarts},
};

static void stats_render_family(buf_t *out, const stats_metric *m, const worker_stats *workers,
                                const slot_stats *slots, size_t n) {
  buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
             m->type == STATS_GAUGE ? "gauge" : "counter");
  for (size_t i = 0; i < n; i++) {
    uint64_t v = m->value(&workers[i], slots != NULL ? &slots[i] : NULL);
    buf_printf(out, "%s{worker=\"%" PRIu32 "\"} %" PRIu64 "\n", m->name, workers[i].slot, v);
  }
}

/* One histogram's samples: cumulative buckets, sum and count, with labels (no braces). */
static void stats_render_histogram(buf_t *out, const char *name, const char *labels,
                                   const stats_histogram *h) {
  uint64_t cum = 0;
  for (size_t b = 0; b <= STATS_BUCKETS; b++) {
    cum += h->counts[b];
    if (b < STATS_BUCKETS)
      buf_printf(out, "%s_bucket{%s,le=\"%g\"} %" PRIu64 "\n", name, labels, stats_bucket_le[b],
                 cum);
    else
      buf_printf(out, "%s_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", name, labels, cum);
  }
  buf_printf(out, "%s_sum{%s} %.9g\n%s_count{%s} %" PRIu64 "\n", name, labels, h->sum, name, labels,
             h->count);
}

void stats_render_prometheus(buf_t *out, const worker_stats *workers, const slot_stats *slots,
                             size_t n) {
  buf_printf(out,
             "# HELP mcpsub_build_info The running mcpsubd's version.\n"
             "# TYPE mcpsub_build_info gauge\n"
             "mcpsub_build_info{version=\"%s\"} 1\n",
             MCPSUB_VERSION);
  for (size_t i = 0; i < ARRAY_LEN(stats_metrics); i++)
    stats_render_family(out, &stats_metrics[i], workers, slots, n);
  buf_append_str(out, "# HELP mcpsub_worker_start_time_seconds When the slot's worker started "
                      "(Unix time).\n# TYPE mcpsub_worker_start_time_seconds gauge\n");
  for (size_t i = 0; i < n; i++)
    buf_printf(out, "mcpsub_worker_start_time_seconds{worker=\"%" PRIu32 "\"} %.3f\n",
               workers[i].slot, (double)workers[i].started_ms / 1000);
  char labels[96];
  buf_append_str(out, "# HELP mcpsub_notification_delay_seconds From a change's commit to its "
                      "updates queued on their streams (written in the same loop turn).\n"
                      "# TYPE mcpsub_notification_delay_seconds histogram\n");
  for (size_t i = 0; i < n; i++) {
    snprintf(labels, sizeof(labels), "worker=\"%" PRIu32 "\"", workers[i].slot);
    stats_render_histogram(out, "mcpsub_notification_delay_seconds", labels,
                           &workers[i].notify_delay);
  }
  buf_append_str(out, "# HELP mcpsub_request_duration_seconds From a request's last byte to its "
                      "response's head (a stream: its start), by method.\n"
                      "# TYPE mcpsub_request_duration_seconds histogram\n");
  for (size_t i = 0; i < n; i++) {
    for (int m = 0; m < STATS_METHODS; m++) {
      if (workers[i].request_seconds[m].count == 0) continue; /* a method never called */
      snprintf(labels, sizeof(labels), "worker=\"%" PRIu32 "\",method=\"%s\"", workers[i].slot,
               stats_method_names[m]);
      stats_render_histogram(out, "mcpsub_request_duration_seconds", labels,
                             &workers[i].request_seconds[m]);
    }
  }
}

/* A histogram as JSON: {"le": [...], "counts": [...per bucket, +Inf last], "count", "sum"}. */
static cJSON *stats_histogram_json(const stats_histogram *h) {
  cJSON *o = cJSON_CreateObject();
  cJSON *le = cJSON_AddArrayToObject(o, "le");
  cJSON *counts = cJSON_AddArrayToObject(o, "counts");
  for (size_t b = 0; b <= STATS_BUCKETS; b++) {
    if (b < STATS_BUCKETS) cJSON_AddItemToArray(le, cJSON_CreateNumber(stats_bucket_le[b]));
    cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)h->counts[b]));
  }
  cJSON_AddNumberToObject(o, "count", (double)h->count);
  cJSON_AddNumberToObject(o, "sum", h->sum);
  return o;
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
  cJSON_AddNumberToObject(o, "writesForwarded", (double)w->writes_forwarded);
  cJSON_AddNumberToObject(o, "writesTaken", (double)w->writes_taken);
  cJSON_AddItemToObject(o, "notifyDelay", stats_histogram_json(&w->notify_delay));
  return o;
}
