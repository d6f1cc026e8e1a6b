/*
 * The REST API: the same tables as the MCP resources, at the same paths as
 * their URIs under the public base ({base}/{Table}/{key} is both a resource
 * URI and, relative to the server, a REST path). Paths are parsed with the
 * URI parser, so filters, paging and percent-encoding mean the same in
 * both. Writes are plain store writes: the audit triggers record them like
 * any other writer's.
 */
#include "worker/rest.h"

#include "common/jsonrpc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "common/mem.h"
#include "common/uri.h"
#include "worker/forward.h"
#include "worker/mcp.h"
#include "worker/subscriptions.h"

#include <llhttp.h>

/* Answers a failed store call. */
static void rest_store_error(http_conn_t *c, int rc, const char *err) {
  switch (rc) {
  case -ENOENT: worker_respond_error(c, 404, "no such record"); break;
  case -EINVAL: worker_respond_error(c, 400, err[0] != '\0' ? err : "invalid request"); break;
  case -EEXIST: worker_respond_error(c, 409, err[0] != '\0' ? err : "constraint violated"); break;
  case -EBUSY: {
    /* Another process held the database locked past --write-timeout (or a read met a lock). */
    http_header h = {"Retry-After", "1"};
    worker_respond_error_with(c, 503, "database busy: another process holds it locked; retry", &h,
                              1);
    break;
  }
  case -ENOTCONN: {
    /* The database server is unreachable (PostgreSQL): the store reconnects on its next call. */
    http_header h = {"Retry-After", "1"};
    worker_respond_error_with(c, 503, "database unavailable; retry", &h, 1);
    break;
  }
  case -ENOSPC:
    worker_respond_error(c, 507, "insufficient storage: the database or the disk is full");
    break;
  case -EACCES:
    worker_respond_error(c, 403, err[0] != '\0' ? err : "outside your row scope");
    break;
  default: worker_respond_error(c, 500, "database error"); break;
  }
}

/* A REST write on the writer: answered from its completion. */
typedef struct rest_write {
  writer_record rec;
  worker_t *w;
  http_conn_t *c;
  bool post; /* 201 with Location */
} rest_write;

static void rest_send_record(rest_write *r, int status, const store_table *t, const char *location);

static void rest_write_done(writer_job *j) {
  rest_write *r = (rest_write *)j;
  const store_table *t = store_find_table(r->w->store, r->rec.table);
  if (j->rc != 0) {
    rest_store_error(r->c, j->rc, r->rec.err);
  } else if (r->rec.is_delete) {
    http_respond(r->c, 204, NULL, 0, NULL, 0);
  } else if (t == NULL) {
    worker_respond_error(r->c, 500, "the table is gone");
  } else if (r->post) {
    char *location = uri_format_record("", t->name, r->rec.out_key);
    rest_send_record(r, 201, t, location);
    free(location);
  } else {
    rest_send_record(r, r->rec.created ? 201 : 200, t, NULL);
  }
  writer_record_free(&r->rec);
}

/*
 * Queues a write of t by p (body taken; NULL for a delete), inside p's row
 * scope; the request is answered when it is done.
 */
static void rest_write_submit(worker_t *w, http_conn_t *c, const auth_principal *p,
                              const store_table *t, const char *key, cJSON *body,
                              store_write_mode mode, bool is_delete, bool post) {
  auth_scope scope;
  if (auth_table_access(p, t->name, AUTH_WRITE, &scope) != 0) {
    cJSON_Delete(body); /* rest_allowed checked it already; the grants do not change meanwhile */
    auth_respond_forbidden(w, c, AUTH_WRITE);
    return;
  }
  store_guard g = auth_guard(p, &scope);
  rest_write *r = (rest_write *)writer_record_create(sizeof(rest_write), t->name, key, body, mode,
                                                     is_delete, &g, rest_write_done);
  r->w = w;
  r->c = c;
  r->post = post;
  forward_submit(w, &r->rec);
}

/* Answers with a record and its version as ETag. */
static void rest_respond_record(http_conn_t *c, int status, const cJSON *row, int64_t version,
                                const char *location) {
  char etag[40];
  snprintf(etag, sizeof(etag), "\"%lld\"", (long long)version);
  http_header h[2] = {{"ETag", etag}, {"Location", location}};
  worker_respond_json(c, status, row, h, location != NULL ? 2 : 1);
}

/* Sends the record as r's write left it. */
static void rest_send_record(rest_write *r, int status, const store_table *t,
                             const char *location) {
  cJSON *row = NULL;
  int64_t version = 0;
  int rc = writer_record_take_row(&r->rec, r->w->store, t, &row, &version);
  if (rc != 0)
    rest_store_error(r->c, rc, "");
  else
    rest_respond_record(r->c, status, row, version, location);
  cJSON_Delete(row);
}

static cJSON *rest_parse_body(http_conn_t *c, const http_request_t *req) {
  if (!jsonrpc_strings_ok(req->body, req->body_len)) {
    worker_respond_error(c, 400, "strings containing U+0000 are not supported");
    return NULL;
  }
  cJSON *body = jsonrpc_parse_exact(req->body, req->body_len); /* stored with every digit */
  if (body == NULL || !cJSON_IsObject(body)) {
    cJSON_Delete(body);
    worker_respond_error(c, 400, "request body must be a JSON object");
    return NULL;
  }
  return body;
}

/*
 * Answers a GET from its fetch: a record with its ETag, or a page of a
 * collection with a Link to the next (u as requested).
 */
static void rest_read_respond(http_conn_t *c, const uri_t *u, read_fetch *f, int rc) {
  if (rc == -ENOENT && f->bad_column != NULL) {
    char msg[300];
    snprintf(msg, sizeof(msg), "unknown column %.200s", f->bad_column);
    worker_respond_error(c, 400, msg);
  } else if (rc != 0) {
    /* No such record, or one outside the caller's row scope: the same answer. */
    rest_store_error(c, rc, rc == -EINVAL && u->kind != URI_RECORD ? "invalid cursor" : "");
  } else if (u->kind == URI_RECORD) {
    rest_respond_record(c, 200, f->data, f->version, NULL);
  } else if (f->next != NULL) {
    /* RFC 8288 Link to the next page, relative to this server. */
    uri_t page = *u;
    page.cursor = f->next;
    page.limit = f->limit;
    char *uri = uri_format("", &page);
    buf_t link;
    buf_init(&link);
    buf_printf(&link, "<%s>; rel=\"next\"", uri);
    free(uri);
    http_header h = {"Link", link.data};
    worker_respond_json(c, 200, f->data, &h, 1);
    buf_finish(&link);
  } else {
    worker_respond_json(c, 200, f->data, NULL, 0);
  }
}

/* A GET on a reader: answered from its completion. */
typedef struct rest_read {
  read_job rj;
  http_conn_t *c;
  uri_t u; /* as requested */
} rest_read;

static void rest_read_answer(read_job *rj) {
  rest_read *r = (rest_read *)rj;
  rest_read_respond(r->c, &r->u, &rj->f, rj->job.rc);
  uri_finish(&r->u);
  read_job_free(rj);
}

/* A GET of a record or a collection: u as requested, read within p's row scope. */
static void rest_get(worker_t *w, http_conn_t *c, const auth_principal *p, uri_t *u,
                     const store_table *t) {
  auth_scope scope;
  uri_t scoped = uri_copy(u);
  read_fetch f = {.scoped = &scoped, .limit = resources_page_limit(w, u), .cursor = u->cursor};
  if (auth_table_access(p, t->name, AUTH_READ, &scope) != 0 ||
      auth_scope_apply(&scope, &scoped) != 0) {
    worker_respond_error(c, 404, "not found");
  } else if (w->reader != NULL) {
    rest_read *r = (rest_read *)read_job_create(sizeof(*r), t->name, &f, rest_read_answer);
    r->c = c;
    r->u = *u;
    memset(u, 0, sizeof(*u)); /* r owns it now */
    reader_submit(w->reader, &r->rj.job);
  } else {
    rest_read_respond(c, u, &f, read_fetch_run(w->store, t, &f));
    read_fetch_finish(&f);
  }
  uri_finish(&scoped);
}

static void rest_collection_post(worker_t *w, http_conn_t *c, const http_request_t *req,
                                 const auth_principal *p, const store_table *t) {
  cJSON *body = rest_parse_body(c, req);
  if (body == NULL) return;
  rest_write_submit(w, c, p, t, NULL, body, STORE_WRITE_INSERT, false, true);
}

static void rest_record(worker_t *w, http_conn_t *c, const http_request_t *req,
                        const auth_principal *p, const store_table *t, const char *key) {
  switch (req->method) {
  case HTTP_PUT:
  case HTTP_PATCH: {
    cJSON *body = rest_parse_body(c, req);
    if (body == NULL) return;
    rest_write_submit(w, c, p, t, key, body,
                      req->method == HTTP_PUT ? STORE_WRITE_REPLACE : STORE_WRITE_PATCH, false,
                      false);
    return;
  }
  case HTTP_DELETE:
    rest_write_submit(w, c, p, t, key, NULL, STORE_WRITE_PATCH, true, false);
    return;
  default: worker_respond_not_allowed(c, "GET, PUT, PATCH, DELETE");
  }
}

/*
 * Grants on table t: no read right means the table is not there (404); a
 * write without the write right is 403 (a read's row scope is applied by
 * rest_get, a write's in its own transaction). false after answering.
 */
static bool rest_allowed(worker_t *w, http_conn_t *c, const http_request_t *req,
                         const auth_principal *p, const store_table *t) {
  auth_scope scope;
  if (auth_table_access(p, t->name, AUTH_READ, &scope) != 0) {
    worker_respond_error(c, 404, "not found");
    return false;
  }
  if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
    auth_scope ws;
    if (auth_table_access(p, t->name, AUTH_WRITE, &ws) != 0) {
      auth_respond_forbidden(w, c, AUTH_WRITE);
      return false;
    }
  }
  return true;
}

void rest_handle(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p) {
  unsigned need = req->method == HTTP_GET || req->method == HTTP_HEAD ? AUTH_READ : AUTH_WRITE;
  if ((p->rights & need) != need) {
    auth_respond_forbidden(w, c, need);
    return;
  }
  /* Parse "/{Table}[/{key}][?query]" as a resource URI under an empty base. */
  uri_t u;
  int rc = uri_parse("", req->target, &u);
  if (rc == -ENOENT || (rc == 0 && (u.kind == URI_ABOUT || u.kind == URI_SCHEMA))) {
    if (rc == 0) uri_finish(&u);
    worker_respond_error(c, 404, "not found");
    return;
  }
  if (rc != 0) {
    /*
     * Malformed under a table we export, and the caller may use, is the
     * client's error; elsewhere nothing is here (a table it has no grant on
     * does not exist for it, not even by a 400).
     */
    size_t seg = strcspn(req->path + 1, "/?");
    char *table = uri_decode_component(req->path + 1, seg);
    const store_table *known_t = table != NULL ? subs_find_table(w, table) : NULL;
    auth_scope scope;
    bool known = known_t != NULL && auth_table_access(p, known_t->name, need, &scope) == 0;
    free(table);
    char why[300];
    snprintf(why, sizeof(why), "malformed path%s%s", uri_error()[0] ? ": " : "", uri_error());
    worker_respond_error(c, known ? 400 : 404, known ? why : "not found");
    return;
  }
  const store_table *t = subs_find_table(w, u.table);
  if (t != NULL && !rest_allowed(w, c, req, p, t)) {
    /* answered */
  } else if (t == NULL) {
    worker_respond_error(c, 404, "not found");
  } else if (req->method == HTTP_GET) {
    rest_get(w, c, p, &u, t);
  } else if (u.kind == URI_RECORD) {
    rest_record(w, c, req, p, t, u.key);
  } else if (req->method == HTTP_POST) {
    rest_collection_post(w, c, req, p, t);
  } else {
    worker_respond_not_allowed(c, "GET, POST");
  }
  uri_finish(&u);
}
