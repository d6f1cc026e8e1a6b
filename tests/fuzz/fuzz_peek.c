/*
 * libFuzzer target: the master's peek at a connection's first bytes
 * (master/peek.h), with the default 16 KiB header bound. Any input must
 * give -EAGAIN, -E2BIG or a parsed head whose fields are bounded strings.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/peek.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  peek_request pk;
  int rc = peek_parse((const char *)data, size, 16384, &pk);
  if (rc == 0) {
    if (pk.head_len == 0 || pk.head_len > size) abort();
    if (strlen(pk.method) >= sizeof(pk.method) || strlen(pk.path) >= sizeof(pk.path)) abort();
    if (strlen(pk.host) >= PEEK_MAX_FIELD || strlen(pk.origin) >= PEEK_MAX_FIELD) abort();
  } else if (rc != -EAGAIN && rc != -E2BIG) {
    abort();
  }
  return 0;
}
