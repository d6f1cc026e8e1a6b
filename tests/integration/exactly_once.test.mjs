// Exactly once on every resumption path: Last-Event-ID is exclusive on
// the ring, on recovery from the audit log (after a restart, on a
// restarted worker), inside a series of updates one change caused, and
// inside a "re-read" series after retention pruned the gap. With
// --coalesce-ms, a change held for its window's trailing edge is sent when
// the server drains and recovered when the worker dies.

import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

import { startServer, getStatus } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sqlite, sqliteRows } from './lib/sqlite.mjs';
import { sleep, waitFor } from './lib/wait.mjs';
import { EventStream, idSeq, pair } from './lib/sse.mjs';
import { auditMax, rest, restartServer, waitStatus } from './lib/subs.mjs';

async function subscribe(s, uri) {
  assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
}

const isPriming = (e) => e.id !== undefined && e.data === '' && e.retry === undefined;

/*
 * Opens the session's stream and waits for its priming event. A replay from
 * the ring may carry older priming events (the ring keeps them too): the
 * stream's own is the last one, written right after the replay.
 */
async function openPrimed(server, s, lastEventId) {
  const st = await EventStream.open(server.port, s.id, { lastEventId });
  await st.waitPrimed();
  await sleep(50);
  return st;
}

/* Updates received before the stream's own priming event: what was replayed or recovered. */
function replayed(st) {
  let at = -1;
  st.events.forEach((e, i) => {
    if (isPriming(e)) at = i;
  });
  return st.updates().filter((e) => st.events.indexOf(e) < at);
}

/* Waits until the server's feed has read everything committed so far. */
async function caughtUp(server) {
  const max = auditMax(server.dbPath);
  await waitFor(async () => (await getStatus(server.port)).auditPosition >= max, {
    timeoutMs: 5000,
    message: `the server's feed to reach audit seq ${max}`,
  });
}

const ids = (events) => events.map((e) => e.id);

test('one change, two subscriptions, cut between their updates: the resumed stream (new process) sends only the second', async () => {
  let server = await startServer();
  try {
    const B = server.base;
    const s = await McpSession.open(server.port);
    const record = `${B}/Product/A-100`;
    const coll = `${B}/Product`;
    await subscribe(s, record);
    await subscribe(s, coll);
    const st = await openPrimed(server, s);
    await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 7 });
    const [first, second] = await st.waitUpdates(2);
    assert.equal(idSeq(first.id), idSeq(second.id), 'both updates name the one change');
    assert.notEqual(first.id, second.id);
    st.close();
    server = await restartServer(server);

    // Cut after the first: only the second comes back.
    const a = await openPrimed(server, s, first.id);
    assert.deepEqual(ids(replayed(a)), [second.id], a.describe());
    assert.deepEqual(pair(replayed(a)[0]), pair(second));
    a.close();
    // Cut after the second, or at the priming event: nothing.
    const b = await openPrimed(server, s, second.id);
    assert.deepEqual(replayed(b), [], b.describe());
    const primingId = b.events.filter(isPriming).pop().id;
    b.close();
    // Two more changes; resumed from the first update's id, each (URI, subscription) pair
    // comes once, named by the newest change, in commit order.
    const r1 = await rest(server.port, 'PATCH', '/Product/B-200', { price_cents: 8 });
    const r2 = await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 9 });
    await caughtUp(server);
    const c = await openPrimed(server, s, primingId);
    const seqB = Number(JSON.parse(r1.headers.etag));
    const seqA = Number(JSON.parse(r2.headers.etag));
    const got = replayed(c).map((e) => [idSeq(e.id), ...pair(e)]);
    assert.deepEqual(
      got.map((g) => JSON.stringify(g)).sort(),
      [
        [seqB, `${B}/Product/B-200`, coll],
        [seqA, record, record],
        [seqA, record, coll],
      ]
        .map((g) => JSON.stringify(g))
        .sort(),
      c.describe(),
    );
    const order = got.map((g) => g[0]);
    assert.deepEqual(order, [...order].sort((x, y) => x - y), 'recovered in commit order');
    // The same two updates of the newest change come in the same order as live ones did.
    const ofA = replayed(c).filter((e) => idSeq(e.id) === seqA);
    assert.deepEqual(ofA.map((e) => e.json.params.subscribedUri), [first, second].map((e) => e.json.params.subscribedUri));
    c.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('Last-Event-ID in the ring is exclusive too, also for a change with several updates', async () => {
  const server = await startServer();
  try {
    const B = server.base;
    const s = await McpSession.open(server.port);
    await subscribe(s, `${B}/Product/A-100`);
    await subscribe(s, `${B}/Product`);
    await subscribe(s, `${B}/Product?category=tools`);
    const st = await openPrimed(server, s);
    await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 3 });
    await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 4 });
    const all = await st.waitUpdates(6);
    st.close();
    await waitStatus(server.port, { streams: 0 });
    for (let cut = 0; cut < all.length; cut++) {
      const r = await openPrimed(server, s, all[cut].id);
      assert.deepEqual(ids(replayed(r)), ids(all.slice(cut + 1)), `cut after ${all[cut].id}: ${r.describe()}`);
      r.close();
      await waitStatus(server.port, { streams: 0 });
    }
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('retention pruned the gap: the re-read series, cut in the middle, resumes with the rest of it', async () => {
  const server = await startServer();
  try {
    const B = server.base;
    const s = await McpSession.open(server.port);
    const subs = [`${B}/Product/D-400`, `${B}/Product`, `${B}/StockEvent`];
    for (const u of subs) await subscribe(s, u);
    let st = await openPrimed(server, s);
    await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 1 });
    await st.waitUpdates(2);
    const last = st.lastId;
    st.close();
    await waitStatus(server.port, { streams: 0 });
    await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 2 });
    await caughtUp(server);
    const through = auditMax(server.dbPath);
    sqlite(
      server.dbPath,
      `DELETE FROM audit_log WHERE seq > ${idSeq(last)} AND seq <= ${through};
       INSERT INTO mcpsub_state (name, value) VALUES ('audit_pruned_through', ${through})
         ON CONFLICT(name) DO UPDATE SET value = CASE WHEN excluded.value > mcpsub_state.value THEN excluded.value ELSE mcpsub_state.value END;`,
    );
    // A fresh process, so that the ring cannot answer.
    const again = await restartServer(server);
    try {
      st = await openPrimed(again, s, last);
      const series = replayed(st);
      assert.deepEqual(series.map((e) => e.json.params.uri).sort(), [...subs].sort(), st.describe());
      for (const e of series) assert.equal(e.json.params.uri, e.json.params.subscribedUri);
      st.close();
      // Cut after the first of the series: the rest of it, nothing else.
      const rest2 = await openPrimed(again, s, series[0].id);
      assert.deepEqual(ids(replayed(rest2)), ids(series.slice(1)), rest2.describe());
      rest2.close();
      // After the last of it: nothing (the log is exact again from there).
      const none = await openPrimed(again, s, series[series.length - 1].id);
      assert.deepEqual(replayed(none), [], none.describe());
      none.close();
      await s.delete();
    } finally {
      await again.stop();
    }
  } finally {
    await server.kill();
  }
});

test('--coalesce-ms: a held change is sent when the server drains (SIGTERM), before the stream ends', async () => {
  const server = await startServer({ args: ['--coalesce-ms', '20000'] });
  let stopped = false;
  try {
    const s = await McpSession.open(server.port);
    const record = `${server.base}/Product/C-300`;
    await subscribe(s, record);
    const st = await openPrimed(server, s);
    await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 1 });
    const res = await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 2 });
    const held = Number(JSON.parse(res.headers.etag));
    await st.waitUpdates(1);
    await caughtUp(server);
    await sleep(100);
    assert.equal(st.updates().length, 1, 'the second change is held for the window');
    await server.stop({ keepDir: false });
    stopped = true;
    await st.waitClosed();
    assert.deepEqual(st.updates().map((e) => idSeq(e.id)), [held - 1, held], st.describe());
  } finally {
    if (!stopped) await server.stop();
  }
});

/* The pids of a process's children (the workers of a master). */
function childrenOf(pid) {
  return fs
    .readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
    .trim()
    .split(/\s+/)
    .filter(Boolean)
    .map(Number);
}

test('--coalesce-ms: a held change is recovered when its worker dies, exactly once and in order', async () => {
  const server = await startServer({ args: ['--workers', '1', '--coalesce-ms', '20000'] });
  try {
    const B = server.base;
    const s = await McpSession.open(server.port);
    const record = `${B}/Product/C-300`;
    const other = `${B}/Product/D-400`;
    await subscribe(s, record);
    await subscribe(s, other);
    const st = await openPrimed(server, s);
    const r1 = await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 1 });
    await st.waitUpdates(1);
    const r2 = await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 2 }); // held
    const r3 = await rest(server.port, 'PATCH', '/Product/D-400', { price_cents: 3 }); // waits behind it
    await caughtUp(server);
    await sleep(100);
    const seq = (r) => Number(JSON.parse(r.headers.etag));
    assert.deepEqual(st.updates().map((e) => idSeq(e.id)), [seq(r1)], 'nothing overtakes the held change');
    const last = st.lastId;
    const [worker] = childrenOf(server.child.pid);
    assert.ok(worker, 'a worker process');
    process.kill(worker, 'SIGKILL');
    await st.waitClosed();
    // The master restarts the worker; the session is restored from its row.
    const resumed = await waitFor(
      async () => {
        try {
          return await openPrimed(server, s, last);
        } catch {
          return undefined;
        }
      },
      { timeoutMs: 10000, message: 'the restarted worker to take the stream' },
    );
    assert.deepEqual(
      replayed(resumed).map((e) => [idSeq(e.id), e.json.params.uri]),
      [
        [seq(r2), record],
        [seq(r3), other],
      ],
      resumed.describe(),
    );
    resumed.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});
