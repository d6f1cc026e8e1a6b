// mcpsubctl, the operator CLI, against the server's database: listing
// sessions as a table and as JSON, an empty list, and a missing database.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { startServer, makeTempDir, MCPSUBCTL } from './lib/server.mjs';
import { initialize } from './lib/raw.mjs';

let srv;
let empty; // a server that never gets a session

before(async () => {
  [srv, empty] = await Promise.all([startServer(), startServer()]);
});

after(async () => {
  await srv?.kill();
  await empty?.kill();
});

function ctl(args) {
  const r = spawnSync(MCPSUBCTL, args, { encoding: 'utf8', timeout: 20000, stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.error) throw r.error;
  return r;
}

const describe = (r) => `exit ${r.status} signal ${r.signal}\n--- stdout ---\n${r.stdout}\n--- stderr ---\n${r.stderr}`;
const HEX_ID = /\b[0-9a-f]{34}\b/g;

test('mcpsubctl sessions lists both sessions', async () => {
  const a = await initialize(srv.port);
  const b = await initialize(srv.port);
  const r = ctl(['sessions', '--db', srv.dbPath]);
  assert.equal(r.status, 0, describe(r));
  assert.ok(r.stdout.includes(a), `session ${a} not listed\n${describe(r)}`);
  assert.ok(r.stdout.includes(b), `session ${b} not listed\n${describe(r)}`);
  // a human table: one line per session
  const lines = r.stdout.split('\n').filter((l) => l.includes(a) || l.includes(b));
  assert.equal(lines.length, 2, describe(r));
});

test('mcpsubctl sessions --json prints an array of objects with "id"', async () => {
  const r = ctl(['sessions', '--db', srv.dbPath, '--json']);
  assert.equal(r.status, 0, describe(r));
  const list = JSON.parse(r.stdout);
  assert.ok(Array.isArray(list), r.stdout);
  assert.equal(list.length, 2, r.stdout);
  for (const item of list) {
    assert.equal(typeof item.id, 'string', r.stdout);
    assert.match(item.id, /^[0-9a-f]{34}$/);
  }
});

test('mcpsubctl sessions on a database without sessions prints none, exit 0', async () => {
  const r = ctl(['sessions', '--db', empty.dbPath]);
  assert.equal(r.status, 0, describe(r));
  assert.equal((r.stdout.match(HEX_ID) || []).length, 0, describe(r));
  const j = ctl(['sessions', '--db', empty.dbPath, '--json']);
  assert.equal(j.status, 0, describe(j));
  assert.deepEqual(JSON.parse(j.stdout), []);
});

test('mcpsubctl sessions on a missing database -> non-zero exit and a message on stderr', async () => {
  const dir = makeTempDir();
  try {
    const db = path.join(dir, 'missing.db');
    const r = ctl(['sessions', '--db', db]);
    assert.notEqual(r.status, 0, describe(r));
    assert.equal(r.signal, null, describe(r));
    assert.ok(r.stderr.trim().length > 0, `no message on stderr\n${describe(r)}`);
    assert.equal(fs.existsSync(db), false, 'mcpsubctl created the missing database');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await Promise.all([srv.stop(), empty.stop()]);
});
