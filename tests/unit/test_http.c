/*
 * Tests of the HTTP connection layer against real sockets: the server runs
 * on a libuv loop in the main thread, listening on 127.0.0.1 port 0, and a
 * client thread speaks raw HTTP/1.1 through blocking sockets (with receive
 * timeouts, so a broken server fails the test instead of hanging it).
 * Covered: plain, keep-alive and pipelined requests, chunked bodies, the
 * 400/408/413/431 answers, Connection: close, HTTP/1.0, Expect:
 * 100-continue, back-pressure on a long pipeline, SSE-style streams and
 * their queue cap, peers that reset while a request is held, keep-alive
 * idle close, and adopting a socket with bytes already read from it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "worker/http.h"

/* ---- loop thread: the server under test -------------------------------- */

static uv_loop_t loop;
static http_server_t *srv;
static int server_port;
static uv_async_t cmd_async;
static bool server_done;

static atomic_int stream_closes;  /* close callbacks of streams */
static atomic_int cut_result;     /* http_stream_write's answer past the cap */
static atomic_long cut_queued;    /* http_conn_queued before that write */
static atomic_int hold_closes;    /* close callbacks of held requests */
static atomic_int late_responses; /* responses sent to a connection already gone */

enum job_kind {
  JOB_ASYNC_RESPOND,
  JOB_STREAM_MORE,
  JOB_STREAM_CUT,
  JOB_LATE_RESPOND,
  JOB_LATE_CLOSE_CB,
};

/* A piece of work a request callback leaves for a timer. */
typedef struct job {
  uv_timer_t timer;
  http_conn_t *conn; /* NULL once the connection closed */
  enum job_kind kind;
} job_t;

static void job_free(uv_handle_t *h) {
  free(h->data);
}

static void on_stream_closed(http_conn_t *c, void *data) {
  (void)c;
  (void)data;
  atomic_fetch_add(&stream_closes, 1);
}

/* Closed while its job was pending: the job must not touch it. */
static void on_job_conn_closed(http_conn_t *c, void *data) {
  job_t *j = data;
  j->conn = NULL;
  on_stream_closed(c, NULL);
}

static void on_hold_closed(http_conn_t *c, void *data);

static void on_job_timer(uv_timer_t *t) {
  job_t *j = t->data;
  static const http_header text[] = {{"Content-Type", "text/plain"}};
  if (j->conn) {
    if (j->kind == JOB_STREAM_MORE || j->kind == JOB_STREAM_CUT)
      http_conn_set_close_cb(j->conn, on_stream_closed, NULL); /* j is about to go */
    switch (j->kind) {
    case JOB_ASYNC_RESPOND: http_respond(j->conn, 200, text, 1, "async", 5); break;
    case JOB_LATE_RESPOND:
      http_respond(j->conn, 200, text, 1, "late", 4);
      atomic_fetch_add(&late_responses, 1);
      break;
    case JOB_LATE_CLOSE_CB:
      /* Closed already: the callback still runs, from the loop. */
      http_conn_set_close_cb(j->conn, on_hold_closed, NULL);
      CHECK_INT_EQ(atomic_load(&hold_closes), 1);
      break;
    case JOB_STREAM_MORE:
      CHECK_INT_EQ(http_stream_write(j->conn, "data: two\n\n", 11), 0);
      http_stream_end(j->conn);
      break;
    case JOB_STREAM_CUT: {
      char big[300];
      memset(big, 'x', sizeof big);
      atomic_store(&cut_queued, (long)http_conn_queued(j->conn));
      atomic_store(&cut_result, http_stream_write(j->conn, big, sizeof big));
      /* The connection is closing: further writes are refused. */
      CHECK_INT_EQ(http_stream_write(j->conn, "y", 1), -EPIPE);
      break;
    }
    }
  }
  uv_close((uv_handle_t *)t, job_free);
}

static job_t *job_start(http_conn_t *c, enum job_kind kind, uint64_t ms) {
  job_t *j = calloc(1, sizeof *j);
  CHECK(j != NULL);
  j->conn = c;
  j->kind = kind;
  CHECK_INT_EQ(uv_timer_init(&loop, &j->timer), 0);
  j->timer.data = j;
  CHECK_INT_EQ(uv_timer_start(&j->timer, on_job_timer, ms, 0), 0);
  return j;
}

static void on_hold_closed(http_conn_t *c, void *data) {
  (void)c;
  (void)data;
  atomic_fetch_add(&hold_closes, 1);
}

static const http_header sse_headers[] = {
    {"Content-Type", "text/event-stream"},
    {"Cache-Control", "no-cache"},
};

/* Echoes what it saw, except for a few paths that exercise the API. */
static void on_request(http_conn_t *c, http_request_t *req, void *data) {
  static const http_header text[] = {{"Content-Type", "text/plain"}};
  (void)data;
  if (strcmp(req->path, "/async") == 0) {
    job_start(c, JOB_ASYNC_RESPOND, 30);
  } else if (strcmp(req->path, "/late") == 0) {
    job_start(c, JOB_LATE_RESPOND, 150); /* no close callback: a zombie meanwhile */
  } else if (strcmp(req->path, "/late-cb") == 0) {
    job_start(c, JOB_LATE_CLOSE_CB, 150);
  } else if (strcmp(req->path, "/hold") == 0) {
    http_conn_set_close_cb(c, on_hold_closed, NULL); /* never answered */
  } else if (strcmp(req->path, "/stream") == 0) {
    job_t *j = job_start(c, JOB_STREAM_MORE, 30);
    http_conn_set_close_cb(c, on_job_conn_closed, j);
    http_stream_begin(c, 200, sse_headers, ARRAY_LEN(sse_headers));
    CHECK_INT_EQ(http_stream_write(c, "data: one\n\n", 11), 0);
  } else if (strcmp(req->path, "/stream-cut") == 0) {
    job_t *j = job_start(c, JOB_STREAM_CUT, 30);
    http_conn_set_close_cb(c, on_job_conn_closed, j);
    http_stream_begin(c, 200, sse_headers, ARRAY_LEN(sse_headers));
    CHECK_INT_EQ(http_stream_write(c, "data: a\n\n", 9), 0);
  } else if (strcmp(req->path, "/echo") == 0) {
    http_respond(c, 200, text, 1, req->body, req->body_len);
  } else {
    const char *x = http_request_header(req, "x-test");
    size_t dups = 0;
    for (size_t i = 0; i < req->n_headers; i++) dups += strcmp(req->headers[i].name, "x-dup") == 0;
    CHECK(req->body[req->body_len] == '\0');
    char out[512];
    int n = snprintf(out, sizeof out, "%s %s q=%s h=%s dups=%zu len=%zu", req->method_name,
                     req->path, req->query ? req->query : "-", x ? x : "-", dups, req->body_len);
    http_respond(c, 200, text, 1, out, (size_t)n);
  }
}

/* ---- commands from the client thread to the loop ---------------------- */

enum cmd_kind { CMD_NONE, CMD_ADOPT, CMD_STOP };

static pthread_mutex_t cmd_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cmd_cond = PTHREAD_COND_INITIALIZER;
static enum cmd_kind cmd_kind;
static int cmd_fd;
static char cmd_bytes[256];
static size_t cmd_len;

static void on_server_closed(void *data) {
  (void)data;
  server_done = true;
}

static void on_cmd(uv_async_t *a) {
  pthread_mutex_lock(&cmd_lock);
  enum cmd_kind kind = cmd_kind;
  if (kind == CMD_ADOPT) CHECK_INT_EQ(http_server_adopt(srv, cmd_fd, cmd_bytes, cmd_len), 0);
  cmd_kind = CMD_NONE;
  pthread_cond_signal(&cmd_cond);
  pthread_mutex_unlock(&cmd_lock);
  if (kind == CMD_STOP) {
    http_server_close(srv, on_server_closed, NULL);
    uv_close((uv_handle_t *)a, NULL);
  }
}

/* Runs a command on the loop thread and waits until it was taken. */
static void send_cmd(enum cmd_kind kind, int fd, const char *bytes, size_t n) {
  pthread_mutex_lock(&cmd_lock);
  cmd_kind = kind;
  cmd_fd = fd;
  CHECK(n <= sizeof cmd_bytes);
  memcpy(cmd_bytes, bytes, n);
  cmd_len = n;
  CHECK_INT_EQ(uv_async_send(&cmd_async), 0);
  while (cmd_kind != CMD_NONE) pthread_cond_wait(&cmd_cond, &cmd_lock);
  pthread_mutex_unlock(&cmd_lock);
}

/* ---- client side: blocking sockets ------------------------------------- */

typedef struct client {
  int fd;
  char buf[1 << 16];
  size_t len;
} client_t;

typedef struct response {
  int status;
  char head[4096];
  char body[8192];
  size_t body_len;
} response_t;

static void set_timeout(int fd, int ms) {
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  CHECK_INT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
}

static client_t *client_wrap(int fd) {
  client_t *cl = calloc(1, sizeof *cl);
  CHECK(cl != NULL);
  cl->fd = fd;
  set_timeout(fd, 3000);
  return cl;
}

static client_t *client_open(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_INT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return client_wrap(fd);
}

static void client_close(client_t *cl) {
  close(cl->fd);
  free(cl);
}

/* Closes with a reset instead of a FIN. */
static void client_reset(client_t *cl) {
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  CHECK_INT_EQ(setsockopt(cl->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  client_close(cl);
}

static void client_send(client_t *cl, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = send(cl->fd, s, n, MSG_NOSIGNAL);
    CHECK(w > 0);
    s += w;
    n -= (size_t)w;
  }
}

static void client_sends(client_t *cl, const char *s) {
  client_send(cl, s, strlen(s));
}

/* Reads more bytes; the count, 0 at EOF, -1 on error or timeout. */
static ssize_t client_fill(client_t *cl) {
  CHECK(cl->len < sizeof cl->buf - 1);
  ssize_t n = recv(cl->fd, cl->buf + cl->len, sizeof cl->buf - 1 - cl->len, 0);
  if (n > 0) {
    cl->len += (size_t)n;
    cl->buf[cl->len] = '\0';
  }
  return n;
}

static void client_consume(client_t *cl, size_t n) {
  memmove(cl->buf, cl->buf + n, cl->len - n);
  cl->len -= n;
  cl->buf[cl->len] = '\0';
}

/*
 * Reads one response. With Content-Length the body is exactly that long;
 * 1xx and 204 have none; otherwise the body runs to EOF. 0, or -1 when the
 * connection ended (or timed out) before a complete head.
 */
static int client_read_response(client_t *cl, response_t *r) {
  char *end;
  cl->buf[cl->len] = '\0';
  while ((end = strstr(cl->buf, "\r\n\r\n")) == NULL)
    if (client_fill(cl) <= 0) return -1;
  size_t head_len = (size_t)(end - cl->buf) + 4;
  CHECK(head_len < sizeof r->head);
  memcpy(r->head, cl->buf, head_len);
  r->head[head_len] = '\0';
  CHECK(sscanf(r->head, "HTTP/1.1 %d", &r->status) == 1);
  client_consume(cl, head_len);
  const char *cl_hdr = strcasestr(r->head, "\r\nContent-Length:");
  if (cl_hdr || (r->status >= 100 && r->status < 200) || r->status == 204) {
    size_t want = cl_hdr ? strtoul(cl_hdr + 17, NULL, 10) : 0;
    CHECK(want < sizeof r->body);
    while (cl->len < want) CHECK(client_fill(cl) > 0);
    memcpy(r->body, cl->buf, want);
    r->body_len = want;
    client_consume(cl, want);
  } else {
    while (client_fill(cl) > 0)
      ;
    CHECK(cl->len < sizeof r->body);
    memcpy(r->body, cl->buf, cl->len);
    r->body_len = cl->len;
    client_consume(cl, cl->len);
  }
  r->body[r->body_len] = '\0';
  return 0;
}

static response_t *client_expect(client_t *cl, int status) {
  static response_t r;
  memset(&r, 0, sizeof r);
  CHECK_INT_EQ(client_read_response(cl, &r), 0);
  CHECK_INT_EQ(r.status, status);
  return &r;
}

/* True when the server closed: EOF (or a reset) with nothing left unread. */
static bool client_sees_close(client_t *cl) {
  ssize_t n = client_fill(cl);
  if (n == 0) return cl->len == 0;
  return n < 0 && errno == ECONNRESET;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Waits up to 3 s for *counter to reach want. */
static void wait_for(atomic_int *counter, int want) {
  for (int i = 0; i < 300 && atomic_load(counter) < want; i++) usleep(10000);
  CHECK_INT_EQ(atomic_load(counter), want);
}

/* ---- the tests (client thread) ----------------------------------------- */

static void test_simple_get(void) {
  client_t *cl = client_open();
  client_sends(cl, "GET /hello?a=1&b=2 HTTP/1.1\r\nHost: x\r\nX-TEST:   padded value  \r\n"
                   "X-Dup: 1\r\nx-dup: 2\r\n\r\n");
  response_t *r = client_expect(cl, 200);
  CHECK_STR_EQ(r->body, "GET /hello q=a=1&b=2 h=padded value dups=2 len=0");
  CHECK(strstr(r->head, "HTTP/1.1 200 OK\r\n") == r->head);
  CHECK(strstr(r->head, "Content-Type: text/plain\r\n") != NULL);
  CHECK(strcasestr(r->head, "Connection:") == NULL);
  client_close(cl);
}

static void test_keep_alive(void) {
  client_t *cl = client_open();
  client_sends(cl, "GET /one HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "GET /one q=- h=- dups=0 len=0");
  client_sends(cl, "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "POST /two q=- h=- dups=0 len=3");
  client_close(cl);
}

static void test_pipelined(void) {
  client_t *cl = client_open();
  /* The first is answered late from a timer; the others wait their turn. */
  client_sends(cl, "GET /async HTTP/1.1\r\nHost: x\r\n\r\n"
                   "GET /b HTTP/1.1\r\nHost: x\r\n\r\n"
                   "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                   "GET /d?z HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "async");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "GET /b q=- h=- dups=0 len=0");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "hello");
  response_t *r = client_expect(cl, 200);
  CHECK_STR_EQ(r->body, "GET /d q=z h=- dups=0 len=0");
  CHECK(strstr(r->head, "Connection: close\r\n") != NULL);
  CHECK(client_sees_close(cl));
  client_close(cl);
}

/*
 * A request in pieces, each its own read: cut inside the request line, a
 * header's name and value, and the body; then a read holding a whole
 * request and the start of the next, whose rest comes later. A read is
 * parsed where it landed and only what is left of it is kept: nothing of
 * either may be lost or read twice.
 */
static void test_split_reads(void) {
  client_t *cl = client_open();
  static const char *const parts[] = {"PO",
                                      "ST /two HTTP/1.1\r\nHo",
                                      "st: x\r\nX-TE",
                                      "ST:  split \r\nContent-Le",
                                      "ngth: 11\r\n\r\nhello",
                                      " world",
                                      "GET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c",
                                      "?q HTTP/1.1\r\nHost: x\r\n\r\n"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    client_sends(cl, parts[i]);
    usleep(20000); /* each its own read */
  }
  CHECK_STR_EQ(client_expect(cl, 200)->body, "POST /two q=- h=split dups=0 len=11");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "GET /b q=- h=- dups=0 len=0");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "GET /c q=q h=- dups=0 len=0");
  client_close(cl);
}

/* More pipelined bytes than max_header + max_body while one request is
 * held: reading pauses, resumes, and every request is answered in order. */
static void test_pipeline_backpressure(void) {
  client_t *cl = client_open();
  char req[8192];
  size_t n = (size_t)snprintf(req, sizeof req, "GET /async HTTP/1.1\r\nHost: x\r\n\r\n");
  for (int i = 0; i < 100; i++)
    n += (size_t)snprintf(req + n, sizeof req - n, "GET /n/%02d HTTP/1.1\r\nHost: x\r\n\r\n", i);
  CHECK(n > 3000); /* well past max_header + max_body */
  client_send(cl, req, n);
  CHECK_STR_EQ(client_expect(cl, 200)->body, "async");
  for (int i = 0; i < 100; i++) {
    char want[64];
    snprintf(want, sizeof want, "GET /n/%02d q=- h=- dups=0 len=0", i);
    CHECK_STR_EQ(client_expect(cl, 200)->body, want);
  }
  client_close(cl);
}

static void test_chunked_body(void) {
  client_t *cl = client_open();
  client_sends(cl, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "5\r\nhello\r\n");
  client_sends(cl, "6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "hello world");
  client_close(cl);
}

static void test_expect_continue(void) {
  client_t *cl = client_open();
  client_sends(cl, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                   "Content-Length: 4\r\n\r\n");
  client_expect(cl, 100);
  client_sends(cl, "body");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "body");
  client_close(cl);
}

static void check_error(client_t *cl, int status, const char *json) {
  response_t *r = client_expect(cl, status);
  CHECK_STR_EQ(r->body, json);
  CHECK(strstr(r->head, "Content-Type: application/json\r\n") != NULL);
  CHECK(strstr(r->head, "Connection: close\r\n") != NULL);
  CHECK(client_sees_close(cl));
}

static void test_header_too_large(void) {
  client_t *cl = client_open();
  char req[4096];
  char big[2001];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", big);
  client_sends(cl, req);
  check_error(cl, 431, "{\"error\":\"request header fields too large\"}");
  client_close(cl);

  /* Many small headers under the byte limit, but too many of them. */
  cl = client_open();
  size_t n = (size_t)snprintf(req, sizeof req, "GET / HTTP/1.1\r\n");
  for (int i = 0; i < 101; i++) n += (size_t)snprintf(req + n, sizeof req - n, "H%d:\r\n", i % 10);
  snprintf(req + n, sizeof req - n, "\r\n");
  CHECK(strlen(req) < 1024);
  client_sends(cl, req);
  check_error(cl, 431, "{\"error\":\"request header fields too large\"}");
  client_close(cl);
}

static void test_body_too_large(void) {
  /* Refused from Content-Length alone, before any body byte is sent. */
  client_t *cl = client_open();
  client_sends(cl, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
  check_error(cl, 413, "{\"error\":\"content too large\"}");
  client_close(cl);

  /* A chunked body that grows past the limit. */
  cl = client_open();
  client_sends(cl, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  char chunk[700];
  memset(chunk, 'b', sizeof chunk);
  for (int i = 0; i < 2; i++) {
    client_sends(cl, "2bc\r\n");
    client_send(cl, chunk, sizeof chunk);
    client_sends(cl, "\r\n");
  }
  check_error(cl, 413, "{\"error\":\"content too large\"}");
  client_close(cl);
}

static void test_slow_headers(void) {
  client_t *cl = client_open();
  double t0 = now_ms();
  client_sends(cl, "GET /slow HTTP/1.1\r\nHost: x\r\n");
  check_error(cl, 408, "{\"error\":\"request timeout\"}");
  double dt = now_ms() - t0;
  CHECK(dt >= 250 && dt < 2000);
  client_close(cl);
}

static void test_malformed(void) {
  client_t *cl = client_open();
  client_sends(cl, "THIS IS NOT HTTP\r\n\r\n");
  check_error(cl, 400, "{\"error\":\"bad request\"}");
  client_close(cl);

  cl = client_open(); /* request smuggling shape: both lengths */
  client_sends(cl, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  check_error(cl, 400, "{\"error\":\"bad request\"}");
  client_close(cl);
}

static void test_connection_close(void) {
  client_t *cl = client_open();
  client_sends(cl, "GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  response_t *r = client_expect(cl, 200);
  CHECK(strstr(r->head, "Connection: close\r\n") != NULL);
  CHECK(client_sees_close(cl));
  client_close(cl);
}

static void test_http10(void) {
  client_t *cl = client_open();
  client_sends(cl, "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  response_t *r = client_expect(cl, 200);
  CHECK(strstr(r->head, "Connection: keep-alive\r\n") != NULL);
  client_sends(cl, "GET /old2 HTTP/1.0\r\n\r\n");
  r = client_expect(cl, 200);
  CHECK_STR_EQ(r->body, "GET /old2 q=- h=- dups=0 len=0");
  CHECK(strstr(r->head, "Connection: close\r\n") != NULL);
  CHECK(client_sees_close(cl));
  client_close(cl);
}

static void test_keepalive_idle_close(void) {
  client_t *cl = client_open();
  client_sends(cl, "GET /idle HTTP/1.1\r\nHost: x\r\n\r\n");
  client_expect(cl, 200);
  double t0 = now_ms();
  CHECK(client_sees_close(cl)); /* silently, after keepalive_idle_ms */
  double dt = now_ms() - t0;
  CHECK(dt >= 300 && dt < 2500);
  client_close(cl);
}

/*
 * Waits of different kinds and starts at once: a kept-alive connection
 * (400 ms), a slow header block opened later (300 ms), and a body
 * trickling a byte every 100 ms, whose inactivity bound moves with each
 * byte past the deadlines of the other two. Each times out on its own
 * clock, and the trickling one is never cut.
 */
static void test_timeouts_interleaved(void) {
  client_t *kept = client_open();
  client_sends(kept, "GET /kept HTTP/1.1\r\nHost: x\r\n\r\n");
  client_expect(kept, 200);
  double t0 = now_ms();
  usleep(150 * 1000);
  client_t *slow = client_open();
  client_sends(slow, "GET /slow HTTP/1.1\r\nHost: x\r\n");
  client_t *body = client_open();
  client_sends(body, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n");
  const char *bytes = "trick";
  for (int i = 0; bytes[i] != '\0'; i++) {
    usleep(100 * 1000);
    client_send(body, bytes + i, 1);
  }
  double t1 = now_ms(); /* past every deadline the trickle started with */
  CHECK(t1 - t0 >= 600);
  CHECK(client_sees_close(kept));
  check_error(slow, 408, "{\"error\":\"request timeout\"}");
  client_sends(body, "y");
  CHECK_STR_EQ(client_expect(body, 200)->body, "tricky");
  client_close(kept);
  client_close(slow);
  client_close(body);
}

static void test_stream(void) {
  int before = atomic_load(&stream_closes);
  client_t *cl = client_open();
  client_sends(cl, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  response_t *r = client_expect(cl, 200); /* no length: read to EOF */
  CHECK(strstr(r->head, "Content-Type: text/event-stream\r\n") != NULL);
  CHECK(strcasestr(r->head, "Content-Length") == NULL);
  CHECK(strcasestr(r->head, "Transfer-Encoding") == NULL);
  CHECK_STR_EQ(r->body, "data: one\n\ndata: two\n\n");
  client_close(cl);
  wait_for(&stream_closes, before + 1);
}

static void test_stream_queue_cap(void) {
  int before = atomic_load(&stream_closes);
  client_t *cl = client_open();
  client_sends(cl, "GET /stream-cut HTTP/1.1\r\nHost: x\r\n\r\n");
  response_t *r = client_expect(cl, 200);
  CHECK_STR_EQ(r->body, "data: a\n\n"); /* the over-cap write was dropped */
  client_close(cl);
  wait_for(&stream_closes, before + 1);
  CHECK_INT_EQ(atomic_load(&cut_result), -ENOBUFS);
  CHECK_INT_EQ(atomic_load(&cut_queued), 0);
}

static void test_peer_reset_while_held(void) {
  client_t *cl = client_open();
  client_sends(cl, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  usleep(50000);
  client_reset(cl);
  wait_for(&hold_closes, 1);

  /* No close callback: the late response must be harmless. */
  cl = client_open();
  client_sends(cl, "GET /late HTTP/1.1\r\nHost: x\r\n\r\n");
  usleep(30000);
  client_reset(cl);
  wait_for(&late_responses, 1);

  /* A close callback set only after the connection closed still runs. */
  cl = client_open();
  client_sends(cl, "GET /late-cb HTTP/1.1\r\nHost: x\r\n\r\n");
  usleep(30000);
  client_reset(cl);
  wait_for(&hold_closes, 2);
}

static void test_adopt(void) {
  /* A socket accepted elsewhere, with the first bytes already read. */
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(lfd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  CHECK_INT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_INT_EQ(listen(lfd, 1), 0);
  CHECK_INT_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
  int cfd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_INT_EQ(connect(cfd, (struct sockaddr *)&sa, sizeof sa), 0);
  int sfd = accept(lfd, NULL, NULL);
  CHECK(sfd >= 0);
  close(lfd);

  client_t *cl = client_wrap(cfd);
  const char *pre = "GET /adopted?z=9 HTTP/1.1\r\nHo";
  send_cmd(CMD_ADOPT, sfd, pre, strlen(pre));
  client_sends(cl, "st: x\r\nX-Test: adopt\r\n\r\n");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "GET /adopted q=z=9 h=adopt dups=0 len=0");
  client_sends(cl, "GET /again HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK_STR_EQ(client_expect(cl, 200)->body, "GET /again q=- h=- dups=0 len=0");
  client_close(cl);
}

static void *client_main(void *arg) {
  (void)arg;
  RUN(test_simple_get);
  RUN(test_keep_alive);
  RUN(test_pipelined);
  RUN(test_split_reads);
  RUN(test_pipeline_backpressure);
  RUN(test_chunked_body);
  RUN(test_expect_continue);
  RUN(test_header_too_large);
  RUN(test_body_too_large);
  RUN(test_slow_headers);
  RUN(test_malformed);
  RUN(test_connection_close);
  RUN(test_http10);
  RUN(test_keepalive_idle_close);
  RUN(test_timeouts_interleaved);
  RUN(test_stream);
  RUN(test_stream_queue_cap);
  RUN(test_peer_reset_while_held);
  RUN(test_adopt);
  send_cmd(CMD_STOP, -1, "", 0);
  return NULL;
}

static void test_status_text(void) {
  CHECK_STR_EQ(http_status_text(200), "OK");
  CHECK_STR_EQ(http_status_text(404), "Not Found");
  CHECK_STR_EQ(http_status_text(431), "Request Header Fields Too Large");
  CHECK_STR_EQ(http_status_text(503), "Service Unavailable");
  CHECK(http_status_text(799) != NULL);
}

int main(void) {
  RUN(test_status_text);
  CHECK_INT_EQ(uv_loop_init(&loop), 0);
  http_server_options opts = {
      .max_header = 1024,
      .max_body = 1000,
      .header_timeout_ms = 300,
      .keepalive_idle_ms = 400,
      .max_stream_queue = 256,
  };
  srv = http_server_create(&loop, &opts, on_request, NULL);
  CHECK(srv != NULL);
  CHECK_INT_EQ(http_server_listen(srv, "127.0.0.1", 0), 0);
  server_port = http_server_port(srv);
  CHECK(server_port > 0);
  CHECK_INT_EQ(uv_async_init(&loop, &cmd_async, on_cmd), 0);

  pthread_t client;
  CHECK_INT_EQ(pthread_create(&client, NULL, client_main, NULL), 0);
  CHECK_INT_EQ(uv_run(&loop, UV_RUN_DEFAULT), 0);
  CHECK_INT_EQ(pthread_join(client, NULL), 0);

  CHECK(server_done);
  CHECK_INT_EQ(http_server_connections(srv), 0);
  http_server_destroy(srv);
  http_server_destroy(NULL);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
  printf("ok - server closed cleanly\n");
  return 0;
}
