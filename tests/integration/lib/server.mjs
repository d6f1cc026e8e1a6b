// Starts the real mcpsubd on 127.0.0.1 for one test file, with its own
// temporary database, and stops it checking that it exits cleanly (under
// ASan a leak or an error report turns the exit status non-zero, which must
// fail the test that stops it).
//
// Environment (set by tests/integration/meson.build; the fallbacks let a
// developer run one file by hand from the repo after `ninja -C build`):
//   MCPSUBD             path of the server binary
//   MCPSUBCTL           path of the CLI binary
//   MCPSUB_SOURCE_ROOT  the repository (for schema/example.sql)

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { PG_MODE, dbTarget } from './pg.mjs';
import { pgQuoteNames } from './sqlite.mjs';
import { sleep, withTimeout } from './wait.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

export const SOURCE_ROOT = process.env.MCPSUB_SOURCE_ROOT || path.resolve(here, '..', '..', '..');
export const MCPSUBD = process.env.MCPSUBD || path.join(SOURCE_ROOT, 'build', 'mcpsubd');
export const MCPSUBCTL = process.env.MCPSUBCTL || path.join(SOURCE_ROOT, 'build', 'mcpsubctl');
export const EXAMPLE_SCHEMA = process.env.MCPSUB_EXAMPLE_SCHEMA || path.join(SOURCE_ROOT, 'schema', 'example.sql');

const STDERR_KEEP = 1 << 20; // bytes of server stderr kept for messages
const live = new Set(); // servers not yet stopped, killed if the test process dies

process.on('exit', () => {
  for (const s of live) {
    try {
      s.child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
});

/* A port that was free a moment ago on 127.0.0.1. */
function unboundPort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/*
 * Ports freePort gave out in this process: not given again. The kernel may
 * hand a port it just released out twice, and the first taker need not
 * have bound it yet (a load balancer's port is picked before the servers
 * behind it start).
 */
const givenPorts = new Set();

/* A port that was free a moment ago on 127.0.0.1, and not given out before by this process. */
export async function freePort() {
  for (let attempt = 1; ; attempt++) {
    const port = await unboundPort();
    if (!givenPorts.has(port) || attempt === 20) {
      givenPorts.add(port);
      return port;
    }
  }
}

export function makeTempDir(prefix = 'mcpsub-it-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

/* One GET with a fresh connection (no keep-alive pool): { status, body }. */
export function httpGet(port, urlPath, { timeoutMs = 2000, headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: urlPath, method: 'GET', agent: false, headers: { Connection: 'close', ...headers } },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`GET ${urlPath} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

/* GET /status parsed. */
export async function getStatus(port) {
  const res = await httpGet(port, '/status');
  if (res.status !== 200) throw new Error(`/status answered ${res.status}: ${res.body}`);
  return JSON.parse(res.body);
}

function tail(text, n = 8000) {
  return text.length > n ? `…${text.slice(-n)}` : text;
}

class ServerHandle {
  constructor({ child, port, dir, dbPath, argv, ownDirs }) {
    this.child = child;
    this.port = port;
    this.dir = dir;
    this.dbPath = dbPath;
    this.argv = argv;
    this.ownDirs = ownDirs; // removed at stop() unless keepDir
    this.base = `http://127.0.0.1:${port}`;
    this.url = `${this.base}/mcp`;
    this._stderr = '';
    this.exit = null; // { code, signal } once exited
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        resolve(this.exit);
      });
    });
    const keep = (d) => {
      this._stderr += d;
      if (this._stderr.length > 2 * STDERR_KEEP) this._stderr = this._stderr.slice(-STDERR_KEEP);
    };
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', keep);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', keep);
    this._stopped = null;
  }

  stderr() {
    return this._stderr;
  }

  /* Last part of stderr, for assertion messages. */
  stderrTail(n = 8000) {
    return tail(this._stderr, n);
  }

  describe() {
    return `mcpsubd ${this.argv.join(' ')}`;
  }

  /*
   * SIGTERM, then requires exit code 0 within timeoutMs. Throws (failing the
   * calling test) otherwise, with the server's stderr. keepDir: leave its
   * directories (and so its database) in place. Idempotent: later calls
   * return the first call's outcome.
   */
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
      throw new Error(`${this.describe()} did not exit within ${timeoutMs} ms of SIGTERM\n--- stderr ---\n${this.stderrTail()}`);
    }
    if (!keepDir) for (const d of this.ownDirs) fs.rmSync(d, { recursive: true, force: true });
    if (result.code !== 0) {
      throw new Error(
        `${this.describe()} exited with code ${result.code} signal ${result.signal} (expected 0)\n--- stderr ---\n${this.stderrTail(20000)}`,
      );
    }
    return result;
  }

  /* Kills without checking (cleanup after a failure). */
  kill() {
    if (!this.exit) this.child.kill('SIGKILL');
    return this.exited;
  }
}

const ADDR_IN_USE = /address already in use|EADDRINUSE/i;

/*
 * Starts mcpsubd in a fresh temporary directory (its cwd). Options:
 *   args     extra command-line arguments (e.g. ['--max-body', '2048'])
 *   db       database path, e.g. an earlier server's (default <dir>/test.db)
 *   schema   schema file (default schema/example.sql of the source tree)
 *   env      extra environment variables
 *   port     listen on this port (e.g. after another server on it stopped);
 *            while the bind fails with "address already in use" (the old
 *            socket may linger a moment) it is retried every 100 ms until
 *            healthTimeoutMs has passed. Default: a free port, and another
 *            one (up to 3 in all) if something takes it first.
 *   ownDirs  more directories stop() removes along with the server's own
 *            (e.g. an earlier server's, kept for its database); the
 *            handle's ownDirs lists them all.
 *   healthTimeoutMs  (default 10000)
 * Resolves once GET /healthz answers 200; rejects with the server's stderr
 * if it exits first or is not healthy in time.
 */
export async function startServer({ port, ownDirs = [], healthTimeoutMs = 10000, ...opts } = {}) {
  const deadline = Date.now() + healthTimeoutMs; // a given port: for all attempts
  for (let attempt = 1; ; attempt++) {
    try {
      if (port !== undefined) return await startOnPort(port, deadline, healthTimeoutMs, ownDirs, opts);
      return await startOnPort(await freePort(), Date.now() + healthTimeoutMs, healthTimeoutMs, ownDirs, opts);
    } catch (err) {
      // Another process (or the old server) holds the port: try again, on
      // the same port or another one. Anything else is a real failure.
      if (!err.addrInUse || (port !== undefined ? Date.now() >= deadline : attempt >= 3)) throw err;
      if (port !== undefined) await sleep(100);
    }
  }
}

async function startOnPort(port, deadline, healthTimeoutMs, ownDirs, { args = [], db, schema, env = {} }) {
  const dir = makeTempDir();
  const dbPath = db || path.join(dir, 'test.db');
  let schemaPath = schema ?? EXAMPLE_SCHEMA;
  const pgArgs = [];
  if (PG_MODE) {
    // The suite's schemas are SQLite-flavoured (Widget, not "Widget"): quoted for PostgreSQL.
    if (schemaPath !== '' && fs.existsSync(schemaPath)) {
      const quoted = path.join(dir, 'schema-pg.sql');
      fs.writeFileSync(quoted, pgQuoteNames(fs.readFileSync(schemaPath, 'utf8')));
      schemaPath = quoted;
    }
    // Where a SQLite database's control socket would be: beside its file.
    if (!args.includes('--control-socket')) pgArgs.push('--control-socket', path.join(path.dirname(dbPath), 'mcpsubd.sock'));
  }
  const argv = [
    '--listen', `127.0.0.1:${port}`,
    '--db', dbTarget(dbPath),
    '--schema', schemaPath,
    '--log-level', 'debug',
    ...pgArgs,
    ...args,
  ];
  const child = spawn(MCPSUBD, argv, {
    cwd: dir,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const server = new ServerHandle({ child, port, dir, dbPath, argv, ownDirs: [dir, ...ownDirs] });
  live.add(server);
  const spawnError = new Promise((_, reject) => child.on('error', reject));
  const fail = (message) => {
    fs.rmSync(dir, { recursive: true, force: true }); // its own directory only
    const err = new Error(`${server.describe()} ${message}\n--- stderr ---\n${server.stderrTail()}`);
    err.addrInUse = ADDR_IN_USE.test(server.stderrTail());
    return err;
  };

  for (;;) {
    if (server.exit) throw fail(`exited early (code ${server.exit.code}, signal ${server.exit.signal})`);
    try {
      const res = await Promise.race([httpGet(port, '/healthz', { timeoutMs: 1000 }), spawnError]);
      if (res.status === 200) return server;
    } catch (err) {
      if (err && err.code === 'ENOENT' && err.syscall && err.syscall.startsWith('spawn')) {
        throw new Error(`cannot run ${MCPSUBD}: ${err.message} (build first, or set MCPSUBD)`);
      }
      /* not listening yet */
    }
    if (Date.now() >= deadline) {
      await server.kill();
      throw fail(`not healthy within ${healthTimeoutMs} ms`);
    }
    await sleep(20);
  }
}

/* One request on a server's control socket, as mcpsubctl sends it: a JSON line out, one back. */
export function controlCall(server, request) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(path.join(path.dirname(server.dbPath), 'mcpsubd.sock'));
    let text = '';
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.write(`${JSON.stringify(request)}\n`));
    sock.on('data', (d) => {
      text += d;
      if (text.includes('\n')) {
        sock.end();
        resolve(JSON.parse(text.slice(0, text.indexOf('\n'))));
      }
    });
    sock.on('error', reject);
  });
}
