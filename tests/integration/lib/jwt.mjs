// A stand-in OAuth authorization server's signing side for the tests: key
// pairs made by node's crypto (RSA 2048, EC P-256, Ed25519), their public
// JWKS, access tokens signed with any of them (or deliberately wrong), and
// a JWKS endpoint on 127.0.0.1 whose keys a test can rotate.

import crypto from 'node:crypto';
import http from 'node:http';

const b64url = (buf) => Buffer.from(buf).toString('base64url');
/* A part's JSON: an object's, or a text as it is (numbers JavaScript cannot write). */
const part = (obj) => b64url(typeof obj === 'string' ? obj : JSON.stringify(obj));

const ALG = { RS256: 'rsa', ES256: 'ec', EdDSA: 'ed25519' };

/* A key pair for alg, named kid. */
export function makeKey(alg, kid) {
  const pair = ALG[alg] === 'rsa'
    ? crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
    : ALG[alg] === 'ec'
      ? crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
      : crypto.generateKeyPairSync('ed25519');
  const jwk = { ...pair.publicKey.export({ format: 'jwk' }), kid, use: 'sig', alg };
  return { alg, kid, privateKey: pair.privateKey, publicKey: pair.publicKey, jwk };
}

/* Signs the compact JWS of header.payload with key (header alg/kid default to the key's). */
export function sign(key, claims, header = {}) {
  const h = { alg: key.alg, typ: 'at+jwt', kid: key.kid, ...header };
  const input = `${part(h)}.${part(claims)}`;
  const data = Buffer.from(input);
  let sig;
  if (key.alg === 'RS256') sig = crypto.sign('sha256', data, key.privateKey);
  else if (key.alg === 'ES256') sig = crypto.sign('sha256', data, { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  else sig = crypto.sign(null, data, key.privateKey);
  return `${input}.${b64url(sig)}`;
}

/* An HS256 token whose HMAC secret is the public key's text: the classic algorithm confusion. */
export function signHs256WithPublicKey(key, claims) {
  const h = { alg: 'HS256', typ: 'JWT', kid: key.kid };
  const input = `${part(h)}.${part(claims)}`;
  const secret = key.publicKey.export({ format: 'pem', type: 'spki' });
  return `${input}.${b64url(crypto.createHmac('sha256', secret).update(input).digest())}`;
}

/* An unsigned token (alg none). */
export function unsigned(claims, kid) {
  return `${part({ alg: 'none', typ: 'JWT', kid })}.${part(claims)}.`;
}

/* The claims of a token for subject sub, valid now for an hour; extra overrides. */
export function claimsFor(issuer, audience, sub, extra = {}) {
  const now = Math.floor(Date.now() / 1000);
  return { iss: issuer, aud: audience, sub, iat: now, nbf: now - 5, exp: now + 3600, ...extra };
}

/* The JWKS document of keys. */
export const jwksOf = (keys) => ({ keys: keys.map((k) => k.jwk) });

/*
 * Serves GET /jwks.json on 127.0.0.1 with the current keys; counts fetches.
 * set(keys) rotates what it serves.
 */
export async function serveJwks(keys) {
  let current = keys;
  const server = http.createServer((req, res) => {
    if (req.url !== '/jwks.json') {
      res.writeHead(404).end();
      return;
    }
    served.fetches++;
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(jwksOf(current)));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const served = {
    fetches: 0,
    url: `http://127.0.0.1:${server.address().port}/jwks.json`,
    set(next) { current = next; },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
  return served;
}
