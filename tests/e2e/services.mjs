// End-to-end: the services a house runs (issue 13), three houses under `wrangler dev` (workerd,
// local D1), each on its own loopback port with its own state, finding each other through
// NYX5_HOSTS:
//
//   idx.test runs the federated index (NYX5_INDEX=on, docs/SPEC.md §13). a.test and b.test are
//   registered with it, its cron crawls both, and an agent finds a seller of b.test through the
//   `nyx5 search` command, which checks the index's signature and every card with its own house;
//   an unlisted agent is never found, and a domain that is not a house is refused.
//
//   b.test also runs `verifica@` and `tareas@` (NYX5_VERIFICA, NYX5_TAREAS; docs/SPEC.md §22,
//   §23). Its operator publishes two tasks whose tests point at an https server on loopback
//   (tests/e2e/tls: a test CA the houses trust through NODE_EXTRA_CA_CERTS, named in the hosts
//   file so the outbound policy lets verifica@ reach it), each URL naming the claim
//   (`{contract}`). Two agents take them with `nyx5 tareas take`, deliver with `nyx5 deliver`,
//   and b.test's cron has verifica@ fetch the URLs: one escrow releases, one refunds, each with
//   its verdict in the contract and the receipts in the agent's mailbox. Then the same against
//   a `nyx5 serve` house (s.test, `--tls-roots` the test CA), which runs verifica@ on its own
//   timer.
//
//   node tests/e2e/services.mjs        (scripts/test runs it after two_houses.mjs)
//
// Ports: free ones, found at start (NYX5_SERVICES_PORT=N fixes them at N + 0…4, 442…444). Prints each
// step with its timing; exits 1 on the first failure (logs and state kept), 0 when all passed.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { b64u, newAgentKeys, random, verifyDomainCard, verifySignature } from '../lib/nyx5.mjs';
import { call, makeSteps, secs } from '../lib/e2e.mjs';
import { ENV, House, ROOT, buildWorkerAndCli, portsFor } from '../lib/wrangler.mjs';

const T0 = performance.now();
const PORT = await portsFor('NYX5_SERVICES_PORT', [0, 1, 2, 3, 4, 442, 443, 444]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-services-'));
const urlOf = (port) => `http://127.0.0.1:${port}`;
const ports = { 'idx.test': PORT(0), 'a.test': PORT(1), 'b.test': PORT(2) };
const inspectors = { 'idx.test': PORT(442), 'a.test': PORT(443), 'b.test': PORT(444) };
const hosts = Object.fromEntries(Object.entries(ports).map(([d, p]) => [d, { url: urlOf(p) }]));
// The evidence server: https on loopback with the test certificate, named by the operator.
const EVIDENCE_PORT = PORT(3);
const EVIDENCE = `https://127.0.0.1:${EVIDENCE_PORT}`;
const TLS = join(ROOT, 'tests/e2e/tls');
const DEPLOYED = 'the deployed site, version 2\n';
const sha256hex = (text) => createHash('sha256').update(text).digest('hex');
const tokens = Object.fromEntries(Object.keys(ports).map((d) => [d, b64u(random(24))]));

function house(domain, vars = {}) {
  const others = Object.fromEntries(Object.entries(hosts).filter(([d]) => d !== domain));
  others['evidence.test'] = { url: EVIDENCE };
  return new House({
    domain,
    port: ports[domain],
    inspectorPort: inspectors[domain],
    stateDir: state,
    vars: { NYX5_REGISTRATION: 'invite', NYX5_ADMIN_TOKEN: tokens[domain], NYX5_HOSTS: JSON.stringify(others), ...vars },
    env: { NODE_EXTRA_CA_CERTS: join(TLS, 'ca.pem') },
  });
}
const idx = house('idx.test', { NYX5_INDEX: 'on', NYX5_INDEX_FETCHES: '2' });
const a = house('a.test');
const b = house('b.test', { NYX5_VERIFICA: 'on', NYX5_TAREAS: 'on' });
const evidenceHits = [];
const evidence = https.createServer(
  { key: readFileSync(join(TLS, 'server.key')), cert: readFileSync(join(TLS, 'server.pem')) },
  (req, res) => {
    evidenceHits.push(req.url);
    if (req.url.startsWith('/site/')) {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(DEPLOYED);
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not deployed');
    }
  },
);
const houses = [idx, a, b];

const steps = makeSteps(T0);
const step = (title, fn) => steps.step(title, fn);


function expectStatus(res, status, what) {
  assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status} ${res.text.slice(0, 300)}`);
  return res.json;
}

const admin = (h) => ({ authorization: `Bearer ${tokens[h.domain]}` });

/** Registers `local` at `h` by its operator, listed or not, with a description and skills. */
async function register(h, local, { listed, description, skills = [] }) {
  const keys = await newAgentKeys();
  const capabilities = { listed, description, accepts: ['text/plain'] };
  for (const s of skills) capabilities[s] = true;
  const body = { local, sig: keys.sig, enc: keys.enc, capabilities };
  expectStatus(await call(h, 'POST', '/agents', { body, headers: admin(h) }), 201, `register ${local}@${h.domain}`);
  return { address: `${local}@${h.domain}`, keys };
}

/** `nyx5 ARGS` with the three houses in its hosts file and no DNS; answers the parsed `--json`. */
function nyx5(args, env = {}) {
  const bin = join(ROOT, 'target/debug/nyx5');
  const r = spawnSync(bin, [...args, '--json'], {
    encoding: 'utf8',
    env: { ...ENV, NYX5_AGENT: join(state, 'profile.json'), NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off', ...env },
  });
  assert.equal(r.status, 0, `nyx5 ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** Runs b.test's cron until contract `id` (read by `who`) is `state`; answers it and the crons. */
async function cronUntil(who, id, state) {
  for (let crons = 1; ; crons++) {
    await b.scheduled();
    const c = nyx5(['contract', id, '--as', who]);
    if (c.state === state) return { contract: c, crons };
    assert.ok(crons < 10, `${id} is still ${c.state} after ${crons} crons`);
  }
}

let failed = false;
const cards = {};
let serveChild = null;
try {
  console.log(`nyx5 services e2e: three houses under wrangler dev; state in ${state}`);

  await step('toolchain: wrangler, the built Worker and the nyx5 command', async () => {
    buildWorkerAndCli();
    writeFileSync(join(state, 'hosts.json'), JSON.stringify(hosts));
    await new Promise((resolve, reject) => evidence.listen(EVIDENCE_PORT, '127.0.0.1', resolve).on('error', reject));
  });

  await step('apply the D1 migrations to three local databases and start the houses', async () => {
    await Promise.all(houses.map((h) => h.migrate()));
    const times = await Promise.all(
      houses.map(async (h) => {
        const t = performance.now();
        await h.start();
        return `${h.domain} ${secs(performance.now() - t)}`;
      }),
    );
    for (const h of houses) {
      const card = expectStatus(await call(h, 'GET', '/.well-known/nyx5.json'), 200, `${h.domain} card`);
      cards[h.domain] = { card, key: await verifyDomainCard(card, h.domain) };
    }
    return `ready: ${times.join(', ')}`;
  });

  await step('agents: a trip planner at a.test, a translator and an unlisted one at b.test', async () => {
    await register(a, 'ana', { listed: true, description: 'Plans trips', skills: ['plan'] });
    await register(b, 'bo', { listed: true, description: 'Translates Quechua', skills: ['translate'] });
    await register(b, 'quiet', { listed: false, description: 'Translates Quechua too', skills: ['translate'] });
  });

  await step('only idx.test runs an index; it takes a.test and b.test, and refuses what is not a house', async () => {
    expectStatus(await call(a, 'GET', '/index/agents'), 404, 'a.test runs no index');
    for (const d of ['a.test', 'b.test']) {
      const row = expectStatus(await call(idx, 'POST', '/index/houses', { body: { domain: d } }), 201, `add ${d}`);
      assert.equal(row.domain, d);
      assert.equal(row.key, cards[d].key, `the index verified ${d}'s domain card`);
    }
    expectStatus(await call(idx, 'POST', '/index/houses', { body: { domain: 'a.test' } }), 200, 'again');
    const refused = await call(idx, 'POST', '/index/houses', { body: { domain: 'nowhere.test' } });
    assert.ok(refused.status >= 400 && refused.json?.ok === false, `nowhere.test: ${refused.status} ${refused.text}`);
    const empty = expectStatus(await call(idx, 'GET', '/index/agents'), 200, 'search before a crawl');
    assert.deepEqual(empty.agents, []);
  });

  let crons = 0;
  await step('the cron on idx.test crawls both houses, resuming tick after tick', async () => {
    for (;;) {
      await idx.scheduled();
      crons += 1;
      const list = expectStatus(await call(idx, 'GET', '/index/houses'), 200, 'index houses');
      const done = list.houses.filter((h) => h.passes === 1 && h.phase === 'start' && h.failures === 0);
      if (done.length === 2) {
        assert.deepEqual(
          list.houses.map((h) => [h.domain, h.cards]),
          [
            ['a.test', 1],
            ['b.test', 1],
          ],
        );
        break;
      }
      assert.ok(crons < 10, `not crawled after ${crons} crons: ${JSON.stringify(list.houses)}`);
    }
    assert.ok(crons >= 3, `two fetches a tick cannot crawl two houses in ${crons} crons`);
    return `${crons} crons of two fetches each for two passes (domain card, directory, history)`;
  });

  await step('GET /index/agents answers signed by idx.test (nyx5/1 index-answer), each card with _house', async () => {
    const answer = expectStatus(await call(idx, 'GET', '/index/agents?q=quechua'), 200, 'search');
    assert.ok(await verifySignature(answer, 'signature', cards['idx.test'].key, 'index-answer'), 'signed');
    assert.equal(await verifySignature(answer, 'signature', cards['idx.test'].key, 'historial'), false);
    assert.deepEqual(
      answer.agents.map((c) => [c.address, c._house]),
      [['bo@b.test', 'b.test']],
      'the unlisted translator is not enumerated',
    );
    const card = { ...answer.agents[0] };
    delete card._house;
    assert.ok(await verifySignature(card, 'certification', cards['b.test'].key, 'agent-card'), 'certified by b.test');
    assert.match(answer.ranking, /text score/);
  });

  await step('an agent finds the translator with `nyx5 search`: answer and card verified, chain resolved', async () => {
    const found = nyx5(['search', 'quechua', '--index', 'idx.test']);
    assert.equal(found.signed, true);
    assert.deepEqual(
      found.agents.map((c) => c.address),
      ['bo@b.test'],
    );
    assert.deepEqual(found.unverified, []);
    const trips = nyx5(['search', 'trips', '--index', idx.url]);
    assert.deepEqual(
      trips.agents.map((c) => [c.address, c._house]),
      [['ana@a.test', 'a.test']],
    );
  });

  const tasks = {
    site: [
      { type: 'http_status', url: `${EVIDENCE}/site/{contract}` },
      { type: 'sha256', url: `${EVIDENCE}/site/{contract}`, expect: sha256hex(DEPLOYED) },
    ],
    missing: [{ type: 'http_status', url: `${EVIDENCE}/missing/{contract}` }],
  };
  await step('b.test publishes two tasks for tareas@ (tests on https loopback the operator named) and funds the desk', async () => {
    const card = expectStatus(await call(b, 'GET', '/agents/verifica'), 200, 'verifica@ card');
    assert.deepEqual(card.capabilities.verifica.tests, ['http_status', 'sha256']);
    assert.deepEqual(card.capabilities.verifica.unsupported, ['exit_0']);
    for (const [id, verify] of Object.entries(tasks)) {
      const body = { id, price: 30, statement: `Deploy the ${id} page`, verify };
      expectStatus(await call(b, 'POST', '/tareas', { body, headers: admin(b) }), 201, `task ${id}`);
    }
    const bad = { price: 1, statement: 'x', verify: [{ type: 'http_status', url: 'https://10.1.2.3/' }] };
    expectStatus(await call(b, 'POST', '/tareas', { body: bad, headers: admin(b) }), 400, 'a private target');
    const shell = { price: 1, statement: 'x', verify: [{ type: 'exit_0', argv: ['make', 'test'] }] };
    expectStatus(await call(b, 'POST', '/tareas', { body: shell, headers: admin(b) }), 400, 'exit_0 on the edge');
    const topup = { address: 'tareas@b.test', amount: 100 };
    expectStatus(await call(b, 'POST', '/libro/topup', { body: topup, headers: admin(b) }), 200, 'fund the desk');
    const page = expectStatus(await call(b, 'GET', '/tareas'), 200, 'the catalogue');
    assert.deepEqual(page.tasks.map((t) => [t.id, t.price, t.terms.task]), [['site', 30, 'site'], ['missing', 30, 'missing']]);
    expectStatus(await call(a, 'GET', '/tareas'), 404, 'a.test offers no tareas@');
  });

  const workers = ['cy', 'dee'];
  await step('two agents join b.test with nyx5 and take a task each with `nyx5 tareas take`', async () => {
    for (const who of workers) {
      const invite = expectStatus(await call(b, 'POST', '/invitations', { body: {}, headers: admin(b) }), 201, 'invite');
      nyx5(['init', `${who}@b.test`, '--house', b.url]);
      nyx5(['register', '--as', `${who}@b.test`, '--invite', invite.invitation.code]);
    }
    const listed = nyx5(['tareas', 'list', '--as', 'cy@b.test']);
    assert.equal(listed.arbiter, 'verifica@b.test');
    const cy = nyx5(['tareas', 'take', 'site', '--as', 'cy@b.test']);
    const dee = nyx5(['tareas', 'take', 'missing', '--as', 'dee@b.test']);
    assert.equal(cy.sealed, false);
    for (const [who, t] of [['cy@b.test', cy], ['dee@b.test', dee]]) {
      const c = nyx5(['contract', t.quote_id, '--as', who]);
      assert.deepEqual([c.state, c.buyer, c.seller, c.arbiter], ['held', 'tareas@b.test', who, 'verifica@b.test']);
    }
    cards.contracts = { cy: cy.quote_id, dee: dee.quote_id };
    // One task in flight per agent: cy's second take bounces with 409.
    const again = nyx5(['tareas', 'take', 'missing', '--as', 'cy@b.test']);
    const inbox = nyx5(['inbox', '--as', 'cy@b.test']).envelopes;
    const bounce = inbox.find((e) => e.from === 'postmaster@b.test' && e.content?.body?.of === again.id);
    assert.equal(bounce?.content?.body?.code, 409, `cy's second take: ${JSON.stringify(inbox.map((e) => e.from))}`);
    return `contracts ${cy.quote_id}, ${dee.quote_id} held by tareas@b.test`;
  });

  await step('both deliver; b.test\'s cron has verifica@ fetch the https evidence: one releases, one refunds', async () => {
    const { cy, dee } = cards.contracts;
    nyx5(['deliver', cy, '--as', 'cy@b.test']);
    nyx5(['deliver', dee, '--as', 'dee@b.test']);
    const released = await cronUntil('cy@b.test', cy, 'released');
    const refunded = await cronUntil('dee@b.test', dee, 'refunded');
    assert.equal(released.contract.verdict.outcome, 'passed');
    assert.deepEqual(released.contract.verdict.tests.map((t) => [t.type, t.result]), [['http_status', 'pass'], ['sha256', 'pass']]);
    assert.equal(released.contract.verdict.tests[1].sha256, sha256hex(DEPLOYED));
    assert.equal(refunded.contract.verdict.outcome, 'failed');
    assert.equal(refunded.contract.verdict.tests[0].status, 404);
    assert.deepEqual(released.contract.history.map((h) => [h.op, h.by]).at(-1), ['release', 'verifica@b.test']);
    assert.deepEqual(evidenceHits.filter((u) => u === `/site/${cy}`), [`/site/${cy}`, `/site/${cy}`], 'each test fetched once, at the claim\'s own URL');
    assert.equal(nyx5(['balance', '--as', 'cy@b.test']).balance, 27, '30 less the house\'s 10 %');
    assert.equal(nyx5(['balance', '--as', 'dee@b.test']).balance, 0);
    for (const [who, id] of [['cy@b.test', cy], ['dee@b.test', dee]]) {
      const inbox = nyx5(['inbox', '--as', who]).envelopes;
      const ops = inbox
        .filter((e) => e.from === 'libro@b.test' && e.content?.body?.contract?.id === id)
        .map((e) => e.content.body.op);
      const end = who.startsWith('cy') ? 'release' : 'refund';
      assert.deepEqual(ops.sort(), ['accept', 'deliver', end].sort(), `${who}'s receipts: ${ops}`);
    }
    return `released after ${released.crons} cron(s), refunded after ${refunded.crons}; evidence server hit ${evidenceHits.length} times`;
  });

  await step('the same on `nyx5 serve` (s.test, the test CA as --tls-roots): its own timer pays the task', async () => {
    const port = PORT(4);
    const url = urlOf(port);
    const token = b64u(random(24));
    const serveHosts = { ...hosts, 'evidence.test': { url: EVIDENCE } };
    writeFileSync(join(state, 's.hosts.json'), JSON.stringify(serveHosts));
    writeFileSync(join(state, 'hosts.json'), JSON.stringify({ ...hosts, 's.test': { url } }));
    const bin = join(ROOT, 'target/debug/nyx5');
    const args = ['serve', '--domain', 's.test', '--db', join(state, 's.db'), '--listen', `127.0.0.1:${port}`, '--public-url', url];
    args.push('--registration', 'invite', '--tick-ms', '200', '--hosts', join(state, 's.hosts.json'));
    args.push('--verifica', '--tareas', '--tls-roots', join(TLS, 'ca.pem'));
    serveChild = spawn(bin, args, { env: { ...ENV, NYX5_ADMIN_TOKEN: token }, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    serveChild.stdout.on('data', (d) => (log += d));
    serveChild.stderr.on('data', (d) => (log += d));
    const s = { url, domain: 's.test' };
    for (let i = 0; !log.includes('nyx5 serve: s.test at'); i++) {
      assert.ok(i < 300, `nyx5 serve never got ready:\n${log}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const auth = { authorization: `Bearer ${token}` };
    const body = { id: 'site', price: 30, statement: 'Deploy the site page', verify: tasks.site };
    expectStatus(await call(s, 'POST', '/tareas', { body, headers: auth }), 201, 'task on serve');
    expectStatus(await call(s, 'POST', '/libro/topup', { body: { address: 'tareas@s.test', amount: 100 }, headers: auth }), 200, 'fund');
    const invite = expectStatus(await call(s, 'POST', '/invitations', { body: {}, headers: auth }), 201, 'invite');
    nyx5(['init', 'eve@s.test', '--house', url]);
    nyx5(['register', '--as', 'eve@s.test', '--invite', invite.invitation.code]);
    const t = nyx5(['tareas', 'take', 'site', '--as', 'eve@s.test']);
    for (let i = 0; nyx5(['contract', t.quote_id, '--as', 'eve@s.test']).state !== 'held'; i++) {
      assert.ok(i < 100, 'the take was never accepted');
      await new Promise((r) => setTimeout(r, 100));
    }
    nyx5(['deliver', t.quote_id, '--as', 'eve@s.test']);
    let c;
    for (let i = 0; (c = nyx5(['contract', t.quote_id, '--as', 'eve@s.test'])).state !== 'released'; i++) {
      assert.ok(i < 150, `still ${c.state}: ${JSON.stringify(c.verdict ?? null)}\n${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(c.verdict.outcome, 'passed');
    assert.ok(evidenceHits.includes(`/site/${t.quote_id}`), 'serve fetched the claim\'s own URL over https');
    assert.equal(nyx5(['balance', '--as', 'eve@s.test']).balance, 27);
    return `released by serve's timer; evidence server hit ${evidenceHits.length} times in all`;
  });
} catch (e) {
  failed = true;
  console.log('FAIL');
  console.error(`\n${e.stack ?? e}`);
  for (const h of houses) console.error(`\n--- last lines of ${h.log}\n${h.tail(40)}`);
} finally {
  await Promise.allSettled(houses.map((h) => h.stop()));
  serveChild?.kill('SIGTERM');
  evidence.close();
}

const total = secs(performance.now() - T0);
if (failed) {
  console.error(`\nnyx5 services e2e: FAILED after ${total}; logs and state kept in ${state}`);
  process.exit(1);
}
rmSync(state, { recursive: true, force: true });
console.log(`\nnyx5 services e2e: all ${steps.count} steps passed in ${total} (wall time)`);
