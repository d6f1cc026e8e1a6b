// The official SDK client as the tests drive it for subscriptions.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { getStatus } from './server.mjs';
import { UPDATED } from './sse.mjs';
import { waitStatus } from './subs.mjs';

/*
 * An SDK client of srv whose GET stream is open (the SDK opens it by
 * itself; this waits until the server counts it). Keeps what the
 * notification handler received (handled) and every raw resources/updated
 * message (raw: { uri, subscribedUri }), plus transport errors. The SDK
 * reconnects its stream on its own (Last-Event-ID), 30 tries at most.
 */
export async function connectSdk(srv, name) {
  const transport = new StreamableHTTPClientTransport(new URL(srv.url), {
    reconnectionOptions: { initialReconnectionDelay: 100, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1.5, maxRetries: 30 },
  });
  const client = new Client({ name, version: '1.0.0' }, { capabilities: {} });
  const c = { client, transport, handled: [], raw: [], errors: [] };
  client.onerror = (err) => c.errors.push(String(err));
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
    c.handled.push(n.params);
  });
  const before = (await getStatus(srv.port)).streams;
  await client.connect(transport);
  const deliver = transport.onmessage;
  transport.onmessage = (msg, extra) => {
    if (msg.method === UPDATED) c.raw.push({ uri: msg.params?.uri, subscribedUri: msg.params?.subscribedUri });
    deliver?.(msg, extra);
  };
  await waitStatus(srv.port, { streams: before + 1 });
  return c;
}
