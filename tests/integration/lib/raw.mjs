// A small raw HTTP/1.1 client over node:net, for tests that must control
// the exact bytes on the wire (pipelining, malformed input, slow headers,
// limits) and see the exact bytes that come back. Plus MCP helpers built on
// it: mcpPost() and initialize().

import net from 'node:net';

import { withTimeout } from './wait.mjs';

const CRLF = '\r\n';

/* ---------------------------------------------------------------------- */
/* Response parsing                                                        */

/*
 * Parses one response at the start of buf. Returns { response, consumed }
 * or null when more bytes are needed. closed: the peer has closed, so a
 * body without framing ends here. headRequest: the response has no body.
 * Throws on bytes that are not an HTTP/1.x response.
 */
export function parseResponse(buf, { closed = false, headRequest = false } = {}) {
  const headEnd = buf.indexOf('\r\n\r\n');
  if (headEnd < 0) {
    if (closed && buf.length > 0) throw new Error(`incomplete response head: ${JSON.stringify(buf.toString('latin1'))}`);
    return null;
  }
  const headText = buf.subarray(0, headEnd).toString('latin1');
  const lines = headText.split(CRLF);
  const m = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/.exec(lines[0]);
  if (!m) throw new Error(`bad status line: ${JSON.stringify(lines[0])}`);
  const status = Number(m[2]);
  const rawHeaders = [];
  const headers = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    if (i <= 0) throw new Error(`bad header line: ${JSON.stringify(line)}`);
    const name = line.slice(0, i);
    const value = line.slice(i + 1).trim();
    rawHeaders.push([name, value]);
    const lname = name.toLowerCase();
    headers[lname] = lname in headers ? `${headers[lname]}, ${value}` : value;
  }
  let offset = headEnd + 4;
  let body;
  let streaming = false;
  const te = (headers['transfer-encoding'] || '').toLowerCase();
  if (headRequest || (status >= 100 && status < 200) || status === 204 || status === 304) {
    body = Buffer.alloc(0);
  } else if (te.includes('chunked')) {
    const parts = [];
    let p = offset;
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', p);
      if (lineEnd < 0) return null;
      const size = parseInt(buf.subarray(p, lineEnd).toString('latin1').split(';')[0], 16);
      if (Number.isNaN(size)) throw new Error('bad chunk size');
      p = lineEnd + 2;
      if (size === 0) {
        // trailers until an empty line
        for (;;) {
          const e = buf.indexOf('\r\n', p);
          if (e < 0) return null;
          const empty = e === p;
          p = e + 2;
          if (empty) break;
        }
        break;
      }
      if (buf.length < p + size + 2) return null;
      parts.push(buf.subarray(p, p + size));
      p += size + 2;
    }
    body = Buffer.concat(parts);
    offset = p;
  } else if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    if (!Number.isInteger(n) || n < 0) throw new Error(`bad Content-Length ${headers['content-length']}`);
    if (buf.length < offset + n) {
      if (closed) throw new Error(`connection closed after ${buf.length - offset} of ${n} body bytes`);
      return null;
    }
    body = buf.subarray(offset, offset + n);
    offset += n;
  } else {
    // No framing: the body runs until the connection closes (e.g. a stream).
    if (!closed) return null;
    body = buf.subarray(offset);
    offset = buf.length;
    streaming = true;
  }
  return { response: makeResponse(status, m[3] || '', headers, rawHeaders, Buffer.from(body), streaming), consumed: offset };
}

function makeResponse(status, reason, headers, rawHeaders, body, streaming = false) {
  const text = body.toString('utf8');
  return {
    status,
    reason,
    headers,
    rawHeaders,
    body,
    text,
    streaming,
    /* Parsed JSON body; an SSE body yields the JSON of its first data event. */
    json() {
      const ct = (headers['content-type'] || '').toLowerCase();
      if (ct.startsWith('text/event-stream')) {
        const ev = parseSse(text).events.find((e) => e.data !== undefined && e.data !== '');
        if (!ev) throw new Error(`no data event in SSE body: ${JSON.stringify(text)}`);
        return JSON.parse(ev.data);
      }
      try {
        return JSON.parse(text);
      } catch (err) {
        throw new Error(`body is not JSON (status ${status}): ${JSON.stringify(text.slice(0, 500))}: ${err.message}`);
      }
    },
  };
}

/* Parses every complete response in buf (e.g. pipelined answers). */
export function parseResponses(buf, { closed = false } = {}) {
  const responses = [];
  let rest = buf;
  for (;;) {
    if (rest.length === 0) break;
    const r = parseResponse(rest, { closed });
    if (!r) break;
    responses.push(r.response);
    rest = rest.subarray(r.consumed);
  }
  return { responses, rest };
}

/*
 * Parses an SSE text into events (WHATWG rules, simplified): returns
 * { events: [{ id, event, data, retry, fields: [[name, value]...] }],
 *   comments: [text...], rest } where rest is an incomplete trailing block.
 * data is undefined for an event block without a data line.
 */
export function parseSse(text) {
  const normalized = text.replace(/\r\n?/g, '\n');
  const blocks = normalized.split('\n\n');
  const rest = blocks.pop();
  const events = [];
  const comments = [];
  for (const block of blocks) {
    if (block === '') continue;
    const ev = { fields: [] };
    let sawField = false;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        comments.push(line.slice(1).replace(/^ /, ''));
        continue;
      }
      const i = line.indexOf(':');
      const name = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      ev.fields.push([name, value]);
      sawField = true;
      if (name === 'data') ev.data = ev.data === undefined ? value : `${ev.data}\n${value}`;
      else if (name === 'id') ev.id = value;
      else if (name === 'event') ev.event = value;
      else if (name === 'retry') ev.retry = value;
    }
    if (sawField) events.push(ev);
  }
  return { events, comments, rest };
}

/* ---------------------------------------------------------------------- */
/* Connections                                                             */

export class RawConnection {
  constructor(socket) {
    this.socket = socket;
    this.buf = Buffer.alloc(0); // unparsed received bytes
    this.all = Buffer.alloc(0); // everything ever received
    this.closed = false;
    this.error = null;
    this.waiters = new Set();
    this.closedPromise = new Promise((resolve) => {
      socket.on('close', () => {
        this.closed = true;
        resolve();
        this._wake();
      });
    });
    socket.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.all = Buffer.concat([this.all, d]);
      this._wake();
    });
    socket.on('error', (err) => {
      // A reset after the server answered (e.g. 413, 431, 400 then close)
      // is expected; whatever was received stays readable.
      this.error = err;
      this._wake();
    });
  }

  static open(port, { host = '127.0.0.1', timeoutMs = 5000 } = {}) {
    return withTimeout(
      new Promise((resolve, reject) => {
        const socket = net.connect({ host, port });
        socket.setNoDelay(true);
        socket.once('connect', () => {
          socket.removeListener('error', reject);
          resolve(new RawConnection(socket));
        });
        socket.once('error', reject);
      }),
      timeoutMs,
      `connect to ${host}:${port}`,
    );
  }

  _wake() {
    for (const w of [...this.waiters]) w();
  }

  /* Resolves when check() returns a value other than undefined. */
  _until(check, timeoutMs, what) {
    return new Promise((resolve, reject) => {
      let timer;
      const attempt = () => {
        let v;
        try {
          v = check();
        } catch (err) {
          cleanup();
          reject(err);
          return;
        }
        if (v !== undefined) {
          cleanup();
          resolve(v);
        }
      };
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters.delete(attempt);
      };
      timer = setTimeout(() => {
        cleanup();
        reject(
          new Error(
            `timed out after ${timeoutMs} ms waiting for ${what}; received so far: ${JSON.stringify(this.all.toString('latin1').slice(0, 2000))}`,
          ),
        );
      }, timeoutMs);
      this.waiters.add(attempt);
      attempt();
    });
  }

  write(bytes) {
    if (this.closed || this.socket.destroyed) return;
    try {
      this.socket.write(bytes);
    } catch {
      /* peer gone; the read side reports what came back */
    }
  }

  /* Reads one complete response (consuming it). */
  readResponse({ timeoutMs = 5000, headRequest = false } = {}) {
    return this._until(
      () => {
        const r = parseResponse(this.buf, { closed: this.closed, headRequest });
        if (r) {
          this.buf = this.buf.subarray(r.consumed);
          return r.response;
        }
        if (this.closed) throw new Error(`connection closed before a complete response; received ${JSON.stringify(this.all.toString('latin1').slice(0, 2000))}`);
        return undefined;
      },
      timeoutMs,
      'a complete response',
    );
  }

  /* Reads just a response head (status, headers) and leaves the body bytes in this.buf. */
  readHead({ timeoutMs = 5000 } = {}) {
    return this._until(
      () => {
        const end = this.buf.indexOf('\r\n\r\n');
        if (end < 0) {
          if (this.closed) throw new Error(`connection closed before a response head; received ${JSON.stringify(this.all.toString('latin1'))}`);
          return undefined;
        }
        const head = this.buf.subarray(0, end + 4);
        const parsed = parseResponse(Buffer.concat([head]), { headRequest: true });
        this.buf = this.buf.subarray(end + 4);
        return parsed.response;
      },
      timeoutMs,
      'a response head',
    );
  }

  /* Waits until pred(text of unparsed bytes) is truthy; returns its value. */
  waitForText(pred, { timeoutMs = 5000, what = 'data' } = {}) {
    return this._until(
      () => {
        const v = pred(this.buf.toString('utf8'));
        if (v) return v;
        if (this.closed) throw new Error(`connection closed while waiting for ${what}; body so far ${JSON.stringify(this.buf.toString('utf8'))}`);
        return undefined;
      },
      timeoutMs,
      what,
    );
  }

  /* Resolves when the peer has closed the connection. */
  waitClosed({ timeoutMs = 5000 } = {}) {
    return withTimeout(this.closedPromise, timeoutMs, 'the server to close the connection');
  }

  close() {
    this.socket.destroy();
  }
}

/*
 * Sends exactly `bytes` on a new connection and collects the response(s):
 * until `responses` complete responses are parsed (when given), else until
 * the server closes. Returns { responses, raw, closed }.
 */
export async function rawRequest(port, bytes, { timeoutMs = 5000, responses: want } = {}) {
  const conn = await RawConnection.open(port);
  try {
    conn.write(bytes);
    const got = [];
    if (want !== undefined) {
      for (let i = 0; i < want; i++) got.push(await conn.readResponse({ timeoutMs }));
    } else {
      await conn.waitClosed({ timeoutMs });
      got.push(...parseResponses(conn.buf, { closed: true }).responses);
    }
    return { responses: got, raw: conn.all.toString('latin1'), closed: conn.closed };
  } finally {
    conn.close();
  }
}

/*
 * Builds request bytes. headers: object (a null value drops a default).
 * Host defaults to 127.0.0.1:port; Content-Length is added for a body
 * unless Transfer-Encoding is given.
 */
export function buildRequest(port, { method = 'GET', path = '/', headers = {}, body } = {}) {
  const h = { Host: `127.0.0.1:${port}` };
  const bodyBuf = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  const lower = Object.keys(headers).map((k) => k.toLowerCase());
  if (bodyBuf !== undefined && !lower.includes('transfer-encoding') && !lower.includes('content-length')) {
    h['Content-Length'] = String(bodyBuf.length);
  }
  for (const [k, v] of Object.entries(headers)) {
    for (const existing of Object.keys(h)) if (existing.toLowerCase() === k.toLowerCase()) delete h[existing];
    if (v !== null && v !== undefined) h[k] = v;
  }
  let head = `${method} ${path} HTTP/1.1${CRLF}`;
  for (const [k, v] of Object.entries(h)) head += `${k}: ${v}${CRLF}`;
  head += CRLF;
  return bodyBuf === undefined ? Buffer.from(head, 'latin1') : Buffer.concat([Buffer.from(head, 'latin1'), bodyBuf]);
}

/* One request on a new connection; resolves with its response. */
export async function request(port, opts = {}) {
  const { responses } = await rawRequest(port, buildRequest(port, opts), { timeoutMs: opts.timeoutMs ?? 5000, responses: 1 });
  return responses[0];
}

/* ---------------------------------------------------------------------- */
/* MCP over the raw client                                                 */

export const LATEST_PROTOCOL = '2025-11-25';
export const MCP_ACCEPT = 'application/json, text/event-stream';

// Negotiated protocol version per session id, so that mcpPost sends the
// matching MCP-Protocol-Version header by default.
const negotiated = new Map();
let nextId = 1;
export const newId = () => nextId++;

/*
 * POST /mcp. message: an object/array (serialised) or a string (sent
 * as is). sessionId: null for none. Options: headers (merged; null drops
 * a default), protocolVersion (header value; null = omit; default: the
 * session's negotiated version).
 */
export function mcpPost(port, sessionId, message, { headers = {}, protocolVersion, timeoutMs = 10000 } = {}) {
  const body = typeof message === 'string' || Buffer.isBuffer(message) ? message : JSON.stringify(message);
  const h = { Accept: MCP_ACCEPT, 'Content-Type': 'application/json' };
  if (sessionId) h['Mcp-Session-Id'] = sessionId;
  const pv = protocolVersion === undefined ? (sessionId ? negotiated.get(sessionId) : undefined) : protocolVersion;
  if (pv) h['MCP-Protocol-Version'] = pv;
  return request(port, { method: 'POST', path: '/mcp', headers: { ...h, ...headers }, body, timeoutMs });
}

export function initializeMessage({ protocolVersion = LATEST_PROTOCOL, clientInfo = { name: 'mcpsub-raw-test', version: '0.0.1' }, capabilities = {}, id = newId() } = {}) {
  return {
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion, capabilities, clientInfo },
  };
}

/*
 * initialize + notifications/initialized. Returns
 * { sessionId, response, result, protocolVersion }. Throws unless the
 * server answered 200 with a session id and a result.
 */
export async function initializeSession(port, { protocolVersion = LATEST_PROTOCOL, clientInfo, capabilities, headers = {}, sendInitialized = true } = {}) {
  const res = await mcpPost(port, null, initializeMessage({ protocolVersion, clientInfo, capabilities }), { headers });
  if (res.status !== 200) throw new Error(`initialize answered ${res.status}: ${res.text}`);
  const sessionId = res.headers['mcp-session-id'];
  if (!sessionId) throw new Error(`initialize response has no Mcp-Session-Id: ${JSON.stringify(res.headers)}`);
  const msg = res.json();
  if (!msg.result) throw new Error(`initialize failed: ${res.text}`);
  negotiated.set(sessionId, msg.result.protocolVersion);
  if (sendInitialized) {
    const n = await mcpPost(port, sessionId, { jsonrpc: '2.0', method: 'notifications/initialized' }, { headers });
    if (n.status !== 202) throw new Error(`notifications/initialized answered ${n.status}: ${n.text}`);
  }
  return { sessionId, response: res, result: msg.result, protocolVersion: msg.result.protocolVersion };
}

/* initialize; returns the session id. */
export async function initialize(port, opts = {}) {
  return (await initializeSession(port, opts)).sessionId;
}

/* DELETE /mcp for a session; returns the response. */
export function deleteSession(port, sessionId, { headers = {} } = {}) {
  const h = {};
  if (sessionId) h['Mcp-Session-Id'] = sessionId;
  const pv = sessionId && negotiated.get(sessionId);
  if (pv) h['MCP-Protocol-Version'] = pv;
  return request(port, { method: 'DELETE', path: '/mcp', headers: { ...h, ...headers } });
}

/*
 * Opens GET /mcp (the session's SSE stream) and reads the response head.
 * Returns { conn, head }; the event bytes accumulate in conn.buf.
 */
export async function openStream(port, sessionId, { headers = {}, timeoutMs = 5000 } = {}) {
  const h = { Accept: 'text/event-stream' };
  if (sessionId) h['Mcp-Session-Id'] = sessionId;
  const pv = sessionId && negotiated.get(sessionId);
  if (pv) h['MCP-Protocol-Version'] = pv;
  const conn = await RawConnection.open(port);
  conn.write(buildRequest(port, { method: 'GET', path: '/mcp', headers: { ...h, ...headers } }));
  try {
    const head = await conn.readHead({ timeoutMs });
    return { conn, head };
  } catch (err) {
    conn.close();
    throw err;
  }
}
