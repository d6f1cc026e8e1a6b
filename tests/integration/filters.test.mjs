// Filter operators in resource URIs, black-box: col=gt=, ge, lt, le, ne,
// sw, ct and col=v1|v2, on integer, real, text and untyped columns with
// NULLs. The same URI must select the same rows everywhere: a REST list
// and resources/read (SQL) and a subscription's notifications (evaluated
// in C on each change) agree, row for row, for every operator; parse
// errors are refused with the reason. On PostgreSQL (the integration-pg
// suite) the same, on the typed columns.

import test, { after, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { PG_MODE } from './lib/pg.mjs';
import { makeTempDir, startServer } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { mcpPost, request } from './lib/raw.mjs';
import { sqlite } from './lib/sqlite.mjs';
import { EventStream } from './lib/sse.mjs';
import { sleep, waitFor } from './lib/wait.mjs';

let srv;
let dir;

const ROWS = [
  [1, 'apple', 3, 1.5, 'red'],
  [2, 'apricot', 10, 2.25, 'orange'],
  [3, 'banana', 7, null, 'yellow'],
  [4, 'Blueberry', null, 9.99, 'blue'],
  [5, 'cherry', 12, 0.5, 'red'],
  [6, null, 5, 5, 'a|b'],
];
// Column u has no type: it keeps the number 5 and the text '5' apart, and a blob as written
// (shown, and compared, as its hex text).
const UNTYPED = [5, '5', { blob: '414243' }, { raw: '1152921504606846977' }, null, null];
// Columns ci (NOCASE) and rt (RTRIM): filters compare their text byte for byte all the same.
const COLLATED = [['Apple', 'a '], ['apple', 'a'], [null, null], [null, null], [null, null], [null, null]];
// Numbers a double does not hold exactly: integers beyond 2^53 (big) and reals of 16 and 17
// significant digits (x) compare exactly, as SQL compares them; and a row with an infinite
// REAL (SQLite's inf) is heard of like any other.
const raw = (text) => ({ raw: text });
const BIG = ['1152921504606846976', '1152921504606846977', '9007199254740993', '-1152921504606846977', '5',
  '9007199254740992'].map(raw);
const REALS = [raw('0.30000000000000004'), 0.3, null, raw('1e-300'), raw('123456789.12345678'), 0.1];
const INFINITE = [null, null, raw('1e999'), null, raw('-1e999'), null];
// PostgreSQL's non-finite values, in a double precision column (inf) and a numeric one (num):
// its JSON spells them as strings, and they compare as SQL compares them (NaN above every
// number, infinity included, and equal to NaN), not as text.
const PG_NONFINITE = [null, null, raw("'Infinity'"), raw("'NaN'"), raw("'-Infinity'"), 2.5];

/* A small deterministic generator (mulberry32): the same rows and filters every run. */
function generator(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return (list) => list[Math.floor(next() * list.length)];
}

// Random rows for the random filters' test (table Rnd): columns of every kind the stores tell
// apart, on PostgreSQL its typed ones.
const RANDOM_POOLS = {
  i: [null, 0, 1, 5, -3, 10, ...(PG_MODE ? [] : ["'5x'"])],
  r: [null, 0.5, 5, 2.25, -1, 1e3, '0.30000000000000004', ...(PG_MODE ? ["'Infinity'", "'NaN'", "'-Infinity'"] : [])],
  b: [null, 5, '9007199254740993', '1152921504606846976', '1152921504606846977', '-1152921504606846977'],
  t: [null, "'a'", "'B'", "'apple'", "'Apple'", "'5'", "' 5'", "''", "'a b'"],
  ...(PG_MODE ? {} : {
    n: [null, "'apple'", "'Apple'", "'B'", "'b'", "'5'"],
    u: [null, 5, "'5'", 5.5, "'x'", "X'41'", "'apple'"],
  }),
};
const RANDOM_ROWS = (() => {
  const pick = generator(20261127);
  return Array.from({ length: 40 }, (_, k) => [k + 1, ...Object.values(RANDOM_POOLS).map((pool) => pick(pool))]);
})();

function randomTableSql() {
  const types = { i: 'INTEGER', r: PG_MODE ? 'DOUBLE PRECISION' : 'REAL', b: PG_MODE ? 'BIGINT' : 'INTEGER', t: 'TEXT', n: 'TEXT COLLATE NOCASE', u: '' };
  const cols = Object.keys(RANDOM_POOLS);
  return `CREATE TABLE Rnd (id INTEGER PRIMARY KEY, ${cols.map((c) => `${c} ${types[c]}`).join(', ')}, touch INTEGER NOT NULL DEFAULT 0);
    INSERT INTO Rnd (id, ${cols.join(', ')}) VALUES ${RANDOM_ROWS.map((r) => `(${r.map((v) => (v === null ? 'NULL' : v)).join(', ')})`).join(', ')};`;
}

before(async () => {
  dir = makeTempDir('mcpsub-filters-');
  const schema = path.join(dir, 'schema.sql');
  const sql = (v) => (v === null ? 'NULL' : typeof v === 'string' ? `'${v}'` : v.blob ? `X'${v.blob}'` : v.raw ?? v);
  if (PG_MODE) { // the typed columns only: PostgreSQL has no untyped ones, nor these collations
    const values = ROWS.map((r, i) => `(${[...r, 'n', BIG[i], REALS[i], PG_NONFINITE[i], PG_NONFINITE[i]].map(sql)
      .join(', ')})`).join(', ');
    fs.writeFileSync(schema, `CREATE TABLE Item (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, price DOUBLE PRECISION,
        tag TEXT, note TEXT, big BIGINT, x DOUBLE PRECISION, inf DOUBLE PRECISION, num NUMERIC);
      INSERT INTO Item VALUES ${values};
      ${randomTableSql()}`);
  } else {
    const values = ROWS.map((r, i) => `(${[...r, 'n', UNTYPED[i], ...COLLATED[i], BIG[i], REALS[i], INFINITE[i]].map(sql)
      .join(', ')})`).join(', ');
    fs.writeFileSync(schema, `CREATE TABLE Item (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, price REAL, tag TEXT, note, u,
        ci TEXT COLLATE NOCASE, rt TEXT COLLATE RTRIM, big INTEGER, x REAL, inf REAL);
      INSERT INTO Item VALUES ${values};
      CREATE TABLE Kc (k TEXT PRIMARY KEY COLLATE NOCASE, v INTEGER NOT NULL DEFAULT 0);
      INSERT INTO Kc VALUES ('Apple', 0);
      ${randomTableSql()}`);
  }
  srv = await startServer({ schema });
});

after(async () => {
  await srv?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

/* Ids selected by a query string, through the REST list. */
async function restIds(query) {
  const res = await request(srv.port, { path: `/Item?${query}` });
  assert.equal(res.status, 200, `${query}: ${res.text}`);
  return res.json().map((r) => r.id).sort((a, b) => a - b);
}

const ALL_CASES = [
  ['qty=gt=5', [2, 3, 5]],
  ['qty=ge=10', [2, 5]],
  ['qty=lt=7', [1, 6]],
  ['qty=le=3', [1]],
  ['qty=ne=10', [1, 3, 5, 6]], // NULL matches no operator
  ['price=gt=1.5', [2, 4, 6]],
  ['price=lt=1e1', [1, 2, 4, 5, 6]],
  ['name=gt=b', [3, 5]], // text compares by bytes: 'B' < 'a' < 'b'
  ['name=lt=B', []],
  ['name=sw=ap', [1, 2]],
  ['name=ct=err', [4, 5]],
  ['name=sw=B', [4]], // case-sensitive
  ['tag=red|blue', [1, 4, 5]],
  ['tag=eq=red|blue', [1, 4, 5]], // equality spelled out: the same filter
  ['name=eq=apple', [1]],
  ['qty=eq=10', [2]],
  // Several filters on one column, all of which hold: ranges, exclusions, none at all.
  ['qty=ge=5&qty=lt=11', [2, 3, 6]],
  ['qty=gt=3&qty=le=7&qty=ne=5', [3]],
  ['name=ge=b&name=lt=c', [3]],
  ['tag=ne=red&tag=ne=blue', [2, 3, 6]],
  ['qty=3&qty=10', []],
  ['name=sw=ap&name=ct=ri', [2]],
  ['tag=a%7Cb', [6]], // a literal '|'
  ['qty=3|12', [1, 5]],
  ['qty=gt=4&tag=red', [5]],
  ['qty=gt=x', []], // a number column against text: numbers sort before text
  ['qty=lt=x', [1, 2, 3, 5, 6]],
  // A value is a number exactly when SQLite reads it as one: spaces around it are read
  // over, hexadecimal is text.
  ['qty=12%20', [5]],
  ['qty=lt=%207.5', [1, 3, 6]],
  ['qty=0xC', []],
  ['qty=gt=0x5', []],
  // A column without a type converts nothing: its number 5 is not the text 5.
  ['u=5', [2]],
  ['u=ne=5', [1, 3, 4]],
  ['u=5|7', [2]],
  ['u=lt=x', [1, 2, 3, 4]],
  ['u=1152921504606846977', []], // the integer is no text there
  ['u=sw=1152', []],
  ['u=414243', [3]],
  ['u=sw=41', [3]],
  ['u=ct=24', [3]],
  ['u=gt=4', [2, 3]],
  ['ci=apple', [2]],
  ['ci=ne=apple', [1]],
  ['ci=gt=B', [2]],
  ['ci=apple|x', [2]],
  ['rt=a', [2]],
  ['rt=gt=a', [1]],
  ['big=1152921504606846977', [2]],
  ['big=%201152921504606846977', [2]],
  ['big=1152921504606846976.0', [1]], // a real: 2^60 exactly
  ['big=1152921504606846977|5', [2, 5]],
  ['big=ne=1152921504606846977', [1, 3, 4, 5, 6]],
  ['big=gt=1152921504606846976', [2]],
  ['big=gt=1152921504606846977', []],
  ['big=lt=1152921504606846977', [1, 3, 4, 5, 6]],
  ['big=lt=0', [4]],
  ['big=sw=1152', []], // a number is no text
  ['big=9007199254740993', [3]],
  ['big=ne=9007199254740993', [1, 2, 4, 5, 6]],
  ['big=gt=9007199254740992', [1, 2, 3]],
  ['big=le=9007199254740992', [4, 5, 6]],
  ['x=0.30000000000000004', [1]],
  ['x=gt=0.3', [1, 5]],
  ['x=le=0.3', [2, 4, 6]],
  ['x=123456789.12345678', [5]],
  ['inf=gt=1e308', [3]],
  ['inf=lt=0', [5]],
  ['inf=1e999', [3]],
];
// PostgreSQL's infinities and NaN (PG_NONFINITE), in both of its numeric kinds.
const PG_NONFINITE_CASES = ['inf', 'num'].flatMap((c) => [
  [`${c}=gt=1e308`, [3, 4]],
  [`${c}=ge=1e999`, [3, 4]],
  [`${c}=1e999`, [3]],
  [`${c}=le=1e999`, [3, 5, 6]],
  [`${c}=lt=0`, [5]],
  [`${c}=gt=2.5`, [3, 4]],
  [`${c}=ne=2.5`, [3, 4, 5]],
  [`${c}=2.5|1e999`, [3, 6]],
  [`${c}=NaN`, []], // text, against a numeric column: equal to no number
  [`${c}=ne=Infinity`, [3, 4, 5, 6]],
  [`${c}=sw=N`, []], // a number is no text
  [`${c}=ct=nfin`, []],
]);
// On PostgreSQL, the typed columns' cases.
const CASES = PG_MODE ? [...ALL_CASES.filter(([q]) => !/^(u|ci|rt|inf)=/.test(q)), ...PG_NONFINITE_CASES] : ALL_CASES;

test('each operator selects the rows it says, through REST and resources/read', async () => {
  const s = await McpSession.open(srv.port);
  try {
    for (const [query, want] of CASES) {
      assert.deepEqual(await restIds(query), want, query);
      const read = await s.readJson(`${srv.base}/Item?${query}`);
      assert.deepEqual(read.value.map((r) => r.id).sort((a, b) => a - b), want, `read ${query}`);
    }
  } finally {
    await s.delete();
  }
});

test('a subscription with an operator is notified of exactly the rows the same URI reads', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const uris = CASES.map(([q]) => `${srv.base}/Item?${q}`);
    for (const uri of uris) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    // Touch every row without changing what the filters look at: each filter's subscription
    // must hear of exactly the rows it selects.
    sqlite(srv.dbPath, "UPDATE Item SET note = note || '.'");
    const expected = CASES.reduce((n, [, ids]) => n + ids.length, 0);
    await waitFor(() => st.updates().length >= expected, { timeoutMs: 5000, message: `${expected} updates` });
    for (let i = 0; i < CASES.length; i++) {
      const got = st.updates(uris[i]).map((e) => Number(e.json.params.uri.split('/').pop())).sort((a, b) => a - b);
      assert.deepEqual(got, CASES[i][1], CASES[i][0]);
    }
    st.close();
  } finally {
    await s.delete();
  }
});

test('random rows and random filters: reads and subscriptions agree on every one', async () => {
  const pick = generator(4242);
  const cols = Object.keys(RANDOM_POOLS);
  const values = ['5', '5.0', '%205', '5%20', '0x5', 'a', 'B', 'apple', 'Apple', '41', '-3', '1e1', 'x', 'a%20b', '0.5', '10',
    '0.3', '1152921504606846977', '1152921504606846976.0', '9007199254740992', '-1152921504606846977', '1e999', '-1e999',
    'NaN', 'Infinity'];
  const ops = ['', 'ne=', 'gt=', 'ge=', 'lt=', 'le=', 'sw=', 'ct=', 'in'];
  const queries = new Set();
  const one = () => {
    const op = pick(ops);
    return op === 'in' ? `${pick(values)}|${pick(values)}` : `${op}${pick(values)}`;
  };
  while (queries.size < 80) queries.add(`${pick(cols)}=${one()}`);
  // Two filters on one column (a range, an exclusion and a bound, ...): both must hold.
  while (queries.size < 130) {
    const c = pick(cols);
    queries.add(`${c}=${one()}&${c}=${one()}`);
  }
  const s = await McpSession.open(srv.port);
  try {
    const want = new Map();
    for (const q of queries) {
      const res = await request(srv.port, { path: `/Rnd?${q}` });
      if (res.status === 400) continue; // a filter that does not parse (a|a): refused alike
      assert.equal(res.status, 200, `${q}: ${res.text}`);
      want.set(q, res.json().map((r) => r.id).sort((a, b) => a - b));
      assert.deepEqual(await s.result('resources/subscribe', { uri: `${srv.base}/Rnd?${q}` }), {}, q);
    }
    assert.ok(want.size > 100, `${want.size} filters parsed`);
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    sqlite(srv.dbPath, 'UPDATE Rnd SET touch = touch + 1');
    const expected = [...want.values()].reduce((n, ids) => n + ids.length, 0);
    await waitFor(() => st.updates().length >= expected, { timeoutMs: 5000, message: `${expected} updates` });
    await sleep(300); // and no more than those
    for (const [q, ids] of want) {
      const got = st.updates(`${srv.base}/Rnd?${q}`).map((e) => Number(e.json.params.uri.split('/').pop())).sort((a, b) => a - b);
      assert.deepEqual(got, ids, `${q} (rows: ${JSON.stringify(RANDOM_ROWS)})`);
    }
    st.close();
  } finally {
    await s.delete();
  }
});

test('numbers read back to the last bit: REST, resources/read, get_record and query_records', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const want = { 1: 0.30000000000000004, 5: 123456789.12345678 }; // column x
    for (const [id, x] of Object.entries(want)) {
      assert.equal((await request(srv.port, { path: `/Item/${id}` })).json().x, x, `REST ${id}`);
      assert.equal((await s.readJson(`${srv.base}/Item/${id}`)).value.x, x, `read ${id}`);
      assert.equal((await s.tool('get_record', { table: 'Item', key: Number(id) })).data.x, x, `tool ${id}`);
    }
    // 2^53, which a double holds, is a number; one past it a string of its digits.
    const { rows } = (await s.tool('query_records', { table: 'Item' })).data;
    const big = Object.fromEntries(rows.map((r) => [r.id, r.big]));
    assert.deepEqual(big, { 1: '1152921504606846976', 2: '1152921504606846977', 3: '9007199254740993',
      4: '-1152921504606846977', 5: 5, 6: 9007199254740992 });
    assert.equal(Object.fromEntries(rows.map((r) => [r.id, r.x]))[1], 0.30000000000000004);
    if (PG_MODE) {
      // A numeric value a double holds is a number (its scale dropped, as JSON has none);
      // one it does not hold, its digits, as an integer beyond 2^53 is: never rounded.
      const decimals = [['1.50', 1.5], ['0.30000000000000004', 0.30000000000000004], ['-12345.678', -12345.678],
        ['0.123456789012345678901', '0.123456789012345678901'], ['12345678901234567.5', '12345678901234567.5']];
      for (const [text, want] of decimals) {
        sqlite(srv.dbPath, `UPDATE Item SET num = ${text} WHERE id = 1`);
        assert.deepEqual((await request(srv.port, { path: '/Item/1' })).json().num, want, `REST ${text}`);
        assert.deepEqual((await s.readJson(`${srv.base}/Item/1`)).value.num, want, `read ${text}`);
        const listed = (await s.tool('query_records', { table: 'Item' })).data.rows.find((r) => r.id === 1);
        assert.deepEqual(listed.num, want, `query_records ${text}`);
      }
      sqlite(srv.dbPath, 'UPDATE Item SET num = NULL WHERE id = 1');
    }
    // Written (through either worker: a write reaching the other is forwarded to the one that
    // commits) and read back the same.
    for (let k = 0; k < 6; k++) {
      const w = await McpSession.open(srv.port);
      const put = await w.tool('put_record', { table: 'Rnd', key: 200 + k, record: { r: 0.1 + 0.2 } });
      assert.equal(put.data.record.r, 0.30000000000000004, put.text);
      assert.equal((await request(srv.port, { path: `/Rnd/${200 + k}` })).json().r, 0.30000000000000004);
      await w.delete();
    }
  } finally {
    await s.delete();
  }
});

test('integers beyond 2^53 written as JSON numbers keep every digit: REST and put_record', async () => {
  const big = '1152921504606846977'; // a double reads it as 1152921504606846976
  const s = await McpSession.open(srv.port);
  try {
    const uri = `${srv.base}/Rnd?b=${big}&id=ge=100`;
    assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    // JSON numbers of every digit, which JavaScript cannot write: the bodies are text.
    const put = await request(srv.port, {
      method: 'PUT', path: '/Rnd/100', headers: { 'Content-Type': 'application/json' }, body: `{"b": ${big}}`,
    });
    assert.equal(put.status, 201, put.text);
    assert.equal(put.json().b, big);
    const call = await mcpPost(srv.port, s.id, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"put_record",'
      + `"arguments":{"table":"Rnd","key":101,"record":{"b":${big}}}}}`);
    const result = call.json().result;
    assert.ok(!result.isError, call.text);
    assert.equal(JSON.parse(result.content[0].text).record.b, big);
    // Read back, filtered and by key, and heard of by the subscription to that number.
    const ids = (await request(srv.port, { path: `/Rnd?b=${big}&id=ge=100` })).json().map((r) => r.id);
    assert.deepEqual(ids.sort((a, b) => a - b), [100, 101]);
    assert.equal((await s.readJson(`${srv.base}/Rnd/101`)).value.b, big);
    const query = await mcpPost(srv.port, s.id, '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":'
      + `"query_records","arguments":{"table":"Rnd","filter":"id=ge=100","where":{"b":${big}}}}}`);
    const { rows } = JSON.parse(query.json().result.content[0].text);
    assert.deepEqual(rows.map((r) => r.id).sort((x, y) => x - y), [100, 101], query.text);
    await waitFor(() => st.updates(uri).length >= 2, { timeoutMs: 5000, message: 'two updates' });
    assert.deepEqual(st.updates(uri).map((e) => e.json.params.uri.split('/').pop()).sort(), ['100', '101']);
    st.close();
  } finally {
    await s.delete();
  }
});

test('a record of a NOCASE key: any spelling reads it, and a subscription in any spelling hears of it', { skip: PG_MODE && 'SQLite collations' }, async () => {
  const s = await McpSession.open(srv.port);
  try {
    for (const k of ['apple', 'APPLE', 'Apple']) assert.equal((await s.readJson(`${srv.base}/Kc/${k}`)).value.k, 'Apple', k);
    const uris = ['apple', 'APPLE'].map((k) => `${srv.base}/Kc/${k}`);
    for (const uri of uris) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    sqlite(srv.dbPath, "UPDATE Kc SET v = v + 1 WHERE k = 'Apple'");
    await waitFor(() => st.updates().length >= 2, { timeoutMs: 5000, message: '2 updates' });
    await sleep(200);
    for (const uri of uris) assert.deepEqual(st.updates(uri).map((e) => e.json.params.uri), [`${srv.base}/Kc/Apple`], uri);
    st.close();
  } finally {
    await s.delete();
  }
});

test('a row moving across an ordered filter notifies once on the way in and once on the way out', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const uri = `${srv.base}/Item?qty=ge=100`;
    await s.result('resources/subscribe', { uri });
    const st = await EventStream.open(srv.port, s.id);
    await st.waitPrimed();
    sqlite(srv.dbPath, 'UPDATE Item SET qty = 150 WHERE id = 1');
    sqlite(srv.dbPath, 'UPDATE Item SET qty = 160 WHERE id = 1');
    sqlite(srv.dbPath, 'UPDATE Item SET qty = 3 WHERE id = 1');
    sqlite(srv.dbPath, 'UPDATE Item SET qty = 4 WHERE id = 2'); // never in: no notification
    await waitFor(() => st.updates(uri).length >= 3, { timeoutMs: 5000, message: 'three updates' });
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(st.updates(uri).map((e) => e.json.params.uri), [`${srv.base}/Item/1`, `${srv.base}/Item/1`, `${srv.base}/Item/1`]);
    sqlite(srv.dbPath, 'UPDATE Item SET qty = 10 WHERE id = 2');
    st.close();
  } finally {
    await s.delete();
  }
});

test('filters that cannot be parsed are refused with the reason: REST 400, resources/read and subscribe -32602', async () => {
  const s = await McpSession.open(srv.port);
  try {
    const bad = [
      ['name=re*', 'wildcards'],
      ['qty=gx=1', 'unknown operator'],
      ['tag=a||b', 'empty alternative'],
      ['qty=gt=1|2', 'equality only'],
      ['name=sw=', 'need a value'],
      ['name=ct=', 'need a value'],
      ['name=eq=gt=1', 'unknown operator'], // one operator, and the rest is the value
      ['name=a%ZZ', '%-escape'],
      // Half a character, a stray continuation byte, an overlong '/': SQL would compare
      // characters and the subscriptions bytes, so no such value is taken at all.
      ['name=sw=%C3', 'UTF-8'],
      ['name=ct=%A9', 'UTF-8'],
      ['name=%C0%AF', 'UTF-8'],
      ['tag=red|%E9', 'UTF-8'],
      [`tag=${Array.from({ length: 33 }, (_, i) => `t${i}`).join('|')}`, 'more than 32 alternatives'],
      [Array.from({ length: 17 }, (_, i) => `c${i}=1`).join('&'), 'more than 16 filters'],
    ];
    for (const [query, why] of bad) {
      const res = await request(srv.port, { path: `/Item?${query}` });
      assert.equal(res.status, 400, query);
      assert.match(res.json().error, new RegExp(why), query);
      const rd = await s.error('resources/read', { uri: `${srv.base}/Item?${query}` });
      assert.equal(rd.code, -32602);
      assert.match(rd.message, new RegExp(why), query);
      const sub = await s.error('resources/subscribe', { uri: `${srv.base}/Item?${query}` });
      assert.equal(sub.code, -32602);
      assert.match(sub.message, new RegExp(why), query);
      const q = await s.error('tools/call', { name: 'query_records', arguments: { table: 'Item', filter: query } });
      assert.equal(q.code, -32602);
      assert.match(q.message, new RegExp(why), query);
    }
    // A filter on a column the table lacks: refused everywhere, the column named.
    const sub = await s.error('resources/subscribe', { uri: `${srv.base}/Item?nocol=1` });
    assert.equal(sub.code, -32602);
    assert.match(sub.message, /unknown column nocol in table Item/);
    const q = await s.error('tools/call', { name: 'query_records', arguments: { table: 'Item', filter: 'nocol=1' } });
    assert.match(q.message, /unknown column nocol in table Item/);
  } finally {
    await s.delete();
  }
});
