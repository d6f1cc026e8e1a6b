/*
 * mcpsubd's entry point: parse flags, then either run the master (which
 * starts --workers worker processes, or with --workers 0 serves in this
 * one process) or, when started by a master with the internal
 * --worker-slot flag, run one worker whose channel to the master is fd 3.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/config.h"
#include "common/log.h"
#include "master/master.h"
#include "worker/worker_ipc.h"

int main(int argc_given, char **argv_given) {
  config_t cfg;
  config_defaults(&cfg);
  char err[512];
  /* --config FILE: its flags go first, so that the command line's override them. */
  config_file file;
  int argc;
  char **argv;
  int rc = config_expand_argv(argc_given, argv_given, &argc, &argv, &file, err, sizeof(err));
  if (rc == 0) rc = config_parse(&cfg, argc, argv, stdout, err, sizeof(err));
  if (rc != 0) {
    if (rc < 0) fprintf(stderr, "mcpsubd: %s\nTry 'mcpsubd --help'.\n", err);
    config_finish(&cfg);
    if (argv != argv_given) free(argv);
    config_file_finish(&file);
    return rc > 0 ? 0 : 2;
  }
  log_set_level(cfg.log_level);
  if (cfg.worker_slot < 0 && cfg.allow_anonymous && !config_auth_enabled(&cfg) &&
      !config_host_is_loopback(cfg.listen_host))
    log_warn("serving a non-loopback address without authentication (--allow-anonymous): anyone "
             "who reaches it may read, write and subscribe",
             "listen", cfg.listen_host);
  int code = cfg.worker_slot >= 0 ? worker_ipc_main(&cfg) : master_main(&cfg, argc, argv);
  config_finish(&cfg);
  if (argv != argv_given) free(argv);
  config_file_finish(&file);
  return code;
}
