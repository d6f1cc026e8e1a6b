/*
 * mcpsubctl config check FILE: validates an mcpsubd configuration file the
 * way mcpsubd --config would read it, without starting anything: every
 * line's name and value (reported with its line number), then the file as
 * a whole (settings that need each other). Touches nothing but the file.
 */
#include <errno.h>
#include <stdio.h>

#include "common/config.h"
#include "ctl.h"

int ctl_cmd_config_check(ctl_context *ctx, int argc, char **argv) {
  const char *path = NULL;
  int rc = ctl_parse_args("config check", argc, argv, NULL, 0, &path, 1);
  if (rc != 0) return rc;
  config_file file;
  char err[512];
  int read = config_file_read(path, &file, err, sizeof(err));
  if (read != 0) {
    ctl_error("%s", err);
    return read == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_ERROR; /* not valid, or not readable */
  }
  int bad = 0;
  for (size_t i = 0; i < file.n; i++) {
    if (config_check_arg(file.args[i], err, sizeof(err)) != 0) {
      ctl_error("%s: line %u: %s", path, file.lines[i], err);
      bad++;
    }
  }
  if (bad == 0) { /* as a whole, as mcpsubd would take it (with no other flag) */
    char **args = mem_calloc(file.n + 2, sizeof(char *));
    args[0] = "mcpsubd";
    for (size_t i = 0; i < file.n; i++) args[i + 1] = file.args[i];
    config_t cfg;
    config_defaults(&cfg);
    FILE *sink = fopen("/dev/null", "we");
    if (config_parse(&cfg, (int)file.n + 1, args, sink != NULL ? sink : stderr, err, sizeof(err)) <
        0) {
      ctl_error("%s: %s", path, err);
      bad++;
    }
    if (sink != NULL) fclose(sink);
    config_finish(&cfg);
    free(args);
  }
  if (bad == 0) {
    if (ctx->json)
      printf("{\"ok\":true,\"settings\":%zu}\n", file.n);
    else
      printf("%s: ok (%zu settings)\n", path, file.n);
  }
  config_file_finish(&file);
  return bad == 0 ? CTL_EXIT_OK : CTL_EXIT_USAGE;
}
