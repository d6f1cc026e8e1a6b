/* The PostgreSQL backend (store_backend.h): not written yet. */
#include <errno.h>

#include "common/store_backend.h"

static int pg_open(const char *target, const char *schema_path, store_t **out, char *err,
                   size_t errlen) {
  (void)target;
  (void)schema_path;
  *out = NULL;
  store_set_err(err, errlen, "PostgreSQL is not supported yet");
  return -ENOSYS;
}

static int pg_open_readonly(const char *target, store_t **out, char *err, size_t errlen) {
  return pg_open(target, NULL, out, err, errlen);
}

const store_ops store_pg_ops = {
    .name = "postgres", .open = pg_open, .open_readonly = pg_open_readonly};
