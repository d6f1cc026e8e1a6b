/*
 * Single-valued request header fields (see http_fields.h): a short fixed
 * list compared case-insensitively, on every header of every request.
 */
#include "common/http_fields.h"

#include <string.h>
#include <strings.h>

#define FIELD(n)                                                                                   \
  { n, sizeof(n) - 1 }
/* With their lengths: compared on every header of every request, most differ in length. */
static const struct {
  const char *name;
  size_t len;
} http_fields_single[HTTP_FIELDS_SINGLE] = {
    FIELD("mcp-session-id"), FIELD("mcp-protocol-version"), FIELD("content-length"),
    FIELD("host"),           FIELD("authorization"),        FIELD("origin"),
    FIELD("last-event-id"),  FIELD("content-type"),
};
#undef FIELD

int http_field_single_index(const char *name, size_t len) {
  for (int i = 0; i < HTTP_FIELDS_SINGLE; i++)
    if (http_fields_single[i].len == len && strncasecmp(http_fields_single[i].name, name, len) == 0)
      return i;
  return -1;
}

const char *http_field_single_name(int i) {
  return i >= 0 && i < HTTP_FIELDS_SINGLE ? http_fields_single[i].name : "";
}
