// Helpers of the subscription tests: a server restart on the same port
// and database (what a session and its subscriptions must survive), REST
// writes, the audit log as the sqlite3 CLI sees it, and /status waits.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';

import { request } from './raw.mjs';
import { EXAMPLE_SCHEMA, MCPSUBD, getStatus, httpGet, makeTempDir } from './server.mjs';
import { q, sqliteRows } from './sqlite.mjs';
import { sleep, waitFor, withTimeout } from './wait.mjs';

const live = new Set();
process.on('exit', () => {
  for (const s of live) {
    try {
      s.child.kill('SIGKILL');
    } catch {
      /* gone */
    }
  }
});

/*
 * A server started on a given port and database (e.g. after another one
 * on that port stopped): the same surface as startServer's handle (port,
 * base, dbPath, dir, stop, kill, stderrTail). ownDirs are directories
 * removed when it stops (the first server's, kept for its database).
 */
class RespawnedServer {
  constructor(child, { port, dbPath, dir, argv, ownDirs }) {
    this.child = child;
    this.port = port;
    this.base = `http://127.0.0.1:${port}`;
    this.url = `${this.base}/mcp`;
    this.dbPath = dbPath;
    this.dir = dir;
    this.argv = argv;
    this.ownDirs = ownDirs;
    this._stderr = '';
    this.exit = null;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        resolve(this.exit);
      });
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => {
      this._stderr = (this._stderr + d).slice(-(1 << 20));
    });
    child.stdout.resume();
    this._stopped = null;
  }

  stderrTail(n = 8000) {
    return this._stderr.length > n ? `…${this._stderr.slice(-n)}` : this._stderr;
  }

  /* SIGTERM; requires exit code 0. keepDir: leave the directories (and database) in place. */
  stop({ timeoutMs = 10000, keepDir = false } = {}) {
    if (!this._stopped) this._stopped = this._stop(timeoutMs, keepDir);
    return this._stopped;
  }

  async _stop(timeoutMs, keepDir) {
    if (!this.exit) this.child.kill('SIGTERM');
    let result;
    try {
      result = await withTimeout(this.exited, timeoutMs, 'server exit after SIGTERM');
    } catch {
      await this.kill();
      throw new Error(`mcpsubd ${this.argv.join(' ')} did not exit within ${timeoutMs} ms\n${this.stderrTail()}`);
    }
    if (!keepDir) for (const d of this.ownDirs) fs.rmSync(d, { recursive: true, force: true });
    if (result.code !== 0) {
      throw new Error(`mcpsubd ${this.argv.join(' ')} exited with ${result.code}/${result.signal}\n${this.stderrTail(20000)}`);
    }
    return result;
  }

  kill() {
    if (!this.exit) this.child.kill('SIGKILL');
    return this.exited;
  }
}

/*
 * Starts mcpsubd on port with database dbPath; resolves once /healthz
 * answers. Retries the bind for a while (the old server's socket may
 * linger a moment).
 */
export async function startServerOn(port, dbPath, { args = [], ownDirs = [], healthTimeoutMs = 10000 } = {}) {
  const dir = makeTempDir('mcpsub-respawn-');
  const argv = ['--listen', `127.0.0.1:${port}`, '--db', dbPath, '--schema', EXAMPLE_SCHEMA, '--log-level', 'debug', ...args];
  const deadline = Date.now() + healthTimeoutMs;
  for (;;) {
    const child = spawn(MCPSUBD, argv, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    const srv = new RespawnedServer(child, { port, dbPath, dir, argv, ownDirs: [dir, ...ownDirs] });
    live.add(srv);
    for (;;) {
      if (srv.exit) break;
      try {
        const res = await httpGet(port, '/healthz', { timeoutMs: 1000 });
        if (res.status === 200) return srv;
      } catch {
        /* not yet */
      }
      if (Date.now() >= deadline) {
        await srv.kill();
        throw new Error(`restarted server not healthy on port ${port}\n${srv.stderrTail()}`);
      }
      await sleep(20);
    }
    if (!/address already in use/i.test(srv.stderrTail()) || Date.now() >= deadline) {
      throw new Error(`restarted server exited (${JSON.stringify(srv.exit)})\n${srv.stderrTail()}`);
    }
    await sleep(100);
  }
}

/*
 * Stops srv (SIGTERM, clean exit required) keeping its database, then
 * starts a new process on the same port and database. The new handle
 * removes the old one's directories when it stops.
 */
export async function restartServer(srv, { args = [] } = {}) {
  await srv.stop({ keepDir: true });
  return startServerOn(srv.port, srv.dbPath, { args, ownDirs: srv.ownDirs ?? [srv.dir] });
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
    const child = spawn('sqlite3', ['-batch', '-bail', '-cmd', '.timeout 5000', db], { stdio: ['pipe', 'pipe', 'pipe'] });
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
