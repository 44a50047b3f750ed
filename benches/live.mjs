// The live inbox's arrival-to-client time (issue 38 §5), on the Worker under `wrangler dev` and on
// a release `nyx5 serve`, the same client against both: each round holds a mailbox read open
// (`GET /mailbox/<local>?wait=25`), sends the agent an envelope after a pause drawn at random
// (so arrivals fall anywhere between the Worker's rechecks), and times from the envelope's
// arrival (its `received`, the house's clock, which is this machine's) to the moment the held
// read answered here. On `nyx5 serve` the house's own write wakes the read; on the Worker a
// read finds mail at its recheck (every 500 ms; decision 0073). Prints medians, 90th
// percentiles and maxima; nothing is asserted about time.
//
//   node benches/live.mjs [rounds]      (after scripts/build-worker and a release build of
//                                        nyx5: `cargo build --release -p nyx5-cli`)

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { call } from '../tests/lib/e2e.mjs';
import { authHeader, b64u, draftEnvelope, newAgentKeys, random, signEnvelope } from '../tests/lib/nyx5.mjs';
import { ENV, House, ROOT, portsFor } from '../tests/lib/wrangler.mjs';

const ROUNDS = Number(process.argv[2] ?? 20);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const PORT = await portsFor('NYX5_LIVE_PORT', [0, 1, 442]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-live-'));
const bin = join(ROOT, 'target/release/nyx5');
assert.ok(existsSync(bin), `${bin} is missing: cargo build --release -p nyx5-cli`);
assert.ok(existsSync(join(ROOT, 'build/index_bg.wasm')), 'the Worker is not built: scripts/build-worker');

const url = (port) => `http://127.0.0.1:${port}`;
const tokens = { worker: b64u(random(24)), serve: b64u(random(24)) };
const worker = new House({
  domain: 'w.test',
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  vars: { NYX5_ADMIN_TOKEN: tokens.worker, NYX5_OUTBOUND_PER_MINUTE: '1000' },
});
const serve = { domain: 's.test', port: PORT(1), url: url(PORT(1)), host: `127.0.0.1:${PORT(1)}`, child: null };

async function as(who, method, path, opts = {}) {
  const { header } = await authHeader(who.keys, { address: who.address, method, path, host: who.house.host, body: opts.body });
  return call(who.house, method, path, { ...opts, headers: { authorization: header } });
}

async function agent(house, token) {
  const who = { local: 'live', address: `live@${house.domain}`, house, keys: await newAgentKeys(), after: 0 };
  const r = await call(house, 'POST', '/agents', {
    body: { local: 'live', sig: who.keys.sig, enc: who.keys.enc },
    headers: { authorization: `Bearer ${token}` },
  });
  assert.equal(r.status, 201, `register at ${house.domain}: ${JSON.stringify(r.json)}`);
  return who;
}

async function startServe() {
  const args = ['serve', '--domain', serve.domain, '--db', join(state, 's.db'), '--listen', serve.host];
  args.push('--public-url', serve.url, '--registration', 'admin');
  const child = spawn(bin, args, { env: { ...ENV, NYX5_ADMIN_TOKEN: tokens.serve }, stdio: ['ignore', 'pipe', 'pipe'] });
  serve.child = child;
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  for (let i = 0; !log.includes(`nyx5 serve: ${serve.domain} at`); i++) {
    assert.ok(i < 400, `nyx5 serve never got ready:\n${log}`);
    await sleep(50);
  }
}

/** One round: a held read, a send after a pause, and the time from arrival to answer. */
async function round(who) {
  const held = as(who, 'GET', `/mailbox/${who.local}?after=${who.after}&limit=10&wait=25`).then((r) => ({ r, at: Date.now() }));
  await sleep(150 + Math.random() * 600);
  const env = await signEnvelope(draftEnvelope(who.address, [who.address], { media: 'text/plain', body: 'ping' }), who.keys);
  const sent = await as(who, 'POST', '/outbound', { body: env });
  assert.equal(sent.status, 202, `send at ${who.house.domain}: ${JSON.stringify(sent.json)}`);
  const { r, at } = await held;
  assert.equal(r.status, 200);
  const item = r.json.envelopes.find((e) => e.envelope.id === env.id);
  assert.ok(item, `the held read answered without ${env.id}: ${JSON.stringify(r.json)}`);
  who.after = Math.max(who.after, ...r.json.envelopes.map((e) => e.seq));
  return at - Date.parse(item.received);
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length * p) / 100))];
};

try {
  await worker.migrate();
  await Promise.all([worker.start(), startServe()]);
  const w = await agent(worker, tokens.worker);
  const s = await agent(serve, tokens.serve);
  await round(w);
  await round(s);
  const times = { worker: [], serve: [] };
  for (let i = 0; i < ROUNDS; i++) {
    times.worker.push(await round(w));
    times.serve.push(await round(s));
  }
  console.log(`live inbox: ${ROUNDS} rounds each; milliseconds from an envelope's arrival to the held read's answer`);
  console.log('               median    90th     max');
  for (const [name, xs] of [['wrangler dev', times.worker], ['nyx5 serve', times.serve]]) {
    console.log(`  ${name.padEnd(12)} ${pct(xs, 50).toFixed(0).padStart(6)} ${pct(xs, 90).toFixed(0).padStart(7)} ${Math.max(...xs).toFixed(0).padStart(7)}`);
  }
  const worst = Math.max(...times.worker, ...times.serve);
  console.log(`goal: new mail seen within a second of its arrival: ${worst <= 1000 ? 'met' : 'not met'} (worst ${worst} ms)`);
} finally {
  worker.kill('SIGTERM');
  serve.child?.kill('SIGTERM');
  await sleep(300);
  rmSync(state, { recursive: true, force: true });
}
