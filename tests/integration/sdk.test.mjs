// Interoperability with the official MCP TypeScript SDK client over
// Streamable HTTP: the whole surface a real client uses, the GET stream the
// SDK opens by itself, session termination, and teardown leaving nothing
// behind.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { startServer, getStatus } from './lib/server.mjs';
import { deleteSession } from './lib/raw.mjs';
import { sqlite, sessionRow } from './lib/sqlite.mjs';
import { waitFor } from './lib/wait.mjs';

const ANVIL = { sku: 'A-100', name: 'Anvil', price_cents: 4999, category: 'tools', in_stock: 1 };

let srv;
const clients = [];

before(async () => {
  srv = await startServer();
});

after(async () => {
  for (const { client } of clients) await client.close().catch(() => {});
  await srv?.kill();
});

async function connect(name) {
  const transport = new StreamableHTTPClientTransport(new URL(`${srv.base}/mcp`));
  const client = new Client({ name, version: '1.0.0' }, { capabilities: {} });
  const errors = [];
  client.onerror = (err) => errors.push(err);
  await client.connect(transport);
  const entry = { client, transport, errors };
  clients.push(entry);
  return entry;
}

function toolJson(result) {
  assert.ok(Array.isArray(result.content), JSON.stringify(result));
  assert.equal(result.content[0].type, 'text');
  return JSON.parse(result.content[0].text);
}

test('SDK client: full round trip, GET stream, terminateSession', async () => {
  const { client, transport } = await connect('mcpsub-sdk-test');
  const sid = transport.sessionId;
  assert.match(sid || '', /^[0-9a-f]{34}$/);

  const caps = client.getServerCapabilities();
  assert.equal(caps.resources?.subscribe, true);
  assert.equal(caps.resources?.listChanged, true);
  assert.equal(caps.tools?.listChanged, false); // the tool set never changes
  assert.ok(caps.completions && caps.logging && caps.prompts, JSON.stringify(caps));
  assert.equal(client.getServerVersion()?.name, 'mcpsub');

  const row = await waitFor(() => sessionRow(srv.dbPath, sid), { timeoutMs: 2000, message: 'mcp_session row' });
  assert.equal(JSON.parse(row.client_info).name, 'mcpsub-sdk-test');

  // resources
  const list = await client.listResources();
  const uris = list.resources.map((r) => r.uri);
  assert.ok(uris.includes(`${srv.base}/Product`), JSON.stringify(uris));
  assert.ok(uris.includes('mcpsub://about'), JSON.stringify(uris));
  const templates = await client.listResourceTemplates();
  assert.ok(templates.resourceTemplates.some((t) => t.uriTemplate === `${srv.base}/Product/{key}`));

  const rec = await client.readResource({ uri: `${srv.base}/Product/A-100` });
  assert.equal(rec.contents[0].mimeType, 'application/json');
  assert.deepEqual(JSON.parse(rec.contents[0].text), ANVIL);
  assert.equal(typeof rec.contents[0]._meta?.version, 'string');

  const coll = await client.readResource({ uri: `${srv.base}/Product` });
  assert.deepEqual(
    JSON.parse(coll.contents[0].text)
      .map((r) => r.sku)
      .sort(),
    ['A-100', 'B-200', 'C-300', 'D-400'],
  );

  // tools
  const tools = (await client.listTools()).tools.map((t) => t.name);
  for (const n of ['list_tables', 'get_record', 'query_records', 'put_record', 'delete_record']) assert.ok(tools.includes(n), n);

  const tables = toolJson(await client.callTool({ name: 'list_tables', arguments: {} }));
  assert.equal(tables.find((t) => t.name === 'Product')?.key, 'sku');
  assert.deepEqual(toolJson(await client.callTool({ name: 'get_record', arguments: { table: 'Product', key: 'A-100' } })), ANVIL);
  const q = toolJson(await client.callTool({ name: 'query_records', arguments: { table: 'Product', where: { category: 'tools' } } }));
  assert.deepEqual(q.rows.map((r) => r.sku).sort(), ['A-100', 'C-300']);
  const put = await client.callTool({ name: 'put_record', arguments: { table: 'Product', key: 'SDK-1', record: { name: 'Sdk', price_cents: 2 } } });
  assert.ok(!put.isError, JSON.stringify(put));
  assert.equal(toolJson(await client.callTool({ name: 'get_record', arguments: { table: 'Product', key: 'SDK-1' } })).name, 'Sdk');
  const del = await client.callTool({ name: 'delete_record', arguments: { table: 'Product', key: 'SDK-1' } });
  assert.ok(!del.isError, JSON.stringify(del));
  const gone = await client.callTool({ name: 'get_record', arguments: { table: 'Product', key: 'SDK-1' } });
  assert.equal(gone.isError, true);

  // completion, logging, ping
  const comp = await client.complete({
    ref: { type: 'ref/resource', uri: `${srv.base}/Product/{key}` },
    argument: { name: 'key', value: 'A' },
  });
  assert.ok(comp.completion.values.includes('A-100'), JSON.stringify(comp));
  assert.deepEqual(await client.setLoggingLevel('debug'), {});
  assert.deepEqual(await client.ping(), {});

  // The SDK opens the GET stream by itself after notifications/initialized.
  await waitFor(async () => (await getStatus(srv.port)).streams >= 1, { timeoutMs: 3000, message: 'the SDK GET stream' });

  await transport.terminateSession();
  assert.equal(transport.sessionId, undefined);
  assert.equal(sessionRow(srv.dbPath, sid), undefined, 'mcp_session row left after DELETE');
  await client.close();

  await waitFor(
    async () => {
      const st = await getStatus(srv.port);
      return st.sessions === 0 && st.streams === 0;
    },
    { timeoutMs: 5000, message: '/status sessions 0 and streams 0 after terminateSession' },
  );
});

test('SDK client: an external sqlite3 write shows in the next read with a new version', async () => {
  const { client, transport } = await connect('mcpsub-sdk-test-2');
  const uri = `${srv.base}/Product/B-200`;
  const r0 = await client.readResource({ uri });
  const v0 = r0.contents[0]._meta?.version;
  assert.equal(typeof v0, 'string');
  sqlite(srv.dbPath, "UPDATE Product SET price_cents = 123 WHERE sku = 'B-200'");
  const r1 = await client.readResource({ uri });
  assert.equal(JSON.parse(r1.contents[0].text).price_cents, 123);
  assert.notEqual(r1.contents[0]._meta?.version, v0);

  const sid = transport.sessionId;
  await transport.terminateSession();
  await client.close();
  assert.equal(sessionRow(srv.dbPath, sid), undefined);
});

test('teardown: DELETE of every session leaves /status at sessions 0, streams 0', async () => {
  const a = await connect('mcpsub-sdk-test-3');
  const b = await connect('mcpsub-sdk-test-4');
  await waitFor(async () => (await getStatus(srv.port)).streams >= 2, { timeoutMs: 3000, message: 'two SDK GET streams' });
  for (const { transport, client } of [a, b]) {
    const res = await deleteSession(srv.port, transport.sessionId);
    assert.equal(res.status, 204, res.text);
    await client.close();
  }
  await waitFor(
    async () => {
      const st = await getStatus(srv.port);
      return st.sessions === 0 && st.streams === 0 ? st : undefined;
    },
    { timeoutMs: 5000, message: '/status sessions 0 and streams 0' },
  );
});

test('shutdown: SIGTERM -> exit code 0', async () => {
  await srv.stop();
});
