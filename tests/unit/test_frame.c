/*
 * Unit tests of frame_t, the shared SSE event: the exact wire bytes of a
 * frame ("id: <seq>-<tag><n>\ndata: <json>\n\n"), its recorded length,
 * audit position and id, comparing an id with frame_id_is, parsing ids
 * back with frame_id_parse (every id frame_create mints parses to its
 * position: seq, tag and number; ids this server did not mint are
 * rejected), copying an event's bytes (frame_ev_copy), and reference
 * counting (ASan reports a frame freed too early or never).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "worker/frame.h"

static void test_create(void) {
  static const char json[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\"}";
  frame_t *f = frame_create(42, 't', 7, json, strlen(json));
  CHECK(f != NULL);
  CHECK_INT_EQ(f->refs, 1);
  CHECK_INT_EQ(f->seq, 42);
  CHECK_INT_EQ(f->id_len, strlen("42-t7"));
  char want[256];
  snprintf(want, sizeof(want), "id: 42-t7\ndata: %s\n\n", json);
  CHECK_INT_EQ(f->len, strlen(want));
  CHECK(memcmp(f->data, want, f->len) == 0);
  CHECK_INT_EQ(f->data[f->len], '\0');
  frame_unref(f);
}

/* The priming event: an id and an empty data line. */
static void test_empty_data(void) {
  frame_t *f = frame_create(0, 's', 1, "", 0);
  CHECK_STR_EQ(f->data, "id: 0-s1\ndata: \n\n");
  CHECK_INT_EQ(f->len, strlen("id: 0-s1\ndata: \n\n"));
  frame_unref(f);
}

static void test_large_numbers(void) {
  frame_t *f = frame_create(INT64_MAX, 'r', UINT64_MAX, "{}", 2);
  CHECK_STR_EQ(f->data, "id: 9223372036854775807-r18446744073709551615\ndata: {}\n\n");
  CHECK_INT_EQ(f->id_len, strlen("9223372036854775807-r18446744073709551615"));
  const char *id = "9223372036854775807-r18446744073709551615";
  frame_pos pos;
  CHECK_INT_EQ(frame_id_parse(id, strlen(id), &pos), 0);
  CHECK(pos.seq == INT64_MAX && pos.tag == 'r' && pos.n == UINT64_MAX);
  pos = frame_position(frame_whole(f));
  CHECK(pos.seq == INT64_MAX && pos.tag == 'r' && pos.n == UINT64_MAX);
  frame_unref(f);
}

/* A tag formatted once makes the same frames as formatting it each time, for any seq. */
static void test_tagged(void) {
  frame_tag tag;
  frame_tag_init(&tag, 't', UINT64_MAX);
  CHECK_INT_EQ(tag.len, strlen("-t18446744073709551615"));
  const frame_part parts[] = {{"{\"a\":", 5}, {"1}", 2}};
  const int64_t seqs[] = {0, 7, -3, INT64_MAX};
  for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
    frame_t *a = frame_create_tagged(seqs[i], &tag, parts, 2);
    frame_t *b = frame_create(seqs[i], 't', UINT64_MAX, "{\"a\":1}", 7);
    CHECK_INT_EQ(a->len, b->len);
    CHECK_INT_EQ(a->id_len, b->id_len);
    CHECK_STR_EQ(a->data, b->data);
    frame_pos pos = frame_position(frame_whole(a));
    CHECK(seqs[i] < 0 || (pos.seq == seqs[i] && pos.tag == 't' && pos.n == UINT64_MAX));
    frame_unref(a);
    frame_unref(b);
  }
  frame_t *neg = frame_create_tagged(-3, &tag, parts, 2);
  CHECK_STR_EQ(neg->data, "id: -3-t18446744073709551615\ndata: {\"a\":1}\n\n");
  frame_unref(neg);
  frame_tag_init(&tag, 'r', 0);
  frame_t *f = frame_create_tagged(12, &tag, parts, 0);
  CHECK_STR_EQ(f->data, "id: 12-r0\ndata: \n\n");
  frame_unref(f);
}

/* The bytes of an event's pieces, in order, NUL-terminated; returns their length. */
static size_t frame_text(frame_ev e, char *out, size_t cap) {
  frame_part p[FRAME_MAX_PIECES];
  size_t total, n = frame_pieces(e, p, &total), len = 0;
  for (size_t i = 0; i < n; i++) {
    CHECK(len + p[i].len < cap);
    memcpy(out + len, p[i].data, p[i].len);
    len += p[i].len;
  }
  CHECK_INT_EQ(total, len);
  out[len] = '\0';
  return len;
}

/*
 * A change's head and a topic's tail are the event the topic's whole frame
 * would be, byte for byte, with the same id, position and id test; the
 * halves live as long as a reference to the pair holds them.
 */
static void test_pair(void) {
  const frame_part head_parts[] = {{"{\"uri\":", 7}, {"\"r\"", 3}, {",\"s\":", 5}};
  const frame_part tail_parts[] = {{"\"q\"", 3}, {"}", 1}};
  const frame_part whole_parts[] = {head_parts[0], head_parts[1], head_parts[2], tail_parts[0],
                                    tail_parts[1]};
  const uint64_t orders[] = {0, 42, UINT64_MAX};
  const int64_t seqs[] = {0, 9, -3, INT64_MAX};
  for (size_t i = 0; i < sizeof(orders) / sizeof(orders[0]); i++) {
    frame_tag tag;
    frame_tag_init(&tag, 't', orders[i]);
    frame_t *tail = frame_create_tail(&tag, tail_parts, 2);
    for (size_t j = 0; j < sizeof(seqs) / sizeof(seqs[0]); j++) {
      frame_t *head = frame_create_head(seqs[j], head_parts, 3);
      frame_ev pair = frame_ev_ref((frame_ev){head, tail});
      frame_unref(head); /* the pair's reference keeps it */
      frame_t *whole = frame_create_tagged(seqs[j], &tag, whole_parts, 5);
      char text[256];
      CHECK_INT_EQ(frame_text(pair, text, sizeof text), whole->len);
      CHECK_STR_EQ(text, whole->data);
      CHECK_INT_EQ(frame_text(frame_whole(whole), text, sizeof text), whole->len);
      CHECK_STR_EQ(text, whole->data);
      frame_pos a = frame_position(pair), b = frame_position(frame_whole(whole));
      CHECK(a.seq == b.seq && a.tag == b.tag && a.n == b.n);
      CHECK(frame_id_is(pair, whole->data + 4, whole->id_len));
      CHECK(!frame_id_is(pair, whole->data + 4, (size_t)whole->id_len - 1));
      char other[64];
      memcpy(other, whole->data + 4, whole->id_len);
      other[whole->id_len - 1] ^= 1; /* the tag's last digit */
      CHECK(!frame_id_is(pair, other, whole->id_len));
      other[whole->id_len - 1] ^= 1;
      other[0] = other[0] == '1' ? '2' : '1'; /* the seq's first character */
      CHECK(!frame_id_is(pair, other, whole->id_len));
      frame_unref(whole);
      frame_ev_unref(pair);
    }
    frame_unref(tail);
  }
  /* The example of frame.h, exactly. */
  frame_tag tag;
  frame_tag_init(&tag, 't', 5);
  frame_t *tail = frame_create_tail(&tag, tail_parts, 2);
  CHECK_STR_EQ(tail->data, "-t5\"q\"}\n\n");
  frame_t *head = frame_create_head(77, head_parts, 3);
  CHECK_STR_EQ(head->data, "id: 77\ndata: {\"uri\":\"r\",\"s\":");
  char text[256];
  frame_text((frame_ev){head, tail}, text, sizeof text);
  CHECK_STR_EQ(text, "id: 77-t5\ndata: {\"uri\":\"r\",\"s\":\"q\"}\n\n");
  frame_unref(tail);
  frame_unref(head);
}

/*
 * frame_ev_copy writes exactly the event's bytes, frame_ev_len of them
 * and nothing after, whatever its pieces' lengths: below 8, 8 to 16, 17
 * to 32 (copied by overlapping moves) and longer (by memcpy).
 */
static void test_copy(void) {
  static const uint64_t orders[] = {0, 42, 12345678, UINT64_MAX};
  static const int64_t seqs[] = {0, 9, 123456789012, INT64_MAX};
  char record[80], topic[80];
  for (size_t i = 0; i < sizeof(record); i++) {
    record[i] = (char)('a' + i % 26);
    topic[i] = (char)('A' + i % 26);
  }
  for (size_t r = 0; r < 72; r += 1) {
    for (size_t u = 0; u < 72; u += 1 + r % 3) {
      const frame_part head_parts[] = {{record, r}};
      const frame_part tail_parts[] = {{topic, u}, {"}", 1}};
      const frame_part whole_parts[] = {{record, r}, {topic, u}, {"}", 1}};
      frame_tag tag;
      frame_tag_init(&tag, 't', orders[(r + u) % 4]);
      int64_t seq = seqs[(r * 7 + u) % 4];
      frame_t *head = frame_create_head(seq, head_parts, 1);
      frame_t *tail = frame_create_tail(&tag, tail_parts, 2);
      frame_t *whole = frame_create_tagged(seq, &tag, whole_parts, 3);
      frame_ev events[] = {{head, tail}, frame_whole(whole)};
      for (size_t k = 0; k < 2; k++) {
        char want[512], got[512];
        size_t len = frame_text(events[k], want, sizeof want);
        CHECK_INT_EQ(frame_ev_len(events[k]), len);
        memset(got, '#', sizeof got);
        char *end = frame_ev_copy(events[k], got);
        CHECK(end == got + len);
        CHECK(memcmp(got, want, len) == 0);
        CHECK(got[len] == '#');
      }
      frame_unref(head);
      frame_unref(tail);
      frame_unref(whole);
    }
  }
}

static void test_id_is(void) {
  frame_t *f = frame_create(123, 't', 4, "{}", 2);
  CHECK(frame_id_is(frame_whole(f), "123-t4", 6));
  CHECK(frame_id_is(frame_whole(f), "123-t4xyz", 6)); /* only len bytes are compared */
  CHECK(!frame_id_is(frame_whole(f), "123-t4", 5));
  CHECK(!frame_id_is(frame_whole(f), "123-t45", 7));
  CHECK(!frame_id_is(frame_whole(f), "123-s4", 6));
  CHECK(!frame_id_is(frame_whole(f), "124-t4", 6));
  CHECK(!frame_id_is(frame_whole(f), "", 0));
  frame_unref(f);
}

static void expect_parse(const char *id, int64_t seq, char tag, uint64_t n) {
  frame_pos pos = {-12345, '?', 0};
  int rc = frame_id_parse(id, strlen(id), &pos);
  if (rc != 0 || pos.seq != seq || pos.tag != tag || pos.n != n) {
    fprintf(stderr, "frame_id_parse(\"%s\") = %d, %lld-%c%llu; wanted 0, %lld-%c%llu\n", id, rc,
            (long long)pos.seq, pos.tag, (unsigned long long)pos.n, (long long)seq, tag,
            (unsigned long long)n);
    CHECK(rc == 0 && pos.seq == seq && pos.tag == tag && pos.n == n);
  }
}

static void expect_invalid(const char *id) {
  frame_pos pos = {-12345, '?', 0};
  int rc = frame_id_parse(id, strlen(id), &pos);
  if (rc != -EINVAL || pos.seq != -12345) {
    fprintf(stderr, "frame_id_parse(\"%s\") = %d, seq %lld; wanted -EINVAL and pos untouched\n", id,
            rc, (long long)pos.seq);
    CHECK(rc == -EINVAL);
    CHECK(pos.seq == -12345);
  }
}

static void test_parse_valid(void) {
  expect_parse("0-s1", 0, 's', 1);
  expect_parse("12-t3", 12, 't', 3);
  expect_parse("12-r0", 12, 'r', 0);
  expect_parse("7-t4294967295", 7, 't', 4294967295u);
  expect_parse("1000000-s18446744073709551615", 1000000, 's', UINT64_MAX);
  /* Every id frame_create mints parses back to its position. */
  static const char tags[] = {'t', 's', 'r'};
  for (int64_t seq = 0; seq < 2000; seq += 97) {
    for (size_t i = 0; i < sizeof(tags); i++) {
      frame_t *f = frame_create(seq, tags[i], (uint64_t)seq * 3 + i, "{}", 2);
      char id[64];
      CHECK(f->id_len < sizeof(id));
      memcpy(id, f->data + 4, f->id_len);
      id[f->id_len] = '\0';
      expect_parse(id, seq, tags[i], (uint64_t)seq * 3 + i);
      frame_pos pos = frame_position(frame_whole(f));
      CHECK(pos.seq == seq && pos.tag == tags[i] && pos.n == (uint64_t)seq * 3 + i);
      CHECK(frame_id_is(frame_whole(f), id, strlen(id)));
      frame_unref(f);
    }
  }
}

static void test_parse_invalid(void) {
  expect_invalid("");
  expect_invalid("abc");
  expect_invalid("12");
  expect_invalid("12-");
  expect_invalid("12-t");
  expect_invalid("12-x1");
  expect_invalid("12-T1");
  expect_invalid("12-t1x");
  expect_invalid("12-t1 ");
  expect_invalid("12-t-1");
  expect_invalid("12-t+1");
  expect_invalid("12t1");
  expect_invalid("12_t1");
  expect_invalid("12 -t1");
  expect_invalid(" 12-t1");
  expect_invalid("-12-t1");
  expect_invalid("+12-t1");
  expect_invalid("-t1");
  expect_invalid("0x10-t1");
  expect_invalid("99999999999999999999-t1"); /* past int64 */
  expect_invalid("12-t1\n");
  expect_invalid("1-t1-t1");
  expect_invalid("012-t1"); /* never minted with a leading zero */
  expect_invalid("12-t01");
  expect_invalid("12-t18446744073709551616"); /* past uint64 */
  /* Only len bytes count: a valid id followed by more is judged on its bytes alone. */
  frame_pos pos;
  CHECK_INT_EQ(frame_id_parse("12-t3\0junk", 5, &pos), 0);
  CHECK_INT_EQ(frame_id_parse("12-t3junk", 9, &pos), -EINVAL);
}

static void test_refcount(void) {
  frame_t *f = frame_create(5, 't', 1, "{}", 2);
  CHECK(frame_ref(f) == f);
  CHECK(frame_ref(f) == f);
  CHECK_INT_EQ(f->refs, 3);
  frame_unref(f);
  CHECK_INT_EQ(f->refs, 2);
  frame_unref(f);
  CHECK_INT_EQ(f->refs, 1);
  CHECK_STR_EQ(f->data, "id: 5-t1\ndata: {}\n\n"); /* still intact with one reference */
  frame_unref(f);                                  /* freed here; ASan would see a leak otherwise */
  frame_unref(NULL);                               /* no-op */
}

int main(void) {
  RUN(test_create);
  RUN(test_empty_data);
  RUN(test_large_numbers);
  RUN(test_tagged);
  RUN(test_pair);
  RUN(test_copy);
  RUN(test_id_is);
  RUN(test_parse_valid);
  RUN(test_parse_invalid);
  RUN(test_refcount);
  return 0;
}
