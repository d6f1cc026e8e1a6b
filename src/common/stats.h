/*
 * worker_stats: the counters one worker reports about itself, as a fixed
 * struct that crosses the master/worker pipe unchanged (both ends are the
 * same binary). The master keeps the latest report of each worker and
 * renders them, per worker and in total, for /metrics (Prometheus text),
 * the control socket and mcpsubctl.
 */
#ifndef MCPSUB_STATS_H
#define MCPSUB_STATS_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/*
 * A latency histogram in seconds: counts per bucket (not cumulative; the
 * last one is +Inf), their number and sum. Upper bounds in
 * stats_bucket_le, from 0.5 ms to 2.5 s.
 */
#define STATS_BUCKETS 12
extern const double stats_bucket_le[STATS_BUCKETS];
typedef struct stats_histogram {
  uint64_t counts[STATS_BUCKETS + 1];
  uint64_t count;
  double sum;
} stats_histogram;

void stats_observe(stats_histogram *h, double seconds);

/* What a request's duration is labelled with: its JSON-RPC method, or its kind. */
typedef enum stats_method {
  STATS_M_INITIALIZE,
  STATS_M_PING,
  STATS_M_SET_LEVEL,
  STATS_M_RESOURCES_LIST,
  STATS_M_TEMPLATES_LIST,
  STATS_M_RESOURCES_READ,
  STATS_M_SUBSCRIBE,
  STATS_M_UNSUBSCRIBE,
  STATS_M_TOOLS_LIST,
  STATS_M_TOOLS_CALL,
  STATS_M_COMPLETE,
  STATS_M_PROMPTS_LIST,
  STATS_M_PROMPTS_GET,
  STATS_M_DISCOVER,
  STATS_M_LISTEN,
  STATS_M_NOTIFICATION, /* a POSTed notification or response */
  STATS_M_BATCH,        /* a JSON-RPC batch */
  STATS_M_STREAM,       /* GET /mcp: a session's SSE stream (time to its head) */
  STATS_M_DELETE,       /* DELETE /mcp */
  STATS_M_REST,
  STATS_M_OTHER, /* health, status, metrics, errors before a method is known */
  STATS_METHODS
} stats_method;
extern const char *const stats_method_names[STATS_METHODS];
/* The label of a JSON-RPC method name (STATS_M_OTHER when it is none of ours). */
stats_method stats_method_of(const char *name);

typedef struct worker_stats {
  uint32_t slot;
  uint32_t generation; /* restarts of this slot so far */
  int32_t pid;
  uint32_t reserved;
  int64_t started_ms;           /* Unix ms */
  uint64_t sessions;            /* live sessions */
  uint64_t streams;             /* open SSE streams (GET streams of sessions) */
  uint64_t listens;             /* open subscriptions/listen streams */
  uint64_t subscriptions;       /* live subscriptions (sessions, listen streams and waiters) */
  uint64_t waiters;             /* pending wait_and_read calls */
  uint64_t connections;         /* open HTTP connections */
  uint64_t queued_bytes;        /* bytes queued on SSE streams, not yet taken by the kernel */
  uint64_t requests;            /* HTTP requests served */
  uint64_t notifications;       /* resource-update frames formatted */
  uint64_t frames_sent;         /* SSE frames written to streams */
  uint64_t frames_replayed;     /* frames sent again on resumption (ring or audit log) */
  uint64_t frames_dropped;      /* frames that left a ring before any stream took them */
  int64_t audit_position;       /* last audit seq the tailer handed on */
  int64_t audit_head;           /* newest audit seq when the report was made */
  uint64_t connections_refused; /* connections closed with 503 over --max-connections */
  uint64_t requests_refused;    /* 401, 403 and 429 answers */
  uint64_t lane_jobs;           /* store lane (PostgreSQL): jobs run */
  uint64_t lane_waits;          /* ...waits for the database that left the loop running */
  uint64_t lane_queued;         /* ...jobs waiting for their turn */
  uint64_t lane_blocked;        /* ...calls from outside the lane (should stay 0) */
  uint64_t reads_done;          /* readers (PostgreSQL, reader.h): reads answered */
  uint64_t reads_pending;       /* ...given to them and not answered yet */
  uint64_t statements_prepared; /* PostgreSQL: statements its connections prepared */
  uint64_t writes_forwarded;    /* record writes sent to the write home (forward.h) */
  uint64_t writes_taken;        /* ...made here for other workers (the write home) */
  stats_histogram notify_delay; /* commit -> its updates queued on their streams, per change */
  stats_histogram request_seconds[STATS_METHODS]; /* request -> response head, by method */
} worker_stats;

/* Master-side facts about a slot, beside the worker's own report. */
typedef struct slot_stats {
  uint64_t restarts; /* times the master restarted this slot's worker */
  int alive;         /* a worker runs in the slot */
} slot_stats;

/*
 * Appends Prometheus text exposition (version 0.0.4) for n workers: one
 * series per worker (label worker="<slot>") of every metric (summing is
 * the query's job), the histograms (per worker, and per method for
 * requests), and mcpsub_build_info. slots[i], when slots is not NULL,
 * describes the slot of workers[i]; NULL means one process: every
 * reported worker is up and none was restarted. n may be 0.
 */
void stats_render_prometheus(buf_t *out, const worker_stats *workers, const slot_stats *slots,
                             size_t n);

/*
 * One report as a new JSON object with camelCase keys (slot, generation,
 * pid, startedMs, sessions, streams, subscriptions, waiters, connections,
 * queuedBytes, requests, notifications, framesSent, framesReplayed,
 * framesDropped, auditPosition, auditHead); the caller owns it (NULL only
 * when out of memory). Counters are JSON numbers (exact up to 2^53).
 */
cJSON *stats_to_json(const worker_stats *w);

#endif
