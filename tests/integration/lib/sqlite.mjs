// The sqlite3 CLI as an independent reader and writer of the server's
// database: what an operator or another application would do. A busy
// timeout rides out the server's own write transactions (WAL mode). On the
// PostgreSQL suite (lib/pg.mjs) the same calls run psql on the database
// that stands for the file, so the SQL a test sends must be portable.

import { execFileSync } from 'node:child_process';

import { PG_MODE, pgDatabase, psql } from './pg.mjs';

const BUSY_MS = 5000;

/* Runs sql on db with the sqlite3 CLI; returns stdout (text). Throws with stderr on failure. */
/*
 * The suite's SQL names tables as SQLite lets it (case-insensitively:
 * INSERT INTO Product); PostgreSQL folds unquoted names to lower case, so
 * on it every mixed-case name outside a string literal ("Product",
 * "StockEvent", not INSERT or sku) is quoted.
 */
export function pgQuoteNames(sql) {
  return sql
    .split(/('(?:[^']|'')*'|"[^"]*")/)
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/\b[A-Z][A-Za-z0-9_]*[a-z][A-Za-z0-9_]*\b/g, (w) => `"${w}"`)))
    .join('');
}

export function sqlite(db, sql, { json = false } = {}) {
  if (PG_MODE) {
    sql = pgQuoteNames(sql);
    const uri = pgDatabase(db);
    if (!json) return psql(uri, sql);
    const query = sql.trim().replace(/;$/, '');
    return psql(uri, `SELECT coalesce(json_agg(r), '[]') FROM (${query}) r`);
  }
  const args = ['-batch', '-bail', '-cmd', `.timeout ${BUSY_MS}`];
  if (json) args.push('-json');
  args.push(db, sql);
  try {
    return execFileSync('sqlite3', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 20000 });
  } catch (err) {
    throw new Error(`sqlite3 ${db} ${JSON.stringify(sql)} failed: ${err.stderr || err.message}`);
  }
}

/* Runs a query and returns its rows as objects (sqlite3 -json). */
export function sqliteRows(db, sql) {
  const out = sqlite(db, sql, { json: true }).trim();
  const rows = out === '' ? [] : JSON.parse(out);
  // PostgreSQL's json and jsonb columns arrive parsed; SQLite keeps JSON as text.
  if (PG_MODE)
    for (const r of rows) for (const [k, v] of Object.entries(r)) if (v !== null && typeof v === 'object') r[k] = JSON.stringify(v);
  return rows;
}

/* SQL string literal. */
export function q(s) {
  return `'${String(s).replace(/'/g, "''")}'`;
}

/* SQL: a session's subscriptions as the JSON list its row stands for (URIs, or {uri, debounce}). */
export const SUBSCRIPTIONS_OF = (session) =>
  PG_MODE
    ? `(SELECT coalesce(json_agg(CASE WHEN debounce IS NULL THEN to_json(uri) ELSE json_build_object('uri', uri, 'debounce', debounce::json) END ORDER BY uri), '[]')::text FROM mcpsub_subscription WHERE session = ${session})`
    : `(SELECT json_group_array(CASE WHEN debounce IS NULL THEN uri ELSE json_object('uri', uri, 'debounce', json(debounce)) END) FROM mcpsub_subscription WHERE session = ${session})`;

/* A session's row, with its subscriptions (rows of mcpsub_subscription) as one JSON list. */
export function sessionRow(db, id) {
  return sqliteRows(db, `SELECT *, ${SUBSCRIPTIONS_OF('mcp_session.id')} AS subscriptions FROM mcp_session WHERE id = ${q(id)}`)[0];
}

/* SQL: member name of a JSON text (SQLite) or jsonb (PostgreSQL) column col, as a scalar. */
export const jsonMember = (col, name) => (PG_MODE ? `(${col} ->> '${name}')` : `json_extract(${col}, '$.${name}')`);
