/*
 * The rule, shared by the master's peek and the worker's HTTP layer, for
 * header fields a request may carry only once. Two copies of one of these
 * could be read differently by two readers (the master routing by the
 * last Mcp-Session-Id and the worker serving the first, a proxy and us
 * disagreeing on Content-Length or Host), so both refuse such a request
 * with 400 before anything acts on it. Pure.
 */
#ifndef MCPSUB_HTTP_FIELDS_H
#define MCPSUB_HTTP_FIELDS_H

#include <stdbool.h>
#include <stddef.h>

/* Number of such fields; http_field_single_index returns 0..HTTP_FIELDS_SINGLE-1. */
#define HTTP_FIELDS_SINGLE 8

/*
 * The index of a single-valued field (name of len bytes, any case), or -1
 * for a field that may repeat.
 */
int http_field_single_index(const char *name, size_t len);
/* The lowercase name of the single-valued field at index i. */
const char *http_field_single_name(int i);

#endif
