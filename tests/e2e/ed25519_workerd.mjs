// Ed25519 under workerd (issue 12 §5): the Worker verifies signatures with workerd's own
// Ed25519 (BoringSSL through node:crypto, src/adapter/ed25519.rs) after checking their encodings
// in Rust (nyx5_proto::crypto::strict_encodings). This holds that path to ed25519-dalek's
// `verify_strict` on every 64-byte-signature case of Wycheproof, speccheck and CCTV, as
// crates/proto/tests/vectors_*.rs pin them: the house's answers (through the loopback-only
// `POST /_selftest/ed25519`, on with NYX5_SELFTEST=on) must be those, and workerd's verifier
// must have given them. The Worker also signs with workerd's Ed25519 (its wasm has no
// precomputed tables, crates/proto/Cargo.toml): every line of RFC 8032's `sign.input` signed
// through the same route must give the line's signature, made by workerd. Then prints what a
// verification and a signature cost there, timed from outside. First, the same way
// (`POST /_selftest/site`), the Worker's sites: the Public Suffix List's own test cases answered
// from the list the Worker reads from its static assets (src/adapter/mod.rs, `suffix_list`).
//
//   node tests/e2e/ed25519_workerd.mjs     (after scripts/build-worker; scripts/test runs it)
//
// Ports: free ones, found at start (NYX5_ED25519_PORT=N fixes them at N and N + 442).

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { domainToASCII } from 'node:url';

import { House, ROOT, portsFor } from '../lib/wrangler.mjs';

const PORT = await portsFor('NYX5_ED25519_PORT', [0, 442]);
const vectors = (rel) => JSON.parse(readFileSync(join(ROOT, 'tests/vectors', rel), 'utf8'));
const b64 = (hex) => Buffer.from(hex, 'hex').toString('base64url');

/** Every case with a 64-byte signature: {what, key, msg, sig (base64url), expected}. */
function cases() {
  const out = [];
  // Wycheproof: every case is `valid` or `invalid` (vectors_wycheproof.rs pins that).
  for (const group of vectors('wycheproof/testvectors_v1/ed25519_test.json').testGroups) {
    for (const t of group.tests) {
      if (t.sig.length !== 128) continue;
      assert.ok(t.result === 'valid' || t.result === 'invalid', `tcId ${t.tcId}: ${t.result}`);
      out.push({ what: `wycheproof ${t.tcId}`, key: b64(group.publicKey.pk), msg: b64(t.msg), sig: b64(t.sig), expected: t.result === 'valid' });
    }
  }
  // speccheck: "Dalek strict" accepts case 3 only (vectors_ed25519_edge.rs).
  vectors('ed25519-extra/speccheck/cases.json').forEach((c, i) => {
    out.push({ what: `speccheck ${i}`, key: b64(c.pub_key), msg: b64(c.message), sig: b64(c.signature), expected: i === 3 });
  });
  // CCTV: refused when a flag says so (CCTV_FLAG_REJECTS in vectors_ed25519_edge.rs).
  const rejects = new Set(['low_order_A', 'low_order_R', 'non_canonical_A', 'non_canonical_R', 'low_order_residue', 'reencoded_k']);
  const allowed = new Set(['low_order_component_A', 'low_order_component_R']);
  for (const c of vectors('ed25519-extra/cctv/ed25519vectors.json')) {
    const flags = c.flags ?? [];
    for (const f of flags) assert.ok(rejects.has(f) || allowed.has(f), `cctv ${c.number}: flag ${f} is not pinned`);
    out.push({
      what: `cctv ${c.number}`,
      key: b64(c.key),
      msg: Buffer.from(c.msg, 'utf8').toString('base64url'),
      sig: b64(c.sig),
      expected: !flags.some((f) => rejects.has(f)),
    });
  }
  return out;
}

/** djb's `sign.input` (RFC 8032 §7.1's source): {what, seed, msg, sig}, base64url. */
function signCases() {
  return readFileSync(join(ROOT, 'tests/vectors/nist-rfc/asymmetric/Ed25519/sign.input'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line, i) => {
      const [sk, , msg, sig] = line.split(':');
      return { what: `sign.input line ${i + 1}`, seed: b64(sk.slice(0, 64)), msg: b64(msg), sig: b64(sig.slice(0, 128)) };
    });
}

/** The Public Suffix List's own test cases (crates/rules/data/psl/test_psl.txt) as the house
 * reads names (lower case, `xn--` labels), and a name of its private section: [name, site]. A
 * name with no registrable domain is its own site; names with a leading dot are no domains and
 * are skipped, as site.rs's own test does. */
function siteCases() {
  const text = readFileSync(join(ROOT, 'crates/rules/data/psl/test_psl.txt'), 'utf8');
  const out = [['x.house.workers.dev', 'house.workers.dev']];
  for (const m of text.matchAll(/^checkPublicSuffix\('([^']*)', (null|'[^']*')\);$/gm)) {
    if (m[1].startsWith('.')) continue;
    const name = domainToASCII(m[1]);
    assert.ok(name, `test_psl.txt: ${m[1]} has no ASCII form`);
    out.push([name, m[2] === 'null' ? name : domainToASCII(m[2].slice(1, -1))]);
  }
  assert.ok(out.length > 60, `only ${out.length} cases read`);
  return out;
}

async function verify(house, list) {
  return selftest(house, list.map((c) => [c.key, c.msg, c.sig]));
}

async function selftest(house, body) {
  const r = await fetch(`${house.url}/_selftest/ed25519`, {
    method: 'POST',
    body: JSON.stringify(body),
  });
  const text = await r.text();
  assert.equal(r.status, 200, text.slice(0, 300));
  return JSON.parse(text);
}

const state = mkdtempSync(join(tmpdir(), 'nyx5-ed25519-'));
const house = new House({ domain: 'a.test', port: PORT(0), inspectorPort: PORT(442), stateDir: state, vars: { NYX5_SELFTEST: 'on' } });
let failed = false;
try {
  await house.migrate();
  await house.start();
  const sites = siteCases();
  const asked = await fetch(`${house.url}/_selftest/site`, { method: 'POST', body: sites.map((c) => c[0]).join('\n') });
  const answered = await asked.text();
  assert.equal(asked.status, 200, answered.slice(0, 300));
  const got = JSON.parse(answered);
  assert.deepEqual(sites.filter((c, i) => got[i] !== c[1]), [], 'sites that differ from the list\'s test cases');
  console.log(`site: the Public Suffix List's ${sites.length - 1} test cases and a private suffix, answered from the Worker's asset`);

  const all = cases();
  const first = await verify(house, all);
  assert.equal(first.answers.length, all.length);
  const wrong = all.filter((c, i) => first.answers[i] !== c.expected);
  assert.deepEqual(wrong.map((c) => c.what), [], 'answers that differ from verify_strict');
  const accepted = all.filter((c) => c.expected).length;
  // workerd's verifier answered (the self-check at start passed, and nothing fell back to wasm
  // for the cases whose encodings pass): at least every accepted case went through it.
  assert.ok(typeof first.native === 'number' && first.native >= accepted, `workerd verified ${first.native} signatures, ${accepted} accepted`);
  console.log(`ed25519: ${all.length} cases (${accepted} valid) answered as verify_strict does; workerd's verifier gave ${first.native} answers`);

  const signing = signCases();
  assert.equal(signing.length, 1024);
  const signed = await selftest(house, signing.map((c) => [c.seed, c.msg]));
  const unlike = signing.filter((c, i) => signed.answers[i] !== c.sig);
  assert.deepEqual(unlike.map((c) => c.what), [], 'signatures that differ from RFC 8032');
  // workerd made them all (the self-check at start passed; none fell back to wasm).
  assert.ok(typeof signed.signed === 'number' && signed.signed >= signing.length, `workerd signed ${signed.signed}`);
  console.log(`ed25519: ${signing.length} signatures of sign.input made as RFC 8032 gives them; workerd made ${signed.signed}`);

  // The cost of one verification in workerd, from outside: 2,000 valid signatures in one request
  // against 2,000 refused by their encodings alone (no curve arithmetic), best of 5.
  const valid = all.find((c) => c.expected);
  const refused = all.find((c) => c.what === 'speccheck 0');
  const timed = async (c) => {
    let best = Infinity;
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      await verify(house, Array(2000).fill(c));
      best = Math.min(best, performance.now() - t);
    }
    return best;
  };
  const [v, r] = [await timed(valid), await timed(refused)];
  console.log(`ed25519: one verification in workerd ≈ ${(((v - r) * 1000) / 2000).toFixed(1)} µs (2,000 in ${v.toFixed(0)} ms, 2,000 refused before the equation in ${r.toFixed(0)} ms)`);
  // One signature, the same way: 2,000 of one short message against the refused verifications.
  const sign = signing[1];
  let best = Infinity;
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    await selftest(house, Array(2000).fill([sign.seed, sign.msg]));
    best = Math.min(best, performance.now() - t);
  }
  console.log(`ed25519: one signature in workerd ≈ ${(((best - r) * 1000) / 2000).toFixed(1)} µs (2,000 in ${best.toFixed(0)} ms)`);
} catch (e) {
  failed = true;
  console.error(e);
  console.error(house.tail());
} finally {
  await house.stop();
  rmSync(state, { recursive: true, force: true });
}
if (failed) process.exit(1);
