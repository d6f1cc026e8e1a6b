/*
 * HTTP/1.1 client connections for the load generator, on libuv + llhttp.
 * A request connection carries one request at a time over keep-alive and
 * reconnects by itself when the server closed it between requests; a
 * stream connection sends one GET and then feeds the response body to the
 * SSE parser. All connections of a client read into one shared buffer,
 * which is safe because a read is parsed completely inside its callback:
 * a connection therefore holds no read buffer of its own, only the bytes
 * of a split SSE event or of a response body (bounded).
 *
 * Lifetime: a connection is freed only from its libuv close callback (or
 * at once when it has no open handle), never from inside one of its own
 * callbacks; owner callbacks may close it, and parsing stops there.
 */
#include <errno.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "lg.h"

/* Bytes of one read; every connection shares this buffer. */
#define LG_READ_BUF ((size_t)256 * 1024)
/* Largest response body kept (requests only; streams keep none). */
#define LG_MAX_BODY ((size_t)4 * 1024 * 1024)
/* Source addresses 127.0.0.2 .. 127.0.0.(1 + LG_SRC_ADDRS) for streams. */
#define LG_SRC_ADDRS 16u

enum handle_state { HANDLE_NONE, HANDLE_OPEN, HANDLE_CLOSING };

struct lg_client {
  uv_loop_t *loop;
  struct sockaddr_in addr;
  int port;
  llhttp_settings_t settings;
  lg_conn *conns;
  size_t n_conns;
  char *rbuf;
};

struct lg_conn {
  lg_client *cl;
  lg_conn *prev, *next;
  const lg_conn_ops *ops;
  void *data;
  unsigned src_index;
  bool stream;

  uv_tcp_t tcp;
  uv_connect_t connect_req;
  enum handle_state handle;
  bool connected;
  bool owner_closed;  /* lg_conn_close: free when the handle is closed */
  bool reset;         /* close with RST */
  int error;          /* reported from the close callback */
  bool send_on_close; /* a send arrived while the old handle was closing */
  bool awaiting;      /* a request is in flight */
  unsigned writing;   /* writes whose callback has not run */

  char *wbuf;
  size_t wlen;

  llhttp_t parser;
  char field[32];
  size_t field_len;
  bool field_is_sid;
  char sid[80];
  size_t sid_len;
  char *body;
  size_t body_len, body_cap;
  bool body_overflow;
  lg_sse sse;
};

static void conn_on_close(uv_handle_t *h);
static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

/* ---- lifetime ------------------------------------------------------------ */

static void conn_free(lg_conn *c) {
  lg_client *cl = c->cl;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    cl->conns = c->next;
  if (c->next != NULL) c->next->prev = c->prev;
  cl->n_conns--;
  free(c->wbuf);
  free(c->body);
  lg_sse_finish(&c->sse);
  free(c);
}

static void conn_reset_response(lg_conn *c) {
  c->field_len = 0;
  c->field_is_sid = false;
  c->sid_len = 0;
  c->body_len = 0;
  c->body_overflow = false;
}

/* Closes the handle; with error != 0 the owner hears of it afterwards
 * (on_error, from the close callback). */
static void conn_close_handle(lg_conn *c, int error) {
  if (error != 0 && c->error == 0) c->error = error;
  if (c->handle != HANDLE_OPEN) return;
  c->handle = HANDLE_CLOSING;
  c->connected = false;
  if (c->reset && uv_tcp_close_reset(&c->tcp, conn_on_close) == 0) return;
  uv_close((uv_handle_t *)&c->tcp, conn_on_close);
}

static int conn_connect(lg_conn *c);

static void conn_on_close(uv_handle_t *h) {
  lg_conn *c = h->data;
  c->handle = HANDLE_NONE;
  if (c->owner_closed) {
    conn_free(c);
    return;
  }
  if (c->error != 0) {
    int e = c->error;
    c->error = 0;
    c->awaiting = false;
    c->send_on_close = false;
    c->ops->on_error(c, e, c->data); /* may free c: touch nothing after */
    return;
  }
  if (c->send_on_close) {
    c->send_on_close = false;
    int r = conn_connect(c);
    if (r != 0) {
      c->awaiting = false;
      c->ops->on_error(c, r, c->data);
    }
  }
}

/* ---- llhttp callbacks ---------------------------------------------------- */

static bool conn_dead(const lg_conn *c) {
  return c->owner_closed || c->handle != HANDLE_OPEN || c->error != 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
  lg_conn *c = p->data;
  if (c->field_len + len < sizeof(c->field)) {
    memcpy(c->field + c->field_len, at, len);
    c->field_len += len;
  } else {
    c->field_len = sizeof(c->field); /* too long to be a name we want */
  }
  return 0;
}

static int on_header_field_complete(llhttp_t *p) {
  lg_conn *c = p->data;
  c->field_is_sid = c->field_len == 14 && strncasecmp(c->field, "mcp-session-id", 14) == 0;
  c->field_len = 0;
  if (c->field_is_sid) c->sid_len = 0;
  return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
  lg_conn *c = p->data;
  if (!c->field_is_sid) return 0;
  if (c->sid_len + len >= sizeof(c->sid)) return HPE_USER;
  memcpy(c->sid + c->sid_len, at, len);
  c->sid_len += len;
  return 0;
}

static int on_headers_complete(llhttp_t *p) {
  lg_conn *c = p->data;
  if (c->stream) {
    c->ops->on_stream_open(c, (int)llhttp_get_status_code(p), c->data);
    if (conn_dead(c)) return HPE_USER;
  }
  return 0;
}

static void conn_on_sse(const lg_sse_event *ev, void *data) {
  lg_conn *c = data;
  if (!conn_dead(c)) c->ops->on_event(c, ev, c->data);
}

static int on_body(llhttp_t *p, const char *at, size_t len) {
  lg_conn *c = p->data;
  if (c->stream) {
    if (lg_sse_feed(&c->sse, at, len, conn_on_sse, c) != 0) return HPE_USER;
    return conn_dead(c) ? HPE_USER : 0;
  }
  if (c->body_len + len > LG_MAX_BODY) {
    c->body_overflow = true;
    return HPE_USER;
  }
  if (c->body_len + len + 1 > c->body_cap) {
    size_t cap = c->body_cap ? c->body_cap : 1024;
    while (cap < c->body_len + len + 1) cap *= 2;
    c->body = lg_realloc(c->body, cap);
    c->body_cap = cap;
  }
  memcpy(c->body + c->body_len, at, len);
  c->body_len += len;
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  lg_conn *c = p->data;
  if (c->stream) {
    conn_close_handle(c, UV_EOF); /* the stream ended */
    return HPE_USER;
  }
  if (!c->awaiting) {
    conn_close_handle(c, -EPROTO); /* a response nobody asked for */
    return HPE_USER;
  }
  bool keep = llhttp_should_keep_alive(p);
  if (c->body == NULL) {
    c->body = lg_alloc(64);
    c->body_cap = 64;
  }
  c->body[c->body_len] = '\0';
  c->sid[c->sid_len] = '\0';
  lg_response r = {(int)llhttp_get_status_code(p), c->sid_len > 0 ? c->sid : NULL, c->body,
                   c->body_len};
  c->awaiting = false;
  if (!keep) conn_close_handle(c, 0); /* the next send reconnects */
  c->ops->on_response(c, &r, c->data);
  conn_reset_response(c);
  if (c->body_cap > 64 * 1024) { /* give back what a large body grew */
    free(c->body);
    c->body = NULL;
    c->body_cap = 0;
  }
  return conn_dead(c) ? HPE_USER : 0;
}

/* ---- I/O ----------------------------------------------------------------- */

static void conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  lg_conn *c = h->data;
  *b = uv_buf_init(c->cl->rbuf, (unsigned)LG_READ_BUF);
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  lg_conn *c = s->data;
  if (nread == 0 || conn_dead(c)) return;
  if (nread < 0) {
    if (nread != UV_EOF) {
      conn_close_handle(c, (int)nread);
      return;
    }
    if (c->stream || c->awaiting) {
      llhttp_errno_t e = llhttp_finish(&c->parser); /* may complete a close-delimited body */
      if (!conn_dead(c)) conn_close_handle(c, e == HPE_OK ? UV_EOF : -EPROTO);
    } else {
      conn_close_handle(c, 0); /* closed between requests: reconnect on the next send */
    }
    return;
  }
  llhttp_errno_t e = llhttp_execute(&c->parser, b->base, (size_t)nread);
  if (e != HPE_OK && !conn_dead(c)) conn_close_handle(c, -EPROTO);
}

/* One write in flight: the request's bytes live with it until its callback
 * (which may run after the response was already parsed). */
typedef struct lg_write {
  uv_write_t req;
  lg_conn *conn;
  char data[];
} lg_write;

static void conn_on_write(uv_write_t *req, int status) {
  lg_write *w = (lg_write *)req;
  lg_conn *c = w->conn;
  free(w);
  c->writing--;
  if (status < 0 && status != UV_ECANCELED && !conn_dead(c)) conn_close_handle(c, status);
}

/* Writes the pending request (c->wbuf). */
static void conn_write(lg_conn *c) {
  lg_write *w = lg_alloc(sizeof(*w) + c->wlen);
  w->conn = c;
  memcpy(w->data, c->wbuf, c->wlen);
  uv_buf_t b = uv_buf_init(w->data, (unsigned)c->wlen);
  c->writing++;
  int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, conn_on_write);
  if (r < 0) {
    c->writing--;
    free(w);
    conn_close_handle(c, r);
  }
}

static void conn_on_connect(uv_connect_t *req, int status) {
  lg_conn *c = req->data;
  if (conn_dead(c)) return;
  if (status < 0) {
    conn_close_handle(c, status);
    return;
  }
  c->connected = true;
  int r = uv_read_start((uv_stream_t *)&c->tcp, conn_on_alloc, conn_on_read);
  if (r < 0) {
    conn_close_handle(c, r);
    return;
  }
  conn_write(c);
}

static int conn_connect(lg_conn *c) {
  lg_client *cl = c->cl;
  int r = uv_tcp_init(cl->loop, &c->tcp);
  if (r < 0) return r;
  c->tcp.data = c;
  c->handle = HANDLE_OPEN;
  llhttp_init(&c->parser, HTTP_RESPONSE, &cl->settings);
  c->parser.data = c;
  conn_reset_response(c);
  if (c->stream) {
    struct sockaddr_in src;
    char ip[32];
    snprintf(ip, sizeof(ip), "127.0.0.%u", 2u + c->src_index % LG_SRC_ADDRS);
    uv_ip4_addr(ip, 0, &src);
    r = uv_tcp_bind(&c->tcp, (const struct sockaddr *)&src, 0);
  }
  if (r == 0) r = uv_tcp_nodelay(&c->tcp, 1);
  c->connect_req.data = c;
  if (r == 0)
    r = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&cl->addr,
                       conn_on_connect);
  if (r < 0) conn_close_handle(c, r); /* reported from the close callback, like any failure */
  return 0;
}

/* ---- API ----------------------------------------------------------------- */

lg_client *lg_client_create(uv_loop_t *loop, int port) {
  lg_client *cl = lg_calloc(1, sizeof(*cl));
  cl->loop = loop;
  cl->port = port;
  uv_ip4_addr(LG_HOST, port, &cl->addr);
  cl->rbuf = lg_alloc(LG_READ_BUF);
  llhttp_settings_init(&cl->settings);
  cl->settings.on_header_field = on_header_field;
  cl->settings.on_header_field_complete = on_header_field_complete;
  cl->settings.on_header_value = on_header_value;
  cl->settings.on_headers_complete = on_headers_complete;
  cl->settings.on_body = on_body;
  cl->settings.on_message_complete = on_message_complete;
  return cl;
}

void lg_client_close_all(lg_client *cl, bool reset) {
  for (lg_conn *c = cl->conns, *next; c != NULL; c = next) {
    next = c->next;
    lg_conn_close(c, reset);
  }
}

void lg_client_destroy(lg_client *cl) {
  if (cl == NULL) return;
  while (cl->conns != NULL) {
    lg_conn *c = cl->conns; /* only connections whose handles are gone remain */
    conn_free(c);
  }
  free(cl->rbuf);
  free(cl);
}

size_t lg_client_open_conns(const lg_client *cl) {
  return cl->n_conns;
}

int lg_client_port(const lg_client *cl) {
  return cl->port;
}

lg_conn *lg_conn_create(lg_client *cl, bool stream, unsigned src_index, const lg_conn_ops *ops,
                        void *data) {
  lg_conn *c = lg_calloc(1, sizeof(*c));
  c->cl = cl;
  c->stream = stream;
  c->src_index = src_index;
  c->ops = ops;
  c->data = data;
  lg_sse_init(&c->sse);
  c->next = cl->conns;
  if (cl->conns != NULL) cl->conns->prev = c;
  cl->conns = c;
  cl->n_conns++;
  return c;
}

int lg_conn_send(lg_conn *c, const char *req, size_t len) {
  if (c->owner_closed) return -EPIPE;
  if (c->awaiting) return -EBUSY;
  if (c->stream && c->handle != HANDLE_NONE) return -EBUSY; /* one GET per stream connection */
  if (len > c->wlen || c->wbuf == NULL) c->wbuf = lg_realloc(c->wbuf, len);
  memcpy(c->wbuf, req, len);
  c->wlen = len;
  c->awaiting = !c->stream;
  switch (c->handle) {
  case HANDLE_OPEN:
    if (c->connected) conn_write(c);
    return 0; /* else written on connect */
  case HANDLE_CLOSING: c->send_on_close = true; return 0;
  case HANDLE_NONE:
  default: {
    int r = conn_connect(c);
    if (r != 0) c->awaiting = false;
    return r;
  }
  }
}

void lg_conn_close(lg_conn *c, bool reset) {
  if (c == NULL || c->owner_closed) return;
  c->owner_closed = true;
  c->reset = reset && c->connected;
  if (c->handle == HANDLE_NONE) {
    conn_free(c);
    return;
  }
  conn_close_handle(c, 0);
}

bool lg_conn_busy(const lg_conn *c) {
  return c->awaiting || c->send_on_close;
}

uint64_t lg_conn_segs_in(const lg_conn *c) {
  if (c->handle != HANDLE_OPEN || !c->connected) return 0;
  uv_os_fd_t fd;
  if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0) return 0;
  return lg_tcp_data_segs_in(fd);
}
