// Another process holding the database's write lock, as a backup or a
// batch job would.

import { spawn } from 'node:child_process';

import { waitFor } from './wait.mjs';

/*
 * Runs the sqlite3 CLI holding the write lock for holdMs: BEGIN IMMEDIATE,
 * an insert, a pause, COMMIT. Resolves { locked, done } once the lock is
 * held (locked) and when the process has committed and exited (done).
 * It waits up to 5 s for the lock itself: mcpsubd may be in the middle of
 * a write of its own (a session or subscription row) when it starts.
 */
export function holdLock(db, holdMs, sql) {
  const child = spawn('sqlite3', ['-batch', '-bail', db], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const done = new Promise((resolve, reject) => {
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`sqlite3 exited ${code}: ${out}`))));
  });
  child.stdin.write(`.timeout 5000\nBEGIN IMMEDIATE;\n${sql}\nSELECT 'locked';\n.shell sleep ${holdMs / 1000}\nCOMMIT;\n`);
  child.stdin.end();
  const locked = waitFor(() => out.includes('locked'), { timeoutMs: 5000, message: 'the lock to be held' });
  return { locked, done };
}

