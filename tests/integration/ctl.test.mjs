// mcpsubctl, the operator CLI, against the server's database: listing
// sessions as a table and as JSON, an empty list, and a missing database.
// Then every command against a running server (over its control socket)
// and against the same database once the server stopped (durable state,
// exit 3 where the server is needed), checked against known sessions,
// subscriptions and audit rows written with the sqlite3 CLI.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { controlCall, startServer, makeTempDir, MCPSUBCTL, MCPSUBD } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { initialize, mcpPost, newId, openStream } from './lib/raw.mjs';
import { SUBSCRIPTIONS_OF, q, sessionRow, sqlite, sqliteRows } from './lib/sqlite.mjs';
import { PG_MODE, ctlDbArgs, dbTarget } from './lib/pg.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

let srv;
let empty; // a server that never gets a session
let run; // the server of the running/stopped command tests, with known state (see setupState)
let runDir; // its directory, kept after it stops for the stopped-server tests
let stream; // an open GET stream of state.a

before(async () => {
  [srv, empty, run] = await Promise.all([startServer(), startServer(), startServer()]);
  runDir = run.dir;
  await setupState();
});

after(async () => {
  stream?.conn.close();
  await srv?.kill();
  await empty?.kill();
  await run?.kill();
  if (runDir) fs.rmSync(runDir, { recursive: true, force: true });
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
  const r = ctl(['sessions', ...ctlDbArgs(srv.dbPath)]);
  assert.equal(r.status, 0, describe(r));
  assert.ok(r.stdout.includes(a), `session ${a} not listed\n${describe(r)}`);
  assert.ok(r.stdout.includes(b), `session ${b} not listed\n${describe(r)}`);
  // a human table: one line per session
  const lines = r.stdout.split('\n').filter((l) => l.includes(a) || l.includes(b));
  assert.equal(lines.length, 2, describe(r));
});

test('mcpsubctl sessions --json prints an array of objects with "id"', async () => {
  const r = ctl(['sessions', ...ctlDbArgs(srv.dbPath), '--json']);
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
  const r = ctl(['sessions', ...ctlDbArgs(empty.dbPath)]);
  assert.equal(r.status, 0, describe(r));
  assert.equal((r.stdout.match(HEX_ID) || []).length, 0, describe(r));
  const j = ctl(['sessions', ...ctlDbArgs(empty.dbPath), '--json']);
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

/* ------------------------------------------------------------------------ */
/* Every command, on a running server and then on the same stopped one      */

// Known state of `run`: session a (client ctl-test-a) subscribed to the
// Product collection and record A-100, with its GET stream open; session b
// (client ctl-test-b) subscribed to the collection; session c, evicted in
// the tests; and audit rows written by the sqlite3 CLI.
const state = {};

async function subscribe(port, sessionId, uri) {
  const res = await mcpPost(port, sessionId, { jsonrpc: '2.0', id: newId(), method: 'resources/subscribe', params: { uri } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json().result, {}, res.text);
}

async function setupState() {
  state.products = `${run.base}/Product`;
  state.anvil = `${run.base}/Product/A-100`;
  state.a = await initialize(run.port, { clientInfo: { name: 'ctl-test-a', version: '1.2.3' } });
  state.b = await initialize(run.port, { clientInfo: { name: 'ctl-test-b', version: '0.1' } });
  state.c = await initialize(run.port, { clientInfo: { name: 'ctl-test-c', version: '0.1' } });
  await subscribe(run.port, state.a, state.products);
  await subscribe(run.port, state.a, state.anvil);
  await subscribe(run.port, state.b, state.products);
  stream = await openStream(run.port, state.a);
  assert.equal(stream.head.status, 200);
  sqlite(
    run.dbPath,
    `UPDATE Product SET price_cents = 5001 WHERE sku = 'A-100';
     INSERT INTO StockEvent (id, sku, delta, note) VALUES (100, 'B-200', 7, 'ctl test');
     INSERT INTO Product (sku, name, price_cents) VALUES ('E-500', 'Easel', 2500);`,
  );
}

/* mcpsubctl on run's database (and so on its default control socket). */
const runCtl = (args) => ctl([...ctlDbArgs(run.dbPath), ...args]);

/* --json output of a command that must succeed. */
function runJson(args) {
  const r = runCtl(['--json', ...args]);
  assert.equal(r.status, 0, describe(r));
  return JSON.parse(r.stdout);
}

/* Retries a --json command until check(json) holds (worker reports are periodic). */
async function runJsonUntil(args, check, message) {
  let last;
  try {
    return await waitFor(
      () => {
        last = runCtl(['--json', ...args]);
        if (last.status !== 0) return undefined;
        const json = JSON.parse(last.stdout);
        return check(json) ? json : undefined;
      },
      { timeoutMs: 5000, intervalMs: 100, message },
    );
  } catch (err) {
    err.message += `\nmcpsubctl --json ${args.join(' ')}: ${last ? describe(last) : 'never ran'}`;
    throw err;
  }
}

const lines = (text) => text.split('\n').filter((l) => l.length > 0);
const workerOf = (id) => parseInt(id.slice(0, 2), 16);
const auditRows = (where = 'TRUE') => sqliteRows(run.dbPath, `SELECT seq, tbl, key, op FROM audit_log WHERE ${where} ORDER BY seq`);
const storedSubs = () => {
  const counts = new Map();
  for (const row of sqliteRows(run.dbPath, `SELECT ${SUBSCRIPTIONS_OF('mcp_session.id')} AS subscriptions FROM mcp_session`)) {
    for (const uri of new Set(JSON.parse(row.subscriptions))) counts.set(uri, (counts.get(uri) || 0) + 1);
  }
  // The listing's order: the most sessions first, then by URI.
  return [...counts]
    .map(([uri, sessions]) => ({ uri, sessions }))
    .sort((x, y) => y.sessions - x.sessions || (x.uri < y.uri ? -1 : 1));
};

/* Runs `mcpsubctl audit tail -f` in the background. */
function follow(args) {
  const child = spawn(MCPSUBCTL, [...ctlDbArgs(run.dbPath), 'audit', 'tail', '-f', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const out = { stdout: '', stderr: '' };
  child.stdout.setEncoding('utf8').on('data', (d) => (out.stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d) => (out.stderr += d));
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return { child, out, exited };
}

async function followStops(f, signal) {
  f.child.kill(signal);
  const exit = await Promise.race([f.exited, new Promise((resolve) => setTimeout(() => resolve('timeout'), 5000))]);
  if (exit === 'timeout') f.child.kill('SIGKILL');
  assert.deepEqual(exit, { code: 0, signal: null }, `audit tail -f after ${signal}\n${f.out.stderr}`);
}

/* audit tail, the same on a running and a stopped server. */
async function checkAuditTail() {
  const all = auditRows();
  assert.ok(all.length >= 3, JSON.stringify(all));
  // the last 2 rows, oldest first
  const last2 = runJson(['audit', 'tail', '-n', '2']);
  assert.deepEqual(
    last2.map((r) => [r.seq, r.table, r.key, r.op]),
    all.slice(-2).map((r) => [r.seq, r.tbl, r.key, r.op]),
  );
  // --table keeps one table's rows; row images are parsed JSON
  const stock = runJson(['audit', 'tail', '--table', 'StockEvent']);
  assert.deepEqual(stock.map((r) => r.seq), auditRows("tbl = 'StockEvent'").map((r) => r.seq));
  const ours = stock.find((r) => r.key === '100');
  assert.ok(ours, JSON.stringify(stock));
  assert.equal(ours.op, 'INSERT');
  assert.equal(ours.oldRow, null);
  assert.deepEqual(ours.newRow, { id: 100, sku: 'B-200', delta: 7, note: 'ctl test' });
  // the human table: a header, then one line per row with seq, table, op and key
  const r = runCtl(['audit', 'tail']);
  assert.equal(r.status, 0, describe(r));
  const ls = lines(r.stdout);
  assert.match(ls[0], /^\s*SEQ\s+COMMITTED\s+TABLE\s+OP\s+KEY\s+BY\s+ROW$/, describe(r));
  assert.equal(ls.length, 1 + Math.min(all.length, 20), describe(r));
  const anvil = all.find((x) => x.tbl === 'Product' && x.key === 'A-100');
  assert.ok(
    // (the image is cut at 80 characters; PostgreSQL's jsonb orders its keys by length)
    ls.some((l) => new RegExp(`^\\s*${anvil.seq}\\s+\\S+Z\\s+Product\\s+UPDATE\\s+A-100\\s+(anonymous\\s+|-\\s+)?\\{.*("price_cents":5001|\\.\\.\\.$)`).test(l)),
    describe(r),
  );
  // -n 0 prints only the header; a bad -n is a usage error
  assert.equal(lines(runCtl(['audit', 'tail', '-n', '0']).stdout).length, 1);
  assert.equal(runCtl(['audit', 'tail', '-n', 'many']).status, 2);
}

/* audit tail -f: the last rows, then each new commit, until the signal. */
async function checkAuditFollow(signal, note) {
  const f = follow(['--json', '-n', '1']);
  try {
    const before = auditRows();
    await waitFor(() => lines(f.out.stdout).length >= 1, { message: `first row\n${f.out.stderr}` });
    assert.equal(JSON.parse(lines(f.out.stdout)[0]).seq, before.at(-1).seq);
    sqlite(run.dbPath, `INSERT INTO StockEvent (id, sku, delta, note) VALUES (${signal === 'SIGINT' ? 901 : 902}, 'C-300', 1, ${q(note)})`);
    const added = auditRows().slice(before.length);
    assert.equal(added.length, 1);
    await waitFor(() => lines(f.out.stdout).length >= 2, { message: `the new row\n${f.out.stdout}\n${f.out.stderr}` });
    const row = JSON.parse(lines(f.out.stdout)[1]);
    assert.equal(row.seq, added[0].seq);
    assert.equal(row.table, 'StockEvent');
    assert.equal(row.newRow.note, note);
  } finally {
    await followStops(f, signal);
  }
  assert.equal(lines(f.out.stdout).length, 2, f.out.stdout);
}

// --- running ---------------------------------------------------------------

test('running: status shows the server pid, uptime, workers and live totals', async () => {
  const st = await runJsonUntil(['status'], (j) => j.totals?.sessions === 3 && j.totals?.streams === 1, 'totals of 3 sessions, 1 stream');
  assert.equal(st.ok, true);
  assert.equal(st.pid, run.child.pid);
  assert.ok(st.uptimeMs >= 0, JSON.stringify(st));
  assert.ok(Number.isInteger(st.workers) && st.workers >= 1, JSON.stringify(st));
  assert.equal(typeof st.version, 'string');
  assert.ok(st.totals.subscriptions >= 3, JSON.stringify(st)); // 3 session subscriptions
  for (const k of ['waiters', 'connections', 'queuedBytes', 'requests', 'notifications', 'framesSent', 'framesReplayed', 'framesDropped']) {
    assert.equal(typeof st.totals[k], 'number', `totals.${k}: ${JSON.stringify(st)}`);
  }
  const r = runCtl(['status']);
  assert.equal(r.status, 0, describe(r));
  assert.match(r.stdout, /^mcpsubd: running\n/, describe(r));
  assert.match(r.stdout, new RegExp(`^pid\\s+${run.child.pid}$`, 'm'), describe(r));
  assert.match(r.stdout, /^sessions\s+3$/m, describe(r));
  assert.match(r.stdout, /^uptime\s+\d+(ms|s|m\d\ds)$/m, describe(r));
});

test('running: workers lists every slot with its pid and live counts', async () => {
  const st = runJson(['status']);
  const sum = (j, k) => j.workers?.reduce((n, x) => n + x[k], 0);
  const w = await runJsonUntil(['workers'], (j) => sum(j, 'sessions') === 3 && sum(j, 'streams') === 1, 'workers: 3 sessions, 1 stream');
  assert.equal(w.workers.length, st.workers, JSON.stringify(w));
  for (const x of w.workers) {
    assert.ok(x.alive === true || x.alive === 1, JSON.stringify(x));
    assert.ok(Number.isInteger(x.pid) && x.pid > 0, JSON.stringify(x));
    assert.equal(typeof x.restarts, 'number');
  }
  assert.ok(w.workers.some((x) => x.slot === workerOf(state.a) && x.streams === 1), JSON.stringify(w));
  const r = runCtl(['workers']);
  assert.equal(r.status, 0, describe(r));
  const ls = lines(r.stdout);
  assert.match(ls[0], /^SLOT\s+PID\s+GEN\s+ALIVE\s+UPTIME\s+RESTARTS\s+SESSIONS\s+STREAMS/, describe(r));
  assert.equal(ls.length, 1 + w.workers.length + 1, describe(r));
  assert.equal(ls.at(-1), `(${w.workers.length} worker${w.workers.length === 1 ? '' : 's'})`);
});

test('running: stats gives every worker report and slot facts; the table ends with the totals', async () => {
  const sum = (j, k) => j.workers?.reduce((n, x) => n + x[k], 0);
  const s = await runJsonUntil(['stats'], (j) => sum(j, 'sessions') === 3 && sum(j, 'streams') === 1, 'stats: 3 sessions, 1 stream');
  assert.equal(s.ok, true);
  assert.equal(s.slots.length, s.workers.length, JSON.stringify(s));
  const keys = ['slot', 'generation', 'pid', 'startedMs', 'sessions', 'streams', 'listens', 'subscriptions', 'waiters', 'connections',
    'queuedBytes', 'requests', 'notifications', 'framesSent', 'framesReplayed', 'framesDropped', 'auditPosition', 'auditHead',
    'writesForwarded', 'writesTaken', 'notifyDelay'];
  for (const w of s.workers) assert.deepEqual(Object.keys(w).sort(), [...keys].sort(), JSON.stringify(w));
  for (const slot of s.slots) assert.ok(slot.alive === true || slot.alive === 1, JSON.stringify(slot));
  const r = runCtl(['stats']);
  assert.equal(r.status, 0, describe(r));
  const ls = lines(r.stdout);
  assert.match(ls[0], /^WORKER\s+PID\s+UP\s+SESSIONS\s+STREAMS\s+LISTENS\s+SUBS\s+WAITERS\s+CONNS\s+QUEUED\s+REQUESTS/, describe(r));
  assert.equal(ls.length, 1 + s.workers.length + 1, describe(r));
  assert.match(ls.at(-1), new RegExp(`^\\s*all\\s+-\\s+${s.workers.length}\\s+3\\s+1\\s`), describe(r));
});

test('running: sessions --live lists the sessions the workers hold', async () => {
  const j = await runJsonUntil(['sessions', '--live'], (x) => x.sessions?.length === 3, '3 live sessions');
  const a = j.sessions.find((x) => x.id === state.a);
  const b = j.sessions.find((x) => x.id === state.b);
  assert.ok(a && b, JSON.stringify(j));
  assert.equal(a.worker, workerOf(state.a));
  assert.equal(a.protocolVersion, '2025-11-25');
  assert.deepEqual([...a.subscriptions].sort(), [state.products, state.anvil].sort());
  assert.deepEqual(b.subscriptions, [state.products]);
  assert.ok(a.stream === true || a.stream === 1, JSON.stringify(a));
  assert.ok(!b.stream, JSON.stringify(b));
  const r = runCtl(['sessions', '--live']);
  assert.equal(r.status, 0, describe(r));
  assert.match(lines(r.stdout)[0], /^ID\s+WORKER\s+PROTOCOL\s+PRINCIPAL\s+CREATED\s+LAST SEEN\s+STREAM\s+SUBS\s+RING\s+UNDELIVERED$/, describe(r));
  assert.ok(lines(r.stdout).some((l) => new RegExp(`^${state.a}\\s+${a.worker}\\s+2025-11-25\\s.*\\syes\\s+2\\s`).test(l)), describe(r));
  assert.equal(lines(r.stdout).at(-1), '(3 live sessions)');
});

test('running: sessions (no --live) still lists the durable rows', async () => {
  const list = runJson(['sessions']);
  assert.deepEqual(list.map((x) => x.id).sort(), [state.a, state.b, state.c].sort());
  const a = list.find((x) => x.id === state.a);
  assert.deepEqual(a.clientInfo, { name: 'ctl-test-a', version: '1.2.3' });
  assert.deepEqual([...a.subscriptions].sort(), [state.products, state.anvil].sort());
});

test('running: session show merges the durable record and the live state', async () => {
  const s = runJson(['session', 'show', state.a]);
  assert.equal(s.id, state.a);
  assert.equal(s.live, true);
  assert.equal(s.worker, workerOf(state.a));
  assert.ok(s.stream === true || s.stream === 1, JSON.stringify(s));
  assert.equal(typeof s.ring, 'number');
  assert.equal(typeof s.undelivered, 'number');
  assert.deepEqual(s.clientInfo, { name: 'ctl-test-a', version: '1.2.3' });
  assert.equal(s.protocolVersion, '2025-11-25');
  assert.deepEqual([...s.subscriptions].sort(), [state.products, state.anvil].sort());
  const r = runCtl(['session', 'show', state.a]);
  assert.equal(r.status, 0, describe(r));
  assert.match(r.stdout, new RegExp(`^id\\s+${state.a}$`, 'm'), describe(r));
  assert.match(r.stdout, new RegExp(`^live\\s+yes \\(worker ${s.worker}\\)$`, 'm'), describe(r));
  assert.match(r.stdout, /^client\s+ctl-test-a 1\.2\.3$/m, describe(r));
  assert.match(r.stdout, /^stream\s+open$/m, describe(r));
  assert.match(r.stdout, /^subscriptions\s+2$/m, describe(r));
  assert.ok(r.stdout.includes(`\n  ${state.products}\n`) && r.stdout.includes(`\n  ${state.anvil}\n`), describe(r));
});

test('running: session show of an unknown id -> exit 4', async () => {
  const r = runCtl(['session', 'show', '00' + 'f'.repeat(32)]);
  assert.equal(r.status, 4, describe(r));
  assert.match(r.stderr, /^mcpsubctl: unknown session 00f+\n$/, describe(r));
});

test('running: subs aggregates the live subscriptions; --uri picks one', async () => {
  const j = await runJsonUntil(['subs'], (x) => x.subscriptions?.length === 2, '2 subscribed URIs');
  assert.equal(j.ok, true, 'the answer of the server, not the durable fallback');
  const byUri = Object.fromEntries(j.subscriptions.map((x) => [x.uri, x.sessions]));
  assert.deepEqual(byUri, { [state.products]: 2, [state.anvil]: 1 });
  const one = runJson(['subs', '--uri', state.anvil]);
  assert.deepEqual(one.subscriptions.filter((x) => x.sessions > 0).map((x) => [x.uri, x.sessions]), [[state.anvil, 1]]);
  assert.ok(j.subscriptions.every((x) => Number.isInteger(x.notified)), 'updates sent per URI');
  const r = runCtl(['subs']);
  assert.equal(r.status, 0, describe(r));
  assert.match(lines(r.stdout)[0], /^SESSIONS\s+URI$/);
  assert.ok(lines(r.stdout).some((l) => new RegExp(`^\\s*2\\s+${state.products}$`).test(l)), describe(r));
  assert.equal(lines(r.stdout).at(-1), '(2 URIs)');
  assert.deepEqual(j.subscriptions.map((x) => x.uri), [state.products, state.anvil], 'the most subscribed first');
  assert.equal(j.more, false, JSON.stringify(j));
});

test('running: subs --limit keeps the most subscribed URIs and says there are more', () => {
  // Each worker lists its own most subscribed URIs (the sessions may be on two workers).
  const j = runJson(['subs', '--limit', '1']);
  assert.equal(j.subscriptions.length, 1, JSON.stringify(j));
  assert.ok([state.products, state.anvil].includes(j.subscriptions[0].uri), JSON.stringify(j));
  assert.equal(j.more, true, JSON.stringify(j));
  const r = runCtl(['subs', '--limit', '1']);
  assert.equal(r.status, 0, describe(r));
  assert.deepEqual(lines(r.stdout).slice(-2), ['(1 URI)', '(the 1 most subscribed: there are more; --limit shows up to 10000)']);
  for (const bad of ['0', '10001', 'x', '']) {
    const b = runCtl(['subs', '--limit', bad]);
    assert.equal(b.status, 2, describe(b));
    assert.match(b.stderr, /--limit takes a number of URIs from 1 to 10000/, describe(b));
  }
});

test('running: audit tail reads the audit log', checkAuditTail);

test('running: audit tail -f prints new commits until SIGINT, exit 0', () => checkAuditFollow('SIGINT', 'followed while running'));

test('running: --control names the socket (the database is then not needed)', async () => {
  const sock = path.join(run.dir, 'mcpsubd.sock');
  const r = ctl(['--control', sock, '--db', path.join(run.dir, 'no-such.db'), '--json', 'workers']);
  assert.equal(r.status, 0, describe(r));
  assert.ok(JSON.parse(r.stdout).workers.length >= 1, describe(r));
  const nowhere = path.join(run.dir, 'nowhere.sock');
  const n = ctl(['--control', nowhere, '--db', dbTarget(run.dbPath), 'workers']);
  assert.equal(n.status, 3, describe(n));
  assert.equal(n.stderr, `mcpsubctl: mcpsubd is not running (no control socket at ${nowhere})\n`);
});

test('running: session evict ends a live session; evicting it again -> exit 4', async () => {
  const r = runCtl(['session', 'evict', state.c]);
  assert.equal(r.status, 0, describe(r));
  assert.equal(r.stdout, `evicted ${state.c}\n`);
  await runJsonUntil(['sessions', '--live'], (x) => x.sessions && !x.sessions.some((s) => s.id === state.c), 'c gone');
  const again = runCtl(['session', 'evict', state.c]);
  assert.equal(again.status, 4, describe(again));
  assert.match(again.stderr, /unknown session/);
  const j = runJson(['session', 'evict', state.b]);
  assert.equal(j.ok, true);
  assert.equal(j.evicted, true);
  // b's durable record, if evicting kept it, is no longer live
  const show = runCtl(['--json', 'session', 'show', state.b]);
  if (show.status === 0) assert.equal(JSON.parse(show.stdout).live, false, describe(show));
  else assert.equal(show.status, 4, describe(show));
});

// --- stopped ---------------------------------------------------------------

test('stop the server (SIGTERM -> exit 0), keeping its database', async () => {
  stream.conn.close();
  stream = null;
  await run.stop({ keepDir: true });
});

const notRunning = () => `mcpsubctl: mcpsubd is not running (no control socket at ${path.join(runDir, 'mcpsubd.sock')})\n`;

test('stopped: status says "not running" with the durable counts, exit 3', async () => {
  const counts = sqliteRows(
    run.dbPath,
    `SELECT (SELECT count(*) FROM mcp_session) AS sessions, (SELECT count(*) FROM audit_log) AS rows,
            ${PG_MODE ? '(SELECT coalesce(max(seq), 0) FROM audit_log)' : "max((SELECT max(seq) FROM audit_log), ifnull((SELECT seq FROM sqlite_sequence WHERE name = 'audit_log'), 0))"} AS "maxSeq"`,
  )[0];
  assert.ok(counts.sessions >= 1 && counts.rows >= 4, JSON.stringify(counts));
  const r = runCtl(['status']);
  assert.equal(r.status, 3, describe(r));
  assert.match(r.stdout, /^mcpsubd: not running\n/, describe(r));
  assert.match(r.stdout, new RegExp(`^sessions\\s+${counts.sessions}$`, 'm'), describe(r));
  assert.match(r.stdout, new RegExp(`^audit rows\\s+${counts.rows}$`, 'm'), describe(r));
  assert.match(r.stdout, new RegExp(`^audit max seq\\s+${counts.maxSeq}$`, 'm'), describe(r));
  const j = runCtl(['--json', 'status']);
  assert.equal(j.status, 3, describe(j));
  const st = JSON.parse(j.stdout);
  assert.equal(st.running, false);
  assert.equal(st.sessions, counts.sessions);
  assert.equal(st.auditRows, counts.rows);
  assert.equal(st.auditMaxSeq, counts.maxSeq);
});

test('stopped: sessions lists the durable rows', async () => {
  const rows = sqliteRows(run.dbPath, 'SELECT id FROM mcp_session').map((x) => x.id).sort();
  assert.ok(rows.includes(state.a), JSON.stringify(rows));
  const list = runJson(['sessions']);
  assert.deepEqual(list.map((x) => x.id).sort(), rows);
  const r = runCtl(['sessions']);
  assert.equal(r.status, 0, describe(r));
  assert.match(lines(r.stdout)[0], /^ID\s+CREATED\s+LAST SEEN\s+PROTOCOL\s+PRINCIPAL\s+SUBS\s+CLIENT$/);
  assert.ok(lines(r.stdout).some((l) => new RegExp(`^${state.a}\\s+\\S+Z\\s+\\S+Z\\s+2025-11-25\\s+anonymous\\s+2\\s+ctl-test-a 1\\.2\\.3$`).test(l)), describe(r));
  assert.equal(lines(r.stdout).at(-1), `(${rows.length} session${rows.length === 1 ? '' : 's'})`);
});

for (const args of [['sessions', '--live'], ['workers'], ['stats'], ['session', 'evict', 'x']]) {
  test(`stopped: ${args.join(' ')} -> "not running", exit 3`, async () => {
    const r = runCtl(args);
    assert.equal(r.status, 3, describe(r));
    assert.equal(r.stdout, '', describe(r));
    assert.equal(r.stderr, notRunning(), describe(r));
  });
}

test('stopped: session show prints the durable record, live state unknown', async () => {
  const row = sessionRow(run.dbPath, state.a);
  const s = runJson(['session', 'show', state.a]);
  assert.equal(s.id, state.a);
  assert.equal(s.live, null);
  assert.equal(s.createdAt, row.created_at);
  assert.equal(s.lastSeen, row.last_seen);
  assert.equal(s.protocolVersion, row.protocol_version);
  assert.deepEqual(s.subscriptions, JSON.parse(row.subscriptions));
  assert.deepEqual(s.clientInfo, JSON.parse(row.client_info));
  assert.equal(s.worker, undefined);
  const r = runCtl(['session', 'show', state.a]);
  assert.equal(r.status, 0, describe(r));
  assert.match(r.stdout, /^live\s+unknown \(mcpsubd not running\)$/m, describe(r));
  assert.match(r.stdout, /^log level\s+info$/m, describe(r));
  assert.doesNotMatch(r.stdout, /^stream/m, describe(r));
  assert.ok(r.stdout.includes(`\n  ${state.anvil}\n`), describe(r));
  const u = runCtl(['session', 'show', 'nope']);
  assert.equal(u.status, 4, describe(u));
  assert.equal(u.stderr, 'mcpsubctl: unknown session nope\n');
});

test('stopped: subs aggregates the stored subscriptions', async () => {
  const expected = storedSubs();
  assert.ok(expected.some((x) => x.uri === state.anvil && x.sessions === 1), JSON.stringify(expected));
  assert.deepEqual(runJson(['subs']).subscriptions, expected);
  const products = expected.find((x) => x.uri === state.products);
  assert.deepEqual(runJson(['subs', '--uri', state.products]).subscriptions, [products]);
  assert.deepEqual(runJson(['subs', '--uri', `${state.products}/none`]).subscriptions, [{ uri: `${state.products}/none`, sessions: 0 }]);
  const r = runCtl(['subs']);
  assert.equal(r.status, 0, describe(r));
  assert.ok(lines(r.stdout).some((l) => new RegExp(`^\\s*1\\s+${state.anvil}$`).test(l)), describe(r));
  assert.equal(lines(r.stdout).at(-1), `(${expected.length} URI${expected.length === 1 ? '' : 's'})`);
  const one = runJson(['subs', '--limit', '1']);
  assert.deepEqual(one.subscriptions, expected.slice(0, 1));
  assert.equal(one.more, expected.length > 1, JSON.stringify(one));
});

test('stopped: audit tail reads the audit log', checkAuditTail);

test('stopped: audit tail -f prints new commits until SIGTERM, exit 0', () => checkAuditFollow('SIGTERM', 'followed while stopped'));

test('a worker that does not answer in time: a list says so (unanswered, a warning), session show does not call its session unknown', async () => {
  const server = await startServer({ args: ['--workers', '2'] });
  const ctl = (args) => spawnSync(MCPSUBCTL, [...ctlDbArgs(server.dbPath), ...args], { encoding: 'utf8' });
  try {
    const id = await initialize(server.port, { clientInfo: { name: 'ctl-stopped-worker', version: '1' } });
    const slot = JSON.parse(ctl(['--json', 'session', 'show', id]).stdout).worker;
    const pid = JSON.parse(ctl(['--json', 'workers']).stdout).workers.find((x) => x.slot === slot).pid;
    process.kill(pid, 'SIGSTOP');
    try {
      const r = ctl(['--json', 'sessions', '--live']);
      assert.equal(r.status, 0, describe(r));
      // The stopped one at least (a worker waiting on a lock it holds may be late too).
      assert.ok(JSON.parse(r.stdout).unanswered.includes(slot), r.stdout);
      assert.match(r.stderr, new RegExp(`no answer in time from worker( \\d)* ${slot}( \\d)*: this is incomplete`));
      const s = ctl(['session', 'show', id]);
      assert.equal(s.status, 1, describe(s));
      assert.match(s.stderr, new RegExp(`no answer from worker [0-9, ]*${slot}[0-9, ]* in time`));
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    const after = ctl(['--json', 'sessions', '--live']);
    assert.equal(after.status, 0, describe(after));
    assert.equal(JSON.parse(after.stdout).unanswered, undefined, after.stdout);
    assert.equal(after.stderr, '');
    assert.ok(JSON.parse(after.stdout).sessions.some((x) => x.id === id), after.stdout);
  } finally {
    await server.stop();
  }
});

// Two workers (each lists its own most recent, the master merges) and one process.
for (const workers of ['2', '0']) {
  test(`sessions --live --limit N (--workers ${workers}): the N most recently seen, and a line saying there are more`, async () => {
    const server = await startServer({ args: ['--workers', workers] });
    const sctl = (args) => spawnSync(MCPSUBCTL, [...ctlDbArgs(server.dbPath), ...args], { encoding: 'utf8' });
    try {
      const ids = [];
      for (let i = 0; i < 5; i++) ids.push(await initialize(server.port, { clientInfo: { name: `ctl-limit-${i}`, version: '1' } }));
      // Seen in an order other than created: a listing by creation, or by id, comes out wrong.
      const touched = [ids[3], ids[0], ids[4], ids[1], ids[2]];
      for (const id of touched) {
        await sleep(5); // a later millisecond than the session before
        const res = await mcpPost(server.port, id, { jsonrpc: '2.0', id: newId(), method: 'ping' });
        assert.equal(res.status, 200, res.text);
      }
      const newest = [...touched].reverse();

      const two = sctl(['--json', 'sessions', '--live', '--limit', '2']);
      assert.equal(two.status, 0, describe(two));
      const j = JSON.parse(two.stdout);
      assert.deepEqual(j.sessions.map((x) => x.id), newest.slice(0, 2), two.stdout);
      assert.equal(j.more, true, two.stdout);
      const r = sctl(['sessions', '--live', '--limit', '2']);
      assert.equal(r.status, 0, describe(r));
      assert.deepEqual(lines(r.stdout).slice(1, 3).map((l) => l.split(/\s+/)[0]), newest.slice(0, 2), describe(r));
      assert.deepEqual(lines(r.stdout).slice(-2), ['(2 live sessions)', '(the 2 most recently seen: there are more; --limit shows up to 10000)'], describe(r));

      // By default (1,000) and with a limit they fit in: all of them, the most recent first, nothing more.
      for (const args of [[], ['--limit', '5']]) {
        const all = sctl(['--json', 'sessions', '--live', ...args]);
        assert.equal(all.status, 0, describe(all));
        const a = JSON.parse(all.stdout);
        assert.deepEqual(a.sessions.map((x) => x.id), newest, all.stdout);
        assert.equal(a.more, false, all.stdout);
        const t = sctl(['sessions', '--live', ...args]);
        assert.equal(lines(t.stdout).at(-1), '(5 live sessions)', describe(t));
      }

      for (const bad of ['0', '10001', 'abc', '1.5', '']) {
        const b = sctl(['sessions', '--live', '--limit', bad]);
        assert.equal(b.status, 2, describe(b));
        assert.match(b.stderr, /--limit takes a number of sessions from 1 to 10000/, describe(b));
      }
      // The stored rows: all by default, the first N with --limit (in the same order), and a line saying so.
      const stored = JSON.parse(sctl(['--json', 'sessions']).stdout).map((x) => x.id);
      assert.deepEqual([...stored].sort(), [...ids].sort());
      const firstTwo = sctl(['--json', 'sessions', '--limit', '2']);
      assert.equal(firstTwo.status, 0, describe(firstTwo));
      assert.deepEqual(JSON.parse(firstTwo.stdout).map((x) => x.id), stored.slice(0, 2), firstTwo.stdout);
      const storedTable = sctl(['sessions', '--limit', '2']);
      assert.equal(storedTable.status, 0, describe(storedTable));
      assert.deepEqual(lines(storedTable.stdout).slice(1, 3).map((l) => l.split(/\s+/)[0]), stored.slice(0, 2), describe(storedTable));
      assert.equal(lines(storedTable.stdout).at(-1), '(the 2 most recently seen of the stored sessions: there are more)', describe(storedTable));
      assert.equal(lines(sctl(['sessions', '--limit', '5']).stdout).at(-1), '(5 sessions)');
      for (const bad of ['0', 'abc', '']) assert.equal(sctl(['sessions', '--limit', bad]).status, 2);
      // The server checks the request itself, as it does subs'.
      for (const limit of [0, 10001, 2.5, '2', null]) {
        const answer = await controlCall(server, { cmd: 'sessions', limit });
        assert.equal(answer.ok, false, `${JSON.stringify(limit)}: ${JSON.stringify(answer)}`);
        assert.match(answer.error, /"limit" must be a whole number from 1 to 10000/);
      }
      const one = await controlCall(server, { cmd: 'sessions', limit: 1 });
      assert.equal(one.ok, true, JSON.stringify(one));
      assert.deepEqual(one.sessions.map((x) => x.id), newest.slice(0, 1));
      assert.equal(one.more, true);
    } finally {
      await server.stop();
    }
  });
}

test('sessions --live stops at 4 MiB of sessions: a session past it alone is listed with the URIs that fit', async () => {
  const server = await startServer({ args: ['--workers', '2', '--max-subscriptions', '1100'] });
  const sctl = (args) => spawnSync(MCPSUBCTL, [...ctlDbArgs(server.dbPath), ...args], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const MiB = 1024 * 1024;
  try {
    const small = await initialize(server.port, { clientInfo: { name: 'ctl-small', version: '1' } });
    const big = await initialize(server.port, { clientInfo: { name: 'ctl-big', version: '1' } });
    // 1,100 URIs of about 4 KB: some 4.3 MiB of them, more than an answer holds.
    const pad = 'x'.repeat(3990 - server.base.length);
    for (let k = 0; k < 1100; k++) {
      const uri = `${server.base}/Product?name=${pad}${String(k).padStart(4, '0')}`;
      const res = await mcpPost(server.port, big, { jsonrpc: '2.0', id: newId(), method: 'resources/subscribe', params: { uri } });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.json().result, {}, res.text);
    }
    let r = sctl(['--json', 'sessions', '--live']);
    assert.equal(r.status, 0, describe(r));
    let j = JSON.parse(r.stdout);
    assert.ok(JSON.stringify(j).length <= 4 * MiB, `${JSON.stringify(j).length} bytes`);
    // The most recent first, cut to fit; the other one only when on another worker and within what is left.
    assert.equal(j.sessions[0].id, big);
    assert.ok(j.sessions.length === 1 || j.sessions[1].id === small, JSON.stringify(j.sessions.map((x) => x.id)));
    assert.equal(j.more, true);
    const listed = j.sessions[0].subscriptions.length;
    assert.ok(listed > 900 && listed < 1100, `${listed} URIs listed`);
    assert.equal(listed + j.sessions[0].subscriptionsOmitted, 1100);
    const t = sctl(['sessions', '--live']);
    assert.equal(t.status, 0, describe(t));
    assert.match(lines(t.stdout)[1], new RegExp(`^${big}\\s.*\\s1100\\s+\\d+\\s+\\d+$`), 'SUBS counts the omitted URIs too');
    const n = j.sessions.length;
    assert.deepEqual(lines(t.stdout).slice(-2), [
      `(${n} live session${n === 1 ? '' : 's'})`,
      `(the ${n} most recently seen, all an answer holds (4 MiB): there are more; sessions without --live lists the stored ones)`,
    ]);
    // The one session asked for by id is bounded alike.
    const one = await controlCall(server, { cmd: 'session', id: big });
    assert.ok(JSON.stringify(one).length <= 4 * MiB, `${JSON.stringify(one).length} bytes`);
    assert.equal(one.session.subscriptions.length + one.session.subscriptionsOmitted, 1100);

    // Seen last, the small one comes first; the big one may follow only cut to what is left.
    const res = await mcpPost(server.port, small, { jsonrpc: '2.0', id: newId(), method: 'ping' });
    assert.equal(res.status, 200, res.text);
    r = sctl(['--json', 'sessions', '--live']);
    assert.equal(r.status, 0, describe(r));
    j = JSON.parse(r.stdout);
    assert.ok(JSON.stringify(j).length <= 4 * MiB, `${JSON.stringify(j).length} bytes`);
    assert.equal(j.sessions[0].id, small, r.stdout.slice(0, 2000));
    assert.ok(j.sessions.length === 1 || j.sessions[1].subscriptionsOmitted > 0, 'the big one is cut');
    assert.equal(j.more, true);
  } finally {
    await server.stop();
  }
});

test('usage: bad commands and options -> exit 2; --help documents every command', async () => {
  for (const args of [[], ['bogus'], ['session'], ['session', 'show'], ['session', 'drop', 'x'], ['subs', '--uri'], ['audit'], ['status', 'extra'], ['sessions', '--what']]) {
    const r = runCtl(args);
    assert.equal(r.status, 2, `${args.join(' ')}\n${describe(r)}`);
    assert.match(r.stderr, /mcpsubctl: |usage: /, describe(r));
  }
  const h = ctl(['--help']);
  assert.equal(h.status, 0, describe(h));
  for (const w of ['status', 'workers', 'sessions [--live] [--limit N]', 'session show ID', 'session evict ID', 'subs [--uri U]', 'audit tail [-f] [--table T] [-n N]', 'stats', '--control PATH', 'exit status']) {
    assert.ok(h.stdout.includes(w), `--help lacks "${w}"\n${h.stdout}`);
  }
});

test('a configuration file: mcpsubd --config reads it (the command line overrides it); config check validates it line by line', async () => {
  const dir = makeTempDir();
  try {
    const good = path.join(dir, 'mcpsubd.conf');
    fs.writeFileSync(good, ['# mcpsubd', 'max-subscriptions 2', 'confirm-destructive refuse', 'page-size = "7"', 'strict-subscribe', ''].join('\n'));
    let r = ctl(['config', 'check', good]);
    assert.equal(r.status, 0, describe(r));
    assert.match(r.stdout, /ok \(4 settings\)/);
    // The file's settings apply; a flag on the command line wins over the file's.
    const srv = await startServer({ args: ['--config', good, '--page-size', '3'] });
    try {
      const s = await McpSession.open(srv.port);
      const err = await s.error('resources/subscribe', { uri: `${srv.base}/Product` });
      assert.match(err.message, /open the GET SSE stream/, 'strict-subscribe from the file');
      const page = await s.read(`${srv.base}/Product`);
      assert.equal(JSON.parse(page.contents[0].text).length, 3, '--page-size 3 overrides the file');
      const refused = await s.tool('delete_record', { table: 'Product', key: 'A-100' });
      assert.match(refused.text, /cannot ask/, 'confirm-destructive refuse from the file');
      await s.delete();
    } finally {
      await srv.stop();
    }
    const bad = path.join(dir, 'bad.conf');
    fs.writeFileSync(bad, 'workers 2\npage-size lots\nnonsense 1\n');
    r = ctl(['config', 'check', bad]);
    assert.equal(r.status, 2, describe(r));
    assert.match(r.stderr, /line 3: unknown setting nonsense/, describe(r));
    fs.writeFileSync(bad, 'workers 2\npage-size lots\n');
    r = ctl(['config', 'check', bad]);
    assert.equal(r.status, 2, describe(r));
    assert.match(r.stderr, /line 2: --page-size/, describe(r));
    fs.writeFileSync(bad, 'listen 0.0.0.0:9999\n');
    r = ctl(['config', 'check', bad]);
    assert.equal(r.status, 2, describe(r));
    assert.match(r.stderr, /not a loopback address/, describe(r));
    const started = spawnSync(MCPSUBD, ['--config', bad], { encoding: 'utf8', timeout: 10000 });
    assert.equal(started.status, 2, started.stderr);
    assert.match(started.stderr, /not a loopback address/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
