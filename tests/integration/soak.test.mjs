// A soak: for MCPSUB_SOAK_SECONDS (60 by default; docs/soak.md records a
// 30-minute run of this same test), sessions open, subscribe, stream, drop
// their stream and resume with Last-Event-ID, read, and end, at random,
// under steady writes from REST and from another process (on SQLite or,
// with MCPSUB_TEST_STORE=postgres, on PostgreSQL). The server's memory
// (RSS of the master and the workers) and open fds are sampled: after a
// warm-up they must stay flat, and once every client has gone the fds are
// back where they started and nothing is live.

import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';

import { startServer, getStatus } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { rest, waitStatus } from './lib/subs.mjs';
import { sleep } from './lib/wait.mjs';

const SECONDS = Number(process.env.MCPSUB_SOAK_SECONDS || 60);
const MAX_CLIENTS = 40;

function processes(master) {
  let kids = [];
  try {
    kids = fs.readFileSync(`/proc/${master}/task/${master}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    /* gone */
  }
  return [master, ...kids];
}

function sample(master) {
  let rssKb = 0;
  let fds = 0;
  for (const pid of processes(master)) {
    try {
      rssKb += Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+)/m)[1]);
      fds += fs.readdirSync(`/proc/${pid}/fd`).length;
    } catch {
      /* a worker restarting */
    }
  }
  return { t: Date.now(), rssKb, fds };
}

// A deterministic pseudo-random sequence, so that a failure can be replayed.
let seed = 20261123;
const rand = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
};

test(`soak: ${SECONDS} s of sessions opening, subscribing, resuming and closing under steady writes; memory and fds stay flat`, { timeout: (SECONDS + 120) * 1000 }, async () => {
  const srv = await startServer({ args: ['--workers', '2', '--log-level', 'warn'] });
  try {
    await soak(srv);
  } finally {
    await srv.kill(); // a failed check must not leave the server (and this process) running
  }
});

async function soak(srv) {
  const B = srv.base;
  const uris = [`${B}/Product`, `${B}/StockEvent`, `${B}/Product?category=tools`, `${B}/Product/A-100`, `${B}/Product/B-200`];
  // One client's whole life first, so that the baseline includes what the
  // server opens once, when first used (libuv's spare descriptors, the
  // store's files), and the check below is of what stays per client.
  {
    const s = await McpSession.open(srv.port);
    await s.result('resources/subscribe', { uri: uris[0] });
    const st = await EventStream.open(srv.port, s.id);
    await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    sqlite(srv.dbPath, `INSERT INTO StockEvent (id, sku, delta) VALUES (99999, 'A-100', 1)`);
    await st.waitUpdates(1, uris[0]);
    await s.result('resources/read', { uri: uris[2] });
    st.close();
    await s.delete();
  }
  await sleep(1500);
  const baseline = sample(srv.child.pid);
  const samples = [];
  const clients = new Set();
  const end = Date.now() + SECONDS * 1000;
  let writes = 0;
  let actions = 0;
  let reads = 0;
  let stop = false;

  const writer = (async () => {
    let n = 0;
    while (!stop) {
      n++;
      try {
        if (n % 10 === 0) sqlite(srv.dbPath, `INSERT INTO StockEvent (id, sku, delta) VALUES (${100000 + n}, 'A-100', ${n})`);
        else await rest(srv.port, 'PATCH', `/Product/${['A-100', 'B-200', 'C-300'][n % 3]}`, { price_cents: n });
        writes++;
      } catch (err) {
        assert.fail(`a write failed during the soak: ${err.message}`);
      }
      await sleep(20);
    }
  })();

  const sampler = setInterval(() => samples.push(sample(srv.child.pid)), 1000);
  try {
    while (Date.now() < end) {
      actions++;
      const list = [...clients];
      const pick = list.length ? list[rand(list.length)] : null;
      const r = rand(10);
      if (!pick || (r < 3 && clients.size < MAX_CLIENTS)) {
        const s = await McpSession.open(srv.port);
        const c = { s, st: null };
        for (let k = rand(3) + 1; k > 0; k--) await s.result('resources/subscribe', { uri: uris[rand(uris.length)] });
        c.st = await EventStream.open(srv.port, s.id);
        clients.add(c);
      } else if (r < 6) {
        // The stream drops; the client comes back with Last-Event-ID.
        const last = pick.st.lastId;
        pick.st.close();
        pick.st = await EventStream.open(srv.port, pick.s.id, last ? { lastEventId: last } : {});
      } else if (r < 8) {
        await pick.s.result('resources/subscribe', { uri: uris[rand(uris.length)] });
      } else {
        pick.st.close();
        await pick.s.delete();
        clients.delete(pick);
      }
      if (actions % 4 === 0 && clients.size > 0) {
        // A read of a record, a collection or a filtered collection (on PostgreSQL: a reader's).
        const c = [...clients][actions % clients.size];
        const res = await c.s.result('resources/read', { uri: uris[(actions / 4) % uris.length] });
        assert.equal(res.contents.length, 1);
        reads++;
      }
      await sleep(25);
    }
  } finally {
    clearInterval(sampler);
    stop = true;
    await writer;
  }
  for (const c of clients) {
    c.st.close();
    await c.s.delete();
  }
  await waitStatus(srv.port, { sessions: 0, streams: 0, subscriptions: 0 }, { timeoutMs: 10000 });
  await sleep(1500); // closed connections leave the fd tables
  const final = sample(srv.child.pid);

  assert.ok(writes > SECONDS * 10, `only ${writes} writes`);
  assert.ok(actions > SECONDS * 5, `only ${actions} client actions`);
  assert.ok(reads > SECONDS / 2, `only ${reads} reads`);
  // After the first third (warm-up: caches, rings and buffers reach their size), memory is flat.
  const third = Math.floor(samples.length / 3);
  const avg = (xs) => xs.reduce((a, x) => a + x.rssKb, 0) / xs.length;
  const middle = avg(samples.slice(third, 2 * third));
  const last = avg(samples.slice(2 * third));
  const report = `RSS baseline ${baseline.rssKb} KiB, middle third ${Math.round(middle)}, last third ${Math.round(last)}, final ${final.rssKb}; fds baseline ${baseline.fds}, final ${final.fds}; ${writes} writes, ${actions} actions, ${reads} reads`;
  console.log(`# soak: ${report}`);
  assert.ok(last <= middle * 1.15 + 4096, `memory grew: ${report}`);
  assert.ok(Math.abs(final.fds - baseline.fds) <= 4, `fds not back: ${report}`);
  const st = await getStatus(srv.port);
  assert.equal(st.connections <= 2, true, `connections left: ${JSON.stringify(st)}`);
  await srv.stop();
}
