// Latency of the hot routes on the Worker against `nyx5 serve`, the same client run against both
// (issue 36 §5): w.test under `wrangler dev` (workerd, local D1) and s.test under a release
// `nyx5 serve` (SQLite), each with one agent. Rounds alternate between the two houses, so load on
// the machine falls on both alike; each round times, from this process:
//   send   — POST /outbound of an envelope to the agent itself, until its 202;
//   page   — GET /mailbox/<local>?limit=10, until its 200;
//   arrive — from the send until the envelope is in the mailbox (the kick's delivery), polled;
//   health — GET /health, one small read: what the runtime costs a request by itself;
//   cli    — `nyx5 send` to itself as a process, start to exit: the send as the issue first
//            measured it (its 35 ms on the Worker against 23 ms on serve), the client included.
// Prints medians, the 90th percentiles and the Worker/serve ratios; the goal (≤ 1.5× for
// the send, client included) is printed as met or not, never checked: speed is measured here,
// not asserted.
//
//   node benches/latency.mjs [rounds]      (after scripts/build-worker and a release build of
//                                           nyx5: `cargo build --release -p nyx5-cli`)
//
// Local D1 under wrangler dev is SQLite behind workerd's D1 shim: a round trip to it costs far
// less than one to D1 proper, so the ratio here is a floor of the deployed one.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { call } from '../tests/lib/e2e.mjs';
import { authHeader, b64u, draftEnvelope, newAgentKeys, random, signEnvelope } from '../tests/lib/nyx5.mjs';
import { ENV, House, ROOT, portsFor } from '../tests/lib/wrangler.mjs';

const ROUNDS = Number(process.argv[2] ?? 40);
const WARMUP = 5;
const GOAL = 1.5;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const PORT = await portsFor('NYX5_LAT_PORT', [0, 1, 442]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-latency-'));
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
  const who = { local: 'lat', address: `lat@${house.domain}`, house, keys: await newAgentKeys() };
  const r = await call(house, 'POST', '/agents', {
    body: { local: 'lat', sig: who.keys.sig, enc: who.keys.enc },
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

/** A profile of the CLI's at `house`: `cli@<domain>`, registered with the operator's token. */
async function cliAgent(house, token) {
  const who = { address: `cli@${house.domain}`, profile: join(state, `${house.domain}.profile.json`) };
  writeFileSync(join(state, 'hosts.json'), JSON.stringify({ [worker.domain]: { url: worker.url }, [serve.domain]: { url: serve.url } }));
  for (const args of [['init', who.address, '--house', house.url], ['register', '--as', who.address, '--admin-token', token]]) {
    const r = await nyx5(who, args);
    assert.equal(r.code, 0, `nyx5 ${args.join(' ')} at ${house.domain}: ${r.err}`);
  }
  return who;
}

/** `nyx5 ARGS --json` for `who`'s profile, one process: its exit code, output and wall time. */
function nyx5(who, args) {
  const env = { ...ENV, NYX5_AGENT: who.profile, NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off' };
  const t0 = performance.now();
  return new Promise((resolve) => {
    const child = spawn(bin, [...args, '--json'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('close', (code) => resolve({ code, out, err, ms: performance.now() - t0 }));
  });
}

/** One round at `who`'s house: the send, the page, and when the envelope arrived. */
async function round(who) {
  const env = await signEnvelope(draftEnvelope(who.address, [who.address], { media: 'text/plain', body: 'ping' }), who.keys);
  const t0 = performance.now();
  const sent = await as(who, 'POST', '/outbound', { body: env });
  const send = performance.now() - t0;
  assert.equal(sent.status, 202, `send at ${who.house.domain}: ${JSON.stringify(sent.json)}`);
  const t1 = performance.now();
  const page = await as(who, 'GET', `/mailbox/${who.local}?limit=10`);
  const pageMs = performance.now() - t1;
  assert.equal(page.status, 200);
  let arrive = null;
  for (let i = 0; i < 200 && arrive === null; i++) {
    const seen = await as(who, 'GET', `/mailbox/${who.local}?limit=50`);
    if (seen.json?.envelopes?.some((e) => e.envelope?.id === env.id)) arrive = performance.now() - t0;
    else await sleep(5);
  }
  assert.ok(arrive !== null, `${env.id} never reached ${who.address}`);
  const t2 = performance.now();
  assert.equal((await call(who.house, 'GET', '/health')).status, 200);
  const health = performance.now() - t2;
  // Acknowledge what is there, so pages stay one envelope long.
  const ids = (await as(who, 'GET', `/mailbox/${who.local}?limit=50`)).json.envelopes.map((e) => e.envelope.id);
  if (ids.length) assert.equal((await as(who, 'POST', `/mailbox/${who.local}/ack`, { body: { ids } })).status, 200);
  // The CLI's send to itself, the client process included.
  const cli = await nyx5(who.cli, ['send', who.cli.address, '--body', 'ping', '--as', who.cli.address]);
  assert.equal(cli.code, 0, `nyx5 send at ${who.house.domain}: ${cli.err}`);
  return { send, page: pageMs, arrive, health, cli: cli.ms };
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
  w.cli = await cliAgent(worker, tokens.worker);
  s.cli = await cliAgent(serve, tokens.serve);
  for (let i = 0; i < WARMUP; i++) await Promise.all([round(w), round(s)]);
  const times = { worker: [], serve: [] };
  for (let i = 0; i < ROUNDS; i++) {
    // Alternate which goes first, so neither always meets the other's tail.
    const order = i % 2 ? [['serve', s], ['worker', w]] : [['worker', w], ['serve', s]];
    for (const [name, who] of order) times[name].push(await round(who));
  }
  console.log(`latency: ${ROUNDS} rounds each, alternating; milliseconds, median (90th percentile)`);
  console.log('           wrangler dev      nyx5 serve     Worker/serve');
  const ratios = {};
  for (const what of ['send', 'page', 'arrive', 'health', 'cli']) {
    const [wm, sm] = [pct(times.worker.map((t) => t[what]), 50), pct(times.serve.map((t) => t[what]), 50)];
    const [w9, s9] = [pct(times.worker.map((t) => t[what]), 90), pct(times.serve.map((t) => t[what]), 90)];
    ratios[what] = wm / sm;
    console.log(
      `  ${what.padEnd(7)} ${wm.toFixed(1).padStart(7)} (${w9.toFixed(1).padStart(6)})  ` +
        `${sm.toFixed(1).padStart(7)} (${s9.toFixed(1).padStart(6)})  ${ratios[what].toFixed(2).padStart(6)}×`,
    );
  }
  const met = (r) => (r <= GOAL ? 'met' : 'not met');
  console.log(
    `goal: a send on the Worker ≤ ${GOAL}× one on serve: client included (cli) ${met(ratios.cli)} here ` +
      `(${ratios.cli.toFixed(2)}×); the request alone (send) ${met(ratios.send)} (${ratios.send.toFixed(2)}×)`,
  );
} finally {
  worker.kill('SIGTERM');
  serve.child?.kill('SIGTERM');
  await sleep(300);
  rmSync(state, { recursive: true, force: true });
}
