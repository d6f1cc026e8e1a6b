// MCP 2026-07-28 beside the 2025 sessions, black-box: the official v2
// client (@modelcontextprotocol/client, pinned in the lock file) in auto
// and pinned modes — discover, lists, reads, every tool, listen() on a
// record, a collection and a filtered collection, notified of writes
// through MCP, REST and the sqlite3 CLI; close() frees the stream; a drain
// ends it gracefully. A 1.x client on a 2025 session and a v2 client on a
// listen stream see the same change at once. Raw HTTP for the envelope and
// header errors, the shape of listen streams (acknowledgement first, no
// id: lines), notifications/cancelled, and the recovery extension.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';

import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { MCPSUBCTL, makeTempDir, startServer, getStatus } from './lib/server.mjs';
import { RawConnection, buildRequest, parseSse, request } from './lib/raw.mjs';
import { HEADERS, V, modern, post, rawListen } from './lib/modern.mjs';
import { ctlDbArgs } from './lib/pg.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { product, rest } from './lib/subs.mjs';
import { sleep, waitFor, withTimeout } from './lib/wait.mjs';

let srv;

before(async () => {
  srv = await startServer({ args: ['--workers', '2'] });
});

after(async () => {
  await srv?.stop();
});

/* A v2 client connected in mode ('auto' or { pin }); notifications land in got. */
async function connectV2(server, mode = 'auto') {
  const client = new ClientV2({ name: 'v2-test', version: '1.0.0' }, { versionNegotiation: { mode } });
  const got = [];
  client.fallbackNotificationHandler = async (n) => got.push(n);
  await client.connect(new TransportV2(new URL(server.url)));
  return { client, got };
}

const updates = (got) => got.filter((n) => n.method === 'notifications/resources/updated').map((n) => [n.params.uri, n.params.subscribedUri]);

/* One put_records call (2026-07-28, stateless): set on every Product row the filter selects. */
async function putRecords(filter, set) {
  const msg = modern('tools/call', { name: 'put_records', arguments: { table: 'Product', filter, set } }, 'bulk');
  const r = (await post(srv.port, msg, { 'Mcp-Name': 'put_records' })).json();
  assert.ok(r.result && !r.result.isError, JSON.stringify(r));
}

/* A raw listen stream's update params (after its acknowledgement), and their positions. */
const listenUpdates = (l) => l.events().slice(1).map((e) => e.json.params);
const positions = (ups) => ups.map((p) => Number(p._meta['io.mcpsub/position']));

test('auto mode negotiates 2026-07-28; discover names every revision; lists and reads carry resultType, ttlMs and cacheScope', async () => {
  const { client } = await connectV2(srv);
  try {
    assert.equal(client.getNegotiatedProtocolVersion(), V);
    const list = await client.listResources();
    assert.ok(list.resources.some((r) => r.uri === `${srv.base}/Product`));
    const read = await client.readResource({ uri: `${srv.base}/Product/A-100` });
    assert.equal(JSON.parse(read.contents[0].text).sku, 'A-100');
  } finally {
    await client.close();
  }
  const res = await post(srv.port, modern('server/discover'));
  assert.equal(res.status, 200, res.text);
  const r = res.json().result;
  assert.deepEqual(r.supportedVersions, [V, '2025-11-25', '2025-06-18', '2025-03-26']);
  assert.equal(r.resultType, 'complete');
  assert.equal(r.cacheScope, 'public');
  assert.equal(r._meta['io.modelcontextprotocol/serverInfo'].name, 'mcpsub');
  assert.ok(r.capabilities.resources.subscribe);
  const rd = (await post(srv.port, modern('resources/read', { uri: `${srv.base}/Product/A-100` }), { 'Mcp-Name': `${srv.base}/Product/A-100` })).json().result;
  assert.deepEqual([rd.resultType, rd.ttlMs, rd.cacheScope], ['complete', 0, 'public']);
  assert.equal(rd._meta.version, rd.contents[0]._meta.version);
  for (const uri of ['mcpsub://about', `${srv.base}/Product?_limit=1`]) {
    const doc = (await post(srv.port, modern('resources/read', { uri }), { 'Mcp-Name': uri })).json().result;
    assert.deepEqual([doc.resultType, doc.ttlMs, doc.cacheScope, doc.contents[0].uri], ['complete', 0, 'public', uri], JSON.stringify(doc));
  }
  const ping = (await post(srv.port, modern('ping'))).json().result;
  assert.deepEqual(ping, { resultType: 'complete' });
});

test('pinned mode: every tool, statelessly (wait_and_read included)', async () => {
  const { client } = await connectV2(srv, { pin: V });
  try {
    const names = (await client.listTools()).tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['delete_record', 'delete_records', 'get_record', 'list_tables', 'put_record', 'put_records', 'query_records', 'wait_and_read']);
    const call = async (name, args) => {
      const r = await client.callTool({ name, arguments: args });
      assert.ok(!r.isError, `${name}: ${JSON.stringify(r)}`);
      return JSON.parse(r.content[0].text);
    };
    const tables = await call('list_tables', {});
    assert.ok((Array.isArray(tables) ? tables : tables.tables).some((t) => t.name === 'Product'), JSON.stringify(tables));
    assert.equal((await call('put_record', { table: 'Product', key: 'M-1', record: product('M-1') })).record.sku, 'M-1');
    assert.match(JSON.stringify(await call('get_record', { table: 'Product', key: 'M-1' })), /"sku":"M-1"/);
    assert.equal((await call('query_records', { table: 'Product', where: { sku: 'M-1' } })).rows.length, 1);
    const waiting = call('wait_and_read', { resources: [{ uri: `${srv.base}/Product/M-1` }], timeoutMs: 5000 });
    await sleep(200);
    await rest(srv.port, 'PATCH', '/Product/M-1', { price_cents: 9 });
    const woke = await waiting;
    assert.equal(woke.timedOut, false);
    assert.equal(woke.resources.length, 1);
    await call('delete_record', { table: 'Product', key: 'M-1' });
  } finally {
    await client.close();
  }
});

test('listen(): a record, a collection and a filtered collection, notified of MCP, REST and sqlite3 writes; close() frees the stream', async () => {
  const { client, got } = await connectV2(srv);
  const B = srv.base;
  const record = `${B}/Product/A-100`;
  const coll = `${B}/StockEvent`;
  const filtered = `${B}/Product?in_stock=0`;
  try {
    const sub = await client.listen({ resourceSubscriptions: [record, coll, filtered, `${B}/NoSuchTable`, record], resourcesListChanged: true });
    assert.deepEqual(sub.honoredFilter.resourceSubscriptions, [record, coll, filtered]);
    assert.equal(sub.honoredFilter.resourcesListChanged, true);
    await waitFor(async () => (await getStatus(srv.port)).listens === 1, { message: 'one listen stream' });
    await client.callTool({ name: 'put_record', arguments: { table: 'Product', key: 'A-100', record: { ...product('A-100'), price_cents: 1 } } });
    await rest(srv.port, 'PUT', '/StockEvent/900', { sku: 'A-100', delta: 1 });
    sqlite(srv.dbPath, "UPDATE Product SET in_stock = 0 WHERE sku = 'C-300'");
    await waitFor(() => updates(got).length >= 3, { timeoutMs: 5000, message: 'three updates' });
    assert.deepEqual(updates(got), [[record, record], [`${coll}/900`, coll], [`${B}/Product/C-300`, filtered]]);
    for (const n of got.filter((x) => x.method === 'notifications/resources/updated'))
      assert.equal(typeof n.params._meta['io.modelcontextprotocol/subscriptionId'], 'string');
    await sub.close();
    assert.equal(await sub.closed, 'local');
    await waitFor(async () => (await getStatus(srv.port)).listens === 0, { message: 'the stream freed' });
    const before = got.length;
    await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 2 });
    await sleep(300);
    assert.equal(got.length, before, 'nothing after close()');
  } finally {
    await client.close();
  }
});

/* Per worker slot: [sessions, listen streams] (mcpsubctl --json workers). */
function perWorker(server) {
  const r = spawnSync(MCPSUBCTL, [...ctlDbArgs(server.dbPath), '--json', 'workers'], { encoding: 'utf8', timeout: 10000 });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout).workers.map((w) => [w.sessions, w.listens]);
}

test('one change, seen by a 1.x client on a 2025 session and a v2 client on a listen stream of another worker', async () => {
  const uri = `${srv.base}/Product/B-200`;
  const old = new Client({ name: 'v1', version: '1.0.0' }, { capabilities: {} });
  const v1got = [];
  old.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => v1got.push(n.params.uri));
  await old.connect(new StreamableHTTPClientTransport(new URL(srv.url)));
  await old.subscribeResource({ uri });
  const sessionSlot = perWorker(srv).findIndex(([sessions]) => sessions > 0);
  // Listen streams until one lives on the other worker (the master picks the less loaded one);
  // every one of them must see the change, so the one over there does.
  const v2 = [];
  for (let i = 0; i < 16 && !perWorker(srv).some(([, l], slot) => slot !== sessionSlot && l > 0); i++) {
    const c = await connectV2(srv);
    c.sub = await c.client.listen({ resourceSubscriptions: [uri] });
    v2.push(c);
    await waitFor(() => perWorker(srv).reduce((n, [, l]) => n + l, 0) === v2.length, { message: 'the listen streams counted' });
  }
  try {
    assert.ok(perWorker(srv).some(([, l], slot) => slot !== sessionSlot && l > 0), 'a listen stream on the other worker');
    await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 321 });
    await waitFor(() => v1got.length === 1 && v2.every((c) => updates(c.got).length === 1), { timeoutMs: 5000, message: 'all notified' });
    assert.deepEqual(v1got, [uri]);
    for (const c of v2) assert.deepEqual(updates(c.got), [[uri, uri]]);
  } finally {
    for (const c of v2) {
      await c.sub.close();
      await c.client.close();
    }
    await old.close();
  }
});

test('envelope and header errors: -32020 for a missing or disagreeing header, -32022 for an unsupported version', async () => {
  const read = modern('resources/read', { uri: `${srv.base}/Product/A-100` });
  const name = { 'Mcp-Name': `${srv.base}/Product/A-100` };
  const cases = [
    ['no MCP-Protocol-Version', modern('ping'), { 'MCP-Protocol-Version': null }, -32020],
    ['MCP-Protocol-Version disagrees', modern('ping'), { 'MCP-Protocol-Version': '2025-11-25' }, -32020],
    ['no Mcp-Method', modern('ping'), { 'Mcp-Method': null }, -32020],
    ['Mcp-Method disagrees', modern('ping'), { 'Mcp-Method': 'tools/list' }, -32020],
    ['no Mcp-Name', read, {}, -32020],
    ['Mcp-Name disagrees', read, { 'Mcp-Name': `${srv.base}/Product/B-200` }, -32020],
    ['header says 2026, no envelope', { jsonrpc: '2.0', id: 1, method: 'ping' }, {}, -32020],
  ];
  for (const [what, msg, headers, code] of cases) {
    const res = await post(srv.port, msg, headers);
    assert.equal(res.status, 400, `${what}: ${res.text}`);
    assert.equal(res.json().error.code, code, what);
  }
  const v = modern('ping');
  v.params._meta['io.modelcontextprotocol/protocolVersion'] = '2099-01-01';
  const res = await post(srv.port, v, { 'MCP-Protocol-Version': '2099-01-01' });
  assert.equal(res.status, 400);
  assert.deepEqual(res.json().error.data, { supported: [V, '2025-11-25', '2025-06-18', '2025-03-26'], requested: '2099-01-01' });
  // Mcp-Name in the base64 form of header values.
  const b64 = `=?base64?${Buffer.from(`${srv.base}/Product/A-100`).toString('base64')}?=`;
  assert.equal((await post(srv.port, read, { 'Mcp-Name': b64 })).status, 200);
  assert.equal((await post(srv.port, read, name)).status, 200);
  // Methods of the other generation.
  for (const m of ['initialize', 'resources/subscribe', 'logging/setLevel']) {
    const r = await post(srv.port, modern(m, { uri: `${srv.base}/Product` }));
    assert.equal(r.json().error.code, -32601, m);
  }
  const batch = await post(srv.port, [modern('ping')], { 'Mcp-Method': 'ping' });
  assert.equal(batch.status, 400);
});

test('a raw listen stream: the acknowledgement first with its position, no id: lines, updates with the subscription id; notifications/cancelled ends it', async () => {
  const uri = `${srv.base}/Product/C-300`;
  const l = await rawListen(srv.port, { resourceSubscriptions: [uri, 'not a uri'] }, { id: 'raw-1' });
  assert.match(l.head, /^HTTP\/1\.1 200/);
  assert.match(l.head, /content-type: text\/event-stream/i);
  const ack = l.events()[0].json;
  assert.equal(ack.method, 'notifications/subscriptions/acknowledged');
  assert.deepEqual(ack.params.notifications, { resourceSubscriptions: [uri] });
  assert.equal(ack.params._meta['io.modelcontextprotocol/subscriptionId'], 'raw-1');
  assert.match(ack.params._meta['io.mcpsub/position'], /^\d+$/);
  await rest(srv.port, 'PATCH', '/Product/C-300', { price_cents: 77 });
  await waitFor(() => l.events().length === 2, { timeoutMs: 5000, message: 'the update' });
  const up = l.events()[1].json;
  assert.deepEqual([up.params.uri, up.params.subscribedUri, up.params._meta['io.modelcontextprotocol/subscriptionId']], [uri, uri, 'raw-1']);
  assert.ok(Number(up.params._meta['io.mcpsub/position']) > Number(ack.params._meta['io.mcpsub/position']));
  assert.ok(!/^id:/m.test(l.text()), 'no id: lines on a listen stream');
  // Cancel it on another connection (maybe another worker: the master passes it on).
  const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'raw-1' } };
  const res = await request(srv.port, { method: 'POST', path: '/mcp', headers: { ...HEADERS, 'MCP-Protocol-Version': V }, body: JSON.stringify(cancel) });
  assert.equal(res.status, 202);
  await l.conn.waitClosed({ timeoutMs: 5000 });
  const n = l.events().length;
  await rest(srv.port, 'PATCH', '/Product/C-300', { price_cents: 78 });
  await sleep(200);
  assert.equal(l.events().length, n);
});

test('a listen URI that does not parse is refused with its reason; one that parses but names no column is left out', async () => {
  const good = `${srv.base}/Product?category=sw=to`;
  for (const [bad, why] of [[`${srv.base}/Product?category=re*`, /wildcards/], [`${srv.base}/Product?price_cents=xx=5`, /unknown operator/],
    [`${srv.base}/Product?name=sw=%C3`, /UTF-8/]]) {
    const res = await post(srv.port, modern('subscriptions/listen', { notifications: { resourceSubscriptions: [good, bad] } }, 'bad-1'));
    const err = res.json().error;
    assert.equal(err.code, -32602, bad);
    assert.ok(err.message.includes(bad), `${bad}: ${err.message}`);
    assert.match(err.message, why, bad);
    assert.doesNotMatch(res.headers['content-type'] ?? '', /event-stream/, 'no stream opened');
  }
  const l = await rawListen(srv.port, { resourceSubscriptions: [good, `${srv.base}/Product?nocol=1`] }, { id: 'left-out' });
  assert.deepEqual(l.events()[0].json.params.notifications, { resourceSubscriptions: [good] });
  l.conn.close();
});

test('bulk writes to listen streams that share a topic, own one, or hold two URIs, beside a 2025 session: every change once, in commit order, each with its own id', async () => {
  // Streams whose only subscription is the topic get a loop turn's updates at once; the stream
  // of two URIs gets them change by change; the session on the shared topic makes it mixed.
  const B = srv.base;
  const keyOf = (i) => `LST-${String(i).padStart(3, '0')}`;
  for (let i = 0; i < 100; i++) await rest(srv.port, 'PUT', `/Product/${keyOf(i)}`, product(keyOf(i), { price_cents: 1 }));
  const shared = `${B}/Product?sku=sw=LST-`;
  const streams = [];
  const old = new Client({ name: 'v1', version: '1.0.0' }, { capabilities: {} });
  const v1got = [];
  old.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => v1got.push(n.params.uri));
  await old.connect(new StreamableHTTPClientTransport(new URL(srv.url)));
  try {
    await old.subscribeResource({ uri: shared });
    for (let i = 0; i < 6; i++) streams.push({ uri: shared, l: await rawListen(srv.port, { resourceSubscriptions: [shared] }, { id: `shared-${i}` }) });
    for (let i = 0; i < 2; i++) {
      const own = `${B}/Product?sku=sw=LST-&price_cents=ne=${-1 - i}`;
      streams.push({ uri: own, l: await rawListen(srv.port, { resourceSubscriptions: [own] }, { id: i }) });
    }
    const two = await rawListen(srv.port, { resourceSubscriptions: [shared, `${B}/Product/${keyOf(0)}`] }, { id: 'two' });
    const bulk = (cents) => putRecords('sku=sw=LST-', { price_cents: cents });
    await bulk(2);
    await rest(srv.port, 'PATCH', `/Product/${keyOf(0)}`, { price_cents: 3 });
    await bulk(4);
    await waitFor(() => streams.every((s) => listenUpdates(s.l).length >= 201) && listenUpdates(two).length >= 204 && v1got.length >= 201,
      { timeoutMs: 15000, message: 'every update on every stream' });
    await sleep(200); // nothing more comes
    const first = positions(listenUpdates(streams[0].l));
    assert.equal(first.length, 201);
    assert.ok(first.every((q, i) => i === 0 || q > first[i - 1]), `not in commit order: ${first.join(',')}`);
    for (const [k, s] of streams.entries()) {
      const ups = listenUpdates(s.l);
      assert.deepEqual(positions(ups), first, `stream ${k}`);
      assert.ok(ups.every((p) => p.subscribedUri === s.uri), `stream ${k}: its URI`);
      const id = k < 6 ? `shared-${k}` : k - 6;
      assert.ok(ups.every((p) => p._meta['io.modelcontextprotocol/subscriptionId'] === id), `stream ${k}: its id`);
      assert.equal(ups[100].uri, `${B}/Product/${keyOf(0)}`, 'the PATCH between the bulk writes');
      for (let i = 0; i < 100; i++) assert.equal(ups.filter((p) => p.uri === `${B}/Product/${keyOf(i)}`).length, i === 0 ? 3 : 2);
    }
    const ups = listenUpdates(two);
    assert.equal(ups.length, 204);
    const twoPositions = positions(ups);
    assert.ok(twoPositions.every((q, i) => i === 0 || q >= twoPositions[i - 1]), 'the two-URI stream in commit order');
    assert.deepEqual([...new Set(twoPositions)], first, 'the two-URI stream: the same changes');
    assert.equal(ups.filter((p) => p.subscribedUri !== shared).length, 3);
    assert.equal(v1got.length, 201);
    two.conn.close();
  } finally {
    for (const s of streams) s.l.conn.close();
    await old.close();
  }
});

test('listen streams of one ne filter each, served by the turn\'s walk: every change once, in commit order, but the rows the filter excludes', async () => {
  // A stream whose only URI is category=ne=C<i> is matched once a turn (sub_index_walk). A row
  // notifies it unless both its images are C<i> or NULL.
  const B = srv.base;
  const keyOf = (i) => `LWALK-${String(i).padStart(3, '0')}`;
  for (let i = 0; i < 30; i++) await rest(srv.port, 'PUT', `/Product/${keyOf(i)}`, product(keyOf(i), { category: 'A' }));
  const streams = [];
  try {
    for (let i = 0; i < 6; i++) {
      const uri = `${B}/Product?category=ne=C${i}`;
      streams.push({ uri, l: await rawListen(srv.port, { resourceSubscriptions: [uri] }, { id: `w${i}` }) });
    }
    const bulk = (set) => putRecords('sku=sw=LWALK-', set);
    await bulk({ category: 'C0' }); // A -> C0: every stream, C0's by the old image
    await bulk({ name: 'two' }); // C0 -> C0: not C0's
    await bulk({ category: null }); // C0 -> NULL: not C0's
    await rest(srv.port, 'PATCH', `/Product/${keyOf(1)}`, { category: 'C1' }); // NULL -> C1: not C1's
    const want = (i) => (i === 0 ? 31 : i === 1 ? 90 : 91);
    await waitFor(() => streams.every((s, i) => listenUpdates(s.l).length >= want(i)), { timeoutMs: 15000, message: 'every update on every stream' });
    await sleep(300); // nothing more comes
    const all = positions(listenUpdates(streams[2].l));
    assert.equal(all.length, 91);
    assert.ok(all.every((q, i) => i === 0 || q > all[i - 1]), `not in commit order: ${all.join(',')}`);
    for (const [i, s] of streams.entries()) {
      const ups = listenUpdates(s.l);
      const expected = i === 0 ? [...all.slice(0, 30), all[90]] : i === 1 ? all.slice(0, 90) : all;
      assert.deepEqual(positions(ups), expected, `stream ${i}`);
      assert.ok(ups.every((p) => p.subscribedUri === s.uri && p._meta['io.modelcontextprotocol/subscriptionId'] === `w${i}`), `stream ${i}: its URI and id`);
    }
  } finally {
    for (const s of streams) s.l.conn.close();
  }
});

test('a stateless wait_and_read ends at once on notifications/cancelled, whichever worker gets the cancel', async () => {
  const uri = `${srv.base}/Product/A-100`;
  for (let i = 0; i < 3; i++) {
    const msg = modern('tools/call', { name: 'wait_and_read', arguments: { resources: [{ uri, sinceVersion: 'x' }], timeoutMs: 1 } }, `w${i}`);
    // sinceVersion 'x' differs from any version: answered at once. A real wait needs the current one.
    const now = (await post(srv.port, msg, { 'Mcp-Name': 'wait_and_read' })).json().result;
    const v = JSON.parse(now.content[0].text).resources[0].version;
    const wait = modern('tools/call', { name: 'wait_and_read', arguments: { resources: [{ uri, sinceVersion: v }], timeoutMs: 20000 } }, `wait-${i}`);
    const conn = await RawConnection.open(srv.port);
    conn.write(buildRequest(srv.port, { method: 'POST', path: '/mcp', headers: { ...HEADERS, 'MCP-Protocol-Version': V, 'Mcp-Method': 'tools/call', 'Mcp-Name': 'wait_and_read' }, body: JSON.stringify(wait) }));
    await waitFor(async () => (await getStatus(srv.port)).waiters === 1, { message: 'the wait pending' });
    const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: `wait-${i}` } };
    const res = await request(srv.port, { method: 'POST', path: '/mcp', headers: { ...HEADERS, 'MCP-Protocol-Version': V }, body: JSON.stringify(cancel) });
    assert.equal(res.status, 202);
    const answer = await conn.readResponse({ timeoutMs: 3000 });
    assert.equal(answer.status, 200);
    assert.match(answer.headers['content-type'], /^text\/event-stream/);
    assert.doesNotMatch(answer.text, /^data:/m, 'the cancelled call is not answered');
    conn.close();
    await waitFor(async () => (await getStatus(srv.port)).waiters === 0, { message: 'no waiter left' });
  }
});

test('recovery extension: a new listen from a position gets one update per URI changed since, then live ones', async () => {
  const B = srv.base;
  const l1 = await rawListen(srv.port, { resourceSubscriptions: [`${B}/StockEvent`] }, { id: 'r1' });
  const position = l1.events()[0].json.params._meta['io.mcpsub/position'];
  l1.conn.close();
  await waitFor(async () => (await getStatus(srv.port)).listens === 0, { message: 'the first stream gone' });
  await rest(srv.port, 'PUT', '/StockEvent/950', { sku: 'A-100', delta: 1 });
  await rest(srv.port, 'PUT', '/StockEvent/951', { sku: 'A-100', delta: 2 });
  await rest(srv.port, 'PATCH', '/StockEvent/950', { delta: 3 });
  await sleep(300); // the tailers have read them
  const l2 = await rawListen(srv.port, { resourceSubscriptions: [`${B}/StockEvent`] }, { id: 'r2', meta: { 'io.mcpsub/after': position } });
  await waitFor(() => l2.events().length >= 3, { timeoutMs: 5000, message: 'the missed updates' });
  const got = l2.events().slice(1).map((e) => e.json.params.uri);
  assert.deepEqual(got, [`${B}/StockEvent/951`, `${B}/StockEvent/950`]); // one per URI, by newest change
  await rest(srv.port, 'PUT', '/StockEvent/952', { sku: 'A-100', delta: 4 });
  await waitFor(() => l2.events().length === 4, { timeoutMs: 5000, message: 'the live update' });
  assert.equal(l2.events()[3].json.params.uri, `${B}/StockEvent/952`);
  l2.conn.close();
  // A position is the digits this server wrote, nothing more, nothing less.
  for (const bad of ['12abc', ' 12', '+5', '-1', '', '012', '99999999999999999999', 12]) {
    const msg = modern('subscriptions/listen', { notifications: { resourceSubscriptions: [`${B}/StockEvent`] } }, 'bad');
    msg.params._meta['io.mcpsub/after'] = bad;
    const res = await post(srv.port, msg);
    assert.equal(res.json().error?.code, -32602, `${JSON.stringify(bad)}: ${res.text}`);
  }
});

test('bounds: too many URIs in one listen is -32602; the filter must be an object; --limit-subscriptions counts listen streams (429)', async () => {
  const s = await startServer({ args: ['--max-subscriptions', '3', '--limit-subscriptions', '4', '--workers', '0'] });
  try {
    const uris = ['A-100', 'B-200', 'C-300', 'D-400'].map((k) => `${s.base}/Product/${k}`);
    const res = await post(s.port, modern('subscriptions/listen', { notifications: { resourceSubscriptions: uris } }));
    assert.equal(res.json().error.code, -32602, res.text);
    const bad = await post(s.port, modern('subscriptions/listen', {}));
    assert.equal(bad.json().error.code, -32602, bad.text);
    const first = await rawListen(s.port, { resourceSubscriptions: uris.slice(0, 2) }, { id: 'a' });
    const over = await post(s.port, modern('subscriptions/listen', { notifications: { resourceSubscriptions: uris.slice(1, 4) } }, 'b'));
    assert.equal(over.status, 429, over.text);
    assert.ok(Number(over.headers['retry-after']) >= 1);
    first.conn.close();
    await waitFor(async () => (await getStatus(s.port)).listens === 0, { message: 'the first stream gone' });
    const l = await rawListen(s.port, { resourceSubscriptions: uris.slice(1, 4) }, { id: 'c' });
    assert.equal(l.events()[0].json.params.notifications.resourceSubscriptions.length, 3);
    l.conn.close();
  } finally {
    await s.stop();
  }
});

test('a drain ends listen streams with their result: closed resolves "graceful"', async () => {
  const s = await startServer({});
  const { client } = await connectV2(s);
  const sub = await client.listen({ resourceSubscriptions: [`${s.base}/Product`] });
  const closed = sub.closed;
  await s.stop();
  assert.equal(await closed, 'graceful');
  await client.close().catch(() => {});
});

test('keepalive comments on a listen stream; the acknowledgement comes first even while commits pour in', async () => {
  const s = await startServer({ args: ['--sse-keepalive', '1'] });
  try {
    const l = await rawListen(s.port, { resourceSubscriptions: [`${s.base}/StockEvent`] }, { id: 'k' });
    await waitFor(() => parseSse(l.text()).comments.includes('keepalive'), { timeoutMs: 3000, message: 'a keepalive comment' });
    l.conn.close();
    // A writer commits as fast as it can while listen streams open: each starts with its acknowledgement.
    let stop = false;
    let n = 0;
    const writer = (async () => {
      while (!stop) await rest(s.port, 'PUT', `/StockEvent/${7000 + (n++ % 50)}`, { sku: 'A-100', delta: n });
    })();
    for (let i = 0; i < 10; i++) {
      const li = await rawListen(s.port, { resourceSubscriptions: [`${s.base}/StockEvent`] }, { id: i });
      await sleep(30);
      const evs = li.events();
      assert.equal(evs[0].json.method, 'notifications/subscriptions/acknowledged', `stream ${i}`);
      const pos = Number(evs[0].json.params._meta['io.mcpsub/position']);
      for (const e of evs.slice(1)) assert.ok(Number(e.json.params._meta['io.mcpsub/position']) > pos, 'only changes after the acknowledgement');
      li.conn.close();
    }
    stop = true;
    await writer;
  } finally {
    await s.stop();
  }
});

test('with authentication: a listen stream sees only its row scope, and ends when its key is revoked', async () => {
  const dir = makeTempDir('mcpsub-modern-auth-');
  const keysFile = path.join(dir, 'keys.json');
  const add = (name, role) => {
    const r = spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, 'key', 'add', name, '--role', role], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim();
  };
  const acme = add('acme-agent', 'tenant-user');
  const bolt = add('bolt-agent', 'tenant-user');
  const ops = add('ops', 'writer');
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify({
    roles: { 'tenant-user': { tables: { Widget: { rights: ['read', 'subscribe'], scope: { column: 'tenant', bind: 'claim:tenant' } } } } },
    keys: { 'acme-agent': { tenant: 'acme' }, 'bolt-agent': { tenant: 'bolt' } },
  }));
  const schema = path.join(dir, 'schema.sql');
  fs.writeFileSync(schema, `CREATE TABLE Widget (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, v INTEGER NOT NULL DEFAULT 0);
    INSERT INTO Widget VALUES ('a0', 'acme', 1), ('b0', 'bolt', 1);`);
  const s = await startServer({ schema, args: ['--auth-keys', keysFile, '--policy', policy, '--workers', '2'] });
  const open = async (key) => {
    const client = new ClientV2({ name: 'v2-auth', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    const got = [];
    client.fallbackNotificationHandler = async (n) => got.push(n);
    await client.connect(new TransportV2(new URL(s.url), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    const sub = await client.listen({ resourceSubscriptions: [`${s.base}/Widget`] });
    return { client, got, sub };
  };
  try {
    const a = await open(acme);
    const b = await open(bolt);
    const w = (id, tenant, v) => request(s.port, { method: 'PUT', path: `/Widget/${id}`, headers: { Authorization: `Bearer ${ops}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ tenant, v }) });
    assert.equal((await w('a1', 'acme', 2)).status, 201);
    assert.equal((await w('b1', 'bolt', 2)).status, 201);
    sqlite(s.dbPath, "UPDATE Widget SET v = 9 WHERE id = 'a0'");
    await waitFor(() => updates(a.got).length === 2 && updates(b.got).length === 1, { timeoutMs: 5000, message: 'each its own' });
    await sleep(200);
    assert.deepEqual(updates(a.got).map(([u]) => u).sort(), [`${s.base}/Widget/a0`, `${s.base}/Widget/a1`]);
    assert.deepEqual(updates(b.got).map(([u]) => u), [`${s.base}/Widget/b1`]);
    // Revoke acme's key: its stream ends within a second or so; bolt's stays.
    const r = spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, 'key', 'revoke', 'acme-agent'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(await withTimeout(a.sub.closed, 3000, 'the revoked stream to end'), 'graceful');
    assert.equal((await w('b2', 'bolt', 3)).status, 201);
    await waitFor(() => updates(b.got).length === 2, { timeoutMs: 5000, message: 'bolt still listening' });
    await b.sub.close();
    await a.client.close().catch(() => {});
    await b.client.close();
  } finally {
    await s.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a dropped table ends the listen subscriptions on it with one last update; the others go on', async () => {
  const s = await startServer({});
  try {
    sqlite(s.dbPath, 'CREATE TABLE Gear (id INTEGER PRIMARY KEY, v TEXT)');
    await request(s.port, { path: '/healthz' });
    await post(s.port, modern('ping')); // the schema change is noticed at the next request
    const l = await rawListen(s.port, { resourceSubscriptions: [`${s.base}/Gear`, `${s.base}/Product/A-100`], resourcesListChanged: true }, { id: 'g' });
    assert.equal(l.events()[0].json.params.notifications.resourceSubscriptions.length, 2);
    sqlite(s.dbPath, 'DROP TABLE Gear');
    await post(s.port, modern('ping'));
    await waitFor(() => l.events().length >= 3, { timeoutMs: 3000, message: 'the ending and the list change' });
    const [, ended, listChanged] = l.events().map((e) => e.json);
    assert.deepEqual([ended.params.uri, ended.params._meta['io.mcpsub/subscriptionEnded'], ended.params._meta['io.modelcontextprotocol/subscriptionId']], [`${s.base}/Gear`, 'its table no longer exists', 'g']);
    assert.equal(listChanged.method, 'notifications/resources/list_changed');
    await rest(s.port, 'PATCH', '/Product/A-100', { price_cents: 5 });
    await waitFor(() => l.events().length === 4, { timeoutMs: 3000, message: 'the other subscription still live' });
    assert.equal(l.events()[3].json.params.uri, `${s.base}/Product/A-100`);
    l.conn.close();
  } finally {
    await s.stop();
  }
});
