// Per-subscription debounce, black-box: _meta["io.mcpsub/debounce"] on
// resources/subscribe and subscriptions/listen. A burst of changes to a
// record gives one update once it has been quiet for quietMs, and a record
// that never goes quiet is announced at least every maxMs. Updates of
// other subscriptions on the same stream never overtake a held one
// (commit order), the held update goes out on a drain, a worker's death
// loses nothing (Last-Event-ID recovers it, exactly once), and the
// debounce survives the session's restore on the restarted worker. A
// change held (debounce or --coalesce-ms) at SIGTERM is announced exactly
// once to a client that resumes with Last-Event-ID after the restart.

import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

import { controlCall, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sessionRow } from './lib/sqlite.mjs';
import { EventStream, idSeq } from './lib/sse.mjs';
import { rest, restartServer } from './lib/subs.mjs';
import { rawListen } from './lib/modern.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

const META = 'io.mcpsub/debounce';
const seqOf = (res) => Number(JSON.parse(res.headers.etag));

async function subscribe(s, uri, debounce) {
  const params = debounce ? { uri, _meta: { [META]: debounce } } : { uri };
  assert.deepEqual(await s.result('resources/subscribe', params), {});
}

async function openPrimed(server, s, lastEventId) {
  const st = await EventStream.open(server.port, s.id, { lastEventId });
  await st.waitPrimed();
  return st;
}

function childrenOf(pid) {
  return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
}

test('a burst of changes gives one update, after the record has been quiet for quietMs', async () => {
  const server = await startServer();
  try {
    const s = await McpSession.open(server.port);
    const record = `${server.base}/Product/A-100`;
    await subscribe(s, record, { quietMs: 400 });
    const st = await openPrimed(server, s);
    let last;
    for (let i = 1; i <= 5; i++) {
      last = await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 1000 + i });
      await sleep(50);
    }
    await sleep(150); // 150 ms after the last change: still quiet for less than 400 ms
    assert.equal(st.updates().length, 0, st.describe());
    await st.waitUpdates(1);
    await sleep(300);
    assert.deepEqual(st.updates().map((e) => [idSeq(e.id), e.json.params.uri]), [[seqOf(last), record]], st.describe());
    st.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('a record that never goes quiet is still announced every maxMs', async () => {
  const server = await startServer();
  try {
    const s = await McpSession.open(server.port);
    await subscribe(s, `${server.base}/Product/A-100`, { quietMs: 300, maxMs: 600 });
    const st = await openPrimed(server, s);
    const started = Date.now();
    let writes = 0;
    while (Date.now() - started < 2000) {
      await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 2000 + writes++ });
      await sleep(60);
    }
    const during = st.updates().length;
    assert.ok(during >= 2, `updates while changes kept coming every 60 ms for 2 s: ${during}\n${st.describe()}`);
    assert.ok(during < writes / 3, `debounced: ${during} updates for ${writes} changes`);
    st.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('an update of another subscription waits behind a held one: the stream stays in commit order', async () => {
  const server = await startServer();
  try {
    const B = server.base;
    const s = await McpSession.open(server.port);
    await subscribe(s, `${B}/Product/A-100`, { quietMs: 500, maxMs: 500 });
    await subscribe(s, `${B}/Product/B-200`);
    const st = await openPrimed(server, s);
    const r1 = await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    const r2 = await rest(server.port, 'PATCH', '/Product/B-200', { price_cents: 2 });
    await sleep(250);
    assert.equal(st.updates().length, 0, `nothing overtakes the held change\n${st.describe()}`);
    await st.waitUpdates(2);
    assert.deepEqual(
      st.updates().map((e) => [idSeq(e.id), e.json.params.uri]),
      [
        [seqOf(r1), `${B}/Product/A-100`],
        [seqOf(r2), `${B}/Product/B-200`],
      ],
      st.describe(),
    );
    st.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('a session that takes a debounced subscription leaves the turn\'s gathering, and rejoins it when it drops it: commit order throughout', async () => {
  // One worker: the sessions share its topics. Four sessions hold the collection alone and are
  // gathered; s holds it too, and for a while a debounced record as well. The second bulk write
  // changes the rows before the record and the record in one transaction: s's updates of the
  // rows must go before the record's, which is held, and the collection's update of the record
  // waits behind that.
  const server = await startServer({ args: ['--workers', '1'] });
  try {
    const B = server.base;
    const coll = `${B}/Product?sku=sw=DBN-`;
    const record = `${B}/Product/DBN-X`;
    for (const sku of [...Array.from({ length: 20 }, (_, i) => `DBN-0${String(i).padStart(2, '0')}`), 'DBN-X'])
      await rest(server.port, 'PUT', `/Product/${sku}`, { sku, name: 'n', price_cents: 1 });
    const sessions = [];
    for (let i = 0; i < 5; i++) {
      const x = await McpSession.open(server.port);
      await subscribe(x, coll);
      sessions.push({ x, st: await openPrimed(server, x) });
    }
    const s = sessions[0];
    const notified = async () => {
      const { subscriptions } = await controlCall(server, { cmd: 'subs' });
      return { n: subscriptions.find((x) => x.uri === coll)?.notified, all: JSON.stringify(subscriptions) };
    };
    const before = (await notified()).n;
    const bulk = async (filter, cents) => {
      const r = await s.x.result('tools/call', { name: 'put_records', arguments: { table: 'Product', filter, set: { price_cents: cents } } });
      assert.ok(!r.isError, JSON.stringify(r));
    };
    await bulk('sku=sw=DBN-0', 2); // 20 rows
    await subscribe(s.x, record, { quietMs: 1000, maxMs: 1000 });
    await bulk('sku=sw=DBN-', 4); // 21 rows, the record last
    await s.st.waitUpdates(1, record, { timeoutMs: 5000 });
    assert.deepEqual(await s.x.result('resources/unsubscribe', { uri: record }), {});
    await bulk('sku=sw=DBN-0', 5);
    for (const { st } of sessions) await st.waitUpdates(61, coll, { timeoutMs: 10000 });
    await sleep(300);
    const seqs = (st, uri) => st.updates(uri).map((e) => idSeq(e.id));
    const first = seqs(sessions[1].st, coll);
    assert.equal(first.length, 61, sessions[1].st.describe());
    assert.ok(first.every((q, i) => i === 0 || q > first[i - 1]), `not in commit order: ${first.join(',')}`);
    for (const { st } of sessions) assert.deepEqual(seqs(st, coll), first, st.describe());
    const recordChange = sessions[1].st.updates(coll).find((e) => e.json.params.uri === record && idSeq(e.id) > first[19]);
    assert.deepEqual(seqs(s.st, record), [idSeq(recordChange.id)], s.st.describe());
    const all = s.st.updates().map((e) => idSeq(e.id));
    assert.equal(all.length, 62);
    assert.ok(all.every((q, i) => i === 0 || q >= all[i - 1]), `s: not in commit order: ${all.join(',')}`);
    // One update formatted per change of the collection, though s was served apart from the
    // others, and its update of the record queued behind the held one (or not: the topics'
    // order, which decides it, follows the port in their URIs).
    const after = await notified();
    assert.equal(after.n - before, 61, after.all);
    for (const { x, st } of sessions) {
      st.close();
      await x.delete();
    }
  } finally {
    await server.stop();
  }
});

test('a held update is sent when the server drains (SIGTERM), before the stream ends', async () => {
  const server = await startServer();
  let stopped = false;
  try {
    const s = await McpSession.open(server.port);
    await subscribe(s, `${server.base}/Product/C-300`, { quietMs: 20000, maxMs: 60000 });
    const st = await openPrimed(server, s);
    const res = await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 7 });
    await sleep(200);
    assert.equal(st.updates().length, 0);
    await server.stop({ keepDir: false });
    stopped = true;
    await st.waitClosed();
    assert.deepEqual(st.updates().map((e) => idSeq(e.id)), [seqOf(res)], st.describe());
  } finally {
    if (!stopped) await server.stop();
  }
});

/*
 * Drain, restart on the same database, resume with Last-Event-ID: the
 * change a debounce held when SIGTERM came is announced exactly once over
 * both processes, whether the drain could send it (the stream was open) or
 * not (no stream then: the audit log recovers it for the next one). The
 * last step of each case is a live change of an undebounced subscription:
 * the resumed stream sends its replay before it, so once it is in, a
 * replayed duplicate would be too.
 */
for (const how of ['debounce', 'coalesce']) {
  const args = how === 'coalesce' ? ['--coalesce-ms', '20000'] : [];
  const heldSub = async (s, uri) => (how === 'debounce' ? subscribe(s, uri, { quietMs: 20000, maxMs: 60000 }) : subscribe(s, uri));
  // --coalesce-ms holds the second change of a window; a debounce the first.
  const hold = async (server, st, price) => {
    if (how === 'coalesce') {
      const first = await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: price - 1 });
      await st.waitUntil((x) => x.updates().some((e) => idSeq(e.id) === seqOf(first)), { what: 'the window-opening update' });
      return [first, await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: price })];
    }
    return [null, await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: price })];
  };
  // A session holding C-300 by the way under test and D-400 undebounced, its stream open.
  const opened = async (server) => {
    const s = await McpSession.open(server.port);
    const held = `${server.base}/Product/C-300`;
    const other = `${server.base}/Product/D-400`;
    await heldSub(s, held);
    await subscribe(s, other);
    return { s, held, other, st: await openPrimed(server, s) };
  };

  test(`${how}: a change held at SIGTERM and sent by the drain is not sent again to the stream resumed after the restart`, async () => {
    let server = await startServer({ args });
    try {
      const { s, other, st } = await opened(server);
      const [first, r] = await hold(server, st, 1301);
      await sleep(200);
      const before = st.updates().map((e) => idSeq(e.id));
      assert.ok(!before.includes(seqOf(r)), `the change is held: ${st.describe()}`);
      server = await restartServer(server, { args });
      await st.waitClosed();
      const sent = st.updates().map((e) => idSeq(e.id));
      assert.deepEqual(sent, [...(first ? [seqOf(first)] : []), seqOf(r)], `the drain sent the held change: ${st.describe()}`);
      const resumed = await openPrimed(server, s, st.lastId);
      const live = await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 451 });
      await resumed.waitUpdates(1, other);
      assert.deepEqual(
        resumed.updates().map((e) => [idSeq(e.id), e.json.params.uri]),
        [[seqOf(live), other]],
        `nothing replayed twice: ${resumed.describe()}`,
      );
      resumed.close();
      await s.delete();
    } finally {
      await server.stop();
    }
  });

  test(`${how}: a change held at SIGTERM with no stream open is recovered once by Last-Event-ID after the restart`, async () => {
    let server = await startServer({ args });
    try {
      const { s, held, other, st } = await opened(server);
      await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 452 });
      await st.waitUpdates(1, other);
      const [, r] = await hold(server, st, 1302);
      await sleep(200);
      assert.ok(!st.updates().some((e) => idSeq(e.id) === seqOf(r)), `the change is held: ${st.describe()}`);
      // The client's stream goes away while the change is held: its last id is below the change.
      const lastId = st.lastId;
      assert.ok(idSeq(lastId) < seqOf(r), `${lastId} is below ${seqOf(r)}`);
      st.close();
      server = await restartServer(server, { args });
      const resumed = await openPrimed(server, s, lastId);
      const live = await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 453 });
      await resumed.waitUpdates(1, other);
      const got = resumed.updates().map((e) => [idSeq(e.id), e.json.params.uri]);
      assert.deepEqual(got, [[seqOf(r), held], [seqOf(live), other]], `the held change once, then the live one: ${resumed.describe()}`);
      resumed.close();
      await s.delete();
    } finally {
      await server.stop();
    }
  });
}

test('a held update survives its worker dying: recovered once, in order, and the restored subscription still debounces', async () => {
  const server = await startServer({ args: ['--workers', '1'] });
  try {
    const B = server.base;
    const s = await McpSession.open(server.port);
    const held = `${B}/Product/C-300`;
    const other = `${B}/Product/D-400`;
    await subscribe(s, held, { quietMs: 20000, maxMs: 60000 });
    await subscribe(s, other);
    const row = JSON.parse(sessionRow(server.dbPath, s.id).subscriptions);
    assert.deepEqual(row.find((x) => typeof x === 'object'), { uri: held, debounce: { quietMs: 20000, maxMs: 60000 } });
    const st = await openPrimed(server, s);
    const r1 = await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 1 });
    await st.waitUpdates(1);
    const r2 = await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 2 }); // held
    const r3 = await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 3 }); // waits behind it
    await sleep(200);
    assert.deepEqual(st.updates().map((e) => idSeq(e.id)), [seqOf(r1)], st.describe());
    const lastId = st.lastId;
    const [worker] = childrenOf(server.child.pid);
    process.kill(worker, 'SIGKILL');
    await st.waitClosed();
    const resumed = await waitFor(
      async () => {
        try {
          return await openPrimed(server, s, lastId);
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 10000, message: 'the restarted worker to take the stream' },
    );
    await sleep(100);
    assert.deepEqual(
      resumed.updates().map((e) => [idSeq(e.id), e.json.params.uri]),
      [
        [seqOf(r2), held],
        [seqOf(r3), other],
      ],
      resumed.describe(),
    );
    // Restored from the row with its debounce: a new change is held again.
    await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 4 });
    await sleep(300);
    assert.equal(resumed.updates().length, 2, resumed.describe());
    resumed.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('subscriptions/listen: the debounce applies to each URI of the stream; a bad debounce is -32602', async () => {
  const server = await startServer();
  try {
    const uri = `${server.base}/Product/A-100`;
    const l = await rawListen(server.port, { resourceSubscriptions: [uri] }, { id: 'd1', meta: { [META]: { quietMs: 300 } } });
    const ups = () => l.events().filter((e) => e.json.method === 'notifications/resources/updated');
    let last;
    for (let i = 0; i < 4; i++) {
      last = await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 3000 + i });
      await sleep(40);
    }
    await waitFor(() => ups().length >= 1, { timeoutMs: 5000, message: 'the debounced update' });
    await sleep(400);
    assert.deepEqual(ups().map((e) => e.json.params._meta['io.mcpsub/position']), [String(seqOf(last))], l.text());
    l.conn.close();

    for (const bad of [{ quietMs: 0 }, { quietMs: 'x' }, { quietMs: 100, maxMs: 50 }, { quietMs: 70000 }, 5]) {
      const s = await McpSession.open(server.port);
      const err = await s.error('resources/subscribe', { uri, _meta: { [META]: bad } });
      assert.equal(err.code, -32602, JSON.stringify(bad));
      assert.match(err.message, /io\.mcpsub\/debounce/);
      await s.delete();
    }
  } finally {
    await server.stop();
  }
});
