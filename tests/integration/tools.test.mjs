// tools/list and tools/call of list_tables, get_record, query_records,
// put_record and delete_record: results, tool errors (isError) and
// JSON-RPC errors for calls that are malformed.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sqliteRows } from './lib/sqlite.mjs';

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

test('shutdown: SIGTERM -> exit code 0', async () => {
  await srv.stop();
});
