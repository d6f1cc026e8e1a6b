/*
 * The benchmark load generator's shared interfaces. The load generator
 * (bench_loadgen) is one libuv process driving many HTTP connections to a
 * server on 127.0.0.1; these modules are its parts:
 *
 *   lg_client.c     HTTP/1.1 client connections (llhttp): keep-alive
 *                   request/response, and SSE streams
 *   lg_sse.c        incremental SSE parser, zero-copy for whole events
 *   lg_proc.c       /proc readers: CPU seconds and RSS of a process tree,
 *                   socket memory, the fd limit
 *   lg_hist.c       latency histogram with bounded memory
 *   lg_sqlwriter.c  a raw SQLite writer (another process on the same file)
 *   lg_pgwriter.c   a raw PostgreSQL writer (libpq, another client of the database)
 *   lg_tcpinfo.c    TCP_INFO's data-segment counter (frames per write)
 *   lg_run.c        sessions, streams, writers, measurement (lg_run.h)
 *   lg_scenarios.c  the scenarios, one const table of operations
 *   loadgen.c       flags, main loop, the JSON report
 *
 * Nothing here ever connects anywhere but 127.0.0.1, and everything it
 * keeps is bounded by its flags (sessions, events, bytes, seconds).
 */
#ifndef MCPSUB_BENCH_LG_H
#define MCPSUB_BENCH_LG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#define LG_HOST         "127.0.0.1"
#define LG_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define LG_NODISCARD    __attribute__((warn_unused_result))

/* CLOCK_MONOTONIC in nanoseconds: one clock for this process and its children. */
uint64_t lg_now_ns(void);

/* Aborting allocators for small internal allocations (the OOM policy). */
void *lg_alloc(size_t n);
void *lg_calloc(size_t n, size_t size);
void *lg_realloc(void *p, size_t n);

/* ---- lg_sse.c ---------------------------------------------------------- */

/* One dispatched event. Pointers are valid only during the callback. */
typedef struct lg_sse_event {
  const char *id; /* last "id:" of the event, or NULL */
  size_t id_len;
  const char *data; /* the (single) "data:" line, or NULL when none */
  size_t data_len;
} lg_sse_event;

typedef void (*lg_sse_cb)(const lg_sse_event *ev, void *data);

/*
 * Parser state for one stream: only the bytes of an event split across
 * reads are kept (copied), bounded by LG_SSE_MAX_EVENT. Lines end with LF
 * (both servers measured write LF only).
 */
#define LG_SSE_MAX_EVENT ((size_t)64 * 1024)
typedef struct lg_sse {
  char *pending;
  size_t pending_len, pending_cap;
} lg_sse;

void lg_sse_init(lg_sse *p);
void lg_sse_finish(lg_sse *p);
/* Feeds bytes; calls cb once per complete event. 0, or -EMSGSIZE when an
 * event passes LG_SSE_MAX_EVENT (the stream is then unusable). */
int lg_sse_feed(lg_sse *p, const char *bytes, size_t len, lg_sse_cb cb, void *data) LG_NODISCARD;

/* ---- lg_hist.c --------------------------------------------------------- */

/* Latencies in ns: 1 us buckets below 10 ms, 100 us buckets up to 10 s, one overflow. */
typedef struct lg_hist {
  uint64_t *buckets;
  uint64_t count, sum_ns, max_ns;
} lg_hist;

void lg_hist_init(lg_hist *h);
void lg_hist_finish(lg_hist *h);
void lg_hist_add(lg_hist *h, uint64_t ns);
/* The q-quantile (0 < q <= 1) in ns, at bucket resolution; 0 when empty. */
uint64_t lg_hist_quantile(const lg_hist *h, double q);

/* ---- lg_proc.c --------------------------------------------------------- */

typedef struct lg_proc_sample {
  double cpu_s;       /* utime + stime of the process and all its descendants */
  double user_s;      /* utime alone: the server's own code, not the kernel's work for it */
  uint64_t rss_bytes; /* VmRSS, summed the same way */
  unsigned nprocs;
} lg_proc_sample;

/* Samples pid and its descendants (found through /proc/<pid>/task/<tid>/children,
 * or by scanning /proc for ppid). 0, or -errno when pid is gone. */
int lg_proc_sample_tree(pid_t pid, lg_proc_sample *out) LG_NODISCARD;
/* This process's own CPU seconds (getrusage). */
double lg_proc_self_cpu(void);

typedef struct lg_sockstat {
  long sockets_used; /* "sockets: used" */
  long tcp_inuse;
  long tcp_mem_pages; /* pages charged to TCP buffers */
} lg_sockstat;

int lg_sockstat_read(lg_sockstat *out) LG_NODISCARD;
/* Bytes in the kernel's TCP socket slab caches (TCP, request/timewait
 * socks, sock_inode_cache), from /proc/slabinfo; -errno when unreadable. */
int lg_slab_socket_bytes(uint64_t *out) LG_NODISCARD;
/* Raises RLIMIT_NOFILE to want (hard limit too when privileged) or as far
 * as allowed; *got is the soft limit in force afterwards. */
void lg_raise_nofile(uint64_t want, uint64_t *got);

/* ---- lg_client.c ------------------------------------------------------- */

typedef struct lg_client lg_client;
typedef struct lg_conn lg_conn;

/* A complete response on a request connection; valid during the callback. */
typedef struct lg_response {
  int status;
  const char *session_id; /* Mcp-Session-Id header, or NULL */
  const char *body;       /* NUL-terminated */
  size_t body_len;
} lg_response;

/*
 * What a connection tells its owner. error is 0 on the owner's own close,
 * else a (negative) libuv error or -EPROTO for bad HTTP/SSE: the
 * connection is then already closing.
 */
typedef struct lg_conn_ops {
  void (*on_response)(lg_conn *c, const lg_response *r, void *data);
  void (*on_stream_open)(lg_conn *c, int status, void *data);
  void (*on_event)(lg_conn *c, const lg_sse_event *ev, void *data);
  void (*on_error)(lg_conn *c, int error, void *data);
} lg_conn_ops;

/* Connections to 127.0.0.1:port on loop. Stream connections bind their
 * source to one of several loopback addresses (127.0.0.2 and up), so that
 * 50,000 of them do not run out of ephemeral ports. */
lg_client *lg_client_create(uv_loop_t *loop, int port);
/* Closes every connection; the loop must then run until they are freed. */
void lg_client_close_all(lg_client *cl, bool reset);
/* Frees the client once every connection is freed. NULL is a no-op. */
void lg_client_destroy(lg_client *cl);
size_t lg_client_open_conns(const lg_client *cl);
int lg_client_port(const lg_client *cl);

/*
 * A connection, not yet connected: the first request (or the stream's GET)
 * connects it. stream selects SSE mode (one GET, then events).
 */
lg_conn *lg_conn_create(lg_client *cl, bool stream, unsigned src_index, const lg_conn_ops *ops,
                        void *data);
/*
 * Sends one request (request connections; one at a time). Takes a copy of
 * the bytes. Reconnects first when the server closed the connection while
 * it was idle. 0 or -errno (-EBUSY when a request is in flight).
 */
int lg_conn_send(lg_conn *c, const char *req, size_t len) LG_NODISCARD;
/* Closes the connection (with reset: RST, so that no TIME_WAIT is left);
 * no callback runs for it afterwards. Freed in its close callback. */
void lg_conn_close(lg_conn *c, bool reset);
bool lg_conn_busy(const lg_conn *c);
/* Data segments received so far (TCP_INFO tcpi_data_segs_in), or 0. */
uint64_t lg_conn_segs_in(const lg_conn *c);
/* The same for a socket (lg_tcpinfo.c). */
uint64_t lg_tcp_data_segs_in(int fd);

/* ---- lg_sqlwriter.c ---------------------------------------------------- */

typedef struct lg_sqlwriter_opts {
  const char *db_path; /* SQLite: the database file; PostgreSQL: the libpq URI */
  const char *table;   /* exported table with columns k (TEXT key), t, v */
  char key_prefix;     /* keys are "<prefix><n>" */
  uint64_t count;      /* rows to write */
  double rate;         /* commits per second; 0 = as fast as possible */
  double duration_s;   /* stop after this long, whatever count says */
  uint64_t *t_commit; /* optional shared array: t_commit[n] = commit start (ns), stored before it */
  /* PostgreSQL writer only: row n's key is <prefix><n * key_stride + key_offset> (stride 0 = 1),
   * for several writers on distinct keys; and, when set, *backend_cpu_s gets the CPU seconds of
   * the connection's server process, read from /proc just before it is closed. */
  uint64_t key_offset;
  uint64_t key_stride;
  double *backend_cpu_s;
} lg_sqlwriter_opts;

/* Writes rows one per transaction (WAL, synchronous=NORMAL, as mcpsubd);
 * *written counts them. 0 or -1 with a message on stderr. */
int lg_sqlwriter_run(const lg_sqlwriter_opts *o, uint64_t *written) LG_NODISCARD;

/* ---- lg_pgwriter.c ----------------------------------------------------- */

/* The same rows through libpq to the URI in db_path, one per transaction
 * (autocommit: the cluster's synchronous_commit applies). 0 or -1 with a
 * message on stderr. */
int lg_pgwriter_run(const lg_sqlwriter_opts *o, uint64_t *written) LG_NODISCARD;

/*
 * Row n of a writer that started at start_ns (lg_sqlwriter.c): waits for
 * its time at o->rate, then *t_ns is the commit's start, also stored in
 * o->t_commit[n]. False once o->duration_s has passed (write no more).
 */
bool lg_writer_next(const lg_sqlwriter_opts *o, uint64_t start_ns, uint64_t n, uint64_t *t_ns);

#endif
