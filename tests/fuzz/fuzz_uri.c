/*
 * libFuzzer target: resource URIs and their filters (common/uri.h), parsed
 * against a base and server-relative, formatted back and parsed again: a
 * URI we format (within URI_MAX_LEN) must parse to the same table, key and
 * filters (operators and alternatives included).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/uri.h"

static void check_round_trip(const char *base, const uri_t *u) {
  if (u->kind != URI_COLLECTION && u->kind != URI_RECORD && u->kind != URI_FILTERED) return;
  char *text = uri_format(base, u);
  uri_t v;
  /* Percent-encoding can make a URI longer than URI_MAX_LEN: that one is refused, rightly. */
  if (strlen(text) > URI_MAX_LEN) {
    free(text);
    return;
  }
  if (uri_parse(base, text, &v) != 0) abort();
  if (v.kind != u->kind || strcmp(v.table, u->table) != 0) abort();
  if (u->kind == URI_RECORD && strcmp(v.key, u->key) != 0) abort();
  if (v.n_filters != u->n_filters) abort();
  for (size_t i = 0; i < v.n_filters; i++) {
    if (strcmp(v.filters[i].column, u->filters[i].column) != 0 ||
        strcmp(v.filters[i].value, u->filters[i].value) != 0 ||
        v.filters[i].op != u->filters[i].op || v.filters[i].n_alts != u->filters[i].n_alts)
      abort();
    for (size_t j = 0; j < v.filters[i].n_alts; j++)
      if (strcmp(v.filters[i].alts[j], u->filters[i].alts[j]) != 0) abort();
  }
  uri_t copy = uri_copy(&v);
  uri_finish(&copy);
  uri_finish(&v);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 8192) return 0;
  char *text = malloc(size + 1);
  memcpy(text, data, size);
  text[size] = '\0';
  static const char *const bases[] = {"http://127.0.0.1:9926", ""};
  for (size_t b = 0; b < 2; b++) {
    uri_t u;
    if (uri_parse(bases[b], text, &u) == 0) {
      check_round_trip(bases[b], &u);
      uri_finish(&u);
    }
  }
  free(text);
  return 0;
}
