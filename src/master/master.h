/*
 * The master process (see docs/operations.md, "Process model"). With
 * --workers N > 0 it owns the listening socket and the control socket,
 * starts N worker processes (uv_spawn of this same binary with
 * --worker-slot), accepts connections, peeks at each first request's
 * headers and hands the connection (fd and bytes read) to a worker over
 * its IPC channel: by the slot in the Mcp-Session-Id, else to the
 * least-loaded worker. It answers GET /status and /metrics itself from
 * fresh worker reports, forwards commit wake-ups between workers, restarts
 * workers that die (with backoff), drains on SIGTERM/SIGINT and serves the
 * control socket. It parses no JSON-RPC and keeps no session state.
 *
 * With --workers 0 the same entry point runs one worker in this process,
 * with the same drain semantics and the same control socket commands.
 */
#ifndef MCPSUB_MASTER_H
#define MCPSUB_MASTER_H

#include "common/config.h"

/*
 * Runs the server until it has stopped. argv is the original command line
 * (workers are started with it). Returns the process exit status: 0 after
 * a clean drain, 1 when it could not start or the drain had to kill.
 */
int master_main(const config_t *cfg, int argc, char **argv);

#endif
