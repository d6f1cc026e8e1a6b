/*
 * mcpsubd's entry point: parse flags, then either run the master (which
 * starts --workers worker processes, or with --workers 0 serves in this
 * one process) or, when started by a master with the internal
 * --worker-slot flag, run one worker whose channel to the master is fd 3.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/config.h"
#include "common/log.h"
#include "common/store.h"
#include "master/master.h"
#include "worker/worker_ipc.h"

/*
 * glibc gives the top of its heap back to the kernel (brk) when more than
 * M_TRIM_THRESHOLD is free there, and takes it again on the next
 * allocation; the threshold adapts to the largest block freed from mmap,
 * so where it lies depends on the process's history. Every write makes
 * SQLite allocate and free memory of its own (its savepoints, the pages of
 * the audit trigger's temporary tables), so a worker whose heap top sat
 * near the threshold shrank and grew it with every write: 52,000 brk
 * calls a second, each with page faults and a TLB shootdown on the other
 * core (the worker has a writer thread), and REST writes on 8 connections
 * at 17,000 a second instead of 25,000 (docs/BENCHMARKS.md). A fixed threshold of 512 KiB, above
 * that swing, keeps the top still (0 brk calls a second); what it holds back is at most that much
 * free memory a process.
 */
#define MAIN_HEAP_TRIM_THRESHOLD (512 * 1024)

int main(int argc_given, char **argv_given) {
  if (mallopt(M_TRIM_THRESHOLD, MAIN_HEAP_TRIM_THRESHOLD) != 1) {
    /* another allocator: its own policy stands */
  }
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
  store_pg_set_prepare(!cfg.db_no_prepare);
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
