/*
 * HTTP/1.1 server connections on libuv + llhttp. Keep-alive, chunked and
 * Content-Length bodies, pipelined requests answered strictly in order (a
 * connection handles one request at a time; later bytes wait in its input
 * buffer). Every input is bounded here, before anything above sees it:
 *   header block over max_header        -> 431, close
 *   body over max_body                  -> 413, close
 *   header block not complete in time   -> 408, close
 *   bytes llhttp rejects                -> 400, close
 * A connection's memory is its input buffer (bounded by max_header +
 * max_body + one read) and its output queue (bounded for streams by
 * max_stream_queue).
 *
 * Lifetime: the server owns its connections. A request handed to the
 * callback stays valid until its response is complete (http_respond, or
 * http_stream_end for streams, or the connection closes — see
 * http_conn_set_close_cb). Connections are freed only from their libuv close
 * callback, never from inside one of their own callbacks.
 */
#ifndef MCPSUB_HTTP_H
#define MCPSUB_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/mem.h"

typedef struct http_server http_server_t;
typedef struct http_conn http_conn_t;

typedef struct http_header {
  const char *name;  /* in requests: lowercased */
  const char *value; /* in requests: leading/trailing whitespace trimmed */
} http_header;

typedef struct http_request {
  int method;              /* llhttp_method_t (HTTP_GET, HTTP_POST, ...) */
  const char *method_name; /* "GET", ... */
  char *target;            /* raw request-target */
  char *path;              /* target up to '?', not decoded */
  char *query;             /* after '?', not decoded, or NULL */
  http_header *headers;
  size_t n_headers;
  char *body; /* NUL-terminated; "" when none; the connection's until the answer */
  size_t body_len;
  bool keep_alive; /* false when the client asked to close or spoke HTTP/1.0 without keep-alive */
} http_request_t;

/* Value of the first header named lname (lowercase), or NULL. */
const char *http_request_header(const http_request_t *req, const char *lname);

typedef void (*http_request_cb)(http_conn_t *c, http_request_t *req, void *data);

/* A size or header timeout left at 0 takes the default (16 KiB header,
 * 4 MiB body, 10 s header timeout, 1 MiB stream queue). header_timeout_ms
 * also bounds silence in the middle of a body. */
typedef struct http_server_options {
  size_t max_header;          /* bytes of request line + headers; 16 KiB */
  size_t max_body;            /* bytes of decoded body */
  uint64_t header_timeout_ms; /* from first byte of a request (or connect) to end of headers */
  uint64_t keepalive_idle_ms; /* an idle kept-alive connection is closed after this (0 = never) */
  size_t max_stream_queue;    /* queued bytes allowed on a stream before it is cut */
  size_t max_connections;     /* open connections (0 = no bound): over it, a short 503 and close */
  size_t max_per_address;     /* open connections from one client address (0 = no bound) */
  /*
   * Called when a request is answered (its response's head queued, or its
   * stream begun), with the label its handler gave it (http_conn_set_label;
   * -1 when none) and the nanoseconds since it was complete. May be NULL.
   */
  void (*on_answered)(void *data, int label, uint64_t ns);
} http_server_options;

/* Creates a server on loop; cb is called once per complete request. */
http_server_t *http_server_create(uv_loop_t *loop, const http_server_options *opts,
                                  http_request_cb cb, void *data);
/* Binds and listens on host:port (IPv4 or IPv6 literal). 0 or -errno (uv error). */
int http_server_listen(http_server_t *srv, const char *host, int port) MCPSUB_NODISCARD;
/*
 * Takes an accepted socket and the bytes already read from it (copied), as
 * if they had just arrived. The fd is owned by the server from here on,
 * even on failure (it is closed). 0 or -errno.
 */
int http_server_adopt(http_server_t *srv, uv_os_sock_t fd, const char *bytes,
                      size_t n) MCPSUB_NODISCARD;
/* Flags of http_server_adopt_flags. */
#define HTTP_ADOPT_REROUTED                                                                        \
  0x1u /* the first request was already routed once: do not hand it back */

/*
 * http_server_adopt, with flags that apply to the first request read from
 * the connection (see http_conn_request_flags).
 */
int http_server_adopt_flags(http_server_t *srv, uv_os_sock_t fd, const char *bytes, size_t n,
                            unsigned flags) MCPSUB_NODISCARD;
/*
 * Graceful stop: closes the listener, closes connections with no complete
 * request header received (idle kept-alive ones, half-sent headers), and
 * from now on closes every
 * connection after its current response. Streams are left to their owners.
 * Adopted connections are still served (one request each).
 */
void http_server_drain(http_server_t *srv);
/* Stops listening and closes every connection; done(data) runs once all are freed. */
void http_server_close(http_server_t *srv, void (*done)(void *data), void *data);
/* Frees the server after http_server_close completed. NULL is a no-op. */
void http_server_destroy(http_server_t *srv);
/* Number of open connections. */
size_t http_server_connections(const http_server_t *srv);
/* Connections refused (503) for passing max_connections or max_per_address. */
uint64_t http_server_refused(const http_server_t *srv);
/* The port the listener is bound to (useful after listening on port 0), or -errno. */
int http_server_port(const http_server_t *srv);

/*
 * Sends one complete response to the current request. Adds Content-Length
 * and, when the request asked to close, "Connection: close". body is copied.
 * After it returns, req is gone; the next pipelined request (if any) is
 * dispatched from a later loop turn.
 */
void http_respond(http_conn_t *c, int status, const http_header *headers, size_t n_headers,
                  const char *body, size_t body_len);

/*
 * Starts a streamed response (SSE): status line and headers, no length;
 * the connection is dedicated to it and reads no further requests (bytes a
 * peer sends are discarded; EOF closes the stream). The request is freed
 * here: copy what is still needed from it before.
 */
void http_stream_begin(http_conn_t *c, int status, const http_header *headers, size_t n_headers);
/* http_stream_begin for Server-Sent Events: 200, text/event-stream, no caching or proxy buffering.
 */
void http_stream_begin_sse(http_conn_t *c);
/*
 * Queues bytes on a stream (copied). Returns 0, or -ENOBUFS when the queue
 * would pass max_stream_queue: the stream is then closed (its close callback
 * runs later) and the bytes dropped. -EPIPE when the stream is closing.
 */
int http_stream_write(http_conn_t *c, const char *data, size_t len) MCPSUB_NODISCARD;
/* Starts loading what a stream write reads (a hint: it changes nothing). */
void http_stream_prefetch(const http_conn_t *c);
/*
 * The same with the bytes in pieces, queued in order as one write; len is
 * their total, which a caller has at hand (summing it here would read back
 * the pieces just stored, as wide loads the CPU cannot forward from them).
 */
int http_stream_writev(http_conn_t *c, const uv_buf_t *bufs, size_t n, size_t len) MCPSUB_NODISCARD;
/*
 * http_stream_writev without the write at the turn's end: the caller hands
 * the bytes over itself (http_stream_offer) once it has appended all that
 * goes together, while they are still in the cache.
 */
int http_stream_append(http_conn_t *c, const uv_buf_t *bufs, size_t n, size_t len) MCPSUB_NODISCARD;
/*
 * While exempt, http_stream_write does not apply max_stream_queue: for a
 * replay whose size the caller bounds (a resumption must not be cut by the
 * very backlog it is sending, or the client could never catch up).
 */
void http_stream_exempt(http_conn_t *c, bool exempt);
/*
 * Hands what the stream queued this turn to the kernel now instead of at
 * the end of the loop turn (used to order a stream's bytes before another
 * connection's response).
 */
void http_stream_flush(http_conn_t *c);
/*
 * Offers what the stream holds to its socket now, as the turn's end would:
 * while a write is in flight, the bytes wait for it and go when it is done
 * (unlike http_stream_flush, which queues a second write behind it).
 */
void http_stream_offer(http_conn_t *c);
/* Would the stream take len more bytes (open, and within --max-stream-queue)? */
bool http_stream_takes(const http_conn_t *c, size_t len);
/*
 * http_stream_append of bytes the caller puts together in place: room for
 * len more at the end of a stream that takes them (http_stream_takes),
 * which the caller fills, all of it, before anything else writes to the
 * stream; handed over as after http_stream_append.
 */
char *http_stream_extend(http_conn_t *c, size_t len);
/*
 * Hands len bytes, which the caller keeps, to a stream that takes them
 * (http_stream_takes): with nothing queued or in flight ahead of them,
 * straight to the socket, copying only what it leaves (queued as
 * http_stream_offer would); else behind what is queued. Many streams can
 * be sent the same bytes, from one buffer that stays in the cache.
 */
void http_stream_send(http_conn_t *c, const char *data, size_t len);
/* Flushes what is queued, then closes the connection. */
void http_stream_end(http_conn_t *c);
/*
 * Runs fn(data) once at the end of the next idle callback, after every
 * connection's deferred work of that turn (its responses written first).
 * One hook: a second call before it runs replaces the first.
 */
void http_server_at_turn_end(http_server_t *srv, void (*fn)(void *data), void *data);
/* Labels the request in hand for on_answered (a method, a kind of request). */
void http_conn_set_label(http_conn_t *c, int label);
/* Has the connection's response become a stream (http_stream_begin)? */
bool http_conn_streaming(const http_conn_t *c);
/* Bytes queued and not yet written by the kernel. */
size_t http_conn_queued(const http_conn_t *c);

/*
 * cb(c, data) runs once when the connection closes for any reason (peer
 * gone, error, limit, server close, http_stream_end). After it, c is
 * invalid. Used by a stream's owner to detach; set NULL to clear. A
 * request held by its owner (dispatched, not yet answered) with a close
 * callback is closed as soon as the peer shuts down its side: the owner of
 * a long poll learns at once that nobody waits for the answer.
 * Without a close callback, a connection whose request (or stream) the
 * owner still holds stays allocated after it closed, until the owner's
 * http_respond or http_stream_end, which then only frees it.
 */
void http_conn_set_close_cb(http_conn_t *c, void (*cb)(http_conn_t *c, void *data), void *data);

/* The adopt flags of the request in hand (first request after an adopt), else 0. */
unsigned http_conn_request_flags(const http_conn_t *c);

/*
 * Hands the connection of the request in hand to someone else (another
 * process): re-serialises that request (method, target, its HTTP version,
 * headers, a Content-Length for the decoded body, the body) into bytes,
 * followed by the input already buffered after it, sets *fd to a
 * close-on-exec duplicate of the socket (the caller owns it), and closes c
 * without answering and without a FIN (the duplicate keeps the TCP
 * connection alive). After 0, c and the request are gone.
 * Fails without touching c: -E2BIG when bytes would pass max_bytes,
 * -EAGAIN while an earlier response is not yet all in the kernel,
 * -EINVAL when no request is held, or -errno.
 */
int http_conn_detach(http_conn_t *c, size_t max_bytes, uv_os_sock_t *fd,
                     buf_t *bytes) MCPSUB_NODISCARD;

/* Reason phrase for a status code ("OK", "Not Found", ...). */
const char *http_status_text(int status);

#endif
