/*
 * String-keyed hash map (see strmap.h). FNV-1a hashing: the keys are URIs,
 * table names and record keys, short strings for which it is fast and
 * spreads well; nothing here is exposed to hash-flooding by an
 * unauthenticated peer because every key is first checked against the
 * schema or bounded in count per session.
 */
#include "common/strmap.h"

#include <stdint.h>
#include <string.h>

#include "common/mem.h"

size_t strmap_hash(const char *key, size_t len) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)key[i];
    h *= 1099511628211ULL;
  }
  return (size_t)h;
}

void strmap_init(strmap *m) {
  m->n_buckets = 16;
  m->buckets = mem_calloc(m->n_buckets, sizeof(*m->buckets));
  m->count = 0;
}

void strmap_finish(strmap *m) {
  for (size_t i = 0; i < m->n_buckets; i++) {
    strmap_entry *e = m->buckets[i];
    while (e != NULL) {
      strmap_entry *next = e->next;
      free(e);
      e = next;
    }
  }
  free(m->buckets);
  m->buckets = NULL;
  m->n_buckets = m->count = 0;
}

static strmap_entry **strmap_slot(const strmap *m, const char *key, size_t len, size_t hash) {
  strmap_entry **p = &m->buckets[hash & (m->n_buckets - 1)];
  while (*p != NULL &&
         !((*p)->hash == hash && (*p)->len == len && memcmp((*p)->key, key, len) == 0))
    p = &(*p)->next;
  return p;
}

void *strmap_get(const strmap *m, const char *key, size_t len) {
  strmap_entry *e = *strmap_slot(m, key, len, strmap_hash(key, len));
  return e != NULL ? e->value : NULL;
}

static void strmap_grow(strmap *m) {
  size_t n = m->n_buckets * 2;
  strmap_entry **buckets = mem_calloc(n, sizeof(*buckets));
  for (size_t i = 0; i < m->n_buckets; i++) {
    strmap_entry *e = m->buckets[i];
    while (e != NULL) {
      strmap_entry *next = e->next;
      e->next = buckets[e->hash & (n - 1)];
      buckets[e->hash & (n - 1)] = e;
      e = next;
    }
  }
  free(m->buckets);
  m->buckets = buckets;
  m->n_buckets = n;
}

void *strmap_put(strmap *m, const char *key, size_t len, void *value) {
  size_t hash = strmap_hash(key, len);
  strmap_entry **p = strmap_slot(m, key, len, hash);
  if (*p != NULL) {
    void *old = (*p)->value;
    (*p)->value = value;
    return old;
  }
  strmap_entry *e = mem_alloc(sizeof(*e) + len + 1);
  e->next = NULL;
  e->value = value;
  e->hash = hash;
  e->len = len;
  memcpy(e->key, key, len);
  e->key[len] = '\0';
  *p = e;
  if (++m->count > m->n_buckets) strmap_grow(m);
  return NULL;
}

void *strmap_remove(strmap *m, const char *key, size_t len) {
  strmap_entry **p = strmap_slot(m, key, len, strmap_hash(key, len));
  strmap_entry *e = *p;
  if (e == NULL) return NULL;
  *p = e->next;
  void *value = e->value;
  free(e);
  m->count--;
  return value;
}

void strmap_foreach(const strmap *m,
                    void (*fn)(const char *key, size_t len, void *value, void *data), void *data) {
  for (size_t i = 0; i < m->n_buckets; i++) {
    for (strmap_entry *e = m->buckets[i]; e != NULL; e = e->next)
      fn(e->key, e->len, e->value, data);
  }
}
