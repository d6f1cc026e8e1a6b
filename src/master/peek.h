/*
 * The master's look at a connection's first request: just enough of the
 * header block to route it (the Mcp-Session-Id header) and to answer the
 * few requests the master serves itself (GET /status and /metrics). It is
 * not an HTTP parser: the worker that takes the connection parses (and
 * validates) the request again with llhttp. Pure functions on a buffer;
 * peer input is bounded by max_header.
 */
#ifndef MCPSUB_PEEK_H
#define MCPSUB_PEEK_H

#include <stdbool.h>
#include <stddef.h>

#include "common/mem.h"
#include "common/session_id.h"

#define PEEK_MAX_PATH  64
#define PEEK_MAX_FIELD 256

typedef struct peek_request {
  size_t head_len;                     /* bytes of request line and headers, blank line included */
  char method[16];                     /* "" when the request line is not understood */
  char path[PEEK_MAX_PATH];            /* target up to '?'; "" when longer or absent */
  int http_minor;                      /* HTTP/1.x; -1 when not HTTP/1.x */
  char session_id[SESSION_ID_LEN + 1]; /* "" unless a well-formed Mcp-Session-Id */
  bool has_session_header;             /* an Mcp-Session-Id header, well-formed or not */
  bool has_body;                       /* Content-Length other than 0, or Transfer-Encoding */
  bool keep_alive;             /* HTTP/1.1 without "Connection: close", or 1.0 with keep-alive */
  char host[PEEK_MAX_FIELD];   /* Host value, "" when absent */
  char origin[PEEK_MAX_FIELD]; /* Origin value, "" when absent */
  bool has_origin;
  bool oversized_field;  /* Host or Origin longer than PEEK_MAX_FIELD: not looked at */
  const char *duplicate; /* a single-valued field given twice (http_fields.h), or NULL */
} peek_request;

/*
 * Looks for a complete header block at the start of buf (len bytes).
 * Returns 0 and fills *out when one is there (within max_header bytes),
 * -EAGAIN when more bytes are needed, -E2BIG when max_header bytes hold no
 * complete block. A line that is not "Name: value" is skipped, not
 * refused: the worker's parser gives the real answer.
 */
int peek_parse(const char *buf, size_t len, size_t max_header, peek_request *out) MCPSUB_NODISCARD;

#endif
