/*
 * What a file looked like when it was read (device, inode, size, mtime):
 * files reloaded when they change (the API keys, a JWKS file) compare a
 * fresh stat(2) with the stamp of the copy they hold.
 */
#ifndef MCPSUB_FILE_STAMP_H
#define MCPSUB_FILE_STAMP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct file_stamp {
  uint64_t dev, ino, size;
  int64_t mtime_ns;
  bool valid; /* false: nothing read yet, or the file was gone */
} file_stamp;

/* Stamps path as it is now; false (and an invalid stamp) when it cannot be stat'ed. */
bool file_stamp_take(const char *path, file_stamp *out);
/* Do two stamps describe the same file content? Never for an invalid one. */
bool file_stamp_same(const file_stamp *a, const file_stamp *b);

#endif
