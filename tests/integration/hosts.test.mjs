// Several mcpsubd hosts behind a real load balancer: two instances
// ("hosts"), two workers each, on one shared database, behind HAProxy
// (lib/haproxy.mjs, the choices of deploy/haproxy/mcpsub.cfg), in its two
// balancing modes: round-robin with no affinity, and affinity on the
// Mcp-Session-Id header. Official SDK clients (Client +
// StreamableHTTPClientTransport) go through HAProxy; REST and sqlite3
// writes go to a given host or straight to the database.
//
// Cases: a session created through one host is usable on the other; a
// commit on either host (or by another process) notifies subscribers on
// every host; a stream resumed with Last-Event-ID on the other host misses
// nothing and doubles nothing; 100 clients, a steady write load, and one
// host killed (SIGKILL) in the middle: every client has every change
// exactly once; a host drained with SIGTERM: its clients go on on the
// other one without loss; a row-scoped subscription made on the host
// without the stream keeps its scope on the host with it; a
// notifications/cancelled or an elicitation answer that lands on the host
// without the call reaches the call.
//
// The shared database comes from database() alone: today one SQLite file
// both instances open; the same cases run on another backend by changing
// that function only.

import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import { MCPSUBCTL, freePort, getStatus, makeTempDir, startServer } from './lib/server.mjs';
import { startHaproxy, TEST_TIMINGS } from './lib/haproxy.mjs';
import { McpSession } from './lib/mcp.mjs';
import { MCP_ACCEPT, RawConnection, buildRequest, mcpPost, newId, parseSse, request } from './lib/raw.mjs';
import { EventStream, UPDATED } from './lib/sse.mjs';
import { sessionRow, sqlite, sqliteRows } from './lib/sqlite.mjs';
import { rest } from './lib/subs.mjs';
import { assertExactlyOnce } from './lib/exactly_once.mjs';
import { HEADERS, V, rawListen } from './lib/modern.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

/* ------------------------------------------------------------------------ */
/* The shared database: the one place that names it.                         */

/*
 * { serverOptions: what startServer needs to open it, write(sql): a commit
 * by another process, auditMax(), checkerDb: what assertExactlyOnce reads,
 * remove() }.
 */
function database() {
  const dir = makeTempDir('mcpsub-hosts-db-');
  const file = path.join(dir, 'shared.db');
  return {
    describe: `SQLite ${file}`,
    serverOptions: { db: file },
    checkerDb: file,
    write: (sql) => sqlite(file, sql),
    auditMax: () => sqliteRows(file, 'SELECT coalesce(max(seq), 0) AS m FROM audit_log')[0].m,
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

/* ------------------------------------------------------------------------ */
/* A cluster: N hosts behind HAProxy.                                          */

const clusters = new Set();
const sdkClients = new Set();
after(async () => {
  for (const c of sdkClients) await c.client.close().catch(() => {});
  for (const cl of clusters) await cl.kill();
});

function childrenOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/*
 * Starts `hosts` mcpsubd instances (2 workers each) on one shared database
 * and HAProxy in front of them in `mode`. Every instance has the load
 * balancer's address as --public-url: resource URIs (and so the
 * subscriptions stored on session rows) are the same on every host.
 */
async function startCluster(mode, { hosts: n = 2, args = [] } = {}) {
  const db = database();
  const sockets = makeTempDir('mcpsub-hosts-sock-');
  const lbPort = await freePort();
  const hosts = [];
  const cluster = { db, hosts, lb: null, mode };
  cluster.kill = async () => {
    clusters.delete(cluster);
    if (cluster.lb) await cluster.lb.stop();
    for (const h of hosts) await h.kill();
    fs.rmSync(sockets, { recursive: true, force: true });
    db.remove();
  };
  /* Stops HAProxy and every host still running (clean exit required), removes everything. */
  cluster.stop = async () => {
    clusters.delete(cluster);
    await cluster.lb.stop();
    for (const h of hosts) if (!h.exit) await h.stop();
    fs.rmSync(sockets, { recursive: true, force: true });
    db.remove();
  };
  clusters.add(cluster);
  // One after the other: the first one creates the schema.
  for (let i = 0; i < n; i++) {
    hosts.push(
      await startServer({
        ...db.serverOptions,
        args: [
          '--workers', '2',
          '--control-socket', path.join(sockets, `host${i}.sock`),
          '--public-url', `http://127.0.0.1:${lbPort}`,
          // On SIGTERM, /readyz says 503 until HAProxy's checks took the host out, then the drain.
          '--drain-grace-ms', String(2 * TEST_TIMINGS.checkInterMs * TEST_TIMINGS.checkFall),
          ...args,
        ],
      }),
    );
  }
  cluster.lb = await startHaproxy({ backends: hosts.map((h, i) => ({ name: `host${i}`, port: h.port })), mode, port: lbPort });
  cluster.base = cluster.lb.base;
  return cluster;
}

/* SIGKILL of a host: its master and its workers at once, as a machine that dies. */
async function killHost(h) {
  const pids = [h.child.pid, ...childrenOf(h.child.pid)];
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  await h.exited;
}

/* Requests a host served for /mcp (its debug log), by method. */
function mcpRequests(h) {
  const counts = { POST: 0, GET: 0, DELETE: 0 };
  for (const m of h.stderr().matchAll(/"msg":"request","method":"(\w+)","target":"\/mcp"/g)) counts[m[1]]++;
  return counts;
}

/* ------------------------------------------------------------------------ */
/* SDK clients whose GET streams are recorded event by event.                */

/* Feeds the SSE events of body into c.events ({ id, data, json }). */
async function recordEvents(body, c) {
  const decoder = new TextDecoder();
  let pending = '';
  try {
    for await (const chunk of body) {
      pending += decoder.decode(chunk, { stream: true });
      for (;;) {
        const m = /\r?\n\r?\n/.exec(pending);
        if (!m) break;
        const block = pending.slice(0, m.index);
        pending = pending.slice(m.index + m[0].length);
        const ev = {};
        for (const line of block.split(/\r?\n/)) {
          if (line.startsWith(':')) continue;
          const i = line.indexOf(':');
          const name = i < 0 ? line : line.slice(0, i);
          const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
          if (name === 'id') ev.id = value;
          else if (name === 'data') ev.data = ev.data === undefined ? value : `${ev.data}\n${value}`;
        }
        if (ev.id === undefined && ev.data === undefined) continue;
        if (ev.data) {
          try {
            ev.json = JSON.parse(ev.data);
          } catch {
            /* not JSON */
          }
        }
        c.events.push(ev);
      }
    }
  } catch {
    /* the stream was cut: the SDK reconnects on its own copy */
  }
  c.streamsEnded++;
}

/*
 * An SDK client through url whose GET stream is open (its priming event
 * arrived). Its transport's fetch tees every GET stream so that the test
 * sees the event ids the SDK resumes from; c.updates() are the
 * resources/updated events of all its streams, in arrival order.
 */
async function connectSdk(url, name) {
  const c = { events: [], streams: 0, streamsEnded: 0, errors: [], getStatuses: [] };
  const fetchRecorded = async (u, init) => {
    const res = await fetch(u, init);
    if ((init?.method ?? 'GET') !== 'GET') return res;
    c.getStatuses.push(res.status);
    if (!res.ok || !res.body) return res;
    c.streams++;
    const [mine, theirs] = res.body.tee();
    recordEvents(mine, c);
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  c.transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: fetchRecorded,
    reconnectionOptions: { initialReconnectionDelay: 100, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1.5, maxRetries: 50 },
  });
  c.client = new Client({ name, version: '1.0.0' }, { capabilities: {} });
  c.client.onerror = (err) => c.errors.push(String(err));
  c.updates = () => c.events.filter((e) => e.json?.method === UPDATED && e.id !== undefined);
  sdkClients.add(c);
  await c.client.connect(c.transport);
  await waitFor(() => c.events.some((e) => e.id !== undefined && !e.data), { timeoutMs: 10000, message: `${name}: the GET stream's priming event` });
  c.sessionId = c.transport.sessionId;
  return c;
}

async function closeSdk(c) {
  sdkClients.delete(c);
  await c.client.close().catch(() => {});
}

/* Connects n clients, `parallel` at a time. */
async function connectMany(url, n, parallel = 10) {
  const out = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await connectSdk(url, `client-${i}`);
      }
    }),
  );
  return out;
}

/* The check of lib/exactly_once.mjs on one SDK client; throws when it does not hold (yet). */
function checkClient(cluster, c, { from, upto, what }) {
  assertExactlyOnce({ db: cluster.db.checkerDb, base: cluster.base, streams: [c], subs: c.subs, from, upto, what });
}

/* Waits until every client passes checkClient; fails with the first one that does not. */
async function waitExactlyOnce(cluster, clients, { from, upto, timeoutMs = 20000 }) {
  let lastErr;
  try {
    await waitFor(
      () => {
        for (const [i, c] of clients.entries()) {
          try {
            checkClient(cluster, c, { from, upto, what: `client ${i} (${c.sessionId})` });
          } catch (err) {
            // A duplicate or a misorder never heals: fail at once.
            if (/announced twice|not a change/.test(err.message)) throw Object.assign(err, { fatal: true });
            lastErr = err;
            return false;
          }
        }
        return true;
      },
      { timeoutMs, intervalMs: 200, message: 'every client to hold every change exactly once' },
    );
  } catch (err) {
    if (err.fatal) throw err;
    const c = clients.find((x) => x.errors.length > 0);
    throw new Error(`${lastErr ? lastErr.message : err.message}${c ? `; SDK errors of one client: ${JSON.stringify(c.errors.slice(-3))}` : ''}`);
  }
}

/*
 * A bounded write load: `count` commits, one every `gapMs`, through
 * HAProxy's port (REST PATCH of the products M-*, round-robin over the
 * hosts) and every fifth one by another process (a sqlite3 INSERT into
 * StockEvent). A write that fails (its host died under it) is not
 * acknowledged; the check reads what committed from audit_log.
 * onWrite(n) runs after the n-th write.
 */
async function writeLoad(cluster, { count, gapMs, products, onWrite = () => {} }) {
  const acked = [];
  for (let n = 1; n <= count; n++) {
    try {
      if (n % 5 === 0) cluster.db.write(`INSERT INTO StockEvent (id, sku, delta) VALUES (${100000 + n}, 'M-${n % products}', ${n})`);
      else await rest(cluster.lb.port, 'PATCH', `/Product/M-${n % products}`, { price_cents: 100000 + n });
      acked.push(n);
    } catch {
      /* not acknowledged */
    }
    await onWrite(n);
    await sleep(gapMs);
  }
  return acked;
}

function addProducts(cluster, n) {
  cluster.db.write(`BEGIN; ${Array.from({ length: n }, (_, i) => `INSERT INTO Product (sku, name, category) VALUES ('M-${i}', 'm', 'm');`).join('')} COMMIT;`);
}

/* ------------------------------------------------------------------------ */
/* a. A session created through one host is usable on the other.            */

for (const mode of ['roundrobin', 'sticky']) {
  test(`a (${mode}): an SDK session through HAProxy: initialize, read, subscribe, tools/call, each wherever it lands`, async () => {
    const cl = await startCluster(mode);
    const B = cl.base;
    const c = await connectSdk(cl.lb.url, `a-${mode}`);
    const read = await c.client.readResource({ uri: `${B}/Product/A-100` });
    assert.equal(JSON.parse(read.contents[0].text).sku, 'A-100');
    for (const k of ['A-100', 'B-200', 'C-300', 'D-400']) assert.deepEqual(await c.client.subscribeResource({ uri: `${B}/Product/${k}` }), {});
    const put = await c.client.callTool({ name: 'put_record', arguments: { table: 'StockEvent', key: 700, record: { sku: 'A-100', delta: 1 } } });
    assert.ok(!put.isError, JSON.stringify(put));
    const again = await c.client.readResource({ uri: `${B}/StockEvent/700` });
    assert.equal(JSON.parse(again.contents[0].text).delta, 1);
    const [h0, h1] = cl.hosts.map(mcpRequests);
    if (mode === 'roundrobin') {
      // Requests were spread: both hosts served some of this one session's POSTs.
      assert.ok(h0.POST > 0 && h1.POST > 0, `POSTs per host: ${h0.POST}, ${h1.POST}`);
    } else {
      // Every request of the session went to the host that minted it.
      assert.ok(Math.min(h0.POST, h1.POST) === 0 && h0.POST + h1.POST >= 8, `POSTs per host: ${h0.POST}, ${h1.POST}`);
      const entries = await cl.lb.stickEntries();
      assert.ok(c.sessionId in entries, `stick table ${JSON.stringify(entries)} has ${c.sessionId}`);
    }
    assert.equal((await c.client.listTools()).tools.length > 0, true);
    await c.transport.terminateSession();
    await closeSdk(c);
    await cl.stop();
  });
}

/*
 * The subscribes and the GET stream of one session on different hosts:
 * each host keeps its own live copy of the session; the one holding the
 * stream learns of the others' subscribes and unsubscribes from the audit
 * log (the subscription log), in commit order.
 */
test('a (roundrobin): a subscribe or unsubscribe that lands on the host without the stream still counts', async () => {
  const cl = await startCluster('roundrobin');
  try {
    const B = cl.base;
    const c = await connectSdk(cl.lb.url, 'a-rr-notify');
    const keys = ['A-100', 'B-200', 'C-300', 'D-400'];
    for (const k of keys) await c.client.subscribeResource({ uri: `${B}/Product/${k}` });
    for (const [i, k] of keys.entries()) await rest(cl.hosts[i % 2].port, 'PATCH', `/Product/${k}`, { price_cents: 7 });
    await waitFor(() => keys.every((k) => c.updates().some((e) => e.json.params.uri === `${B}/Product/${k}`)), {
      timeoutMs: 3000,
      message: `every subscribed record notified; got ${JSON.stringify(c.updates().map((e) => e.json.params.uri))}`,
    });
    assert.equal(c.updates().length, keys.length, 'each once');
    for (const k of keys) await c.client.unsubscribeResource({ uri: `${B}/Product/${k}` });
    for (const [i, k] of keys.entries()) await rest(cl.hosts[i % 2].port, 'PATCH', `/Product/${k}`, { price_cents: 8 });
    await rest(cl.hosts[0].port, 'PATCH', '/Product/A-100', { price_cents: 9 });
    await sleep(500);
    assert.equal(c.updates().length, keys.length, `nothing after the unsubscribes: ${JSON.stringify(c.updates().map((e) => e.json.params.uri))}`);
  } finally {
    await cl.kill();
  }
});

/* ------------------------------------------------------------------------ */
/* b. A commit on either host notifies subscribers on every host.           */

test('b (sticky): REST on host 0, REST on host 1 and a sqlite3 write each notify the subscribers held by both hosts', async () => {
  const cl = await startCluster('sticky');
  const B = cl.base;
  const events = `${B}/StockEvent`;
  const clients = [];
  for (let i = 0; i < 4; i++) {
    const c = await connectSdk(cl.lb.url, `b-${i}`);
    await c.client.subscribeResource({ uri: events });
    clients.push(c);
  }
  const per = await Promise.all(cl.hosts.map((h) => getStatus(h.port)));
  assert.ok(per.every((s) => s.sessions >= 1 && s.streams >= 1), `sessions on each host: ${JSON.stringify(per.map((s) => [s.sessions, s.streams]))}`);
  await rest(cl.hosts[0].port, 'PUT', '/StockEvent/9101', { sku: 'A-100', delta: 1 });
  await rest(cl.hosts[1].port, 'PUT', '/StockEvent/9102', { sku: 'A-100', delta: 2 });
  cl.db.write("INSERT INTO StockEvent (id, sku, delta) VALUES (9103, 'A-100', 3)");
  const want = [9101, 9102, 9103].map((id) => `${B}/StockEvent/${id}`);
  for (const [i, c] of clients.entries()) {
    await waitFor(() => want.every((u) => c.updates().some((e) => e.json.params.uri === u)), {
      message: `client ${i}: ${JSON.stringify(want)}, got ${JSON.stringify(c.updates().map((e) => e.json.params.uri))}`,
    });
    assert.deepEqual(c.updates().map((e) => e.json.params.uri), want, `client ${i}: each once, in commit order`);
    assert.ok(c.updates().every((e) => e.json.params.subscribedUri === events));
  }
  for (const c of clients) await closeSdk(c);
  await cl.stop();
});

/* ------------------------------------------------------------------------ */
/* c. A stream that drops resumes with Last-Event-ID on the other host.     */

test('c: a stream cut on host 0 resumes with Last-Event-ID on host 1, and back on host 0: nothing missed, nothing doubled', async () => {
  const cl = await startCluster('sticky');
  const B = cl.base;
  const [h0, h1] = cl.hosts;
  const from = cl.db.auditMax();
  const s = await McpSession.open(h0.port);
  const subs = [`${B}/Product/A-100`, `${B}/Product`, `${B}/StockEvent`];
  for (const uri of subs) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
  let seq = 0;
  const writes = async (n) => {
    for (let i = 0; i < n; i++) {
      seq++;
      if (seq % 3 === 0) cl.db.write(`INSERT INTO StockEvent (id, sku, delta) VALUES (${8000 + seq}, 'A-100', ${seq})`);
      else await rest(cl.hosts[seq % 2].port, 'PATCH', `/Product/${seq % 4 === 1 ? 'A-100' : 'B-200'}`, { price_cents: seq });
    }
  };
  const open = async (h, lastEventId) => {
    const st = await EventStream.open(h.port, s.id, lastEventId ? { lastEventId } : {});
    await st.waitPrimed();
    return st;
  };
  const streams = [];
  const settle = async (st) => {
    const upto = cl.db.auditMax();
    await waitFor(
      () => {
        try {
          assertExactlyOnce({ db: cl.db.checkerDb, base: B, streams, subs, from, upto });
          return true;
        } catch (err) {
          if (/announced twice|not a change/.test(err.message)) throw Object.assign(err, { fatal: true });
          return false;
        }
      },
      { timeoutMs: 5000, message: `every change up to ${upto} on ${st.describe()}` },
    ).catch((err) => {
      if (err.fatal) throw err;
      assertExactlyOnce({ db: cl.db.checkerDb, base: B, streams, subs, from, upto }); // the precise failure
    });
  };
  streams.push(await open(h0));
  await writes(6);
  await settle(streams[0]);
  streams[0].close();
  await writes(6); // while no stream is open
  streams.push(await open(h1, streams[0].lastId));
  await writes(6);
  await settle(streams[1]);
  streams[1].close();
  await writes(6);
  // Back to host 0, which still holds its own copy of the session (with a ring of what it sent).
  streams.push(await open(h0, streams[1].lastId));
  await writes(6);
  await settle(streams[2]);
  assertExactlyOnce({ db: cl.db.checkerDb, base: B, streams, subs, from, upto: cl.db.auditMax() });
  assert.ok(streams[1].updates().length > 0 && streams[2].updates().length > 0);
  streams[2].close();
  await s.delete();
  await cl.stop();
});

/* ------------------------------------------------------------------------ */
/* d. The acceptance case: 100 clients, writes, one host killed.            */

test('d (sticky): 100 SDK clients, a steady write load, one host SIGKILLed in the middle: every client has every change exactly once', async () => {
  const cl = await startCluster('sticky');
  const B = cl.base;
  const PRODUCTS = 20;
  addProducts(cl, PRODUCTS);
  const clients = await connectMany(cl.lb.url, 100);
  for (const [i, c] of clients.entries()) {
    c.subs = [`${B}/Product/M-${i % PRODUCTS}`, ...(i % 4 === 0 ? [`${B}/StockEvent`] : [])];
    for (const uri of c.subs) await c.client.subscribeResource({ uri });
  }
  const per = await Promise.all(cl.hosts.map((h) => getStatus(h.port)));
  assert.ok(per.every((s) => s.streams >= 30), `streams per host: ${per.map((s) => s.streams)}`);
  const from = cl.db.auditMax();
  const victim = cl.hosts[0];
  const acked = await writeLoad(cl, {
    count: 300,
    gapMs: 8,
    products: PRODUCTS,
    onWrite: async (n) => {
      if (n === 120) await killHost(victim);
    },
  });
  await cl.lb.waitServer('host0', 'DOWN');
  assert.ok(acked.length >= 280, `writes acknowledged: ${acked.length} of 300`);
  const upto = cl.db.auditMax();
  await waitExactlyOnce(cl, clients, { from, upto, timeoutMs: 25000 });
  // Every client is on the survivor now, and HAProxy's stick table says so
  // (stick store-request moved each entry to the host that took the session).
  const st = await getStatus(cl.hosts[1].port);
  assert.equal(st.streams, 100, JSON.stringify(st));
  const entries = await cl.lb.stickEntries();
  const stale = clients.filter((c) => entries[c.sessionId] !== 2);
  assert.equal(stale.length, 0, `stick entries not on host1: ${stale.slice(0, 3).map((c) => `${c.sessionId}=${entries[c.sessionId]}`)}`);
  for (const c of clients) await closeSdk(c);
  cl.hosts.splice(0, 1); // already dead
  await cl.stop();
});

/* ------------------------------------------------------------------------ */
/* e. Draining a host.                                                       */

test('e (sticky): SIGTERM drains host 0; its clients go on on host 1 without loss', async () => {
  const cl = await startCluster('sticky');
  const B = cl.base;
  const PRODUCTS = 8;
  addProducts(cl, PRODUCTS);
  const clients = await connectMany(cl.lb.url, 20);
  for (const [i, c] of clients.entries()) {
    c.subs = [`${B}/Product/M-${i % PRODUCTS}`, ...(i % 2 === 0 ? [`${B}/StockEvent`] : [])];
    for (const uri of c.subs) await c.client.subscribeResource({ uri });
  }
  const onHost0 = (await getStatus(cl.hosts[0].port)).streams;
  assert.ok(onHost0 >= 5, `streams on host 0: ${onHost0}`);
  const from = cl.db.auditMax();
  let drained;
  const acked = await writeLoad(cl, {
    count: 150,
    gapMs: 8,
    products: PRODUCTS,
    onWrite: (n) => {
      if (n === 50) drained = cl.hosts[0].stop(); // SIGTERM; exit 0 required
    },
  });
  await drained;
  await cl.lb.waitServer('host0', 'DOWN');
  assert.equal(acked.length, 150, 'no write failed during the drain');
  const upto = cl.db.auditMax();
  await waitExactlyOnce(cl, clients, { from, upto, timeoutMs: 15000 });
  assert.equal((await getStatus(cl.hosts[1].port)).streams, 20);
  // The clients' own requests work too (their sessions are restored on host 1).
  const r = await clients[0].client.readResource({ uri: `${B}/Product/M-0` });
  assert.equal(JSON.parse(r.contents[0].text).sku, 'M-0');
  for (const c of clients) await closeSdk(c);
  await cl.stop();
});

/* ------------------------------------------------------------------------ */
/* The copy a session leaves behind on the host it moved from.              */

test('f: the idle copy of a session on the host it left does not end the session its stream keeps alive on the other host', async () => {
  const cl = await startCluster('sticky', { args: ['--idle-timeout', '2'] });
  try {
    const B = cl.base;
    const [h0, h1] = cl.hosts;
    const s = await McpSession.open(h0.port);
    await s.result('resources/subscribe', { uri: `${B}/Product/A-100` });
    const first = await EventStream.open(h0.port, s.id);
    await first.waitPrimed();
    first.close();
    const moved = await EventStream.open(h1.port, s.id, { lastEventId: first.lastId });
    await moved.waitPrimed();
    await sleep(5000); // more than twice the idle timeout: host 0's copy (no stream) ends
    assert.ok(sessionRow(cl.db.checkerDb, s.id), 'the session row is still there while its stream is open on host 1');
    await rest(h0.port, 'PATCH', '/Product/A-100', { price_cents: 3 });
    await moved.waitUpdates(1);
    moved.close();
  } finally {
    await cl.kill();
  }
});

/* ------------------------------------------------------------------------ */
/* g. A row scope travels with a subscription made on the other host.        */

/*
 * An API key whose role sees only the tools of the Product table
 * subscribes, on the host that does not hold its stream, to the whole
 * collection and to a filtered view of it. The host with the stream
 * applies both from the subscription log, with the key's scope: changes
 * to rows outside it (another program's, through the database) are not
 * notified there either, and a row that leaves the scope is notified once.
 */
test('g: a row-scoped subscription made on the host without the stream keeps its scope on the host with it', async () => {
  const dir = makeTempDir('mcpsub-hosts-auth-');
  const keysFile = path.join(dir, 'keys.json');
  const r = spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, 'key', 'add', 'tools-agent', '--role', 'category-user'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const headers = { Authorization: `Bearer ${r.stdout.trim()}` };
  const policyFile = path.join(dir, 'policy.json');
  fs.writeFileSync(
    policyFile,
    JSON.stringify({
      roles: {
        'category-user': {
          tables: { Product: { rights: ['read', 'subscribe'], scope: { column: 'category', bind: 'claim:category' } } },
        },
      },
      keys: { 'tools-agent': { category: 'tools' } },
    }),
  );
  const cl = await startCluster('sticky', { args: ['--auth-keys', keysFile, '--policy', policyFile] });
  try {
    const B = cl.base;
    const [h0, h1] = cl.hosts;
    const s = await McpSession.open(h0.port, { headers });
    const st = await EventStream.open(h1.port, s.id, { headers });
    await st.waitPrimed();
    const all = `${B}/Product`;
    const inStock = `${B}/Product?in_stock=1`;
    const viaH0 = new McpSession(h0.port, s.id, s.protocolVersion, headers);
    for (const uri of [all, inStock]) assert.deepEqual(await viaH0.result('resources/subscribe', { uri }), {});
    await waitFor(async () => (await getStatus(h1.port)).subscriptions >= 2, { timeoutMs: 5000, message: 'host 1 applied both subscriptions from the log' });
    // Outside the scope (garden, home), inside it (a tool), and a tool that becomes a garden item.
    cl.db.write(`UPDATE "Product" SET price_cents = 11 WHERE sku = 'B-200';
                 UPDATE "Product" SET price_cents = 12 WHERE sku = 'D-400';
                 UPDATE "Product" SET price_cents = 13 WHERE sku = 'A-100';`);
    await st.waitUpdates(2);
    cl.db.write(`UPDATE "Product" SET category = 'garden' WHERE sku = 'A-100'`);
    await st.waitUpdates(4);
    cl.db.write(`UPDATE "Product" SET price_cents = 14 WHERE sku = 'A-100';
                 UPDATE "Product" SET price_cents = 15 WHERE sku = 'B-200'`);
    await sleep(700);
    const got = st.updates().map((e) => `${e.json.params.uri} ${e.json.params._meta?.['io.modelcontextprotocol/subscribedUri'] ?? ''}`);
    assert.equal(st.updates().length, 4, `A-100 twice per subscription, nothing else: ${JSON.stringify(got)}`);
    for (const e of st.updates()) assert.equal(e.json.params.uri, `${B}/Product/A-100`, JSON.stringify(got));
    st.close();
  } finally {
    await cl.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});


/* ------------------------------------------------------------------------ */
/* h. Signals between hosts: a cancel or an answer where the call is not.   */

/* A request POSTed raw to port on session s, its answer read as it streams. */
async function pendingCall(port, s, method, params) {
  const id = newId();
  const conn = await RawConnection.open(port);
  conn.write(
    buildRequest(port, {
      method: 'POST',
      path: '/mcp',
      headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': s.id, 'MCP-Protocol-Version': s.protocolVersion },
      body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
    }),
  );
  const raw = () => conn.all.toString('utf8');
  const body = () => (raw().includes('\r\n\r\n') ? raw().slice(raw().indexOf('\r\n\r\n') + 4) : '');
  const events = () => parseSse(body()).events.filter((e) => e.data !== undefined).map((e) => JSON.parse(e.data));
  const event = async (match, message) => {
    await waitFor(() => events().some(match), { timeoutMs: 5000, message });
    return events().find(match);
  };
  return { id, conn, raw, events, event };
}

test('h (roundrobin): a notifications/cancelled or an elicitation answer that lands on the host without the call reaches it', async () => {
  const cl = await startCluster('roundrobin');
  try {
    const B = cl.base;
    const [h0, h1] = cl.hosts;
    const s = await McpSession.open(h0.port, { capabilities: { elicitation: {} } });
    const onH1 = new McpSession(h1.port, s.id, s.protocolVersion);
    const exists = async (sku) => (await request(h1.port, { method: 'GET', path: `/Product/${sku}` })).status === 200;

    // A wait_and_read on host 0, cancelled through host 1: it ends at once, unanswered.
    const uri = `${B}/Product/A-100`;
    const read = await s.read(uri);
    const wait = await pendingCall(h0.port, s, 'tools/call', {
      name: 'wait_and_read',
      arguments: { resources: [{ uri, sinceVersion: read.contents[0]._meta.version }], timeoutMs: 30000 },
    });
    await waitFor(async () => (await getStatus(h0.port)).waiters === 1, { timeoutMs: 5000, message: 'the wait is pending on host 0' });
    const t0 = Date.now();
    const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: wait.id, reason: 'test' } };
    assert.equal((await mcpPost(h1.port, s.id, cancel)).status, 202);
    const res = await wait.conn.readResponse({ timeoutMs: 5000 });
    assert.equal(res.status, 200);
    assert.match(res.headers['content-type'], /^text\/event-stream/);
    assert.doesNotMatch(res.text, /^data:/m, `the cancelled call is not answered: ${wait.raw()}`);
    assert.ok(Date.now() - t0 < 3000, `ended after ${Date.now() - t0} ms`);
    assert.equal((await getStatus(h0.port)).waiters, 0);
    wait.conn.close();

    // delete_record on host 0 asks the user; the answer goes to host 1. Accept deletes.
    const del = await pendingCall(h0.port, s, 'tools/call', { name: 'delete_record', arguments: { table: 'Product', key: 'A-100' } });
    let q = await del.event((m) => m.method === 'elicitation/create', 'the question');
    assert.equal((await mcpPost(h1.port, s.id, { jsonrpc: '2.0', id: q.id, result: { action: 'accept', content: { confirm: true } } })).status, 202);
    let done = await del.event((m) => m.id === del.id, 'the delete_record result');
    assert.equal(done.result.isError, undefined, JSON.stringify(done));
    assert.equal(await exists('A-100'), false, 'deleted');
    del.conn.close();

    // Decline through host 1 changes nothing; so does an answer from another session.
    const keep = await pendingCall(h0.port, s, 'tools/call', { name: 'delete_record', arguments: { table: 'Product', key: 'B-200' } });
    q = await keep.event((m) => m.method === 'elicitation/create', 'the second question');
    const stranger = await McpSession.open(h1.port, { capabilities: { elicitation: {} } });
    assert.equal((await mcpPost(h1.port, stranger.id, { jsonrpc: '2.0', id: q.id, result: { action: 'accept', content: { confirm: true } } })).status, 202);
    await sleep(500);
    assert.equal(keep.events().some((m) => m.id === keep.id), false, 'another session cannot answer it');
    assert.equal((await mcpPost(h1.port, s.id, { jsonrpc: '2.0', id: q.id, result: { action: 'decline' } })).status, 202);
    done = await keep.event((m) => m.id === keep.id, 'the declined result');
    assert.equal(done.result.isError, true, JSON.stringify(done));
    assert.match(done.result.content[0].text, /cancelled by the user/);
    assert.equal(await exists('B-200'), true, 'nothing changed');
    keep.conn.close();
    await onH1.result('ping');

    // A stateless 2026-07-28 listen stream on host 0, cancelled through host 1.
    const l = await rawListen(h0.port, { resourceSubscriptions: [`${B}/Product/C-300`] }, { id: 'h-listen' });
    assert.equal(l.events()[0].json.method, 'notifications/subscriptions/acknowledged');
    const lc = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'h-listen' } };
    const r = await request(h1.port, { method: 'POST', path: '/mcp', headers: { ...HEADERS, 'MCP-Protocol-Version': V }, body: JSON.stringify(lc) });
    assert.equal(r.status, 202, r.text);
    await l.conn.waitClosed({ timeoutMs: 5000 });
  } finally {
    await cl.kill();
  }
});

/*
 * i. The official SDK client answering an elicitation on another host: its
 * transport's fetch sends every request to host 0, where the tools/call
 * waits, and every JSON-RPC response it POSTs (the elicitation answer) to
 * host 1, as a load balancer without affinity may.
 */
test('i: an official SDK client whose elicitation answer lands on the other host: accept deletes, decline changes nothing', async () => {
  const cl = await startCluster('roundrobin');
  const clients = [];
  try {
    const [h0, h1] = cl.hosts;
    const exists = async (sku) => (await request(h0.port, { method: 'GET', path: `/Product/${sku}` })).status === 200;
    const rerouted = []; // { status } of each answer POSTed to host 1
    const fetchSplit = async (u, init) => {
      let body;
      try {
        body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
      } catch {
        body = undefined;
      }
      const isAnswer = init?.method === 'POST' && body && !Array.isArray(body) && body.method === undefined && ('result' in body || 'error' in body);
      if (!isAnswer) return fetch(u, init);
      const there = new URL(u);
      there.port = String(h1.port);
      // Kept before it is sent: the call's result may come back before the 202.
      const entry = { id: body.id, status: undefined };
      rerouted.push(entry);
      const res = await fetch(there, init);
      entry.status = res.status;
      return res;
    };
    const connect = async (answer) => {
      const client = new Client({ name: 'i-elicit', version: '1.0.0' }, { capabilities: { elicitation: {} } });
      const asked = [];
      client.setRequestHandler(ElicitRequestSchema, async (req) => {
        asked.push(req);
        return answer;
      });
      await client.connect(new StreamableHTTPClientTransport(new URL(h0.url), { fetch: fetchSplit }));
      clients.push(client);
      return { client, asked };
    };

    const before = mcpRequests(h1).POST;
    const yes = await connect({ action: 'accept', content: { confirm: true } });
    const r = await yes.client.callTool({ name: 'delete_record', arguments: { table: 'Product', key: 'A-100' } }, undefined, { timeout: 15000 });
    assert.equal(yes.asked.length, 1);
    assert.match(yes.asked[0].params.message, /Delete record A-100 of table Product/);
    assert.equal(rerouted.length, 1, 'the answer went to host 1');
    assert.match(String(rerouted[0].id), /^mcpsub-confirm-/);
    await waitFor(() => rerouted[0].status === 202, { timeoutMs: 3000, message: 'host 1 to accept the answer (202)' });
    // Its debug log (read from a pipe) shows host 1 served that one POST.
    await waitFor(() => mcpRequests(h1).POST === before + 1, { timeoutMs: 3000, message: 'host 1 to log the answer it served' });
    assert.equal(r.isError, undefined, JSON.stringify(r));
    assert.deepEqual(JSON.parse(r.content[0].text), { deleted: true });
    assert.equal(await exists('A-100'), false, 'deleted');

    const no = await connect({ action: 'decline' });
    const d = await no.client.callTool({ name: 'delete_records', arguments: { table: 'Product', filter: 'category=garden' } }, undefined, { timeout: 15000 });
    assert.equal(no.asked.length, 1);
    assert.match(no.asked[0].params.message, /Delete 1 records? of table Product matching category=garden/);
    assert.equal(rerouted.length, 2, 'the answer went to host 1');
    await waitFor(() => rerouted[1].status === 202, { timeoutMs: 3000, message: 'host 1 to accept the answer (202)' });
    assert.equal(d.isError, true, JSON.stringify(d));
    assert.match(d.content[0].text, /cancelled by the user/);
    assert.equal(await exists('B-200'), true, 'nothing changed');
    // The session goes on on host 0 after the routed answer.
    assert.equal(JSON.parse((await no.client.callTool({ name: 'get_record', arguments: { table: 'Product', key: 'B-200' } })).content[0].text).sku, 'B-200');
  } finally {
    for (const c of clients) await c.close().catch(() => {});
    await cl.kill();
  }
});
