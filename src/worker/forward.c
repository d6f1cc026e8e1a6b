/*
 * The write home's writes (see forward.h). The writes a worker sends in
 * one loop turn go in one IPC_WRITE, a JSON array of {"o": origin, "s":
 * seq, "b": below, "t": table, "k": key, "r": record, "m": mode, "d":
 * delete, "p": principal, "sc"/"sv": row scope, "w": bulk filters}; the
 * answers the home has for one sender in one turn go in one IPC_WRITTEN,
 * an array of {"o", "s", "rc", "k": out_key, "c": created, "n": changed,
 * "e": err, and for a put "w": the row it left and "v": its version}. One
 * message a turn instead of one a write: the other side is woken once for
 * a group commit's answers, not once for each.
 */
#include "worker/forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/ipc.h"
#include "common/jsonrpc.h"
#include "common/log.h"
#include "worker/worker.h"

/*
 * A write is sent only while another worker has committed writes of its
 * own within this many milliseconds: alone, a worker takes the lock from
 * nobody, and the way to the home would only add its round trip.
 */
#define FORWARD_SHARED_MS 100
/* A turn's message is sent before it grows past this (one packet, ipc.h's IPC_CHUNK). */
#define FORWARD_PACK_MAX (IPC_CHUNK / 2)

/* The home's job: a record write (rec.fwd_w: the home) and whom to answer. */
typedef struct forward_job {
  writer_record rec;
  unsigned from; /* the sender's slot */
} forward_job;

bool forward_write_home(const config_t *cfg) {
  return cfg->workers > 1 && strcmp(store_backend_name(cfg->db_path), "sqlite") == 0;
}

static void forward_unlink(worker_t *w, writer_record *r) {
  if (r->fwd_prev != NULL)
    r->fwd_prev->fwd_next = r->fwd_next;
  else
    w->fwd_head = r->fwd_next;
  if (r->fwd_next != NULL)
    r->fwd_next->fwd_prev = r->fwd_prev;
  else
    w->fwd_tail = r->fwd_prev;
  r->fwd_prev = r->fwd_next = NULL;
}

static void add_string_or_null(cJSON *o, const char *name, const char *s) {
  if (s != NULL)
    cJSON_AddStringToObject(o, name, s);
  else
    cJSON_AddNullToObject(o, name);
}

static const char *string_or_null(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t number_of(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : 0;
}

/* The sent form of r, or NULL when it cannot go (nothing to print). */
static char *forward_format(const writer_record *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "o", r->once.origin);
  cJSON_AddNumberToObject(o, "s", (double)r->once.seq);
  cJSON_AddNumberToObject(o, "b", (double)r->once.below);
  cJSON_AddStringToObject(o, "t", r->table);
  add_string_or_null(o, "k", r->key);
  if (r->record != NULL) cJSON_AddItemReferenceToObject(o, "r", r->record);
  cJSON_AddNumberToObject(o, "m", r->mode);
  cJSON_AddBoolToObject(o, "d", r->is_delete);
  add_string_or_null(o, "p", r->principal);
  add_string_or_null(o, "sc", r->scope_column);
  add_string_or_null(o, "sv", r->scope_value);
  if (r->where != NULL) cJSON_AddItemReferenceToObject(o, "w", r->where);
  char *text = jsonrpc_print_text(o); /* the row's numbers to the last bit */
  cJSON_Delete(o);                    /* the references only */
  return text;
}

/* Makes r here (once: it may have been made at the home too); it stays among the unanswered. */
static void forward_make_here(worker_t *w, writer_record *r);

static void forward_on_idle(uv_idle_t *h);

/* Adds item to a turn's message b ("[item,item" so far), sent at the turn's end. */
static void forward_gather(worker_t *w, buf_t *b, const char *item) {
  if (b->len == 0) {
    buf_append_byte(b, '[');
  } else {
    buf_append_byte(b, ',');
  }
  buf_append_str(b, item);
  if (!uv_is_active((uv_handle_t *)&w->fwd_idle) && !uv_is_closing((uv_handle_t *)&w->fwd_idle))
    uv_idle_start(&w->fwd_idle, forward_on_idle);
}

/*
 * Sends b (closing its array) as cmd to the worker of slot: false when it
 * cannot go. b is emptied either way.
 */
static bool forward_send(worker_t *w, unsigned slot, buf_t *b, uint32_t cmd) {
  buf_append_byte(b, ']');
  bool sent = w->send_peer != NULL && w->send_peer(w, slot, cmd, b->data, b->len);
  buf_reset(b);
  return sent;
}

bool forward_tell(worker_t *w, unsigned slot) {
  if (w->fwd_answers == NULL || slot >= w->n_slots || w->fwd_answers[slot].len == 0) return false;
  return forward_send(w, slot, &w->fwd_answers[slot], IPC_WRITTEN);
}

/* Sends what this turn gathered: the writes for the home, the answers for each sender. */
static void forward_flush(worker_t *w) {
  uv_idle_stop(&w->fwd_idle);
  if (w->fwd_out.len > 0) {
    writer_record *r = w->fwd_unsent;
    w->fwd_unsent = NULL;
    bool sent = forward_send(w, 0, &w->fwd_out, IPC_WRITE);
    for (; r != NULL; r = r->fwd_next) {
      if (sent)
        w->writes_forwarded++;
      else if (r->fwd_done == NULL) /* it never left: made here, once */
        forward_make_here(w, r);
    }
  }
  /* An answer that cannot go is lost: its sender makes the write again when it finds us gone. */
  for (unsigned i = 0; w->fwd_answers != NULL && i < w->n_slots; i++) (void)forward_tell(w, i);
}

static void forward_on_idle(uv_idle_t *h) {
  forward_flush(h->data);
}

void forward_init(worker_t *w) {
  uv_idle_init(w->loop, &w->fwd_idle);
  w->fwd_idle.data = w;
  buf_init(&w->fwd_out);
}

void forward_close(worker_t *w) {
  forward_lost(w);  /* writes sent to the write home: made here, once */
  forward_flush(w); /* a home's last answers */
  uv_close((uv_handle_t *)&w->fwd_idle, NULL);
}

void forward_finish(worker_t *w) {
  buf_finish(&w->fwd_out);
  for (unsigned i = 0; w->fwd_answers != NULL && i < w->n_slots; i++)
    buf_finish(&w->fwd_answers[i]);
  free(w->fwd_answers);
  w->fwd_answers = NULL;
}

void forward_submit(worker_t *w, writer_record *r) {
  if (!w->forwards || w->send_peer == NULL || uv_is_closing((uv_handle_t *)&w->fwd_idle) ||
      uv_now(w->loop) - w->others_wrote_ms > FORWARD_SHARED_MS) {
    writer_submit(w->writer, &r->job, w->cfg->write_timeout_ms);
    return;
  }
  int64_t seq = ++w->fwd_seq;
  /* Every write of this worker's before the oldest unanswered one has its answer. */
  r->once =
      (store_once){mem_strdup(w->origin), seq, w->fwd_head != NULL ? w->fwd_head->once.seq : seq};
  char *text = forward_format(r);
  if (text == NULL) abort(); /* an item that does not print: a bug here */
  forward_gather(w, &w->fwd_out, text);
  free(text);
  r->fwd_prev = w->fwd_tail;
  r->fwd_next = NULL;
  if (w->fwd_tail != NULL)
    w->fwd_tail->fwd_next = r;
  else
    w->fwd_head = r;
  w->fwd_tail = r;
  if (w->fwd_unsent == NULL) w->fwd_unsent = r;
  if (w->fwd_out.len > FORWARD_PACK_MAX) forward_flush(w);
}

/* The sender: one of the home's answers. */
static void forward_answered_one(worker_t *w, cJSON *a) {
  const char *origin = string_or_null(a, "o");
  int64_t seq = number_of(a, "s");
  writer_record *r = w->fwd_head;
  /* Answers come in the order sent, but for writes made here meanwhile: from the oldest. */
  while (r != NULL && (r->once.seq != seq || origin == NULL || strcmp(r->once.origin, origin) != 0))
    r = r->fwd_next;
  /* Not waited for: answered already, made here instead, or meant for this slot's last worker. */
  if (r == NULL || r->fwd_done != NULL) return;
  int rc = (int)number_of(a, "rc");
  if (rc == -EAGAIN) { /* the home is stopping */
    forward_make_here(w, r);
    return;
  }
  forward_unlink(w, r);
  r->job.rc = rc;
  const char *key = string_or_null(a, "k");
  r->out_key = key != NULL ? mem_strdup(key) : NULL;
  r->created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "c"));
  r->changed = number_of(a, "n");
  cJSON *row = cJSON_DetachItemFromObjectCaseSensitive(a, "w");
  if (cJSON_IsObject(row)) {
    r->row = row;
    r->version = number_of(a, "v");
  } else {
    cJSON_Delete(row);
  }
  const char *err = string_or_null(a, "e");
  snprintf(r->err, sizeof(r->err), "%s", err != NULL ? err : "");
  r->job.done(&r->job);
}

void forward_answered(worker_t *w, const char *payload, size_t len) {
  cJSON *list = cJSON_ParseWithLength(payload, len);
  cJSON *items = cJSON_IsArray(list) ? list : NULL, *a;
  cJSON_ArrayForEach(a, items) forward_answered_one(w, a);
  cJSON_Delete(list);
}

/*
 * A write made here after all leaves the unanswered only when done: until
 * then its once id stays below the next writes' "below", so that the home
 * keeps the row that says whether it made it.
 */
static void forward_here_done(writer_job *j) {
  writer_record *r = (writer_record *)j;
  forward_unlink(r->fwd_w, r);
  j->done = r->fwd_done;
  j->done(j);
}

static void forward_make_here(worker_t *w, writer_record *r) {
  r->fwd_w = w;
  r->fwd_done = r->job.done;
  r->job.done = forward_here_done;
  r->job.batched = true; /* the once id is checked in the write's transaction */
  writer_submit(w->writer, &r->job, w->cfg->write_timeout_ms);
}

void forward_lost(worker_t *w) {
  buf_reset(&w->fwd_out); /* the unsent too: made here below */
  w->fwd_unsent = NULL;
  for (writer_record *r = w->fwd_head; r != NULL; r = r->fwd_next)
    if (r->fwd_done == NULL) forward_make_here(w, r);
}

/* The home: answers r's sender with its result (rc instead, when not 0); takes its row. */
static void forward_answer(worker_t *w, unsigned from, writer_record *r, int rc) {
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "o", r->once.origin);
  cJSON_AddNumberToObject(a, "s", (double)r->once.seq);
  cJSON_AddNumberToObject(a, "rc", rc != 0 ? rc : r->job.rc);
  add_string_or_null(a, "k", r->out_key);
  cJSON_AddBoolToObject(a, "c", r->created);
  cJSON_AddNumberToObject(a, "n", (double)r->changed);
  cJSON_AddStringToObject(a, "e", r->err);
  if (rc == 0 && r->row != NULL) {
    cJSON_AddItemToObject(a, "w", r->row);
    cJSON_AddNumberToObject(a, "v", (double)r->version);
    r->row = NULL;
  }
  char *text = jsonrpc_print_text(a); /* the row's numbers to the last bit */
  cJSON_Delete(a);
  if (text == NULL) abort(); /* an item that does not print: a bug here */
  if (w->fwd_answers == NULL) {
    w->fwd_answers = mem_calloc(w->n_slots, sizeof(buf_t));
    for (unsigned i = 0; i < w->n_slots; i++) buf_init(&w->fwd_answers[i]);
  }
  buf_t *b = &w->fwd_answers[from];
  forward_gather(w, b, text);
  free(text);
  /* After the loop's close (forward_close) nothing is gathered: sent at once. */
  if (b->len > FORWARD_PACK_MAX || uv_is_closing((uv_handle_t *)&w->fwd_idle)) forward_flush(w);
}

static void forward_job_done(writer_job *j) {
  forward_job *fj = (forward_job *)j;
  forward_answer(fj->rec.fwd_w, fj->from, &fj->rec, 0);
  writer_record_free(&fj->rec);
}

/* The home: one of the writes the worker of slot from sent. */
static void forward_run_one(worker_t *w, unsigned from, cJSON *o) {
  const char *table = string_or_null(o, "t"), *origin = string_or_null(o, "o");
  if (table == NULL || origin == NULL) {
    log_warn("ipc: malformed write from another worker");
    return;
  }
  store_guard g = {string_or_null(o, "p"), string_or_null(o, "sc"), string_or_null(o, "sv")};
  cJSON *record = cJSON_DetachItemFromObjectCaseSensitive(o, "r");
  bool is_delete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "d"));
  forward_job *fj = (forward_job *)writer_record_create(
      sizeof(forward_job), table, string_or_null(o, "k"), record,
      (store_write_mode)number_of(o, "m"), is_delete, &g, forward_job_done);
  fj->rec.fwd_w = w;
  fj->from = from;
  fj->rec.where = cJSON_DetachItemFromObjectCaseSensitive(o, "w");
  fj->rec.job.quick = fj->rec.where == NULL;
  fj->rec.job.batched = true;
  fj->rec.once = (store_once){mem_strdup(origin), number_of(o, "s"), number_of(o, "b")};
  if (w->closing) { /* its writer is stopping: the sender makes it */
    forward_answer(w, fj->from, &fj->rec, -EAGAIN);
    writer_record_free(&fj->rec);
    return;
  }
  w->writes_taken++;
  writer_submit(w->writer, &fj->rec.job, w->cfg->write_timeout_ms);
}

void forward_run(worker_t *w, unsigned from, const char *payload, size_t len) {
  cJSON *list = jsonrpc_parse_exact(payload, len); /* a row's integers, as written (rest.c) */
  const cJSON *items = cJSON_IsArray(list) && from < w->n_slots ? list : NULL;
  if (items == NULL) log_warn("ipc: malformed write from another worker");
  cJSON *o;
  cJSON_ArrayForEach(o, items) forward_run_one(w, from, o);
  cJSON_Delete(list);
}
