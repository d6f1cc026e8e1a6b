// Makes what the benchmark's JWT runs need, with node's crypto: a key pair
// for --alg (RS256, ES256 or EdDSA), its public JWKS written to --jwks, and
// one access token printed on stdout (issuer --issuer, audience --audience,
// subject "bench", scope mcpsub:write, valid for a day).
//
//   node tools/bench/token.mjs --alg ES256 --jwks FILE --issuer URL --audience URI

import crypto from 'node:crypto';
import fs from 'node:fs';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const alg = args.alg || 'ES256';
const pair = alg === 'RS256'
  ? crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
  : alg === 'ES256'
    ? crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : crypto.generateKeyPairSync('ed25519');
const kid = `bench-${alg.toLowerCase()}`;
fs.writeFileSync(args.jwks, JSON.stringify({ keys: [{ ...pair.publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' }] }));

const part = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
const now = Math.floor(Date.now() / 1000);
const input = `${part({ alg, typ: 'at+jwt', kid })}.${part({
  iss: args.issuer, aud: args.audience, sub: 'bench', scope: 'mcpsub:write', iat: now, exp: now + 86400,
})}`;
const data = Buffer.from(input);
const sig = alg === 'RS256'
  ? crypto.sign('sha256', data, pair.privateKey)
  : alg === 'ES256'
    ? crypto.sign('sha256', data, { key: pair.privateKey, dsaEncoding: 'ieee-p1363' })
    : crypto.sign(null, data, pair.privateKey);
process.stdout.write(`${input}.${sig.toString('base64url')}\n`);
