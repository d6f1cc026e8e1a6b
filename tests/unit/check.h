/*
 * A minimal check harness for the unit tests: CHECK() reports the failing
 * expression with file and line and exits 1, so meson counts the test as
 * failed. Test programs print one line per test function they run.
 */
#ifndef MCPSUB_CHECK_H
#define MCPSUB_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#define CHECK_STR_EQ(a, b)                                                                         \
  do {                                                                                             \
    const char *check_a_ = (a), *check_b_ = (b);                                                   \
    if (check_a_ == NULL || check_b_ == NULL || strcmp(check_a_, check_b_) != 0) {                 \
      fprintf(stderr, "%s:%d: expected \"%s\" == \"%s\" (%s vs %s)\n", __FILE__, __LINE__,         \
              check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)", #a, #b);             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#define CHECK_INT_EQ(a, b)                                                                         \
  do {                                                                                             \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                \
    if (check_a_ != check_b_) {                                                                    \
      fprintf(stderr, "%s:%d: expected %lld == %lld (%s vs %s)\n", __FILE__, __LINE__, check_a_,   \
              check_b_, #a, #b);                                                                   \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#define RUN(fn)                                                                                    \
  do {                                                                                             \
    fn();                                                                                          \
    printf("ok - %s\n", #fn);                                                                      \
  } while (0)

#endif
