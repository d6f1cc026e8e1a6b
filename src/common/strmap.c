/*
 * String-keyed hash map (see strmap.h). Some keys come from peers (record
 * keys of subscribed URIs, session ids), so the bucket of a key must not
 * be predictable: the hash is FNV-1a started from a per-process random
 * basis and finished with a keyed 64-bit mixer (a second random key and
 * the murmur3 finaliser), and buckets are taken from the mixed hash. Keys
 * that collide for one process's keys do not for another's, so crafted
 * keys cannot turn an index into a list. (A cryptographic keyed hash,
 * SipHash, is what redis uses; OpenSSL offers it only through EVP_MAC,
 * whose per-call setup costs more than the lookups it protects.)
 */
#include "common/strmap.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/mem.h"
#include "common/session_id.h"

uint64_t strmap_hash_stable(const char *key, size_t len) {
  uint64_t h = 14695981039346656037ULL; /* the FNV-1a 64 offset basis */
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)key[i];
    h *= 1099511628211ULL;
  }
  return h;
}

static uint64_t strmap_keys[2];
static bool strmap_keyed;

/* The per-process keys, from the OS CSPRNG at first use (each process is its own exec). */
static void strmap_key_once(void) {
  if (strmap_keyed) return;
  if (session_id_random((unsigned char *)strmap_keys, sizeof(strmap_keys)) != 0) {
    /* No OS randomness at all: the process cannot mint session ids either. */
    strmap_keys[0] = (uint64_t)(uintptr_t)&strmap_keys ^ 0x9e3779b97f4a7c15ULL;
    strmap_keys[1] = strmap_keys[0] * 0xff51afd7ed558ccdULL;
  }
  strmap_keyed = true;
}

size_t strmap_hash(const char *key, size_t len) {
  uint64_t h = 14695981039346656037ULL ^ strmap_keys[0];
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)key[i];
    h *= 1099511628211ULL;
  }
  h ^= strmap_keys[1] ^ (uint64_t)len;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return (size_t)h;
}

void strmap_init(strmap *m) {
  strmap_key_once();
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

strmap_entry *strmap_find(const strmap *m, const char *key, size_t len) {
  return *strmap_slot(m, key, len, strmap_hash(key, len));
}

void *strmap_get(const strmap *m, const char *key, size_t len) {
  strmap_entry *e = strmap_find(m, key, len);
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
