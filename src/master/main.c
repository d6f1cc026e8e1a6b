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
#include "master/master.h"
#include "worker/worker_ipc.h"

/*
 * glibc gives the top of its heap back to the kernel (brk) whenever more
 * than M_TRIM_THRESHOLD is free there, and takes it again on the next
 * allocation. A loop turn allocates and frees its requests' memory, so a
 * heap whose top hovered around the threshold shrank and grew thousands of
 * times a second: each time page faults to zero the pages again and, the
 * worker having a writer thread, a TLB shootdown on the other core. It
 * took REST writes on 8 connections from 27,000 to 17,000 a second, by
 * chance of where the heap's top lay (docs/BENCHMARKS.md). A fixed 4 MiB
 * threshold, and growth in steps of 1 MiB, keep it still; memory held
 * that way is at most those few MiB a process.
 */
#define MAIN_HEAP_TRIM_THRESHOLD (4 * 1024 * 1024)
#define MAIN_HEAP_TOP_PAD        (1024 * 1024)

int main(int argc_given, char **argv_given) {
  if (mallopt(M_TRIM_THRESHOLD, MAIN_HEAP_TRIM_THRESHOLD) != 1 ||
      mallopt(M_TOP_PAD, MAIN_HEAP_TOP_PAD) != 1) {
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
