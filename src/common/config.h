/*
 * mcpsubd's configuration: command-line flags, their defaults and their
 * validation. Pure: parsing touches no file and no socket.
 */
#ifndef MCPSUB_CONFIG_H
#define MCPSUB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/log.h"
#include "common/mem.h"

#define CONFIG_MAX_ORIGINS 32
/* Most worker processes; session ids carry the slot in two hex digits. */
#define CONFIG_MAX_WORKERS     128
#define CONFIG_PATH_MAX        4096
#define CONFIG_DEFAULT_DRAIN_S 10

#ifndef MCPSUB_VERSION
#define MCPSUB_VERSION "0.1.0"
#endif

typedef struct config {
  char listen_host[64];     /* --listen host part, default 127.0.0.1 */
  int listen_port;          /* --listen port part, default 9926 */
  const char *db_path;      /* --db, default data/mcpsub.db */
  const char *schema_path;  /* --schema, default schema/example.sql; "" = none */
  char public_url[512];     /* --public-url without trailing '/' */
  enum log_level log_level; /* --log-level */
  const char
      *allowed_origins[CONFIG_MAX_ORIGINS]; /* --allowed-origins (comma list), extra to localhost */
  size_t n_allowed_origins;
  uint64_t idle_timeout_ms;   /* --idle-timeout seconds, default 1800 */
  size_t max_body;            /* --max-body bytes, default 1 MiB */
  size_t max_header;          /* header block bound, 16 KiB */
  uint64_t header_timeout_ms; /* slow-header bound, 10 s */
  uint64_t keepalive_ms;      /* --sse-keepalive seconds, SSE comment interval, default 15 */
  unsigned sse_retry_ms;      /* retry: field of SSE streams, default 1000 */
  size_t max_sessions;        /* --max-sessions, default 10000 */
  int page_size;              /* --page-size: rows per collection read / list page, default 100 */
  int64_t audit_retain_rows;  /* --audit-retain-rows, default 1000000, 0 = unbounded */
  int64_t audit_retain_ms;    /* --audit-retain-age seconds, default 7 days, 0 = unbounded */
  size_t max_subscriptions;   /* --max-subscriptions per session, default 1000 */
  size_t max_stream_queue;    /* --max-stream-queue bytes, default 1 MiB */
  uint64_t coalesce_ms;       /* --coalesce-ms, 0 = off */
  bool strict_subscribe;      /* --strict-subscribe */
  /* Destructive tools (confirm.h): who is asked, above how many rows, how long for. */
  enum { CONFIRM_NEVER, CONFIRM_ELICIT, CONFIRM_REFUSE } confirm_destructive;
  int64_t confirm_rows;        /* --confirm-rows: put_records touching more rows asks */
  uint64_t confirm_timeout_ms; /* --confirm-timeout seconds: how long an answer is awaited */
  uint64_t max_wait_ms;      /* --max-wait seconds: cap of wait_and_read's timeoutMs, default 300 */
  int workers;               /* --workers: worker processes; 0 = one process; default: CPUs */
  uint64_t drain_timeout_ms; /* --drain-timeout seconds: longest graceful stop, default 10 */
  uint64_t drain_grace_ms;   /* --drain-grace-ms: /readyz 503 this long before a drain */
  const char *control_socket; /* --control-socket, default <directory of --db>/mcpsubd.sock */
  size_t max_connections;     /* --max-connections: open TCP connections in all, 0 = none */
  size_t max_connections_per_address; /* --max-connections-per-address, 0 = none */
  uint64_t write_timeout_ms; /* --write-timeout: how long a queued write may wait for a lock */
  int db_readers;            /* --db-readers: PostgreSQL reader connections per worker (reader.h) */
  bool db_no_prepare;        /* --db-no-prepare: PostgreSQL statements all unnamed */
  const char *auth_keys;     /* --auth-keys FILE: API keys (mcpsubctl key ...), or NULL */
  const char *auth_jwks;     /* --auth-jwks FILE|URL: keys of the JWT issuer, or NULL */
  const char *auth_issuer;   /* --auth-issuer: the iss every JWT must carry, or NULL */
  char auth_audience[520];   /* --auth-audience, default {public-url}/mcp */
  bool allow_anonymous;      /* --allow-anonymous: serve a non-loopback address without auth */
  const char *policy_path;   /* --policy FILE: roles, grants and row scopes, or NULL */
  /* Per principal; 0 = no limit. Defaults: off without authentication, bounded with it. */
  int64_t limit_sessions;      /* --limit-sessions */
  int64_t limit_subscriptions; /* --limit-subscriptions */
  int64_t limit_streams;       /* --limit-streams */
  double rate_limit;           /* --rate-limit requests per second */
  int64_t rate_burst;          /* --rate-burst requests */
  int worker_slot;             /* hidden --worker-slot: -1, or the slot of a spawned worker */
  uint32_t worker_generation;  /* hidden --worker-generation: restarts of that slot so far */
  char *origins_storage;       /* owned copy of the --allowed-origins list */
  char control_socket_default[CONFIG_PATH_MAX]; /* where the default --control-socket points */
} config_t;

void config_defaults(config_t *cfg);
/* Is any authentication configured (API keys or JWTs)? */
bool config_auth_enabled(const config_t *cfg);
/* Is host (a --listen host) a loopback address: 127.0.0.0/8, ::1 or localhost? */
bool config_host_is_loopback(const char *host);
/*
 * Parses argv into cfg (which config_defaults has filled). Returns 0, 1 when
 * --help or --version was given and printed on out, or -EINVAL with a
 * message in err.
 * Flags take "--flag value" or "--flag=value". argv[0] is skipped. String
 * fields (db_path, schema_path) point into argv, which must outlive cfg.
 * public_url is derived from --listen after all flags are read unless
 * --public-url was given; so are the default --workers (the CPUs this
 * process may run on, at most CONFIG_MAX_WORKERS) and the default
 * --control-socket (beside the database). Release with config_finish.
 */
int config_parse(config_t *cfg, int argc, char **argv, FILE *out, char *err,
                 size_t errlen) MCPSUB_NODISCARD;
void config_usage(FILE *out);
/*
 * The control socket's default for the database target db: mcpsubd.sock
 * beside a SQLite file, in the working directory for a PostgreSQL URI.
 */
void config_default_control_socket(const char *db, char *out, size_t n);
void config_finish(config_t *cfg);

/*
 * A configuration file as flags: each line "name value" (or "name = value",
 * or "name" alone for a switch; a value may be quoted; # starts a comment)
 * becomes "--name=value". args[i] came from line lines[i].
 */
typedef struct config_file {
  char **args;
  unsigned *lines;
  size_t n, cap;
} config_file;
/*
 * Parses text (len bytes) into out: -EINVAL with "line N: ..." in err for
 * an unknown name, a value missing or given where none belongs, or a flag
 * a file may not set (--config, --help, --version). Values are checked by
 * config_parse (or one by one, config_check_arg). Release with
 * config_file_finish.
 */
int config_file_parse(const char *text, size_t len, config_file *out, char *err,
                      size_t errlen) MCPSUB_NODISCARD;
void config_file_finish(config_file *f);
/* config_file.c: reads path (at most 1 MiB) and parses it into out; err names the file. */
int config_file_read(const char *path, config_file *out, char *err, size_t errlen) MCPSUB_NODISCARD;
/*
 * When argv holds --config FILE: *out_argv becomes argv[0], FILE's flags,
 * then argv's other flags (so that they override the file's), the strings
 * owned by file (release it, and free *out_argv when it differs from argv,
 * after cfg is done with them). Without --config, *out_argv is argv.
 */
int config_expand_argv(int argc, char **argv, int *out_argc, char ***out_argv, config_file *file,
                       char *err, size_t errlen) MCPSUB_NODISCARD;
/* Checks one "--name[=value]" alone (its own value's rules): 0, or -EINVAL with err. */
int config_check_arg(const char *arg, char *err, size_t errlen) MCPSUB_NODISCARD;

#endif
