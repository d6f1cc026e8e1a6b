// The integration suite on PostgreSQL. With MCPSUB_TEST_STORE=postgres (the
// "integration-pg" suite sets it), every database a test names by a SQLite
// file path is a database of its own in one throw-away PostgreSQL cluster,
// started by this test process on first use (tests/lib/pg_cluster, on
// 127.0.0.1) and stopped when it exits. The same path always names the same
// database, so a test that restarts a server on "its file", or reads the
// server's rows with sqlite() (lib/sqlite.mjs, which then runs psql), needs
// no change.

import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const SOURCE_ROOT = process.env.MCPSUB_SOURCE_ROOT || path.resolve(here, '..', '..', '..');
const PG_CLUSTER = path.join(SOURCE_ROOT, 'tests', 'lib', 'pg_cluster');
export const PG_BIN = process.env.PG_BIN || '/usr/lib/postgresql/15/bin';

export const PG_MODE = process.env.MCPSUB_TEST_STORE === 'postgres';

let cluster = null; // { dir, uri: URL }
const created = new Set();

/* The cluster of this test process, started on first use. */
export function pgCluster() {
  if (cluster) return cluster;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mcpsub-pg-'));
  const uri = execFileSync(PG_CLUSTER, ['start', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 60000 }).trim();
  cluster = { dir, uri: new URL(uri) };
  const stop = () => {
    try {
      execFileSync(PG_CLUSTER, ['stop', dir], { stdio: 'ignore', timeout: 30000 });
    } catch {
      /* already gone */
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', stop);
  // A test runner's timeout ends the process with a signal, which skips 'exit': the cluster too.
  for (const [sig, n] of [['SIGTERM', 15], ['SIGINT', 2]])
    process.once(sig, () => {
      stop();
      process.exit(128 + n);
    });
  return cluster;
}

/*
 * Stops the cluster as an operator would (fast shutdown: every client is
 * disconnected) and keeps it, data and port, for pgResume. For the outage
 * tests: a server's connections break and cannot be made again meanwhile.
 */
export function pgPause() {
  execFileSync(PG_CLUSTER, ['pause', pgCluster().dir], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60000 });
}

/*
 * Freezes (SIGSTOP) or thaws (SIGCONT) every process of the cluster: a
 * server that is alive, holds its connections, and answers nothing.
 */
export function pgFreeze(frozen) {
  const pid = fs.readFileSync(path.join(pgCluster().dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0].trim();
  const sig = frozen ? '-STOP' : '-CONT';
  execFileSync('pkill', [sig, '-P', pid], { stdio: 'ignore' });
  execFileSync('kill', [sig, pid], { stdio: 'ignore' });
}

/* Starts the cluster pgPause stopped again, on the same port (the same URIs work). */
export function pgResume() {
  execFileSync(PG_CLUSTER, ['resume', pgCluster().dir], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 60000 });
}

/* Runs sql (psql, stopping at the first error) on the database whose URI is uri. */
export function psql(uri, sql, { timeoutMs = 20000 } = {}) {
  try {
    return execFileSync(path.join(PG_BIN, 'psql'), ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', uri, '-c', sql], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: timeoutMs,
    });
  } catch (err) {
    throw new Error(`psql ${JSON.stringify(sql)} failed: ${err.stderr || err.message}`);
  }
}

/*
 * Another session holding a lock, as a migration or a maintenance job would:
 * psql runs lockSql inside a transaction, holds it holdMs, then commits.
 * Resolves { locked, done }: once the lock is held, and once psql exited.
 */
export function pgHoldLock(uri, lockSql, holdMs) {
  const child = spawn(path.join(PG_BIN, 'psql'), ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-d', uri], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const done = new Promise((resolve, reject) => {
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`psql exited ${code}: ${out}`))));
  });
  child.stdin.end(`BEGIN;\n${lockSql};\nSELECT 'locked';\nSELECT pg_sleep(${holdMs / 1000});\nCOMMIT;\n`);
  const locked = new Promise((resolve, reject) => {
    const check = () => (out.includes('locked') ? resolve() : null);
    child.stdout.on('data', check);
    done.catch(reject);
  });
  return { locked, done };
}

/* The database standing for the SQLite file dbPath (created on first use): its URI. */
export function pgDatabase(dbPath) {
  const { uri } = pgCluster();
  const name = 't_' + crypto.createHash('sha1').update(path.resolve(dbPath)).digest('hex').slice(0, 20);
  const target = new URL(uri);
  target.pathname = '/' + name;
  if (!created.has(name)) {
    const exists = psql(uri.href, `SELECT 1 FROM pg_database WHERE datname = '${name}'`).trim() === '1';
    if (!exists) psql(uri.href, `CREATE DATABASE ${name}`);
    created.add(name);
  }
  return target.href;
}

/* What --db takes for the database at dbPath: the path itself, or its PostgreSQL database. */
export function dbTarget(dbPath) {
  return PG_MODE ? pgDatabase(dbPath) : dbPath;
}

/*
 * mcpsubctl's flags for the database at dbPath: --db, and on PostgreSQL the
 * control socket where a SQLite database's would be (beside the file),
 * which is where startServer puts the server's in that mode.
 */
export function ctlDbArgs(dbPath) {
  if (!PG_MODE) return ['--db', dbPath];
  return ['--db', pgDatabase(dbPath), '--control', path.join(path.dirname(dbPath), 'mcpsubd.sock')];
}
