/*
 * libFuzzer target: the walk that gives a parsed JSON text's integers
 * beyond 2^53 as raw items of their digits (jsonrpc_exact_integers),
 * which request bodies and row images take, and the printer
 * (jsonrpc_print). Whatever cJSON parses, the walk leaves the tree as it
 * was but for such integers, each a raw item of exactly the literal's
 * digits standing for the number cJSON read; the printed tree parses and
 * walks to the same tree again.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonrpc.h"

/* Is after the walk of before (same shape; a number may have become its raw digits)? */
static void check_walked(const cJSON *before, const cJSON *after) {
  if ((before->string == NULL) != (after->string == NULL) ||
      (before->string != NULL && strcmp(before->string, after->string) != 0))
    abort();
  if (cJSON_IsNumber(before) && cJSON_IsRaw(after)) {
    bool in_range = false;
    if (!jsonrpc_raw_integer(after, NULL, &in_range)) abort();
    if (strtod(after->valuestring, NULL) != before->valuedouble) abort();
    if (after->valuestring[after->valuestring[0] == '-'] == '0') abort(); /* canonical */
    errno = 0;
    long long v = strtoll(after->valuestring, NULL, 10);
    if (errno == 0 && v >= -(1LL << 53) && v <= (1LL << 53)) abort(); /* a double holds it */
    return;
  }
  if ((before->type & 0xFF) != (after->type & 0xFF)) abort();
  if (cJSON_IsNumber(before) &&
      !(before->valuedouble == after->valuedouble ||
        (before->valuedouble != before->valuedouble && after->valuedouble != after->valuedouble)))
    abort();
  if (cJSON_IsString(before) && strcmp(before->valuestring, after->valuestring) != 0) abort();
  const cJSON *x = before->child, *y = after->child;
  for (; x != NULL && y != NULL; x = x->next, y = y->next) check_walked(x, y);
  if (x != NULL || y != NULL) abort();
}

/*
 * Are a and b the same tree, raw items by their text? A double printed
 * (a whole one beyond 2^53 prints as an integer literal) may come back as
 * a raw item of the same value; an infinity (1e999) as null.
 */
static void check_same(const cJSON *a, const cJSON *b) {
  if (cJSON_IsNumber(a) && !isfinite(a->valuedouble) && cJSON_IsNull(b)) return;
  if (cJSON_IsNumber(a) && cJSON_IsRaw(b)) {
    if (strtod(b->valuestring, NULL) != a->valuedouble) abort();
    return;
  }
  if ((a->type & 0xFF) != (b->type & 0xFF)) abort();
  if ((a->string == NULL) != (b->string == NULL) ||
      (a->string != NULL && strcmp(a->string, b->string) != 0))
    abort();
  if (cJSON_IsRaw(a) && strcmp(a->valuestring, b->valuestring) != 0) abort();
  if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring) != 0) abort();
  if (cJSON_IsNumber(a) && a->valuedouble != b->valuedouble) abort();
  const cJSON *x = a->child, *y = b->child;
  for (; x != NULL && y != NULL; x = x->next, y = y->next) check_same(x, y);
  if (x != NULL || y != NULL) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 65536) return 0;
  const char *text = (const char *)data;
  cJSON *root = cJSON_ParseWithLength(text, size);
  if (root == NULL) return 0;
  cJSON *before = cJSON_Duplicate(root, true);
  const cJSON *all = root;
  jsonrpc_exact_integers(text, size, root, &all, 1);
  check_walked(before, root);
  /* Printed (numbers to the last bit), parsed and walked again: the same tree. */
  char *printed = jsonrpc_print_text(root);
  if (printed != NULL) {
    cJSON *again = jsonrpc_parse_exact(printed, strlen(printed));
    if (again == NULL) abort();
    check_same(root, again);
    cJSON_Delete(again);
    free(printed);
  }
  cJSON_Delete(before);
  cJSON_Delete(root);
  return 0;
}
