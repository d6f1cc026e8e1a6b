/*
 * The message of a failure, for a caller's error buffer:
 *
 *   return errmsg(err, errlen, -EINVAL, "%s: too large", path);
 *
 * formats into err (when err is not NULL and errlen > 0) and returns rc.
 */
#ifndef MCPSUB_ERRMSG_H
#define MCPSUB_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

__attribute__((format(printf, 4, 5))) static inline int errmsg(char *err, size_t errlen, int rc,
                                                               const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return rc;
}

#endif
