/*
 * Structured logging: one JSON object per line on stderr, e.g.
 *   {"ts":"2026-11-22T10:00:00.123Z","level":"info","msg":"listening","addr":"127.0.0.1:9926"}
 * Fields are key/value string pairs ending with NULL; values are escaped.
 */
#ifndef MCPSUB_LOG_H
#define MCPSUB_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Returns 0, or -EINVAL for a name that is not debug/info/warn/error. */
int log_level_parse(const char *name, enum log_level *out);
void log_set_level(enum log_level level);
int log_enabled(enum log_level level);
void log_emit(enum log_level level, const char *msg, ...) __attribute__((sentinel));

#define log_debug(...) log_emit(LOG_DEBUG, __VA_ARGS__, (const char *)0)
#define log_info(...)  log_emit(LOG_INFO, __VA_ARGS__, (const char *)0)
#define log_warn(...)  log_emit(LOG_WARN, __VA_ARGS__, (const char *)0)
#define log_error(...) log_emit(LOG_ERROR, __VA_ARGS__, (const char *)0)

#endif
