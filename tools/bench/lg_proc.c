/*
 * What the load generator reads from /proc: the CPU seconds (utime +
 * stime, and utime alone) and resident memory of the server's whole process tree (the
 * server and every worker it forked), the kernel's socket counters, and
 * the fd limit. Reads are small and bounded; a process that vanished
 * between the scan and the read is simply skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "lg.h"

/* At most this many processes are considered in one scan of /proc. */
#define PROC_MAX_SCAN 65536

uint64_t lg_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *lg_alloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (p == NULL) abort();
  return p;
}

void *lg_calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (p == NULL) abort();
  return p;
}

void *lg_realloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (q == NULL) abort();
  return q;
}

static int read_file(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "re");
  if (f == NULL) return -errno;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = '\0';
  return (int)n;
}

/* ppid, utime + stime and utime alone in ticks, from /proc/<pid>/stat. */
static int read_stat(pid_t pid, pid_t *ppid, unsigned long long *ticks,
                     unsigned long long *user_ticks) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  if (read_file(path, buf, sizeof(buf)) <= 0) return -ENOENT;
  const char *p = strrchr(buf, ')'); /* comm may hold spaces and parens */
  if (p == NULL) return -EINVAL;
  char state;
  int pp;
  unsigned long long ut, st;
  /* fields after comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
   * stime */
  if (sscanf(p + 2, "%c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &pp, &ut, &st) !=
      4)
    return -EINVAL;
  *ppid = pp;
  *ticks = ut + st;
  *user_ticks = ut;
  return 0;
}

static uint64_t read_rss(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
  if (read_file(path, buf, sizeof(buf)) <= 0) return 0;
  unsigned long long size, resident;
  if (sscanf(buf, "%llu %llu", &size, &resident) != 2) return 0;
  return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

typedef struct proc_entry {
  pid_t pid, ppid;
} proc_entry;

int lg_proc_sample_tree(pid_t root, lg_proc_sample *out) {
  memset(out, 0, sizeof(*out));
  pid_t ppid;
  unsigned long long ticks, user_ticks;
  if (read_stat(root, &ppid, &ticks, &user_ticks) != 0) return -ESRCH;
  double hz = (double)sysconf(_SC_CLK_TCK);
  /* Every process's parent, then the tree below root, breadth first. */
  DIR *d = opendir("/proc");
  if (d == NULL) return -errno;
  size_t n = 0, cap = 256;
  proc_entry *all = lg_alloc(cap * sizeof(*all));
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < PROC_MAX_SCAN) {
    char *end;
    long v = strtol(e->d_name, &end, 10);
    if (*end != '\0' || v <= 0) continue;
    pid_t pp;
    unsigned long long t, u;
    if (read_stat((pid_t)v, &pp, &t, &u) != 0) continue;
    if (n == cap) {
      cap *= 2;
      all = lg_realloc(all, cap * sizeof(*all));
    }
    all[n++] = (proc_entry){(pid_t)v, pp};
  }
  closedir(d);
  pid_t *tree = lg_alloc((n + 1) * sizeof(*tree));
  size_t nt = 0;
  tree[nt++] = root;
  for (size_t head = 0; head < nt; head++) {
    for (size_t i = 0; i < n; i++)
      if (all[i].ppid == tree[head] && nt <= n) tree[nt++] = all[i].pid;
  }
  for (size_t i = 0; i < nt; i++) {
    if (read_stat(tree[i], &ppid, &ticks, &user_ticks) != 0) continue;
    out->cpu_s += (double)ticks / hz;
    out->user_s += (double)user_ticks / hz;
    out->rss_bytes += read_rss(tree[i]);
    out->nprocs++;
  }
  free(tree);
  free(all);
  return 0;
}

double lg_proc_self_cpu(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int lg_sockstat_read(lg_sockstat *out) {
  char buf[4096];
  memset(out, 0, sizeof(*out));
  if (read_file("/proc/net/sockstat", buf, sizeof(buf)) <= 0) return -ENOENT;
  const char *s = strstr(buf, "sockets: used ");
  const char *t = strstr(buf, "TCP: inuse ");
  if (s == NULL || t == NULL) return -EINVAL;
  out->sockets_used = strtol(s + 14, NULL, 10);
  out->tcp_inuse = strtol(t + 11, NULL, 10);
  const char *m = strstr(t, " mem ");
  if (m != NULL) out->tcp_mem_pages = strtol(m + 5, NULL, 10);
  return 0;
}

int lg_slab_socket_bytes(uint64_t *out) {
  static const char *const caches[] = {"TCP", "request_sock_TCP", "tw_sock_TCP",
                                       "sock_inode_cache"};
  FILE *f = fopen("/proc/slabinfo", "re");
  if (f == NULL) return -errno;
  char line[512];
  uint64_t total = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    char name[64];
    unsigned long active, num, objsize;
    if (sscanf(line, "%63s %lu %lu %lu", name, &active, &num, &objsize) != 4) continue;
    for (size_t i = 0; i < LG_ARRAY_LEN(caches); i++)
      if (strcmp(name, caches[i]) == 0) total += (uint64_t)active * objsize;
  }
  fclose(f);
  *out = total;
  return 0;
}

void lg_raise_nofile(uint64_t want, uint64_t *got) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    *got = 1024;
    return;
  }
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
    struct rlimit up = {want, want};
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) rl = up; /* privileged: raise the hard limit too */
  }
  rlim_t soft = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? (rlim_t)want : rl.rlim_max;
  if (soft > rl.rlim_cur) {
    rl.rlim_cur = soft;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      /* keep what we have */
    }
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) *got = (uint64_t)rl.rlim_cur;
}
