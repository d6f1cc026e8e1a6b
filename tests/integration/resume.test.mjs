// Resumption of a session's GET stream and the engine's delivery options,
// over the raw client: exact replay from the per-session ring with
// Last-Event-ID, recovery from the audit log after a restart on the same
// database (one notification per changed URI and subscription), the
// fallbacks when the log was pruned or the gap holds too many URIs or
// rows, an id the server cannot parse, a slow reader cut at
// --max-stream-queue that reconnects and misses nothing, coalescing with
// --coalesce-ms, and notifications/resources/list_changed when the
// exported tables change. Notices no stream took are never lost:
// list_changed and a subscription's ended notice reach the next stream
// after more than 100 later events left the ring, after a worker kill or
// a restart, and for a session live nowhere when its table was dropped.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

import { startServer, getStatus } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { PG_MODE } from './lib/pg.mjs';
import { sqlite, sqliteRows, sessionRow } from './lib/sqlite.mjs';
import { RawConnection, buildRequest } from './lib/raw.mjs';
import { sleep, waitFor } from './lib/wait.mjs';
import { EventStream, LIST_CHANGED, idSeq, pair } from './lib/sse.mjs';
import { auditMax, rest, restartServer, startServerOn, waitStatus } from './lib/subs.mjs';

let srv;

before(async () => {
  srv = await startServer();
});

after(async () => {
  await srv?.kill();
});

async function subscribe(s, uri) {
  assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
}

async function openPrimed(server, s, lastEventId) {
  const st = await EventStream.open(server.port, s.id, { lastEventId });
  await st.waitPrimed();
  return st;
}

/* Closes the client side of a stream and waits until the server has let go of it. */
async function dropStream(server, st, streamsAfter = 0) {
  st.close();
  await waitStatus(server.port, { streams: streamsAfter });
}

/* Waits until the server's feed has read everything committed so far. */
async function caughtUp(server, timeoutMs = 5000) {
  const max = auditMax(server.dbPath);
  await waitFor(async () => (await getStatus(server.port)).auditPosition >= max, {
    timeoutMs,
    message: `the server's feed to reach audit seq ${max}`,
  });
}

const key = (p) => JSON.stringify(p);
const sortedPairs = (events) => events.map(pair).map(key).sort();

/* mcpsub_notifications_replayed_total over all workers, from /metrics. */
async function replayedTotal(port) {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const all = [...text.matchAll(/^mcpsub_notifications_replayed_total\{worker="\d+"\} (\d+)$/gm)];
  assert.ok(all.length > 0, `no replayed counts in /metrics:\n${text}`);
  return all.reduce((sum, m) => sum + Number(m[1]), 0); // summed over the workers
}

test('Last-Event-ID held by the ring: every missed frame is replayed exactly, in order, none twice', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const B = srv.base;
    const record = `${B}/Product/A-100`;
    const coll = `${B}/Product`;
    const tools = `${B}/Product?category=tools`;
    for (const u of [record, coll, tools]) await subscribe(s, u);
    let st = await openPrimed(srv, s);
    await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    await st.waitUpdates(3);
    const last = st.lastId;
    assert.equal(idSeq(last), auditMax(srv.dbPath));
    await dropStream(srv, st);

    // Missed: 3 changes of A-100 (3 subscriptions each) and one of B-200 (the collection only).
    const seqs = [];
    for (let i = 2; i <= 4; i++) {
      await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: i });
      seqs.push(auditMax(srv.dbPath));
    }
    sqlite(srv.dbPath, "UPDATE Product SET price_cents = 5 WHERE sku = 'B-200'");
    seqs.push(auditMax(srv.dbPath));
    await caughtUp(srv);

    const replayedBefore = await replayedTotal(srv.port);
    st = await openPrimed(srv, s, last);
    const replayed = st.updates();
    assert.equal(replayed.length, 10, st.describe());
    assert.ok((await replayedTotal(srv.port)) >= replayedBefore + 10, 'the replay is counted in /metrics');
    assert.ok(!replayed.some((e) => e.id === last), `the frame named by Last-Event-ID came again: ${st.describe()}`);
    assert.equal(new Set(replayed.map((e) => e.id)).size, 10, `duplicate ids: ${st.describe()}`);
    assert.deepEqual(
      replayed.map((e) => idSeq(e.id)),
      [seqs[0], seqs[0], seqs[0], seqs[1], seqs[1], seqs[1], seqs[2], seqs[2], seqs[2], seqs[3]],
      st.describe(),
    );
    for (const e of replayed) assert.match(e.id, /^\d+-t\d+$/);
    const a = `${B}/Product/A-100`;
    for (let i = 0; i < 3; i++) {
      assert.deepEqual(replayed.slice(3 * i, 3 * i + 3).map(pair).map(key).sort(), [[a, record], [a, coll], [a, tools]].map(key).sort());
    }
    assert.deepEqual(pair(replayed[9]), [`${B}/Product/B-200`, coll]);
    assert.ok(st.events.indexOf(st.priming) > st.events.indexOf(replayed[9]), 'priming after the replay');

    // Exact: resuming from the middle of that replay gives exactly its tail, byte for byte.
    await dropStream(srv, st);
    const again = await openPrimed(srv, s, replayed[5].id);
    assert.deepEqual(
      again.updates().map((e) => [e.id, e.data]),
      replayed.slice(6).map((e) => [e.id, e.data]),
    );
    // And the stream is live.
    await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 4999 });
    await again.waitUpdates(7);
    again.close();
  } finally {
    await s.delete();
  }
});

test('Last-Event-ID the server cannot parse is ignored: only frames never delivered are sent', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const uri = `${srv.base}/Product/B-200`;
    await subscribe(s, uri);
    let st = await openPrimed(srv, s);
    await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 11 });
    await st.waitUpdates(1);
    await dropStream(srv, st);
    await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 12 });
    const missed = auditMax(srv.dbPath);
    await caughtUp(srv);
    st = await openPrimed(srv, s, 'not-an-id-of-ours');
    assert.deepEqual(st.updates().map((e) => idSeq(e.id)), [missed], st.describe());
    st.close();
  } finally {
    await s.delete();
  }
});

test('restart on the same database: subscriptions restored, the gap recovered from the audit log (one per changed URI and subscription)', async () => {
  let server = await startServer();
  try {
    const B = server.base;
    sqlite(server.dbPath, `CREATE TABLE Extra (id INTEGER PRIMARY KEY, v TEXT);
      CREATE TABLE Note (id INTEGER PRIMARY KEY, v TEXT);
      INSERT INTO Note (id, v) VALUES (1, 'a'), (3, 'c')`);
    const s = await McpSession.open(server.port);
    const record = `${B}/Product/A-100`;
    const tools = `${B}/Product?category=tools`;
    const events = `${B}/StockEvent`;
    const extra = `${B}/Extra`;
    // Note is watched by records only: the recovery reads just their changes.
    const note1 = `${B}/Note/1`;
    const note2 = `${B}/Note/2`;
    for (const u of [record, tools, events, extra, note1, note2]) await subscribe(s, u);
    const st = await openPrimed(server, s);
    await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    await st.waitUpdates(2);
    const last = st.lastId;

    await server.stop({ keepDir: true });
    await st.waitClosed();
    // While no server runs: another application writes.
    sqlite(
      server.dbPath,
      `UPDATE Product SET price_cents = 2 WHERE sku = 'A-100';
       UPDATE Product SET price_cents = 3 WHERE sku = 'A-100';
       UPDATE Product SET category = 'tools' WHERE sku = 'B-200';
       UPDATE Product SET name = 'x' WHERE sku = 'D-400';
       INSERT INTO StockEvent (id, sku, delta) VALUES (701, 'A-100', 1), (702, 'A-100', 2), (703, 'B-200', 3);
       UPDATE StockEvent SET delta = 5 WHERE id = 701;
       UPDATE StockEvent SET delta = 6 WHERE id = 701;
       DELETE FROM StockEvent WHERE id = 702;
       INSERT INTO Extra (id, v) VALUES (1, 'a');
       DROP TABLE Extra;
       UPDATE Note SET v = 'b' WHERE id = 1;
       UPDATE Note SET v = 'c' WHERE id = 3;
       INSERT INTO Note (id, v) VALUES (2, 'b');
       UPDATE Note SET v = 'd' WHERE id = 1;`,
    );
    server = await restartServer(server);
    const st2 = await openPrimed(server, s, last);
    const a = `${B}/Product/A-100`;
    const want = [
      [a, record],
      [a, tools],
      [`${B}/Product/B-200`, tools],
      [`${B}/StockEvent/701`, events],
      [`${B}/StockEvent/702`, events],
      [`${B}/StockEvent/703`, events],
      [note1, note1],
      [note2, note2],
    ];
    // The dropped table's subscriber hears once that its subscription ended, after the
    // recovered updates (the restored session lost it at the restore).
    const ended = st2.updates().filter((e) => e.json.params._meta);
    assert.deepEqual(ended.map((e) => [e.json.params.uri, e.json.params._meta['io.mcpsub/subscriptionEnded']]),
      [[extra, 'its table no longer exists']], st2.describe());
    const recovered = st2.updates().filter((e) => !e.json.params._meta);
    assert.deepEqual(sortedPairs(recovered), want.map(key).sort(), st2.describe());
    assert.ok(st2.events.indexOf(ended[0]) > st2.events.indexOf(recovered.at(-1)), 'the end follows the recovered updates');
    // Each recovered update is named by the newest change of its URI, in commit order, so
    // that a client cut off in the middle resumes from exactly there.
    for (const e of recovered) {
      assert.match(e.id, /^\d+-t\d+$/, 'recovered updates carry t ids');
      const [table, key] = decodeURIComponent(e.json.params.uri.slice(B.length + 1)).split('/');
      const newest = sqliteRows(server.dbPath, `SELECT max(seq) AS s FROM audit_log WHERE tbl = '${table}' AND key = '${key}'`)[0].s;
      assert.equal(idSeq(e.id), newest, `${e.id} names the newest change of ${e.json.params.uri}`);
    }
    const seqs2 = recovered.map((e) => idSeq(e.id));
    assert.deepEqual(seqs2, [...seqs2].sort((x, y) => x - y), `recovered in commit order: ${seqs2}`);
    // The dropped table's subscription is gone, on the live session and on its row (which
    // the writer rewrites after the restore, without the request waiting for it).
    assert.equal((await getStatus(server.port)).subscriptions, 5);
    const rowSubs = () => JSON.stringify(JSON.parse(sessionRow(server.dbPath, s.id).subscriptions).sort());
    const wantSubs = JSON.stringify([record, tools, events, note1, note2].sort());
    await waitFor(() => rowSubs() === wantSubs, { timeoutMs: 5000, message: `the row's subscriptions to be ${wantSubs}: ${rowSubs()}` });
    // Live again on the new process.
    await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 4999 });
    await st2.waitUpdates(want.length + 3);
    st2.close();
    await s.delete();
    await waitStatus(server.port, { sessions: 0, streams: 0, subscriptions: 0 });
  } finally {
    await server.stop();
  }
});

test('a session used first by a request after a restart is restored with its subscriptions', async () => {
  let server = await startServer();
  try {
    const s = await McpSession.open(server.port);
    const uri = `${server.base}/Product/C-300`;
    await subscribe(s, uri);
    server = await restartServer(server);
    assert.equal((await getStatus(server.port)).subscriptions, 0, 'nothing live before the session is used');
    await s.result('ping', {});
    assert.equal((await getStatus(server.port)).subscriptions, 1, 'restored by the request');
    const st = await openPrimed(server, s);
    await rest(server.port, 'PATCH', '/Product/C-300', { price_cents: 1 });
    const [ev] = await st.waitUpdates(1);
    assert.deepEqual(pair(ev), [uri, uri]);
    st.close();
    await s.delete();
  } finally {
    await server.stop();
  }
});

test('audit log pruned past the Last-Event-ID: one update per subscription, naming the subscribed URI', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const B = srv.base;
    const record = `${B}/Product/D-400`;
    const coll = `${B}/Product`;
    await subscribe(s, record);
    await subscribe(s, coll);
    let st = await openPrimed(srv, s);
    await rest(srv.port, 'PATCH', '/Product/D-400', { price_cents: 1 });
    await st.waitUpdates(2);
    const last = st.lastId;
    await dropStream(srv, st);
    // 120 frames: the id falls off the ring of 100.
    let sql = 'BEGIN;';
    for (let i = 0; i < 60; i++) sql += `UPDATE Product SET price_cents = ${i + 2} WHERE sku = 'D-400';`;
    sqlite(srv.dbPath, `${sql} COMMIT;`);
    await caughtUp(srv);
    // Retention removes the log from the resume point on (as store_audit_prune records it).
    const through = idSeq(last) + 10;
    sqlite(
      srv.dbPath,
      `DELETE FROM audit_log WHERE seq <= ${through};
       INSERT INTO mcpsub_state (name, value) VALUES ('audit_pruned_through', ${through})
         ON CONFLICT(name) DO UPDATE SET value = CASE WHEN excluded.value > mcpsub_state.value THEN excluded.value ELSE mcpsub_state.value END;`,
    );
    st = await openPrimed(srv, s, last);
    assert.deepEqual(sortedPairs(st.updates()), [[record, record], [coll, coll]].map(key).sort(), st.describe(5));
    st.close();
  } finally {
    await s.delete();
  }
});

/*
 * A session on StockEvent (whole) and Product/B-200 misses the changes gap
 * (SQL, ending with a change to B-200) and resumes: the gap is too wide for
 * the log, so each subscription gets one update naming itself ("re-read").
 */
async function resumeOverWideGap(gap, price) {
  const s = await McpSession.open(srv.port);
  try {
    const B = srv.base;
    const events = `${B}/StockEvent`;
    const record = `${B}/Product/B-200`;
    await subscribe(s, events);
    await subscribe(s, record);
    let st = await openPrimed(srv, s);
    await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: price });
    await st.waitUpdates(1);
    const last = st.lastId;
    await dropStream(srv, st);
    sqlite(srv.dbPath, `BEGIN; ${gap} UPDATE Product SET price_cents = ${price + 1} WHERE sku = 'B-200'; COMMIT;`);
    // Tens of thousands of changes to read: about 1.7 s on PostgreSQL alone, 4.5 s beside two more runs.
    await caughtUp(srv, 30000);
    st = await openPrimed(srv, s, last);
    assert.deepEqual(sortedPairs(st.updates()), [[events, events], [record, record]].map(key).sort(), st.describe(5));
    st.close();
  } finally {
    await s.delete();
  }
}

test('more than 1000 URIs changed in the gap: one update per subscription, naming the subscribed URI', async () => {
  await resumeOverWideGap(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1100)
     INSERT INTO StockEvent (id, sku, delta) SELECT 30000 + i, 'MANY', i FROM n;`,
    3,
  );
});

/*
 * Reading a gap holds the worker's loop up: past 50,000 rows it stops and
 * falls back, whatever the number of URIs (here 500, under the 1,000 of
 * the test above).
 */
test('more than 50,000 changes in the gap to a watched table: one update per subscription, naming the subscribed URI', async () => {
  await resumeOverWideGap(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
     INSERT INTO StockEvent (id, sku, delta) SELECT 40000 + i, 'WIDE', 0 FROM n;
     ${'UPDATE StockEvent SET delta = delta + 1 WHERE id > 40000;\n'.repeat(100)}`,
    5,
  );
});

/*
 * A reader whose queue passes --max-stream-queue is cut; it reconnects
 * with the last id it received, as a client does, until it has caught up
 * (at most 10 attempts). Every inserted row's URI must have been notified
 * by then. One change first, so that the ids name a position past 0.
 */
test('slow reader: cut at --max-stream-queue 4096 during a burst of 200 inserts; reconnecting with Last-Event-ID recovers every URI', async () => {
  const small = await startServer({ args: ['--max-stream-queue', '4096'] });
  try {
    const B = small.base;
    const s = await McpSession.open(small.port);
    const events = `${B}/StockEvent`;
    await subscribe(s, events);
    await rest(small.port, 'PUT', '/StockEvent/1', { sku: 'A-100', delta: 11 });
    const st = await openPrimed(small, s);
    // The PUT is answered at its commit; the tailer announces it a moment later (then the id moves).
    await waitFor(() => idSeq(st.lastId) > 0, { timeoutMs: 5000, message: 'the first change on the stream' });
    sqlite(
      small.dbPath,
      `BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)
       INSERT INTO StockEvent (id, sku, delta) SELECT 40000 + i, 'BURST', i FROM n; COMMIT;`,
    );
    const want = new Set(Array.from({ length: 200 }, (_, i) => `${B}/StockEvent/${40001 + i}`));
    await st.waitClosed({ timeoutMs: 5000 }); // cut: 200 updates do not fit in 4096 bytes
    const got = new Set(st.updates().map((e) => e.json.params.uri));
    let lastId = st.lastId;
    const attempts = [];
    while ([...want].some((u) => !got.has(u)) && attempts.length < 10) {
      await waitStatus(small.port, { streams: 0 });
      let next;
      try {
        next = await EventStream.open(small.port, s.id, { lastEventId: lastId });
      } catch (err) {
        attempts.push(`Last-Event-ID ${lastId}: ${err.message.slice(0, 120)}`);
        continue;
      }
      // Either the catch-up fits and the priming event follows, or the stream is cut again.
      await next.waitUntil((x) => x.priming || x.closed, { allowClosed: true, what: 'priming or a cut' });
      const ups = next.updates();
      for (const e of ups) got.add(e.json.params.uri);
      attempts.push(`Last-Event-ID ${lastId}: ${ups.length} updates${next.closed ? ', cut' : ''}`);
      if (next.lastId !== undefined) lastId = next.lastId;
      next.close();
    }
    const missing = [...want].filter((u) => !got.has(u));
    assert.deepEqual(missing.length, 0, `still missing ${missing.length} of 200 URIs after ${attempts.length} reconnects: ${attempts.join('; ')}`);
    for (const u of got) assert.ok(want.has(u) || u === `${B}/StockEvent/1`, `unexpected ${u}`);
    await s.delete();
    await waitStatus(small.port, { sessions: 0, streams: 0, subscriptions: 0 });
  } finally {
    await small.stop();
  }
});

/*
 * An id minted while the audit log was still empty names position 0. The
 * log was never pruned, so resuming from it is exact: one update per
 * changed URI and subscription, not the "everything changed" fallback.
 */
test('resuming from an id at position 0 (empty audit log) is exact, not the pruned-log fallback', async () => {
  let fresh = await startServer();
  try {
    const B = fresh.base;
    const s = await McpSession.open(fresh.port);
    const record = `${B}/Product/A-100`;
    const coll = `${B}/Product`;
    // Opened first: the subscribes themselves are rows of the audit log (the subscription log).
    const st = await openPrimed(fresh, s);
    const last = st.lastId;
    assert.equal(idSeq(last), 0, `a fresh database: ${last}`);
    await subscribe(s, record);
    await subscribe(s, coll);
    await dropStream(fresh, st);
    await rest(fresh.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    await rest(fresh.port, 'PATCH', '/Product/B-200', { price_cents: 1 });
    await caughtUp(fresh);
    // A new process: the id is resolved from the audit log.
    fresh = await restartServer(fresh);
    const st2 = await openPrimed(fresh, s, last);
    const a = `${B}/Product/A-100`;
    assert.deepEqual(
      sortedPairs(st2.updates()),
      [[a, record], [a, coll], [`${B}/Product/B-200`, coll]].map(key).sort(),
      st2.describe(),
    );
    st2.close();
    await s.delete();
  } finally {
    await fresh.stop();
  }
});

test('--coalesce-ms 600: five quick changes to one record give two notifications, the first at once and the last at the window end, in commit order', async () => {
  // A window wide enough for five commits on a loaded machine, on either store.
  const co = await startServer({ args: ['--coalesce-ms', '600'] });
  try {
    const B = co.base;
    const s = await McpSession.open(co.port);
    const record = `${B}/Product/A-100`;
    const coll = `${B}/Product`;
    await subscribe(s, record);
    await subscribe(s, coll);
    const st = await openPrimed(co, s);
    // Five changes in one write on one connection: they commit within a few ms of each other.
    const t0 = Date.now();
    const conn = await RawConnection.open(co.port);
    const seqs = [];
    try {
      conn.write(
        Buffer.concat(
          [1, 2, 3, 4, 5].map((i) =>
            buildRequest(co.port, {
              method: 'PATCH',
              path: '/Product/A-100',
              headers: { 'Content-Type': 'application/json' },
              body: JSON.stringify({ price_cents: i }),
            }),
          ),
        ),
      );
      for (let i = 0; i < 5; i++) {
        const res = await conn.readResponse();
        assert.equal(res.status, 200, res.text);
        seqs.push(Number(JSON.parse(res.headers.etag)));
      }
    } finally {
      conn.close();
    }
    const spread = sqliteRows(co.dbPath, `SELECT max(committed_at) - min(committed_at) AS ms FROM audit_log WHERE seq IN (${seqs.join(',')})`)[0].ms;
    assert.ok(spread < 450, `the five changes were committed ${spread} ms apart (they must fit in the 600 ms window)`);
    // Another record in the window is its own URI: not merged into A-100's update.
    const other = await rest(co.port, 'PATCH', '/Product/B-200', { price_cents: 9 });
    const otherSeq = Number(JSON.parse(other.headers.etag));
    const first = await st.waitUpdates(1, record, { timeoutMs: 1000 });
    assert.equal(idSeq(first[0].id), seqs[0], 'the first change goes at once');
    const both = await st.waitUpdates(2, record, { timeoutMs: 2000 });
    await st.waitUntil((x) => x.updates(coll).some((e) => idSeq(e.id) === otherSeq), { timeoutMs: 2000, what: 'B-200' });
    // Commit order is kept: B-200, committed after A-100's held change, waits behind it.
    const order = st.updates().map((e) => idSeq(e.id));
    assert.deepEqual(order, [...order].sort((x, y) => x - y), `updates out of commit order: ${order}`);
    assert.ok(order.indexOf(otherSeq) > order.indexOf(seqs[4]), `B-200 (${otherSeq}) overtook A-100's held change: ${order}`);
    assert.equal(idSeq(both[1].id), seqs[4], 'the trailing edge carries the last change');
    const firstCommit = sqliteRows(co.dbPath, `SELECT committed_at AS t FROM audit_log WHERE seq = ${seqs[0]}`)[0].t;
    assert.ok(both[1].t - firstCommit >= 590, `the trailing notification came ${both[1].t - firstCommit} ms after the first change (window 600 ms)`);
    assert.ok(both[1].t - t0 < 3000, `the trailing notification came ${both[1].t - t0} ms after the changes`);
    await sleep(1300); // two more windows: nothing else may come
    assert.deepEqual(st.updates(record).map((e) => idSeq(e.id)), [seqs[0], seqs[4]], st.describe());
    // Per subscription: the collection was coalesced on its own, the same way.
    assert.deepEqual(
      st.updates(coll).filter((e) => e.json.params.uri === record).map((e) => idSeq(e.id)),
      [seqs[0], seqs[4]],
      st.describe(),
    );
    // Once the windows have passed, a change goes at once again.
    const t1 = Date.now();
    const res = await rest(co.port, 'PATCH', '/Product/A-100', { price_cents: 4999 });
    const seq = Number(JSON.parse(res.headers.etag));
    await st.waitUntil((x) => x.updates(record).some((e) => idSeq(e.id) === seq), { timeoutMs: 1000, what: 'the next change' });
    assert.ok(Date.now() - t1 < 500, `a change after the window waited ${Date.now() - t1} ms (window 600 ms)`);
    st.close();
    await s.delete();
    await waitStatus(co.port, { sessions: 0, streams: 0, subscriptions: 0 });
  } finally {
    await co.stop();
  }
});

test('notifications/resources/list_changed reaches every open stream when tables are created or dropped', async () => {
  const a = await McpSession.open(srv.port);
  const b = await McpSession.open(srv.port);
  try {
    const sa = await openPrimed(srv, a);
    const sb = await openPrimed(srv, b);
    const exact = { jsonrpc: '2.0', method: LIST_CHANGED };
    sqlite(srv.dbPath, 'CREATE TABLE Gadget (id INTEGER PRIMARY KEY, v TEXT)');
    const [ea] = await sa.waitUntil((x) => (x.messages(LIST_CHANGED).length ? x.messages(LIST_CHANGED) : undefined), {
      timeoutMs: 2500,
      what: 'list_changed after CREATE TABLE (external, no request)',
    });
    assert.deepEqual(ea.json, exact);
    assert.ok(ea.id, 'list_changed carries an event id');
    await sb.waitUntil((x) => x.messages(LIST_CHANGED).length === 1, { timeoutMs: 2500, what: 'list_changed on the second stream' });
    // The new table is a resource at once.
    const list = await a.result('resources/list', {});
    assert.ok(list.resources.some((r) => r.uri === `${srv.base}/Gadget`), JSON.stringify(list));
    await subscribe(a, `${srv.base}/Gadget`);
    sqlite(srv.dbPath, "INSERT INTO Gadget (id, v) VALUES (1, 'x')");
    const [up] = await sa.waitUpdates(1, `${srv.base}/Gadget`, { timeoutMs: 2500 });
    assert.deepEqual(pair(up), [`${srv.base}/Gadget/1`, `${srv.base}/Gadget`]);

    // Noticed at once on the next request, without waiting for the tailer.
    sqlite(srv.dbPath, 'DROP TABLE Gadget');
    const t0 = Date.now();
    await b.result('ping', {});
    await sb.waitUntil((x) => x.messages(LIST_CHANGED).length === 2, { timeoutMs: 2500, what: 'list_changed after DROP TABLE' });
    // PostgreSQL reads its catalog at most every 500 ms, and DDL fires no trigger: within the 1 s poll.
    const bound = PG_MODE ? 1500 : 500;
    assert.ok(Date.now() - t0 < bound, `list_changed ${Date.now() - t0} ms after the next request`);
    await sa.waitUntil((x) => x.messages(LIST_CHANGED).length === 2, { timeoutMs: 2500, what: 'list_changed on the first stream' });
    // Nothing more than one per change.
    await sleep(300);
    assert.equal(sa.messages(LIST_CHANGED).length, 2, sa.describe());
    assert.equal(sb.messages(LIST_CHANGED).length, 2, sb.describe());
    sa.close();
    sb.close();
  } finally {
    await a.delete();
    await b.delete();
  }
});

test('teardown: /status back to zero and a clean exit', async () => {
  await waitStatus(srv.port, { sessions: 0, streams: 0, subscriptions: 0, waiters: 0 });
  await srv.stop();
});

test('list_changed waits in the replay ring for a session whose stream opens after the change', async () => {
  const server = await startServer();
  const s = await McpSession.open(server.port);
  try {
    sqlite(server.dbPath, 'CREATE TABLE Sprocket (id INTEGER PRIMARY KEY, v TEXT)');
    await s.result('ping', {}); // the schema change is noticed at the next request
    const st = await openPrimed(server, s);
    await st.waitUntil((x) => x.messages(LIST_CHANGED).length === 1, { timeoutMs: 2500, what: 'the kept list_changed' });
    sqlite(server.dbPath, 'DROP TABLE Sprocket');
    await s.result('ping', {});
    await st.waitUntil((x) => x.messages(LIST_CHANGED).length === 2, { timeoutMs: 2500, what: 'the live list_changed' });
    assert.equal(st.messages('notifications/tools/list_changed').length, 0, 'the tool list never changes');
    st.close();
  } finally {
    await server.stop();
  }
});

test('a dropped table ends its subscriptions visibly: one last update with the reason, gone from the row; recreated, it stays quiet until subscribed again', async () => {
  const server = await startServer();
  const B = server.base;
  const s = await McpSession.open(server.port);
  try {
    sqlite(server.dbPath, 'CREATE TABLE Cog (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO Cog VALUES (1, \'a\')');
    await s.result('ping', {});
    await subscribe(s, `${B}/Cog`);
    await subscribe(s, `${B}/Cog/1`);
    await subscribe(s, `${B}/Product/A-100`);
    const st = await openPrimed(server, s);
    sqlite(server.dbPath, 'DROP TABLE Cog');
    await s.result('ping', {});
    const ended = await st.waitUntil((x) => {
      const e = x.events.filter((ev) => ev.json?.params?._meta?.['io.mcpsub/subscriptionEnded']);
      return e.length === 2 ? e : undefined;
    }, { timeoutMs: 2500, what: 'two ended subscriptions' });
    assert.deepEqual(ended.map((e) => e.json.params.subscribedUri).sort(), [`${B}/Cog`, `${B}/Cog/1`]);
    for (const e of ended) {
      assert.equal(e.json.params.uri, e.json.params.subscribedUri);
      assert.equal(e.json.params._meta['io.mcpsub/subscriptionEnded'], 'its table no longer exists');
    }
    await st.waitUntil((x) => x.messages(LIST_CHANGED).length >= 1, { timeoutMs: 2500, what: 'list_changed' });
    await waitFor(() => JSON.parse(sessionRow(server.dbPath, s.id).subscriptions).length === 1, { message: 'the row lists the live one only' });
    // Created again: the old subscriptions do not come back.
    sqlite(server.dbPath, 'CREATE TABLE Cog (id INTEGER PRIMARY KEY, v TEXT)');
    await s.result('ping', {});
    sqlite(server.dbPath, "INSERT INTO Cog VALUES (1, 'b')");
    await sleep(400);
    assert.equal(st.updates().filter((e) => e.json.params.subscribedUri.startsWith(`${B}/Cog`) && !e.json.params._meta).length, 0);
    // Subscribing again works.
    await subscribe(s, `${B}/Cog/1`);
    sqlite(server.dbPath, "UPDATE Cog SET v = 'c' WHERE id = 1");
    await st.waitUpdates(1, `${B}/Cog/1`, { timeoutMs: 2500 });
    st.close();
  } finally {
    await server.stop();
  }
});

const ENDED = 'io.mcpsub/subscriptionEnded';
const endedOf = (st) => st.updates().filter((e) => e.json.params._meta?.[ENDED]).map((e) => [e.json.params.uri, e.json.params._meta[ENDED]]);
const indexOf = (st, pred) => st.events.findIndex((e) => e.json && pred(e.json));
const lastIndexOf = (st, pred) => st.events.findLastIndex((e) => e.json && pred(e.json));

/* n inserts into StockEvent in one transaction, ids from first. */
function stockEvents(db, first, n) {
  const rows = Array.from({ length: n }, (_, i) => `(${first + i}, 'A-100', ${i})`).join(', ');
  sqlite(db, `INSERT INTO StockEvent (id, sku, delta) VALUES ${rows}`);
}

test('a table dropped while its subscriber is not live on any worker: one ended notice with the reason on the resumed stream; a table created again does not bring it back, subscribing again does', async () => {
  let server = await startServer();
  const B = server.base;
  const s = await McpSession.open(server.port);
  try {
    sqlite(server.dbPath, 'CREATE TABLE Cam (id INTEGER PRIMARY KEY, v TEXT)');
    await s.result('ping', {});
    await subscribe(s, `${B}/Cam`);
    await subscribe(s, `${B}/Product/A-100`);
    const st = await openPrimed(server, s);
    const last = st.lastId;
    st.close();
    // A new process: the session lives only in its row now.
    server = await restartServer(server);
    sqlite(server.dbPath, 'DROP TABLE Cam');
    const other = await McpSession.open(server.port); // a request notices the schema change
    // (PostgreSQL reads its catalog at most every 500 ms: a later request notices it there)
    // The row keeps the ended subscription as a tombstone, with its reason, for the session.
    const ended = () => JSON.parse(sessionRow(server.dbPath, s.id).subscriptions).filter((x) => x.debounce?.ended);
    await waitFor(
      async () => {
        await other.result('ping', {});
        return ended().length === 1;
      },
      { intervalMs: 100, message: 'the row to mark the dropped table\'s subscription ended' },
    );
    assert.deepEqual(ended(), [{ uri: `${B}/Cam`, debounce: { ended: 'its table no longer exists' } }]);
    sqlite(server.dbPath, 'CREATE TABLE Cam (id INTEGER PRIMARY KEY, v TEXT)');
    await other.result('ping', {});
    await sleep(600); // PostgreSQL: the catalog read again
    await other.result('ping', {});
    const st2 = await openPrimed(server, s, last); // restored from its row, resumed with Last-Event-ID
    await st2.waitUntil((x) => endedOf(x).length === 1, { timeoutMs: 2500, what: 'the ended notice' });
    assert.deepEqual(endedOf(st2), [[`${B}/Cam`, 'its table no longer exists']], st2.describe());
    sqlite(server.dbPath, "INSERT INTO Cam VALUES (1, 'a'); UPDATE Product SET price_cents = 5 WHERE sku = 'A-100'");
    await st2.waitUpdates(1, `${B}/Product/A-100`, { timeoutMs: 2500 });
    await sleep(300);
    assert.deepEqual(st2.updates().filter((e) => !e.json.params._meta).map((e) => e.json.params.subscribedUri), [`${B}/Product/A-100`], st2.describe());
    await waitFor(() => JSON.stringify(JSON.parse(sessionRow(server.dbPath, s.id).subscriptions)) === JSON.stringify([`${B}/Product/A-100`]),
      { timeoutMs: 5000, message: 'the row to list the live subscription only' });
    // Subscribing again to the table created again works.
    await subscribe(s, `${B}/Cam`);
    sqlite(server.dbPath, "INSERT INTO Cam VALUES (2, 'b')");
    await st2.waitUpdates(1, `${B}/Cam`, { timeoutMs: 2500 });
    assert.equal(endedOf(st2).length, 1, 'one ended notice, never again');
    st2.close();
    await other.delete();
  } finally {
    await server.stop();
  }
});

test('a filter on a column that is dropped ends the subscription: one last update with the reason', async () => {
  const server = await startServer();
  const B = server.base;
  const s = await McpSession.open(server.port);
  try {
    sqlite(server.dbPath, "CREATE TABLE Tint (id INTEGER PRIMARY KEY, color TEXT, v TEXT); INSERT INTO Tint VALUES (1, 'red', 'a')");
    await s.result('ping', {});
    await subscribe(s, `${B}/Tint?color=red`);
    await subscribe(s, `${B}/Tint/1`);
    const st = await openPrimed(server, s);
    // SQLite will not drop a column its audit triggers name: they go first (mcpsubd puts them back).
    if (!PG_MODE) {
      const triggers = sqliteRows(server.dbPath, "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'Tint'");
      sqlite(server.dbPath, `${triggers.map((t) => `DROP TRIGGER "${t.name}";`).join(' ')} ALTER TABLE Tint DROP COLUMN color`);
    } else {
      sqlite(server.dbPath, 'ALTER TABLE Tint DROP COLUMN color');
    }
    await waitFor(async () => {
      await s.result('ping', {});
      return endedOf(st).length === 1;
    }, { intervalMs: 100, message: 'the ended notice' });
    assert.deepEqual(endedOf(st), [[`${B}/Tint?color=red`, 'a column it filters on no longer exists']], st.describe());
    const e = st.updates().find((x) => x.json.params._meta);
    assert.equal(e.json.params.subscribedUri, `${B}/Tint?color=red`);
    // The record's subscription lives on; the filter's is gone.
    if (!PG_MODE) {
      await waitFor(() => sqliteRows(server.dbPath, "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'Tint'").length > 0,
        { message: 'the audit triggers back' });
    }
    sqlite(server.dbPath, "UPDATE Tint SET v = 'b' WHERE id = 1");
    await st.waitUpdates(1, `${B}/Tint/1`, { timeoutMs: 2500 });
    await sleep(300);
    assert.equal(st.updates().filter((x) => x.json.params.subscribedUri === `${B}/Tint?color=red`).length, 1, st.describe());
    st.close();
  } finally {
    await server.stop();
  }
});

test('list_changed that left the ring unsent (150 updates queued before the stream opens) still reaches the stream, once, after the updates', async () => {
  const server = await startServer();
  const B = server.base;
  const s = await McpSession.open(server.port);
  try {
    await subscribe(s, `${B}/StockEvent`);
    sqlite(server.dbPath, 'CREATE TABLE Widget (id INTEGER PRIMARY KEY, v TEXT)');
    await s.result('ping', {}); // noticed: list_changed kept for the session
    stockEvents(server.dbPath, 5000, 150);
    await caughtUp(server);
    const st = await openPrimed(server, s);
    await st.waitUpdates(150, `${B}/StockEvent`, { timeoutMs: 5000 });
    await st.waitUntil((x) => x.messages(LIST_CHANGED).length === 1, { timeoutMs: 2500, what: 'the list_changed' });
    await sleep(200);
    assert.equal(st.messages(LIST_CHANGED).length, 1, st.describe());
    assert.ok(indexOf(st, (m) => m.method === LIST_CHANGED) > lastIndexOf(st, (m) => m.params?.subscribedUri === `${B}/StockEvent`), 'after the updates');
    st.close();
  } finally {
    await server.stop();
  }
});

test('an ended notice that left the ring unsent (150 updates queued after the drop) still reaches the stream, once', async () => {
  const server = await startServer();
  const B = server.base;
  sqlite(server.dbPath, 'CREATE TABLE Gear (id INTEGER PRIMARY KEY, v TEXT)');
  const s = await McpSession.open(server.port);
  try {
    await s.result('ping', {});
    await subscribe(s, `${B}/Gear`);
    await subscribe(s, `${B}/StockEvent`);
    sqlite(server.dbPath, 'DROP TABLE Gear');
    await waitFor(async () => {
      await s.result('ping', {});
      return (await getStatus(server.port)).subscriptions === 1;
    }, { intervalMs: 100, message: 'the drop noticed' });
    stockEvents(server.dbPath, 6000, 150);
    await caughtUp(server);
    const st = await openPrimed(server, s);
    await st.waitUpdates(150, `${B}/StockEvent`, { timeoutMs: 5000 });
    await st.waitUntil((x) => endedOf(x).length === 1 && x.messages(LIST_CHANGED).length === 1, { timeoutMs: 2500, what: 'the ended notice and list_changed' });
    await sleep(200);
    assert.deepEqual(endedOf(st), [[`${B}/Gear`, 'its table no longer exists']], st.describe());
    assert.equal(st.messages(LIST_CHANGED).length, 1, st.describe());
    // Resumed again from the stream's last id: nothing is told twice.
    const last = st.lastId;
    st.close();
    const st2 = await openPrimed(server, s, last);
    await sleep(300);
    assert.equal(st2.updates().length + st2.messages(LIST_CHANGED).length, 0, st2.describe());
    st2.close();
  } finally {
    await server.stop();
  }
});

/* A session whose stream has closed hears of a table created since, through a restart or kill. */
async function listChangedAcross(server, s, crash) {
  const st = await openPrimed(server, s);
  const last = st.lastId;
  st.close();
  await waitStatus(server.port, { streams: 0 });
  sqlite(server.dbPath, 'CREATE TABLE Spindle (id INTEGER PRIMARY KEY, v TEXT)');
  await s.result('ping', {}); // noticed: list_changed kept in the ring only
  server = await crash(server);
  const st2 = await waitFor(async () => {
    try {
      return await openPrimed(server, s, last);
    } catch {
      return undefined;
    }
  }, { timeoutMs: 10000, message: 'the stream back' });
  await st2.waitUntil((x) => x.messages(LIST_CHANGED).length === 1, { timeoutMs: 2500, what: 'the list_changed' });
  st2.close();
  return server;
}

test('list_changed pending when the worker is killed (SIGKILL): the restored session still gets it', async () => {
  // One worker: the one killed is the session's, and the stream comes back only once the
  // master has restarted it (so the stop below finds no death it has not reaped yet).
  const server = await startServer({ args: ['--workers', '1'] });
  const s = await McpSession.open(server.port);
  try {
    await listChangedAcross(server, s, async (srv) => {
      const [worker] = fs.readFileSync(`/proc/${srv.child.pid}/task/${srv.child.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
      assert.ok(worker, 'a worker process');
      process.kill(worker, 'SIGKILL');
      return srv;
    });
  } finally {
    await server.stop();
  }
});

test('list_changed pending at a clean restart: the restored session still gets it', async () => {
  let server = await startServer();
  const s = await McpSession.open(server.port);
  try {
    server = await listChangedAcross(server, s, (srv) => restartServer(srv));
  } finally {
    await server.stop();
  }
});

test('a database whose session rows list their subscriptions (before mcpsub_subscription) is moved over at start, and the session restored with them', { skip: PG_MODE && 'SQLite databases only: PostgreSQL never had the old list' }, async () => {
  let server = await startServer();
  const B = server.base;
  const s = await McpSession.open(server.port);
  try {
    await subscribe(s, `${B}/Product/A-100`);
    await server.stop({ keepDir: true });
    // As an older mcpsubd left it: the list on the row, no rows of its own.
    const legacy = JSON.stringify([`${B}/Product/A-100`, { uri: `${B}/Product/B-200`, debounce: { quietMs: 50, maxMs: 500 } }]);
    sqlite(server.dbPath, `DELETE FROM mcpsub_subscription; UPDATE mcp_session SET subscriptions = '${legacy}' WHERE id = '${s.id}'`);
    server = await startServerOn(server.port, server.dbPath, { ownDirs: server.ownDirs });
    assert.deepEqual(JSON.parse(sessionRow(server.dbPath, s.id).subscriptions).sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y))),
      JSON.parse(legacy).sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y))));
    assert.equal(sqliteRows(server.dbPath, `SELECT subscriptions FROM mcp_session WHERE id = '${s.id}'`)[0].subscriptions, '[]');
    const st = await openPrimed(server, s); // restored from the moved rows
    sqlite(server.dbPath, "UPDATE Product SET price_cents = 9 WHERE sku = 'A-100'");
    await st.waitUpdates(1, `${B}/Product/A-100`, { timeoutMs: 2500 });
    st.close();
  } finally {
    await server.stop();
  }
});
