/*
 * mcpsubctl key add|list|revoke|rotate: the API key file (--auth-keys) of
 * mcpsubd. A new key is printed once, alone on a line on stdout; every
 * other word goes to stderr, so `KEY=$(mcpsubctl ... key add ...)` holds
 * the key and nothing else. The file keeps only hashes. mcpsubd notices a
 * changed file by itself (and on SIGHUP): a revoked key stops working on
 * its next request, and its streams end within a second.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/auth_keys.h"
#include "common/store.h"
#include "ctl.h"

/* Loads the key file; a missing one is an empty ring when missing_ok. */
static int keys_load(const ctl_context *ctx, auth_keyring *r, bool missing_ok) {
  if (ctx->auth_keys_path == NULL) {
    ctl_error("key: --auth-keys FILE is required");
    return CTL_EXIT_USAGE;
  }
  char err[512];
  int rc = auth_keyring_load(ctx->auth_keys_path, r, err, sizeof(err));
  if (rc == -ENOENT && missing_ok) return CTL_EXIT_OK;
  if (rc != 0) {
    ctl_error("%s", err);
    return CTL_EXIT_ERROR;
  }
  return CTL_EXIT_OK;
}

static int keys_save(const ctl_context *ctx, const auth_keyring *r) {
  char err[512];
  if (auth_keyring_save(ctx->auth_keys_path, r, err, sizeof(err)) != 0) {
    ctl_error("%s", err);
    return CTL_EXIT_ERROR;
  }
  return CTL_EXIT_OK;
}

/*
 * Gives k a new secret, saves the ring and only then prints the secret
 * (alone on stdout): a failed write never shows a key that does not work.
 */
static int keys_issue_and_save(const ctl_context *ctx, auth_keyring *r, auth_key *k) {
  char text[AUTH_KEY_TEXT_LEN + 1];
  if (auth_key_generate(text, k->sha256) != 0) {
    ctl_error("cannot read the OS random number generator");
    return CTL_EXIT_ERROR;
  }
  k->created_ms = store_now_ms();
  int rc = keys_save(ctx, r);
  if (rc == CTL_EXIT_OK) printf("%s\n", text);
  memset(text, 0, sizeof(text));
  return rc;
}

int ctl_cmd_key_add(ctl_context *ctx, int argc, char **argv) {
  const char *role = NULL;
  const char *name = NULL;
  const ctl_flag flags[] = {{"--role", NULL, &role, NULL}};
  int rc = ctl_parse_args("key add", argc, argv, flags, ARRAY_LEN(flags), &name, 1);
  if (rc != 0) return rc;
  if (role == NULL) {
    ctl_error("key add: --role ROLE is required (reader, writer, admin or a policy role)");
    return CTL_EXIT_USAGE;
  }
  if (!auth_key_name_valid(name, AUTH_KEY_NAME_MAX) ||
      !auth_key_name_valid(role, AUTH_KEY_ROLE_MAX)) {
    ctl_error("key add: names and roles are 1-64 (roles 1-32) characters of A-Z a-z 0-9 . _ -");
    return CTL_EXIT_USAGE;
  }
  auth_keyring r;
  rc = keys_load(ctx, &r, true);
  if (rc != 0) return rc;
  if (auth_keyring_find(&r, name) != NULL) {
    ctl_error("key add: a key named %s exists (rotate or revoke it)", name);
    rc = CTL_EXIT_ERROR;
  } else {
    uint8_t none[32] = {0};
    rc = keys_issue_and_save(ctx, &r, auth_keyring_add(&r, name, role, none, 0));
    if (rc == CTL_EXIT_OK)
      fprintf(stderr, "mcpsubctl: key %s (role %s) added; it is shown only this once\n", name,
              role);
  }
  auth_keyring_finish(&r);
  return rc;
}

int ctl_cmd_key_rotate(ctl_context *ctx, int argc, char **argv) {
  const char *name = NULL;
  int rc = ctl_parse_args("key rotate", argc, argv, NULL, 0, &name, 1);
  if (rc != 0) return rc;
  auth_keyring r;
  rc = keys_load(ctx, &r, false);
  if (rc != 0) return rc;
  auth_key *k = auth_keyring_find(&r, name);
  if (k == NULL) {
    ctl_error("key rotate: no key named %s", name);
    rc = CTL_EXIT_UNKNOWN_SESSION;
  } else {
    rc = keys_issue_and_save(ctx, &r, k);
    if (rc == CTL_EXIT_OK)
      fprintf(stderr, "mcpsubctl: key %s rotated; the old key no longer works\n", name);
  }
  auth_keyring_finish(&r);
  return rc;
}

int ctl_cmd_key_revoke(ctl_context *ctx, int argc, char **argv) {
  const char *name = NULL;
  int rc = ctl_parse_args("key revoke", argc, argv, NULL, 0, &name, 1);
  if (rc != 0) return rc;
  auth_keyring r;
  rc = keys_load(ctx, &r, false);
  if (rc != 0) return rc;
  if (auth_keyring_remove(&r, name) != 0) {
    ctl_error("key revoke: no key named %s", name);
    rc = CTL_EXIT_UNKNOWN_SESSION;
  } else {
    rc = keys_save(ctx, &r);
    if (rc == CTL_EXIT_OK) fprintf(stderr, "mcpsubctl: key %s revoked\n", name);
  }
  auth_keyring_finish(&r);
  return rc;
}

int ctl_cmd_key_list(ctl_context *ctx, int argc, char **argv) {
  int rc = ctl_parse_args("key list", argc, argv, NULL, 0, NULL, 0);
  if (rc != 0) return rc;
  auth_keyring r;
  rc = keys_load(ctx, &r, true);
  if (rc != 0) return rc;
  cJSON *obj = cJSON_CreateObject();
  cJSON *keys = cJSON_AddArrayToObject(obj, "keys");
  for (size_t i = 0; i < r.n; i++) {
    cJSON *k = cJSON_CreateObject();
    cJSON_AddStringToObject(k, "name", r.keys[i].name);
    cJSON_AddStringToObject(k, "role", r.keys[i].role);
    cJSON_AddNumberToObject(k, "created", (double)r.keys[i].created_ms);
    cJSON_AddItemToArray(keys, k);
  }
  static const ctl_column cols[] = {
      {"NAME", "name", ctl_fmt_text, false},
      {"ROLE", "role", ctl_fmt_text, false},
      {"CREATED", "created", ctl_fmt_time, false},
  };
  ctl_print_list(ctx, obj, "keys", cols, ARRAY_LEN(cols), "key", "keys");
  cJSON_Delete(obj);
  auth_keyring_finish(&r);
  return CTL_EXIT_OK;
}
