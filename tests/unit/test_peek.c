/*
 * Tests of the master's peek at a request's header block (master/peek.h):
 * incomplete and oversized blocks, the request line, the session id
 * (well-formed or not), body framing, keep-alive by version and
 * Connection, Host and Origin, CRLF and bare-LF line ends.
 */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "common/mem.h"
#include "master/peek.h"

#define SID                                                                                        \
  "01"                                                                                             \
  "0123456789abcdef0123456789abcdef"

static int peek(const char *text, peek_request *pk) {
  return peek_parse(text, strlen(text), 16384, pk);
}

static void test_complete_or_not(void) {
  peek_request pk;
  CHECK_INT_EQ(peek("", &pk), -EAGAIN);
  CHECK_INT_EQ(peek("GET / HTTP/1.1\r\nHost: x\r\n", &pk), -EAGAIN);
  const char *req = "GET /status?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\nBODY";
  CHECK_INT_EQ(peek(req, &pk), 0);
  CHECK_INT_EQ(pk.head_len, strlen(req) - 4);
  CHECK_STR_EQ(pk.method, "GET");
  CHECK_STR_EQ(pk.path, "/status");
  CHECK_INT_EQ(pk.http_minor, 1);
  CHECK_STR_EQ(pk.host, "127.0.0.1:1");
  CHECK(!pk.has_origin);
  CHECK(pk.keep_alive);
  CHECK(!pk.has_body);
  CHECK_STR_EQ(pk.session_id, "");
  /* bare LF line ends */
  CHECK_INT_EQ(peek("GET /metrics HTTP/1.0\nConnection: keep-alive\n\n", &pk), 0);
  CHECK_STR_EQ(pk.path, "/metrics");
  CHECK_INT_EQ(pk.http_minor, 0);
  CHECK(pk.keep_alive);
}

static void test_bound(void) {
  char big[20000];
  memset(big, 'a', sizeof(big));
  memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
  peek_request pk;
  CHECK_INT_EQ(peek_parse(big, 10000, 16384, &pk), -EAGAIN);
  CHECK_INT_EQ(peek_parse(big, sizeof(big), 16384, &pk), -E2BIG);
  /* The end just inside the bound is found; just outside it is not. */
  memcpy(big + 16380, "\r\n\r\n", 4);
  CHECK_INT_EQ(peek_parse(big, sizeof(big), 16384, &pk), 0);
  CHECK_INT_EQ(pk.head_len, 16384);
  CHECK_INT_EQ(peek_parse(big, sizeof(big), 16383, &pk), -E2BIG);
}

static void test_headers(void) {
  peek_request pk;
  CHECK_INT_EQ(peek("POST /mcp HTTP/1.1\r\nmcp-SESSION-id:   " SID "  \r\nContent-Length: 12\r\n"
                    "Connection: close\r\nOrigin: http://localhost\r\n\r\n",
                    &pk),
               0);
  CHECK_STR_EQ(pk.session_id, SID);
  CHECK(pk.has_session_header);
  CHECK(pk.has_body);
  CHECK(!pk.keep_alive);
  CHECK(pk.has_origin);
  CHECK_STR_EQ(pk.origin, "http://localhost");
  CHECK_INT_EQ(
      peek("POST /mcp HTTP/1.1\r\nMcp-Session-Id: zz" SID "\r\nContent-Length: 000\r\n\r\n", &pk),
      0);
  CHECK_STR_EQ(pk.session_id, ""); /* malformed: not routed by it */
  CHECK(pk.has_session_header);
  CHECK(!pk.has_body);
  CHECK_INT_EQ(peek("POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &pk), 0);
  CHECK(pk.has_body);
  CHECK_INT_EQ(peek("GET / HTTP/1.0\r\n\r\n", &pk), 0);
  CHECK(!pk.keep_alive);
  /* garbage: found, nothing understood (a worker answers 400) */
  CHECK_INT_EQ(peek("THIS IS NOT HTTP\r\n\r\n", &pk), 0);
  CHECK_INT_EQ(pk.http_minor, -1);
  CHECK(!pk.keep_alive);
  /* an over-long path or Host is not looked at */
  char line[600];
  snprintf(line, sizeof(line), "GET /%0200d HTTP/1.1\r\nHost: %0300d\r\n\r\n", 0, 0);
  CHECK_INT_EQ(peek(line, &pk), 0);
  CHECK_STR_EQ(pk.path, "");
  CHECK(pk.oversized_field);
}

/* A single-valued field twice (any case) is flagged; repeatable ones are not. */
static void test_duplicates(void) {
  peek_request pk;
  CHECK_INT_EQ(
      peek("POST /mcp HTTP/1.1\r\nMcp-Session-Id: " SID "\r\nmcp-session-id: " SID "\r\n\r\n", &pk),
      0);
  CHECK(pk.duplicate != NULL);
  CHECK_STR_EQ(pk.duplicate, "mcp-session-id");
  static const char *const fields[] = {"MCP-Protocol-Version: 2025-11-25", "Content-Length: 0",
                                       "Host: a", "Authorization: Bearer x"};
  for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
    char req[256];
    snprintf(req, sizeof(req), "POST /mcp HTTP/1.1\r\n%s\r\n%s\r\n\r\n", fields[i], fields[i]);
    CHECK_INT_EQ(peek(req, &pk), 0);
    CHECK(pk.duplicate != NULL);
  }
  CHECK_INT_EQ(peek("GET / HTTP/1.1\r\nAccept: a\r\nAccept: b\r\nX-Y: 1\r\nx-y: 2\r\n\r\n", &pk),
               0);
  CHECK(pk.duplicate == NULL);
}

int main(void) {
  RUN(test_complete_or_not);
  RUN(test_bound);
  RUN(test_headers);
  RUN(test_duplicates);
  return 0;
}
