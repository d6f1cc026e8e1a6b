/*
 * JSON-RPC 2.0 message classification and replies, over cJSON. Pure: no
 * I/O. The JSON depth check runs on the raw text before cJSON parses it,
 * so a peer cannot make the parser recurse deeply.
 */
#ifndef MCPSUB_JSONRPC_H
#define MCPSUB_JSONRPC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define JSONRPC_PARSE_ERROR      -32700
#define JSONRPC_INVALID_REQUEST  -32600
#define JSONRPC_METHOD_NOT_FOUND -32601
#define JSONRPC_INVALID_PARAMS   -32602
#define JSONRPC_INTERNAL_ERROR   -32603
/* MCP: a protocol version the server does not speak (HTTP 400, data {supported, requested}). */
#define MCP_UNSUPPORTED_VERSION -32022
/* MCP 2026-07-28: a standard header missing or disagreeing with the body (HTTP 400). */
#define MCP_HEADER_MISMATCH    -32020
#define MCP_SESSION_NOT_FOUND  -32001
#define MCP_RESOURCE_NOT_FOUND -32002

#define JSONRPC_MAX_DEPTH 64

typedef enum jsonrpc_kind {
  JSONRPC_INVALID = 0,
  JSONRPC_REQUEST,      /* method + id */
  JSONRPC_NOTIFICATION, /* method, no id */
  JSONRPC_RESPONSE,     /* result or error + id */
} jsonrpc_kind;

/*
 * True when the nesting of arrays and objects in text (outside strings)
 * never exceeds max_depth. Does not validate the JSON otherwise.
 */
bool jsonrpc_depth_ok(const char *text, size_t len, int max_depth);
/*
 * False when a string in the JSON text holds U+0000 (the escape \u0000, or
 * a raw NUL byte): cJSON's strings end at a NUL, so such a string (an id, a
 * record value) would be read cut short. Callers refuse the message.
 */
bool jsonrpc_strings_ok(const char *text, size_t len);
/*
 * cJSON reads every number as a double, which holds an integer exactly
 * only up to 2^53. Given the text cJSON parsed into root, gives every
 * integer literal beyond +-2^53 in the n subtrees within (parts of root,
 * none inside another, in the text's order; or root itself) as a raw item
 * of its digits (cJSON_IsRaw), so that it is stored and compared exactly:
 * a row's value written (store.h), a row image's (store_audit_row_images).
 * One pass over the text, however many parts (none of them NULL).
 */
void jsonrpc_exact_integers(const char *text, size_t len, cJSON *root, const cJSON *const *within,
                            size_t n);
/* cJSON_ParseWithLength, then jsonrpc_exact_integers over the whole tree. */
cJSON *jsonrpc_parse_exact(const char *text, size_t len);
/* Does a double (a JSON number, as cJSON reads one) hold the integer v exactly: |v| <= 2^53? */
static inline bool jsonrpc_int_exact(int64_t v) {
  return v >= -(INT64_C(1) << 53) && v <= (INT64_C(1) << 53);
}
/*
 * Is v such a raw integer (jsonrpc_exact_integers)? Then *in_range says
 * whether it is within 64 bits, and *i is it then (either may be NULL).
 */
bool jsonrpc_raw_integer(const cJSON *v, int64_t *i, bool *in_range);
/* A string's text, or such a raw integer's digits; NULL for any other item (and for NULL). */
const char *jsonrpc_text(const cJSON *v);

/*
 * Classifies one parsed message. On JSONRPC_INVALID, *why (if not NULL) is
 * set to a static explanation. An id must be a string or an integer
 * (MCP forbids null ids); params, when present, must be an object or array.
 */
jsonrpc_kind jsonrpc_classify(const cJSON *msg, const char **why);

/* A message's members (each the first of its name), NULL where absent. */
typedef struct jsonrpc_members {
  const cJSON *id, *method, *params;
} jsonrpc_members;

/* jsonrpc_classify that also says where the members are (found in the same walk). */
jsonrpc_kind jsonrpc_classify_members(const cJSON *msg, const char **why, jsonrpc_members *out);

/*
 * Appends item (and what it holds, not its siblings) to out as
 * cJSON_PrintUnformatted prints it, without its intermediate buffers;
 * integers are formatted without printf. But a number is printed with the
 * fewest digits (15 to 17) that read back as the same double: cJSON
 * prints 15 whenever they come within a rounding error of it, so 0.1 +
 * 0.2 as 0.3 and 2^53 as 9.00719925474099e+15. 0, or -EINVAL for what
 * cJSON cannot print either (an invalid item, a raw item without text);
 * out then holds a partial text the caller discards.
 */
int jsonrpc_print(buf_t *out, const cJSON *item) __attribute__((warn_unused_result));
/* jsonrpc_print's text, allocated (free it), or NULL for an item it cannot print. */
char *jsonrpc_print_text(const cJSON *item);

/*
 * A raw item (printed as it is) holding text, which it now owns: text must
 * be one valid JSON value from malloc (buf_steal). For what a hot path
 * prints itself instead of building a tree of items only to print it.
 */
cJSON *jsonrpc_raw(char *text);

/* Builds {"jsonrpc":"2.0","id":id,"result":result}; takes ownership of result. id may be NULL (->
 * null). */
cJSON *jsonrpc_result(const cJSON *id, cJSON *result);
/*
 * Appends {"jsonrpc":"2.0","id":id,"result":result} to out, result being
 * the text of one JSON value printed already: jsonrpc_result without a
 * tree (id NULL -> null). 0, or jsonrpc_print's -EINVAL for the id.
 */
int jsonrpc_print_result(buf_t *out, const cJSON *id, const char *result, size_t len)
    __attribute__((warn_unused_result));
/* Builds {"jsonrpc":"2.0","id":id,"error":{"code":..,"message":..}}; id may be NULL (-> null). */
cJSON *jsonrpc_error(const cJSON *id, int code, const char *message);
/* Builds a notification {"jsonrpc":"2.0","method":m,"params":p}; takes ownership of params (may be
 * NULL). */
cJSON *jsonrpc_notification(const char *method, cJSON *params);

#endif
