/*
 * libFuzzer target: the control socket's lines (master/control.h), as
 * mcpsubctl or anyone able to reach the socket sends them: JSON lines
 * bounded by CONTROL_MAX_LINE, each answered (here by a handler that
 * echoes the command) or refused, and the connection always released.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "fuzz_loop.h"
#include "master/control.h"

static int open_conns;

static void handler(control_request_t *r, const cJSON *req, void *data) {
  cJSON *reply = cJSON_CreateObject();
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
  cJSON_AddStringToObject(reply, "cmd", cJSON_IsString(cmd) ? cmd->valuestring : "?");
  control_answer(r, reply);
}

static bool peer_open(void *fdp) {
  char c;
  ssize_t n = recv(*(int *)fdp, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n != 0; /* 0: EOF, the server closed its end */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uv_loop_t loop;
  static char path[108];
  static control_server_t *srv;
  if (srv == NULL) {
    uv_loop_init(&loop);
    snprintf(path, sizeof(path), "/tmp/mcpsub-fuzz-control-%d.sock", (int)getpid());
    char err[256];
    if (control_server_start(&loop, path, handler, NULL, &srv, err, sizeof(err)) != 0) abort();
  }
  (void)open_conns;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) abort();
  fcntl(fd, F_SETFL, O_NONBLOCK);
  size_t off = 0;
  uint64_t deadline = uv_hrtime() + 2000000000ull;
  while (off < size) { /* the server reads while we write */
    ssize_t n = write(fd, data + off, size - off);
    if (n > 0) off += (size_t)n;
    if (n < 0 && peer_open(&fd) == false) break;
    uv_run(&loop, UV_RUN_NOWAIT);
    fuzz_drain(fd);
    if (uv_hrtime() > deadline) abort();
  }
  shutdown(fd, SHUT_WR);
  fuzz_run_until(&loop, fd, peer_open, &fd);
  close(fd);
  uv_run(&loop, UV_RUN_NOWAIT);
  return 0;
}
