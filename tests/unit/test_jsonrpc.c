/*
 * Unit tests of JSON-RPC classification (each valid kind, each invalid
 * shape with its reason), the raw-text depth check (the limit exactly,
 * brackets inside strings and escaped quotes ignored), and the three
 * message builders' exact output.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/jsonrpc.h"

/* Parses text, classifies it, and checks the kind (and reason, if given). */
static void expect_kind(const char *text, jsonrpc_kind want, const char *why_contains) {
  cJSON *msg = cJSON_Parse(text);
  CHECK(msg != NULL);
  const char *why = NULL;
  jsonrpc_kind got = jsonrpc_classify(msg, &why);
  if (got != want) {
    fprintf(stderr, "%s: kind %d, wanted %d (why: %s)\n", text, got, want, why ? why : "-");
    CHECK(got == want);
  }
  if (want == JSONRPC_INVALID) {
    CHECK(why != NULL);
    if (why_contains && strstr(why, why_contains) == NULL) {
      fprintf(stderr, "%s: reason \"%s\" lacks \"%s\"\n", text, why, why_contains);
      CHECK(!"reason");
    }
  }
  cJSON_Delete(msg);
}

static void test_valid_kinds(void) {
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", JSONRPC_REQUEST, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"x\",\"params\":{}}",
              JSONRPC_REQUEST, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":-7,\"method\":\"x\",\"params\":[1]}", JSONRPC_REQUEST,
              NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"x\"}", JSONRPC_REQUEST, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
              JSONRPC_NOTIFICATION, NULL);
  expect_kind("{\"method\":\"n\",\"params\":{\"a\":1},\"jsonrpc\":\"2.0\"}", JSONRPC_NOTIFICATION,
              NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", JSONRPC_RESPONSE, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"result\":null}", JSONRPC_RESPONSE, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-1,\"message\":\"no\"}}",
              JSONRPC_RESPONSE, NULL);
}

static void test_invalid_shapes(void) {
  expect_kind("[]", JSONRPC_INVALID, "object");
  expect_kind("\"str\"", JSONRPC_INVALID, "object");
  expect_kind("42", JSONRPC_INVALID, "object");
  expect_kind("{\"id\":1,\"method\":\"x\"}", JSONRPC_INVALID, "jsonrpc must be \"2.0\"");
  expect_kind("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"x\"}", JSONRPC_INVALID, "2.0");
  expect_kind("{\"jsonrpc\":2.0,\"id\":1,\"method\":\"x\"}", JSONRPC_INVALID, "2.0");
  expect_kind("{\"JSONRPC\":\"2.0\",\"id\":1,\"method\":\"x\"}", JSONRPC_INVALID, "2.0");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"x\"}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"x\"}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"x\"}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"x\"}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1e300,\"method\":\"x\"}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", JSONRPC_INVALID, "method");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":null}", JSONRPC_INVALID, "method");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":3}", JSONRPC_INVALID,
              "params");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":\"s\"}", JSONRPC_INVALID,
              "params");
  expect_kind("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":null}", JSONRPC_INVALID, "params");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"result\":{}}", JSONRPC_INVALID,
              "result");
  expect_kind(
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{\"code\":1,\"message\":\"m\"}}",
      JSONRPC_INVALID, "both");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1}", JSONRPC_INVALID, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\"}", JSONRPC_INVALID, NULL);
  expect_kind("{\"jsonrpc\":\"2.0\",\"result\":{}}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}", JSONRPC_INVALID, "id");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"bad\"}", JSONRPC_INVALID, "error");
  expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"m\"}}", JSONRPC_INVALID,
              "error");

  /* why may be NULL */
  cJSON *msg = cJSON_Parse("[]");
  CHECK(jsonrpc_classify(msg, NULL) == JSONRPC_INVALID);
  cJSON_Delete(msg);
  CHECK(jsonrpc_classify(NULL, NULL) == JSONRPC_INVALID);
}

/* n nested arrays: [[[...]]] */
static char *nested(int n, char open, char close) {
  char *s = malloc(2 * (size_t)n + 1);
  for (int i = 0; i < n; i++) {
    s[i] = open;
    s[2 * n - 1 - i] = close;
  }
  s[2 * n] = '\0';
  return s;
}

static void test_depth(void) {
  char *s64 = nested(64, '[', ']');
  char *s65 = nested(65, '[', ']');
  char *o65 = nested(65, '{', '}');
  CHECK(jsonrpc_depth_ok(s64, strlen(s64), JSONRPC_MAX_DEPTH));
  CHECK(!jsonrpc_depth_ok(s65, strlen(s65), JSONRPC_MAX_DEPTH));
  CHECK(!jsonrpc_depth_ok(o65, strlen(o65), JSONRPC_MAX_DEPTH));
  /* len is honoured: only the first 64 opening brackets are seen */
  CHECK(jsonrpc_depth_ok(s65, 64, JSONRPC_MAX_DEPTH));
  /* an unclosed deep prefix is still caught */
  CHECK(!jsonrpc_depth_ok(s65, 65, JSONRPC_MAX_DEPTH));
  free(s64);
  free(s65);
  free(o65);

  /* siblings do not add up: depth, not count */
  const char *wide = "[[],[],[],[[]],{},{\"a\":[]}]";
  CHECK(jsonrpc_depth_ok(wide, strlen(wide), 3));
  CHECK(!jsonrpc_depth_ok(wide, strlen(wide), 2));

  /* brackets inside strings are ignored, escaped quotes do not end them */
  const char *str = "{\"a\":\"[[[[{{{{\",\"b\":\"\\\"[[[[\",\"c\":\"\\\\\"}";
  CHECK(jsonrpc_depth_ok(str, strlen(str), 1));
  /* after an escaped backslash the quote does end the string */
  const char *esc = "[\"\\\\\",[[]]]";
  CHECK(jsonrpc_depth_ok(esc, strlen(esc), 3));
  CHECK(!jsonrpc_depth_ok(esc, strlen(esc), 2));
  /* stray closers do not buy depth */
  const char *stray = "]]]][[";
  CHECK(!jsonrpc_depth_ok(stray, strlen(stray), 1));
}

/* Prints msg unformatted, checks the text, frees both. */
static void expect_json(cJSON *msg, const char *want) {
  CHECK(msg != NULL);
  char *text = cJSON_PrintUnformatted(msg);
  CHECK_STR_EQ(text, want);
  free(text);
  cJSON_Delete(msg);
}

static void test_builders(void) {
  cJSON *id = cJSON_CreateNumber(7);
  cJSON *result = cJSON_CreateObject();
  cJSON_AddStringToObject(result, "k", "v");
  expect_json(jsonrpc_result(id, result),
              "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"k\":\"v\"}}");
  /* id is copied, not taken */
  CHECK(cJSON_IsNumber(id) && id->valueint == 7);
  cJSON_Delete(id);

  cJSON *sid = cJSON_CreateString("a\"b");
  expect_json(jsonrpc_result(sid, NULL), "{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"result\":{}}");
  expect_json(jsonrpc_error(sid, JSONRPC_METHOD_NOT_FOUND, "Method not found"),
              "{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"error\":{\"code\":-32601,"
              "\"message\":\"Method not found\"}}");
  cJSON_Delete(sid);
  expect_json(jsonrpc_error(NULL, JSONRPC_PARSE_ERROR, "Parse error"),
              "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
              "\"message\":\"Parse error\"}}");

  cJSON *params = cJSON_CreateObject();
  cJSON_AddStringToObject(params, "uri", "u");
  expect_json(jsonrpc_notification("notifications/resources/updated", params),
              "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\","
              "\"params\":{\"uri\":\"u\"}}");
  expect_json(jsonrpc_notification("notifications/tools/list_changed", NULL),
              "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");

  /* what we build classifies as what it is */
  cJSON *one = cJSON_CreateNumber(1);
  cJSON *r = jsonrpc_result(one, NULL);
  CHECK(jsonrpc_classify(r, NULL) == JSONRPC_RESPONSE);
  cJSON_Delete(r);
  r = jsonrpc_error(one, JSONRPC_INVALID_PARAMS, "bad");
  CHECK(jsonrpc_classify(r, NULL) == JSONRPC_RESPONSE);
  cJSON_Delete(r);
  cJSON_Delete(one);
  r = jsonrpc_notification("n", cJSON_CreateArray());
  CHECK(jsonrpc_classify(r, NULL) == JSONRPC_NOTIFICATION);
  cJSON_Delete(r);
}

/* A random value of depth at most depth (deterministic: the caller seeds rand). */
static cJSON *random_item(int depth) {
  static const char *const texts[] = {"",
                                      "a",
                                      "caf\xc3\xa9",
                                      "quote\" back\\ slash",
                                      "ctl\x01\x1f\n\t",
                                      "/slash",
                                      "\xe2\x80\xa8 line sep",
                                      "long long long text"};
  static const double numbers[] = {0,
                                   -0.0,
                                   1,
                                   -1,
                                   42,
                                   1e15,
                                   1e15 + 1,
                                   -1e15,
                                   1e16,
                                   9007199254740993.0,
                                   0.5,
                                   -2.25,
                                   1e-7,
                                   3.14159,
                                   123456.789,
                                   1e300,
                                   -1e-300,
                                   4294967296.0,
                                   999999999999999.0};
  int kind = rand() % (depth > 0 ? 8 : 6);
  switch (kind) {
  case 0: return cJSON_CreateNull();
  case 1: return cJSON_CreateBool(rand() % 2);
  case 2: return cJSON_CreateNumber(numbers[rand() % (int)(sizeof(numbers) / sizeof(*numbers))]);
  case 3: return cJSON_CreateNumber((double)(rand() - RAND_MAX / 2) * (rand() % 1000));
  case 4:
  case 5: return cJSON_CreateString(texts[rand() % (int)(sizeof(texts) / sizeof(*texts))]);
  case 6: {
    cJSON *a = cJSON_CreateArray();
    for (int i = rand() % 4; i > 0; i--) cJSON_AddItemToArray(a, random_item(depth - 1));
    return a;
  }
  default: {
    cJSON *o = cJSON_CreateObject();
    for (int i = rand() % 4; i > 0; i--) {
      char name[16];
      snprintf(name, sizeof(name), i % 2 ? "k%d" : "\"%d\"", rand() % 100);
      cJSON_AddItemToObject(o, name, random_item(depth - 1));
    }
    return o;
  }
  }
}

/* jsonrpc_print writes what cJSON_PrintUnformatted writes, byte for byte. */
static void test_print_matches_cjson(void) {
  srand(12345);
  for (int n = 0; n < 20000; n++) {
    cJSON *item = random_item(4);
    char *want = cJSON_PrintUnformatted(item);
    buf_t got;
    buf_init(&got);
    CHECK(jsonrpc_print(&got, item) == 0);
    CHECK(want != NULL && got.len == strlen(want) && memcmp(got.data, want, got.len) == 0);
    buf_finish(&got);
    cJSON_free(want);
    cJSON_Delete(item);
  }
}

/* jsonrpc_print_result writes what jsonrpc_result's tree prints, for every kind of id. */
static void test_print_result(void) {
  const char *result = "{\"contents\":[{\"uri\":\"u\",\"text\":\"{\\\"a\\\":1}\"}]}";
  cJSON *ids[] = {cJSON_CreateNumber(7), cJSON_CreateString("x\"y\\z"), cJSON_CreateNumber(-1.5),
                  NULL};
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
    cJSON *msg = jsonrpc_result(ids[i], cJSON_Parse(result));
    char *want = cJSON_PrintUnformatted(msg);
    buf_t got;
    buf_init(&got);
    CHECK(jsonrpc_print_result(&got, ids[i], result, strlen(result)) == 0);
    CHECK(want != NULL && got.len == strlen(want) && memcmp(got.data, want, got.len) == 0);
    buf_finish(&got);
    cJSON_free(want);
    cJSON_Delete(msg);
    cJSON_Delete(ids[i]);
  }
}

int main(void) {
  RUN(test_valid_kinds);
  RUN(test_invalid_shapes);
  RUN(test_depth);
  RUN(test_builders);
  RUN(test_print_matches_cjson);
  RUN(test_print_result);
  return 0;
}
