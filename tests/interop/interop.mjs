// Interop between the Rust `nyx5` tool and an independent Node 20 implementation of Nyx5/1 §5,
// written from the spec text alone with WebCrypto (globalThis.crypto.subtle) and no packages
// (tests/lib/nyx5.mjs, which the end-to-end suite uses too).
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

import {
  ALG_SEALED,
  canon,
  commitment,
  draftEnvelope,
  newAgentKeys,
  openEnvelope,
  random,
  sealEnvelope,
  signAs,
  signEnvelope,
  utf8,
  verifySignature,
} from '../lib/nyx5.mjs';

const bin = process.argv[2];
if (!bin) {
  console.error('usage: node interop.mjs <path to the nyx5 binary>');
  process.exit(2);
}

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
// Key files.

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
// Sealing and signing come from tests/lib/nyx5.mjs (WebCrypto, written from the spec text).

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

  const draft = draftEnvelope('nina@node.example', ['rosa@rust.example', 'rafa@rust.example'], content, {
    extensions: { 'urn:nyx5:ext:interop': { note: 'unknown members are kept and signed' } },
  });
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

  // A signature of another kind over the very same bytes (here: labelled as a token) is refused.
  const unsigned = { ...sealed };
  const tokenSig = await signAs('token', nina, utf8.encode(canon(unsigned)));
  const asToken = { ...unsigned, signature: { alg: 'Ed25519', kid: nina.sig, value: tokenSig } };
  const r4 = nyx5Status(['verify', '--key', nina.sig], JSON.stringify(asToken));
  check(r4.status === 1, '1f nyx5 verify refuses a Node signature made for another kind of document', r4.stderr);

  // The sender commits to one content key: a commitment to another key is refused before decrypting.
  const recommitted = await signEnvelope(
    { ...sealed, encrypted: { ...sealed.encrypted, commit: await commitment(random(32)) } },
    nina,
  );
  const r5 = nyx5Status(
    ['open', '--key', rosaFile, '--as', 'rosa@rust.example', '--sender-key', nina.sig],
    JSON.stringify(recommitted),
  );
  check(
    r5.status === 1 && r5.stderr.includes('commitment'),
    '1g nyx5 open refuses a content key that does not match the envelope commitment',
    r5.stderr,
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
  check(await verifySignature(env, 'signature', senderPub.sig, 'envelope'), '2d WebCrypto verifies the Rust Ed25519 signature');
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
    (await verifySignature(plain, 'signature', senderPub.sig, 'envelope')) && canon(plain.content) === canon(content),
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
