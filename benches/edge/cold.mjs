// A cold isolate's first inbound envelope, in a process of its own (run.mjs starts several).
//
//   node benches/edge/cold.mjs <module.js> <psl.bin> <fixture>
//
// Loads the module as a fresh isolate loads the Worker (V8 compiles each wasm function at its
// first call, so nothing the module holds has run yet) and does what the Worker's start event
// does (Ed25519 handed to the platform's verifier, as workerd's is there), then times what its first event does
// beyond a warm one's: the Public Suffix List taken from the asset's bytes and a site looked up
// (`first_site`, what the adapter's `suffix_list` does before the house is built), then one
// inbound envelope on cards read from the cache (`cold_inbound`). Then the same envelope warm:
// the fastest of several samples after a warm-up. Prints one JSON line of microseconds.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createPrivateKey, createPublicKey, sign, verify } from 'node:crypto';

const [modulePath, pslPath, fixturePath] = process.argv.slice(2);
const psl = readFileSync(pslPath);
const fixture = readFileSync(fixturePath);
const bench = createRequire(import.meta.url)(modulePath);
// What the Worker's start event does, before any request: Ed25519's equation handed to the
// platform's verifier (workerd's there, Node's here), after proto's known answers.
const keys = new Map();
const refusedVerifier = bench.native_verifier((pub, message, signature) => {
  const id = Buffer.from(pub).toString('hex');
  if (!keys.has(id)) {
    keys.set(id, createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(pub).toString('base64url') }, format: 'jwk' }));
  }
  return verify(null, message, keys.get(id), signature);
});
if (refusedVerifier) throw new Error(`edge: Node's Ed25519 verifier was refused: ${refusedVerifier}`);
const refusedSigner = bench.native_signer((seed, pub, message) => {
  const id = `s${Buffer.from(pub).toString('hex')}`;
  if (!keys.has(id)) {
    const jwk = { kty: 'OKP', crv: 'Ed25519', d: Buffer.from(seed).toString('base64url'), x: Buffer.from(pub).toString('base64url') };
    keys.set(id, createPrivateKey({ key: jwk, format: 'jwk' }));
  }
  return sign(null, message, keys.get(id));
});
if (refusedSigner) throw new Error(`edge: Node's Ed25519 signer was refused: ${refusedSigner}`);
const now = () => Number(process.hrtime.bigint()) / 1e3; // µs

// Each first call timed by the wall clock and by the process's CPU time, and the lower counts:
// both bound the main thread's CPU from above (the wall clock also counts the moments another
// process had the core, this VM being shared; the process's CPU also counts V8's threads
// compiling in the background, which are not the invocation's).
const spent = (f) => {
  const [t, cpu] = [now(), process.cpuUsage()];
  const answer = f();
  const used = process.cpuUsage(cpu);
  return [answer, Math.min(now() - t, used.user + used.system)];
};
// The start event's warm-up (crates/house/src/warm.rs), as the Worker runs it before any
// request: timed apart, as Workers count it apart (the startup limit, not the invocation's CPU).
// NYX5_EDGE_NO_WARM=1 leaves it out, to see what it saves.
const [warmed, startUs] = process.env.NYX5_EDGE_NO_WARM === '1' ? ['', 0] : spent(() => bench.warm_start());
if (warmed) throw new Error(`warm_start: ${warmed}`);
const [refused, listUs] = spent(() => bench.first_site(psl));
if (refused) throw new Error(`first_site: ${refused}`);
const [size, firstUs] = spent(() => bench.cold_inbound(fixture));
let t;

const WARMUP_MS = 100;
const SAMPLE_MS = 40;
const ROUNDS = 7;
let n = 0;
t = now();
while (now() - t < WARMUP_MS * 1e3) { if (bench.cold_inbound(fixture) !== size) throw new Error('cold_inbound'); n++; }
const per = Math.max(1, Math.round((SAMPLE_MS * 1e3 * n) / (now() - t)));
let warmUs = Infinity;
for (let r = 0; r < ROUNDS; r++) {
  t = now();
  for (let i = 0; i < per; i++) bench.cold_inbound(fixture);
  warmUs = Math.min(warmUs, (now() - t) / per);
}
console.log(JSON.stringify({ startUs, listUs, firstUs, warmUs }));
