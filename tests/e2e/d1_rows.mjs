// D1's billing units per operation, as local D1 under `wrangler dev` reports them in each
// result's `meta` (rows_read, rows_written), summed per request and per tick by the Worker when
// NYX5_D1_METER=on (src/adapter/d1.rs): the `x-nyx5-d1` header of an answer, and a line
// `nyx5 d1: <what> …` in the house's log for every request and tick. Two houses, a.test and
// b.test, as in two_houses.mjs; checks the figures against benches/budgets.json ("d1").
//
//   node tests/e2e/d1_rows.mjs [--write]     (after scripts/build-worker; a step of scripts/test;
//                                            --write keeps the figures, and README's capacity
//                                            table from them: benches/capacity.mjs)
//
// Goals (issue 36 §1, budgets.json "d1".goals): an inbound envelope accepted, read in a page of
// 50 and acknowledged writes at most `inbound_read_acked` rows in all, so that a Free-plan house
// (`free_plan_rows_written_per_day`) carries at least `free_plan_inbound_per_day` of them a day
// (checked); an outbound envelope accepted and delivered (`outbound_delivered`, checked since
// it was met) and a Libro operation (`libro_operation`, checked since it was met) against theirs.
//
// Ports: free ones, found at start (NYX5_D1_PORT=N fixes them at N, N + 1, N + 442, N + 443).

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import {
  authHeader,
  b64u,
  bodyBytes,
  draftEnvelope,
  newAgentKeys,
  random,
  signDocument,
  signEnvelope,
} from '../lib/nyx5.mjs';
import { writeReadme } from '../../benches/capacity.mjs';
import { House, ROOT, portsFor } from '../lib/wrangler.mjs';

const write = process.argv.includes('--write');
const budgetsPath = join(ROOT, 'benches/budgets.json');
const budgets = JSON.parse(readFileSync(budgetsPath, 'utf8'));
const PORT = await portsFor('NYX5_D1_PORT', [0, 1, 442, 443]);
const ENVELOPES = 50;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const state = mkdtempSync(join(tmpdir(), 'nyx5-d1-'));
const token = { a: b64u(random(24)), b: b64u(random(24)) };
const url = (port) => `http://127.0.0.1:${port}`;
const a = new House({
  domain: 'a.test',
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  vars: {
    NYX5_ADMIN_TOKEN: token.a,
    NYX5_HOSTS: JSON.stringify({ 'b.test': { url: url(PORT(1)) } }),
    NYX5_D1_METER: 'on',
    // 50 sends in well under a minute; no more than the Libro's operations a minute (120), so
    // an operation an agent sends is counted once, when sent (decision 0076), as by default.
    NYX5_OUTBOUND_PER_MINUTE: '120',
  },
});
const b = new House({
  domain: 'b.test',
  port: PORT(1),
  inspectorPort: PORT(443),
  stateDir: state,
  vars: { NYX5_ADMIN_TOKEN: token.b, NYX5_HOSTS: JSON.stringify({ 'a.test': { url: url(PORT(0)) } }), NYX5_D1_METER: 'on' },
});

const parse = (line) => Object.fromEntries([...line.matchAll(/(\w+)=(\d+)/g)].map(([, k, v]) => [k, Number(v)]));

async function call(house, method, path, { body, headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = bodyBytes(body);
    init.headers['content-type'] = 'application/json';
  }
  const r = await fetch(house.url + path, init);
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null, meter: parse(r.headers.get('x-nyx5-d1') ?? '') };
}

async function as(who, method, path, opts = {}) {
  const { header } = await authHeader(who.keys, { address: who.address, method, path, host: who.house.host, body: opts.body });
  return call(who.house, method, path, { ...opts, headers: { authorization: header } });
}

function ok(res, status, what) {
  assert.equal(res.status, status, `${what}: ${res.status} ${JSON.stringify(res.json)?.slice(0, 300)}`);
  return res;
}

async function agent(local, house) {
  const who = { local, address: `${local}@${house.domain}`, house, keys: await newAgentKeys() };
  const body = { local, sig: who.keys.sig, enc: who.keys.enc };
  ok(await call(house, 'POST', '/agents', { body, headers: { authorization: `Bearer ${token[house === a ? 'a' : 'b']}` } }), 201, `register ${local}`);
  return who;
}

/** The metered lines of a house's log since `from` (a byte offset), as {what, status?, meter}. */
function lines(house, from = 0) {
  return readFileSync(house.log, 'utf8')
    .slice(from)
    .split('\n')
    .filter((l) => l.includes('nyx5 d1: '))
    .map((l) => {
      const rest = l.slice(l.indexOf('nyx5 d1: ') + 9);
      return { what: rest.slice(0, rest.indexOf(' queries=')), meter: parse(rest) };
    });
}
const logSize = (house) => readFileSync(house.log, 'utf8').length;
const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];

const figures = {};
function record(name, meters, note) {
  assert.ok(meters.length > 0, `no metered ${name}`);
  const pick = (k) => median(meters.map((m) => m[k] ?? 0));
  figures[name] = {
    rows_read: pick('rows_read'),
    rows_written: pick('rows_written'),
    queries: pick('queries'),
    batches: pick('batches'),
    samples: meters.length,
    note,
  };
}

let failed = false;
try {
  await Promise.all([a.migrate(), b.migrate()]);
  await Promise.all([a.start(), b.start()]);
  const ana = await agent('ana', a);
  const cy = await agent('cy', a);
  const bo = await agent('bo', b);

  // Outbound at a.test, delivered by the kick to b.test's /inbound: one envelope at a time, so
  // each request and tick is measured alone. The isolate has one meter: the next request waits
  // for this one's kick to log its figures, or the two would count into each other's.
  const outbound = [];
  for (let i = 0; i < ENVELOPES; i++) {
    const env = await signEnvelope(draftEnvelope(ana.address, [bo.address], { media: 'text/plain', body: 'x'.repeat(900) }), ana.keys);
    outbound.push(ok(await as(ana, 'POST', '/outbound', { body: env }), 202, 'POST /outbound').meter);
    for (let wait = 0; wait < 100 && lines(a).filter((l) => l.what === 'kick').length <= i; wait++) await sleep(50);
  }
  record('outbound_accept', outbound, 'POST /outbound at a.test: token nonce, sender card, outbox row, job, rate windows');
  for (let i = 0; i < 100; i++) {
    if (lines(b).filter((l) => l.what === 'POST /inbound 202').length >= ENVELOPES) break;
    if (i > 20) await a.scheduled();
    await sleep(200);
  }
  const inbound = lines(b).filter((l) => l.what === 'POST /inbound 202').map((l) => l.meter);
  assert.equal(inbound.length, ENVELOPES, 'every envelope reached b.test');
  record('inbound_accept', inbound, 'POST /inbound at b.test, accepted (cards cached after the first)');
  record('tick_deliver_one', lines(a).filter((l) => l.what === 'kick').map((l) => l.meter), 'a kick at a.test delivering one envelope to b.test');

  const page = ok(await as(bo, 'GET', '/mailbox/bo?limit=50'), 200, 'GET /mailbox');
  assert.equal(page.json.envelopes.length, 50);
  record('mailbox_page_50', [page.meter], 'GET /mailbox/bo?limit=50 at b.test: token nonce, card, one page');
  const ids = page.json.envelopes.map((e) => e.envelope.id);
  const acked = ok(await as(bo, 'POST', '/mailbox/bo/ack', { body: { ids } }), 200, 'POST /mailbox/bo/ack');
  assert.equal(acked.json.acked, 50);
  record('mailbox_ack_50', [acked.meter], 'POST /mailbox/bo/ack of the 50 at b.test: token nonce, card, usage, the rows moved');

  let mark = logSize(a);
  await a.scheduled();
  await sleep(300);
  record('tick_idle', lines(a, mark).filter((l) => l.what === 'tick').map((l) => l.meter), 'a cron tick at a.test with nothing due');

  // The Libro of a.test: a top-up, then a spot quote of cy accepted by ana (delivered by a kick).
  const topup = ok(
    await call(a, 'POST', '/libro/topup', {
      body: { address: ana.address, amount: 1000, id: globalThis.crypto.randomUUID() },
      headers: { authorization: `Bearer ${token.a}` },
    }),
    200,
    'topup',
  );
  record('libro_topup', [topup.meter], 'POST /libro/topup by the operator');
  const quote = await signDocument(
    {
      tipo: 'cotizacion',
      id: globalThis.crypto.randomUUID(),
      house: 'a.test',
      seller: cy.address,
      buyer: ana.address,
      contract: 'spot',
      price: 100,
      currency: 'tok',
      concept: 'a measurement',
      terms: null,
      arbiter: null,
      issued: new Date().toISOString(),
      expires: null,
    },
    cy.keys,
    'signature',
    'quote',
  );
  mark = logSize(a);
  const op = await signEnvelope(
    draftEnvelope(ana.address, ['libro@a.test'], { media: 'application/nyx5.libro+json', body: { op: 'accept', quote } }, { type: 'task' }),
    ana.keys,
  );
  ok(await as(ana, 'POST', '/outbound', { body: op }), 202, 'POST /outbound (accept)');
  let kick = [];
  for (let i = 0; i < 50 && kick.length === 0; i++) {
    await sleep(200);
    kick = lines(a, mark).filter((l) => l.what === 'kick' || l.what === 'tick');
    if (i === 20) await a.scheduled();
  }
  record('libro_accept_spot', kick.map((l) => l.meter).slice(0, 1), 'the tick at a.test that operates one accept (spot) from the queue: lease, operation, receipts to ana and cy, job done');
} catch (e) {
  failed = true;
  console.error(`d1: ${e.stack ?? e}\n--- a.test\n${a.tail()}\n--- b.test\n${b.tail()}`);
} finally {
  await Promise.all([a.stop(), b.stop()]);
}
if (failed) process.exit(1);
rmSync(state, { recursive: true, force: true });

const pad = (s, n) => String(s).padEnd(n);
const lpad = (s, n) => String(s).padStart(n);
console.log(`\n${pad('D1 (local, wrangler dev)', 22)}${lpad('read', 7)}${lpad('written', 9)}${lpad('queries', 9)}${lpad('batches', 9)}${lpad('budget w', 10)}`);
const problems = [];
for (const [name, f] of Object.entries(figures)) {
  const budget = budgets.d1.rows_written[name];
  const over = budget !== undefined && f.rows_written > budget;
  if (over) problems.push(`${name}: ${f.rows_written} rows written > ${budget}`);
  const rb = budgets.d1.rows_read[name];
  // Rows read follow table sizes (a scan of a growing table): 10 % of slack.
  if (rb !== undefined && f.rows_read > rb * 1.1) problems.push(`${name}: ${f.rows_read} rows read > ${rb} + 10 %`);
  console.log(
    `${pad(name, 22)}${lpad(f.rows_read, 7)}${lpad(f.rows_written, 9)}${lpad(f.queries, 9)}${lpad(f.batches, 9)}${lpad(budget ?? '-', 10)}${over ? '  OVER' : ''}`,
  );
}
const perEnvelope = figures.inbound_accept.rows_written;
const goal = budgets.d1.goal_rows_written_per_inbound;
console.log(`goal: ≤ ${goal} rows written per accepted envelope: ${perEnvelope <= goal ? 'met' : 'not met'} (${perEnvelope})`);
// An envelope's life: accepted, then read and acknowledged with 49 others.
const goals = budgets.d1.goals;
const life = perEnvelope + (figures.mailbox_page_50.rows_written + figures.mailbox_ack_50.rows_written) / ENVELOPES;
const perDay = Math.floor(goals.free_plan_rows_written_per_day / life);
const lifeMet = life <= goals.inbound_read_acked && perDay >= goals.free_plan_inbound_per_day;
console.log(
  `goal: ≤ ${goals.inbound_read_acked} rows written per inbound envelope accepted, read in a page of ${ENVELOPES} and ` +
    `acknowledged: ${lifeMet ? 'met' : 'not met'} (${perEnvelope} + (${figures.mailbox_page_50.rows_written} + ` +
    `${figures.mailbox_ack_50.rows_written}) / ${ENVELOPES} = ${life.toFixed(2)}; ${goals.free_plan_rows_written_per_day} / ` +
    `${life.toFixed(2)} = ${perDay} a day on the Free plan, goal ≥ ${goals.free_plan_inbound_per_day})`,
);
if (!lifeMet) problems.push(`an inbound envelope's life writes ${life.toFixed(2)} rows (goal ${goals.inbound_read_acked})`);
const outbound = figures.outbound_accept.rows_written + figures.tick_deliver_one.rows_written;
console.log(
  `goal: ≤ ${goals.outbound_delivered} rows written per outbound envelope accepted and delivered: ` +
    `${outbound <= goals.outbound_delivered ? 'met' : 'not met'} (${figures.outbound_accept.rows_written} + ${figures.tick_deliver_one.rows_written} = ${outbound})`,
);
// Checked since it was met (migration 0029): a change may not take it back above the goal.
if (outbound > goals.outbound_delivered) problems.push(`an outbound envelope writes ${outbound} rows (goal ${goals.outbound_delivered})`);
const libro = figures.libro_accept_spot.rows_written;
console.log(`goal: ≤ ${goals.libro_operation} rows written per Libro operation: ${libro <= goals.libro_operation ? 'met' : 'not met'} (${libro})`);
// Checked since it was met (migration 0034, docs/decisions/0076-an-operation-counted-once.md).
if (libro > goals.libro_operation) problems.push(`a Libro operation writes ${libro} rows (goal ${goals.libro_operation})`);
if (write) {
  budgets.d1.rows_written = Object.fromEntries(Object.entries(figures).map(([n, f]) => [n, f.rows_written]));
  budgets.d1.rows_read = Object.fromEntries(Object.entries(figures).map(([n, f]) => [n, f.rows_read]));
  writeFileSync(budgetsPath, JSON.stringify(budgets, null, 2) + '\n');
  writeReadme();
  console.log(`d1: wrote this run's figures to ${budgetsPath}, and README's capacity table from them`);
}
if (problems.length) {
  console.error(`d1: over budget:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log('d1: within budgets');
