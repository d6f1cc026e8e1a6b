#include "common/file_stamp.h"

#include <string.h>
#include <sys/stat.h>

bool file_stamp_take(const char *path, file_stamp *out) {
  struct stat st;
  memset(out, 0, sizeof(*out));
  if (stat(path, &st) != 0) return false;
  out->dev = (uint64_t)st.st_dev;
  out->ino = (uint64_t)st.st_ino;
  out->size = (uint64_t)st.st_size;
  out->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  out->valid = true;
  return true;
}

bool file_stamp_same(const file_stamp *a, const file_stamp *b) {
  return a->valid && b->valid && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         a->mtime_ns == b->mtime_ns;
}
