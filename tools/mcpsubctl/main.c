/*
 * mcpsubctl: the operator CLI. It asks a running mcpsubd over its control
 * socket (a unix stream socket speaking one JSON line each way) for live
 * state, and reads the SQLite file read-only for durable state, so that the
 * commands that can work on a stopped server do. This file holds the
 * command table, the global options and the dispatch; the commands live in
 * status.c, sessions.c and audit.c. It never writes the database.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/mem.h"
#include "ctl.h"

/* Whether a command talks to the server. */
typedef enum ctl_server_need {
  CTL_SERVER_NEVER,    /* durable state only: the database */
  CTL_SERVER_OPTIONAL, /* live state when running, durable state otherwise */
  CTL_SERVER_REQUIRED, /* live state only: exit 3 when stopped */
} ctl_server_need;

typedef struct ctl_command {
  const char *name;
  const char *sub; /* second word ("session show"), or NULL */
  const char *args;
  const char *summary;
  ctl_server_need needs_server;
  int (*run)(ctl_context *ctx, int argc, char **argv);
} ctl_command;

static const ctl_command ctl_commands[] = {
    {"status", NULL, "", "pid, uptime, workers, live totals; stopped: durable counts",
     CTL_SERVER_OPTIONAL, ctl_cmd_status},
    {"workers", NULL, "", "the worker slots: pid, restarts, sessions, streams, queues",
     CTL_SERVER_REQUIRED, ctl_cmd_workers},
    {"sessions", NULL, "[--live] [--limit N]",
     "durable sessions, most recent first; --live: the live ones", CTL_SERVER_OPTIONAL,
     ctl_cmd_sessions},
    {"session", "show", "ID", "one session: durable record, and live state if any",
     CTL_SERVER_OPTIONAL, ctl_cmd_session_show},
    {"session", "evict", "ID", "end a live session on its worker", CTL_SERVER_REQUIRED,
     ctl_cmd_session_evict},
    {"subs", NULL, "[--uri U] [--limit N]",
     "subscribed URIs, most sessions first, and the sessions on each", CTL_SERVER_OPTIONAL,
     ctl_cmd_subs},
    {"audit", "tail", "[-f] [--table T] [-n N]", "last N audit_log rows (20), oldest first",
     CTL_SERVER_NEVER, ctl_cmd_audit_tail},
    {"stats", NULL, "", "every worker's counters, with totals", CTL_SERVER_REQUIRED, ctl_cmd_stats},
    {"top", NULL, "[--once] [--interval MS]", "live view, refreshed every second; q quits",
     CTL_SERVER_REQUIRED, ctl_cmd_top},
    {"key", "add", "NAME --role ROLE", "new API key: printed once on stdout, its hash stored",
     CTL_SERVER_NEVER, ctl_cmd_key_add},
    {"key", "list", "", "API keys: name, role, created (never the keys)", CTL_SERVER_NEVER,
     ctl_cmd_key_list},
    {"key", "revoke", "NAME", "remove a key; mcpsubd stops accepting it", CTL_SERVER_NEVER,
     ctl_cmd_key_revoke},
    {"key", "rotate", "NAME", "a new key for NAME (printed once); the old one stops working",
     CTL_SERVER_NEVER, ctl_cmd_key_rotate},
    {"config", "check", "FILE", "validate an mcpsubd --config file (line by line, then whole)",
     CTL_SERVER_NEVER, ctl_cmd_config_check},
};

void ctl_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("mcpsubctl: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void ctl_usage(FILE *out) {
  fputs("usage: mcpsubctl [--db PATH] [--control PATH] [--json] COMMAND ...\n\ncommands:\n", out);
  for (size_t i = 0; i < ARRAY_LEN(ctl_commands); i++) {
    const ctl_command *c = &ctl_commands[i];
    char words[64];
    snprintf(words, sizeof(words), "%s%s%s %s", c->name, c->sub ? " " : "", c->sub ? c->sub : "",
             c->args);
    fprintf(out, "  %-36s %s\n", words, c->summary);
  }
  fputs("\n"
        "options:\n"
        "  --db PATH|URI    the database (default data/mcpsub.db): a SQLite file or a\n"
        "                   postgres:// URI, as mcpsubd's --db; read only\n"
        "  --control PATH   mcpsubd's control socket (default: mcpsubd.sock in the\n"
        "                   directory of a SQLite --db, else the working directory)\n"
        "  --auth-keys FILE the API key file of the key commands (mcpsubd --auth-keys)\n"
        "  --json           print JSON: the server's answer as received, or what was read\n"
        "                   from the database\n"
        "  --help, -h       this text\n"
        "\n"
        "command options:\n"
        "  sessions --live       the live sessions (worker, stream, ring, undelivered),\n"
        "                        the most recently seen first\n"
        "  sessions --limit N    the N most recently seen: stored, all by default; with\n"
        "                        --live, 1 to 10000 (default 1000; fewer when they pass\n"
        "                        4 MiB)\n"
        "  subs --uri U          only URI U\n"
        "  subs --limit N        at most N URIs, 1 to 10000 (default 1000)\n"
        "  audit tail -n N       rows to show first, 0 to 100000 (default 20); or --lines N\n"
        "  audit tail --table T  only the changes of table T\n"
        "  top --once            print one frame (two samples an interval apart) and exit\n"
        "  top --interval MS     refresh every MS milliseconds (100 to 60000; 1000)\n"
        "  audit tail -f         then print each new row as it commits (polled every\n"
        "                        200 ms) until SIGINT or SIGTERM; with --json one object\n"
        "                        per line; or --follow\n"
        "\n"
        "Live state comes from a running mcpsubd over its control socket (a unix\n"
        "socket, one JSON line each way, 5 s timeout). When nothing listens there:\n"
        "  status        prints \"mcpsubd: not running\", the durable counts (sessions,\n"
        "                audit rows, highest audit seq) and exits 3;\n"
        "  sessions      lists the mcp_session rows (it always does, running or not);\n"
        "  session show  prints the durable record without live state;\n"
        "  subs          counts the URIs stored on mcp_session rows;\n"
        "  workers, stats, sessions --live, session evict fail with exit status 3.\n"
        "audit tail always reads the database. The key commands read and write\n"
        "the --auth-keys file only; a new key is printed alone on stdout, every\n"
        "message goes to stderr.\n"
        "\n"
        "exit status:\n"
        "  0  success\n"
        "  1  the database or the control socket failed\n"
        "  2  bad usage\n"
        "  3  mcpsubd is not running (status, and the commands that need it)\n"
        "  4  unknown session (or key name)\n"
        "config check exits 2 when the file is not valid (each problem on stderr).\n",
        out);
}

/* Whether arg names flag f ("-n", "--lines", or "--lines=V" for a flag with a value). */
static bool ctl_flag_matches(const ctl_flag *f, const char *arg, const char **inline_value) {
  const char *names[2] = {f->name, f->short_name};
  for (size_t k = 0; k < 2; k++) {
    size_t len = names[k] != NULL ? strlen(names[k]) : 0;
    if (len == 0 || strncmp(arg, names[k], len) != 0) continue;
    *inline_value = NULL;
    if (arg[len] == '\0') return true;
    if (arg[len] == '=' && f->value != NULL) {
      *inline_value = arg + len + 1;
      return true;
    }
  }
  return false;
}

/*
 * If argv[*i] is one of flags, applies it (taking its value, maybe the
 * next argument) and returns 1; 0 when it is none of them; -1 after a
 * message when its value is missing.
 */
static int ctl_take_flag(const char *command, const ctl_flag *flags, size_t n_flags, int argc,
                         char **argv, int *i) {
  for (size_t k = 0; k < n_flags; k++) {
    const ctl_flag *f = &flags[k];
    const char *value;
    if (!ctl_flag_matches(f, argv[*i], &value)) continue;
    if (f->set != NULL) {
      *f->set = true;
      return 1;
    }
    if (value == NULL && *i + 1 >= argc) {
      ctl_error("%s%s%s needs a value", command, command[0] ? ": " : "", argv[*i]);
      return -1;
    }
    *f->value = value != NULL ? value : argv[++*i];
    return 1;
  }
  return 0;
}

int ctl_parse_count(const char *command, const char *flag, const char *text, long min, long max,
                    const char *what, long *out) {
  char *end;
  errno = 0;
  long n = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || n < min || n > max) {
    ctl_error("%s: %s takes a number of %s from %ld to %ld, not '%s'", command, flag, what, min,
              max, text);
    return CTL_EXIT_USAGE;
  }
  *out = n;
  return 0;
}

int ctl_parse_args(const char *command, int argc, char **argv, const ctl_flag *flags,
                   size_t n_flags, const char **positional, size_t n_positional) {
  size_t n_pos = 0;
  for (int i = 0; i < argc; i++) {
    int taken = ctl_take_flag(command, flags, n_flags, argc, argv, &i);
    if (taken < 0) return CTL_EXIT_USAGE;
    if (taken > 0) continue;
    if (argv[i][0] == '-' && argv[i][1] != '\0') {
      ctl_error("%s: unknown option '%s'", command, argv[i]);
      return CTL_EXIT_USAGE;
    }
    if (n_pos == n_positional) {
      ctl_error("%s: unexpected argument '%s'", command, argv[i]);
      return CTL_EXIT_USAGE;
    }
    positional[n_pos++] = argv[i];
  }
  if (n_pos < n_positional) {
    ctl_error("%s: missing argument", command);
    return CTL_EXIT_USAGE;
  }
  return 0;
}

/* The command named by words[0] (and words[1]); NULL after a message. */
static const ctl_command *ctl_find_command(int n_words, char **words, int *used) {
  bool known_name = false;
  for (size_t i = 0; i < ARRAY_LEN(ctl_commands); i++) {
    const ctl_command *c = &ctl_commands[i];
    if (strcmp(words[0], c->name) != 0) continue;
    known_name = true;
    if (c->sub == NULL) {
      *used = 1;
      return c;
    }
    if (n_words > 1 && strcmp(words[1], c->sub) == 0) {
      *used = 2;
      return c;
    }
  }
  if (!known_name && words[0][0] == '-')
    ctl_error("unknown option '%s'", words[0]);
  else if (!known_name)
    ctl_error("unknown command '%s'", words[0]);
  else if (n_words > 1)
    ctl_error("%s: unknown subcommand '%s'", words[0], words[1]);
  else
    ctl_error("%s: missing subcommand", words[0]);
  return NULL;
}

/* "<dir of db>/mcpsubd.sock", in storage the caller frees. */
int main(int argc, char **argv) {
  ctl_context ctx = {.db_path = "data/mcpsub.db"};
  bool help = false;
  const ctl_flag globals[] = {
      {"--db", NULL, &ctx.db_path, NULL},
      {"--control", NULL, &ctx.control_path, NULL},
      {"--auth-keys", NULL, &ctx.auth_keys_path, NULL},
      {"--json", NULL, NULL, &ctx.json},
      {"--help", "-h", NULL, &help},
  };
  /* Global options may come anywhere; every other argument is the command's. */
  char **words = mem_calloc((size_t)argc + 1, sizeof(*words));
  int n_words = 0;
  int rc = CTL_EXIT_USAGE;
  char *default_control = NULL;
  for (int i = 1; i < argc; i++) {
    int taken = ctl_take_flag("", globals, ARRAY_LEN(globals), argc, argv, &i);
    if (taken < 0) goto out;
    if (taken == 0) words[n_words++] = argv[i];
  }
  if (help) {
    ctl_usage(stdout);
    rc = CTL_EXIT_OK;
    goto out;
  }
  if (n_words == 0) {
    ctl_usage(stderr);
    goto out;
  }
  int used = 0;
  const ctl_command *cmd = ctl_find_command(n_words, words, &used);
  if (cmd == NULL) {
    fputs("Try 'mcpsubctl --help'.\n", stderr);
    goto out;
  }
  if (ctx.control_path == NULL) {
    char path[CONFIG_PATH_MAX];
    config_default_control_socket(ctx.db_path, path, sizeof(path));
    ctx.control_path = default_control = mem_strdup(path);
  }
  ctx.server_required = cmd->needs_server == CTL_SERVER_REQUIRED;
  rc = cmd->run(&ctx, n_words - used, words + used);
  ctl_close(&ctx);
  if (fflush(stdout) != 0 && rc == CTL_EXIT_OK) {
    ctl_error("cannot write the output");
    rc = CTL_EXIT_ERROR;
  }
out:
  free(default_control);
  free(words);
  return rc;
}
