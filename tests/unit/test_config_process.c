/*
 * Tests of the process-model flags of the configuration: --workers (its
 * default, bounds and 0), --drain-timeout, --control-socket (its default
 * beside --db), and the internal --worker-slot/--worker-generation flags,
 * which are accepted but never shown by --help.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/config.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static char err[512];

static int parse(config_t *cfg, int argc, char **argv) {
  config_defaults(cfg);
  return config_parse(cfg, argc, argv, stdout, err, sizeof(err));
}

static void test_defaults(void) {
  config_t cfg;
  char *argv[] = {"mcpsubd", "--db", "/var/lib/mcpsub/x.db"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK(cfg.workers >= 1 && cfg.workers <= CONFIG_MAX_WORKERS);
  CHECK_INT_EQ(cfg.drain_timeout_ms, 10000);
  CHECK_STR_EQ(cfg.control_socket, "/var/lib/mcpsub/mcpsubd.sock");
  CHECK_INT_EQ(cfg.worker_slot, -1);
  config_finish(&cfg);
  char *bare[] = {"mcpsubd", "--db", "x.db"};
  CHECK_INT_EQ(parse(&cfg, ARGC(bare), bare), 0);
  CHECK_STR_EQ(cfg.control_socket, "mcpsubd.sock");
  config_finish(&cfg);
}

static void test_values(void) {
  config_t cfg;
  char *argv[] = {"mcpsubd",     "--workers",     "0", "--drain-timeout=3",   "--control-socket",
                  "/run/m.sock", "--worker-slot", "5", "--worker-generation", "7"};
  CHECK_INT_EQ(parse(&cfg, ARGC(argv), argv), 0);
  CHECK_INT_EQ(cfg.workers, 0);
  CHECK_INT_EQ(cfg.drain_timeout_ms, 3000);
  CHECK_STR_EQ(cfg.control_socket, "/run/m.sock");
  CHECK_INT_EQ(cfg.worker_slot, 5);
  CHECK_INT_EQ(cfg.worker_generation, 7);
  config_finish(&cfg);
  /* later flags win: how a master appends a worker's own flags */
  char *twice[] = {"mcpsubd", "--workers", "2", "--workers", "4"};
  CHECK_INT_EQ(parse(&cfg, ARGC(twice), twice), 0);
  CHECK_INT_EQ(cfg.workers, 4);
  config_finish(&cfg);
  char *bad[][3] = {{"mcpsubd", "--workers", "129"},
                    {"mcpsubd", "--workers", "-1"},
                    {"mcpsubd", "--drain-timeout", "x"},
                    {"mcpsubd", "--control-socket", ""},
                    {"mcpsubd", "--worker-slot", "128"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    CHECK(parse(&cfg, 3, bad[i]) < 0);
    CHECK(strstr(err, bad[i][1]) != NULL);
    config_finish(&cfg);
  }
}

static void test_help(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  config_usage(out);
  fclose(out);
  CHECK(strstr(text, "--workers") != NULL);
  CHECK(strstr(text, "--drain-timeout") != NULL);
  CHECK(strstr(text, "--control-socket") != NULL);
  CHECK(strstr(text, "--worker-slot") == NULL);
  CHECK(strstr(text, "--worker-generation") == NULL);
  free(text);
}

int main(void) {
  RUN(test_defaults);
  RUN(test_values);
  RUN(test_help);
  return 0;
}
