// tools/list and tools/call of list_tables, get_record, query_records,
// put_record and delete_record: results, tool errors (isError) and
// JSON-RPC errors for calls that are malformed.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sqliteRows } from './lib/sqlite.mjs';
import { mcpPost, parseSse } from './lib/raw.mjs';
import { EventStream } from './lib/sse.mjs';
import { modern, post } from './lib/modern.mjs';
import { waitFor } from './lib/wait.mjs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const TOOLS = ['list_tables', 'get_record', 'query_records', 'put_record', 'delete_record'];
const ANVIL = { sku: 'A-100', name: 'Anvil', price_cents: 4999, category: 'tools', in_stock: 1 };

let srv;
let s;

before(async () => {
  srv = await startServer();
  s = await McpSession.open(srv.port);
});

after(async () => {
  await srv?.kill();
});

test('tools/list has the five tools, each with an object inputSchema', async () => {
  const r = await s.result('tools/list', {});
  assert.ok(Array.isArray(r.tools), JSON.stringify(r));
  const byName = new Map(r.tools.map((t) => [t.name, t]));
  for (const name of TOOLS) {
    const t = byName.get(name);
    assert.ok(t, `tool ${name} missing from ${JSON.stringify([...byName.keys()])}`);
    assert.equal(t.inputSchema?.type, 'object', `${name}.inputSchema: ${JSON.stringify(t.inputSchema)}`);
  }
});

test('list_tables -> Product (key sku) and StockEvent', async () => {
  const tables = await s.toolOk('list_tables', {});
  assert.ok(Array.isArray(tables), JSON.stringify(tables));
  const find = (n) => tables.find((t) => t.name === n);
  assert.ok(find('Product'), JSON.stringify(tables));
  assert.equal(find('Product').key, 'sku', JSON.stringify(find('Product')));
  assert.ok(find('StockEvent'), JSON.stringify(tables));
  for (const t of tables) {
    assert.ok(!/^(audit_log|mcp_session|mcpsub_|sqlite_)/.test(t.name), `system table exported: ${t.name}`);
  }
});

test('get_record -> the row', async () => {
  assert.deepEqual(await s.toolOk('get_record', { table: 'Product', key: 'A-100' }), ANVIL);
});

test('get_record of an unknown key -> isError', async () => {
  const r = await s.tool('get_record', { table: 'Product', key: 'NOPE' });
  assert.equal(r.isError, true, r.text);
});

test('query_records with where and limit pages with a cursor', async () => {
  const first = await s.toolOk('query_records', { table: 'Product', where: { category: 'tools' }, limit: 1 });
  assert.ok(Array.isArray(first.rows), JSON.stringify(first));
  assert.equal(first.rows.length, 1, JSON.stringify(first));
  assert.equal(typeof first.nextCursor, 'string', JSON.stringify(first));
  const second = await s.toolOk('query_records', { table: 'Product', where: { category: 'tools' }, limit: 1, cursor: first.nextCursor });
  assert.equal(second.rows.length, 1, JSON.stringify(second));
  assert.equal(second.nextCursor ?? undefined, undefined, JSON.stringify(second));
  assert.deepEqual([first.rows[0].sku, second.rows[0].sku].sort(), ['A-100', 'C-300']);
});

test('query_records without where -> every row', async () => {
  const r = await s.toolOk('query_records', { table: 'StockEvent' });
  assert.deepEqual(
    r.rows.map((x) => x.id),
    [1, 2, 3],
  );
});

test('put_record writes the row and applies column defaults', async () => {
  await s.toolOk('put_record', { table: 'Product', key: 'Z-1', record: { name: 'Zip', price_cents: 5 } });
  assert.deepEqual(await s.toolOk('get_record', { table: 'Product', key: 'Z-1' }), {
    sku: 'Z-1',
    name: 'Zip',
    price_cents: 5,
    category: null,
    in_stock: 1,
  });
  const rows = sqliteRows(srv.dbPath, "SELECT name, price_cents, in_stock FROM Product WHERE sku = 'Z-1'");
  assert.deepEqual(rows, [{ name: 'Zip', price_cents: 5, in_stock: 1 }]);
});

test('put_record violating NOT NULL -> isError with the constraint message', async () => {
  const r = await s.tool('put_record', { table: 'Product', key: 'Z-2', record: { price_cents: 5 } });
  assert.equal(r.isError, true, r.text);
  assert.match(r.text, /NOT NULL|not-null/i);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku = 'Z-2'"), []);
});

test('put_record whose record key differs from key -> isError, nothing written', async () => {
  const r = await s.tool('put_record', { table: 'Product', key: 'K-1', record: { sku: 'K-2', name: 'Mismatch' } });
  assert.equal(r.isError, true, r.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku IN ('K-1', 'K-2')"), []);
});

test('put_record replaces an existing row', async () => {
  await s.toolOk('put_record', { table: 'Product', key: 'R-1', record: { name: 'First', category: 'x' } });
  await s.toolOk('put_record', { table: 'Product', key: 'R-1', record: { name: 'Second' } });
  assert.deepEqual(await s.toolOk('get_record', { table: 'Product', key: 'R-1' }), {
    sku: 'R-1',
    name: 'Second',
    price_cents: 0,
    category: null,
    in_stock: 1,
  });
});

test('delete_record -> ok, then get_record isError', async () => {
  await s.toolOk('put_record', { table: 'Product', key: 'DEL-1', record: { name: 'Doomed' } });
  const r = await s.tool('delete_record', { table: 'Product', key: 'DEL-1' });
  assert.equal(r.isError, false, r.text);
  const gone = await s.tool('get_record', { table: 'Product', key: 'DEL-1' });
  assert.equal(gone.isError, true, gone.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku = 'DEL-1'"), []);
});

test('unknown table -> isError', async () => {
  const r = await s.tool('get_record', { table: 'NoSuchTable', key: '1' });
  assert.equal(r.isError, true, r.text);
});

test('get_record without key -> JSON-RPC -32602', async () => {
  const err = await s.error('tools/call', { name: 'get_record', arguments: { table: 'Product' } });
  assert.equal(err.code, -32602);
});

test('get_record with a non-string table -> JSON-RPC -32602', async () => {
  const err = await s.error('tools/call', { name: 'get_record', arguments: { table: 5, key: 'A-100' } });
  assert.equal(err.code, -32602);
});

test('unknown tool -> JSON-RPC -32602', async () => {
  const err = await s.error('tools/call', { name: 'no_such_tool', arguments: {} });
  assert.equal(err.code, -32602);
});

const skusWhere = (where) => sqliteRows(srv.dbPath, `SELECT sku FROM Product WHERE ${where} ORDER BY sku`).map((r) => r.sku);

/* Three rows of category cat, PR-<cat>-1..3, written through put_record. */
async function addRows(cat) {
  for (let i = 1; i <= 3; i++) {
    const sku = `PR-${cat}-${i}`;
    const r = await s.tool('put_record', { table: 'Product', key: sku, record: { sku, name: sku, price_cents: 10, category: cat } });
    assert.equal(r.isError, false, r.text);
  }
}

/* The JSON-RPC messages of an SSE answer, in order. */
const sseMessages = (res) =>
  parseSse(res.text)
    .events.filter((e) => e.data !== undefined)
    .map((e) => JSON.parse(e.data));

/* A 2025 tools/call POSTed raw on session s; returns the HTTP response. */
function rawCall(session, name, args, meta) {
  const params = { name, arguments: args };
  if (meta) params._meta = meta;
  return mcpPost(srv.port, session.id, { jsonrpc: '2.0', id: 4242, method: 'tools/call', params });
}

test('put_records with a progress token (the official SDK): progress arrives on the call stream before the result, then the rows are written', async () => {
  const client = new Client({ name: 'bulk-progress', version: '1.0.0' }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(srv.url));
  await client.connect(transport);
  const wire = []; // every message the SDK receives, in arrival order
  const deliver = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    wire.push(msg);
    deliver?.(msg, extra);
  };
  try {
    await addRows('progress');
    const got = [];
    const result = await client.callTool({ name: 'put_records', arguments: { table: 'Product', filter: 'category=progress', set: { price_cents: 77 } } }, undefined, {
      onprogress: (p) => got.push(p),
      timeout: 10000,
    });
    assert.deepEqual(JSON.parse(result.content[0].text), { updated: 3 });
    assert.deepEqual(
      got.map((p) => [p.progress, p.total]),
      [
        [0, 3],
        [3, 3],
      ],
      JSON.stringify(got),
    );
    // On the wire: both notifications/progress came before the response.
    const callIdx = wire.findIndex((m) => m.id !== undefined && m.result?.content);
    const progressIdx = wire.map((m, i) => (m.method === 'notifications/progress' ? i : -1)).filter((i) => i >= 0);
    assert.equal(progressIdx.length, 2, JSON.stringify(wire));
    assert.ok(progressIdx.every((i) => i < callIdx), `progress after the result: ${JSON.stringify(wire.map((m) => m.method ?? 'result'))}`);
    assert.deepEqual(sqliteRows(srv.dbPath, "SELECT DISTINCT price_cents FROM Product WHERE category = 'progress'"), [{ price_cents: 77 }]);
    // Without a token: a plain application/json answer, no progress.
    const plain = await rawCall(s, 'put_records', { table: 'Product', filter: 'category=progress', set: { price_cents: 78 } });
    assert.equal(plain.status, 200);
    assert.match(plain.headers['content-type'], /^application\/json/);
    assert.deepEqual(JSON.parse(plain.json().result.content[0].text), { updated: 3 });
  } finally {
    await client.close();
  }
});

test('logging/setLevel: a bulk write\'s info log record goes on its call stream at info, not at warning (and never to the GET stream)', async () => {
  const session = await McpSession.open(srv.port);
  const get = await EventStream.open(srv.port, session.id);
  await addRows('levels');
  try {
    await get.waitPrimed();
    const logs = (msgs) => msgs.filter((m) => m.method === 'notifications/message');
    // Above info: the record is suppressed; the stream still has the progress and the result.
    await session.result('logging/setLevel', { level: 'warning' });
    let res = await rawCall(session, 'put_records', { table: 'Product', filter: 'category=levels', set: { in_stock: 0 } }, { progressToken: 'lv-1' });
    assert.match(res.headers['content-type'], /^text\/event-stream/);
    let msgs = sseMessages(res);
    assert.deepEqual(msgs.map((m) => m.method ?? 'result'), ['notifications/progress', 'notifications/progress', 'result'], res.text);
    assert.deepEqual(logs(msgs), []);
    // At info: the record is there, before the result.
    await session.result('logging/setLevel', { level: 'info' });
    res = await rawCall(session, 'put_records', { table: 'Product', filter: 'category=levels', set: { in_stock: 1 } }, { progressToken: 'lv-2' });
    msgs = sseMessages(res);
    assert.deepEqual(msgs.map((m) => m.method ?? 'result'), ['notifications/progress', 'notifications/progress', 'notifications/message', 'result'], res.text);
    assert.equal(logs(msgs)[0].params.level, 'info');
    assert.match(logs(msgs)[0].params.data, /updated 3 rows of Product/);
    // debug is below info: it lets the record through too.
    await session.result('logging/setLevel', { level: 'debug' });
    res = await rawCall(session, 'put_records', { table: 'Product', filter: 'category=levels', set: { in_stock: 0 } }, { progressToken: 'lv-3' });
    assert.equal(logs(sseMessages(res)).length, 1, res.text);
    // The records went on the call streams only: the GET stream has none of them
    // (a later ping's debug record on it shows it is read up to here).
    await session.result('ping');
    await get.waitUntil(() => get.messages('notifications/message').some((m) => /ping/.test(JSON.stringify(m))), { what: 'the ping debug record' });
    assert.equal(get.messages('notifications/message').filter((m) => /rows of Product/.test(JSON.stringify(m))).length, 0, get.describe());
  } finally {
    get.close();
    await session.delete();
  }
});

test('2026-07-28: a stateless put_records logs on its stream only at or above the request\'s _meta logLevel, and not at all without one', async () => {
  const call = (logLevel, token) => {
    const msg = modern('tools/call', { name: 'put_records', arguments: { table: 'Product', filter: 'category=modern', set: { price_cents: 90 } } });
    msg.params._meta.progressToken = token;
    if (logLevel) msg.params._meta['io.modelcontextprotocol/logLevel'] = logLevel;
    return post(srv.port, msg, { 'Mcp-Name': 'put_records' });
  };
  await addRows('modern');
  const logs = (res) => sseMessages(res).filter((m) => m.method === 'notifications/message');
  let res = await call('info', 'm-1');
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers['content-type'], /^text\/event-stream/, res.text);
  assert.equal(logs(res).length, 1, res.text);
  assert.match(logs(res)[0].params.data, /updated 3 rows of Product/);
  assert.ok(sseMessages(res).at(-1).result, 'the result comes last');
  res = await call('debug', 'm-2');
  assert.equal(logs(res).length, 1, res.text);
  res = await call('error', 'm-3');
  assert.deepEqual(logs(res), [], res.text);
  assert.ok(sseMessages(res).at(-1).result, res.text);
  res = await call(undefined, 'm-4');
  assert.deepEqual(logs(res), [], res.text);
  assert.deepEqual(skusWhere("category = 'modern' AND price_cents = 90"), ['PR-modern-1', 'PR-modern-2', 'PR-modern-3']);
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await srv.stop();
});
