// End-to-end, issue 35 §2: a domain-key rotation bounces nothing. Two houses, a.test and b.test,
// each the built Worker under `wrangler dev` (workerd, local D1), finding each other through
// NYX5_HOSTS without pinned keys (trust on first use). ana@a.test and bo@b.test write to each
// other, so each house holds the other's domain card in its cache; then a.test restarts with a
// new NYX5_DOMAIN_KEY and the old one in NYX5_PREVIOUS_DOMAIN_KEYS, and both write again at once.
// b.test meets a relay header under a key its cached card of a.test does not list: it fetches the
// card anew (once), follows the handover, and moves its pin. Everything sent before and after the
// rotation is delivered, and nobody gets a bounce.
//
//   node tests/e2e/rotation.mjs        (scripts/test runs it after building the Worker)
//
// Ports: free ones, found at start (NYX5_ROTATION_PORT=N fixes them at N, N + 1, N + 442, N + 443).
// Exits 1 on the first failure (the houses' logs and state are kept then), 0 when every step passed.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { authHeader, b64u, draftEnvelope, newAgentKeys, random, signEnvelope, verifyDomainCard } from '../lib/nyx5.mjs';
import { call, makeSteps, secs } from '../lib/e2e.mjs';
import { ENV, House, ROOT, WRANGLER, portsFor } from '../lib/wrangler.mjs';

const T0 = performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const PORT = await portsFor('NYX5_ROTATION_PORT', [0, 1, 442, 443]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-rotation-'));
const urlOf = (port) => `http://127.0.0.1:${port}`;
const token = { 'a.test': b64u(random(24)), 'b.test': b64u(random(24)) };
// a.test's first domain key and the one it rotates to, both known to the test.
const firstKey = await newAgentKeys();
const secondKey = await newAgentKeys();
const a = new House({
  domain: 'a.test',
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  vars: {
    NYX5_ADMIN_TOKEN: token['a.test'],
    NYX5_DOMAIN_KEY: firstKey.sigSecret,
    NYX5_HOSTS: JSON.stringify({ 'b.test': { url: urlOf(PORT(1)) } }),
  },
});
const b = new House({
  domain: 'b.test',
  port: PORT(1),
  inspectorPort: PORT(443),
  stateDir: state,
  vars: { NYX5_ADMIN_TOKEN: token['b.test'], NYX5_HOSTS: JSON.stringify({ 'a.test': { url: urlOf(PORT(0)) } }) },
});

const steps = makeSteps(T0);
const admin = (house) => ({ authorization: `Bearer ${token[house.domain]}` });

function expectStatus(res, status, what) {
  assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status} ${res.text.slice(0, 300)}`);
  return res.json;
}

async function as(who, method, path, opts = {}) {
  const { header } = await authHeader(who.keys, { address: who.address, method, path, host: who.house.host, body: opts.body });
  return call(who.house, method, path, { ...opts, headers: { authorization: header } });
}

async function register(local, house) {
  const who = { local, address: `${local}@${house.domain}`, house, keys: await newAgentKeys() };
  const body = { local, sig: who.keys.sig, enc: who.keys.enc };
  expectStatus(await call(house, 'POST', '/agents', { body, headers: admin(house) }), 201, `register ${who.address}`);
  return who;
}

/** `from` sends `to` a plain message; answers its id. */
async function send(from, to, text) {
  const env = await signEnvelope(draftEnvelope(from.address, [to.address], { media: 'text/plain', body: text }), from.keys);
  expectStatus(await as(from, 'POST', '/outbound', { body: env }), 202, `POST /outbound ${from.address} → ${to.address}`);
  return env.id;
}

/** The state of the one job of envelope `id` in `who`'s outbox once it is delivered or bounced;
 * after three seconds the cron of both houses is triggered at every poll (a retry waits for it). */
async function settled(who, id, { timeoutMs = 30_000 } = {}) {
  const start = Date.now();
  for (;;) {
    const out = expectStatus(await as(who, 'GET', `/outbox/${who.local}`), 200, `GET /outbox/${who.local}`);
    const job = out.envelopes.find((e) => e.id === id)?.jobs[0];
    assert.ok(job, `${id} is in the outbox of ${who.address}`);
    if (job.state === 'delivered' || job.state === 'bounced') return job;
    assert.ok(Date.now() - start < timeoutMs, `${id} never settled: ${JSON.stringify(job)}`);
    if (Date.now() - start > 3_000) await Promise.all([a.scheduled(), b.scheduled()]);
    await sleep(150);
  }
}

async function mailbox(who) {
  return expectStatus(await as(who, 'GET', `/mailbox/${who.local}?limit=200`), 200, `GET /mailbox/${who.local}`).envelopes;
}

/** Sends each of `pairs` ([from, to]) at once, and checks every one is delivered and held. */
async function exchange(pairs, label) {
  const ids = await Promise.all(pairs.map(([from, to]) => send(from, to, `${label} ${from.local} → ${to.local}`)));
  for (const [i, [from, to]] of pairs.entries()) {
    const job = await settled(from, ids[i]);
    assert.equal(job.state, 'delivered', `${label}: ${from.address} → ${to.address}: ${JSON.stringify(job)}`);
    assert.ok((await mailbox(to)).some((m) => m.envelope.id === ids[i]), `${label}: in the mailbox of ${to.address}`);
  }
  return ids;
}

let failed = false;
try {
  console.log(`nyx5 rotation e2e: two Worker houses under wrangler dev; state in ${state}`);
  let ana;
  let bo;
  await steps.step('build the Worker (scripts/build-worker); migrate and start a.test and b.test', async () => {
    assert.ok(existsSync(WRANGLER), `wrangler is missing (${WRANGLER}): run ./scripts/setup`);
    const build = spawnSync(join(ROOT, 'scripts/build-worker'), { cwd: ROOT, encoding: 'utf8', env: ENV });
    assert.equal(build.status, 0, `scripts/build-worker failed:\n${build.stdout}\n${build.stderr}`);
    await Promise.all([a.migrate(), b.migrate()]);
    await Promise.all([a.start(), b.start()]);
    ana = await register('ana', a);
    bo = await register('bo', b);
  });

  await steps.step('before: ana and bo write to each other; each house caches the other’s card', async () => {
    await exchange([[ana, bo], [bo, ana]], 'before');
  });

  await steps.step('a.test restarts with a new NYX5_DOMAIN_KEY, the old one in NYX5_PREVIOUS_DOMAIN_KEYS', async () => {
    await a.stop();
    const until = new Date(Date.now() + 30 * 86_400_000).toISOString().replace(/\.\d{3}Z$/, 'Z');
    a.vars = {
      ...a.vars,
      NYX5_DOMAIN_KEY: secondKey.sigSecret,
      NYX5_PREVIOUS_DOMAIN_KEYS: JSON.stringify([{ key: firstKey.sigSecret, until }]),
    };
    await a.start();
    const card = expectStatus(await call(a, 'GET', '/.well-known/nyx5.json'), 200, 'a.test card');
    assert.equal(await verifyDomainCard(card, 'a.test'), secondKey.sig, 'signed by the new key');
    const old = card.keys.find((k) => k.sig === firstKey.sig);
    assert.ok(old?.handover && old.until, `the old key is listed with its handover: ${JSON.stringify(card.keys)}`);
  });

  await steps.step('right after: both write again at once; everything is delivered, nothing bounces', async () => {
    await exchange([[ana, bo], [bo, ana]], 'after');
    for (const who of [ana, bo]) {
      const notices = (await mailbox(who)).filter((m) => m.envelope.from.startsWith('postmaster@'));
      assert.deepEqual(notices.map((m) => m.envelope.content?.body), [], `no notice for ${who.address}`);
    }
    const pins = expectStatus(await call(b, 'GET', '/pins', { headers: admin(b) }), 200, 'GET /pins at b.test');
    const pin = JSON.stringify(pins);
    assert.ok(pin.includes(secondKey.sig), `b.test's pin of a.test followed the handover: ${pin}`);
    return `b.test's pin of a.test moved to the new key`;
  });
} catch (e) {
  failed = true;
  console.log('FAIL');
  console.error(`\n${e.stack ?? e}`);
  for (const h of [a, b]) console.error(`\n--- last lines of ${h.log}\n${h.tail(40)}`);
} finally {
  await Promise.allSettled([a.stop(), b.stop()]);
}

const total = secs(performance.now() - T0);
if (failed) {
  console.error(`\nnyx5 rotation e2e: FAILED after ${total}; logs and state kept in ${state}`);
  process.exit(1);
}
rmSync(state, { recursive: true, force: true });
console.log(`\nnyx5 rotation e2e: all ${steps.count} steps passed in ${total} (wall time)`);
