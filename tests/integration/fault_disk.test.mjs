// A full filesystem under the database (a small tmpfs, mounted by the test
// when it runs as root): writes are answered 507 with a message saying so
// (REST) and the same in the tool's isError, reads keep working, nothing
// acknowledged is lost, one warning is logged for the episode (not one per
// request), and once space is freed writes succeed again, and subscribers
// hear of exactly the writes that were acknowledged.

import test from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { makeTempDir, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { request } from './lib/raw.mjs';
import { sqliteRows } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { sleep } from './lib/wait.mjs';

const root = typeof process.getuid === 'function' && process.getuid() === 0;

function mountTmpfs(dir, size) {
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { encoding: 'utf8' });
  return r.status === 0 ? null : r.stderr || `mount exited ${r.status}`;
}

/* Fills the filesystem of dir with a file until it is full; returns its path. */
function fill(dir) {
  const p = path.join(dir, 'filler');
  const fd = fs.openSync(p, 'w');
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    for (;;) fs.writeSync(fd, chunk);
  } catch (err) {
    if (err.code !== 'ENOSPC') throw err;
  }
  // The last few bytes too.
  try {
    for (;;) fs.writeSync(fd, Buffer.alloc(512, 1));
  } catch (err) {
    if (err.code !== 'ENOSPC') throw err;
  } finally {
    fs.closeSync(fd);
  }
  return p;
}

const json = { 'Content-Type': 'application/json' };

test('a full disk: 507 with a message, the same in isError, one warning per episode, then writes again', { skip: !root && 'needs root to mount a small tmpfs' }, async (t) => {
  const dir = makeTempDir('mcpsub-disk-');
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(mnt);
  const why = mountTmpfs(mnt, '8m');
  if (why !== null) {
    t.skip(`cannot mount a tmpfs here: ${why}`);
    return;
  }
  let srv;
  try {
    srv = await startServer({ db: path.join(mnt, 'test.db'), args: ['--workers', '0'] });
    const s = await McpSession.open(srv.port);
    await s.result('resources/subscribe', { uri: `${srv.base}/Product` });
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    const ok1 = await request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: json, body: '{"price_cents": 11}' });
    assert.equal(ok1.status, 200, ok1.text);

    const filler = fill(mnt);
    // Big rows, so that the writes need new pages the disk cannot give.
    const big = 'x'.repeat(200000);
    const statuses = [];
    for (let i = 0; i < 4; i++) {
      const r = await request(srv.port, { method: 'PUT', path: `/Product/FULL-${i}`, headers: json, body: JSON.stringify({ sku: `FULL-${i}`, name: big, price_cents: 1, category: 'x', in_stock: 1 }) });
      statuses.push(r.status);
      if (r.status === 507) assert.match(r.json().error, /full/, r.text);
    }
    assert.ok(statuses.every((x) => x === 507), `writes on a full disk: ${statuses}`);
    const tool = await s.result('tools/call', { name: 'put_record', arguments: { table: 'Product', key: 'FULL-T', record: { sku: 'FULL-T', name: big, price_cents: 1, category: 'x', in_stock: 1 } } });
    assert.equal(tool.isError, true);
    assert.match(tool.content[0].text, /insufficient storage: the database or the disk is full/);
    // Reads still work.
    assert.equal((await request(srv.port, { path: '/Product/A-100' })).status, 200);

    fs.rmSync(filler);
    await sleep(50);
    const ok2 = await request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: json, body: '{"price_cents": 12}' });
    assert.equal(ok2.status, 200, ok2.text);
    const put = await request(srv.port, { method: 'PUT', path: '/Product/AFTER', headers: json, body: JSON.stringify({ sku: 'AFTER', name: 'a', price_cents: 1, category: 'x', in_stock: 1 }) });
    assert.equal(put.status, 201, put.text);

    // One warning for the episode, one line when it ended.
    const log = srv.stderrTail(200000);
    assert.equal(log.match(/database or disk is full/g)?.length ?? 0, 1, log.slice(-3000));
    assert.equal(log.match(/writes succeed again/g)?.length ?? 0, 1);
    // Nothing refused was written; what was acknowledged is in the log and was notified once.
    assert.deepEqual(sqliteRows(srv.dbPath, "SELECT count(*) AS n FROM Product WHERE sku LIKE 'FULL-%'")[0].n, 0);
    const acked = sqliteRows(srv.dbPath, "SELECT key FROM audit_log WHERE tbl = 'Product' ORDER BY seq").map((r) => r.key);
    assert.deepEqual(acked.slice(-3), ['A-100', 'A-100', 'AFTER']);
    await st.waitUntil((x) => x.updates().some((e) => e.json.params.uri.endsWith('/AFTER')), { timeoutMs: 5000, what: 'AFTER' });
    const uris = st.updates().map((e) => e.json.params.uri.slice(srv.base.length));
    assert.deepEqual(uris, ['/Product/A-100', '/Product/A-100', '/Product/AFTER'], st.describe());
    st.close();
    await s.delete();
    await srv.stop();
  } finally {
    if (srv && !srv.exit) await srv.kill();
    spawnSync('umount', ['-l', mnt]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
