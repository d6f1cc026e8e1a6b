/*
 * HTTP/1.1 server connections for a worker: libuv sockets, llhttp parsing,
 * and the bounds that protect everything above from its peers. A
 * connection reads into its own input buffer, lets llhttp parse as much as
 * it may, and hands exactly one complete request at a time to the server's
 * callback; bytes of pipelined requests wait in the buffer until the
 * response is done and are parsed on a later loop turn, never from inside
 * http_respond. Responses and streams (SSE, which take the connection
 * over) are written the same way: their bytes are queued, coalesced and
 * offered to the socket once per loop turn, after every request that turn
 * read was answered (one burst of writes instead of a write between two
 * requests' work), and a stream whose queue passes max_stream_queue is cut.
 *
 * Deferred work (writing what was queued, parsing pipelined bytes after a
 * response) runs from one uv_idle handle per server, started on demand. An
 * idle handle, unlike a check handle, makes the loop poll without blocking,
 * so work queued from a timer or from an idle callback still runs on the
 * very next turn instead of waiting for unrelated I/O.
 *
 * Closing is graceful by default: the last response is flushed, the write
 * side is shut down, and the peer's remaining bytes are read and dropped
 * for a short while (lingering close) so the peer sees the response rather
 * than a reset. The memory of a connection is freed only from its last
 * libuv close callback, after its owner's close callback ran; this file
 * must never free a connection from inside one of its own callbacks, and
 * never call back into user code from inside a call user code made.
 */
#include "worker/http.h"

#include "common/http_fields.h"

#include <errno.h>
#include <fcntl.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/strmap.h"

/* One read from the socket; also the step the input buffer grows by. */
#define HTTP_READ_CHUNK ((size_t)64 * 1024)
/* Header lines per request, beyond which the request gets a 431. */
#define HTTP_MAX_HEADERS    100
#define HTTP_LISTEN_BACKLOG 511
/*
 * Answers a connection may leave unsent before its next request waits: a
 * peer that pipelines requests and reads no answer (each can be a page of
 * a thousand rows) would otherwise grow its queue without end. Reading
 * stops too once the waiting requests fill the input (conn_settle).
 */
#define HTTP_OUT_HIGH ((size_t)1024 * 1024)
/* Time a closing connection gets to take its last response (then reset). */
#define HTTP_DRAIN_MS 10000
/* After our FIN, how long the peer's leftover bytes are read and dropped. */
#define HTTP_LINGER_MS 2000
/*
 * What a connection is waiting for, each with its own duration: the
 * connection is on the server's list of that kind (see conn_wait).
 */
enum conn_wait {
  WAIT_NONE,
  WAIT_HEADER,    /* header block (from connect or the first byte), and the body's inactivity */
  WAIT_KEEPALIVE, /* the next request on an idle kept-alive connection */
  WAIT_DRAIN,     /* the peer taking its last response */
  WAIT_LINGER,    /* the peer's leftover bytes after our FIN */
  WAIT_KINDS
};
/* Defaults applied to options left at zero. */
#define HTTP_DEFAULT_MAX_HEADER        ((size_t)16 * 1024)
#define HTTP_DEFAULT_MAX_BODY          ((size_t)4 * 1024 * 1024)
#define HTTP_DEFAULT_HEADER_TIMEOUT_MS 10000
#define HTTP_DEFAULT_MAX_STREAM_QUEUE  ((size_t)1024 * 1024)
/*
 * A connection's output buffer, taken for a turn's bytes (a response, or a
 * stream's batch of frames) from the server's spares and given back when
 * the socket took them all; spares no turn needed for HTTP_SPARE_MS are
 * freed (server_spares_trim).
 */
#define HTTP_OUT_BUF ((size_t)8192)
/* A request's first room for its target and headers (an MCP POST's are about 300 bytes). */
#define HTTP_TEXT_FIRST ((size_t)512)
/* A request's first header slots, and the most a kept-alive connection keeps. */
#define HTTP_HEADERS_FIRST 16u
/* What a kept-alive connection keeps of a request's body for the next one. */
#define HTTP_KEEP_BODY ((size_t)4096)
#define HTTP_SPARE_MS  1000

enum conn_phase {
  PHASE_IDLE,       /* kept alive between requests; no byte of the next one parsed */
  PHASE_HEADERS,    /* request line and headers arriving (header timeout runs) */
  PHASE_BODY,       /* body arriving (the same timeout, as an inactivity bound) */
  PHASE_DISPATCHED, /* request handed to the callback, response pending */
  PHASE_STREAM,     /* streamed response; the peer's bytes are discarded */
};

/* What the request's text (http_conn.text) is receiving. */
enum conn_text {
  TEXT_TARGET, /* the request-target */
  TEXT_NAME,   /* a header's name */
  TEXT_VALUE,  /* a header's value */
  TEXT_BETWEEN /* a header is complete; the next one, or the end of the block, comes */
};

enum conn_pause {
  PAUSE_NONE,
  PAUSE_HEADERS, /* on_headers_complete: check the header block, then resume */
  PAUSE_MESSAGE, /* on_message_complete: dispatch */
};

/*
 * Every idle stream holds one (server memory per idle session is a goal in
 * docs/BENCHMARKS.md): members are ordered by size, so the struct has no
 * holes, and the header counters are 32-bit (max_header is 16 KiB).
 */
struct http_conn {
  http_server_t *srv;
  http_conn_t *prev, *next;  /* the server's list of connections */
  http_conn_t *pending_next; /* the server's deferred-work lists */
  /* The peer's address, counted in srv->per_address (the entry's key), or NULL if not. */
  strmap_entry *address;
  uint64_t dispatched_ns;             /* uv_hrtime() when the request in hand was complete */
  http_conn_t *wait_prev, *wait_next; /* the server's list of c->wait */
  uint64_t wait_until;                /* uv_now() at which the wait times out */

  uv_tcp_t tcp;
  llhttp_t parser;
  buf_t in; /* received, not yet parsed */

  http_request_t req; /* being built, then dispatched */
  /*
   * The request's text in one allocation: the target, each header's name
   * and value, NUL-terminated, and (from dispatch) the path and query.
   * req's strings point into it once its header block is complete.
   */
  buf_t text;
  buf_t body;

  buf_t out;      /* response or stream bytes queued during this loop turn */
  buf_t inflight; /* stream bytes being written (out's buffer, handed over) */
  size_t queued;  /* out.len plus bytes in unfinished uv_write requests */

  void (*close_cb)(http_conn_t *c, void *data);
  void *close_data;

  uint32_t hdr_raw;           /* raw bytes of the current header block */
  uint32_t hdr_copied;        /* bytes of url, names and values copied from it */
  uint32_t chunk_ext;         /* bytes of chunk extensions in the current body */
  uint32_t headers_cap;       /* req.headers' slots */
  uint32_t name_at, value_at; /* where the header being read starts in text */
  int label;                  /* the request's label for on_answered (-1: none) */
  int handles_open;
  int fail_status;      /* set by an llhttp callback that rejects the request */
  unsigned adopt_flags; /* http_server_adopt_flags: apply to the first request dispatched */
  unsigned req_flags;   /* flags of the request in hand */
  uint8_t phase;        /* enum conn_phase */
  uint8_t pause;        /* enum conn_pause */
  uint8_t text_state;   /* enum conn_text: what text is receiving */
  uint8_t wait;         /* enum conn_wait */
  uint8_t http_major, http_minor;

  bool pending;        /* on one of the server's deferred-work lists */
  bool msg_keep_alive; /* llhttp's verdict at on_message_complete */
  bool reading;        /* uv_read_start in effect */
  bool peer_eof;       /* the peer shut down its side */
  bool closing;        /* no more requests or stream bytes; on the way out */
  bool shutdown_done;  /* our FIN went out; lingering */
  bool handle_closing; /* uv_close called */
  bool owner_holds;    /* the request was dispatched and its owner has not finished */
  bool zombie;         /* handles closed, waiting for the owner (no close_cb) */
  bool stream_writing; /* inflight is in a uv_write (its request allocated for it: most
                          streams never leave bytes behind, and an idle one holds none) */
  bool stream_exempt;  /* a bounded replay is being queued: no queue cap */
};

struct http_server {
  uv_loop_t *loop;
  http_server_options opts;
  http_request_cb cb;
  void *cb_data;
  llhttp_settings_t settings; /* must outlive every parser */

  uv_tcp_t listener;
  bool listener_init;
  uv_idle_t idle; /* runs deferred connection work */
  int handles_open;

  http_conn_t *conns;
  size_t n_conns;
  strmap per_address;   /* client address -> open connections (as a uintptr_t) */
  uint64_t refused;     /* over max_connections / max_per_address */
  http_conn_t *pending; /* deferred work for the next idle callback, in the order scheduled */
  http_conn_t *pending_tail;
  http_conn_t *running;         /* what the idle callback has not reached yet */
  void (*turn_end)(void *data); /* http_server_at_turn_end: due once, after the deferred work */
  void *turn_end_data;

  /*
   * Timeouts, in h2o's way: one list per kind of wait, and since every
   * wait of a kind lasts as long, appending keeps each list in deadline
   * order. One timer is armed for the earliest head (wait_due): a
   * connection's deadline is set and moved in O(1), with no timer handle
   * of its own (152 bytes every idle stream would hold).
   */
  struct {
    http_conn_t *head, *tail;
  } waits[WAIT_KINDS];
  uint64_t wait_ms[WAIT_KINDS]; /* each kind's duration; 0: that wait never times out */
  uint64_t wait_due;            /* when wait_timer fires, if active */
  uv_timer_t wait_timer;

  bool closing;
  bool draining; /* http_server_drain: every response closes its connection */
  bool done_called;
  void (*done)(void *data);
  void *done_data;

  char scratch[4096]; /* where discarded input is read to */
  /*
   * Where a connection holding no input buffer reads to (HTTP_READ_CHUNK
   * bytes): its read callback copies what arrived into the connection's
   * own buffer at once. A request of a few hundred bytes then costs a
   * small allocation instead of a 64 KiB one per request (a free that
   * large also makes malloc consolidate its free lists).
   */
  char *read_buf;
  /*
   * Output buffers (HTTP_OUT_BUF bytes) that connections gave back, most
   * recently given last: a fan-out turn fills a buffer per stream and the
   * flush empties them all, so without spares malloc would hand those MB
   * back to the kernel (brk) every turn and fault them in again on the
   * next. Never more than there are connections; spares_low is the fewest
   * held since the last trim, so spares[0, spares_low) were not needed.
   */
  char **spares;
  size_t n_spares, spares_cap, spares_low;
  uv_timer_t spare_timer; /* runs while spares are held */
};

typedef struct http_write {
  uv_write_t req;
  http_conn_t *conn;
  char *data;
  size_t len;
} http_write_t;

static void conn_parse(http_conn_t *c);
static void conn_flush(http_conn_t *c);
static void conn_settle(http_conn_t *c);
static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);
static void conn_wait(http_conn_t *c, enum conn_wait kind);
static void conn_on_timeout(http_conn_t *c);
static void conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void server_on_idle(uv_idle_t *h);

/* ---- status texts and request accessors -------------------------------- */

const char *http_status_text(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 421: return "Misdirected Request";
  case 422: return "Unprocessable Content";
  case 426: return "Upgrade Required";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  case 511: return "Network Authentication Required";
  default: return "Unknown";
  }
}

const char *http_request_header(const http_request_t *req, const char *lname) {
  if (req == NULL || lname == NULL) return NULL;
  /* The first byte tells most names apart without a call (a request asks for a dozen). */
  for (size_t i = 0; i < req->n_headers; i++)
    if (req->headers[i].name[0] == lname[0] && strcmp(req->headers[i].name, lname) == 0)
      return req->headers[i].value;
  return NULL;
}

/* Frees everything the current request holds and empties its builders. */
static void conn_request_clear(http_conn_t *c) {
  http_request_t *r = &c->req;
  free(r->headers); /* r->body is c->body's */
  memset(r, 0, sizeof *r);
  c->req_flags = 0;
  c->headers_cap = 0;
  buf_finish(&c->text);
  c->text_state = TEXT_TARGET;
  buf_finish(&c->body);
}

/* Makes b's storage into's again, emptied, when it is at most max bytes; else frees it. */
static void conn_buf_keep(buf_t *into, buf_t b, size_t max) {
  if (b.cap > max) {
    buf_finish(&b);
    return;
  }
  b.len = 0;
  *into = b;
}

/*
 * conn_request_clear before the next request of a kept-alive connection:
 * the storage of the text, the header slots and the body stays for it (up
 * to what most requests need), three allocations a request fewer. A
 * stream's request, or a closing connection's, keeps nothing
 * (conn_request_clear).
 */
static void conn_request_recycle(http_conn_t *c) {
  http_header *headers = c->req.headers;
  uint32_t cap = c->headers_cap;
  buf_t text = c->text, body = c->body;
  c->req.headers = NULL;
  buf_init(&c->text);
  buf_init(&c->body);
  conn_request_clear(c);
  conn_buf_keep(&c->text, text, 4 * HTTP_TEXT_FIRST);
  conn_buf_keep(&c->body, body, HTTP_KEEP_BODY);
  if (cap <= HTTP_HEADERS_FIRST) {
    c->req.headers = headers;
    c->headers_cap = cap;
  } else {
    free(headers);
  }
}

/* ---- server-level bookkeeping ------------------------------------------ */

/* Runs the server's done callback once the listener, the idle handle and
 * every connection are gone. */
static void server_check_done(http_server_t *srv) {
  if (!srv->closing || srv->done_called || srv->handles_open > 0 || srv->n_conns > 0) return;
  srv->done_called = true;
  if (srv->done) srv->done(srv->done_data);
}

static void server_on_handle_closed(uv_handle_t *h) {
  http_server_t *srv = h->data;
  srv->handles_open--;
  server_check_done(srv);
}

static void server_on_wait_timer(uv_timer_t *t);

static void server_wait_arm(http_server_t *srv, uint64_t due) {
  if (uv_is_active((uv_handle_t *)&srv->wait_timer) && srv->wait_due <= due) return;
  srv->wait_due = due;
  uint64_t now = uv_now(srv->loop);
  (void)uv_timer_start(&srv->wait_timer, server_on_wait_timer, due > now ? due - now : 0, 0);
}

/*
 * Puts c on the list of kind (at its end: the latest deadline of its kind),
 * off any list it was on; WAIT_NONE, or a kind that never times out, only
 * takes it off. Removing a head leaves the timer as it is: it fires early,
 * finds nothing due and is armed again.
 */
static void conn_wait(http_conn_t *c, enum conn_wait kind) {
  http_server_t *srv = c->srv;
  if (c->wait != WAIT_NONE) {
    if (c->wait_prev)
      c->wait_prev->wait_next = c->wait_next;
    else
      srv->waits[c->wait].head = c->wait_next;
    if (c->wait_next)
      c->wait_next->wait_prev = c->wait_prev;
    else
      srv->waits[c->wait].tail = c->wait_prev;
    c->wait_prev = c->wait_next = NULL;
    c->wait = WAIT_NONE;
  }
  if (kind == WAIT_NONE || srv->wait_ms[kind] == 0 || c->handle_closing) return;
  c->wait = (uint8_t)kind;
  c->wait_until = uv_now(srv->loop) + srv->wait_ms[kind];
  c->wait_prev = srv->waits[kind].tail;
  if (c->wait_prev)
    c->wait_prev->wait_next = c;
  else
    srv->waits[kind].head = c;
  srv->waits[kind].tail = c;
  server_wait_arm(srv, c->wait_until);
}

/* Times out every connection whose deadline passed; armed again for the next. */
static void server_on_wait_timer(uv_timer_t *t) {
  http_server_t *srv = t->data;
  uint64_t now = uv_now(srv->loop), next = UINT64_MAX;
  for (int k = WAIT_NONE + 1; k < WAIT_KINDS; k++) {
    http_conn_t *c;
    /* A timed-out connection may wait again: at the end, and later than now. */
    while ((c = srv->waits[k].head) != NULL && c->wait_until <= now) {
      conn_wait(c, WAIT_NONE);
      conn_on_timeout(c);
    }
  }
  for (int k = WAIT_NONE + 1; k < WAIT_KINDS; k++)
    if (srv->waits[k].head && srv->waits[k].head->wait_until < next)
      next = srv->waits[k].head->wait_until;
  if (next != UINT64_MAX) server_wait_arm(srv, next);
}

/* Puts c at the end of the deferred-work list; the idle callback picks it up
 * on the next loop turn, first come first written (a write's answer, queued
 * before the fan-out of its commit, goes before the fan-out). A zombie is
 * scheduled only to run a late close callback. */
static void conn_schedule(http_conn_t *c) {
  http_server_t *srv = c->srv;
  if (c->pending || (c->handle_closing && !c->zombie) || srv->closing) return;
  c->pending = true;
  c->pending_next = NULL;
  if (srv->pending_tail != NULL)
    srv->pending_tail->pending_next = c;
  else
    srv->pending = c;
  srv->pending_tail = c;
  (void)uv_idle_start(&srv->idle, server_on_idle); /* fails only on a closing handle */
}

/* Takes c off whichever deferred-work list holds it, so that freeing c
 * (even from user code inside the idle callback) leaves no dangling entry. */
static void conn_pending_unlink(http_conn_t *c) {
  if (!c->pending) return;
  http_server_t *srv = c->srv;
  http_conn_t **lists[] = {&srv->pending, &srv->running};
  for (size_t i = 0; i < ARRAY_LEN(lists); i++) {
    http_conn_t *prev = NULL;
    for (http_conn_t **p = lists[i]; *p; prev = *p, p = &(*p)->pending_next) {
      if (*p == c) {
        *p = c->pending_next;
        if (srv->pending_tail == c) srv->pending_tail = prev; /* only the pending list's */
        goto unlinked;
      }
    }
  }
unlinked:
  c->pending = false;
  c->pending_next = NULL;
}

/* ---- output buffers ---------------------------------------------------- */

/* Gives c->out a buffer for this turn's bytes if it holds none: a spare, else a new one. */
static void conn_out_take(http_conn_t *c) {
  http_server_t *srv = c->srv;
  if (c->out.cap != 0) return;
  if (srv->n_spares == 0) {
    buf_reserve(&c->out, HTTP_OUT_BUF - 1); /* with its NUL: one allocation, not 64, 128, ... */
    return;
  }
  c->out.data = srv->spares[--srv->n_spares];
  c->out.cap = HTTP_OUT_BUF;
  c->out.len = 0;
  c->out.data[0] = '\0';
  if (srv->n_spares < srv->spares_low) srv->spares_low = srv->n_spares;
}

static void server_spares_trim(uv_timer_t *t);

/* Empties b; its buffer becomes a spare if it is one of HTTP_OUT_BUF bytes (not grown). */
static void server_buf_give(http_server_t *srv, buf_t *b) {
  if (b->cap != HTTP_OUT_BUF || srv->closing || srv->n_spares >= srv->n_conns) {
    buf_finish(b);
    return;
  }
  if (srv->n_spares == srv->spares_cap) {
    srv->spares_cap = srv->spares_cap == 0 ? 64 : srv->spares_cap * 2;
    srv->spares = mem_realloc(srv->spares, srv->spares_cap * sizeof(char *));
  }
  srv->spares[srv->n_spares++] = b->data;
  buf_init(b);
  if (!uv_is_active((uv_handle_t *)&srv->spare_timer))
    (void)uv_timer_start(&srv->spare_timer, server_spares_trim, HTTP_SPARE_MS, HTTP_SPARE_MS);
}

/* Frees the spares no connection took since the last trim (the oldest ones). */
static void server_spares_trim(uv_timer_t *t) {
  http_server_t *srv = t->data;
  size_t drop = srv->spares_low;
  for (size_t i = 0; i < drop; i++) free(srv->spares[i]);
  srv->n_spares -= drop;
  memmove(srv->spares, srv->spares + drop, srv->n_spares * sizeof(char *));
  srv->spares_low = srv->n_spares;
  if (srv->n_spares == 0) {
    free(srv->spares);
    srv->spares = NULL;
    srv->spares_cap = 0;
    (void)uv_timer_stop(t); /* cannot fail */
  }
}

/* ---- connection lifetime ----------------------------------------------- */

/* Frees c; its handles are closed and no owner holds it any more. */
static void conn_free(http_conn_t *c) {
  http_server_t *srv = c->srv;
  conn_pending_unlink(c);
  conn_request_clear(c);
  buf_finish(&c->in);
  server_buf_give(srv, &c->out);
  server_buf_give(srv, &c->inflight);
  if (c->prev)
    c->prev->next = c->next;
  else
    srv->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  srv->n_conns--;
  if (c->address != NULL) {
    uintptr_t n = (uintptr_t)c->address->value;
    if (n <= 1)
      strmap_remove(&srv->per_address, c->address->key, c->address->len);
    else
      c->address->value = (void *)(n - 1);
  }
  free(c);
  server_check_done(srv);
}

/*
 * The last handle closed: tell the owner, then free. Without a close
 * callback, a connection whose request is still held by its owner stays
 * allocated (a zombie) until the owner's http_respond or http_stream_end,
 * so that a late response never touches freed memory.
 */
static void conn_on_handle_closed(uv_handle_t *h) {
  http_conn_t *c = h->data;
  if (--c->handles_open > 0) return;
  conn_pending_unlink(c);
  if (c->close_cb) {
    void (*cb)(http_conn_t *, void *) = c->close_cb;
    c->close_cb = NULL;
    cb(c, c->close_data);
  } else if (c->owner_holds) {
    c->zombie = true;
    return;
  }
  conn_free(c);
}

/* Closes c's handles now; in-flight writes are cancelled. Idempotent. */
static void conn_close_now(http_conn_t *c) {
  if (c->handle_closing) return;
  c->handle_closing = true;
  c->closing = true;
  c->reading = false;
  conn_wait(c, WAIT_NONE);
  uv_close((uv_handle_t *)&c->tcp, conn_on_handle_closed);
}

static void conn_on_write(uv_write_t *req, int status) {
  http_write_t *w = (http_write_t *)req;
  http_conn_t *c = w->conn;
  c->queued -= w->len;
  free(w->data);
  free(w);
  if (status < 0 && status != UV_ECANCELED) conn_close_now(c);
}

/* Writes data (takes ownership; len bytes already counted in c->queued).
 * The buffer stays alive until the write callback frees it. */
static void conn_write_owned(http_conn_t *c, char *data, size_t len) {
  http_write_t *w = mem_alloc(sizeof *w);
  w->conn = c;
  w->data = data;
  w->len = len;
  uv_buf_t b = uv_buf_init(data, (unsigned int)len);
  int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, conn_on_write);
  if (r < 0) {
    c->queued -= len;
    free(data);
    free(w);
    conn_close_now(c);
  }
}

/* Sends the content of b (emptied) now, after whatever c already queued. */
static void conn_send(http_conn_t *c, buf_t *b) {
  conn_out_take(c);
  buf_append(&c->out, b->data ? b->data : "", b->len);
  c->queued += b->len;
  buf_finish(b);
  conn_flush(c);
}

static void conn_on_stream_write(uv_write_t *req, int status) {
  http_conn_t *c = req->data;
  free(req);
  c->stream_writing = false;
  c->queued -= c->inflight.len;
  /*
   * The written buffer goes back to the spares, and so does out if nothing
   * waits in it: most streams are idle most of the time, and memory per
   * idle session is what bounds how many a worker holds.
   */
  server_buf_give(c->srv, &c->inflight);
  if (c->out.len == 0) server_buf_give(c->srv, &c->out);
  if (status == UV_ECANCELED) return;
  if (status < 0) {
    conn_close_now(c);
    return;
  }
  if (c->out.len > 0) conn_flush(c);
  /* A request waiting for the answers before it (HTTP_OUT_HIGH) is read now. */
  if (c->phase == PHASE_IDLE && c->in.len > 0 && !c->closing && c->queued <= HTTP_OUT_HIGH)
    conn_schedule(c);
}

/* Offers len bytes to the socket: how many it took; -1 when it failed (the connection closed). */
static ssize_t conn_try_write(http_conn_t *c, const char *data, size_t len) {
  uv_buf_t now = uv_buf_init((char *)(uintptr_t)data, (unsigned int)len);
  int took = uv_try_write((uv_stream_t *)&c->tcp, &now, 1);
  if (took < 0 && took != UV_EAGAIN && took != UV_ENOSYS) {
    conn_close_now(c);
    return -1;
  }
  return took > 0 ? took : 0;
}

/*
 * Writes everything c queued during this loop turn (responses, stream
 * bytes), as one write.
 * The socket is offered the bytes at once (uv_try_write): what it takes is
 * done with, no request, no callback; only what it leaves is queued with
 * uv_write. While such a write is in flight, new bytes wait in out and go
 * when it completes; only a closing connection writes a second buffer
 * concurrently (its FIN must follow every byte).
 */
static void conn_flush(http_conn_t *c) {
  if (c->out.len == 0 || c->handle_closing) return;
  if (c->stream_writing) {
    if (c->closing) {
      size_t len = c->out.len;
      conn_write_owned(c, buf_steal(&c->out), len); /* already counted in queued */
    }
    return;
  }
  ssize_t took = conn_try_write(c, c->out.data, c->out.len);
  if (took < 0) return;
  size_t done = (size_t)took;
  if (done == c->out.len) {
    /* All taken: the buffer goes back to the spares, as after a write (idle streams hold none). */
    c->queued -= done;
    server_buf_give(c->srv, &c->out);
    return;
  }
  c->inflight = c->out; /* no write in flight: inflight holds no buffer */
  buf_init(&c->out);
  c->stream_writing = true;
  uv_write_t *req = mem_alloc(sizeof(*req));
  req->data = c;
  /* What the socket took is written: the queued write starts after it (no copy). */
  uv_buf_t b = uv_buf_init(c->inflight.data + done, (unsigned int)(c->inflight.len - done));
  if (uv_write(req, (uv_stream_t *)&c->tcp, &b, 1, conn_on_stream_write) < 0) {
    free(req);
    c->stream_writing = false;
    c->queued -= c->inflight.len;
    server_buf_give(c->srv, &c->inflight);
    conn_close_now(c);
  }
}

static void conn_on_shutdown(uv_shutdown_t *req, int status) {
  http_conn_t *c = req->data;
  free(req);
  if (status == UV_ECANCELED || c->handle_closing) return;
  if (status < 0 || c->peer_eof) {
    conn_close_now(c);
    return;
  }
  c->shutdown_done = true;
  conn_wait(c, WAIT_LINGER);
}

/*
 * Graceful close: with flush, what is queued still goes out, otherwise it
 * is dropped; then FIN once the writes are done, and the peer's remaining
 * bytes are read and dropped until its EOF or the linger timeout. Bounded
 * by HTTP_DRAIN_MS while a slow peer takes the last response.
 */
static void conn_finish(http_conn_t *c, bool flush) {
  if (c->closing) return;
  c->closing = true;
  if (flush) {
    conn_flush(c);
  } else {
    c->queued -= c->out.len;
    server_buf_give(c->srv, &c->out);
  }
  if (c->handle_closing) return;
  buf_finish(&c->in);
  uv_shutdown_t *req = mem_alloc(sizeof(*req)); /* made when needed, like a stream's write */
  req->data = c;
  if (uv_shutdown(req, (uv_stream_t *)&c->tcp, conn_on_shutdown) < 0) {
    free(req);
    conn_close_now(c);
    return;
  }
  conn_wait(c, WAIT_DRAIN);
  conn_settle(c);
}

/* ---- responses --------------------------------------------------------- */

static bool header_text_ok(const char *s) {
  return strpbrk(s, "\r\n") == NULL;
}

/*
 * Appends the status line and the caller's headers to b. The framing
 * headers (Content-Length, Transfer-Encoding, Connection) belong to this
 * layer and are skipped; a caller's "Connection: close" sets *want_close.
 * Headers with CR or LF in them are dropped (no response splitting).
 */
static void http_format_head(buf_t *b, int status, const http_header *headers, size_t n,
                             bool *want_close) {
  buf_append_str(b, "HTTP/1.1 ");
  buf_append_int(b, status);
  buf_append_byte(b, ' ');
  buf_append_str(b, http_status_text(status));
  buf_append(b, "\r\n", 2);
  for (size_t i = 0; i < n; i++) {
    const char *name = headers[i].name, *value = headers[i].value;
    if (name == NULL || value == NULL || !header_text_ok(name) || !header_text_ok(value)) {
      log_warn("http: dropped invalid response header", "name", name ? name : "(null)");
      continue;
    }
    if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0)
      continue;
    if (strcasecmp(name, "connection") == 0) {
      if (strcasestr(value, "close")) *want_close = true;
      continue;
    }
    buf_append_str(b, name);
    buf_append(b, ": ", 2);
    buf_append_str(b, value);
    buf_append(b, "\r\n", 2);
  }
}

/* Sends an error of this layer's own (400, 408, 413, 431) and closes. */
static void conn_fail(http_conn_t *c, int status) {
  if (c->closing) return;
  const char *reason = http_status_text(status);
  buf_t body, b;
  buf_init(&body);
  buf_init(&b);
  buf_append_str(&body, "{\"error\":\"");
  for (const char *p = reason; *p; p++) {
    char ch = *p;
    if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
    buf_append(&body, &ch, 1);
  }
  buf_append_str(&body, "\"}");
  buf_printf(&b,
             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n",
             status, reason, body.len);
  buf_append(&b, body.data, body.len);
  buf_finish(&body);
  conn_send(c, &b);
  conn_finish(c, true);
}

/* The request in hand is answered: its duration to whoever counts them. */
static void conn_answered(http_conn_t *c) {
  if (c->srv->opts.on_answered != NULL)
    c->srv->opts.on_answered(c->srv->cb_data, c->label, uv_hrtime() - c->dispatched_ns);
}

void http_conn_set_label(http_conn_t *c, int label) {
  if (c != NULL) c->label = label;
}

void http_respond(http_conn_t *c, int status, const http_header *headers, size_t n_headers,
                  const char *body, size_t body_len) {
  if (c == NULL || c->phase != PHASE_DISPATCHED || !c->owner_holds) return;
  c->owner_holds = false;
  conn_answered(c);
  if (c->closing) {
    conn_request_clear(c);
    c->phase = PHASE_IDLE;
    if (c->zombie) conn_free(c);
    return;
  }

  bool want_close = !c->req.keep_alive || (c->peer_eof && c->in.len == 0) || c->srv->draining;
  /* Queued behind anything still unsent, and written with this turn's others. */
  buf_t *b = &c->out;
  conn_out_take(c);
  size_t before = b->len;
  http_format_head(b, status, headers, n_headers, &want_close);
  bool no_length = (status >= 100 && status < 200) || status == 204;
  bool no_body = no_length || status == 304 || c->req.method == HTTP_HEAD;
  if (!no_length) {
    buf_append_str(b, "Content-Length: ");
    buf_append_int(b, (long long)body_len);
    buf_append(b, "\r\n", 2);
  }
  if (want_close)
    buf_append_str(b, "Connection: close\r\n");
  else if (c->http_major == 1 && c->http_minor == 0)
    buf_append_str(b, "Connection: keep-alive\r\n");
  buf_append(b, "\r\n", 2);
  if (!no_body && body_len > 0) buf_append(b, body, body_len);
  c->queued += b->len - before;
  if (want_close)
    conn_request_clear(c);
  else
    conn_request_recycle(c);
  c->phase = PHASE_IDLE;
  if (want_close) {
    conn_finish(c, true);
    return;
  }
  llhttp_resume(&c->parser);
  /* The answer is written, and pipelined bytes parsed, from the idle callback. */
  conn_schedule(c);
  if (c->in.len == 0) conn_wait(c, WAIT_KEEPALIVE);
  conn_settle(c);
}

/* ---- streams ----------------------------------------------------------- */

void http_stream_begin(http_conn_t *c, int status, const http_header *headers, size_t n_headers) {
  if (c == NULL || c->phase != PHASE_DISPATCHED || !c->owner_holds) return;
  c->phase = PHASE_STREAM;
  conn_answered(c);
  if (c->closing) return;
  bool want_close = true; /* the stream is delimited by the connection's close */
  conn_out_take(c);
  http_format_head(&c->out, status, headers, n_headers, &want_close);
  buf_append_str(&c->out, "Connection: close\r\n\r\n");
  c->queued += c->out.len;
  conn_wait(c, WAIT_NONE);
  conn_request_clear(c); /* a stream may live for days: keep none of its request */
  buf_finish(&c->in);    /* pipelined bytes after a stream request are dropped */
  if (c->peer_eof) {
    conn_finish(c, true);
    return;
  }
  conn_schedule(c); /* head and first events go out together */
  conn_settle(c);
}

void http_stream_begin_sse(http_conn_t *c) {
  static const http_header head[] = {
      {"Content-Type", "text/event-stream"},
      {"Cache-Control", "no-cache, no-transform"},
      {"X-Accel-Buffering", "no"},
  };
  http_stream_begin(c, 200, head, sizeof(head) / sizeof(head[0]));
}

char *http_stream_extend(http_conn_t *c, size_t len) {
  conn_out_take(c);
  buf_reserve(&c->out, len);
  char *at = c->out.data + c->out.len;
  c->out.len += len;
  c->out.data[c->out.len] = '\0';
  c->queued += len;
  return at;
}

int http_stream_append(http_conn_t *c, const uv_buf_t *bufs, size_t n, size_t len) {
  if (c == NULL) return -EINVAL;
  if (c->closing) return -EPIPE;
  if (c->phase != PHASE_STREAM) return -EINVAL;
  size_t max = c->srv->opts.max_stream_queue;
  if (!c->stream_exempt && (c->queued > max || len > max - c->queued)) {
    conn_finish(c, false);
    return -ENOBUFS;
  }
  if (len == 0) return 0;
  char *at = http_stream_extend(c, len);
  for (size_t i = 0; i < n; i++) {
    memcpy(at, bufs[i].base, bufs[i].len);
    at += bufs[i].len;
  }
  return 0;
}

int http_stream_writev(http_conn_t *c, const uv_buf_t *bufs, size_t n, size_t len) {
  int rc = http_stream_append(c, bufs, n, len);
  if (rc == 0 && len > 0) conn_schedule(c);
  return rc;
}

int http_stream_write(http_conn_t *c, const char *data, size_t len) {
  uv_buf_t b = {.base = (char *)(uintptr_t)data, .len = len};
  return http_stream_writev(c, &b, 1, len);
}

void http_stream_offer(http_conn_t *c) {
  if (c != NULL && c->phase == PHASE_STREAM) conn_flush(c);
}

bool http_stream_takes(const http_conn_t *c, size_t len) {
  if (c == NULL || c->closing || c->phase != PHASE_STREAM) return false;
  size_t max = c->srv->opts.max_stream_queue;
  return c->stream_exempt || (c->queued <= max && len <= max - c->queued);
}

void http_stream_send(http_conn_t *c, const char *data, size_t len) {
  size_t done = 0;
  if (c->out.len == 0 && !c->stream_writing && !c->handle_closing) {
    /* Nothing ahead of these bytes: the socket takes them from where they are. */
    ssize_t took = conn_try_write(c, data, len);
    if (took < 0) return;
    done = (size_t)took;
    if (done == len) return;
  }
  uv_buf_t rest = uv_buf_init((char *)(uintptr_t)data + done, (unsigned int)(len - done));
  if (http_stream_append(c, &rest, 1, len - done) == 0) conn_flush(c);
}

void http_stream_prefetch(const http_conn_t *c) {
  mem_prefetch(c);
  mem_prefetch(&c->out);
  mem_prefetch(&c->closing);
}

void http_stream_exempt(http_conn_t *c, bool exempt) {
  if (c != NULL) c->stream_exempt = exempt;
}

void http_stream_flush(http_conn_t *c) {
  if (c == NULL || c->phase != PHASE_STREAM || c->handle_closing || c->out.len == 0) return;
  if (c->stream_writing) {
    size_t len = c->out.len;
    conn_write_owned(c, buf_steal(&c->out), len); /* queued behind the write in flight */
  } else {
    conn_flush(c);
  }
}

void http_stream_end(http_conn_t *c) {
  if (c == NULL) return;
  bool was_held = c->owner_holds;
  c->owner_holds = false;
  if (c->zombie) {
    if (was_held) conn_free(c);
    return;
  }
  conn_finish(c, true);
}

bool http_conn_streaming(const http_conn_t *c) {
  return c != NULL && c->phase == PHASE_STREAM;
}

size_t http_conn_queued(const http_conn_t *c) {
  return c ? c->queued : 0;
}

void http_conn_set_close_cb(http_conn_t *c, void (*cb)(http_conn_t *c, void *data), void *data) {
  if (c == NULL) return;
  c->close_cb = cb;
  c->close_data = cb ? data : NULL;
  if (c->zombie && cb) conn_schedule(c); /* closed already: tell the owner from the loop */
}

/* ---- llhttp callbacks -------------------------------------------------- */

/* Counts bytes copied out of a header block against max_header, so that
 * memory stays bounded even inside one large llhttp_execute call. A NUL
 * (which llhttp refuses anyway) is refused here too: the request's text
 * is a sequence of NUL-terminated strings. */
static int conn_count_head(http_conn_t *c, const char *at, size_t len) {
  c->hdr_copied += len;
  if (c->hdr_copied > c->srv->opts.max_header) {
    c->fail_status = 431;
    return HPE_USER;
  }
  if (memchr(at, '\0', len) != NULL) {
    c->fail_status = 400;
    return HPE_USER;
  }
  return 0;
}

static int on_message_begin(llhttp_t *p) {
  http_conn_t *c = p->data;
  c->pause = PAUSE_NONE;
  c->chunk_ext = 0;
  return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
  http_conn_t *c = p->data;
  if (conn_count_head(c, at, len)) return HPE_USER;
  buf_append(&c->text, at, len);
  return 0;
}

/* Ends the string being received in c->text and moves on to state. */
static void conn_text_next(http_conn_t *c, enum conn_text state) {
  buf_append(&c->text, "", 1);
  c->text_state = state;
}

/* Header names and values; in the body phase these are chunked trailers,
 * which count against max_header but are not kept. */
static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  http_conn_t *c = p->data;
  if (conn_count_head(c, at, len)) return HPE_USER;
  if (c->phase == PHASE_BODY) return 0;
  if (c->text_state == TEXT_TARGET) conn_text_next(c, TEXT_BETWEEN);
  if (c->text_state == TEXT_BETWEEN) {
    c->text_state = TEXT_NAME;
    c->name_at = c->text.len;
  }
  buf_append(&c->text, at, len);
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  http_conn_t *c = p->data;
  if (conn_count_head(c, at, len)) return HPE_USER;
  if (c->phase == PHASE_BODY) return 0;
  if (c->text_state == TEXT_NAME) {
    conn_text_next(c, TEXT_VALUE);
    c->value_at = c->text.len;
  }
  buf_append(&c->text, at, len);
  return 0;
}

/* A header is complete: its name lowercased and its value trimmed, in place. */
static int on_header_value_complete(llhttp_t *p) {
  http_conn_t *c = p->data;
  if (c->phase == PHASE_BODY) return 0;
  http_request_t *r = &c->req;
  if (r->n_headers >= HTTP_MAX_HEADERS) {
    c->fail_status = 431;
    return HPE_USER;
  }
  if (r->n_headers == c->headers_cap) {
    c->headers_cap = c->headers_cap ? c->headers_cap * 2 : HTTP_HEADERS_FIRST;
    r->headers = mem_realloc(r->headers, c->headers_cap * sizeof *r->headers);
  }
  if (c->text_state == TEXT_NAME) { /* no value at all */
    conn_text_next(c, TEXT_VALUE);
    c->value_at = c->text.len;
  }
  for (char *s = c->text.data + c->name_at; *s; s++)
    if (*s >= 'A' && *s <= 'Z') *s = (char)(*s - 'A' + 'a');
  char *v = c->text.data + c->value_at;
  size_t start = 0, end = c->text.len - c->value_at;
  while (start < end && (v[start] == ' ' || v[start] == '\t')) start++;
  while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t')) end--;
  memmove(v, v + start, end - start);
  c->text.len = c->value_at + (end - start);
  conn_text_next(c, TEXT_BETWEEN);
  /* Offsets while the text may still move: conn_text_complete makes them pointers. */
  r->headers[r->n_headers++] =
      (http_header){(const char *)(uintptr_t)c->name_at, (const char *)(uintptr_t)c->value_at};
  return 0;
}

/*
 * The header block is complete: points the request's target and headers
 * into c->text. Room for the path and query (copies of the target's parts)
 * is reserved now, so that conn_dispatch never moves the text.
 */
static void conn_text_complete(http_conn_t *c) {
  http_request_t *r = &c->req;
  if (c->text_state == TEXT_TARGET) conn_text_next(c, TEXT_BETWEEN);
  size_t target_len = strlen(c->text.data);
  buf_reserve(&c->text, target_len + 2);
  char *base = c->text.data;
  r->target = base;
  for (size_t i = 0; i < r->n_headers; i++) {
    r->headers[i].name = base + (uintptr_t)r->headers[i].name;
    r->headers[i].value = base + (uintptr_t)r->headers[i].value;
  }
}

static int on_headers_complete(llhttp_t *p) {
  http_conn_t *c = p->data;
  conn_text_complete(c);
  c->phase = PHASE_BODY;
  c->pause = PAUSE_HEADERS;
  return HPE_PAUSED;
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  http_conn_t *c = p->data;
  if (len > c->srv->opts.max_body - c->body.len) {
    c->fail_status = 413;
    return HPE_USER;
  }
  buf_append(&c->body, at, len);
  return 0;
}

/* Chunk extensions are skipped, but bounded like a header block. */
static int on_chunk_extension(llhttp_t *p, const char *at, size_t len) {
  http_conn_t *c = p->data;
  c->chunk_ext += len;
  return c->chunk_ext > c->srv->opts.max_header ? HPE_USER : 0;
}

static int on_message_complete(llhttp_t *p) {
  http_conn_t *c = p->data;
  /* An Upgrade or CONNECT is answered as a plain request, then the
   * connection closes: the bytes after it are not HTTP we could parse. */
  c->msg_keep_alive = llhttp_should_keep_alive(p) && !llhttp_get_upgrade(p);
  c->http_major = llhttp_get_http_major(p);
  c->http_minor = llhttp_get_http_minor(p);
  c->pause = PAUSE_MESSAGE;
  return HPE_PAUSED;
}

/* ---- parsing and dispatch ---------------------------------------------- */

/* Starts the clock for the next request's header block. */
static void conn_begin_request(http_conn_t *c) {
  /* The target and headers of most requests in one allocation, not 64, 128, ... */
  buf_reserve(&c->text, HTTP_TEXT_FIRST - 1);
  c->phase = PHASE_HEADERS;
  c->hdr_raw = 0;
  c->hdr_copied = 0;
  c->fail_status = 0;
  conn_wait(c, WAIT_HEADER);
}

/* The header block is complete: check its bounds. 0, or a status to fail with. */
static int conn_headers_done(http_conn_t *c) {
  const http_server_options *o = &c->srv->opts;
  llhttp_t *p = &c->parser;
  if (c->hdr_raw > o->max_header) return 431;
  unsigned seen = 0; /* the same rule as the master's peek: one copy of each of these */
  for (size_t i = 0; i < c->req.n_headers; i++) {
    const char *name = c->req.headers[i].name; /* its value follows it and its NUL */
    int single = http_field_single_index(name, (size_t)(c->req.headers[i].value - name) - 1);
    if (single < 0) continue;
    if (seen & (1u << single)) return 400;
    seen |= 1u << single;
  }
  if ((p->flags & F_CONTENT_LENGTH) && p->content_length > o->max_body) return 413;
  /* One allocation for a declared body; at most a read's worth before any of it comes. */
  if (p->flags & F_CONTENT_LENGTH)
    buf_reserve(&c->body,
                p->content_length < HTTP_READ_CHUNK ? (size_t)p->content_length : HTTP_READ_CHUNK);
  conn_wait(c, WAIT_HEADER); /* now an inactivity bound on the body */
  bool has_body =
      (p->flags & F_CHUNKED) || ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0);
  const char *expect = http_request_header(&c->req, "expect");
  if (has_body && expect && strcasecmp(expect, "100-continue") == 0 && p->http_major == 1 &&
      p->http_minor >= 1) {
    buf_t b;
    buf_init(&b);
    buf_append_str(&b, "HTTP/1.1 100 Continue\r\n\r\n");
    conn_send(c, &b);
  }
  return 0;
}

static void conn_dispatch(http_conn_t *c) {
  http_request_t *r = &c->req;
  r->method = llhttp_get_method(&c->parser);
  r->method_name = llhttp_method_name((llhttp_method_t)r->method);
  /* Copies of the target's parts, after it in c->text (reserved: nothing moves). */
  const char *q = strchr(r->target, '?');
  size_t path_len = q ? (size_t)(q - r->target) : strlen(r->target);
  r->path = c->text.data + c->text.len;
  buf_append(&c->text, r->target, path_len);
  conn_text_next(c, TEXT_BETWEEN);
  if (q != NULL) {
    r->query = c->text.data + c->text.len;
    buf_append_str(&c->text, q + 1);
    conn_text_next(c, TEXT_BETWEEN);
  }
  static char no_body[1]; /* "" for a request without one */
  r->body_len = c->body.len;
  if (c->body.data != NULL) c->body.data[c->body.len] = '\0'; /* a kept buffer holds old bytes */
  r->body = c->body.data != NULL ? c->body.data : no_body;    /* c->body's, until the answer */
  r->keep_alive = c->msg_keep_alive;
  c->phase = PHASE_DISPATCHED;
  c->owner_holds = true;
  c->dispatched_ns = uv_hrtime();
  c->label = -1;
  c->req_flags = c->adopt_flags;
  c->adopt_flags = 0;
  conn_wait(c, WAIT_NONE);
  c->srv->cb(c, r, c->srv->cb_data);
}

/*
 * Runs llhttp over the input until a request is dispatched, the input runs
 * out, or the connection fails: over src when it is not NULL (a read into
 * the server's shared buffer, parsed where it landed), else over c->in.
 * Parsed bytes leave the input; what a dispatched request leaves of src
 * (pipelined bytes) is kept in c->in before it is dispatched. The parser
 * pauses after each header block (to check it before any body is read) and
 * after each message (one request at a time). No callback keeps a pointer
 * into the input: the target, headers and body are copied as they come.
 */
static void conn_parse_input(http_conn_t *c, const char *src, size_t src_len) {
  const http_server_options *o = &c->srv->opts;
  bool resumed = false; /* llhttp must run again, even on no bytes, after a pause */
  while (!c->closing && ((src != NULL ? src_len : c->in.len) > 0 || resumed) &&
         (c->phase == PHASE_IDLE || c->phase == PHASE_HEADERS || c->phase == PHASE_BODY)) {
    if (c->phase == PHASE_IDLE && c->queued > HTTP_OUT_HIGH) {
      /* The next request waits for the answers to go (conn_on_stream_write resumes it); a
       * peer that takes none of them for the keep-alive time is closed. */
      if (c->wait != WAIT_KEEPALIVE) conn_wait(c, WAIT_KEEPALIVE);
      break;
    }
    resumed = false;
    if (c->phase == PHASE_IDLE) conn_begin_request(c);
    bool in_head = c->phase == PHASE_HEADERS;
    const char *start = src != NULL ? src : c->in.data ? c->in.data : "";
    size_t len = src != NULL ? src_len : c->in.len;
    llhttp_errno_t err = llhttp_execute(&c->parser, start, len);
    size_t used = err == HPE_OK ? len : (size_t)(llhttp_get_error_pos(&c->parser) - start);
    if (src != NULL) {
      src += used;
      src_len -= used;
    } else {
      buf_consume(&c->in, used);
    }
    if (in_head) c->hdr_raw += used;
    if (err == HPE_OK) {
      if (in_head && c->hdr_raw > o->max_header) conn_fail(c, 431);
      break;
    }
    if (err != HPE_PAUSED) {
      conn_fail(c, c->fail_status ? c->fail_status : 400);
      return;
    }
    enum conn_pause why = c->pause;
    c->pause = PAUSE_NONE;
    if (why == PAUSE_MESSAGE) {
      if (src != NULL && src_len > 0) buf_append(&c->in, src, src_len);
      conn_dispatch(c); /* resumed by http_respond */
      return;
    }
    llhttp_resume(&c->parser);
    int status = conn_headers_done(c);
    if (status) {
      conn_fail(c, status);
      return;
    }
    resumed = true;
  }
  if (src != NULL && src_len > 0 && !c->closing) buf_append(&c->in, src, src_len);
  /* The peer is gone and what it left is not a complete request. */
  if (c->peer_eof && !c->closing && c->phase != PHASE_DISPATCHED && c->phase != PHASE_STREAM)
    conn_finish(c, true);
}

/* Runs llhttp over the buffered input (conn_parse_input). */
static void conn_parse(http_conn_t *c) {
  conn_parse_input(c, NULL, 0);
}

/*
 * Reconciles reading with c's state: read unless the peer finished or the
 * buffer of a dispatched connection passed max_header + max_body
 * (back-pressure), and release the input buffer while it is empty and the
 * connection is between requests.
 */
static void conn_settle(http_conn_t *c) {
  if (c->handle_closing) return;
  const http_server_options *o = &c->srv->opts;
  bool want = !c->peer_eof && c->in.len <= o->max_header + o->max_body;
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->tcp, conn_on_alloc, conn_on_read) < 0) {
      conn_close_now(c);
      return;
    }
    c->reading = true;
  } else if (!want && c->reading) {
    (void)uv_read_stop((uv_stream_t *)&c->tcp); /* cannot fail */
    c->reading = false;
  }
  if (c->in.len == 0 && c->in.data &&
      (c->closing || c->phase == PHASE_IDLE || c->phase == PHASE_DISPATCHED ||
       c->phase == PHASE_STREAM))
    buf_finish(&c->in);
}

/* ---- libuv callbacks --------------------------------------------------- */

/* Deferred work for every connection scheduled since the last turn. */
static void server_on_idle(uv_idle_t *h) {
  http_server_t *srv = h->data;
  /* Work scheduled while this runs waits for the next turn: a connection
   * answering synchronously cannot starve the others. */
  srv->running = srv->pending;
  srv->pending = srv->pending_tail = NULL;
  while (srv->running) {
    http_conn_t *c = srv->running;
    srv->running = c->pending_next;
    c->pending_next = NULL;
    c->pending = false;
    if (c->zombie) {
      if (c->close_cb) { /* set after the connection had closed */
        void (*cb)(http_conn_t *, void *) = c->close_cb;
        c->close_cb = NULL;
        c->owner_holds = false;
        c->zombie = false; /* calls from inside cb must not free c */
        cb(c, c->close_data);
        conn_free(c);
      }
      continue;
    }
    if (c->handle_closing) continue;
    if (!c->closing) conn_flush(c);
    if (!c->closing && c->in.len > 0 &&
        (c->phase == PHASE_IDLE || c->phase == PHASE_HEADERS || c->phase == PHASE_BODY)) {
      conn_parse(c);
      conn_settle(c);
    }
  }
  if (srv->turn_end != NULL) {
    void (*fn)(void *) = srv->turn_end;
    srv->turn_end = NULL;
    fn(srv->turn_end_data);
  }
  if (srv->pending == NULL && srv->turn_end == NULL && !srv->closing)
    (void)uv_idle_stop(h); /* cannot fail */
}

void http_server_at_turn_end(http_server_t *srv, void (*fn)(void *data), void *data) {
  srv->turn_end = fn;
  srv->turn_end_data = data;
  (void)uv_idle_start(&srv->idle, server_on_idle); /* fails only on a closing handle */
}

static void conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  http_conn_t *c = h->data;
  if (c->closing || c->phase == PHASE_STREAM) {
    *b = uv_buf_init(c->srv->scratch, sizeof c->srv->scratch);
    return;
  }
  /* Reserving one byte less keeps the allocation a power of two with the
   * buffer's NUL; the read never touches that last byte. */
  if (c->in.data == NULL) { /* copied into c->in by conn_on_read */
    *b = uv_buf_init(c->srv->read_buf, (unsigned int)(HTTP_READ_CHUNK - 1));
    return;
  }
  buf_reserve(&c->in, HTTP_READ_CHUNK - 1);
  size_t room = c->in.cap - c->in.len - 1;
  if (room > HTTP_READ_CHUNK) room = HTTP_READ_CHUNK;
  *b = uv_buf_init(c->in.data + c->in.len, (unsigned int)room);
}

static void conn_on_eof(http_conn_t *c) {
  c->peer_eof = true;
  c->reading = false; /* libuv stopped reading */
  if (c->phase == PHASE_STREAM) {
    conn_close_now(c);
  } else if (c->phase == PHASE_DISPATCHED && c->close_cb != NULL) {
    /* A held request whose owner watches for the client leaving (a long poll). */
    conn_close_now(c);
  } else if (c->closing) {
    if (c->shutdown_done) conn_close_now(c); /* else conn_on_shutdown closes */
  } else if (c->phase != PHASE_DISPATCHED && c->in.len == 0) {
    conn_finish(c, true); /* a half-finished request or none: nothing to answer */
  }
  /* Otherwise the request in hand (or buffered) is answered, then closed. */
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  http_conn_t *c = s->data;
  if (nread == 0 || c->handle_closing) return;
  if (nread < 0) {
    if (nread == UV_EOF)
      conn_on_eof(c);
    else
      conn_close_now(c);
    return;
  }
  if (c->closing || c->phase == PHASE_STREAM) return; /* discarded */
  /* A read into the shared buffer is parsed where it landed (conn_parse_input keeps the rest). */
  bool shared = b->base == c->srv->read_buf;
  if (!shared) {
    c->in.len += (size_t)nread;
    c->in.data[c->in.len] = '\0';
  } else if (c->phase == PHASE_DISPATCHED) {
    buf_append(&c->in, b->base, (size_t)nread); /* the shared buffer is the next read's */
  }
  if (c->phase == PHASE_BODY) conn_wait(c, WAIT_HEADER);
  if (c->phase != PHASE_DISPATCHED)
    conn_parse_input(c, shared ? b->base : NULL, shared ? (size_t)nread : 0);
  conn_settle(c);
}

static void conn_on_timeout(http_conn_t *c) {
  if (c->closing) {
    conn_close_now(c); /* drain or linger time is up */
    return;
  }
  switch (c->phase) {
  case PHASE_IDLE:
    conn_finish(c, true); /* idle keep-alive: closed without a word */
    break;
  case PHASE_HEADERS:
  case PHASE_BODY: conn_fail(c, 408); break;
  default: break;
  }
}

/* ---- connections: creation --------------------------------------------- */

/* A new connection with its handles initialised and linked into srv;
 * NULL if libuv refused the handles. */
static http_conn_t *conn_create(http_server_t *srv) {
  http_conn_t *c = mem_calloc(1, sizeof *c);
  c->srv = srv;
  if (uv_tcp_init(srv->loop, &c->tcp) < 0) {
    free(c);
    return NULL;
  }
  c->handles_open = 1;
  c->tcp.data = c;
  buf_init(&c->in);
  buf_init(&c->out);
  buf_init(&c->inflight);
  buf_init(&c->text);
  buf_init(&c->body);
  llhttp_init(&c->parser, HTTP_REQUEST, &srv->settings);
  c->parser.data = c;
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  srv->n_conns++;
  return c;
}

/* Starts reading and the header timeout (which runs from connect). 0, or
 * -errno with c already closing (it owns its socket either way). */
/*
 * Counts c against the connection bounds. false (after a short 503 and a
 * close) when it passes one: the peer learns why instead of a silent reset.
 */
static bool conn_admit(http_conn_t *c) {
  http_server_t *srv = c->srv;
  const http_server_options *o = &srv->opts;
  char name[INET6_ADDRSTRLEN] = "";
  if (o->max_per_address > 0) {
    struct sockaddr_storage ss;
    int len = (int)sizeof ss;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
      if (ss.ss_family == AF_INET)
        uv_ip4_name((const struct sockaddr_in *)&ss, name, sizeof name);
      else if (ss.ss_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)&ss, name, sizeof name);
    }
  }
  size_t alen = strlen(name);
  strmap_entry *e = alen > 0 ? strmap_find(&srv->per_address, name, alen) : NULL;
  uintptr_t from_here = e != NULL ? (uintptr_t)e->value : 0;
  bool over = (o->max_connections > 0 && srv->n_conns > o->max_connections) ||
              (o->max_per_address > 0 && alen > 0 && from_here >= o->max_per_address);
  if (!over) {
    if (e != NULL)
      e->value = (void *)(from_here + 1);
    else if (alen > 0) {
      (void)strmap_put(&srv->per_address, name, alen, (void *)1);
      e = strmap_find(&srv->per_address, name, alen);
    }
    c->address = e;
    return true;
  }
  srv->refused++;
  static const char busy[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Content-Length: 32\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
      "{\"error\":\"too many connections\"}";
  uv_buf_t b = uv_buf_init((char *)busy, sizeof(busy) - 1);
  (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1); /* best effort: a fresh socket has room */
  conn_close_now(c);
  return false;
}

static int conn_start(http_conn_t *c) MCPSUB_NODISCARD;
static int conn_start(http_conn_t *c) {
  if (!(c->adopt_flags & HTTP_ADOPT_REROUTED) && !conn_admit(c)) return UV_EBUSY;
  (void)uv_tcp_nodelay(&c->tcp, 1); /* best effort: a latency tweak */
  conn_begin_request(c);
  int r = uv_read_start((uv_stream_t *)&c->tcp, conn_on_alloc, conn_on_read);
  if (r < 0) {
    conn_close_now(c);
    return r;
  }
  c->reading = true;
  return 0;
}

static void server_on_connection(uv_stream_t *listener, int status) {
  http_server_t *srv = listener->data;
  if (status < 0) {
    log_warn("http: accept failed", "error", uv_strerror(status));
    return;
  }
  if (srv->closing) return;
  http_conn_t *c = conn_create(srv);
  if (c == NULL) return;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) < 0) {
    conn_close_now(c);
    return;
  }
  int r = conn_start(c);
  if (r < 0 && r != UV_EBUSY) log_warn("http: cannot read from an accepted connection");
}

/* ---- server API -------------------------------------------------------- */

http_server_t *http_server_create(uv_loop_t *loop, const http_server_options *opts,
                                  http_request_cb cb, void *data) {
  http_server_t *srv = mem_calloc(1, sizeof *srv);
  srv->loop = loop;
  if (opts) srv->opts = *opts;
  strmap_init(&srv->per_address);
  srv->read_buf = mem_alloc(HTTP_READ_CHUNK);
  if (srv->opts.max_header == 0) srv->opts.max_header = HTTP_DEFAULT_MAX_HEADER;
  if (srv->opts.max_body == 0) srv->opts.max_body = HTTP_DEFAULT_MAX_BODY;
  if (srv->opts.header_timeout_ms == 0)
    srv->opts.header_timeout_ms = HTTP_DEFAULT_HEADER_TIMEOUT_MS;
  if (srv->opts.max_stream_queue == 0) srv->opts.max_stream_queue = HTTP_DEFAULT_MAX_STREAM_QUEUE;
  srv->cb = cb;
  srv->cb_data = data;

  llhttp_settings_init(&srv->settings);
  srv->settings.on_message_begin = on_message_begin;
  srv->settings.on_url = on_url;
  srv->settings.on_header_field = on_header_field;
  srv->settings.on_header_value = on_header_value;
  srv->settings.on_header_value_complete = on_header_value_complete;
  srv->settings.on_headers_complete = on_headers_complete;
  srv->settings.on_body = on_body;
  srv->settings.on_chunk_extension_name = on_chunk_extension;
  srv->settings.on_chunk_extension_value = on_chunk_extension;
  srv->settings.on_message_complete = on_message_complete;

  (void)uv_idle_init(loop, &srv->idle); /* cannot fail */
  srv->idle.data = srv;
  (void)uv_timer_init(loop, &srv->spare_timer); /* cannot fail */
  srv->spare_timer.data = srv;
  uv_unref((uv_handle_t *)&srv->spare_timer);  /* spares keep no loop alive */
  (void)uv_timer_init(loop, &srv->wait_timer); /* cannot fail */
  srv->wait_timer.data = srv;
  srv->wait_ms[WAIT_HEADER] = srv->opts.header_timeout_ms;
  srv->wait_ms[WAIT_KEEPALIVE] = srv->opts.keepalive_idle_ms;
  srv->wait_ms[WAIT_DRAIN] = HTTP_DRAIN_MS;
  srv->wait_ms[WAIT_LINGER] = HTTP_LINGER_MS;
  srv->handles_open = 3;
  return srv;
}

int http_server_listen(http_server_t *srv, const char *host, int port) {
  struct sockaddr_storage ss;
  int r;
  if (srv->closing || srv->listener_init) return UV_EINVAL;
  memset(&ss, 0, sizeof ss);
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0) {
    r = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
    if (r < 0) return r;
  }
  r = uv_tcp_init(srv->loop, &srv->listener);
  if (r < 0) return r;
  srv->listener_init = true;
  srv->handles_open++;
  srv->listener.data = srv;
  r = uv_tcp_bind(&srv->listener, (const struct sockaddr *)&ss, 0);
  if (r < 0) return r;
  return uv_listen((uv_stream_t *)&srv->listener, HTTP_LISTEN_BACKLOG, server_on_connection);
}

int http_server_port(const http_server_t *srv) {
  struct sockaddr_storage ss;
  int len = (int)sizeof ss;
  if (!srv->listener_init) return UV_EINVAL;
  int r = uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &len);
  if (r < 0) return r;
  if (ss.ss_family == AF_INET) return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
  return UV_EAFNOSUPPORT;
}

int http_server_adopt(http_server_t *srv, uv_os_sock_t fd, const char *bytes, size_t n) {
  return http_server_adopt_flags(srv, fd, bytes, n, 0);
}

int http_server_adopt_flags(http_server_t *srv, uv_os_sock_t fd, const char *bytes, size_t n,
                            unsigned flags) {
  if (srv->closing) {
    close(fd);
    return UV_ECANCELED;
  }
  http_conn_t *c = conn_create(srv);
  if (c == NULL) {
    close(fd);
    return UV_ENOMEM;
  }
  int r = uv_tcp_open(&c->tcp, fd);
  if (r < 0) {
    close(fd);
    conn_close_now(c);
    return r;
  }
  if (n > 0) buf_append(&c->in, bytes, n);
  c->adopt_flags = flags;
  r = conn_start(c);
  if (r < 0) return r;                 /* c is closing and owns fd */
  if (c->in.len > 0) conn_schedule(c); /* parsed from the loop, not from inside this call */
  return 0;
}

void http_server_close(http_server_t *srv, void (*done)(void *data), void *data) {
  if (srv == NULL || srv->closing) return;
  srv->closing = true;
  srv->done = done;
  srv->done_data = data;
  if (srv->listener_init) uv_close((uv_handle_t *)&srv->listener, server_on_handle_closed);
  uv_close((uv_handle_t *)&srv->idle, server_on_handle_closed);
  uv_close((uv_handle_t *)&srv->spare_timer, server_on_handle_closed);
  uv_close((uv_handle_t *)&srv->wait_timer, server_on_handle_closed);
  http_conn_t **lists[] = {&srv->pending, &srv->running};
  for (size_t i = 0; i < ARRAY_LEN(lists); i++) {
    while (*lists[i]) {
      http_conn_t *c = *lists[i];
      *lists[i] = c->pending_next;
      c->pending_next = NULL;
      c->pending = false;
    }
  }
  srv->pending_tail = NULL;
  for (http_conn_t *c = srv->conns; c; c = c->next) conn_close_now(c);
}

void http_server_drain(http_server_t *srv) {
  if (srv == NULL || srv->closing || srv->draining) return;
  srv->draining = true;
  if (srv->listener_init) {
    srv->listener_init = false;
    uv_close((uv_handle_t *)&srv->listener, server_on_handle_closed);
  }
  for (http_conn_t *c = srv->conns; c; c = c->next) {
    if (c->closing) continue;
    /* No complete header block yet (and no unparsed bytes that may hold
     * one): no request is in flight, so nothing is lost by closing. */
    if ((c->phase == PHASE_IDLE || c->phase == PHASE_HEADERS) && c->in.len == 0)
      conn_finish(c, true);
  }
}

/* Appends the request in hand to b as HTTP/1.x bytes with a Content-Length body. */
static void conn_serialize_request(const http_conn_t *c, buf_t *b) {
  const http_request_t *r = &c->req;
  buf_printf(b, "%s %s HTTP/%u.%u\r\n", r->method_name, r->target, c->http_major, c->http_minor);
  for (size_t i = 0; i < r->n_headers; i++) {
    const char *name = r->headers[i].name;
    /* The body is re-framed below, and a 100 Continue was already sent. */
    if (strcmp(name, "content-length") == 0 || strcmp(name, "transfer-encoding") == 0 ||
        strcmp(name, "expect") == 0)
      continue;
    buf_printf(b, "%s: %s\r\n", name, r->headers[i].value);
  }
  if (r->body_len > 0 || http_request_header(r, "content-length") != NULL ||
      http_request_header(r, "transfer-encoding") != NULL)
    buf_printf(b, "content-length: %zu\r\n", r->body_len);
  buf_append(b, "\r\n", 2);
  buf_append(b, r->body, r->body_len);
}

int http_conn_detach(http_conn_t *c, size_t max_bytes, uv_os_sock_t *fd, buf_t *bytes) {
  if (c == NULL || c->phase != PHASE_DISPATCHED || !c->owner_holds || c->closing ||
      c->handle_closing)
    return -EINVAL;
  /* A response still on its way out would be cut: the kernel must have it all. */
  if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0 || c->stream_writing ||
      c->out.len > 0)
    return -EAGAIN;
  const http_request_t *r = &c->req;
  size_t need = strlen(r->target) + r->body_len + c->in.len + 64;
  for (size_t i = 0; i < r->n_headers; i++)
    need += strlen(r->headers[i].name) + strlen(r->headers[i].value) + 4;
  if (need > max_bytes) return -E2BIG;
  uv_os_fd_t own;
  if (uv_fileno((uv_handle_t *)&c->tcp, &own) < 0) return -EBADF;
  int dup_fd = fcntl(own, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return -errno;
  conn_serialize_request(c, bytes);
  buf_append(bytes, c->in.data ? c->in.data : "", c->in.len);
  *fd = dup_fd;
  /* Closed without a word: the duplicate keeps the TCP connection open. */
  c->owner_holds = false;
  conn_request_clear(c);
  c->phase = PHASE_IDLE;
  buf_finish(&c->in);
  conn_close_now(c);
  return 0;
}

unsigned http_conn_request_flags(const http_conn_t *c) {
  return c ? c->req_flags : 0;
}

void http_server_destroy(http_server_t *srv) {
  if (srv == NULL) return;
  strmap_finish(&srv->per_address);
  free(srv->read_buf);
  for (size_t i = 0; i < srv->n_spares; i++) free(srv->spares[i]);
  free(srv->spares);
  free(srv);
}

uint64_t http_server_refused(const http_server_t *srv) {
  return srv ? srv->refused : 0;
}

size_t http_server_connections(const http_server_t *srv) {
  return srv ? srv->n_conns : 0;
}
