// A session's GET /mcp SSE stream read event by event, for the
// subscription tests: every event is kept in arrival order with its id,
// its data parsed as JSON, and a stamp from one process-wide counter, so
// that a test can tell whether an event arrived before or after something
// else it observed (a response on another connection). Waits are bounded
// and event-driven (no polling of the socket).

import { StringDecoder } from 'node:string_decoder';

import { openStream } from './raw.mjs';

let clock = 0;
/* A process-wide arrival counter: stamp() after an await orders it against stream events. */
export const stamp = () => ++clock;

export const UPDATED = 'notifications/resources/updated';
export const LIST_CHANGED = 'notifications/resources/list_changed';

export class EventStream {
  constructor(conn, head) {
    this.conn = conn;
    this.head = head;
    this.events = []; // { id, data, retry, fields, json, at (arrival stamp), t (arrival, ms) }
    this.comments = [];
    this._decoder = new StringDecoder('utf8');
    this._pending = '';
    this._waiters = new Set();
    conn.socket.on('data', () => this._take());
    conn.closedPromise.then(() => {
      this._take();
      this._wake();
    });
    this._take();
  }

  /*
   * GET /mcp for the session, with Last-Event-ID when lastEventId is given.
   * Resolves once the response head is in; throws unless it is 200.
   */
  static async open(port, sessionId, { lastEventId, headers = {}, timeoutMs = 5000 } = {}) {
    const h = { ...headers };
    if (lastEventId !== undefined) h['Last-Event-ID'] = lastEventId;
    const { conn, head } = await openStream(port, sessionId, { headers: h, timeoutMs });
    if (head.status !== 200) {
      conn.close();
      throw new Error(`GET /mcp answered ${head.status}`);
    }
    return new EventStream(conn, head);
  }

  /* Parses the complete event blocks received so far. */
  _take() {
    if (this.conn.buf.length > 0) {
      this._pending += this._decoder.write(this.conn.buf);
      this.conn.buf = Buffer.alloc(0);
    }
    let added = false;
    for (;;) {
      const end = this._pending.indexOf('\n\n');
      if (end < 0) break;
      const block = this._pending.slice(0, end);
      this._pending = this._pending.slice(end + 2);
      const ev = { fields: [] };
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) {
          this.comments.push(line.slice(1).trim());
          continue;
        }
        const i = line.indexOf(':');
        const name = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        ev.fields.push([name, value]);
        if (name === 'data') ev.data = ev.data === undefined ? value : `${ev.data}\n${value}`;
        else if (name === 'id') ev.id = value;
        else if (name === 'retry') ev.retry = value;
        else if (name === 'event') ev.event = value;
      }
      if (ev.fields.length === 0) continue;
      if (ev.data) {
        try {
          ev.json = JSON.parse(ev.data);
        } catch {
          ev.json = undefined;
        }
      }
      ev.at = stamp();
      ev.t = Date.now();
      this.events.push(ev);
      added = true;
    }
    if (added) this._wake();
  }

  _wake() {
    for (const w of [...this._waiters]) w();
  }

  get closed() {
    return this.conn.closed;
  }

  /* The id of the last event that had one (what a client sends as Last-Event-ID). */
  get lastId() {
    for (let i = this.events.length - 1; i >= 0; i--) if (this.events[i].id !== undefined) return this.events[i].id;
    return undefined;
  }

  /* The priming event: an id and an empty data field. */
  get priming() {
    return this.events.find((e) => e.id !== undefined && e.data === '' && e.retry === undefined);
  }

  /* JSON-RPC messages received, optionally only those with method. */
  messages(method) {
    return this.events.filter((e) => e.json && (method === undefined || e.json.method === method));
  }

  /* resources/updated events, optionally only those for one subscribedUri. */
  updates(subscribedUri) {
    return this.messages(UPDATED).filter((e) => subscribedUri === undefined || e.json.params?.subscribedUri === subscribedUri);
  }

  /*
   * Resolves with check()'s first value other than undefined/false, checked
   * on every new event. Rejects after timeoutMs, or when the stream closes
   * first (unless allowClosed).
   */
  waitUntil(check, { timeoutMs = 5000, what = 'events', allowClosed = false } = {}) {
    return new Promise((resolve, reject) => {
      let timer;
      const done = () => {
        clearTimeout(timer);
        this._waiters.delete(attempt);
      };
      const attempt = () => {
        let v;
        try {
          v = check(this);
        } catch (err) {
          done();
          reject(err);
          return;
        }
        if (v !== undefined && v !== false) {
          done();
          resolve(v);
        } else if (this.closed && !allowClosed) {
          done();
          reject(new Error(`stream closed while waiting for ${what}; events: ${this.describe()}`));
        }
      };
      timer = setTimeout(() => {
        done();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; events: ${this.describe()}`));
      }, timeoutMs);
      this._waiters.add(attempt);
      attempt();
    });
  }

  /* Waits for the priming event; returns it. */
  waitPrimed(opts = {}) {
    return this.waitUntil((s) => s.priming, { what: 'the priming event', ...opts });
  }

  /* Waits until at least n updates (for subscribedUri, when given) arrived; returns them. */
  waitUpdates(n, subscribedUri, opts = {}) {
    return this.waitUntil(
      (s) => {
        const u = s.updates(subscribedUri);
        return u.length >= n ? u : undefined;
      },
      { what: `${n} update(s)${subscribedUri ? ` for ${subscribedUri}` : ''}`, ...opts },
    );
  }

  /* Resolves when the server has closed the stream. */
  waitClosed({ timeoutMs = 5000 } = {}) {
    return this.waitUntil((s) => s.closed, { timeoutMs, what: 'the stream to close', allowClosed: true });
  }

  describe(max = 40) {
    const shown = this.events.slice(-max).map((e) => ({ id: e.id, data: e.data, retry: e.retry }));
    return `${this.events.length} event(s), last ${shown.length}: ${JSON.stringify(shown)}`;
  }

  close() {
    this.conn.close();
  }
}

/* [uri, subscribedUri] of an update event. */
export const pair = (e) => [e.json.params.uri, e.json.params.subscribedUri];

/* The audit seq named by one of our event ids ("<seq>-<tag><n>"). */
export function idSeq(id) {
  const m = /^(\d+)-[tsr]\d+$/.exec(id || '');
  if (!m) throw new Error(`not an mcpsub event id: ${JSON.stringify(id)}`);
  return Number(m[1]);
}
