// Identity with API keys, black-box: keys made by mcpsubctl, Bearer on
// every request (MCP POST, GET stream, DELETE, REST), the 401 and 403
// challenges, the protected-resource metadata, the built-in roles, sessions
// bound to the principal that created them (a hijacker gets 404 and the
// session is untouched), revocation and rotation without a restart (the
// next request fails, the open stream ends within a second), SIGHUP, the
// official SDK client with a key, and the refusal to serve a non-loopback
// address without authentication.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { MCPSUBCTL, MCPSUBD, freePort, makeTempDir, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { deleteSession, mcpPost, openStream, request } from './lib/raw.mjs';
import { sessionRow } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { product } from './lib/subs.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

let dir;
let keysFile;
let srv;
const keys = {};

/* mcpsubctl --auth-keys FILE key ...; returns { status, stdout, stderr }. */
function keyCmd(...args) {
  return spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, 'key', ...args], { encoding: 'utf8' });
}

function addKey(name, role) {
  const r = keyCmd('add', name, '--role', role);
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.split('\n').filter(Boolean);
  assert.equal(lines.length, 1, `the key alone on stdout: ${JSON.stringify(r.stdout)}`);
  assert.match(lines[0], /^mcpsub_[A-Za-z0-9_-]{43}$/);
  return lines[0];
}

const bearer = (key) => ({ Authorization: `Bearer ${key}` });

before(async () => {
  dir = makeTempDir('mcpsub-auth-');
  keysFile = path.join(dir, 'keys.json');
  keys.reader = addKey('reader1', 'reader');
  keys.writer = addKey('writer1', 'writer');
  keys.admin = addKey('ops', 'admin');
  keys.other = addKey('reader2', 'reader');
  srv = await startServer({ args: ['--auth-keys', keysFile, '--workers', '2'] });
});

after(async () => {
  await srv?.kill();
});

test('mcpsubctl key: the file keeps hashes only; list shows names and roles; errors have exit codes', () => {
  const list = spawnSync(MCPSUBCTL, ['--auth-keys', keysFile, '--json', 'key', 'list'], { encoding: 'utf8' });
  assert.equal(list.status, 0, list.stderr);
  const listed = JSON.parse(list.stdout).keys.map((k) => [k.name, k.role]);
  assert.deepEqual(listed, [['reader1', 'reader'], ['writer1', 'writer'], ['ops', 'admin'], ['reader2', 'reader']]);
  const text = spawnSync('cat', [keysFile], { encoding: 'utf8' }).stdout;
  for (const k of Object.values(keys)) assert.ok(!text.includes(k.slice(7)), 'a key is stored in the file');
  assert.equal(keyCmd('add', 'reader1', '--role', 'reader').status, 1, 'a duplicate name');
  assert.equal(keyCmd('add', 'x').status, 2, 'no --role');
  assert.equal(keyCmd('revoke', 'nobody').status, 4, 'an unknown key');
});

test('no credential: 401 with a challenge naming the resource metadata; health checks stay open', async () => {
  for (const [method, p] of [['POST', '/mcp'], ['GET', '/mcp'], ['DELETE', '/mcp'], ['GET', '/Product'], ['PUT', '/Product/A-100']]) {
    const res = await request(srv.port, { method, path: p, headers: { Accept: 'application/json, text/event-stream', 'Content-Type': 'application/json' }, body: method === 'GET' || method === 'DELETE' ? undefined : '{}' });
    assert.equal(res.status, 401, `${method} ${p}: ${res.status} ${res.text}`);
    assert.equal(res.headers['www-authenticate'], `Bearer resource_metadata="${srv.base}/.well-known/oauth-protected-resource/mcp"`);
  }
  assert.equal((await request(srv.port, { path: '/healthz' })).status, 200);
  assert.equal((await request(srv.port, { path: '/readyz' })).status, 200);
});

test('a bad credential: 401 error="invalid_token" (garbage, an unknown key, the wrong scheme)', async () => {
  const unknown = `mcpsub_${'A'.repeat(43)}`;
  for (const auth of ['Bearer garbage', `Bearer ${unknown}`, `Basic ${Buffer.from('a:b').toString('base64')}`, 'Bearer ']) {
    const res = await request(srv.port, { path: '/Product', headers: { Authorization: auth } });
    assert.equal(res.status, 401, `${auth}: ${res.text}`);
    assert.match(res.headers['www-authenticate'], /^Bearer resource_metadata="[^"]+", error="invalid_token"/);
  }
});

test('protected resource metadata (RFC 9728) at both well-known paths, without credentials', async () => {
  for (const p of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp']) {
    const res = await request(srv.port, { path: p });
    assert.equal(res.status, 200, res.text);
    const doc = res.json();
    assert.equal(doc.resource, `${srv.base}/mcp`);
    assert.deepEqual(doc.scopes_supported, ['mcpsub:read', 'mcpsub:write', 'mcpsub:admin']);
    assert.deepEqual(doc.bearer_methods_supported, ['header']);
    assert.ok(Array.isArray(doc.authorization_servers));
  }
});

test('roles: a reader reads and subscribes but may not write (403 insufficient_scope); a writer writes; metadata needs admin', async () => {
  const r = await request(srv.port, { path: '/Product/A-100', headers: bearer(keys.reader) });
  assert.equal(r.status, 200, r.text);
  const put = await request(srv.port, { method: 'PUT', path: '/Product/Z-1', headers: { ...bearer(keys.reader), 'Content-Type': 'application/json' }, body: JSON.stringify(product('Z-1')) });
  assert.equal(put.status, 403, put.text);
  assert.match(put.headers['www-authenticate'], /^Bearer error="insufficient_scope", scope="mcpsub:write", resource_metadata="/);
  assert.equal((await request(srv.port, { path: '/Product/Z-1', headers: bearer(keys.reader) })).status, 404, 'nothing written');

  const s = await McpSession.open(srv.port, { headers: bearer(keys.reader) });
  await s.result('resources/read', { uri: `${srv.base}/Product/A-100` });
  assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Product` }), {});
  const call = { jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'put_record', arguments: { table: 'Product', key: 'Z-1', record: product('Z-1') } } };
  const denied = await mcpPost(srv.port, s.id, call, { headers: bearer(keys.reader) });
  assert.equal(denied.status, 403, denied.text);
  assert.match(denied.headers['www-authenticate'], /scope="mcpsub:write"/);
  const meta = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 10, method: 'resources/read', params: { uri: 'mcpsub://about' } }, { headers: bearer(keys.reader) });
  assert.equal(meta.status, 403, meta.text);
  assert.match(meta.headers['www-authenticate'], /scope="mcpsub:admin"/);
  await s.delete();

  const w = await McpSession.open(srv.port, { headers: bearer(keys.writer) });
  const ok = await w.result('tools/call', call.params);
  assert.ok(!ok.isError, JSON.stringify(ok));
  const del = await request(srv.port, { method: 'DELETE', path: '/Product/Z-1', headers: bearer(keys.writer) });
  assert.equal(del.status, 204, del.text);
  await w.delete();
  const a = await McpSession.open(srv.port, { headers: bearer(keys.admin) });
  await a.result('resources/read', { uri: 'mcpsub://about' });
  await a.delete();
});

test('a session belongs to its principal: another one gets 404 on POST, GET, GET with Last-Event-ID and DELETE; the owner is untouched', async () => {
  const owner = await McpSession.open(srv.port, { headers: bearer(keys.reader) });
  assert.equal(sessionRow(srv.dbPath, owner.id).principal, 'key:reader1');
  await owner.result('resources/subscribe', { uri: `${srv.base}/Product/A-100` });
  const thief = bearer(keys.other);
  const post = await mcpPost(srv.port, owner.id, { jsonrpc: '2.0', id: 1, method: 'ping' }, { headers: thief });
  assert.equal(post.status, 404, post.text);
  for (const extra of [{}, { 'Last-Event-ID': '1-s1' }]) {
    const { conn, head } = await openStream(srv.port, owner.id, { headers: { ...thief, ...extra } });
    conn.close();
    assert.equal(head.status, 404);
  }
  const del = await deleteSession(srv.port, owner.id, { headers: thief });
  assert.equal(del.status, 404, del.text);
  // Without credentials at all: 401, not a hint that the session exists.
  const anon = await mcpPost(srv.port, owner.id, { jsonrpc: '2.0', id: 2, method: 'ping' });
  assert.equal(anon.status, 401);
  // The owner's session, subscription and row are as they were.
  assert.deepEqual(await owner.result('ping', {}), {});
  assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, owner.id).subscriptions), [`${srv.base}/Product/A-100`]);
  const st = await EventStream.open(srv.port, owner.id, { headers: bearer(keys.reader) });
  await st.waitPrimed();
  st.close();
  assert.equal((await owner.delete()).status, 204);
});

test('the official SDK client with a key: lists, reads, subscribes and is notified of a write made with another key', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(srv.url), { requestInit: { headers: bearer(keys.reader) } });
  const client = new Client({ name: 'auth-sdk', version: '1.0.0' }, { capabilities: {} });
  const got = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => got.push(n.params.uri));
  await client.connect(transport);
  try {
    const list = await client.listResources();
    assert.ok(list.resources.some((r) => r.uri === `${srv.base}/Product`));
    const read = await client.readResource({ uri: `${srv.base}/Product/B-200` });
    assert.equal(read.contents.length, 1);
    await client.subscribeResource({ uri: `${srv.base}/Product/B-200` });
    await sleep(200); // the SDK opens its GET stream asynchronously
    const res = await request(srv.port, { method: 'PATCH', path: '/Product/B-200', headers: { ...bearer(keys.writer), 'Content-Type': 'application/json' }, body: JSON.stringify({ price_cents: 777 }) });
    assert.equal(res.status, 200, res.text);
    await waitFor(() => got.includes(`${srv.base}/Product/B-200`), { timeoutMs: 5000, message: 'the notification' });
  } finally {
    await client.close();
  }
});

test('revoke: the next request fails and the open stream ends within a second; rotate: the old key fails, the new one works', async () => {
  const temp = addKey('temp', 'reader');
  const s = await McpSession.open(srv.port, { headers: bearer(temp) });
  const st = await EventStream.open(srv.port, s.id, { headers: bearer(temp) });
  await st.waitPrimed();
  const r = keyCmd('revoke', 'temp');
  assert.equal(r.status, 0, r.stderr);
  const t0 = Date.now();
  const res = await request(srv.port, { path: '/Product/A-100', headers: bearer(temp) });
  assert.equal(res.status, 401, 'a revoked key fails on its next request');
  await st.waitClosed({ timeoutMs: 3000 });
  assert.ok(Date.now() - t0 < 2000, `the stream ended ${Date.now() - t0} ms after the revocation`);

  const rot = keyCmd('rotate', 'reader2');
  assert.equal(rot.status, 0, rot.stderr);
  const fresh = rot.stdout.trim();
  assert.notEqual(fresh, keys.other);
  assert.equal((await request(srv.port, { path: '/Product', headers: bearer(keys.other) })).status, 401);
  assert.equal((await request(srv.port, { path: '/Product', headers: bearer(fresh) })).status, 200);
  keys.other = fresh;
});

test('SIGHUP reloads the key file and stops nothing: streams stay open', async () => {
  const s = await McpSession.open(srv.port, { headers: bearer(keys.reader) });
  const st = await EventStream.open(srv.port, s.id, { headers: bearer(keys.reader) });
  await st.waitPrimed();
  const late = addKey('late', 'writer');
  srv.child.kill('SIGHUP');
  await sleep(300);
  assert.equal((await request(srv.port, { path: '/Product', headers: bearer(late) })).status, 200);
  assert.ok(!st.closed, 'the stream survived SIGHUP');
  assert.ok(!srv.exit, 'the server survived SIGHUP');
  st.close();
  await s.delete();
});

test('secure by default: a non-loopback --listen without authentication refuses to start, saying what to add', async () => {
  const d = makeTempDir('mcpsub-auth-listen-');
  const r = spawnSync(MCPSUBD, ['--listen', `0.0.0.0:${await freePort()}`, '--db', path.join(d, 'x.db')], { encoding: 'utf8', timeout: 10000 });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /not a loopback address/);
  assert.match(r.stderr, /--auth-keys/);
  assert.match(r.stderr, /--allow-anonymous/);
});

test('--allow-anonymous serves a non-loopback address and warns at start', async () => {
  const port = await freePort();
  const anon = await startServer({ port, args: ['--listen', `0.0.0.0:${port}`, '--allow-anonymous', '--workers', '0'] });
  try {
    assert.equal((await request(port, { path: '/Product/A-100' })).status, 200);
    assert.match(anon.stderrTail(), /without authentication/);
  } finally {
    await anon.stop();
  }
});
