// Raw 2026-07-28 requests: the envelope, a POST with the headers that
// repeat it, and a listen stream read event by event.

import { RawConnection, buildRequest, parseSse, request } from './raw.mjs';
import { waitFor } from './wait.mjs';

export const V = '2026-07-28';

/* The body of a 2026-07-28 request: the envelope in params._meta. */
export function modern(method, params = {}, id = 1) {
  return {
    jsonrpc: '2.0',
    id,
    method,
    params: {
      ...params,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': V,
        'io.modelcontextprotocol/clientCapabilities': {},
        'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
      },
    },
  };
}

export const HEADERS = { Accept: 'application/json, text/event-stream', 'Content-Type': 'application/json' };

/* POSTs msg with the standard headers (overridable; null drops one). */
export function post(port, msg, headers = {}) {
  const h = { ...HEADERS, 'MCP-Protocol-Version': V, 'Mcp-Method': msg.method, ...headers };
  for (const [k, v] of Object.entries(h)) if (v === null) delete h[k];
  return request(port, { method: 'POST', path: '/mcp', headers: h, body: JSON.stringify(msg) });
}

/* Opens a raw listen stream; returns the connection and a reader of its events. */
export async function rawListen(port, filter, { id = 'l1', meta = {} } = {}) {
  const msg = modern('subscriptions/listen', { notifications: filter }, id);
  Object.assign(msg.params._meta, meta);
  const conn = await RawConnection.open(port);
  conn.write(buildRequest(port, { method: 'POST', path: '/mcp', headers: { ...HEADERS, 'MCP-Protocol-Version': V, 'Mcp-Method': 'subscriptions/listen' }, body: JSON.stringify(msg) }));
  const raw = () => conn.all.toString('utf8');
  const text = () => {
    const at = raw().indexOf('\r\n\r\n');
    return at < 0 ? '' : raw().slice(at + 4);
  };
  const events = () => parseSse(text()).events.filter((e) => e.data !== undefined).map((e) => ({ ...e, json: JSON.parse(e.data) }));
  await waitFor(() => events().length >= 1, { timeoutMs: 5000, message: 'the acknowledgement' });
  return { conn, text, events, head: raw().slice(0, raw().indexOf('\r\n\r\n')) };
}

