// The exactly-once check of the fault tests: what a subscriber received
// over all its streams, against audit_log. For each (uri, subscribedUri)
// pair, the updates' ids name real changes of that URI in strictly growing
// order (nothing announced twice, nothing out of order), and every change
// of a subscribed URI after `from` is covered by an update naming it or a
// newer change of the same URI (recovery names the newest; nothing lost).
// Subscriptions are record or collection URIs (no filters) under base.

import assert from 'node:assert/strict';

import { sqliteRows } from './sqlite.mjs';
import { idSeq } from './sse.mjs';

/* The table and key (or null for a collection) a URI under base names. */
function target(base, uri) {
  const [table, key] = uri.slice(base.length + 1).split('/').map(decodeURIComponent);
  return { table, key: key ?? null };
}

/*
 * streams: the EventStreams of one subscriber, in order; subs: its
 * subscribed URIs; from: the audit seq after which every change must be
 * covered; upto: the last audit seq to require.
 */
export function assertExactlyOnce({ db, base, streams, subs, from, upto, what = 'subscriber' }) {
  const updates = streams.flatMap((st) => st.updates()).filter((e) => /-t\d+$/.test(e.id));
  const changes = sqliteRows(db, `SELECT seq, tbl, key FROM audit_log WHERE seq > ${Number(from)} AND seq <= ${Number(upto)} ORDER BY seq`);
  const seqOf = new Map();
  for (const c of sqliteRows(db, `SELECT seq, tbl, key FROM audit_log WHERE seq > ${Number(from)}`)) seqOf.set(c.seq, c);
  for (const sub of subs) {
    const t = target(base, sub);
    const mine = updates.filter((e) => e.json.params.subscribedUri === sub);
    const byUri = new Map();
    for (const e of mine) {
      const list = byUri.get(e.json.params.uri) ?? [];
      list.push(idSeq(e.id));
      byUri.set(e.json.params.uri, list);
    }
    for (const [uri, seqs] of byUri) {
      for (let i = 1; i < seqs.length; i++) {
        assert.ok(seqs[i] > seqs[i - 1], `${what}: ${sub} <- ${uri}: update ${seqs[i]} after ${seqs[i - 1]} (announced twice or out of order): ${seqs}`);
      }
      const ut = target(base, uri);
      for (const s of seqs) {
        const c = seqOf.get(s);
        assert.ok(c && c.tbl === ut.table && c.key === ut.key, `${what}: ${sub} <- ${uri}: update names seq ${s}, not a change of that URI`);
      }
    }
    for (const c of changes) {
      if (c.tbl !== t.table || (t.key !== null && c.key !== t.key)) continue;
      const uri = `${base}/${encodeURIComponent(c.tbl)}/${encodeURIComponent(c.key)}`;
      const seqs = byUri.get(uri) ?? [];
      assert.ok(seqs.some((s) => s >= c.seq), `${what}: ${sub}: change ${c.seq} of ${uri} never announced (got ${seqs})`);
    }
  }
}
