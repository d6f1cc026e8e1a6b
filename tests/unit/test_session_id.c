/*
 * Unit tests of session ids: shape (34 lowercase hex), the worker slot
 * round-trip (including slots above 0xff, which wrap), uniqueness across
 * many ids, that the random part actually varies, and rejection of every
 * malformed shape a peer might send.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/session_id.h"

#define N_IDS 1000

static int cmp_ids(const void *a, const void *b) {
  return strcmp(a, b);
}

static void test_shape_and_slot(void) {
  static const unsigned slots[] = {0, 1, 9, 10, 15, 16, 0x7f, 0xab, 0xff};
  for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++) {
    char id[SESSION_ID_LEN + 1];
    memset(id, 'X', sizeof(id));
    CHECK_INT_EQ(session_id_generate(id, slots[i]), 0);
    CHECK_INT_EQ(strlen(id), SESSION_ID_LEN);
    CHECK(session_id_valid(id, strlen(id)));
    CHECK_INT_EQ(session_id_slot(id), slots[i]);
  }
  char id[SESSION_ID_LEN + 1];
  CHECK_INT_EQ(session_id_generate(id, 0x1ab), 0);
  CHECK_INT_EQ(session_id_slot(id), 0xab);
  CHECK(strncmp(id, "ab", 2) == 0);
  CHECK_INT_EQ(session_id_generate(id, 3), 0);
  CHECK(strncmp(id, "03", 2) == 0);
}

static void test_unique(void) {
  char(*ids)[SESSION_ID_LEN + 1] = malloc(N_IDS * sizeof(*ids));
  for (int i = 0; i < N_IDS; i++) {
    CHECK_INT_EQ(session_id_generate(ids[i], 5), 0);
    CHECK(session_id_valid(ids[i], SESSION_ID_LEN));
  }
  qsort(ids, N_IDS, sizeof(*ids), cmp_ids);
  for (int i = 1; i < N_IDS; i++) CHECK(strcmp(ids[i - 1], ids[i]) != 0);

  /* every hex position of the random part takes more than one value */
  for (int pos = 2; pos < SESSION_ID_LEN; pos++) {
    int first = ids[0][pos], varies = 0;
    for (int i = 1; i < N_IDS && !varies; i++) varies = ids[i][pos] != first;
    CHECK(varies);
  }
  free(ids);
}

static void test_invalid(void) {
  const char *good = "00"
                     "0123456789abcdef0123456789abcdef";
  CHECK(session_id_valid(good, strlen(good)));
  CHECK(!session_id_valid(good, strlen(good) - 1)); /* too short */
  CHECK(!session_id_valid("", 0));
  CHECK(!session_id_valid(NULL, 0));
  CHECK(!session_id_valid(NULL, SESSION_ID_LEN));
  char bad[SESSION_ID_LEN + 2];
  memcpy(bad, good, SESSION_ID_LEN + 1);
  strcat(bad, "0");
  CHECK(!session_id_valid(bad, strlen(bad))); /* too long */
  const char subs[] = {'A', 'F', 'g', 'z', ' ', '-', '\0', '\n', (char)0xc3};
  for (size_t i = 0; i < sizeof(subs); i++) {
    for (int pos = 0; pos < SESSION_ID_LEN; pos += 11) {
      memcpy(bad, good, SESSION_ID_LEN + 1);
      bad[pos] = subs[i];
      CHECK(!session_id_valid(bad, SESSION_ID_LEN));
    }
  }
  const char *upper = "00"
                      "0123456789ABCDEF0123456789ABCDEF";
  CHECK(!session_id_valid(upper, strlen(upper)));
  const char *uuid = "0123abcd-0123-4567-89ab-0123456789";
  CHECK(!session_id_valid(uuid, strlen(uuid)));
}

int main(void) {
  RUN(test_shape_and_slot);
  RUN(test_unique);
  RUN(test_invalid);
  return 0;
}
