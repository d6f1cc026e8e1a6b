/*
 * libFuzzer target: the HTTP/1.1 layer (worker/http.h) through llhttp with
 * our bounds (small ones, so that they are met: 1 KiB of head, 4 KiB of
 * body): whatever arrives, every connection is answered or closed and
 * freed (ASan), never left open.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz_loop.h"
#include "worker/http.h"

static void on_request(http_conn_t *c, http_request_t *req, void *data) {
  static const http_header h = {"Content-Type", "text/plain"};
  const char *body = req->body_len > 0 ? "body" : "ok";
  http_respond(c, strcmp(req->path, "/404") == 0 ? 404 : 200, &h, 1, body, strlen(body));
}

static bool any_open(void *srv) {
  return http_server_connections(srv) > 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uv_loop_t loop;
  static http_server_t *srv;
  if (srv == NULL) {
    uv_loop_init(&loop);
    http_server_options o = {.max_header = 1024,
                             .max_body = 4096,
                             .header_timeout_ms = 50,
                             .keepalive_idle_ms = 50,
                             .max_stream_queue = 65536};
    srv = http_server_create(&loop, &o, on_request, NULL);
  }
  int sv[2];
  fuzz_socketpair(sv);
  if (http_server_adopt(srv, sv[0], (const char *)data, size) != 0) abort();
  shutdown(sv[1], SHUT_WR);
  fuzz_run_until(&loop, sv[1], any_open, srv);
  close(sv[1]);
  return 0;
}
