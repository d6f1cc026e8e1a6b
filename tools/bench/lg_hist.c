/*
 * Latency histogram with fixed, bounded memory (about 880 KB whatever the
 * number of samples): 1 us buckets below 10 ms, where the goals are, and
 * 100 us buckets up to 10 s; anything slower lands in one overflow bucket
 * (and in max). Quantiles are read at bucket resolution, upper edge.
 */
#include <stdlib.h>
#include <string.h>

#include "lg.h"

#define HIST_FINE_N   10000u /* 1 us each: 0 .. 10 ms */
#define HIST_COARSE_N 99900u /* 100 us each: 10 ms .. 10 s */
#define HIST_N        (HIST_FINE_N + HIST_COARSE_N + 1u)

void lg_hist_init(lg_hist *h) {
  memset(h, 0, sizeof(*h));
  h->buckets = lg_calloc(HIST_N, sizeof(uint64_t));
}

void lg_hist_finish(lg_hist *h) {
  free(h->buckets);
  memset(h, 0, sizeof(*h));
}

void lg_hist_add(lg_hist *h, uint64_t ns) {
  uint64_t us = ns / 1000;
  size_t i;
  if (us < HIST_FINE_N)
    i = (size_t)us;
  else if (us < HIST_FINE_N + (uint64_t)HIST_COARSE_N * 100)
    i = HIST_FINE_N + (size_t)((us - HIST_FINE_N) / 100);
  else
    i = HIST_N - 1;
  h->buckets[i]++;
  h->count++;
  h->sum_ns += ns;
  if (ns > h->max_ns) h->max_ns = ns;
}

/* Upper edge of bucket i, in ns. */
static uint64_t bucket_top_ns(size_t i) {
  if (i < HIST_FINE_N) return ((uint64_t)i + 1) * 1000;
  return ((uint64_t)HIST_FINE_N + ((uint64_t)(i - HIST_FINE_N) + 1) * 100) * 1000;
}

uint64_t lg_hist_quantile(const lg_hist *h, double q) {
  if (h->count == 0) return 0;
  double exact = q * (double)h->count; /* nearest-rank: the ceiling */
  uint64_t rank = (uint64_t)exact;
  if ((double)rank < exact || rank == 0) rank++;
  if (rank > h->count) rank = h->count;
  uint64_t seen = 0;
  for (size_t i = 0; i < HIST_N; i++) {
    seen += h->buckets[i];
    if (seen >= rank) {
      uint64_t top = i == HIST_N - 1 ? h->max_ns : bucket_top_ns(i);
      return top < h->max_ns ? top : h->max_ns;
    }
  }
  return h->max_ns;
}
