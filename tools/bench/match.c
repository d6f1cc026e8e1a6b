/*
 * bench_match: what finding a change's subscriptions costs the worker,
 * apart from everything else a notification costs (docs/BENCHMARKS.md,
 * Selective filtered subscriptions). It fills one worker's subscription
 * index (sub_index.c) with N topics on one table, one per subscriber, each
 * selecting the rows of one customer, and times sub_index_match over
 * changes that each concern one customer (so one topic in N matches):
 *
 *   record   Orders/<customer>             one hash lookup per change
 *   eq       Orders?customer=<customer>    the equality index (before it:
 *                                          every topic tested per change)
 *   prefix   Orders?path=sw=/<customer>/   the prefix index (likewise)
 *   range    Orders?num=ge=<n>&code=le=<n> ordered filters on numeric
 *                                          columns (n the customer's
 *                                          number in both): the range index
 *                                          finds the topics at or below a
 *                                          change's num, half of them
 *   alert    Orders?num=gt=<N + n>         a threshold above every row:
 *                                          the range index finds none (no
 *                                          topic matches)
 *
 * and, for scale, one collection topic that every change matches. Prints
 * one JSON object per kind and N, a run of tools/bench/run's "match"
 * scenario: {"scenario": "match", "label" and "kind", "topics", "changes",
 * "ns_per_change", "matched_per_change"}. Single-threaded, no I/O: the
 * figures are CPU time of this process (CLOCK_PROCESS_CPUTIME_ID).
 *
 *   bench_match [--topics N,N,...] [--changes M]
 */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/uri.h"
#include "worker/sub_index.h"

#define BASE "http://127.0.0.1:9926"

static sub_owner owner = {SUB_OWNER_SESSION};

static double cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void count(sub_topic *t, void *data) {
  (void)t;
  (*(uint64_t *)data)++;
}

/* The subscribed URI of kind for customer c of n_topics (c < 0: the collection). */
static void kind_uri(char *uri, size_t len, const char *kind, long c, long n_topics) {
  if (strcmp(kind, "record") == 0)
    snprintf(uri, len, BASE "/Orders/c%ld", c);
  else if (strcmp(kind, "eq") == 0)
    snprintf(uri, len, BASE "/Orders?customer=c%ld", c);
  else if (strcmp(kind, "prefix") == 0)
    snprintf(uri, len, BASE "/Orders?path=sw=/c%ld/", c);
  else if (strcmp(kind, "range") == 0)
    snprintf(uri, len, BASE "/Orders?num=ge=%ld&code=le=%ld", c, c);
  else if (strcmp(kind, "alert") == 0)
    snprintf(uri, len, BASE "/Orders?num=gt=%ld", n_topics + c);
  else
    snprintf(uri, len, BASE "/Orders");
}

static int run(const char *kind, long topics, long changes) {
  sub_index idx;
  sub_index_init(&idx);
  long n = strcmp(kind, "collection") == 0 ? 1 : topics;
  char uri[256];
  for (long i = 0; i < n; i++) {
    kind_uri(uri, sizeof(uri), kind, i, n);
    uri_t u;
    if (uri_parse(BASE, uri, &u) != 0) {
      fprintf(stderr, "bench_match: cannot parse %s\n", uri);
      return 1;
    }
    for (size_t f = 0; f < u.n_filters; f++) /* as the store says of num and code */
      u.filters[f].numeric =
          strcmp(u.filters[f].column, "num") == 0 || strcmp(u.filters[f].column, "code") == 0;
    (void)sub_index_add(&idx, uri, uri, &u, &owner, 0);
    uri_finish(&u);
  }
  /* Changes of an order row, keyed by its customer (the record topics); the rows name it too. */
  enum { ROWS = 1024 };
  cJSON *rows[ROWS];
  char *keys[ROWS];
  for (int i = 0; i < ROWS; i++) {
    char key[32];
    long customer = (long)((uint64_t)i * 2654435761u % (uint64_t)topics);
    snprintf(key, sizeof(key), "c%ld", customer);
    keys[i] = strdup(key);
    rows[i] = cJSON_CreateObject();
    cJSON_AddStringToObject(rows[i], "customer", key);
    char path[64];
    snprintf(path, sizeof(path), "/%s/orders/%d", key, i);
    cJSON_AddStringToObject(rows[i], "path", path);
    cJSON_AddNumberToObject(rows[i], "total", i);
    cJSON_AddNumberToObject(rows[i], "num", (double)customer);
    cJSON_AddNumberToObject(rows[i], "code", (double)customer);
    cJSON_AddStringToObject(rows[i], "status", "open");
  }
  uint64_t matched = 0;
  double start = cpu_ns();
  for (long i = 0; i < changes; i++) {
    int r = (int)(i % ROWS);
    sub_change c = {i + 1, "Orders", keys[r], NULL, rows[r], rows[r]};
    sub_index_match(&idx, &c, count, &matched);
  }
  double ns = cpu_ns() - start;
  printf("{\"scenario\":\"match\",\"label\":\"%s\",\"ok\":true,\"kind\":\"%s\","
         "\"topics\":%ld,\"changes\":%ld,\"ns_per_change\":%.1f,\"matched_per_change\":%.2f}\n",
         kind, kind, n, changes, ns / (double)changes, (double)matched / (double)changes);
  for (int i = 0; i < ROWS; i++) {
    cJSON_Delete(rows[i]);
    free(keys[i]);
  }
  sub_index_finish(&idx);
  return 0;
}

int main(int argc, char **argv) {
  const char *sizes = "1000,10000";
  long changes = 20000;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--topics") == 0 && i + 1 < argc)
      sizes = argv[++i];
    else if (strcmp(argv[i], "--changes") == 0 && i + 1 < argc)
      changes = strtol(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: bench_match [--topics N,N,...] [--changes M]\n");
      return 2;
    }
  }
  if (changes <= 0) changes = 1;
  static const char *const kinds[] = {"record", "eq", "prefix", "range", "alert"};
  if (run("collection", 1000, changes) != 0) return 1; /* one topic: the same at any size */
  char *list = strdup(sizes);
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    long topics = strtol(tok, NULL, 10);
    if (topics <= 0) continue;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
      if (run(kinds[k], topics, changes) != 0) return 1;
  }
  free(list);
  return 0;
}
