/*
 * Unit tests of SSE framing: the exact bytes of an event with and without
 * id and event fields, multi-line data split on LF, CRLF and lone CR, an
 * empty payload, CR/LF stripped from id and event, retry and comments.
 */
#include <string.h>

#include "check.h"
#include "common/sse.h"

static void expect_event(const char *id, const char *event, const char *data, size_t len,
                         const char *want) {
  buf_t b;
  buf_init(&b);
  sse_format_event(&b, id, event, data, len);
  CHECK_STR_EQ(b.data, want);
  CHECK_INT_EQ(b.len, strlen(want));
  buf_finish(&b);
}

static void test_event_fields(void) {
  expect_event("1", NULL, "{}", 2, "id: 1\ndata: {}\n\n");
  expect_event("s-7", "message", "{\"a\":1}", 7, "id: s-7\nevent: message\ndata: {\"a\":1}\n\n");
  expect_event(NULL, NULL, "x", 1, "data: x\n\n");
  expect_event(NULL, "ping", "x", 1, "event: ping\ndata: x\n\n");
  /* len is honoured */
  expect_event("2", NULL, "abcdef", 3, "id: 2\ndata: abc\n\n");
}

static void test_multiline(void) {
  expect_event("1", NULL, "a\nb", 3, "id: 1\ndata: a\ndata: b\n\n");
  expect_event("1", NULL, "a\r\nb", 4, "id: 1\ndata: a\ndata: b\n\n");
  expect_event("1", NULL, "a\rb", 3, "id: 1\ndata: a\ndata: b\n\n");
  expect_event("1", NULL, "a\n\nb", 4, "id: 1\ndata: a\ndata: \ndata: b\n\n");
  expect_event("1", NULL, "a\r\n\r\nb", 6, "id: 1\ndata: a\ndata: \ndata: b\n\n");
  expect_event("1", NULL, "a\n", 2, "id: 1\ndata: a\ndata: \n\n");
  expect_event("1", NULL, "\r", 1, "id: 1\ndata: \ndata: \n\n");
  /* a payload cannot inject a field or end the frame early */
  expect_event("1", NULL, "x\n\nid: 666\nevent: evil", 22,
               "id: 1\ndata: x\ndata: \ndata: id: 666\ndata: event: evil\n\n");
}

static void test_empty_payload(void) {
  expect_event("1", NULL, "", 0, "id: 1\ndata: \n\n");
  expect_event("1", NULL, NULL, 0, "id: 1\ndata: \n\n");
}

static void test_field_values_stripped(void) {
  expect_event("1\r\n2", "a\nb\rc", "d", 1, "id: 12\nevent: abc\ndata: d\n\n");
}

static void test_retry_and_comment(void) {
  buf_t b;
  buf_init(&b);
  sse_format_retry(&b, 1000);
  CHECK_STR_EQ(b.data, "retry: 1000\n\n");
  buf_reset(&b);
  sse_format_comment(&b, "keepalive");
  CHECK_STR_EQ(b.data, ": keepalive\n\n");
  buf_reset(&b);
  sse_format_comment(&b, "two\nlines");
  CHECK_STR_EQ(b.data, ": two\n: lines\n\n");
  buf_reset(&b);
  sse_format_comment(&b, "");
  CHECK_STR_EQ(b.data, ": \n\n");
  /* frames append; they do not replace */
  sse_format_retry(&b, 0);
  CHECK_STR_EQ(b.data, ": \n\nretry: 0\n\n");
  buf_finish(&b);
}

int main(void) {
  RUN(test_event_fields);
  RUN(test_multiline);
  RUN(test_empty_payload);
  RUN(test_field_values_stripped);
  RUN(test_retry_and_comment);
  return 0;
}
