// Row scopes from a --policy file, black-box: two API keys in the same
// role, each bound to its own tenant, subscribe to the same collection
// (and a filtered collection and a record) while rows of both tenants
// change through MCP, REST and the sqlite3 CLI. Each hears of exactly its
// own rows (a row that moves to the other tenant once, nothing after);
// reads, query_records, wait_and_read, REST lists and resources/list agree;
// a table the role has no grant on does not exist for it.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { MCPSUBCTL, makeTempDir, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { request } from './lib/raw.mjs';
import { sqlite, sqliteRows } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { sleep } from './lib/wait.mjs';

let srv;
const key = {};
const bearer = (k) => ({ Authorization: `Bearer ${k}` });

before(async () => {
  const dir = makeTempDir('mcpsub-tenants-');
  const keysFile = path.join(dir, 'keys.json');
  const add = (name, role) => {
    const r = spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, 'key', 'add', name, '--role', role], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim();
  };
  key.acme = add('acme-agent', 'tenant-user');
  key.bolt = add('bolt-agent', 'tenant-user');
  key.nobody = add('stray', 'tenant-user'); // no tenant attribute: its scope cannot bind
  key.ops = add('ops', 'writer');
  key.acmeWriter = add('acme-writer', 'tenant-writer');
  key.org7 = add('org7-writer', 'org-writer');
  key.orgBig = add('orgbig-writer', 'org-writer');
  const policy = path.join(dir, 'policy.json');
  // An org beyond 2^53, written as a JSON number (JavaScript cannot write it: put in the text).
  fs.writeFileSync(
    policy,
    JSON.stringify({
      roles: {
        'tenant-user': {
          tables: { Widget: { rights: ['read', 'subscribe'], scope: { column: 'tenant', bind: 'claim:tenant' } } },
        },
        'tenant-writer': {
          tables: { Widget: { rights: ['read', 'subscribe', 'write'], scope: { column: 'tenant', bind: 'claim:tenant' } } },
        },
        'org-writer': {
          tables: { Ticket: { rights: ['read', 'subscribe', 'write'], scope: { column: 'org', bind: 'claim:org' } } },
        },
      },
      keys: {
        'acme-agent': { tenant: 'acme' }, 'bolt-agent': { tenant: 'bolt' }, 'acme-writer': { tenant: 'acme' }, 'org7-writer': { org: 7 },
        'orgbig-writer': { org: 'ORG_BIG' },
      },
    }).replace('"ORG_BIG"', '1152921504606846977'),
  );
  const schema = path.join(dir, 'schema.sql');
  fs.writeFileSync(
    schema,
    `CREATE TABLE Widget (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, v INTEGER NOT NULL DEFAULT 0);
     INSERT INTO Widget VALUES ('a0', 'acme', 1), ('b0', 'bolt', 1);
     CREATE TABLE Ticket (id INTEGER PRIMARY KEY, org BIGINT NOT NULL, v INTEGER NOT NULL DEFAULT 0);
     INSERT INTO Ticket VALUES (1, 7, 0), (2, 8, 0), (3, 1152921504606846976, 0), (4, 1152921504606846977, 0);
     CREATE TABLE Secret (id INTEGER PRIMARY KEY, v TEXT);
     INSERT INTO Secret VALUES (1, 'x');`,
  );
  srv = await startServer({ schema, args: ['--auth-keys', keysFile, '--policy', policy, '--workers', '2'] });
});

after(async () => {
  await srv?.kill();
});

async function tenantSession(k) {
  const s = await McpSession.open(srv.port, { headers: bearer(k) });
  const st = await EventStream.open(srv.port, s.id, { headers: bearer(k) });
  await st.waitPrimed();
  return { s, st };
}

const notified = (st) => st.updates().map((e) => `${e.json.params.subscribedUri.slice(srv.base.length)} ${e.json.params.uri.slice(srv.base.length)}`);

async function writeAs(k, method, p, body) {
  const res = await request(srv.port, { method, path: p, headers: { ...bearer(k), 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
  assert.ok(res.status < 300, `${method} ${p}: ${res.status} ${res.text}`);
}

test('two tenants on one collection: each is notified of exactly its own rows, whoever writes them', async () => {
  const B = srv.base;
  const acme = await tenantSession(key.acme);
  const bolt = await tenantSession(key.bolt);
  for (const t of [acme, bolt]) {
    for (const uri of [`${B}/Widget`, `${B}/Widget?v=2`, `${B}/Widget/b0`]) assert.deepEqual(await t.s.result('resources/subscribe', { uri }), {});
  }
  const ops = await McpSession.open(srv.port, { headers: bearer(key.ops) });
  await writeAs(key.ops, 'PUT', '/Widget/a1', { id: 'a1', tenant: 'acme', v: 2 }); // REST
  const put = await ops.result('tools/call', { name: 'put_record', arguments: { table: 'Widget', key: 'b1', record: { id: 'b1', tenant: 'bolt', v: 2 } } }); // MCP
  assert.ok(!put.isError, JSON.stringify(put));
  sqlite(srv.dbPath, "INSERT INTO Widget VALUES ('a2', 'acme', 3); UPDATE Widget SET v = 5 WHERE id = 'b0';"); // another process
  sqlite(srv.dbPath, "UPDATE Widget SET tenant = 'bolt' WHERE id = 'a0';"); // a0 moves from acme to bolt
  sqlite(srv.dbPath, "UPDATE Widget SET v = 9 WHERE id = 'a0';"); // now bolt's only
  await writeAs(key.ops, 'DELETE', '/Widget/b1');
  await sleep(600);
  assert.deepEqual(
    notified(acme.st).sort(),
    ['/Widget /Widget/a0', '/Widget /Widget/a1', '/Widget /Widget/a2', '/Widget?v=2 /Widget/a1'].sort(),
    acme.st.describe(),
  );
  assert.deepEqual(
    notified(bolt.st).sort(),
    [
      '/Widget /Widget/b1', '/Widget?v=2 /Widget/b1', // put through MCP
      '/Widget /Widget/b0', '/Widget/b0 /Widget/b0', // v 1 -> 5
      '/Widget /Widget/a0', // a0 arrives
      '/Widget /Widget/a0', // and changes while it is bolt's
      '/Widget /Widget/b1', '/Widget?v=2 /Widget/b1', // deleted
    ].sort(),
    bolt.st.describe(),
  );
  for (const t of [acme, bolt]) {
    t.st.close();
    await t.s.delete();
  }
  await ops.delete();
});

test('a scope on an integer column, bound to a number: its rows are notified, read and written', async () => {
  const k = bearer(key.org7);
  const s = await McpSession.open(srv.port, { headers: k });
  const st = await EventStream.open(srv.port, s.id, { headers: k });
  await st.waitPrimed();
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Ticket` }), {});
  sqlite(srv.dbPath, 'UPDATE Ticket SET v = v + 1'); // both rows: only org 7's is the caller's
  const own = await s.result('tools/call', { name: 'put_record', arguments: { table: 'Ticket', key: '1', record: { id: 1, org: 7, v: 10 } } });
  assert.ok(!own.isError, JSON.stringify(own));
  const other = await s.result('tools/call', { name: 'put_record', arguments: { table: 'Ticket', key: '2', record: { id: 2, org: 7, v: 10 } } });
  assert.equal(other.isError, true);
  await sleep(600);
  assert.deepEqual(notified(st), ['/Ticket /Ticket/1', '/Ticket /Ticket/1'], st.describe());
  const rows = JSON.parse((await s.read(`${srv.base}/Ticket`)).contents[0].text);
  assert.deepEqual(rows.map((r) => [r.id, r.v]), [[1, 10]]);
  st.close();
  await s.delete();
});

test('a scope bound to an integer beyond 2^53: only that integer\'s rows, not those a double confuses it with', async () => {
  const k = bearer(key.orgBig);
  const s = await McpSession.open(srv.port, { headers: k });
  const st = await EventStream.open(srv.port, s.id, { headers: k });
  await st.waitPrimed();
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Ticket` }), {});
  sqlite(srv.dbPath, 'UPDATE Ticket SET v = v + 1 WHERE id >= 3'); // 2^60 and 2^60 + 1
  await sleep(600);
  assert.deepEqual(notified(st), ['/Ticket /Ticket/4'], st.describe());
  const rows = JSON.parse((await s.read(`${srv.base}/Ticket`)).contents[0].text);
  assert.deepEqual(rows.map((r) => [r.id, r.org]), [[4, '1152921504606846977']]);
  const rest = await request(srv.port, { path: '/Ticket', headers: k });
  assert.deepEqual(rest.json().map((r) => r.id), [4], rest.text);
  st.close();
  await s.delete();
});

test('reads agree: resources/read, query_records, wait_and_read and REST see only the caller\'s rows', async () => {
  const B = srv.base;
  const s = await McpSession.open(srv.port, { headers: bearer(key.acme) });
  const coll = JSON.parse((await s.read(`${B}/Widget`)).contents[0].text).map((r) => r.id).sort();
  assert.deepEqual(coll, ['a1', 'a2']);
  const err = await s.error('resources/read', { uri: `${B}/Widget/b0` });
  assert.equal(err.code, -32002);
  const q = await s.result('tools/call', { name: 'query_records', arguments: { table: 'Widget' } });
  assert.deepEqual(JSON.parse(q.content[0].text).rows.map((r) => r.id).sort(), ['a1', 'a2']);
  const g = await s.result('tools/call', { name: 'get_record', arguments: { table: 'Widget', key: 'b0' } });
  assert.equal(g.isError, true);
  const w = await s.result('tools/call', { name: 'wait_and_read', arguments: { resources: [{ uri: `${B}/Widget/b0` }, { uri: `${B}/Widget/a1` }], timeoutMs: 0, includeState: true } });
  const rows = JSON.parse(w.content[0].text).resources;
  assert.deepEqual(rows.find((r) => r.uri.endsWith('/b0')).state, null, 'another tenant\'s row reads as absent');
  assert.equal(rows.find((r) => r.uri.endsWith('/a1')).state.id, 'a1');
  const list = await request(srv.port, { path: '/Widget', headers: bearer(key.acme) });
  assert.deepEqual(list.json().map((r) => r.id).sort(), ['a1', 'a2']);
  assert.equal((await request(srv.port, { path: '/Widget/b0', headers: bearer(key.acme) })).status, 404);
  assert.equal((await request(srv.port, { path: '/Widget/a1', headers: bearer(key.acme) })).status, 200);
  await s.delete();
});

test('a table without a grant does not exist for the role; a key whose scope cannot bind sees nothing', async () => {
  const B = srv.base;
  const s = await McpSession.open(srv.port, { headers: bearer(key.acme) });
  const listed = (await s.result('resources/list', {})).resources.map((r) => r.uri);
  assert.deepEqual(listed, [`${B}/Widget`]);
  const e = await s.error('resources/subscribe', { uri: `${B}/Secret` });
  assert.equal(e.message, `resource is not subscribable: ${B}/Secret`);
  const missing = await s.error('resources/subscribe', { uri: `${B}/NoSuchTable` });
  assert.equal(missing.message, `resource is not subscribable: ${B}/NoSuchTable`, 'the same answer as for a table that does not exist');
  // Nor does a filter on a column it lacks: the column is named only on a table the role may use.
  const nocol = await s.error('resources/subscribe', { uri: `${B}/Secret?nocol=1` });
  assert.equal(nocol.message, `resource is not subscribable: ${B}/Secret?nocol=1`);
  const own = await s.error('resources/subscribe', { uri: `${B}/Widget?nocol=1` });
  assert.equal(own.message, `resource is not subscribable: ${B}/Widget?nocol=1 (unknown column nocol in table Widget)`);
  assert.equal((await s.error('resources/read', { uri: `${B}/Secret/1` })).code, -32002);
  assert.equal((await request(srv.port, { path: '/Secret', headers: bearer(key.acme) })).status, 404);
  // Not even a malformed path tells it the table is there (the writer, who may read it, gets 400).
  assert.equal((await request(srv.port, { path: '/Secret/%zz', headers: bearer(key.acme) })).status, 404);
  assert.equal((await request(srv.port, { path: '/Secret/%zz', headers: bearer(key.ops) })).status, 400);
  const tables = await s.result('tools/call', { name: 'list_tables', arguments: {} });
  assert.deepEqual(JSON.parse(tables.content[0].text).map((t) => t.name), ['Widget']);
  // Writes: this role has no write right at all.
  const put = await request(srv.port, { method: 'PUT', path: '/Widget/a9', headers: { ...bearer(key.acme), 'Content-Type': 'application/json' }, body: '{"id":"a9","tenant":"acme"}' });
  assert.equal(put.status, 403);
  await s.delete();
  const stray = await McpSession.open(srv.port, { headers: bearer(key.nobody) });
  assert.equal((await stray.error('resources/read', { uri: `${B}/Widget` })).code, -32002);
  assert.equal((await request(srv.port, { path: '/Widget', headers: bearer(key.nobody) })).status, 404);
  await stray.delete();
});

test('completion/complete agrees: only readable tables, only the caller\'s keys', async () => {
  const B = srv.base;
  const complete = (st, uri, name, value, context) => st.result('completion/complete', {
    ref: { type: 'ref/resource', uri }, argument: { name, value }, ...(context ? { context: { arguments: context } } : {}),
  });
  const acme = await McpSession.open(srv.port, { headers: bearer(key.acme) });
  assert.deepEqual((await complete(acme, `${B}/{table}/{key}`, 'table', '')).completion.values, ['Widget']);
  assert.deepEqual((await complete(acme, `${B}/{table}/{key}`, 'table', 'Sec')).completion.values, []);
  const keys = (await complete(acme, `${B}/Widget/{key}`, 'key', '')).completion.values;
  assert.deepEqual([...keys].sort(), ['a1', 'a2'], 'acme\'s rows only');
  assert.deepEqual((await complete(acme, `${B}/Widget/{key}`, 'key', 'b')).completion.values, []);
  assert.deepEqual((await complete(acme, `${B}/{table}/{key}`, 'key', '', { table: 'Widget' })).completion.values.sort(), ['a1', 'a2']);
  assert.deepEqual((await complete(acme, `${B}/{table}/{key}`, 'key', '', { table: 'Secret' })).completion.values, []);
  const secret = await acme.error('completion/complete', { ref: { type: 'ref/resource', uri: `${B}/Secret/{key}` }, argument: { name: 'key', value: '' } });
  const none = await acme.error('completion/complete', { ref: { type: 'ref/resource', uri: `${B}/NoSuchTable/{key}` }, argument: { name: 'key', value: '' } });
  assert.deepEqual([secret.code, secret.message.replace('Secret', 'T')], [none.code, none.message.replace('NoSuchTable', 'T')],
    'the same answer as for a table that does not exist');
  await acme.delete();
  const ops = await McpSession.open(srv.port, { headers: bearer(key.ops) });
  assert.deepEqual((await complete(ops, `${B}/{table}/{key}`, 'table', '')).completion.values.sort(), ['Secret', 'Ticket', 'Widget']);
  assert.ok((await complete(ops, `${B}/Widget/{key}`, 'key', 'b')).completion.values.includes('b0'));
  await ops.delete();
});

test('writes inside a row scope: only the caller\'s rows, in and out; the audit log records who wrote', async () => {
  const w = bearer(key.acmeWriter);
  const put = (p, body) => request(srv.port, { method: 'PUT', path: p, headers: { ...w, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const patch = (p, body) => request(srv.port, { method: 'PATCH', path: p, headers: { ...w, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal((await put('/Widget/a5', { id: 'a5', tenant: 'acme', v: 1 })).status, 201);
  // Another tenant's row, a row written into another tenant, a row moved out: 403, nothing changed.
  const other = await put('/Widget/b0', { id: 'b0', tenant: 'acme', v: 7 });
  assert.equal(other.status, 403, other.text);
  assert.equal((await put('/Widget/a6', { id: 'a6', tenant: 'bolt', v: 1 })).status, 403);
  assert.equal((await patch('/Widget/a5', { tenant: 'bolt' })).status, 403);
  assert.equal((await request(srv.port, { method: 'DELETE', path: '/Widget/b0', headers: w })).status, 403);
  const rows = sqliteRows(srv.dbPath, "SELECT id, tenant, v FROM Widget WHERE id IN ('a5', 'a6', 'b0') ORDER BY id");
  assert.deepEqual(rows, [{ id: 'a5', tenant: 'acme', v: 1 }, { id: 'b0', tenant: 'bolt', v: 5 }]);
  // The same through the tools.
  const s = await McpSession.open(srv.port, { headers: w });
  const bad = await s.result('tools/call', { name: 'put_record', arguments: { table: 'Widget', key: 'b0', record: { id: 'b0', tenant: 'acme' } } });
  assert.equal(bad.isError, true);
  assert.match(bad.content[0].text, /outside your row scope/);
  const del = await s.result('tools/call', { name: 'delete_record', arguments: { table: 'Widget', key: 'b0' } });
  assert.equal(del.isError, true);
  const ok = await s.result('tools/call', { name: 'put_record', arguments: { table: 'Widget', key: 'a5', record: { id: 'a5', tenant: 'acme', v: 2 } } });
  assert.ok(!ok.isError, JSON.stringify(ok));
  await s.delete();
  // Who wrote: the key, for writes through mcpsubd; nobody for the sqlite3 CLI's.
  const by = sqliteRows(srv.dbPath, "SELECT key, principal FROM audit_log WHERE tbl = 'Widget' AND key IN ('a5', 'a2') ORDER BY seq");
  assert.deepEqual(by.filter((r) => r.key === 'a5').map((r) => r.principal), ['key:acme-writer', 'key:acme-writer']);
  assert.deepEqual(by.filter((r) => r.key === 'a2').map((r) => r.principal), [null]);
});
