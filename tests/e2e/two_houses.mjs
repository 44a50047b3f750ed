// End-to-end: two Nyx5 houses, a.test and b.test, each the built Worker under `wrangler dev`
// (workerd, local D1) on its own loopback port with its own state, finding each other through
// NYX5_HOSTS. A Node WebCrypto client (tests/lib/nyx5.mjs) registers agents, seals, sends, reads,
// opens, verifies and acknowledges, and the suite checks the queue's behaviour across the two:
//
//   registration (operator, invitation); a sealed envelope a → b delivered by the post-response
//   kick, read by polling, opened, verified, acked (twice); a signed delivery receipt and a signed
//   bounce back to the sender from postmaster@a.test; a deferred envelope invisible before its
//   time and delivered by a triggered cron after; b stopped: a keeps the job, retries on cron and
//   delivers when b is back; bad requests answered with the JSON error shape and changing
//   nothing; an email through the email handler stored once, unsigned, a stranger's refused, and
//   an agent's email left pending without a provider, and one sent through a local stand-in for
//   the provider; the Libro of a.test (docs/SPEC.md §14–§21): a top-up by the operator, an escrow
//   quote signed by bo@b.test, accepted by ana, delivered by bo across the houses, released by
//   ana, with signed receipts to both, balances read by each (bo as a foreigner), the journal's
//   signatures and hash chain, ana's signed history, a replay that changes nothing and refusals
//   bounced (403, 409); and, with both houses stopped, the invariants of the D1 state (queried
//   with `wrangler d1 execute`), the Libro's among them.
//
//   node tests/e2e/two_houses.mjs        (scripts/test runs it after building the Worker)
//
// Ports: free ones, found at start, for the two houses, the email provider, hang.test, junk.test
// and two inspectors (NYX5_E2E_PORT=N fixes them at N + 0…4, 442, 443).
// Prints each step with its timing and the total wall time; exits 1 on the first failure (the
// houses' logs and state are kept then), 0 when every step passed. A missing toolchain fails.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import {
  NOTICE_MEDIA,
  authHeader,
  b64u,
  canon,
  draftEnvelope,
  newAgentKeys,
  openEnvelope,
  random,
  registrationBody,
  sealEnvelope,
  sha256hex,
  signAs,
  signDocument,
  signEnvelope,
  utf8,
  verifyDomainCard,
  verifySignature,
} from '../lib/nyx5.mjs';
import { call, makeSteps, secs } from '../lib/e2e.mjs';
import { ENV, House, ROOT, WRANGLER, killAll, portsFor } from '../lib/wrangler.mjs';

const T0 = performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const PORT = await portsFor('NYX5_E2E_PORT', [0, 1, 2, 3, 4, 442, 443]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-e2e-'));
const urlOf = (port) => `http://127.0.0.1:${port}`;
const tokenA = b64u(random(24));
const tokenB = b64u(random(24));
const a = new House({
  domain: 'a.test',
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  vars: {
    NYX5_REGISTRATION: 'invite',
    NYX5_ADMIN_TOKEN: tokenA,
    // b.test, and two hostile destinations played below: one that never answers, one that
    // answers every request with a web page (the operator's hosts file may name 127.0.0.1).
    NYX5_HOSTS: JSON.stringify({
      'b.test': { url: urlOf(PORT(1)) },
      'hang.test': { url: urlOf(PORT(3)) },
      'junk.test': { url: urlOf(PORT(4)) },
    }),
    // The email bridge's provider: a local stand-in for Resend (below).
    RESEND_KEY: 're_e2e_key',
    EMAIL_SENDER: 'mail@a.test',
    NYX5_EMAIL_PROVIDER_URL: `${urlOf(PORT(2))}/emails`,
    // The 60 large envelopes below come from one agent within a minute.
    NYX5_OUTBOUND_PER_MINUTE: '200',
  },
});
// Records what a.test asks the email provider, and answers as Resend does.
const providerRequests = [];
const provider = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    providerRequests.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ id: `re_${providerRequests.length}` }));
  });
});
await new Promise((resolve) => provider.listen(PORT(2), '127.0.0.1', resolve));
// hang.test takes every request and never answers.
const hang = createServer(() => {});
await new Promise((resolve) => hang.listen(PORT(3), '127.0.0.1', resolve));
// junk.test has a well-formed domain card, and answers everything else 200 with a web page, as
// a captive portal or a default server would. Its card is made once b.test's is known (below).
let junkCard;
const junk = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    if (req.url === '/.well-known/nyx5.json' && junkCard) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(canon(junkCard));
    } else {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html><body>Welcome! Please sign in to continue.</body></html>');
    }
  });
});
await new Promise((resolve) => junk.listen(PORT(4), '127.0.0.1', resolve));
// b.test signs with a domain key the suite knows (the NYX5_DOMAIN_KEY secret, as production
// sets it), so the Libro steps can replay an envelope to a.test as b.test would after losing the
// answer; a.test keeps the key it made in D1.
const domainKeysB = await newAgentKeys();
const b = new House({
  domain: 'b.test',
  port: PORT(1),
  inspectorPort: PORT(443),
  stateDir: state,
  vars: {
    NYX5_REGISTRATION: 'invite',
    NYX5_ADMIN_TOKEN: tokenB,
    NYX5_DOMAIN_KEY: domainKeysB.sigSecret,
    NYX5_HOSTS: JSON.stringify({ 'a.test': { url: urlOf(PORT(0)) } }),
  },
});

// ---------------------------------------------------------------------------------------------
// Steps, HTTP, polling.

const steps = makeSteps(T0);
const step = (title, fn) => steps.step(title, fn);


const admin = (house) => ({ authorization: `Bearer ${house === a ? tokenA : tokenB}` });

/** A request as `agent` (a fresh §8 token for this method, path and house). */
async function as(agent, method, path, opts = {}) {
  const { header } = await authHeader(agent.keys, {
    address: agent.address,
    method,
    path,
    host: agent.house.host,
    body: opts.body,
  });
  return call(agent.house, method, path, { ...opts, headers: { ...opts.headers, authorization: header } });
}

function expectStatus(res, status, what) {
  assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status} ${res.text.slice(0, 300)}`);
  return res.json;
}

/** The one error shape: `{ok: false, code, error, reason}` as JSON with the code as status. */
function expectError(res, status, slug, what) {
  expectStatus(res, status, what);
  assert.match(res.type ?? '', /^application\/json/, `${what}: content-type ${res.type}`);
  const j = res.json;
  assert.ok(j && typeof j === 'object', `${what}: body is not JSON: ${res.text.slice(0, 200)}`);
  assert.equal(j.ok, false, `${what}: ok`);
  assert.equal(j.code, status, `${what}: code`);
  assert.equal(j.error, slug, `${what}: error slug`);
  assert.equal(typeof j.reason, 'string', `${what}: reason`);
  assert.ok(j.reason.length > 0, `${what}: empty reason`);
  return j;
}

/** Calls `fn` until it answers something truthy, or fails after `timeoutMs`. */
async function until(what, fn, { timeoutMs = 10_000, everyMs = 100 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

// ---------------------------------------------------------------------------------------------
// Agents and their views.

async function agent(local, house) {
  return { local, address: `${local}@${house.domain}`, house, keys: await newAgentKeys() };
}

async function mailbox(who) {
  return expectStatus(await as(who, 'GET', `/mailbox/${who.local}?limit=200`), 200, `GET /mailbox/${who.local}`)
    .envelopes;
}

async function outboxJob(who, id) {
  const out = expectStatus(await as(who, 'GET', `/outbox/${who.local}`), 200, `GET /outbox/${who.local}`);
  const entry = out.envelopes.find((e) => e.id === id);
  assert.ok(entry, `envelope ${id} is not in the outbox of ${who.address}`);
  assert.equal(entry.jobs.length, 1, 'one job per destination domain');
  return entry.jobs[0];
}

async function ack(who, ids) {
  return expectStatus(await as(who, 'POST', `/mailbox/${who.local}/ack`, { body: { ids } }), 200, 'ack').acked;
}

async function health(house) {
  return expectStatus(await call(house, 'GET', '/health'), 200, `${house.domain} /health`);
}

/** Waits for envelope `id` in `who`'s mailbox; answers the mailbox item. */
function arrival(who, pred, what, timeoutMs = 10_000) {
  return until(what, async () => (await mailbox(who)).find((m) => pred(m.envelope)), { timeoutMs });
}

/** Checks a postmaster notice (§7) about `original` and answers its body. */
async function checkNotice(notice, original, domainKey, status) {
  assert.equal(notice.from, 'postmaster@a.test', 'notice sender');
  assert.deepEqual(notice.to, [original.from], 'notice recipient');
  assert.equal(notice.type, 'receipt', 'notice type');
  assert.equal(notice.in_reply_to, original.id, 'notice in_reply_to');
  assert.equal(notice.thread, original.thread ?? null, 'notice thread');
  assert.equal(notice.signature.kid, domainKey, 'notice signed by the domain key');
  assert.ok(await verifySignature(notice, 'signature', domainKey, 'envelope'), 'notice signature verifies with the domain key');
  assert.equal(notice.content?.media, NOTICE_MEDIA, 'notice media');
  const body = notice.content.body;
  assert.equal(body.of, original.id, 'notice `of`');
  assert.equal(body.sha256, await sha256hex(canon(original)), 'notice sha256 of the original');
  assert.equal(body.status, status, 'notice status');
  return body;
}

// ---------------------------------------------------------------------------------------------
// The Libro of a.test (docs/SPEC.md §14–§21): operations are envelopes to libro@a.test, receipts
// come back from it, refusals as bounces from the sender's postmaster.

const LIBRO = 'libro@a.test';
const CASA = 'casa@a.test';
const LIBRO_MEDIA = 'application/nyx5.libro+json';
const RECIBO_MEDIA = 'application/nyx5.recibo+json';
const QUOTE_MEDIA = 'application/nyx5.cotizacion+json';
const GENESIS = '0'.repeat(64);
// What the Libro steps did, for the checks of the D1 state at the end.
const libro = { ops: {}, receipts: [], crons: [] };

/** Waits for an envelope in `who`'s mailbox; once `patienceMs` have passed without it, triggers
 * the cron of `houses` at every poll (and says so: `ticked`). */
async function arrivalOrTick(who, pred, what, houses, { patienceMs = 3_000, timeoutMs = 20_000 } = {}) {
  const t = Date.now();
  let ticked = false;
  const item = await until(
    what,
    async () => {
      const found = (await mailbox(who)).find((m) => pred(m.envelope));
      if (!found && Date.now() - t > patienceMs) {
        ticked = true;
        await Promise.all(houses.map((h) => h.scheduled()));
      }
      return found;
    },
    { timeoutMs },
  );
  return { item, ticked };
}

/** Which receipts of the last step waited for a cron on a.test (none came by the kick alone). */
function cronNote() {
  const waited = libro.crons.splice(0);
  return waited.length ? `receipts that waited for a cron on a.test: ${waited.join(', ')}` : 'every receipt came by the kick';
}

/** Operation `body` as `who`: an unsealed task to libro@a.test, sent through `who`'s own house. */
async function operate(who, body) {
  const draft = draftEnvelope(who.address, [LIBRO], { media: LIBRO_MEDIA, body }, { type: 'task' });
  const env = await signEnvelope(draft, who.keys);
  const r = expectStatus(await as(who, 'POST', '/outbound', { body: env }), 202, `POST /outbound (${body.op}) as ${who.local}`);
  assert.deepEqual(
    r.jobs.map((j) => [j.domain, j.recipients]),
    [['a.test', [LIBRO]]],
  );
  return env;
}

/** The amounts of an entry's lines by account. */
const linesOf = (entry) => Object.fromEntries(entry.lines.map((l) => [l.account, l.delta]));
const sumOf = (entry) => entry.lines.reduce((s, l) => s + l.delta, 0);
/** The ids of the receipt envelopes `local` got from the Libro, in order. */
const libroReceiptsTo = (local) => libro.receipts.filter((r) => r.local === local).map((r) => r.id);

/** Waits for the receipt of operation `op` in `who`'s mailbox and checks it (§16): an envelope of
 * `type: receipt` from libro@a.test, `in_reply_to` the operation, signed by a.test's domain key;
 * its body a receipt signed by the same key under its own label, about exactly that envelope; its
 * entry, if any, signed too. Acks it; answers the receipt. */
async function receiptOf(who, op) {
  const what = `the receipt of ${op.content.body.op} for ${who.address}`;
  const { item, ticked } = await arrivalOrTick(who, (e) => e.from === LIBRO && e.in_reply_to === op.id, what, [a]);
  if (ticked) libro.crons.push(`${op.content.body.op}→${who.local}`);
  const env = item.envelope;
  assert.equal(env.type, 'receipt', `${what}: type`);
  assert.deepEqual(env.to, [who.address], `${what}: one envelope per party`);
  assert.equal(env.encrypted, undefined, `${what}: not sealed`);
  assert.equal(env.signature.kid, keyA, `${what}: signed by a.test's domain key`);
  assert.ok(await verifySignature(env, 'signature', keyA, 'envelope'), `${what}: envelope signature`);
  assert.equal(env.content?.media, RECIBO_MEDIA, `${what}: media`);
  const receipt = env.content.body;
  assert.equal(receipt.tipo, 'recibo');
  assert.equal(receipt.house, 'a.test');
  assert.equal(receipt.of, op.id, `${what}: of`);
  assert.equal(receipt.op, op.content.body.op);
  assert.equal(receipt.status, 'done', `${what}: status`);
  assert.equal(receipt.from, op.from);
  assert.equal(receipt.op_sha256, await sha256hex(canon(op)), `${what}: op_sha256 is the operation's hash`);
  assert.equal(receipt.signature.kid, keyA);
  assert.ok(await verifySignature(receipt, 'signature', keyA, 'receipt'), `${what}: receipt signature (nyx5/1 receipt)`);
  assert.ok(!(await verifySignature(receipt, 'signature', keyA, 'envelope')), `${what}: only under its own label`);
  if (receipt.asiento) {
    assert.ok(await verifySignature(receipt.asiento, 'signature', keyA, 'asiento'), `${what}: entry signature`);
    assert.equal(sumOf(receipt.asiento), 0, `${what}: the entry sums to zero`);
  }
  libro.receipts.push({ local: who.local, id: env.id });
  assert.equal(await ack(who, [env.id]), 1);
  return receipt;
}

/** `GET /libro/cuenta/:address` as `who` (an agent) or with the operator's token (`who` null). */
async function account(address, who) {
  const path = `/libro/cuenta/${address}`;
  if (!who) return expectStatus(await call(a, 'GET', path, { headers: admin(a) }), 200, `operator GET ${path}`);
  const { header } = await authHeader(who.keys, { address: who.address, method: 'GET', path, host: a.host });
  return expectStatus(await call(a, 'GET', path, { headers: { authorization: header } }), 200, `GET ${path} as ${who.local}`);
}

/** The whole journal of a.test, page by page. */
async function journal(limit = 200) {
  const entries = [];
  let after = 0;
  for (;;) {
    const page = expectStatus(
      await call(a, 'GET', `/libro/diario?after=${after}&limit=${limit}`, { headers: admin(a) }),
      200,
      'GET /libro/diario',
    );
    assert.equal(page.house, 'a.test');
    entries.push(...page.entries);
    if (page.next === null) return entries;
    after = page.next;
  }
}

/** What a replay must not change: every balance, the journal, both mailboxes. */
async function libroSnapshot() {
  return canon({
    ana: (await account(ana.address, null)).balance,
    bo: (await account(bo.address, null)).balance,
    casa: (await account(CASA, null)).balance,
    journal: await journal(),
    anaMail: (await mailbox(ana)).map((m) => m.envelope.id),
    boMail: (await mailbox(bo)).map((m) => m.envelope.id),
  });
}

// ---------------------------------------------------------------------------------------------

let failed = false;
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    killAll();
    console.error(`\ninterrupted (${sig}); state kept in ${state}`);
    process.exit(130);
  });
}

const ana = await agent('ana', a);
const bo = await agent('bo', b);
const cards = {};
const sent = {}; // the envelopes ana sent, by name
let keyA;
let keyB;
let tickAt = 0;
let oldNonce;
let oldKeepUntil = 0;
let freshNonce;

try {
  console.log(`nyx5 e2e: two houses under wrangler dev; state in ${state}`);

  await step('toolchain: wrangler is installed and the Worker is built (scripts/build-worker)', async () => {
    assert.ok(existsSync(WRANGLER), `wrangler is missing (${WRANGLER}): run ./scripts/setup`);
    const v = spawnSync(WRANGLER, ['--version'], { encoding: 'utf8', env: ENV });
    assert.equal(v.status, 0, `wrangler --version failed: ${v.stderr}`);
    // A no-op when the build is current; building here keeps the two `wrangler dev` starts from
    // both building at once.
    const build = spawnSync(join(ROOT, 'scripts/build-worker'), { cwd: ROOT, encoding: 'utf8', env: ENV });
    const output = `${build.stdout}\n${build.stderr}`;
    assert.equal(build.status, 0, `scripts/build-worker failed (run ./scripts/setup):\n${output}`);
    for (const f of ['build/index.js', 'build/index_bg.wasm']) assert.ok(existsSync(join(ROOT, f)), `${f} is missing`);
    const wasm = statSync(join(ROOT, 'build/index_bg.wasm')).size;
    return `wrangler ${v.stdout.trim()}; build/index_bg.wasm ${wasm} bytes`;
  });

  await step('apply the D1 migrations to both local databases', async () => {
    await Promise.all([a.migrate(), b.migrate()]);
  });

  await step(`start a.test on ${a.url} and b.test on ${b.url}; /health answers`, async () => {
    const times = await Promise.all(
      [a, b].map(async (h) => {
        const t = performance.now();
        await h.start();
        return `${h.domain} ${secs(performance.now() - t)}`;
      }),
    );
    return `ready: ${times.join(', ')}`;
  });

  await step('domain cards are self-signed and name their estafeta', async () => {
    for (const h of [a, b]) {
      const card = expectStatus(await call(h, 'GET', '/.well-known/nyx5.json'), 200, `${h.domain} card`);
      const key = await verifyDomainCard(card, h.domain);
      assert.equal(card.estafeta, h.url);
      assert.equal(card.policy.registration, 'invite');
      cards[h.domain] = card;
      if (h === a) keyA = key;
      else keyB = key;
    }
    assert.notEqual(keyA, keyB, 'the two houses made different domain keys');
    assert.equal(keyB, domainKeysB.sig, 'b.test signs with its NYX5_DOMAIN_KEY secret');
  });

  await step('register ana@a.test by the operator (bearer token)', async () => {
    const body = { local: 'ana', sig: ana.keys.sig, enc: ana.keys.enc };
    const r = expectStatus(await call(a, 'POST', '/agents', { body, headers: admin(a) }), 201, 'register ana');
    assert.equal(r.registered_via, 'admin');
    assert.equal(r.card.address, 'ana@a.test');
    assert.equal(r.card.sig, ana.keys.sig);
    assert.ok(await verifySignature(r.card, 'certification', keyA, 'agent-card'), 'ana card certified by a.test');
    const served = expectStatus(await call(a, 'GET', '/agents/ana'), 200, 'GET /agents/ana');
    assert.equal(canon(served), canon(r.card));
  });

  await step('register bo@b.test with an invitation code; the used-up code is refused', async () => {
    const inv = expectStatus(
      await call(b, 'POST', '/invitations', { body: { uses: 1, note: 'e2e' }, headers: admin(b) }),
      201,
      'POST /invitations',
    ).invitation;
    assert.equal(inv.uses, 1);
    assert.equal(inv.used, 0);
    const r = expectStatus(
      await call(b, 'POST', '/agents', { body: await registrationBody('bo', bo.keys, { invite: inv.code }) }),
      201,
      'register bo',
    );
    assert.equal(r.registered_via, `invite:${inv.code}`);
    assert.ok(await verifySignature(r.card, 'certification', keyB, 'agent-card'), 'bo card certified by b.test');
    const bea = await newAgentKeys();
    expectError(
      await call(b, 'POST', '/agents', { body: await registrationBody('bea', bea, { invite: inv.code }) }),
      403,
      'bad_invite',
      'a second use of a one-use invitation',
    );
    expectError(await call(b, 'GET', '/agents/bea'), 404, 'unknown_agent', 'bea was not registered');
    const list = expectStatus(await call(b, 'GET', '/invitations', { headers: admin(b) }), 200, 'GET /invitations');
    assert.deepEqual(
      list.invitations.map((i) => [i.code, i.uses, i.used]),
      [[inv.code, 1, 1]],
    );
  });

  await step('tokens near the end of their window work once (nonce kept until ts + 5 min)', async () => {
    // A token from 4m55s ago is still good; its nonce is kept until ts + 5 min (5 s from now), and
    // the last tick of this run, later than that, must purge it.
    const ts = new Date(Date.now() - 295_000).toISOString();
    const path = '/mailbox/ana';
    const old = await authHeader(ana.keys, { address: ana.address, method: 'GET', path, host: a.host, ts });
    expectStatus(await call(a, 'GET', path, { headers: { authorization: old.header } }), 200, 'old token');
    expectError(
      await call(a, 'GET', path, { headers: { authorization: old.header } }),
      401,
      'nonce_used',
      'the same token again',
    );
    oldNonce = old.nonce;
    oldKeepUntil = Date.parse(ts) + 300_000;
  });

  await step('ana seals a message for bo and sends it (POST /outbound); a resend or a replay is "exists"', async () => {
    const boCard = expectStatus(await call(b, 'GET', '/agents/bo'), 200, 'GET b/agents/bo');
    assert.ok(await verifySignature(boCard, 'certification', keyB, 'agent-card'), "bo's card verifies with b.test's key");
    const content = { media: 'text/plain', body: 'hola bo, ¿nos vemos el martes? 😀' };
    const draft = draftEnvelope(ana.address, [bo.address], content, { receipt: 'delivered', thread: 'e2e-1' });
    const sealed = await sealEnvelope(draft, [
      { address: bo.address, enc: boCard.enc },
      { address: ana.address, enc: ana.keys.enc },
    ]);
    const env = await signEnvelope(sealed, ana.keys);
    sent.first = { env, content };
    // The envelope's id is the send's nonce (issue 36): the very same request again is the same
    // envelope again, "exists" (D1's UNIQUE failure on the outbox's id read as such), with the
    // jobs as the send listed them and nothing queued twice.
    const { header } = await authHeader(ana.keys, { address: ana.address, method: 'POST', path: '/outbound', host: a.host, body: env });
    const once = () => call(a, 'POST', '/outbound', { body: env, headers: { authorization: header } });
    const r = expectStatus(await once(), 202, 'POST /outbound');
    const replayed = expectStatus(await once(), 200, 'the same request replayed');
    assert.equal(replayed.exists, true);
    assert.deepEqual(replayed.jobs, r.jobs, 'a replay learns the jobs as listed, not their progress');
    assert.equal(r.id, env.id);
    assert.deepEqual(
      r.jobs.map((j) => [j.domain, j.recipients]),
      [['b.test', ['bo@b.test']]],
    );
    const again = expectStatus(await as(ana, 'POST', '/outbound', { body: env }), 200, 'the same envelope again');
    assert.equal(again.exists, true);
  });

  await step('it reaches bo@b.test through the post-response kick (Workers fetch), read by polling', async () => {
    const t = performance.now();
    const item = await arrival(bo, (e) => e.id === sent.first.env.id, 'the first envelope in bo’s mailbox', 8_000);
    sent.first.item = item;
    return `in bo's mailbox ${secs(performance.now() - t)} after the 202, with no cron triggered`;
  });

  await step('bo verifies ana’s signature and opens it', async () => {
    const { env, content, item } = sent.first;
    assert.equal(canon(item.envelope), canon(env), 'the envelope arrives byte for byte (canonically)');
    assert.ok(Date.parse(item.received) > 0);
    const anaCard = expectStatus(await call(a, 'GET', '/agents/ana'), 200, 'GET a/agents/ana');
    assert.ok(await verifySignature(anaCard, 'certification', keyA, 'agent-card'));
    assert.ok(await verifySignature(item.envelope, 'signature', anaCard.sig, 'envelope'), 'sender signature');
    const opened = await openEnvelope(item.envelope, bo.address, bo.keys.encKey);
    assert.deepEqual(opened, content);
    const tampered = { ...item.envelope, to: [...item.envelope.to, 'eve@b.test'] };
    await assert.rejects(openEnvelope(tampered, bo.address, bo.keys.encKey), 'a re-addressed copy does not open');
  });

  await step('bo acks it (acked 1); acking again changes nothing (acked 0)', async () => {
    assert.equal(await ack(bo, [sent.first.env.id]), 1);
    assert.equal(await ack(bo, [sent.first.env.id]), 0);
    assert.ok(!(await mailbox(bo)).some((m) => m.envelope.id === sent.first.env.id), 'acked envelopes leave the list');
  });

  await step('a signed delivery receipt from postmaster@a.test reaches ana; the outbox says delivered', async () => {
    const { env } = sent.first;
    const item = await arrival(ana, (e) => e.in_reply_to === env.id, 'the delivery receipt');
    const body = await checkNotice(item.envelope, env, keyA, 'delivered');
    assert.deepEqual(body.recipients, ['bo@b.test']);
    const job = await outboxJob(ana, env.id);
    assert.equal(job.state, 'delivered');
    assert.deepEqual(job.delivered, ['bo@b.test']);
    assert.deepEqual(job.bounced, []);
    assert.equal(job.attempts, 1);
    assert.equal(job.next_attempt, null);
    assert.ok(Date.parse(job.finished) > 0);
    assert.equal(await ack(ana, [item.envelope.id]), 1);
  });

  await step('a bounce (404) comes back for nobody@b.test, signed by a.test', async () => {
    const env = await signEnvelope(
      draftEnvelope(ana.address, ['nobody@b.test'], { media: 'text/plain', body: 'anyone?' }),
      ana.keys,
    );
    sent.bounce = { env };
    expectStatus(await as(ana, 'POST', '/outbound', { body: env }), 202, 'POST /outbound to nobody');
    const item = await arrival(ana, (e) => e.in_reply_to === env.id, 'the bounce');
    const body = await checkNotice(item.envelope, env, keyA, 'bounced');
    assert.deepEqual(body.recipients, ['nobody@b.test']);
    assert.equal(body.code, 404);
    assert.equal(typeof body.reason, 'string');
    const job = await outboxJob(ana, env.id);
    assert.equal(job.state, 'bounced');
    assert.equal(job.code, 404);
    assert.deepEqual(job.delivered, []);
    assert.deepEqual(
      job.bounced.map((x) => [x.to, x.code]),
      [['nobody@b.test', 404]],
    );
    assert.equal(await ack(ana, [item.envelope.id]), 1);
    return `reason: ${body.reason}`;
  });

  const DEFER_MS = 5_000;
  await step(`a deferred envelope (deliver_after +${DEFER_MS / 1000}s) is not delivered before its time`, async () => {
    const content = { media: 'text/plain', body: 'later' };
    const deliverAfter = new Date(Date.now() + DEFER_MS).toISOString();
    const env = await signEnvelope(
      draftEnvelope(ana.address, [bo.address], content, { deliver_after: deliverAfter }),
      ana.keys,
    );
    sent.deferred = { env, content };
    const r = expectStatus(await as(ana, 'POST', '/outbound', { body: env }), 202, 'POST deferred');
    assert.equal(r.jobs[0].next_attempt, deliverAfter, 'first due at deliver_after');
    for (let i = 0; i < 2; i++) {
      await sleep(400);
      await a.scheduled();
      assert.ok(!(await mailbox(bo)).some((m) => m.envelope.id === env.id), 'not in bo’s mailbox yet');
    }
    const job = await outboxJob(ana, env.id);
    assert.equal(job.state, 'pending');
    assert.equal(job.attempts, 0);
    assert.equal(job.next_attempt, deliverAfter);
    const h = await health(a);
    assert.equal(h.queue_depth, 1);
    assert.equal(h.oldest_due_ms, null, 'nothing is due yet');
    assert.ok(Date.now() < Date.parse(deliverAfter), 'these checks ran before deliver_after');
  });

  await step('after deliver_after, a triggered cron on a.test delivers it', async () => {
    const { env, content } = sent.deferred;
    const due = Date.parse(env.deliver_after);
    await sleep(Math.max(0, due - Date.now() + 200));
    await a.scheduled();
    const item = await arrival(bo, (e) => e.id === env.id, 'the deferred envelope', 5_000);
    assert.ok(Date.parse(item.received) >= due, `received ${item.received} before ${env.deliver_after}`);
    assert.deepEqual(item.envelope.content, content);
    assert.ok(await verifySignature(item.envelope, 'signature', ana.keys.sig, 'envelope'));
    assert.equal((await outboxJob(ana, env.id)).state, 'delivered');
    assert.equal(await ack(bo, [env.id]), 1);
    return `received ${Date.parse(item.received) - due} ms after deliver_after`;
  });

  await step('b.test stops; a.test keeps the job (retrying, last_error) and retries on cron', async () => {
    await b.stop();
    const content = { media: 'text/plain', body: 'are you there?' };
    const draft = draftEnvelope(ana.address, [bo.address], content, { receipt: 'delivered' });
    const env = await signEnvelope(await sealEnvelope(draft, [{ address: bo.address, enc: bo.keys.enc }]), ana.keys);
    sent.outage = { env, content };
    expectStatus(await as(ana, 'POST', '/outbound', { body: env }), 202, 'POST while b is down');
    // The kick tries at once and fails.
    const first = await until('a first failed attempt', async () => {
      const j = await outboxJob(ana, env.id);
      return j.attempts >= 1 && j.last_error && j;
    });
    assert.equal(first.state, 'retrying');
    assert.ok(first.last_error && first.last_error.length > 0, 'last_error says why');
    assert.ok(Date.parse(first.next_attempt) > 0, 'a next attempt is scheduled');
    assert.equal(first.finished, null);
    // The cron retries once the backoff has passed.
    await sleep(Math.max(0, Date.parse(first.next_attempt) - Date.now() + 100));
    await a.scheduled();
    const second = await outboxJob(ana, env.id);
    assert.ok(second.attempts >= 2, `the cron retried (attempts ${second.attempts})`);
    assert.equal(second.state, 'retrying');
    assert.ok(Date.parse(second.next_attempt) > Date.parse(first.next_attempt), 'backoff grows');
    const h = await health(a);
    assert.equal(h.queue_depth, 1);
    return `last_error: ${second.last_error}`;
  });

  await step('b.test restarts on the same state; the next cron on a.test delivers, with a receipt', async () => {
    await b.start();
    const { env, content } = sent.outage;
    const job = await outboxJob(ana, env.id);
    await sleep(Math.max(0, Date.parse(job.next_attempt) - Date.now() + 100));
    await a.scheduled();
    const item = await arrival(bo, (e) => e.id === env.id, 'the envelope sent during the outage', 5_000);
    assert.deepEqual(await openEnvelope(item.envelope, bo.address, bo.keys.encKey), content);
    const done = await outboxJob(ana, env.id);
    assert.equal(done.state, 'delivered');
    assert.ok(done.attempts >= 3, `attempts ${done.attempts}`);
    const receipt = await arrival(ana, (e) => e.in_reply_to === env.id, 'the receipt after the outage');
    await checkNotice(receipt.envelope, env, keyA, 'delivered');
    assert.equal(await ack(bo, [env.id]), 1);
    assert.equal(await ack(ana, [receipt.envelope.id]), 1);
    return `delivered after ${done.attempts} attempts`;
  });

  await step('a destination that hangs and one that answers 200 with a web page hold up nobody, and bounce on expiry', async () => {
    // junk.test's card: b.test's, renamed and signed by a key of its own.
    const junkKeys = await newAgentKeys();
    const model = expectStatus(await call(b, 'GET', '/.well-known/nyx5.json'), 200, 'b.test card');
    const { signature: _dropped, ...unsigned } = model;
    junkCard = await signDocument(
      { ...unsigned, domain: 'junk.test', estafeta: urlOf(PORT(4)), keys: [{ sig: junkKeys.sig }] },
      junkKeys,
      'signature',
      'domain-card',
    );
    const expires = new Date(Date.now() + 25_000).toISOString();
    const send = async (to, body, fields = {}) => {
      const env = await signEnvelope(draftEnvelope(ana.address, [to], { media: 'text/plain', body }, fields), ana.keys);
      expectStatus(await as(ana, 'POST', '/outbound', { body: env }), 202, `POST /outbound to ${to}`);
      return env;
    };
    const hung = await send('x@hang.test', 'into the void', { expires });
    const paged = await send('y@junk.test', 'to a web page', { expires });
    const fine = await send(bo.address, 'meanwhile, to a house that works');
    Object.assign(sent, { hung, paged, fine, junkSig: junkKeys.sig });
    await a.scheduled();
    await arrival(bo, (e) => e.id === fine.id, 'mail to the healthy house', 15_000);
    const attempted = async (env) => {
      const j = await outboxJob(ana, env.id);
      return j.attempts >= 1 && j.last_error && j;
    };
    const pagedJob = await until('the web page to be read', () => attempted(paged), { timeoutMs: 15_000 });
    assert.equal(pagedJob.state, 'retrying', `a 200 web page is not a delivery: ${pagedJob.last_error}`);
    assert.match(pagedJob.last_error, /Nyx5 answer/);
    const hungJob = await until('the hanging house to time out', () => attempted(hung), { timeoutMs: 25_000 });
    assert.equal(hungJob.state, 'retrying');
    assert.doesNotMatch(hungJob.last_error, /127\.0\.0\.1|:\d{4,5}/, 'last_error names no address');
    // Once the envelopes expire, the next cron bounces both, without trying them again.
    await sleep(Math.max(0, Date.parse(expires) - Date.now() + 200));
    await a.scheduled();
    for (const env of [hung, paged]) {
      assert.equal((await outboxJob(ana, env.id)).state, 'bounced', `${env.to[0]} bounced`);
      const notice = await arrival(ana, (e) => e.in_reply_to === env.id, `the bounce for ${env.to[0]}`);
      await checkNotice(notice.envelope, env, keyA, 'bounced');
      assert.equal(await ack(ana, [notice.envelope.id]), 1);
    }
    assert.equal(await ack(bo, [fine.id]), 1);
    return `web page: ${pagedJob.last_error}; hang: ${hungJob.last_error}`;
  });

  await step('bad requests get 4xx JSON errors and change nothing', async () => {
    const snapshot = async () =>
      canon({
        anaMail: await mailbox(ana),
        boMail: await mailbox(bo),
        anaOut: expectStatus(await as(ana, 'GET', '/outbox/ana'), 200, 'outbox').envelopes,
        healthA: await health(a),
        healthB: await health(b),
        invitations: expectStatus(await call(b, 'GET', '/invitations', { headers: admin(b) }), 200, 'inv').invitations,
        bo: expectStatus(await call(b, 'GET', '/agents/bo'), 200, 'bo'),
      });
    const before = await snapshot();
    const checks = [];
    const expect = async (what, res, status, slug) => {
      expectError(await res, status, slug, what);
      checks.push(what);
    };
    const envTo = (to) => signEnvelope(draftEnvelope(ana.address, to, { media: 'text/plain', body: 'x' }), ana.keys);

    // POST /outbound on a.test
    await expect('malformed JSON', as(ana, 'POST', '/outbound', { body: '{"nyx5":"1",' }), 400, 'bad_json');
    await expect('duplicate keys', as(ana, 'POST', '/outbound', { body: '{"id":"x","id":"y"}' }), 400, 'bad_json');
    await expect('not an envelope', as(ana, 'POST', '/outbound', { body: '[1,2,3]' }), 400, 'bad_envelope');
    const big = utf8.encode(`"${'x'.repeat(2 * 1024 * 1024)}"`);
    await expect('a body over 2 MiB', as(ana, 'POST', '/outbound', { body: big }), 413, 'body_too_large');
    const huge = await signEnvelope(
      draftEnvelope(ana.address, [bo.address], { media: 'text/plain', body: 'x'.repeat(1536 * 1024) }),
      ana.keys,
    );
    await expect('an envelope over max_bytes (1 MiB)', as(ana, 'POST', '/outbound', { body: huge }), 413, 'envelope_too_large');
    const valid = await envTo([bo.address]);
    await expect('no Authorization', call(a, 'POST', '/outbound', { body: valid }), 401, 'bad_token');
    await expect(
      'a garbage token',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: 'Nyx5 e30.AAAA' } }),
      401,
      'bad_token',
    );
    const mallory = await newAgentKeys();
    const forged = await authHeader(mallory, {
      address: ana.address,
      method: 'POST',
      path: '/outbound',
      host: a.host,
      body: valid,
    });
    await expect(
      'a token signed by another key',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: forged.header } }),
      401,
      'token_signature_invalid',
    );
    const claims = { address: ana.address, method: 'POST', path: '/outbound', host: a.host, body: valid };
    const otherBody = await authHeader(ana.keys, { ...claims, body: '{}' });
    await expect(
      'a token for another body',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: otherBody.header } }),
      401,
      'token_for_another_request',
    );
    const otherQuery = await authHeader(ana.keys, { ...claims, path: '/outbound?x=1' });
    await expect(
      'a token for another query',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: otherQuery.header } }),
      401,
      'token_for_another_request',
    );
    const otherPath = await authHeader(ana.keys, { ...claims, path: '/inbound' });
    await expect(
      'a token for another path',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: otherPath.header } }),
      401,
      'token_for_another_request',
    );
    const otherHost = await authHeader(ana.keys, { ...claims, host: b.host });
    await expect(
      'a token for another house',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: otherHost.header } }),
      401,
      'token_for_another_request',
    );
    const stale = await authHeader(ana.keys, { ...claims, ts: new Date(Date.now() - 6 * 60_000).toISOString() });
    await expect(
      'a token older than 5 minutes',
      call(a, 'POST', '/outbound', { body: valid, headers: { authorization: stale.header } }),
      401,
      'token_expired',
    );
    await expect(
      "bo's token at a.test",
      authHeader(bo.keys, { address: bo.address, method: 'GET', path: '/mailbox/ana', host: a.host }).then((t) =>
        call(a, 'GET', '/mailbox/ana', { headers: { authorization: t.header } }),
      ),
      401,
      'token_wrong_house',
    );
    await expect('a forged sender', as(ana, 'POST', '/outbound', {
      body: await signEnvelope(draftEnvelope('eve@a.test', [bo.address], { media: 'text/plain', body: 'x' }), ana.keys),
    }), 403, 'not_the_sender');
    await expect('DELETE /outbound', as(ana, 'DELETE', '/outbound'), 405, 'wrong_method');
    await expect('an unknown route', call(a, 'GET', '/nowhere'), 404, 'no_route');

    // POST /inbound on b.test
    await expect('malformed JSON to /inbound', call(b, 'POST', '/inbound', { body: '{' }), 400, 'bad_json');
    await expect(
      'a direct /inbound without the relay header',
      call(b, 'POST', '/inbound', { body: valid }),
      403,
      'relay_required',
    );
    const relayBytes = utf8.encode(`relay:${valid.id}:b.test:${await sha256hex(canon(valid))}`);
    const fakeRelay = `nyx51 domain=a.test; kid=${mallory.sig}; sig=${await signAs('relay', mallory, relayBytes)}`;
    await expect(
      'a relay header by a key a.test does not have',
      call(b, 'POST', '/inbound', { body: valid, headers: { 'x-nyx5-relay': fakeRelay } }),
      403,
      'relay_key_not_valid',
    );

    // Registration and the operator's routes on b.test
    await expect('malformed registration', call(b, 'POST', '/agents', { body: '{"local":' }), 400, 'bad_json');
    await expect(
      'registration without an invitation',
      call(b, 'POST', '/agents', { body: await registrationBody('cy', mallory) }),
      403,
      'invite_required',
    );
    await expect(
      'a reserved name, even for the operator',
      call(b, 'POST', '/agents', { body: { local: 'postmaster', sig: mallory.sig }, headers: admin(b) }),
      403,
      'reserved_name',
    );
    await expect(
      'a wrong operator token',
      call(b, 'POST', '/invitations', { body: {}, headers: { authorization: `Bearer ${tokenA}` } }),
      401,
      'operator_token_required',
    );

    const after = await snapshot();
    assert.equal(after, before, 'mailboxes, outbox, queues, invitations and cards are unchanged');
    return `${checks.length} refusals: ${checks.join('; ')}`;
  });

  await step('an email lands once in the mailbox, unsigned; a stranger is refused; email out waits', async () => {
    const messageId = `${globalThis.crypto.randomUUID()}@example.com`;
    const msg = [
      'From: Carol <Carol@Example.com>',
      'To: bo@b.test',
      'Subject: =?utf-8?q?hola_se=C3=B1or?=',
      'Date: Mon, 30 Nov 2026 12:00:00 +0000',
      `Message-ID: <${messageId}>`,
      'Authentication-Results: mx.b.test; spf=pass smtp.mailfrom=example.com; dkim=pass; dmarc=pass',
      'MIME-Version: 1.0',
      'Content-Type: text/plain; charset=utf-8',
      '',
      'Is this a mailbox?',
      '',
    ].join('\r\n');
    const deliver = (to, body = msg) =>
      fetch(`${b.url}/cdn-cgi/handler/email?from=carol@example.com&to=${to}`, { method: 'POST', body });
    for (const round of [1, 2]) {
      const r = await deliver('bo@b.test');
      const text = await r.text();
      assert.ok(r.status < 300, `email round ${round} was not accepted: ${r.status} ${text}`);
    }
    const mails = (await mailbox(bo)).filter((m) => m.envelope.via === 'email');
    assert.equal(mails.length, 1, 'a redelivered email is stored once');
    const env = mails[0].envelope;
    assert.equal(env.from, 'email@b.test');
    assert.deepEqual(env.to, ['bo@b.test']);
    assert.equal(env.from_verified, false);
    assert.equal(env.signature, undefined, 'no signature: it is never disguised as signed mail');
    assert.deepEqual(env.content, { media: 'text/plain', body: 'Is this a mailbox?\n' });
    const ext = env.extensions['urn:nyx5:ext:email'];
    assert.equal(ext.from, 'carol@example.com');
    assert.equal(ext.subject, 'hola señor');
    assert.equal(ext.message_id, messageId);
    assert.equal(ext.verified, false);
    assert.deepEqual(ext.authentication, { authserv_id: 'mx.b.test', spf: 'pass', dkim: 'pass', dmarc: 'pass' });
    sent.email = env;

    const r = await deliver('nobody@b.test');
    const text = await r.text();
    assert.equal(r.status, 400, `the email to a stranger was not rejected: ${r.status} ${text}`);
    assert.match(text, /404 no agent nobody@b\.test/);

    // Without a provider an email from an agent is queued and stays pending, and the outbox says so.
    const queued = expectStatus(
      await as(bo, 'POST', '/email/out', { body: { to: 'carol@example.com', body: 'Yes.', in_reply_to: env.id } }),
      202,
      'POST /email/out',
    );
    assert.equal(queued.state, 'pending');
    assert.equal(queued.provider, false);
    await b.scheduled();
    const out = expectStatus(await as(bo, 'GET', '/outbox/bo'), 200, 'GET /outbox/bo');
    assert.equal(out.emails.length, 1);
    assert.equal(out.emails[0].state, 'pending');
    assert.match(out.emails[0].reason, /no email provider/);

    expectStatus(await as(bo, 'POST', '/mailbox/bo/ack', { body: { ids: [env.id] } }), 200, 'ack the email');
    assert.equal((await health(b)).house, 'b.test');
    assert.doesNotMatch(b.tail(400), /panicked|RuntimeError|unreachable/);
    return `${env.id} from ${ext.from}; stranger refused: ${text.trim()}`;
  });

  await step('ana emails a person: a.test posts the right request to its provider; the outbox says sent', async () => {
    const queued = expectStatus(
      await as(ana, 'POST', '/email/out', { body: { to: 'pat@example.com', subject: 'Hello', body: 'Hi Pat.' } }),
      202,
      'POST /email/out',
    );
    assert.equal(queued.provider, true);
    const deadline = Date.now() + 15_000;
    while (providerRequests.length === 0) {
      assert.ok(Date.now() < deadline, 'the provider never heard from a.test');
      await a.scheduled();
      await sleep(100);
    }
    const r = providerRequests[0];
    assert.equal(r.method, 'POST');
    assert.equal(r.url, '/emails');
    assert.equal(r.headers.authorization, 'Bearer re_e2e_key');
    assert.equal(r.headers['idempotency-key'], queued.id);
    const body = JSON.parse(r.body);
    assert.deepEqual(body, {
      from: '"ana@a.test" <mail@a.test>',
      reply_to: 'ana@a.test',
      subject: 'Hello',
      text: 'Hi Pat.',
      to: ['pat@example.com'],
    });
    const out = expectStatus(await as(ana, 'GET', '/outbox/ana'), 200, 'GET /outbox/ana');
    const email = out.emails.find((e) => e.id === queued.id);
    assert.equal(email.state, 'sent');
    assert.equal(email.provider_id, 're_1');
    assert.equal(providerRequests.length, 1, 'sent once');
    return `${queued.id} sent as ${email.provider_id}`;
  });

  await step('a mailbox holding 60 envelopes of 1 MiB reads page by page, each page under 2 MiB', async () => {
    const filler = await agent('filler', a);
    const big = await agent('big', a);
    for (const who of [filler, big]) {
      const body = { local: who.local, sig: who.keys.sig, enc: who.keys.enc };
      expectStatus(await call(a, 'POST', '/agents', { body, headers: admin(a) }), 201, `register ${who.local}`);
    }
    // Just under the house's 1 MiB envelope limit once the envelope's own members are added.
    const text = 'x'.repeat(1024 * 1024 - 1024);
    const ids = new Set();
    for (let i = 0; i < 60; i += 1) {
      const draft = draftEnvelope(filler.address, [big.address], { media: 'text/plain', body: text });
      const env = await signEnvelope(draft, filler.keys);
      expectStatus(await as(filler, 'POST', '/outbound', { body: env }), 202, `POST /outbound #${i}`);
      ids.add(env.id);
    }
    await a.scheduled();
    const seen = new Set();
    let pages = 0;
    let largest = 0;
    await until('all 60 in the mailbox', async () => {
      seen.clear();
      pages = 0;
      let after = 0;
      for (;;) {
        const res = await as(big, 'GET', `/mailbox/big?after=${after}&limit=200`);
        const page = expectStatus(res, 200, 'GET /mailbox/big');
        pages += 1;
        largest = Math.max(largest, Buffer.byteLength(res.text));
        assert.ok(Buffer.byteLength(res.text) <= 2 * 1024 * 1024, `page of ${Buffer.byteLength(res.text)} bytes`);
        assert.ok(page.envelopes.length >= 1 || page.next === null, 'every page but the last holds something');
        for (const item of page.envelopes) {
          assert.ok(!seen.has(item.envelope.id), `seen twice: ${item.envelope.id}`);
          seen.add(item.envelope.id);
        }
        if (page.next === null) break;
        after = page.next;
      }
      if (seen.size < ids.size) await a.scheduled();
      return seen.size === ids.size;
    }, { timeoutMs: 120_000, everyMs: 500 });
    for (const id of ids) assert.ok(seen.has(id), `missing ${id}`);
    sent.big = [...ids];
    assert.equal(await ack(big, [...ids]), 60);
    return `${pages} pages, the largest ${largest} bytes`;
  });

  await step('the Libro: a.test declares it, libro@a.test’s card says the fee; the operator tops up ana, once per id', async () => {
    assert.ok(JSON.stringify(cards['a.test']).includes('urn:nyx5:ext:libro'), 'a.test declares urn:nyx5:ext:libro');
    const card = expectStatus(await call(a, 'GET', '/agents/libro'), 200, 'GET /agents/libro');
    assert.equal(card.address, LIBRO);
    assert.equal(card.sig, keyA, 'libro@a.test signs with the domain key');
    assert.ok(await verifySignature(card, 'certification', keyA, 'agent-card'), 'libro@a.test’s card is certified');
    assert.equal(card.capabilities.libro.currency, 'tok');
    libro.fee = card.capabilities.libro.fee_bps;
    assert.equal(libro.fee, 1000, 'NYX5_FEE_BPS is 1000 unless set');

    const body = { address: ana.address, amount: 100, id: 'e2e-topup-1', note: 'e2e top-up' };
    expectError(await call(a, 'POST', '/libro/topup', { body }), 401, 'operator_token_required', 'a top-up without the house token');
    const topup = expectStatus(await call(a, 'POST', '/libro/topup', { body, headers: admin(a) }), 200, 'POST /libro/topup');
    const entry = topup.asiento;
    assert.ok(await verifySignature(entry, 'signature', keyA, 'asiento'), 'the entry is signed by a.test (nyx5/1 asiento)');
    assert.equal(entry.tipo, 'asiento');
    assert.equal(entry.house, 'a.test');
    assert.equal(entry.n, 1);
    assert.equal(entry.prev, GENESIS);
    assert.deepEqual(linesOf(entry), { [CASA]: -100, [ana.address]: 100 });
    assert.equal(entry.meta.primitive, 'issue');
    assert.equal(entry.refs.key, 'topup:e2e-topup-1');
    const again = expectStatus(await call(a, 'POST', '/libro/topup', { body, headers: admin(a) }), 200, 'the same top-up');
    assert.equal(canon(again.asiento), canon(entry), 'the same id answers the same entry');
    expectError(
      await call(a, 'POST', '/libro/topup', { body: { ...body, amount: 7 }, headers: admin(a) }),
      409,
      'top_up_id_taken',
      'another top-up under the same id',
    );
    assert.equal((await account(ana.address, ana)).balance, 100);
    return `fee ${libro.fee} bps; entry ${entry.id}`;
  });

  await step('bo@b.test signs an escrow quote for ana (nyx5/1 quote) and sends it to her sealed', async () => {
    const issued = new Date();
    const quote = await signDocument(
      {
        tipo: 'cotizacion',
        id: globalThis.crypto.randomUUID(),
        house: 'a.test',
        seller: bo.address,
        buyer: ana.address,
        contract: 'escrow',
        price: 40,
        currency: 'tok',
        concept: 'an audit of the e2e suite',
        terms: null,
        arbiter: null,
        issued: issued.toISOString(),
        expires: new Date(issued.getTime() + 3_600_000).toISOString(),
      },
      bo.keys,
      'signature',
      'quote',
    );
    libro.quote = quote;
    const anaCard = expectStatus(await call(a, 'GET', '/agents/ana'), 200, 'GET a/agents/ana');
    const draft = draftEnvelope(bo.address, [ana.address], { media: QUOTE_MEDIA, body: quote });
    const env = await signEnvelope(await sealEnvelope(draft, [{ address: ana.address, enc: anaCard.enc }]), bo.keys);
    libro.quoteMessage = env;
    expectStatus(await as(bo, 'POST', '/outbound', { body: env }), 202, 'POST b/outbound (the quote)');
    const item = await arrival(ana, (e) => e.id === env.id, 'the quote in ana’s mailbox');
    const opened = await openEnvelope(item.envelope, ana.address, ana.keys.encKey);
    assert.equal(opened.media, QUOTE_MEDIA);
    assert.equal(canon(opened.body), canon(quote));
    const boCard = expectStatus(await call(b, 'GET', '/agents/bo'), 200, 'GET b/agents/bo');
    assert.ok(await verifySignature(opened.body, 'signature', boCard.sig, 'quote'), 'the quote verifies with bo’s key');
    assert.ok(!(await verifySignature(opened.body, 'signature', boCard.sig, 'envelope')), 'and only as a quote');
    assert.equal(await ack(ana, [env.id]), 1);
    return `quote ${quote.id}: ${quote.price} tok, ${quote.contract}`;
  });

  await step('ana accepts it at libro@a.test: 40 tok held in escrow; signed receipts reach ana and bo', async () => {
    const op = await operate(ana, { op: 'accept', quote: libro.quote });
    libro.ops.accept = op;
    const mine = await receiptOf(ana, op);
    const quoteSha = await sha256hex(canon(libro.quote));
    assert.equal(mine.cotizacion_sha256, quoteSha);
    assert.equal(mine.contract.id, libro.quote.id);
    assert.equal(mine.contract.kind, 'escrow');
    assert.equal(mine.contract.state, 'held');
    assert.deepEqual(mine.contract.acp, { phase: 'Funded' });
    assert.equal(mine.contract.quote_sha256, quoteSha);
    assert.equal(mine.contract.accept_sha256, await sha256hex(canon(op)));
    const entry = mine.asiento;
    assert.equal(entry.n, 2);
    assert.deepEqual(linesOf(entry), { [ana.address]: -40, [`escrow:${libro.quote.id}`]: 40 });
    assert.equal(entry.meta.primitive, 'hold');
    assert.deepEqual(
      [entry.refs.op, entry.refs.op_sha256, entry.refs.quote, entry.refs.quote_sha256, entry.refs.contract],
      [op.id, mine.op_sha256, libro.quote.id, quoteSha, libro.quote.id],
    );
    const his = await receiptOf(bo, op);
    assert.equal(canon(his), canon(mine), 'both parties get the same receipt');
    assert.equal((await account(ana.address, ana)).balance, 60);
    return cronNote();
  });

  await step('bo delivers from b.test: his operation crosses to a.test through /inbound; receipts for both', async () => {
    const evidence = await sha256hex('the audit report');
    const op = await operate(bo, { op: 'deliver', contract: libro.quote.id, evidence_sha256: evidence, note: 'done' });
    libro.ops.deliver = op;
    const his = await receiptOf(bo, op);
    assert.equal(his.contract.state, 'delivered');
    assert.deepEqual(his.contract.acp, { phase: 'Submitted' });
    assert.equal(his.contract.evidence_sha256, evidence);
    assert.equal(his.asiento, undefined, 'a delivery moves no money');
    const job = await outboxJob(bo, op.id);
    assert.equal(job.state, 'delivered', 'b.test delivered the operation to a.test');
    const mine = await receiptOf(ana, op);
    assert.equal(mine.contract.state, 'delivered');
    return cronNote();
  });

  await step('bo may not release his own escrow: a.test refuses (403), b.test bounces it to bo', async () => {
    const op = await operate(bo, { op: 'release', contract: libro.quote.id });
    libro.ops.boRelease = op;
    const { item } = await arrivalOrTick(bo, (e) => e.in_reply_to === op.id, 'the bounce of bo’s release', [b]);
    const notice = item.envelope;
    assert.equal(notice.from, 'postmaster@b.test');
    assert.equal(notice.type, 'receipt');
    assert.ok(await verifySignature(notice, 'signature', keyB, 'envelope'), 'the bounce is signed by b.test');
    assert.equal(notice.content.media, NOTICE_MEDIA);
    const body = notice.content.body;
    assert.equal(body.of, op.id);
    assert.equal(body.status, 'bounced');
    assert.equal(body.code, 403);
    assert.equal((await outboxJob(bo, op.id)).state, 'bounced');
    libro.boBounce = notice.id;
    assert.equal(await ack(bo, [notice.id]), 1);
    return `reason: ${body.reason}`;
  });

  await step('ana releases: bo gets 36 tok, casa@a.test the 10 % fee; receipts for both', async () => {
    const op = await operate(ana, { op: 'release', contract: libro.quote.id });
    libro.ops.release = op;
    const mine = await receiptOf(ana, op);
    const fee = Math.ceil((40 * libro.fee) / 10_000);
    assert.equal(fee, 4);
    assert.equal(mine.contract.fee_bps, libro.fee, 'the contract settles under the fee it was accepted under');
    assert.equal(mine.contract.state, 'released');
    assert.deepEqual(mine.contract.acp, { phase: 'Terminal', outcome: 'completed' });
    assert.deepEqual(
      mine.contract.history.map((h) => [h.op, h.by, h.envelope]),
      [
        ['accept', ana.address, libro.ops.accept.id],
        ['deliver', bo.address, libro.ops.deliver.id],
        ['release', ana.address, op.id],
      ],
    );
    const entry = mine.asiento;
    assert.equal(entry.n, 3);
    assert.deepEqual(linesOf(entry), { [`escrow:${libro.quote.id}`]: -40, [bo.address]: 40 - fee, [CASA]: fee });
    assert.equal(entry.meta.primitive, 'release');
    assert.equal(entry.meta.fee, fee);
    const his = await receiptOf(bo, op);
    assert.equal(canon(his), canon(mine));
    return `fee ${fee} tok; ${cronNote()}`;
  });

  await step('balances by GET /libro/cuenta: ana with her token, bo (a foreigner) with his token for a.test', async () => {
    const mine = await account(ana.address, ana);
    assert.equal(mine.house, 'a.test');
    assert.equal(mine.account, ana.address);
    assert.equal(mine.balance, 60);
    assert.deepEqual(mine.entries.map((e) => e.n), [2, 1], 'her entries, newest first');
    assert.deepEqual(
      mine.contracts.map((c) => [c.id, c.state, c.buyer, c.seller]),
      [[libro.quote.id, 'released', ana.address, bo.address]],
    );
    assert.deepEqual(mine.mandates, []);
    const his = await account(bo.address, bo);
    assert.equal(his.account, bo.address);
    assert.equal(his.balance, 36);
    assert.deepEqual(his.entries.map((e) => e.n), [3]);
    assert.deepEqual(his.contracts.map((c) => c.id), [libro.quote.id]);
    assert.equal((await account(CASA, null)).balance, -96, 'the house issued 100 and kept a fee of 4');
    // Nobody reads another's account; a token for b.test is no token for a.test.
    const path = `/libro/cuenta/${bo.address}`;
    const anas = await authHeader(ana.keys, { address: ana.address, method: 'GET', path, host: a.host });
    expectError(await call(a, 'GET', path, { headers: { authorization: anas.header } }), 403, 'not_the_owner', 'ana reading bo’s account');
    const elsewhere = await authHeader(bo.keys, { address: bo.address, method: 'GET', path, host: b.host });
    expectError(
      await call(a, 'GET', path, { headers: { authorization: elsewhere.header } }),
      401,
      'token_for_another_request',
      'bo’s token for b.test at a.test',
    );
    // The contract, for a party.
    const cpath = `/libro/contrato/${libro.quote.id}`;
    const boc = await authHeader(bo.keys, { address: bo.address, method: 'GET', path: cpath, host: a.host });
    const c = expectStatus(await call(a, 'GET', cpath, { headers: { authorization: boc.header } }), 200, 'GET contrato as bo');
    assert.equal(c.contract.state, 'released');
    return 'ana 60, bo@b.test 36, casa@a.test -96';
  });

  await step('GET /libro/diario: every entry signed by a.test (nyx5/1 asiento) and chained by SHA-256', async () => {
    const entries = await journal();
    assert.equal(canon(await journal(2)), canon(entries), 'pages of 2 read the same journal');
    assert.equal(entries.length, 3);
    const balances = {};
    let prev = GENESIS;
    for (const [i, e] of entries.entries()) {
      assert.equal(e.n, i + 1, 'numbered from 1 without gaps');
      assert.equal(e.prev, prev, `entry ${e.n}: prev is the previous entry's SHA-256`);
      assert.equal(e.house, 'a.test');
      assert.equal(e.signature.kid, keyA);
      assert.ok(await verifySignature(e, 'signature', keyA, 'asiento'), `entry ${e.n}: signature`);
      assert.equal(sumOf(e), 0, `entry ${e.n}: lines sum to zero`);
      assert.equal(new Set(e.lines.map((l) => l.account)).size, e.lines.length, `entry ${e.n}: each account once`);
      assert.ok(e.lines.every((l) => Number.isSafeInteger(l.delta) && l.delta !== 0), `entry ${e.n}: no zero delta`);
      for (const l of e.lines) balances[l.account] = (balances[l.account] ?? 0) + l.delta;
      prev = await sha256hex(canon(e));
    }
    assert.deepEqual(balances, {
      [CASA]: -96,
      [ana.address]: 60,
      [bo.address]: 36,
      [`escrow:${libro.quote.id}`]: 0,
    });
    const noHouse = await call(a, 'GET', '/libro/diario');
    expectError(noHouse, 401, 'operator_token_required', 'the journal without the house token');
    libro.head = prev;
    return `${entries.length} entries; head ${prev.slice(0, 16)}…`;
  });

  await step('GET /agents/ana/historial counts the contract she bought, signed by a.test (nyx5/1 historial)', async () => {
    const h = expectStatus(await call(a, 'GET', '/agents/ana/historial'), 200, 'GET /agents/ana/historial');
    assert.equal(h.address, ana.address);
    assert.equal(h.house, 'a.test');
    assert.ok(await verifySignature(h, 'signature', keyA, 'historial'), 'historial signature');
    assert.deepEqual(h.comprando, { contratos: 1, tokens: 40 });
    assert.deepEqual(h.vendiendo, { contratos: 0, liberados: 0, devueltos: 0, tokens: 0 });
    assert.equal(h.resumen.cumplimiento, null);
    // bo's history is b.test's, which counts only its own contracts: none.
    const hb = expectStatus(await call(b, 'GET', '/agents/bo/historial'), 200, 'GET b/agents/bo/historial');
    assert.ok(await verifySignature(hb, 'signature', keyB, 'historial'));
    assert.deepEqual(hb.vendiendo, { contratos: 0, liberados: 0, devueltos: 0, tokens: 0 });
    expectError(await call(a, 'GET', '/agents/bo/historial'), 404, 'unknown_agent', 'a.test keeps no history of bo');
  });

  await step('a replayed operation changes nothing; a second accept of the quote is bounced 409', async () => {
    const before = await libroSnapshot();
    const op = libro.ops.deliver;
    // bo's house again: the same envelope is "exists".
    const resent = expectStatus(await as(bo, 'POST', '/outbound', { body: op }), 200, 'the deliver again at b.test');
    assert.equal(resent.exists, true);
    // Straight to a.test's /inbound, relayed by b.test as after a lost answer: done before.
    const relayed = utf8.encode(`relay:${op.id}:a.test:${await sha256hex(canon(op))}`);
    const relay = `nyx51 domain=b.test; kid=${keyB}; sig=${await signAs('relay', domainKeysB, relayed)}`;
    for (let i = 0; i < 2; i += 1) {
      const r = expectStatus(
        await call(a, 'POST', '/inbound', { body: op, headers: { 'x-nyx5-relay': relay } }),
        200,
        'the deliver replayed to a.test',
      );
      assert.equal(r.duplicate, true);
      assert.deepEqual(r.accepted, [LIBRO]);
    }
    await Promise.all([a.scheduled(), b.scheduled()]);
    await sleep(300);
    assert.equal(await libroSnapshot(), before, 'balances, journal and mailboxes are unchanged');

    const again = await operate(ana, { op: 'accept', quote: libro.quote });
    libro.ops.again = again;
    const { item } = await arrivalOrTick(ana, (e) => e.in_reply_to === again.id, 'the bounce of the second accept', [a]);
    const body = await checkNotice(item.envelope, again, keyA, 'bounced');
    assert.equal(body.code, 409);
    assert.equal(await ack(ana, [item.envelope.id]), 1);
    assert.equal(await libroSnapshot(), before, 'the refused accept moved nothing');
    return `409: ${body.reason}`;
  });

  await step('a last tick on both houses; then both stop', async () => {
    const claims = { address: ana.address, method: 'GET', path: '/outbox/ana', host: a.host };
    const fresh = await authHeader(ana.keys, claims);
    expectStatus(await call(a, 'GET', '/outbox/ana', { headers: { authorization: fresh.header } }), 200, 'outbox');
    freshNonce = fresh.nonce;
    // The purges run at the first tick of each minute of the house's clock
    // (docs/decisions/0052-tables-that-stop-growing.md): the last tick comes once the old
    // nonce's window has passed, in a minute later than every tick before it, so it is one that
    // purges.
    const nextMinute = Math.ceil((Date.now() + 1) / 60_000) * 60_000 + 100;
    await sleep(Math.max(oldKeepUntil + 50, nextMinute) - Date.now());
    tickAt = Date.now();
    await Promise.all([a.scheduled(), b.scheduled()]);
    await Promise.all([a.stop(), b.stop()]);
  });

  await step('the D1 state of both houses satisfies the schema’s invariants', async () => {
    const checks = [];
    for (const h of [a, b]) {
      const d = h.domain;
      const invariants = {
        'one mailbox row per (agent, envelope id)': `
          SELECT local, envelope_id, count(*) AS n FROM mailbox GROUP BY local, envelope_id HAVING n > 1`,
        'mailbox rows belong to agents and match their envelope (id, from, to)': `
          SELECT seq FROM mailbox WHERE local NOT IN (SELECT local FROM agents)
            OR json_extract(envelope, '$.id') != envelope_id OR json_extract(envelope, '$.from') != sender
            OR NOT EXISTS (SELECT 1 FROM json_each(mailbox.envelope, '$.to') WHERE value = mailbox.local || '@${d}')`,
        'each mailbox row lies in its agent’s range of seq, acknowledged out of order below zero': `
          SELECT m.seq FROM mailbox AS m JOIN agents AS a ON a.local = m.local
           WHERE abs(m.seq) >> 30 != a.mbox OR abs(m.seq) & 1073741823 = 0 OR (m.acked_at IS NULL) != (m.seq > 0)`,
        'no watermark passes its mailbox’s newest envelope, and every row carries its mailbox’s tally': `
          SELECT u.local FROM mailbox_usage AS u
           WHERE u.acked_through > coalesce((SELECT max(abs(m.seq) & 1073741823) FROM mailbox AS m WHERE m.local = u.local), 0)
          UNION ALL SELECT local FROM mailbox WHERE total_n IS NULL`,
        'a job is pending exactly when it has not finished': `
          SELECT envelope_id FROM jobs WHERE (state = 'pending') != (finished_at IS NULL)`,
        'finished jobs gave their lease back': `
          SELECT envelope_id FROM jobs WHERE state != 'pending' AND lease_until != 0`,
        'job results agree with their state': `
          SELECT envelope_id FROM jobs
          WHERE (state = 'delivered' AND json_array_length(result, '$.delivered') = 0)
             OR (state = 'bounced' AND (json_array_length(result, '$.delivered') > 0
                                        OR json_array_length(result, '$.bounced') = 0))`,
        'job recipients are at the job’s domain': `
          SELECT j.envelope_id FROM jobs j, json_each(j.recipients) r
          WHERE substr(r.value, instr(r.value, '@') + 1) != j.domain`,
        'every job has its outbox row and every outbox row a job': `
          SELECT envelope_id FROM jobs WHERE envelope_id NOT IN (SELECT envelope_id FROM outbox)
          UNION ALL
          SELECT envelope_id FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.envelope_id = o.envelope_id)`,
        'outbox rows match their envelope (id, from)': `
          SELECT envelope_id FROM outbox
          WHERE json_extract(envelope, '$.id') != envelope_id OR json_extract(envelope, '$.from') != sender`,
        'nothing is left pending, and no domain is marked failing': `
          SELECT envelope_id AS x FROM jobs WHERE state = 'pending' UNION ALL SELECT domain FROM domain_health`,
        'invitations: 0 ≤ used ≤ uses, and no more invited registrations than uses': `
          SELECT code FROM invitations i WHERE used < 0 OR used > uses
            OR (SELECT count(*) FROM registrations r WHERE r.via = 'invite:' || i.code) > used`,
        'every agent has the registration it says it came by': `
          SELECT local FROM agents g
          WHERE NOT EXISTS (SELECT 1 FROM registrations r WHERE r.local = g.local AND r.via = g.registered_via)`,
        'no nonce outlives its window after a tick, and each is an agent’s here or a Libro account holder’s': `
          SELECT nonce FROM nonces
          WHERE keep_until < ${tickAt}
             OR (address NOT IN (SELECT local || '@${d}' FROM agents)
                 AND address NOT IN (SELECT account FROM libro_accounts))`,
        'rate windows never pass their cap': `
          SELECT bucket FROM rate_windows WHERE count > cap`,
        'foreign keys hold': 'PRAGMA foreign_key_check',
        'the Libro’s balances sum to zero': `
          SELECT sum(balance) AS total FROM libro_accounts HAVING total != 0`,
        'no balance is negative but casa@’s, and only casa@ may owe': `
          SELECT account FROM libro_accounts
          WHERE (balance < 0 AND account != 'casa@${d}') OR may_owe != (account = 'casa@${d}')`,
        'every entry’s lines sum to zero, as stored and as signed': `
          SELECT n FROM libro_entries e
          WHERE (SELECT coalesce(sum(json_extract(value, '$.delta')), 1) FROM json_each(e.lines)) != 0
             OR (SELECT coalesce(sum(json_extract(value, '$.delta')), 1) FROM json_each(e.entry, '$.lines')) != 0
             OR json_extract(e.entry, '$.n') != e.n OR json_extract(e.entry, '$.prev') != e.prev`,
        'the journal counts 1..N, each entry linked to the one before': `
          SELECT n FROM libro_entries e
          WHERE (n = 1 AND prev != '${'0'.repeat(64)}')
             OR (n > 1 AND prev IS NOT (SELECT sha256 FROM libro_entries p WHERE p.n = e.n - 1))
          UNION ALL
          SELECT count(*) AS entries FROM libro_entries HAVING entries != coalesce(max(n), 0)`,
        'balances are what the journal adds up to': `
          SELECT account FROM libro_accounts a
          WHERE balance != (SELECT coalesce(sum(json_extract(l.value, '$.delta')), 0)
                              FROM libro_entries e, json_each(e.entry, '$.lines') l
                             WHERE json_extract(l.value, '$.account') = a.account)`,
        'terminal contracts hold nothing in escrow': `
          SELECT id FROM libro_contracts c
          WHERE state IN ('released', 'refunded', 'settled', 'forfeited')
            AND coalesce((SELECT balance FROM libro_accounts WHERE account = 'escrow:' || c.id), 0) != 0`,
      };
      const names = Object.keys(invariants);
      const results = await h.d1(Object.values(invariants).join(';\n'));
      names.forEach((name, i) => assert.deepEqual(results[i], [], `${d}: ${name}: ${JSON.stringify(results[i])}`));
      checks.push(...names.map((n) => `${d}: ${n}`));

      // What this run leaves behind, exactly.
      const [integrity, agents, mail, jobs, outbox, pins, nonces, accounts, entries, ops, contracts] = await h.d1(
        [
          'PRAGMA quick_check',
          'SELECT local, registered_via FROM agents ORDER BY local',
          // Acknowledged: moved below zero, or under its mailbox's watermark (migration 0020).
          'SELECT local, envelope_id, sender, (seq < 0 OR seq & 1073741823 <= coalesce((SELECT u.acked_through FROM mailbox_usage AS u WHERE u.local = mailbox.local), 0)) AS acked FROM mailbox ORDER BY abs(seq)',
          'SELECT envelope_id, state, attempts FROM jobs ORDER BY made',
          'SELECT envelope_id, envelope, sha256 FROM outbox ORDER BY seq',
          'SELECT domain, sig, pending FROM pins',
          'SELECT nonce FROM nonces',
          'SELECT account, balance, may_owe FROM libro_accounts ORDER BY account',
          'SELECT n, cause, sha256, entry FROM libro_entries ORDER BY n',
          'SELECT envelope_id, operator, op, refused FROM libro_ops ORDER BY envelope_id',
          'SELECT id, kind, state, seller, buyer, amount, version FROM libro_contracts ORDER BY id',
        ].join(';\n'),
      );
      for (const e of entries) {
        assert.equal(await sha256hex(e.entry), e.sha256, `${d}: sha256 of entry ${e.n}`);
      }
      assert.deepEqual(integrity, [{ quick_check: 'ok' }], `${d}: quick_check`);
      for (const o of outbox) {
        assert.equal(await sha256hex(o.envelope), o.sha256, `${d}: outbox sha256 of ${o.envelope_id}`);
      }
      const peer = h === a ? ['b.test', keyB] : ['a.test', keyA];
      const expectedPins = [{ domain: peer[0], sig: peer[1], pending: null }];
      // a.test also pinned junk.test's key on first use; hang.test never showed a card.
      if (h === a) expectedPins.push({ domain: 'junk.test', sig: sent.junkSig, pending: null });
      const byDomain = (x, y) => x.domain.localeCompare(y.domain);
      assert.deepEqual(pins.sort(byDomain), expectedPins.sort(byDomain), `${d}: TOFU pins`);
      if (h === a) {
        assert.deepEqual(agents, [
          { local: 'ana', registered_via: 'admin' },
          { local: 'big', registered_via: 'admin' },
          { local: 'filler', registered_via: 'admin' },
        ]);
        assert.deepEqual(
          jobs.map((j) => [j.envelope_id, j.state]),
          [
            [sent.first.env.id, 'delivered'],
            [sent.bounce.env.id, 'bounced'],
            [sent.deferred.env.id, 'delivered'],
            [sent.outage.env.id, 'delivered'],
            [sent.hung.id, 'bounced'],
            [sent.paged.id, 'bounced'],
            [sent.fine.id, 'delivered'],
            ...sent.big.map((id) => [id, 'delivered']),
            [libro.ops.accept.id, 'delivered'],
            ...libroReceiptsTo('bo').slice(0, 2).map((id) => [id, 'delivered']),
            [libro.ops.release.id, 'delivered'],
            ...libroReceiptsTo('bo').slice(2).map((id) => [id, 'delivered']),
            [libro.ops.again.id, 'bounced'],
          ],
        );
        assert.equal(outbox.length, 67 + 6, 'only the accepted envelopes were queued, and the Libro’s receipts to bo');
        assert.deepEqual(
          mail.filter((m) => m.local === 'ana').map((m) => [m.sender, m.acked]),
          [
            ...Array(5).fill(['postmaster@a.test', 1]),
            ['bo@b.test', 1],
            ...Array(3).fill([LIBRO, 1]),
            ['postmaster@a.test', 1],
          ],
          'five notices (two receipts, three bounces), the quote, three receipts from the Libro, its bounce; all acked',
        );
        assert.deepEqual(
          accounts,
          [
            { account: ana.address, balance: 60, may_owe: 0 },
            { account: bo.address, balance: 36, may_owe: 0 },
            { account: CASA, balance: -96, may_owe: 1 },
            { account: `escrow:${libro.quote.id}`, balance: 0, may_owe: 0 },
          ],
          'the Libro’s accounts',
        );
        assert.deepEqual(
          entries.map((e) => [e.n, e.cause]),
          [
            [1, 'topup:e2e-topup-1'],
            [2, libro.ops.accept.id],
            [3, libro.ops.release.id],
          ],
        );
        assert.equal(entries.at(-1).sha256, libro.head, 'the head the journal’s reader computed');
        assert.deepEqual(
          ops.filter((o) => o.refused === null).map((o) => [o.envelope_id, o.operator, o.op]),
          [
            [libro.ops.accept.id, ana.address, 'accept'],
            [libro.ops.deliver.id, bo.address, 'deliver'],
            [libro.ops.release.id, ana.address, 'release'],
          ].sort((x, y) => x[0].localeCompare(y[0])),
          'the operations done',
        );
        // The two refused are kept with their codes: the same envelope again is refused again.
        assert.deepEqual(
          ops.filter((o) => o.refused !== null).map((o) => [o.envelope_id, o.op, o.refused]),
          [
            [libro.ops.boRelease.id, 'release', 403],
            [libro.ops.again.id, 'accept', 409],
          ].sort((x, y) => x[0].localeCompare(y[0])),
          'the refusals kept',
        );
        assert.deepEqual(contracts, [
          {
            id: libro.quote.id,
            kind: 'escrow',
            state: 'released',
            seller: bo.address,
            buyer: ana.address,
            amount: 40,
            version: 3,
          },
        ]);
        assert.deepEqual(
          mail.filter((m) => m.local === 'big').map((m) => [m.envelope_id, m.sender, m.acked]).sort(),
          sent.big.map((id) => [id, 'filler@a.test', 1]).sort(),
          'the 60 large envelopes, once each, all acked',
        );
        const kept = nonces.map((n) => n.nonce);
        assert.ok(!kept.includes(oldNonce), 'the nonce of the old token was purged by the tick');
        assert.ok(kept.includes(freshNonce), 'the nonce of a recent token is kept');
      } else {
        assert.deepEqual(agents.map((g) => g.local), ['bo']);
        assert.deepEqual(
          mail.map((m) => [m.local, m.envelope_id, m.sender, m.acked]),
          [
            ['bo', sent.first.env.id, 'ana@a.test', 1],
            ['bo', sent.deferred.env.id, 'ana@a.test', 1],
            ['bo', sent.outage.env.id, 'ana@a.test', 1],
            ['bo', sent.fine.id, 'ana@a.test', 1],
            ['bo', sent.email.id, 'email@b.test', 1],
            ['bo', libroReceiptsTo('bo')[0], LIBRO, 1],
            ['bo', libroReceiptsTo('bo')[1], LIBRO, 1],
            ['bo', libro.boBounce, 'postmaster@b.test', 1],
            ['bo', libroReceiptsTo('bo')[2], LIBRO, 1],
          ],
          'the four delivered envelopes, the email, three receipts from a.test’s Libro and a bounce, once each, all acked',
        );
        assert.deepEqual(
          outbox.map((o) => o.envelope_id),
          [libro.quoteMessage.id, libro.ops.deliver.id, libro.ops.boRelease.id],
          'b.test sent bo’s quote and his two operations',
        );
        assert.deepEqual(
          jobs.map((j) => [j.envelope_id, j.state]),
          [
            [libro.quoteMessage.id, 'delivered'],
            [libro.ops.deliver.id, 'delivered'],
            [libro.ops.boRelease.id, 'bounced'],
          ],
        );
        assert.deepEqual([accounts, entries, ops, contracts], [[], [], [], []], 'b.test’s Libro is untouched');
      }
    }
    return `${checks.length} invariants, plus the exact rows this run leaves`;
  });
} catch (e) {
  failed = true;
  console.log('FAIL');
  console.error(`\n${e.stack ?? e}`);
  for (const h of [a, b]) console.error(`\n--- last lines of ${h.log}\n${h.tail(40)}`);
} finally {
  await Promise.allSettled([a.stop(), b.stop()]);
  provider.close();
  hang.closeAllConnections();
  hang.close();
  junk.close();
}

const total = secs(performance.now() - T0);
if (failed) {
  console.error(`\nnyx5 e2e: FAILED after ${total}; logs and state kept in ${state}`);
  process.exit(1);
}
rmSync(state, { recursive: true, force: true });
console.log(`\nnyx5 e2e: all ${steps.count} steps passed in ${total} (wall time)`);
