/*
 * Reading mcpsubd's configuration file: the file side of config.h's
 * config_file (config.c stays pure). The file is read whole, bounded by
 * CONFIG_FILE_MAX, and turned into flags that go before the command
 * line's, so that the command line overrides it and a master hands its
 * workers the flags themselves: a worker restarted later runs with what
 * its master read, not with whatever the file says by then.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/errmsg.h"
#include "common/mem.h"

#define CONFIG_FILE_MAX (1024 * 1024)

int config_file_read(const char *path, config_file *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  FILE *f = fopen(path, "re");
  if (f == NULL) return errmsg(err, errlen, -errno, "--config %s: %s", path, strerror(errno));
  char *text = mem_alloc(CONFIG_FILE_MAX + 1);
  size_t len = fread(text, 1, CONFIG_FILE_MAX + 1, f);
  int bad = ferror(f);
  fclose(f);
  int rc;
  if (bad) {
    rc = errmsg(err, errlen, -EIO, "--config %s: cannot read it", path);
  } else if (len > CONFIG_FILE_MAX) {
    rc = errmsg(err, errlen, -EFBIG, "--config %s: larger than %d bytes", path, CONFIG_FILE_MAX);
  } else {
    char why[400];
    rc = config_file_parse(text, len, out, why, sizeof(why));
    if (rc != 0) errmsg(err, errlen, rc, "--config %s: %s", path, why);
  }
  free(text);
  return rc;
}

int config_expand_argv(int argc, char **argv, int *out_argc, char ***out_argv, config_file *file,
                       char *err, size_t errlen) {
  memset(file, 0, sizeof(*file));
  *out_argc = argc;
  *out_argv = argv;
  const char *path = NULL;
  int at = -1, span = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0) {
      if (i + 1 >= argc) return errmsg(err, errlen, -EINVAL, "--config: missing value FILE");
      if (path != NULL) return errmsg(err, errlen, -EINVAL, "--config given twice");
      path = argv[i + 1];
      at = i;
      span = 2;
      i++;
    } else if (strncmp(argv[i], "--config=", 9) == 0) {
      if (path != NULL) return errmsg(err, errlen, -EINVAL, "--config given twice");
      path = argv[i] + 9;
      at = i;
      span = 1;
    }
  }
  if (path == NULL) return 0;
  int rc = config_file_read(path, file, err, errlen);
  if (rc != 0) return rc;
  /* argv[0], the file's flags, then the command line's (without --config): later ones win. */
  char **args = mem_calloc((size_t)argc + file->n + 1, sizeof(char *));
  int n = 0;
  args[n++] = argv[0];
  for (size_t i = 0; i < file->n; i++) args[n++] = file->args[i];
  for (int i = 1; i < argc; i++)
    if (i < at || i >= at + span) args[n++] = argv[i];
  args[n] = NULL;
  *out_argc = n;
  *out_argv = args;
  return 0;
}
