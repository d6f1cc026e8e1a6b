/*
 * The aborting allocation wrappers behind mcpsub's memory policy (see
 * mem.h). Every small internal allocation goes through here so that an
 * out-of-memory condition ends the process loudly in one place instead of
 * surfacing as a NULL dereference somewhere else. Nothing sized by a peer
 * may come here unbounded: callers check their limits first.
 */
#include "common/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reports the failed request size on stderr and aborts; never returns. */
static void mem_oom(size_t n) __attribute__((noreturn));
static void mem_oom(size_t n) {
  fprintf(stderr, "mcpsub: out of memory allocating %zu bytes\n", n);
  abort();
}

/* Returns n bytes of uninitialised memory; never NULL (mem_alloc(0) too). */
void *mem_alloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) mem_oom(n);
  return p;
}

/* Returns count * size zeroed bytes; aborts on overflow or OOM. */
void *mem_calloc(size_t count, size_t size) {
  if (count == 0 || size == 0) count = size = 1;
  void *p = calloc(count, size);
  if (p == NULL) mem_oom(count * size);
  return p;
}

/* Resizes p (which may be NULL) to n bytes; never NULL, never frees p. */
void *mem_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (q == NULL) mem_oom(n);
  return q;
}

/* Returns a new copy of the NUL-terminated s. s must not be NULL. */
char *mem_strdup(const char *s) {
  return mem_strndup(s, strlen(s));
}

/* Returns a new NUL-terminated copy of at most n bytes of s. */
char *mem_strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *p = mem_alloc(len + 1);
  memcpy(p, s, len);
  p[len] = '\0';
  return p;
}
