// Bounded polling for black-box tests: no fixed sleeps where a condition
// can be observed, and never an unbounded wait.

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/*
 * Calls fn (sync or async) every intervalMs until it returns a truthy value,
 * which is returned. Throws after timeoutMs with `message` and the last
 * value or error seen. An exception from fn counts as "not yet".
 */
export async function waitFor(fn, { timeoutMs = 5000, intervalMs = 20, message = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  let lastError;
  for (;;) {
    try {
      last = await fn();
      lastError = undefined;
      if (last) return last;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const detail = lastError ? `last error: ${lastError.stack || lastError}` : `last value: ${safeJson(last)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${message}; ${detail}`);
    }
    await sleep(intervalMs);
  }
}

/* Races a promise against a timeout; rejects with `message` on timeout. */
export function withTimeout(promise, timeoutMs, message = 'operation') {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms: ${message}`)), timeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function safeJson(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}
