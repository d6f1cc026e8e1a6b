// A database outage (PostgreSQL only: the integration-pg suite runs it).
// mcpsubd with 2 workers serves an official SDK client and a raw SSE
// stream, each subscribed to a record and a collection; then the
// PostgreSQL server is stopped (fast shutdown: every connection breaks)
// and started again on the same port. While it is down its port is a
// black hole (connections are accepted and never answered, as a server
// that hangs or a half-open network path would have them), so that a
// connect attempt without a bound would hold a worker's loop for good.
// While it is down, REST reads and
// writes answer 503 with Retry-After (not 500, not a hang), resources/read
// and tools answer errors at once, /readyz says 503, the streams stay open
// (keep-alive comments flow), and the server neither crashes nor spins
// (its CPU time and its log stay small). Once it is back, requests
// succeed within a few seconds, and every change committed after the
// restart reaches every subscriber exactly once: also one committed by
// psql while mcpsubd had not reconnected yet (nobody listened for its
// NOTIFY: the tailer catches up from its position).

import test, { after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';

import { assertExactlyOnce } from './lib/exactly_once.mjs';
import { McpSession } from './lib/mcp.mjs';
import { connectSdk } from './lib/sdk.mjs';
import { PG_MODE, dbTarget, pgCluster, pgFreeze, pgHoldLock, pgPause, pgResume } from './lib/pg.mjs';
import { request } from './lib/raw.mjs';
import { getStatus, httpGet, startServer } from './lib/server.mjs';
import { EventStream } from './lib/sse.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { auditAfter, auditMax, rest, restartServer, waitStatus } from './lib/subs.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

const servers = [];
const clients = [];
let paused = false;
let hole = null;

after(async () => {
  for (const c of clients) await c.client.close().catch(() => {});
  for (const s of servers) await s.kill();
  if (hole) await hole.close();
  if (paused) pgResume();
});

/*
 * The cluster frozen (pgFreeze) by the running test; thawed at the latest
 * when that test ends, so that a failed one does not leave it frozen.
 */
let frozen = false;
function freeze() {
  pgFreeze(true);
  frozen = true;
}
function thaw() {
  if (!frozen) return;
  pgFreeze(false);
  frozen = false;
}
afterEach(thaw);

/* Listens on 127.0.0.1:port, accepts every connection and never answers. close() ends them all. */
async function blackHole(port) {
  const sockets = new Set();
  const srv = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('error', () => {});
    sock.on('close', () => sockets.delete(sock));
  });
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', resolve);
  });
  return {
    accepted: () => sockets.size,
    close: () =>
      new Promise((resolve) => {
        for (const sock of sockets) sock.destroy();
        srv.close(() => resolve());
      }),
  };
}

/* An SDK client whose GET stream is open; raw: every resources/updated as { uri, subscribedUri }. */
async function connectOutageSdk(srv) {
  const c = await connectSdk(srv, 'outage-sdk');
  clients.push(c);
  return c;
}

const pairKey = (p) => `${p.uri} <- ${p.subscribedUri}`;
const count = (list) => {
  const m = new Map();
  for (const k of list) m.set(k, (m.get(k) ?? 0) + 1);
  return m;
};

/* CPU seconds (user + system) the process pid and its children have used so far. */
function cpuSeconds(pid) {
  const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  const kids = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).split(/\s+/).filter(Boolean);
  let total = 0;
  for (const p of [String(pid), ...kids]) {
    try {
      // Fields after the ")" of comm: utime and stime are the 12th and 13th.
      const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      total += (Number(f[11]) + Number(f[12])) / ticks;
    } catch {
      /* gone */
    }
  }
  return total;
}

/* A request that must be answered within ms (no hang): { res, ms }. */
async function timed(fn, ms, what) {
  const t0 = Date.now();
  const res = await fn();
  const took = Date.now() - t0;
  assert.ok(took < ms, `${what} took ${took} ms (bound ${ms} ms)`);
  return res;
}

const RECONNECT_LOG = /cannot reach postgres|postgres still unreachable|lost the (LISTEN )?connection|audit log read failed|session row not written/g;

test('PostgreSQL stops and starts again: 503 meanwhile, streams stay open, nothing lost or doubled after', { skip: !PG_MODE && 'PostgreSQL only (MCPSUB_TEST_STORE=postgres)', timeout: 90000 }, async (t) => {
  const srv = await startServer({ args: ['--workers', '2', '--sse-keepalive', '1'] });
  servers.push(srv);
  const B = srv.base;
  const db = srv.dbPath;
  const record = `${B}/Product/A-100`;
  const coll = `${B}/Product`;
  const a = `${B}/Product/A-100`;
  const b = `${B}/Product/B-200`;

  // Two subscribers: the SDK client, and a raw session with its SSE stream.
  const sdk = await connectOutageSdk(srv);
  for (const uri of [record, coll]) assert.deepEqual(await sdk.client.subscribeResource({ uri }), {});
  const s = await McpSession.open(srv.port);
  for (const uri of [record, coll]) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
  const st = await EventStream.open(srv.port, s.id);
  await st.waitPrimed();
  await waitStatus(srv.port, { streams: 2, subscriptions: 4 });
  const from = auditMax(db);

  // Every change so far, as (uri, subscribedUri) pairs each subscriber must get once.
  const want = [];
  const changed = (uri) => {
    want.push({ uri, subscribedUri: coll });
    if (uri === record) want.push({ uri, subscribedUri: record });
  };
  const everyoneHasAll = (what, timeoutMs = 10000) =>
    Promise.all([
      waitFor(() => sdk.raw.length >= want.length, { timeoutMs, message: `${what}: SDK client, want ${want.length} updates, got ${JSON.stringify(sdk.raw.map(pairKey))}` }),
      st.waitUpdates(want.length, undefined, { timeoutMs, what: `${what}: raw stream` }),
    ]);

  // Before: a REST write and a psql write, both notified.
  await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 101 });
  changed(a);
  sqlite(db, "UPDATE Product SET price_cents = 201 WHERE sku = 'B-200'");
  changed(b);
  await everyoneHasAll('before the outage');

  // The outage.
  const logBefore = srv.stderr().length;
  const headAtStop = auditMax(db);
  pgPause();
  paused = true;
  hole = await blackHole(Number(pgCluster().uri.port));
  const downAt = Date.now();
  const cpuBefore = cpuSeconds(srv.child.pid);

  // REST reads and writes: 503 with Retry-After, promptly (every worker: several tries).
  for (let i = 0; i < 4; i++) {
    const get = await timed(() => request(srv.port, { path: '/Product/A-100' }), 3000, 'GET during the outage');
    assert.equal(get.status, 503, `GET during the outage: ${get.status} ${get.text}`);
    assert.ok(get.headers['retry-after'], `GET 503 without Retry-After: ${JSON.stringify(get.headers)}`);
    const put = await timed(
      () => request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ price_cents: 999 }) }),
      3000,
      'PATCH during the outage',
    );
    assert.equal(put.status, 503, `PATCH during the outage: ${put.status} ${put.text}`);
    assert.ok(put.headers['retry-after'], `PATCH 503 without Retry-After: ${JSON.stringify(put.headers)}`);
    const ready = await timed(() => httpGet(srv.port, '/readyz'), 3000, '/readyz during the outage');
    assert.equal(ready.status, 503, `/readyz during the outage: ${ready.status} ${ready.body}`);
  }
  // MCP: resources/read and a tool answer errors, promptly.
  const readErr = await timed(() => s.call('resources/read', { uri: record }), 3000, 'resources/read during the outage');
  assert.ok(readErr.error, `resources/read during the outage should fail: ${JSON.stringify(readErr)}`);
  assert.match(readErr.error.message, /unavailable/);
  const tool = await timed(() => s.tool('get_record', { table: 'Product', key: 'A-100' }), 3000, 'get_record during the outage');
  assert.ok(tool.isError, `get_record during the outage should fail: ${tool.text}`);
  // The streams stay open and keep-alive comments still flow.
  const comments = st.comments.length;
  await sleep(2500);
  assert.ok(!st.closed, 'the raw stream closed during the outage');
  assert.ok(st.comments.length > comments, `no keep-alive comment during the outage (${st.comments.length})`);
  assert.equal((await getStatus(srv.port)).streams, 2, 'both streams open during the outage');
  // Neither spinning nor flooding the log.
  const downMs = Date.now() - downAt;
  const cpu = cpuSeconds(srv.child.pid) - cpuBefore;
  t.diagnostic(`outage: ${downMs} ms, server CPU ${cpu.toFixed(2)} s`);
  assert.ok(cpu < (0.4 * downMs) / 1000, `the server used ${cpu.toFixed(2)} s of CPU in ${downMs} ms of outage (spinning?)`);
  const outageLog = srv.stderr().slice(logBefore);
  const noisy = outageLog.match(RECONNECT_LOG) ?? [];
  t.diagnostic(`outage log: ${outageLog.split('\n').length} lines, ${noisy.length} about the database`);
  assert.ok(noisy.length < 80, `${noisy.length} log lines about the outage in ${downMs} ms:\n${outageLog.slice(-4000)}`);
  assert.equal(srv.exit, null, 'the server exited during the outage');

  t.diagnostic(`connections the black hole holds: ${hole.accepted()}`);
  assert.ok(hole.accepted() > 0, 'the server tried to connect during the outage');
  await hole.close();
  hole = null;

  // PostgreSQL is back; mcpsubd has not reconnected yet (its backoff has grown to seconds).
  pgResume();
  paused = false;
  assert.equal(auditMax(db), headAtStop, 'nothing was written during the outage');
  sqlite(db, "UPDATE Product SET price_cents = 102 WHERE sku = 'A-100'");
  changed(a);
  const early = await httpGet(srv.port, '/readyz');
  t.diagnostic(`/readyz right after the psql write: ${early.status}`);

  // Within a few seconds: ready, and requests succeed.
  await waitFor(async () => (await httpGet(srv.port, '/readyz')).status === 200, { timeoutMs: 10000, intervalMs: 100, message: '/readyz 200 after PostgreSQL came back' });
  await waitFor(async () => (await request(srv.port, { path: '/Product/A-100' })).status === 200, { timeoutMs: 10000, intervalMs: 100, message: 'GET 200 after PostgreSQL came back' });
  // Every worker is back within the back-off's longest step (the master spreads
  // connections over the workers: several in a row succeed).
  await waitFor(
    async () => {
      for (let i = 0; i < 4; i++) {
        const res = await request(srv.port, { path: '/Product/B-200' });
        const ready = await httpGet(srv.port, '/readyz');
        if (res.status !== 200 || ready.status !== 200) return false;
      }
      return true;
    },
    { timeoutMs: 10000, intervalMs: 200, message: 'every worker back after the outage' },
  );
  // Nothing written during the outage (every write got 503); the psql change is notified.
  await everyoneHasAll('the change committed before mcpsubd reconnected');
  // Changes after the restart, by REST and psql. The write goes through each worker's writer
  // thread, whose own connection comes back on its first job: a 503 (nothing written) is retried.
  await waitFor(
    async () => {
      const res = await request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ price_cents: 103 }) });
      assert.ok(res.status === 200 || res.status === 503, `PATCH after the outage: ${res.status} ${res.text}`);
      return res.status === 200;
    },
    { timeoutMs: 10000, intervalMs: 200, message: 'a REST write to succeed after PostgreSQL came back' },
  );
  changed(a);
  sqlite(db, "UPDATE Product SET price_cents = 202 WHERE sku = 'B-200'");
  changed(b);
  const r = await s.readJson(record);
  assert.equal(r.value.price_cents, 103);
  await everyoneHasAll('after the outage');
  await sleep(300); // anything doubled would arrive by now

  // Exactly once, for both subscribers.
  const upto = auditMax(db);
  const expected = count(want.map(pairKey));
  assert.deepEqual(count(sdk.raw.map(pairKey)), expected, `SDK client: ${JSON.stringify(sdk.raw.map(pairKey))}`);
  assert.deepEqual(count(st.updates().map((e) => pairKey(e.json.params))), expected, st.describe());
  assertExactlyOnce({ db, base: B, streams: [st], subs: [record, coll], from, upto, what: 'raw stream' });
  assert.equal(auditAfter(db, from).length, 5, 'five changes in all: none during the outage');
  assert.ok(!st.closed, 'the raw stream is still open');
  assert.equal((await getStatus(srv.port)).streams, 2);
  assert.deepEqual(sdk.errors.filter((e) => !/SSE stream disconnected|AbortError/.test(e)), []);

  await sdk.client.close();
  st.close();
  await s.delete();
  await srv.stop();
});

/*
 * A server that is alive and answers nothing (its processes stopped): a
 * worker's loop waits for a statement at most the store's deadline (10 s),
 * gives the connection up, and answers 503 meanwhile; thawed, it serves again.
 */
test('PostgreSQL frozen mid-query: the loop gives the connection up after the deadline, 503s, then recovers', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  const srv = await startServer({ args: ['--workers', '1'] });
  servers.push(srv);
  assert.equal((await request(srv.port, { path: '/Product/A-100' })).status, 200);
  freeze();
  const t0 = Date.now();
  const stuck = await request(srv.port, { path: '/Product/B-200', timeoutMs: 20000 });
  const waited = Date.now() - t0;
  assert.equal(stuck.status, 503, stuck.text);
  assert.ok(waited < 15000, `answered after ${waited} ms`);
  // The connection is given up: the next calls fail fast instead of waiting again.
  const t1 = Date.now();
  const next = await request(srv.port, { path: '/Product/C-300', timeoutMs: 5000 });
  assert.equal(next.status, 503, next.text);
  assert.ok(Date.now() - t1 < 2000, `the next call took ${Date.now() - t1} ms`);
  thaw();
  await waitFor(async () => (await request(srv.port, { path: '/Product/A-100' })).status === 200, {
    timeoutMs: 15000,
    intervalMs: 200,
    message: 'GET 200 after PostgreSQL thawed',
  });
});

/*
 * A database that stops answering for a moment (shorter than the deadline)
 * does not stall a worker: the request waiting for it is parked, so the
 * same process answers /healthz at once and its streams keep their
 * keepalives; requests that need the database wait their turn and succeed,
 * in order, once it answers again. The metrics show the waits, and no
 * call that blocked the loop.
 */
test('PostgreSQL frozen for a moment: the loop keeps serving, requests waiting for the database succeed after', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  const srv = await startServer({ args: ['--workers', '1', '--sse-keepalive', '1'] });
  servers.push(srv);
  const s = await McpSession.open(srv.port);
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Product` }), {});
  const st = await EventStream.open(srv.port, s.id);
  await st.waitPrimed();
  freeze();
  const t0 = Date.now();
  const reads = [
    request(srv.port, { path: '/Product/A-100', timeoutMs: 20000 }),
    s.call('resources/read', { uri: `${srv.base}/Product/B-200` }),
    request(srv.port, { path: '/Product/C-300', timeoutMs: 20000 }),
  ];
  const kept = st.comments.length;
  for (let i = 0; i < 5; i++) {
    const h = await timed(() => request(srv.port, { path: '/healthz', timeoutMs: 3000 }), 500, '/healthz while the database was frozen');
    assert.equal(h.status, 200);
    await sleep(300);
  }
  await waitFor(() => st.comments.length > kept, { timeoutMs: 3000, message: 'a keepalive while the database was frozen' });
  assert.ok(Date.now() - t0 < 7000, 'all of this happened while the database was frozen');
  thaw();
  const [a, read, c] = await Promise.all(reads);
  assert.equal(a.status, 200, a.text);
  assert.equal(JSON.parse(a.text).sku, 'A-100');
  assert.ok(read.result, JSON.stringify(read));
  assert.equal(JSON.parse(read.result.contents[0].text).sku, 'B-200');
  assert.equal(c.status, 200, c.text);
  assert.ok(!st.closed, 'the stream stayed open');
  let metrics = '';
  await waitFor(async () => {
    metrics = (await request(srv.port, { path: '/metrics' })).text;
    return /mcpsub_store_lane_waits_total\{worker="0"\} [1-9]/.test(metrics);
  }, { timeoutMs: 5000, message: 'lane waits in /metrics' });
  assert.match(metrics, /mcpsub_store_lane_blocked_total\{worker="0"\} 0\n/);
  st.close();
  await s.delete();
  await srv.stop();
});

/*
 * A resumption reads the audit log while another session holds it locked
 * (the loop's connection does not wait for locks: its reads fail at once and
 * the recovery falls back to a re-read update). Its client leaves while the
 * recovery's statements are under way (each a wait on the lane): that costs
 * nothing, liveness answers throughout, the worker goes on (no crash, no
 * restart), and once the lock is gone the same resumption recovers the
 * missed change.
 */
test('PostgreSQL: a resumption under a locked audit log, its client leaving meanwhile, is harmless', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  let srv = await startServer({ args: ['--workers', '1'] });
  try {
    const s = await McpSession.open(srv.port);
    assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Product/A-100` }), {});
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    await st.waitUpdates(1);
    const last = st.lastId;
    st.close();
    await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 2 }); // missed by the client
    srv = await restartServer(srv, { args: ['--workers', '1'] }); // its replay ring is gone
    assert.ok((await s.call('ping', {})).result, 'the session is restored');

    const lock = pgHoldLock(dbTarget(srv.dbPath), 'LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE', 3000);
    await lock.locked;
    const gone = await EventStream.open(srv.port, s.id, { lastEventId: last });
    gone.close(); // while its recovery waits for the lock
    for (let i = 0; i < 3; i++) {
      const h = await timed(() => request(srv.port, { path: '/healthz', timeoutMs: 3000 }), 500, '/healthz while the audit log was locked');
      assert.equal(h.status, 200);
      await sleep(200);
    }
    await lock.done;

    const again = await EventStream.open(srv.port, s.id, { lastEventId: last });
    await again.waitUpdates(1);
    assert.equal(again.updates()[0].json.params.uri, `${srv.base}/Product/A-100`);
    again.close();
    const metrics = (await request(srv.port, { path: '/metrics' })).text;
    assert.match(metrics, /mcpsub_worker_restarts_total\{worker="0"\} 0\n/);
    assert.match(metrics, /mcpsub_store_lane_blocked_total\{worker="0"\} 0\n/);
    await s.delete();
  } finally {
    await srv.kill();
  }
});

/*
 * SIGTERM while a request waits for a frozen database: the drain waits for
 * that request (it is the worker's running job), which is answered once
 * the database answers; then the server exits cleanly.
 */
test('PostgreSQL frozen when SIGTERM arrives: the request in flight is answered, then a clean exit', { skip: !PG_MODE && 'PostgreSQL only' }, async () => {
  const srv = await startServer({ args: ['--workers', '1'] });
  servers.push(srv);
  assert.equal((await request(srv.port, { path: '/Product/A-100' })).status, 200);
  freeze();
  const pending = request(srv.port, { path: '/Product/B-200', timeoutMs: 20000 });
  await sleep(300); // the request waits for the database
  const stopped = srv.stop({ timeoutMs: 20000 });
  await sleep(1000);
  assert.equal(srv.exit, null, 'the server waits for the request in flight');
  thaw();
  const res = await pending;
  assert.equal(res.status, 200, res.text);
  assert.equal(JSON.parse(res.text).sku, 'B-200');
  await stopped; // exit code 0
});

