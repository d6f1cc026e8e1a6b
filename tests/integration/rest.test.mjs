// Plain-HTTP REST on /{Table} and /{Table}/{key}: GET, PUT, PATCH, DELETE
// on records, GET and POST on collections, and their error statuses.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';

import { PG_MODE } from './lib/pg.mjs';
import { startServer } from './lib/server.mjs';
import { request } from './lib/raw.mjs';
import { sqliteRows } from './lib/sqlite.mjs';

const ANVIL = { sku: 'A-100', name: 'Anvil', price_cents: 4999, category: 'tools', in_stock: 1 };

let srv;

before(async () => {
  srv = await startServer();
});

after(async () => {
  await srv?.kill();
});

const get = (path) => request(srv.port, { path, headers: { Accept: 'application/json' } });
const send = (method, path, body) =>
  request(srv.port, {
    method,
    path,
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

test('GET /Product/A-100 -> 200 JSON row with an ETag', async () => {
  const res = await get('/Product/A-100');
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers['content-type'] || '', /^application\/json/);
  assert.deepEqual(res.json(), ANVIL);
  assert.ok(res.headers.etag, `no ETag: ${JSON.stringify(res.rawHeaders)}`);
});

test('GET /Product -> 200 JSON array of the rows', async () => {
  const res = await get('/Product');
  assert.equal(res.status, 200, res.text);
  const rows = res.json();
  assert.ok(Array.isArray(rows), res.text);
  assert.deepEqual(rows.map((r) => r.sku).sort(), ['A-100', 'B-200', 'C-300', 'D-400']);
});

test('GET /Product?category=tools -> the 2 tool rows', async () => {
  const res = await get('/Product?category=tools');
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json().map((r) => r.sku).sort(), ['A-100', 'C-300']);
});

test('GET /Product/NOPE -> 404', async () => {
  const res = await get('/Product/NOPE');
  assert.equal(res.status, 404, res.text);
});

test('PUT creates (201), PUT again replaces (200)', async () => {
  const created = await send('PUT', '/Product/N-1', { name: 'New' });
  assert.equal(created.status, 201, created.text);
  const replaced = await send('PUT', '/Product/N-1', { name: 'Newer', price_cents: 3 });
  assert.equal(replaced.status, 200, replaced.text);
  const row = (await get('/Product/N-1')).json();
  assert.deepEqual(row, { sku: 'N-1', name: 'Newer', price_cents: 3, category: null, in_stock: 1 });
});

test('PATCH updates only the given columns, and the ETag changes', async () => {
  const etag0 = (await get('/Product/N-1')).headers.etag;
  assert.ok(etag0, 'no ETag');
  const res = await send('PATCH', '/Product/N-1', { price_cents: 7 });
  assert.equal(res.status, 200, res.text);
  const after = await get('/Product/N-1');
  const row = after.json();
  assert.equal(row.price_cents, 7);
  assert.equal(row.name, 'Newer');
  assert.ok(after.headers.etag, 'no ETag');
  assert.notEqual(after.headers.etag, etag0, 'ETag unchanged by PATCH');
});

test('PATCH of an unknown record -> 404', async () => {
  const res = await send('PATCH', '/Product/NOPE', { price_cents: 7 });
  assert.equal(res.status, 404, res.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku = 'NOPE'"), []);
});

test('DELETE -> 204, then GET -> 404', async () => {
  const del = await request(srv.port, { method: 'DELETE', path: '/Product/N-1' });
  assert.equal(del.status, 204, del.text);
  assert.equal(del.body.length, 0);
  assert.equal((await get('/Product/N-1')).status, 404);
});

test('DELETE of an unknown record -> 404', async () => {
  const del = await request(srv.port, { method: 'DELETE', path: '/Product/NOPE' });
  assert.equal(del.status, 404, del.text);
});

test('POST /StockEvent -> 201 with a Location of the new record', async () => {
  const res = await send('POST', '/StockEvent', { sku: 'A-100', delta: 1 });
  assert.equal(res.status, 201, res.text);
  const loc = res.headers.location;
  assert.ok(loc, `no Location header: ${JSON.stringify(res.rawHeaders)}`);
  const m = /^(?:http:\/\/127\.0\.0\.1:\d+)?\/StockEvent\/(\d+)$/.exec(loc);
  assert.ok(m, `Location ${loc}`);
  assert.ok(Number(m[1]) > 3, `new id ${m[1]} collides with the seed rows`);
  const row = (await get(`/StockEvent/${m[1]}`)).json();
  assert.deepEqual(row, { id: Number(m[1]), sku: 'A-100', delta: 1, note: null });
});

test('record keys are percent-decoded', async () => {
  const res = await send('PUT', '/Product/x%20y%2Fz', { name: 'Spaced' });
  assert.equal(res.status, 201, res.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT name FROM Product WHERE sku = 'x y/z'"), [{ name: 'Spaced' }]);
  assert.equal((await get('/Product/x%20y%2Fz')).json().sku, 'x y/z');
});

test('unknown table -> 404', async () => {
  assert.equal((await get('/NoSuchTable')).status, 404);
  assert.equal((await get('/NoSuchTable/1')).status, 404);
});

test('invalid JSON body -> 400', async () => {
  const res = await send('PUT', '/Product/BAD-1', '{"name": ');
  assert.equal(res.status, 400, res.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku = 'BAD-1'"), []);
});

test('PUT with a JSON array body -> 400', async () => {
  const res = await send('PUT', '/Product/ARR-1', [{ name: 'x' }]);
  assert.equal(res.status, 400, res.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku = 'ARR-1'"), []);
});

test('POST with an unknown column -> 400', async () => {
  const res = await send('POST', '/StockEvent', { sku: 'A-100', delta: 1, colour: 'red' });
  assert.equal(res.status, 400, res.text);
});

test('PUT whose body key differs from the URL key -> 400', async () => {
  const res = await send('PUT', '/Product/K-1', { sku: 'K-2', name: 'Mismatch' });
  assert.equal(res.status, 400, res.text);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku IN ('K-1', 'K-2')"), []);
});

test('PUT violating NOT NULL -> 4xx with the constraint message', async () => {
  const res = await send('PUT', '/Product/NN-1', { price_cents: 1 });
  assert.ok([400, 409, 422].includes(res.status), `HTTP ${res.status} ${res.text}`);
  assert.match(res.text, /NOT NULL|not-null/i);
  assert.deepEqual(sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku = 'NN-1'"), []);
});

test('PUT to a collection -> 405 with Allow: GET, POST', async () => {
  const res = await send('PUT', '/Product', { name: 'x' });
  assert.equal(res.status, 405, res.text);
  const allow = new Set((res.headers.allow || '').split(',').map((x) => x.trim()).filter(Boolean));
  assert.deepEqual(allow, new Set(['GET', 'POST']));
});

test('concurrent writes commit together, and each failing one fails alone with its own status', async () => {
  const [{ n: auditBefore }] = sqliteRows(srv.dbPath, 'SELECT count(*) AS n FROM audit_log');
  const good = Array.from({ length: 24 }, (_, i) => send('POST', '/Product', { sku: `GC-${i}`, name: `Group ${i}` }));
  const taken = Array.from({ length: 8 }, () => send('POST', '/Product', { sku: 'A-100', name: 'Taken' }));
  const nulls = Array.from({ length: 8 }, (_, i) => send('PUT', `/Product/GN-${i}`, { name: null }));
  const [g, t, n] = await Promise.all([Promise.all(good), Promise.all(taken), Promise.all(nulls)]);
  for (const r of g) assert.equal(r.status, 201, r.text);
  for (const r of t) assert.equal(r.status, 409, r.text);
  for (const r of n) {
    assert.ok(r.status >= 400 && r.status < 500, `${r.status} ${r.text}`);
    assert.match(r.text, /NOT NULL|name/i);
  }
  const rows = sqliteRows(srv.dbPath, "SELECT sku FROM Product WHERE sku LIKE 'G%' ORDER BY sku");
  assert.deepEqual(rows.map((r) => r.sku).sort(), Array.from({ length: 24 }, (_, i) => `GC-${i}`).sort());
  assert.equal(sqliteRows(srv.dbPath, "SELECT name FROM Product WHERE sku = 'A-100'")[0].name, 'Anvil');
  const [{ n: auditAfter }] = sqliteRows(srv.dbPath, 'SELECT count(*) AS n FROM audit_log');
  assert.equal(auditAfter - auditBefore, 24, 'one audit row per successful write, none for the failed ones');
});

test('PUTs of one record committed together: each answered with the row and version it left', { skip: PG_MODE && 'PostgreSQL: the answer reads the record after the commit' }, async () => {
  // Eight PUTs of one key at once share a group commit; each answer is the
  // row as that PUT left it, not the last one's.
  for (let round = 0; round < 5; round++) {
    const names = Array.from({ length: 8 }, (_, i) => `Same ${round}.${i}`);
    const answers = await Promise.all(names.map((name) => send('PUT', '/Product/SAME-1', { name, price_cents: round })));
    answers.forEach((r, i) => {
      assert.ok(r.status === 200 || r.status === 201, r.text);
      assert.equal(r.json().name, names[i], `answer ${i} of round ${round}: ${r.text}`);
    });
    const etags = answers.map((r) => Number(JSON.parse(r.headers.etag)));
    assert.equal(new Set(etags).size, etags.length, `one version each: ${etags}`);
    // The newest version is the row a read finds now.
    const last = answers[etags.indexOf(Math.max(...etags))];
    const now = await get('/Product/SAME-1');
    assert.equal(now.headers.etag, last.headers.etag);
    assert.deepEqual(now.json(), last.json());
  }
});

test('writes one after another keep the write-ahead log bounded: it is still checkpointed', { skip: PG_MODE && "SQLite's write-ahead log" }, async () => {
  // Each PUT is its own commit of a few pages. Commits no longer checkpoint
  // the log themselves (the writer's thread does, when it reaches SQLite's
  // 1,000 pages): without that, 3,000 commits leave a log of about 80 MB;
  // with it, about 5 MB, the log being rewritten from its start once
  // checkpointed.
  for (let i = 0; i < 3000; i++) {
    const r = await send('PUT', `/Product/W-${i}`, { sku: `W-${i}`, name: `Wal ${i}` });
    assert.equal(r.status, 201, r.text);
  }
  const [{ n }] = sqliteRows(srv.dbPath, "SELECT count(*) AS n FROM Product WHERE sku LIKE 'W-%'");
  assert.equal(n, 3000);
  const wal = statSync(`${srv.dbPath}-wal`).size;
  assert.ok(wal < 16 * 1024 * 1024, `the log grew to ${wal} bytes`); /* ~5 MB; ~80 MB unchecked */
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await srv.stop();
});
