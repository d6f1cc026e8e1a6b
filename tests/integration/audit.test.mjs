// The audit log and resource versions: a write by another process (the
// sqlite3 CLI) is recorded by the triggers mcpsubd installed and shows in
// the next read with a new version; writes through REST and tools are
// recorded too.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from './lib/server.mjs';
import { request } from './lib/raw.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sqlite, sqliteRows, q } from './lib/sqlite.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

let srv;
let s;

before(async () => {
  srv = await startServer();
  s = await McpSession.open(srv.port);
});

after(async () => {
  await srv?.kill();
});

function lastAudit(tbl, key) {
  return sqliteRows(srv.dbPath, `SELECT * FROM audit_log WHERE tbl = ${q(tbl)} AND key = ${q(key)} ORDER BY seq DESC LIMIT 1`)[0];
}

test('an external sqlite3 UPDATE lands in audit_log and in the next read, with a new version', async () => {
  const uri = `${srv.base}/Product/A-100`;
  const first = await s.readJson(uri);
  assert.equal(first.value.price_cents, 4999);
  const v0 = first.content._meta?.version;
  assert.equal(typeof v0, 'string');

  sqlite(srv.dbPath, "UPDATE Product SET price_cents = 1 WHERE sku = 'A-100'");

  const row = lastAudit('Product', 'A-100');
  assert.ok(row, 'no audit_log row for Product A-100');
  assert.equal(row.op, 'UPDATE');
  assert.equal(JSON.parse(row.old_row).price_cents, 4999);
  assert.equal(JSON.parse(row.new_row).price_cents, 1);
  assert.equal(JSON.parse(row.new_row).sku, 'A-100');
  assert.equal(typeof row.committed_at, 'number');

  const afterRead = await s.readJson(uri);
  assert.equal(afterRead.value.price_cents, 1);
  const v1 = afterRead.content._meta?.version;
  assert.equal(typeof v1, 'string');
  assert.notEqual(v1, v0, 'version unchanged after an external write');
  assert.equal(afterRead.result._meta?.version, v1);
});

test('the collection version moves with a change to one of its rows', async () => {
  const c0 = (await s.readJson(`${srv.base}/Product`)).content._meta?.version;
  assert.equal(typeof c0, 'string');
  sqlite(srv.dbPath, "UPDATE Product SET in_stock = 0 WHERE sku = 'B-200'");
  const c1 = (await s.readJson(`${srv.base}/Product`)).content._meta?.version;
  assert.notEqual(c1, c0);
});

test('external INSERT and DELETE are audited', async () => {
  sqlite(srv.dbPath, "INSERT INTO Product (sku, name) VALUES ('EXT-1', 'External')");
  const ins = lastAudit('Product', 'EXT-1');
  assert.equal(ins.op, 'INSERT');
  assert.equal(ins.old_row, null);
  assert.equal(JSON.parse(ins.new_row).name, 'External');
  sqlite(srv.dbPath, "DELETE FROM Product WHERE sku = 'EXT-1'");
  const del = lastAudit('Product', 'EXT-1');
  assert.equal(del.op, 'DELETE');
  assert.equal(del.new_row, null);
  assert.equal(JSON.parse(del.old_row).sku, 'EXT-1');
  assert.ok(del.seq > ins.seq);
});

test('REST writes land in audit_log', async () => {
  const put = await request(srv.port, {
    method: 'PUT',
    path: '/Product/R-1',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ name: 'Rest' }),
  });
  assert.equal(put.status, 201, put.text);
  const row = lastAudit('Product', 'R-1');
  assert.ok(row, 'no audit row for a REST PUT');
  assert.equal(row.op, 'INSERT');
  assert.equal(JSON.parse(row.new_row).name, 'Rest');
});

test('tool writes land in audit_log', async () => {
  await s.toolOk('put_record', { table: 'Product', key: 'T-1', record: { name: 'Tool' } });
  const ins = lastAudit('Product', 'T-1');
  assert.ok(ins, 'no audit row for put_record');
  assert.equal(JSON.parse(ins.new_row).name, 'Tool');
  await s.toolOk('delete_record', { table: 'Product', key: 'T-1' });
  const del = lastAudit('Product', 'T-1');
  assert.equal(del.op, 'DELETE');
  assert.ok(del.seq > ins.seq);
});

test('retention goes through a long log in steps: the prunable rows go, the newest changes stay, one sweep line says how many', async () => {
  const first = await startServer(); // makes the database and its triggers
  await first.stop({ keepDir: true });
  // 2,500 rows inserted, then each changed, by another process: the inserts are prunable.
  sqlite(first.dbPath, `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2500)
    INSERT INTO Product (sku, name, price_cents) SELECT 'T-' || i, 'retained', i FROM c`);
  sqlite(first.dbPath, "UPDATE Product SET price_cents = price_cents + 1 WHERE sku LIKE 'T-%'");
  const count = (op) => Number(sqliteRows(first.dbPath,
    `SELECT count(*) AS n FROM audit_log WHERE key LIKE 'T-%' AND op = ${q(op)}`)[0].n);
  assert.deepEqual([count('INSERT'), count('UPDATE')], [2500, 2500]);
  const server = await startServer({ db: first.dbPath, ownDirs: first.ownDirs,
    args: ['--audit-retain-rows', '10', '--idle-timeout', '2', '--log-level', 'info'] });
  try {
    await waitFor(() => count('INSERT') === 0, { timeoutMs: 15000, message: 'the inserts pruned' });
    assert.equal(count('UPDATE'), 2500, 'each row keeps its newest change (its version)');
    await sleep(300);
    const sweeps = server.stderr().split('\n').filter((l) => l.includes('"msg":"sweep"'));
    assert.equal(sweeps.length, 1, sweeps.join('\n'));
    assert.ok(Number(JSON.parse(sweeps[0]).audit_rows) >= 2500, sweeps[0]);
    const r = await request(server.port, { path: '/Product/T-7', headers: { Accept: 'application/json' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json().price_cents, 8);
  } finally {
    await server.stop();
  }
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await srv.stop();
});
