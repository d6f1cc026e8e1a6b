/*
 * Unit tests of buf_t: growth across many appends, the NUL-termination
 * invariant, printf formatting that exceeds the current capacity, JSON
 * string escaping, consume, reset and steal.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/buf.h"
#include "common/mem.h"

static void test_init_and_append(void) {
  buf_t b;
  buf_init(&b);
  CHECK(b.data == NULL);
  CHECK_INT_EQ(b.len, 0);
  buf_append_str(&b, "hello");
  CHECK_INT_EQ(b.len, 5);
  CHECK_STR_EQ(b.data, "hello");
  buf_append(&b, ", world", 7);
  CHECK_STR_EQ(b.data, "hello, world");
  CHECK(b.cap > b.len);
  buf_append(&b, "", 0);
  CHECK_STR_EQ(b.data, "hello, world");
  buf_finish(&b);
  CHECK(b.data == NULL);
  CHECK_INT_EQ(b.len, 0);
  buf_finish(&b); /* twice is harmless */
}

static void test_growth(void) {
  buf_t b;
  buf_init(&b);
  for (int i = 0; i < 10000; i++) buf_append(&b, "0123456789", 10);
  CHECK_INT_EQ(b.len, 100000);
  CHECK(b.cap >= 100001);
  CHECK_INT_EQ(b.data[b.len], '\0');
  for (size_t i = 0; i < b.len; i++) {
    if (b.data[i] != (char)('0' + i % 10)) CHECK(!"content corrupted by growth");
  }
  buf_finish(&b);

  buf_init(&b);
  buf_reserve(&b, 1000);
  CHECK(b.cap >= 1001);
  char *before = b.data;
  for (int i = 0; i < 1000; i++) buf_append(&b, "x", 1);
  CHECK(b.data == before); /* reserve really reserved */
  CHECK_INT_EQ(strlen(b.data), 1000);
  buf_finish(&b);
}

static void test_binary_data(void) {
  buf_t b;
  buf_init(&b);
  buf_append(&b, "a\0b", 3);
  CHECK_INT_EQ(b.len, 3);
  CHECK(memcmp(b.data, "a\0b", 4) == 0);
  buf_finish(&b);
}

static void test_printf(void) {
  buf_t b;
  buf_init(&b);
  buf_printf(&b, "%d-%s", 42, "x");
  CHECK_STR_EQ(b.data, "42-x");
  char big[5000];
  memset(big, 'y', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  buf_printf(&b, "[%s]", big);
  CHECK_INT_EQ(b.len, 4 + 2 + 4999);
  CHECK(strncmp(b.data, "42-x[yyy", 8) == 0);
  CHECK_INT_EQ(b.data[b.len - 1], ']');
  CHECK_INT_EQ(b.data[b.len], '\0');
  buf_printf(&b, "%s", "");
  CHECK_INT_EQ(b.len, 4 + 2 + 4999);
  buf_finish(&b);
}

static void check_json(const char *in, size_t len, const char *want) {
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "<");
  buf_append_json_string(&b, in, len);
  buf_append_str(&b, ">");
  CHECK_STR_EQ(b.data, want);
  buf_finish(&b);
}

static void test_json_string(void) {
  check_json("", 0, "<\"\">");
  check_json("plain", 5, "<\"plain\">");
  check_json("a\"b\\c", 5, "<\"a\\\"b\\\\c\">");
  check_json("\n\r\t\b\f", 5, "<\"\\n\\r\\t\\b\\f\">");
  check_json("\x01\x1f", 2, "<\"\\u0001\\u001f\">");
  check_json("a\0b", 3, "<\"a\\u0000b\">");
  check_json("/", 1, "<\"/\">");
  check_json("\x7f", 1, "<\"\x7f\">");
  /* UTF-8 passes through untouched */
  check_json("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14,
             "<\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\">");
  /* len is honoured: bytes after it are not read */
  check_json("abcdef", 3, "<\"abc\">");
}

static void test_reset_consume(void) {
  buf_t b;
  buf_init(&b);
  buf_reset(&b); /* on an empty buffer */
  CHECK_INT_EQ(b.len, 0);
  buf_append_str(&b, "abcdef");
  size_t cap = b.cap;
  buf_consume(&b, 2);
  CHECK_STR_EQ(b.data, "cdef");
  CHECK_INT_EQ(b.len, 4);
  buf_consume(&b, 0);
  CHECK_STR_EQ(b.data, "cdef");
  buf_consume(&b, 4);
  CHECK_INT_EQ(b.len, 0);
  CHECK_STR_EQ(b.data, "");
  buf_append_str(&b, "xyz");
  buf_consume(&b, 100);
  CHECK_INT_EQ(b.len, 0);
  CHECK_STR_EQ(b.data, "");
  buf_append_str(&b, "again");
  buf_reset(&b);
  CHECK_INT_EQ(b.len, 0);
  CHECK_STR_EQ(b.data, "");
  CHECK_INT_EQ(b.cap, cap); /* storage kept */
  buf_finish(&b);
}

static void test_steal(void) {
  buf_t b;
  buf_init(&b);
  char *empty = buf_steal(&b);
  CHECK(empty != NULL);
  CHECK_STR_EQ(empty, "");
  free(empty);

  buf_append_str(&b, "owned");
  char *s = buf_steal(&b);
  CHECK_STR_EQ(s, "owned");
  CHECK(b.data == NULL);
  CHECK_INT_EQ(b.len, 0);
  CHECK_INT_EQ(b.cap, 0);
  buf_append_str(&b, "reuse"); /* b is usable again, s is independent */
  CHECK_STR_EQ(b.data, "reuse");
  CHECK_STR_EQ(s, "owned");
  free(s);
  buf_finish(&b);
}

static void test_mem(void) {
  void *p = mem_alloc(0);
  CHECK(p != NULL);
  free(p);
  int *z = mem_calloc(16, sizeof(int));
  for (int i = 0; i < 16; i++) CHECK_INT_EQ(z[i], 0);
  z = mem_realloc(z, 1000 * sizeof(int));
  CHECK_INT_EQ(z[15], 0);
  free(z);
  char *d = mem_strdup("dup");
  CHECK_STR_EQ(d, "dup");
  free(d);
  d = mem_strndup("truncate", 5);
  CHECK_STR_EQ(d, "trunc");
  free(d);
  d = mem_strndup("ab", 10);
  CHECK_STR_EQ(d, "ab");
  free(d);
}

/* Reads text with buf_parse_uint: 1 and the value in *v, or 0. */
static int parse(const char *text, uint64_t max, uint64_t *v) {
  return buf_parse_uint(text, strlen(text), max, v);
}

static void test_parse_uint(void) {
  uint64_t v = 7;
  CHECK(parse("0", 10, &v) && v == 0);
  CHECK(parse("10", 10, &v) && v == 10);
  CHECK(!parse("11", 10, &v));
  CHECK(parse("9223372036854775807", INT64_MAX, &v) && v == INT64_MAX);
  CHECK(!parse("9223372036854775808", INT64_MAX, &v));
  CHECK(parse("18446744073709551615", UINT64_MAX, &v) && v == UINT64_MAX);
  CHECK(!parse("18446744073709551616", UINT64_MAX, &v));
  CHECK(!parse("184467440737095516150", UINT64_MAX, &v));
  v = 7;
  /* Only what buf_int_text writes: no blank, sign, leading zero or trailing byte. */
  const char *bad[] = {"", " 5", "5 ", "+5", "-5", "05", "00", "5x", "0x10", "1e3", "٣"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) CHECK(!parse(bad[i], UINT64_MAX, &v));
  CHECK_INT_EQ(v, 7); /* untouched by a failure */
  /* len bounds the read: the digits before a byte that is not one. */
  CHECK(buf_parse_uint("42-t", 2, 100, &v) && v == 42);
  /* And it reads back what buf_int_text writes. */
  char text[BUF_INT_TEXT];
  for (long long x = 1; x > 0 && x <= INT64_MAX / 7; x = x * 7 + 3)
    CHECK(parse(buf_int_text(text, x), INT64_MAX, &v) && v == (uint64_t)x);
}

int main(void) {
  RUN(test_init_and_append);
  RUN(test_growth);
  RUN(test_binary_data);
  RUN(test_printf);
  RUN(test_json_string);
  RUN(test_reset_consume);
  RUN(test_steal);
  RUN(test_mem);
  RUN(test_parse_uint);
  return 0;
}
