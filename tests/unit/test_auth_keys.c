/*
 * Unit tests of the API key file (auth_keys.h): the format of a generated
 * key, the file round trip (parse, format, save, load, mode 0600, nothing
 * but hashes on disk), every malformed file refused with a message, and
 * matching: the right key found, a near miss (one character off, a prefix,
 * a longer string) not.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "common/auth_keys.h"

static void test_generate(void) {
  char a[AUTH_KEY_TEXT_LEN + 1], b[AUTH_KEY_TEXT_LEN + 1];
  uint8_t ha[32], hb[32];
  CHECK_INT_EQ(auth_key_generate(a, ha), 0);
  CHECK_INT_EQ(auth_key_generate(b, hb), 0);
  CHECK_INT_EQ(strlen(a), AUTH_KEY_TEXT_LEN);
  CHECK(strncmp(a, "mcpsub_", 7) == 0);
  for (size_t i = 7; i < AUTH_KEY_TEXT_LEN; i++)
    CHECK(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", a[i]) != NULL);
  CHECK(strcmp(a, b) != 0);
  CHECK(memcmp(ha, hb, 32) != 0);
}

static void test_match(void) {
  auth_keyring r = {0};
  char key[AUTH_KEY_TEXT_LEN + 1], other[AUTH_KEY_TEXT_LEN + 1];
  uint8_t h[32], ho[32];
  CHECK_INT_EQ(auth_key_generate(key, h), 0);
  CHECK_INT_EQ(auth_key_generate(other, ho), 0);
  auth_keyring_add(&r, "one", "reader", ho, 1);
  auth_keyring_add(&r, "two", "writer", h, 2);
  const auth_key *k = auth_keyring_match(&r, key, strlen(key));
  CHECK(k != NULL && strcmp(k->name, "two") == 0 && strcmp(k->role, "writer") == 0);
  CHECK(auth_keyring_match(&r, key, strlen(key) - 1) == NULL); /* a prefix */
  char longer[AUTH_KEY_TEXT_LEN + 2];
  snprintf(longer, sizeof(longer), "%sx", key);
  CHECK(auth_keyring_match(&r, longer, strlen(longer)) == NULL);
  key[20] = key[20] == 'A' ? 'B' : 'A'; /* one character off */
  CHECK(auth_keyring_match(&r, key, strlen(key)) == NULL);
  CHECK(auth_keyring_match(&r, "", 0) == NULL);
  CHECK_INT_EQ(auth_keyring_remove(&r, "two"), 0);
  CHECK_INT_EQ(auth_keyring_remove(&r, "two"), -ENOENT);
  CHECK(auth_keyring_match(&r, other, strlen(other)) != NULL);
  auth_keyring_finish(&r);
  auth_keyring_finish(&r); /* idempotent */
}

static void test_round_trip(void) {
  char dir[] = "/tmp/mcpsub-keys-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof(path), "%s/keys.json", dir);
  auth_keyring r = {0};
  char key[AUTH_KEY_TEXT_LEN + 1];
  uint8_t h[32];
  CHECK_INT_EQ(auth_key_generate(key, h), 0);
  auth_keyring_add(&r, "agent-1.prod_x", "admin", h, 1700000000000);
  char err[256];
  CHECK_INT_EQ(auth_keyring_save(path, &r, err, sizeof(err)), 0);
  struct stat st;
  CHECK_INT_EQ(stat(path, &st), 0);
  CHECK_INT_EQ(st.st_mode & 0777, 0600);
  FILE *f = fopen(path, "r");
  char text[4096];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  CHECK(strstr(text, key + 7) == NULL); /* only the hash is on disk */
  auth_keyring back;
  CHECK_INT_EQ(auth_keyring_load(path, &back, err, sizeof(err)), 0);
  CHECK_INT_EQ(back.n, 1);
  CHECK_STR_EQ(back.keys[0].name, "agent-1.prod_x");
  CHECK_STR_EQ(back.keys[0].role, "admin");
  CHECK(back.keys[0].created_ms == 1700000000000);
  CHECK(auth_keyring_match(&back, key, strlen(key)) == &back.keys[0]);
  auth_keyring_finish(&back);
  auth_keyring_finish(&r);
  CHECK_INT_EQ(auth_keyring_load("/nonexistent/keys.json", &back, err, sizeof(err)), -ENOENT);
  unlink(path);
  rmdir(dir);
}

static void expect_bad(const char *text, const char *needle) {
  auth_keyring r;
  char err[256] = "";
  int rc = auth_keyring_parse(text, strlen(text), &r, err, sizeof(err));
  if (rc != -EINVAL || strstr(err, needle) == NULL) {
    fprintf(stderr, "parse(%s) = %d \"%s\"; wanted -EINVAL mentioning \"%s\"\n", text, rc, err,
            needle);
    CHECK(rc == -EINVAL && strstr(err, needle) != NULL);
  }
  CHECK(r.keys == NULL && r.n == 0);
}

static void test_malformed(void) {
  static const char hash[] = "0000000000000000000000000000000000000000000000000000000000000000";
  char text[512];
  expect_bad("", "expected");
  expect_bad("[]", "expected");
  expect_bad("{\"keys\":{}}", "expected");
  expect_bad("{\"keys\":[{\"role\":\"reader\"}]}", "name");
  snprintf(text, sizeof(text),
           "{\"keys\":[{\"name\":\"a b\",\"role\":\"reader\",\"sha256\":\"%s\"}]}", hash);
  expect_bad(text, "name");
  snprintf(text, sizeof(text), "{\"keys\":[{\"name\":\"a\",\"sha256\":\"%s\"}]}", hash);
  expect_bad(text, "role");
  expect_bad("{\"keys\":[{\"name\":\"a\",\"role\":\"reader\",\"sha256\":\"00\"}]}", "sha256");
  snprintf(text, sizeof(text), "{\"keys\":[{\"name\":\"a\",\"role\":\"r\",\"sha256\":\"%.63sX\"}]}",
           hash);
  expect_bad(text, "sha256");
  snprintf(text, sizeof(text),
           "{\"keys\":[{\"name\":\"a\",\"role\":\"r\",\"sha256\":\"%s\"},"
           "{\"name\":\"a\",\"role\":\"r\",\"sha256\":\"%s\"}]}",
           hash, hash);
  expect_bad(text, "duplicate");
  /* A creation time no clock holds (hand-edited) is unknown, not a conversion out of range. */
  for (int i = 0; i < 2; i++) {
    snprintf(text, sizeof(text),
             "{\"keys\":[{\"name\":\"a\",\"role\":\"r\",\"sha256\":\"%s\",\"created\":%s}]}", hash,
             i == 0 ? "1e300" : "-1e300");
    auth_keyring r;
    char err[256] = "";
    CHECK_INT_EQ(auth_keyring_parse(text, strlen(text), &r, err, sizeof(err)), 0);
    CHECK_INT_EQ(r.n, 1);
    CHECK(r.keys[0].created_ms == 0);
    auth_keyring_finish(&r);
  }
  CHECK(auth_key_name_valid("ok-name_1.2", 64));
  CHECK(!auth_key_name_valid("", 64));
  CHECK(!auth_key_name_valid("abc", 2));
  CHECK(!auth_key_name_valid("a/b", 64));
}

int main(void) {
  RUN(test_generate);
  RUN(test_match);
  RUN(test_round_trip);
  RUN(test_malformed);
  return 0;
}
