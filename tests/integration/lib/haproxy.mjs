// A real HAProxy (Debian's `haproxy`) on 127.0.0.1 in front of several
// mcpsubd instances, for the tests of several hosts behind a load
// balancer. The configuration is generated from the same choices as
// deploy/haproxy/mcpsub.cfg (read that file for the why of each line),
// with the timings shrunk so that a test sees a dead host taken out in a
// fraction of a second:
//
//   mode 'roundrobin'  every request balanced on its own, no affinity
//   mode 'sticky'      affinity on Mcp-Session-Id: a stick table keyed on
//                      the request header, learned from the response
//                      header of initialize
//
// HAProxy runs in the foreground (`haproxy -f CFG -db`) as the test's user,
// everything (configuration, admin socket) in a temporary directory. Its
// admin socket answers `show servers state`, so a test can wait until
// HAProxy has seen a backend go down or come up.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { freePort, makeTempDir } from './server.mjs';
import { sleep, withTimeout } from './wait.mjs';

export const HAPROXY = process.env.HAPROXY || 'haproxy';

const live = new Set();
process.on('exit', () => {
  for (const h of live) {
    try {
      h.child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
});

/* Test timings: a dead backend is out after fall * inter ms; keep-alive of the SSE streams must beat timeoutServerMs. */
export const TEST_TIMINGS = Object.freeze({
  checkInterMs: 200,
  checkFall: 2,
  checkRise: 2,
  timeoutConnectMs: 1000,
  timeoutClientMs: 30000,
  timeoutServerMs: 30000,
  timeoutTunnelMs: 3600000,
});

/*
 * The configuration text. backends: [{ name, port }] (127.0.0.1);
 * port: where HAProxy listens; dir: its temporary directory (admin socket);
 * healthHost: the Host header of the health checks (one mcpsubd accepts:
 * the host of its --public-url, or a loopback name).
 */
export function haproxyConfig({ port, backends, mode = 'roundrobin', dir, healthHost = '127.0.0.1', timings = {} }) {
  if (!['roundrobin', 'sticky'].includes(mode)) throw new Error(`unknown balancing mode ${mode}`);
  const t = { ...TEST_TIMINGS, ...timings };
  const lines = [
    'global',
    '  maxconn 4096',
    `  stats socket ${path.join(dir, 'admin.sock')} mode 600 level admin`,
    '  hard-stop-after 5s',
    '',
    'defaults',
    '  mode http',
    '  option httplog',
    '  option http-no-delay',
    '  option forwardfor',
    '  option redispatch 1',
    '  retries 2',
    '  retry-on conn-failure 503',
    `  timeout connect ${t.timeoutConnectMs}ms`,
    `  timeout client ${t.timeoutClientMs}ms`,
    `  timeout server ${t.timeoutServerMs}ms`,
    `  timeout tunnel ${t.timeoutTunnelMs}ms`,
    '  timeout http-request 10s',
    '  timeout http-keep-alive 10s',
    '  timeout queue 5s',
    '',
    'frontend mcp',
    `  bind 127.0.0.1:${port}`,
    '  default_backend mcpsubd',
    '',
    'backend mcpsubd',
    '  balance roundrobin',
    '  option httpchk',
    `  http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host ${healthHost}`,
    '  http-check expect status 200',
    `  default-server check inter ${t.checkInterMs}ms fastinter ${t.checkInterMs}ms downinter ${t.checkInterMs}ms fall ${t.checkFall} rise ${t.checkRise}`,
  ];
  if (mode === 'sticky') {
    lines.push(
      '  stick-table type string len 64 size 100k expire 30m',
      '  stick match req.hdr(mcp-session-id)',
      '  stick store-request req.hdr(mcp-session-id)',
      '  stick store-response res.hdr(mcp-session-id)',
    );
  }
  for (const b of backends) lines.push(`  server ${b.name} 127.0.0.1:${b.port}`);
  return `${lines.join('\n')}\n`;
}

/* One request to the admin socket; resolves with its whole answer. */
function adminCommand(sock, command, timeoutMs = 2000) {
  return withTimeout(
    new Promise((resolve, reject) => {
      const c = net.createConnection(sock);
      let out = '';
      c.setEncoding('utf8');
      c.on('connect', () => c.write(`${command}\n`));
      c.on('data', (d) => (out += d));
      c.on('end', () => resolve(out));
      c.on('error', reject);
    }),
    timeoutMs,
    `haproxy admin: ${command}`,
  );
}

class HaproxyHandle {
  constructor({ child, port, dir, cfgPath, mode, backends }) {
    this.child = child;
    this.port = port;
    this.dir = dir;
    this.cfgPath = cfgPath;
    this.mode = mode;
    this.backends = backends;
    this.base = `http://127.0.0.1:${port}`;
    this.url = `${this.base}/mcp`;
    this.output = '';
    this.exit = null;
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        resolve(this.exit);
      });
    });
    const keep = (d) => {
      this.output += d;
      if (this.output.length > 1 << 20) this.output = this.output.slice(-(1 << 19));
    };
    child.stdout.setEncoding('utf8').on('data', keep);
    child.stderr.setEncoding('utf8').on('data', keep);
  }

  admin(command) {
    return adminCommand(path.join(this.dir, 'admin.sock'), command);
  }

  /* { name: 'UP' | 'DOWN' | ... } of every backend server, as HAProxy sees them now. */
  async serverStates() {
    const csv = await this.admin('show stat');
    const lines = csv.split('\n').filter((l) => l && !l.startsWith('#'));
    const states = {};
    for (const l of lines) {
      const f = l.split(',');
      if (f[0] === 'mcpsubd' && f[1] !== 'BACKEND' && f[1] !== 'FRONTEND') states[f[1]] = f[17].split(' ')[0];
    }
    return states;
  }

  /* Waits until HAProxy's health checks say server `name` is `state` ('UP' or 'DOWN'). */
  async waitServer(name, state, { timeoutMs = 10000 } = {}) {
    const deadline = Date.now() + timeoutMs;
    let last;
    for (;;) {
      last = await this.serverStates().catch((err) => ({ error: String(err) }));
      if (last[name] === state) return;
      if (this.exit) throw new Error(`haproxy exited (${JSON.stringify(this.exit)}) waiting for ${name} ${state}\n--- haproxy output ---\n${this.output.slice(-4000)}`);
      if (Date.now() >= deadline) throw new Error(`haproxy: ${name} not ${state} within ${timeoutMs} ms: ${JSON.stringify(last)}`);
      await sleep(50);
    }
  }

  /* Entries of the stick table (sticky mode): { sessionId: serverId }. */
  async stickEntries() {
    const out = await this.admin('show table mcpsubd');
    const entries = {};
    for (const m of out.matchAll(/key=(\S+) .*server_id=(\d+)/g)) entries[m[1]] = Number(m[2]);
    return entries;
  }

  describe() {
    return `haproxy (${this.mode}) on ${this.port} -> ${this.backends.map((b) => `${b.name}:${b.port}`).join(', ')}`;
  }

  /* Stops HAProxy (SIGTERM: a hard stop, open streams are cut) and removes its directory. */
  async stop({ timeoutMs = 5000 } = {}) {
    if (!this.exit) this.child.kill('SIGTERM');
    try {
      await withTimeout(this.exited, timeoutMs, 'haproxy exit');
    } catch {
      this.child.kill('SIGKILL');
      await this.exited;
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/*
 * Starts HAProxy in front of backends ([{ name, port }]) in balancing mode
 * `mode`. port: default a free one (pick it first with freePort() when the
 * backends need to know it, e.g. for --public-url). Resolves once it accepts
 * connections and its health checks see every backend up (waitUp), with a
 * handle: port, base, url, serverStates(), waitServer(), stop().
 */
export async function startHaproxy({ backends, mode = 'roundrobin', port, healthHost, timings, waitUp = true, timeoutMs = 10000 }) {
  const dir = makeTempDir('mcpsub-haproxy-');
  const listenPort = port ?? (await freePort());
  const cfgPath = path.join(dir, 'haproxy.cfg');
  fs.writeFileSync(cfgPath, haproxyConfig({ port: listenPort, backends, mode, dir, healthHost, timings }));
  const child = spawn(HAPROXY, ['-f', cfgPath, '-db'], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  const h = new HaproxyHandle({ child, port: listenPort, dir, cfgPath, mode, backends });
  live.add(h);
  const spawnError = new Promise((_, reject) => child.on('error', reject));
  spawnError.catch(() => {});
  const deadline = Date.now() + timeoutMs;
  const fail = async (why) => {
    await h.stop();
    return new Error(`${h.describe()}: ${why}\n--- haproxy output ---\n${h.output.slice(-4000)}`);
  };
  for (;;) {
    if (h.exit) throw await fail(`exited early (${JSON.stringify(h.exit)})`);
    const accepts = await Promise.race([
      spawnError,
      new Promise((resolve) => {
        const c = net.createConnection({ host: '127.0.0.1', port: listenPort });
        c.on('connect', () => {
          c.destroy();
          resolve(true);
        });
        c.on('error', () => resolve(false));
      }),
    ]).catch((err) => {
      throw new Error(`cannot run ${HAPROXY}: ${err.message} (install Debian's haproxy, or set HAPROXY)`);
    });
    // Its own admin socket answering too: the port accepting could be another process's (a port
    // picked free and taken before HAProxy bound it makes HAProxy exit, reported above).
    if (accepts && (await h.admin('show info').then(() => true, () => false))) break;
    if (Date.now() >= deadline) throw await fail(`not accepting within ${timeoutMs} ms`);
    await sleep(20);
  }
  if (waitUp) for (const b of backends) await h.waitServer(b.name, 'UP', { timeoutMs: Math.max(1000, deadline - Date.now()) });
  return h;
}
