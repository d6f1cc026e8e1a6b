/*
 * Tests of the HTTP layer's hooks for the process model, on real loopback
 * TCP sockets in one thread (the client side only ever writes a few small
 * requests, which fit in the socket buffers, and reads without blocking):
 * http_conn_detach re-serialises the request in hand plus what was
 * pipelined after it, hands over a working duplicate of the socket and
 * closes its own copy without a FIN; it refuses (-E2BIG) without harm when
 * the bytes would not fit; adopt flags reach the first request only; and
 * http_server_drain closes idle connections and closes the others after
 * their response.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "worker/http.h"

static uv_loop_t loop;
static http_server_t *srv;

/* What the request callback does with each request. */
enum action { RESPOND, DETACH, DETACH_TOO_BIG };
static enum action actions[8]; /* by request number */
static int requests;
static unsigned flags_seen[8];
static int detach_rc;
static uv_os_sock_t detached_fd = -1;
static buf_t detached;

static void on_request(http_conn_t *c, http_request_t *req, void *data) {
  enum action action = requests < 8 ? actions[requests] : RESPOND;
  if (requests < 8) flags_seen[requests] = http_conn_request_flags(c);
  requests++;
  if (action == DETACH || action == DETACH_TOO_BIG) {
    buf_init(&detached);
    detach_rc = http_conn_detach(c, action == DETACH ? 1 << 20 : 16, &detached_fd, &detached);
    if (detach_rc == 0) return;
    buf_finish(&detached);
  }
  http_respond(c, 200, NULL, 0, req->target, strlen(req->target));
}

/* A connected pair: *client (non-blocking) and the server side, adopted by srv. */
static int tcp_pair(int *client) {
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0);
  CHECK(listen(l, 1) == 0);
  socklen_t len = sizeof(a);
  CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
  int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
  CHECK(s >= 0);
  close(l);
  CHECK(fcntl(c, F_SETFL, O_NONBLOCK) == 0);
  *client = c;
  return s;
}

static void spin(int turns) {
  for (int i = 0; i < turns; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

/* Reads what has arrived on the client (up to cap-1 bytes); -1 on EOF with nothing read. */
static ssize_t client_read(int c, char *out, size_t cap) {
  ssize_t total = 0;
  for (;;) {
    ssize_t n = recv(c, out + total, cap - 1 - (size_t)total, 0);
    if (n > 0) {
      total += n;
      continue;
    }
    if (n == 0 && total == 0) return -1;
    break;
  }
  out[total] = '\0';
  return total;
}

static void test_detach(void) {
  int client;
  int s = tcp_pair(&client);
  const char *reqs =
      "GET /first HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /second?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced  \r\nTransfer-Encoding: chunked\r\n"
      "Expect: 100-continue\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
      "GET /third HTTP/1.1\r\nHost: a\r\n\r\n";
  CHECK(write(client, reqs, strlen(reqs)) == (ssize_t)strlen(reqs));
  requests = 0;
  memset(actions, 0, sizeof(actions));
  actions[1] = DETACH_TOO_BIG; /* refused for size: nothing changes, it is answered */
  actions[3] = DETACH;
  CHECK(http_server_adopt_flags(srv, s, NULL, 0, HTTP_ADOPT_REROUTED) == 0);
  spin(30);
  CHECK_INT_EQ(requests, 3);
  CHECK_INT_EQ(detach_rc, -E2BIG);
  CHECK_INT_EQ(flags_seen[0], HTTP_ADOPT_REROUTED);
  CHECK_INT_EQ(flags_seen[1], 0); /* the adopt flags are the first request's only */
  char got[4096];
  CHECK(client_read(client, got, sizeof(got)) > 0);
  CHECK(strstr(got, "HTTP/1.1 200") != NULL);
  CHECK(strstr(got, "/first") != NULL);
  CHECK(strstr(got, "/second?x=1") != NULL);
  CHECK(strstr(got, "/third") != NULL);
  size_t conns_before = http_server_connections(srv);

  /* The same request again, with another pipelined behind it: detached. */
  const char *again = "POST /second?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  spaced  "
                      "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                      "GET /fourth HTTP/1.1\r\nHost: a\r\n\r\n";
  CHECK(write(client, again, strlen(again)) ==
        (ssize_t)strlen(again)); /* one segment: read at once */
  spin(20);
  CHECK_INT_EQ(requests, 4);
  CHECK_INT_EQ(detach_rc, 0);
  CHECK(detached_fd >= 0);
  CHECK(fcntl(detached_fd, F_GETFD) & FD_CLOEXEC);
  const char *want =
      "POST /second?x=1 HTTP/1.1\r\nhost: a\r\nx-thing: spaced\r\ncontent-length: 5\r\n\r\nhello"
      "GET /fourth HTTP/1.1\r\nHost: a\r\n\r\n";
  CHECK_INT_EQ(detached.len, strlen(want));
  CHECK(memcmp(detached.data, want, detached.len) == 0);
  spin(20);
  CHECK_INT_EQ(http_server_connections(srv), conns_before - 1);
  /* No FIN reached the client: the duplicate still holds the connection, and works. */
  CHECK_INT_EQ(client_read(client, got, sizeof(got)), 0);
  CHECK(write(detached_fd, "HTTP/1.1 204 No Content\r\n\r\n", 27) == 27);
  usleep(20000);
  CHECK(client_read(client, got, sizeof(got)) == 27);
  close(detached_fd);
  usleep(20000);
  CHECK_INT_EQ(client_read(client, got, sizeof(got)), -1); /* now EOF */
  buf_finish(&detached);
  close(client);
}

static void test_drain(void) {
  int idle_client, busy_client;
  int s1 = tcp_pair(&idle_client);
  int s2 = tcp_pair(&busy_client);
  memset(actions, 0, sizeof(actions));
  requests = 0;
  CHECK(http_server_adopt(srv, s1, "GET /a HTTP/1.1\r\nHost: a\r\n\r\n", 28) == 0);
  spin(20);
  char got[4096];
  CHECK(client_read(idle_client, got, sizeof(got)) > 0); /* answered, kept alive */
  /* The busy one has its headers in, its body still coming. */
  const char *head = "POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab";
  CHECK(http_server_adopt(srv, s2, head, strlen(head)) == 0);
  spin(10);
  http_server_drain(srv);
  spin(50);
  CHECK_INT_EQ(client_read(idle_client, got, sizeof(got)), -1); /* idle: closed at once */
  CHECK(write(busy_client, "cd", 2) == 2);
  spin(50);
  ssize_t n = client_read(busy_client, got, sizeof(got));
  CHECK(n > 0);
  CHECK(strstr(got, "HTTP/1.1 200") == got);
  CHECK(strstr(got, "Connection: close") != NULL); /* and then closed */
  spin(50);
  CHECK_INT_EQ(client_read(busy_client, got, sizeof(got)), -1);
  close(idle_client);
  close(busy_client);
}

int main(void) {
  CHECK(uv_loop_init(&loop) == 0);
  http_server_options o = {0};
  srv = http_server_create(&loop, &o, on_request, NULL);
  RUN(test_detach);
  RUN(test_drain);
  http_server_close(srv, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  http_server_destroy(srv);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
  return 0;
}
