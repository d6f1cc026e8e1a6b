/*
 * libFuzzer target: the IPC assembler (common/ipc.h), which rebuilds
 * master/worker messages from packets. The input is a sequence of packets:
 * a header and then header.len payload bytes (as much as is left). Every
 * push gives 1, 0 or -EBADMSG, and a complete message's payload is bounded.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ipc_assembler a;
  ipc_assembler_init(&a);
  size_t pos = 0;
  static char payload[IPC_CHUNK + 1];
  while (size - pos >= sizeof(ipc_header)) {
    ipc_header h;
    memcpy(&h, data + pos, sizeof h);
    pos += sizeof h;
    size_t n = h.len <= IPC_CHUNK ? h.len : IPC_CHUNK;
    if (n > size - pos) n = size - pos;
    h.len = (uint32_t)n;
    memcpy(payload, data + pos, n);
    payload[n] = '\0';
    pos += n;
    ipc_msg msg;
    int rc = ipc_assembler_push(&a, &h, payload, -1, &msg);
    if (rc != 1 && rc != 0 && rc != -EBADMSG) abort();
    if (rc == 1) { /* a whole message: split as CANCEL and ANSWER payloads are */
      const char *f[3];
      char *copy = ipc_fields(msg.payload, msg.len, f, 3);
      if (copy != NULL && (f[0] < copy || f[2] > copy + msg.len)) abort();
      free(copy);
    }
  }
  ipc_assembler_finish(&a);
  return 0;
}
