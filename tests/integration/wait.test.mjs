// The wait_and_read tool, the wait-many fallback for clients without SSE:
// immediate answers for resources whose version moved (all of them
// without sinceVersion), a wait that a commit ends, the timeout and its
// --max-wait cap, several changes during one wait answered as one row with
// the newest version, includeState, -32602 for bad arguments, and the
// /status waiters count back at 0 when a wait ends or its client leaves.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, getStatus, httpGet } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { RawConnection, buildRequest, MCP_ACCEPT, request } from './lib/raw.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { sleep, waitFor } from './lib/wait.mjs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { EventStream } from './lib/sse.mjs';
import { product, rest, waitStatus } from './lib/subs.mjs';

const MAX_WAIT_S = 3;
let srv;
let s; // one session for most calls

before(async () => {
  srv = await startServer({ args: ['--max-wait', String(MAX_WAIT_S)] });
  s = await McpSession.open(srv.port);
});

after(async () => {
  await srv?.kill();
});

const uriOf = (p) => `${srv.base}${p}`;

/* The current version of a resource, as resources/read reports it. */
async function version(uri) {
  const r = await s.read(uri);
  const v = r.contents?.[0]?._meta?.version ?? r._meta?.version;
  assert.equal(typeof v, 'string', `no _meta.version in ${JSON.stringify(r)}`);
  return v;
}

/* wait_and_read that must succeed; returns { data, ms }. */
async function waitAndRead(args, session = s) {
  const t0 = Date.now();
  const data = await session.toolOk('wait_and_read', args);
  return { data, ms: Date.now() - t0 };
}

function checkShape(data) {
  assert.deepEqual(Object.keys(data).sort(), ['resources', 'timedOut']);
  assert.ok(Array.isArray(data.resources));
  assert.equal(typeof data.timedOut, 'boolean');
  for (const r of data.resources) {
    assert.equal(typeof r.uri, 'string');
    assert.equal(typeof r.version, 'string', JSON.stringify(r));
  }
}

test('returns at once: every resource without sinceVersion, only the moved ones with it', async () => {
  const a = uriOf('/Product/A-100');
  const b = uriOf('/Product/B-200');
  const coll = uriOf('/Product');
  const tools = uriOf('/Product?category=tools');
  await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 5 });
  const va = await version(a);
  const vb = await version(b);
  const vc = await version(coll);
  const vt = await version(tools);

  let { data, ms } = await waitAndRead({ resources: [{ uri: a }, { uri: b }, { uri: coll }, { uri: tools }], timeoutMs: 10000 });
  checkShape(data);
  assert.equal(data.timedOut, false);
  assert.deepEqual(data.resources, [
    { uri: a, version: va },
    { uri: b, version: vb },
    { uri: coll, version: vc },
    { uri: tools, version: vt },
  ]);
  assert.ok(ms < 1000, `took ${ms} ms`);

  // Only the stale ones: A-100 and the collection with an older version.
  ({ data, ms } = await waitAndRead({
    resources: [
      { uri: a, sinceVersion: 'stale' },
      { uri: b, sinceVersion: vb },
      { uri: coll, sinceVersion: 'anything else' },
      { uri: tools, sinceVersion: vt },
    ],
    timeoutMs: 10000,
  }));
  assert.equal(data.timedOut, false);
  assert.deepEqual(data.resources, [
    { uri: a, version: va },
    { uri: coll, version: vc },
  ]);
  assert.ok(ms < 1000, `took ${ms} ms`);

  // Nothing moved and timeoutMs 0: at once, empty, timed out.
  ({ data, ms } = await waitAndRead({ resources: [{ uri: a, sinceVersion: va }], timeoutMs: 0 }));
  assert.deepEqual(data, { resources: [], timedOut: true });
  assert.ok(ms < 1000, `took ${ms} ms`);
  assert.equal((await getStatus(srv.port)).waiters, 0);
});

test('a record that does not exist has version "0"; its creation wakes a wait on it', async () => {
  const uri = uriOf('/Product/N-1');
  let { data } = await waitAndRead({ resources: [{ uri }], timeoutMs: 0 });
  assert.deepEqual(data.resources, [{ uri, version: '0' }]);
  const pending = waitAndRead({ resources: [{ uri, sinceVersion: '0' }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  const res = await rest(srv.port, 'PUT', '/Product/N-1', product('N-1'));
  ({ data } = await pending);
  assert.deepEqual(data, { resources: [{ uri, version: JSON.parse(res.headers.etag) }], timedOut: false });
  await rest(srv.port, 'DELETE', '/Product/N-1');
});

test('waits for a change: a commit during the wait ends it with the new version; waiters 1 then 0', async () => {
  const uri = uriOf('/Product/C-300');
  const other = uriOf('/Product/D-400');
  const v0 = await version(uri);
  const vo = await version(other);
  const t0 = Date.now();
  const pending = waitAndRead({ resources: [{ uri, sinceVersion: v0 }, { uri: other, sinceVersion: vo }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  await sleep(300);
  assert.equal((await getStatus(srv.port)).waiters, 1, 'still waiting');
  await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 77 }); // not one of them
  await sleep(100);
  assert.equal((await getStatus(srv.port)).waiters, 1, 'a change elsewhere does not end the wait');
  await rest(srv.port, 'PATCH', '/Product/C-300', { price_cents: 78 });
  const { data } = await pending;
  const elapsed = Date.now() - t0;
  assert.deepEqual(data, { resources: [{ uri, version: await version(uri) }], timedOut: false });
  assert.notEqual(data.resources[0].version, v0);
  assert.ok(elapsed >= 350 && elapsed < 3000, `answered after ${elapsed} ms`);
  await waitStatus(srv.port, { waiters: 0, subscriptions: 0 });
});

test('an external commit (sqlite3 CLI) wakes a wait too', async () => {
  const uri = uriOf('/Product/D-400');
  const v0 = await version(uri);
  const pending = waitAndRead({ resources: [{ uri, sinceVersion: v0 }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  sqlite(srv.dbPath, "UPDATE Product SET price_cents = 451 WHERE sku = 'D-400'");
  const { data, ms } = await pending;
  assert.equal(data.timedOut, false);
  assert.deepEqual(data.resources, [{ uri, version: await version(uri) }]);
  assert.ok(ms < MAX_WAIT_S * 1000 - 500, `answered after ${ms} ms`);
});

test('timeout: nothing changes -> empty resources and timedOut after about timeoutMs', async () => {
  const uri = uriOf('/Product/A-100');
  const v = await version(uri);
  const { data, ms } = await waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 600 });
  assert.deepEqual(data, { resources: [], timedOut: true });
  assert.ok(ms >= 550 && ms < 2500, `timed out after ${ms} ms`);
  assert.equal((await getStatus(srv.port)).waiters, 0);
});

test('timeoutMs is capped by --max-wait', async () => {
  const uri = uriOf('/Product/A-100');
  const v = await version(uri);
  const { data, ms } = await waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 600000 });
  assert.deepEqual(data, { resources: [], timedOut: true });
  assert.ok(ms >= MAX_WAIT_S * 1000 - 100 && ms < MAX_WAIT_S * 1000 + 2000, `answered after ${ms} ms (cap ${MAX_WAIT_S} s)`);
});

test('three changes in one transaction during a wait: one row per resource, with the newest version', async () => {
  const a = uriOf('/Product/A-100');
  const coll = uriOf('/Product');
  const untouched = uriOf('/StockEvent');
  const va = await version(a);
  const vc = await version(coll);
  const vu = await version(untouched);
  const pending = waitAndRead({
    resources: [
      { uri: a, sinceVersion: va },
      { uri: coll, sinceVersion: vc },
      { uri: untouched, sinceVersion: vu },
    ],
    timeoutMs: 10000,
  });
  await waitStatus(srv.port, { waiters: 1 });
  sqlite(
    srv.dbPath,
    `BEGIN;
     UPDATE Product SET price_cents = 1 WHERE sku = 'A-100';
     UPDATE Product SET price_cents = 2 WHERE sku = 'A-100';
     UPDATE Product SET price_cents = 3 WHERE sku = 'A-100';
     COMMIT;`,
  );
  const { data } = await pending;
  const newest = sqlite(srv.dbPath, "SELECT max(seq) FROM audit_log WHERE tbl = 'Product' AND key = 'A-100'").trim();
  assert.deepEqual(data, {
    resources: [
      { uri: a, version: newest },
      { uri: coll, version: newest },
    ],
    timedOut: false,
  });
  assert.equal(await version(a), newest);
});

test('includeState: a record, a collection and a filtered collection come with their content', async () => {
  const a = uriOf('/Product/A-100');
  const tools = uriOf('/Product?category=tools');
  const gone = uriOf('/Product/NOPE');
  const { data } = await waitAndRead({ resources: [{ uri: a }, { uri: tools }, { uri: gone }], includeState: true, timeoutMs: 0 });
  assert.equal(data.timedOut, false);
  const [ra, rt, rg] = data.resources;
  assert.deepEqual(ra.state, (await s.readJson(a)).value);
  assert.equal(ra.state.sku, 'A-100');
  assert.ok(Array.isArray(rt.state), JSON.stringify(rt));
  assert.deepEqual(rt.state.map((r) => r.sku).sort(), ['A-100', 'C-300']);
  assert.ok(rt.state.every((r) => r.category === 'tools'));
  assert.deepEqual(rg, { uri: gone, version: '0', state: null });
  // Without includeState: no state key at all.
  const plain = await waitAndRead({ resources: [{ uri: a }], timeoutMs: 0 });
  assert.deepEqual(Object.keys(plain.data.resources[0]).sort(), ['uri', 'version']);
  // And on a wait that a change ends: the state after the change.
  const v = await version(a);
  const pending = waitAndRead({ resources: [{ uri: a, sinceVersion: v }], includeState: true, timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  await rest(srv.port, 'PATCH', '/Product/A-100', { name: 'Anvil II' });
  const woke = (await pending).data;
  assert.equal(woke.resources.length, 1);
  assert.equal(woke.resources[0].state.name, 'Anvil II');
  await rest(srv.port, 'PATCH', '/Product/A-100', { name: 'Anvil' });
});

test('a filtered wait: a change outside the filter does not end it, a row leaving the filter does', async () => {
  const tools = uriOf('/Product?category=tools');
  const v = await version(tools);
  const pending = waitAndRead({ resources: [{ uri: tools, sinceVersion: v }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 5 }); // garden
  await sleep(200);
  assert.equal((await getStatus(srv.port)).waiters, 1, 'woken by a row outside the filter');
  await rest(srv.port, 'PATCH', '/Product/C-300', { category: 'home' }); // leaves
  const { data } = await pending;
  assert.equal(data.timedOut, false);
  assert.deepEqual(data.resources.map((r) => r.uri), [tools]);
  await rest(srv.port, 'PATCH', '/Product/C-300', { category: 'tools' });
});

test('several waiters on one resource are all woken; a session stream sees no notification from them', async () => {
  const uri = uriOf('/Product/B-200');
  const other = await McpSession.open(srv.port);
  const stream = await EventStream.open(srv.port, s.id);
  try {
    await stream.waitPrimed();
    const v = await version(uri);
    const p1 = waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 10000 });
    const p2 = waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 10000 });
    const p3 = waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 10000 }, other);
    await waitStatus(srv.port, { waiters: 3 });
    await rest(srv.port, 'PATCH', '/Product/B-200', { price_cents: 6 });
    const now = await version(uri);
    for (const { data } of await Promise.all([p1, p2, p3])) assert.deepEqual(data, { resources: [{ uri, version: now }], timedOut: false });
    await waitStatus(srv.port, { waiters: 0, subscriptions: 0 });
    await sleep(200);
    assert.deepEqual(stream.updates(), [], stream.describe());
  } finally {
    stream.close();
    await other.delete();
  }
});

test('bad arguments -> JSON-RPC -32602 (not a tool error), and no waiter left', async () => {
  const a = uriOf('/Product/A-100');
  const bad = [
    {},
    { resources: 'x' },
    { resources: [] },
    { resources: {} },
    { resources: Array.from({ length: 101 }, () => ({ uri: a })) },
    { resources: [{}] },
    { resources: [{ uri: 5 }] },
    { resources: ['x'] },
    { resources: [{ uri: a, sinceVersion: 5 }] },
    { resources: [{ uri: 'mcpsub://about' }] },
    { resources: [{ uri: uriOf('/Nope') }] },
    { resources: [{ uri: a }, { uri: uriOf('/Product?nope=1') }] },
    { resources: [{ uri: a }], timeoutMs: -1 },
    { resources: [{ uri: a }], timeoutMs: 1.5 },
    { resources: [{ uri: a }], timeoutMs: '100' },
    { resources: [{ uri: a }], includeState: 'yes' },
  ];
  for (const args of bad) {
    const body = await s.call('tools/call', { name: 'wait_and_read', arguments: args });
    assert.ok(body.error, `${JSON.stringify(args).slice(0, 200)} should fail: ${JSON.stringify(body).slice(0, 300)}`);
    assert.equal(body.error.code, -32602, JSON.stringify(args).slice(0, 200));
  }
  // 100 resources is the limit, not an error.
  const ok = await waitAndRead({ resources: Array.from({ length: 100 }, () => ({ uri: a })), timeoutMs: 0 });
  assert.equal(ok.data.resources.length, 100);
  const st = await getStatus(srv.port);
  assert.equal(st.waiters, 0);
  assert.equal(st.subscriptions, 0);
});

/*
 * The wait belongs to its HTTP request: when the client goes away (a reset,
 * or an ordinary close, which the server sees as EOF on a connection whose
 * request is pending), the waiter must go at once, not linger until its
 * timeout (--max-wait is 3 s here; the bound is 1.5 s).
 */
test('a client that disconnects while waiting leaves no waiter and no subscription behind', async () => {
  const uri = uriOf('/Product/A-100');
  const v = await version(uri);
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 77,
    method: 'tools/call',
    params: { name: 'wait_and_read', arguments: { resources: [{ uri, sinceVersion: v }], timeoutMs: 20000 } },
  });
  for (const how of ['reset', 'close']) {
    const conn = await RawConnection.open(srv.port);
    conn.write(
      buildRequest(srv.port, {
        method: 'POST',
        path: '/mcp',
        headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': s.id, 'MCP-Protocol-Version': s.protocolVersion },
        body,
      }),
    );
    await waitStatus(srv.port, { waiters: 1, subscriptions: 1 });
    if (how === 'reset') conn.socket.resetAndDestroy();
    else conn.close();
    const t0 = Date.now();
    await waitStatus(srv.port, { waiters: 0, subscriptions: 0 }, { timeoutMs: 5000 });
    const ms = Date.now() - t0;
    assert.ok(ms < 1500, `after a ${how} of the client's connection the waiter stayed ${ms} ms (its timeout is ${MAX_WAIT_S} s)`);
  }
  // The resource still wakes later waits normally.
  const pending = waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  await rest(srv.port, 'PATCH', '/Product/A-100', { price_cents: 4999 });
  assert.equal((await pending).data.timedOut, false);
});

test('notifications/cancelled ends a waiting wait_and_read at once: no answer (an event stream ending empty), no waiter left; another session or id cannot cancel it', async () => {
  const uri = uriOf('/Product/A-100');
  const v = await version(uri);
  // 2^53: 9007199254740990, another id, has the same first 15 digits.
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 9007199254740992,
    method: 'tools/call',
    params: { name: 'wait_and_read', arguments: { resources: [{ uri, sinceVersion: v }], timeoutMs: 20000 } },
  });
  const headers = { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': s.id, 'MCP-Protocol-Version': s.protocolVersion };
  const conn = await RawConnection.open(srv.port);
  conn.write(buildRequest(srv.port, { method: 'POST', path: '/mcp', headers, body }));
  await waitStatus(srv.port, { waiters: 1, subscriptions: 1 });
  const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 9007199254740992, reason: 'test' } };
  // Another session naming the same request id cancels nothing.
  const other = await McpSession.open(srv.port);
  assert.equal((await mcpPostRaw(other, cancel)).status, 202);
  // Nor does another id that prints alike in 15 digits.
  const near = { ...cancel, params: { requestId: 9007199254740990 } };
  assert.equal((await mcpPostRaw(s, near)).status, 202);
  await sleep(200);
  assert.equal((await getStatus(srv.port)).waiters, 1, 'another session, or another id, cannot cancel it');
  await other.delete();
  const t0 = Date.now();
  assert.equal((await mcpPostRaw(s, cancel)).status, 202);
  const res = await conn.readResponse({ timeoutMs: 2000 });
  // Answered as a POST that carried a request must be (JSON or an event stream), with nothing.
  assert.equal(res.status, 200);
  assert.match(res.headers['content-type'], /^text\/event-stream/);
  assert.doesNotMatch(res.text, /^data:/m, 'the cancelled call is not answered');
  assert.ok(Date.now() - t0 < 1000);
  await waitStatus(srv.port, { waiters: 0, subscriptions: 0 });
  conn.close();
});

/* POSTs one message on a session with the raw client; returns the response. */
function mcpPostRaw(session, msg) {
  return request(srv.port, {
    method: 'POST',
    path: '/mcp',
    headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': session.id, 'MCP-Protocol-Version': session.protocolVersion },
    body: JSON.stringify(msg),
  });
}

test('with a progress token the answer streams: progress while waiting (the official SDK), then the result', async () => {
  const server = await startServer({ args: ['--sse-keepalive', '1'] });
  const client = new Client({ name: 'progress', version: '1.0.0' }, { capabilities: {} });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  try {
    const uri = `${server.base}/Product/B-200`;
    const read = await client.readResource({ uri });
    const v = read.contents[0]._meta?.version ?? read._meta?.version;
    const got = [];
    const call = client.callTool({ name: 'wait_and_read', arguments: { resources: [{ uri, sinceVersion: v }], timeoutMs: 10000 } }, undefined, {
      onprogress: (p) => got.push(p),
      timeout: 15000,
    });
    await waitFor(() => got.length >= 2, { timeoutMs: 4000, message: 'the first progress and a heartbeat' });
    assert.equal(got[0].progress, 0);
    assert.ok(got[1].progress > got[0].progress && got[1].progress < 1, JSON.stringify(got));
    assert.equal(got[1].total, 1);
    await rest(server.port, 'PATCH', '/Product/B-200', { price_cents: 1234 });
    const result = await call;
    const data = JSON.parse(result.content[0].text);
    assert.equal(data.timedOut, false);
    assert.equal(data.resources.length, 1);
    const last = got.at(-1);
    assert.deepEqual([last.progress, last.total, last.message], [1, 1, '1 of 1 resources changed']);
    for (let i = 1; i < got.length; i++) assert.ok(got[i].progress > got[i - 1].progress, 'progress only grows');
  } finally {
    await client.close();
    await server.stop();
  }
});

test('an operator filter (price_cents=gt=10000): a commit to a row that stays outside does not wake the wait, a row entering it does', async () => {
  const expensive = uriOf('/Product?price_cents=gt=10000');
  const all = uriOf('/Product');
  const v = await version(expensive);
  const filtered = waitAndRead({ resources: [{ uri: expensive, sinceVersion: v }], includeState: true, timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  // A second wait on the whole table: it ends with the commit below, and so
  // tells when the server has judged that commit for the filtered wait too.
  const everything = waitAndRead({ resources: [{ uri: all, sinceVersion: await version(all) }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 2 });
  // 450 -> 9999: not above 10000 as a number (as text, "9999" > "10000" would match).
  await rest(srv.port, 'PATCH', '/Product/D-400', { price_cents: 9999 });
  assert.equal((await everything).data.timedOut, false);
  await waitStatus(srv.port, { waiters: 1 }); // the filtered wait is still there
  await rest(srv.port, 'PATCH', '/Product/D-400', { price_cents: 100001 });
  const { data } = await filtered;
  assert.equal(data.timedOut, false);
  assert.deepEqual(data.resources.map((r) => r.uri), [expensive]);
  assert.deepEqual(data.resources[0].state.map((r) => [r.sku, r.price_cents]), [['D-400', 100001]]);
  await waitStatus(srv.port, { waiters: 0, subscriptions: 0 });
  await rest(srv.port, 'PATCH', '/Product/D-400', { price_cents: 450 });
});

test('a filter that does not parse: wait_and_read answers -32602 naming the reason, and leaves no waiter', async () => {
  const cases = [
    ['/Product?category=re*', /wildcards/],
    ['/Product?price_cents=xx=5', /unknown operator/],
    ['/Product?category=a||b', /empty alternative/],
    ['/Product?name=sw=', /need a value/],
  ];
  for (const [path, why] of cases) {
    for (const sinceVersion of [undefined, '1']) {
      const body = await s.call('tools/call', { name: 'wait_and_read', arguments: { resources: [{ uri: uriOf(path), sinceVersion }], timeoutMs: 5000 } });
      assert.equal(body.error?.code, -32602, `${path}: ${JSON.stringify(body)}`);
      assert.match(body.error.message, why, path);
    }
  }
  const st = await getStatus(srv.port);
  assert.equal(st.waiters, 0);
  assert.equal(st.subscriptions, 0);
});

/* mcpsub_waiters of GET /metrics, summed over its series (one per worker). */
async function metricsWaiters() {
  const res = await httpGet(srv.port, '/metrics');
  assert.equal(res.status, 200);
  const values = [...res.body.matchAll(/^mcpsub_waiters(?:\{[^}]*\})? (\d+)$/gm)].map((m) => Number(m[1]));
  assert.ok(values.length > 0, `no mcpsub_waiters in /metrics:\n${res.body.slice(0, 2000)}`);
  return values.reduce((a, b) => a + b, 0);
}

/*
 * An official SDK client of srv that records every message its transport
 * sends and receives, and what its onerror reports; wait(uri, v, signal)
 * is its wait_and_read of one record since version v.
 */
async function recordedSdkClient(name) {
  const client = new Client({ name, version: '1.0.0' }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(srv.url));
  const c = { client, sent: [], received: [], errors: [] };
  client.onerror = (err) => c.errors.push(String(err));
  await client.connect(transport);
  const send = transport.send.bind(transport);
  transport.send = (msg, opts) => {
    c.sent.push(msg);
    return send(msg, opts);
  };
  const deliver = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    c.received.push(msg);
    deliver?.(msg, extra);
  };
  c.version = async (uri) => {
    const read = await client.readResource({ uri });
    return read.contents[0]._meta?.version ?? read._meta?.version;
  };
  c.wait = (uri, sinceVersion, signal, timeoutMs = 20000) =>
    client.callTool({ name: 'wait_and_read', arguments: { resources: [{ uri, sinceVersion }], timeoutMs } }, undefined, { signal, timeout: 30000 });
  return c;
}

test('the official SDK cancels a waiting wait_and_read with an AbortSignal: the call rejects at once, the server frees the wait, sends no late result, and the session goes on', async () => {
  const c = await recordedSdkClient('cancel');
  const uri = uriOf('/Product/C-300');
  try {
    const v = await c.version(uri);
    const ac = new AbortController();
    const settled = c.wait(uri, v, ac.signal).then(
      () => 'resolved',
      (err) => err,
    );
    await waitStatus(srv.port, { waiters: 1, subscriptions: 1 });
    assert.equal(await metricsWaiters(), 1);
    const callId = c.sent.find((m) => m.method === 'tools/call').id;
    const t0 = Date.now();
    ac.abort('the user gave up');
    const outcome = await settled;
    assert.notEqual(outcome, 'resolved', 'an aborted call must reject');
    assert.ok(Date.now() - t0 < 1000, `rejected after ${Date.now() - t0} ms`);
    const cancel = await waitFor(() => c.sent.find((m) => m.method === 'notifications/cancelled'), { message: 'the SDK to send notifications/cancelled' });
    assert.equal(cancel.params.requestId, callId);
    // The server let go of the wait at once (its timeout is 20 s, --max-wait 3 s).
    await waitStatus(srv.port, { waiters: 0, subscriptions: 0 }, { timeoutMs: 1500 });
    assert.equal(await metricsWaiters(), 0);
    // A change of the awaited record now: nothing comes back for the cancelled call.
    await rest(srv.port, 'PATCH', '/Product/C-300', { price_cents: 1300 });
    // The session goes on: a new wait on the same record answers at once with the change.
    const again = await c.wait(uri, v, undefined, 5000);
    const data = JSON.parse(again.content[0].text);
    assert.equal(data.timedOut, false);
    assert.deepEqual(data.resources.map((r) => r.uri), [uri]);
    assert.notEqual(data.resources[0].version, v);
    await c.client.ping();
    assert.deepEqual(c.received.filter((m) => m.id === callId), [], 'no answer to the cancelled call');
    assert.equal((await getStatus(srv.port)).waiters, 0);
  } finally {
    await c.client.close();
    await rest(srv.port, 'PATCH', '/Product/C-300', { price_cents: 1299 });
  }
});

test(
  'the official SDK reports no transport error when its cancelled wait_and_read ends',
  async () => {
    const c = await recordedSdkClient('cancel-quiet');
    const uri = uriOf('/Product/C-300');
    try {
      const ac = new AbortController();
      const settled = c.wait(uri, await c.version(uri), ac.signal).catch(() => {});
      await waitStatus(srv.port, { waiters: 1 });
      ac.abort();
      await settled;
      await waitStatus(srv.port, { waiters: 0 }, { timeoutMs: 1500 });
      // The SDK's answer to the cancelled POST has been handled once a later request is answered on it.
      await c.client.ping();
      await c.client.ping();
      assert.deepEqual(c.errors, []);
    } finally {
      await c.client.close();
    }
  },
);

test('a wait pending at shutdown is answered (timedOut) and the server exits cleanly', async () => {
  const uri = uriOf('/Product/A-100');
  const v = await version(uri);
  const pending = waitAndRead({ resources: [{ uri, sinceVersion: v }], timeoutMs: 10000 });
  await waitStatus(srv.port, { waiters: 1 });
  const stopped = srv.stop();
  const { data } = await pending;
  assert.deepEqual(data, { resources: [], timedOut: true });
  await stopped;
});
