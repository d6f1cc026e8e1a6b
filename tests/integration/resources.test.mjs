// resources/list (and its pagination), resources/templates/list and
// resources/read of records, collections, filtered and paged collections,
// metadata, and the errors for URIs that do not resolve.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from './lib/server.mjs';
import { McpSession, containsValue, findKey } from './lib/mcp.mjs';
import { request } from './lib/raw.mjs';
import { sqlite, sqliteRows } from './lib/sqlite.mjs';

const ANVIL = { sku: 'A-100', name: 'Anvil', price_cents: 4999, category: 'tools', in_stock: 1 };
const ALL_SKUS = ['A-100', 'B-200', 'C-300', 'D-400'];

let srv;
let paged; // --page-size 2
let s;
let p;

before(async () => {
  [srv, paged] = await Promise.all([startServer(), startServer({ args: ['--page-size', '2'] })]);
  [s, p] = await Promise.all([McpSession.open(srv.port), McpSession.open(paged.port)]);
});

after(async () => {
  await srv?.kill();
  await paged?.kill();
});

const skus = (rows) => rows.map((r) => r.sku);

/* Every resource of resources/list, following nextCursor; checks each page. */
async function listAll(session, { maxPages = 100 } = {}) {
  const all = [];
  let cursor;
  let pages = 0;
  for (;;) {
    const r = await session.result('resources/list', cursor === undefined ? {} : { cursor });
    assert.ok(Array.isArray(r.resources), JSON.stringify(r));
    pages++;
    all.push(...r.resources);
    if (r.nextCursor === undefined || r.nextCursor === null) break;
    assert.equal(typeof r.nextCursor, 'string');
    cursor = r.nextCursor;
    assert.ok(pages < maxPages, 'resources/list never ends');
  }
  return { resources: all, pages };
}

test('resources/list has the collections and the metadata resources', async () => {
  const { resources } = await listAll(s);
  const uris = resources.map((r) => r.uri);
  for (const u of [`${srv.base}/Product`, `${srv.base}/StockEvent`, 'mcpsub://about', 'mcpsub://schema/Product']) {
    assert.ok(uris.includes(u), `${u} missing from ${JSON.stringify(uris)}`);
  }
  for (const r of resources) {
    assert.equal(typeof r.uri, 'string');
    assert.equal(typeof r.name, 'string', `resource without a name: ${JSON.stringify(r)}`);
  }
  assert.equal(new Set(uris).size, uris.length, 'duplicate URIs in resources/list');
});

test('resources/list pagination (--page-size 2) returns every resource exactly once', async () => {
  const { resources, pages } = await listAll(p);
  const rel = (base, list) => list.map((r) => r.uri.replace(base, '<base>'));
  const pagedUris = rel(paged.base, resources);
  assert.ok(pages >= 2, `only ${pages} page(s) with --page-size 2`);
  assert.equal(new Set(pagedUris).size, pagedUris.length, `duplicates across pages: ${JSON.stringify(pagedUris)}`);
  const full = rel(srv.base, (await listAll(s)).resources);
  assert.deepEqual([...pagedUris].sort(), [...full].sort());
});

test('resources/list with an invalid cursor -> -32602', async () => {
  const err = await s.error('resources/list', { cursor: 'definitely-not-a-cursor-%%%' });
  assert.equal(err.code, -32602);
  // A cursor is what a page's nextCursor said ("o2" here), nothing near it.
  const next = (await p.result('resources/list', {})).nextCursor;
  assert.equal(next, 'o2');
  assert.ok((await p.result('resources/list', { cursor: next })).resources.length > 0);
  for (const bad of ['o', 'o 2', 'o+2', 'o02', 'o-0', 'o2 ', 'o99999999999999999999', 2]) {
    const e = await p.error('resources/list', { cursor: bad });
    assert.equal(e.code, -32602, `cursor ${JSON.stringify(bad)}`);
  }
});

test('resources/templates/list has the record template', async () => {
  const r = await s.result('resources/templates/list', {});
  assert.ok(Array.isArray(r.resourceTemplates), JSON.stringify(r));
  const templates = r.resourceTemplates.map((t) => t.uriTemplate);
  assert.ok(templates.includes(`${srv.base}/Product/{key}`), JSON.stringify(templates));
});

test('resources/read of a record', async () => {
  const uri = `${srv.base}/Product/A-100`;
  const { result, content, value } = await s.readJson(uri);
  assert.equal(result.contents.length, 1);
  assert.equal(content.uri, uri);
  assert.equal(content.mimeType, 'application/json');
  assert.deepEqual(value, ANVIL);
  assert.equal(typeof content._meta?.version, 'string', `contents[0]._meta: ${JSON.stringify(content._meta)}`);
  assert.equal(typeof result._meta?.version, 'string', `result._meta: ${JSON.stringify(result._meta)}`);
});

test('resources/read of a collection -> all 4 rows', async () => {
  const { content, value } = await s.readJson(`${srv.base}/Product`);
  assert.equal(content.mimeType, 'application/json');
  assert.ok(Array.isArray(value), content.text);
  assert.deepEqual(skus(value).sort(), ALL_SKUS);
  assert.deepEqual(value.find((r) => r.sku === 'A-100'), ANVIL);
});

test('resources/read of a filtered collection -> the tool rows', async () => {
  const { value } = await s.readJson(`${srv.base}/Product?category=tools`);
  assert.deepEqual(skus(value).sort(), ['A-100', 'C-300']);
});

test('resources/read with a filter on two columns', async () => {
  const { value } = await s.readJson(`${srv.base}/Product?category=tools&in_stock=0`);
  assert.deepEqual(skus(value), ['C-300']);
});

test('resources/read with _limit pages with _cursor', async () => {
  const first = await s.readJson(`${srv.base}/Product?_limit=2`);
  assert.equal(first.value.length, 2, first.content.text);
  const cursor = first.result._meta?.nextCursor ?? first.content._meta?.nextCursor;
  assert.equal(typeof cursor, 'string', `no _meta.nextCursor: ${JSON.stringify(first.result)}`);
  const next = first.result._meta?.nextUri;
  assert.equal(typeof next, 'string', `no _meta.nextUri: ${JSON.stringify(first.result)}`);
  const second = await s.readJson(next);
  assert.equal(second.value.length, 2, second.content.text);
  assert.equal(second.content.uri, next);
  assert.deepEqual([...skus(first.value), ...skus(second.value)].sort(), ALL_SKUS);
  assert.equal(second.result._meta?.nextCursor ?? second.content._meta?.nextCursor, undefined, 'a cursor after the last page');
});

test('resources/read of a StockEvent record (integer key)', async () => {
  const { value } = await s.readJson(`${srv.base}/StockEvent/1`);
  assert.deepEqual(value, { id: 1, sku: 'A-100', delta: 10, note: 'initial stock' });
});

test('resources/read mcpsub://about lists the tables', async () => {
  const { content, value } = await s.readJson('mcpsub://about');
  assert.equal(content.uri, 'mcpsub://about');
  assert.equal(content.mimeType, 'application/json');
  assert.ok(containsValue(value, 'Product'), content.text);
  assert.ok(containsValue(value, 'StockEvent'), content.text);
});

test('resources/read mcpsub://schema/Product lists the columns', async () => {
  const { content, value } = await s.readJson('mcpsub://schema/Product');
  assert.equal(content.mimeType, 'application/json');
  const columns = findKey(value, 'columns');
  assert.ok(columns !== undefined, `no "columns" in ${content.text}`);
  for (const c of ['sku', 'name', 'price_cents', 'category', 'in_stock']) {
    assert.ok(containsValue(columns, c), `column ${c} missing from ${content.text}`);
  }
});

test('resources/read of an unknown record -> -32002', async () => {
  const err = await s.error('resources/read', { uri: `${srv.base}/Product/NOPE` });
  assert.equal(err.code, -32002);
});

test('resources/read of an unknown table -> -32002', async () => {
  const err = await s.error('resources/read', { uri: `${srv.base}/NoSuchTable` });
  assert.equal(err.code, -32002);
});

test('resources/read with an unknown filter column -> -32602', async () => {
  const err = await s.error('resources/read', { uri: `${srv.base}/Product?color=red` });
  assert.equal(err.code, -32602);
});

test('resources/read of a malformed URI -> -32602', async () => {
  const err = await s.error('resources/read', { uri: `${srv.base}/Product/%ZZ` });
  assert.equal(err.code, -32602);
});

test('resources/read with a non-numeric _limit -> -32602', async () => {
  const err = await s.error('resources/read', { uri: `${srv.base}/Product?_limit=abc` });
  assert.equal(err.code, -32602);
});

test('resources/read with two filters on one column: both hold (two equalities match nothing, a range what is between)', async () => {
  const { value: none } = await s.readJson(`${srv.base}/Product?category=tools&category=home`);
  assert.deepEqual(none, []);
  const { value: all } = await s.readJson(`${srv.base}/Product`);
  const { value: between } = await s.readJson(`${srv.base}/Product?price_cents=lt=2000&price_cents=ge=500`);
  const want = all.filter((r) => r.price_cents >= 500 && r.price_cents < 2000).map((r) => r.sku);
  assert.ok(want.length > 0 && want.length < all.length, 'the range selects some rows, not all');
  assert.deepEqual(between.map((r) => r.sku), want);
  const repeated = await s.error('resources/read', { uri: `${srv.base}/Product?_limit=1&_limit=2` });
  assert.equal(repeated.code, -32602);
});

test('resources/read of another base URL -> -32002', async () => {
  const err = await s.error('resources/read', { uri: 'http://elsewhere.example/Product/A-100' });
  assert.equal(err.code, -32002);
});

test('record keys with a space and a slash round-trip', async () => {
  await s.toolOk('put_record', { table: 'Product', key: 'a b/c', record: { name: 'Slashed', price_cents: 1 } });
  const uri = `${srv.base}/Product/a%20b%2Fc`;
  const { content, value } = await s.readJson(uri);
  assert.equal(value.sku, 'a b/c');
  assert.equal(value.name, 'Slashed');
  assert.equal(content.uri, uri);
});

test('non-ASCII text round-trips through put_record and resources/read', async () => {
  const name = 'Ünïcödé — 日本語 😀 "quoted" \\ back\nslash';
  await s.toolOk('put_record', { table: 'Product', key: 'ü-1', record: { name } });
  const { value } = await s.readJson(`${srv.base}/Product/${encodeURIComponent('ü-1')}`);
  assert.equal(value.sku, 'ü-1');
  assert.equal(value.name, name);
});

test('resources/read of an over-long URI -> -32602 or -32002, no crash', async () => {
  const err = await s.error('resources/read', { uri: `${srv.base}/Product/${'x'.repeat(5000)}` });
  assert.ok([-32602, -32002].includes(err.code), JSON.stringify(err));
  assert.deepEqual(await s.result('ping'), {});
});

test('a large collection pages by --page-size and cursors survive awkward keys', async () => {
  const values = [];
  for (let i = 0; i < 250; i++) {
    const odd = ['&', '=', '%', ' ', '/', '?', '#', '+'][i % 8];
    values.push(`('bulk${odd}${String(i).padStart(3, '0')}', 'Bulk ${i}')`);
  }
  sqlite(srv.dbPath, `INSERT INTO Product (sku, name) VALUES ${values.join(', ')}`);
  const expected = sqliteRows(srv.dbPath, 'SELECT sku FROM Product').map((r) => r.sku);
  const seen = [];
  let uri = `${srv.base}/Product`;
  let pages = 0;
  for (;;) {
    const { result, value } = await s.readJson(uri);
    pages++;
    if (pages === 1) assert.equal(value.length, 100, 'first page is not --page-size (default 100) rows');
    seen.push(...value.map((r) => r.sku));
    const cursor = result._meta?.nextCursor ?? result.contents[0]._meta?.nextCursor;
    if (cursor === undefined) break;
    assert.ok(pages < 20, 'collection paging never ends');
    uri = `${srv.base}/Product?_cursor=${encodeURIComponent(cursor)}`;
  }
  assert.equal(new Set(seen).size, seen.length, 'a row was returned twice');
  assert.deepEqual([...seen].sort(), [...expected].sort());
});

/*
 * A worker's reads of one loop turn share one snapshot (reader.h), taken
 * after their requests all came: a read must still see every write that
 * was acknowledged before it was sent, whichever worker or process made it.
 */
test('a read sees every write acknowledged before it was sent, by either worker or another process', async () => {
  const fresh = await startServer();
  try {
    const session = await McpSession.open(fresh.port);
    const json = { 'Content-Type': 'application/json', Accept: 'application/json' };
    const reads = async (key, price, what) => {
      // resources/read (on the session's worker) and REST GETs on new connections (either worker).
      const [{ value }, ...gets] = await Promise.all([
        session.readJson(`${fresh.base}/Product/${key}`),
        request(fresh.port, { path: `/Product/${key}`, headers: { Accept: 'application/json' } }),
        request(fresh.port, { path: `/Product/${key}`, headers: { Accept: 'application/json' } }),
      ]);
      assert.equal(value.price_cents, price, `${what}: resources/read of ${key} after its write`);
      for (const got of gets) {
        assert.equal(got.status, 200, got.text);
        assert.equal(got.json().price_cents, price, `${what}: GET of ${key} after its write`);
      }
    };
    // Eight clients at once, each writing its record on a new connection and reading it back.
    const client = async (c) => {
      for (let i = 1; i <= 25; i++) {
        const put = await request(fresh.port, {
          method: 'PUT', path: `/Product/R-${c}`, headers: json, body: JSON.stringify({ name: 'r', price_cents: i }),
        });
        assert.ok(put.status === 200 || put.status === 201, put.text);
        await reads(`R-${c}`, i, `client ${c}`);
      }
    };
    // And another process's commits, beside them.
    const external = async () => {
      for (let i = 1; i <= 25; i++) {
        sqlite(fresh.dbPath, `UPDATE Product SET price_cents = ${1000 + i} WHERE sku = 'B-200'`);
        await reads('B-200', 1000 + i, 'sqlite3');
      }
    };
    await Promise.all([...[...Array(8).keys()].map(client), external()]);
  } finally {
    await fresh.kill();
  }
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await Promise.all([srv.stop(), paged.stop()]);
});
