// Reads on PostgreSQL (resources/read, REST GET, the tools get_record,
// query_records and list_tables, completion/complete) run on the worker's
// reader connections (--db-readers), off the store lane: a read that waits
// (here for a lock another session holds on its table, as a migration would) holds up no other request of
// its worker — reads of other tables, initialize, subscribe, writes — and
// it is answered once the lock goes. With every reader busy, further reads
// queue behind them while the rest of the worker goes on. With
// --db-readers 0 reads take turns on the lane, whose connection does not
// wait for a lock: the same read is refused at once (503). PostgreSQL only
// (the integration-pg suite runs it); SQLite reads a local file on the loop
// (the loop's reader, reader.h: resources.test.mjs checks what its reads see).

import test, { after } from 'node:test';
import assert from 'node:assert/strict';

import { McpSession } from './lib/mcp.mjs';
import { PG_MODE, dbTarget, pgHoldLock, psql } from './lib/pg.mjs';
import { request } from './lib/raw.mjs';
import { startServer } from './lib/server.mjs';
import { waitFor } from './lib/wait.mjs';

const servers = [];
after(async () => {
  for (const s of servers) await s.kill();
});

const HOLD_MS = 2500;

/* Resolves to { value, ms } once p settles, ms counted from now. */
function timed(p) {
  const t0 = Date.now();
  return p.then((value) => ({ value, ms: Date.now() - t0 }));
}

/* Holds Product locked (ACCESS EXCLUSIVE: even a SELECT waits) for HOLD_MS. */
async function lockProduct(srv) {
  const hold = pgHoldLock(dbTarget(srv.dbPath), 'LOCK TABLE "Product" IN ACCESS EXCLUSIVE MODE', HOLD_MS);
  await hold.locked;
  let released = false;
  hold.done.then(() => (released = true));
  return { done: hold.done, released: () => released };
}

test('a read waiting for a lock holds up no other request of its worker, and is answered after', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  // Six reads will wait: more readers than that, so that the others find one free.
  const srv = await startServer({ args: ['--workers', '1', '--db-readers', '8'] });
  servers.push(srv);
  const s = await McpSession.open(srv.port);
  const lock = await lockProduct(srv);

  // Reads of the locked table: each waits on a reader for the lock.
  const restRecord = timed(request(srv.port, { path: '/Product/A-100', timeoutMs: 15000 }));
  const mcpCollection = timed(s.call('resources/read', { uri: `${srv.base}/Product` }));
  // The tools' reads too: a record, a query, and list_tables' row counts.
  const tool = (name, args) => timed(s.call('tools/call', { name, arguments: args }));
  const getRecord = tool('get_record', { table: 'Product', key: 'A-100' });
  const query = tool('query_records', { table: 'Product', where: { sku: 'A-100' }, filter: "price_cents=gt=0" });
  const tables = tool('list_tables', {});
  const complete = timed(s.call('completion/complete', {
    ref: { type: 'ref/resource', uri: `${srv.base}/Product/{key}` }, argument: { name: 'key', value: 'A' },
  }));

  // Meanwhile everything else of the same worker is answered at once.
  const other = await request(srv.port, { path: '/StockEvent', timeoutMs: 2000 });
  assert.equal(other.status, 200, other.text);
  const s2 = await McpSession.open(srv.port);
  assert.ok(Array.isArray((await s2.readJson(`${srv.base}/StockEvent`)).value));
  assert.deepEqual(await s2.result('resources/subscribe', { uri: `${srv.base}/StockEvent` }), {});
  const put = await request(srv.port, {
    method: 'PUT',
    path: '/StockEvent/9001',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ sku: 'A-100', delta: 1 }),
    timeoutMs: 2000,
  });
  assert.ok(put.status === 201 || put.status === 200, put.text);
  const metrics = (await request(srv.port, { path: '/metrics', timeoutMs: 2000 })).text;
  assert.match(metrics, /mcpsub_db_reads_pending\{worker="0"\} 6\n/);
  assert.equal(lock.released(), false, 'all of this happened while the lock was held');

  // Once the lock goes, the waiting reads are answered, and right.
  const [a, b] = await Promise.all([restRecord, mcpCollection]);
  assert.equal(a.value.status, 200, a.value.text);
  assert.equal(JSON.parse(a.value.text).sku, 'A-100');
  assert.ok(a.ms >= HOLD_MS / 2, `the record read waited for the lock (${a.ms} ms)`);
  assert.ok(b.value.result, JSON.stringify(b.value));
  const rows = JSON.parse(b.value.result.contents[0].text);
  assert.ok(rows.some((r) => r.sku === 'A-100'), b.value.result.contents[0].text);
  assert.ok(b.ms >= HOLD_MS / 2, `the collection read waited for the lock (${b.ms} ms)`);
  const toolJson = (r) => {
    assert.ok(r.value.result && !r.value.result.isError, JSON.stringify(r.value));
    assert.ok(r.ms >= HOLD_MS / 2, `the tool waited for the lock (${r.ms} ms)`);
    return JSON.parse(r.value.result.content[0].text);
  };
  assert.equal(toolJson(await getRecord).sku, 'A-100');
  assert.deepEqual(toolJson(await query).rows.map((r) => r.sku), ['A-100']);
  const listed = toolJson(await tables);
  const product = listed.find((t) => t.name === 'Product');
  assert.equal(product.rows, rows.length, JSON.stringify(product));
  assert.ok(listed.find((t) => t.name === 'StockEvent').rows >= 1);
  const completed = await complete;
  assert.deepEqual(completed.value.result?.completion.values, ['A-100'], JSON.stringify(completed.value));
  assert.ok(completed.ms >= HOLD_MS / 2, `the completion waited for the lock (${completed.ms} ms)`);
  await lock.done;
  await s.delete();
  await s2.delete();
  await srv.stop();
});

test('with its one reader busy, reads queue and the rest of the worker goes on', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  const srv = await startServer({ args: ['--workers', '1', '--db-readers', '1'] });
  servers.push(srv);
  const lock = await lockProduct(srv);
  const locked = timed(request(srv.port, { path: '/Product/A-100', timeoutMs: 15000 }));
  await waitFor(async () => /mcpsub_db_reads_pending\{worker="0"\} 1\n/.test((await request(srv.port, { path: '/metrics' })).text), {
    timeoutMs: 2000,
    message: 'the read of the locked table on the reader',
  });
  const queued = timed(request(srv.port, { path: '/StockEvent', timeoutMs: 15000 }));
  // Not reads: the lane serves them while the reader waits.
  const s = await McpSession.open(srv.port);
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Product/B-200` }), {});
  assert.equal(lock.released(), false, 'the session and its subscription while the reader waited');
  const [a, q] = await Promise.all([locked, queued]);
  assert.equal(a.value.status, 200, a.value.text);
  assert.equal(q.value.status, 200, q.value.text);
  assert.ok(q.ms >= HOLD_MS / 2, `the second read waited for the one reader (${q.ms} ms)`);
  await s.delete();
  await srv.stop();
});

test('--db-readers 0: reads take turns on the lane, whose connection does not wait for a lock', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  const srv = await startServer({ args: ['--workers', '1', '--db-readers', '0'] });
  servers.push(srv);
  const lock = await lockProduct(srv);
  const r = await timed(request(srv.port, { path: '/Product/A-100', timeoutMs: 15000 }));
  assert.equal(r.value.status, 503, r.value.text);
  assert.equal(r.value.headers['retry-after'], '1');
  assert.equal(lock.released(), false, 'refused while the lock was held');
  const metrics = (await request(srv.port, { path: '/metrics', timeoutMs: 2000 })).text;
  assert.match(metrics, /mcpsub_db_reads_total\{worker="0"\} 0\n/);
  await lock.done;
  assert.equal((await request(srv.port, { path: '/Product/A-100' })).status, 200);
  await srv.stop();
});

// Statements a connection runs more than once are prepared (store_pg.c); a
// schema change deallocates them, and --db-no-prepare runs every statement
// unnamed (a pooler in transaction mode). Either way reads and writes
// follow a column added and dropped by another client.
for (const flags of [[], ['--db-no-prepare']]) {
  test(`reads and writes follow a column added and dropped (${flags[0] || 'prepared statements'})`, { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
    const srv = await startServer({ args: ['--workers', '1', ...flags] });
    servers.push(srv);
    const json = { 'Content-Type': 'application/json', Accept: 'application/json' };
    const get = (key) => request(srv.port, { path: `/Product/${key}`, headers: { Accept: 'application/json' } });
    const patch = (key, body) => request(srv.port, { method: 'PATCH', path: `/Product/${key}`, headers: json, body: JSON.stringify(body) });
    // Each statement runs three times: prepared from its second run on.
    for (let i = 1; i <= 3; i++) {
      assert.equal((await patch('B-200', { price_cents: 100 + i })).status, 200);
      const r = await get('B-200');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json().price_cents, 100 + i);
    }
    const uri = dbTarget(srv.dbPath);
    psql(uri, `ALTER TABLE "Product" ADD COLUMN colour text DEFAULT 'red'`);
    // The schema is looked at every 500 ms: the column appears in the reads, and takes writes.
    await waitFor(async () => (await get('A-100')).json().colour === 'red', { message: 'the new column read' });
    await waitFor(async () => (await patch('B-200', { colour: 'blue' })).status === 200, { message: 'the new column written' });
    assert.equal((await get('B-200')).json().colour, 'blue');
    assert.equal((await get('B-200')).json().price_cents, 103);
    psql(uri, 'ALTER TABLE "Product" DROP COLUMN colour');
    await waitFor(async () => {
      const r = await get('A-100');
      return r.status === 200 && !('colour' in r.json());
    }, { message: 'the column gone from the reads' });
    for (let i = 1; i <= 2; i++) {
      assert.equal((await patch('B-200', { price_cents: 200 + i })).status, 200);
      assert.equal((await get('B-200')).json().price_cents, 200 + i);
    }
    const log = srv.stderr();
    assert.doesNotMatch(log, /prepared statement|cached plan/, 'no statement failed for its preparation');
    // The worker says how many it prepared: some, a bounded number, or none when told not to.
    const metrics = (await request(srv.port, { path: '/metrics', timeoutMs: 2000 })).text;
    const prepared = Number(/mcpsub_db_statements_prepared_total\{worker="0"\} (\d+)/.exec(metrics)?.[1]);
    if (flags.length === 0) assert.ok(prepared > 0 && prepared < 200, `prepared ${prepared}`);
    else assert.equal(prepared, 0, metrics);
    await srv.stop();
  });
}
