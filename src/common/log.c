/*
 * Structured logging for mcpsubd and its workers: each event becomes one
 * JSON object on one line of stderr, built in memory and written with a
 * single write(2) so that lines from the master and its workers sharing
 * the same stderr never interleave mid-line. The level threshold is
 * per-process state set once at start-up. Logging must never fail the
 * caller: a short or failed write to stderr is dropped silently.
 */
#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"

static enum log_level log_threshold = LOG_INFO;

static const char *const log_level_names[] = {
    [LOG_DEBUG] = "debug",
    [LOG_INFO] = "info",
    [LOG_WARN] = "warn",
    [LOG_ERROR] = "error",
};

/* Maps debug/info/warn/error (exact, lowercase) to *out; -EINVAL otherwise. */
int log_level_parse(const char *name, enum log_level *out) {
  if (name == NULL) return -EINVAL;
  for (size_t i = 0; i < sizeof(log_level_names) / sizeof(log_level_names[0]); i++) {
    if (strcmp(name, log_level_names[i]) == 0) {
      *out = (enum log_level)i;
      return 0;
    }
  }
  return -EINVAL;
}

/* Sets the process-wide threshold; events below it are dropped. */
void log_set_level(enum log_level level) {
  log_threshold = level;
}

/* True when an event at level would be written (lets callers skip work). */
int log_enabled(enum log_level level) {
  return level >= log_threshold;
}

/* Appends "YYYY-MM-DDTHH:MM:SS.mmmZ" for the current UTC time. */
static void log_append_timestamp(buf_t *b) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  buf_printf(b, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
}

/* Writes all of data to stderr, retrying on EINTR; other errors drop the line. */
static void log_write(const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += n;
    len -= (size_t)n;
  }
}

/*
 * Writes one event when level passes the threshold. After msg come
 * (key, value) const char * pairs ended by a NULL key; a NULL value is
 * written as JSON null. Keys and values are escaped. errno is preserved so
 * that logging between a failed call and its errno check is harmless.
 */
void log_emit(enum log_level level, const char *msg, ...) {
  if (!log_enabled(level)) return;
  int saved_errno = errno;
  buf_t b;
  buf_init(&b);
  buf_append_str(&b, "{\"ts\":\"");
  log_append_timestamp(&b);
  buf_append_str(&b, "\",\"level\":\"");
  buf_append_str(&b, (unsigned)level < 4 ? log_level_names[level] : "error");
  buf_append_str(&b, "\",\"msg\":");
  buf_append_json_string(&b, msg ? msg : "", msg ? strlen(msg) : 0);

  va_list ap;
  va_start(ap, msg);
  const char *key;
  while ((key = va_arg(ap, const char *)) != NULL) {
    const char *value = va_arg(ap, const char *);
    buf_append(&b, ",", 1);
    buf_append_json_string(&b, key, strlen(key));
    buf_append(&b, ":", 1);
    if (value)
      buf_append_json_string(&b, value, strlen(value));
    else
      buf_append_str(&b, "null");
  }
  va_end(ap);
  buf_append(&b, "}\n", 2);
  log_write(b.data, b.len);
  buf_finish(&b);
  errno = saved_errno;
}
