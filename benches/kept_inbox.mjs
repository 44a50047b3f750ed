// What keeping mail on the agent's side adds to `nyx5 inbox` (issue 38 §1: storing a page of 50
// adds ≤ 20 % to inbox's time), the whole command timed as a user runs it: a release `nyx5 serve`
// on 127.0.0.1 holds 50 sealed envelopes for bo (sent by ana with `nyx5 send`, never
// acknowledged), and each round runs `nyx5 inbox --limit 50 --json` as bo three times, in turn:
// with NYX5_KEPT=off; keeping the page into the store the agent has (50 earlier messages, read
// and acknowledged before, restored from a copy before each run, untimed), so every message of
// the page is new to it; and keeping it into a store deleted just before (the first page an
// agent ever keeps: the store is created). Prints the medians, the 90th percentiles and the
// shares; the goal (the agent's store, as it is once it exists) is printed as met or not, never
// checked.
//
//   node benches/kept_inbox.mjs [rounds]    (after `cargo build --release -p nyx5-cli`)

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { ENV, ROOT, portsFor } from '../tests/lib/wrangler.mjs';

const ROUNDS = Number(process.argv[2] ?? 15);
const PAGE = 50;
const GOAL = 0.2;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const PORT = await portsFor('NYX5_KEPT_PORT', [0]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-kept-'));
const bin = join(ROOT, 'target/release/nyx5');
assert.ok(existsSync(bin), `${bin} is missing: cargo build --release -p nyx5-cli`);
const host = `127.0.0.1:${PORT(0)}`;
const url = `http://${host}`;
const profile = join(state, 'agents.json');
const token = 'kept-bench-operator-token-0123456789';

/** `nyx5 ARGS --json`, one process: its exit code, output and wall time. */
function nyx5(args, env = {}) {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const child = spawn(bin, [...args, '--json'], {
      env: { ...ENV, NYX5_AGENT: profile, NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('close', (code) => resolve({ code, out, err, ms: performance.now() - t0 }));
  });
}

async function ok(args, env) {
  const r = await nyx5(args, env);
  assert.equal(r.code, 0, `nyx5 ${args.join(' ')}: ${r.err}`);
  return r;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.9))];

const args = ['serve', '--domain', 'k.test', '--db', join(state, 'k.db'), '--listen', host, '--public-url', url, '--registration', 'admin'];
const serve = spawn(bin, args, { env: { ...ENV, NYX5_ADMIN_TOKEN: token }, stdio: ['ignore', 'pipe', 'pipe'] });
let log = '';
serve.stdout.on('data', (d) => (log += d));
serve.stderr.on('data', (d) => (log += d));
try {
  for (let i = 0; !log.includes('nyx5 serve: k.test at'); i++) {
    assert.ok(i < 400, `nyx5 serve never got ready:\n${log}`);
    await sleep(50);
  }
  writeFileSync(join(state, 'hosts.json'), JSON.stringify({ 'k.test': { url } }));
  for (const who of ['ana@k.test', 'bo@k.test', 'cy@k.test']) {
    await ok(['init', who, '--house', url]);
    await ok(['register', '--as', who, '--admin-token', token]);
  }
  // A page: 50 sealed envelopes of about a kibibyte of text each.
  const text = 'The figures for the quarter are attached; the supplier asks about the delivery order. ';
  // Each page from its own sender (a sender may send 60 a minute).
  const page = async (sender, env = {}) => {
    const tag = sender.slice(0, 2);
    for (let i = 0; i < PAGE; i++) {
      const body = `${text.repeat(12)}(${tag} ${i})`;
      await ok(['send', '--as', sender, 'bo@k.test', '--body', body, '--thread', `${tag}${i % 10}`], { NYX5_KEPT: 'off' });
    }
    for (let i = 0; ; i++) {
      const r = await ok(['inbox', '--as', 'bo@k.test', '--limit', String(PAGE)], env);
      const list = JSON.parse(r.out).envelopes;
      if (list.length === PAGE) return list;
      assert.ok(i < 200, 'the page never filled');
      await sleep(50);
    }
  };
  const store = `${profile}.mail.db`;
  const files = ['', '-wal', '-shm'];
  // The store as an agent has it: an earlier page, read (kept) and acknowledged; its copy.
  const earlier = await page('ana@k.test');
  await ok(['ack', '--as', 'bo@k.test', ...earlier.map((m) => m.id)]);
  files.forEach((s) => existsSync(`${store}${s}`) && copyFileSync(`${store}${s}`, `${store}.copy${s}`));
  await page('cy@k.test', { NYX5_KEPT: 'off' });
  const forget = () => files.forEach((s) => rmSync(`${store}${s}`, { force: true }));
  const restore = () => {
    forget();
    files.forEach((s) => existsSync(`${store}.copy${s}`) && copyFileSync(`${store}.copy${s}`, `${store}${s}`));
  };
  const times = { off: [], kept: [], fresh: [] };
  const inbox = () => ok(['inbox', '--as', 'bo@k.test', '--limit', String(PAGE)]);
  for (let i = 0; i < ROUNDS + 2; i++) {
    const off = await ok(['inbox', '--as', 'bo@k.test', '--limit', String(PAGE)], { NYX5_KEPT: 'off' });
    restore();
    const kept = await inbox();
    assert.equal(JSON.parse(kept.out).envelopes.length, PAGE);
    forget();
    const fresh = await inbox();
    assert.ok(existsSync(store), 'the page was kept');
    if (i >= 2) {
      times.off.push(off.ms);
      times.kept.push(kept.ms);
      times.fresh.push(fresh.ms);
    }
  }
  // What was kept is all there: a search finds every message of the page.
  restore();
  await inbox();
  const found = JSON.parse((await ok(['find', '--as', 'bo@k.test', 'supplier', '--limit', '500'])).out).found;
  assert.equal(found.length, 2 * PAGE, 'the earlier page and this one');
  const share = median(times.kept) / median(times.off) - 1;
  const first = median(times.fresh) / median(times.off) - 1;
  const line = (name, xs) => `median ${median(xs).toFixed(1)} ms, p90 ${p90(xs).toFixed(1)} ms`;
  console.log(`kept inbox: nyx5 inbox --limit ${PAGE} as a process, ${ROUNDS} rounds against nyx5 serve on 127.0.0.1`);
  console.log(`  not kept:                         ${line('off', times.off)}`);
  console.log(`  kept, a page new to the store:    ${line('kept', times.kept)}: +${(share * 100).toFixed(1)} %`);
  console.log(`  kept, the store made for it:      ${line('fresh', times.fresh)}: +${(first * 100).toFixed(1)} %`);
  console.log(`  keeping a page adds ${(share * 100).toFixed(1)} % to inbox's time: goal ≤ ${GOAL * 100} %, ${share <= GOAL ? 'met' : 'NOT met'}`);
} finally {
  serve.kill();
  rmSync(state, { recursive: true, force: true });
}
