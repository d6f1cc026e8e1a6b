/*
 * Shared by the loop-driven fuzz targets: hands a byte string to a server
 * as a connection's input (one end of a socketpair, the other end closed
 * for writing after it) and runs the loop until the server has let go of
 * every connection, reading and dropping what it answers. A connection
 * still open after two seconds of loop time is a bug (a leak or a hang):
 * the target aborts.
 */
#ifndef MCPSUB_FUZZ_LOOP_H
#define MCPSUB_FUZZ_LOOP_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

/* Drops what the server wrote; true at EOF. */
static inline bool fuzz_drain(int fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) continue;
    return n == 0;
  }
}

/* A connected pair, both ends non-blocking and close-on-exec. */
static inline void fuzz_socketpair(int sv[2]) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) abort();
}

/* Runs loop until open() is false (polling the peer end fd), at most two seconds. */
static inline void fuzz_run_until(uv_loop_t *loop, int fd, bool (*open)(void *), void *data) {
  uint64_t deadline = uv_hrtime() + 2000000000ull;
  while (open(data)) {
    uv_run(loop, UV_RUN_NOWAIT);
    fuzz_drain(fd);
    if (uv_hrtime() > deadline) abort();
  }
  fuzz_drain(fd);
}

#endif
