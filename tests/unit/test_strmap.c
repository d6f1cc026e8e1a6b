/*
 * Unit tests of strmap, the hash map under the subscription index: put,
 * get, replace (the old value comes back), remove (absent keys too), growth
 * of the bucket array with every entry still found afterwards, keys that
 * are byte strings (embedded NULs, prefixes of one another, the empty key),
 * foreach visiting each entry once, and reuse after finish. Values are
 * caller pointers the map never frees; ASan checks that the map frees its
 * own entries.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/strmap.h"

static int values[4096];

static void test_put_get_remove(void) {
  strmap m;
  strmap_init(&m);
  CHECK_INT_EQ(m.count, 0);
  CHECK(strmap_get(&m, "a", 1) == NULL);
  CHECK(strmap_put(&m, "a", 1, &values[1]) == NULL);
  CHECK(strmap_put(&m, "bb", 2, &values[2]) == NULL);
  CHECK_INT_EQ(m.count, 2);
  CHECK(strmap_get(&m, "a", 1) == &values[1]);
  CHECK(strmap_get(&m, "bb", 2) == &values[2]);
  /* Only the first len bytes of the key count. */
  CHECK(strmap_get(&m, "bbX", 2) == &values[2]);
  CHECK(strmap_get(&m, "b", 1) == NULL);
  CHECK(strmap_get(&m, "A", 1) == NULL);

  CHECK(strmap_remove(&m, "a", 1) == &values[1]);
  CHECK_INT_EQ(m.count, 1);
  CHECK(strmap_get(&m, "a", 1) == NULL);
  CHECK(strmap_remove(&m, "a", 1) == NULL); /* absent: NULL, count unchanged */
  CHECK(strmap_remove(&m, "zzz", 3) == NULL);
  CHECK_INT_EQ(m.count, 1);
  CHECK(strmap_get(&m, "bb", 2) == &values[2]);
  strmap_finish(&m);
  CHECK(m.buckets == NULL);
  CHECK_INT_EQ(m.count, 0);
}

static void test_replace(void) {
  strmap m;
  strmap_init(&m);
  CHECK(strmap_put(&m, "key", 3, &values[1]) == NULL);
  CHECK(strmap_put(&m, "key", 3, &values[2]) == &values[1]);
  CHECK_INT_EQ(m.count, 1);
  CHECK(strmap_get(&m, "key", 3) == &values[2]);
  /* A NULL value is stored like any other (get cannot tell it from absent). */
  CHECK(strmap_put(&m, "key", 3, NULL) == &values[2]);
  CHECK_INT_EQ(m.count, 1);
  CHECK(strmap_get(&m, "key", 3) == NULL);
  CHECK(strmap_remove(&m, "key", 3) == NULL);
  CHECK_INT_EQ(m.count, 0);
  strmap_finish(&m);
}

/* The map copies keys: the caller's buffer may change afterwards. */
static void test_keys_copied(void) {
  strmap m;
  strmap_init(&m);
  char key[16];
  snprintf(key, sizeof(key), "topic-1");
  strmap_put(&m, key, strlen(key), &values[1]);
  memset(key, 'x', sizeof(key) - 1);
  key[sizeof(key) - 1] = '\0';
  CHECK(strmap_get(&m, "topic-1", 7) == &values[1]);
  strmap_finish(&m);
}

static void test_grow(void) {
  strmap m;
  strmap_init(&m);
  size_t initial = m.n_buckets;
  const int n = 3000;
  char key[32];
  for (int i = 0; i < n; i++) {
    int len = snprintf(key, sizeof(key), "http://x/T/%d", i);
    CHECK(strmap_put(&m, key, (size_t)len, &values[i]) == NULL);
  }
  CHECK_INT_EQ(m.count, n);
  CHECK(m.n_buckets > initial);
  CHECK(m.count <= m.n_buckets); /* load stays at most 1 */
  CHECK((m.n_buckets & (m.n_buckets - 1)) == 0);
  for (int i = 0; i < n; i++) {
    int len = snprintf(key, sizeof(key), "http://x/T/%d", i);
    CHECK(strmap_get(&m, key, (size_t)len) == &values[i]);
  }
  /* Remove every other key; the rest is intact. */
  for (int i = 0; i < n; i += 2) {
    int len = snprintf(key, sizeof(key), "http://x/T/%d", i);
    CHECK(strmap_remove(&m, key, (size_t)len) == &values[i]);
  }
  CHECK_INT_EQ(m.count, n / 2);
  for (int i = 0; i < n; i++) {
    int len = snprintf(key, sizeof(key), "http://x/T/%d", i);
    CHECK(strmap_get(&m, key, (size_t)len) == (i % 2 == 0 ? NULL : &values[i]));
  }
  strmap_finish(&m); /* frees the remaining entries */
}

static void test_binary_keys(void) {
  strmap m;
  strmap_init(&m);
  /* "table\0key" is how the index files records: NULs are part of the key. */
  static const char k1[] = {'P', 0, 'A'};
  static const char k2[] = {'P', 0, 'B'};
  static const char k3[] = {'P', 0};
  static const char k4[] = {'P'};
  static const char k5[] = {'P', 0, 'A', 0};
  CHECK(strmap_put(&m, k1, sizeof(k1), &values[1]) == NULL);
  CHECK(strmap_put(&m, k2, sizeof(k2), &values[2]) == NULL);
  CHECK(strmap_put(&m, k3, sizeof(k3), &values[3]) == NULL);
  CHECK(strmap_put(&m, k4, sizeof(k4), &values[4]) == NULL);
  CHECK(strmap_put(&m, k5, sizeof(k5), &values[5]) == NULL);
  CHECK(strmap_put(&m, "", 0, &values[6]) == NULL);
  CHECK_INT_EQ(m.count, 6);
  CHECK(strmap_get(&m, k1, sizeof(k1)) == &values[1]);
  CHECK(strmap_get(&m, k2, sizeof(k2)) == &values[2]);
  CHECK(strmap_get(&m, k3, sizeof(k3)) == &values[3]);
  CHECK(strmap_get(&m, k4, sizeof(k4)) == &values[4]);
  CHECK(strmap_get(&m, k5, sizeof(k5)) == &values[5]);
  CHECK(strmap_get(&m, "", 0) == &values[6]);
  CHECK(strmap_get(&m, "P", 1) == &values[4]);
  /* High bytes (UTF-8) are plain bytes. */
  CHECK(strmap_put(&m, "\xc3\xa9", 2, &values[7]) == NULL);
  CHECK(strmap_get(&m, "\xc3\xa9", 2) == &values[7]);
  CHECK(strmap_get(&m, "\xc3\xa8", 2) == NULL);

  CHECK(strmap_remove(&m, k1, sizeof(k1)) == &values[1]);
  CHECK(strmap_get(&m, k5, sizeof(k5)) == &values[5]);
  CHECK(strmap_get(&m, k2, sizeof(k2)) == &values[2]);
  CHECK(strmap_remove(&m, "", 0) == &values[6]);
  CHECK(strmap_get(&m, "", 0) == NULL);
  CHECK_INT_EQ(m.count, 5);
  strmap_finish(&m);

  CHECK(strmap_hash(k1, sizeof(k1)) == strmap_hash(k1, sizeof(k1)));
  CHECK(strmap_hash(k1, sizeof(k1)) != strmap_hash(k2, sizeof(k2)));
  CHECK(strmap_hash(k3, sizeof(k3)) != strmap_hash(k4, sizeof(k4)));
}

typedef struct visit_ctx {
  int seen[64];
  int calls;
  size_t key_bytes;
} visit_ctx;

static void visit(const char *key, size_t len, void *value, void *data) {
  visit_ctx *ctx = data;
  ctx->calls++;
  ctx->key_bytes += len;
  int i = (int)((int *)value - values);
  CHECK(i >= 0 && i < 64);
  ctx->seen[i]++;
  CHECK(key[len] == '\0'); /* stored keys are NUL-terminated for convenience */
  char want[16];
  int n = snprintf(want, sizeof(want), "k%d", i);
  CHECK_INT_EQ(len, n);
  CHECK(memcmp(key, want, len) == 0);
}

static void test_foreach(void) {
  strmap m;
  strmap_init(&m);
  visit_ctx ctx = {0};
  strmap_foreach(&m, visit, &ctx);
  CHECK_INT_EQ(ctx.calls, 0);
  char key[16];
  size_t bytes = 0;
  for (int i = 0; i < 40; i++) { /* past the first growth */
    int len = snprintf(key, sizeof(key), "k%d", i);
    bytes += (size_t)len;
    strmap_put(&m, key, (size_t)len, &values[i]);
  }
  strmap_foreach(&m, visit, &ctx);
  CHECK_INT_EQ(ctx.calls, 40);
  CHECK_INT_EQ(ctx.key_bytes, bytes);
  for (int i = 0; i < 40; i++) CHECK_INT_EQ(ctx.seen[i], 1);
  strmap_finish(&m);
}

static void test_reuse_after_finish(void) {
  strmap m;
  strmap_init(&m);
  strmap_put(&m, "a", 1, &values[1]);
  strmap_finish(&m);
  strmap_init(&m);
  CHECK(strmap_get(&m, "a", 1) == NULL);
  CHECK_INT_EQ(m.count, 0);
  strmap_put(&m, "a", 1, &values[2]);
  CHECK(strmap_get(&m, "a", 1) == &values[2]);
  strmap_finish(&m);
}

/*
 * Keys crafted to share a bucket under the unkeyed hash (all 400 with the
 * same low 8 bits of FNV-1a) spread out under the map's keyed hash: no
 * chain grows anywhere near their number.
 */
static void test_crafted_keys_spread(void) {
  strmap m;
  strmap_init(&m);
  static char keys[400][32];
  int n = 0;
  for (unsigned i = 0; n < 400; i++) {
    char k[32];
    int len = snprintf(k, sizeof(k), "Product/k%u", i);
    if ((strmap_hash_stable(k, (size_t)len) & 0xff) != 0x2a) continue;
    memcpy(keys[n], k, (size_t)len + 1);
    strmap_put(&m, keys[n], (size_t)len, keys[n]);
    n++;
  }
  size_t longest = 0;
  for (size_t b = 0; b < m.n_buckets; b++) {
    size_t chain = 0;
    for (strmap_entry *e = m.buckets[b]; e != NULL; e = e->next) chain++;
    if (chain > longest) longest = chain;
  }
  CHECK_INT_EQ(m.count, 400);
  if (longest > 12) fprintf(stderr, "longest chain %zu for 400 crafted keys\n", longest);
  CHECK(longest <= 12);
  for (int i = 0; i < n; i++) CHECK(strmap_get(&m, keys[i], strlen(keys[i])) == keys[i]);
  strmap_finish(&m);
}

/* Another process keys its maps differently (each mcpsubd process is its own exec). */
static void test_keyed_per_process(const char *self) {
  char cmd[600], a[64] = "", b[64] = "";
  snprintf(cmd, sizeof(cmd), "'%s' --print-hash", self);
  for (int i = 0; i < 2; i++) {
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    CHECK(fgets(i == 0 ? a : b, sizeof(a), f) != NULL);
    CHECK(pclose(f) == 0);
  }
  CHECK(strcmp(a, b) != 0);
  /* The stable hash is, on the other hand, the same for everyone. */
  CHECK(strmap_hash_stable("abc", 3) == 0xe71fa2190541574bULL);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--print-hash") == 0) {
    strmap m;
    strmap_init(&m); /* keys the hash */
    strmap_finish(&m);
    printf("%zx\n", strmap_hash("same key", 8));
    return 0;
  }
  RUN(test_crafted_keys_spread);
  test_keyed_per_process(argv[0]);
  RUN(test_put_get_remove);
  RUN(test_replace);
  RUN(test_keys_copied);
  RUN(test_grow);
  RUN(test_binary_keys);
  RUN(test_foreach);
  RUN(test_reuse_after_finish);
  return 0;
}
