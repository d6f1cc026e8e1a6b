/*
 * bench_read_ceiling: the ceiling of the read scenario. It does the least
 * any HTTP/1.1 server must do to answer the load generator's
 * resources/read POSTs: it accepts keep-alive connections on 127.0.0.1,
 * lets llhttp parse each request (request line, headers, and the body,
 * skipped by its Content-Length) and, for every request that ends, writes
 * one answer from a single shared buffer: the bytes of a real mcpsubd
 * answer to the same request (status line, headers, body), captured once
 * before the measurement. No routing, no header looked at, no JSON, no
 * session, no database, no allocation or copy per request. mcpsubd's
 * reads per CPU-second are reported as a fraction of this program's,
 * measured by the same load generator in the same way.
 *
 * It must never do more than that per request: anything added here lowers
 * the ceiling and flatters mcpsubd.
 *
 *   bench_read_ceiling capture --port P [--table T] --out FILE
 *       against mcpsubd on 127.0.0.1:P: initialize and
 *       notifications/initialized, then resources/read of <T>/r0 sent as
 *       the load generator sends it; the whole answer goes to FILE.
 *   bench_read_ceiling serve --port P --response FILE [--time-limit S]
 *                            [--processes N --connections C]
 *       answers every request with FILE's bytes (one complete HTTP
 *       response); port 0 takes a free one, printed as "port N" on
 *       stdout. Exits 0 once every connection is gone after at least one
 *       answer (the load generator is done) or on SIGTERM, 1 at the time
 *       limit. With N processes (as mcpsubd has N workers) they share the
 *       listening socket and each accepts its share of the C connections
 *       the load generator opens (C / N, rounded up) and then stops
 *       listening: every process serves as many connections as an mcpsubd
 *       worker does when the reads' sessions are spread over the workers.
 *       The first process waits for the others and forwards SIGTERM.
 *
 * Bounded: input is parsed in place from one shared buffer and never
 * kept; connections by RCEIL_MAX_CONNS, the answer by RCEIL_MAX_RESPONSE,
 * the run by --time-limit. Traffic goes to 127.0.0.1 only.
 */
#include <errno.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#define RCEIL_HOST          "127.0.0.1"
#define RCEIL_PROTOCOL      "2025-06-18" /* the load generator's (LG_PROTOCOL) */
#define RCEIL_MAX_RESPONSE  ((size_t)64 * 1024)
#define RCEIL_MAX_CONNS     1024u
#define RCEIL_READ_BUF      ((size_t)64 * 1024)
#define RCEIL_MAX_BATCH     64u /* answers per vectored write, when requests are pipelined */
#define RCEIL_MAX_PROCESSES 16u
#define RCEIL_NODISCARD     __attribute__((warn_unused_result))

/* Small internal allocations only; nothing here is sized by a peer. */
static void *rceil_alloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (p == NULL) abort();
  return p;
}

/* ---- one HTTP response: where it ends (the capture, and the check of a file) ---- */

typedef struct rceil_response_scan {
  bool complete;
} rceil_response_scan;

static int rceil_scan_on_complete(llhttp_t *p) {
  ((rceil_response_scan *)p->data)->complete = true;
  return HPE_PAUSED; /* stop right after it: anything later is not part of it */
}

/*
 * Parses buf[0..len) as one HTTP response. 0 with *end (the bytes it
 * takes) and *status when it is complete, -EAGAIN when more bytes are
 * needed, -EPROTO when it is not HTTP.
 */
static int rceil_response_end(const char *buf, size_t len, size_t *end,
                              int *status) RCEIL_NODISCARD;
static int rceil_response_end(const char *buf, size_t len, size_t *end, int *status) {
  llhttp_settings_t settings;
  llhttp_settings_init(&settings);
  settings.on_message_complete = rceil_scan_on_complete;
  llhttp_t parser;
  llhttp_init(&parser, HTTP_RESPONSE, &settings);
  rceil_response_scan scan = {false};
  parser.data = &scan;
  llhttp_errno_t e = llhttp_execute(&parser, buf, len);
  if (e == HPE_PAUSED && scan.complete) {
    *end = (size_t)(llhttp_get_error_pos(&parser) - buf);
    *status = (int)llhttp_get_status_code(&parser);
    return 0;
  }
  return e == HPE_OK ? -EAGAIN : -EPROTO;
}

/* ---- capture: one real answer from mcpsubd ------------------------------------------ */

/* Sends req on fd and reads its whole answer into resp (cap bytes). 0 or -errno. */
static int rceil_exchange(int fd, const char *req, size_t req_len, char *resp, size_t cap,
                          size_t *resp_len, int *status) RCEIL_NODISCARD;
static int rceil_exchange(int fd, const char *req, size_t req_len, char *resp, size_t cap,
                          size_t *resp_len, int *status) {
  for (size_t off = 0; off < req_len;) {
    ssize_t n = write(fd, req + off, req_len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : -EIO;
    off += (size_t)n;
  }
  size_t len = 0;
  for (;;) {
    if (len == cap - 1) return -EMSGSIZE;
    ssize_t n = read(fd, resp + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) return -ECONNRESET;
    len += (size_t)n;
    int r = rceil_response_end(resp, len, resp_len, status);
    if (r == 0) break;
    if (r != -EAGAIN) return r;
  }
  resp[*resp_len] = '\0';
  return 0;
}

/* The request the load generator sends (lg_post in lg_run.c); sid NULL before there is one. */
static int rceil_post(char *out, size_t cap, int port, const char *sid, const char *body) {
  int n = snprintf(out, cap,
                   "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                   "Accept: application/json, text/event-stream\r\n%s%s%s%s"
                   "Content-Length: %zu\r\n\r\n%s",
                   port, sid ? "MCP-Protocol-Version: " RCEIL_PROTOCOL "\r\n" : "",
                   sid ? "Mcp-Session-Id: " : "", sid ? sid : "", sid ? "\r\n" : "", strlen(body),
                   body);
  return n < 0 || (size_t)n >= cap ? -E2BIG : n;
}

/* The Mcp-Session-Id of a response (NUL-terminated resp), into sid; false when none. */
static bool rceil_session_id(const char *resp, char *sid, size_t cap) {
  const char *head_end = strstr(resp, "\r\n\r\n");
  const char *p = strcasestr(resp, "\r\nMcp-Session-Id:");
  if (p == NULL || head_end == NULL || p > head_end) return false;
  p += strlen("\r\nMcp-Session-Id:");
  while (*p == ' ') p++;
  size_t n = strcspn(p, " \r\n");
  if (n == 0 || n >= cap) return false;
  memcpy(sid, p, n);
  sid[n] = '\0';
  return true;
}

static int rceil_capture(int port, const char *table, const char *out_path) {
  static char resp[RCEIL_MAX_RESPONSE];
  char req[2048], body[512], sid[80];
  size_t len = 0;
  int status = 0, rc = 1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    perror("bench_read_ceiling: socket");
    return 1;
  }
  struct timeval tv = {10, 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  struct sockaddr_in a;
  if (uv_ip4_addr(RCEIL_HOST, port, &a) != 0 ||
      connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    fprintf(stderr, "bench_read_ceiling: cannot connect to port %d: %s\n", port, strerror(errno));
    goto out_fd;
  }
  /* 1. A session, as the load generator opens one. */
  int n = rceil_post(req, sizeof(req), port, NULL,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                     "\"protocolVersion\":\"" RCEIL_PROTOCOL "\",\"capabilities\":{},"
                     "\"clientInfo\":{\"name\":\"mcpsub-bench\",\"version\":\"1\"}}}");
  int r = n < 0 ? n : rceil_exchange(fd, req, (size_t)n, resp, sizeof(resp), &len, &status);
  if (r != 0 || status != 200 || !rceil_session_id(resp, sid, sizeof(sid))) {
    fprintf(stderr, "bench_read_ceiling: initialize failed (%s, HTTP %d)\n", strerror(-r), status);
    goto out_fd;
  }
  n = rceil_post(req, sizeof(req), port, sid,
                 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
  r = n < 0 ? n : rceil_exchange(fd, req, (size_t)n, resp, sizeof(resp), &len, &status);
  if (r != 0 || (status != 202 && status != 200)) {
    fprintf(stderr, "bench_read_ceiling: initialized failed (%s, HTTP %d)\n", strerror(-r), status);
    goto out_fd;
  }
  /* 2. The read, byte for byte the load generator's (lg_run.c, reader_send). */
  snprintf(body, sizeof(body),
           "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"resources/read\",\"params\":{"
           "\"uri\":\"http://127.0.0.1:%d/%s/r0\"}}",
           port, table);
  n = rceil_post(req, sizeof(req), port, sid, body);
  r = n < 0 ? n : rceil_exchange(fd, req, (size_t)n, resp, sizeof(resp), &len, &status);
  if (r != 0 || status != 200 || strstr(resp, "\"contents\"") == NULL ||
      strstr(resp, "\"error\"") != NULL) {
    fprintf(stderr, "bench_read_ceiling: resources/read failed (%s, HTTP %d): %.300s\n",
            strerror(-r), status, r == 0 ? resp : "");
    goto out_fd;
  }
  FILE *f = fopen(out_path, "wbe");
  if (f == NULL || fwrite(resp, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "bench_read_ceiling: %s: %s\n", out_path, strerror(errno));
    goto out_fd;
  }
  printf("response %zu\n", len);
  rc = 0;
out_fd:
  close(fd);
  return rc;
}

/* ---- serve: the ceiling itself ---------------------------------------------------------- */

typedef struct rceil_server rceil_server;

typedef struct rceil_conn {
  uv_tcp_t tcp;
  rceil_server *srv;
  llhttp_t parser;
  uint32_t owed; /* requests parsed, not answered yet */
  bool closing;
} rceil_conn;

/* What the socket did not take of a batch of answers: queued, freed by its callback. */
typedef struct rceil_write {
  uv_write_t req;
  uv_buf_t bufs[RCEIL_MAX_BATCH];
} rceil_write;

struct rceil_server {
  uv_loop_t loop;
  uv_tcp_t listener;
  uv_signal_t sigterm;
  uv_timer_t limit;
  llhttp_settings_t settings;
  char *response; /* the captured answer, shared by every write */
  size_t response_len;
  char *in; /* one read buffer for all: a read is parsed completely in its callback */
  uint32_t n_conns;
  uint32_t quota, accepted; /* connections this process takes (0: any), taken so far */
  uint64_t answered, queued;
  bool stopping;
  int rc;
};

static void rceil_stop(rceil_server *srv, int rc);

static void rceil_conn_on_close(uv_handle_t *h) {
  rceil_conn *c = h->data;
  rceil_server *srv = c->srv;
  free(c);
  srv->n_conns--;
  if (srv->n_conns == 0 && srv->answered > 0)
    rceil_stop(srv, 0); /* the load generator hung up every connection: its run is over */
}

/* Marks c closing; it is freed in its close callback. Idempotent. */
static void rceil_conn_close(rceil_conn *c) {
  if (c->closing) return;
  c->closing = true;
  uv_close((uv_handle_t *)&c->tcp, rceil_conn_on_close);
}

static void rceil_on_written(uv_write_t *req, int status) {
  rceil_write *w = (rceil_write *)req;
  rceil_conn *c = req->data;
  free(w);
  if (status < 0) rceil_conn_close(c);
}

/*
 * Queues what the socket left of n answers after it took `took` bytes: the
 * tail of the answer it stopped in, then whole ones, all from the shared
 * buffer.
 */
static int rceil_queue_rest(rceil_conn *c, uint32_t n, size_t took) RCEIL_NODISCARD;
static int rceil_queue_rest(rceil_conn *c, uint32_t n, size_t took) {
  rceil_server *srv = c->srv;
  rceil_write *w = rceil_alloc(sizeof(*w));
  uint32_t k = 0;
  for (uint32_t i = (uint32_t)(took / srv->response_len); i < n; i++) {
    size_t skip = k == 0 ? took % srv->response_len : 0;
    w->bufs[k++] = uv_buf_init(srv->response + skip, (unsigned)(srv->response_len - skip));
  }
  w->req.data = c;
  srv->queued++;
  int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs, k, rceil_on_written);
  if (r != 0) free(w);
  return r;
}

/* Writes one answer per request parsed: offered to the socket at once, the rest queued. */
static void rceil_answer(rceil_conn *c) {
  rceil_server *srv = c->srv;
  uv_buf_t bufs[RCEIL_MAX_BATCH];
  while (c->owed > 0 && !c->closing) {
    uint32_t n = c->owed < RCEIL_MAX_BATCH ? c->owed : RCEIL_MAX_BATCH;
    c->owed -= n;
    srv->answered += n;
    for (uint32_t i = 0; i < n; i++)
      bufs[i] = uv_buf_init(srv->response, (unsigned)srv->response_len);
    int took = uv_try_write((uv_stream_t *)&c->tcp, bufs, n);
    if (took == UV_EAGAIN) took = 0; /* full, or an earlier write still queued: keep the order */
    if (took < 0 ||
        ((size_t)took < n * srv->response_len && rceil_queue_rest(c, n, (size_t)took) != 0))
      rceil_conn_close(c);
  }
}

static int rceil_on_message_complete(llhttp_t *p) {
  ((rceil_conn *)p->data)->owed++;
  return 0;
}

static void rceil_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  rceil_conn *c = h->data;
  *buf = uv_buf_init(c->srv->in, (unsigned)RCEIL_READ_BUF);
}

static void rceil_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  rceil_conn *c = s->data;
  if (nread == 0 || c->closing) return;
  if (nread < 0) { /* EOF or reset: the client is done */
    rceil_conn_close(c);
    return;
  }
  if (llhttp_execute(&c->parser, buf->base, (size_t)nread) != HPE_OK) {
    rceil_conn_close(c); /* not HTTP: nothing to answer */
    return;
  }
  rceil_answer(c);
}

static void rceil_on_connection(uv_stream_t *listener, int status) {
  rceil_server *srv = listener->data;
  if (status < 0 || srv->stopping) return;
  rceil_conn *c = rceil_alloc(sizeof(*c));
  c->srv = srv;
  c->tcp.data = c;
  if (uv_tcp_init(&srv->loop, &c->tcp) != 0) {
    free(c);
    return;
  }
  srv->n_conns++;
  llhttp_init(&c->parser, HTTP_REQUEST, &srv->settings);
  c->parser.data = c;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 || srv->n_conns > RCEIL_MAX_CONNS) {
    rceil_conn_close(c);
    return;
  }
  if (srv->quota > 0 && ++srv->accepted == srv->quota) /* the rest are another process's */
    uv_close((uv_handle_t *)&srv->listener, NULL);
  (void)uv_tcp_nodelay(&c->tcp, 1); /* as mcpsubd's workers do */
  if (uv_read_start((uv_stream_t *)&c->tcp, rceil_on_alloc, rceil_on_read) != 0)
    rceil_conn_close(c);
}

static void rceil_close_any(uv_handle_t *h, void *arg) {
  rceil_server *srv = arg;
  if (uv_is_closing(h)) return;
  if (h->type == UV_TCP && h != (uv_handle_t *)&srv->listener)
    rceil_conn_close(h->data);
  else
    uv_close(h, NULL);
}

/* SIGTERM, or the time limit: close everything; the loop then ends. */
static void rceil_stop(rceil_server *srv, int rc) {
  if (srv->stopping) return;
  srv->stopping = true;
  srv->rc = rc;
  uv_walk(&srv->loop, rceil_close_any, srv);
}

static pid_t rceil_children[RCEIL_MAX_PROCESSES];
static unsigned rceil_n_children;

static void rceil_on_sigterm(uv_signal_t *h, int signum) {
  for (unsigned i = 0; i < rceil_n_children; i++) kill(rceil_children[i], SIGTERM);
  rceil_stop(h->data, 0);
}

static void rceil_on_limit(uv_timer_t *t) {
  fprintf(stderr, "bench_read_ceiling: time limit reached\n");
  rceil_stop(t->data, 1);
}

/* Reads the answer to serve: one complete HTTP response, at most RCEIL_MAX_RESPONSE bytes. */
static int rceil_load_response(rceil_server *srv, const char *path) RCEIL_NODISCARD;
static int rceil_load_response(rceil_server *srv, const char *path) {
  FILE *f = fopen(path, "rbe");
  if (f == NULL) return -errno;
  srv->response = rceil_alloc(RCEIL_MAX_RESPONSE + 1);
  size_t len = fread(srv->response, 1, RCEIL_MAX_RESPONSE + 1, f);
  int err = ferror(f) ? -EIO : 0;
  fclose(f);
  size_t end = 0;
  int status = 0;
  if (err == 0 && len > RCEIL_MAX_RESPONSE) err = -EMSGSIZE;
  if (err == 0 && (rceil_response_end(srv->response, len, &end, &status) != 0 || end != len))
    err = -EPROTO; /* exactly one complete response, or the load generator would stall */
  srv->response_len = len;
  return err;
}

/*
 * The listening socket on 127.0.0.1:port (0: a free one, *bound says
 * which), made before any process's loop exists so that the processes
 * forked after it share it. -errno on failure.
 */
static int rceil_listen(int port, int *bound) RCEIL_NODISCARD;
static int rceil_listen(int port, int *bound) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  socklen_t alen = sizeof(a);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      uv_inet_pton(AF_INET, RCEIL_HOST, &a.sin_addr) != 0 ||
      bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 511) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  *bound = ntohs(a.sin_port);
  return fd;
}

/* One process's server on the listening socket fd, taking quota connections (0: any). */
static int rceil_serve_one(int fd, const char *response_path, double time_limit_s, uint32_t quota) {
  rceil_server *srv = rceil_alloc(sizeof(*srv));
  int rc = 1, r;
  srv->quota = quota;
  if ((r = rceil_load_response(srv, response_path)) != 0) {
    fprintf(stderr, "bench_read_ceiling: %s: not one HTTP response (%s)\n", response_path,
            strerror(-r));
    goto out_srv;
  }
  srv->in = rceil_alloc(RCEIL_READ_BUF);
  llhttp_settings_init(&srv->settings);
  srv->settings.on_message_complete = rceil_on_message_complete;
  if (uv_loop_init(&srv->loop) != 0) goto out_srv;
  srv->listener.data = srv;
  if ((r = uv_tcp_init(&srv->loop, &srv->listener)) != 0 ||
      (r = uv_tcp_open(&srv->listener, fd)) != 0 ||
      (r = uv_listen((uv_stream_t *)&srv->listener, 511, rceil_on_connection)) != 0) {
    fprintf(stderr, "bench_read_ceiling: cannot listen: %s\n", uv_strerror(r));
    rceil_stop(srv, 1);
    goto out_loop;
  }
  uv_signal_init(&srv->loop, &srv->sigterm);
  srv->sigterm.data = srv;
  uv_signal_start(&srv->sigterm, rceil_on_sigterm, SIGTERM);
  uv_timer_init(&srv->loop, &srv->limit);
  srv->limit.data = srv;
  uv_timer_start(&srv->limit, rceil_on_limit, (uint64_t)(time_limit_s * 1000), 0);
  srv->rc = 0;
  uv_run(&srv->loop, UV_RUN_DEFAULT);
  fprintf(stderr,
          "{\"read_ceiling\":{\"answered\":%llu,\"queued_writes\":%llu,\"response_bytes\":%zu,"
          "\"ok\":%s}}\n",
          (unsigned long long)srv->answered, (unsigned long long)srv->queued, srv->response_len,
          srv->rc == 0 ? "true" : "false");
  rc = srv->rc;
out_loop:
  uv_run(&srv->loop, UV_RUN_DEFAULT); /* the close callbacks */
  if (uv_loop_close(&srv->loop) != 0) {
    fprintf(stderr, "bench_read_ceiling: loop closed with open handles\n");
    rc = 1;
  }
out_srv:
  free(srv->in);
  free(srv->response);
  free(srv);
  return rc;
}

/* Waits for the forked processes: 0 when each exited 0. */
static int rceil_wait_children(void) {
  int rc = 0;
  for (unsigned i = 0; i < rceil_n_children; i++) {
    int st = 0;
    if (waitpid(rceil_children[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}

static int rceil_serve(int port, const char *response_path, double time_limit_s, unsigned processes,
                       unsigned connections) {
  int bound = 0;
  int fd = rceil_listen(port, &bound);
  if (fd < 0) {
    fprintf(stderr, "bench_read_ceiling: cannot listen on port %d: %s\n", port, strerror(-fd));
    return 1;
  }
  printf("port %d\n", bound);
  fflush(stdout);
  uint32_t quota = processes > 1 ? (connections + processes - 1) / processes : 0;
  for (unsigned i = 1; i < processes; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      rceil_n_children = 0; /* a child forwards nothing */
      _exit(rceil_serve_one(fd, response_path, time_limit_s, quota));
    }
    if (pid < 0) {
      fprintf(stderr, "bench_read_ceiling: fork: %s\n", strerror(errno));
      for (unsigned k = 0; k < rceil_n_children; k++) kill(rceil_children[k], SIGTERM);
      rceil_wait_children();
      return 1;
    }
    rceil_children[rceil_n_children++] = pid;
  }
  int rc = rceil_serve_one(fd, response_path, time_limit_s, quota);
  return rceil_wait_children() != 0 ? 1 : rc;
}

/* ---- main --------------------------------------------------------------------------------- */

static int rceil_usage(void) {
  fprintf(stderr,
          "Usage: bench_read_ceiling capture --port P [--table T] --out FILE\n"
          "       bench_read_ceiling serve --port P --response FILE [--time-limit SECONDS]\n"
          "                                [--processes N --connections C]\n"
          "capture: one resources/read answer of mcpsubd on 127.0.0.1:P (record <T>/r0) to FILE.\n"
          "serve: answers every request on 127.0.0.1:P with FILE (0: any free port, printed\n"
          "as \"port N\" on stdout); N processes each take C / N of the C connections.\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return rceil_usage();
  bool capture = strcmp(argv[1], "capture") == 0;
  if (!capture && strcmp(argv[1], "serve") != 0) return rceil_usage();
  int port = -1;
  const char *table = "Bench", *path = NULL;
  double time_limit_s = 120;
  long processes = 1, connections = 0;
  for (int i = 2; i < argc; i += 2) { /* flag, value */
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) return rceil_usage();
    if (strcmp(argv[i], "--port") == 0)
      port = atoi(v);
    else if (strcmp(argv[i], "--table") == 0 && capture)
      table = v;
    else if (strcmp(argv[i], capture ? "--out" : "--response") == 0)
      path = v;
    else if (strcmp(argv[i], "--time-limit") == 0 && !capture)
      time_limit_s = strtod(v, NULL);
    else if (strcmp(argv[i], "--processes") == 0 && !capture)
      processes = strtol(v, NULL, 10);
    else if (strcmp(argv[i], "--connections") == 0 && !capture)
      connections = strtol(v, NULL, 10);
    else
      return rceil_usage();
  }
  if (port < (capture ? 1 : 0) || port > 65535 || path == NULL || !(time_limit_s > 0) ||
      time_limit_s > 3600 || processes < 1 || processes > (long)RCEIL_MAX_PROCESSES ||
      (processes > 1 && (connections < processes || connections > (long)RCEIL_MAX_CONNS)) ||
      strspn(table, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0"
                    "123456789") != strlen(table))
    return rceil_usage();
  signal(SIGPIPE, SIG_IGN);
  return capture
             ? rceil_capture(port, table, path)
             : rceil_serve(port, path, time_limit_s, (unsigned)processes, (unsigned)connections);
}
