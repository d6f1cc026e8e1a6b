/*
 * libFuzzer target: JSON-RPC validation and dispatch at /mcp, through a
 * real worker (worker/worker.h) on a SQLite database in a temporary
 * directory with the example schema: the store is real, not a fake, so
 * that every method handler (resources, tools with writes, subscribe,
 * wait_and_read, logging) meets what it meets in production. The input is
 * the body of a POST for a session made at start; every request must be
 * answered and its connection freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "fuzz_loop.h"
#include "worker/worker.h"

static worker_t w;
static uv_loop_t loop;
static char session[64];

static bool any_open(void *data) {
  return http_server_connections(w.http) > 0;
}

/* Sends one request (head and body) and returns what came back (caller frees). */
static char *exchange(const char *head, const uint8_t *body, size_t len) {
  int sv[2];
  fuzz_socketpair(sv);
  size_t hl = strlen(head);
  char *bytes = malloc(hl + len + 1);
  memcpy(bytes, head, hl);
  memcpy(bytes + hl, body, len);
  if (http_server_adopt(w.http, sv[0], bytes, hl + len) != 0) abort();
  free(bytes);
  shutdown(sv[1], SHUT_WR);
  /* Keep what comes back (only the first exchange needs it: the session id). */
  static char reply[65536];
  size_t got = 0;
  uint64_t deadline = uv_hrtime() + 3000000000ull;
  while (any_open(NULL)) {
    uv_run(&loop, UV_RUN_NOWAIT);
    ssize_t n = read(sv[1], reply + got, sizeof(reply) - 1 - got);
    if (n > 0) got += (size_t)n;
    if (got == sizeof(reply) - 1) got = 0; /* only the start matters */
    if (uv_hrtime() > deadline) abort();
  }
  ssize_t n;
  while ((n = read(sv[1], reply + got, sizeof(reply) - 1 - got)) > 0) got += (size_t)n;
  reply[got] = '\0';
  close(sv[1]);
  return strdup(reply);
}

static void setup(void) {
  char dir[] = "/tmp/mcpsub-fuzz-mcp-XXXXXX";
  if (mkdtemp(dir) == NULL) abort();
  static char db[256];
  snprintf(db, sizeof(db), "%s/fuzz.db", dir);
  static config_t cfg;
  config_defaults(&cfg);
  char *argv[] = {
      "mcpsubd",   "--db", db,           "--schema", MCPSUB_SOURCE_ROOT "/schema/example.sql",
      "--workers", "0",    "--max-wait", "1",        "--log-level",
      "error"};
  char err[512];
  if (config_parse(&cfg, (int)(sizeof(argv) / sizeof(argv[0])), argv, stderr, err, sizeof(err)) !=
      0)
    abort();
  log_set_level(LOG_ERROR);
  uv_loop_init(&loop);
  if (worker_init(&w, &loop, &cfg, 0, err, sizeof(err)) != 0) abort();
  static const char init[] =
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
      "\"2025-03-26\",\"capabilities\":{},\"clientInfo\":{\"name\":\"fuzz\",\"version\":\"1\"}}}";
  char head[512];
  snprintf(head, sizeof(head),
           "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, "
           "text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
           sizeof(init) - 1);
  char *reply = exchange(head, (const uint8_t *)init, sizeof(init) - 1);
  const char *h = strstr(reply, "Mcp-Session-Id: ");
  if (h == NULL) abort();
  snprintf(session, sizeof(session), "%.34s", h + 16);
  free(reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 65536) return 0;
  if (session[0] == '\0') setup();
  char head[512];
  snprintf(head, sizeof(head),
           "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, "
           "text/event-stream\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\n"
           "MCP-Protocol-Version: 2025-03-26\r\nContent-Length: %zu\r\n\r\n",
           session, size);
  free(exchange(head, data, size));
  return 0;
}
