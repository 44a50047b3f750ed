// End-to-end: spending that asks before it acts, and apps in a house's catalogue (issue 15), the
// same scenario on both runtimes: two houses under `wrangler dev` (workerd, local D1), then two
// `nyx5 serve` houses (SQLite), each pair driven by the `nyx5` command.
//
//   a.test keeps the Libro. sol@a.test (whose human decides) grants bo@b.test a mandate whose
//   authority lets it charge 20 alone: a charge within goes at once, one above waits with what it
//   would pay held, until `nyx5 approve` pays it from the hold; a declined one returns the hold.
//   Then every other rule once: a mandate that needs approval for everything, a prohibited one,
//   the hourly limit, a sub-mandate that may not be looser than its parent and asks where it is
//   stricter, and the evidence an escrow's terms require. A subagent of sol's, whose card lets it
//   do only reversible things alone, grants a mandate at once but waits on sol for an escrow, a
//   spot purchase and releasing what it held. b.test lets approvals wait 2 s (NYX5_APPROVAL_SECONDS,
//   `--approval-seconds`): nobody decides, and its tick returns the hold. The journals audit.
//   Then a.test's operator lists the example app (examples/apps/echo) in its signed catalogue,
//   `nyx5 app verify --catalogue a.test` accepts that very card, and refuses it once removed.
//
//   node tests/e2e/authority.mjs        (scripts/test runs it after services.mjs)
//
// Ports: free ones, found at start (NYX5_AUTHORITY_PORT=N fixes them at N + 0…3, 442, 443). Prints each
// step with its timing; exits 1 on the first failure (logs and state kept), 0 when all passed.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { b64u, random } from '../lib/nyx5.mjs';
import { makeSteps, secs } from '../lib/e2e.mjs';
import { ENV, House, ROOT, buildWorkerAndCli, portsFor } from '../lib/wrangler.mjs';

const T0 = performance.now();
const PORT = await portsFor('NYX5_AUTHORITY_PORT', [0, 1, 2, 3, 442, 443]);
/** The inspector of each Worker house, by its port. */
const INSPECTOR = { [PORT(0)]: PORT(442), [PORT(1)]: PORT(443) };
const state = mkdtempSync(join(tmpdir(), 'nyx5-authority-'));
const BIN = join(ROOT, 'target/debug/nyx5');
const urlOf = (port) => `http://127.0.0.1:${port}`;
const steps = makeSteps(T0);
const step = (title, fn) => steps.step(title, fn);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Two houses of one runtime, with their own hosts file and the profile of their agents. */
function pair(runtime, ports) {
  const dir = join(state, runtime);
  const hosts = Object.fromEntries(Object.entries(ports).map(([d, p]) => [d, { url: urlOf(p) }]));
  const tokens = Object.fromEntries(Object.keys(ports).map((d) => [d, b64u(random(24))]));
  return { runtime, dir, hosts, tokens, hostsFile: join(dir, 'hosts.json'), profile: join(dir, 'profile.json') };
}

/** `wrangler dev` houses: rows read with `wrangler d1 execute`, ticks by the cron hook. */
function workerHouse(p, domain, vars = {}) {
  const others = Object.fromEntries(Object.entries(p.hosts).filter(([d]) => d !== domain));
  const port = Number(new URL(p.hosts[domain].url).port);
  const h = new House({
    domain,
    port,
    inspectorPort: INSPECTOR[port],
    stateDir: p.dir,
    vars: {
      NYX5_REGISTRATION: 'open',
      NYX5_OPEN_REGISTRATIONS_PER_MINUTE: '1000',
      NYX5_ADMIN_TOKEN: p.tokens[domain],
      NYX5_HOSTS: JSON.stringify(others),
      ...vars,
    },
  });
  h.rows = async (sql) => (await h.d1(sql))[0];
  // wrangler's dev proxy now and then drops the cron hook's connection ("fetch failed") while
  // the Worker runs on; a crash would drop every try, and fail here.
  h.tick = async () => {
    for (let lost = 0; ; lost++) {
      try {
        return await h.scheduled();
      } catch (e) {
        if (lost >= 2) throw e;
      }
    }
  };
  return h;
}

/** `nyx5 serve` houses: rows read with the sqlite3 shell, ticks by its own timer. */
function serveHouse(p, domain, extra = []) {
  const url = p.hosts[domain].url;
  const db = join(p.dir, `${domain}.db`);
  const log = join(p.dir, `${domain}.log`);
  let child = null;
  return {
    domain,
    url,
    log,
    migrate: async () => {},
    start: async () => {
      writeFileSync(join(p.dir, `${domain}.hosts.json`), JSON.stringify(p.hosts));
      const args = ['serve', '--domain', domain, '--db', db, '--listen', url.replace('http://', ''), '--public-url', url];
      args.push('--registration', 'open', '--tick-ms', '200', '--hosts', join(p.dir, `${domain}.hosts.json`), ...extra);
      child = spawn(BIN, args, { env: { ...ENV, NYX5_ADMIN_TOKEN: p.tokens[domain], NYX5_OPEN_REGISTRATIONS_PER_MINUTE: '1000' }, stdio: ['ignore', 'pipe', 'pipe'] });
      const out = createWriteStream(log);
      let seen = '';
      const keep = (d) => {
        seen += d;
        out.write(d);
      };
      child.stdout.on('data', keep);
      child.stderr.on('data', keep);
      for (let i = 0; !seen.includes(`nyx5 serve: ${domain} at`); i++) {
        assert.ok(i < 600 && child.exitCode === null, `nyx5 serve ${domain} never got ready:\n${seen}`);
        await sleep(50);
      }
    },
    rows: async (sql) => {
      const r = spawnSync('sqlite3', ['-json', db, sql], { encoding: 'utf8' });
      assert.equal(r.status, 0, `sqlite3 ${sql}: ${r.stderr}`);
      return r.stdout.trim() ? JSON.parse(r.stdout) : [];
    },
    tick: () => sleep(300),
    tail: (n = 40) => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-n).join('\n') : ''),
    stop: async () => {
      if (child && child.exitCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.on('exit', r));
      }
    },
  };
}

const RULE = JSON.stringify({ level: 'autonomous', consequence: 'costly', max_amount: 20, currency: 'tok', rationale: 'gpu time' });
const rule = (o) => JSON.stringify({ level: 'autonomous', consequence: 'costly', currency: 'tok', ...o });

/** The whole scenario against houses `a` and `b` of pair `p`. */
async function scenario(p, a, b) {
  const R = p.runtime;
  /** `nyx5 ARGS --json` with this pair's hosts and profile, no DNS: the parsed answer. */
  const nyx5 = (args, { status = 0 } = {}) => {
    const r = spawnSync(BIN, [...args, '--json'], {
      encoding: 'utf8',
      env: { ...ENV, NYX5_AGENT: p.profile, NYX5_HOSTS: p.hostsFile, NYX5_DOH: 'off' },
    });
    assert.equal(r.status, status, `nyx5 ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
    return status === 0 ? JSON.parse(r.stdout) : r.stderr;
  };
  const balance = (who, at = 'a.test') => nyx5(['balance', '--as', who, '--house', at]).balance;
  const waiting = (who, at = 'a.test') => nyx5(['approvals', '--as', who, '--house', at]).pending;
  const topup = (who, n, at = 'a.test') => nyx5(['topup', who, String(n), '--house', at, '--admin-token', p.tokens[at]]);
  const charge = (m, n, who = 'bo@b.test', at = 'a.test', status = 0) =>
    nyx5(['charge', m, '--amount', String(n), '--concept', 'gpu', '--house', at, '--as', who, '--wait', '60'], { status });
  const mandate = (who, grantee, cap, authority, extra = []) =>
    nyx5(['mandate', grantee, '--cap', String(cap), '--authority', authority, '--as', who, '--wait', '60', ...extra]).receipt.mandate.id;
  const approve = (id, who = 'sol@a.test', status = 0) =>
    nyx5(['approve', id, '--yes', '--as', who, '--house', 'a.test', '--wait', '60'], { status });
  const decline = (id, who = 'sol@a.test') => nyx5(['decline', id, '--as', who, '--house', 'a.test', '--wait', '60']);

  await step(`${R}: start a.test and b.test (b's approvals wait 2 s)`, async () => {
    writeFileSync(p.hostsFile, JSON.stringify(p.hosts));
    await Promise.all([a, b].map((h) => h.migrate()));
    await Promise.all([a, b].map((h) => h.start()));
    const tables = await a.rows("SELECT name FROM sqlite_master WHERE name IN ('libro_pending', 'libro_uses', 'apps')");
    assert.equal(tables.length, 3);
  });

  await step(`${R}: sol@a.test, sol2@b.test, bo@b.test and cy@b.test join; sol has 300 tok, sol2 100`, async () => {
    for (const [who, h] of [['sol@a.test', a], ['sol2@b.test', b], ['bo@b.test', b], ['cy@b.test', b]]) {
      nyx5(['init', who, '--house', h.url]);
      nyx5(['register', '--as', who]);
    }
    topup('sol@a.test', 300);
    topup('sol2@b.test', 100, 'b.test');
    assert.equal(balance('sol@a.test'), 300);
  });

  let m1;
  await step(`${R}: a mandate that charges 20 alone: 10 goes at once, 50 waits held until sol approves`, async () => {
    const vague = nyx5(['mandate', 'bo@b.test', '--cap', '100', '--authority', '{"level":"autonomous","consequence":"costly"}'], { status: 2 });
    assert.match(vague, /max_amount/);
    m1 = mandate('sol@a.test', 'bo@b.test', 100, RULE);
    const c = charge(m1, 10);
    assert.equal(c.receipt.authority.allowed_by[0].of, `mandate:${m1}`);
    assert.equal(c.receipt.asiento.meta.authority.allowed_by[0].of, `mandate:${m1}`);
    assert.equal(balance('sol@a.test'), 290);
    const waits = charge(m1, 50);
    // A receipt says what became of its movement: this one waits, only a hold moved.
    assert.equal(waits.receipt.status, 'pending');
    assert.equal(waits.receipt_status, 'pending');
    assert.equal(c.receipt.status, 'done');
    const pending = waits.receipt.pending;
    assert.equal(pending.state, 'pending');
    assert.deepEqual(pending.awaiting, ['sol@a.test']);
    assert.equal(balance('sol@a.test'), 240);
    assert.equal(balance('bo@b.test'), 9);
    const held = await a.rows(`SELECT balance FROM libro_accounts WHERE account = 'escrow:hold.${pending.id}'`);
    assert.equal(held[0].balance, 50);
    assert.equal(waiting('sol@a.test').length, 1);
    assert.equal(waiting('bo@b.test').length, 1);
    approve(pending.id, 'bo@b.test', 4); // never its own spending
    const r = approve(pending.id);
    assert.equal(r.receipt.pending.state, 'approved');
    assert.equal(r.receipt.status, 'done');
    assert.deepEqual(r.receipt.asiento.meta.authority.approved_by, ['sol@a.test']);
    assert.equal(balance('sol@a.test'), 240);
    assert.equal(balance('bo@b.test'), 54);
  });

  await step(`${R}: declined, the hold returns; needs_approval waits for everything; prohibited never`, async () => {
    const c = charge(m1, 30).receipt.pending;
    assert.equal(balance('sol@a.test'), 210);
    const d = decline(c.id);
    assert.equal(d.receipt.pending.state, 'declined');
    assert.equal(d.receipt.status, 'declined');
    assert.equal(balance('sol@a.test'), 240);
    const m2 = mandate('sol@a.test', 'bo@b.test', 100, '{"level":"needs_approval","consequence":"costly"}');
    const w = charge(m2, 1).receipt.pending;
    assert.equal(w.state, 'pending');
    decline(w.id, 'bo@b.test'); // its operator withdraws it
    const m3 = mandate('sol@a.test', 'bo@b.test', 100, '{"level":"prohibited","consequence":"reversible","rationale":"no dice"}');
    assert.match(charge(m3, 1, 'bo@b.test', 'a.test', 4), /no dice/);
    assert.equal(balance('sol@a.test'), 240);
    assert.deepEqual(waiting('sol@a.test'), []);
  });

  await step(`${R}: the hourly limit; a sub-mandate no looser than its parent, asking where it is stricter`, async () => {
    const m4 = mandate('sol@a.test', 'bo@b.test', 100, rule({ max_amount: 50, max_per_hour: 1 }));
    charge(m4, 5);
    const second = charge(m4, 5).receipt.pending;
    assert.match(second.asks[0].reason, /past hour/);
    decline(second.id);
    const looser = nyx5(['mandate', 'cy@b.test', '--cap', '10', '--parent', m1, '--house', 'a.test', '--as', 'bo@b.test',
      '--authority', rule({ max_amount: 30 }), '--wait', '60'], { status: 4 });
    assert.match(looser, /looser/);
    const sub = mandate('bo@b.test', 'cy@b.test', 10, rule({ max_amount: 5 }), ['--parent', m1, '--house', 'a.test']);
    const asked = charge(sub, 8, 'cy@b.test').receipt.pending;
    assert.deepEqual(asked.awaiting, ['sol@a.test', 'bo@b.test']);
    approve(asked.id, 'cy@b.test', 4);
    assert.equal(approve(asked.id, 'bo@b.test').receipt.pending.state, 'approved');
  });

  await step(`${R}: the evidence an escrow's terms require`, async () => {
    const terms = JSON.stringify({ evidence: { accepts: ['source', 'calculation'] } });
    const q = nyx5(['quote', 'sol@a.test', '--price', '10', '--concept', 'a report', '--contract', 'escrow', '--terms', terms,
      '--house', 'a.test', '--as', 'bo@b.test']);
    nyx5(['accept', JSON.stringify(q.quote), '--as', 'sol@a.test', '--wait', '60']);
    const id = q.quote_id;
    const none = nyx5(['deliver', id, '--house', 'a.test', '--as', 'bo@b.test', '--wait', '60'], { status: 4 });
    assert.match(none, /carries none/);
    const sha = 'ab'.repeat(32);
    const guess = nyx5(['deliver', id, '--evidence-kind', 'inference', '--evidence-sha256', sha, '--house', 'a.test',
      '--as', 'bo@b.test', '--wait', '60'], { status: 4 });
    assert.match(guess, /inference/);
    const ok = nyx5(['deliver', id, '--evidence-kind', 'source', '--evidence-sha256', sha, '--house', 'a.test',
      '--as', 'bo@b.test', '--wait', '60']);
    assert.equal(ok.receipt.contract.state, 'delivered');
    assert.equal(ok.receipt.contract.evidence_kind, 'source');
  });

  await step(`${R}: a subagent's card: a grant alone; an escrow, a spot purchase and the release wait for its parent`, async () => {
    nyx5(['subagent', 'bot', '--as', 'sol@a.test', '--cap', '100', '--authority', '{"level":"autonomous","consequence":"reversible"}']);
    topup('bot.sol@a.test', 80);
    const escrow = nyx5(['quote', 'bot.sol@a.test', '--price', '20', '--concept', 'a report', '--contract', 'escrow', '--house', 'a.test', '--as', 'bo@b.test']);
    const spot = nyx5(['quote', 'bot.sol@a.test', '--price', '15', '--concept', 'a chart', '--house', 'a.test', '--as', 'bo@b.test']);
    const grant = nyx5(['mandate', 'bo@b.test', '--cap', '5', '--as', 'bot.sol@a.test', '--wait', '60']);
    assert.equal(grant.receipt.mandate.state, 'active');
    const waits = nyx5(['accept', JSON.stringify(escrow.quote), '--as', 'bot.sol@a.test', '--wait', '60']);
    assert.equal(waits.receipt.pending.state, 'pending');
    assert.equal(approve(waits.receipt.pending.id).receipt.contract.state, 'held');
    const asked = nyx5(['accept', JSON.stringify(spot.quote), '--as', 'bot.sol@a.test', '--wait', '60']);
    assert.equal(asked.receipt.pending.state, 'pending');
    assert.deepEqual(asked.receipt.pending.awaiting, ['sol@a.test']);
    assert.equal(balance('bot.sol@a.test'), 45);
    assert.equal(approve(asked.receipt.pending.id).receipt.contract.state, 'settled');
    const release = nyx5(['release', escrow.quote_id, '--as', 'bot.sol@a.test', '--wait', '60']);
    assert.equal(release.receipt.pending.state, 'pending');
    assert.equal(approve(release.receipt.pending.id).receipt.contract.state, 'released');
    assert.equal(balance('bot.sol@a.test'), 45);
  });

  await step(`${R}: at b.test an approval nobody decides expires by tick, and its hold returns`, async () => {
    const m = mandate('sol2@b.test', 'bo@b.test', 50, RULE);
    const id = charge(m, 40, 'bo@b.test', 'b.test').receipt.pending.id;
    assert.equal(balance('sol2@b.test', 'b.test'), 60);
    // The house expires approvals at the first tick of each minute of its clock (docs/SPEC.md,
    // issue 36): within about a minute of the end, so the ticks go on for 75 seconds at most.
    let ticks = 0;
    const started = Date.now();
    for (;;) {
      await b.tick();
      ticks += 1;
      const rows = await b.rows(`SELECT state FROM libro_pending WHERE id = '${id}'`);
      if (rows[0].state === 'expired') break;
      assert.ok(Date.now() - started < 75_000, `still ${rows[0].state} after ${ticks} ticks`);
      await sleep(500);
    }
    assert.equal(balance('sol2@b.test', 'b.test'), 100);
    nyx5(['approve', id, '--yes', '--as', 'sol2@b.test', '--house', 'b.test', '--wait', '60'], { status: 4 });
    return `expired after ${ticks} ticks`;
  });

  await step(`${R}: both journals audit; the example app is pinned by a.test's signed catalogue`, async () => {
    for (const h of [a, b]) {
      const audit = nyx5(['libro', 'audit', h.url, '--admin-token', p.tokens[h.domain], '--as', 'sol@a.test']);
      assert.equal(audit.ok, true, `${h.domain}: ${JSON.stringify(audit)}`);
    }
    const app = join(ROOT, 'examples/apps/echo');
    nyx5(['app', 'publish', app, '--house', 'a.test', '--admin-token', p.tokens['a.test'], '--as', 'sol@a.test']);
    assert.equal(nyx5(['app', 'verify', app, '--catalogue', 'a.test', '--as', 'sol@a.test']).ok, true);
    nyx5(['app', 'publish', 'echo', '--remove', '--house', 'a.test', '--admin-token', p.tokens['a.test'], '--as', 'sol@a.test']);
    assert.match(nyx5(['app', 'verify', app, '--catalogue', 'a.test', '--as', 'sol@a.test'], { status: 1 }), /catalogue/);
  });
}

const worker = pair('worker', { 'a.test': PORT(0), 'b.test': PORT(1) });
const serve = pair('serve', { 'a.test': PORT(2), 'b.test': PORT(3) });
const running = [];
let failed = false;
try {
  console.log(`nyx5 authority e2e: two Worker houses, then two nyx5 serve houses; state in ${state}`);
  await step('toolchain: wrangler, the built Worker and the nyx5 command', async () => {
    buildWorkerAndCli();
  });
  for (const [p, make] of [
    [worker, () => [workerHouse(worker, 'a.test'), workerHouse(worker, 'b.test', { NYX5_APPROVAL_SECONDS: '2' })]],
    [serve, () => [serveHouse(serve, 'a.test'), serveHouse(serve, 'b.test', ['--approval-seconds', '2'])]],
  ]) {
    spawnSync('mkdir', ['-p', p.dir]);
    const [a, b] = make();
    running.push(a, b);
    await scenario(p, a, b);
    await Promise.allSettled([a.stop(), b.stop()]);
  }
} catch (e) {
  failed = true;
  console.log('FAIL');
  console.error(`\n${e.stack ?? e}`);
  for (const h of running) console.error(`\n--- last lines of ${h.log}\n${h.tail(40)}`);
} finally {
  await Promise.allSettled(running.map((h) => h.stop()));
}

const total = secs(performance.now() - T0);
if (failed) {
  console.error(`\nnyx5 authority e2e: FAILED after ${total}; logs and state kept in ${state}`);
  process.exit(1);
}
rmSync(state, { recursive: true, force: true });
console.log(`\nnyx5 authority e2e: all ${steps.count} steps passed in ${total} (wall time)`);
