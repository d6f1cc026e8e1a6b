/*
 * mcpsubd's command line: the defaults, one table of flags, and the checks
 * that turn argv into a config_t or a one-line error naming the offending
 * flag. The same table drives parsing and the --help text, so a flag cannot
 * be accepted without being documented. This module is pure: it touches no
 * file and no socket (the database path is not opened, the listen address
 * is not resolved); main() does that with the result.
 */
#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "common/buf.h"
#include "common/errmsg.h"
#include "common/store.h"

#define CONFIG_DEFAULT_HOST         "127.0.0.1"
#define CONFIG_DEFAULT_PORT         9926
#define CONFIG_DEFAULT_DB           "data/mcpsub.db"
#define CONFIG_DEFAULT_SCHEMA       "schema/example.sql"
#define CONFIG_DEFAULT_IDLE_S       1800
#define CONFIG_DEFAULT_MAX_BODY     (1024 * 1024)
#define CONFIG_MIN_MAX_BODY         1024
#define CONFIG_MAX_MAX_BODY         (1024ULL * 1024 * 1024)
#define CONFIG_DEFAULT_KEEPALIVE_S  15
#define CONFIG_DEFAULT_MAX_SESSIONS 10000
#define CONFIG_DEFAULT_PAGE_SIZE    100
#define CONFIG_MAX_PAGE_SIZE        1000
#define CONFIG_DEFAULT_RETAIN_ROWS  1000000
#define CONFIG_DEFAULT_RETAIN_AGE_S 604800
#define CONFIG_DEFAULT_DB_READERS   4
#define CONFIG_MAX_DB_READERS       64

typedef int (*config_setter)(config_t *cfg, const char *flag, const char *value, char *err,
                             size_t errlen);

typedef struct config_flag {
  const char *name;    /* "--listen" */
  const char *metavar; /* NULL for flags without a value */
  const char *defval;  /* shown in --help; NULL when there is none */
  const char *help;    /* one line */
  config_setter set;   /* NULL for --help and --version */
} config_flag;

/*
 * Parses a decimal unsigned integer in [min, max]; with size_suffix, a
 * trailing k/K (KiB) or m/M (MiB) multiplies it. Rejects signs, blanks,
 * junk and overflow with a message naming flag.
 */
static int config_parse_uint(const char *flag, const char *value, uint64_t min, uint64_t max,
                             bool size_suffix, uint64_t *out, char *err, size_t errlen) {
  const char *p = value;
  if (!isdigit((unsigned char)*p)) goto bad;
  errno = 0;
  char *end;
  unsigned long long n = strtoull(p, &end, 10);
  if (errno == ERANGE) goto range;
  uint64_t mult = 1;
  if (size_suffix && *end != '\0' && end[1] == '\0') {
    if (*end == 'k' || *end == 'K')
      mult = 1024;
    else if (*end == 'm' || *end == 'M')
      mult = 1024 * 1024;
    else
      goto bad;
    end++;
  }
  if (*end != '\0') goto bad;
  if (n > UINT64_MAX / mult) goto range;
  n *= mult;
  if (n < min || n > max) goto range;
  *out = n;
  return 0;
bad:
  return errmsg(err, errlen, -EINVAL, "%s: expected a non-negative integer%s, got \"%s\"", flag,
                size_suffix ? " (optionally with k or m suffix)" : "", value);
range:
  return errmsg(err, errlen, -EINVAL, "%s: %s is out of range (%" PRIu64 "..%" PRIu64 ")", flag,
                value, min, max);
}

/* Splits "HOST:PORT", "[V6]:PORT" or "PORT" into cfg's listen fields. */
static int config_set_listen(config_t *cfg, const char *flag, const char *value, char *err,
                             size_t errlen) {
  const char *host = CONFIG_DEFAULT_HOST, *port = value;
  size_t host_len = strlen(CONFIG_DEFAULT_HOST);
  if (value[0] == '[') {
    const char *close = strchr(value, ']');
    if (close == NULL || close[1] != ':')
      return errmsg(err, errlen, -EINVAL, "%s: expected [IPV6]:PORT, got \"%s\"", flag, value);
    host = value + 1;
    host_len = (size_t)(close - host);
    port = close + 2;
  } else {
    const char *colon = strrchr(value, ':');
    if (colon) {
      if (memchr(value, ':', (size_t)(colon - value)))
        return errmsg(err, errlen, -EINVAL, "%s: write an IPv6 address in brackets, as [::1]:9926",
                      flag);
      host = value;
      host_len = (size_t)(colon - value);
      port = colon + 1;
    }
  }
  if (host_len == 0) return errmsg(err, errlen, -EINVAL, "%s: empty host in \"%s\"", flag, value);
  if (host_len >= sizeof(cfg->listen_host))
    return errmsg(err, errlen, -EINVAL, "%s: host is too long", flag);
  uint64_t n = 0;
  if (config_parse_uint(flag, port, 0, 65535, false, &n, NULL, 0) < 0)
    return errmsg(err, errlen, -EINVAL,
                  "%s: expected HOST:PORT, [IPV6]:PORT or PORT (0..65535), got \"%s\"", flag,
                  value);
  memcpy(cfg->listen_host, host, host_len);
  cfg->listen_host[host_len] = '\0';
  cfg->listen_port = (int)n;
  return 0;
}

static int config_set_db(config_t *cfg, const char *flag, const char *value, char *err,
                         size_t errlen) {
  if (value[0] == '\0')
    return errmsg(err, errlen, -EINVAL, "%s: the database path must not be empty", flag);
  cfg->db_path = value;
  return 0;
}

static int config_set_schema(config_t *cfg, const char *flag, const char *value, char *err,
                             size_t errlen) {
  cfg->schema_path = strcmp(value, "none") == 0 ? "" : value;
  return 0;
}

/* Checks and stores an explicit base URL, without trailing slashes. */
static int config_set_public_url(config_t *cfg, const char *flag, const char *value, char *err,
                                 size_t errlen) {
  size_t len = strlen(value);
  while (len > 0 && value[len - 1] == '/') len--;
  size_t scheme = strncmp(value, "http://", 7) == 0    ? 7
                  : strncmp(value, "https://", 8) == 0 ? 8
                                                       : 0;
  if (scheme == 0)
    return errmsg(err, errlen, -EINVAL, "%s: must start with http:// or https://, got \"%s\"", flag,
                  value);
  if (len <= scheme) return errmsg(err, errlen, -EINVAL, "%s: no host in \"%s\"", flag, value);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)value[i];
    if (c <= 0x20 || c == 0x7f || c == '?' || c == '#')
      return errmsg(err, errlen, -EINVAL,
                    "%s: must not contain spaces, control characters, '?' or '#'", flag);
  }
  if (len >= sizeof(cfg->public_url))
    return errmsg(err, errlen, -EINVAL, "%s: longer than %zu bytes", flag,
                  sizeof(cfg->public_url) - 1);
  memcpy(cfg->public_url, value, len);
  cfg->public_url[len] = '\0';
  return 0;
}

static int config_set_log_level(config_t *cfg, const char *flag, const char *value, char *err,
                                size_t errlen) {
  if (log_level_parse(value, &cfg->log_level) < 0)
    return errmsg(err, errlen, -EINVAL, "%s: expected debug, info, warn or error, got \"%s\"", flag,
                  value);
  return 0;
}

/*
 * Appends the comma-separated origins in value to the ones already held.
 * Entries are trimmed of blanks and trailing '/'; empty entries are
 * skipped. The storage is rebuilt so that every pointer stays valid.
 */
static int config_set_origins(config_t *cfg, const char *flag, const char *value, char *err,
                              size_t errlen) {
  buf_t all;
  buf_init(&all);
  size_t n = cfg->n_allowed_origins;
  for (size_t i = 0; i < n; i++)
    buf_append(&all, cfg->allowed_origins[i], strlen(cfg->allowed_origins[i]) + 1);
  const char *p = value;
  while (*p) {
    const char *end = strchr(p, ',');
    if (end == NULL) end = p + strlen(p);
    const char *s = p, *e = end;
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && (isspace((unsigned char)e[-1]) || e[-1] == '/')) e--;
    if (e > s) {
      if (n == CONFIG_MAX_ORIGINS) {
        buf_finish(&all);
        return errmsg(err, errlen, -EINVAL, "%s: at most %d origins", flag, CONFIG_MAX_ORIGINS);
      }
      buf_append(&all, s, (size_t)(e - s));
      buf_append(&all, "", 1);
      n++;
    }
    p = *end ? end + 1 : end;
  }
  free(cfg->origins_storage);
  cfg->origins_storage = buf_steal(&all);
  const char *q = cfg->origins_storage;
  for (size_t i = 0; i < n; i++) {
    cfg->allowed_origins[i] = q;
    q += strlen(q) + 1;
  }
  cfg->n_allowed_origins = n;
  return 0;
}

static int config_set_idle_timeout(config_t *cfg, const char *flag, const char *value, char *err,
                                   size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, UINT32_MAX, false, &n, err, errlen);
  if (rc == 0) cfg->idle_timeout_ms = n * 1000;
  return rc;
}

static int config_set_max_body(config_t *cfg, const char *flag, const char *value, char *err,
                               size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, CONFIG_MIN_MAX_BODY, CONFIG_MAX_MAX_BODY, true, &n, err,
                             errlen);
  if (rc == 0) cfg->max_body = (size_t)n;
  return rc;
}

static int config_set_keepalive(config_t *cfg, const char *flag, const char *value, char *err,
                                size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, 86400, false, &n, err, errlen);
  if (rc == 0) cfg->keepalive_ms = n * 1000;
  return rc;
}

static int config_set_max_sessions(config_t *cfg, const char *flag, const char *value, char *err,
                                   size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, 100000000, false, &n, err, errlen);
  if (rc == 0) cfg->max_sessions = (size_t)n;
  return rc;
}

static int config_set_page_size(config_t *cfg, const char *flag, const char *value, char *err,
                                size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, CONFIG_MAX_PAGE_SIZE, false, &n, err, errlen);
  if (rc == 0) cfg->page_size = (int)n;
  return rc;
}

static int config_set_retain_rows(config_t *cfg, const char *flag, const char *value, char *err,
                                  size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, INT64_MAX, false, &n, err, errlen);
  if (rc == 0) cfg->audit_retain_rows = (int64_t)n;
  return rc;
}

static int config_set_retain_age(config_t *cfg, const char *flag, const char *value, char *err,
                                 size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, INT64_MAX / 1000, false, &n, err, errlen);
  if (rc == 0) cfg->audit_retain_ms = (int64_t)n * 1000;
  return rc;
}

#define STR2(x) #x
#define STR(x)  STR2(x)

static int config_set_max_stream_queue(config_t *cfg, const char *flag, const char *value,
                                       char *err, size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 4096, CONFIG_MAX_MAX_BODY, true, &n, err, errlen);
  if (rc == 0) cfg->max_stream_queue = (size_t)n;
  return rc;
}

static int config_set_max_subscriptions(config_t *cfg, const char *flag, const char *value,
                                        char *err, size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, 1000000, false, &n, err, errlen);
  if (rc == 0) cfg->max_subscriptions = (size_t)n;
  return rc;
}

static int config_set_coalesce(config_t *cfg, const char *flag, const char *value, char *err,
                               size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 3600000, false, &n, err, errlen);
  if (rc == 0) cfg->coalesce_ms = n;
  return rc;
}

static int config_set_max_wait(config_t *cfg, const char *flag, const char *value, char *err,
                               size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, 86400, false, &n, err, errlen);
  if (rc == 0) cfg->max_wait_ms = n * 1000;
  return rc;
}

static int config_set_strict(config_t *cfg, const char *flag, const char *value, char *err,
                             size_t errlen) {
  cfg->strict_subscribe = true;
  return 0;
}

static int config_set_db_no_prepare(config_t *cfg, const char *flag, const char *value, char *err,
                                    size_t errlen) {
  cfg->db_no_prepare = true;
  return 0;
}

static int config_set_workers(config_t *cfg, const char *flag, const char *value, char *err,
                              size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, CONFIG_MAX_WORKERS, false, &n, err, errlen);
  if (rc == 0) cfg->workers = (int)n;
  return rc;
}

static int config_set_drain_timeout(config_t *cfg, const char *flag, const char *value, char *err,
                                    size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 3600, false, &n, err, errlen);
  if (rc == 0) cfg->drain_timeout_ms = n * 1000;
  return rc;
}

static int config_set_drain_grace(config_t *cfg, const char *flag, const char *value, char *err,
                                  size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 60000, false, &n, err, errlen);
  if (rc == 0) cfg->drain_grace_ms = n;
  return rc;
}

static int config_set_control_socket(config_t *cfg, const char *flag, const char *value, char *err,
                                     size_t errlen) {
  if (value[0] == '\0') return errmsg(err, errlen, -EINVAL, "%s: empty path", flag);
  cfg->control_socket = value;
  return 0;
}

static int config_set_worker_slot(config_t *cfg, const char *flag, const char *value, char *err,
                                  size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, CONFIG_MAX_WORKERS - 1, false, &n, err, errlen);
  if (rc == 0) cfg->worker_slot = (int)n;
  return rc;
}

static int config_set_worker_generation(config_t *cfg, const char *flag, const char *value,
                                        char *err, size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, UINT32_MAX, false, &n, err, errlen);
  if (rc == 0) cfg->worker_generation = (uint32_t)n;
  return rc;
}

static int config_set_max_connections(config_t *cfg, const char *flag, const char *value, char *err,
                                      size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 10000000, false, &n, err, errlen);
  if (rc == 0) cfg->max_connections = (size_t)n;
  return rc;
}

static int config_set_max_per_address(config_t *cfg, const char *flag, const char *value, char *err,
                                      size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 10000000, false, &n, err, errlen);
  if (rc == 0) cfg->max_connections_per_address = (size_t)n;
  return rc;
}

static int config_set_confirm(config_t *cfg, const char *flag, const char *value, char *err,
                              size_t errlen) {
  static const char *const names[] = {
      [CONFIRM_NEVER] = "never", [CONFIRM_ELICIT] = "elicit", [CONFIRM_REFUSE] = "refuse"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcmp(value, names[i]) == 0) {
      cfg->confirm_destructive = (int)i;
      return 0;
    }
  }
  return errmsg(err, errlen, -EINVAL, "%s: expected never, elicit or refuse, got \"%s\"", flag,
                value);
}

static int config_set_confirm_rows(config_t *cfg, const char *flag, const char *value, char *err,
                                   size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 1000000000, false, &n, err, errlen);
  if (rc == 0) cfg->confirm_rows = (int64_t)n;
  return rc;
}

static int config_set_confirm_timeout(config_t *cfg, const char *flag, const char *value, char *err,
                                      size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, 3600, false, &n, err, errlen);
  if (rc == 0) cfg->confirm_timeout_ms = n * 1000;
  return rc;
}

/* --config is read by main() (config_expand_argv) before the flags: nothing is left to do. */
static int config_set_config(config_t *cfg, const char *flag, const char *value, char *err,
                             size_t errlen) {
  return 0;
}

static int config_set_db_readers(config_t *cfg, const char *flag, const char *value, char *err,
                                 size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, CONFIG_MAX_DB_READERS, false, &n, err, errlen);
  if (rc == 0) cfg->db_readers = (int)n;
  return rc;
}

static int config_set_write_timeout(config_t *cfg, const char *flag, const char *value, char *err,
                                    size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 1, 3600000, false, &n, err, errlen);
  if (rc == 0) cfg->write_timeout_ms = n;
  return rc;
}

static int config_set_path(const char **field, const char *flag, const char *value, char *err,
                           size_t errlen) {
  if (value[0] == '\0') return errmsg(err, errlen, -EINVAL, "%s: empty value", flag);
  *field = value;
  return 0;
}

static int config_set_auth_keys(config_t *cfg, const char *flag, const char *value, char *err,
                                size_t errlen) {
  return config_set_path(&cfg->auth_keys, flag, value, err, errlen);
}

static int config_set_auth_jwks(config_t *cfg, const char *flag, const char *value, char *err,
                                size_t errlen) {
  return config_set_path(&cfg->auth_jwks, flag, value, err, errlen);
}

static int config_set_auth_issuer(config_t *cfg, const char *flag, const char *value, char *err,
                                  size_t errlen) {
  return config_set_path(&cfg->auth_issuer, flag, value, err, errlen);
}

static int config_set_auth_audience(config_t *cfg, const char *flag, const char *value, char *err,
                                    size_t errlen) {
  if (value[0] == '\0' || strlen(value) >= sizeof(cfg->auth_audience))
    return errmsg(err, errlen, -EINVAL, "%s: empty or too long", flag);
  snprintf(cfg->auth_audience, sizeof(cfg->auth_audience), "%s", value);
  return 0;
}

static int config_set_policy(config_t *cfg, const char *flag, const char *value, char *err,
                             size_t errlen) {
  return config_set_path(&cfg->policy_path, flag, value, err, errlen);
}

static int config_set_limit(int64_t *field, const char *flag, const char *value, char *err,
                            size_t errlen) {
  uint64_t n = 0;
  int rc = config_parse_uint(flag, value, 0, 100000000, false, &n, err, errlen);
  if (rc == 0) *field = (int64_t)n;
  return rc;
}

static int config_set_limit_sessions(config_t *cfg, const char *flag, const char *value, char *err,
                                     size_t errlen) {
  return config_set_limit(&cfg->limit_sessions, flag, value, err, errlen);
}

static int config_set_limit_subscriptions(config_t *cfg, const char *flag, const char *value,
                                          char *err, size_t errlen) {
  return config_set_limit(&cfg->limit_subscriptions, flag, value, err, errlen);
}

static int config_set_limit_streams(config_t *cfg, const char *flag, const char *value, char *err,
                                    size_t errlen) {
  return config_set_limit(&cfg->limit_streams, flag, value, err, errlen);
}

static int config_set_rate_limit(config_t *cfg, const char *flag, const char *value, char *err,
                                 size_t errlen) {
  int64_t n = 0;
  int rc = config_set_limit(&n, flag, value, err, errlen);
  if (rc == 0) cfg->rate_limit = (double)n;
  return rc;
}

static int config_set_rate_burst(config_t *cfg, const char *flag, const char *value, char *err,
                                 size_t errlen) {
  return config_set_limit(&cfg->rate_burst, flag, value, err, errlen);
}

static int config_set_allow_anonymous(config_t *cfg, const char *flag, const char *value, char *err,
                                      size_t errlen) {
  cfg->allow_anonymous = true;
  return 0;
}

bool config_auth_enabled(const config_t *cfg) {
  return cfg->auth_keys != NULL || cfg->auth_jwks != NULL;
}

bool config_host_is_loopback(const char *host) {
  return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
         strcmp(host, "localhost") == 0;
}

/* Flags with a NULL help are internal: accepted, never shown by --help. */
static const config_flag config_flags[] = {
    {"--listen", "HOST:PORT", CONFIG_DEFAULT_HOST ":" STR(CONFIG_DEFAULT_PORT),
     "address to listen on; IPv6 as [::1]:PORT; a bare PORT\n"
     "means 127.0.0.1:PORT; port 0 picks a free port",
     config_set_listen},
    {"--db", "PATH", CONFIG_DEFAULT_DB, "SQLite database file", config_set_db},
    {"--schema", "PATH", CONFIG_DEFAULT_SCHEMA,
     "SQL run at start to create the application tables;\n"
     "\"none\" or \"\" runs nothing",
     config_set_schema},
    {"--public-url", "URL", "http://HOST:PORT of --listen",
     "base of resource URIs as clients reach the server:\n"
     "http:// or https://, no query; a trailing '/' is dropped",
     config_set_public_url},
    {"--log-level", "LEVEL", "info", "least severe level logged: debug, info, warn, error",
     config_set_log_level},
    {"--allowed-origins", "LIST", "none",
     "comma-separated Origin values accepted besides\n"
     "localhost ones; repeatable; at most " STR(CONFIG_MAX_ORIGINS),
     config_set_origins},
    {"--idle-timeout", "SECONDS", STR(CONFIG_DEFAULT_IDLE_S),
     "end a session idle this long (no request, no stream)", config_set_idle_timeout},
    {"--max-body", "BYTES", "1m",
     "largest request body (suffix k or m; 1k to 1024m);\n"
     "a larger one is refused with 413",
     config_set_max_body},
    {"--sse-keepalive", "SECONDS", STR(CONFIG_DEFAULT_KEEPALIVE_S),
     "interval of keep-alive comments on idle SSE streams", config_set_keepalive},
    {"--max-sessions", "N", STR(CONFIG_DEFAULT_MAX_SESSIONS),
     "most live sessions; a new initialize beyond it fails", config_set_max_sessions},
    {"--page-size", "N", STR(CONFIG_DEFAULT_PAGE_SIZE),
     "rows per collection read and per list page (1-" STR(CONFIG_MAX_PAGE_SIZE) ")",
     config_set_page_size},
    {"--audit-retain-rows", "N", STR(CONFIG_DEFAULT_RETAIN_ROWS),
     "audit-log rows kept for resumption; 0 = no limit", config_set_retain_rows},
    {"--audit-retain-age", "SECONDS", STR(CONFIG_DEFAULT_RETAIN_AGE_S) " (7 days)",
     "audit-log rows older than this are pruned; 0 = no limit", config_set_retain_age},
    {"--max-subscriptions", "N", "1000", "most subscriptions per session",
     config_set_max_subscriptions},
    {"--max-stream-queue", "BYTES", "1m",
     "bytes queued on one SSE stream before it is cut (the\n"
     "client resumes with Last-Event-ID); suffix k or m",
     config_set_max_stream_queue},
    {"--coalesce-ms", "MS", "0 (off)",
     "at most one update per URI per subscription in this\n"
     "window; the last change is always sent",
     config_set_coalesce},
    {"--confirm-destructive", "never|elicit|refuse", "elicit",
     "delete_record, delete_records and large put_records\n"
     "ask the user first (elicitation) when the client can\n"
     "be asked; for one that cannot: elicit proceeds, refuse\n"
     "refuses; never asks nobody",
     config_set_confirm},
    {"--confirm-rows", "N", "10", "put_records changing more rows than this asks first",
     config_set_confirm_rows},
    {"--confirm-timeout", "SECONDS", "120",
     "how long a confirmation waits for the user's answer\n"
     "(then nothing changes)",
     config_set_confirm_timeout},
    {"--strict-subscribe", NULL, NULL,
     "refuse resources/subscribe before the session's GET\n"
     "stream is open (Harper's behaviour)",
     config_set_strict},
    {"--max-wait", "SECONDS", "300", "longest wait of the wait_and_read tool", config_set_max_wait},
    {"--workers", "N", "the number of CPUs",
     "worker processes behind one master (at most " STR(
         CONFIG_MAX_WORKERS) ");\n"
                             "0 = everything in one process",
     config_set_workers},
    {"--drain-timeout", "SECONDS", STR(CONFIG_DEFAULT_DRAIN_S),
     "on SIGTERM or SIGINT, how long in-flight requests and\n"
     "connections may take before they are closed",
     config_set_drain_timeout},
    {"--drain-grace-ms", "MS", "0",
     "on SIGTERM or SIGINT, how long to go on serving while /readyz answers\n"
     "503 before the drain begins, so that a load balancer takes the host out\n"
     "while nothing it sends is refused; set it to the balancer's detection\n"
     "time (fall x inter): see deploy/haproxy/mcpsub.cfg",
     config_set_drain_grace},
    {"--control-socket", "PATH", "mcpsubd.sock beside a SQLite --db",
     "unix socket of the control interface (mcpsubctl)", config_set_control_socket},
    {"--max-connections", "N", "100000",
     "open TCP connections in all (each worker takes its share); over it a new\n"
     "connection gets a short 503 and is closed; 0 = no bound",
     config_set_max_connections},
    {"--max-connections-per-address", "N", "0 (no bound)",
     "open TCP connections from one client address, in each worker", config_set_max_per_address},
    {"--write-timeout", "MS", "15000",
     "how long a write may wait for a lock another process holds (a backup, a\n"
     "batch job) before it fails with 503 and Retry-After",
     config_set_write_timeout},
    {"--db-readers", "N", STR(CONFIG_DEFAULT_DB_READERS),
     "PostgreSQL: connections per worker that read records and collections\n"
     "(resources/read, REST GET, the get_record, query_records and list_tables\n"
     "tools, completion/complete) in parallel, each on a thread, so that a slow\n"
     "read holds up no other request; 0 = those reads take turns with every\n"
     "other request (SQLite: not used; a turn's reads share one connection of\n"
     "their own and one read transaction)",
     config_set_db_readers},
    {"--db-no-prepare", NULL, NULL,
     "PostgreSQL: run every statement unnamed instead of preparing those a\n"
     "connection runs more than once; for a pooler in transaction mode that\n"
     "does not keep prepared statements (PgBouncer before 1.21)",
     config_set_db_no_prepare},
    {"--auth-keys", "FILE", "none",
     "API key file (written by mcpsubctl key add); every request then needs\n"
     "Authorization: Bearer KEY (or a JWT with --auth-jwks)",
     config_set_auth_keys},
    {"--auth-jwks", "FILE|URL", "none",
     "JSON Web Key Set of the OAuth authorization server whose access tokens\n"
     "(JWT: RS256, ES256, EdDSA) are accepted; a URL is fetched at start and\n"
     "again when a token names an unknown key",
     config_set_auth_jwks},
    {"--auth-issuer", "URL", "none (required with --auth-jwks)",
     "the iss every access token must carry (the authorization server's issuer)",
     config_set_auth_issuer},
    {"--auth-audience", "URI", "{public-url}/mcp",
     "the resource every access token must name in aud (RFC 8707)", config_set_auth_audience},
    {"--policy", "FILE", "the built-in roles reader, writer, admin",
     "access policy (JSON): roles with read/subscribe/write per table and row\n"
     "scopes, OAuth scope to role mappings, API key attributes; see docs/security.md",
     config_set_policy},
    {"--limit-sessions", "N", "100 with authentication, else none (0)",
     "live sessions per principal (over it: 429 with Retry-After)", config_set_limit_sessions},
    {"--limit-subscriptions", "N", "10000 with authentication, else none (0)",
     "subscriptions per principal, over all its sessions", config_set_limit_subscriptions},
    {"--limit-streams", "N", "100 with authentication, else none (0)",
     "open SSE streams per principal (in each worker)", config_set_limit_streams},
    {"--rate-limit", "PER_SECOND", "100 with authentication, else none (0)",
     "requests per second per principal (a token bucket; over all workers)", config_set_rate_limit},
    {"--rate-burst", "N", "twice --rate-limit", "requests a principal may make at once",
     config_set_rate_burst},
    {"--allow-anonymous", NULL, NULL,
     "serve an address that is not loopback without --auth-keys/--auth-jwks\n"
     "(anyone who reaches it may do anything; logged as a warning at start)",
     config_set_allow_anonymous},
    {"--worker-slot", "N", NULL, NULL, config_set_worker_slot},
    {"--worker-generation", "G", NULL, NULL, config_set_worker_generation},
    {"--config", "FILE", NULL,
     "read flags from FILE first (one per line: the flag's name without\n"
     "--, then its value; # comments); flags given here override it",
     config_set_config},
    {"--help", NULL, NULL, "print this help and exit (also -h)", NULL},
    {"--version", NULL, NULL, "print the version and exit (also -V)", NULL},
};

/* Config files ----------------------------------------------------------------- */

static const config_flag *config_find_flag(const char *arg, size_t name_len);

/* Flags a file may not set: what only makes sense on a command line, or only to a master. */
static bool config_file_settable(const config_flag *f) {
  return f->set != NULL && f->help != NULL && f->set != config_set_config;
}

/* Appends one "--name[=value]" to *out (of *n); grows it. */
static void config_file_push(config_file *out, unsigned line, const char *name, size_t name_len,
                             const char *value, size_t value_len) {
  if (out->n == out->cap) {
    out->cap = out->cap ? out->cap * 2 : 16;
    out->args = mem_realloc(out->args, out->cap * sizeof(char *));
    out->lines = mem_realloc(out->lines, out->cap * sizeof(unsigned));
  }
  buf_t b;
  buf_init(&b);
  buf_append(&b, name, name_len);
  if (value != NULL) {
    buf_append(&b, "=", 1);
    buf_append(&b, value, value_len);
  }
  out->lines[out->n] = line;
  out->args[out->n++] = buf_steal(&b);
}

int config_file_parse(const char *text, size_t len, config_file *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  unsigned line = 0;
  size_t at = 0;
  while (at < len) {
    line++;
    size_t end = at;
    while (end < len && text[end] != '\n') end++;
    const char *p = text + at, *e = text + end;
    at = end + 1;
    while (p < e && isspace((unsigned char)*p)) p++;
    while (e > p && isspace((unsigned char)e[-1])) e--;
    if (p == e || *p == '#') continue;
    if (memchr(p, '\0', (size_t)(e - p)) != NULL) {
      config_file_finish(out);
      return errmsg(err, errlen, -EINVAL, "line %u: a NUL byte", line);
    }
    const char *name_end = p;
    while (name_end < e && !isspace((unsigned char)*name_end) && *name_end != '=') name_end++;
    char flag[64];
    int flag_len = snprintf(flag, sizeof(flag), "--%.*s", (int)(name_end - p), p);
    const config_flag *f =
        flag_len < (int)sizeof(flag) ? config_find_flag(flag, (size_t)flag_len) : NULL;
    if (f == NULL || !config_file_settable(f)) {
      config_file_finish(out);
      return errmsg(
          err, errlen, -EINVAL, "line %u: %s %.*s", line,
          f == NULL ? "unknown setting" : "not a setting for a file:", (int)(name_end - p), p);
    }
    const char *v = name_end;
    while (v < e && (isspace((unsigned char)*v) || *v == '=')) v++;
    if (e - v >= 2 && (*v == '"' || *v == '\'') && e[-1] == *v) { /* a quoted value */
      v++;
      e--;
    }
    if ((v < e) != (f->metavar != NULL)) {
      config_file_finish(out);
      return errmsg(err, errlen, -EINVAL, "line %u: %s %s", line, flag + 2,
                    f->metavar ? "needs a value" : "takes no value");
    }
    config_file_push(out, line, flag, (size_t)flag_len, f->metavar ? v : NULL, (size_t)(e - v));
  }
  return 0;
}

void config_file_finish(config_file *f) {
  for (size_t i = 0; i < f->n; i++) free(f->args[i]);
  free(f->args);
  free(f->lines);
  memset(f, 0, sizeof(*f));
}

int config_check_arg(const char *arg, char *err, size_t errlen) {
  config_t scratch;
  config_defaults(&scratch);
  const char *eq = strchr(arg, '=');
  const config_flag *f = config_find_flag(arg, eq ? (size_t)(eq - arg) : strlen(arg));
  int rc = f == NULL || f->set == NULL ? errmsg(err, errlen, -EINVAL, "unknown flag %s", arg)
                                       : f->set(&scratch, f->name, eq ? eq + 1 : NULL, err, errlen);
  config_finish(&scratch);
  return rc;
}

/* Fills cfg with every default; allocates nothing. */
void config_defaults(config_t *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  snprintf(cfg->listen_host, sizeof(cfg->listen_host), "%s", CONFIG_DEFAULT_HOST);
  cfg->listen_port = CONFIG_DEFAULT_PORT;
  cfg->db_path = CONFIG_DEFAULT_DB;
  cfg->schema_path = CONFIG_DEFAULT_SCHEMA;
  snprintf(cfg->public_url, sizeof(cfg->public_url), "http://%s:%d", CONFIG_DEFAULT_HOST,
           CONFIG_DEFAULT_PORT);
  cfg->log_level = LOG_INFO;
  cfg->n_allowed_origins = 0;
  cfg->idle_timeout_ms = (uint64_t)CONFIG_DEFAULT_IDLE_S * 1000;
  cfg->max_body = CONFIG_DEFAULT_MAX_BODY;
  cfg->max_header = 16384;
  cfg->header_timeout_ms = 10000;
  cfg->keepalive_ms = (uint64_t)CONFIG_DEFAULT_KEEPALIVE_S * 1000;
  cfg->sse_retry_ms = 1000;
  cfg->max_sessions = CONFIG_DEFAULT_MAX_SESSIONS;
  cfg->page_size = CONFIG_DEFAULT_PAGE_SIZE;
  cfg->audit_retain_rows = CONFIG_DEFAULT_RETAIN_ROWS;
  cfg->audit_retain_ms = (int64_t)CONFIG_DEFAULT_RETAIN_AGE_S * 1000;
  cfg->max_subscriptions = 1000;
  cfg->max_stream_queue = 1024 * 1024;
  cfg->coalesce_ms = 0;
  cfg->strict_subscribe = false;
  cfg->confirm_destructive = CONFIRM_ELICIT;
  cfg->confirm_rows = 10;
  cfg->confirm_timeout_ms = 120000;
  cfg->max_wait_ms = 300000;
  cfg->workers = -1; /* resolved after parsing */
  cfg->write_timeout_ms = 15000;
  cfg->db_readers = CONFIG_DEFAULT_DB_READERS;
  cfg->max_connections = 100000;
  cfg->limit_sessions = cfg->limit_subscriptions = cfg->limit_streams = -1; /* likewise */
  cfg->rate_limit = -1;
  cfg->rate_burst = -1;
  cfg->drain_timeout_ms = (uint64_t)CONFIG_DEFAULT_DRAIN_S * 1000;
  cfg->control_socket = NULL;
  cfg->worker_slot = -1;
  cfg->worker_generation = 0;
  cfg->origins_storage = NULL;
  cfg->control_socket_default[0] = '\0';
}

/* Finds the flag named by arg up to name_len bytes; NULL when unknown. */
static const config_flag *config_find_flag(const char *arg, size_t name_len) {
  for (size_t i = 0; i < ARRAY_LEN(config_flags); i++) {
    if (strlen(config_flags[i].name) == name_len &&
        memcmp(config_flags[i].name, arg, name_len) == 0)
      return &config_flags[i];
  }
  return NULL;
}

int config_parse(config_t *cfg, int argc, char **argv, FILE *out, char *err, size_t errlen) {
  bool explicit_url = false;
  if (err && errlen) err[0] = '\0';
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0)
      arg = "--help";
    else if (strcmp(arg, "-V") == 0)
      arg = "--version";
    const char *eq = strchr(arg, '=');
    size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
    const config_flag *f = strncmp(arg, "--", 2) == 0 ? config_find_flag(arg, name_len) : NULL;
    if (f == NULL) {
      if (strncmp(arg, "-", 1) != 0)
        return errmsg(err, errlen, -EINVAL, "unexpected argument \"%s\" (try --help)", arg);
      return errmsg(err, errlen, -EINVAL, "unknown flag %.*s (try --help)", (int)name_len, arg);
    }
    if (f->metavar == NULL) {
      if (eq) return errmsg(err, errlen, -EINVAL, "%s takes no value", f->name);
      if (f->set != NULL) { /* a switch */
        int rc = f->set(cfg, f->name, NULL, err, errlen);
        if (rc < 0) return rc;
        continue;
      }
      if (strcmp(f->name, "--help") == 0)
        config_usage(out);
      else
        fprintf(out, "mcpsubd %s\n", MCPSUB_VERSION);
      return 1;
    }
    const char *value;
    if (eq) {
      value = eq + 1;
    } else {
      if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
        return errmsg(err, errlen, -EINVAL, "%s: missing value %s", f->name, f->metavar);
      value = argv[++i];
    }
    int rc = f->set(cfg, f->name, value, err, errlen);
    if (rc < 0) return rc;
    if (f->set == config_set_public_url) explicit_url = true;
  }
  if (!explicit_url) {
    bool v6 = strchr(cfg->listen_host, ':') != NULL;
    snprintf(cfg->public_url, sizeof(cfg->public_url), "http://%s%s%s:%d", v6 ? "[" : "",
             cfg->listen_host, v6 ? "]" : "", cfg->listen_port);
  }
  /* Limits per principal: unset ones (-1) are bounded with authentication, off without. */
  bool authed = config_auth_enabled(cfg);
  if (cfg->limit_sessions < 0) cfg->limit_sessions = authed ? 100 : 0;
  if (cfg->limit_subscriptions < 0) cfg->limit_subscriptions = authed ? 10000 : 0;
  if (cfg->limit_streams < 0) cfg->limit_streams = authed ? 100 : 0;
  if (cfg->rate_limit < 0) cfg->rate_limit = authed ? 100 : 0;
  if (cfg->rate_burst < 0) cfg->rate_burst = (int64_t)(2 * cfg->rate_limit);
  if (cfg->auth_audience[0] == '\0')
    snprintf(cfg->auth_audience, sizeof(cfg->auth_audience), "%s/mcp", cfg->public_url);
  if (cfg->auth_jwks != NULL && cfg->auth_issuer == NULL)
    return errmsg(err, errlen, -EINVAL,
                  "--auth-jwks needs --auth-issuer: the iss every access token must carry "
                  "(the authorization server's issuer identifier)");
  if (!config_auth_enabled(cfg) && !cfg->allow_anonymous &&
      !config_host_is_loopback(cfg->listen_host))
    return errmsg(err, errlen, -EINVAL,
                  "--listen %s is not a loopback address and no authentication is "
                  "configured: add --auth-keys FILE (mcpsubctl key add) or --auth-jwks "
                  "FILE|URL, or --allow-anonymous to serve it to anyone",
                  cfg->listen_host);
  if (cfg->workers < 0) {
    unsigned n = uv_available_parallelism();
    cfg->workers = n < 1 ? 1 : n > CONFIG_MAX_WORKERS ? CONFIG_MAX_WORKERS : (int)n;
  }
  if (cfg->control_socket == NULL) {
    config_default_control_socket(cfg->db_path, cfg->control_socket_default,
                                  sizeof(cfg->control_socket_default));
    cfg->control_socket = cfg->control_socket_default;
  }
  return 0;
}

void config_default_control_socket(const char *db, char *out, size_t n) {
  const char *slash = strrchr(db, '/');
  if (slash == NULL || strcmp(store_backend_name(db), "sqlite") != 0)
    snprintf(out, n, "mcpsubd.sock");
  else
    snprintf(out, n, "%.*s/mcpsubd.sock", (int)(slash - db), db);
}

/* Prints the --help text: a synopsis and every flag with its default. */
void config_usage(FILE *out) {
  fprintf(out, "Usage: mcpsubd [FLAGS]\n"
               "\n"
               "MCP server (Streamable HTTP, endpoint /mcp) with live, resumable\n"
               "subscriptions to the tables of a SQLite database.\n"
               "Flags take a value as \"--flag VALUE\" or \"--flag=VALUE\".\n"
               "\n");
  for (size_t i = 0; i < ARRAY_LEN(config_flags); i++) {
    const config_flag *f = &config_flags[i];
    if (f->help == NULL) continue; /* internal */
    char head[64];
    snprintf(head, sizeof(head), "%s%s%s", f->name, f->metavar ? " " : "",
             f->metavar ? f->metavar : "");
    const char *line = f->help;
    fprintf(out, "  %s\n", head);
    while (*line) {
      size_t n = strcspn(line, "\n");
      fprintf(out, "      %.*s\n", (int)n, line);
      line += n + (line[n] == '\n');
    }
    if (f->defval) fprintf(out, "      default: %s\n", f->defval);
  }
  fprintf(out, "\nmcpsubd %s\n", MCPSUB_VERSION);
}

/* Frees what config_parse allocated; cfg's origin pointers become invalid. */
void config_finish(config_t *cfg) {
  free(cfg->origins_storage);
  cfg->origins_storage = NULL;
  cfg->n_allowed_origins = 0;
}
