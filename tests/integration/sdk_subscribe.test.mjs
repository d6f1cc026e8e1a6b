// Live subscriptions with the official MCP TypeScript SDK client
// (Client + StreamableHTTPClientTransport): subscribeResource on a record,
// a collection and a filtered collection; notifications for changes made
// through the put_record tool, REST and the sqlite3 CLI, with the right
// uri and subscribedUri; unsubscribeResource stopping them; the SDK's own
// reconnection with Last-Event-ID after the server cuts its GET stream;
// and a new server process on the same database and port restoring the
// session's subscriptions and recovering the gap from the audit log.
//
// The SDK validates notifications with zod schemas that drop parameters
// they do not know, so subscribedUri is read from the raw messages the
// transport hands to the client (transport.onmessage wrapped).

import test, { after } from 'node:test';
import assert from 'node:assert/strict';

import { connectSdk } from './lib/sdk.mjs';
import { startServer, getStatus } from './lib/server.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { waitFor } from './lib/wait.mjs';
import { product, rest, restartServer, waitStatus } from './lib/subs.mjs';

const servers = new Set();
const clients = [];

after(async () => {
  for (const c of clients) await c.client.close().catch(() => {});
  for (const s of servers) await s.kill();
});

async function server(args = []) {
  const s = await startServer({ args });
  servers.add(s);
  return s;
}

/* connectSdk, kept for the after hook's close. */
async function connect(srv, name) {
  const c = await connectSdk(srv, name);
  clients.push(c);
  return c;
}

const key = (p) => `${p.uri} <- ${p.subscribedUri}`;

/* Waits until every wanted { uri, subscribedUri } pair was received (raw). */
function waitPairs(c, want, { timeoutMs = 5000, what = 'notifications' } = {}) {
  return waitFor(
    () => {
      const got = new Set(c.raw.map(key));
      return want.every((p) => got.has(key(p)));
    },
    { timeoutMs, message: `${what}: want ${JSON.stringify(want.map(key))}, got ${JSON.stringify(c.raw.map(key))}` },
  );
}

test('SDK: subscribeResource on a record, a collection and a filtered collection; tool, REST and sqlite3 changes notify with subscribedUri; unsubscribe stops them', async () => {
  const srv = await server();
  const B = srv.base;
  const c = await connect(srv, 'sdk-subscribe');
  const record = `${B}/Product/A-100`;
  const coll = `${B}/Product`;
  const tools = `${B}/Product?category=tools`;
  const markerUri = `${B}/StockEvent/9000`;
  for (const uri of [record, coll, tools, markerUri]) assert.deepEqual(await c.client.subscribeResource({ uri }), {});
  assert.equal((await getStatus(srv.port)).subscriptions, 4);

  let markers = 0;
  const marker = async () => {
    markers++;
    await rest(srv.port, 'PUT', '/StockEvent/9000', { sku: 'MARK', delta: markers });
    await waitFor(() => c.raw.filter((p) => p.subscribedUri === markerUri).length === markers, { message: `marker ${markers}` });
  };
  const updates = () => c.raw.filter((p) => p.subscribedUri !== markerUri);

  // put_record (through the SDK's own session)
  const put = await c.client.callTool({ name: 'put_record', arguments: { table: 'Product', key: 'A-100', record: product('A-100', { name: 'Anvil' }) } });
  assert.ok(!put.isError, JSON.stringify(put));
  const a = `${B}/Product/A-100`;
  await waitPairs(c, [
    { uri: a, subscribedUri: record },
    { uri: a, subscribedUri: coll },
    { uri: a, subscribedUri: tools },
  ], { what: 'put_record' });
  // REST: a garden row, only the collection
  await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 1 });
  // sqlite3 CLI: a tools row, the collection and the filter
  sqlite(srv.dbPath, "UPDATE Product SET price_cents = 2 WHERE sku = 'C-300'");
  const b = `${B}/Product/B-200`;
  const cc = `${B}/Product/C-300`;
  await waitPairs(c, [
    { uri: b, subscribedUri: coll },
    { uri: cc, subscribedUri: coll },
    { uri: cc, subscribedUri: tools },
  ], { what: 'REST and sqlite3', timeoutMs: 5000 });
  await marker();
  const want = [
    { uri: a, subscribedUri: record },
    { uri: a, subscribedUri: coll },
    { uri: a, subscribedUri: tools },
    { uri: b, subscribedUri: coll },
    { uri: cc, subscribedUri: coll },
    { uri: cc, subscribedUri: tools },
  ];
  assert.deepEqual(updates().map(key).sort(), want.map(key).sort());
  // The SDK's notification handler saw each of them (its schema keeps uri).
  assert.deepEqual(
    c.handled.filter((p) => p.uri !== markerUri).map((p) => p.uri).sort(),
    want.map((p) => p.uri).sort(),
  );

  // unsubscribe the record and the filter: only the collection is left
  assert.deepEqual(await c.client.unsubscribeResource({ uri: record }), {});
  assert.deepEqual(await c.client.unsubscribeResource({ uri: tools }), {});
  await c.client.callTool({ name: 'put_record', arguments: { table: 'Product', key: 'A-100', record: product('A-100', { name: 'Anvil', price_cents: 4999 }) } });
  sqlite(srv.dbPath, "UPDATE Product SET price_cents = 1299 WHERE sku = 'C-300'");
  await waitPairs(c, [{ uri: cc, subscribedUri: coll }].concat(want), { what: 'after unsubscribe' });
  await waitFor(() => updates().length >= want.length + 2, { message: 'two collection updates after unsubscribe' });
  await marker();
  assert.deepEqual(
    updates().slice(want.length).map(key).sort(),
    [{ uri: a, subscribedUri: coll }, { uri: cc, subscribedUri: coll }].map(key).sort(),
  );
  await c.transport.terminateSession();
  await c.client.close();
  await waitStatus(srv.port, { sessions: 0, streams: 0, subscriptions: 0 });
  servers.delete(srv);
  await srv.stop();
});

test('SDK: the server cuts its GET stream (--max-stream-queue 4096, a burst of 200 inserts); the SDK reconnects with Last-Event-ID and misses no change', async () => {
  const srv = await server(['--max-stream-queue', '4096']);
  const B = srv.base;
  const c = await connect(srv, 'sdk-cut');
  const events = `${B}/StockEvent`;
  await c.client.subscribeResource({ uri: events });
  // One change first: the stream's ids then name a position past the empty log.
  await rest(srv.port, 'PUT', '/StockEvent/1', { sku: 'A-100', delta: 1 });
  await waitPairs(c, [{ uri: `${B}/StockEvent/1`, subscribedUri: events }]);
  sqlite(
    srv.dbPath,
    `BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
     INSERT INTO StockEvent (id, sku, delta) SELECT 50000 + i, 'BURST', i FROM n; COMMIT;`,
  );
  const want = Array.from({ length: 200 }, (_, i) => `${B}/StockEvent/${50001 + i}`);
  try {
    await waitFor(
      () => {
        const got = new Set(c.raw.map((p) => p.uri));
        return want.every((u) => got.has(u));
      },
      { timeoutMs: 15000, message: 'every burst URI notified' },
    );
  } catch (err) {
    const got = new Set(c.raw.map((p) => p.uri));
    const st = await getStatus(srv.port);
    assert.fail(
      `${want.filter((u) => !got.has(u)).length} of 200 changed URIs never notified; ` +
        `${c.raw.length} notifications received; /status ${JSON.stringify(st)}; SDK errors: ${JSON.stringify(c.errors.slice(-5))}`,
    );
  }
  assert.ok(c.raw.every((p) => p.subscribedUri === events));
  assert.ok((await getStatus(srv.port)).streams === 1, 'the SDK is connected again');
  await c.transport.terminateSession();
  await c.client.close();
  servers.delete(srv);
  await srv.stop();
});

test('SDK: a new server process on the same database and port restores the subscriptions and recovers the gap', async () => {
  let srv = await server();
  const B = srv.base;
  const c = await connect(srv, 'sdk-restart');
  const record = `${B}/Product/A-100`;
  const events = `${B}/StockEvent`;
  await c.client.subscribeResource({ uri: record });
  await c.client.subscribeResource({ uri: events });
  await c.client.callTool({ name: 'put_record', arguments: { table: 'Product', key: 'A-100', record: product('A-100', { name: 'Anvil' }) } });
  await waitPairs(c, [{ uri: record, subscribedUri: record }]);
  const seen = c.raw.length;

  // Stop; while no server runs, another process writes; then a new process on the same port.
  servers.delete(srv);
  await srv.stop({ keepDir: true });
  sqlite(
    srv.dbPath,
    `UPDATE Product SET price_cents = 1 WHERE sku = 'A-100';
     UPDATE Product SET price_cents = 2 WHERE sku = 'A-100';
     INSERT INTO StockEvent (id, sku, delta) VALUES (801, 'A-100', 1), (802, 'A-100', 2), (803, 'B-200', 3);
     UPDATE Product SET price_cents = 3 WHERE sku = 'B-200';`,
  );
  srv = await restartServer(srv);
  servers.add(srv);

  // The SDK reconnects its GET stream by itself (Last-Event-ID), restoring the session.
  const want = [
    { uri: record, subscribedUri: record },
    { uri: `${B}/StockEvent/801`, subscribedUri: events },
    { uri: `${B}/StockEvent/802`, subscribedUri: events },
    { uri: `${B}/StockEvent/803`, subscribedUri: events },
  ];
  await waitFor(
    () => {
      const got = new Set(c.raw.slice(seen).map(key));
      return want.every((p) => got.has(key(p)));
    },
    { timeoutMs: 15000, message: `the gap recovered: want ${JSON.stringify(want.map(key))}, got after restart ${JSON.stringify(c.raw.slice(seen).map(key))}; errors ${JSON.stringify(c.errors.slice(-3))}` },
  );
  // Nothing outside the subscriptions (B-200 changed, but no one subscribed to it).
  for (const p of c.raw.slice(seen)) assert.ok([record, events].includes(p.subscribedUri), key(p));
  const st = await getStatus(srv.port);
  assert.equal(st.subscriptions, 2, JSON.stringify(st));
  assert.equal(st.streams, 1, JSON.stringify(st));

  // Live on the new process, through the same SDK session (POST restores nothing twice).
  const n = c.raw.length;
  await c.client.callTool({ name: 'put_record', arguments: { table: 'StockEvent', key: 804, record: { sku: 'A-100', delta: 4 } } });
  await waitFor(() => c.raw.slice(n).some((p) => p.uri === `${B}/StockEvent/804` && p.subscribedUri === events), { message: 'a live update after the restart' });
  assert.equal((await getStatus(srv.port)).subscriptions, 2);
  await c.transport.terminateSession();
  await c.client.close();
  await waitStatus(srv.port, { sessions: 0, streams: 0, subscriptions: 0 });
  servers.delete(srv);
  await srv.stop();
});
