/*
 * Server-Sent Events framing (WHATWG HTML, "event stream"). Pure: appends
 * wire bytes to a buffer. A data payload with newlines becomes several
 * "data:" lines so that no frame can be split or injected by its content.
 */
#ifndef MCPSUB_SSE_H
#define MCPSUB_SSE_H

#include <stddef.h>

#include "common/buf.h"

/* id: <id>\n[event: <event>\n]data: ...\n\n. event may be NULL. id may be NULL (no id line). */
void sse_format_event(buf_t *out, const char *id, const char *event, const char *data, size_t len);
/* retry: <ms>\n\n */
void sse_format_retry(buf_t *out, unsigned ms);
/* : <text>\n\n (a comment; keeps proxies and clients from timing out) */
void sse_format_comment(buf_t *out, const char *text);

#endif
