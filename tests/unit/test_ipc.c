/*
 * Tests of the master/worker channel (common/ipc.h) over real SEQPACKET
 * socketpairs: packets with and without an fd, the receiver's checks
 * (unknown command, wrong size, an fd where none belongs: dropped, the fd
 * closed), chunked messages reassembled, and channels on a libuv loop:
 * a chunked CONN with its fd, ordering through the output queue when the
 * socket is full, the queue bound (-ENOBUFS, fd closed), packets of
 * another slot or generation dropped, and EOF.
 *
 * Whether a received fd was closed is observed from outside: the test
 * passes the write end of a pipe and checks that the read end sees EOF
 * once every other copy is gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "common/ipc.h"

static void make_pair(int sv[2]) {
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
}

/* True when the pipe's read end sees EOF (every write end closed) within a second. */
static bool pipe_eof(int rfd) {
  struct pollfd p = {.fd = rfd, .events = POLLIN};
  if (poll(&p, 1, 1000) != 1) return false;
  char c;
  return read(rfd, &c, 1) == 0;
}

static ipc_header header(uint32_t cmd, uint32_t len, uint32_t total, uint32_t flags) {
  return (ipc_header){
      .cmd = cmd, .slot = 3, .generation = 7, .len = len, .total = total, .flags = flags};
}

static void test_packet_with_fd(void) {
  int sv[2], pp[2];
  make_pair(sv);
  CHECK(pipe(pp) == 0);
  ipc_header h = header(IPC_CONN, 5, 5, IPC_F_REROUTED);
  CHECK_INT_EQ(ipc_packet_send(sv[0], &h, "hello", pp[1]), 0);
  close(pp[1]);
  char *payload = malloc(IPC_CHUNK + 1);
  ipc_header got;
  int fd;
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), 1);
  CHECK_INT_EQ(got.cmd, IPC_CONN);
  CHECK_INT_EQ(got.slot, 3);
  CHECK_INT_EQ(got.generation, 7);
  CHECK_INT_EQ(got.len, 5);
  CHECK_INT_EQ(got.flags, IPC_F_REROUTED);
  CHECK_STR_EQ(payload, "hello");
  CHECK(fd >= 0);
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  CHECK_INT_EQ(write(fd, "x", 1), 1); /* the same pipe */
  char c;
  CHECK_INT_EQ(read(pp[0], &c, 1), 1);
  close(fd);
  CHECK(pipe_eof(pp[0]));
  /* Nothing more waiting; EOF once the peer is gone. */
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), -EAGAIN);
  close(sv[0]);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), 0);
  close(sv[1]);
  close(pp[0]);
  free(payload);
}

/* Sends a raw datagram (header bytes as given) with an optional fd. */
static void send_raw(int sock, const void *data, size_t len, int fd) {
  struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&ctl, 0, sizeof(ctl));
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof(ctl.buf);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  CHECK(sendmsg(sock, &mh, 0) == (ssize_t)len);
}

static void test_packet_rejects(void) {
  int sv[2], pp[2];
  make_pair(sv);
  char *payload = malloc(IPC_CHUNK + 1);
  ipc_header got;
  int fd;

  /* An unknown command carrying an fd: dropped, the fd closed. */
  CHECK(pipe(pp) == 0);
  ipc_header h = header(99, 0, 0, 0);
  CHECK_INT_EQ(ipc_packet_send(sv[0], &h, NULL, pp[1]), 0);
  close(pp[1]);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), -EBADMSG);
  CHECK_INT_EQ(fd, -1);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);

  /* An fd on a command that takes none: dropped, closed. */
  CHECK(pipe(pp) == 0);
  h = header(IPC_COMMITTED, 0, 0, 0);
  CHECK_INT_EQ(ipc_packet_send(sv[0], &h, NULL, pp[1]), 0);
  close(pp[1]);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), -EBADMSG);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);

  /* Shorter than a header; a length that disagrees with the datagram. */
  send_raw(sv[0], "abc", 3, -1);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), -EBADMSG);
  char raw[sizeof(ipc_header) + 4];
  h = header(IPC_CTL_REQ, 10, 10, 0); /* says 10, carries 4 */
  memcpy(raw, &h, sizeof(h));
  memcpy(raw + sizeof(h), "{}{}", 4);
  send_raw(sv[0], raw, sizeof(raw), -1);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), -EBADMSG);

  /* A valid one still goes through after the garbage. */
  h = header(IPC_DRAIN, 0, 0, 0);
  CHECK_INT_EQ(ipc_packet_send(sv[0], &h, NULL, -1), 0);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), 1);
  CHECK_INT_EQ(got.cmd, IPC_DRAIN);
  close(sv[0]);
  close(sv[1]);
  free(payload);
}

static void test_assembler(void) {
  ipc_assembler a;
  ipc_assembler_init(&a);
  ipc_msg msg;
  char *chunk = malloc(IPC_CHUNK);
  memset(chunk, 'a', IPC_CHUNK);

  /* Two chunks make one message; the fd rides on the first. */
  int pp[2];
  CHECK(pipe(pp) == 0);
  uint32_t total = (uint32_t)IPC_CHUNK + 10;
  ipc_header h1 = header(IPC_CONN, (uint32_t)IPC_CHUNK, total, 0);
  ipc_header h2 = header(IPC_CONN, 10, total, IPC_F_CONT);
  CHECK_INT_EQ(ipc_assembler_push(&a, &h1, chunk, pp[1], &msg), 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &h2, "bbbbbbbbbb", -1, &msg), 1);
  CHECK_INT_EQ(msg.len, total);
  CHECK_INT_EQ(msg.fd, pp[1]);
  CHECK(msg.payload[0] == 'a' && msg.payload[IPC_CHUNK] == 'b' && msg.payload[total - 1] == 'b');
  CHECK_INT_EQ(msg.flags, 0);
  close(msg.fd);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);

  /* A continuation without a first packet; a CONN without its fd; a STATS of the wrong size. */
  CHECK_INT_EQ(ipc_assembler_push(&a, &h2, "bbbbbbbbbb", -1, &msg), -EBADMSG);
  ipc_header conn = header(IPC_CONN, 3, 3, 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &conn, "abc", -1, &msg), -EBADMSG);
  ipc_header stats = header(IPC_STATS, 3, 3, 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &stats, "abc", -1, &msg), -EBADMSG);
  /*
   * A write home's channel (PEER) comes with its fd and a short stamp only:
   * one without its fd, or with a stamp past the bound, is dropped (its fd
   * closed); one in bounds with its fd passes.
   */
  ipc_header peer = header(IPC_PEER, 3, 3, 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &peer, "1 2", -1, &msg), -EBADMSG);
  char stamp[33];
  memset(stamp, '7', sizeof(stamp));
  ipc_header long_peer = header(IPC_PEER, sizeof(stamp), sizeof(stamp), 0);
  CHECK(pipe(pp) == 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &long_peer, stamp, pp[1], &msg), -EBADMSG);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);
  CHECK(pipe(pp) == 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &peer, "1 2", pp[1], &msg), 1);
  CHECK_INT_EQ(msg.cmd, IPC_PEER);
  CHECK_INT_EQ(msg.fd, pp[1]);
  close(msg.fd);
  close(pp[0]);
  /* A first packet shorter than a chunk that announces more: not a valid chunking. */
  ipc_header odd = header(IPC_CTL_REP, 5, 50, 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &odd, "{}{}{", -1, &msg), -EBADMSG);

  /* A new message while one is incomplete: the partial one is dropped (its fd closed). */
  CHECK(pipe(pp) == 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &h1, chunk, pp[1], &msg), 0);
  ipc_header drain = header(IPC_DRAIN, 0, 0, 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &drain, "", -1, &msg), 1);
  CHECK_INT_EQ(msg.cmd, IPC_DRAIN);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);
  /* A continuation that would pass the announced total. */
  CHECK(pipe(pp) == 0);
  CHECK_INT_EQ(ipc_assembler_push(&a, &h1, chunk, pp[1], &msg), 0);
  ipc_header big = header(IPC_CONN, 11, total, IPC_F_CONT);
  CHECK_INT_EQ(ipc_assembler_push(&a, &big, "bbbbbbbbbbb", -1, &msg), -EBADMSG);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);

  ipc_assembler_finish(&a);
  free(chunk);
}

/* ---- channels on a loop -------------------------------------------------------- */

typedef struct received {
  int count;
  uint32_t cmd[512];
  size_t len[512];
  uint32_t flags[512];
  int fds;
  bool order_ok;
  bool big_ok;
  int eof;
} received;

static void on_msg(ipc_channel_t *ch, ipc_msg *msg, void *data) {
  received *r = data;
  if (r->count < 512) {
    r->cmd[r->count] = msg->cmd;
    r->len[r->count] = msg->len;
    r->flags[r->count] = msg->flags;
  }
  if (msg->cmd == IPC_CTL_REP) {
    /* numbered payloads: each starts with its index */
    int n;
    if (sscanf(msg->payload, "%d", &n) != 1 || n != r->count) r->order_ok = false;
  }
  if (msg->cmd == IPC_CONN) {
    bool ok = msg->len == 200000;
    for (size_t i = 0; ok && i < msg->len; i++) ok = msg->payload[i] == (char)('a' + i % 26);
    r->big_ok = ok;
  }
  if (msg->fd >= 0) {
    r->fds++;
    CHECK_INT_EQ(write(msg->fd, "y", 1), 1);
    close(msg->fd);
  }
  r->count++;
}

static void on_eof(ipc_channel_t *ch, void *data) {
  received *r = data;
  r->eof++;
}

static void run_until(uv_loop_t *loop, const int *counter, int want) {
  for (int i = 0; i < 2000 && *counter < want; i++) uv_run(loop, UV_RUN_NOWAIT), usleep(500);
}

static void test_channels(void) {
  uv_loop_t loop;
  CHECK(uv_loop_init(&loop) == 0);
  int sv[2];
  make_pair(sv);
  ipc_channel_t a, b;
  received ra = {.order_ok = true}, rb = {.order_ok = true};
  CHECK_INT_EQ(ipc_channel_init(&a, &loop, sv[0], 3, 7, on_msg, on_eof, &ra), 0);
  CHECK_INT_EQ(ipc_channel_init(&b, &loop, sv[1], 3, 7, on_msg, on_eof, &rb), 0);

  /* A chunked CONN (200000 bytes: four packets) with an fd. */
  char *big = malloc(200000);
  for (size_t i = 0; i < 200000; i++) big[i] = (char)('a' + i % 26);
  int pp[2];
  CHECK(pipe(pp) == 0);
  CHECK_INT_EQ(ipc_channel_send(&a, IPC_CONN, IPC_F_REROUTED, big, 200000, pp[1]), 0);
  CHECK_INT_EQ(ipc_channel_send(&a, IPC_COMMITTED, 0, NULL, 0, -1), 0);
  run_until(&loop, &rb.count, 2);
  CHECK_INT_EQ(rb.count, 2);
  CHECK_INT_EQ(rb.cmd[0], IPC_CONN);
  CHECK(rb.big_ok);
  CHECK_INT_EQ(rb.flags[0], IPC_F_REROUTED);
  CHECK_INT_EQ(rb.fds, 1);
  CHECK_INT_EQ(rb.cmd[1], IPC_COMMITTED);
  char c;
  CHECK_INT_EQ(read(pp[0], &c, 1), 1); /* written through the received fd */
  CHECK(pipe_eof(pp[0]));              /* and every copy is closed */
  close(pp[0]);

  /* More than the socket holds: the queue keeps them, in order. */
  char *chunk = malloc(60000);
  memset(chunk, ' ', 60000);
  for (int i = 0; i < 200; i++) {
    int n = snprintf(chunk, 16, "%d", i);
    chunk[n] = ' ';
    CHECK_INT_EQ(ipc_channel_send(&b, IPC_CTL_REP, 0, chunk, 60000, -1), 0);
  }
  CHECK(ipc_channel_queued(&b) > 0);
  run_until(&loop, &ra.count, 200);
  CHECK_INT_EQ(ra.count, 200);
  CHECK(ra.order_ok);
  CHECK_INT_EQ(ipc_channel_queued(&b), 0);

  /* Too big for one message. */
  CHECK(pipe(pp) == 0);
  CHECK_INT_EQ(ipc_channel_send(&a, IPC_CONN, 0, big, IPC_MAX_TOTAL + 1, pp[1]), -EMSGSIZE);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);

  /* A peer that does not read: the queue is bounded; the fd of a refused message is closed. */
  size_t mib = 1024 * 1024;
  char *m = calloc(1, mib);
  int rc = 0, sent = 0;
  CHECK(pipe(pp) == 0);
  while (rc == 0 && sent < 100) {
    rc = ipc_channel_send(&a, IPC_CONN, 0, m, mib, dup(pp[1]));
    sent++;
  }
  close(pp[1]);
  CHECK_INT_EQ(rc, -ENOBUFS);
  CHECK(ipc_channel_queued(&a) <= IPC_QUEUE_MAX + IPC_MAX_TOTAL);
  CHECK(sent > 30);
  /* Drain it: every queued message arrives with its fd. */
  int before = rb.count;
  run_until(&loop, &rb.count, before + sent - 1);
  CHECK_INT_EQ(rb.count, before + sent - 1);
  /* One byte written through each delivered fd, then EOF: every copy is closed. */
  int ys = 0;
  char ybuf[256];
  ssize_t nr;
  while ((nr = read(pp[0], ybuf, sizeof(ybuf))) > 0) ys += (int)nr;
  CHECK_INT_EQ(nr, 0);
  CHECK_INT_EQ(ys, sent - 1);
  close(pp[0]);

  /* Another slot's or generation's packet is dropped, with its fd. */
  CHECK(pipe(pp) == 0);
  ipc_header h = {.cmd = IPC_CONN, .slot = 4, .generation = 7, .len = 1, .total = 1};
  CHECK_INT_EQ(ipc_packet_send(sv[0], &h, "z", pp[1]), 0);
  close(pp[1]);
  CHECK_INT_EQ(ipc_channel_send(&a, IPC_DRAIN, 0, NULL, 0, -1), 0);
  before = rb.count;
  run_until(&loop, &rb.count, before + 1);
  CHECK_INT_EQ(rb.cmd[rb.count - 1], IPC_DRAIN);
  CHECK(b.dropped >= 1);
  CHECK(pipe_eof(pp[0]));
  close(pp[0]);

  /* Closing one end: the other hears EOF once. */
  ipc_channel_close(&a, NULL);
  run_until(&loop, &rb.eof, 1);
  CHECK_INT_EQ(rb.eof, 1);
  CHECK_INT_EQ(ipc_channel_send(&b, IPC_COMMITTED, 0, NULL, 0, -1), -EPIPE);
  ipc_channel_close(&b, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_INT_EQ(uv_loop_close(&loop), 0);
  free(big);
  free(chunk);
  free(m);
}

/*
 * The payload buffer holds a full chunk and its NUL: exactly IPC_CHUNK + 1
 * bytes take a full packet (ASan would see a write past it), and anything
 * smaller is refused before the socket is read.
 */
static void test_full_chunk_bound(void) {
  int sv[2];
  make_pair(sv);
  char *full = malloc(IPC_CHUNK);
  memset(full, 'x', IPC_CHUNK);
  ipc_header h = header(IPC_CONN, IPC_CHUNK, IPC_CHUNK, 0);
  CHECK_INT_EQ(ipc_packet_send(sv[0], &h, full, -1), 0);
  char *small = malloc(IPC_CHUNK);
  ipc_header got;
  int fd;
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, small, IPC_CHUNK, &fd), -EINVAL);
  free(small);
  char *payload = malloc(IPC_CHUNK + 1);
  CHECK_INT_EQ(ipc_packet_recv(sv[1], &got, payload, IPC_CHUNK + 1, &fd), 1);
  CHECK_INT_EQ(got.len, IPC_CHUNK);
  CHECK(memcmp(payload, full, IPC_CHUNK) == 0);
  CHECK_INT_EQ(payload[IPC_CHUNK], '\0');
  free(payload);
  free(full);
  close(sv[0]);
  close(sv[1]);
}

/* ipc_fields: NUL-separated fields, the last one to the end; too few is NULL. */
static void test_fields(void) {
  const char *f[3];
  static const char answer[] = "key:a\0"
                               "0123\0"
                               "{\"id\":1}";
  char *copy = ipc_fields(answer, sizeof(answer) - 1, f, 3);
  CHECK(copy != NULL);
  CHECK(strcmp(f[0], "key:a") == 0 && strcmp(f[1], "0123") == 0 && strcmp(f[2], "{\"id\":1}") == 0);
  free(copy);
  copy = ipc_fields(answer, sizeof(answer) - 1, f, 2); /* the last field keeps its NULs' rest */
  CHECK(copy != NULL && strcmp(f[0], "key:a") == 0 && strcmp(f[1], "0123") == 0);
  free(copy);
  static const char two[] = "key:a\0"
                            "7";
  CHECK(ipc_fields(two, sizeof(two) - 1, f, 3) == NULL);
  CHECK(ipc_fields("", 0, f, 2) == NULL);
  copy = ipc_fields("x\0", 2, f, 2); /* an empty last field is a field */
  CHECK(copy != NULL && strcmp(f[1], "") == 0);
  free(copy);
}

int main(void) {
  RUN(test_fields);
  RUN(test_full_chunk_bound);
  RUN(test_packet_with_fd);
  RUN(test_packet_rejects);
  RUN(test_assembler);
  RUN(test_channels);
  return 0;
}
