// resources/subscribe and resources/unsubscribe over the raw client, one
// contract point per test: the {} result and the -32602 errors, replacing
// and unsubscribing, the three URI kinds (record, collection, filtered,
// including a row leaving the filter), one notification per matching
// subscription with subscribedUri as written, omitCurrent and the
// subscribe/commit race, no notification after the unsubscribe response
// even while changes stream in, a burst to sessions that hold one
// subscription each (delivered per subscriber at the loop turn's end) with
// one subscribing, one unsubscribing and one resuming in the middle of it,
// subscriptions made before the GET stream,
// every kind of writer notifying, the per-session limit, strict mode, the
// durable subscriptions column and teardown leaving /status at zero.
//
// "Nothing else arrived" is checked with a marker: a later change on a
// marker subscription of the same session; the tailer hands changes on in
// audit order, so once the marker's notification is in, every earlier
// commit has been matched.

import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';

import { startServer, getStatus } from './lib/server.mjs';
import { McpSession } from './lib/mcp.mjs';
import { RawConnection, buildRequest, MCP_ACCEPT } from './lib/raw.mjs';
import { sqlite, sqliteRows, sessionRow } from './lib/sqlite.mjs';
import { sleep, waitFor } from './lib/wait.mjs';
import { EventStream, UPDATED, idSeq, pair, stamp } from './lib/sse.mjs';
import { auditAfter, auditMax, product, rest, sqliteAsync, waitStatus } from './lib/subs.mjs';
import { PG_MODE } from './lib/pg.mjs';

let srv;
let B; // the public base of resource URIs

before(async () => {
  srv = await startServer();
  B = srv.base;
});

after(async () => {
  await srv?.kill();
});

const rec = (table, key) => `${B}/${table}/${key}`;
const MARKER_URI = () => rec('StockEvent', '9000');

/* A session with its stream open and primed, cleaned up by the caller's finally. */
async function client({ stream = true } = {}) {
  const s = await McpSession.open(srv.port);
  const c = { s, stream: null, markers: 0 };
  if (stream) {
    c.stream = await EventStream.open(srv.port, s.id);
    await c.stream.waitPrimed();
  }
  return c;
}

async function closeClient(c) {
  c?.stream?.close();
  if (c) await c.s.delete();
}

async function subscribe(c, uri) {
  assert.deepEqual(await c.s.result('resources/subscribe', { uri }), {});
}

/* n more sessions with primed streams into clients (the caller closes them), each on uriOf(i) (c.uri). */
async function subscribedClients(clients, n, uriOf) {
  for (let i = 0; i < n; i++) {
    const c = await client();
    clients.push(c);
    c.uri = uriOf(i);
    await subscribe(c, c.uri);
  }
}

async function unsubscribe(c, uri) {
  assert.deepEqual(await c.s.result('resources/unsubscribe', { uri }), {});
}

/* REST PUT of a Product row; returns the audit seq of the change (the ETag). */
async function putProduct(sku, fields) {
  const res = await rest(srv.port, 'PUT', `/Product/${sku}`, product(sku, fields));
  return Number(JSON.parse(res.headers.etag));
}

/*
 * Commits a change on the session's marker subscription and waits for
 * its notification: every commit before it has been matched by then.
 */
async function marker(c) {
  if (c.markers === 0) await subscribe(c, MARKER_URI());
  c.markers++;
  const res = await rest(srv.port, 'PUT', '/StockEvent/9000', { sku: 'MARK', delta: c.markers, note: 'marker' });
  const seq = Number(JSON.parse(res.headers.etag));
  await c.stream.waitUntil((st) => st.updates(MARKER_URI()).some((e) => idSeq(e.id) === seq), {
    what: `the marker notification (seq ${seq})`,
  });
}

/* Update events other than the marker's. */
const updates = (c, subscribedUri) =>
  c.stream.updates(subscribedUri).filter((e) => e.json.params.subscribedUri !== MARKER_URI());

const pairs = (events) => events.map(pair);

test('subscribe returns {}; a commit notifies with the exact message and an id naming its audit seq', async () => {
  const c = await client();
  try {
    const uri = rec('Product', 'A-100');
    const before0 = await getStatus(srv.port);
    await subscribe(c, uri);
    assert.equal((await getStatus(srv.port)).subscriptions, before0.subscriptions + 1);
    const seq = await putProduct('A-100', { name: 'Anvil', price_cents: 5000 });
    const [ev] = await c.stream.waitUpdates(1, uri);
    assert.deepEqual(ev.json, {
      jsonrpc: '2.0',
      method: UPDATED,
      params: { uri, subscribedUri: uri },
    });
    assert.match(ev.id, /^\d+-t\d+$/);
    assert.equal(idSeq(ev.id), seq, 'the event id names the audit seq of the change');
    assert.equal(ev.event, undefined, 'no event: field (default message type)');
    await marker(c);
    assert.equal(updates(c).length, 1, c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('subscribe/unsubscribe without a string params.uri -> -32602 with the method in the message', async () => {
  const c = await client({ stream: false });
  try {
    for (const method of ['resources/subscribe', 'resources/unsubscribe']) {
      for (const params of [{}, { uri: 5 }, { uri: null }, { uri: ['x'] }, { uri: { href: B } }, { url: rec('Product', 'A-100') }]) {
        const err = await c.s.error(method, params);
        assert.equal(err.code, -32602, `${method} ${JSON.stringify(params)}`);
        assert.equal(err.message, `${method} requires params.uri`, `${method} ${JSON.stringify(params)}`);
      }
      const err = await c.s.error(method, undefined); // no params at all
      assert.equal(err.code, -32602);
      assert.equal(err.message, `${method} requires params.uri`);
    }
    assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, c.s.id).subscriptions), []);
  } finally {
    await closeClient(c);
  }
});

test('a URI that is not subscribable -> -32602 "resource is not subscribable: <uri>", nothing added', async () => {
  const c = await client({ stream: false });
  try {
    const other = `http://127.0.0.1:${srv.port === 65535 ? 65534 : srv.port + 1}`;
    const bad = [
      'mcpsub://about',
      'mcpsub://schema/Product',
      `${B}/Nope`,
      `${B}/Nope/1`,
      `${B}/Product?nope=1`,
      `${B}/Product?category=tools&nope=1`,
      `${B}/Product/a/b`,
      `${B}/Product/%zz`,
      `${B}/Product?_limit=1&_limit=2`,
      `${B}/Product#frag`,
      `${B}/`,
      `${B}`,
      '',
      'http://example.com/Product',
      `${other}/Product`,
      `https://127.0.0.1:${srv.port}/Product`,
      `${B}/StockEvent/abc`, // integer key that is not an integer
    ];
    const st0 = await getStatus(srv.port);
    for (const uri of bad) {
      const err = await c.s.error('resources/subscribe', { uri });
      assert.equal(err.code, -32602, uri);
      // The message names the URI, and the reason when the URI itself is malformed.
      assert.ok(err.message === `resource is not subscribable: ${uri}` || err.message.startsWith(`resource is not subscribable: ${uri} (`), err.message);
    }
    assert.equal((await getStatus(srv.port)).subscriptions, st0.subscriptions);
    assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, c.s.id).subscriptions), []);
  } finally {
    await closeClient(c);
  }
});

test('re-subscribing the same URI text replaces: one subscription, one notification', async () => {
  const c = await client();
  try {
    const uri = rec('Product', 'B-200');
    const st0 = await getStatus(srv.port);
    await subscribe(c, uri);
    await subscribe(c, uri);
    await subscribe(c, uri);
    assert.equal((await getStatus(srv.port)).subscriptions, st0.subscriptions + 1);
    assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, c.s.id).subscriptions), [uri]);
    await putProduct('B-200', { category: 'garden' });
    await c.stream.waitUpdates(1, uri);
    await marker(c);
    assert.deepEqual(pairs(updates(c)), [[uri, uri]], c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('unsubscribe: {} for a URI never subscribed; after it, changes stop notifying', async () => {
  const c = await client();
  try {
    const st0 = await getStatus(srv.port);
    await unsubscribe(c, rec('Product', 'C-300')); // never subscribed
    await unsubscribe(c, `${B}/Product?category=tools`);
    assert.equal((await getStatus(srv.port)).subscriptions, st0.subscriptions);

    const uri = rec('Product', 'C-300');
    await subscribe(c, uri);
    await putProduct('C-300', { in_stock: 0 });
    await c.stream.waitUpdates(1, uri);
    await unsubscribe(c, uri);
    assert.equal((await getStatus(srv.port)).subscriptions, st0.subscriptions);
    assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, c.s.id).subscriptions), []);
    await unsubscribe(c, uri); // twice: still {}
    await putProduct('C-300', { in_stock: 1 });
    sqlite(srv.dbPath, "UPDATE Product SET price_cents = price_cents + 1 WHERE sku = 'C-300'");
    await marker(c);
    assert.equal(updates(c, uri).length, 1, c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('record URI: its own row only (update, delete, re-insert), never other rows', async () => {
  const c = await client();
  try {
    const uri = rec('Product', 'R-1');
    await subscribe(c, uri); // a record that does not exist yet
    await rest(srv.port, 'PUT', '/Product/R-2', product('R-2'));
    await rest(srv.port, 'PUT', '/Product/R-1', product('R-1')); // insert
    await rest(srv.port, 'PATCH', '/Product/R-1', { price_cents: 7 }); // update
    await rest(srv.port, 'PUT', '/Product/R-10', product('R-10')); // a key sharing a prefix
    await rest(srv.port, 'DELETE', '/Product/R-1'); // delete
    await rest(srv.port, 'DELETE', '/Product/R-2');
    await rest(srv.port, 'DELETE', '/Product/R-10');
    await marker(c);
    assert.deepEqual(pairs(updates(c)), [[uri, uri], [uri, uri], [uri, uri]], c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('collection URI: every insert, update and delete of the table, nothing from other tables', async () => {
  const c = await client();
  try {
    const coll = `${B}/Product`;
    await subscribe(c, coll);
    const created = await rest(srv.port, 'POST', '/Product', product('K-1'));
    assert.equal(created.status, 201);
    await rest(srv.port, 'PATCH', '/Product/K-1', { name: 'renamed' });
    await rest(srv.port, 'PUT', '/StockEvent/500', { sku: 'K-1', delta: 1 }); // other table
    await rest(srv.port, 'DELETE', '/Product/K-1');
    await marker(c);
    const k1 = rec('Product', 'K-1');
    assert.deepEqual(pairs(updates(c)), [[k1, coll], [k1, coll], [k1, coll]], c.stream.describe());
    await rest(srv.port, 'DELETE', '/StockEvent/500');
  } finally {
    await closeClient(c);
  }
});

test('filtered URI: rows matching before or after the change; a row leaving (and entering) the filter notifies', async () => {
  const c = await client();
  try {
    await rest(srv.port, 'PUT', '/Product/F-1', product('F-1', { category: 'tools' }));
    await rest(srv.port, 'PUT', '/Product/F-2', product('F-2', { category: 'garden' }));
    const tools = `${B}/Product?category=tools`;
    await subscribe(c, tools);
    const f1 = rec('Product', 'F-1');
    const f2 = rec('Product', 'F-2');

    await rest(srv.port, 'PATCH', '/Product/F-1', { price_cents: 1 }); // in -> in: notifies
    await rest(srv.port, 'PATCH', '/Product/F-2', { price_cents: 1 }); // out -> out: not
    await rest(srv.port, 'PATCH', '/Product/F-1', { category: 'garden' }); // leaves: notifies
    await rest(srv.port, 'PATCH', '/Product/F-1', { price_cents: 2 }); // out -> out: not
    await rest(srv.port, 'PATCH', '/Product/F-2', { category: 'tools' }); // enters: notifies
    sqlite(srv.dbPath, "DELETE FROM Product WHERE sku = 'F-2'"); // delete of a matching row: notifies
    sqlite(srv.dbPath, "DELETE FROM Product WHERE sku = 'F-1'"); // delete of a row outside: not
    await marker(c);
    assert.deepEqual(pairs(updates(c)), [[f1, tools], [f1, tools], [f2, tools], [f2, tools]], c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('filtered URI on a number column: the filter text "450" matches the integer 450', async () => {
  const c = await client();
  try {
    const cheap = `${B}/Product?price_cents=450`;
    await subscribe(c, cheap);
    sqlite(srv.dbPath, "UPDATE Product SET name = 'Dust pan!' WHERE sku = 'D-400'"); // price 450: notifies
    sqlite(srv.dbPath, "UPDATE Product SET name = 'Bucket!' WHERE sku = 'B-200'"); // 899: not
    await marker(c);
    assert.deepEqual(pairs(updates(c)), [[rec('Product', 'D-400'), cheap]], c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('several subscriptions matching one change: one notification each, subscribedUri exactly as written', async () => {
  const c = await client();
  try {
    const subs = [
      rec('Product', 'M-1'),
      rec('Product', 'M%2D1'), // same record, other text
      `${B}/Product`,
      `${B}/Product?category=tools`,
      `${B}/Product?in_stock=1&category=tools`, // not canonical order: echoed as written
      `${B}/Product?category=garden`, // does not match
    ];
    for (const u of subs) await subscribe(c, u);
    await rest(srv.port, 'PUT', '/Product/M-1', product('M-1', { category: 'tools', in_stock: 1 }));
    await marker(c);
    const m1 = rec('Product', 'M-1');
    const got = pairs(updates(c)).sort();
    const want = subs.slice(0, 5).map((s) => [m1, s]).sort();
    assert.deepEqual(got, want, c.stream.describe());
    // Every one of them is its own event with its own id.
    const ids = updates(c).map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, `duplicate ids: ${ids}`);
    await rest(srv.port, 'DELETE', '/Product/M-1');
  } finally {
    await closeClient(c);
  }
});

test('two sessions subscribed to the same URI are each notified once', async () => {
  const a = await client();
  const b = await client();
  try {
    const uri = rec('Product', 'A-100');
    await subscribe(a, uri);
    await subscribe(b, uri);
    await putProduct('A-100', { name: 'Anvil', price_cents: 4242 });
    await marker(a);
    await marker(b);
    assert.deepEqual(pairs(updates(a)), [[uri, uri]], a.stream.describe());
    assert.deepEqual(pairs(updates(b)), [[uri, uri]], b.stream.describe());
    await unsubscribe(a, uri); // b keeps the shared topic
    await putProduct('A-100', { name: 'Anvil', price_cents: 4343 });
    await marker(a);
    await marker(b);
    assert.equal(updates(a).length, 1, a.stream.describe());
    assert.equal(updates(b).length, 2, b.stream.describe());
  } finally {
    await closeClient(a);
    await closeClient(b);
  }
});

test('a burst on a collection whose sessions hold only it: every change once and in commit order, while one subscribes to more, one unsubscribes, one resumes, and one of two other URIs gets its own', async () => {
  // Sessions whose only subscription is one topic get a loop turn's updates
  // together at the turn's end; 8 writers at once put several commits in a
  // turn. What each session does mid-burst must not reorder, lose or repeat.
  const uri = `${B}/Product`;
  const clients = [];
  const seqs = [];
  try {
    await subscribedClients(clients, 12, () => uri);
    const [grows, leaves, resumes] = clients;
    const keyOf = (i) => `BURST-${String(i).padStart(3, '0')}`;
    // And one session holding two other URIs of the table from the start: its updates go
    // change by change among the others' gathered ones, and must not disturb them either.
    const both = await client();
    const filtered = `${B}/Product?sku=sw=BURST-`;
    await subscribe(both, filtered);
    await subscribe(both, rec('Product', keyOf(3)));
    clients.push(both);
    const extra = rec('Product', keyOf(70));
    let next = 0;
    let resumed = null;
    const writer = async () => {
      while (next < 96) {
        const i = next++;
        seqs.push(await putProduct(keyOf(i % 80), { price_cents: i }));
        if (i === 24) await subscribe(grows, extra);
        if (i === 40) await unsubscribe(leaves, uri);
        if (i === 56) {
          const last = resumes.stream.lastId;
          resumes.stream.close();
          resumed = await EventStream.open(srv.port, resumes.s.id, { lastEventId: last });
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, writer));
    seqs.sort((a, b) => a - b);
    const all = seqs.join(',');
    const seqsOf = (events) => events.map((e) => idSeq(e.id));
    await both.stream.waitUpdates(seqs.length, filtered, { timeoutMs: 10000 });
    assert.equal(seqsOf(both.stream.updates(filtered)).join(','), all, both.stream.describe());
    const own = seqsOf(both.stream.updates());
    assert.ok(own.every((s, i) => i === 0 || s >= own[i - 1]), `ids went back: ${own.join(',')}`);
    assert.equal(both.stream.updates(rec('Product', keyOf(3))).length, 2, both.stream.describe());
    for (const c of clients) {
      if (c === leaves || c === resumes || c === both) continue;
      await c.stream.waitUpdates(seqs.length, uri, { timeoutMs: 10000 });
      assert.equal(seqsOf(c.stream.updates(uri)).join(','), all, c.stream.describe());
    }
    // Resumed with Last-Event-ID: both streams together hold every change once, in order.
    await resumed.waitUntil((st) => st.updates(uri).some((e) => idSeq(e.id) === seqs.at(-1)), {
      timeoutMs: 10000,
      what: 'the last change on the resumed stream',
    });
    const joined = [...seqsOf(resumes.stream.updates(uri)), ...seqsOf(resumed.updates(uri))];
    assert.equal(joined.join(','), all, resumed.describe());
    resumed.close();
    // The second subscription: its row's updates among the collection's, each change's two
    // in one place, so the session's ids never go back.
    const mixed = seqsOf(grows.stream.updates());
    assert.ok(
      mixed.every((s, i) => i === 0 || s >= mixed[i - 1]),
      `ids went back: ${mixed.join(',')}`,
    );
    assert.ok(grows.stream.updates(extra).length >= 1, grows.stream.describe());
    // Unsubscribed: the changes up to a point, none missing, and then none.
    const kept = seqsOf(leaves.stream.updates(uri));
    assert.equal(kept.join(','), seqs.slice(0, kept.length).join(','), leaves.stream.describe());
    assert.ok(kept.length > 0 && kept.length < seqs.length, `kept ${kept.length} of ${seqs.length}`);
  } finally {
    for (const c of clients) await closeClient(c);
  }
});

test('every writer notifies: put_record and delete_record tools, REST PUT/PATCH/POST/DELETE, the sqlite3 CLI', async () => {
  const c = await client();
  try {
    const coll = `${B}/Product`;
    await subscribe(c, coll);
    const expect = [];
    const check = async (what, sku) => {
      expect.push(rec('Product', sku));
      await c.stream.waitUntil(() => updates(c).length >= expect.length, { timeoutMs: 3000, what: `the notification of ${what}` });
    };
    await c.s.toolOk('put_record', { table: 'Product', key: 'W-1', record: product('W-1') });
    await check('put_record (insert)', 'W-1');
    await c.s.toolOk('put_record', { table: 'Product', key: 'W-1', record: product('W-1', { price_cents: 9 }) });
    await check('put_record (replace)', 'W-1');
    await c.s.toolOk('delete_record', { table: 'Product', key: 'W-1' });
    await check('delete_record', 'W-1');
    await rest(srv.port, 'PUT', '/Product/W-2', product('W-2'));
    await check('REST PUT', 'W-2');
    await rest(srv.port, 'PATCH', '/Product/W-2', { in_stock: 0 });
    await check('REST PATCH', 'W-2');
    await rest(srv.port, 'POST', '/Product', product('W-3'));
    await check('REST POST', 'W-3');
    await rest(srv.port, 'DELETE', '/Product/W-3');
    await check('REST DELETE', 'W-3');
    sqlite(srv.dbPath, "INSERT INTO Product (sku, name) VALUES ('W-4', 'external')");
    await check('an external INSERT', 'W-4');
    sqlite(srv.dbPath, "UPDATE Product SET name = 'ext' WHERE sku = 'W-2'; DELETE FROM Product WHERE sku = 'W-4'");
    expect.push(rec('Product', 'W-2'));
    await check('an external UPDATE and DELETE', 'W-4');
    await rest(srv.port, 'DELETE', '/Product/W-2');
    expect.push(rec('Product', 'W-2'));
    await marker(c);
    assert.deepEqual(updates(c).map((e) => e.json.params.uri), expect, c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

/*
 * DESIGN §1: "a commit made by another process (sqlite3 CLI, an
 * application) is noticed within 100 ms without any help". Nothing else
 * touches the database between the external commit and its notification
 * (any other reader or writer would wake the tailer). 300 ms of slack for
 * loaded or sanitizer runs; the 1 s safety poll alone does not meet it.
 */
test('an external commit is noticed within 100 ms (300 ms slack), not only by the 1 s safety poll', async () => {
  const c = await client();
  try {
    const uri = rec('Product', 'D-400');
    await subscribe(c, uri);
    const latencies = [];
    for (let i = 0; i < 5; i++) {
      await sleep(60 + 37 * i); // not in step with any periodic timer
      const t0 = Date.now();
      sqlite(srv.dbPath, `UPDATE Product SET price_cents = ${700 + i} WHERE sku = 'D-400'`);
      await c.stream.waitUpdates(i + 1, uri, { timeoutMs: 3000 });
      latencies.push(Date.now() - t0);
    }
    assert.ok(Math.max(...latencies) <= 300, `external commits noticed after ${latencies.join(', ')} ms`);
  } finally {
    await closeClient(c);
  }
});

/*
 * The subscribe/commit race, ordering (a): commits just before the
 * subscribe never notify, and a commit right behind it (the next request
 * on the same connection, sent in the same write) always does. The
 * commits before end with a large external transaction whose last change
 * is to the subscribed row, and another session keeps the tailer busy on
 * that table, so the server's tailer is usually still behind that change
 * when the subscribe is handled: omitCurrent must come from the database,
 * not from how far the tailer has read.
 */
test('race: subscribe pipelined with a commit: the commit after it notifies, commits before it never do', async () => {
  const c = await client();
  const load = await client({ stream: false });
  try {
    await subscribe(load, `${B}/StockEvent`); // every bulk row costs the tailer a frame
    await subscribe(load, `${B}/StockEvent?note=bulk`);
    const texts = ['A-100', 'A%2D100', '%41-100', 'A-1%300', '%41%2D%31%30%30', 'A%2d100'];
    let round = 0;
    for (const key of texts) {
      round++;
      const uri = `${B}/Product/${key}`;
      // Commits before: a REST write; then, odd rounds, a big external transaction that
      // keeps the tailer busy and ends with A-100; even rounds, one small external change
      // to A-100, which the tailer sees through the file system a moment later.
      await putProduct('A-100', { name: 'Anvil', price_cents: 1000 + round });
      const bulk = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
        INSERT INTO StockEvent (id, sku, delta, note) SELECT 100000 * ${round} + i, 'BULK', i, 'bulk' FROM n;`;
      sqlite(srv.dbPath, `BEGIN; ${round % 2 ? bulk : ''} UPDATE Product SET price_cents = ${2000 + round} WHERE sku = 'A-100'; COMMIT;`);
      // (Nothing else touches the database here: even a reader would wake the tailer.)

      // One write: the subscribe, then a PUT of the row.
      const subBody = JSON.stringify({ jsonrpc: '2.0', id: 1000 + round, method: 'resources/subscribe', params: { uri } });
      const putBody = JSON.stringify(product('A-100', { name: 'Anvil', price_cents: 3000 + round }));
      const bytes = Buffer.concat([
        buildRequest(srv.port, {
          method: 'POST',
          path: '/mcp',
          headers: {
            Accept: MCP_ACCEPT,
            'Content-Type': 'application/json',
            'Mcp-Session-Id': c.s.id,
            'MCP-Protocol-Version': c.s.protocolVersion,
          },
          body: subBody,
        }),
        buildRequest(srv.port, { method: 'PUT', path: '/Product/A-100', headers: { 'Content-Type': 'application/json' }, body: putBody }),
      ]);
      const conn = await RawConnection.open(srv.port);
      let putSeq;
      try {
        conn.write(bytes);
        const r1 = await conn.readResponse();
        const r2 = await conn.readResponse();
        assert.equal(r1.status, 200, r1.text);
        assert.deepEqual(r1.json(), { jsonrpc: '2.0', id: 1000 + round, result: {} });
        assert.equal(r2.status, 200, r2.text);
        putSeq = Number(JSON.parse(r2.headers.etag));
      } finally {
        conn.close();
      }
      const a100 = auditAfter(srv.dbPath, 0, { tbl: 'Product', key: 'A-100' }).map((r) => r.seq);
      const before = a100[a100.length - 2]; // the external change, just before the subscribe
      assert.equal(a100[a100.length - 1], putSeq);
      const [ev] = await c.stream.waitUpdates(1, uri, { timeoutMs: 10000, what: `round ${round}: the PUT's notification` });
      await marker(c);
      const got = updates(c, uri);
      assert.deepEqual(
        got.map((e) => idSeq(e.id)),
        [putSeq],
        `round ${round}: notified for audit seqs ${got.map((e) => idSeq(e.id))}; only the PUT (${putSeq}) is after the subscribe, the external change was ${before}`,
      );
      assert.deepEqual(ev.json.params, { uri: rec('Product', 'A-100'), subscribedUri: uri });
      await unsubscribe(c, uri);
    }
  } finally {
    await closeClient(c);
    await closeClient(load);
  }
});

/*
 * Ordering (b): once the unsubscribe response is in, no notification for
 * that subscription may follow. Changes stream in from an external writer
 * (its commits reach the server as file-system events, so updates can be
 * queued on the stream in the same loop turn as the unsubscribe is
 * answered) and from a burst of REST PUTs. Several rounds, each on its own
 * URI text.
 *
 * Two checks per round, with the session's log level at debug so that the
 * server writes a notifications/message naming each request on the stream
 * as it starts handling it:
 *   - on the stream itself (one TCP connection, so order is exact): no
 *     update for the URI after the log message of its unsubscribe;
 *   - across connections: that log message, and so every update queued
 *     before it, has arrived when the unsubscribe response arrives. The
 *     server must write what it queued before it answers; one that does
 *     not is late in nearly every round (24 to 26 of 30 with the flush
 *     removed from the server). Two TCP connections are not ordered by the
 *     kernel, though: a small segment written while the stream still has
 *     unacknowledged data can be held back (TCP autocorking) for a moment
 *     while the response on the other connection goes out; with five
 *     copies of this test running on two CPUs a correct server was late in
 *     up to 5 rounds of 30. So up to a third of the rounds may be late.
 */
test('race: unsubscribe while changes stream in: no notification for it after the unsubscribe response', async () => {
  const c = await client();
  try {
    await c.s.result('logging/setLevel', { level: 'debug' });
    const rounds = 30;
    let crossed = 0;
    const lateRounds = [];
    for (let round = 0; round < rounds; round++) {
      // A different text of the same record each round: A-100 with some characters percent-encoded.
      const key = [...'A-100'].map((ch, i) => ((round >> i) & 1 ? `%${ch.charCodeAt(0).toString(16).toUpperCase()}` : ch)).join('');
      const uri = `${B}/Product/${key}`;
      const start = c.stream.events.length;
      await subscribe(c, uri);
      let sql = '';
      for (let i = 0; i < 200; i++) sql += `UPDATE Product SET price_cents = ${i} WHERE sku = 'A-100';\n`;
      let writerDone = false;
      const writer = sqliteAsync(srv.dbPath, sql).finally(() => {
        writerDone = true;
      });
      const puts = [];
      for (let i = 0; i < 10; i++) {
        puts.push(
          // (a 503 is possible while the CLI holds the write lock)
          rest(srv.port, 'PUT', '/Product/A-100', product('A-100', { name: 'Anvil', in_stock: i % 2 })).catch(() => {}),
        );
      }
      await c.stream.waitUpdates(5, uri, { timeoutMs: 10000, what: `round ${round}: updates streaming` });
      const streaming = !writerDone;
      await unsubscribe(c, uri);
      const cut = stamp();
      if (streaming && !writerDone) crossed++;
      await writer;
      await Promise.all(puts);
      await marker(c);

      const events = c.stream.events.slice(start);
      const logAt = events.findIndex(
        (e) => e.json?.method === 'notifications/message' && e.json.params?.data === 'resources/unsubscribe',
      );
      assert.ok(logAt >= 0, `round ${round}: no debug log message for the unsubscribe on the stream: ${c.stream.describe(10)}`);
      const after = events.slice(logAt + 1).filter((e) => e.json?.method === UPDATED && e.json.params.subscribedUri === uri);
      assert.deepEqual(
        after.map((e) => e.id),
        [],
        `round ${round}: updates for ${uri} written after the server began handling its unsubscribe`,
      );
      if (events[logAt].at > cut) {
        const late = events.filter((e) => e.at > cut && e.json?.method === UPDATED && e.json.params.subscribedUri === uri);
        lateRounds.push(`round ${round}: the unsubscribe's own log message and ${late.length} update(s) for ${uri} arrived after its response`);
      }
    }
    assert.ok(lateRounds.length <= rounds / 3, `answered before the stream was written in ${lateRounds.length} of ${rounds} rounds: ${lateRounds.join('; ')}`);
    // The changes really were streaming across the unsubscribe (else the test proves nothing).
    assert.ok(crossed >= rounds / 2, `the external writer was still committing across the unsubscribe in only ${crossed} of ${rounds} rounds`);
  } finally {
    await closeClient(c);
  }
});

test('a subscription made before the GET stream: its notifications wait and come first when the stream opens', async () => {
  const c = await client({ stream: false });
  try {
    const uri = rec('Product', 'P-1');
    await subscribe(c, uri);
    await rest(srv.port, 'PUT', '/Product/P-1', product('P-1'));
    await rest(srv.port, 'PATCH', '/Product/P-1', { price_cents: 2 });
    sqlite(srv.dbPath, "UPDATE Product SET price_cents = 3 WHERE sku = 'P-1'");
    const want = auditAfter(srv.dbPath, 0, { tbl: 'Product', key: 'P-1' }).map((r) => r.seq);
    assert.equal(want.length, 3);
    // The server has matched all three (notifications counter) before the stream opens.
    await waitFor(async () => {
      const row = sessionRow(srv.dbPath, c.s.id);
      return row && (await getStatus(srv.port)).auditPosition >= want[2];
    }, { message: 'the server to read the changes' });
    c.stream = await EventStream.open(srv.port, c.s.id);
    await c.stream.waitPrimed();
    const ev = c.stream.events;
    assert.equal(ev[0].retry, '1000', `first event: ${c.stream.describe()}`);
    const ups = c.stream.updates(uri);
    assert.deepEqual(ups.map((e) => idSeq(e.id)), want, c.stream.describe());
    const primingIndex = ev.indexOf(c.stream.priming);
    assert.ok(ev.indexOf(ups[ups.length - 1]) < primingIndex, `priming before the replay: ${c.stream.describe()}`);
    assert.equal(c.stream.priming.data, '');
    assert.match(c.stream.priming.id, /^\d+-s\d+$/, 'the priming event has an id of ours');
    assert.ok(idSeq(c.stream.priming.id) >= want[2], 'the priming id names the feed position after the replay');
    // And the stream is live afterwards.
    await rest(srv.port, 'DELETE', '/Product/P-1');
    await c.stream.waitUpdates(4, uri);
    await marker(c);
    assert.equal(updates(c).length, 4, c.stream.describe());
  } finally {
    await closeClient(c);
  }
});

test('before the stream opens, more than 100 frames: still every changed URI once (from the audit log)', async () => {
  const c = await client({ stream: false });
  try {
    const coll = `${B}/StockEvent`;
    await subscribe(c, coll);
    sqlite(
      srv.dbPath,
      `BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
       INSERT INTO StockEvent (id, sku, delta) SELECT 20000 + i, 'PRE', i FROM n; COMMIT;`,
    );
    const last = auditMax(srv.dbPath);
    await waitFor(async () => (await getStatus(srv.port)).auditPosition >= last, { message: 'the server to read the burst' });
    c.stream = await EventStream.open(srv.port, c.s.id);
    await c.stream.waitPrimed();
    const got = c.stream.updates(coll).map((e) => e.json.params.uri);
    const want = Array.from({ length: 150 }, (_, i) => rec('StockEvent', 20001 + i));
    assert.deepEqual([...got].sort(), [...want].sort(), `got ${got.length}: ${c.stream.describe(5)}`);
  } finally {
    await closeClient(c);
    sqlite(srv.dbPath, "DELETE FROM StockEvent WHERE sku = 'PRE'");
  }
});

test('the subscribed URIs are kept with the session (rows of mcpsub_subscription), one row each', async () => {
  const c = await client({ stream: false });
  try {
    const a = rec('Product', 'A-100');
    const b = `${B}/Product?category=tools`;
    await subscribe(c, a);
    await subscribe(c, b);
    assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, c.s.id).subscriptions).sort(), [a, b].sort());
    assert.equal(sqliteRows(srv.dbPath, `SELECT uri FROM mcpsub_subscription WHERE session = '${c.s.id}'`).length, 2);
    await unsubscribe(c, a);
    assert.deepEqual(JSON.parse(sessionRow(srv.dbPath, c.s.id).subscriptions), [b]);
  } finally {
    await closeClient(c);
  }
});

test('--max-subscriptions: the limit is per session, re-subscribing at the limit is fine, unsubscribing frees a slot', async () => {
  const limited = await startServer({ args: ['--max-subscriptions', '3'] });
  try {
    const base = limited.base;
    const s = await McpSession.open(limited.port);
    const t = await McpSession.open(limited.port);
    const uris = ['A-100', 'B-200', 'C-300'].map((k) => `${base}/Product/${k}`);
    for (const uri of uris) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    const err = await s.error('resources/subscribe', { uri: `${base}/Product/D-400` });
    assert.equal(err.code, -32602);
    assert.equal(err.message, 'too many subscriptions: at most 3 per session');
    assert.deepEqual(await s.result('resources/subscribe', { uri: uris[1] }), {}); // replaces, no new slot
    // Another session has its own budget.
    assert.deepEqual(await t.result('resources/subscribe', { uri: `${base}/Product/D-400` }), {});
    assert.equal((await getStatus(limited.port)).subscriptions, 4);
    assert.deepEqual(await s.result('resources/unsubscribe', { uri: uris[0] }), {});
    assert.deepEqual(await s.result('resources/subscribe', { uri: `${base}/Product/D-400` }), {});
    assert.equal((await s.error('resources/subscribe', { uri: `${base}/Product` })).message, 'too many subscriptions: at most 3 per session');
    assert.equal((await getStatus(limited.port)).subscriptions, 4);
    await s.delete();
    await t.delete();
    await waitStatus(limited.port, { sessions: 0, subscriptions: 0 });
  } finally {
    await limited.stop();
  }
});

test('a session holding many subscriptions (found by URI in a map past 16): replace, unsubscribe, the limit and the row stay exact', async () => {
  const many = await startServer({ args: ['--max-subscriptions', '40'] });
  try {
    const base = many.base;
    const s = await McpSession.open(many.port);
    const uris = Array.from({ length: 40 }, (_, i) => `${base}/Product/M-${i}`);
    for (const uri of uris) assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    assert.equal((await s.error('resources/subscribe', { uri: `${base}/Product/M-40` })).message, 'too many subscriptions: at most 40 per session');
    assert.deepEqual(await s.result('resources/subscribe', { uri: uris[7] }), {}); // replaces, at the limit
    for (const uri of uris.slice(0, 5)) assert.deepEqual(await s.result('resources/unsubscribe', { uri }), {});
    assert.deepEqual(await s.result('resources/unsubscribe', { uri: uris[0] }), {}); // not held: {}
    assert.deepEqual(await s.result('resources/subscribe', { uri: `${base}/Product/M-40` }), {});
    assert.equal((await getStatus(many.port)).subscriptions, 36);
    const row = JSON.parse(sessionRow(many.dbPath, s.id).subscriptions).sort();
    assert.deepEqual(row, [...uris.slice(5), `${base}/Product/M-40`].sort());
    const stream = await EventStream.open(many.port, s.id);
    await stream.waitPrimed();
    await rest(many.port, 'PUT', '/Product/M-7', product('M-7'));
    await rest(many.port, 'PUT', '/Product/M-2', product('M-2')); // unsubscribed: quiet
    await rest(many.port, 'PUT', '/Product/M-40', product('M-40'));
    await stream.waitUpdates(2);
    await sleep(200);
    assert.deepEqual(stream.updates().map((e) => e.json.params.uri), [`${base}/Product/M-7`, `${base}/Product/M-40`]);
    stream.close();
    await s.delete();
  } finally {
    await many.stop();
  }
});

test('--strict-subscribe: -32602 without an open GET stream; accepted once it is open; again refused after it closes', async () => {
  const strict = await startServer({ args: ['--strict-subscribe'] });
  try {
    const uri = `${strict.base}/Product/A-100`;
    const s = await McpSession.open(strict.port);
    const err = await s.error('resources/subscribe', { uri });
    assert.equal(err.code, -32602);
    assert.equal(err.message, 'open the GET SSE stream before subscribing to resources');
    assert.equal((await getStatus(strict.port)).subscriptions, 0);
    // Other checks come first: a bad URI is still reported as such.
    assert.equal((await s.error('resources/subscribe', { uri: 'mcpsub://about' })).message, 'resource is not subscribable: mcpsub://about');
    const stream = await EventStream.open(strict.port, s.id);
    await stream.waitPrimed();
    assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
    await rest(strict.port, 'PATCH', '/Product/A-100', { price_cents: 1 });
    await stream.waitUpdates(1, uri);
    stream.close();
    await waitStatus(strict.port, { streams: 0 });
    const err2 = await s.error('resources/subscribe', { uri: `${strict.base}/Product` });
    assert.equal(err2.message, 'open the GET SSE stream before subscribing to resources');
    assert.deepEqual(await s.result('resources/unsubscribe', { uri }), {}); // unsubscribe needs no stream
    await s.delete();
    await waitStatus(strict.port, { sessions: 0, subscriptions: 0, streams: 0 });
  } finally {
    await strict.stop();
  }
});

test('a turn of thousands of updates, the small turns after it, and another such turn: every session every change once, in order', async () => {
  // 40 sessions, each its own filtered URI matching every TURN- row; one
  // put_records of 250 rows is one transaction, read by the tailer in one
  // batch: 10,000 updates the turns' fan-out holds at once (at least 4,500
  // on either worker). A turn after it needs far fewer (one PUT), and the
  // arrays of the first are freed; the third grows them again.
  const keyOf = (i) => `TURN-${String(i).padStart(3, '0')}`;
  for (let i = 0; i < 250; i++) await putProduct(keyOf(i), { price_cents: 1 });
  const clients = [];
  try {
    await subscribedClients(clients, 40, (i) => `${B}/Product?sku=sw=TURN-&price_cents=ne=${-1 - i}`);
    const bulk = async (cents) => {
      const r = await clients[0].s.result('tools/call', {
        name: 'put_records',
        arguments: { table: 'Product', filter: 'sku=sw=TURN-', set: { price_cents: cents } },
      });
      assert.ok(!r.isError, JSON.stringify(r));
    };
    await bulk(2);
    const single = await putProduct(keyOf(0), { price_cents: 3 });
    await bulk(4);
    const expected = 501;
    for (const c of clients) await c.stream.waitUpdates(expected, c.uri, { timeoutMs: 15000 });
    const seqsOf = (c) => c.stream.updates(c.uri).map((e) => idSeq(e.id));
    const first = seqsOf(clients[0]);
    assert.equal(first.length, expected, clients[0].stream.describe());
    assert.ok(first.every((q, i) => i === 0 || q > first[i - 1]), `not in commit order: ${first.join(',')}`);
    assert.equal(first[250], single, 'the single PUT between the two bulk writes');
    const uris = clients[0].stream.updates(clients[0].uri).map((e) => e.json.params.uri);
    for (let i = 0; i < 250; i++) {
      assert.equal(uris.filter((u) => u === rec('Product', keyOf(i))).length, i === 0 ? 3 : 2, keyOf(i));
    }
    for (const c of clients) assert.equal(seqsOf(c).join(','), first.join(','), c.stream.describe());
  } finally {
    for (const c of clients) await closeClient(c);
  }
});

test('sessions of two subscriptions beside those of one on the same topic, one session going from one to two and back: every change once, in order', async () => {
  // The topic's subscribers alone gather a turn's updates; a session of two is served change by
  // change beside them, before them in the topic's list. Y moves between the two as it
  // subscribes to a record and unsubscribes again.
  const keyOf = (i) => `MIX-${String(i).padStart(3, '0')}`;
  for (let i = 0; i < 60; i++) await putProduct(keyOf(i), { price_cents: 1 });
  const shared = `${B}/Product?sku=sw=MIX-`;
  const clients = [];
  try {
    await subscribedClients(clients, 12, () => shared);
    const [x, y] = clients; // x: the shared topic and a record throughout; y: a record for a while
    await subscribe(x, rec('Product', keyOf(0)));
    const bulk = async (cents) => {
      const r = await x.s.result('tools/call', {
        name: 'put_records',
        arguments: { table: 'Product', filter: 'sku=sw=MIX-', set: { price_cents: cents } },
      });
      assert.ok(!r.isError, JSON.stringify(r));
    };
    await bulk(2);
    await putProduct(keyOf(0), { price_cents: 3 });
    await subscribe(y, rec('Product', keyOf(1)));
    await bulk(4);
    await y.stream.waitUpdates(1, rec('Product', keyOf(1))); // delivered before it goes
    await unsubscribe(y, rec('Product', keyOf(1)));
    await bulk(5);
    const expected = 181;
    for (const c of clients) await c.stream.waitUpdates(expected, shared, { timeoutMs: 15000 });
    const seqsOf = (c, uri) => c.stream.updates(uri).map((e) => idSeq(e.id));
    const first = seqsOf(clients[2], shared);
    assert.equal(first.length, expected, clients[2].stream.describe());
    assert.ok(first.every((q, i) => i === 0 || q > first[i - 1]), `not in commit order: ${first.join(',')}`);
    for (const c of clients) assert.equal(seqsOf(c, shared).join(','), first.join(','), c.stream.describe());
    // The records, among the shared topic's updates in commit order.
    await x.stream.waitUpdates(4, rec('Product', keyOf(0)));
    await y.stream.waitUpdates(1, rec('Product', keyOf(1)));
    for (const [c, n] of [[x, 185], [y, 182]]) {
      const all = c.stream.updates().map((e) => idSeq(e.id));
      assert.equal(all.length, n, c.stream.describe());
      assert.ok(all.every((q, i) => i === 0 || q >= all[i - 1]), `not in commit order: ${all.join(',')}`);
    }
    const changes = clients[2].stream.updates(shared).map((e) => [e.json.params.uri, idSeq(e.id)]);
    const of = (list, key) => list.filter(([u]) => u === rec('Product', key)).map(([, q]) => q);
    assert.deepEqual(seqsOf(x, rec('Product', keyOf(0))), of(changes, keyOf(0)));
    assert.deepEqual(seqsOf(y, rec('Product', keyOf(1))), of(changes.slice(61, 121), keyOf(1)));
  } finally {
    for (const c of clients) await closeClient(c);
  }
});

test('sessions of one ne filter each, served by the turn\'s walk: the rows its value excludes, NULLs, a session going to two and back, a resumed stream', async () => {
  // Each session holds only category=ne=C<i>: such topics are matched once a turn, topic by
  // topic, rather than at every change (sub_index_walk). A row notifies a session unless both
  // its images are C<i> or NULL.
  const keyOf = (i) => `WALK-${String(i).padStart(3, '0')}`;
  for (let i = 0; i < 50; i++) await putProduct(keyOf(i), { category: 'A' });
  const clients = [];
  try {
    await subscribedClients(clients, 30, (i) => `${B}/Product?category=ne=C${i}`);
    const [c0, y, r] = clients;
    const c5 = clients[5];
    const bulk = async (set) => {
      const res = await c0.s.result('tools/call', {
        name: 'put_records',
        arguments: { table: 'Product', filter: 'sku=sw=WALK-', set },
      });
      assert.ok(!res.isError, JSON.stringify(res));
    };
    await bulk({ category: 'C0' }); // A -> C0: every session, C0's by the old image
    await bulk({ name: 'two' }); // C0 -> C0: not C0's
    await subscribe(y, rec('Product', keyOf(0))); // y holds two: matched change by change
    await bulk({ category: null }); // C0 -> NULL: not C0's
    await y.stream.waitUpdates(1, rec('Product', keyOf(0)));
    await unsubscribe(y, rec('Product', keyOf(0))); // walked again
    await bulk({ name: 'four' }); // NULL -> NULL: nobody's
    const single = await putProduct(keyOf(1), { category: 'C5' }); // NULL -> C5: not C5's
    const want = (i) => (i === 0 ? 51 : i === 5 ? 150 : 151);
    for (let i = 0; i < clients.length; i++) await clients[i].stream.waitUpdates(want(i), clients[i].uri, { timeoutMs: 15000 });
    await sleep(300); // and no more than those
    const seqsOf = (c) => c.stream.updates(c.uri).map((e) => idSeq(e.id));
    const all = seqsOf(clients[2]);
    assert.equal(all.length, 151, clients[2].stream.describe());
    assert.ok(all.every((q, i) => i === 0 || q > all[i - 1]), `not in commit order: ${all.join(',')}`);
    assert.equal(all[150], single);
    for (let i = 0; i < clients.length; i++) {
      const expected = i === 0 ? [...all.slice(0, 50), single] : i === 5 ? all.slice(0, 150) : all;
      assert.equal(seqsOf(clients[i]).join(','), expected.join(','), clients[i].stream.describe());
    }
    // y's record update among its filtered ones, in commit order.
    const ys = y.stream.updates().map((e) => idSeq(e.id));
    assert.equal(ys.length, 152, y.stream.describe());
    assert.ok(ys.every((q, i) => i === 0 || q >= ys[i - 1]), `not in commit order: ${ys.join(',')}`);
    // A stream resumed with Last-Event-ID gets what the walk delivered while it was gone.
    const last = r.stream.lastId;
    r.stream.close();
    await waitStatus(srv.port, { streams: clients.length - 1 });
    const missed = await putProduct(keyOf(2), { category: 'B' });
    await c0.stream.waitUpdates(52, c0.uri);
    r.stream = await EventStream.open(srv.port, r.s.id, { lastEventId: last });
    const [ev] = await r.stream.waitUpdates(1, r.uri);
    assert.equal(idSeq(ev.id), missed);
    assert.equal(ev.json.params.uri, rec('Product', keyOf(2)));
  } finally {
    for (const c of clients) await closeClient(c);
  }
});

test('teardown: a dropped stream connection ends the stream, not the session; its updates wait for the next GET', async () => {
  const c = await client();
  try {
    const uri = rec('Product', 'T-1');
    await subscribe(c, uri);
    const st0 = await getStatus(srv.port);
    c.stream.close();
    await waitStatus(srv.port, { streams: st0.streams - 1 });
    const st1 = await getStatus(srv.port);
    assert.equal(st1.sessions, st0.sessions, 'the session lives on');
    assert.equal(st1.subscriptions, st0.subscriptions, 'its subscriptions live on');
    await rest(srv.port, 'PUT', '/Product/T-1', product('T-1'));
    await waitFor(async () => (await getStatus(srv.port)).auditPosition >= auditMax(srv.dbPath), { message: 'the change read' });
    c.stream = await EventStream.open(srv.port, c.s.id);
    await c.stream.waitPrimed();
    assert.deepEqual(pairs(c.stream.updates(uri)), [[uri, uri]], c.stream.describe());
    await rest(srv.port, 'DELETE', '/Product/T-1');
    await c.stream.waitUpdates(2, uri);
  } finally {
    await closeClient(c);
  }
});

test('teardown: DELETE /mcp ends the stream and drops every subscription and the session row', async () => {
  const c = await client();
  const st0 = await getStatus(srv.port);
  await subscribe(c, rec('Product', 'A-100'));
  await subscribe(c, `${B}/Product`);
  await subscribe(c, `${B}/Product?category=tools`);
  assert.equal((await getStatus(srv.port)).subscriptions, st0.subscriptions + 3);
  const del = await c.s.delete();
  assert.equal(del.status, 204, del.text);
  await c.stream.waitClosed();
  await waitStatus(srv.port, { sessions: st0.sessions - 1, streams: st0.streams - 1, subscriptions: st0.subscriptions });
  assert.equal(sessionRow(srv.dbPath, c.s.id), undefined);
  const gone = await c.s.call('resources/subscribe', { uri: `${B}/Product` }).catch((e) => e);
  assert.ok(gone instanceof Error && /HTTP 404/.test(gone.message), String(gone));
});

test('teardown: idle timeout and the periodic sweep end idle sessions (subscriptions and rows too); a stream keeps one alive', async () => {
  const idle = await startServer({ args: ['--idle-timeout', '2'] });
  try {
    const uri = `${idle.base}/Product/A-100`;
    const lonely = await McpSession.open(idle.port);
    assert.deepEqual(await lonely.result('resources/subscribe', { uri }), {});
    const kept = await McpSession.open(idle.port);
    assert.deepEqual(await kept.result('resources/subscribe', { uri: `${idle.base}/Product` }), {});
    const stream = await EventStream.open(idle.port, kept.id);
    await stream.waitPrimed();
    await waitStatus(idle.port, { sessions: 2, subscriptions: 2, streams: 1 });
    // The lonely one goes after 2 s idle; the streaming one stays.
    await waitStatus(idle.port, { sessions: 1, subscriptions: 1, streams: 1 }, { timeoutMs: 6000 });
    await waitFor(() => sessionRow(idle.dbPath, lonely.id) === undefined, { timeoutMs: 3000, message: 'the idle row pruned' });
    assert.ok(sessionRow(idle.dbPath, kept.id), 'the streaming session keeps its row');
    const gone = await lonely.call('ping').catch((e) => e);
    assert.ok(gone instanceof Error && /HTTP 404/.test(gone.message), String(gone));
    // Still notified after the idle timeout passed.
    await rest(idle.port, 'PATCH', '/Product/B-200', { price_cents: 1 });
    await stream.waitUpdates(1, `${idle.base}/Product`);
    // Its stream dropped, it too goes idle and is swept.
    stream.close();
    await waitStatus(idle.port, { sessions: 0, subscriptions: 0, streams: 0, waiters: 0 }, { timeoutMs: 6000 });
  } finally {
    await idle.stop();
  }
});

test('teardown: with every client gone, /status is back to zero and the server exits cleanly', async () => {
  await waitStatus(srv.port, { sessions: 0, streams: 0, subscriptions: 0, waiters: 0 });
  await srv.stop();
});

test('a write is answered before its commit is fanned out to the subscribers of the worker that made it', { skip: PG_MODE && 'on PostgreSQL the tailer may hear of the commit first' }, async () => {
  // One process: the write and all 40 streams on one worker, whose output goes in the order it
  // was queued; the PUT's answer (queued at its commit) comes before the 40 notifications.
  const one = await startServer({ args: ['--workers', '0'] });
  const clients = [];
  try {
    const uri = `${one.base}/Product`;
    for (let i = 0; i < 40; i++) {
      const s = await McpSession.open(one.port);
      const stream = await EventStream.open(one.port, s.id);
      await stream.waitPrimed();
      assert.deepEqual(await s.result('resources/subscribe', { uri }), {});
      clients.push({ s, stream });
    }
    const conn = await RawConnection.open(one.port);
    let answeredAt;
    conn.socket.on('data', () => {
      answeredAt ??= stamp(); // the answer's first bytes, on the clock the streams' events use
    });
    conn.write(
      buildRequest(one.port, {
        method: 'PUT',
        path: '/Product/ORD-1',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify(product('ORD-1')),
      }),
    );
    assert.equal((await conn.readResponse()).status, 201);
    const first = [];
    for (const c of clients) first.push((await c.stream.waitUpdates(1, uri))[0].at);
    conn.close();
    const earlier = first.filter((at) => at < answeredAt).length;
    // Answered last (behind the fan-out), all 40 would come first.
    assert.ok(earlier < 20, `${earlier} of 40 notifications arrived before the write's answer`);
  } finally {
    for (const c of clients) {
      c.stream.close();
      await c.s.delete();
    }
    await one.stop();
  }
});
