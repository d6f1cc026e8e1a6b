/*
 * Limits per principal (auth.h): sessions, subscriptions, open streams
 * and a request rate. Over a limit the request is answered 429 with
 * Retry-After, before it has any effect.
 *
 * Sessions and subscriptions are counted in mcp_session (the rows of the
 * principal's live sessions), so they hold across every worker and cannot
 * be escaped by closing and reopening. Streams are counted among this
 * worker's live sessions (a session has at most one stream, so the session
 * limit bounds them across workers too). The request rate is a token
 * bucket per principal in each worker, refilled at rate / workers with a
 * burst of burst / workers (at least 1): the sum over the workers never
 * passes the configured rate.
 */
#ifndef MCPSUB_LIMITS_H
#define MCPSUB_LIMITS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/strmap.h"
#include "worker/auth.h"

typedef struct worker worker_t;

typedef struct limits {
  strmap buckets; /* principal id -> limits_bucket */
  double rate;    /* tokens per second in this worker; 0: no rate limit */
  double burst;
  uint64_t refused; /* 429 answers */
} limits_t;

void limits_init(limits_t *l, const worker_t *w);
void limits_finish(limits_t *l);
/* Forgets buckets idle (and full) for a while: memory stays bounded by active principals. */
void limits_sweep(limits_t *l, int64_t now_ms);

/*
 * Takes a token for a request of p. false (and *retry_after_s, at least 1)
 * when the bucket is empty.
 */
bool limits_take(limits_t *l, const auth_principal *p, int64_t now_ms, unsigned *retry_after_s);

/* Answers 429 with Retry-After and a JSON body saying which limit. */
void limits_respond(worker_t *w, http_conn_t *c, const char *what, unsigned retry_after_s);

#endif
