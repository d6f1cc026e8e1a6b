// POST /mcp and DELETE /mcp: JSON-RPC framing, initialize, sessions and
// their durable rows, protocol-version and Origin/Host checks, ping,
// logging, completion, idle eviction.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, getStatus } from './lib/server.mjs';
import {
  deleteSession,
  initialize,
  initializeMessage,
  initializeSession,
  mcpPost,
  request,
} from './lib/raw.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sessionRow, sqlite } from './lib/sqlite.mjs';
import { waitFor } from './lib/wait.mjs';

const UNKNOWN_SESSION = `00${'ab'.repeat(16)}`; // well-formed, never minted here

let srv;
let idle; // --idle-timeout 1
let s; // a session on srv

before(async () => {
  [srv, idle] = await Promise.all([
    startServer({ args: ['--allowed-origins', 'http://app.example'] }),
    startServer({ args: ['--idle-timeout', '1'] }),
  ]);
  s = await McpSession.open(srv.port);
});

after(async () => {
  await srv?.kill();
  await idle?.kill();
});

function rpcError(res, httpStatus, code) {
  assert.equal(res.status, httpStatus, `HTTP status; body ${res.text}`);
  const body = res.json();
  assert.equal(body.jsonrpc, '2.0', res.text);
  assert.ok(body.error, `expected an error, got ${res.text}`);
  assert.equal(body.error.code, code, res.text);
  assert.equal(typeof body.error.message, 'string');
  assert.equal(body.result, undefined);
  return body;
}

const ping = (id = 1) => ({ jsonrpc: '2.0', id, method: 'ping' });

/* JSON-RPC framing ------------------------------------------------------ */

test('POST /mcp: Accept without text/event-stream -> 406', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Accept: 'application/json' } });
  assert.equal(res.status, 406, res.text);
});

test('POST /mcp: Accept without application/json -> 406', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Accept: 'text/event-stream' } });
  assert.equal(res.status, 406, res.text);
});

test('POST /mcp: Content-Type text/plain -> 415', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { 'Content-Type': 'text/plain' } });
  assert.equal(res.status, 415, res.text);
});

test('POST /mcp: Content-Type application/json; charset=utf-8 is accepted', async () => {
  const res = await mcpPost(srv.port, s.id, ping(7), { headers: { 'Content-Type': 'application/json; charset=utf-8' } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json(), { jsonrpc: '2.0', id: 7, result: {} });
});

test('malformed JSON -> HTTP 400, -32700, id null', async () => {
  const res = await mcpPost(srv.port, s.id, '{"jsonrpc":"2.0","id":1,"method":');
  const body = rpcError(res, 400, -32700);
  assert.equal(body.id, null);
});

test('malformed JSON without a session -> HTTP 400, -32700', async () => {
  const res = await mcpPost(srv.port, null, 'not json at all');
  rpcError(res, 400, -32700);
});

test('invalid request: no method -> HTTP 400, -32600', async () => {
  const res = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 1 });
  rpcError(res, 400, -32600);
});

test('invalid request: jsonrpc "1.0" -> HTTP 400, -32600', async () => {
  const res = await mcpPost(srv.port, s.id, { jsonrpc: '1.0', id: 2, method: 'ping' });
  rpcError(res, 400, -32600);
});

test('invalid request: a JSON string -> HTTP 400, -32600', async () => {
  const res = await mcpPost(srv.port, s.id, '"ping"');
  rpcError(res, 400, -32600);
});

test('unknown method -> HTTP 200, -32601 with the request id', async () => {
  const res = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 'u-1', method: 'no/such/method' });
  const body = rpcError(res, 200, -32601);
  assert.equal(body.id, 'u-1');
});

test('bad params: resources/read without uri -> -32602', async () => {
  const res = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 3, method: 'resources/read', params: {} });
  const body = rpcError(res, 200, -32602);
  assert.equal(body.id, 3);
});

test('batch with MCP-Protocol-Version 2025-11-25 -> HTTP 400, -32600', async () => {
  const res = await mcpPost(srv.port, s.id, [ping(1), ping(2)], { protocolVersion: '2025-11-25' });
  rpcError(res, 400, -32600);
});

test('batch with MCP-Protocol-Version 2025-06-18 -> HTTP 400, -32600', async () => {
  const sid = await initialize(srv.port, { protocolVersion: '2025-06-18' });
  const res = await mcpPost(srv.port, sid, [ping(1), ping(2)], { protocolVersion: '2025-06-18' });
  rpcError(res, 400, -32600);
});

test('batch with MCP-Protocol-Version 2025-03-26 -> 200 and responses in order', async () => {
  const sid = await initialize(srv.port, { protocolVersion: '2025-03-26' });
  const batch = [
    { jsonrpc: '2.0', id: 'b1', method: 'ping' },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 'b2', method: 'tools/list' },
    { jsonrpc: '2.0', id: 'b3', method: 'no/such/method' },
  ];
  const res = await mcpPost(srv.port, sid, batch, { protocolVersion: '2025-03-26' });
  assert.equal(res.status, 200, res.text);
  const body = res.json();
  assert.ok(Array.isArray(body), `expected an array, got ${res.text}`);
  assert.deepEqual(
    body.map((m) => m.id),
    ['b1', 'b2', 'b3'],
  );
  assert.deepEqual(body[0].result, {});
  assert.ok(Array.isArray(body[1].result.tools), res.text);
  assert.equal(body[2].error.code, -32601);
});

test('batch of only notifications (2025-03-26) -> 202, empty body', async () => {
  const sid = await initialize(srv.port, { protocolVersion: '2025-03-26' });
  const res = await mcpPost(
    srv.port,
    sid,
    [
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 12345 } },
    ],
    { protocolVersion: '2025-03-26' },
  );
  assert.equal(res.status, 202, res.text);
  assert.equal(res.body.length, 0);
});

test('empty batch (2025-03-26) -> HTTP 400, -32600', async () => {
  const sid = await initialize(srv.port, { protocolVersion: '2025-03-26' });
  const res = await mcpPost(srv.port, sid, [], { protocolVersion: '2025-03-26' });
  rpcError(res, 400, -32600);
});

test('a batch of 100 messages (2025-03-26) is answered; of 101 -> HTTP 400, -32600, nothing run', async () => {
  const sid = await initialize(srv.port, { protocolVersion: '2025-03-26' });
  const pings = (n, from) => Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: from + i, method: 'ping' }));
  let res = await mcpPost(srv.port, sid, pings(100, 1), { protocolVersion: '2025-03-26' });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json().map((m) => m.id), pings(100, 1).map((m) => m.id));
  // One more, and one that would change something: refused whole, before anything runs.
  const over = [...pings(100, 1), { jsonrpc: '2.0', id: 'sub', method: 'resources/subscribe', params: { uri: `${srv.base}/Product` } }];
  res = await mcpPost(srv.port, sid, over, { protocolVersion: '2025-03-26' });
  rpcError(res, 400, -32600);
  assert.match(res.json().error.message, /at most 100 messages/);
  assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, sid).subscriptions), []);
});

test('batch holding an initialize (2025-03-26) -> HTTP 400, -32600', async () => {
  const sid = await initialize(srv.port, { protocolVersion: '2025-03-26' });
  const batch = [
    { jsonrpc: '2.0', id: 1, method: 'ping' },
    { jsonrpc: '2.0', id: 2, method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'x', version: '1' } } },
  ];
  const res = await mcpPost(srv.port, sid, batch, { protocolVersion: '2025-03-26' });
  rpcError(res, 400, -32600);
  assert.match(res.json().error.message, /initialize cannot be batched/);
});

test('empty body -> HTTP 400, -32700', async () => {
  const res = await mcpPost(srv.port, s.id, '');
  rpcError(res, 400, -32700);
});

test('notification -> 202 with an empty body', async () => {
  const res = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', method: 'notifications/initialized' });
  assert.equal(res.status, 202, res.text);
  assert.equal(res.body.length, 0);
});

test('a JSON-RPC response from the client -> 202', async () => {
  const res = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 'client-answer-1', result: {} });
  assert.equal(res.status, 202, res.text);
  assert.equal(res.body.length, 0);
});

function nested(depth) {
  // ping whose whole message nests `depth` levels (the outer object is 1).
  return `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":${'['.repeat(depth - 2)}${']'.repeat(depth - 2)}}}`;
}

test('JSON nested 65 levels -> HTTP 400, -32700', async () => {
  const text = nested(65);
  JSON.parse(text); // the test's own input is valid JSON
  const res = await mcpPost(srv.port, s.id, text);
  rpcError(res, 400, -32700);
});

test('JSON nested 10000 levels -> HTTP 400, -32700 (no crash)', async () => {
  const res = await mcpPost(srv.port, s.id, nested(10000));
  rpcError(res, 400, -32700);
  assert.equal((await request(srv.port, { path: '/healthz' })).status, 200);
});

test('JSON nested 64 levels is accepted', async () => {
  const res = await mcpPost(srv.port, s.id, nested(64));
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json().result, {});
});

/* initialize ------------------------------------------------------------- */

for (const version of ['2025-03-26', '2025-06-18', '2025-11-25']) {
  test(`initialize ${version} -> protocolVersion ${version}`, async () => {
    const { result } = await initializeSession(srv.port, { protocolVersion: version });
    assert.equal(result.protocolVersion, version);
  });
}

test('initialize with an unsupported version -> protocolVersion 2025-11-25', async () => {
  const { result } = await initializeSession(srv.port, { protocolVersion: '2024-11-05' });
  assert.equal(result.protocolVersion, '2025-11-25');
});

test('initialize: serverInfo, capabilities, Mcp-Session-Id', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage({ id: 42 }));
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers['content-type'] || '', /^(application\/json|text\/event-stream)/);
  const body = res.json();
  assert.equal(body.id, 42);
  const r = body.result;
  assert.equal(r.serverInfo.name, 'mcpsub');
  assert.equal(typeof r.serverInfo.version, 'string');
  assert.match(r.serverInfo.version, /^\d+\.\d+\.\d+/);
  assert.equal(r.capabilities.resources.subscribe, true);
  assert.equal(r.capabilities.resources.listChanged, true);
  assert.equal(r.capabilities.tools.listChanged, false); // the tool set never changes
  for (const k of ['prompts', 'completions', 'logging']) {
    assert.equal(typeof r.capabilities[k], 'object', `capabilities.${k} in ${JSON.stringify(r.capabilities)}`);
  }
  const sid = res.headers['mcp-session-id'];
  assert.match(sid || '', /^[0-9a-f]{34}$/, `Mcp-Session-Id ${sid}`);
  await deleteSession(srv.port, sid);
});

test('two initializes give different session ids', async () => {
  const a = await initialize(srv.port);
  const b = await initialize(srv.port);
  assert.notEqual(a, b);
});

test('initialize stores an mcp_session row', async () => {
  const { sessionId } = await initializeSession(srv.port, {
    protocolVersion: '2025-06-18',
    clientInfo: { name: 'row-check-client', version: '9.9.9' },
  });
  const row = await waitFor(() => sessionRow(srv.dbPath, sessionId), { timeoutMs: 2000, message: 'mcp_session row' });
  assert.equal(row.id, sessionId);
  assert.equal(row.protocol_version, '2025-06-18');
  const info = JSON.parse(row.client_info);
  assert.equal(info.name, 'row-check-client');
});

test('30 concurrent initializes: distinct ids, all counted in /status', async () => {
  const base = (await getStatus(srv.port)).sessions;
  const ids = await Promise.all(Array.from({ length: 30 }, () => initialize(srv.port)));
  assert.equal(new Set(ids).size, 30);
  assert.equal((await getStatus(srv.port)).sessions, base + 30);
  const dels = await Promise.all(ids.map((id) => deleteSession(srv.port, id)));
  assert.deepEqual(
    dels.map((r) => r.status),
    ids.map(() => 204),
  );
  assert.equal((await getStatus(srv.port)).sessions, base);
});

/* Sessions ------------------------------------------------------------------ */

test('request without Mcp-Session-Id -> 400', async () => {
  const res = await mcpPost(srv.port, null, ping(), { protocolVersion: '2025-11-25' });
  assert.equal(res.status, 400, res.text);
});

test('unknown Mcp-Session-Id -> 404 with -32001', async () => {
  const res = await mcpPost(srv.port, UNKNOWN_SESSION, ping(9), { protocolVersion: '2025-11-25' });
  rpcError(res, 404, -32001);
});

test('malformed Mcp-Session-Id -> 400 or 404', async () => {
  const res = await mcpPost(srv.port, 'not a session id', ping(10), { protocolVersion: '2025-11-25' });
  assert.ok(res.status === 400 || res.status === 404, `HTTP ${res.status} ${res.text}`);
});

test('MCP-Protocol-Version 1999-01-01 -> 400, -32022 naming the versions spoken (POST and GET)', async () => {
  const res = await mcpPost(srv.port, s.id, ping(), { protocolVersion: '1999-01-01' });
  assert.equal(res.status, 400, res.text);
  const want = { code: -32022, message: 'Bad Request: unsupported MCP-Protocol-Version', data: { supported: ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26'], requested: '1999-01-01' } };
  assert.deepEqual(res.json().error, want);
  const get = await request(srv.port, { path: '/mcp', headers: { Accept: 'text/event-stream', 'Mcp-Session-Id': s.id, 'MCP-Protocol-Version': '1999-01-01' } });
  assert.equal(get.status, 400, get.text);
  assert.deepEqual(get.json().error, want);
});

test('missing MCP-Protocol-Version on a session request is accepted', async () => {
  const res = await mcpPost(srv.port, s.id, ping(11), { protocolVersion: null });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json(), { jsonrpc: '2.0', id: 11, result: {} });
});

test('DELETE /mcp -> 204, row removed, then 404 -32001', async () => {
  const sid = await initialize(srv.port);
  await waitFor(() => sessionRow(srv.dbPath, sid), { timeoutMs: 2000, message: 'mcp_session row' });
  const del = await deleteSession(srv.port, sid);
  assert.equal(del.status, 204, del.text);
  assert.equal(del.body.length, 0);
  assert.equal(sessionRow(srv.dbPath, sid), undefined, 'mcp_session row still present after DELETE');
  const res = await mcpPost(srv.port, sid, ping(12));
  rpcError(res, 404, -32001);
});

test('DELETE /mcp without a session -> 400', async () => {
  const res = await deleteSession(srv.port, null);
  assert.equal(res.status, 400, res.text);
});

test('DELETE /mcp with an unknown session -> 404', async () => {
  const res = await deleteSession(srv.port, UNKNOWN_SESSION);
  assert.equal(res.status, 404, res.text);
});

test('idle timeout: an idle session is evicted (row removed, then 404 -32001)', async () => {
  const sid = await initialize(idle.port);
  const early = await mcpPost(idle.port, sid, ping(13));
  assert.equal(early.status, 200, early.text);
  // Watch the row from outside (a request would keep the session alive).
  await waitFor(() => sessionRow(idle.dbPath, sid) === undefined, {
    timeoutMs: 5000,
    intervalMs: 100,
    message: 'the idle session row to be pruned',
  });
  const res = await mcpPost(idle.port, sid, ping(14));
  rpcError(res, 404, -32001);
  await waitFor(async () => (await getStatus(idle.port)).sessions === 0, { timeoutMs: 3000, message: '/status sessions 0' });
});

/* Utility methods -------------------------------------------------------------- */

test('ping -> {}', async () => {
  assert.deepEqual(await s.result('ping'), {});
});

test('logging/setLevel debug -> {}', async () => {
  assert.deepEqual(await s.result('logging/setLevel', { level: 'debug' }), {});
});

test('logging/setLevel stores the level on the session row', async () => {
  await s.result('logging/setLevel', { level: 'warning' });
  assert.equal(sessionRow(srv.dbPath, s.id).log_level, 'warning');
});

test('logging/setLevel loud -> -32602', async () => {
  const err = await s.error('logging/setLevel', { level: 'loud' });
  assert.equal(err.code, -32602);
});

test('completion/complete on the Product record template', async () => {
  const r = await s.result('completion/complete', {
    ref: { type: 'ref/resource', uri: `${srv.base}/Product/{key}` },
    argument: { name: 'key', value: 'A' },
  });
  assert.ok(Array.isArray(r.completion.values), JSON.stringify(r));
  assert.ok(r.completion.values.includes('A-100'), JSON.stringify(r));
  for (const v of r.completion.values) assert.ok(v.startsWith('A'), `completion ${v} does not start with A`);
});

test('completion/complete finds keys past the first 10,000 of a table, and says when there are more than it lists', async () => {
  const keys = Array.from({ length: 10050 }, (_, i) => `a${String(i).padStart(5, '0')}`);
  sqlite(srv.dbPath, `CREATE TABLE Big (id TEXT PRIMARY KEY);
    INSERT INTO Big (id) VALUES ${[...keys, 'zz-target'].map((k) => `('${k}')`).join(', ')};`);
  const complete = (value) => s.result('completion/complete', {
    ref: { type: 'ref/resource', uri: `${srv.base}/Big/{key}` }, argument: { name: 'key', value },
  });
  await waitFor(async () => (await s.result('resources/list', {})).resources.some((r) => r.uri === `${srv.base}/Big`),
    { message: 'the new table' });
  assert.deepEqual((await complete('zz')).completion.values, ['zz-target']);
  assert.deepEqual((await complete('a1004')).completion.values, keys.slice(10040));
  const many = (await complete('a0')).completion;
  assert.equal(many.values.length, 100);
  assert.equal(many.hasMore, true);
  assert.deepEqual(many.values, keys.slice(0, 100));
});

test('completion/complete of {table} in the generic template', async () => {
  const r = await s.result('completion/complete', {
    ref: { type: 'ref/resource', uri: `${srv.base}/{table}/{key}` },
    argument: { name: 'table', value: 'Pro' },
  });
  assert.deepEqual(r.completion.values, ['Product']);
});

/* Origin and Host ------------------------------------------------------------------ */

test('Origin http://evil.example -> 403', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Origin: 'http://evil.example' } });
  assert.equal(res.status, 403, res.text);
  assert.equal(res.headers['mcp-session-id'], undefined);
});

test('Origin http://evil.example on a session request -> 403', async () => {
  const res = await mcpPost(srv.port, s.id, ping(), { headers: { Origin: 'http://evil.example' } });
  assert.equal(res.status, 403, res.text);
});

test('Origin http://localhost:<port> is allowed', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Origin: `http://localhost:${srv.port}` } });
  assert.equal(res.status, 200, res.text);
  await deleteSession(srv.port, res.headers['mcp-session-id']);
});

test('Host: evil.example -> 403', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Host: 'evil.example' } });
  assert.equal(res.status, 403, res.text);
});

test('Host: localhost:<port> is allowed', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Host: `localhost:${srv.port}` } });
  assert.equal(res.status, 200, res.text);
  await deleteSession(srv.port, res.headers['mcp-session-id']);
});

test('--allowed-origins http://app.example allows that Origin', async () => {
  const res = await mcpPost(srv.port, null, initializeMessage(), { headers: { Origin: 'http://app.example' } });
  assert.equal(res.status, 200, res.text);
  await deleteSession(srv.port, res.headers['mcp-session-id']);
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await Promise.all([srv.stop(), idle.stop()]);
});
