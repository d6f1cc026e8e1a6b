/*
 * bench_ceiling: the kernel ceiling of fan-out. The least work a server
 * can do to deliver notifications: it accepts S SSE streams on 127.0.0.1
 * (answering each GET with the same head, retry line and priming event as
 * mcpsubd), preformats N update frames exactly as mcpsubd formats them,
 * and writes them to every stream, B frames per write(2) from one shared
 * buffer: no parsing, no per-stream copy, no allocation after start.
 * Flow control mirrors the load generator's window: a new batch is released
 * only while no stream lags more than W frames behind.
 *
 * With --rate R it is the latency ceiling instead: one frame every 1/R s,
 * written to every stream as soon as it is due, its release time stored
 * (CLOCK_MONOTONIC) in the file named by --times, which the load generator
 * maps to measure release -> receipt exactly as it measures commit ->
 * notification against mcpsubd. mcpsubd's fan-out
 * rate is reported as a fraction of this program's, measured by the same
 * load generator in the same way (CPU seconds from /proc, wall time).
 *
 * Bounded: S and N by flags, every read by a fixed buffer, the whole run
 * by --time-limit. Exits 0 once every stream received every frame.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define CEIL_MAX_SESSIONS 200000u
#define CEIL_MAX_EVENTS   2000000u
#define CEIL_MAX_REQUEST  8192u
#define CEIL_EPOLL_BATCH  1024

typedef struct ceil_stream {
  int fd;
  uint32_t req_len;    /* request bytes seen so far */
  uint8_t req_tail[4]; /* last bytes, to find the blank line across reads */
  bool ready;          /* request read, head written */
  bool blocked;        /* last write hit EAGAIN; wait for EPOLLOUT */
  bool closed;
  size_t pos; /* bytes of the frame buffer written */
} ceil_stream;

typedef struct ceil_opts {
  int port;
  uint32_t sessions;
  uint32_t events;
  uint32_t batch;
  uint32_t window;
  const char *table;
  double time_limit_s;
  double rate;       /* frames per second; 0: as fast as the window allows */
  const char *times; /* file for release times (rate mode) */
} ceil_opts;

typedef struct ceil_state {
  ceil_opts o;
  int lfd, ep;
  ceil_stream *streams; /* by index of acceptance */
  uint32_t n_streams, n_ready, n_closed;
  char *frames;      /* all N frames, back to back */
  size_t *frame_end; /* frame_end[e]: offset just past frame e */
  size_t frame_max;
  uint32_t released; /* frames handed out so far */
  uint64_t writes, eagain;
  uint64_t deadline_ns;
  uint64_t *t_release; /* mapped --times file, or NULL */
} ceil_state;

static uint64_t ceil_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *ceil_alloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (p == NULL) abort();
  return p;
}

static void ceil_die(const char *what) {
  fprintf(stderr, "bench_ceiling: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* The frames, formatted as mcpsubd's subscription engine formats them. */
static void ceil_format(ceil_state *c) {
  char base[64];
  snprintf(base, sizeof(base), "http://127.0.0.1:%d/%s", c->o.port, c->o.table);
  size_t cap = (size_t)c->o.events * 256 + 1;
  c->frames = ceil_alloc(cap);
  c->frame_end = ceil_alloc((size_t)c->o.events * sizeof(size_t));
  size_t off = 0;
  for (uint32_t e = 0; e < c->o.events; e++) {
    int n = snprintf(
        c->frames + off, cap - off,
        "id: %u-t1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\","
        "\"params\":{\"uri\":\"%s/f%u\",\"subscribedUri\":\"%s\"}}\n\n",
        e + 1, base, e, base);
    if (n < 0 || (size_t)n >= cap - off) abort();
    if ((size_t)n > c->frame_max) c->frame_max = (size_t)n;
    off += (size_t)n;
    c->frame_end[e] = off;
  }
}

static void ceil_close(ceil_state *c, ceil_stream *s) {
  if (s->closed) return;
  s->closed = true;
  close(s->fd);
  c->n_closed++;
}

/* Writes what stream s has not had yet of the released frames. */
static void ceil_flush(ceil_state *c, ceil_stream *s) {
  if (!s->ready || s->blocked || s->closed || c->released == 0) return;
  size_t end = c->frame_end[c->released - 1];
  while (s->pos < end) {
    ssize_t n = write(s->fd, c->frames + s->pos, end - s->pos);
    c->writes++;
    if (n > 0) {
      s->pos += (size_t)n;
    } else if (n < 0 && errno == EAGAIN) {
      s->blocked = true;
      c->eagain++;
      return;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      fprintf(stderr, "bench_ceiling: a stream failed: %s\n", strerror(errno));
      ceil_close(c, s);
      return;
    }
  }
}

static void ceil_accept(ceil_state *c) {
  for (;;) {
    int fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      if (errno == EMFILE || errno == ENFILE) ceil_die("accept (raise the fd limit)");
      ceil_die("accept");
    }
    if (c->n_streams == c->o.sessions) {
      close(fd); /* more than asked for */
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint32_t i = c->n_streams++;
    c->streams[i] = (ceil_stream){.fd = fd};
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u32 = i};
    if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev) != 0) ceil_die("epoll_ctl");
  }
}

static const char ceil_head[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache, "
    "no-transform\r\n"
    "X-Accel-Buffering: no\r\nConnection: close\r\n\r\nretry: 1000\n\nid: 0-s1\ndata: \n\n";

/* Reads (and drops) the request; once its blank line is seen, answers with the head. */
static void ceil_read(ceil_state *c, ceil_stream *s) {
  char buf[4096];
  for (;;) {
    ssize_t n = read(s->fd, buf, sizeof(buf));
    if (n == 0) {
      ceil_close(c, s); /* the client is done (or gone) */
      return;
    }
    if (n < 0) {
      if (errno == EAGAIN) return;
      if (errno == EINTR) continue;
      ceil_close(c, s);
      return;
    }
    if (s->ready) continue;
    for (ssize_t k = 0; k < n && !s->ready; k++) {
      memmove(s->req_tail, s->req_tail + 1, 3);
      s->req_tail[3] = (uint8_t)buf[k];
      s->req_len++;
      if (memcmp(s->req_tail, "\r\n\r\n", 4) == 0) {
        if (write(s->fd, ceil_head, sizeof(ceil_head) - 1) != (ssize_t)(sizeof(ceil_head) - 1)) {
          ceil_close(c, s);
          return;
        }
        s->ready = true;
        c->n_ready++;
      }
    }
    if (!s->ready && s->req_len > CEIL_MAX_REQUEST) {
      ceil_close(c, s);
      return;
    }
  }
}

/* Handles whatever epoll reports within timeout_ms. */
static void ceil_poll(ceil_state *c, int timeout_ms) {
  struct epoll_event evs[CEIL_EPOLL_BATCH];
  int n = epoll_wait(c->ep, evs, CEIL_EPOLL_BATCH, timeout_ms);
  if (n < 0 && errno != EINTR) ceil_die("epoll_wait");
  for (int k = 0; k < n; k++) {
    if (evs[k].data.u32 == UINT32_MAX) {
      ceil_accept(c);
      continue;
    }
    ceil_stream *s = &c->streams[evs[k].data.u32];
    if (s->closed) continue;
    if (evs[k].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) ceil_read(c, s);
    if (!s->closed && (evs[k].events & EPOLLOUT) && s->blocked) {
      s->blocked = false;
      ceil_flush(c, s);
    }
  }
}

/* Frames the slowest open stream still lacks of those released. */
static uint32_t ceil_lag(const ceil_state *c) {
  size_t end = c->released ? c->frame_end[c->released - 1] : 0;
  size_t worst = 0;
  for (uint32_t i = 0; i < c->n_streams; i++) {
    const ceil_stream *s = &c->streams[i];
    if (!s->closed && end - s->pos > worst) worst = end - s->pos;
  }
  /* In frames, rounding up: frames have nearly equal lengths. */
  size_t avg = c->released ? end / c->released : 1;
  return (uint32_t)((worst + avg - 1) / (avg ? avg : 1));
}

static bool ceil_all_sent(const ceil_state *c) {
  size_t total = c->frame_end[c->o.events - 1];
  for (uint32_t i = 0; i < c->n_streams; i++)
    if (!c->streams[i].closed && c->streams[i].pos < total) return false;
  return true;
}

/* Was every frame written to every stream, those the client has hung up on since included? */
static bool ceil_all_delivered(const ceil_state *c) {
  size_t total = c->frame_end[c->o.events - 1];
  for (uint32_t i = 0; i < c->n_streams; i++)
    if (c->streams[i].pos < total) return false;
  return true;
}

static int ceil_parse(int argc, char **argv, ceil_opts *o) {
  *o = (ceil_opts){0, 20, 100, 1, 32, "Bench", 120, 0, NULL};
  for (int i = 1; i < argc; i += 2) { /* flag, value */
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) return -1;
    if (strcmp(argv[i], "--port") == 0)
      o->port = atoi(v);
    else if (strcmp(argv[i], "--sessions") == 0)
      o->sessions = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(argv[i], "--events") == 0)
      o->events = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(argv[i], "--batch") == 0)
      o->batch = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(argv[i], "--window") == 0)
      o->window = (uint32_t)strtoul(v, NULL, 10);
    else if (strcmp(argv[i], "--table") == 0)
      o->table = v;
    else if (strcmp(argv[i], "--time-limit") == 0)
      o->time_limit_s = strtod(v, NULL);
    else if (strcmp(argv[i], "--rate") == 0)
      o->rate = strtod(v, NULL);
    else if (strcmp(argv[i], "--times") == 0)
      o->times = v;
    else
      return -1;
  }
  if (o->port < 0 || o->port > 65535 || o->sessions == 0 || o->sessions > CEIL_MAX_SESSIONS ||
      o->events == 0 || o->events > CEIL_MAX_EVENTS || o->batch == 0 || o->window == 0 ||
      !(o->time_limit_s > 0) || strlen(o->table) > 32 || o->rate < 0 || o->rate > 100000 ||
      (o->rate > 0) != (o->times != NULL))
    return -1;
  return 0;
}

int main(int argc, char **argv) {
  ceil_state c;
  memset(&c, 0, sizeof(c));
  if (ceil_parse(argc, argv, &c.o) != 0) {
    fprintf(stderr,
            "Usage: bench_ceiling --port P --sessions S --events N [--batch B] [--window W]\n"
            "                     [--table T] [--time-limit SECONDS] [--rate R --times FILE]\n"
            "Listens on 127.0.0.1:P (0: any free port, printed as \"port N\" on stdout).\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)c.o.sessions + 64) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < (rlim_t)c.o.sessions + 64) {
      fprintf(stderr, "bench_ceiling: the fd limit is below %u sessions\n", c.o.sessions);
      return 1;
    }
  }
  c.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c.lfd < 0) ceil_die("socket");
  int one = 1;
  setsockopt(c.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c.o.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(c.lfd, (struct sockaddr *)&a, sizeof(a)) != 0) ceil_die("bind");
  if (listen(c.lfd, 4096) != 0) ceil_die("listen");
  socklen_t alen = sizeof(a);
  if (getsockname(c.lfd, (struct sockaddr *)&a, &alen) != 0) ceil_die("getsockname");
  c.o.port = ntohs(a.sin_port);
  ceil_format(&c);
  c.streams = ceil_alloc((size_t)c.o.sessions * sizeof(ceil_stream));
  c.ep = epoll_create1(EPOLL_CLOEXEC);
  if (c.ep < 0) ceil_die("epoll_create1");
  struct epoll_event lev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
  if (epoll_ctl(c.ep, EPOLL_CTL_ADD, c.lfd, &lev) != 0) ceil_die("epoll_ctl");
  if (c.o.times != NULL) {
    int fd = open(c.o.times, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t len = (size_t)c.o.events * sizeof(uint64_t);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) ceil_die(c.o.times);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) ceil_die("mmap");
    close(fd);
    c.t_release = p;
  }
  printf("port %d\n", c.o.port);
  fflush(stdout);

  c.deadline_ns = ceil_now_ns() + (uint64_t)(c.o.time_limit_s * 1e9);
  int rc = 1;
  /* 1. Every stream connects and asks. */
  while (c.n_ready < c.o.sessions && c.n_closed == 0 && ceil_now_ns() < c.deadline_ns)
    ceil_poll(&c, 100);
  if (c.n_ready < c.o.sessions) {
    fprintf(stderr, "bench_ceiling: %u of %u streams opened\n", c.n_ready, c.o.sessions);
    goto out;
  }
  /* 2. Release a batch, write it everywhere; wait while some stream lags too far. */
  uint64_t t0 = ceil_now_ns();
  while (c.released < c.o.events && c.n_closed == 0 && ceil_now_ns() < c.deadline_ns) {
    if (c.o.rate > 0) {
      uint64_t due = t0 + (uint64_t)((double)c.released * 1e9 / c.o.rate), now = ceil_now_ns();
      if (now < due) {
        ceil_poll(&c, (int)((due - now) / 1000000u)); /* at most 1 ms late */
        continue;
      }
      __atomic_store_n(&c.t_release[c.released], ceil_now_ns(), __ATOMIC_RELEASE);
      c.released++;
    } else if (c.released > 0 && ceil_lag(&c) + c.o.batch > c.o.window) {
      ceil_poll(&c, 10);
      continue;
    } else {
      c.released = c.released + c.o.batch > c.o.events ? c.o.events : c.released + c.o.batch;
    }
    for (uint32_t i = 0; i < c.n_streams; i++) ceil_flush(&c, &c.streams[i]);
    ceil_poll(&c, 0);
  }
  /* 3. Drain, then wait for the clients to hang up. */
  while (!ceil_all_sent(&c) && c.n_closed == 0 && ceil_now_ns() < c.deadline_ns) ceil_poll(&c, 10);
  /* A client hangs up once it has every frame (it may by now): only one that left early fails. */
  if (c.released == c.o.events && ceil_all_delivered(&c)) rc = 0;
  uint64_t t1 = ceil_now_ns();
  while (c.n_closed < c.n_streams && ceil_now_ns() < c.deadline_ns) ceil_poll(&c, 10);
  fprintf(stderr,
          "{\"ceiling\":{\"sessions\":%u,\"events\":%u,\"batch\":%u,\"writes\":%llu,\"eagain\":%"
          "llu,\"send_s\":%.4f,"
          "\"ok\":%s}}\n",
          c.o.sessions, c.o.events, c.o.batch, (unsigned long long)c.writes,
          (unsigned long long)c.eagain, (double)(t1 - t0) / 1e9, rc == 0 ? "true" : "false");
out:
  for (uint32_t i = 0; i < c.n_streams; i++) ceil_close(&c, &c.streams[i]);
  close(c.ep);
  close(c.lfd);
  free(c.streams);
  free(c.frames);
  free(c.frame_end);
  if (c.t_release != NULL) munmap(c.t_release, (size_t)c.o.events * sizeof(uint64_t));
  return rc;
}
