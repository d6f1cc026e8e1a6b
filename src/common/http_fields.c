/*
 * Single-valued request header fields (see http_fields.h): a short fixed
 * list compared case-insensitively, on every header of every request.
 */
#include "common/http_fields.h"

#include <string.h>
#include <strings.h>

static const char *const http_fields_single[HTTP_FIELDS_SINGLE] = {
    "mcp-session-id", "mcp-protocol-version", "content-length", "host", "authorization",
    "origin",         "last-event-id",        "content-type",
};

int http_field_single_index(const char *name, size_t len) {
  for (int i = 0; i < HTTP_FIELDS_SINGLE; i++) {
    const char *f = http_fields_single[i];
    if (strlen(f) == len && strncasecmp(f, name, len) == 0) return i;
  }
  return -1;
}

const char *http_field_single_name(int i) {
  return i >= 0 && i < HTTP_FIELDS_SINGLE ? http_fields_single[i] : "";
}
