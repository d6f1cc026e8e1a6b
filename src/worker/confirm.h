/*
 * Confirmation of destructive tool calls (delete_record, delete_records,
 * and put_records past --confirm-rows) by the user, through elicitation.
 *
 * A tool hands over its write (a writer job, not yet submitted) with a
 * message saying what will change. Then, by --confirm-destructive and the
 * client's declared elicitation capability:
 *
 *   - a 2025 session's client is asked in band: the tools/call answer
 *     becomes an SSE stream carrying an elicitation/create request (form
 *     mode, one boolean "confirm"); the client POSTs its answer as a
 *     JSON-RPC response, possibly on another connection. The request id
 *     is unguessable ("mcpsub-confirm-<slot>-<128 random bits>") and only
 *     the same principal's same session may answer it. An answer that
 *     reaches a worker that does not hold the call is passed on to the
 *     others (IPC_ANSWER);
 *   - a 2026-07-28 client is asked the stateless way: the call's result is
 *     resultType "input_required" with the elicitation in inputRequests
 *     and a requestState naming exactly this call (caller, tool, arguments,
 *     rows matched); the client calls again with inputResponses and that
 *     requestState. Another state (the arguments or the row count changed)
 *     is asked again;
 *   - a client that cannot be asked: elicit proceeds, refuse refuses;
 *     never asks nobody.
 *
 * Accept with confirm true runs the write. Decline, cancel, confirm false,
 * an error answer or no answer within --confirm-timeout end the call with
 * isError and change nothing; notifications/cancelled for the call or the
 * client going away end it without an answer, changing nothing.
 */
#ifndef MCPSUB_CONFIRM_H
#define MCPSUB_CONFIRM_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "worker/mcp.h"
#include "worker/writer.h"

typedef struct confirm_pending confirm_pending;

/* What the user is asked to confirm, and what runs when they do. */
typedef struct confirm_write {
  const char *message;              /* what will change, for the user */
  int64_t rows;                     /* rows the write will touch (part of requestState) */
  writer_job *job;                  /* the write; NULL when the call cannot wait (a batch) */
  mcp_reply *reply;                 /* the call's answer, inside job (answered by job's done) */
  void (*submit)(writer_job *job);  /* hands job to the writer once confirmed */
  void (*discard)(writer_job *job); /* frees job when it does not run */
} confirm_write;

/*
 * Applies the policy (see above) to a destructive call. *go set: run the
 * write now, the caller's usual way (job is still the caller's). Else the
 * job is taken: either the user is being asked (NULL, call->pending; the
 * job is submitted once confirmed and its done answers) or the answer is
 * returned (refused, cancelled, input_required).
 */
cJSON *confirm_check(mcp_call *call, const confirm_write *cw, bool *go);

/* Do client capabilities declare form elicitation (elicitation: {} or {form: ...})? */
bool confirm_caps_form(const cJSON *caps);

/*
 * A JSON-RPC response msg POSTed by principal in session: the answer to
 * an elicitation of this worker? true when it was (and is handled).
 */
bool confirm_answer(worker_t *w, const char *principal, const char *session, const cJSON *msg);
/*
 * The part of an answer (a JSON-RPC response) confirm_answer reads, when its
 * id is one of the confirmations' ({id, result: {action, content.confirm}}
 * or {id, error: {}}), for another host; else NULL. New object.
 */
cJSON *confirm_answer_brief(const cJSON *msg);
/* notifications/cancelled for the call with id (JSON text): ends its confirmation. */
bool confirm_cancel(worker_t *w, const char *principal, const char *session, const char *id_json);
/* Ends every pending confirmation (shutdown): isError, nothing changed. */
void confirm_finish_all(worker_t *w);

#endif
