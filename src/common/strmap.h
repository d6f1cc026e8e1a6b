/*
 * strmap: a string-keyed hash map with separate chaining, for the indexes
 * of the subscription engine (topics by URI, tables by name, records by
 * table and key). Keys are byte strings with a length (a record key may
 * hold any byte); the map copies them. Values are caller pointers the map
 * never frees. Lookups and inserts are O(1) on average; the bucket array
 * doubles when the load passes 1.
 */
#ifndef MCPSUB_STRMAP_H
#define MCPSUB_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct strmap_entry {
  struct strmap_entry *next;
  void *value;
  size_t hash;
  size_t len;
  char key[]; /* len bytes, then a NUL */
} strmap_entry;

typedef struct strmap {
  strmap_entry **buckets;
  size_t n_buckets;
  size_t count;
} strmap;

void strmap_init(strmap *m);
/* Frees the entries (not the values). */
void strmap_finish(strmap *m);
/* The value stored under key, or NULL. */
void *strmap_get(const strmap *m, const char *key, size_t len);
/* The entry of key, or NULL: its key and value stay where they are until it is removed. */
strmap_entry *strmap_find(const strmap *m, const char *key, size_t len);
/* Stores value under key, replacing (and returning) any earlier value. */
void *strmap_put(strmap *m, const char *key, size_t len, void *value);
/* Removes key; returns its value, or NULL when absent. */
void *strmap_remove(strmap *m, const char *key, size_t len);
/* Calls fn for each entry; fn must not modify the map. */
void strmap_foreach(const strmap *m,
                    void (*fn)(const char *key, size_t len, void *value, void *data), void *data);
/*
 * The map's hash: keyed per process (a random key from the OS at first
 * use), so that which keys share a bucket cannot be known outside the
 * process. Not stable across processes: for identifiers that must be, use
 * strmap_hash_stable.
 */
size_t strmap_hash(const char *key, size_t len);
/* A fixed 64-bit FNV-1a hash: the same everywhere and always; never for indexing peer input. */
uint64_t strmap_hash_stable(const char *key, size_t len);

#endif
