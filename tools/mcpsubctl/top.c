/*
 * mcpsubctl top: a live view of a running mcpsubd, in the manner of top(1)
 * or redis-cli --stat. Every interval it asks the control socket for the
 * workers' reports ("stats") and the busiest subscribed URIs with their
 * updates since the sample before ("subs" with "busiest"), and draws one
 * frame from the difference with the sample before: per-worker sessions,
 * streams, subscriptions, connections and queued bytes; notifications and
 * commits per second, the tailer's lag and the p99 of commit ->
 * notification over the interval; the busiest URIs.
 *
 * On a terminal it takes the alternate screen, hides the cursor and reads
 * keys without echo; q, Ctrl-C (SIGINT) or SIGTERM end it, and the
 * terminal is restored on every way out. Frames fit 80 columns. With
 * --once it prints one frame as plain text (after one interval, so that
 * rates have two samples) and exits.
 */
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/mem.h"
#include "common/stats.h"
#include "ctl.h"

#define TOP_WIDTH    80
#define TOP_URIS     5
#define TOP_MAX_ROWS 16 /* workers shown */

typedef struct top_sample {
  cJSON *stats; /* the "stats" answer */
  cJSON *subs;  /* the "subs" answer */
  double at;    /* monotonic seconds */
} top_sample;

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig) {
  top_stop = 1;
}

static double top_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* Sum of key over the workers of a stats answer. */
static double sum_workers(const cJSON *stats, const char *key) {
  double n = 0;
  const cJSON *w;
  cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(stats, "workers")) n += num(w, key);
  return n;
}

static double max_workers(const cJSON *stats, const char *key) {
  double n = 0;
  const cJSON *w;
  cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(stats, "workers")) {
    double v = num(w, key);
    n = v > n ? v : n;
  }
  return n;
}

/* The commit -> notification histogram of all workers added up (counts per bucket). */
static void delay_counts(const cJSON *stats, double counts[STATS_BUCKETS + 1]) {
  memset(counts, 0, (STATS_BUCKETS + 1) * sizeof(double));
  const cJSON *w;
  cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(stats, "workers")) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(w, "notifyDelay"), "counts");
    for (int b = 0; b <= STATS_BUCKETS; b++) {
      const cJSON *v = cJSON_GetArrayItem(c, b);
      if (cJSON_IsNumber(v)) counts[b] += v->valuedouble;
    }
  }
}

/*
 * The p99 of commit -> notification between two samples, as the upper
 * bound of the bucket it falls in (seconds); -1 without observations,
 * INFINITY past the last bound.
 */
static double delay_p99(const cJSON *before, const cJSON *after) {
  double a[STATS_BUCKETS + 1], b[STATS_BUCKETS + 1], total = 0;
  delay_counts(before, a);
  delay_counts(after, b);
  for (int i = 0; i <= STATS_BUCKETS; i++) total += b[i] - a[i];
  if (total <= 0) return -1;
  double seen = 0;
  for (int i = 0; i <= STATS_BUCKETS; i++) {
    seen += b[i] - a[i];
    if (seen >= 0.99 * total) return i < STATS_BUCKETS ? stats_bucket_le[i] : INFINITY;
  }
  return INFINITY;
}

static void fmt_rate(double v, char *out, size_t n) {
  if (v >= 1e6)
    snprintf(out, n, "%.2fM", v / 1e6);
  else if (v >= 1e4)
    snprintf(out, n, "%.1fk", v / 1e3);
  else
    snprintf(out, n, "%.0f", v);
}

static void fmt_bytes(double v, char *out, size_t n) {
  cJSON *x = cJSON_CreateNumber(v);
  ctl_fmt_bytes(x, out, n);
  cJSON_Delete(x);
}

typedef struct top_uri {
  const char *uri;
  double rate;
  double sessions;
} top_uri;

static int top_uri_compare(const void *a, const void *b) {
  const top_uri *x = a, *y = b;
  if (x->rate != y->rate) return x->rate > y->rate ? -1 : 1;
  if (x->sessions != y->sessions) return x->sessions > y->sessions ? -1 : 1;
  return strcmp(x->uri, y->uri);
}

/*
 * The busiest URIs: updates per second, then subscribers. The workers pick
 * them ("busiest") and count their updates since the previous such request,
 * so a frame costs the server one walk of its URIs and TOP_URIS rows each.
 */
static size_t busiest(const top_sample *cur, top_uri *out, size_t max) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(cur->subs, "subscriptions");
  double window = num(cur->subs, "windowMs") / 1000;
  size_t n = (size_t)cJSON_GetArraySize(list), k = 0;
  top_uri *all = mem_calloc(n + 1, sizeof(*all));
  const cJSON *row;
  cJSON_ArrayForEach(row, list) {
    const cJSON *uri = cJSON_GetObjectItemCaseSensitive(row, "uri");
    if (!cJSON_IsString(uri)) continue;
    double recent = num(row, "recent");
    all[k++] = (top_uri){uri->valuestring, recent > 0 && window > 0 ? recent / window : 0,
                         num(row, "sessions")};
  }
  qsort(all, k, sizeof(*all), top_uri_compare);
  size_t shown = k < max ? k : max;
  memcpy(out, all, shown * sizeof(*all));
  free(all);
  return shown;
}

/* One frame into b: every line at most TOP_WIDTH columns. */
static void top_frame(buf_t *b, const top_sample *prev, const top_sample *cur, bool tty) {
  double dt = cur->at - prev->at;
  const cJSON *st = cur->stats;
  char line[256], a[32], c[32], d[32]; /* lines are cut at TOP_WIDTH when printed */
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  char clock[16];
  strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
  int workers = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "workers"));
  snprintf(line, sizeof(line), "mcpsubd top  workers %d  sessions %.0f  streams %.0f", workers,
           sum_workers(st, "sessions"), sum_workers(st, "streams") + sum_workers(st, "listens"));
  buf_printf(b, "%-*.*s%s\n", TOP_WIDTH - 8, TOP_WIDTH - 8, line, clock);

  double notes =
      dt > 0 ? (sum_workers(st, "framesSent") - sum_workers(prev->stats, "framesSent")) / dt : 0;
  double commits =
      dt > 0 ? (max_workers(st, "auditHead") - max_workers(prev->stats, "auditHead")) / dt : 0;
  double lag = 0;
  const cJSON *w;
  cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(st, "workers")) {
    double l = num(w, "auditHead") - num(w, "auditPosition");
    lag = l > lag ? l : lag;
  }
  double p99 = delay_p99(prev->stats, st);
  if (p99 < 0)
    snprintf(d, sizeof(d), "-");
  else if (isinf(p99))
    snprintf(d, sizeof(d), ">%.1fs", stats_bucket_le[STATS_BUCKETS - 1]);
  else
    snprintf(d, sizeof(d), "<=%gms", p99 * 1000);
  fmt_rate(notes < 0 ? 0 : notes, a, sizeof(a));
  fmt_rate(commits < 0 ? 0 : commits, c, sizeof(c));
  snprintf(line, sizeof(line), "notifications/s %s  commits/s %s  tailer lag %.0f  p99 %s", a, c,
           lag, d);
  buf_printf(b, "%.*s\n\n", TOP_WIDTH, line);

  buf_printf(b, "%-6s %8s %9s %8s %8s %8s %10s %10s\n", "WORKER", "PID", "SESSIONS", "STREAMS",
             "SUBS", "CONNS", "QUEUED", "NOTES/S");
  int shown = 0;
  const cJSON *pw = cJSON_GetObjectItemCaseSensitive(prev->stats, "workers");
  cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(st, "workers")) {
    if (shown++ == TOP_MAX_ROWS) {
      buf_printf(b, "... %d more\n", workers - TOP_MAX_ROWS);
      break;
    }
    double before = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, pw) if (num(x, "slot") == num(w, "slot")) before = num(x, "framesSent");
    double rate = dt > 0 ? (num(w, "framesSent") - before) / dt : 0;
    fmt_bytes(num(w, "queuedBytes"), a, sizeof(a));
    fmt_rate(rate < 0 ? 0 : rate, c, sizeof(c));
    buf_printf(b, "%-6.0f %8.0f %9.0f %8.0f %8.0f %8.0f %10s %10s\n", num(w, "slot"), num(w, "pid"),
               num(w, "sessions"), num(w, "streams") + num(w, "listens"), num(w, "subscriptions"),
               num(w, "connections"), a, c);
  }

  top_uri uris[TOP_URIS];
  size_t n = busiest(cur, uris, TOP_URIS);
  buf_printf(b, "\n%9s %8s  %s\n", "UPDATES/S", "SESSIONS", "BUSIEST SUBSCRIBED URIS");
  for (size_t i = 0; i < n; i++) {
    fmt_rate(uris[i].rate, a, sizeof(a));
    int room = TOP_WIDTH - 21;
    size_t len = strlen(uris[i].uri);
    if ((int)len > room) /* the end of a URI says more than its base */
      buf_printf(b, "%9s %8.0f  ...%s\n", a, uris[i].sessions,
                 uris[i].uri + len - (size_t)(room - 3));
    else
      buf_printf(b, "%9s %8.0f  %s\n", a, uris[i].sessions, uris[i].uri);
  }
  if (n == 0) buf_append_str(b, "        -        -  (none)\n");
  if (tty) buf_append_str(b, "\nq: quit\n");
}

static int top_sample_take(ctl_context *ctx, top_sample *s) {
  s->stats = s->subs = NULL;
  int rc = ctl_server_request(ctx, "stats", NULL, NULL, &s->stats);
  if (rc == 0) {
    cJSON *request = cJSON_CreateObject();
    cJSON_AddStringToObject(request, "cmd", "subs");
    cJSON_AddNumberToObject(request, "busiest", TOP_URIS);
    rc = ctl_server_call(ctx, request, &s->subs);
    cJSON_Delete(request);
  }
  s->at = top_now();
  return rc;
}

static void top_sample_free(top_sample *s) {
  cJSON_Delete(s->stats);
  cJSON_Delete(s->subs);
  s->stats = s->subs = NULL;
}

/* Waits up to ms for a key or a signal: true when it is time to quit. */
static bool top_wait(int ms, bool tty) {
  double end = top_now() + ms / 1000.0;
  while (!top_stop) {
    double left = end - top_now();
    if (left <= 0) return false;
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int r = poll(&p, tty ? 1 : 0, (int)(left * 1000) + 1);
    if (r > 0 && (p.revents & POLLIN)) {
      char k[16];
      ssize_t got = read(STDIN_FILENO, k, sizeof(k));
      for (ssize_t i = 0; i < got; i++)
        if (k[i] == 'q' || k[i] == 'Q' || k[i] == 3 /* Ctrl-C without ISIG */) return true;
      if (got == 0) return true; /* stdin closed */
    }
  }
  return true;
}

int ctl_cmd_top(ctl_context *ctx, int argc, char **argv) {
  bool once = false;
  const char *interval_text = NULL;
  const ctl_flag flags[] = {
      {"--once", NULL, NULL, &once},
      {"--interval", NULL, &interval_text, NULL},
  };
  int rc = ctl_parse_args("top", argc, argv, flags, ARRAY_LEN(flags), NULL, 0);
  if (rc != 0) return rc;
  int interval = 1000;
  if (interval_text != NULL) {
    long v;
    rc = ctl_parse_count("top", "--interval", interval_text, 100, 60000, "milliseconds", &v);
    if (rc != 0) return rc;
    interval = (int)v;
  }
  ctx->server_required = true;
  top_sample prev, cur;
  rc = top_sample_take(ctx, &prev);
  if (rc != 0) {
    top_sample_free(&prev);
    return rc;
  }
  bool tty = !once && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO);
  struct termios saved;
  struct sigaction sa = {.sa_handler = top_on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (tty) {
    tcgetattr(STDIN_FILENO, &saved);
    struct termios raw = saved;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
    fflush(stdout);
  }
  buf_t b;
  buf_init(&b);
  for (;;) {
    if (top_wait(interval, tty)) break;
    rc = top_sample_take(ctx, &cur);
    if (rc != 0) {
      top_sample_free(&cur);
      break;
    }
    buf_reset(&b);
    if (tty) buf_append_str(&b, "\033[H\033[2J");
    top_frame(&b, &prev, &cur, tty);
    fwrite(b.data, 1, b.len, stdout);
    fflush(stdout);
    top_sample_free(&prev);
    prev = cur;
    if (once) break;
  }
  buf_finish(&b);
  top_sample_free(&prev);
  if (tty) {
    fputs("\033[?25h\033[?1049l", stdout); /* the cursor and the screen as they were */
    fflush(stdout);
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  }
  return rc;
}
