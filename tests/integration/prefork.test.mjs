// The pre-forked process model, black-box: a master and --workers 4 worker
// processes behind one port. 100 official-SDK clients each subscribe to
// their own record and each get its notification; one kept-alive raw
// connection carries requests for sessions held by different workers
// (handed back and routed again); a worker killed with SIGKILL while a
// writer commits is restarted and its clients, reconnecting with
// Last-Event-ID, miss no change (checked against audit_log); a session
// restored by another worker while its own was down (kept down by the
// restart backoff) goes back to it once it is up, one live copy at a
// time; SIGTERM under
// load drains within --drain-timeout without losing an acknowledged write,
// and the next server on the same database restores the sessions. Also the
// control socket (JSON lines) that mcpsubctl talks to.

import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { SOURCE_ROOT, startServer, getStatus, httpGet } from './lib/server.mjs';
import { RawConnection, buildRequest, initialize, mcpPost, MCP_ACCEPT } from './lib/raw.mjs';
import { PG_MODE, dbTarget } from './lib/pg.mjs';
import { sqlite, sqliteRows } from './lib/sqlite.mjs';
import { EventStream, idSeq } from './lib/sse.mjs';
import { auditAfter, auditMax, rest, startServerOn, waitStatus } from './lib/subs.mjs';
import { sleep, waitFor, withTimeout } from './lib/wait.mjs';

const servers = new Set();
after(async () => {
  for (const s of servers) await s.kill();
});

/*
 * A server with --workers N, returned once all N workers are up: /healthz
 * answers as soon as one is, and a slow start (a sanitizer build) would
 * otherwise race the first assertions about the others.
 */
async function server(args) {
  const s = await startServer({ args });
  servers.add(s);
  const n = Number(args[args.indexOf('--workers') + 1]);
  await waitFor(async () => (await ctl(s, { cmd: 'status' })).workersAlive === n, {
    timeoutMs: 10000,
    message: `all ${n} workers up`,
  });
  return s;
}

async function stop(s, opts) {
  servers.delete(s);
  return s.stop(opts);
}

/* One request on the control socket: a JSON line out, a JSON line back. */
function ctl(srv, request, { timeoutMs = 5000 } = {}) {
  const sock = path.join(path.dirname(srv.dbPath), 'mcpsubd.sock');
  return withTimeout(
    new Promise((resolve, reject) => {
      const c = net.connect({ path: sock });
      let buf = '';
      c.setEncoding('utf8');
      c.on('connect', () => c.write(`${typeof request === 'string' ? request : JSON.stringify(request)}\n`));
      c.on('data', (d) => {
        buf += d;
        const nl = buf.indexOf('\n');
        if (nl >= 0) {
          c.destroy();
          try {
            resolve(JSON.parse(buf.slice(0, nl)));
          } catch (err) {
            reject(err);
          }
        }
      });
      c.on('error', reject);
    }),
    timeoutMs,
    `control request ${JSON.stringify(request)}`,
  );
}

const slotOf = (sessionId) => parseInt(sessionId.slice(0, 2), 16);
const UPDATED = 'notifications/resources/updated';

/* ---------------------------------------------------------------------------------- */

test('100 SDK clients over 4 workers: each subscribes to its own record and gets its notification', async () => {
  const srv = await server(['--workers', '4']);
  const B = srv.base;
  const N = 100;
  const sku = (i) => `PF-${String(i).padStart(3, '0')}`;
  let sql = 'BEGIN;';
  for (let i = 0; i < N; i++) sql += `INSERT INTO Product (sku, name, price_cents, category) VALUES ('${sku(i)}', 'pf ${i}', ${i}, 'pf');`;
  sqlite(srv.dbPath, `${sql} COMMIT;`);

  const clients = [];
  const connectOne = async (i) => {
    const transport = new StreamableHTTPClientTransport(new URL(srv.url));
    const client = new Client({ name: `pf-${i}`, version: '1.0.0' }, { capabilities: {} });
    const c = { i, client, transport, got: [] };
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => c.got.push(n.params.uri));
    await client.connect(transport);
    assert.deepEqual(await client.subscribeResource({ uri: `${B}/Product/${sku(i)}` }), {});
    clients.push(c);
  };
  try {
    await Promise.all(Array.from({ length: N }, (_, i) => connectOne(i)));
    const st = await getStatus(srv.port);
    assert.equal(st.sessions, N, JSON.stringify(st));
    assert.equal(st.subscriptions, N, JSON.stringify(st));
    assert.equal(st.workers, 4, JSON.stringify(st));
    // Sessions are spread (least-loaded routing), and each lives on the worker its id names.
    const workers = await ctl(srv, { cmd: 'workers' });
    assert.equal(workers.ok, true, JSON.stringify(workers));
    assert.equal(workers.workers.length, 4);
    const used = workers.workers.filter((w) => w.sessions > 0).length;
    assert.ok(used >= 3, `sessions on ${used} workers: ${JSON.stringify(workers.workers.map((w) => w.sessions))}`);
    const sessions = await ctl(srv, { cmd: 'sessions' });
    assert.equal(sessions.sessions.length, N);
    for (const s of sessions.sessions) assert.equal(s.worker, slotOf(s.id), JSON.stringify(s));
    assert.equal(new Set(sessions.sessions.map((s) => s.id)).size, N, 'a session held by two workers');

    // One external commit changes every row; every client hears of its own.
    sqlite(srv.dbPath, "UPDATE Product SET price_cents = price_cents + 1000 WHERE category = 'pf'");
    await waitFor(() => clients.every((c) => c.got.includes(`${B}/Product/${sku(c.i)}`)), {
      timeoutMs: 20000,
      message: 'every client notified of its row',
    }).catch((err) => {
      const missing = clients.filter((c) => !c.got.includes(`${B}/Product/${sku(c.i)}`)).map((c) => c.i);
      throw new Error(`${missing.length} of ${N} clients not notified: ${missing.join(',')}\n${err.message}`);
    });
    for (const c of clients) assert.deepEqual(c.got, [`${B}/Product/${sku(c.i)}`], `client ${c.i}`);

    // A change through REST (one worker's commit) wakes the others at once.
    await rest(srv.port, 'PATCH', `/Product/${sku(7)}`, { price_cents: 1 });
    await waitFor(() => clients[clients.findIndex((c) => c.i === 7)].got.length === 2, { message: 'REST change notified' });

    const subs = await ctl(srv, { cmd: 'subs' });
    assert.equal(subs.subscriptions.length, N);
    assert.ok(subs.subscriptions.every((s) => s.sessions === 1));
    const one = await ctl(srv, { cmd: 'subs', uri: `${B}/Product/${sku(3)}` });
    assert.deepEqual(one.subscriptions.map((x) => [x.uri, x.sessions]), [[`${B}/Product/${sku(3)}`, 1]]);
  } finally {
    await Promise.all(clients.map(async (c) => {
      await c.transport.terminateSession().catch(() => {});
      await c.client.close().catch(() => {});
    }));
  }
  await waitStatus(srv.port, { sessions: 0, streams: 0, subscriptions: 0 }, { timeoutMs: 10000 });
  await stop(srv);
});

test('one kept-alive connection carrying requests for sessions on different workers: every answer right', async () => {
  const srv = await server(['--workers', '4']);
  const ids = [];
  while (new Set(ids.map(slotOf)).size < 3 && ids.length < 40) ids.push(await initialize(srv.port));
  const bySlot = new Map();
  for (const id of ids) if (!bySlot.has(slotOf(id))) bySlot.set(slotOf(id), id);
  const sessions = [...bySlot.values()];
  assert.ok(sessions.length >= 3, `sessions on ${sessions.length} workers only`);

  const post = (sid, id, method, params) =>
    buildRequest(srv.port, {
      method: 'POST',
      path: '/mcp',
      headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': sid },
      body: JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) }),
    });
  const conn = await RawConnection.open(srv.port);
  try {
    let id = 0;
    // One at a time, alternating sessions, then some pipelined.
    for (let round = 0; round < 3; round++) {
      for (const sid of sessions) {
        id++;
        conn.write(post(sid, id, 'tools/call', { name: 'get_record', arguments: { table: 'Product', key: 'A-100' } }));
        const res = await conn.readResponse();
        assert.equal(res.status, 200, res.text);
        const body = res.json();
        assert.equal(body.id, id);
        assert.ok(body.result && !body.result.isError, res.text);
      }
    }
    const batch = [];
    for (const sid of [...sessions, ...sessions]) batch.push(post(sid, ++id, 'ping'));
    batch.push(buildRequest(srv.port, { path: '/status' }));
    batch.push(post(sessions[0], ++id, 'ping'));
    conn.write(Buffer.concat(batch));
    const first = id - batch.length + 2; // the /status request uses no id
    for (let k = 0; k < batch.length; k++) {
      const res = await conn.readResponse();
      assert.equal(res.status, 200, res.text);
      if (k === batch.length - 2) {
        assert.equal(res.json().sessions, ids.length, `/status on the kept-alive connection: ${res.text}`);
        continue;
      }
      const want = k < batch.length - 2 ? first + k : id;
      assert.deepEqual(res.json(), { jsonrpc: '2.0', id: want, result: {} });
    }
    assert.ok(!conn.closed);
    // An unknown session, a session header without a slot we run, and a DELETE, on the same connection.
    conn.write(post(`ff${sessions[0].slice(2)}`, ++id, 'ping'));
    assert.equal((await conn.readResponse()).status, 404);
    conn.write(buildRequest(srv.port, { method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': sessions[1] } }));
    assert.equal((await conn.readResponse()).status, 204);
    conn.write(post(sessions[1], ++id, 'ping'));
    assert.equal((await conn.readResponse()).status, 404);
  } finally {
    conn.close();
  }
  // Each session is live once, on its own worker: nothing was restored elsewhere.
  const list = await ctl(srv, { cmd: 'sessions' });
  assert.equal(list.sessions.length, ids.length - 1, JSON.stringify(list));
  for (const s of list.sessions) assert.equal(s.worker, slotOf(s.id));
  await stop(srv);
});

test('REST writers: on SQLite their connections gather on one worker (one writer for its lock); on PostgreSQL they spread', async () => {
  const srv = await server(['--workers', '2']);
  const served = async () => {
    const st = await ctl(srv, { cmd: 'stats' });
    return Object.fromEntries(st.workers.map((w) => [w.slot, w.requests]));
  };
  const before = await served();
  const N = 6; // connections, each opening with a PUT and keeping on (keep-alive)
  const PER = 5;
  await Promise.all(
    Array.from({ length: N }, async (_, i) => {
      const conn = await RawConnection.open(srv.port);
      try {
        for (let k = 0; k < PER; k++) {
          const body = JSON.stringify({ name: `writer ${i}`, price_cents: k });
          conn.write(buildRequest(srv.port, { method: 'PUT', path: `/Product/W-${i}`, headers: { 'Content-Type': 'application/json' }, body }));
          const res = await conn.readResponse();
          assert.ok(res.status === 200 || res.status === 201, `PUT answered ${res.status}: ${res.body}`);
        }
      } finally {
        conn.close();
      }
    }),
  );
  const after = await served();
  const delta = [0, 1].map((slot) => after[slot] - before[slot]);
  assert.equal(delta[0] + delta[1], N * PER, `requests per worker: ${JSON.stringify(delta)}`);
  if (PG_MODE) assert.ok(delta[0] > 0 && delta[1] > 0, `PostgreSQL: writes on one worker only: ${JSON.stringify(delta)}`);
  else assert.deepEqual(delta, [N * PER, 0], 'SQLite: the writes should all be on the write home, slot 0');
  await stop(srv);
});

/* A session on the given slot (sessions are spread: a few tries find one). */
async function sessionOn(srv, slot) {
  for (let i = 0; i < 64; i++) {
    const sid = await initialize(srv.port);
    if (slotOf(sid) === slot) return sid;
  }
  throw new Error(`no session landed on worker ${slot}`);
}

/* put_record on a session; the call's result (throws on a JSON-RPC error or an isError). */
async function putRecord(srv, sid, key, record) {
  const res = await mcpPost(srv.port, sid, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'put_record', arguments: { table: 'Product', key, record } } });
  const msg = res.json();
  if (res.status !== 200 || !msg.result || msg.result.isError) throw new Error(`put_record ${key}: ${res.status} ${res.text}`);
  return msg.result;
}

/*
 * REST PUTs in a loop, which go to the write home on SQLite: a worker sends
 * its writes there only while others write too. stop() ends it.
 */
function homeWriter(srv) {
  let running = true;
  let acked = 0;
  const done = (async () => {
    for (let n = 0; running; n++) {
      try {
        await rest(srv.port, 'PUT', `/Product/HW-${n % 20}`, { name: 'home writer', price_cents: n });
        acked++;
      } catch {
        /* the write home stopped or killed */
      }
      await sleep(2);
    }
  })();
  return {
    acked: () => acked,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

const writeCounts = async (srv) => {
  const st = await ctl(srv, { cmd: 'stats' });
  return Object.fromEntries(st.workers.map((w) => [w.slot, { forwarded: w.writesForwarded, taken: w.writesTaken }]));
};

test('tool writes of a session on another worker: made by the write home on SQLite, where they are on PostgreSQL', async () => {
  const srv = await server(['--workers', '2']);
  const sid = await sessionOn(srv, 1);
  const home = homeWriter(srv);
  await waitFor(() => home.acked() >= 5, { timeoutMs: 5000, message: 'the home writer under way' });
  const before = await writeCounts(srv);
  const N = 10;
  for (let i = 0; i < N; i++) {
    const r = JSON.parse((await putRecord(srv, sid, `TW-${i}`, { name: `tool write ${i}`, price_cents: i })).content[0].text);
    assert.equal(r.created, true, JSON.stringify(r));
    assert.equal(r.record.price_cents, i, JSON.stringify(r));
  }
  const after = await writeCounts(srv);
  await home.stop();
  const forwarded = after[1].forwarded - before[1].forwarded;
  const taken = after[0].taken - before[0].taken;
  if (PG_MODE) assert.deepEqual([forwarded, taken], [0, 0], 'PostgreSQL: each worker writes itself');
  else assert.deepEqual([forwarded, taken], [N, N], 'SQLite: worker 1 sends its writes to slot 0, which makes them');
  // Writing alone, a worker makes its writes itself (no lock to share, no round trip to add).
  await sleep(300);
  const quiet = await writeCounts(srv);
  await putRecord(srv, sid, 'TW-alone', { name: 'alone', price_cents: 0 });
  const alone = await writeCounts(srv);
  assert.deepEqual([alone[1].forwarded - quiet[1].forwarded, alone[0].taken - quiet[0].taken], [0, 0]);
  // Each answered as made: the records are there, each written once.
  const rows = await rest(srv.port, 'GET', '/Product?sku=sw=TW-&_limit=100');
  assert.deepEqual(rows.json().map((r) => r.price_cents).sort((a, b) => a - b), [0, ...Array.from({ length: N }, (_, i) => i)], rows.text);
  await stop(srv);
});

test('SIGKILL of the write home while another worker sends it writes: every call answered, every write made exactly once', { skip: PG_MODE && 'PostgreSQL has no write home' }, async () => {
  const srv = await server(['--workers', '2']);
  const sid = await sessionOn(srv, 1);
  const start = auditMax(srv.dbPath);
  const home = (await ctl(srv, { cmd: 'workers' })).workers[0];
  const homeWrites = homeWriter(srv);
  await waitFor(() => homeWrites.acked() >= 5, { timeoutMs: 5000, message: 'the home writer under way' });
  const N = 300;
  const IN_FLIGHT = 8;
  let next = 0;
  let answered = 0;
  const failures = [];
  const writer = async () => {
    while (next < N) {
      const i = next++;
      try {
        await putRecord(srv, sid, `KH-${i}`, { name: 'kill the home', price_cents: i });
        answered++;
      } catch (err) {
        failures.push(err.message);
      }
    }
  };
  const writers = Array.from({ length: IN_FLIGHT }, writer);
  await waitFor(() => answered >= 60, { timeoutMs: 10000, message: 'writes before the kill' });
  // Stopped first, the home takes writes it never answers: every writer ends up waiting on it.
  process.kill(home.pid, 'SIGSTOP');
  await sleep(400);
  const stalled = answered;
  await sleep(200);
  assert.equal(answered, stalled, 'writes answered while the write home was stopped');
  process.kill(home.pid, 'SIGKILL');
  await Promise.all(writers);
  await homeWrites.stop();
  assert.deepEqual(failures, [], 'every put_record answered without error');
  assert.equal(answered, N);
  await waitFor(async () => (await ctl(srv, { cmd: 'workers' })).workers[0].restarts === 1, { timeoutMs: 10000, message: 'the home restarted' });
  // Exactly once: one INSERT in the audit log for each key, and nothing else.
  const changes = auditAfter(srv.dbPath, start, { tbl: 'Product' }).filter((c) => c.key.startsWith('KH-'));
  const perKey = new Map();
  for (const c of changes) perKey.set(c.key, (perKey.get(c.key) ?? 0) + 1);
  for (let i = 0; i < N; i++) assert.equal(perKey.get(`KH-${i}`), 1, `KH-${i}: ${perKey.get(`KH-${i}`) ?? 0} changes`);
  assert.equal(changes.length, N);
  assert.ok(changes.every((c) => c.op === 'INSERT'));
  // After the restart the writes go to the new home again.
  const again = homeWriter(srv);
  await waitFor(() => again.acked() >= 5, { timeoutMs: 5000, message: 'the new home writing' });
  const before = await writeCounts(srv);
  await putRecord(srv, sid, 'KH-after', { name: 'after', price_cents: 1 });
  const after = await writeCounts(srv);
  await again.stop();
  assert.deepEqual([after[1].forwarded - before[1].forwarded, after[0].taken - before[0].taken], [1, 1]);
  await stop(srv);
});

test('a restarted worker sends its writes to the write home again, on a channel of its own', { skip: PG_MODE && 'PostgreSQL has no write home' }, async () => {
  const srv = await server(['--workers', '2']);
  const before = (await ctl(srv, { cmd: 'workers' })).workers[1];
  process.kill(before.pid, 'SIGKILL');
  await waitFor(async () => {
    const w = (await ctl(srv, { cmd: 'workers' })).workers[1];
    return w.restarts === 1 && w.alive && w.pid !== before.pid;
  }, { timeoutMs: 10000, message: 'worker 1 restarted' });
  const sid = await sessionOn(srv, 1);
  const home = homeWriter(srv);
  await waitFor(() => home.acked() >= 5, { timeoutMs: 5000, message: 'the home writer under way' });
  const counts = await writeCounts(srv);
  const r = JSON.parse((await putRecord(srv, sid, 'RW-1', { name: 'from the new worker', price_cents: 3 })).content[0].text);
  const after = await writeCounts(srv);
  await home.stop();
  assert.equal(r.record.price_cents, 3, JSON.stringify(r));
  assert.deepEqual([after[1].forwarded - counts[1].forwarded, after[0].taken - counts[0].taken], [1, 1]);
  await stop(srv);
});

test('a session restored by another worker while its own was down goes back to it: one live copy, and the stream elsewhere ends so the client resumes there', async () => {
  const srv = await server(['--workers', '2']);
  const B = srv.base;
  const sid = await sessionOn(srv, 0);
  const subscribe = async (uri) => {
    const res = await mcpPost(srv.port, sid, { jsonrpc: '2.0', id: 1, method: 'resources/subscribe', params: { uri } });
    assert.equal(res.status, 200, res.text);
  };
  await subscribe(`${B}/Product/A-100`);
  // Slot 0's worker killed until its next start waits (the backoff doubles from 100 ms: the
  // sixth restart comes 1.6 s after the exit).
  for (let k = 0; k < 6; k++) {
    const before = (await ctl(srv, { cmd: 'workers' })).workers[0];
    process.kill(before.pid, 'SIGKILL');
    await waitFor(async () => {
      const w = (await ctl(srv, { cmd: 'workers' })).workers[0];
      return k < 5 ? w.alive && w.pid !== before.pid : !w.alive;
    }, { timeoutMs: 10000, message: `slot 0 after kill ${k + 1}` });
  }
  // Meanwhile the session's stream goes to worker 1, which restores the session from its row.
  const first = await EventStream.open(srv.port, sid);
  await first.waitPrimed();
  assert.equal((await ctl(srv, { cmd: 'session', id: sid })).session.worker, 1, 'restored on worker 1');
  await waitFor(async () => (await ctl(srv, { cmd: 'workers' })).workers[0].alive, { timeoutMs: 10000, message: 'slot 0 back' });
  // The session's next request goes to slot 0, which restores it too: worker 1 lets its copy go,
  // and the stream there ends (else a subscription made at slot 0 would notify a ring no
  // stream reads).
  await subscribe(`${B}/Product/B-200`);
  await first.waitClosed({ timeoutMs: 5000 });
  // (sessionOn may have left other sessions on worker 1: count this one's copies.)
  const copies = async () => (await ctl(srv, { cmd: 'sessions' })).sessions.filter((x) => x.id === sid).length;
  await waitFor(async () => (await copies()) === 1, { timeoutMs: 5000, message: 'one live copy' });
  assert.equal((await ctl(srv, { cmd: 'session', id: sid })).session.worker, 0);
  const second = await EventStream.open(srv.port, sid, { lastEventId: first.lastId });
  await second.waitPrimed();
  await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 4242 });
  await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 4343 });
  await second.waitUpdates(1, `${B}/Product/B-200`);
  await second.waitUpdates(1, `${B}/Product/A-100`);
  second.close();
  await stop(srv);
});

test('control socket: JSON lines for status, workers, stats, sessions, session, evict, subs; errors', async () => {
  const srv = await server(['--workers', '2']);
  const sid = await initialize(srv.port);
  const uri = `${srv.base}/Product/A-100`;
  const sub = await mcpPost(srv.port, sid, { jsonrpc: '2.0', id: 1, method: 'resources/subscribe', params: { uri } });
  assert.equal(sub.status, 200, sub.text);

  const status = await ctl(srv, { cmd: 'status' });
  assert.equal(status.ok, true);
  assert.equal(status.workers, 2);
  assert.equal(status.totals.sessions, 1);
  assert.equal(status.totals.subscriptions, 1);
  assert.equal(status.db, dbTarget(srv.dbPath));
  assert.equal(typeof status.pid, 'number');
  assert.equal(typeof status.uptimeMs, 'number');
  assert.equal(typeof status.version, 'string');
  const stats = await ctl(srv, { cmd: 'stats' });
  assert.equal(stats.workers.length, 2);
  assert.equal(stats.slots.length, 2);
  assert.deepEqual(stats.slots.map((s) => s.alive), [true, true]);
  assert.equal(stats.workers.reduce((n, w) => n + w.sessions, 0), 1);
  const one = await ctl(srv, { cmd: 'session', id: sid });
  assert.equal(one.ok, true, JSON.stringify(one));
  assert.equal(one.session.id, sid);
  assert.equal(one.session.worker, slotOf(sid));
  assert.deepEqual(one.session.subscriptions, [uri]);
  assert.equal(one.session.stream, false);
  const unknown = await ctl(srv, { cmd: 'session', id: `00${'0'.repeat(32)}` });
  assert.deepEqual(unknown, { ok: false, error: 'unknown session' });
  assert.deepEqual(await ctl(srv, { cmd: 'evict', id: sid }), { ok: true, evicted: true });
  assert.deepEqual(await ctl(srv, { cmd: 'evict', id: sid }), { ok: false, error: 'unknown session' });
  const gone = await mcpPost(srv.port, sid, { jsonrpc: '2.0', id: 2, method: 'ping' });
  assert.equal(gone.status, 404, gone.text);
  await waitStatus(srv.port, { sessions: 0, subscriptions: 0 });
  assert.equal((await ctl(srv, { cmd: 'nope' })).ok, false);
  assert.equal((await ctl(srv, 'not json')).ok, false);
  assert.equal((await ctl(srv, { nocmd: 1 })).ok, false);
  // Prometheus text from the master, covering both workers.
  const metrics = await new Promise((resolve, reject) => {
    const c = net.connect({ port: srv.port, host: '127.0.0.1' });
    let text = '';
    c.on('connect', () => c.write(`GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`));
    c.on('data', (d) => (text += d));
    c.on('end', () => resolve(text));
    c.on('error', reject);
  });
  assert.match(metrics, /^HTTP\/1\.1 200/);
  assert.match(metrics, /Content-Type: text\/plain; version=0\.0\.4/i);
  assert.match(metrics, /worker="0"/);
  assert.match(metrics, /worker="1"/);
  assert.doesNotMatch(metrics, /worker="all"/); // summing is the query's job
  assert.match(metrics, /^mcpsub_build_info\{version="[^"]+"\} 1$/m);
  assert.match(metrics, /^# TYPE mcpsub_notification_delay_seconds histogram$/m);
  await stop(srv);
});

/*
 * A raw client with its GET stream that reconnects with Last-Event-ID
 * whenever the stream ends, recording each stream (attempt) separately.
 */
class ResumingClient {
  constructor(srv, sid, uri) {
    this.srv = srv;
    this.sid = sid;
    this.uri = uri;
    this.attempts = []; // { lastEventId, stream }
    this.running = true;
    this.errors = [];
  }

  get lastId() {
    for (let i = this.attempts.length - 1; i >= 0; i--) {
      const id = this.attempts[i].stream.lastId;
      if (id !== undefined) return id;
    }
    return undefined;
  }

  async run() {
    while (this.running) {
      const lastEventId = this.lastId;
      let stream;
      try {
        stream = await EventStream.open(this.srv.port, this.sid, lastEventId ? { lastEventId } : {});
      } catch (err) {
        this.errors.push(String(err.message).slice(0, 200));
        await sleep(50);
        continue;
      }
      const attempt = { lastEventId, stream };
      this.attempts.push(attempt);
      await stream.waitClosed({ timeoutMs: 120000 }).catch(() => {});
    }
  }

  stop() {
    this.running = false;
    for (const a of this.attempts) a.stream.close();
  }

  /* Every update of its URI, over every attempt, in the order received. */
  allUpdates() {
    return this.attempts.flatMap(({ stream }) => stream.updates().filter((e) => e.json.params.uri === this.uri));
  }

  /*
   * Is the change with audit seq s covered? Live (or replayed) with its own
   * seq, or recovered from the audit log on a stream resumed from a
   * position before s by an update named after the newest change of the
   * URI, at or after s.
   */
  covered(s) {
    for (const { lastEventId, stream } of this.attempts) {
      const primedAt = stream.events.indexOf(stream.priming);
      for (const e of stream.updates().filter((u) => u.json.params.uri === this.uri)) {
        if (idSeq(e.id) === s) return true;
        const recovered = primedAt < 0 || stream.events.indexOf(e) < primedAt;
        if (recovered && lastEventId !== undefined && idSeq(lastEventId) < s && s <= idSeq(e.id)) return true;
      }
    }
    return false;
  }
}

test('SIGKILL of a worker while a writer commits: restarted; its clients resume with Last-Event-ID and get every change exactly once', async () => {
  const srv = await server(['--workers', '3']);
  const B = srv.base;
  const N = 12;
  const key = (i) => `K-${i}`;
  let sql = 'BEGIN;';
  for (let i = 0; i < N; i++) sql += `INSERT INTO Product (sku, name, category) VALUES ('${key(i)}', 'k', 'k');`;
  sqlite(srv.dbPath, `${sql} COMMIT;`);

  const clients = [];
  for (let i = 0; i < N; i++) {
    const sid = await initialize(srv.port);
    const uri = `${B}/Product/${key(i)}`;
    const res = await mcpPost(srv.port, sid, { jsonrpc: '2.0', id: 1, method: 'resources/subscribe', params: { uri } });
    assert.equal(res.status, 200, res.text);
    const c = new ResumingClient(srv, sid, uri);
    c.key = key(i);
    c.done = c.run();
    clients.push(c);
  }
  await waitStatus(srv.port, { streams: N });
  const start = auditMax(srv.dbPath);

  // The victim: the worker holding client 0's session.
  const victimSlot = slotOf(clients[0].sid);
  const before = (await ctl(srv, { cmd: 'workers' })).workers[victimSlot];
  assert.equal(before.alive, true);

  // A writer: REST PATCHes (any worker; some may fail while one is down) and sqlite3 commits.
  let writing = true;
  let acked = 0;
  const writer = (async () => {
    let n = 0;
    while (writing) {
      const i = n % N;
      n++;
      try {
        if (n % 3 === 0) sqlite(srv.dbPath, `UPDATE Product SET price_cents = ${n} WHERE sku = '${key(i)}'`);
        else await rest(srv.port, 'PATCH', `/Product/${key(i)}`, { price_cents: n });
        acked++;
      } catch {
        /* a request on the killed worker's connection */
      }
      await sleep(5);
    }
  })();
  await waitFor(() => acked >= 40, { timeoutMs: 10000, message: 'writes before the kill' });
  process.kill(before.pid, 'SIGKILL');
  await waitFor(async () => {
    const w = (await ctl(srv, { cmd: 'workers' })).workers[victimSlot];
    return w.alive && w.pid !== before.pid && w.generation === before.generation + 1 && w.restarts === 1;
  }, { timeoutMs: 10000, message: 'the master to restart the killed worker' });
  const afterKill = acked;
  await waitFor(() => acked >= afterKill + 40, { timeoutMs: 10000, message: 'writes after the restart' });
  writing = false;
  await writer;
  const end = auditMax(srv.dbPath);
  try {
    for (const c of clients) {
      const changes = auditAfter(srv.dbPath, start, { tbl: 'Product', key: c.key }).map((r) => r.seq);
      assert.ok(changes.length > 0, `no change to ${c.key}`);
      await waitFor(() => changes.every((s) => c.covered(s)), {
        timeoutMs: 10000,
        message: `${c.key} (session on worker ${slotOf(c.sid)}): every change of audit seqs ${changes.join(',')} seen`,
      }).catch((err) => {
        const missing = changes.filter((s) => !c.covered(s));
        throw new Error(`${err.message}\nmissing ${missing.join(',')}; attempts: ${c.attempts.map((a) => `[from ${a.lastEventId}: ${a.stream.describe(8)}]`).join(' ')}; errors ${c.errors.slice(-3)}`);
      });
    }
    // Nothing twice: one subscription per client, so its update ids only ever grow, each
    // naming a change of its record.
    for (const c of clients) {
      const seqs = c.allUpdates().map((e) => idSeq(e.id));
      const real = new Set(auditAfter(srv.dbPath, 0, { tbl: 'Product', key: c.key }).map((r) => r.seq));
      for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i] > seqs[i - 1], `${c.key}: update ${seqs[i]} after ${seqs[i - 1]} (doubled or out of order): ${seqs}`);
      for (const x of seqs) assert.ok(real.has(x), `${c.key}: update names seq ${x}, not a change of ${c.key}`);
    }
    // The victim's clients did reconnect; the others' streams never broke.
    const resumed = clients.filter((c) => c.attempts.length > 1);
    assert.ok(resumed.some((c) => slotOf(c.sid) === victimSlot), 'no client of the killed worker reconnected');
    for (const c of clients) if (slotOf(c.sid) !== victimSlot) assert.equal(c.attempts.length, 1, `client on worker ${slotOf(c.sid)} reconnected`);
    assert.ok(end > start);
  } finally {
    for (const c of clients) c.stop();
  }
  await stop(srv);
});

test('SIGTERM under load: drains within --drain-timeout, no acknowledged write lost; the next server restores the sessions', async () => {
  const srv = await server(['--workers', '4', '--drain-timeout', '3']);
  const B = srv.base;
  const N = 8;
  const sessions = [];
  for (let i = 0; i < N; i++) {
    const sid = await initialize(srv.port);
    const uri = `${B}/Product/D-${i}`;
    await rest(srv.port, 'PUT', `/Product/D-${i}`, { sku: `D-${i}`, name: 'd', price_cents: 0, category: 'd', in_stock: 1 });
    const res = await mcpPost(srv.port, sid, { jsonrpc: '2.0', id: 1, method: 'resources/subscribe', params: { uri } });
    assert.equal(res.status, 200, res.text);
    const stream = await EventStream.open(srv.port, sid);
    await stream.waitPrimed();
    sessions.push({ sid, uri, stream, key: `D-${i}` });
  }
  // A pending wait_and_read: the drain answers it (timedOut).
  const waiter = mcpPost(srv.port, sessions[0].sid, {
    jsonrpc: '2.0', id: 9, method: 'tools/call',
    params: { name: 'wait_and_read', arguments: { resources: [{ uri: `${B}/Product/NOPE`, sinceVersion: '0' }], timeoutMs: 60000 } },
  }, { timeoutMs: 20000 });
  await waitStatus(srv.port, { waiters: 1 });

  // Load: writers inserting rows; each acknowledged id must be in the database afterwards.
  const acked = [];
  let writing = true;
  let next = 70000;
  const writers = Array.from({ length: 6 }, async () => {
    while (writing) {
      const id = next++;
      try {
        await rest(srv.port, 'PUT', `/StockEvent/${id}`, { sku: 'LOAD', delta: 1 });
        acked.push(id);
      } catch {
        /* refused or cut while stopping: not acknowledged */
      }
    }
  });
  await waitFor(() => acked.length >= 50, { timeoutMs: 10000, message: 'load before SIGTERM' });
  const t0 = Date.now();
  srv.child.kill('SIGTERM');
  const exit = await withTimeout(srv.exited, 6000, 'the drained server to exit');
  const took = Date.now() - t0;
  writing = false;
  await Promise.all(writers);
  assert.deepEqual(exit, { code: 0, signal: null }, srv.stderrTail());
  assert.ok(took < 3000 + 1000, `drain took ${took} ms`);
  const w = await waiter;
  assert.equal(w.status, 200, w.text);
  assert.equal(JSON.parse(w.json().result.content[0].text).timedOut, true, w.text);
  for (const s of sessions) {
    await s.stream.waitClosed();
    // The last thing on each stream: the server asks the client to come back in a second.
    assert.equal(s.stream.events.at(-1).retry, '1000', s.stream.describe(4));
  }
  const rows = new Set(sqliteRows(srv.dbPath, 'SELECT id FROM StockEvent WHERE sku = \'LOAD\'').map((r) => r.id));
  const lost = acked.filter((id) => !rows.has(id));
  assert.deepEqual(lost, [], `${lost.length} acknowledged writes missing`);
  const inAudit = new Set(auditAfter(srv.dbPath, 0, { tbl: 'StockEvent' }).map((r) => Number(r.key)));
  assert.deepEqual(acked.filter((id) => !inAudit.has(id)), [], 'acknowledged writes missing from the audit log');

  // The next server on the same database and port: sessions come back with their subscriptions.
  servers.delete(srv);
  await srv.stop({ keepDir: true });
  const again = await startServerOn(srv.port, srv.dbPath, { args: ['--workers', '4'], ownDirs: [srv.dir] });
  servers.add(again);
  for (const s of sessions) {
    const res = await mcpPost(again.port, s.sid, { jsonrpc: '2.0', id: 2, method: 'ping' });
    assert.equal(res.status, 200, res.text);
    s.stream2 = await EventStream.open(again.port, s.sid, { lastEventId: s.stream.lastId });
    await s.stream2.waitPrimed();
  }
  sqlite(again.dbPath, "UPDATE Product SET price_cents = 42 WHERE category = 'd'");
  for (const s of sessions) {
    await s.stream2.waitUntil((x) => x.updates(s.uri).some((e) => e.json.params.uri === s.uri), { what: `${s.key} notified after restart` });
    s.stream2.close();
  }
  await stop(again);
});

test('the Grafana dashboard in deploy/ parses, and every metric it queries is served by /metrics', async () => {
  const file = path.join(SOURCE_ROOT, 'deploy', 'grafana', 'mcpsub.json');
  const dash = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.equal(dash.title, 'mcpsub');
  assert.ok(dash.panels.length >= 10);
  const exprs = dash.panels.flatMap((p) => p.targets.map((t) => t.expr));
  assert.ok(exprs.every((e) => typeof e === 'string' && e.length > 0));
  const used = new Set(exprs.flatMap((e) => e.match(/\bmcpsub_[a-z_]+/g) ?? []));
  const srv = await startServer({ args: ['--workers', '2'] });
  try {
    await fetch(`${srv.url}`, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' }, body: '{}' });
    const text = await (await fetch(`http://127.0.0.1:${srv.port}/metrics`)).text();
    const families = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]));
    for (const name of used) {
      const base = name.replace(/_(bucket|sum|count)$/, '');
      const family = families.has(name) ? name : base;
      assert.ok(families.has(family), `the dashboard queries ${name}, which /metrics does not serve`);
      if (name !== family) assert.equal(families.get(family), 'histogram', `${name}: ${family} is not a histogram`);
      if (/_total$/.test(family)) assert.equal(families.get(family), 'counter', `${family}: _total on a ${families.get(family)}`);
    }
    // Conventions: counters end in _total, nothing else does; no aggregate series beside the workers'.
    for (const [name, type] of families) assert.equal(type === 'counter', /_total$/.test(name), `${name} (${type})`);
    assert.doesNotMatch(text, /worker="all"/);
  } finally {
    await srv.stop();
  }
});

test('--drain-grace-ms: on SIGTERM /readyz says 503 while everything else is still served, then the drain', async () => {
  const srv = await startServer({ args: ['--workers', '2', '--drain-grace-ms', '1500'] });
  try {
    assert.equal((await httpGet(srv.port, '/readyz')).status, 200);
    const t0 = Date.now();
    srv.child.kill('SIGTERM');
    await waitFor(async () => (await httpGet(srv.port, '/readyz')).status === 503, { timeoutMs: 1000, message: '/readyz 503 after SIGTERM' });
    // Still serving: new connections are accepted and answered, writes go through.
    const read = await httpGet(srv.port, '/Product/A-100', { headers: { Accept: 'application/json' } });
    assert.equal(read.status, 200, read.body);
    const write = await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 4242 });
    assert.equal(write.status, 200, write.text);
    assert.ok(Date.now() - t0 < 1400, 'checked within the grace');
    await waitFor(() => srv.exit !== null, { timeoutMs: 15000, message: 'exit after the grace and the drain' });
    assert.ok(Date.now() - t0 >= 1500, `exited ${Date.now() - t0} ms after SIGTERM, before the grace ended`);
    assert.equal(srv.exit.code, 0);
  } finally {
    await srv.kill();
  }
});
