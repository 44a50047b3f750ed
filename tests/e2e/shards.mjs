// Mailbox shards on the Worker (issue 36 §3; docs/decisions/0060-mailbox-shards.md): one house under
// `wrangler dev` with two local D1 databases, `DB` and `DB_SHARD_1` (a test-only copy of
// wrangler.toml with the second binding). Agents are placed on both; each sends to the other,
// reads and acknowledges; each envelope is in the database its recipient was placed on, and the
// cron tick settles the hand-offs. Then a mailbox larger than one step of a move is moved by the
// operator's `POST /shards/move` (one step, 202) and the ticks (a step each), losing nothing.
//
//   node tests/e2e/shards.mjs     (after scripts/build-worker)
//
// Ports: free ones, found at start (NYX5_SHARDS_PORT=N fixes them at N and N + 442).

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { makeSteps } from '../lib/e2e.mjs';
import { authHeader, b64u, bodyBytes, draftEnvelope, newAgentKeys, random, signEnvelope } from '../lib/nyx5.mjs';
import { House, ROOT, buildWorkerAndCli, portsFor, wrangler } from '../lib/wrangler.mjs';

const PORT = await portsFor('NYX5_SHARDS_PORT', [0, 442]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-shards-'));
const admin = b64u(random(24));
// Beside wrangler.toml, so its relative paths (build/, migrations/) hold.
const config = join(ROOT, `.wrangler-shards-${process.pid}.toml`);
const a = new House({
  domain: 'a.test',
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  // The move's test fills a mailbox past one step: no minute limit in the way.
  vars: { NYX5_ADMIN_TOKEN: admin, NYX5_OUTBOUND_PER_MINUTE: '100000', NYX5_INBOUND_PER_DOMAIN_PER_MINUTE: '100000' },
});
a.config = config;
const steps = makeSteps(performance.now());

/** `wrangler d1 execute BINDING` on this house's local state: the first statement's rows. */
async function d1(binding, sql) {
  const out = await wrangler(['d1', 'execute', binding, '--local', '--persist-to', a.persist, '--config', config, '--json', '--command', sql]);
  const parsed = JSON.parse(out);
  for (const r of parsed) if (!r.success) throw new Error(`d1 ${sql}: ${JSON.stringify(r)}`);
  return parsed[0].results;
}

async function post(path, body, headers = {}) {
  const r = await fetch(a.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: bodyBytes(body) });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

async function as(who, method, path, body) {
  const { header } = await authHeader(who.keys, { address: who.address, method, path, host: a.host, body });
  if (method === 'POST') return post(path, body, { authorization: header });
  const r = await fetch(a.url + path, { headers: { authorization: header } });
  return { status: r.status, json: await r.json() };
}

function ok(res, status, what) {
  assert.equal(res.status, status, `${what}: ${res.status} ${JSON.stringify(res.json)?.slice(0, 300)}`);
  return res;
}

/** `who`'s mailbox page once it lists `id`. */
async function waitFor(who, id) {
  let page;
  for (let i = 0; i < 100; i++) {
    page = ok(await as(who, 'GET', `/mailbox/${who.local}`), 200, `GET /mailbox/${who.local}`);
    if (page.json.envelopes.some((e) => e.envelope.id === id)) return page;
    if (i % 10 === 9) await a.scheduled();
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${id} never reached ${who.address}: ${JSON.stringify(page.json).slice(0, 300)}`);
}

let failed = false;
try {
  await steps.step('start a.test under wrangler dev over DB and DB_SHARD_1', async () => {
    buildWorkerAndCli();
    const shard = [
      '',
      '[[d1_databases]]',
      'binding = "DB_SHARD_1"',
      'database_name = "nyx5-shard-1"',
      'database_id = "00000000-0000-0000-0000-000000000001"',
      'migrations_dir = "migrations"',
      '',
    ].join('\n');
    const base = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8');
    const at = base.indexOf('\n[vars]');
    assert.ok(at > 0, 'wrangler.toml has its [vars]');
    writeFileSync(config, base.slice(0, at) + shard + base.slice(at));
    for (const binding of ['DB', 'DB_SHARD_1']) {
      await wrangler(['d1', 'migrations', 'apply', binding, '--local', '--persist-to', a.persist, '--config', config]);
    }
    await a.start();
  });

  const agents = {};
  await steps.step('agents are placed on both databases by the rule, recorded at registration', async () => {
    for (let i = 0; i < 8; i++) {
      const local = `agent${i}`;
      const who = { local, address: `${local}@a.test`, keys: await newAgentKeys() };
      ok(await post('/agents', { local, sig: who.keys.sig, enc: who.keys.enc }, { authorization: `Bearer ${admin}` }), 201, `register ${local}`);
      agents[local] = who;
    }
    const placed = await d1('DB', "SELECT local, shard FROM agents WHERE local LIKE 'agent%' ORDER BY local");
    const on = (k) => placed.filter((r) => r.shard === k).map((r) => r.local);
    assert.ok(on(0).length > 0 && on(1).length > 0, `both databases have agents: ${JSON.stringify(placed)}`);
    agents.ana = agents[on(0)[0]];
    agents.bo = agents[on(1)[0]];
  });

  await steps.step('each sends to the other, reads and acknowledges', async () => {
    const { ana, bo } = agents;
    for (const [from, to] of [
      [ana, bo],
      [bo, ana],
    ]) {
      const env = await signEnvelope(draftEnvelope(from.address, [to.address], { media: 'text/plain', body: `to ${to.local}` }), from.keys);
      ok(await as(from, 'POST', '/outbound', env), 202, `${from.local} sends`);
      await waitFor(to, env.id);
      const acked = ok(await as(to, 'POST', `/mailbox/${to.local}/ack`, { ids: [env.id] }), 200, `${to.local} acks`);
      assert.equal(acked.json.acked, 1);
      const after = ok(await as(to, 'GET', `/mailbox/${to.local}`), 200, 'the page after');
      assert.equal(after.json.envelopes.length, 0, 'nothing waits');
      to.got = env.id;
    }
  });

  await steps.step("each envelope is in its recipient's database, and the tick settles the hand-offs", async () => {
    const { ana, bo } = agents;
    const rows = async (binding, who) => (await d1(binding, `SELECT envelope_id FROM mailbox WHERE local = '${who.local}'`)).map((r) => r.envelope_id);
    assert.deepEqual(await rows('DB', ana), [ana.got]);
    assert.deepEqual(await rows('DB_SHARD_1', ana), []);
    assert.deepEqual(await rows('DB_SHARD_1', bo), [bo.got]);
    assert.deepEqual(await rows('DB', bo), []);
    // Past the minute, the tick's upkeep forgets the hand-offs already applied.
    await new Promise((r) => setTimeout(r, 61_000));
    await a.scheduled();
    const left = await d1('DB', 'SELECT count(*) AS n FROM shard_handoffs');
    assert.equal(left[0].n, 0, 'no hand-off left');
  });

  await steps.step('a mailbox larger than one step moves through the ticks, losing nothing', async () => {
    const { ana, bo } = agents;
    const senders = Object.entries(agents)
      .filter(([k, w]) => k.startsWith('agent') && w !== bo)
      .map(([, w]) => w);
    // More than one step's rows (4 chunks of 32): each step copies at most that many.
    const N = 150;
    const sent = [];
    for (let i = 0; i < N; i += senders.length) {
      await Promise.all(
        senders.slice(0, Math.min(senders.length, N - i)).map(async (from, j) => {
          const env = await signEnvelope(draftEnvelope(from.address, [bo.address], { media: 'text/plain', body: `bulk ${i + j}` }), from.keys);
          ok(await as(from, 'POST', '/outbound', env), 202, `${from.local} sends`);
          sent.push(env.id);
        }),
      );
    }
    const rowsOf = async (binding) => (await d1(binding, `SELECT count(*) AS n FROM mailbox WHERE local = '${bo.local}'`))[0].n;
    for (let i = 0; (await rowsOf('DB_SHARD_1')) < N + 1; i++) {
      assert.ok(i < 60, `the ${N} envelopes reach ${bo.local}: ${await rowsOf('DB_SHARD_1')}`);
      await a.scheduled();
      await new Promise((r) => setTimeout(r, 250));
    }
    // The operator's request takes the first step only.
    const first = ok(await post('/shards/move', { local: bo.local, to: 0 }, { authorization: `Bearer ${admin}` }), 202, 'POST /shards/move');
    assert.deepEqual(first.json, { ok: true, local: bo.local, from: 1, to: 0, copied: 128, state: 'moving' });
    // Mail meanwhile: accepted, and waits for the move's end.
    const during = await signEnvelope(draftEnvelope(ana.address, [bo.address], { media: 'text/plain', body: 'during the move' }), ana.keys);
    ok(await as(ana, 'POST', '/outbound', during), 202, 'a send during the move');
    sent.push(during.id);
    // The ticks take the next steps, each bounded, until the move ends.
    // (A tick runs the upkeep once a minute, and at every tick while a move is under way: the
    // first ones may come in the minute the request's own upkeep ran.)
    let ticks = 0;
    while ((await d1('DB', 'SELECT count(*) AS n FROM shard_moves'))[0].n > 0) {
      assert.ok(ticks < 150, 'the move ends within 150 ticks');
      await a.scheduled();
      await new Promise((r) => setTimeout(r, 1000));
      ticks++;
    }
    console.log(`shards: ${N + 1} envelopes moved by one request and ${ticks} ticks`);
    assert.ok(ticks >= 1, 'the ticks finished what the request began');
    const placed = await d1('DB', `SELECT shard FROM agents WHERE local = '${bo.local}'`);
    assert.equal(placed[0].shard, 0, 'flipped to the primary');
    assert.equal(await rowsOf('DB_SHARD_1'), 0, 'the source forgot its rows');
    // Every envelope readable where the mailbox is now, once (pages read and acknowledged).
    const got = [];
    for (let i = 0; got.length < sent.length; i++) {
      assert.ok(i < 60, `every envelope read: ${got.length} of ${sent.length}`);
      const page = ok(await as(bo, 'GET', `/mailbox/${bo.local}`), 200, 'a page after the move');
      const ids = page.json.envelopes.map((e) => e.envelope.id);
      if (ids.length === 0) {
        // What waited for the move (a hand-off) is applied by the next tick's upkeep.
        await a.scheduled();
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      got.push(...ids);
      ok(await as(bo, 'POST', `/mailbox/${bo.local}/ack`, { ids }), 200, 'ack a page');
    }
    assert.deepEqual([...got].sort(), [...sent].sort(), 'each envelope once');
    assert.equal(await rowsOf('DB'), N + 2, 'all on the primary, the first acknowledged one too');
  });
} catch (e) {
  failed = true;
  console.error(`shards: ${e.stack ?? e}\n--- a.test\n${a.tail()}`);
} finally {
  await a.stop();
  rmSync(config, { force: true });
}
if (failed) process.exit(1);
rmSync(state, { recursive: true, force: true });
console.log(`shards: ${steps.count} steps passed`);
