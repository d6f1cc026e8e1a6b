/*
 * The master/worker channel: one AF_UNIX SOCK_SEQPACKET socketpair per
 * worker (and, with a write home, one the master makes between the home and
 * each other worker, stamped with that worker's slot and generation: see
 * forward.h), carrying small fixed-header messages in the style of nginx's
 * ngx_channel. A message is an ipc_header {cmd, slot, generation, len,
 * total, flags} followed by len payload bytes, in one datagram; a payload
 * over IPC_CHUNK bytes is sent as a first packet and continuation packets
 * (IPC_F_CONT) that the receiver reassembles. File descriptors travel only
 * as SCM_RIGHTS, on the first packet of a message, and only with the
 * commands that take one (CONN, REROUTE, PEER).
 *
 * The receiver trusts nothing: a packet whose size, command, slot,
 * generation, chunking or fd does not fit is dropped and any fd that came
 * with it is closed. Sending never blocks: what the socket does not take
 * waits in a per-peer queue bounded by IPC_QUEUE_MAX; a message that would
 * pass the bound is dropped (and the fd it carried closed).
 *
 * Both ends run the channel on their own libuv loop with a uv_poll_t. This
 * module never forks and holds nothing that must survive one.
 */
#ifndef MCPSUB_IPC_H
#define MCPSUB_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "common/mem.h"
#include "common/stats.h"

/* Largest payload in one packet. */
#define IPC_CHUNK ((size_t)64 * 1024)
/* Largest payload of a whole (chunked) message. */
#define IPC_MAX_TOTAL ((size_t)16 * 1024 * 1024)
/* Bytes that may wait in one channel's output queue. */
#define IPC_QUEUE_MAX ((size_t)32 * 1024 * 1024)
/* Largest JSON payload of a control request. */
#define IPC_MAX_CTL ((size_t)1024 * 1024)

enum ipc_cmd {
  IPC_CONN = 1,  /* master -> worker: a connection (fd) and the bytes already read from it */
  IPC_REROUTE,   /* worker -> master: a connection (fd) and its unanswered bytes, to route again */
  IPC_COMMITTED, /* worker -> master -> other workers (the write home: on its own channels):
                    the database changed, read the audit log */
  IPC_STATS,     /* worker -> master: an ipc_stats report (periodic, or answering STATS_REQ) */
  IPC_STATS_REQ, /* master -> worker: send a fresh report; payload a uint64_t request number */
  IPC_CTL_REQ,   /* master -> worker: a control request, a JSON object with "rid" */
  IPC_CTL_REP,   /* worker -> master: its answer, a JSON object with the same "rid" */
  IPC_DRAIN,     /* master -> worker: stop gracefully (see worker_drain) */
  IPC_CANCEL,    /* worker -> master -> other workers: "principal\0request id" (listen.h) */
  IPC_ANSWER,    /* worker -> master -> other workers: "principal\0session\0response" (confirm.h) */
  IPC_PEER,      /* master -> worker: its end (fd) of a write home's channel, "slot generation" */
  IPC_WRITE,     /* worker -> the write home, on their channel: record writes (forward.h) */
  IPC_WRITTEN,   /* the write home -> their sender, on their channel: the answers (forward.h) */
  IPC_RESTORED,  /* worker -> master -> other workers: the id of a session it restored from its
                    row; a live copy elsewhere ends (worker_session_forget) */
  IPC_CMD_END
};

/* ipc_header.flags */
#define IPC_F_CONT 0x1u /* a continuation packet of the message begun before */
#define IPC_F_REROUTED                                                                             \
  0x100u /* CONN: the master already routed this request once; do not hand it back */
#define IPC_F_USER_MASK 0xff00u /* flags a sender may set; the rest belong to this module */

typedef struct ipc_header {
  uint32_t cmd;
  uint32_t slot;       /* the worker's slot (both directions) */
  uint32_t generation; /* the worker's generation: a restarted slot has a new one */
  uint32_t len;        /* payload bytes in this packet */
  uint32_t total;      /* payload bytes of the whole message */
  uint32_t flags;
} ipc_header;

/* The STATS payload: the worker's report, plus what the master needs to route. */
typedef struct ipc_stats {
  worker_stats stats;
  uint64_t adopted; /* CONN messages the worker has taken so far */
  uint64_t request; /* the STATS_REQ number this answers, 0 for a periodic report */
} ipc_stats;

/* A complete message as delivered to the owner of a channel. */
typedef struct ipc_msg {
  uint32_t cmd, slot, generation, flags;
  const char *payload; /* valid only during the callback; NUL-terminated */
  size_t len;
  int fd; /* -1, or an fd the callback now owns (it must close or keep it) */
} ipc_msg;

/* Name of a command for logs ("CONN"), or "?" */
const char *ipc_cmd_name(uint32_t cmd);

/* ---- packets: the pure layer, usable on any SEQPACKET socket ---------------- */

/*
 * Sends one packet: h (len must be <= IPC_CHUNK) and len bytes of payload,
 * with fd as SCM_RIGHTS when fd >= 0. Does not close fd. 0, -EAGAIN when
 * the socket is full, or -errno.
 */
int ipc_packet_send(int sock, const ipc_header *h, const void *payload, int fd) MCPSUB_NODISCARD;
/*
 * Receives one packet into h and payload, which holds up to IPC_CHUNK
 * bytes and a terminating NUL (cap >= IPC_CHUNK + 1; -EINVAL otherwise,
 * before anything is read). Returns 1 with
 * a valid packet (*fd = the fd it carried, or -1), 0 on EOF, -EAGAIN when
 * nothing is waiting, -EBADMSG for a packet that was dropped (malformed,
 * unknown command, truncated, or an fd the command does not take: every fd
 * received with it is closed), or another -errno.
 */
int ipc_packet_recv(int sock, ipc_header *h, char *payload, size_t cap, int *fd) MCPSUB_NODISCARD;

/* Reassembles chunked messages from validated packets. */
typedef struct ipc_assembler {
  bool active; /* a message is partly received */
  ipc_header first;
  buf_t data;
  int fd;
} ipc_assembler;

void ipc_assembler_init(ipc_assembler *a);
/* Drops a partial message (closing its fd) and frees the buffer. */
void ipc_assembler_finish(ipc_assembler *a);
/*
 * Feeds one packet (takes ownership of fd). Returns 1 when a message is
 * complete: *out is filled, its payload valid until the next push, its fd
 * owned by the caller. 0 when more packets are needed. -EBADMSG when the
 * packet does not fit the message in progress or the command's bounds: it
 * (and any partial message) is dropped and their fds closed.
 */
int ipc_assembler_push(ipc_assembler *a, const ipc_header *h, const char *payload, int fd,
                       ipc_msg *out) MCPSUB_NODISCARD;

/* ---- channels: a socket on a libuv loop ------------------------------------ */

typedef struct ipc_channel ipc_channel_t;
/* A complete message; msg->fd (if any) belongs to the callee. The callee may close ch. */
typedef void (*ipc_msg_cb)(ipc_channel_t *ch, ipc_msg *msg, void *data);
/* The peer closed its end (or the socket failed); called once. The owner closes ch. */
typedef void (*ipc_eof_cb)(ipc_channel_t *ch, void *data);

typedef struct ipc_out ipc_out;

struct ipc_channel {
  uv_loop_t *loop;
  uv_poll_t poll;
  int fd;
  uint32_t slot, generation; /* stamped on every packet sent, required on every packet received */
  ipc_msg_cb on_msg;
  ipc_eof_cb on_eof;
  void *data;
  char *rbuf; /* one packet's payload */
  ipc_assembler assembler;
  ipc_out *out_head, *out_tail;
  size_t queued;    /* payload bytes waiting in the queue */
  uint64_t dropped; /* messages dropped: queue full, or invalid on receipt */
  int events;       /* what the poll handle waits for */
  bool closing, eof, broken;
  void (*closed)(ipc_channel_t *ch);
};

/*
 * Starts a channel on sock (made non-blocking and close-on-exec here; the
 * channel owns it from now on, also on failure). 0 or a negative uv error;
 * after a failure ch needs no ipc_channel_close.
 */
int ipc_channel_init(ipc_channel_t *ch, uv_loop_t *loop, int sock, uint32_t slot,
                     uint32_t generation, ipc_msg_cb on_msg, ipc_eof_cb on_eof,
                     void *data) MCPSUB_NODISCARD;
/*
 * Sends a message: payload (copied when it must wait) and fd (ownership
 * taken: closed once sent, or on failure). flags: IPC_F_USER_MASK bits.
 * 0; -EMSGSIZE over IPC_MAX_TOTAL; -ENOBUFS when the queue is full;
 * -EPIPE when the channel is closing or its peer is gone.
 */
int ipc_channel_send(ipc_channel_t *ch, uint32_t cmd, uint32_t flags, const void *payload,
                     size_t len, int fd) MCPSUB_NODISCARD;
/* Bytes waiting to be sent. */
size_t ipc_channel_queued(const ipc_channel_t *ch);
/*
 * Closes the channel: what is still queued is dropped (fds closed), the
 * socket is closed. closed(ch) runs from the loop once the memory of ch may
 * be reused (NULL: nothing to run). Idempotent.
 */
void ipc_channel_close(ipc_channel_t *ch, void (*closed)(ipc_channel_t *ch));

/*
 * Splits a payload of n fields separated by NUL bytes (the last field runs
 * to the payload's end) into a NUL-terminated copy, fields[i] pointing
 * into it. Returns the copy (the caller frees it), or NULL when the
 * payload holds fewer than n fields (CANCEL: principal, request id;
 * ANSWER: principal, session, response).
 */
char *ipc_fields(const void *payload, size_t len, const char **fields, size_t n) MCPSUB_NODISCARD;

#endif
