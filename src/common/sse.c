/*
 * Server-Sent Events framing for the GET /mcp stream and streamed POST
 * replies. Pure: it appends wire bytes to a buffer and never writes to a
 * socket. The one thing it must guarantee is that no content can break
 * the framing: a payload's line breaks (LF, CRLF or a lone CR — all three
 * end a line for an EventSource parser) become separate "data:" lines,
 * and id / event values lose any CR or LF, so a frame can neither be
 * split nor gain injected fields.
 */
#include "common/sse.h"

#include <string.h>

/* Appends s without its CR and LF bytes (those would end the field). */
static void sse_append_field_value(buf_t *out, const char *s) {
  size_t len = strlen(s);
  size_t run = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '\r' || s[i] == '\n') {
      buf_append(out, s + run, i - run);
      run = i + 1;
    }
  }
  buf_append(out, s + run, len - run);
}

/*
 * Appends text[0..len) as one "<prefix><line>\n" per line, splitting on
 * LF, CRLF and CR. An empty text, or a trailing line break, yields an
 * empty last line, so the receiver reassembles exactly the same text
 * (with LF line breaks).
 */
static void sse_append_lines(buf_t *out, const char *prefix, const char *text, size_t len) {
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && text[i] != '\r' && text[i] != '\n') continue;
    buf_append_str(out, prefix);
    buf_append(out, text + start, i - start);
    buf_append(out, "\n", 1);
    if (i < len && text[i] == '\r' && i + 1 < len && text[i + 1] == '\n') i++;
    start = i + 1;
  }
}

/*
 * Appends one event: "id: <id>\n" (when id is not NULL), "event: <event>\n"
 * (when event is not NULL), a "data: " line per payload line, and the
 * blank line that dispatches it. data may be NULL when len is 0.
 */
void sse_format_event(buf_t *out, const char *id, const char *event, const char *data, size_t len) {
  if (id) {
    buf_append_str(out, "id: ");
    sse_append_field_value(out, id);
    buf_append(out, "\n", 1);
  }
  if (event) {
    buf_append_str(out, "event: ");
    sse_append_field_value(out, event);
    buf_append(out, "\n", 1);
  }
  sse_append_lines(out, "data: ", data ? data : "", data ? len : 0);
  buf_append(out, "\n", 1);
}

/* Appends "retry: <ms>\n\n": the client's reconnection delay. */
void sse_format_retry(buf_t *out, unsigned ms) {
  buf_printf(out, "retry: %u\n\n", ms);
}

/*
 * Appends a comment ": <text>\n\n" (ignored by clients; keeps proxies from
 * timing out). A multi-line text becomes one ": " line per line; NULL is
 * treated as "".
 */
void sse_format_comment(buf_t *out, const char *text) {
  if (text == NULL) text = "";
  sse_append_lines(out, ": ", text, strlen(text));
  buf_append(out, "\n", 1);
}
