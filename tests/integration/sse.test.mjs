// GET /mcp: the session's SSE stream — preconditions, priming event and
// retry field, keepalive comments, supersession by a second GET, and the
// /status stream count.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, getStatus } from './lib/server.mjs';
import { initialize, openStream, parseSse, request } from './lib/raw.mjs';
import { waitFor } from './lib/wait.mjs';

const UNKNOWN_SESSION = `00${'cd'.repeat(16)}`;

let srv;

before(async () => {
  srv = await startServer({ args: ['--sse-keepalive', '1'] });
});

after(async () => {
  await srv?.kill();
});

function getMcp(sessionId, headers = {}) {
  const h = { Accept: 'text/event-stream', ...headers };
  if (sessionId) h['Mcp-Session-Id'] = sessionId;
  return request(srv.port, { method: 'GET', path: '/mcp', headers: h });
}

/* Waits for the retry field and the priming event; returns the parsed SSE so far. */
function waitPriming(conn) {
  return conn.waitForText(
    (text) => {
      const sse = parseSse(text);
      const retry = sse.events.find((e) => e.retry !== undefined);
      const priming = sse.events.find((e) => e.id !== undefined);
      return retry && priming ? { sse, retry, priming } : undefined;
    },
    { timeoutMs: 3000, what: 'retry: and a priming event' },
  );
}

test('GET /mcp without Accept: text/event-stream -> 406', async () => {
  const sid = await initialize(srv.port);
  const res = await getMcp(sid, { Accept: 'application/json' });
  assert.equal(res.status, 406, res.text);
});

test('GET /mcp without a session -> 400', async () => {
  const res = await getMcp(null);
  assert.equal(res.status, 400, res.text);
});

test('GET /mcp with an unknown session -> 404', async () => {
  const res = await getMcp(UNKNOWN_SESSION);
  assert.equal(res.status, 404, res.text);
});

test('GET /mcp -> 200 text/event-stream, retry field, priming event with id and empty data', async () => {
  const sid = await initialize(srv.port);
  const { conn, head } = await openStream(srv.port, sid);
  try {
    assert.equal(head.status, 200);
    assert.match(head.headers['content-type'] || '', /^text\/event-stream/);
    assert.equal(head.headers['content-length'], undefined, 'a stream has no Content-Length');
    const { retry, priming } = await waitPriming(conn);
    assert.match(retry.retry, /^\d+$/, `retry: ${retry.retry}`);
    assert.ok(priming.id.length > 0, 'priming event id is empty');
    assert.ok(
      priming.fields.some(([name]) => name === 'data'),
      `priming event has no data field: ${JSON.stringify(priming.fields)}`,
    );
    assert.equal(priming.data, '');
  } finally {
    conn.close();
  }
});

test('GET /mcp: keepalive comments every --sse-keepalive seconds', async () => {
  const sid = await initialize(srv.port);
  const { conn, head } = await openStream(srv.port, sid);
  try {
    assert.equal(head.status, 200);
    await waitPriming(conn);
    const t0 = Date.now();
    const c0 = parseSse(conn.buf.toString('utf8')).comments.length;
    await conn.waitForText((text) => parseSse(text).comments.length > c0, {
      timeoutMs: 2500,
      what: 'an SSE comment (keepalive)',
    });
    // and again: it is periodic, not a one-off
    const n = parseSse(conn.buf.toString('utf8')).comments.length;
    await conn.waitForText((text) => parseSse(text).comments.length > n, {
      timeoutMs: 2500,
      what: 'a second keepalive comment',
    });
    assert.ok(Date.now() - t0 >= 500, 'keepalives arrive faster than the configured 1 s');
  } finally {
    conn.close();
  }
});

test('a second GET for the same session ends the first stream; the second stays open', async () => {
  const sid = await initialize(srv.port);
  const a = await openStream(srv.port, sid);
  try {
    assert.equal(a.head.status, 200);
    await waitPriming(a.conn);
    const b = await openStream(srv.port, sid);
    try {
      assert.equal(b.head.status, 200);
      await waitPriming(b.conn);
      await a.conn.waitClosed({ timeoutMs: 3000 });
      // b survives past at least one keepalive interval
      const n = parseSse(b.conn.buf.toString('utf8')).comments.length;
      await b.conn.waitForText((text) => parseSse(text).comments.length > n, { timeoutMs: 2500, what: 'keepalive on the second stream' });
      assert.equal(b.conn.closed, false, 'the second stream was closed');
    } finally {
      b.conn.close();
    }
  } finally {
    a.conn.close();
  }
});

test('/status counts an open stream, and not after the client closes it', async () => {
  await waitFor(async () => (await getStatus(srv.port)).streams === 0, { timeoutMs: 3000, message: 'no streams before' });
  const sid = await initialize(srv.port);
  const { conn, head } = await openStream(srv.port, sid);
  try {
    assert.equal(head.status, 200);
    await waitPriming(conn);
    assert.equal((await getStatus(srv.port)).streams, 1);
  } finally {
    conn.close();
  }
  await waitFor(async () => (await getStatus(srv.port)).streams === 0, { timeoutMs: 3000, message: '/status streams 0 after close' });
});

test('DELETE of the session ends its open stream', async () => {
  const sid = await initialize(srv.port);
  const { conn, head } = await openStream(srv.port, sid);
  try {
    assert.equal(head.status, 200);
    await waitPriming(conn);
    const del = await request(srv.port, { method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': sid } });
    assert.equal(del.status, 204, del.text);
    await conn.waitClosed({ timeoutMs: 3000 });
  } finally {
    conn.close();
  }
  await waitFor(async () => (await getStatus(srv.port)).streams === 0, { timeoutMs: 3000, message: '/status streams 0' });
});

test('GET /mcp after DELETE of the session -> 404', async () => {
  const sid = await initialize(srv.port);
  const del = await request(srv.port, { method: 'DELETE', path: '/mcp', headers: { 'Mcp-Session-Id': sid } });
  assert.equal(del.status, 204, del.text);
  const res = await getMcp(sid);
  assert.equal(res.status, 404, res.text);
});

test('shutdown with an open stream: SIGTERM -> exit code 0', async () => {
  const sid = await initialize(srv.port);
  const { conn, head } = await openStream(srv.port, sid);
  try {
    assert.equal(head.status, 200);
    await waitPriming(conn);
    await srv.stop();
    await conn.waitClosed({ timeoutMs: 3000 });
  } finally {
    conn.close();
  }
});
