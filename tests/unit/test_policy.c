/*
 * Unit tests of the access policy (policy.h): the built-in roles, grants
 * by table with "*" as the fallback, row scopes, OAuth scope mappings, key
 * attributes, the example file in schema/, and every malformed policy
 * refused with a message that says where.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/policy.h"

static policy_t *parse_ok(const char *text) {
  policy_t *p = NULL;
  char err[256] = "";
  int rc = policy_parse(text, strlen(text), &p, err, sizeof(err));
  if (rc != 0) fprintf(stderr, "policy_parse: %s\n", err);
  CHECK_INT_EQ(rc, 0);
  return p;
}

static void expect_bad(const char *text, const char *needle) {
  policy_t *p = NULL;
  char err[256] = "";
  int rc = policy_parse(text, strlen(text), &p, err, sizeof(err));
  if (rc != -EINVAL || strstr(err, needle) == NULL)
    fprintf(stderr, "policy_parse(%s) = %d \"%s\"; wanted -EINVAL with \"%s\"\n", text, rc, err,
            needle);
  CHECK(rc == -EINVAL && p == NULL && strstr(err, needle) != NULL);
}

static void test_builtin(void) {
  policy_t *p = policy_builtin();
  const policy_role *r = policy_role_find(p, "reader");
  CHECK(r != NULL);
  const policy_grant *g = policy_grant_for(r, "Anything");
  CHECK(g != NULL && g->rights == (POLICY_READ | POLICY_SUBSCRIBE) && g->scope_column == NULL);
  CHECK(policy_grant_for(policy_role_find(p, "admin"), "X")->rights & POLICY_ADMIN);
  CHECK(policy_role_find(p, "nobody") == NULL);
  CHECK_STR_EQ(policy_scope_role(p, "mcpsub:write"), "writer");
  CHECK(policy_scope_role(p, "other") == NULL);
  policy_free(p);
  policy_free(NULL);
}

static void test_grants_and_scopes(void) {
  policy_t *p = parse_ok(
      "{\"roles\":{\"t\":{\"tables\":{"
      "\"Widget\":{\"rights\":[\"read\",\"write\"],\"scope\":{\"column\":\"tenant\",\"bind\":"
      "\"claim:org\"}},"
      "\"*\":{\"rights\":[\"read\"]}}}},"
      "\"scopes\":{\"w:t\":\"t\"},\"keys\":{\"k1\":{\"org\":\"acme\"}}}");
  const policy_role *r = policy_role_find(p, "t");
  CHECK(r != NULL);
  const policy_grant *w = policy_grant_for(r, "Widget");
  CHECK(w->rights == (POLICY_READ | POLICY_WRITE));
  CHECK_STR_EQ(w->scope_column, "tenant");
  CHECK_STR_EQ(w->scope_bind, "claim:org");
  const policy_grant *other = policy_grant_for(r, "Product");
  CHECK(other != NULL && other->rights == POLICY_READ && other->scope_column == NULL);
  CHECK_STR_EQ(policy_scope_role(p, "w:t"), "t");
  CHECK_STR_EQ(policy_scope_role(p, "mcpsub:read"), "reader"); /* built-ins still map */
  const cJSON *attrs = policy_key_attributes(p, "k1");
  CHECK(attrs != NULL);
  CHECK_STR_EQ(cJSON_GetObjectItemCaseSensitive(attrs, "org")->valuestring, "acme");
  CHECK(policy_key_attributes(p, "k2") == NULL);
  /* No "*": an unnamed table has no grant at all. */
  policy_t *q = parse_ok("{\"roles\":{\"only\":{\"tables\":{\"A\":{\"rights\":[]}}}}}");
  CHECK(policy_grant_for(policy_role_find(q, "only"), "B") == NULL);
  CHECK(policy_grant_for(policy_role_find(q, "only"), "A")->rights == 0);
  policy_free(q);
  policy_free(p);
}

static void test_scopes_to_role(void) {
  policy_t *p = parse_ok("{\"roles\":{\"t\":{\"tables\":{}},\"u\":{\"tables\":{}}},"
                         "\"scopes\":{\"b:u\":\"u\",\"a:t\":\"t\",\"mcpsub:read\":\"t\"}}");
  /* The file's mappings first, in its order, whatever the token's order. */
  CHECK_STR_EQ(policy_role_for_scopes(p, "a:t b:u"), "u");
  CHECK_STR_EQ(policy_role_for_scopes(p, "openid a:t"), "t");
  CHECK_STR_EQ(policy_role_for_scopes(p, "mcpsub:write a:t"), "t");
  /* Then the strongest built-in (a file may remap one). */
  CHECK_STR_EQ(policy_role_for_scopes(p, "mcpsub:write mcpsub:admin"), "admin");
  CHECK_STR_EQ(policy_role_for_scopes(p, "  mcpsub:write  "), "writer");
  CHECK_STR_EQ(policy_role_for_scopes(p, "mcpsub:read"), "t");
  CHECK(policy_role_for_scopes(p, "") == NULL);
  CHECK(policy_role_for_scopes(p, "mcpsub:readx a:tt") == NULL);
  policy_free(p);
}

static void test_example_file(void) {
  policy_t *p = NULL;
  char err[256] = "";
  CHECK_INT_EQ(policy_load(MCPSUB_SOURCE_ROOT "/schema/policy.example.json", &p, err, sizeof(err)),
               0);
  CHECK(policy_role_find(p, "tenant-user") != NULL);
  CHECK_STR_EQ(policy_scope_role(p, "widgets:tenant"), "tenant-user");
  policy_free(p);
  CHECK_INT_EQ(policy_load("/nonexistent/policy.json", &p, err, sizeof(err)), -ENOENT);
}

static void test_malformed(void) {
  expect_bad("[]", "expected a JSON object");
  expect_bad("{\"roles\":[]}", "\"roles\" must be an object");
  expect_bad("{\"roles\":{\"reader\":{\"tables\":{}}}}", "built in");
  expect_bad("{\"roles\":{\"r\":{}}}", "\"tables\" must be an object");
  expect_bad("{\"roles\":{\"r\":{\"tables\":{\"T\":{\"rights\":[\"fly\"]}}}}}", "unknown right");
  expect_bad("{\"roles\":{\"r\":{\"tables\":{\"T\":{\"rights\":\"read\"}}}}}", "must be an array");
  expect_bad(
      "{\"roles\":{\"r\":{\"tables\":{\"T\":{\"rights\":[],\"scope\":{\"bind\":\"name\"}}}}}}",
      "\"column\"");
  expect_bad("{\"roles\":{\"r\":{\"tables\":{\"T\":{\"rights\":[],\"scope\":{\"column\":\"c\","
             "\"bind\":\"sub\"}}}}}}",
             "\"bind\"");
  expect_bad("{\"scopes\":{\"s\":\"nobody\"}}", "no known role");
  expect_bad("{\"keys\":{\"k\":1}}", "attributes");
}

int main(void) {
  RUN(test_builtin);
  RUN(test_grants_and_scopes);
  RUN(test_scopes_to_role);
  RUN(test_example_file);
  RUN(test_malformed);
  return 0;
}
