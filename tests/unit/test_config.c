/*
 * Unit tests of mcpsubd's flag parsing: every default, every flag in both
 * "--flag value" and "--flag=value" form, the derived public URL (IPv4,
 * IPv6, bare port, explicit), the --help and --version exits, and the
 * errors, each of which must name the flag at fault.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/config.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char err[256];

/* Parses argv into a fresh config; returns the rc. */
static int parse(config_t *cfg, int argc, char **argv) {
  config_defaults(cfg);
  err[0] = '\0';
  return config_parse(cfg, argc, argv, stdout, err, sizeof(err));
}

/* Expects -EINVAL with a message mentioning needle. */
static void expect_error(int argc, char **argv, const char *needle) {
  config_t cfg;
  int rc = parse(&cfg, argc, argv);
  if (rc != -EINVAL || strstr(err, needle) == NULL) {
    fprintf(stderr, "argv[1]=%s: rc %d, err \"%s\", wanted \"%s\"\n", argv[1], rc, err, needle);
    CHECK(!"expected an error");
  }
  config_finish(&cfg);
}

static void test_defaults(void) {
  config_t cfg;
  char *argv[] = {"mcpsubd"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK_STR_EQ(cfg.listen_host, "127.0.0.1");
  CHECK_INT_EQ(cfg.listen_port, 9926);
  CHECK_STR_EQ(cfg.db_path, "data/mcpsub.db");
  CHECK_STR_EQ(cfg.schema_path, "schema/example.sql");
  CHECK_STR_EQ(cfg.public_url, "http://127.0.0.1:9926");
  CHECK_INT_EQ(cfg.log_level, LOG_INFO);
  CHECK_INT_EQ(cfg.n_allowed_origins, 0);
  CHECK_INT_EQ(cfg.idle_timeout_ms, 1800000);
  CHECK_INT_EQ(cfg.max_body, 1048576);
  CHECK_INT_EQ(cfg.max_header, 16384);
  CHECK_INT_EQ(cfg.header_timeout_ms, 10000);
  CHECK_INT_EQ(cfg.keepalive_ms, 15000);
  CHECK_INT_EQ(cfg.sse_retry_ms, 1000);
  CHECK_INT_EQ(cfg.max_sessions, 10000);
  CHECK_INT_EQ(cfg.page_size, 100);
  CHECK_INT_EQ(cfg.audit_retain_rows, 1000000);
  CHECK_INT_EQ(cfg.audit_retain_ms, 604800000LL);
  config_finish(&cfg);

  /* config_defaults alone already gives a usable public URL */
  config_defaults(&cfg);
  CHECK_STR_EQ(cfg.public_url, "http://127.0.0.1:9926");
  config_finish(&cfg);
}

static void test_every_flag(void) {
  config_t cfg;
  char *argv[] = {"mcpsubd",
                  "--listen",
                  "0.0.0.0:8080",
                  "--db",
                  "/var/x.db",
                  "--schema",
                  "app.sql",
                  "--log-level",
                  "debug",
                  "--idle-timeout",
                  "60",
                  "--max-body",
                  "2048",
                  "--sse-keepalive",
                  "5",
                  "--max-sessions",
                  "7",
                  "--page-size",
                  "1000",
                  "--audit-retain-rows",
                  "0",
                  "--audit-retain-age",
                  "0",
                  "--allowed-origins",
                  "https://a.example",
                  "--auth-keys",
                  "/etc/mcpsub/keys.json",
                  "--auth-jwks",
                  "https://as.example/jwks.json",
                  "--auth-issuer",
                  "https://as.example"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK_STR_EQ(cfg.auth_keys, "/etc/mcpsub/keys.json");
  CHECK_STR_EQ(cfg.auth_jwks, "https://as.example/jwks.json");
  CHECK_STR_EQ(cfg.auth_issuer, "https://as.example");
  CHECK_STR_EQ(cfg.auth_audience, "http://0.0.0.0:8080/mcp"); /* {public-url}/mcp */
  CHECK_STR_EQ(cfg.listen_host, "0.0.0.0");
  CHECK_INT_EQ(cfg.listen_port, 8080);
  CHECK_STR_EQ(cfg.db_path, "/var/x.db");
  CHECK_STR_EQ(cfg.schema_path, "app.sql");
  CHECK_INT_EQ(cfg.log_level, LOG_DEBUG);
  CHECK_INT_EQ(cfg.idle_timeout_ms, 60000);
  CHECK_INT_EQ(cfg.max_body, 2048);
  CHECK_INT_EQ(cfg.keepalive_ms, 5000);
  CHECK_INT_EQ(cfg.max_sessions, 7);
  CHECK_INT_EQ(cfg.page_size, 1000);
  CHECK_INT_EQ(cfg.audit_retain_rows, 0);
  CHECK_INT_EQ(cfg.audit_retain_ms, 0);
  CHECK_INT_EQ(cfg.n_allowed_origins, 1);
  CHECK_STR_EQ(cfg.allowed_origins[0], "https://a.example");
  CHECK_STR_EQ(cfg.public_url, "http://0.0.0.0:8080");
  config_finish(&cfg);
}

static void test_equals_form(void) {
  config_t cfg;
  char *argv[] = {"mcpsubd",
                  "--listen=127.0.0.1:1234",
                  "--db=x.db",
                  "--log-level=warn",
                  "--page-size=1",
                  "--max-body=64k",
                  "--public-url=https://mcp.example/base/",
                  "--audit-retain-age=60"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK_INT_EQ(cfg.listen_port, 1234);
  CHECK_STR_EQ(cfg.db_path, "x.db");
  CHECK_INT_EQ(cfg.log_level, LOG_WARN);
  CHECK_INT_EQ(cfg.page_size, 1);
  CHECK_INT_EQ(cfg.max_body, 65536);
  CHECK_STR_EQ(cfg.public_url, "https://mcp.example/base");
  CHECK_INT_EQ(cfg.audit_retain_ms, 60000);
  config_finish(&cfg);

  /* an "=" inside the value is kept */
  char *argv2[] = {"mcpsubd", "--db=a=b.db", "--log-level", "error"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv2), argv2), 0);
  CHECK_STR_EQ(cfg.db_path, "a=b.db");
  CHECK_INT_EQ(cfg.log_level, LOG_ERROR);
  config_finish(&cfg);
}

static void test_listen_and_public_url(void) {
  config_t cfg;
  char *v6[] = {"mcpsubd", "--listen", "[::1]:9000"};
  CHECK_INT_EQ(parse(&cfg, ARGC(v6), v6), 0);
  CHECK_STR_EQ(cfg.listen_host, "::1");
  CHECK_INT_EQ(cfg.listen_port, 9000);
  CHECK_STR_EQ(cfg.public_url, "http://[::1]:9000");
  config_finish(&cfg);

  char *bare[] = {"mcpsubd", "--listen=9927"};
  CHECK_INT_EQ(parse(&cfg, ARGC(bare), bare), 0);
  CHECK_STR_EQ(cfg.listen_host, "127.0.0.1");
  CHECK_INT_EQ(cfg.listen_port, 9927);
  CHECK_STR_EQ(cfg.public_url, "http://127.0.0.1:9927");
  config_finish(&cfg);

  char *zero[] = {"mcpsubd", "--listen", "localhost:0"};
  CHECK_INT_EQ(parse(&cfg, ARGC(zero), zero), 0);
  CHECK_STR_EQ(cfg.listen_host, "localhost");
  CHECK_INT_EQ(cfg.listen_port, 0);
  config_finish(&cfg);

  /* the URL is derived after all flags: --listen after --public-url does not override it */
  char *order[] = {"mcpsubd",  "--public-url", "http://example.org//",
                   "--listen", "1.2.3.4:5",    "--allow-anonymous"};
  CHECK_INT_EQ(parse(&cfg, ARGC(order), order), 0);
  CHECK_STR_EQ(cfg.public_url, "http://example.org");
  config_finish(&cfg);

  /* ... and --listen given twice: the last one wins, and the URL follows it */
  char *twice[] = {"mcpsubd",  "--listen",    "1.2.3.4:5",
                   "--listen", "[fe80::1]:6", "--allow-anonymous"};
  CHECK_INT_EQ(parse(&cfg, ARGC(twice), twice), 0);
  CHECK_STR_EQ(cfg.public_url, "http://[fe80::1]:6");
  config_finish(&cfg);
}

static void test_schema_none(void) {
  config_t cfg;
  char *none[] = {"mcpsubd", "--schema", "none"};
  CHECK_INT_EQ(parse(&cfg, ARGC(none), none), 0);
  CHECK_STR_EQ(cfg.schema_path, "");
  config_finish(&cfg);
  char *empty[] = {"mcpsubd", "--schema="};
  CHECK_INT_EQ(parse(&cfg, ARGC(empty), empty), 0);
  CHECK_STR_EQ(cfg.schema_path, "");
  config_finish(&cfg);
}

static void test_max_body_suffixes(void) {
  config_t cfg;
  char *k[] = {"mcpsubd", "--max-body", "2K"};
  CHECK_INT_EQ(parse(&cfg, ARGC(k), k), 0);
  CHECK_INT_EQ(cfg.max_body, 2048);
  char *m[] = {"mcpsubd", "--max-body", "3m"};
  CHECK_INT_EQ(parse(&cfg, ARGC(m), m), 0);
  CHECK_INT_EQ(cfg.max_body, 3 * 1048576);
  char *top[] = {"mcpsubd", "--max-body", "1024M"};
  CHECK_INT_EQ(parse(&cfg, ARGC(top), top), 0);
  CHECK_INT_EQ(cfg.max_body, 1073741824LL);
  char *low[] = {"mcpsubd", "--max-body", "1024"};
  CHECK_INT_EQ(parse(&cfg, ARGC(low), low), 0);
  CHECK_INT_EQ(cfg.max_body, 1024);
  expect_error(ARGC(low), (char *[]){"mcpsubd", "--max-body", "1023"}, "--max-body");
  expect_error(3, (char *[]){"mcpsubd", "--max-body", "1025M"}, "--max-body");
  expect_error(3, (char *[]){"mcpsubd", "--max-body", "1g"}, "--max-body");
  expect_error(3, (char *[]){"mcpsubd", "--max-body", "1kk"}, "--max-body");
  expect_error(3, (char *[]){"mcpsubd", "--max-body", "k"}, "--max-body");
}

static void test_origins(void) {
  config_t cfg;
  char *argv[] = {"mcpsubd", "--allowed-origins", "https://a.example, https://b.example/,,",
                  "--allowed-origins=http://c.example:8080"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK_INT_EQ(cfg.n_allowed_origins, 3);
  CHECK_STR_EQ(cfg.allowed_origins[0], "https://a.example");
  CHECK_STR_EQ(cfg.allowed_origins[1], "https://b.example");
  CHECK_STR_EQ(cfg.allowed_origins[2], "http://c.example:8080");
  CHECK(cfg.origins_storage != NULL);
  config_finish(&cfg);
  CHECK(cfg.origins_storage == NULL);
  CHECK_INT_EQ(cfg.n_allowed_origins, 0);

  /* CONFIG_MAX_ORIGINS fit, one more does not */
  char list[CONFIG_MAX_ORIGINS * 16 + 16] = "";
  for (int i = 0; i < CONFIG_MAX_ORIGINS; i++) sprintf(list + strlen(list), "http://h%d,", i);
  char *full[] = {"mcpsubd", "--allowed-origins", list};
  CHECK_INT_EQ(parse(&cfg, ARGC(full), full), 0);
  CHECK_INT_EQ(cfg.n_allowed_origins, CONFIG_MAX_ORIGINS);
  CHECK_STR_EQ(cfg.allowed_origins[CONFIG_MAX_ORIGINS - 1], "http://h31");
  config_finish(&cfg);
  strcat(list, "http://one-too-many");
  expect_error(3, (char *[]){"mcpsubd", "--allowed-origins", list}, "--allowed-origins");
}

static void test_help_version(void) {
  config_t cfg;
  char *outbuf = NULL;
  size_t outlen = 0;
  FILE *out = open_memstream(&outbuf, &outlen);
  char *help[] = {"mcpsubd", "--db", "x", "--help", "--bogus"};
  config_defaults(&cfg);
  CHECK_INT_EQ(config_parse(&cfg, ARGC(help), help, out, err, sizeof(err)), 1);
  fclose(out);
  const char *flags[] = {"--listen",           "--db",        "--schema",
                         "--public-url",       "--log-level", "--allowed-origins",
                         "--idle-timeout",     "--max-body",  "--sse-keepalive",
                         "--max-sessions",     "--page-size", "--audit-retain-rows",
                         "--audit-retain-age", "--help",      "--version"};
  for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
    CHECK(strstr(outbuf, flags[i]) != NULL);
  CHECK(strstr(outbuf, "127.0.0.1:9926") != NULL);
  CHECK(strstr(outbuf, "data/mcpsub.db") != NULL);
  CHECK(strstr(outbuf, "604800") != NULL);
  free(outbuf);
  config_finish(&cfg);

  out = open_memstream(&outbuf, &outlen);
  char *version[] = {"mcpsubd", "--version"};
  config_defaults(&cfg);
  CHECK_INT_EQ(config_parse(&cfg, ARGC(version), version, out, err, sizeof(err)), 1);
  fclose(out);
  CHECK_STR_EQ(outbuf, "mcpsubd " MCPSUB_VERSION "\n");
  free(outbuf);
  config_finish(&cfg);

  out = open_memstream(&outbuf, &outlen);
  char *shorth[] = {"mcpsubd", "-h"};
  config_defaults(&cfg);
  CHECK_INT_EQ(config_parse(&cfg, ARGC(shorth), shorth, out, err, sizeof(err)), 1);
  fclose(out);
  CHECK(strstr(outbuf, "Usage") != NULL);
  free(outbuf);
  config_finish(&cfg);
}

static void test_errors(void) {
  expect_error(2, (char *[]){"mcpsubd", "--bogus"}, "--bogus");
  expect_error(2, (char *[]){"mcpsubd", "--bogus=1"}, "--bogus");
  expect_error(2, (char *[]){"mcpsubd", "positional"}, "positional");
  expect_error(2, (char *[]){"mcpsubd", "--db"}, "--db");
  expect_error(3, (char *[]){"mcpsubd", "--db", "--listen"}, "--db");
  expect_error(2, (char *[]){"mcpsubd", "--db="}, "--db");
  expect_error(2, (char *[]){"mcpsubd", "--help=yes"}, "--help");
  expect_error(3, (char *[]){"mcpsubd", "--listen", "127.0.0.1:65536"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--listen", "127.0.0.1:-1"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--listen", "127.0.0.1:"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--listen", ":80"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--listen", "::1:80"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--listen", "[::1]80"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--listen", "localhost"}, "--listen");
  expect_error(3, (char *[]){"mcpsubd", "--public-url", "ftp://x"}, "--public-url");
  expect_error(3, (char *[]){"mcpsubd", "--public-url", "example.org"}, "--public-url");
  expect_error(3, (char *[]){"mcpsubd", "--public-url", "http://"}, "--public-url");
  expect_error(3, (char *[]){"mcpsubd", "--public-url", "http://x/?a=1"}, "--public-url");
  expect_error(3, (char *[]){"mcpsubd", "--log-level", "verbose"}, "--log-level");
  expect_error(3, (char *[]){"mcpsubd", "--idle-timeout", "0"}, "--idle-timeout");
  expect_error(3, (char *[]){"mcpsubd", "--idle-timeout", "ten"}, "--idle-timeout");
  expect_error(3, (char *[]){"mcpsubd", "--idle-timeout", "-5"}, "--idle-timeout");
  expect_error(3, (char *[]){"mcpsubd", "--idle-timeout", "5s"}, "--idle-timeout");
  expect_error(3, (char *[]){"mcpsubd", "--idle-timeout", " 5"}, "--idle-timeout");
  expect_error(3, (char *[]){"mcpsubd", "--sse-keepalive", "0"}, "--sse-keepalive");
  expect_error(3, (char *[]){"mcpsubd", "--max-sessions", "0"}, "--max-sessions");
  expect_error(3, (char *[]){"mcpsubd", "--page-size", "0"}, "--page-size");
  expect_error(3, (char *[]){"mcpsubd", "--page-size", "1001"}, "--page-size");
  expect_error(3, (char *[]){"mcpsubd", "--audit-retain-rows", "-1"}, "--audit-retain-rows");
  expect_error(3, (char *[]){"mcpsubd", "--audit-retain-rows", "99999999999999999999"},
               "--audit-retain-rows");
  expect_error(3, (char *[]){"mcpsubd", "--audit-retain-age", "x"}, "--audit-retain-age");
  expect_error(2, (char *[]){"mcpsubd", "--max-sessions="}, "--max-sessions");
}

/* Secure by default: no authentication means loopback only, unless said otherwise. */
static void test_auth_secure_default(void) {
  config_t cfg;
  char *open_any[] = {"mcpsubd", "--listen", "0.0.0.0:8080"};
  CHECK_INT_EQ(parse(&cfg, ARGC(open_any), open_any), -EINVAL);
  CHECK(strstr(err, "--auth-keys") != NULL && strstr(err, "--allow-anonymous") != NULL);
  config_finish(&cfg);
  char *anon[] = {"mcpsubd", "--listen", "0.0.0.0:8080", "--allow-anonymous"};
  CHECK_INT_EQ(parse(&cfg, ARGC(anon), anon), 0);
  CHECK(cfg.allow_anonymous && !config_auth_enabled(&cfg));
  config_finish(&cfg);
  char *keys[] = {"mcpsubd", "--listen",        "10.1.2.3:8080",          "--auth-keys",
                  "k.json",  "--auth-audience", "https://mcp.example/mcp"};
  CHECK_INT_EQ(parse(&cfg, ARGC(keys), keys), 0);
  CHECK(config_auth_enabled(&cfg));
  CHECK_STR_EQ(cfg.auth_audience, "https://mcp.example/mcp");
  config_finish(&cfg);
  const char *loop[] = {"127.0.0.1", "127.1.2.3", "::1", "localhost"};
  for (size_t i = 0; i < ARRAY_LEN(loop); i++) CHECK(config_host_is_loopback(loop[i]));
  const char *not_loop[] = {"0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "example.com", "128.0.0.1"};
  for (size_t i = 0; i < ARRAY_LEN(not_loop); i++) CHECK(!config_host_is_loopback(not_loop[i]));
}

/* A configuration file: names, values (bare, after =, quoted), switches, comments, errors by line.
 */
static void test_config_file(void) {
  static const char text[] = "# mcpsubd\n"
                             "\n"
                             "listen 127.0.0.1:9000\n"
                             "  db = \"/var/lib/mcpsub/a b.db\"   \n"
                             "strict-subscribe\n"
                             "confirm-destructive refuse\n";
  config_file f;
  CHECK_INT_EQ(config_file_parse(text, sizeof(text) - 1, &f, err, sizeof(err)), 0);
  CHECK_INT_EQ(f.n, 4);
  CHECK_STR_EQ(f.args[0], "--listen=127.0.0.1:9000");
  CHECK_STR_EQ(f.args[1], "--db=/var/lib/mcpsub/a b.db");
  CHECK_STR_EQ(f.args[2], "--strict-subscribe");
  CHECK_INT_EQ(f.lines[3], 6);
  /* As mcpsubd takes them: the file's flags, then the command line's, which win. */
  char *argv[] = {"mcpsubd", f.args[0],  f.args[1],       f.args[2],
                  f.args[3], "--listen", "127.0.0.1:9001"};
  config_t cfg;
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK_INT_EQ(cfg.listen_port, 9001);
  CHECK_STR_EQ(cfg.db_path, "/var/lib/mcpsub/a b.db");
  CHECK(cfg.strict_subscribe);
  CHECK_INT_EQ(cfg.confirm_destructive, CONFIRM_REFUSE);
  config_finish(&cfg);
  config_file_finish(&f);

  static const struct {
    const char *text, *needle;
  } bad[] = {
      {"workers 2\nbogus 1\n", "line 2: unknown setting bogus"},
      {"strict-subscribe yes\n", "line 1: strict-subscribe takes no value"},
      {"listen\n", "line 1: listen needs a value"},
      {"config other.conf\n", "line 1: not a setting for a file: config"},
      {"help\n", "line 1: not a setting for a file: help"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    CHECK_INT_EQ(config_file_parse(bad[i].text, strlen(bad[i].text), &f, err, sizeof(err)),
                 -EINVAL);
    if (strstr(err, bad[i].needle) == NULL) fprintf(stderr, "got \"%s\"\n", err);
    CHECK(strstr(err, bad[i].needle) != NULL);
  }
  CHECK_INT_EQ(config_check_arg("--workers=x", err, sizeof(err)), -EINVAL);
  CHECK(strstr(err, "--workers") != NULL);
  CHECK_INT_EQ(config_check_arg("--workers=3", err, sizeof(err)), 0);
}

int main(void) {
  RUN(test_config_file);
  RUN(test_defaults);
  RUN(test_every_flag);
  RUN(test_equals_form);
  RUN(test_listen_and_public_url);
  RUN(test_schema_none);
  RUN(test_max_body_suffixes);
  RUN(test_origins);
  RUN(test_help_version);
  RUN(test_errors);
  RUN(test_auth_secure_default);
  return 0;
}
