/*
 * mcpsubd's entry point: parse flags, then run one worker in this process
 * until SIGTERM or SIGINT. Signals only stop the loop's work through libuv
 * signal watchers (no work in a signal handler); the worker then closes its
 * connections and the loop ends by itself.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "common/config.h"
#include "common/log.h"
#include "worker/worker.h"

typedef struct daemon_state {
  worker_t worker;
  uv_signal_t sigterm, sigint;
} daemon_state;

static void on_signal(uv_signal_t *h, int signum) {
  daemon_state *d = h->data;
  log_info("shutting down", "signal", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  worker_shutdown(&d->worker);
}

int main(int argc, char **argv) {
  config_t cfg;
  config_defaults(&cfg);
  char err[512];
  int rc = config_parse(&cfg, argc, argv, stdout, err, sizeof(err));
  if (rc != 0) {
    if (rc < 0) fprintf(stderr, "mcpsubd: %s\nTry 'mcpsubd --help'.\n", err);
    config_finish(&cfg);
    return rc > 0 ? 0 : 2;
  }
  log_set_level(cfg.log_level);
  signal(SIGPIPE, SIG_IGN);

  uv_loop_t *loop = uv_default_loop();
  static daemon_state d;
  if (worker_init(&d.worker, loop, &cfg, 0, err, sizeof(err)) != 0) {
    log_error("cannot open the database", "db", cfg.db_path, "error", err);
    config_finish(&cfg);
    return 1;
  }
  rc = worker_listen(&d.worker);
  if (rc != 0) {
    char addr[128];
    snprintf(addr, sizeof(addr), "%s:%d", cfg.listen_host, cfg.listen_port);
    log_error("cannot listen", "addr", addr, "error", uv_strerror(rc));
    worker_shutdown(&d.worker);
    uv_run(loop, UV_RUN_DEFAULT);
    worker_finish(&d.worker);
    uv_loop_close(loop);
    config_finish(&cfg);
    return 1;
  }
  uv_signal_init(loop, &d.sigterm);
  uv_signal_init(loop, &d.sigint);
  d.sigterm.data = d.sigint.data = &d;
  uv_signal_start(&d.sigterm, on_signal, SIGTERM);
  uv_signal_start(&d.sigint, on_signal, SIGINT);
  char addr[128];
  snprintf(addr, sizeof(addr), "%s:%d", cfg.listen_host, cfg.listen_port);
  log_info("listening", "addr", addr, "db", cfg.db_path, "public_url", cfg.public_url);

  uv_run(loop, UV_RUN_DEFAULT);
  worker_finish(&d.worker);
  rc = uv_loop_close(loop);
  if (rc != 0) log_warn("loop closed with open handles", "error", uv_strerror(rc));
  log_info("stopped");
  config_finish(&cfg);
  return 0;
}
