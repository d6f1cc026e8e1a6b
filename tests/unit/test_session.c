/*
 * The session's notes of notices no stream has taken yet (session.h,
 * session_notices_*): the list_changed bit set by a kept send without a
 * stream, the ended notices one per URI and bounded (the oldest going),
 * handed over whole and cleared. No stream is opened: these are the
 * registry's and the ring's pure parts.
 */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "worker/session.h"

static int64_t position_zero(const session_t *s, void *data) {
  return 0;
}

static void test_ended_bounded_one_per_uri(void) {
  session_registry_t reg;
  session_registry_init(&reg, 1000, position_zero, NULL);
  session_t *s = session_registry_add(&reg, "0123456789abcdef0123456789abcdef", "2025-06-18", 1);
  CHECK(s->ended == NULL); /* nothing allocated for a session that never had one */
  session_notices_add_ended(s, "u1", "r1", 3);
  session_notices_add_ended(s, "u2", "r2", 3);
  session_notices_add_ended(s, "u1", "r1b", 3); /* the newest end of a URI replaces the older */
  CHECK_INT_EQ(s->ended->n, 2);
  session_notices_add_ended(s, "u3", "r3", 3);
  session_notices_add_ended(s, "u4", "r4", 3); /* full: u1, the oldest, goes */
  bool list_changed = true;
  session_ended *e = session_notices_take(s, &list_changed);
  CHECK(!list_changed);
  CHECK(s->ended == NULL);
  CHECK_INT_EQ(e->n, 3);
  CHECK_STR_EQ(e->items[0].uri, "u2");
  CHECK_STR_EQ(e->items[1].uri, "u3");
  CHECK_STR_EQ(e->items[2].uri, "u4");
  CHECK_STR_EQ(e->items[2].reason, "r4");
  session_ended_destroy(e);
  session_ended_destroy(NULL);
  session_notices_add_ended(s, "u5", "r5", 0); /* no room at all: nothing kept */
  CHECK(s->ended == NULL);
  session_notices_add_ended(s, "u6", "r6", 2);
  s->list_pending = true;
  session_notices_clear(s);
  CHECK(s->ended == NULL && !s->list_pending);
  session_notices_add_ended(s, "u7", "r7", 2); /* freed with the session */
  session_registry_remove(&reg, s);
  session_registry_finish(&reg);
  printf("ok ended notices: one per URI, bounded, taken whole\n");
}

static void test_kept_send_is_undelivered(void) {
  session_registry_t reg;
  session_registry_init(&reg, 1000, position_zero, NULL);
  session_t *s = session_registry_add(&reg, "fedcba9876543210fedcba9876543210", "2025-06-18", 1);
  CHECK(session_send(s, "{}", 2, false) != 0); /* not kept: dropped without a stream */
  CHECK_INT_EQ(s->undelivered, 0);
  CHECK(session_send(s, "{}", 2, true) == 0);
  CHECK_INT_EQ(s->undelivered, 1); /* what the callers' notes go by */
  for (int i = 0; i < SESSION_RING_SIZE; i++) CHECK(session_send(s, "{}", 2, true) == 0);
  CHECK(s->lost); /* the first left the ring unsent */
  CHECK_INT_EQ(s->undelivered, SESSION_RING_SIZE);
  session_registry_finish(&reg);
  printf("ok a kept send without a stream waits undelivered\n");
}

int main(void) {
  test_ended_bounded_one_per_uri();
  test_kept_send_is_undelivered();
  return 0;
}
