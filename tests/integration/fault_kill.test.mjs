// Faults, each ending with every acknowledged commit in audit_log and every
// subscriber holding every change exactly once after it resumes (see
// lib/exactly_once.mjs): the master killed with SIGKILL under
// subscriptions and writes (its workers go too; a new server on the same
// port and database takes the clients back), a reader that stops reading
// (cut at --max-stream-queue, then resumed), one of several sessions on
// a collection that stops reading (its socket takes part of a write, the
// server keeps the rest; nothing lost, doubled or reordered for it or the
// others), and a restart with a schema change (a column added, a
// subscribed table dropped). A worker killed alone is covered by
// prefork.test.mjs and exactly_once.test.mjs.

import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

import { controlCall, startServer, getStatus } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { jsonMember, sqlite, sqliteRows, sessionRow } from './lib/sqlite.mjs';
import { EventStream, idSeq } from './lib/sse.mjs';
import { auditMax, rest, startServerOn, waitStatus } from './lib/subs.mjs';
import { assertExactlyOnce } from './lib/exactly_once.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

const servers = [];
after(async () => {
  for (const s of servers) await s.kill();
});

function childrenOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

const alive = (pid) => fs.existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));

async function openPrimed(port, s, lastEventId) {
  const st = await EventStream.open(port, s.id, lastEventId ? { lastEventId } : {});
  await st.waitPrimed();
  return st;
}

test('SIGKILL of the master under subscriptions and writes: the workers go too; a new server takes the clients back, exactly once', async () => {
  let srv = await startServer({ args: ['--workers', '2'] });
  servers.push(srv);
  const B = srv.base;
  const N = 6;
  sqlite(srv.dbPath, `BEGIN; ${Array.from({ length: N }, (_, i) => `INSERT INTO Product (sku, name, category) VALUES ('M-${i}', 'm', 'm');`).join('')} COMMIT;`);
  const clients = [];
  for (let i = 0; i < N; i++) {
    const s = await McpSession.open(srv.port);
    const subs = [`${B}/Product/M-${i}`, ...(i % 2 ? [`${B}/StockEvent`] : [])];
    for (const uri of subs) await s.result('resources/subscribe', { uri });
    clients.push({ s, subs, streams: [await openPrimed(srv.port, s)] });
  }
  const from = auditMax(srv.dbPath);
  const acked = [];
  let writing = true;
  let n = 0;
  const writer = (async () => {
    while (writing) {
      n++;
      const i = n % N;
      try {
        if (n % 4 === 0) {
          sqlite(srv.dbPath, `INSERT INTO StockEvent (id, sku, delta) VALUES (${50000 + n}, 'M-${i}', ${n})`);
        } else {
          await rest(srv.port, 'PATCH', `/Product/M-${i}`, { price_cents: 100000 + n });
        }
        acked.push(n);
      } catch {
        /* the server is down: not acknowledged */
      }
      await sleep(5);
    }
  })();
  await waitFor(() => acked.length >= 30, { timeoutMs: 10000, message: 'writes before the kill' });
  const master = srv.child.pid;
  const workers = childrenOf(master);
  assert.equal(workers.length, 2);
  process.kill(master, 'SIGKILL');
  await waitFor(() => workers.every((pid) => !alive(pid)), { timeoutMs: 10000, message: 'the workers to exit after their master died' });
  for (const c of clients) await c.streams[0].waitClosed({ timeoutMs: 10000 });
  // While no server runs, another process goes on writing.
  await sleep(100);
  srv = await startServerOn(srv.port, srv.dbPath, { args: ['--workers', '2'] });
  servers.push(srv);
  await waitFor(() => acked.length >= 60, { timeoutMs: 10000, message: 'writes after the restart' });
  writing = false;
  await writer;
  for (const c of clients) c.streams.push(await openPrimed(srv.port, c.s, c.streams[0].lastId));
  await sleep(500); // live updates of the last writes
  const upto = auditMax(srv.dbPath);
  // Every acknowledged REST write is in the log.
  const prices = new Set(sqliteRows(srv.dbPath, `SELECT ${jsonMember('new_row', 'price_cents')} AS p FROM audit_log WHERE tbl = 'Product' AND seq > ${from}`).map((r) => Number(r.p)));
  for (const k of acked.filter((x) => x % 4 !== 0)) assert.ok(prices.has(100000 + k), `acknowledged PATCH ${k} missing from audit_log`);
  for (const [i, c] of clients.entries()) {
    await waitFor(() => {
      try {
        assertExactlyOnce({ db: srv.dbPath, base: B, streams: c.streams, subs: c.subs, from, upto, what: `client ${i}` });
        return true;
      } catch {
        return false;
      }
    }, { timeoutMs: 5000, message: `client ${i} to catch up` }).catch(() => {});
    assertExactlyOnce({ db: srv.dbPath, base: B, streams: c.streams, subs: c.subs, from, upto, what: `client ${i}` });
  }
  for (const c of clients) c.streams.at(-1).close();
  await srv.stop();
});

test('sessions sharing a collection, one not reading: the socket takes part of a write, the rest waits; each gets every change once, in order', async () => {
  const srv = await startServer({ args: ['--workers', '0', '--max-stream-queue', '64m'] });
  servers.push(srv);
  const uri = `${srv.base}/StockEvent`;
  const sessions = [];
  for (let i = 0; i < 3; i++) {
    const s = await McpSession.open(srv.port);
    assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    sessions.push(s);
  }
  const streams = [];
  for (const s of sessions) streams.push(await openPrimed(srv.port, s));
  const from = auditMax(srv.dbPath);
  const slow = streams[0];
  slow.conn.socket.pause(); // the kernel's buffers fill; what they leave of a write waits in the server
  // More than loopback's socket buffers hold (about 10 MB of 250-byte updates), in bursts.
  const N = 48000;
  for (let b = 0; b < 8; b++) {
    sqlite(srv.dbPath, `BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${N / 8})
      INSERT INTO StockEvent (id, sku, delta) SELECT ${100000 + b * (N / 8)} + i, 'SLOW', i FROM n; COMMIT;`);
    await sleep(20);
  }
  const upto = auditMax(srv.dbPath);
  const want = sqliteRows(srv.dbPath, `SELECT seq FROM audit_log WHERE seq > ${from} AND seq <= ${upto} AND tbl = 'StockEvent' ORDER BY seq`).map((r) => r.seq);
  assert.equal(want.length, N);
  const seqs = (st) => st.updates().filter((e) => e.json.params.subscribedUri === uri).map((e) => idSeq(e.id));
  for (const st of streams.slice(1)) await waitFor(() => seqs(st).length >= N, { timeoutMs: 60000, message: 'the readers to get every change' });
  assert.ok(seqs(slow).length < N, 'the stream that does not read has not got them all');
  const held = (await controlCall(srv, { cmd: 'status' })).totals.queuedBytes;
  assert.ok(held > 0, `the server holds what its socket did not take (${held} bytes)`);
  slow.conn.socket.resume();
  await waitFor(() => seqs(slow).length >= N, { timeoutMs: 60000, message: 'the slow reader to catch up' });
  await sleep(200);
  for (const st of streams) assert.deepEqual(seqs(st), want, 'every change once, in commit order');
  assert.equal((await getStatus(srv.port)).streams, 3, 'no stream was cut');
  for (const st of streams) st.close();
  await srv.stop();
});

test('a reader that stops reading is cut at --max-stream-queue; resumed, it gets every change exactly once', async () => {
  const srv = await startServer({ args: ['--workers', '0', '--max-stream-queue', '4096'] });
  servers.push(srv);
  const B = srv.base;
  const s = await McpSession.open(srv.port);
  const subs = [`${B}/StockEvent`, `${B}/Product/A-100`];
  for (const uri of subs) await s.result('resources/subscribe', { uri });
  const first = await openPrimed(srv.port, s);
  const from = auditMax(srv.dbPath);
  for (let i = 0; i < 3; i++) await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 900 + i });
  await first.waitUpdates(3);
  first.conn.socket.pause(); // stops reading: the kernel's buffers fill, then the server's queue
  for (let round = 0; round < 10; round++) {
    sqlite(srv.dbPath, `BEGIN; ${Array.from({ length: 400 }, (_, i) => `INSERT INTO StockEvent (id, sku, delta) VALUES (${70000 + round * 400 + i}, 'A-100', ${i});`).join('')} UPDATE Product SET price_cents = ${round} WHERE sku = 'A-100'; COMMIT;`);
    await sleep(50);
    if ((await getStatus(srv.port)).streams === 0) break;
  }
  await waitStatus(srv.port, { streams: 0 }, { timeoutMs: 10000 });
  first.conn.socket.resume(); // what the kernel held was delivered: read it
  await first.waitClosed({ timeoutMs: 5000 });
  const second = await openPrimed(srv.port, s, first.lastId);
  await sleep(300);
  const upto = auditMax(srv.dbPath);
  assert.ok(second.updates().length > 0, 'the resumed stream recovered what the cut one missed');
  assertExactlyOnce({ db: srv.dbPath, base: B, streams: [first, second], subs, from, upto, what: 'the slow reader' });
  second.close();
  await s.delete();
  await srv.stop();
});

test('a restart with a schema change: a column added, a subscribed table dropped; sessions restore, exactly once, the dropped one gone', async () => {
  let srv = await startServer();
  servers.push(srv);
  const B = srv.base;
  sqlite(srv.dbPath, "CREATE TABLE Gone (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO Gone VALUES (1, 'a');");
  const s = await McpSession.open(srv.port);
  const subs = [`${B}/Product`, `${B}/Gone`];
  for (const uri of subs) await s.result('resources/subscribe', { uri });
  const first = await openPrimed(srv.port, s);
  await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 1 });
  await first.waitUpdates(1);
  const from = auditMax(srv.dbPath) - 1;
  await srv.stop({ keepDir: true });
  await first.waitClosed();
  sqlite(srv.dbPath, `ALTER TABLE Product ADD COLUMN color TEXT;
    UPDATE Product SET color = 'red' WHERE sku = 'C-300';
    INSERT INTO Gone VALUES (2, 'b');
    DROP TABLE Gone;`);
  srv = await startServerOn(srv.port, srv.dbPath, { ownDirs: srv.ownDirs });
  servers.push(srv);
  const second = await openPrimed(srv.port, s, first.lastId);
  await rest(srv.port, 'PATCH', '/Product/C-300', { color: 'blue' }); // the new column works at once
  await second.waitUntil((x) => x.updates().filter((e) => e.json.params.uri === `${B}/Product/C-300`).length === 2, { timeoutMs: 5000, what: 'C-300 twice' });
  const upto = auditMax(srv.dbPath);
  assertExactlyOnce({ db: srv.dbPath, base: B, streams: [first, second], subs: [`${B}/Product`], from, upto });
  assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, s.id).subscriptions), [`${B}/Product`], 'the dropped table\'s subscription is gone');
  // Its subscriber hears once that it ended, and why (the row kept that for it), nothing else.
  assert.deepEqual(second.updates().filter((e) => e.json.params.subscribedUri === `${B}/Gone`).map((e) => [e.json.params.uri, e.json.params._meta?.['io.mcpsub/subscriptionEnded']]),
    [[`${B}/Gone`, 'its table no longer exists']]);
  second.close();
  await s.delete();
  await srv.stop();
});
