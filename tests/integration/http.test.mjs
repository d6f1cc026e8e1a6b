// HTTP/1.1 layer, through the raw client: fixed endpoints, status codes for
// bad input and limits, keep-alive, pipelining, chunked bodies.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';

import { startServer, getStatus } from './lib/server.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { sleep, waitFor } from './lib/wait.mjs';
import { RawConnection, buildRequest, initializeMessage, initializeSession, rawRequest, request, MCP_ACCEPT } from './lib/raw.mjs';

let srv;
let small; // --max-body 2048

before(async () => {
  [srv, small] = await Promise.all([startServer(), startServer({ args: ['--max-body', '2048'] })]);
});

after(async () => {
  await srv?.kill();
  await small?.kill();
});

function allowSet(res) {
  assert.ok(res.headers.allow !== undefined, `no Allow header: ${JSON.stringify(res.rawHeaders)}`);
  return new Set(res.headers.allow.split(',').map((s) => s.trim()).filter(Boolean));
}

test('GET /healthz -> 200 {"status":"ok"}', async () => {
  const res = await request(srv.port, { path: '/healthz' });
  assert.equal(res.status, 200);
  assert.match(res.headers['content-type'] || '', /^application\/json/);
  assert.deepEqual(res.json(), { status: 'ok' });
});

test('GET /readyz -> 200', async () => {
  const res = await request(srv.port, { path: '/readyz' });
  assert.equal(res.status, 200, res.text);
});

test('GET /status -> 200 with numeric sessions, streams, connections', async () => {
  const res = await request(srv.port, { path: '/status' });
  assert.equal(res.status, 200);
  const body = res.json();
  for (const k of ['sessions', 'streams', 'connections']) {
    assert.equal(typeof body[k], 'number', `${k} in ${res.text}`);
    assert.ok(Number.isInteger(body[k]) && body[k] >= 0, `${k} in ${res.text}`);
  }
  // This very request is an open connection.
  assert.ok(body.connections >= 1, res.text);
});

for (const path of ['/nope', '/favicon.ico', '/mcp/extra', '/no/such/path/here']) {
  test(`unknown path ${path} -> 404`, async () => {
    const res = await request(srv.port, { path });
    assert.equal(res.status, 404, res.text);
  });
}

test('PUT /mcp -> 405 with Allow: GET, POST, DELETE', async () => {
  const res = await request(srv.port, { method: 'PUT', path: '/mcp', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  assert.equal(res.status, 405, res.text);
  assert.deepEqual(allowSet(res), new Set(['GET', 'POST', 'DELETE']));
});

test('POST /healthz -> 405 with an Allow header listing GET', async () => {
  const res = await request(srv.port, { method: 'POST', path: '/healthz', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  assert.equal(res.status, 405, res.text);
  const allow = allowSet(res);
  assert.ok(allow.has('GET'), res.headers.allow);
  assert.ok(!allow.has('POST'), res.headers.allow);
});

test('header block over 16 KiB -> 431', async () => {
  const bytes = buildRequest(srv.port, { path: '/healthz', headers: { 'X-Filler': 'a'.repeat(17 * 1024) } });
  const { responses } = await rawRequest(srv.port, bytes, { responses: 1 });
  assert.equal(responses[0].status, 431, responses[0].text);
});

test('many headers adding up to over 16 KiB -> 431', async () => {
  const headers = {};
  for (let i = 0; i < 100; i++) headers[`X-Filler-${i}`] = 'b'.repeat(200);
  const bytes = buildRequest(srv.port, { path: '/healthz', headers });
  const { responses } = await rawRequest(srv.port, bytes, { responses: 1 });
  assert.equal(responses[0].status, 431, responses[0].text);
});

test('body over --max-body -> 413', async () => {
  const body = Buffer.alloc(4096, 0x20); // spaces: valid length, never parsed
  const bytes = buildRequest(small.port, {
    method: 'POST',
    path: '/mcp',
    headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json' },
    body,
  });
  const { responses } = await rawRequest(small.port, bytes, { responses: 1 });
  assert.equal(responses[0].status, 413, responses[0].text);
});

test('chunked body over --max-body -> 413', async () => {
  const chunk = 'x'.repeat(1024);
  let body = '';
  for (let i = 0; i < 4; i++) body += `${(1024).toString(16)}\r\n${chunk}\r\n`;
  body += '0\r\n\r\n';
  const bytes = buildRequest(small.port, {
    method: 'POST',
    path: '/mcp',
    headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' },
    body,
  });
  const { responses } = await rawRequest(small.port, bytes, { responses: 1 });
  assert.equal(responses[0].status, 413, responses[0].text);
});

test('body under --max-body is accepted', async () => {
  const msg = initializeMessage();
  msg.params.clientInfo.name = 'p'.repeat(1500);
  const bytes = buildRequest(small.port, {
    method: 'POST',
    path: '/mcp',
    headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json' },
    body: JSON.stringify(msg),
  });
  const { responses } = await rawRequest(small.port, bytes, { responses: 1 });
  assert.equal(responses[0].status, 200, responses[0].text);
});

test('malformed request line -> 400 and close', async () => {
  const conn = await RawConnection.open(srv.port);
  try {
    conn.write('THIS IS NOT HTTP\r\n\r\n');
    const res = await conn.readResponse();
    assert.equal(res.status, 400, res.text);
    await conn.waitClosed();
  } finally {
    conn.close();
  }
});

test('keep-alive: two requests on one connection are both answered', async () => {
  const conn = await RawConnection.open(srv.port);
  try {
    conn.write(buildRequest(srv.port, { path: '/healthz' }));
    const a = await conn.readResponse();
    assert.equal(a.status, 200);
    assert.ok(!conn.closed, 'connection closed after the first response');
    conn.write(buildRequest(srv.port, { path: '/status' }));
    const b = await conn.readResponse();
    assert.equal(b.status, 200);
    assert.equal(typeof b.json().connections, 'number');
  } finally {
    conn.close();
  }
});

test('pipelining: three requests in one write are answered in order', async () => {
  const bytes = Buffer.concat([
    buildRequest(srv.port, { path: '/healthz' }),
    buildRequest(srv.port, { path: '/nope' }),
    buildRequest(srv.port, { path: '/healthz', headers: { Connection: 'close' } }),
  ]);
  const { responses } = await rawRequest(srv.port, bytes, { responses: 3 });
  assert.deepEqual(
    responses.map((r) => r.status),
    [200, 404, 200],
  );
  assert.deepEqual(responses[0].json(), { status: 'ok' });
  assert.deepEqual(responses[2].json(), { status: 'ok' });
});

test('pipelining without reading the answers: the server stops reading requests, then answers every one in order', async () => {
  // Each answer a page of 250 rows (about 60 KiB), each request about 8 KiB (a padding header):
  // past what the sockets' buffers hold, the answers queued unread reach 1 MiB, and then the
  // server reads no more requests, so the client's writes back up. Unbounded, it read them all
  // and queued every answer (a client doing this grew a worker by 2 GB in half a minute).
  const note = 'n'.repeat(200);
  sqlite(small.dbPath, `WITH RECURSIVE c(x) AS (SELECT 100 UNION ALL SELECT x + 1 FROM c WHERE x < 349)
    INSERT INTO StockEvent (id, sku, delta, note) SELECT x, 'A-100', 1, '${note}' FROM c`);
  const one = buildRequest(small.port, { path: '/StockEvent?id=ge=100&_limit=250', headers: { 'X-Pad': 'p'.repeat(8000) } });
  const sock = net.connect(small.port, '127.0.0.1');
  try {
    await once(sock, 'connect');
    sock.pause(); // read nothing yet
    const attempts = 3000; // 24 MiB of requests for 180 MiB of answers
    let sent = 0;
    const deadline = Date.now() + 4000;
    while (sent < attempts && Date.now() < deadline) {
      sent++;
      if (!sock.write(one)) {
        const drained = await Promise.race([once(sock, 'drain').then(() => true), sleep(1000).then(() => false)]);
        if (!drained) break;
      }
    }
    assert.ok(sent < attempts, `the server read all ${attempts} requests while none of their answers was read`);
    // Reading now: every request sent is answered, and the connection stays open.
    const head = Buffer.from('HTTP/1.1 ');
    let tail = Buffer.alloc(0); // the end of the last chunk, where a status line may begin
    let answers = 0;
    const statuses = new Set();
    sock.on('data', (d) => {
      const b = Buffer.concat([tail, d]);
      let at = 0;
      for (let i; (i = b.indexOf(head, at)) >= 0 && b.length >= i + 12; at = i + 12) {
        statuses.add(b.subarray(i + 9, i + 12).toString());
        answers++;
      }
      tail = b.subarray(Math.max(at, b.length - 11));
    });
    sock.resume();
    await waitFor(() => answers >= sent, { timeoutMs: 30000, message: 'every answer' });
    await sleep(100);
    assert.equal(answers, sent);
    assert.deepEqual([...statuses], ['200']);
    assert.equal(sock.destroyed, false);
  } finally {
    sock.destroy();
    sqlite(small.dbPath, 'DELETE FROM StockEvent WHERE id >= 100');
  }
});

test('Connection: close is honoured', async () => {
  const { responses, closed } = await rawRequest(srv.port, buildRequest(srv.port, { path: '/healthz', headers: { Connection: 'close' } }));
  assert.equal(responses.length, 1);
  assert.equal(responses[0].status, 200);
  assert.ok(closed);
});

test('chunked POST body: a chunked initialize works', async () => {
  const json = JSON.stringify(initializeMessage());
  const half = Math.floor(json.length / 2);
  const parts = [json.slice(0, half), json.slice(half)];
  let body = '';
  for (const p of parts) body += `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`;
  body += '0\r\n\r\n';
  const bytes = buildRequest(srv.port, {
    method: 'POST',
    path: '/mcp',
    headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' },
    body,
  });
  const { responses } = await rawRequest(srv.port, bytes, { responses: 1 });
  const res = responses[0];
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers['mcp-session-id'] || '', /^[0-9a-f]{34}$/);
  assert.equal(res.json().result.protocolVersion, '2025-11-25');
});

test('pipelining: two POST /mcp requests in one write are answered in order', async () => {
  const { sessionId } = await initializeSession(srv.port);
  const post = (id, method) =>
    buildRequest(srv.port, {
      method: 'POST',
      path: '/mcp',
      headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Mcp-Session-Id': sessionId },
      body: JSON.stringify({ jsonrpc: '2.0', id, method }),
    });
  const { responses } = await rawRequest(srv.port, Buffer.concat([post(1, 'tools/list'), post(2, 'ping')]), { responses: 2 });
  assert.deepEqual(
    responses.map((r) => r.status),
    [200, 200],
  );
  assert.equal(responses[0].json().id, 1);
  assert.ok(Array.isArray(responses[0].json().result.tools));
  assert.deepEqual(responses[1].json(), { jsonrpc: '2.0', id: 2, result: {} });
});

test('keep-alive survives an error response (404)', async () => {
  const conn = await RawConnection.open(srv.port);
  try {
    conn.write(buildRequest(srv.port, { path: '/nope' }));
    assert.equal((await conn.readResponse()).status, 404);
    conn.write(buildRequest(srv.port, { path: '/healthz' }));
    assert.equal((await conn.readResponse()).status, 200);
  } finally {
    conn.close();
  }
});

test('a request sent a few bytes at a time is answered', async () => {
  const conn = await RawConnection.open(srv.port);
  try {
    const bytes = buildRequest(srv.port, { path: '/healthz' });
    for (let i = 0; i < bytes.length; i += 7) {
      conn.write(bytes.subarray(i, i + 7));
      await sleep(2);
    }
    const res = await conn.readResponse();
    assert.equal(res.status, 200);
    assert.deepEqual(res.json(), { status: 'ok' });
  } finally {
    conn.close();
  }
});

test('HTTP/1.0 request is answered and the connection closed', async () => {
  const { responses, closed } = await rawRequest(srv.port, 'GET /healthz HTTP/1.0\r\n\r\n');
  assert.equal(responses.length, 1);
  assert.equal(responses[0].status, 200);
  assert.ok(closed);
});

test('a client that disconnects mid-body leaves the server healthy', async () => {
  for (let i = 0; i < 5; i++) {
    const conn = await RawConnection.open(srv.port);
    conn.write(
      buildRequest(srv.port, {
        method: 'POST',
        path: '/mcp',
        headers: { Accept: MCP_ACCEPT, 'Content-Type': 'application/json', 'Content-Length': '1000' },
        body: '{"jsonrpc":"2.0",',
      }),
    );
    await sleep(10);
    conn.close();
  }
  const res = await request(srv.port, { path: '/healthz' });
  assert.equal(res.status, 200);
});

test('/status connections returns to baseline after clients close', async () => {
  const conns = await Promise.all(Array.from({ length: 5 }, () => RawConnection.open(srv.port)));
  await waitFor(async () => (await getStatus(srv.port)).connections >= 6, { timeoutMs: 3000, message: '6 connections' });
  for (const c of conns) c.close();
  await waitFor(async () => (await getStatus(srv.port)).connections === 1, {
    timeoutMs: 3000,
    message: '/status connections back to 1 (only the /status request itself)',
  });
});

test('headers not complete within 10 s -> 408 and the connection closes', async () => {
  const conn = await RawConnection.open(srv.port);
  const t0 = Date.now();
  try {
    conn.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nX-Slow: 1\r\n`);
    const res = await conn.readResponse({ timeoutMs: 15000 });
    const elapsed = Date.now() - t0;
    assert.equal(res.status, 408, res.text);
    assert.ok(elapsed >= 9000, `408 came after ${elapsed} ms, before the 10 s bound`);
    await conn.waitClosed({ timeoutMs: 3000 });
  } finally {
    conn.close();
  }
});

test('shutdown with a half-sent request open: SIGTERM -> exit code 0', async () => {
  const conn = await RawConnection.open(srv.port);
  try {
    conn.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\n`);
    await Promise.all([srv.stop(), small.stop()]);
    await conn.waitClosed({ timeoutMs: 3000 });
  } finally {
    conn.close();
  }
});
