// A bound on TCP connections: --max-connections (in all; each worker takes
// its share) and --max-connections-per-address. A connection over a bound
// gets a short 503 and is closed, and mcpsub_connections_refused_total
// counts it; once a connection closes, a new one is served again.

import test, { after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer } from './lib/server.mjs';
import { RawConnection, buildRequest, request } from './lib/raw.mjs';
import { sleep } from './lib/wait.mjs';

const servers = [];
after(async () => {
  for (const s of servers) await s.kill();
});

/* A kept-alive connection that made one request (so that a worker holds it). */
async function openServed(port) {
  const c = await RawConnection.open(port);
  c.write(buildRequest(port, { path: '/healthz' }));
  const res = await c.readResponse();
  return { c, res };
}

async function refusedTotal(port) {
  const text = (await request(port, { path: '/metrics' })).text;
  const all = [...text.matchAll(/^mcpsub_connections_refused_total\{worker="\d+"\} (\d+)$/gm)];
  assert.ok(all.length > 0, text);
  return all.reduce((sum, m) => sum + Number(m[1]), 0); // summed over the workers
}

for (const [mode, limit] of [[['--workers', '0'], 4], [['--workers', '2'], 4]]) {
  test(`${mode.join(' ')} --max-connections ${limit}: the connection over it gets 503 and is closed; a freed place is taken again`, async () => {
    const srv = await startServer({ args: [...mode, '--max-connections', String(limit)] });
    servers.push(srv);
    const held = [];
    let refused = null;
    for (let i = 0; i < limit + 2 && refused === null; i++) {
      const { c, res } = await openServed(srv.port);
      if (res.status === 503) {
        refused = res;
        await c.waitClosed({ timeoutMs: 2000 });
        c.close();
      } else {
        assert.equal(res.status, 200);
        held.push(c);
      }
    }
    assert.ok(refused, `no connection was refused with ${held.length} open`);
    assert.equal(refused.json().error, 'too many connections');
    assert.ok(held.length >= 1 && held.length <= limit, `${held.length} served before the refusal`);
    for (const c of held) c.close();
    await sleep(200);
    assert.ok((await refusedTotal(srv.port)) >= 1);
    const again = await openServed(srv.port);
    assert.equal(again.res.status, 200, 'served again once connections closed');
    again.c.close();
    await srv.stop();
  });
}

test('--max-connections-per-address 3: the fourth connection from 127.0.0.1 is refused', async () => {
  const srv = await startServer({ args: ['--workers', '0', '--max-connections-per-address', '3'] });
  servers.push(srv);
  const held = [];
  for (let i = 0; i < 3; i++) {
    const { c, res } = await openServed(srv.port);
    assert.equal(res.status, 200);
    held.push(c);
  }
  const { c, res } = await openServed(srv.port);
  assert.equal(res.status, 503);
  c.close();
  held.pop().close();
  await sleep(100);
  const ok = await openServed(srv.port);
  assert.equal(ok.res.status, 200);
  ok.c.close();
  for (const h of held) h.close();
  await srv.stop();
});
