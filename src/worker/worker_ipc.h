/*
 * A worker process spawned by the master: its side of the IPC channel
 * (inherited as fd 3). It takes the connections the master hands over
 * (CONN), hands back those that belong to another worker (REROUTE), tells
 * the master about its own commits (COMMITTED, at most one per loop turn)
 * and hears of the others' (tailer kick), reports its counters (STATS,
 * every 250 ms and on request), answers control requests (CTL_REQ) and
 * drains on DRAIN, on SIGTERM, or when the master goes away. SIGINT is
 * ignored: a terminal's Ctrl-C is the master's to handle.
 */
#ifndef MCPSUB_WORKER_IPC_H
#define MCPSUB_WORKER_IPC_H

#include "common/config.h"

/* The fd on which a spawned worker finds its end of the master's socketpair. */
#define WORKER_IPC_FD 3
/* Interval of the periodic STATS report. */
#define WORKER_IPC_STATS_MS 250

/*
 * Runs a worker process for cfg->worker_slot until it has drained or the
 * master is gone. Returns the process exit status (0, or 1 when the worker
 * could not start).
 */
int worker_ipc_main(const config_t *cfg);

#endif
