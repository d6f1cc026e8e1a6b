/*
 * Session ids: 128 bits from the OS CSPRNG (getrandom), rendered as
 * lowercase hex after a two-hex-digit worker slot, e.g.
 * "00" + 32 hex = 34 visible ASCII characters. The slot lets a master
 * route a request to the worker that holds the session without a lookup.
 */
#ifndef MCPSUB_SESSION_ID_H
#define MCPSUB_SESSION_ID_H

#include <stdbool.h>
#include <stddef.h>

#include "common/mem.h"

#define SESSION_ID_LEN 34

/* Writes SESSION_ID_LEN chars and a NUL into out. Returns 0 or -errno. */
int session_id_generate(char out[SESSION_ID_LEN + 1], unsigned slot) MCPSUB_NODISCARD;
/* True when s has the shape of an id we mint. */
bool session_id_valid(const char *s, size_t len);
/* The worker slot encoded in a valid id. */
unsigned session_id_slot(const char *s);

/*
 * Fills buf with len bytes from the OS CSPRNG (getrandom, or /dev/urandom
 * where it is missing). 0, or -errno: never a weak fallback.
 */
int session_id_random(unsigned char *buf, size_t len) MCPSUB_NODISCARD;

#endif
