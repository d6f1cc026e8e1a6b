/*
 * Unit tests of the stats renderers: the exact Prometheus text for two
 * workers (per-worker samples, sums, the largest tailer lag), HELP and TYPE
 * once per family, the one-process case without slot facts, and the JSON
 * form the control socket serves.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/buf.h"
#include "common/config.h"
#include "common/stats.h"

static void two_workers(worker_stats w[2], slot_stats s[2]) {
  memset(w, 0, 2 * sizeof(*w));
  w[0] = (worker_stats){.slot = 0,
                        .generation = 1,
                        .pid = 101,
                        .started_ms = 1700000000000,
                        .sessions = 3,
                        .streams = 2,
                        .listens = 4,
                        .subscriptions = 7,
                        .waiters = 1,
                        .connections = 4,
                        .queued_bytes = 512,
                        .requests = 100,
                        .notifications = 20,
                        .frames_sent = 30,
                        .frames_replayed = 5,
                        .frames_dropped = 1,
                        .audit_position = 90,
                        .audit_head = 100,
                        .connections_refused = 3,
                        .writes_taken = 12};
  w[1] = (worker_stats){.slot = 1,
                        .generation = 0,
                        .pid = 102,
                        .started_ms = 1700000000500,
                        .sessions = 2,
                        .streams = 1,
                        .subscriptions = 3,
                        .waiters = 0,
                        .connections = 2,
                        .queued_bytes = 0,
                        .requests = 50,
                        .notifications = 10,
                        .frames_sent = 12,
                        .frames_replayed = 0,
                        .frames_dropped = 0,
                        .audit_position = 97,
                        .audit_head = 100,
                        .requests_refused = 4,
                        .lane_jobs = 60,
                        .lane_waits = 70,
                        .lane_queued = 2,
                        .reads_done = 41,
                        .reads_pending = 3,
                        .statements_prepared = 17,
                        .writes_forwarded = 12};
  s[0] = (slot_stats){.restarts = 1, .alive = 1};
  s[1] = (slot_stats){.restarts = 0, .alive = 0};
}

/* The rendered text, as a new string. */
static char *render(const worker_stats *w, const slot_stats *s, size_t n) {
  buf_t b;
  buf_init(&b);
  stats_render_prometheus(&b, w, s, n);
  return buf_steal(&b);
}

static int count_occurrences(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

static void test_prometheus_two_workers_exact(void) {
  worker_stats w[2];
  slot_stats s[2];
  two_workers(w, s);
  char *text = render(w, s, 2);
  static const char expected[] =
      "# HELP mcpsub_build_info The running mcpsubd's version.\n"
      "# TYPE mcpsub_build_info gauge\n"
      "mcpsub_build_info{version=\"" MCPSUB_VERSION "\"} 1\n"
      "# HELP mcpsub_worker_up 1 when a worker process runs in the slot.\n"
      "# TYPE mcpsub_worker_up gauge\n"
      "mcpsub_worker_up{worker=\"0\"} 1\n"
      "mcpsub_worker_up{worker=\"1\"} 0\n"
      "# HELP mcpsub_sessions Live MCP sessions.\n"
      "# TYPE mcpsub_sessions gauge\n"
      "mcpsub_sessions{worker=\"0\"} 3\n"
      "mcpsub_sessions{worker=\"1\"} 2\n"
      "# HELP mcpsub_streams Open SSE streams of sessions (GET).\n"
      "# TYPE mcpsub_streams gauge\n"
      "mcpsub_streams{worker=\"0\"} 2\n"
      "mcpsub_streams{worker=\"1\"} 1\n"
      "# HELP mcpsub_listen_streams Open subscriptions/listen streams (2026-07-28).\n"
      "# TYPE mcpsub_listen_streams gauge\n"
      "mcpsub_listen_streams{worker=\"0\"} 4\n"
      "mcpsub_listen_streams{worker=\"1\"} 0\n"
      "# HELP mcpsub_subscriptions Live resource subscriptions (sessions and waiters).\n"
      "# TYPE mcpsub_subscriptions gauge\n"
      "mcpsub_subscriptions{worker=\"0\"} 7\n"
      "mcpsub_subscriptions{worker=\"1\"} 3\n"
      "# HELP mcpsub_waiters Pending wait_and_read calls.\n"
      "# TYPE mcpsub_waiters gauge\n"
      "mcpsub_waiters{worker=\"0\"} 1\n"
      "mcpsub_waiters{worker=\"1\"} 0\n"
      "# HELP mcpsub_connections Open HTTP connections.\n"
      "# TYPE mcpsub_connections gauge\n"
      "mcpsub_connections{worker=\"0\"} 4\n"
      "mcpsub_connections{worker=\"1\"} 2\n"
      "# HELP mcpsub_stream_queue_bytes Bytes queued on SSE streams, not yet taken by the kernel.\n"
      "# TYPE mcpsub_stream_queue_bytes gauge\n"
      "mcpsub_stream_queue_bytes{worker=\"0\"} 512\n"
      "mcpsub_stream_queue_bytes{worker=\"1\"} 0\n"
      "# HELP mcpsub_audit_tailer_lag Audit rows committed but not yet handed on by the tailer.\n"
      "# TYPE mcpsub_audit_tailer_lag gauge\n"
      "mcpsub_audit_tailer_lag{worker=\"0\"} 10\n"
      "mcpsub_audit_tailer_lag{worker=\"1\"} 3\n"
      "# HELP mcpsub_requests_total HTTP requests served.\n"
      "# TYPE mcpsub_requests_total counter\n"
      "mcpsub_requests_total{worker=\"0\"} 100\n"
      "mcpsub_requests_total{worker=\"1\"} 50\n"
      "# HELP mcpsub_notifications_sent_total SSE frames written to streams.\n"
      "# TYPE mcpsub_notifications_sent_total counter\n"
      "mcpsub_notifications_sent_total{worker=\"0\"} 30\n"
      "mcpsub_notifications_sent_total{worker=\"1\"} 12\n"
      "# HELP mcpsub_notifications_formatted_total Resource-update frames formatted.\n"
      "# TYPE mcpsub_notifications_formatted_total counter\n"
      "mcpsub_notifications_formatted_total{worker=\"0\"} 20\n"
      "mcpsub_notifications_formatted_total{worker=\"1\"} 10\n"
      "# HELP mcpsub_notifications_replayed_total Frames sent again on resumption (replay ring or "
      "audit log).\n"
      "# TYPE mcpsub_notifications_replayed_total counter\n"
      "mcpsub_notifications_replayed_total{worker=\"0\"} 5\n"
      "mcpsub_notifications_replayed_total{worker=\"1\"} 0\n"
      "# HELP mcpsub_notifications_dropped_total Frames that left a replay ring before any stream "
      "took them.\n"
      "# TYPE mcpsub_notifications_dropped_total counter\n"
      "mcpsub_notifications_dropped_total{worker=\"0\"} 1\n"
      "mcpsub_notifications_dropped_total{worker=\"1\"} 0\n"
      "# HELP mcpsub_connections_refused_total Connections answered 503 and closed over "
      "--max-connections (total or per address).\n"
      "# TYPE mcpsub_connections_refused_total counter\n"
      "mcpsub_connections_refused_total{worker=\"0\"} 3\n"
      "mcpsub_connections_refused_total{worker=\"1\"} 0\n"
      "# HELP mcpsub_requests_refused_total Requests refused for their credentials or limits "
      "(401, 403, 429).\n"
      "# TYPE mcpsub_requests_refused_total counter\n"
      "mcpsub_requests_refused_total{worker=\"0\"} 0\n"
      "mcpsub_requests_refused_total{worker=\"1\"} 4\n";
  static const char expected_rest[] =
      "# HELP mcpsub_writes_forwarded_total Record writes sent to the write home, slot 0 (SQLite, "
      "several workers).\n"
      "# TYPE mcpsub_writes_forwarded_total counter\n"
      "mcpsub_writes_forwarded_total{worker=\"0\"} 0\n"
      "mcpsub_writes_forwarded_total{worker=\"1\"} 12\n"
      "# HELP mcpsub_writes_taken_total Record writes the write home made for other workers.\n"
      "# TYPE mcpsub_writes_taken_total counter\n"
      "mcpsub_writes_taken_total{worker=\"0\"} 12\n"
      "mcpsub_writes_taken_total{worker=\"1\"} 0\n"
      "# HELP mcpsub_store_lane_jobs_total Jobs run on the store lane (PostgreSQL: requests, "
      "tailer runs, control commands).\n"
      "# TYPE mcpsub_store_lane_jobs_total counter\n"
      "mcpsub_store_lane_jobs_total{worker=\"0\"} 0\n"
      "mcpsub_store_lane_jobs_total{worker=\"1\"} 60\n"
      "# HELP mcpsub_store_lane_waits_total Waits for the database during which the worker's loop "
      "kept running (PostgreSQL).\n"
      "# TYPE mcpsub_store_lane_waits_total counter\n"
      "mcpsub_store_lane_waits_total{worker=\"0\"} 0\n"
      "mcpsub_store_lane_waits_total{worker=\"1\"} 70\n"
      "# HELP mcpsub_store_lane_queued Store lane jobs waiting for the one running (PostgreSQL).\n"
      "# TYPE mcpsub_store_lane_queued gauge\n"
      "mcpsub_store_lane_queued{worker=\"0\"} 0\n"
      "mcpsub_store_lane_queued{worker=\"1\"} 2\n"
      "# HELP mcpsub_store_lane_blocked_total Database calls made outside the store lane, which "
      "blocked the loop or were refused (a bug: stays 0).\n"
      "# TYPE mcpsub_store_lane_blocked_total counter\n"
      "mcpsub_store_lane_blocked_total{worker=\"0\"} 0\n"
      "mcpsub_store_lane_blocked_total{worker=\"1\"} 0\n"
      "# HELP mcpsub_db_reads_total Reads of records and collections answered by the worker's "
      "reader connections (PostgreSQL).\n"
      "# TYPE mcpsub_db_reads_total counter\n"
      "mcpsub_db_reads_total{worker=\"0\"} 0\n"
      "mcpsub_db_reads_total{worker=\"1\"} 41\n"
      "# HELP mcpsub_db_reads_pending Reads given to the reader connections and not answered yet.\n"
      "# TYPE mcpsub_db_reads_pending gauge\n"
      "mcpsub_db_reads_pending{worker=\"0\"} 0\n"
      "mcpsub_db_reads_pending{worker=\"1\"} 3\n"
      "# HELP mcpsub_db_statements_prepared_total Statements the worker's PostgreSQL connections "
      "prepared (each text a connection runs twice).\n"
      "# TYPE mcpsub_db_statements_prepared_total counter\n"
      "mcpsub_db_statements_prepared_total{worker=\"0\"} 0\n"
      "mcpsub_db_statements_prepared_total{worker=\"1\"} 17\n"
      "# HELP mcpsub_worker_restarts_total Times the master restarted the slot's worker.\n"
      "# TYPE mcpsub_worker_restarts_total counter\n"
      "mcpsub_worker_restarts_total{worker=\"0\"} 1\n"
      "mcpsub_worker_restarts_total{worker=\"1\"} 0\n"
      "# HELP mcpsub_worker_start_time_seconds When the slot's worker started (Unix time).\n"
      "# TYPE mcpsub_worker_start_time_seconds gauge\n"
      "mcpsub_worker_start_time_seconds{worker=\"0\"} 1700000000.000\n"
      "mcpsub_worker_start_time_seconds{worker=\"1\"} 1700000000.500\n";
  /* The gauges and counters, then the histograms (test_prometheus_histograms). */
  char *whole = malloc(sizeof(expected) + sizeof(expected_rest));
  CHECK(whole != NULL);
  snprintf(whole, sizeof(expected) + sizeof(expected_rest), "%s%s", expected, expected_rest);
  if (strncmp(text, whole, strlen(whole)) != 0) CHECK_STR_EQ(text, whole);
  free(whole);
  CHECK(strstr(text, "worker=\"all\"") == NULL); /* summing is the query's job */
  free(text);
}

/* Every family has exactly one HELP and one TYPE line, before its samples. */
static void test_prometheus_help_type_once(void) {
  worker_stats w[2];
  slot_stats s[2];
  two_workers(w, s);
  char *text = render(w, s, 2);
  int families = 0;
  for (char *line = text; *line != '\0';) {
    char *end = strchr(line, '\n');
    CHECK(end != NULL); /* every line, the last included, ends in \n */
    if (strncmp(line, "# TYPE ", 7) == 0) {
      char name[96], kind[32];
      CHECK(sscanf(line + 7, "%95s %31s", name, kind) == 2);
      char help[128], type[128], sample[128];
      snprintf(help, sizeof(help), "# HELP %s ", name);
      snprintf(type, sizeof(type), "# TYPE %s ", name);
      snprintf(sample, sizeof(sample), "\n%s%s{", name,
               strcmp(kind, "histogram") == 0 ? "_count" : "");
      CHECK_INT_EQ(count_occurrences(text, help), 1);
      CHECK_INT_EQ(count_occurrences(text, type), 1);
      /* one sample per worker (build_info: one; request durations: per method called) */
      int want = strcmp(name, "mcpsub_build_info") == 0                 ? 1
                 : strcmp(name, "mcpsub_request_duration_seconds") == 0 ? 0
                                                                        : 2;
      CHECK_INT_EQ(count_occurrences(text, sample), want);
      /* HELP comes right before TYPE, the samples after it */
      CHECK(strstr(text, help) < strstr(text, type));
      CHECK(want == 0 || strstr(text, sample) > line);
      families++;
    }
    line = end + 1;
  }
  CHECK_INT_EQ(families, 30);
  CHECK_INT_EQ(count_occurrences(text, "# HELP "), 30);
  free(text);
}

/* Histograms: cumulative buckets, +Inf, sum and count; request durations per method called. */
static void test_prometheus_histograms(void) {
  worker_stats w[1] = {{.slot = 3}};
  stats_observe(&w[0].notify_delay, 0.0002); /* <= 0.0005 */
  stats_observe(&w[0].notify_delay, 0.002);  /* <= 0.0025 */
  stats_observe(&w[0].notify_delay, 9.0);    /* +Inf only */
  stats_observe(&w[0].request_seconds[STATS_M_TOOLS_CALL], 0.03);
  char *text = render(w, NULL, 1);
  static const char delay[] =
      "mcpsub_notification_delay_seconds_bucket{worker=\"3\",le=\"0.0005\"} 1\n"
      "mcpsub_notification_delay_seconds_bucket{worker=\"3\",le=\"0.001\"} 1\n"
      "mcpsub_notification_delay_seconds_bucket{worker=\"3\",le=\"0.0025\"} 2\n";
  CHECK(strstr(text, delay) != NULL);
  CHECK(strstr(text, "mcpsub_notification_delay_seconds_bucket{worker=\"3\",le=\"2.5\"} 2\n"));
  CHECK(strstr(text, "mcpsub_notification_delay_seconds_bucket{worker=\"3\",le=\"+Inf\"} 3\n"));
  CHECK(strstr(text, "mcpsub_notification_delay_seconds_sum{worker=\"3\"} 9.0022\n"));
  CHECK(strstr(text, "mcpsub_notification_delay_seconds_count{worker=\"3\"} 3\n"));
  CHECK(strstr(text, "mcpsub_request_duration_seconds_bucket{worker=\"3\",method=\"tools/call\","
                     "le=\"0.05\"} 1\n"));
  CHECK(strstr(text,
               "mcpsub_request_duration_seconds_count{worker=\"3\",method=\"tools/call\"} 1\n"));
  CHECK_INT_EQ(count_occurrences(text, "mcpsub_request_duration_seconds_count{"), 1);
  CHECK_INT_EQ(stats_method_of("resources/read"), STATS_M_RESOURCES_READ);
  CHECK_INT_EQ(stats_method_of("nope/none"), STATS_M_OTHER);
  CHECK_INT_EQ(stats_method_of("rest"), STATS_M_OTHER); /* only JSON-RPC methods by name */
  free(text);
}

/* The tailer's lag is clamped at 0. */
static void test_prometheus_lag_max_and_clamp(void) {
  worker_stats w[3] = {
      {.slot = 0, .audit_position = 50, .audit_head = 40}, /* head sampled behind: 0 */
      {.slot = 1, .audit_position = 10, .audit_head = 18},
      {.slot = 2, .audit_position = 20, .audit_head = 25},
  };
  char *text = render(w, NULL, 3);
  CHECK(strstr(text, "mcpsub_audit_tailer_lag{worker=\"0\"} 0\n") != NULL);
  CHECK(strstr(text, "mcpsub_audit_tailer_lag{worker=\"1\"} 8\n") != NULL);
  CHECK(strstr(text, "mcpsub_audit_tailer_lag{worker=\"2\"} 5\n") != NULL);
  free(text);
}

/* Without slot facts (one process) every reported worker is up, none restarted. */
static void test_prometheus_without_slots(void) {
  worker_stats w[2];
  slot_stats s[2];
  two_workers(w, s);
  w[1].slot = 7; /* labels are the slot numbers, not array positions */
  char *text = render(w, NULL, 2);
  CHECK(strstr(text, "mcpsub_worker_up{worker=\"0\"} 1\n") != NULL);
  CHECK(strstr(text, "mcpsub_worker_up{worker=\"7\"} 1\n") != NULL);
  CHECK(strstr(text, "mcpsub_worker_restarts_total{worker=\"0\"} 0\n") != NULL);
  CHECK(strstr(text, "mcpsub_sessions{worker=\"7\"} 2\n") != NULL);
  free(text);
}

/* No worker reported yet: the families, no sample but build_info, still valid text. */
static void test_prometheus_no_workers(void) {
  char *text = render(NULL, NULL, 0);
  CHECK_INT_EQ(count_occurrences(text, "# TYPE "), 30);
  CHECK(strstr(text, "mcpsub_build_info{") != NULL);
  CHECK(strstr(text, "{worker=\"0\"}") == NULL);
  free(text);
}

/* Appends: what was in the buffer stays in front. */
static void test_prometheus_appends(void) {
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "# before\n");
  stats_render_prometheus(&b, NULL, NULL, 0);
  CHECK(strncmp(b.data, "# before\n# HELP mcpsub_build_info ", 34) == 0);
  buf_finish(&b);
}

static double number(const cJSON *o, const char *key) {
  const cJSON *item = cJSON_GetObjectItemCaseSensitive(o, key);
  CHECK(cJSON_IsNumber(item));
  return item->valuedouble;
}

static void test_json_keys_and_values(void) {
  worker_stats w[2];
  slot_stats s[2];
  two_workers(w, s);
  cJSON *o = stats_to_json(&w[0]);
  CHECK(cJSON_IsObject(o));
  static const struct {
    const char *key;
    double value;
  } want[] = {
      {"slot", 0},
      {"generation", 1},
      {"pid", 101},
      {"startedMs", 1700000000000.0},
      {"sessions", 3},
      {"streams", 2},
      {"listens", 4},
      {"subscriptions", 7},
      {"waiters", 1},
      {"connections", 4},
      {"queuedBytes", 512},
      {"requests", 100},
      {"notifications", 20},
      {"framesSent", 30},
      {"framesReplayed", 5},
      {"framesDropped", 1},
      {"auditPosition", 90},
      {"auditHead", 100},
      {"writesForwarded", 0},
      {"writesTaken", 12},
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    if (number(o, want[i].key) != want[i].value) {
      fprintf(stderr, "key %s: %f, want %f\n", want[i].key, number(o, want[i].key), want[i].value);
      CHECK(0);
    }
  }
  /* ... and the commit -> notification histogram (for mcpsubctl top's p99). */
  const cJSON *delay = cJSON_GetObjectItemCaseSensitive(o, "notifyDelay");
  CHECK_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(delay, "le")), STATS_BUCKETS);
  CHECK_INT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(delay, "counts")),
               STATS_BUCKETS + 1);
  CHECK_INT_EQ(cJSON_GetArraySize(o), sizeof(want) / sizeof(want[0]) + 1);
  char *text = cJSON_PrintUnformatted(o);
  CHECK(strstr(text, "\"startedMs\":1700000000000") != NULL); /* not in exponent form */
  cJSON_free(text);
  cJSON_Delete(o);
}

int main(void) {
  RUN(test_prometheus_two_workers_exact);
  RUN(test_prometheus_help_type_once);
  RUN(test_prometheus_histograms);
  RUN(test_prometheus_lag_max_and_clamp);
  RUN(test_prometheus_without_slots);
  RUN(test_prometheus_no_workers);
  RUN(test_prometheus_appends);
  RUN(test_json_keys_and_values);
  return 0;
}
