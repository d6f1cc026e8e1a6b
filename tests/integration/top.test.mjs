// mcpsubctl top in a real terminal: tmux runs it (80x24) against a live
// server while subscribers are notified of a stream of REST writes;
// capture-pane reads the screen. The frame fits 80 columns, names the
// workers, shows notifications and commits per second that move from one
// frame to the next, and lists the subscribed URI that is busy. q (and, in
// a second run, Ctrl-C) ends it with the terminal as it was: the
// alternate screen left, stty settings back. --once prints one frame for
// scripts.

import test from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { ctlDbArgs, dbTarget } from './lib/pg.mjs';
import { MCPSUBCTL, controlCall, startServer } from './lib/server.mjs';
import { rest } from './lib/subs.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

const tmux = (...args) => spawnSync('tmux', ['-L', `mcpsub-top-${process.pid}`, ...args], { encoding: 'utf8' });
const screen = (name) => tmux('capture-pane', '-p', '-t', name).stdout;
const figure = (text, label) => {
  const m = text.match(new RegExp(`${label} ([0-9.]+)(k|M)?`));
  return m ? Number(m[1]) * (m[2] === 'k' ? 1e3 : m[2] === 'M' ? 1e6 : 1) : NaN;
};

async function underLoad(server, fn) {
  const clients = [];
  for (let i = 0; i < 3; i++) {
    const c = new Client({ name: `top-${i}`, version: '1.0.0' }, { capabilities: {} });
    c.setNotificationHandler((await import('@modelcontextprotocol/sdk/types.js')).ResourceUpdatedNotificationSchema, () => {});
    await c.connect(new StreamableHTTPClientTransport(new URL(server.url)));
    await c.subscribeResource({ uri: `${server.base}/Product/A-100` });
    clients.push(c);
  }
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing; i++) {
      await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 1000 + (i % 500) });
      // A changing rate, so that the figures move: fast and slow phases of 0.7 s against top's
      // 1 s frames (alternating per request averaged out to the same rate in every frame).
      await sleep(Math.floor(Date.now() / 700) % 2 ? 20 : 2);
    }
  })();
  try {
    return await fn();
  } finally {
    writing = false;
    await writer;
    for (const c of clients) await c.close();
  }
}

function startTop(server, name) {
  const ctl = `${MCPSUBCTL} --db ${dbTarget(server.dbPath)} --control ${path.join(path.dirname(server.dbPath), 'mcpsubd.sock')}`;
  // The shell records the terminal's settings before and after, and how top ended.
  // The shell itself outlives a Ctrl-C (trap), so that it can report.
  const script = `trap : INT; before=$(stty -g); ${ctl} top; rc=$?; after=$(stty -g); ` +
    `[ "$before" = "$after" ] && echo "RESTORED rc=$rc" || echo "NOT RESTORED rc=$rc"; sleep 60`;
  const r = tmux('new-session', '-d', '-s', name, '-x', '80', '-y', '24', 'sh', '-c', script);
  assert.equal(r.status, 0, r.stderr);
}

test('top in tmux under load: 80 columns, moving figures, the busy URI; q and Ctrl-C restore the terminal', async (t) => {
  if (spawnSync('tmux', ['-V']).status !== 0) return t.skip('tmux is not installed');
  const server = await startServer({ args: ['--workers', '2'] });
  try {
    await underLoad(server, async () => {
      startTop(server, 'a');
      const frames = [];
      await waitFor(() => {
        const s = screen('a');
        if (s.includes('notifications/s') && (frames.length === 0 || frames.at(-1) !== s)) frames.push(s);
        return frames.length >= 3 && frames.some((f) => figure(f, 'notifications/s') > 0);
      }, { timeoutMs: 15000, intervalMs: 300, message: 'three frames of top under load' });
      const last = frames.at(-1);
      for (const line of last.split('\n')) assert.ok(line.length <= 80, `wider than 80: "${line}"`);
      assert.match(last, /^mcpsubd top\s+workers 2/m);
      assert.match(last, /^WORKER\s+PID\s+SESSIONS\s+STREAMS\s+SUBS\s+CONNS\s+QUEUED\s+NOTES\/S$/m);
      assert.match(last, /^0\s+\d+/m);
      assert.match(last, /^1\s+\d+/m);
      assert.match(last, /Product\/A-100/, 'the busy URI is listed');
      const commits = frames.map((f) => figure(f, 'commits/s'));
      assert.ok(commits.some((c) => c > 0), `commits/s: ${commits}`);
      assert.ok(new Set(frames.map((f) => `${figure(f, 'notifications/s')}/${figure(f, 'commits/s')}`)).size > 1, 'the figures move');
      tmux('send-keys', '-t', 'a', 'q');
      await waitFor(() => /RESTORED rc=0/.test(screen('a')), { timeoutMs: 5000, message: 'top to end on q' });
      assert.doesNotMatch(screen('a'), /NOT RESTORED/);
      assert.doesNotMatch(screen('a'), /notifications\/s/, 'the alternate screen is gone');

      startTop(server, 'b');
      await waitFor(() => screen('b').includes('notifications/s'), { timeoutMs: 10000, message: 'top b' });
      tmux('send-keys', '-t', 'b', 'C-c');
      await waitFor(() => /RESTORED rc=0/.test(screen('b')), { timeoutMs: 5000, message: 'top to end on Ctrl-C' });
      assert.doesNotMatch(screen('b'), /NOT RESTORED/);
    });
    const once = spawnSync(MCPSUBCTL, [...ctlDbArgs(server.dbPath), 'top', '--once', '--interval', '200'], { encoding: 'utf8' });
    assert.equal(once.status, 0, once.stderr);
    assert.match(once.stdout, /^mcpsubd top/);
    assert.doesNotMatch(once.stdout, /\x1b/, 'no escape sequences without a terminal');
    assert.doesNotMatch(once.stdout, /q: quit/);
  } finally {
    tmux('kill-server');
    await server.stop();
  }
});

test('top picks the busy URI out of many: the workers choose the busiest, with the rate since the frame before', async () => {
  const server = await startServer({ args: ['--workers', '2', '--max-subscriptions', '200'] });
  const clients = [];
  try {
    for (let i = 0; i < 2; i++) { // two sessions, one per worker as the master routes them
      const c = new Client({ name: `top-many-${i}`, version: '1.0.0' }, { capabilities: {} });
      c.setNotificationHandler((await import('@modelcontextprotocol/sdk/types.js')).ResourceUpdatedNotificationSchema, () => {});
      await c.connect(new StreamableHTTPClientTransport(new URL(server.url)));
      for (let k = 0; k < 120; k++) await c.subscribeResource({ uri: `${server.base}/Product/Q-${i}-${k}` });
      await c.subscribeResource({ uri: `${server.base}/Product/A-100` });
      clients.push(c);
    }
    const all = await controlCall(server, { cmd: 'subs' });
    assert.equal(all.subscriptions.length, 241, 'every URI once, the shared one merged');
    assert.equal(all.subscriptions.find((x) => x.uri.endsWith('/Product/A-100')).sessions, 2);

    await controlCall(server, { cmd: 'subs', busiest: 3 }); // the window starts here
    for (let i = 0; i < 10; i++) await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 2000 + i });
    // An update is formatted once per change on each worker that holds the URI.
    const { sessions } = await controlCall(server, { cmd: 'sessions' });
    const expected = 10 * new Set(sessions.map((x) => x.worker)).size;
    const notified = async () => (await controlCall(server, { cmd: 'subs' })).subscriptions
      .find((x) => x.uri.endsWith('/Product/A-100')).notified;
    await waitFor(async () => (await notified()) >= expected, { message: `${expected} updates formatted` });
    const busy = await controlCall(server, { cmd: 'subs', busiest: 3 });
    assert.equal(busy.ok, true, JSON.stringify(busy));
    assert.ok(busy.subscriptions.length >= 3 && busy.subscriptions.length <= 6, JSON.stringify(busy)); // 3 per worker
    const a = busy.subscriptions.find((x) => x.uri.endsWith('/Product/A-100'));
    assert.deepEqual([a.sessions, a.recent], [2, expected], JSON.stringify(a));
    assert.ok(busy.subscriptions.every((x) => x === a || x.recent === 0), JSON.stringify(busy));
    assert.ok(busy.windowMs > 0, JSON.stringify(busy));
    const again = await controlCall(server, { cmd: 'subs', busiest: 3 }); // counted from the last request
    assert.equal(again.subscriptions.find((x) => x.uri.endsWith('/Product/A-100'))?.recent ?? 0, 0, JSON.stringify(again));
    for (const bad of [0, 101, 2.5, 'x']) {
      const r = await controlCall(server, { cmd: 'subs', busiest: bad });
      assert.equal(r.ok, false, JSON.stringify(r));
      assert.match(r.error, /busiest/);
    }

    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing; i++) {
        await rest(server.port, 'PATCH', '/Product/A-100', { price_cents: 3000 + (i % 100) });
        await sleep(10);
      }
    })();
    const once = await promisify(execFile)(MCPSUBCTL, [...ctlDbArgs(server.dbPath), 'top', '--once', '--interval', '500'], { encoding: 'utf8' });
    writing = false;
    await writer;
    const rows = once.stdout.split('\n').slice(once.stdout.split('\n').findIndex((l) => l.includes('BUSIEST SUBSCRIBED URIS')) + 1)
      .filter((l) => l.trim() !== '');
    assert.equal(rows.length, 5, once.stdout); // TOP_URIS
    assert.match(rows[0], /^\s*[0-9.]+k?\s+2\s+\S*Product\/A-100$/, once.stdout);
    assert.ok(figure(rows[0].trim().replace(/^/, 'r '), 'r') > 0, once.stdout);
    for (const row of rows.slice(1)) assert.match(row, /^\s*0\s+1\s+\S*Product\/Q-/, once.stdout);
  } finally {
    for (const c of clients) await c.close();
    await server.stop();
  }
});

test('top without a server: exit status 3', () => {
  const r = spawnSync(MCPSUBCTL, ['--db', '/nonexistent/mcpsub.db', 'top', '--once'], { encoding: 'utf8' });
  assert.equal(r.status, 3, r.stderr);
});
