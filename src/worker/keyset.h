/*
 * Where a worker's JWT signing keys come from (--auth-jwks FILE|URL).
 *
 * A file is read at start, and again when it changes (checked once a
 * second, on SIGHUP, and when a token names a key the set lacks).
 *
 * A URL (http or https) is fetched with libcurl: at start, every
 * KEYSET_REFRESH_MS (so that a key the issuer withdrew stops working),
 * and when a token names an unknown kid — the issuer rotated its keys — at
 * most once per KEYSET_REFETCH_MIN_MS. Fetches after start run on libuv's
 * thread pool; a request whose token names an unknown kid waits for the
 * fetch it started (or the one under way) and is then served again from
 * the start, so the first token signed with a new key already works.
 * A failed fetch keeps the keys loaded before. mcpsubd checks the source
 * once before it starts serving (keyset_check) and refuses to start when
 * it holds no usable key; a worker that starts later (a restart) while
 * the source is unreachable serves without JWT keys and keeps trying.
 *
 * Bounds: a document of JWKS_TEXT_MAX bytes, KEYSET_FETCH_TIMEOUT_MS per
 * fetch, no redirects, KEYSET_WAITING_MAX requests waiting.
 */
#ifndef MCPSUB_KEYSET_H
#define MCPSUB_KEYSET_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/file_stamp.h"
#include "common/jwt.h"
#include "common/mem.h"
#include "worker/http.h"

#define KEYSET_REFRESH_MS       (5 * 60 * 1000)
#define KEYSET_REFETCH_MIN_MS   (10 * 1000)
#define KEYSET_FETCH_TIMEOUT_MS 5000
#define KEYSET_WAITING_MAX      256

/* Serves a request again once the keys it waited for are in (or not). */
typedef void (*keyset_resume_cb)(http_conn_t *c, http_request_t *req, void *data);

typedef struct keyset_waiter keyset_waiter;

typedef struct keyset {
  const char *source; /* the file or the URL */
  bool is_url;
  jwks_t *keys;        /* NULL only before the first load */
  uint64_t generation; /* counts the changes of keys */
  uv_loop_t *loop;
  keyset_resume_cb resume;
  void *resume_data;
  file_stamp stamp; /* of the file as loaded */
  /* URL fetches */
  uv_work_t work;
  bool fetching;
  bool closed;             /* keyset_finish ran (a fetch under way is dropped when it ends) */
  int64_t last_fetch_ms;   /* start of the latest fetch (uv_now) */
  int64_t last_refetch_ms; /* start of the latest fetch for an unknown kid */
  jwks_t *fetched;         /* the fetch's result, handed from the pool thread */
  char fetch_err[256];
  keyset_waiter *waiting; /* requests waiting for the fetch */
  size_t n_waiting;
  uint64_t fetches, fetch_failures;
} keyset_t;

/*
 * Is source (a URL when it starts with http:// or https://, else a file) a
 * key set with a usable key now? -EINVAL with a message in err. Blocking.
 */
int keyset_check(const char *source, char *err, size_t errlen) MCPSUB_NODISCARD;
/* Loads the keys from source (blocking); a failure is logged, and retried later. */
void keyset_init(keyset_t *ks, uv_loop_t *loop, const char *source, keyset_resume_cb resume,
                 void *resume_data);
/* Frees the keys; a fetch under way is left to finish and then dropped. */
void keyset_finish(keyset_t *ks);

/*
 * Periodic upkeep (the worker's 1 s tick, or force on SIGHUP): a changed
 * file is read again; a URL is fetched again when KEYSET_REFRESH_MS passed
 * (or force).
 */
void keyset_tick(keyset_t *ks, bool force);

typedef enum keyset_outcome {
  KEYSET_NOTHING_NEW, /* no other keys to be had now: the token is refused */
  KEYSET_RELOADED,    /* the keys changed: verify the token again */
  KEYSET_WAITING,     /* the request waits for a fetch; it will be resumed */
} keyset_outcome;

/*
 * A token named a key the set lacks: the file is checked for a change, or
 * the request waits for a fetch of the URL (started unless one ran less
 * than KEYSET_REFETCH_MIN_MS ago).
 */
keyset_outcome keyset_unknown_key(keyset_t *ks, http_conn_t *c, http_request_t *req);

#endif
