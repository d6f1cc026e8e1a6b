/*
 * The worker's JWT keys (see keyset.h). libcurl fetches a URL: it speaks
 * HTTP and TLS with certificate verification, which is not ours to write.
 * Fetches after start run on libuv's thread pool, which only fetches and
 * parses; the keys are swapped on the loop thread.
 */
#include "worker/keyset.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/config.h"
#include "common/log.h"

struct keyset_waiter {
  keyset_t *ks;
  http_conn_t *c;
  http_request_t *req;
  keyset_waiter *next, *prev;
};

static bool keyset_source_is_url(const char *s) {
  return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

/* Collects a response body, refusing one past JWKS_TEXT_MAX. */
static size_t keyset_collect(char *data, size_t size, size_t n, void *userdata) {
  buf_t *b = userdata;
  size_t len = size * n;
  if (b->len + len > JWKS_TEXT_MAX) return 0; /* curl fails the transfer */
  buf_append(b, data, len);
  return len;
}

/* Fetches and parses url (blocking; any thread). NULL with a message in err. */
static jwks_t *keyset_fetch(const char *url, char *err, size_t errlen) {
  CURL *curl = curl_easy_init();
  if (curl == NULL) {
    snprintf(err, errlen, "cannot start a transfer");
    return NULL;
  }
  buf_t body;
  buf_init(&body);
  char curl_err[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, url);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)KEYSET_FETCH_TIMEOUT_MS);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE, (long)JWKS_TEXT_MAX);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keyset_collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_err);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "mcpsub/" MCPSUB_VERSION);
  CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  jwks_t *ks = NULL;
  if (rc != CURLE_OK)
    snprintf(err, errlen, "%s: %s", url, curl_err[0] != '\0' ? curl_err : curl_easy_strerror(rc));
  else if (status != 200)
    snprintf(err, errlen, "%s: HTTP status %ld", url, status);
  else if (jwks_parse(body.data != NULL ? body.data : "", body.len, &ks, err, errlen) != 0)
    ks = NULL;
  buf_finish(&body);
  return ks;
}

static void keyset_log_loaded(const keyset_t *ks) {
  char n[32];
  snprintf(n, sizeof(n), "%zu", jwks_count(ks->keys));
  log_info("JWT signing keys loaded", "from", ks->source, "keys", n);
}

/* Reads and parses a key set file. NULL with a message in err. */
static jwks_t *keyset_read_file(const char *path, char *err, size_t errlen) {
  buf_t b;
  buf_init(&b);
  int rc = buf_append_file(&b, path, JWKS_TEXT_MAX);
  jwks_t *keys = NULL;
  if (rc != 0)
    snprintf(err, errlen, "%s: %s", path, rc == -EFBIG ? "too large" : strerror(-rc));
  else if (jwks_parse(b.data != NULL ? b.data : "", b.len, &keys, err, errlen) != 0)
    keys = NULL;
  buf_finish(&b);
  return keys;
}

/* The keys of source, fetched or read (blocking). NULL with a message in err. */
static jwks_t *keyset_load(const char *source, char *err, size_t errlen) {
  if (keyset_source_is_url(source)) return keyset_fetch(source, err, errlen);
  return keyset_read_file(source, err, errlen);
}

int keyset_check(const char *source, char *err, size_t errlen) {
  if (keyset_source_is_url(source)) curl_global_init(CURL_GLOBAL_DEFAULT);
  char why[512];
  jwks_t *keys = keyset_load(source, why, sizeof(why));
  if (keys == NULL) {
    snprintf(err, errlen, "--auth-jwks: %s", why);
    return -EINVAL;
  }
  jwks_free(keys);
  return 0;
}

/* Re-reads the file; false (logged) when it no longer holds a usable key set. */
static bool keyset_reload_file(keyset_t *ks) {
  file_stamp_take(ks->source, &ks->stamp); /* a bad file is reported once, not on every check */
  char why[512];
  jwks_t *keys = keyset_read_file(ks->source, why, sizeof(why));
  if (keys == NULL) {
    log_warn("JWT signing keys not reloaded; the keys loaded before stay", "error", why);
    return false;
  }
  jwks_free(ks->keys);
  ks->keys = keys;
  ks->generation++;
  keyset_log_loaded(ks);
  return true;
}

void keyset_init(keyset_t *ks, uv_loop_t *loop, const char *source, keyset_resume_cb resume,
                 void *resume_data) {
  memset(ks, 0, sizeof(*ks));
  ks->source = source;
  ks->loop = loop;
  ks->resume = resume;
  ks->resume_data = resume_data;
  ks->is_url = keyset_source_is_url(source);
  ks->last_refetch_ms = INT64_MIN / 2;
  if (ks->is_url) curl_global_init(CURL_GLOBAL_DEFAULT);
  if (!ks->is_url) file_stamp_take(source, &ks->stamp);
  char why[512];
  ks->keys = keyset_load(source, why, sizeof(why));
  ks->last_fetch_ms = (int64_t)uv_now(loop);
  ks->fetches = ks->is_url;
  if (ks->keys != NULL)
    keyset_log_loaded(ks);
  else
    log_warn("JWT signing keys not loaded; tokens are refused until they are", "error", why);
}

/* Serves every waiting request again (the keys changed, or the fetch failed). */
static void keyset_resume_all(keyset_t *ks) {
  keyset_waiter *list = ks->waiting;
  ks->waiting = NULL;
  ks->n_waiting = 0;
  while (list != NULL) {
    keyset_waiter *wt = list;
    list = wt->next;
    http_conn_set_close_cb(wt->c, NULL, NULL);
    http_conn_t *c = wt->c;
    http_request_t *req = wt->req;
    free(wt);
    ks->resume(c, req, ks->resume_data);
  }
}

static void keyset_fetch_work(uv_work_t *req) {
  keyset_t *ks = req->data;
  ks->fetched = keyset_fetch(ks->source, ks->fetch_err, sizeof(ks->fetch_err));
}

static void keyset_fetch_done(uv_work_t *req, int status) {
  keyset_t *ks = req->data;
  ks->fetching = false;
  if (ks->closed) {
    jwks_free(ks->fetched);
    ks->fetched = NULL;
    return;
  }
  if (ks->fetched != NULL) {
    jwks_free(ks->keys);
    ks->keys = ks->fetched;
    ks->generation++;
    ks->fetched = NULL;
    keyset_log_loaded(ks);
  } else {
    ks->fetch_failures++;
    log_warn("JWT signing keys not fetched; the keys loaded before stay", "error",
             status == 0 ? ks->fetch_err : uv_strerror(status));
  }
  keyset_resume_all(ks);
}

static void keyset_start_fetch(keyset_t *ks) {
  if (ks->fetching) return;
  ks->fetching = true;
  ks->fetches++;
  ks->last_fetch_ms = (int64_t)uv_now(ks->loop);
  ks->fetch_err[0] = '\0';
  ks->work.data = ks;
  int rc = uv_queue_work(ks->loop, &ks->work, keyset_fetch_work, keyset_fetch_done);
  if (rc != 0) {
    ks->fetching = false;
    log_warn("JWT signing keys: cannot start a fetch", "error", uv_strerror(rc));
  }
}

void keyset_tick(keyset_t *ks, bool force) {
  if (ks->source == NULL || ks->closed) return;
  if (ks->is_url) {
    if (force || (int64_t)uv_now(ks->loop) - ks->last_fetch_ms >= KEYSET_REFRESH_MS)
      keyset_start_fetch(ks);
    return;
  }
  file_stamp now;
  file_stamp_take(ks->source, &now);
  if (!force && (file_stamp_same(&now, &ks->stamp) || (!now.valid && !ks->stamp.valid))) return;
  keyset_reload_file(ks);
}

static void keyset_waiter_gone(http_conn_t *c, void *data) {
  keyset_waiter *wt = data;
  keyset_t *ks = wt->ks;
  if (wt->prev != NULL)
    wt->prev->next = wt->next;
  else
    ks->waiting = wt->next;
  if (wt->next != NULL) wt->next->prev = wt->prev;
  ks->n_waiting--;
  free(wt);
}

keyset_outcome keyset_unknown_key(keyset_t *ks, http_conn_t *c, http_request_t *req) {
  if (ks->closed) return KEYSET_NOTHING_NEW;
  if (!ks->is_url) {
    file_stamp now;
    file_stamp_take(ks->source, &now);
    if (file_stamp_same(&now, &ks->stamp)) return KEYSET_NOTHING_NEW;
    return keyset_reload_file(ks) ? KEYSET_RELOADED : KEYSET_NOTHING_NEW;
  }
  int64_t now = (int64_t)uv_now(ks->loop);
  if (!ks->fetching && now - ks->last_refetch_ms < KEYSET_REFETCH_MIN_MS) return KEYSET_NOTHING_NEW;
  if (ks->n_waiting >= KEYSET_WAITING_MAX) return KEYSET_NOTHING_NEW;
  if (!ks->fetching) ks->last_refetch_ms = now;
  keyset_start_fetch(ks);
  if (!ks->fetching) return KEYSET_NOTHING_NEW;
  keyset_waiter *wt = mem_calloc(1, sizeof(*wt));
  wt->ks = ks;
  wt->c = c;
  wt->req = req;
  wt->next = ks->waiting;
  if (ks->waiting != NULL) ks->waiting->prev = wt;
  ks->waiting = wt;
  ks->n_waiting++;
  http_conn_set_close_cb(c, keyset_waiter_gone, wt);
  return KEYSET_WAITING;
}

void keyset_finish(keyset_t *ks) {
  /* Waiting requests are answered now, with the keys there are (their token's key is not). */
  ks->closed = true;
  keyset_resume_all(ks);
  if (ks->fetching) uv_cancel((uv_req_t *)&ks->work); /* either way keyset_fetch_done runs */
  jwks_free(ks->keys);
  ks->keys = NULL;
}
