// A small Nyx5/1 client in Node 20 WebCrypto (globalThis.crypto.subtle), no packages, written from
// docs/SPEC.md: canonical JSON (§2), base64url (§2), signatures (§3), sealing (§5.2), agent
// tokens (§8), and the signed registration body (§8b). Shared by tests/interop and tests/e2e.

export const subtle = globalThis.crypto.subtle;
export const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });

export const ALG_SEALED = 'X25519+HKDF-SHA256+A256GCM';
export const CEK_WRAP_INFO = 'nyx5/1 cek-wrap';
export const NOTICE_MEDIA = 'application/nyx5.notice+json';

// ---------------------------------------------------------------------------------------------
// Canonical JSON (§2): keys sorted by UTF-16 code units (JavaScript's default sort), `undefined`
// members omitted, everything else as compact JSON.stringify writes it.

export function canon(v) {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canon(x))).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// base64url without padding, strict on input.
export const b64u = (bytes) => Buffer.from(bytes).toString('base64url');
export function unb64u(text) {
  const bytes = new Uint8Array(Buffer.from(text, 'base64url'));
  if (typeof text !== 'string' || b64u(bytes) !== text) throw new Error(`not base64url: ${text}`);
  return bytes;
}

export const random = (n) => globalThis.crypto.getRandomValues(new Uint8Array(n));
export const concat = (a, b) => {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
};

/** Lower-case hex SHA-256 of a string's UTF-8 bytes (or of bytes). */
export async function sha256hex(data) {
  const bytes = typeof data === 'string' ? utf8.encode(data) : data;
  return Buffer.from(await subtle.digest('SHA-256', bytes)).toString('hex');
}

// ---------------------------------------------------------------------------------------------
// Keys.

/** A fresh agent: Ed25519 (`sig`) and X25519 (`enc`) public keys in base64url, the secrets as
 * base64url (`sigSecret`, `encSecret`), and the WebCrypto private keys. */
export async function newAgentKeys() {
  const sig = await subtle.generateKey({ name: 'Ed25519' }, true, ['sign', 'verify']);
  const enc = await subtle.generateKey({ name: 'X25519' }, true, ['deriveBits']);
  const sigJwk = await subtle.exportKey('jwk', sig.privateKey);
  const encJwk = await subtle.exportKey('jwk', enc.privateKey);
  const sigRaw = b64u(new Uint8Array(await subtle.exportKey('raw', sig.publicKey)));
  const encRaw = b64u(new Uint8Array(await subtle.exportKey('raw', enc.publicKey)));
  if (sigRaw !== sigJwk.x || encRaw !== encJwk.x) throw new Error('JWK and raw exports disagree');
  // The JWK `d` of an OKP key is the 32-byte Ed25519 seed / X25519 secret.
  if (unb64u(sigJwk.d).length !== 32 || unb64u(encJwk.d).length !== 32) {
    throw new Error('secrets are not 32 bytes');
  }
  return {
    sig: sigJwk.x,
    enc: encJwk.x,
    sigSecret: sigJwk.d,
    encSecret: encJwk.d,
    signingKey: sig.privateKey,
    encKey: enc.privateKey,
  };
}

// ---------------------------------------------------------------------------------------------
// Signatures (§3): Ed25519 over the canonical document without its signature member.

export async function signBytes(keys, bytes) {
  return b64u(new Uint8Array(await subtle.sign({ name: 'Ed25519' }, keys.signingKey, bytes)));
}

/** `doc` with `member` (default `signature`) set to `{alg, kid, value}` by `keys`. */
export async function signDocument(doc, keys, member = 'signature') {
  const unsigned = { ...doc };
  delete unsigned[member];
  const value = await signBytes(keys, utf8.encode(canon(unsigned)));
  return { ...unsigned, [member]: { alg: 'Ed25519', kid: keys.sig, value } };
}

export const signEnvelope = (env, keys) => signDocument(env, keys, 'signature');

/** Whether `doc[member]` is an Ed25519 signature by `sigPub` over the rest of `doc`. */
export async function verifySignature(doc, member, sigPub) {
  const sig = doc[member];
  if (!sig || sig.alg !== 'Ed25519' || sig.kid !== sigPub) return false;
  const unsigned = { ...doc };
  delete unsigned[member];
  return verifyBytes(sigPub, sig.value, utf8.encode(canon(unsigned)));
}

export async function verifyBytes(sigPub, sigB64, bytes) {
  const key = await subtle.importKey('raw', unb64u(sigPub), { name: 'Ed25519' }, false, ['verify']);
  return subtle.verify({ name: 'Ed25519' }, key, unb64u(sigB64), bytes);
}

/** A domain card (§4.1) is self-signed by one of its `keys`; answers the signing key or throws. */
export async function verifyDomainCard(card, domain) {
  if (card.domain !== domain) throw new Error(`card names ${card.domain}, not ${domain}`);
  const kid = card.signature?.kid;
  if (!card.keys?.some((k) => k.sig === kid)) throw new Error('domain card signed by a key it does not list');
  if (!(await verifySignature(card, 'signature', kid))) throw new Error('domain card signature does not verify');
  return kid;
}

// ---------------------------------------------------------------------------------------------
// Sealing (§5.2, the pinned KDF).

export const aadOf = (env) => utf8.encode(canon({ from: env.from, id: env.id, to: env.to }));

async function gcmSeal(keyBytes, iv, aad, plaintext) {
  const key = await subtle.importKey('raw', keyBytes, { name: 'AES-GCM' }, false, ['encrypt']);
  const out = new Uint8Array(
    await subtle.encrypt({ name: 'AES-GCM', iv, additionalData: aad, tagLength: 128 }, key, plaintext),
  );
  // WebCrypto appends the 16-byte tag; Nyx5 carries it separately.
  return { ct: out.slice(0, out.length - 16), tag: out.slice(out.length - 16) };
}

async function gcmOpen(keyBytes, iv, aad, ct, tag) {
  const key = await subtle.importKey('raw', keyBytes, { name: 'AES-GCM' }, false, ['decrypt']);
  return new Uint8Array(
    await subtle.decrypt({ name: 'AES-GCM', iv, additionalData: aad, tagLength: 128 }, key, concat(ct, tag)),
  );
}

// KEK = HKDF-SHA256(ikm = X25519(...), salt = UTF-8 of the base64url STRING of epk,
//                   info = "nyx5/1 cek-wrap", 32 bytes).
async function kek(privateKey, publicB64, epkB64) {
  const pub = await subtle.importKey('raw', unb64u(publicB64), { name: 'X25519' }, false, []);
  const shared = await subtle.deriveBits({ name: 'X25519', public: pub }, privateKey, 256);
  const ikm = await subtle.importKey('raw', shared, 'HKDF', false, ['deriveBits']);
  const bits = await subtle.deriveBits(
    { name: 'HKDF', hash: 'SHA-256', salt: utf8.encode(epkB64), info: utf8.encode(CEK_WRAP_INFO) },
    ikm,
    256,
  );
  return new Uint8Array(bits);
}

/** Replaces `env.content` with `encrypted` for `recipients` (`[{address, enc}]`); unsigned. */
export async function sealEnvelope(env, recipients) {
  const aad = aadOf(env);
  const cek = random(32);
  const iv = random(12);
  const body = await gcmSeal(cek, iv, aad, utf8.encode(canon(env.content)));
  const eph = await subtle.generateKey({ name: 'X25519' }, true, ['deriveBits']);
  const epk = b64u(new Uint8Array(await subtle.exportKey('raw', eph.publicKey)));
  const keys = {};
  for (const r of recipients) {
    const wiv = random(12);
    const w = await gcmSeal(await kek(eph.privateKey, r.enc, epk), wiv, aad, cek);
    keys[r.address] = { iv: b64u(wiv), ct: b64u(w.ct), tag: b64u(w.tag) };
  }
  const out = { ...env };
  delete out.content;
  delete out.signature;
  out.encrypted = { alg: ALG_SEALED, epk, iv: b64u(iv), ct: b64u(body.ct), tag: b64u(body.tag), keys };
  return out;
}

/** The content object of a sealed envelope, opened as `address` with its X25519 private key. */
export async function openEnvelope(env, address, encKey) {
  const e = env.encrypted;
  if (!e || e.alg !== ALG_SEALED) throw new Error('not a sealed envelope');
  const w = e.keys[address];
  if (!w) throw new Error(`not sealed for ${address}`);
  const aad = aadOf(env);
  const cek = await gcmOpen(await kek(encKey, e.epk, e.epk), unb64u(w.iv), aad, unb64u(w.ct), unb64u(w.tag));
  const plain = await gcmOpen(cek, unb64u(e.iv), aad, unb64u(e.ct), unb64u(e.tag));
  return JSON.parse(fromUtf8.decode(plain));
}

// ---------------------------------------------------------------------------------------------
// Envelopes, tokens, registration.

/** An unsigned envelope draft with every §5 member; `fields` overrides or adds members. */
export function draftEnvelope(from, to, content, fields = {}) {
  return {
    nyx5: '1',
    id: globalThis.crypto.randomUUID(),
    from,
    to,
    created: new Date().toISOString(),
    expires: null,
    deliver_after: null,
    thread: null,
    in_reply_to: null,
    type: 'message',
    content,
    ...fields,
  };
}

/** `Authorization` value for one request (§8): `Nyx5 <token>.<sig>`. `host` is `host[:port]` as
 * the client addresses the house; `ts` and `nonce` may be given to build odd tokens. */
export async function authHeader(keys, { address, method, path, host, ts, nonce }) {
  const claims = {
    address,
    ts: ts ?? new Date().toISOString(),
    nonce: nonce ?? b64u(random(16)),
    method: method.toUpperCase(),
    path: path.split('?')[0],
    host: host.toLowerCase(),
  };
  const bytes = utf8.encode(canon(claims));
  return { header: `Nyx5 ${b64u(bytes)}.${await signBytes(keys, bytes)}`, nonce: claims.nonce };
}

/** A self-signed registration body (§8b): proof of possession of `keys.sig`, with a fresh `ts`. */
export function registrationBody(local, keys, extra = {}) {
  return signDocument({ local, sig: keys.sig, enc: keys.enc, ...extra, ts: new Date().toISOString() }, keys);
}
