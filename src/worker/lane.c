/*
 * The store lane (see lane.h). One fiber per lane is enough: jobs run one
 * at a time, so the fiber of the job that finished runs the next one. Its
 * stack is an anonymous mapping with a guard page below it, so an overflow
 * faults instead of writing over the heap.
 *
 * Switching uses glibc's ucontext. Under AddressSanitizer every switch is
 * announced (__sanitizer_start/finish_switch_fiber), so that it knows
 * which stack is in use.
 */
#include "worker/lane.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "common/log.h"
#include "common/mem.h"

#if defined(__SANITIZE_ADDRESS__)
#define LANE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LANE_ASAN 1
#endif
#endif
#ifdef LANE_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

/*
 * A job's stack. Requests parse and print JSON (nested at most
 * JSONRPC_MAX_DEPTH deep) and call the store; 1 MiB leaves room for that
 * many times over, and only the pages touched are ever backed by memory.
 */
#define LANE_STACK_BYTES (1024u * 1024u)

struct lane_fiber {
  ucontext_t ctx;
  char *map; /* guard page, then the stack */
  size_t map_len;
  void (*fn)(void *arg);
  void *arg;
  bool done; /* fn returned: the fiber is back at the top of its loop */
#ifdef LANE_ASAN
  void *fake_stack;
#endif
};

struct lane_job {
  lane_job *next;
  void (*fn)(void *arg);
  void *arg;
};

/* One wait: its handles outlive it until both close callbacks ran. */
typedef struct lane_wait {
  uv_poll_t poll;
  uv_timer_t timer;
  lane_t *lane;
  int result; /* 1 ready, 0 timed out, -2 still waiting */
  int open;   /* handles not yet closed */
} lane_wait;

/* The loop's context, saved while a fiber runs (a lane belongs to one thread). */
static __thread ucontext_t loop_ctx;
static __thread lane_fiber *current;
#ifdef LANE_ASAN
static __thread void *loop_fake_stack;
static __thread const void *loop_stack_bottom;
static __thread size_t loop_stack_size;
#endif

static char *fiber_stack(lane_fiber *f, size_t *len) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  *len = f->map_len - page;
  return f->map + page;
}

/* From the loop into f, until f finishes its job or waits. */
static void lane_switch_in(lane_fiber *f) {
  current = f;
#ifdef LANE_ASAN
  size_t len;
  char *stack = fiber_stack(f, &len);
  __sanitizer_start_switch_fiber(&loop_fake_stack, stack, len);
#endif
  swapcontext(&loop_ctx, &f->ctx);
#ifdef LANE_ASAN
  __sanitizer_finish_switch_fiber(loop_fake_stack, NULL, NULL);
#endif
  current = NULL;
}

/* From f back to the loop; returns when the loop switches into f again. */
static void lane_switch_out(lane_fiber *f) {
#ifdef LANE_ASAN
  __sanitizer_start_switch_fiber(&f->fake_stack, loop_stack_bottom, loop_stack_size);
#endif
  swapcontext(&f->ctx, &loop_ctx);
#ifdef LANE_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &loop_stack_bottom, &loop_stack_size);
#endif
}

/* A fiber's whole life: run a job, go back to the loop, run the next one it is given. */
static void lane_fiber_main(void) {
  lane_fiber *f = current;
#ifdef LANE_ASAN
  __sanitizer_finish_switch_fiber(NULL, &loop_stack_bottom, &loop_stack_size);
#endif
  for (;;) {
    f->fn(f->arg);
    f->done = true;
    lane_switch_out(f);
  }
}

static lane_fiber *lane_fiber_new(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  lane_fiber *f = mem_calloc(1, sizeof(*f));
  f->map_len = LANE_STACK_BYTES + page;
  f->map = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (f->map == MAP_FAILED || mprotect(f->map, page, PROT_NONE) != 0 || getcontext(&f->ctx) != 0) {
    if (f->map != MAP_FAILED) munmap(f->map, f->map_len);
    free(f);
    return NULL;
  }
  f->ctx.uc_stack.ss_sp = fiber_stack(f, &f->ctx.uc_stack.ss_size);
  f->ctx.uc_link = NULL; /* lane_fiber_main never returns */
  makecontext(&f->ctx, lane_fiber_main, 0);
  return f;
}

void lane_init(lane_t *l, uv_loop_t *loop, bool enabled) {
  memset(l, 0, sizeof(*l));
  l->loop = loop;
  l->enabled = enabled;
}

bool lane_on_fiber(const lane_t *l) {
  return current != NULL && current == l->running;
}

bool lane_busy(const lane_t *l) {
  return l->running != NULL && !lane_on_fiber(l);
}

bool lane_may_use(void *lane) {
  lane_t *l = lane;
  if (!lane_busy(l)) return true;
  if (l->blocked++ == 0) log_warn("a database call was refused: its caller is not a lane job");
  return false;
}

/*
 * Runs jobs from the loop while the lane is free: fn first (when not
 * NULL), then the queue, until one waits or the queue is empty.
 */
static void lane_pump(lane_t *l, void (*fn)(void *arg), void *arg) {
  for (;;) {
    if (fn == NULL) {
      lane_job *j = l->head;
      if (j == NULL) return;
      l->head = j->next;
      if (l->head == NULL) l->tail = NULL;
      l->queued--;
      fn = j->fn;
      arg = j->arg;
      free(j);
    }
    lane_fiber *f = l->fiber != NULL ? l->fiber : (l->fiber = lane_fiber_new());
    if (f == NULL) {
      /* No stack for a fiber: the job runs on the loop (its waits then block). */
      log_warn("cannot make a fiber for the store lane; this job blocks the loop");
      fn(arg);
      fn = NULL;
      continue;
    }
    f->fn = fn;
    f->arg = arg;
    f->done = false;
    fn = NULL;
    l->running = f;
    l->jobs++;
    lane_switch_in(f);
    if (!f->done) return; /* waiting: a wait's callback resumes it */
    l->running = NULL;
  }
}

void lane_run(lane_t *l, void (*fn)(void *arg), void *arg) {
  if (!l->enabled || current != NULL) {
    fn(arg); /* disabled, or part of the running job */
    return;
  }
  if (l->running == NULL) {
    lane_pump(l, fn, arg);
    return;
  }
  lane_job *j = mem_alloc(sizeof(*j));
  j->next = NULL;
  j->fn = fn;
  j->arg = arg;
  if (l->tail != NULL)
    l->tail->next = j;
  else
    l->head = j;
  l->tail = j;
  l->queued++;
}

static void lane_task_run(void *arg) {
  lane_task *t = arg;
  t->queued = false; /* asking again from here on queues it again */
  t->fn(t->arg);
}

void lane_post(lane_t *l, lane_task *t) {
  if (t->queued) return;
  t->queued = true;
  lane_run(l, lane_task_run, t);
}

bool lane_try(lane_t *l, void (*fn)(void *arg), void *arg) {
  if (lane_busy(l)) return false;
  lane_run(l, fn, arg);
  return true;
}

/* A wait is over: back into its job, then on with the queue if the job finished. */
static void lane_resume(lane_t *l) {
  lane_fiber *f = l->running;
  lane_switch_in(f);
  if (!f->done) return;
  l->running = NULL;
  lane_pump(l, NULL, NULL);
}

static void lane_wait_closed(uv_handle_t *h) {
  lane_wait *w = h->data;
  if (--w->open == 0) free(w);
}

static void lane_wait_over(lane_wait *w, int result) {
  if (w->result != -2) return;
  w->result = result;
  uv_poll_stop(&w->poll);
  uv_timer_stop(&w->timer);
  lane_resume(w->lane);
}

static void lane_on_ready(uv_poll_t *h, int status, int events) {
  lane_wait_over(h->data, 1); /* an error too: the caller's next read reports it */
}

static void lane_on_timeout(uv_timer_t *h) {
  lane_wait_over(h->data, 0);
}

int lane_wait_fd(void *lane, int fd, short events, int timeout_ms) {
  lane_t *l = lane;
  if (!lane_on_fiber(l)) {
    /* A caller that is not a lane job: it blocks the loop (a bug to report, not a failure). */
    if (l->enabled && l->blocked++ == 0)
      log_warn("a database wait blocked the loop: its caller is not a lane job");
    return -1;
  }
  lane_wait *w = mem_calloc(1, sizeof(*w));
  w->lane = l;
  w->result = -2;
  if (uv_poll_init_socket(l->loop, &w->poll, fd) != 0) {
    free(w);
    return -1;
  }
  w->poll.data = w->timer.data = w;
  w->open = 2;
  uv_timer_init(l->loop, &w->timer);
  int ev = ((events & POLLIN) ? UV_READABLE : 0) | ((events & POLLOUT) ? UV_WRITABLE : 0);
  int rc = uv_poll_start(&w->poll, ev, lane_on_ready);
  if (rc == 0) rc = uv_timer_start(&w->timer, lane_on_timeout, timeout_ms > 0 ? timeout_ms : 0, 0);
  int result = -1;
  if (rc == 0) {
    l->waits++;
    lane_switch_out(l->running);
    result = w->result;
  }
  uv_close((uv_handle_t *)&w->poll, lane_wait_closed);
  uv_close((uv_handle_t *)&w->timer, lane_wait_closed);
  return result;
}

void lane_finish(lane_t *l) {
  while (l->head != NULL) {
    lane_job *j = l->head;
    l->head = j->next;
    free(j);
  }
  l->tail = NULL;
  l->queued = 0;
  if (l->fiber != NULL && l->running == NULL) {
    munmap(l->fiber->map, l->fiber->map_len);
    free(l->fiber);
    l->fiber = NULL;
  }
}
