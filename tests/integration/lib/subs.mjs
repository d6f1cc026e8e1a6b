// Helpers of the subscription tests: a server restart on the same port
// and database (what a session and its subscriptions must survive), REST
// writes, the audit log as the sqlite3 CLI sees it, and /status waits.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';

import { request } from './raw.mjs';
import { getStatus, startServer } from './server.mjs';
import { PG_BIN, PG_MODE, pgDatabase } from './pg.mjs';
import { pgQuoteNames, q, sqliteRows } from './sqlite.mjs';
import { waitFor } from './wait.mjs';

/*
 * Starts mcpsubd on port with database dbPath (e.g. after another server
 * on that port stopped); resolves once /healthz answers, retrying the bind
 * meanwhile (the old server's socket may linger a moment). ownDirs are
 * directories removed when it stops, besides its own (the first server's,
 * kept for its database).
 */
export function startServerOn(port, dbPath, { args = [], ownDirs = [], healthTimeoutMs = 10000 } = {}) {
  return startServer({ port, db: dbPath, args, ownDirs, healthTimeoutMs });
}

/*
 * Stops srv (SIGTERM, clean exit required) keeping its database, then
 * starts a new process on the same port and database. The new handle
 * removes the old one's directories when it stops.
 */
export async function restartServer(srv, { args = [] } = {}) {
  await srv.stop({ keepDir: true });
  return startServerOn(srv.port, srv.dbPath, { args, ownDirs: srv.ownDirs });
}

/* REST write: PUT (replace), PATCH, POST (collection) or DELETE; asserts a 2xx answer. */
export async function rest(port, method, urlPath, body) {
  const opts = { method, path: urlPath, headers: {} };
  if (body !== undefined) {
    opts.body = JSON.stringify(body);
    opts.headers['Content-Type'] = 'application/json';
  }
  const res = await request(port, opts);
  assert.ok(res.status >= 200 && res.status < 300, `${method} ${urlPath}: ${res.status} ${res.text}`);
  return res;
}

/* A full Product row for REST PUT / put_record. */
export function product(sku, fields = {}) {
  return { sku, name: `Product ${sku}`, price_cents: 100, category: 'tools', in_stock: 1, ...fields };
}

/* Audit rows (seq, tbl, key, op) with seq > after, in order; only table tbl (and key) when given. */
export function auditAfter(db, after = 0, { tbl, key } = {}) {
  let where = `seq > ${Number(after)}`;
  if (tbl !== undefined) where += ` AND tbl = ${q(tbl)}`;
  if (key !== undefined) where += ` AND key = ${q(String(key))}`;
  return sqliteRows(db, `SELECT seq, tbl, key, op FROM audit_log WHERE ${where} ORDER BY seq`);
}

export function auditMax(db) {
  return sqliteRows(db, 'SELECT coalesce(max(seq), 0) AS m FROM audit_log')[0].m;
}

/* Waits until /status satisfies every field of want (exact values). Returns the status. */
export async function waitStatus(port, want, { timeoutMs = 5000 } = {}) {
  let last;
  try {
    return await waitFor(
      async () => {
        last = await getStatus(port);
        return Object.entries(want).every(([k, v]) => last[k] === v) ? last : undefined;
      },
      { timeoutMs, message: `/status ${JSON.stringify(want)}` },
    );
  } catch (err) {
    throw new Error(`${err.message.split(';')[0]}; last /status: ${JSON.stringify(last)}`);
  }
}



/*
 * Runs sql with the sqlite3 CLI in the background (the test keeps running
 * while another process commits). SQL goes through stdin, so a script may
 * be long. Resolves with stdout; rejects with stderr on failure.
 */
export function sqliteAsync(db, sql, { timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    // On the PostgreSQL suite, psql on the database standing for the file (lib/pg.mjs).
    const child = PG_MODE
      ? spawn(path.join(PG_BIN, 'psql'), ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', pgDatabase(db)], { stdio: ['pipe', 'pipe', 'pipe'] })
      : spawn('sqlite3', ['-batch', '-bail', '-cmd', '.timeout 5000', db], { stdio: ['pipe', 'pipe', 'pipe'] });
    if (PG_MODE) sql = pgQuoteNames(sql);
    let out = '';
    let err = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stdout.setEncoding('utf8').on('data', (d) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d) => (err += d));
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`sqlite3 ${db} exited ${code}/${signal}: ${err}`));
    });
    child.stdin.end(sql);
  });
}
