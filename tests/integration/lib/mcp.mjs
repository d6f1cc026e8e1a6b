// A thin MCP session over the raw client: JSON-RPC calls with strict
// checks on the transport (HTTP 200, JSON, matching id), so that a test can
// focus on the result or error it is about.

import assert from 'node:assert/strict';

import { initializeSession, mcpPost, newId, deleteSession } from './raw.mjs';

export class McpSession {
  /* headers: sent with every request (e.g. Authorization). */
  constructor(port, sessionId, protocolVersion, headers = {}) {
    this.port = port;
    this.id = sessionId;
    this.protocolVersion = protocolVersion;
    this.headers = headers;
  }

  static async open(port, opts = {}) {
    const s = await initializeSession(port, opts);
    return new McpSession(port, s.sessionId, s.protocolVersion, opts.headers);
  }

  /* Sends a request; asserts HTTP 200 and a JSON-RPC response with our id. Returns the message. */
  async call(method, params, { headers } = {}) {
    const id = newId();
    const msg = { jsonrpc: '2.0', id, method };
    if (params !== undefined) msg.params = params;
    const res = await mcpPost(this.port, this.id, msg, { headers: { ...this.headers, ...headers } });
    assert.equal(res.status, 200, `${method}: HTTP ${res.status} ${res.text}`);
    const body = res.json();
    assert.equal(body.jsonrpc, '2.0', `${method}: ${res.text}`);
    assert.equal(body.id, id, `${method}: response id: ${res.text}`);
    return body;
  }

  /* A request that must succeed; returns its result. */
  async result(method, params) {
    const body = await this.call(method, params);
    assert.ok(!body.error, `${method} ${JSON.stringify(params)} failed: ${JSON.stringify(body.error)}`);
    assert.ok(body.result !== undefined, `${method}: no result: ${JSON.stringify(body)}`);
    return body.result;
  }

  /* A request that must fail with a JSON-RPC error; returns the error. */
  async error(method, params) {
    const body = await this.call(method, params);
    assert.ok(body.error, `${method} ${JSON.stringify(params)} should fail, got ${JSON.stringify(body)}`);
    assert.equal(typeof body.error.code, 'number');
    assert.equal(typeof body.error.message, 'string');
    return body.error;
  }

  /* resources/read of one URI; returns the result. */
  read(uri) {
    return this.result('resources/read', { uri });
  }

  /* resources/read of a JSON resource: { result, content, value } with value = JSON.parse(text). */
  async readJson(uri) {
    const result = await this.read(uri);
    assert.ok(Array.isArray(result.contents), `contents: ${JSON.stringify(result)}`);
    assert.ok(result.contents.length >= 1, `contents empty: ${JSON.stringify(result)}`);
    const content = result.contents[0];
    assert.equal(typeof content.text, 'string', `contents[0].text: ${JSON.stringify(content)}`);
    return { result, content, value: JSON.parse(content.text) };
  }

  /*
   * tools/call that must produce a result (not a JSON-RPC error). Returns
   * { result, isError, text, data } where data is the JSON of content[0].text
   * (undefined when it is not JSON).
   */
  async tool(name, args) {
    const result = await this.result('tools/call', { name, arguments: args });
    assert.ok(Array.isArray(result.content), `tools/call ${name}: content: ${JSON.stringify(result)}`);
    assert.ok(result.content.length >= 1, `tools/call ${name}: empty content`);
    assert.equal(result.content[0].type, 'text', `tools/call ${name}: content[0].type`);
    const text = result.content[0].text;
    assert.equal(typeof text, 'string');
    let data;
    try {
      data = JSON.parse(text);
    } catch {
      data = undefined;
    }
    return { result, isError: result.isError === true, text, data };
  }

  /* tools/call that must succeed (isError not true) and return JSON text; returns the JSON. */
  async toolOk(name, args) {
    const r = await this.tool(name, args);
    assert.ok(!r.isError, `tools/call ${name} ${JSON.stringify(args)} reported an error: ${r.text}`);
    assert.ok(r.data !== undefined, `tools/call ${name}: text is not JSON: ${r.text}`);
    return r.data;
  }

  async delete() {
    return deleteSession(this.port, this.id, { headers: this.headers });
  }
}

/* Deep search: does v contain the string s anywhere as a value? */
export function containsValue(v, s) {
  if (v === s) return true;
  if (Array.isArray(v)) return v.some((x) => containsValue(x, s));
  if (v && typeof v === 'object') return Object.values(v).some((x) => containsValue(x, s));
  return false;
}

/* Deep search: the first value stored under key k anywhere in v. */
export function findKey(v, k) {
  if (Array.isArray(v)) {
    for (const x of v) {
      const r = findKey(x, k);
      if (r !== undefined) return r;
    }
  } else if (v && typeof v === 'object') {
    if (k in v) return v[k];
    for (const x of Object.values(v)) {
      const r = findKey(x, k);
      if (r !== undefined) return r;
    }
  }
  return undefined;
}
