// OAuth 2.1 access tokens (JWT), black-box: mcpsubd as a resource server
// whose signing keys come from a JWKS URL served on 127.0.0.1 (and, in one
// test, from a file). Tokens signed with RS256, ES256 and EdDSA are
// accepted; every kind of bad token is refused with 401 and the challenge
// that says why; scopes map to roles (built-in and from the policy file,
// with a row scope bound to a claim); sessions belong to the token's
// subject; a new signing key is picked up without a restart on the first
// token that names it; the official SDK client works with a token.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { MCPSUBD, makeTempDir, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { mcpPost, openStream, request } from './lib/raw.mjs';
import { claimsFor, jwksOf, makeKey, serveJwks, sign, signHs256WithPublicKey, unsigned } from './lib/jwt.mjs';
import { sessionRow } from './lib/sqlite.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

const ISSUER = 'https://issuer.example';
let dir;
let jwks;
let srv;
let audience;
const keys = {};

const bearer = (token) => ({ Authorization: `Bearer ${token}` });
/* A token for sub with scope, signed with key (RS256 by default). */
const token = (sub, scope, { key = keys.rs, extra = {}, header = {} } = {}) =>
  sign(key, claimsFor(ISSUER, audience, sub, { scope, ...extra }), header);

before(async () => {
  dir = makeTempDir('mcpsub-jwt-');
  keys.rs = makeKey('RS256', 'rs-1');
  keys.es = makeKey('ES256', 'es-1');
  keys.ed = makeKey('EdDSA', 'ed-1');
  jwks = await serveJwks([keys.rs, keys.es, keys.ed]);
  const policy = path.join(dir, 'policy.json');
  fs.writeFileSync(policy, JSON.stringify({
    roles: {
      'tenant-user': { tables: { Widget: { rights: ['read', 'subscribe'], scope: { column: 'tenant', bind: 'claim:tenant' } } } },
    },
    scopes: { 'widgets:tenant': 'tenant-user' },
  }));
  const schema = path.join(dir, 'schema.sql');
  fs.writeFileSync(schema, `CREATE TABLE Widget (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, v INTEGER NOT NULL DEFAULT 0);
    INSERT INTO Widget VALUES ('a0', 'acme', 1), ('a1', 'acme', 2), ('b0', 'bolt', 1),
      ('n0', '1152921504606846977', 1), ('n1', '1152921504606846976', 1);`);
  srv = await startServer({ schema, args: ['--auth-jwks', jwks.url, '--auth-issuer', ISSUER, '--policy', policy, '--workers', '2'] });
  audience = `${srv.base}/mcp`;
});

after(async () => {
  await srv?.stop();
  await jwks?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a token signed with RS256, ES256 or EdDSA is accepted; its scope decides what it may do', async () => {
  for (const key of [keys.rs, keys.es, keys.ed]) {
    const res = await request(srv.port, { path: '/Widget/a0', headers: bearer(token('reader-1', 'mcpsub:read', { key })) });
    assert.equal(res.status, 200, `${key.alg}: ${res.text}`);
  }
  const put = await request(srv.port, { method: 'PUT', path: '/Widget/c0', headers: { ...bearer(token('reader-1', 'openid mcpsub:read')), 'Content-Type': 'application/json' }, body: JSON.stringify({ tenant: 'c' }) });
  assert.equal(put.status, 403, put.text);
  assert.match(put.headers['www-authenticate'], /^Bearer error="insufficient_scope", scope="mcpsub:write", resource_metadata="/);
  const ok = await request(srv.port, { method: 'PUT', path: '/Widget/c0', headers: { ...bearer(token('writer-1', 'mcpsub:read mcpsub:write')), 'Content-Type': 'application/json' }, body: JSON.stringify({ tenant: 'c' }) });
  assert.equal(ok.status, 201, ok.text);
  // A token that expires past any time a clock holds (exp 1e300) is good, and held as such.
  for (let i = 0; i < 2; i++) {
    const far = await request(srv.port, { path: '/Widget/a0', headers: bearer(token('far-1', 'mcpsub:read', { extra: { exp: 1e300 } })) });
    assert.equal(far.status, 200, far.text);
  }
  // A valid token without any scope mcpsub knows is who it says, and may do nothing.
  const none = await request(srv.port, { path: '/Widget/a0', headers: bearer(token('nobody', 'openid profile')) });
  assert.equal(none.status, 403, none.text);
  assert.match(none.headers['www-authenticate'], /scope="mcpsub:read"/);
  const meta = await request(srv.port, { path: '/.well-known/oauth-protected-resource/mcp' });
  assert.deepEqual(meta.json().authorization_servers, [ISSUER]);
  assert.equal(meta.json().resource, audience);
});

test('bad tokens: each is refused with 401 and a challenge that says why', async () => {
  const now = Math.floor(Date.now() / 1000);
  const good = token('mallory', 'mcpsub:admin');
  const [h, p, s] = good.split('.');
  const tampered = `${h}.${Buffer.from(JSON.stringify({ ...claimsFor(ISSUER, audience, 'admin'), scope: 'mcpsub:admin' })).toString('base64url')}.${s}`;
  const stranger = makeKey('RS256', 'rs-1'); // the same kid, another key: a forged signature
  const cases = [
    ['garbage', 'not-a-token', 'unknown, revoked or malformed token'],
    ['three parts of garbage', 'a.b.c', 'malformed token'],
    ['expired', token('x', 'mcpsub:read', { extra: { exp: now - 3600, iat: now - 7200, nbf: now - 7200 } }), 'token expired'],
    ['no exp', sign(keys.rs, { iss: ISSUER, aud: audience, sub: 'x', scope: 'mcpsub:read' }), 'token expired'],
    ['not yet valid', token('x', 'mcpsub:read', { extra: { nbf: now + 3600 } }), 'token not yet valid'],
    ['wrong iss', sign(keys.rs, claimsFor('https://evil.example', audience, 'x', { scope: 'mcpsub:read' })), 'wrong issuer'],
    ['wrong aud', sign(keys.rs, claimsFor(ISSUER, 'https://other.example/mcp', 'x', { scope: 'mcpsub:read' })), 'token is for another resource'],
    ['aud array without us', sign(keys.rs, claimsFor(ISSUER, ['https://a.example', 'https://b.example'], 'x', { scope: 'mcpsub:read' })), 'token is for another resource'],
    ['alg none', unsigned(claimsFor(ISSUER, audience, 'x', { scope: 'mcpsub:admin' }), 'rs-1'), 'signing algorithm not accepted'],
    ['HS256 with the public key as secret', signHs256WithPublicKey(keys.rs, claimsFor(ISSUER, audience, 'x', { scope: 'mcpsub:admin' })), 'signing algorithm not accepted'],
    ['ES256 header on the RSA key', sign(keys.es, claimsFor(ISSUER, audience, 'x', { scope: 'mcpsub:read' }), { kid: 'rs-1' }), 'signing algorithm not accepted'],
    ['unknown kid', token('x', 'mcpsub:read', { header: { kid: 'nobody-knows' } }), 'signed by an unknown key'],
    ['tampered payload', tampered, 'bad signature'],
    ['signed by another key with a known kid', token('x', 'mcpsub:read', { key: stranger }), 'bad signature'],
    ['no subject', sign(keys.rs, { ...claimsFor(ISSUER, audience, 'x', { scope: 'mcpsub:read' }), sub: undefined }), 'token lacks a subject'],
  ];
  assert.ok(p.length > 0);
  for (const [what, t, why] of cases) {
    const res = await request(srv.port, { path: '/Widget/a0', headers: bearer(t) });
    assert.equal(res.status, 401, `${what}: ${res.status} ${res.text}`);
    assert.equal(res.headers['www-authenticate'],
      `Bearer resource_metadata="${srv.base}/.well-known/oauth-protected-resource/mcp", error="invalid_token", error_description="${why}"`, what);
  }
  const missing = await request(srv.port, { path: '/Widget/a0' });
  assert.equal(missing.status, 401);
  assert.equal(missing.headers['www-authenticate'], `Bearer resource_metadata="${srv.base}/.well-known/oauth-protected-resource/mcp"`);
});

test('a scope mapped by the policy, with a row scope bound to a claim: each tenant sees its own rows', async () => {
  const acme = token('agent-a', 'widgets:tenant', { extra: { tenant: 'acme' } });
  const bolt = token('agent-b', 'widgets:tenant', { extra: { tenant: 'bolt' } });
  const list = async (t) => (await request(srv.port, { path: '/Widget', headers: bearer(t) })).json();
  assert.deepEqual((await list(acme)).map((r) => r.id).sort(), ['a0', 'a1']);
  assert.deepEqual((await list(bolt)).map((r) => r.id), ['b0']);
  assert.equal((await request(srv.port, { path: '/Widget/b0', headers: bearer(acme) })).status, 404);
  // A claim that is an integer beyond 2^53, as a JSON number: its digits, not the nearest double's.
  const claims = JSON.stringify(claimsFor(ISSUER, audience, 'agent-n', { scope: 'widgets:tenant', tenant: 'BIG', exp: 'EXP' }))
    .replace('"BIG"', '1152921504606846977').replace('"EXP"', '99999999999999999'); // exp a number still
  assert.deepEqual((await list(sign(keys.rs, claims))).map((r) => r.id), ['n0']);
  // Without the claim the scope cannot bind: the table does not exist for it.
  const stray = token('agent-c', 'widgets:tenant');
  assert.equal((await request(srv.port, { path: '/Widget', headers: bearer(stray) })).status, 404);
});

test('a session belongs to the token subject: a fresh token of the same subject uses it, another subject gets 404', async () => {
  const s = await McpSession.open(srv.port, { headers: bearer(token('alice', 'mcpsub:read')) });
  assert.equal(sessionRow(srv.dbPath, s.id).principal, 'jwt:alice');
  const refreshed = token('alice', 'mcpsub:read', { key: keys.ed });
  const ping = await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 1, method: 'ping' }, { headers: bearer(refreshed) });
  assert.equal(ping.status, 200, ping.text);
  const thief = bearer(token('bob', 'mcpsub:admin'));
  assert.equal((await mcpPost(srv.port, s.id, { jsonrpc: '2.0', id: 2, method: 'ping' }, { headers: thief })).status, 404);
  const { conn, head } = await openStream(srv.port, s.id, { headers: thief });
  conn.close();
  assert.equal(head.status, 404);
  assert.equal((await s.delete()).status, 204);
});

test('the official SDK client with a token: lists, reads, subscribes and is notified', async () => {
  const t = token('sdk-agent', 'mcpsub:read');
  const transport = new StreamableHTTPClientTransport(new URL(srv.url), { requestInit: { headers: bearer(t) } });
  const client = new Client({ name: 'jwt-sdk', version: '1.0.0' }, { capabilities: {} });
  const got = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => got.push(n.params.uri));
  await client.connect(transport);
  try {
    const list = await client.listResources();
    assert.ok(list.resources.some((r) => r.uri === `${srv.base}/Widget`));
    const read = await client.readResource({ uri: `${srv.base}/Widget/a0` });
    assert.equal(read.contents.length, 1);
    await client.subscribeResource({ uri: `${srv.base}/Widget/a0` });
    await sleep(200); // the SDK opens its GET stream asynchronously
    const res = await request(srv.port, { method: 'PATCH', path: '/Widget/a0', headers: { ...bearer(token('w', 'mcpsub:write')), 'Content-Type': 'application/json' }, body: JSON.stringify({ v: 42 }) });
    assert.equal(res.status, 200, res.text);
    await waitFor(() => got.includes(`${srv.base}/Widget/a0`), { timeoutMs: 5000, message: 'the notification' });
  } finally {
    await client.close();
  }
});

test('key rotation: the first token signed with a new key works without a restart; unknown kids do not flood the issuer', async () => {
  // A server of its own: a refetch for an unknown kid elsewhere in this file must not hold this one back.
  const served = await serveJwks([keys.rs, keys.es]);
  const s = await startServer({ args: ['--auth-jwks', served.url, '--auth-issuer', ISSUER, '--workers', '2'] });
  try {
    const t = (key, header = {}) => sign(key, claimsFor(ISSUER, `${s.base}/mcp`, 'rotated', { scope: 'mcpsub:read' }), header);
    assert.equal((await request(s.port, { path: '/Product', headers: bearer(t(keys.es)) })).status, 200);
    const fresh = makeKey('ES256', 'es-2');
    // The master's check and each worker's start fetched once; a worker may still be starting.
    await waitFor(() => served.fetches >= 3, { message: 'the start-up fetches' });
    served.set([keys.rs, fresh]); // es-1 withdrawn, es-2 added
    const before = served.fetches;
    // Whichever worker meets the new kid fetches once and serves the request that waited for it.
    for (let i = 0; i < 4; i++) {
      const res = await request(s.port, { path: '/Product', headers: bearer(t(fresh)) });
      assert.equal(res.status, 200, res.text);
    }
    assert.ok(served.fetches > before, 'the new kid was fetched');
    // More unknown kids right after: refused, and each worker fetches at most once per 10 s in
    // all (one that has not met the new kid yet may fetch once now).
    for (let i = 0; i < 6; i++) {
      const res = await request(s.port, { path: '/Product', headers: bearer(t(fresh, { kid: `bogus-${i}` })) });
      assert.equal(res.status, 401);
    }
    assert.ok(served.fetches <= before + 2, `fetches ${before} -> ${served.fetches}`);
  } finally {
    await s.stop();
    await served.close();
  }
});

test('a JWKS file: a key added to it works on the next token that names it', async () => {
  const d = makeTempDir('mcpsub-jwks-file-');
  const file = path.join(d, 'jwks.json');
  fs.writeFileSync(file, JSON.stringify(jwksOf([keys.ed])));
  const s = await startServer({ args: ['--auth-jwks', file, '--auth-issuer', ISSUER] });
  try {
    const aud = `${s.base}/mcp`;
    const t = (key) => sign(key, claimsFor(ISSUER, aud, 'f', { scope: 'mcpsub:read' }));
    assert.equal((await request(s.port, { path: '/Product', headers: bearer(t(keys.ed)) })).status, 200);
    assert.equal((await request(s.port, { path: '/Product', headers: bearer(t(keys.rs)) })).status, 401);
    fs.writeFileSync(file, JSON.stringify(jwksOf([keys.ed, keys.rs])));
    assert.equal((await request(s.port, { path: '/Product', headers: bearer(t(keys.rs)) })).status, 200);
    // A key withdrawn from the file stops working within a second (the file is checked every second).
    fs.writeFileSync(file, JSON.stringify(jwksOf([keys.rs])));
    await waitFor(async () => (await request(s.port, { path: '/Product', headers: bearer(t(keys.ed)) })).status === 401,
      { timeoutMs: 3000, message: 'the withdrawn key refused' });
  } finally {
    await s.stop();
    fs.rmSync(d, { recursive: true, force: true });
  }
});

test('start-up refusals: --auth-jwks without --auth-issuer, an unreachable JWKS URL, a key set without a usable key', async () => {
  const run = (...args) => spawnSync(MCPSUBD, ['--listen', '127.0.0.1:0', '--db', path.join(dir, 'x.db'), ...args], { encoding: 'utf8', timeout: 20000 });
  let r = run('--auth-jwks', jwks.url);
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--auth-jwks needs --auth-issuer/);
  r = run('--auth-jwks', 'http://127.0.0.1:1/jwks.json', '--auth-issuer', ISSUER);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--auth-jwks: http:\/\/127\.0\.0\.1:1\/jwks\.json/);
  const weak = path.join(dir, 'weak.json');
  fs.writeFileSync(weak, JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0', kid: 'h' }] }));
  r = run('--auth-jwks', weak, '--auth-issuer', ISSUER);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /no usable signing key/);
});
