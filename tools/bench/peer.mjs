// The benchmark's peer: the same subscribe semantics as mcpsubd, built the
// way the official MCP TypeScript SDK's own examples build a server —
// StreamableHTTPServerTransport with the SDK's InMemoryEventStore, one
// Server and one transport per session — over the same SQLite file (Node
// 22's node:sqlite). Commits are found by polling the audit log (mcpsubd's
// audit_log when the file has it, else a table and triggers of our own)
// every --poll-ms and right after our own PUTs; each change is sent as
// notifications/resources/updated {uri, subscribedUri} to every session
// subscribed to the record or its collection. Only what the load generator
// uses is offered: initialize, resources/list, resources/read,
// resources/subscribe, resources/unsubscribe, GET streams, PUT /<table>/<key>,
// /healthz. JSON responses (enableJsonResponse), as mcpsubd answers.
//
// Usage: node peer.mjs --port P --db FILE [--table Bench] [--poll-ms 5]
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { DatabaseSync } from 'node:sqlite';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import {
  ErrorCode, ListResourcesRequestSchema, McpError, ReadResourceRequestSchema,
  SubscribeRequestSchema, UnsubscribeRequestSchema, isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

const args = Object.fromEntries(process.argv.slice(2).reduce((pairs, a, i, all) =>
  (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
const port = Number(args.port);
const table = args.table ?? 'Bench';
const pollMs = Number(args['poll-ms'] ?? 5);
if (!Number.isInteger(port) || port <= 0 || !args.db || !/^\w+$/.test(table)) {
  console.error('usage: peer.mjs --port P --db FILE [--table Bench] [--poll-ms 5]');
  process.exit(2);
}
const base = `http://127.0.0.1:${port}`;
const collectionUri = `${base}/${table}`;
const MAX_BODY = 1 << 20;

// ---- the database ----------------------------------------------------------
const db = new DatabaseSync(args.db);
db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;');
db.exec(`CREATE TABLE IF NOT EXISTS "${table}" (k TEXT PRIMARY KEY, t INTEGER NOT NULL DEFAULT 0, v TEXT)`);
const hasAuditLog = db.prepare("SELECT 1 FROM sqlite_master WHERE type='table' AND name='audit_log'").get();
let feed = 'audit_log';
if (!hasAuditLog) {
  feed = 'peer_audit';
  db.exec(`CREATE TABLE IF NOT EXISTS peer_audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT, key TEXT);
    CREATE TRIGGER IF NOT EXISTS peer_ai AFTER INSERT ON "${table}" BEGIN INSERT INTO peer_audit (tbl, key) VALUES ('${table}', NEW.k); END;
    CREATE TRIGGER IF NOT EXISTS peer_au AFTER UPDATE ON "${table}" BEGIN INSERT INTO peer_audit (tbl, key) VALUES ('${table}', NEW.k); END;
    CREATE TRIGGER IF NOT EXISTS peer_ad AFTER DELETE ON "${table}" BEGIN INSERT INTO peer_audit (tbl, key) VALUES ('${table}', OLD.k); END;`);
}
const readChanges = db.prepare(`SELECT seq, tbl, key FROM ${feed} WHERE seq > ? ORDER BY seq LIMIT 1000`);
const readRow = db.prepare(`SELECT k, t, v FROM "${table}" WHERE k = ?`);
const upsert = db.prepare(`INSERT INTO "${table}" (k, t, v) VALUES (?, ?, ?)
  ON CONFLICT (k) DO UPDATE SET t = excluded.t, v = excluded.v RETURNING k, t, v`);
const exists = db.prepare(`SELECT 1 FROM "${table}" WHERE k = ?`);
let cursor = db.prepare(`SELECT coalesce(max(seq), 0) AS s FROM ${feed}`).get().s;

// ---- sessions: one SDK Server and transport each -----------------------------
const sessions = new Map(); // id -> { server, transport, subs: Set<string> }

function makeServer(entry) {
  const server = new Server({ name: 'mcpsub-bench-peer', version: '1.0.0' },
    { capabilities: { resources: { subscribe: true, listChanged: true } } });
  server.setRequestHandler(ListResourcesRequestSchema, async () =>
    ({ resources: [{ uri: collectionUri, name: table, mimeType: 'application/json' }] }));
  server.setRequestHandler(ReadResourceRequestSchema, async ({ params }) => {
    const prefix = `${collectionUri}/`;
    if (!params.uri.startsWith(prefix)) throw new McpError(-32002, `Resource not found: ${params.uri}`);
    const row = readRow.get(decodeURIComponent(params.uri.slice(prefix.length)));
    if (!row) throw new McpError(-32002, `Resource not found: ${params.uri}`);
    return { contents: [{ uri: params.uri, mimeType: 'application/json', text: JSON.stringify(row) }] };
  });
  server.setRequestHandler(SubscribeRequestSchema, async ({ params }) => {
    if (params.uri !== collectionUri && !params.uri.startsWith(`${collectionUri}/`))
      throw new McpError(ErrorCode.InvalidParams, `resource is not subscribable: ${params.uri}`);
    entry.subs.add(params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async ({ params }) => {
    entry.subs.delete(params.uri);
    return {};
  });
  return server;
}

// ---- the change feed ---------------------------------------------------------
let polling = false;
function poll() {
  if (polling) return;
  polling = true;
  try {
    for (;;) {
      const rows = readChanges.all(cursor);
      for (const row of rows) {
        cursor = row.seq;
        if (row.tbl !== table) continue;
        const uri = `${collectionUri}/${encodeURIComponent(row.key)}`;
        for (const entry of sessions.values()) {
          for (const subscribedUri of [collectionUri, uri]) {
            if (!entry.subs.has(subscribedUri)) continue;
            entry.server.notification({ method: 'notifications/resources/updated', params: { uri, subscribedUri } })
              .catch(() => {}); // a session whose stream is gone: nothing to do
          }
        }
      }
      if (rows.length < 1000) break;
    }
  } finally {
    polling = false;
  }
}
setInterval(poll, pollMs).unref();

// ---- HTTP ----------------------------------------------------------------------
function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) reject(new Error('body too large'));
      else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

async function handleMcp(req, res) {
  const sid = req.headers['mcp-session-id'];
  if (req.method === 'POST') {
    const body = JSON.parse(await readBody(req));
    if (sid === undefined && isInitializeRequest(body)) {
      const entry = { server: null, transport: null, subs: new Set() };
      entry.transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new InMemoryEventStore(),
        enableJsonResponse: true,
        onsessioninitialized: (id) => sessions.set(id, entry),
      });
      entry.transport.onclose = () => {
        if (entry.transport.sessionId) sessions.delete(entry.transport.sessionId);
      };
      entry.server = makeServer(entry);
      await entry.server.connect(entry.transport);
      await entry.transport.handleRequest(req, res, body);
      return;
    }
    const entry = sessions.get(sid);
    if (!entry) return send(res, 404, { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
    await entry.transport.handleRequest(req, res, body);
    return;
  }
  const entry = sessions.get(sid);
  if (!entry) return send(res, 404, { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
  await entry.transport.handleRequest(req, res);
}

async function handlePut(req, res, key) {
  const body = JSON.parse(await readBody(req));
  const created = !exists.get(key);
  const row = upsert.get(key, Number(body.t ?? 0), body.v ?? null);
  poll(); // our own commit: tell subscribers now, as mcpsubd does
  send(res, created ? 201 : 200, row);
}

const httpServer = http.createServer(async (req, res) => {
  try {
    const path = req.url.split('?')[0];
    if (path === '/healthz') return send(res, 200, { status: 'ok' });
    if (path === '/mcp') return await handleMcp(req, res);
    const prefix = `/${table}/`;
    if (req.method === 'PUT' && path.startsWith(prefix)) return await handlePut(req, res, decodeURIComponent(path.slice(prefix.length)));
    send(res, 404, { error: 'not found' });
  } catch (err) {
    if (!res.headersSent) send(res, 400, { error: String(err?.message ?? err) });
    else res.destroy();
  }
});
httpServer.keepAliveTimeout = 600_000; // the load generator keeps its connections for the whole run
httpServer.headersTimeout = 610_000;
httpServer.listen(port, '127.0.0.1', () => console.error(`peer: listening on ${base} (feed ${feed})`));

function shutdown() {
  httpServer.close();
  for (const entry of sessions.values()) entry.transport.close().catch(() => {});
  httpServer.closeAllConnections();
  db.close();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
