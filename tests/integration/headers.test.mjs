// One reading of one request: a request with two copies of a single-valued
// header (Mcp-Session-Id, MCP-Protocol-Version, Content-Length, Host,
// Authorization) is refused with 400 by the master and by the worker alike,
// on a first request and on a kept-alive one, pre-forked and in one
// process; the session such a request names is neither served nor restored
// elsewhere. A JSON-RPC id (or any string) holding U+0000, which would be
// read cut short, is refused with -32600.

import test, { after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, getStatus } from './lib/server.mjs';
import { MCP_ACCEPT, RawConnection, initialize, mcpPost, rawRequest, request } from './lib/raw.mjs';

const servers = [];
after(async () => {
  for (const s of servers) await s.kill();
});

/* Request bytes with the header lines exactly as given (duplicates kept). */
function rawBytes(port, method, path, lines, body = '') {
  const head = [`${method} ${path} HTTP/1.1`, ...lines];
  if (!lines.some((l) => /^host:/i.test(l))) head.push(`Host: 127.0.0.1:${port}`);
  if (body !== '' && !lines.some((l) => /^content-length:/i.test(l))) head.push(`Content-Length: ${Buffer.byteLength(body)}`);
  return Buffer.from(`${head.join('\r\n')}\r\n\r\n${body}`, 'latin1');
}

const ping = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });

for (const mode of [['--workers', '2'], ['--workers', '0']]) {
  test(`${mode.join(' ')}: two Mcp-Session-Id headers are 400, and session A is not restored anywhere else`, async () => {
    const srv = await startServer({ args: mode });
    servers.push(srv);
    const a = await initialize(srv.port);
    const b = await initialize(srv.port);
    const before = await getStatus(srv.port);
    assert.equal(before.sessions, 2);
    for (const [x, y] of [[a, b], [b, a]]) {
      const { responses } = await rawRequest(
        srv.port,
        rawBytes(srv.port, 'POST', '/mcp', [`Accept: ${MCP_ACCEPT}`, 'Content-Type: application/json', `Mcp-Session-Id: ${x}`, `Mcp-Session-Id: ${y}`], ping),
      );
      assert.equal(responses[0].status, 400, responses[0].text);
    }
    const now = await getStatus(srv.port);
    assert.equal(now.sessions, 2, `no session restored a second time: ${JSON.stringify(now)}`);
    // Both sessions still answer their owner.
    for (const id of [a, b]) assert.equal((await mcpPost(srv.port, id, JSON.parse(ping))).status, 200);
    await srv.stop();
  });

  test(`${mode.join(' ')}: each single-valued header given twice is 400 (first request, and on a kept-alive connection)`, async () => {
    const srv = await startServer({ args: mode });
    servers.push(srv);
    const sid = await initialize(srv.port);
    const base = [`Accept: ${MCP_ACCEPT}`, 'Content-Type: application/json', `Mcp-Session-Id: ${sid}`];
    const doubles = [
      ['MCP-Protocol-Version: 2025-11-25', 'MCP-Protocol-Version: 2025-06-18'],
      [`Content-Length: ${ping.length}`, `Content-Length: ${ping.length}`],
      [`Host: 127.0.0.1:${srv.port}`, 'Host: evil.example'],
      ['Authorization: Bearer a', 'authorization: Bearer b'],
    ];
    for (const pair of doubles) {
      const { responses, closed } = await rawRequest(srv.port, rawBytes(srv.port, 'POST', '/mcp', [...base, ...pair], ping));
      assert.equal(responses[0].status, 400, `${pair[0]}: ${responses[0].text}`);
      assert.ok(closed, 'the connection is closed after it');
    }
    // On a kept-alive connection, after a good request (the worker reads this one).
    const conn = await RawConnection.open(srv.port);
    try {
      conn.write(rawBytes(srv.port, 'POST', '/mcp', [...base, 'MCP-Protocol-Version: 2025-11-25'], ping));
      assert.equal((await conn.readResponse()).status, 200);
      conn.write(rawBytes(srv.port, 'POST', '/mcp', [...base, `Mcp-Session-Id: ${sid}`], ping));
      assert.equal((await conn.readResponse()).status, 400);
    } finally {
      conn.close();
    }
    // Repeatable headers are fine.
    const ok = await rawRequest(srv.port, rawBytes(srv.port, 'POST', '/mcp', [...base, 'Accept-Language: en', 'Accept-Language: fr'], ping), { responses: 1 });
    assert.equal(ok.responses[0].status, 200);
    await srv.stop();
  });
}

test('a JSON-RPC id, or any string, holding U+0000 is refused with -32600 (it could not be echoed exactly)', async () => {
  const srv = await startServer();
  servers.push(srv);
  const sid = await initialize(srv.port);
  const res = await mcpPost(srv.port, sid, '{"jsonrpc":"2.0","id":"a\\u0000b","method":"ping"}');
  assert.equal(res.status, 400, res.text);
  const msg = res.json();
  assert.equal(msg.error.code, -32600);
  assert.equal(msg.id, null);
  // A backslash followed by "u0000" is just text, not U+0000.
  const fine = await mcpPost(srv.port, sid, '{"jsonrpc":"2.0","id":"a\\\\u0000b","method":"ping"}');
  assert.equal(fine.status, 200, fine.text);
  assert.equal(fine.json().id, 'a\\u0000b');
  // REST bodies too: the value would be stored cut short.
  const put = await request(srv.port, { method: 'PATCH', path: '/Product/A-100', headers: { 'Content-Type': 'application/json' }, body: '{"name":"x\\u0000y"}' });
  assert.equal(put.status, 400, put.text);
  const row = await request(srv.port, { path: '/Product/A-100' });
  assert.notEqual(row.json().name, 'x');
  await srv.stop();
});
