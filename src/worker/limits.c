/*
 * Per-principal limits (see limits.h). The rate check is on every request:
 * one hash lookup and a little arithmetic, no allocation once a principal
 * has its bucket.
 */
#include "worker/limits.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/mem.h"
#include "worker/worker.h"

typedef struct limits_bucket {
  double tokens;
  int64_t last_ms;
} limits_bucket;

void limits_init(limits_t *l, const worker_t *w) {
  memset(l, 0, sizeof(*l));
  strmap_init(&l->buckets);
  unsigned n = w->cfg->workers > 0 ? (unsigned)w->cfg->workers : 1;
  if (w->cfg->rate_limit > 0) {
    l->rate = w->cfg->rate_limit / n;
    l->burst = (double)w->cfg->rate_burst / n;
    if (l->burst < 1) l->burst = 1;
  }
}

static void limits_free_bucket(const char *key, size_t len, void *value, void *data) {
  free(value);
}

void limits_finish(limits_t *l) {
  strmap_foreach(&l->buckets, limits_free_bucket, NULL);
  strmap_finish(&l->buckets);
}

typedef struct sweep_ctx {
  limits_t *l;
  int64_t now;
  const char *drop[256];
  size_t n;
} sweep_ctx;

static void limits_collect_idle(const char *key, size_t len, void *value, void *data) {
  sweep_ctx *ctx = data;
  limits_bucket *b = value;
  double refilled = b->tokens + ctx->l->rate * (double)(ctx->now - b->last_ms) / 1000.0;
  if (refilled >= ctx->l->burst && ctx->now - b->last_ms > 60000 && ctx->n < ARRAY_LEN(ctx->drop))
    ctx->drop[ctx->n++] = key;
}

void limits_sweep(limits_t *l, int64_t now_ms) {
  sweep_ctx ctx = {.l = l, .now = now_ms};
  strmap_foreach(&l->buckets, limits_collect_idle, &ctx);
  for (size_t i = 0; i < ctx.n; i++)
    free(strmap_remove(&l->buckets, ctx.drop[i], strlen(ctx.drop[i])));
}

bool limits_take(limits_t *l, const auth_principal *p, int64_t now_ms, unsigned *retry_after_s) {
  if (l->rate <= 0) return true;
  size_t len = strlen(p->id);
  limits_bucket *b = strmap_get(&l->buckets, p->id, len);
  if (b == NULL) {
    b = mem_alloc(sizeof(*b));
    b->tokens = l->burst;
    b->last_ms = now_ms;
    strmap_put(&l->buckets, p->id, len, b);
  }
  b->tokens += l->rate * (double)(now_ms - b->last_ms) / 1000.0;
  if (b->tokens > l->burst) b->tokens = l->burst;
  b->last_ms = now_ms;
  if (b->tokens >= 1) {
    b->tokens -= 1;
    return true;
  }
  double wait_s = (1 - b->tokens) / l->rate;
  *retry_after_s = (unsigned)ceil(wait_s);
  if (*retry_after_s < 1) *retry_after_s = 1;
  l->refused++;
  return false;
}

void limits_respond(worker_t *w, http_conn_t *c, const char *what, unsigned retry_after_s) {
  char retry[16];
  snprintf(retry, sizeof(retry), "%u", retry_after_s);
  http_header h = {"Retry-After", retry};
  char msg[160];
  snprintf(msg, sizeof(msg), "too many requests: %s", what);
  worker_respond_error_with(c, 429, msg, &h, 1);
  if (strcmp(what, "request rate") != 0) w->limits.refused++;
}
