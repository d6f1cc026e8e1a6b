// Limits per principal, black-box: sessions and subscriptions (counted in
// mcp_session, so closing and reopening cannot escape them), open streams,
// and the request rate (a token bucket), for a key and for the anonymous
// loopback user. Over a limit: 429 with Retry-After, and nothing done.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { MCPSUBCTL, makeTempDir, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { initializeMessage, mcpPost, openStream, request } from './lib/raw.mjs';
import { sessionRow } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { sleep } from './lib/wait.mjs';

let srv;
const key = {};
const bearer = (k) => ({ Authorization: `Bearer ${k}` });

before(async () => {
  const dir = makeTempDir('mcpsub-limits-');
  const keysFile = path.join(dir, 'keys.json');
  for (const name of ['a', 'b']) {
    const r = spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, 'key', 'add', name, '--role', 'reader'], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    key[name] = r.stdout.trim();
  }
  srv = await startServer({
    args: ['--auth-keys', keysFile, '--workers', '0', '--limit-sessions', '2', '--limit-subscriptions', '3', '--limit-streams', '1', '--rate-limit', '1000'],
  });
});

after(async () => {
  await srv?.kill();
});

function assert429(res, what) {
  assert.equal(res.status, 429, `${what}: ${res.status} ${res.text}`);
  assert.match(res.headers['retry-after'] ?? '', /^[1-9][0-9]*$/, `${what}: Retry-After`);
}

test('sessions per principal: the third initialize is 429; another principal is not affected; ending one frees a place', async () => {
  const s1 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  const s2 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  const third = await mcpPost(srv.port, null, initializeMessage(), { headers: bearer(key.a) });
  assert429(third, 'third session');
  assert.equal(third.headers['mcp-session-id'], undefined, 'no session was made');
  const other = await McpSession.open(srv.port, { headers: bearer(key.b) });
  await other.delete();
  await s2.delete();
  const again = await McpSession.open(srv.port, { headers: bearer(key.a) });
  await again.delete();
  await s1.delete();
});

test('subscriptions per principal, over all its sessions: the fourth is 429 and not made', async () => {
  const B = srv.base;
  const s1 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  const s2 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  await s1.result('resources/subscribe', { uri: `${B}/Product` });
  await s1.result('resources/subscribe', { uri: `${B}/Product/A-100` });
  await s2.result('resources/subscribe', { uri: `${B}/StockEvent` });
  // Re-subscribing what a session holds is not a new subscription.
  await s1.result('resources/subscribe', { uri: `${B}/Product` });
  const res = await mcpPost(srv.port, s2.id, { jsonrpc: '2.0', id: 5, method: 'resources/subscribe', params: { uri: `${B}/Product/B-200` } }, { headers: bearer(key.a) });
  assert429(res, 'fourth subscription');
  assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, s2.id).subscriptions), [`${B}/StockEvent`]);
  // Closing a session and opening a new one does not reset the count of the other.
  await s2.delete();
  const s3 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  await s3.result('resources/subscribe', { uri: `${B}/Product/B-200` });
  const over = await mcpPost(srv.port, s3.id, { jsonrpc: '2.0', id: 6, method: 'resources/subscribe', params: { uri: `${B}/Product/C-300` } }, { headers: bearer(key.a) });
  assert429(over, 'after reopening');
  await s3.delete();
  await s1.delete();
});

test('open streams per principal: a second stream is 429; superseding the own stream is fine', async () => {
  const s1 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  const s2 = await McpSession.open(srv.port, { headers: bearer(key.a) });
  const st = await EventStream.open(srv.port, s1.id, { headers: bearer(key.a) });
  await st.waitPrimed();
  const { conn, head } = await openStream(srv.port, s2.id, { headers: bearer(key.a) });
  conn.close();
  assert.equal(head.status, 429);
  const again = await EventStream.open(srv.port, s1.id, { headers: bearer(key.a) }); // supersedes
  await again.waitPrimed();
  again.close();
  st.close();
  await s1.delete();
  await s2.delete();
});

test('request rate: a burst over the bucket is 429 with Retry-After (here the anonymous loopback user: every principal has its own bucket)', async () => {
  const limited = await startServer({ args: ['--workers', '0', '--rate-limit', '2', '--rate-burst', '4'] });
  try {
    const codes = [];
    for (let i = 0; i < 6; i++) codes.push((await request(limited.port, { path: '/Product/A-100' })).status);
    assert.deepEqual(codes.slice(0, 4), [200, 200, 200, 200], `${codes}`);
    const res = await request(limited.port, { path: '/Product/A-100' });
    assert429(res, 'anonymous over its rate');
    assert.equal((await request(limited.port, { path: '/healthz' })).status, 200, 'health checks are not limited');
    await sleep(1100); // two tokens later
    assert.equal((await request(limited.port, { path: '/Product/A-100' })).status, 200);
  } finally {
    await limited.stop();
  }
});
