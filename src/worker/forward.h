/*
 * The write home's writes. SQLite lets one connection write at a time;
 * workers that write side by side take its lock in turn, and a worker
 * that finds it taken can only sleep and try again, so a few writers
 * spread over two workers commit much slower than on one
 * (docs/BENCHMARKS.md, Writes). So on SQLite with several workers, every
 * record write (REST and tools) that a worker other than the write home
 * (slot 0) is asked for is sent there (IPC_WRITE), made by the home's
 * writer in its group commits, and answered back (IPC_WRITTEN); the request
 * is answered from that as if made here. The writes and answers of one
 * loop turn go together, one message each way. It is sent only while other
 * workers write too (IPC_COMMITTED came within the last
 * FORWARD_SHARED_MS): a worker writing alone meets no lock taken, and the
 * way to the home would only add its round trip.
 *
 * The writes and their answers go on a channel of their own between the
 * home and each other worker, not through the master: the master makes it
 * (a socketpair, IPC_PEER to both) when the later of the two starts, so a
 * write crosses one socket each way and wakes no third process; the
 * home's IPC_COMMITTED goes on them too, or, to a worker whose writes the
 * commit made, the answers sent at once (forward_tell). A worker without
 * a channel to a home (none yet, or it went) makes its writes itself.
 *
 * An answer can be lost: the home may die after its commit. The sender
 * then makes the write itself (when the channel ends, or a new home's
 * replaces it), and exactly once: each sent write carries a once id, the
 * sender's (origin, seq), recorded with its result in the write's own
 * transaction (store_once_begin), so that a second run finds the first
 * and answers from it. A write sent is begun: a cancellation no longer
 * stops it (its answer is not sent).
 */
#ifndef MCPSUB_FORWARD_H
#define MCPSUB_FORWARD_H

#include <stddef.h>

#include "common/config.h"
#include "worker/writer.h"

typedef struct worker worker_t;

/*
 * Is there a write home under cfg: SQLite, several workers? The master
 * gathers REST writers there (master_pick) and tells the others when it
 * exits; the other workers send it their writes.
 */
bool forward_write_home(const config_t *cfg);
/* The loop's part (the turn's messages): after worker_init's loop, at its close, at its end. */
void forward_init(worker_t *w);
void forward_close(worker_t *w);
void forward_finish(worker_t *w);
/* Makes r (a record write, done set): at the write home, or here. Takes r. */
void forward_submit(worker_t *w, writer_record *r);
/*
 * The home, at a commit: sends the answers gathered for slot now, not at
 * the turn's end; true when they went. They tell the sender of the commit
 * too (it reads IPC_WRITTEN as IPC_COMMITTED), one message instead of two.
 */
bool forward_tell(worker_t *w, unsigned slot);
/* The sender: the home's answers (IPC_WRITTEN's payload). */
void forward_answered(worker_t *w, const char *payload, size_t len);
/* The sender: the home is gone (its channel ended or was replaced); its writes are made here. */
void forward_lost(worker_t *w);
/* The home: writes the worker of slot from sent (IPC_WRITE's payload), made and answered. */
void forward_run(worker_t *w, unsigned from, const char *payload, size_t len);

#endif
