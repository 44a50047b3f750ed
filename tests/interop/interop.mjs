// Interop between the Rust `nyx5` tool and an independent Node 20 implementation of Nyx5/1 §5,
// written from the spec text alone with WebCrypto (globalThis.crypto.subtle) and no packages.
//
//   node tests/interop/interop.mjs <path to the nyx5 binary>
//
// 1. Node makes keys, writes a nyx5 key file, seals and signs an envelope; `nyx5 open` opens it.
// 2. `nyx5 seal` seals and signs an envelope for keys Node made; Node verifies and opens it.
// 3. Node's canonical JSON equals `nyx5 canon` on a tricky object and on random numbers.
// Prints each check; exits 1 on the first mismatch.

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const bin = process.argv[2];
if (!bin) {
  console.error('usage: node interop.mjs <path to the nyx5 binary>');
  process.exit(2);
}
const subtle = globalThis.crypto.subtle;
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });

const ALG_SEALED = 'X25519+HKDF-SHA256+A256GCM';
const CEK_WRAP_INFO = 'nyx5/1 cek-wrap';

// ---------------------------------------------------------------------------------------------
// Checks and the nyx5 binary.

let checks = 0;
function check(ok, what, detail = '') {
  if (!ok) {
    console.error(`FAIL ${what}${detail ? `\n  ${detail}` : ''}`);
    process.exit(1);
  }
  checks += 1;
  console.log(`ok   ${what}`);
}

function nyx5(args, input = '') {
  return execFileSync(bin, args, { input, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
}

function nyx5Status(args, input = '') {
  const r = spawnSync(bin, args, { input, encoding: 'utf8' });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// ---------------------------------------------------------------------------------------------
// Canonical JSON (§5): keys sorted by UTF-16 code units (JavaScript's default sort), `undefined`
// members omitted, everything else as compact JSON.stringify writes it.

function canon(v) {
  if (Array.isArray(v)) return `[${v.map((x) => (x === undefined ? 'null' : canon(x))).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canon(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

// base64url without padding, strict on input.
const b64u = (bytes) => Buffer.from(bytes).toString('base64url');
function unb64u(text) {
  const bytes = new Uint8Array(Buffer.from(text, 'base64url'));
  if (typeof text !== 'string' || b64u(bytes) !== text) throw new Error(`not base64url: ${text}`);
  return bytes;
}

const random = (n) => globalThis.crypto.getRandomValues(new Uint8Array(n));
const concat = (a, b) => {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
};

// ---------------------------------------------------------------------------------------------
// Keys.

async function newAgentKeys() {
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

function keyFileText(k) {
  const file = {
    nyx5: '1',
    kind: 'agent-keys',
    sig: k.sig,
    enc: k.enc,
    sig_secret: k.sigSecret,
    enc_secret: k.encSecret,
  };
  return `${canon(file)}\n`;
}

// ---------------------------------------------------------------------------------------------
// Signatures: Ed25519 over the canonical document without its `signature` member.

async function signEnvelope(env, keys) {
  const unsigned = { ...env };
  delete unsigned.signature;
  const value = await subtle.sign({ name: 'Ed25519' }, keys.signingKey, utf8.encode(canon(unsigned)));
  return { ...unsigned, signature: { alg: 'Ed25519', kid: keys.sig, value: b64u(new Uint8Array(value)) } };
}

async function verifySignature(doc, member, sigPub) {
  const sig = doc[member];
  if (!sig || sig.alg !== 'Ed25519' || sig.kid !== sigPub) return false;
  const unsigned = { ...doc };
  delete unsigned[member];
  const key = await subtle.importKey('raw', unb64u(sigPub), { name: 'Ed25519' }, false, ['verify']);
  return subtle.verify({ name: 'Ed25519' }, key, unb64u(sig.value), utf8.encode(canon(unsigned)));
}

// ---------------------------------------------------------------------------------------------
// Sealing (§5, the pinned KDF).

const aadOf = (env) => utf8.encode(canon({ from: env.from, id: env.id, to: env.to }));

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

async function sealEnvelope(env, recipients) {
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

async function openEnvelope(env, address, encKey) {
  const e = env.encrypted;
  if (!e || e.alg !== ALG_SEALED) throw new Error('not a sealed envelope');
  const w = e.keys[address];
  if (!w) throw new Error(`not sealed for ${address}`);
  const aad = aadOf(env);
  const cek = await gcmOpen(await kek(encKey, e.epk, e.epk), unb64u(w.iv), aad, unb64u(w.ct), unb64u(w.tag));
  const plain = await gcmOpen(cek, unb64u(e.iv), aad, unb64u(e.ct), unb64u(e.tag));
  return JSON.parse(fromUtf8.decode(plain));
}

async function opens(env, address, encKey) {
  try {
    await openEnvelope(env, address, encKey);
    return true;
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------------------------

const dir = mkdtempSync(join(tmpdir(), 'nyx5-interop-'));
try {
  console.log(`node ${process.versions.node}; nyx5 ${nyx5(['--version']).trim()}`);

  const body = {
    texto: '¿nos vemos el martes? 😀 \u2028 "quoted" \\ </script>',
    numbers: [0, -0, 1e21, 1e20, 0.000001, 1e-7, 0.1, 123.456, -42, 9007199254740991, 5e-324],
    nested: { z: [true, false, null], a: { '\ufb01': 1, '\ud83d\ude00': 2, é: 3 } },
  };
  const content = { media: 'application/json', body };

  // --- 1. Node seals, Rust opens ------------------------------------------------------------
  const nina = await newAgentKeys(); // the Node sender
  const rosa = await newAgentKeys(); // a Node recipient, with a key file Node writes
  const rosaFile = join(dir, 'rosa.json');
  writeFileSync(rosaFile, keyFileText(rosa), { mode: 0o600 });
  const rosaShown = nyx5(['keys', 'show', rosaFile, '--json']);
  check(
    rosaShown === `${canon({ sig: rosa.sig, enc: rosa.enc })}\n`,
    '1a nyx5 reads a key file Node wrote and derives the same public keys from its secrets',
    rosaShown,
  );
  const rafaFile = join(dir, 'rafa.json'); // a recipient whose keys Rust made
  nyx5(['keys', 'new', '--out', rafaFile]);
  const rafa = JSON.parse(nyx5(['keys', 'show', rafaFile, '--json']));

  const draft = {
    nyx5: '1',
    id: globalThis.crypto.randomUUID(),
    from: 'nina@node.example',
    to: ['rosa@rust.example', 'rafa@rust.example'],
    created: new Date().toISOString(),
    expires: null,
    deliver_after: null,
    thread: null,
    in_reply_to: null,
    type: 'message',
    content,
    extensions: { 'urn:nyx5:ext:interop': { note: 'unknown members are kept and signed' } },
  };
  const sealed = await sealEnvelope(draft, [
    { address: 'rosa@rust.example', enc: rosa.enc },
    { address: 'rafa@rust.example', enc: rafa.enc },
  ]);
  const signed = await signEnvelope(sealed, nina);
  const wire = JSON.stringify(signed, null, 2); // any JSON layout; the signature is over canon
  const expected = `${canon({ content, verified: true })}\n`;
  for (const [address, file] of [
    ['rosa@rust.example', rosaFile],
    ['rafa@rust.example', rafaFile],
  ]) {
    const out = nyx5(['open', '--key', file, '--as', address, '--sender-key', nina.sig], wire);
    check(out === expected, `1b nyx5 open verifies and decrypts a Node-sealed envelope as ${address}`, out);
  }
  const verified = nyx5(['verify', '--key', nina.sig], wire);
  check(verified === '{"member":"signature","ok":true}\n', '1c nyx5 verify accepts the Node signature');

  // Re-addressed and re-signed by the sender: the signature is good, decryption must fail.
  const moved = await signEnvelope({ ...sealed, id: globalThis.crypto.randomUUID() }, nina);
  const r1 = nyx5Status(['verify', '--key', nina.sig], JSON.stringify(moved));
  const r2 = nyx5Status(
    ['open', '--key', rosaFile, '--as', 'rosa@rust.example', '--sender-key', nina.sig],
    JSON.stringify(moved),
  );
  check(
    r1.status === 0 && r2.status === 1 && r2.stderr.startsWith('nyx5: cannot open'),
    '1d a re-addressed (new id), re-signed envelope verifies but nyx5 refuses to open it',
    `${r1.status} ${r2.status} ${r2.stderr}`,
  );
  const tampered = { ...signed, type: 'task' };
  const r3 = nyx5Status(
    ['open', '--key', rosaFile, '--as', 'rosa@rust.example', '--sender-key', nina.sig],
    JSON.stringify(tampered),
  );
  check(
    r3.status === 1 && r3.stderr.startsWith('nyx5: signature does not verify'),
    '1e nyx5 open refuses a Node-signed envelope altered after signing',
    r3.stderr,
  );

  // --- 2. Rust seals, Node opens ------------------------------------------------------------
  const sender = join(dir, 'sender.json');
  nyx5(['keys', 'new', '--out', sender]);
  const senderPub = JSON.parse(nyx5(['keys', 'show', sender, '--json']));
  const nora = await newAgentKeys();
  const nico = await newAgentKeys();
  const rustDraft = {
    nyx5: '1',
    from: 'rust@rust.example',
    to: ['nora@node.example', 'nico@node.example'],
    type: 'task',
    thread: null,
    content,
  };
  const rustSealed = nyx5(
    ['seal', '--key', sender, '--to', `nora@node.example=${nora.enc}`, '--to', `nico@node.example=${nico.enc}`],
    JSON.stringify(rustDraft),
  );
  const env = JSON.parse(rustSealed);
  check(rustSealed === `${canon(env)}\n`, '2a nyx5 seal writes the canonical JSON Node computes');
  check(
    /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(env.id) &&
      new Date(env.created).toISOString() === env.created,
    '2b nyx5 seal filled a UUIDv4 `id` and an ISO-8601 `created`',
    `${env.id} ${env.created}`,
  );
  check(
    env.content === undefined && env.encrypted?.alg === ALG_SEALED && env.signature?.kid === senderPub.sig,
    '2c the envelope is sealed, and signed by the sender key',
  );
  check(await verifySignature(env, 'signature', senderPub.sig), '2d WebCrypto verifies the Rust Ed25519 signature');
  for (const [address, keys] of [
    ['nora@node.example', nora],
    ['nico@node.example', nico],
  ]) {
    const opened = await openEnvelope(env, address, keys.encKey);
    check(canon(opened) === canon(content), `2e Node decrypts the Rust-sealed content as ${address}`);
  }
  check(!(await opens(env, 'nora@node.example', nico.encKey)), "2f Nico's key cannot open Nora's wrapped key");
  const reordered = { ...env, to: [...env.to].reverse() };
  check(!(await opens(reordered, 'nora@node.example', nora.encKey)), '2g Node refuses a re-addressed (reordered `to`) envelope too');
  const plain = JSON.parse(nyx5(['seal', '--key', sender, '--plain'], JSON.stringify(rustDraft)));
  check(
    (await verifySignature(plain, 'signature', senderPub.sig)) && canon(plain.content) === canon(content),
    '2h WebCrypto verifies a Rust --plain envelope',
  );

  // --- 3. Canonical JSON --------------------------------------------------------------------
  const tricky = String.raw`{
    "\ud83d\ude00": "emoji key (surrogates D83D.. sort before U+FB01)",
    "\ufb01": "ligature", "é": "e-acute", "\u0080": "C1", "\uffff": "last BMP", "": "empty key",
    "a": { "z": 1, "B": 2, "b": 3, "A": 4, "aa": 5, "a": 6 },
    "numbers": [1e21, 1E+21, 1e20, 100000000000000000000, 0.000001, 1e-7, 1.5e-7, -0, 0.0, -0.0,
                1.0, 1.50, 100, 9007199254740991, -9007199254740991, 9007199254740992, 0.1,
                0.30000000000000004, 4.35, 2e-6, 5e-324, 1.7976931348623157e308, 123456789e-15,
                1424953923781206.25, 0.5, -1e-300],
    "escapes": "\u0000\u0001\u001f \b\f\n\r\t \" \\ \/ \u007f \u2028\u2029 <>&' \u00e9\u20ac \ud834\udd1e",
    "nested": [[], {}, [{ "b": null, "a": true }], false, "x"]
  }`;
  const rustCanon = nyx5(['canon'], tricky);
  const nodeCanon = canon(JSON.parse(tricky));
  check(rustCanon === nodeCanon, '3a nyx5 canon equals Node canonicalization on a tricky object', `rust ${rustCanon}\nnode ${nodeCanon}`);

  // Random doubles from random bits, as JSON.stringify writes them.
  const bits = new Float64Array(random(8 * 4000).buffer).filter(Number.isFinite);
  const scaled = Array.from({ length: 2000 }, () => (Math.random() - 0.5) * 10 ** Math.floor(Math.random() * 60 - 30));
  const numbers = [...bits, ...scaled];
  const rustNumbers = nyx5(['canon'], JSON.stringify(numbers));
  const rustList = rustNumbers.slice(1, -1).split(',');
  const firstDiff = numbers.findIndex((n, i) => rustList[i] !== JSON.stringify(n));
  check(
    rustNumbers === canon(numbers),
    `3b nyx5 canon formats ${numbers.length} random doubles as JavaScript does`,
    firstDiff < 0 ? '' : `first difference: node ${JSON.stringify(numbers[firstDiff])}, rust ${rustList[firstDiff]}`,
  );

  const dup = nyx5Status(['canon'], '{"a":1,"b":{"k":1,"k":2}}');
  check(
    dup.status === 2 && dup.stdout === '' && /^nyx5: .*duplicate key/.test(dup.stderr),
    '3c nyx5 canon refuses a duplicate key that JSON.parse would silently accept',
    dup.stderr,
  );

  console.log(`interop: ${checks} checks passed`);
} catch (e) {
  console.error(`FAIL ${e.stack ?? e}`);
  if (e.stderr) console.error(String(e.stderr));
  process.exitCode = 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
