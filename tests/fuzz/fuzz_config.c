/*
 * libFuzzer target: mcpsubd's command line and configuration files
 * (common/config.h). The input is split into arguments at NUL bytes; every
 * outcome is 0, 1 (--help or --version, printed to /dev/null) or -EINVAL
 * with a message. The same bytes are also read as a configuration file:
 * -EINVAL with "line N: ..." or flags that each check alone to 0 or
 * -EINVAL with a message.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  static FILE *sink;
  if (sink == NULL) sink = fopen("/dev/null", "w");
  char *copy = malloc(size + 1);
  memcpy(copy, data, size);
  copy[size] = '\0';
  char *argv[66] = {"mcpsubd"};
  int argc = 1;
  for (size_t i = 0; i <= size && argc < 65;) {
    argv[argc++] = copy + i;
    i += strlen(copy + i) + 1;
  }
  config_t cfg;
  config_defaults(&cfg);
  char err[512] = "";
  int rc = config_parse(&cfg, argc, argv, sink, err, sizeof(err));
  if (rc != 0 && rc != 1 && rc != -EINVAL) abort();
  if (rc == -EINVAL && err[0] == '\0') abort();
  config_finish(&cfg);
  free(copy);

  config_file file;
  rc = config_file_parse((const char *)data, size, &file, err, sizeof(err));
  if (rc != 0 && (rc != -EINVAL || strncmp(err, "line ", 5) != 0)) abort();
  for (size_t i = 0; rc == 0 && i < file.n; i++) {
    if (strncmp(file.args[i], "--", 2) != 0 || file.lines[i] == 0) abort();
    err[0] = '\0';
    int one = config_check_arg(file.args[i], err, sizeof(err));
    if (one != 0 && (one != -EINVAL || err[0] == '\0')) abort();
  }
  if (rc == 0) config_file_finish(&file);
  return 0;
}
