/*
 * Session ids (the Mcp-Session-Id header): two hex digits naming the
 * worker slot that owns the session, then 128 bits from the kernel CSPRNG
 * as 32 lowercase hex digits. The random part is what makes an id
 * unguessable, so it must never come from a weaker source: if neither
 * getrandom(2) nor /dev/urandom delivers, generation fails rather than
 * degrades. Validation is strict on shape (34 lowercase hex) so that a
 * peer's header can be used as a lookup key and logged safely.
 */
#include "common/session_id.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/random.h>
#include <unistd.h>

#define SESSION_ID_RANDOM_BYTES 16

/* Fills buf from /dev/urandom; used only where getrandom(2) is missing. */
static int session_id_urandom(unsigned char *buf, size_t len) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  int rc = 0;
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      rc = n < 0 ? -errno : -EIO;
      break;
    }
    got += (size_t)n;
  }
  close(fd);
  return rc;
}

/* Fills buf with len bytes from the kernel CSPRNG; 0 or -errno. */
int session_id_random(unsigned char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(buf + got, len - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOSYS) return session_id_urandom(buf + got, len - got);
      return -errno;
    }
    got += (size_t)n;
  }
  return 0;
}

/*
 * Writes "<slot & 0xff as 2 hex><32 hex random>" and a NUL into out.
 * Returns 0, or -errno when no randomness was available (out is then an
 * empty string).
 */
int session_id_generate(char out[SESSION_ID_LEN + 1], unsigned slot) {
  static const char hex[] = "0123456789abcdef";
  unsigned char rnd[SESSION_ID_RANDOM_BYTES];
  out[0] = '\0';
  int rc = session_id_random(rnd, sizeof(rnd));
  if (rc < 0) return rc;
  out[0] = hex[(slot >> 4) & 0xf];
  out[1] = hex[slot & 0xf];
  for (size_t i = 0; i < sizeof(rnd); i++) {
    out[2 + 2 * i] = hex[rnd[i] >> 4];
    out[3 + 2 * i] = hex[rnd[i] & 0xf];
  }
  out[SESSION_ID_LEN] = '\0';
  return 0;
}

/* True when s[0..len) is exactly SESSION_ID_LEN lowercase hex digits. */
bool session_id_valid(const char *s, size_t len) {
  if (s == NULL || len != SESSION_ID_LEN) return false;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

/* The slot in the first two hex digits; s must satisfy session_id_valid. */
unsigned session_id_slot(const char *s) {
  unsigned v = 0;
  for (int i = 0; i < 2; i++) {
    char c = s[i];
    v = v << 4 | (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return v;
}
