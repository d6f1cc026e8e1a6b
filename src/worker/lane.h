/*
 * The store lane: how a worker on PostgreSQL keeps its loop running while
 * the database is slow.
 *
 * The loop's store connection answers over the network. Each piece of
 * work that may use it (a request, a tailer run, a control command) is a
 * lane job, and jobs run one at a time, in the order they came, each on a
 * fiber: a stack of its own (ucontext). When the job waits for PostgreSQL,
 * the store calls lane_wait_fd, which parks the fiber on a uv_poll of the
 * connection's socket (libpq is in non-blocking mode) and returns to the
 * loop. The loop meanwhile accepts and reads connections, answers
 * /healthz, writes what streams have queued and sends keepalives; jobs
 * that arrive wait their turn. When the socket is ready (or the wait's
 * deadline passes) the fiber continues where it stopped.
 *
 * So the code of a job is written as before, straight-line, and runs in
 * the same order as before: nothing else that uses the store can run in
 * between. What can change while a job waits is only what the loop does
 * without the store: a connection may close (the HTTP layer keeps a
 * dispatched request's connection until it is answered) and its close
 * callback run.
 *
 * Disabled (SQLite, whose reads are local and never wait on the network),
 * lane_run calls the job at once and nothing else here is used.
 */
#ifndef MCPSUB_LANE_H
#define MCPSUB_LANE_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

typedef struct lane_fiber lane_fiber;
typedef struct lane_job lane_job;

typedef struct lane {
  uv_loop_t *loop;
  bool enabled;
  lane_fiber *fiber;     /* made at the first job, then reused by every job */
  lane_fiber *running;   /* the fiber while a job runs on it; NULL when the lane is free */
  lane_job *head, *tail; /* jobs waiting for the lane, in order */
  size_t queued;
  /*
   * Counters: jobs run on the fiber, waits that parked one, and calls by
   * callers that are not lane jobs (each a bug: it blocked the loop, or was
   * refused while a job was mid-call).
   */
  uint64_t jobs, waits, blocked;
} lane_t;

void lane_init(lane_t *l, uv_loop_t *loop, bool enabled);

/*
 * Runs fn(arg) as a lane job: at once when the lane is disabled, or free,
 * or when called from the running job itself (it is part of that job);
 * else after the jobs before it. fn must not assume it runs before
 * lane_run returns.
 */
void lane_run(lane_t *l, void (*fn)(void *arg), void *arg);

/*
 * Runs fn(arg) as a lane job now, as lane_run does, when the lane is
 * disabled or free or the caller is the running job: true. False (fn not
 * called) while another job runs: for a callback whose arg may be gone by
 * the time a queued job would run; it tries again later (LANE_RETRY_MS).
 */
bool lane_try(lane_t *l, void (*fn)(void *arg), void *arg);
#define LANE_RETRY_MS 5

/*
 * Work a callback asks for again and again (a timer, a wake-up): queued on
 * the lane at most once at a time, since asking again before it ran adds
 * nothing. fn and arg are the caller's; queued is lane_post's.
 */
typedef struct lane_task {
  void (*fn)(void *arg);
  void *arg;
  bool queued;
} lane_task;

/* Runs t as a lane job (lane_run), unless it is already waiting its turn. */
void lane_post(lane_t *l, lane_task *t);

/* Is the caller a lane job that may wait (lane_wait_fd)? */
bool lane_on_fiber(const lane_t *l);

/* Is a job running that the caller is not part of (so it must not touch what jobs hold)? */
bool lane_busy(const lane_t *l);

/*
 * The store's wait hook: waits until fd is ready for events (POLLIN,
 * POLLOUT) or timeout_ms passed, letting the loop run meanwhile. 1 ready,
 * 0 timed out, -1 when the caller is not a lane job (it must wait some
 * other way).
 */
int lane_wait_fd(void *lane, int fd, short events, int timeout_ms);

/*
 * The store's may_use hook: false while a job is running and the caller
 * is not it (a callback of the loop while the job waits; counted in
 * blocked, as a bug).
 */
bool lane_may_use(void *lane);

/* Frees the fiber and drops queued jobs. No job may be running. */
void lane_finish(lane_t *l);

#endif
