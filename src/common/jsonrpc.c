/*
 * JSON-RPC 2.0 for the MCP endpoint: a depth check that runs on the raw
 * body before cJSON sees it (cJSON recurses, so a body of 100000 '[' must
 * be refused first), the classification of one parsed message into
 * request / notification / response / invalid with a human reason, the
 * builders of the three message shapes we send, and the printer that turns
 * them into text on every request's path. Pure: no I/O, no session state.
 * Building a reply aborts on out-of-memory (small internal allocations, see
 * mem.h).
 */
#include "common/jsonrpc.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Aborts when cJSON failed to allocate; returns p otherwise. */
static void *jsonrpc_must(void *p) {
  if (p == NULL) {
    fprintf(stderr, "mcpsub: out of memory building a JSON-RPC message\n");
    abort();
  }
  return p;
}

/*
 * Counts '[' and '{' against ']' and '}' outside string literals (a
 * backslash inside a string escapes the next byte). Malformed text is not
 * rejected here: cJSON does that once the depth is known to be safe.
 */
bool jsonrpc_depth_ok(const char *text, size_t len, int max_depth) {
  /* No more openers than the bound, strings or not: no nesting can pass it (most bodies). */
  size_t openers = 0;
  for (size_t i = 0; i < len; i++) openers += text[i] == '{' || text[i] == '[';
  if (openers <= (size_t)max_depth) return true;
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
    case '"': in_string = true; break;
    case '[':
    case '{':
      if (++depth > max_depth) return false;
      break;
    case ']':
    case '}':
      if (depth > 0) depth--;
      break;
    default: break;
    }
  }
  return true;
}

/* Over white space as cJSON skips it (every byte up to the space). */
static const char *json_skip_space(const char *p, const char *end) {
  while (p < end && (unsigned char)*p <= ' ') p++;
  return p;
}

/* Past the string whose opening quote is at p. */
static const char *json_skip_string(const char *p, const char *end) {
  for (p++; p < end && *p != '"'; p++)
    if (*p == '\\') p++;
  return p < end ? p + 1 : end;
}

/*
 * Gives item, a member or element of parent that is the integer literal of
 * n bytes at text, as a raw item of those digits if a double does not hold
 * it. Returns the item now in its place.
 */
static cJSON *json_exact_integer(cJSON *parent, cJSON *item, const char *text, size_t n) {
  char digits[64];
  if (n >= sizeof(digits) || !cJSON_IsNumber(item)) return item;
  memcpy(digits, text, n);
  digits[n] = '\0';
  errno = 0;
  long long v = strtoll(digits, NULL, 10);
  if (errno == 0 && jsonrpc_int_exact(v)) return item;
  if (errno == 0) { /* canonical: cJSON reads 0012 as 12, JSON writes no leading zeros */
    snprintf(digits, sizeof(digits), "%lld", v);
  } else {
    size_t neg = digits[0] == '-', zeros = strspn(digits + neg, "0");
    memmove(digits + neg, digits + neg + zeros, n - neg - zeros + 1);
  }
  cJSON *exact = jsonrpc_must(cJSON_CreateRaw(digits));
  exact->string = item->string; /* a member's name moves to it */
  item->string = NULL;
  if (!cJSON_ReplaceItemViaPointer(parent, item, exact)) abort();
  return exact;
}

/* The parts of the tree a walk gives exact integers in, in the text's order, and the next. */
typedef struct json_exact_parts {
  const cJSON *const *within;
  size_t n, next;
} json_exact_parts;

/*
 * Walks the value at p, which cJSON parsed into item (a member or element
 * of parent; the root: NULL), in step with it, and past it; inside: within
 * one of the parts. The walk meets the items in the text's order, so the
 * parts are found by comparing each item with the next of them only. The
 * text is valid JSON up to the value's end (cJSON read it).
 */
static const char *json_exact_walk(const char *p, const char *end, cJSON *parent, cJSON *item,
                                   json_exact_parts *parts, bool inside) {
  if (parts->next < parts->n && item == parts->within[parts->next]) {
    inside = true;
    parts->next++;
  }
  p = json_skip_space(p, end);
  if (p >= end) return end;
  if (*p == '"') return json_skip_string(p, end);
  if (*p == '{' || *p == '[') {
    bool object = *p == '{';
    p++;
    for (cJSON *child = item->child, *next; child != NULL && p < end; child = next) {
      next = child->next; /* child may be replaced */
      if (object) {       /* the name and the colon */
        p = json_skip_space(json_skip_string(json_skip_space(p, end), end), end);
        if (p < end) p++;
      }
      p = json_skip_space(json_exact_walk(p, end, item, child, parts, inside), end);
      if (p < end) p++; /* the comma, or the closing bracket */
    }
    if (item->child == NULL) {
      p = json_skip_space(p, end);
      if (p < end) p++;
    }
    return p;
  }
  const char *start = p;
  if (*p == '-') p++;
  const char *digits = p;
  while (p < end && *p >= '0' && *p <= '9') p++;
  const char *stop = p;
  while (p < end && (*p == '.' || *p == '+' || *p == '-' || (*p >= '0' && *p <= '9') ||
                     (*p >= 'a' && *p <= 'z') || *p == 'E'))
    p++; /* a fraction or an exponent, or a literal's letters */
  if (inside && parent != NULL && p == stop && stop - digits >= 16)
    json_exact_integer(parent, item, start, (size_t)(stop - start));
  return p;
}

void jsonrpc_exact_integers(const char *text, size_t len, cJSON *root, const cJSON *const *within,
                            size_t n) {
  if (root == NULL || n == 0) return;
  const char *p = text, *end = text + len;
  if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
    p += 3; /* a byte-order mark, as cJSON skips it */
  json_exact_parts parts = {within, n, 0};
  (void)json_exact_walk(p, end, NULL, root, &parts, false);
}

cJSON *jsonrpc_parse_exact(const char *text, size_t len) {
  cJSON *root = cJSON_ParseWithLength(text, len);
  const cJSON *all = root;
  jsonrpc_exact_integers(text, len, root, &all, 1);
  return root;
}

bool jsonrpc_raw_integer(const cJSON *v, int64_t *i, bool *in_range) {
  if (!cJSON_IsRaw(v) || v->valuestring == NULL) return false;
  const char *p = v->valuestring + (v->valuestring[0] == '-');
  if (*p == '\0') return false;
  for (; *p != '\0'; p++)
    if (*p < '0' || *p > '9') return false;
  errno = 0;
  long long n = strtoll(v->valuestring, NULL, 10);
  if (i != NULL) *i = (int64_t)n;
  if (in_range != NULL) *in_range = errno == 0;
  return true;
}

const char *jsonrpc_text(const cJSON *v) {
  return cJSON_IsString(v) || jsonrpc_raw_integer(v, NULL, NULL) ? v->valuestring : NULL;
}

bool jsonrpc_strings_ok(const char *text, size_t len) {
  /* Without a NUL or a backslash (most bodies) there is nothing to find: two vector scans. */
  if (memchr(text, '\0', len) == NULL && memchr(text, '\\', len) == NULL) return true;
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (c == '\0') return false;
    if (!in_string) {
      in_string = c == '"';
      continue;
    }
    if (c == '"') {
      in_string = false;
    } else if (c == '\\' && i + 1 < len) {
      if (text[i + 1] == 'u' && i + 5 < len && memcmp(text + i + 2, "0000", 4) == 0) return false;
      i++; /* the escaped character, whatever it is */
    }
  }
  return true;
}

/* True for a number with an integral value in the exactly representable range. */
static bool jsonrpc_is_integer(const cJSON *item) {
  if (!cJSON_IsNumber(item)) return false;
  double d = item->valuedouble;
  if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0)) return false;
  return (double)(int64_t)d == d;
}

/* True for an id MCP allows: a string or an integer (never null). */
static bool jsonrpc_id_ok(const cJSON *id) {
  return cJSON_IsString(id) || jsonrpc_is_integer(id);
}

/* Sets *why and returns JSONRPC_INVALID. */
static jsonrpc_kind jsonrpc_invalid(const char **why, const char *reason) {
  if (why) *why = reason;
  return JSONRPC_INVALID;
}

/* Checks an error member: an object with an integer code and a string message. */
static bool jsonrpc_error_object_ok(const cJSON *error) {
  if (!cJSON_IsObject(error)) return false;
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
  const cJSON *message = cJSON_GetObjectItemCaseSensitive(error, "message");
  return jsonrpc_is_integer(code) && cJSON_IsString(message);
}

/*
 * Classifies msg. Member names are matched case-sensitively; a request is
 * "method" + "id", a notification "method" without an "id" member, a
 * response "result" xor "error" + "id" and no "method". *why (when not
 * NULL) is set only for JSONRPC_INVALID, to a static string.
 */
jsonrpc_kind jsonrpc_classify(const cJSON *msg, const char **why) {
  jsonrpc_members unused;
  return jsonrpc_classify_members(msg, why, &unused);
}

jsonrpc_kind jsonrpc_classify_members(const cJSON *msg, const char **why, jsonrpc_members *out) {
  *out = (jsonrpc_members){0};
  if (!cJSON_IsObject(msg)) return jsonrpc_invalid(why, "a JSON-RPC message must be a JSON object");
  /*
   * The six members in one walk, each the first of its name (as
   * cJSON_GetObjectItemCaseSensitive finds it): six lookups were thirty
   * string comparisons, twice a request.
   */
  const cJSON *version = NULL, *id = NULL, *method = NULL, *params = NULL, *result = NULL,
              *error = NULL;
  for (const cJSON *e = msg->child; e != NULL; e = e->next) {
    const char *k = e->string;
    const cJSON **slot = NULL;
    switch (k != NULL ? k[0] : '\0') {
    case 'j': slot = strcmp(k, "jsonrpc") == 0 ? &version : NULL; break;
    case 'i': slot = strcmp(k, "id") == 0 ? &id : NULL; break;
    case 'm': slot = strcmp(k, "method") == 0 ? &method : NULL; break;
    case 'p': slot = strcmp(k, "params") == 0 ? &params : NULL; break;
    case 'r': slot = strcmp(k, "result") == 0 ? &result : NULL; break;
    case 'e': slot = strcmp(k, "error") == 0 ? &error : NULL; break;
    default: break;
    }
    if (slot != NULL && *slot == NULL) *slot = e;
  }
  *out = (jsonrpc_members){.id = id, .method = method, .params = params};
  if (!cJSON_IsString(version) || strcmp(version->valuestring, "2.0") != 0)
    return jsonrpc_invalid(why, "jsonrpc must be \"2.0\"");
  if (id && !jsonrpc_id_ok(id)) return jsonrpc_invalid(why, "id must be a string or an integer");
  if (method) {
    if (!cJSON_IsString(method)) return jsonrpc_invalid(why, "method must be a string");
    if (result || error) return jsonrpc_invalid(why, "a request must not carry result or error");
    if (params && !cJSON_IsObject(params) && !cJSON_IsArray(params))
      return jsonrpc_invalid(why, "params must be an object or an array");
    return id ? JSONRPC_REQUEST : JSONRPC_NOTIFICATION;
  }
  if (result && error)
    return jsonrpc_invalid(why, "a response must not carry both result and error");
  if (!result && !error)
    return jsonrpc_invalid(why, "a message needs a method, a result or an error");
  if (!id) return jsonrpc_invalid(why, "a response needs an id");
  if (error && !jsonrpc_error_object_ok(error))
    return jsonrpc_invalid(why,
                           "error must be an object with an integer code and a string message");
  return JSONRPC_RESPONSE;
}

/*
 * Starts {"jsonrpc":"2.0","id":<copy of id or null>}. The envelope's keys
 * and "2.0" are constants the items point to (the CS and Reference forms
 * of cJSON): every answer builds one, and copies of them were a third of
 * its allocations.
 */
static cJSON *jsonrpc_start(const cJSON *id) {
  cJSON *msg = jsonrpc_must(cJSON_CreateObject());
  cJSON_AddItemToObjectCS(msg, "jsonrpc", jsonrpc_must(cJSON_CreateStringReference("2.0")));
  cJSON *copy = id ? cJSON_Duplicate(id, true) : cJSON_CreateNull();
  jsonrpc_must(copy);
  cJSON_AddItemToObjectCS(msg, "id", copy);
  return msg;
}

cJSON *jsonrpc_raw(char *text) {
  cJSON *item = jsonrpc_must(cJSON_CreateNull());
  item->type = cJSON_Raw; /* cJSON_Delete frees valuestring through the same free() */
  item->valuestring = text;
  return item;
}

/* result NULL becomes {} (e.g. the reply to subscribe). Never returns NULL. */
cJSON *jsonrpc_result(const cJSON *id, cJSON *result) {
  cJSON *msg = jsonrpc_start(id);
  if (result == NULL) result = jsonrpc_must(cJSON_CreateObject());
  cJSON_AddItemToObjectCS(msg, "result", result);
  return msg;
}

int jsonrpc_print_result(buf_t *out, const cJSON *id, const char *result, size_t len) {
  buf_append_str(out, "{\"jsonrpc\":\"2.0\",\"id\":");
  int rc = id != NULL ? jsonrpc_print(out, id) : (buf_append(out, "null", 4), 0);
  if (rc < 0) return rc;
  buf_append_str(out, ",\"result\":");
  buf_append(out, result, len);
  buf_append_byte(out, '}');
  return 0;
}

/* message NULL becomes "". Never returns NULL. */
cJSON *jsonrpc_error(const cJSON *id, int code, const char *message) {
  cJSON *msg = jsonrpc_start(id);
  cJSON *error = jsonrpc_must(cJSON_AddObjectToObject(msg, "error"));
  jsonrpc_must(cJSON_AddNumberToObject(error, "code", code));
  jsonrpc_must(cJSON_AddStringToObject(error, "message", message ? message : ""));
  return msg;
}

/* params NULL omits the member. Never returns NULL. */
cJSON *jsonrpc_notification(const char *method, cJSON *params) {
  cJSON *msg = jsonrpc_must(cJSON_CreateObject());
  jsonrpc_must(cJSON_AddStringToObject(msg, "jsonrpc", "2.0"));
  jsonrpc_must(cJSON_AddStringToObject(msg, "method", method));
  if (params) cJSON_AddItemToObject(msg, "params", params);
  return msg;
}

/* ---- printing ---------------------------------------------------------------- */

/*
 * A number as cJSON prints it ("%1.15g", or "%1.17g"; null for NaN and the
 * infinities, which JSON has not), but with 16 or 17 digits whenever 15 do
 * not read back as exactly the same double (cJSON lets a rounding error
 * pass). An integral value below 1e15 has at most 15 digits, which
 * "%1.15g" prints exactly and without an exponent: those skip printf.
 */
static int jsonrpc_print_number(buf_t *out, const cJSON *item) {
  double d = item->valuedouble;
  if (d > -1e15 && d < 1e15 && (double)(long long)d == d && !(d == 0 && signbit(d))) {
    buf_append_int(out, (long long)d);
    return 0;
  }
  if (!isfinite(d)) {
    buf_append(out, "null", 4);
    return 0;
  }
  char text[32];
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(text, sizeof(text), "%1.*g", digits, d);
    if (strtod(text, NULL) == d) break;
  }
  buf_append_str(out, text);
  return 0;
}

static void jsonrpc_print_string(buf_t *out, const char *s) {
  if (s == NULL) s = ""; /* cJSON prints a missing string as "" */
  buf_append_json_string(out, s, strlen(s));
}

char *jsonrpc_print_text(const cJSON *item) {
  buf_t b;
  buf_init(&b);
  if (jsonrpc_print(&b, item) < 0) {
    buf_finish(&b);
    return NULL;
  }
  return buf_steal(&b);
}

int jsonrpc_print(buf_t *out, const cJSON *item) {
  if (item == NULL) return -EINVAL;
  switch (item->type & 0xFF) {
  case cJSON_NULL: buf_append(out, "null", 4); return 0;
  case cJSON_False: buf_append(out, "false", 5); return 0;
  case cJSON_True: buf_append(out, "true", 4); return 0;
  case cJSON_Number: return jsonrpc_print_number(out, item);
  case cJSON_String: jsonrpc_print_string(out, item->valuestring); return 0;
  case cJSON_Raw:
    if (item->valuestring == NULL) return -EINVAL;
    buf_append_str(out, item->valuestring);
    return 0;
  case cJSON_Array:
  case cJSON_Object: {
    bool object = (item->type & 0xFF) == cJSON_Object;
    buf_append_byte(out, object ? '{' : '[');
    for (const cJSON *e = item->child; e != NULL; e = e->next) {
      if (object) {
        jsonrpc_print_string(out, e->string);
        buf_append_byte(out, ':');
      }
      int rc = jsonrpc_print(out, e);
      if (rc < 0) return rc;
      if (e->next != NULL) buf_append_byte(out, ',');
    }
    buf_append_byte(out, object ? '}' : ']');
    return 0;
  }
  default: return -EINVAL;
  }
}
