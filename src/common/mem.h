/*
 * Memory policy. Small internal allocations (structs, names, strings we
 * build) go through these wrappers, which abort the process on
 * out-of-memory: there is no useful recovery from a failed 64-byte malloc,
 * and checking every one hides real bugs. Anything whose size a peer
 * controls (request bodies, headers, stream queues) is bounded before it is
 * allocated and fails with an HTTP or JSON-RPC error instead.
 */
#ifndef MCPSUB_MEM_H
#define MCPSUB_MEM_H

#include <stddef.h>
#include <stdlib.h>

#define MCPSUB_NODISCARD __attribute__((warn_unused_result))
#define ARRAY_LEN(a)     (sizeof(a) / sizeof((a)[0]))

void *mem_alloc(size_t n);
void *mem_calloc(size_t count, size_t size);
void *mem_realloc(void *p, size_t n);
char *mem_strdup(const char *s);
char *mem_strndup(const char *s, size_t n);

/*
 * Starts loading the cache line at p. GCC deems a function whose only
 * effect is __builtin_prefetch to have none and drops the calls to it (the
 * release builds lost every prefetching helper of the fan-out so); the
 * empty volatile asm, which costs nothing, is an effect that keeps them.
 */
static inline void mem_prefetch(const void *p) {
  __builtin_prefetch(p);
  __asm__ volatile("");
}

#endif
