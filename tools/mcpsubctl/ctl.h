/*
 * mcpsubctl's internal interface, shared by its files: the context a
 * command runs in, the control-socket client (control.c), durable state
 * read from the SQLite file (durable.c), human and JSON output (output.c)
 * and the command handlers (status.c, sessions.c, audit.c). main.c parses
 * the global options and dispatches through its const command table.
 *
 * Handlers return a process exit status (enum ctl_exit) and print their
 * own errors, on stderr, prefixed "mcpsubctl: ".
 */
#ifndef MCPSUBCTL_CTL_H
#define MCPSUBCTL_CTL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/store.h"

enum ctl_exit {
  CTL_EXIT_OK = 0,
  CTL_EXIT_ERROR = 1, /* the database or the control socket failed */
  CTL_EXIT_USAGE = 2,
  CTL_EXIT_NOT_RUNNING = 3,     /* the command needs a running mcpsubd */
  CTL_EXIT_UNKNOWN_SESSION = 4, /* also an unknown key name */
};

/* Returned by ctl_server_request when nothing listens and the command can do without. */
#define CTL_SERVER_DOWN (-1)

/* How long the server has to answer one control request. */
#define CTL_CONTROL_TIMEOUT_MS 5000

typedef struct ctl_context {
  const char *db_path;
  const char *control_path;
  const char *auth_keys_path; /* --auth-keys: the API key file (key commands) */
  bool json;
  bool server_required; /* a stopped server is an error (exit 3), not a fallback */
  store_t *store;       /* opened read-only on first use */
} ctl_context;

/* main.c ------------------------------------------------------------------ */

void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A command's option: a switch (set) or an option with a value (value). */
typedef struct ctl_flag {
  const char *name;       /* "--uri" */
  const char *short_name; /* "-n", or NULL */
  const char **value;     /* takes a value ("--uri U" or "--uri=U") when not NULL */
  bool *set;              /* a switch when not NULL */
} ctl_flag;

/*
 * Parses a command's arguments: the flags, then exactly n_positional
 * positional arguments into positional[]. Returns 0, or CTL_EXIT_USAGE
 * after a message naming command.
 */
int ctl_parse_args(const char *command, int argc, char **argv, const ctl_flag *flags,
                   size_t n_flags, const char **positional, size_t n_positional);
/*
 * text, the value of command's flag, as a whole number from min to max
 * into *out: 0, or CTL_EXIT_USAGE after a message naming what it counts.
 */
int ctl_parse_count(const char *command, const char *flag, const char *text, long min, long max,
                    const char *what, long *out);

/* control.c --------------------------------------------------------------- */

/*
 * One request on the control socket at path: writes request as one JSON
 * line and reads one JSON object line back within timeout_ms. Returns 0
 * with *reply (the caller frees it; it may say "ok": false), -ENOENT or
 * -ECONNREFUSED when no server listens there, or another negative errno
 * with a message in err.
 */
int ctl_control_call(const char *path, const cJSON *request, int timeout_ms, cJSON **reply,
                     char *err, size_t errlen);

/*
 * {"cmd": cmd[, key: value]} to the running server (key and value may be
 * NULL). Returns 0 with *reply, an "ok": true object the caller frees;
 * CTL_SERVER_DOWN when no server runs and ctx->server_required is false;
 * CTL_EXIT_UNKNOWN_SESSION, silently, when the server answers "unknown
 * session"; otherwise an exit status after printing why (not running: 3,
 * anything else: 1).
 */
int ctl_server_request(ctl_context *ctx, const char *cmd, const char *key, const char *value,
                       cJSON **reply);
/* The same for a request built whole (its "cmd" a string). */
int ctl_server_call(ctl_context *ctx, const cJSON *request, cJSON **reply);
/* Prints that the server is not running and returns CTL_EXIT_NOT_RUNNING. */
int ctl_not_running(const ctl_context *ctx);

/* durable.c --------------------------------------------------------------- */

/* The store, opened read-only on first use; NULL after printing why. */
store_t *ctl_store(ctl_context *ctx);
void ctl_close(ctl_context *ctx);

/*
 * The durable record of a session as a new JSON object: id, createdAt,
 * lastSeen (Unix ms), protocolVersion, clientInfo, logLevel, subscriptions.
 */
cJSON *ctl_session_to_json(const store_session *ss);
/*
 * The mcp_session rows (newest last_seen first, then by id; limit > 0: the
 * first limit of them) as a new JSON array in *out.
 */
int ctl_durable_sessions(ctl_context *ctx, long limit, cJSON **out);
/* {db, sessions, auditRows, auditMaxSeq} as a new object in *out. */
int ctl_durable_counts(ctl_context *ctx, cJSON **out);

/* output.c ---------------------------------------------------------------- */

/* Formats one value (NULL when absent) into out for a human. */
typedef void (*ctl_format_fn)(const cJSON *value, char *out, size_t n);

void ctl_fmt_text(const cJSON *v, char *out, size_t n);  /* strings, numbers, booleans */
void ctl_fmt_bytes(const cJSON *v, char *out, size_t n); /* 512B, 1.5KiB, 3.0MiB */
void ctl_fmt_duration(const cJSON *v, char *out,
                      size_t n);                           /* ms: 850ms, 42s, 3m12s, 2h05m, 3d04h */
void ctl_fmt_time(const cJSON *v, char *out, size_t n);    /* Unix ms: 2026-11-22T10:00:00Z */
void ctl_fmt_time_ms(const cJSON *v, char *out, size_t n); /* Unix ms: 2026-11-22T10:00:00.123Z */
void ctl_fmt_yes_no(const cJSON *v, char *out, size_t n);  /* true or non-zero: yes */
void ctl_fmt_count(const cJSON *v, char *out, size_t n);   /* an array's length */
void ctl_fmt_client(const cJSON *v, char *out, size_t n);  /* clientInfo: "name version" */

/* A table column: the row's member key (NULL: the whole row) shown by format. */
typedef struct ctl_column {
  const char *header;
  const char *key;
  ctl_format_fn format;
  bool right; /* right-aligned (numbers) */
} ctl_column;

#define CTL_MAX_COLUMNS 20

typedef struct ctl_table {
  const ctl_column *cols;
  size_t n_cols;
  int width[CTL_MAX_COLUMNS];
} ctl_table;

/* Widths start at the headers'; measure widens them to fit rows (an array of objects). */
void ctl_table_init(ctl_table *t, const ctl_column *cols, size_t n_cols);
void ctl_table_measure(ctl_table *t, const cJSON *rows);
void ctl_table_print_header(const ctl_table *t);
void ctl_table_print_rows(const ctl_table *t, const cJSON *rows);
/* All three: a whole table. */
void ctl_print_table(const ctl_column *cols, size_t n_cols, const cJSON *rows);
/* "(3 sessions)" */
void ctl_print_count(int count, const char *one, const char *many);

/* A "label   value" line of a record; key as for columns; absent values are skipped. */
typedef struct ctl_field {
  const char *label;
  const char *key; /* a member, "a.b" for a nested one, or NULL for the whole object */
  ctl_format_fn format;
} ctl_field;

void ctl_print_fields(const ctl_field *fields, size_t n, const cJSON *obj);
/* With --json obj itself; otherwise the headline (when not NULL) and fields over obj. */
void ctl_print_record(const ctl_context *ctx, const char *headline, const ctl_field *fields,
                      size_t n, const cJSON *obj);
/* With --json obj itself; otherwise its array member key as a table and "(N many)". */
void ctl_print_list(const ctl_context *ctx, const cJSON *obj, const char *key,
                    const ctl_column *cols, size_t n_cols, const char *one, const char *many);
/* Adds a copy of each member of src to dst. */
void ctl_json_merge(cJSON *dst, const cJSON *src);
/* Pretty-printed JSON and a newline on stdout. */
void ctl_print_json(const cJSON *v);
/* Member at a dotted path ("totals.sessions"), or NULL. */
const cJSON *ctl_json_get(const cJSON *obj, const char *path);

/* commands ---------------------------------------------------------------- */

int ctl_cmd_status(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_workers(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_stats(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_subs(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_sessions(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_session_show(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_session_evict(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_audit_tail(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_key_add(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_key_list(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_key_revoke(ctl_context *ctx, int argc, char **argv);
int ctl_cmd_key_rotate(ctl_context *ctx, int argc, char **argv);

/* top.c */
int ctl_cmd_top(ctl_context *ctx, int argc, char **argv);

/* config.c */
int ctl_cmd_config_check(ctl_context *ctx, int argc, char **argv);

#endif
