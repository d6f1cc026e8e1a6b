/*
 * The master/worker channel (see ipc.h): packets over SOCK_SEQPACKET with
 * SCM_RIGHTS, reassembly of chunked messages, and a non-blocking channel
 * on a libuv poll handle with a bounded output queue.
 *
 * Validation happens in two places. ipc_packet_recv checks what one packet
 * can say about itself (size against its header, command, ancillary data);
 * ipc_assembler_push checks what a message must be (chunks in sequence, the
 * command's payload bounds, the fd the command requires). Whatever fails is
 * dropped with its fds closed, so a confused or hostile peer can cost us a
 * log line, never an fd or unbounded memory.
 */
#include "common/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"

/* What each command may carry. */
typedef struct ipc_cmd_info {
  const char *name;
  bool takes_fd; /* requires exactly one fd on its first packet */
  size_t min_len;
  size_t max_len;
} ipc_cmd_info;

static const ipc_cmd_info ipc_cmds[IPC_CMD_END] = {
    [IPC_CONN] = {"CONN", true, 0, IPC_MAX_TOTAL},
    [IPC_REROUTE] = {"REROUTE", true, 1, IPC_MAX_TOTAL},
    [IPC_COMMITTED] = {"COMMITTED", false, 0, 0},
    [IPC_STATS] = {"STATS", false, sizeof(ipc_stats), sizeof(ipc_stats)},
    [IPC_STATS_REQ] = {"STATS_REQ", false, sizeof(uint64_t), sizeof(uint64_t)},
    [IPC_CTL_REQ] = {"CTL_REQ", false, 2, IPC_MAX_CTL},
    [IPC_CTL_REP] = {"CTL_REP", false, 2, IPC_MAX_TOTAL},
    [IPC_DRAIN] = {"DRAIN", false, 0, 0},
    [IPC_CANCEL] = {"CANCEL", false, 3, 1024},
    [IPC_ANSWER] = {"ANSWER", false, 5, 16384},
    [IPC_PEER] = {"PEER", true, 3, 32},
    [IPC_WRITE] = {"WRITE", false, 2, IPC_MAX_TOTAL},
    [IPC_WRITTEN] = {"WRITTEN", false, 2, IPC_MAX_TOTAL},
    [IPC_RESTORED] = {"RESTORED", false, 1, 64},
};

static const ipc_cmd_info *ipc_cmd_lookup(uint32_t cmd) {
  if (cmd == 0 || cmd >= IPC_CMD_END) return NULL;
  return &ipc_cmds[cmd];
}

const char *ipc_cmd_name(uint32_t cmd) {
  const ipc_cmd_info *info = ipc_cmd_lookup(cmd);
  return info ? info->name : "?";
}

/* ---- packets ------------------------------------------------------------ */

int ipc_packet_send(int sock, const ipc_header *h, const void *payload, int fd) {
  if (h->len > IPC_CHUNK) return -EMSGSIZE;
  struct iovec iov[2] = {
      {.iov_base = (void *)h, .iov_len = sizeof *h},
      {.iov_base = (void *)payload, .iov_len = h->len},
  };
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr mh = {.msg_iov = iov, .msg_iovlen = h->len > 0 ? 2 : 1};
  if (fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return 0; /* SEQPACKET: all or nothing */
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return -EAGAIN;
    return -errno;
  }
}

/* Closes every fd in the ancillary data of mh; returns how many there were. */
static int ipc_close_received_fds(struct msghdr *mh, int *first) {
  int count = 0;
  *first = -1;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      if (count == 0)
        *first = fd;
      else
        close(fd);
      count++;
    }
  }
  return count;
}

int ipc_packet_recv(int sock, ipc_header *h, char *payload, size_t cap, int *fd) {
  *fd = -1;
  if (cap < IPC_CHUNK + 1) return -EINVAL; /* a full payload and its NUL */
  struct iovec iov[2] = {
      {.iov_base = h, .iov_len = sizeof *h},
      {.iov_base = payload, .iov_len = IPC_CHUNK},
  };
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(4 * sizeof(int))]; /* room to see (and close) a few extra fds */
  } ctl;
  struct msghdr mh = {
      .msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t n;
  do n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  if (n == 0) return 0;
  int got_fd;
  int n_fds = ipc_close_received_fds(&mh, &got_fd);
  const ipc_cmd_info *info = (size_t)n >= sizeof *h ? ipc_cmd_lookup(h->cmd) : NULL;
  bool ok = info != NULL && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) &&
            (size_t)n == sizeof *h + h->len && h->len <= IPC_CHUNK && n_fds <= 1 &&
            (n_fds == 0 || (info->takes_fd && !(h->flags & IPC_F_CONT)));
  if (!ok) {
    if (got_fd >= 0) close(got_fd);
    return -EBADMSG;
  }
  payload[h->len] = '\0';
  *fd = got_fd;
  return 1;
}

/* ---- reassembly --------------------------------------------------------- */

void ipc_assembler_init(ipc_assembler *a) {
  memset(a, 0, sizeof *a);
  buf_init(&a->data);
  a->fd = -1;
}

static void ipc_assembler_reset(ipc_assembler *a) {
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
  a->active = false;
  buf_reset(&a->data);
}

void ipc_assembler_finish(ipc_assembler *a) {
  ipc_assembler_reset(a);
  buf_finish(&a->data);
}

static void ipc_msg_fill(ipc_msg *out, const ipc_header *h, const char *payload, size_t len,
                         int fd) {
  out->cmd = h->cmd;
  out->slot = h->slot;
  out->generation = h->generation;
  out->flags = h->flags & ~IPC_F_CONT;
  out->payload = payload;
  out->len = len;
  out->fd = fd;
}

int ipc_assembler_push(ipc_assembler *a, const ipc_header *h, const char *payload, int fd,
                       ipc_msg *out) {
  const ipc_cmd_info *info = ipc_cmd_lookup(h->cmd);
  if (h->flags & IPC_F_CONT) {
    bool fits = a->active && info != NULL && fd < 0 && h->cmd == a->first.cmd && h->len > 0 &&
                h->len <= a->first.total - a->data.len;
    if (!fits) {
      if (fd >= 0) close(fd);
      ipc_assembler_reset(a);
      return -EBADMSG;
    }
    buf_append(&a->data, payload, h->len);
    if (a->data.len < a->first.total) return 0;
    ipc_msg_fill(out, &a->first, a->data.data, a->data.len, a->fd);
    a->fd = -1;
    a->active = false;
    return 1;
  }
  if (a->active) /* a new message while one was incomplete: the old one is lost */
    ipc_assembler_reset(a);
  bool ok = info != NULL && h->total >= info->min_len && h->total <= info->max_len &&
            h->len <= h->total && (h->len == h->total || h->len == IPC_CHUNK) &&
            (info->takes_fd ? fd >= 0 : fd < 0);
  if (!ok) {
    if (fd >= 0) close(fd);
    return -EBADMSG;
  }
  if (h->len == h->total) {
    ipc_msg_fill(out, h, payload, h->len, fd);
    buf_reset(&a->data);
    return 1;
  }
  a->active = true;
  a->first = *h;
  a->fd = fd;
  buf_reset(&a->data);
  buf_append(&a->data, payload, h->len);
  return 0;
}

/* ---- channels ----------------------------------------------------------- */

/* One packet waiting to be sent. */
struct ipc_out {
  ipc_out *next;
  ipc_header h;
  int fd;
  char payload[]; /* h.len bytes */
};

/* Receive at most this many packets per poll callback, so one busy peer cannot starve the loop. */
#define IPC_READ_BURST 64

static void ipc_channel_on_poll(uv_poll_t *p, int status, int events);

static void ipc_channel_watch(ipc_channel_t *ch) {
  if (ch->closing) return;
  int want = (ch->eof ? 0 : UV_READABLE) | (ch->out_head && !ch->broken ? UV_WRITABLE : 0);
  if (want == ch->events) return;
  ch->events = want;
  if (want == 0)
    (void)uv_poll_stop(&ch->poll); /* cannot fail */
  else if (uv_poll_start(&ch->poll, want, ipc_channel_on_poll) < 0)
    log_warn("ipc: cannot watch the channel");
}

int ipc_channel_init(ipc_channel_t *ch, uv_loop_t *loop, int sock, uint32_t slot,
                     uint32_t generation, ipc_msg_cb on_msg, ipc_eof_cb on_eof, void *data) {
  memset(ch, 0, sizeof *ch);
  ch->loop = loop;
  ch->fd = sock;
  ch->slot = slot;
  ch->generation = generation;
  ch->on_msg = on_msg;
  ch->on_eof = on_eof;
  ch->data = data;
  ipc_assembler_init(&ch->assembler);
  int fl = fcntl(sock, F_GETFL);
  if (fl < 0 || fcntl(sock, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(sock, F_SETFD, FD_CLOEXEC) < 0) {
    int err = -errno;
    close(sock);
    ch->fd = -1;
    ch->closing = true; /* nothing to close */
    return err;
  }
  int r = uv_poll_init(loop, &ch->poll, sock);
  if (r < 0) {
    close(sock);
    ch->fd = -1;
    ch->closing = true;
    return r;
  }
  ch->poll.data = ch;
  ch->rbuf = mem_alloc(IPC_CHUNK + 1);
  ch->events = 0;
  ipc_channel_watch(ch);
  return 0;
}

size_t ipc_channel_queued(const ipc_channel_t *ch) {
  return ch->queued;
}

static void ipc_out_free(ipc_out *o) {
  if (o->fd >= 0) close(o->fd);
  free(o);
}

static void ipc_channel_report_eof(ipc_channel_t *ch) {
  if (ch->eof) return;
  ch->eof = true;
  ipc_channel_watch(ch);
  if (ch->on_eof && !ch->closing) ch->on_eof(ch, ch->data);
}

/* Sends what the queue holds until the socket is full. */
static void ipc_channel_flush(ipc_channel_t *ch) {
  while (ch->out_head && !ch->closing) {
    ipc_out *o = ch->out_head;
    int r = ipc_packet_send(ch->fd, &o->h, o->payload, o->fd);
    if (r == -EAGAIN) break;
    if (r < 0) {
      log_warn("ipc: send failed", "error", strerror(-r));
      ch->broken = true;
      ipc_channel_report_eof(ch);
      return;
    }
    ch->out_head = o->next;
    if (ch->out_head == NULL) ch->out_tail = NULL;
    ch->queued -= o->h.len;
    ipc_out_free(o);
  }
  ipc_channel_watch(ch);
}

static void ipc_channel_enqueue(ipc_channel_t *ch, const ipc_header *h, const char *payload,
                                int fd) {
  ipc_out *o = mem_alloc(sizeof *o + h->len);
  o->next = NULL;
  o->h = *h;
  o->fd = fd;
  if (h->len > 0) memcpy(o->payload, payload, h->len);
  if (ch->out_tail)
    ch->out_tail->next = o;
  else
    ch->out_head = o;
  ch->out_tail = o;
  ch->queued += h->len;
}

int ipc_channel_send(ipc_channel_t *ch, uint32_t cmd, uint32_t flags, const void *payload,
                     size_t len, int fd) {
  if (ch->closing || ch->eof || ch->broken) {
    if (fd >= 0) close(fd);
    return -EPIPE;
  }
  if (len > IPC_MAX_TOTAL || ipc_cmd_lookup(cmd) == NULL) {
    if (fd >= 0) close(fd);
    return -EMSGSIZE;
  }
  if (ch->out_head && ch->queued + len > IPC_QUEUE_MAX) {
    if (fd >= 0) close(fd);
    ch->dropped++;
    return -ENOBUFS;
  }
  const char *p = payload;
  size_t off = 0;
  do {
    size_t n = len - off < IPC_CHUNK ? len - off : IPC_CHUNK;
    ipc_header h = {.cmd = cmd,
                    .slot = ch->slot,
                    .generation = ch->generation,
                    .len = (uint32_t)n,
                    .total = (uint32_t)len,
                    .flags = (flags & IPC_F_USER_MASK) | (off > 0 ? IPC_F_CONT : 0)};
    int pfd = off == 0 ? fd : -1;
    int r = ch->out_head ? -EAGAIN : ipc_packet_send(ch->fd, &h, p + off, pfd);
    if (r == -EAGAIN) {
      ipc_channel_enqueue(ch, &h, p + off, pfd); /* keeps the order; the fd rides along */
    } else if (r < 0) {
      if (pfd >= 0) close(pfd);
      /* A message cut short: the peer's assembler drops the part it got.
       * The owner hears of the broken peer from the loop (EOF on read),
       * not from inside this call. */
      ch->broken = true;
      return -EPIPE;
    } else if (pfd >= 0) {
      close(pfd); /* the message in flight holds its own reference */
    }
    off += n;
  } while (off < len);
  ipc_channel_watch(ch);
  return 0;
}

static void ipc_channel_read(ipc_channel_t *ch) {
  for (int i = 0; i < IPC_READ_BURST && !ch->closing && !ch->eof; i++) {
    ipc_header h;
    int fd;
    int r = ipc_packet_recv(ch->fd, &h, ch->rbuf, IPC_CHUNK + 1, &fd);
    if (r == -EAGAIN) return;
    if (r == 0) {
      ipc_channel_report_eof(ch);
      return;
    }
    if (r == -EBADMSG) {
      ch->dropped++;
      log_warn("ipc: dropped a malformed packet");
      continue;
    }
    if (r < 0) {
      log_warn("ipc: receive failed", "error", strerror(-r));
      ipc_channel_report_eof(ch);
      return;
    }
    if (h.slot != ch->slot || h.generation != ch->generation) {
      if (fd >= 0) close(fd);
      ch->dropped++;
      log_warn("ipc: dropped a packet from another slot or generation", "cmd", ipc_cmd_name(h.cmd));
      continue;
    }
    ipc_msg msg;
    r = ipc_assembler_push(&ch->assembler, &h, ch->rbuf, fd, &msg);
    if (r < 0) {
      ch->dropped++;
      log_warn("ipc: dropped a message that breaks its bounds", "cmd", ipc_cmd_name(h.cmd));
      continue;
    }
    if (r == 1) ch->on_msg(ch, &msg, ch->data);
  }
}

static void ipc_channel_on_poll(uv_poll_t *p, int status, int events) {
  ipc_channel_t *ch = p->data;
  if (status < 0) {
    ipc_channel_report_eof(ch);
    return;
  }
  if (events & UV_WRITABLE) ipc_channel_flush(ch);
  if ((events & UV_READABLE) && !ch->closing) ipc_channel_read(ch);
}

static void ipc_channel_on_closed(uv_handle_t *h) {
  ipc_channel_t *ch = h->data;
  if (ch->fd >= 0) close(ch->fd);
  ch->fd = -1;
  while (ch->out_head) {
    ipc_out *o = ch->out_head;
    ch->out_head = o->next;
    ipc_out_free(o);
  }
  ch->out_tail = NULL;
  ch->queued = 0;
  ipc_assembler_finish(&ch->assembler);
  free(ch->rbuf);
  ch->rbuf = NULL;
  if (ch->closed) ch->closed(ch);
}

void ipc_channel_close(ipc_channel_t *ch, void (*closed)(ipc_channel_t *ch)) {
  if (ch->closing) return;
  ch->closing = true;
  ch->closed = closed;
  uv_close((uv_handle_t *)&ch->poll, ipc_channel_on_closed);
}

char *ipc_fields(const void *payload, size_t len, const char **fields, size_t n) {
  char *copy = mem_alloc(len + 1); /* copied whole: the fields hold NULs */
  memcpy(copy, payload, len);
  copy[len] = '\0';
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (at > len || (i + 1 < n && memchr(copy + at, '\0', len - at) == NULL)) {
      free(copy);
      return NULL;
    }
    fields[i] = copy + at;
    at += strlen(copy + at) + 1;
  }
  return copy;
}
