/*
 * The REST API on the same port: /{Table} (GET with ?col=v filters and
 * _limit/_cursor paging, POST to insert) and /{Table}/{key} (GET, PUT,
 * PATCH, DELETE). JSON in and out; writes go through the store, so the
 * audit triggers record them like any other writer's.
 */
#ifndef MCPSUB_REST_H
#define MCPSUB_REST_H

#include "worker/worker.h"

/* Serves req when its path names an exported table; else answers 404. */
void rest_handle(worker_t *w, http_conn_t *c, http_request_t *req, const auth_principal *p);

#endif
