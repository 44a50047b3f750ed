// A small Nyx5/1 client in Node 20 WebCrypto (globalThis.crypto.subtle), no packages, written from
// docs/SPEC.md: canonical JSON (§2), base64url (§2), signatures with their kind labels (§3),
// sealing with the key commitment (§5.2), agent tokens bound to query and body (§8), the signed
// registration body (§8b), proof of work (§9) and the push wrapper (§9d). Shared by
// tests/interop and tests/e2e.

export const subtle = globalThis.crypto.subtle;
export const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });

export const ALG_SEALED = 'X25519+HKDF-SHA256+A256GCM';
export const CEK_WRAP_INFO = 'nyx5/1 cek-wrap';
export const CEK_COMMIT_LABEL = 'nyx5/1 cek-commit';
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
// Signatures (§3): Ed25519 over the label `nyx5/1 <kind>`, a zero byte, and the canonical document
// without its signature member. Kinds: domain-card, agent-card, delegation, envelope, token, relay,
// registration, quote, receipt, push, notice-id, domain-key-handover.

/** The bytes a signature of `kind` covers: `nyx5/1 <kind>`, 0x00, `bytes`. */
export function labelled(kind, bytes) {
  const label = utf8.encode(`nyx5/1 ${kind}`);
  const out = new Uint8Array(label.length + 1 + bytes.length);
  out.set(label, 0);
  out[label.length] = 0;
  out.set(bytes, label.length + 1);
  return out;
}

/** Ed25519 over `bytes` exactly as given (callers label them first). */
export async function signBytes(keys, bytes) {
  return b64u(new Uint8Array(await subtle.sign({ name: 'Ed25519' }, keys.signingKey, bytes)));
}

/** A signature of `kind` over `bytes`. */
export const signAs = (kind, keys, bytes) => signBytes(keys, labelled(kind, bytes));

/** `doc` with `member` set to `{alg, kid, value}`, a signature of `kind` by `keys`. */
export async function signDocument(doc, keys, member, kind) {
  const unsigned = { ...doc };
  delete unsigned[member];
  const value = await signAs(kind, keys, utf8.encode(canon(unsigned)));
  return { ...unsigned, [member]: { alg: 'Ed25519', kid: keys.sig, value } };
}

export const signEnvelope = (env, keys) => signDocument(env, keys, 'signature', 'envelope');

/** Whether `doc[member]` is a signature of `kind` by `sigPub` over the rest of `doc`. */
export async function verifySignature(doc, member, sigPub, kind) {
  if (!kind) throw new Error('verifySignature needs the kind of document it expects');
  const sig = doc[member];
  if (!sig || sig.alg !== 'Ed25519' || sig.kid !== sigPub) return false;
  const unsigned = { ...doc };
  delete unsigned[member];
  return verifyAs(kind, sigPub, sig.value, utf8.encode(canon(unsigned)));
}

/** Whether `sigB64` is a signature of `kind` by `sigPub` over `bytes`. */
export const verifyAs = (kind, sigPub, sigB64, bytes) => verifyBytes(sigPub, sigB64, labelled(kind, bytes));

export async function verifyBytes(sigPub, sigB64, bytes) {
  const key = await subtle.importKey('raw', unb64u(sigPub), { name: 'Ed25519' }, false, ['verify']);
  return subtle.verify({ name: 'Ed25519' }, key, unb64u(sigB64), bytes);
}

/** A domain card (§4.1) is self-signed by one of its `keys`; answers the signing key or throws. */
export async function verifyDomainCard(card, domain) {
  if (card.domain !== domain) throw new Error(`card names ${card.domain}, not ${domain}`);
  const kid = card.signature?.kid;
  if (!card.keys?.some((k) => k.sig === kid)) throw new Error('domain card signed by a key it does not list');
  if (!(await verifySignature(card, 'signature', kid, 'domain-card'))) {
    throw new Error('domain card signature does not verify');
  }
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

/** The key commitment (§5.2): SHA-256 of `nyx5/1 cek-commit`, 0x00 and the content key. */
export async function commitment(cek) {
  const bytes = concat(concat(utf8.encode(CEK_COMMIT_LABEL), new Uint8Array([0])), cek);
  return b64u(new Uint8Array(await subtle.digest('SHA-256', bytes)));
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
  out.encrypted = {
    alg: ALG_SEALED,
    epk,
    iv: b64u(iv),
    ct: b64u(body.ct),
    tag: b64u(body.tag),
    commit: await commitment(cek),
    keys,
  };
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
  if (typeof e.commit !== 'string' || (await commitment(cek)) !== e.commit) {
    throw new Error('the content key does not match the envelope commitment');
  }
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

/** The bytes of a request body as it is sent: strings as UTF-8, bytes as they are, objects as
 * canonical JSON; none for `undefined`. */
export function bodyBytes(body) {
  if (body === undefined) return new Uint8Array(0);
  if (body instanceof Uint8Array) return body;
  return utf8.encode(typeof body === 'string' ? body : canon(body));
}

/** `Authorization` value for one request (§8): `Nyx5 <token>.<sig>`. `path` may carry a query,
 * which the token binds; `host` is `host[:port]` as the client addresses the house; `body` is
 * what the request carries (see `bodyBytes`); `ts` and `nonce` may be given to build odd tokens. */
export async function authHeader(keys, { address, method, path, host, body, ts, nonce }) {
  const [bare, ...rest] = path.split('?');
  const claims = {
    address,
    ts: ts ?? new Date().toISOString(),
    nonce: nonce ?? b64u(random(16)),
    method: method.toUpperCase(),
    path: bare,
    query: rest.join('?'),
    host: host.toLowerCase(),
    body: await sha256hex(bodyBytes(body)),
  };
  const bytes = utf8.encode(canon(claims));
  return { header: `Nyx5 ${b64u(bytes)}.${await signAs('token', keys, bytes)}`, nonce: claims.nonce };
}

/** A self-signed registration body (§8b): proof of possession of `keys.sig`, with a fresh `ts`. */
export function registrationBody(local, keys, extra = {}) {
  const doc = { local, sig: keys.sig, enc: keys.enc, ...extra, ts: new Date().toISOString() };
  return signDocument(doc, keys, 'signature', 'registration');
}

/** The work digest of an envelope (§9): hex SHA-256 of it without `signature` and `pow`. */
export function workDigest(env) {
  const rest = { ...env };
  delete rest.signature;
  delete rest.pow;
  return sha256hex(canon(rest));
}

/** `env` with `pow` of `bits` bits of work for its work digest (§9); unsigned: sign afterwards. */
export async function withPow(env, bits) {
  const digest = await workDigest(env);
  for (let n = 0; ; n++) {
    const hash = new Uint8Array(await subtle.digest('SHA-256', utf8.encode(`nyx5/1 pow:${digest}:${n}`)));
    let zeros = 0;
    for (const byte of hash) {
      if (byte === 0) {
        zeros += 8;
        continue;
      }
      zeros += Math.clz32(byte) - 24;
      break;
    }
    if (zeros >= bits) {
      const out = { ...env, pow: { bits, nonce: String(n) } };
      delete out.signature;
      return out;
    }
  }
}
