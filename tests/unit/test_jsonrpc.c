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
#include "common/mem.h"

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
                                   0.30000000000000004,
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

/* Are a and b the same tree, numbers to the last bit? */
static bool same_tree(const cJSON *a, const cJSON *b) {
  if ((a->type & 0xFF) != (b->type & 0xFF)) return false;
  if (cJSON_IsNumber(a)) return a->valuedouble == b->valuedouble;
  if (cJSON_IsString(a)) return strcmp(a->valuestring, b->valuestring) == 0;
  const cJSON *x = a->child, *y = b->child;
  for (; x != NULL && y != NULL; x = x->next, y = y->next)
    if ((cJSON_IsObject(a) && strcmp(x->string, y->string) != 0) || !same_tree(x, y)) return false;
  return x == NULL && y == NULL;
}

/* Parses text and compares it with item (same_tree). */
static bool reads_back(const char *text, const cJSON *item) {
  cJSON *back = cJSON_Parse(text);
  bool same = back != NULL && same_tree(back, item);
  cJSON_Delete(back);
  return same;
}

/*
 * jsonrpc_print writes what cJSON_PrintUnformatted writes, byte for byte,
 * wherever that reads back as the item; and always what reads back as it
 * (cJSON prints a number with 15 digits when they come within a rounding
 * error of it).
 */
static void test_print_matches_cjson(void) {
  srand(12345);
  int differ = 0;
  for (int n = 0; n < 20000; n++) {
    cJSON *item = random_item(4);
    char *want = cJSON_PrintUnformatted(item);
    char *got = jsonrpc_print_text(item);
    CHECK(want != NULL && got != NULL);
    CHECK(reads_back(got, item));
    if (reads_back(want, item))
      CHECK_STR_EQ(got, want);
    else
      differ++;
    free(got);
    cJSON_free(want);
    cJSON_Delete(item);
  }
  CHECK(differ > 0); /* 2^53 among the numbers */
  const double exact[] = {0.1 + 0.2, 9007199254740992.0, 1.0 / 3, 123456789.12345678};
  const char *const texts[] = {"0.30000000000000004", "9007199254740992", "0.3333333333333333",
                               "123456789.12345678"};
  for (size_t i = 0; i < ARRAY_LEN(exact); i++) {
    cJSON *item = cJSON_CreateNumber(exact[i]);
    char *got = jsonrpc_print_text(item);
    CHECK_STR_EQ(got, texts[i]);
    free(got);
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

/* Parses text, gives its integers beyond 2^53 within the member path names exactly, prints it. */
static char *exact(const char *text, const char *path) {
  cJSON *root = cJSON_ParseWithLength(text, strlen(text));
  CHECK(root != NULL);
  const cJSON *within = root;
  if (path != NULL) within = cJSON_GetObjectItemCaseSensitive(root, path);
  jsonrpc_exact_integers(text, strlen(text), root, &within, 1);
  char *out = jsonrpc_print_text(root);
  cJSON_Delete(root);
  return out;
}

static void expect_exact(const char *text, const char *path, const char *want) {
  char *got = exact(text, path);
  if (strcmp(got, want) != 0) fprintf(stderr, "exact(%s): %s, want %s\n", text, got, want);
  CHECK_STR_EQ(got, want);
  free(got);
}

/*
 * Integers beyond 2^53 keep their digits, wherever they are in the tree
 * (or the part asked for); the numbers a double holds, and reals, stay.
 */
static void test_exact_integers(void) {
  expect_exact("{\"a\": 1152921504606846977}", NULL, "{\"a\":1152921504606846977}");
  expect_exact("{\"a\":-1152921504606846977,\"b\":9007199254740993,\"c\":9007199254740992}", NULL,
               "{\"a\":-1152921504606846977,\"b\":9007199254740993,\"c\":9007199254740992}");
  /* Beside strings holding quotes, colons, brackets and digits; in arrays; nested. */
  expect_exact(
      "\xEF\xBB\xBF { \"k\\\":[{\" : \"1152921504606846977\\\\\" ,\n \"x\" :\t[ 1, {}, [],"
      " 99999999999999999999 , {\"y\": [-1152921504606846977]} ] , \"z\": true}",
      NULL,
      "{\"k\\\":[{\":\"1152921504606846977\\\\\",\"x\":[1,{},[],99999999999999999999,{\"y\":"
      "[-1152921504606846977]}],\"z\":true}");
  /* Canonical digits: cJSON reads leading zeros, JSON writes none. */
  expect_exact("{\"a\":0001152921504606846977,\"b\":-000099999999999999999999}", NULL,
               "{\"a\":1152921504606846977,\"b\":-99999999999999999999}");
  /* Reals and exponents are doubles. */
  expect_exact("{\"a\":1152921504606846977.5,\"b\":1152921504606846977e0}", NULL,
               "{\"a\":1.152921504606847e+18,\"b\":1.152921504606847e+18}");
  /* Only within the part asked for. */
  expect_exact("{\"id\":1152921504606846977,\"args\":{\"v\":1152921504606846977}}", "args",
               "{\"id\":1.152921504606847e+18,\"args\":{\"v\":1152921504606846977}}");
  /* Several parts in one pass, in the text's order (a batch's arguments); not what is between. */
  const char *batch = "[{\"id\":1152921504606846977,\"a\":{\"v\":1152921504606846977}},"
                      "{\"id\":1152921504606846978,\"a\":{\"v\":1152921504606846978}},"
                      "{\"id\":1152921504606846979,\"a\":[1152921504606846979]}]";
  cJSON *msgs = cJSON_Parse(batch);
  const cJSON *parts[3];
  size_t n_parts = 0;
  for (const cJSON *m = msgs->child; m != NULL; m = m->next)
    parts[n_parts++] = cJSON_GetObjectItemCaseSensitive(m, "a");
  jsonrpc_exact_integers(batch, strlen(batch), msgs, parts, n_parts);
  char *printed = jsonrpc_print_text(msgs);
  CHECK_STR_EQ(printed, "[{\"id\":1.152921504606847e+18,\"a\":{\"v\":1152921504606846977}},"
                        "{\"id\":1.152921504606847e+18,\"a\":{\"v\":1152921504606846978}},"
                        "{\"id\":1.152921504606847e+18,\"a\":[1152921504606846979]}]");
  free(printed);
  cJSON_Delete(msgs);
  /* What a raw integer is. */
  const char *text = "{\"a\":1152921504606846977,\"b\":-99999999999999999999}";
  cJSON *root = jsonrpc_parse_exact(text, strlen(text));
  int64_t i = 0;
  bool in_range = false;
  CHECK(jsonrpc_raw_integer(cJSON_GetObjectItem(root, "a"), &i, &in_range));
  CHECK(in_range && i == 1152921504606846977);
  CHECK(jsonrpc_raw_integer(cJSON_GetObjectItem(root, "b"), &i, &in_range) && !in_range);
  cJSON_Delete(root);
  cJSON *raw = cJSON_CreateRaw("[1]");
  CHECK(!jsonrpc_raw_integer(raw, &i, &in_range));
  cJSON_Delete(raw);
}

int main(void) {
  RUN(test_valid_kinds);
  RUN(test_invalid_shapes);
  RUN(test_depth);
  RUN(test_builders);
  RUN(test_print_matches_cjson);
  RUN(test_print_result);
  RUN(test_exact_integers);
  return 0;
}
