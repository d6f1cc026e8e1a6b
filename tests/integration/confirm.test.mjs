// Destructive tools ask the user first, black-box: delete_record,
// delete_records (filters in the URI query grammar) and put_records past
// --confirm-rows send elicitation/create to a client that declared
// elicitation — on the tools/call's SSE answer for a 2025 session (the
// official 1.x client answers it on another POST), as input_required for
// 2026-07-28 (the official v2 client calls again with the answer). Accept
// runs the write; decline, cancel, confirm false, no answer within
// --confirm-timeout, notifications/cancelled and a client that goes away
// change nothing. --confirm-destructive decides for clients that cannot be
// asked. Progress and the request's log records go on the call's stream.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';

import { startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { MCP_ACCEPT, RawConnection, buildRequest, mcpPost, newId, parseSse } from './lib/raw.mjs';
import { sqliteRows } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { rest, product } from './lib/subs.mjs';
import { V, modern, post } from './lib/modern.mjs';
import { holdLock } from './lib/lock.mjs';
import { PG_MODE } from './lib/pg.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

let srv;

before(async () => {
  srv = await startServer({ args: ['--confirm-rows', '2', '--workers', '2'] });
});

after(async () => {
  await srv?.stop();
});

const ELICIT = { elicitation: {} };
const exists = (server, sku) => sqliteRows(server.dbPath, `SELECT sku FROM Product WHERE sku = '${sku}'`).length === 1;
const skus = (server, where) => sqliteRows(server.dbPath, `SELECT sku FROM Product WHERE ${where} ORDER BY sku`).map((r) => r.sku);

async function addProducts(server, prefix, n, fields = {}) {
  for (let i = 1; i <= n; i++) {
    const res = await rest(server.port, 'PUT', `/Product/${prefix}-${i}`, product(`${prefix}-${i}`, { price_cents: i * 100, ...fields }));
    assert.ok(res.status === 200 || res.status === 201, res.text);
  }
}

/* An official 1.x client that declares elicitation and answers with answer(params). */
async function elicitingClient(server, answer) {
  const client = new Client({ name: 'confirm-test', version: '1.0.0' }, { capabilities: ELICIT });
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params);
    return answer(req.params);
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  return { client, asked };
}

const text = (r) => r.content[0].text;

/* A tools/call POSTed raw on session sid, read as it streams. */
async function streamedCall(server, sid, name, args, meta) {
  const id = newId();
  const params = { name, arguments: args };
  if (meta) params._meta = meta;
  const conn = await RawConnection.open(server.port);
  conn.write(
    buildRequest(server.port, {
      method: 'POST',
      path: '/mcp',
      headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': '2025-11-25' },
      body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params }),
    }),
  );
  const raw = () => conn.all.toString('utf8');
  const body = () => (raw().includes('\r\n\r\n') ? raw().slice(raw().indexOf('\r\n\r\n') + 4) : '');
  const events = () => parseSse(body()).events.filter((e) => e.data !== undefined).map((e) => JSON.parse(e.data));
  const question = async () => {
    await waitFor(() => events().some((m) => m.method === 'elicitation/create'), { message: 'the elicitation' });
    return events().find((m) => m.method === 'elicitation/create');
  };
  const result = async (timeoutMs = 5000) => {
    await waitFor(() => events().some((m) => m.id === id), { timeoutMs, message: 'the tools/call result' });
    return events().find((m) => m.id === id);
  };
  return { id, conn, raw, events, question, result };
}

const answerOf = (eid, result) => ({ jsonrpc: '2.0', id: eid, result });
const ACCEPT = { action: 'accept', content: { confirm: true } };

test('the official client is asked before delete_record: accept deletes; decline, cancel and confirm false change nothing', async () => {
  let reply = ACCEPT;
  const { client, asked } = await elicitingClient(srv, () => reply);
  try {
    await addProducts(srv, 'DR', 4);
    let r = await client.callTool({ name: 'delete_record', arguments: { table: 'Product', key: 'DR-1' } });
    assert.equal(asked.length, 1);
    assert.match(asked[0].message, /Delete record DR-1 of table Product/);
    assert.equal(asked[0].mode, 'form');
    assert.equal(asked[0].requestedSchema.properties.confirm.type, 'boolean');
    assert.deepEqual(JSON.parse(text(r)), { deleted: true });
    assert.equal(exists(srv, 'DR-1'), false);
    for (const [sku, answer] of [
      ['DR-2', { action: 'decline' }],
      ['DR-3', { action: 'cancel' }],
      ['DR-4', { action: 'accept', content: { confirm: false } }],
    ]) {
      reply = answer;
      r = await client.callTool({ name: 'delete_record', arguments: { table: 'Product', key: sku } });
      assert.equal(r.isError, true, JSON.stringify(answer));
      assert.match(text(r), /cancelled by the user: nothing changed/);
      assert.equal(exists(srv, sku), true, `${sku} is still there after ${JSON.stringify(answer)}`);
    }
    // Nothing to confirm for a record that is not there: no question.
    r = await client.callTool({ name: 'delete_record', arguments: { table: 'Product', key: 'NOPE' } });
    assert.equal(r.isError, true);
    assert.equal(asked.length, 4);
  } finally {
    await client.close();
  }
});

test('delete_records and put_records: one transaction over what the filter matches; the question says how many', async () => {
  const { client, asked } = await elicitingClient(srv, () => ACCEPT);
  try {
    await addProducts(srv, 'BK', 5, { category: 'bulk' });
    let r = await client.callTool({ name: 'delete_records', arguments: { table: 'Product', filter: 'category=bulk&price_cents=ge=300' } });
    assert.deepEqual(JSON.parse(text(r)), { deleted: 3 });
    assert.match(asked.at(-1).message, /Delete 3 records of table Product matching category=bulk&price_cents=ge=300/);
    assert.deepEqual(skus(srv, "category = 'bulk'"), ['BK-1', 'BK-2']);
    // Two rows: at --confirm-rows 2, no question.
    const before = asked.length;
    r = await client.callTool({ name: 'put_records', arguments: { table: 'Product', filter: 'category=bulk', set: { in_stock: 0 } } });
    assert.deepEqual(JSON.parse(text(r)), { updated: 2 });
    assert.equal(asked.length, before);
    // Three rows: more than --confirm-rows, so asked.
    r = await client.callTool({ name: 'put_records', arguments: { table: 'Product', filter: 'category=bulk', set: { note: 1 } } });
    assert.equal(r.isError, true, 'an unknown column is refused');
    r = await client.callTool({ name: 'put_records', arguments: { table: 'Product', filter: 'category=bulk|garden', set: { in_stock: 1 } } });
    assert.equal(asked.length, before + 1);
    assert.match(asked.at(-1).message, /Set \{"in_stock":1\} on 3 records of table Product matching category=bulk\|garden/);
    assert.deepEqual(JSON.parse(text(r)), { updated: 3 });
    // Every audit row of the bulk write names the caller.
    const audit = sqliteRows(srv.dbPath, "SELECT op, principal FROM audit_log WHERE tbl = 'Product' AND key LIKE 'BK-%' AND op = 'DELETE'");
    assert.equal(audit.length, 3);
    // A filter that does not parse, or names no column, is -32602 with the reason.
    for (const filter of ['price_cents=zz=3', 'nope=1']) {
      await assert.rejects(client.callTool({ name: 'delete_records', arguments: { table: 'Product', filter } }), (e) => e.code === -32602 && /filter/.test(e.message));
    }
  } finally {
    await client.close();
  }
});

test('the question and the answer on the wire: an unguessable id, answered by this session only, progress and the log record on the call stream', async () => {
  const s = await McpSession.open(srv.port, { capabilities: ELICIT });
  await s.result('logging/setLevel', { level: 'info' });
  const get = await EventStream.open(srv.port, s.id);
  await get.waitPrimed();
  await addProducts(srv, 'WR', 2, { category: 'wire' });
  const call = await streamedCall(srv, s.id, 'delete_records', { table: 'Product', filter: 'category=wire' }, { progressToken: 'p1' });
  const q = await call.question();
  assert.match(q.id, /^mcpsub-confirm-[0-9a-f]{2}-[0-9a-f]{32}$/);
  assert.deepEqual(call.events()[0], { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'p1', progress: 0, total: 2, message: '2 rows match' } });
  // Another session of the same caller cannot answer it.
  const other = await McpSession.open(srv.port, { capabilities: ELICIT });
  assert.equal((await mcpPost(srv.port, other.id, answerOf(q.id, ACCEPT))).status, 202);
  await sleep(300);
  assert.equal(call.events().some((m) => m.id === call.id), false, 'still waiting');
  assert.deepEqual(skus(srv, "category = 'wire'"), ['WR-1', 'WR-2']);
  // Its own session can, on another connection.
  assert.equal((await mcpPost(srv.port, s.id, answerOf(q.id, ACCEPT))).status, 202);
  const res = await call.result();
  assert.deepEqual(JSON.parse(res.result.content[0].text), { deleted: 2 });
  const methods = call.events().map((m) => m.method ?? 'result');
  assert.deepEqual(methods, ['notifications/progress', 'elicitation/create', 'notifications/progress', 'notifications/message', 'result']);
  assert.match(call.events()[3].params.data, /deleted 2 rows of Product/);
  await sleep(100);
  assert.equal(get.messages('notifications/message').some((m) => /deleted 2 rows/.test(JSON.stringify(m))), false, 'the record went on the call stream, not the GET stream');
  get.close();
  await other.delete();
  await s.delete();
});

test('notifications/cancelled, the client going away and no answer in time change nothing', async () => {
  const server = await startServer({ args: ['--confirm-timeout', '1'] });
  try {
    const s = await McpSession.open(server.port, { capabilities: ELICIT });
    // Cancelled: the stream ends without a result.
    const a = await streamedCall(server, s.id, 'delete_record', { table: 'Product', key: 'A-100' });
    await a.question();
    const cancel = await mcpPost(server.port, s.id, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: a.id } });
    assert.equal(cancel.status, 202);
    await a.conn.closedPromise;
    assert.equal(a.events().some((m) => m.id === a.id), false, a.raw());
    assert.equal(exists(server, 'A-100'), true);
    // Gone: the client closes the connection; a late answer finds nothing.
    const b = await streamedCall(server, s.id, 'delete_record', { table: 'Product', key: 'A-100' });
    const qb = await b.question();
    b.conn.close();
    await sleep(100);
    assert.equal((await mcpPost(server.port, s.id, answerOf(qb.id, ACCEPT))).status, 202);
    await sleep(200);
    assert.equal(exists(server, 'A-100'), true);
    // No answer: after --confirm-timeout, isError.
    const c = await streamedCall(server, s.id, 'delete_record', { table: 'Product', key: 'A-100' });
    await c.question();
    const res = await c.result(5000);
    assert.equal(res.result.isError, true);
    assert.match(res.result.content[0].text, /no answer from the user in time/);
    assert.equal(exists(server, 'A-100'), true);
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('notifications/cancelled for a write still waiting for the database: no answer, and it never runs', { skip: PG_MODE && 'holds a SQLite file lock' }, async () => {
  const server = await startServer({ args: ['--workers', '0', '--write-timeout', '20000'] });
  try {
    const s = await McpSession.open(server.port);
    const lock = holdLock(server.dbPath, 1500, "INSERT INTO StockEvent (id, sku, delta) VALUES (900, 'A-100', 1);");
    await lock.locked;
    // The first write waits for the lock inside the database; the second waits behind it.
    const first = s.tool('put_record', { table: 'Product', key: 'Q-1', record: product('Q-1') });
    await sleep(100);
    const call = await streamedCall(server, s.id, 'delete_records', { table: 'Product', filter: 'sku=B-200' });
    await sleep(100);
    const cancel = await mcpPost(server.port, s.id, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: call.id } });
    assert.equal(cancel.status, 202);
    await waitFor(() => call.raw().length > 0, { message: 'the end of the call' });
    assert.match(call.raw(), /^HTTP\/1\.1 200[^]*content-type: text\/event-stream/i, 'ended at once, without a result');
    await sleep(100);
    assert.equal(call.events().length, 0, call.raw());
    await lock.done;
    assert.equal((await first).isError, false, 'the write ahead of it went through');
    assert.equal(exists(server, 'Q-1'), true);
    await sleep(200);
    assert.equal(exists(server, 'B-200'), true, 'the cancelled write did not run');
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('--confirm-destructive: elicit proceeds for a client that cannot be asked, refuse refuses, never asks nobody', async () => {
  const plain = await McpSession.open(srv.port);
  await addProducts(srv, 'PL', 1);
  assert.deepEqual(await plain.toolOk('delete_record', { table: 'Product', key: 'PL-1' }), { deleted: true });
  await plain.delete();

  const refuse = await startServer({ args: ['--confirm-destructive', 'refuse'] });
  try {
    const s = await McpSession.open(refuse.port);
    const r = await s.tool('delete_record', { table: 'Product', key: 'A-100' });
    assert.equal(r.isError, true);
    assert.match(r.text, /cannot ask/);
    assert.equal(exists(refuse, 'A-100'), true);
    await s.delete();
  } finally {
    await refuse.stop();
  }
  const never = await startServer({ args: ['--confirm-destructive', 'never'] });
  try {
    const s = await McpSession.open(never.port, { capabilities: ELICIT });
    assert.deepEqual(await s.toolOk('delete_record', { table: 'Product', key: 'A-100' }), { deleted: true });
    await s.delete();
  } finally {
    await never.stop();
  }
});

test('inside a JSON-RPC batch (2025-03-26) nobody can be asked: the writes run at once, or are refused with --confirm-destructive refuse', async () => {
  const batch = (server, sid, calls) =>
    mcpPost(server.port, sid, calls.map(([name, args]) => ({ jsonrpc: '2.0', id: newId(), method: 'tools/call', params: { name, arguments: args } })));
  const s = await McpSession.open(srv.port, { protocolVersion: '2025-03-26', capabilities: ELICIT });
  await addProducts(srv, 'BT', 3, { category: 'batched' });
  let res = await batch(srv, s.id, [
    ['put_record', { table: 'Product', key: 'BT-9', record: product('BT-9', { category: 'batched' }) }],
    ['delete_record', { table: 'Product', key: 'BT-1' }],
    ['put_records', { table: 'Product', filter: 'category=batched', set: { in_stock: 0 } }],
    ['delete_records', { table: 'Product', filter: 'sku=BT-2' }],
  ]);
  assert.equal(res.status, 200, res.text);
  const texts = res.json().map((m) => JSON.parse(m.result.content[0].text));
  assert.deepEqual(texts.slice(1), [{ deleted: true }, { updated: 3 }, { deleted: 1 }]);
  assert.equal(texts[0].created, true);
  assert.deepEqual(skus(srv, "category = 'batched'"), ['BT-3', 'BT-9']);
  assert.equal(sqliteRows(srv.dbPath, "SELECT count(*) AS n FROM Product WHERE category = 'batched' AND in_stock = 0")[0].n, 2);
  await s.delete();

  const refuse = await startServer({ args: ['--confirm-destructive', 'refuse'] });
  try {
    const r = await McpSession.open(refuse.port, { protocolVersion: '2025-03-26', capabilities: ELICIT });
    res = await batch(refuse, r.id, [['delete_record', { table: 'Product', key: 'A-100' }], ['delete_records', { table: 'Product', filter: 'sku=B-200' }]]);
    for (const m of res.json()) {
      assert.equal(m.result.isError, true, JSON.stringify(m));
      assert.match(m.result.content[0].text, /cannot ask/);
    }
    assert.equal(exists(refuse, 'A-100'), true);
    assert.equal(exists(refuse, 'B-200'), true);
    await r.delete();
  } finally {
    await refuse.stop();
  }
});

test('2026-07-28: input_required with a requestState naming the call; the v2 client answers and calls again', async () => {
  await addProducts(srv, 'MR', 3);
  const call = (args, extra = {}) => {
    const msg = modern('tools/call', { name: 'delete_record', arguments: args, ...extra });
    msg.params._meta['io.modelcontextprotocol/clientCapabilities'] = ELICIT;
    return post(srv.port, msg, { 'Mcp-Name': 'delete_record' });
  };
  const first = (await call({ table: 'Product', key: 'MR-1' })).json().result;
  assert.equal(first.resultType, 'input_required', JSON.stringify(first));
  assert.equal(first.inputRequests.confirm.method, 'elicitation/create');
  assert.match(first.inputRequests.confirm.params.message, /Delete record MR-1/);
  assert.match(first.requestState, /^[0-9a-f]{64}$/);
  assert.equal(exists(srv, 'MR-1'), true);
  // The answer to another call's question asks again.
  const other = (await call({ table: 'Product', key: 'MR-2' }, { inputResponses: { confirm: ACCEPT }, requestState: first.requestState })).json().result;
  assert.equal(other.resultType, 'input_required');
  assert.equal(exists(srv, 'MR-2'), true);
  const declined = (await call({ table: 'Product', key: 'MR-1' }, { inputResponses: { confirm: { action: 'decline' } }, requestState: first.requestState })).json().result;
  assert.equal(declined.isError, true);
  assert.equal(exists(srv, 'MR-1'), true);
  const done = (await call({ table: 'Product', key: 'MR-1' }, { inputResponses: { confirm: ACCEPT }, requestState: first.requestState })).json().result;
  assert.deepEqual([done.resultType, JSON.parse(done.content[0].text)], ['complete', { deleted: true }]);
  assert.equal(exists(srv, 'MR-1'), false);

  const client = new ClientV2({ name: 'v2-confirm', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: V } } });
  const asked = [];
  client.setRequestHandler('elicitation/create', async (req) => {
    asked.push(req.params);
    return ACCEPT;
  });
  await client.connect(new TransportV2(new URL(srv.url)));
  try {
    const r = await client.callTool({ name: 'delete_records', arguments: { table: 'Product', filter: 'sku=sw=MR-' } });
    assert.equal(asked.length, 1);
    assert.match(asked[0].message, /Delete 2 records of table Product matching sku=sw=MR-/);
    assert.deepEqual(JSON.parse(r.content[0].text), { deleted: 2 });
    assert.deepEqual(skus(srv, "sku LIKE 'MR-%'"), []);
  } finally {
    await client.close();
  }
});

test('query_records: the filter grammar, and progress on a streamed answer when asked', async () => {
  const s = await McpSession.open(srv.port);
  const r = await s.toolOk('query_records', { table: 'Product', filter: 'price_cents=gt=1000&category=tools|garden' });
  assert.deepEqual(r.rows.map((x) => x.sku).sort(), skus(srv, "price_cents > 1000 AND category IN ('tools','garden')"));
  const call = await streamedCall(srv, s.id, 'query_records', { table: 'Product', filter: 'price_cents=lt=1000' }, { progressToken: 7 });
  const res = await call.result();
  const rows = JSON.parse(res.result.content[0].text).rows;
  const n = skus(srv, 'price_cents < 1000').length;
  assert.equal(rows.length, n);
  assert.deepEqual(
    call.events().filter((m) => m.method === 'notifications/progress').map((m) => [m.params.progress, m.params.total, m.params.message]),
    [
      [0, n, `${n} rows match`],
      [n, n, `${n} rows read`],
    ],
  );
  // A page of fewer rows than match: its progress ends at the page's total, the match count said.
  const page = await streamedCall(srv, s.id, 'query_records', { table: 'Product', filter: 'price_cents=lt=1000', limit: 1 }, { progressToken: 8 });
  assert.equal(JSON.parse((await page.result()).result.content[0].text).rows.length, 1);
  assert.deepEqual(
    page.events().filter((m) => m.method === 'notifications/progress').map((m) => [m.params.progress, m.params.total, m.params.message]),
    [
      [0, 1, `${n} rows match`],
      [1, 1, '1 row read'],
    ],
  );
  const bad = await s.call('tools/call', { name: 'query_records', arguments: { table: 'Product', filter: 'price_cents=zz=1' } });
  assert.equal(bad.error?.code, -32602, JSON.stringify(bad));
  await s.delete();
});
