/*
 * The client side of mcpsubd's control socket: connect to a unix stream
 * socket, write one JSON object on one line, read one JSON object line
 * back. One connection per request keeps the protocol stateless. Every
 * step shares one deadline, so a wedged server costs at most the timeout;
 * the answer's size is bounded so a confused peer cannot grow us without
 * limit. A missing socket or a refused connection means "not running",
 * which callers may turn into a fallback on the database.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/mem.h"
#include "ctl.h"

/* The largest answer accepted: a session list of a big server fits easily. */
#define CTL_CONTROL_MAX_REPLY (64u << 20)

static int64_t ctl_monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until deadline: 0, -ETIMEDOUT or -errno. */
static int ctl_wait(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - ctl_monotonic_ms();
    if (left <= 0) return -ETIMEDOUT;
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, (int)left);
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return -errno;
  }
}

/* Connects fd (non-blocking) to addr; a full backlog is retried until deadline. */
static int ctl_connect(int fd, const struct sockaddr_un *addr, int64_t deadline) {
  for (;;) {
    if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0) return 0;
    if (errno == EINTR) continue;
    if (errno == EINPROGRESS) {
      int rc = ctl_wait(fd, POLLOUT, deadline);
      if (rc < 0) return rc;
      int soerr = 0;
      socklen_t len = sizeof(soerr);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) return -errno;
      return -soerr;
    }
    if (errno != EAGAIN) return -errno;
    if (ctl_monotonic_ms() >= deadline) return -ETIMEDOUT;
    poll(NULL, 0, 10);
  }
}

static int ctl_send_all(int fd, const char *data, size_t len, int64_t deadline) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      len -= (size_t)n;
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      int rc = ctl_wait(fd, POLLOUT, deadline);
      if (rc < 0) return rc;
    } else
      return n < 0 ? -errno : -EPIPE;
  }
  return 0;
}

/* Reads into line until a newline (dropped) or the peer's end: 0 or -errno. */
static int ctl_recv_line(int fd, buf_t *line, int64_t deadline) {
  for (;;) {
    char chunk[16384];
    ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      const char *nl = memchr(chunk, '\n', (size_t)n);
      buf_append(line, chunk, nl != NULL ? (size_t)(nl - chunk) : (size_t)n);
      if (nl != NULL) return 0;
      if (line->len > CTL_CONTROL_MAX_REPLY) return -EMSGSIZE;
    } else if (n == 0) {
      return line->len > 0 ? 0 : -ECONNRESET;
    } else if (errno == EAGAIN || errno == EINTR) {
      int rc = ctl_wait(fd, POLLIN, deadline);
      if (rc < 0) return rc;
    } else
      return -errno;
  }
}

static int ctl_exchange(int fd, const struct sockaddr_un *addr, const cJSON *request,
                        int timeout_ms, buf_t *line) {
  int64_t deadline = ctl_monotonic_ms() + timeout_ms;
  int rc = ctl_connect(fd, addr, deadline);
  if (rc < 0) return rc;
  char *text = cJSON_PrintUnformatted(request);
  if (text == NULL) return -ENOMEM;
  buf_t out;
  buf_init(&out);
  buf_append_str(&out, text);
  buf_append(&out, "\n", 1);
  cJSON_free(text);
  rc = ctl_send_all(fd, out.data, out.len, deadline);
  buf_finish(&out);
  if (rc < 0) return rc;
  return ctl_recv_line(fd, line, deadline);
}

int ctl_control_call(const char *path, const cJSON *request, int timeout_ms, cJSON **reply,
                     char *err, size_t errlen) {
  *reply = NULL;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(addr.sun_path)) {
    snprintf(err, errlen, "control socket path too long (%zu bytes at most): %s",
             sizeof(addr.sun_path) - 1, path);
    return -ENAMETOOLONG;
  }
  memcpy(addr.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    int rc = -errno;
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return rc;
  }
  buf_t line;
  buf_init(&line);
  int rc = ctl_exchange(fd, &addr, request, timeout_ms, &line);
  close(fd);
  if (rc == -ETIMEDOUT) {
    snprintf(err, errlen, "no answer from mcpsubd on %s within %d ms", path, timeout_ms);
  } else if (rc == -ECONNRESET) {
    snprintf(err, errlen, "mcpsubd closed the control connection on %s without answering", path);
  } else if (rc < 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(-rc));
  } else {
    *reply = cJSON_ParseWithLength(line.data, line.len);
    if (!cJSON_IsObject(*reply)) {
      cJSON_Delete(*reply);
      *reply = NULL;
      snprintf(err, errlen, "the answer on %s is not a JSON object", path);
      rc = -EPROTO;
    }
  }
  buf_finish(&line);
  return rc;
}

int ctl_not_running(const ctl_context *ctx) {
  ctl_error("mcpsubd is not running (no control socket at %s)", ctx->control_path);
  return CTL_EXIT_NOT_RUNNING;
}

/*
 * Turns an "ok": false answer into an exit status: an unknown session is
 * left to the caller to report (it may be no error to it); anything else is
 * said here.
 */
static int ctl_server_refused(const cJSON *reply, const char *cmd) {
  const cJSON *error = cJSON_GetObjectItemCaseSensitive(reply, "error");
  const char *msg = cJSON_IsString(error) ? error->valuestring : "request refused";
  if (strcmp(msg, "unknown session") == 0) return CTL_EXIT_UNKNOWN_SESSION;
  ctl_error("mcpsubd refused '%s': %s", cmd, msg);
  return CTL_EXIT_ERROR;
}

int ctl_server_request(ctl_context *ctx, const char *cmd, const char *key, const char *value,
                       cJSON **reply) {
  cJSON *request = cJSON_CreateObject();
  cJSON_AddStringToObject(request, "cmd", cmd);
  if (key != NULL) cJSON_AddStringToObject(request, key, value);
  int rc = ctl_server_call(ctx, request, reply);
  cJSON_Delete(request);
  return rc;
}

int ctl_server_call(ctl_context *ctx, const cJSON *request, cJSON **reply) {
  const char *cmd = cJSON_GetObjectItemCaseSensitive(request, "cmd")->valuestring;
  char err[512];
  int rc =
      ctl_control_call(ctx->control_path, request, CTL_CONTROL_TIMEOUT_MS, reply, err, sizeof(err));
  if (rc == -ENOENT || rc == -ECONNREFUSED)
    return ctx->server_required ? ctl_not_running(ctx) : CTL_SERVER_DOWN;
  if (rc < 0) {
    ctl_error("%s", err);
    return CTL_EXIT_ERROR;
  }
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(*reply, "ok"))) {
    rc = ctl_server_refused(*reply, cmd);
    cJSON_Delete(*reply);
    *reply = NULL;
    return rc;
  }
  const cJSON *unanswered = cJSON_GetObjectItemCaseSensitive(*reply, "unanswered"), *slot;
  if (cJSON_GetArraySize(unanswered) > 0) { /* said, not fatal: the rest is still true */
    fputs("mcpsubctl: warning: no answer in time from worker", stderr);
    cJSON_ArrayForEach(slot, unanswered) fprintf(stderr, " %.0f", slot->valuedouble);
    fputs(": this is incomplete\n", stderr);
  }
  return 0;
}
