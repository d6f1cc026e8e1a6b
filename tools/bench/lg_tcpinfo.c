/*
 * TCP_INFO's data-segment counter, kept apart because it needs the
 * kernel's <linux/tcp.h>, whose struct tcp_info is newer than glibc's and
 * clashes with <netinet/tcp.h> (which libuv's header pulls in): this file
 * includes neither uv.h nor lg.h.
 */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

uint64_t lg_tcp_data_segs_in(int fd); /* declared in lg.h too */

uint64_t lg_tcp_data_segs_in(int fd) {
  struct tcp_info info;
  socklen_t len = sizeof(info);
  memset(&info, 0, sizeof(info));
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return info.tcpi_data_segs_in;
}
