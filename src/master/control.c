/*
 * The control socket's transport (see control.h): listening, replacing a
 * stale socket file, JSON-line framing with bounds, answers in request
 * order, and removing the file at exit. It never interprets a command.
 */
#include "master/control.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"

typedef struct control_conn control_conn;

struct control_server {
  uv_loop_t *loop;
  uv_pipe_t listener;
  char *path;
  dev_t dev; /* of the socket file we bound, to remove only our own */
  ino_t ino;
  control_handler handler;
  void *data;
  control_conn *conns;
  size_t n_conns;
  int handles_open;
  bool closing;
};

struct control_conn {
  control_server_t *srv;
  control_conn *prev, *next;
  uv_pipe_t pipe;
  buf_t in;
  control_request_t *busy; /* the request being answered */
  size_t writes;           /* uv_write requests in flight */
  bool peer_eof;
  bool close_after_writes;
  bool closing;
  bool dispatching; /* inside control_conn_dispatch */
  bool reading;
};

struct control_request {
  control_conn *conn; /* NULL once the connection is gone */
};

typedef struct control_write {
  uv_write_t req;
  control_conn *conn;
  char *text;
} control_write;

static void control_conn_dispatch(control_conn *c);
static void control_conn_close(control_conn *c);
static void control_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static void control_conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

/*
 * Reads unless the peer is done, the connection is closing, or a client
 * keeps sending while its request waits (bounded input: it is paused).
 */
static void control_conn_settle(control_conn *c) {
  if (c->closing) return;
  bool want =
      !c->peer_eof && !c->close_after_writes && !(c->busy != NULL && c->in.len > CONTROL_MAX_LINE);
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->pipe, control_conn_on_alloc, control_conn_on_read) < 0) {
      control_conn_close(c);
      return;
    }
  } else if (!want && c->reading) {
    (void)uv_read_stop((uv_stream_t *)&c->pipe);
  }
  c->reading = want;
}

/* ---- connections ---------------------------------------------------------- */

static void control_server_maybe_free(control_server_t *srv) {
  if (srv->closing && srv->handles_open == 0 && srv->n_conns == 0) {
    free(srv->path);
    free(srv);
  }
}

static void control_conn_on_closed(uv_handle_t *h) {
  control_conn *c = h->data;
  control_server_t *srv = c->srv;
  if (c->prev)
    c->prev->next = c->next;
  else
    srv->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  srv->n_conns--;
  buf_finish(&c->in);
  free(c);
  control_server_maybe_free(srv);
}

static void control_conn_close(control_conn *c) {
  if (c->closing) return;
  c->closing = true;
  if (c->busy != NULL) c->busy->conn = NULL; /* its answer will be dropped */
  c->busy = NULL;
  uv_close((uv_handle_t *)&c->pipe, control_conn_on_closed);
}

static void control_conn_on_write(uv_write_t *req, int status) {
  control_write *w = (control_write *)req;
  control_conn *c = w->conn;
  free(w->text);
  free(w);
  c->writes--;
  if (status < 0)
    control_conn_close(c);
  else if (c->close_after_writes && c->writes == 0)
    control_conn_close(c);
}

/* Writes one answer line (takes text, a NUL-terminated JSON text without newline). */
static void control_conn_write_line(control_conn *c, char *text) {
  if (c->closing) {
    free(text);
    return;
  }
  size_t len = strlen(text);
  text[len] = '\n'; /* the NUL becomes the newline; the buffer came from buf_steal with room */
  control_write *w = mem_alloc(sizeof(*w));
  w->conn = c;
  w->text = text;
  uv_buf_t b = uv_buf_init(text, (unsigned)len + 1);
  c->writes++;
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, control_conn_on_write) < 0) {
    c->writes--;
    free(text);
    free(w);
    control_conn_close(c);
  }
}

/* Serialises reply (consumed) with a trailing byte of room for the newline. */
static char *control_render(cJSON *reply) {
  char *json = cJSON_PrintUnformatted(reply);
  cJSON_Delete(reply);
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, json != NULL ? json : "{\"ok\":false,\"error\":\"out of memory\"}");
  cJSON_free(json);
  buf_reserve(&b, 1);
  return buf_steal(&b);
}

static void control_conn_error(control_conn *c, const char *message) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddFalseToObject(r, "ok");
  cJSON_AddStringToObject(r, "error", message);
  control_conn_write_line(c, control_render(r));
}

void control_answer(control_request_t *r, cJSON *reply) {
  control_conn *c = r->conn;
  free(r);
  if (c == NULL) {
    cJSON_Delete(reply);
    return;
  }
  if (cJSON_GetObjectItemCaseSensitive(reply, "ok") == NULL) {
    /* "ok" first, so that it leads the line */
    cJSON *out = cJSON_CreateObject();
    cJSON_AddTrueToObject(out, "ok");
    while (reply->child != NULL) {
      cJSON *item = cJSON_DetachItemViaPointer(reply, reply->child);
      cJSON_AddItemToObject(out, item->string, item);
    }
    cJSON_Delete(reply);
    reply = out;
  }
  c->busy = NULL;
  control_conn_write_line(c, control_render(reply));
  if (!c->dispatching) control_conn_dispatch(c);
}

void control_answer_error(control_request_t *r, const char *message) {
  cJSON *reply = cJSON_CreateObject();
  cJSON_AddFalseToObject(reply, "ok");
  cJSON_AddStringToObject(reply, "error", message);
  control_answer(r, reply);
}

/* Handles one request line (not NUL-terminated). */
static void control_conn_line(control_conn *c, const char *line, size_t n) {
  size_t i = 0;
  while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
  if (i == n) return; /* blank line */
  cJSON *req = cJSON_ParseWithLength(line, n);
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
  if (!cJSON_IsObject(req)) {
    control_conn_error(c, "request is not a JSON object");
  } else if (!cJSON_IsString(cmd)) {
    control_conn_error(c, "request needs a string \"cmd\"");
  } else {
    control_request_t *r = mem_alloc(sizeof(*r));
    r->conn = c;
    c->busy = r;
    c->srv->handler(r, req, c->srv->data);
  }
  cJSON_Delete(req);
}

/*
 * A NUL-terminated copy of exactly n bytes (not mem_strndup, which stops
 * at a NUL byte in the line: the parser is then told n and would read past
 * the copy).
 */
static char *control_copy(const char *line, size_t n) {
  char *copy = mem_alloc(n + 1);
  memcpy(copy, line, n);
  copy[n] = '\0';
  return copy;
}

/* Runs the complete lines in the input, one request at a time. */
static void control_conn_dispatch(control_conn *c) {
  c->dispatching = true;
  while (!c->closing && c->busy == NULL && c->in.len > 0) {
    char *nl = memchr(c->in.data, '\n', c->in.len);
    if (nl == NULL) {
      if (c->in.len > CONTROL_MAX_LINE) {
        control_conn_error(c, "request line too long");
        c->close_after_writes = true;
        buf_reset(&c->in);
        break;
      }
      if (!c->peer_eof) break;
      /* The last line, without its newline. */
      size_t n = c->in.len;
      char *copy = control_copy(c->in.data, n);
      buf_reset(&c->in);
      control_conn_line(c, copy, n);
      free(copy);
      continue;
    }
    size_t n = (size_t)(nl - c->in.data);
    char *copy = control_copy(c->in.data, n);
    buf_consume(&c->in, n + 1);
    if (n > CONTROL_MAX_LINE)
      control_conn_error(c, "request line too long");
    else
      control_conn_line(c, copy, n);
    free(copy);
  }
  c->dispatching = false;
  if (c->closing) return;
  if (c->peer_eof && c->busy == NULL && c->in.len == 0) {
    if (c->writes == 0)
      control_conn_close(c);
    else
      c->close_after_writes = true;
  } else if (c->close_after_writes && c->writes == 0) {
    control_conn_close(c);
  }
  control_conn_settle(c);
}

static void control_conn_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  control_conn *c = h->data;
  buf_reserve(&c->in, 4096);
  *b = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void control_conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
  control_conn *c = s->data;
  if (nread == 0 || c->closing) return;
  if (nread < 0) {
    if (nread != UV_EOF) {
      control_conn_close(c);
      return;
    }
    c->peer_eof = true;
    c->reading = false; /* libuv stopped reading */
  } else {
    c->in.len += (size_t)nread;
    c->in.data[c->in.len] = '\0';
  }
  control_conn_dispatch(c); /* settles reading */
}

static void control_on_connection(uv_stream_t *listener, int status) {
  control_server_t *srv = listener->data;
  if (status < 0 || srv->closing) return;
  control_conn *c = mem_calloc(1, sizeof(*c));
  c->srv = srv;
  buf_init(&c->in);
  if (uv_pipe_init(srv->loop, &c->pipe, 0) < 0) {
    free(c);
    return;
  }
  c->pipe.data = c;
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  srv->n_conns++;
  if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0) {
    control_conn_close(c);
    return;
  }
  if (srv->n_conns > CONTROL_MAX_CONNS) {
    control_conn_error(c, "too many control connections");
    c->close_after_writes = true;
    return;
  }
  control_conn_settle(c);
}

/* ---- the socket file -------------------------------------------------------- */

/* Makes room at path: nothing there, or a socket nobody accepts on (removed). */
static int control_clear_path(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -errno;
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(err, errlen, "%s exists and is not a socket", path);
    return -EEXIST;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  int e = errno;
  close(fd);
  if (rc == 0) {
    snprintf(err, errlen, "another server answers on %s", path);
    return -EADDRINUSE;
  }
  if (e != ECONNREFUSED && e != ENOENT) {
    snprintf(err, errlen, "cannot probe %s: %s", path, strerror(e));
    return -e;
  }
  if (unlink(path) != 0 && errno != ENOENT) return -errno;
  log_info("replaced a stale control socket", "path", path);
  return 0;
}

static void control_on_listener_closed(uv_handle_t *h) {
  control_server_t *srv = h->data;
  srv->handles_open--;
  control_server_maybe_free(srv);
}

int control_server_start(uv_loop_t *loop, const char *path, control_handler handler, void *data,
                         control_server_t **out, char *err, size_t errlen) {
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof(sa.sun_path)) {
    snprintf(err, errlen, "control socket path longer than %zu bytes", sizeof(sa.sun_path) - 1);
    return -ENAMETOOLONG;
  }
  int rc = control_clear_path(path, err, errlen);
  if (rc < 0) {
    if (err[0] == '\0') snprintf(err, errlen, "%s: %s", path, strerror(-rc));
    return rc;
  }
  control_server_t *srv = mem_calloc(1, sizeof(*srv));
  srv->loop = loop;
  srv->handler = handler;
  srv->data = data;
  srv->path = mem_strdup(path);
  if ((rc = uv_pipe_init(loop, &srv->listener, 0)) < 0) {
    free(srv->path);
    free(srv);
    snprintf(err, errlen, "%s", uv_strerror(rc));
    return rc;
  }
  srv->listener.data = srv;
  srv->handles_open = 1;
  mode_t old = umask(0177); /* born 0600: no window in which others may connect */
  rc = uv_pipe_bind(&srv->listener, path);
  umask(old);
  struct stat st;
  if (rc == 0 && stat(path, &st) == 0) {
    srv->dev = st.st_dev;
    srv->ino = st.st_ino;
    if (chmod(path, 0600) != 0) rc = -errno;
  }
  if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->listener, 16, control_on_connection);
  if (rc < 0) {
    snprintf(err, errlen, "%s: %s", path, uv_strerror(rc));
    control_server_close(srv);
    return rc;
  }
  *out = srv;
  return 0;
}

void control_server_close(control_server_t *srv) {
  if (srv == NULL || srv->closing) return;
  srv->closing = true;
  struct stat st;
  if (srv->ino != 0 && stat(srv->path, &st) == 0 && st.st_dev == srv->dev && st.st_ino == srv->ino)
    unlink(srv->path);
  uv_close((uv_handle_t *)&srv->listener, control_on_listener_closed);
  for (control_conn *c = srv->conns; c != NULL; c = c->next) control_conn_close(c);
}
