// Another process holds the database's write lock (the sqlite3 CLI in
// BEGIN IMMEDIATE, as a backup or a batch job would): reads, the health
// check, MCP reads and open streams keep answering at once, on every
// worker; the writes that arrive meanwhile wait off the loop, then succeed
// in the order they came, and subscribers hear of them and of the other
// process's commit, each once. A write that waits past --write-timeout
// fails with 503 and Retry-After and changes nothing. A subscribe or an
// unsubscribe whose row cannot be written meanwhile is written again once
// the database takes writes: a restart restores what the session held,
// not what the failed write left. A session ended meanwhile (DELETE, or
// evicted on the control socket) is not restored from its row while the
// row waits to be deleted, and both answer once it is.

import test, { after } from 'node:test';
import assert from 'node:assert/strict';

import { controlCall, startServer } from './lib/server.mjs';
import { holdLock } from './lib/lock.mjs';
import { McpSession } from './lib/mcp.mjs';
import { initializeMessage, mcpPost, request } from './lib/raw.mjs';
import { sqliteRows } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { product, rest, restartServer } from './lib/subs.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

const servers = [];
after(async () => {
  for (const s of servers) await s.kill();
});

async function timed(fn) {
  const t0 = Date.now();
  const value = await fn();
  return { value, ms: Date.now() - t0 };
}

const json = { 'Content-Type': 'application/json' };

test('a lock held by another process: reads, health and streams stay fast; queued writes then succeed in order', async () => {
  const srv = await startServer({ args: ['--workers', '2', '--sse-keepalive', '1', '--write-timeout', '20000'] });
  servers.push(srv);
  const s = await McpSession.open(srv.port);
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Product` }), {});
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/StockEvent` }), {});
  const st = await EventStream.open(srv.port, s.id);
  await st.waitPrimed();

  const HOLD = 3000;
  const lock = holdLock(srv.dbPath, HOLD, "INSERT INTO StockEvent (id, sku, delta) VALUES (9001, 'A-100', 1);");
  await lock.locked;
  const t0 = Date.now();
  // Writes arrive while the lock is held, in a known order (each sent before the next):
  // through the session, so on its worker's writer, whose queue keeps their order; and
  // REST writes on fresh connections, which land on either worker.
  const calls = [];
  for (let i = 0; i < 5; i++) {
    calls.push(s.call('tools/call', { name: 'put_record', arguments: { table: 'Product', key: `L-${i}`, record: product(`L-${i}`) } }));
    await sleep(30);
  }
  const writes = [];
  for (let i = 0; i < 3; i++) {
    writes.push(request(srv.port, { method: 'PUT', path: `/Product/R-${i}`, headers: json, body: JSON.stringify(product(`R-${i}`)), timeoutMs: 30000 }));
  }
  // Meanwhile, on both workers (fresh connections land on either): reads and health at once.
  for (let i = 0; i < 4; i++) {
    const r = await timed(() => request(srv.port, { path: '/Product/A-100' }));
    assert.equal(r.value.status, 200);
    assert.ok(r.ms < 1000, `GET took ${r.ms} ms under the lock`);
    const h = await timed(() => request(srv.port, { path: '/healthz' }));
    assert.equal(h.value.status, 200);
    assert.ok(h.ms < 1000, `/healthz took ${h.ms} ms under the lock`);
  }
  const read = await timed(() => s.result('resources/read', { uri: `${srv.base}/Product/B-200` }));
  assert.ok(read.ms < 1000, `resources/read took ${read.ms} ms under the lock`);
  // The stream is alive: keepalives keep coming while the lock is held.
  const kept = st.comments.length;
  await sleep(1500);
  assert.ok(st.comments.length > kept, 'keepalives stopped while the lock was held');
  assert.ok(Date.now() - t0 < HOLD, 'all of this happened while the lock was held');

  await lock.done;
  const answers = await Promise.all(writes);
  for (const a of answers) assert.equal(a.status, 201, a.text);
  for (const c of await Promise.all(calls)) assert.ok(!c.result.isError, JSON.stringify(c));
  assert.ok(Date.now() - t0 >= HOLD - 200, 'the writes waited for the lock');
  // The session's writes in the order they came.
  const seqs = sqliteRows(srv.dbPath, "SELECT key, seq FROM audit_log WHERE tbl = 'Product' AND key LIKE 'L-%' ORDER BY seq").map((r) => r.key);
  assert.deepEqual(seqs, ['L-0', 'L-1', 'L-2', 'L-3', 'L-4']);
  // Subscribers hear of every one of them, and of the other process's commit, once each.
  const want = [
    ...[0, 1, 2, 3, 4].map((i) => `${srv.base}/Product/L-${i}`),
    ...[0, 1, 2].map((i) => `${srv.base}/Product/R-${i}`),
    `${srv.base}/StockEvent/9001`,
  ];
  await st.waitUntil((x) => want.every((u) => x.updates().some((e) => e.json.params.uri === u)), { timeoutMs: 5000, what: 'every change' });
  const uris = st.updates().map((e) => e.json.params.uri);
  for (const u of want) assert.equal(uris.filter((x) => x === u).length, 1, `${u}: ${st.describe()}`);
  st.close();
  await s.delete();
  await srv.stop();
});

test('a write that waits past --write-timeout fails with 503 and Retry-After, and changes nothing', async () => {
  const srv = await startServer({ args: ['--workers', '0', '--write-timeout', '300'] });
  servers.push(srv);
  const s = await McpSession.open(srv.port);
  const lock = holdLock(srv.dbPath, 1500, 'SELECT 1;');
  await lock.locked;
  const res = await request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: json, body: '{"price_cents": 1}', timeoutMs: 10000 });
  assert.equal(res.status, 503, res.text);
  assert.equal(res.headers['retry-after'], '1');
  // A new session needs its row: it is refused too, rather than half made.
  const init = await mcpPost(srv.port, null, initializeMessage());
  assert.equal(init.json().error?.code, -32603, init.text);
  assert.equal(init.headers['mcp-session-id'], undefined);
  const t = await s.result('tools/call', { name: 'delete_record', arguments: { table: 'Product', key: 'A-100' } });
  assert.equal(t.isError, true);
  assert.match(t.content[0].text, /busy/);
  await lock.done;
  const row = await request(srv.port, { path: '/Product/A-100' });
  assert.equal(row.status, 200, 'the record is still there');
  assert.notEqual(row.json().price_cents, 1);
  // And once the lock is gone, writes go through again.
  assert.equal((await request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: json, body: '{"price_cents": 2}' })).status, 200);
  await s.delete();
  await srv.stop();
});

test('a session ended while its row cannot be deleted is not restored meanwhile; DELETE and evict answer once it is gone', async () => {
  const srv = await startServer({ args: ['--workers', '0', '--write-timeout', '20000'] });
  servers.push(srv);
  const deleted = await McpSession.open(srv.port);
  const evicted = await McpSession.open(srv.port);
  const lock = holdLock(srv.dbPath, 1500, 'SELECT 1;');
  await lock.locked;
  // Both sessions end here at once; their rows wait for the lock.
  const del = deleted.delete();
  const evict = controlCall(srv, { cmd: 'evict', id: evicted.id });
  await sleep(200);
  for (const s of [deleted, evicted]) {
    const ping = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 1, method: 'ping' });
    assert.equal(ping.status, 404, `ended, though its row is still there: ${ping.text}`);
  }
  assert.equal((await sqliteRows(srv.dbPath, 'SELECT id FROM mcp_session ORDER BY id')).length, 2);
  await lock.done;
  assert.equal((await del).status, 204);
  assert.deepEqual(await evict, { ok: true, evicted: true });
  // Answered once the rows were gone: nothing is left to restore.
  assert.deepEqual(await sqliteRows(srv.dbPath, 'SELECT id FROM mcp_session'), []);
  for (const s of [deleted, evicted])
    assert.equal((await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 2, method: 'ping' })).status, 404);
  await srv.stop();
});

test('subscription rows that could not be written are written again once the lock is gone', async () => {
  let srv = await startServer({ args: ['--workers', '0', '--write-timeout', '300'] });
  servers.push(srv);
  const B = srv.base;
  const [a, b, c] = [`${B}/Product/A-100`, `${B}/Product/B-200`, `${B}/StockEvent`];
  const s = await McpSession.open(srv.port);
  for (const uri of [a, b]) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
  const rows = () => sqliteRows(srv.dbPath, `SELECT uri FROM mcpsub_subscription WHERE session = '${s.id}' ORDER BY uri`).map((r) => r.uri);
  assert.deepEqual(rows(), [a, b]);

  const lock = holdLock(srv.dbPath, 1500, 'SELECT 1;');
  await lock.locked;
  // Answered (the live session holds the change) though neither row could be written.
  assert.deepEqual(await s.result('resources/unsubscribe', { uri: a }), {});
  assert.deepEqual(await s.result('resources/subscribe', { uri: c }), {});
  assert.deepEqual(rows(), [a, b], 'the writes failed under the lock');
  await lock.done;
  await waitFor(() => JSON.stringify(rows()) === JSON.stringify([b, c]), { timeoutMs: 10000, message: `the rows to be [B, C]: ${rows()}` });

  // A restart restores the session from its rows: C is heard of, A is not.
  servers.pop();
  srv = await restartServer(srv);
  servers.push(srv);
  const st = await EventStream.open(srv.port, s.id);
  await st.waitPrimed();
  await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 3 });
  await rest(srv.port, 'POST', '/StockEvent', { id: 9100, sku: 'A-100', delta: 2 });
  await st.waitUntil((x) => x.updates().some((e) => e.json.params.uri === `${B}/StockEvent/9100`), { what: 'the StockEvent update' });
  await sleep(200);
  assert.deepEqual(st.updates().map((e) => e.json.params.uri), [`${B}/StockEvent/9100`], st.describe());
  st.close();
  await s.delete();
  await srv.stop();
});
