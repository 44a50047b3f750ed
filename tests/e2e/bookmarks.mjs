// Reads from D1's replicas through the Sessions API, and the `nyx5-bookmark` header that lets a
// client read its own writes (docs/SPEC.md "Reading your own writes"; src/adapter/d1.rs). Under
// `wrangler dev` there are no replicas, so this holds the plumbing: a stale-tolerant route's
// answer carries a bookmark, sealed; a request echoing it is served; a malformed one is 400
// `malformed` and a foreign one is ignored; a write's answer carries a bookmark, and a read
// sent with it sees the write.
//
//   node tests/e2e/bookmarks.mjs     (after scripts/build-worker; part of scripts/test)
//
// Ports: free ones, found at start (NYX5_BOOKMARKS_PORT=N fixes them at N and N + 442).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { makeSteps } from '../lib/e2e.mjs';
import { authHeader, b64u, bodyBytes, draftEnvelope, newAgentKeys, random, signEnvelope } from '../lib/nyx5.mjs';
import { ENV, House, ROOT, buildWorkerAndCli, portsFor } from '../lib/wrangler.mjs';

const HEADER = 'nyx5-bookmark';
const PORT = await portsFor('NYX5_BOOKMARKS_PORT', [0, 442]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-bookmarks-'));
const admin = b64u(random(24));
const a = new House({
  domain: 'a.test',
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  vars: { NYX5_ADMIN_TOKEN: admin },
});
const steps = makeSteps(performance.now());
const BIN = process.env.NYX5_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target'), 'debug/nyx5');
const PROFILE = join(state, 'profile.json');

/** `nyx5 ARGS --json` with a.test in its hosts file and no DNS: one process per command. */
function nyx5(args) {
  const r = spawnSync(BIN, [...args, '--json'], {
    encoding: 'utf8',
    env: { ...ENV, NYX5_AGENT: PROFILE, NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off' },
  });
  assert.equal(r.status, 0, `nyx5 ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** A GET (or any body-less request); `bookmark` is sent as the header when given. Answers
 * `{status, json, bookmark, expose}`. */
async function call(method, path, { headers = {}, bookmark } = {}) {
  const h = { ...headers };
  if (bookmark !== undefined) h[HEADER] = bookmark;
  const r = await fetch(a.url + path, { method, headers: h });
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, json, bookmark: r.headers.get(HEADER), expose: r.headers.get('access-control-expose-headers') };
}

/** A POST of canonical JSON, with the bookmark as [`call`] sends it. */
async function post(path, body, headers = {}, bookmark) {
  const h = { 'content-type': 'application/json', ...headers };
  if (bookmark !== undefined) h[HEADER] = bookmark;
  const r = await fetch(a.url + path, { method: 'POST', headers: h, body: bodyBytes(body) });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null, bookmark: r.headers.get(HEADER) };
}

async function as(who, method, path, { body, bookmark } = {}) {
  const { header } = await authHeader(who.keys, { address: who.address, method, path, host: a.host, body });
  if (method === 'POST') return post(path, body, { authorization: header }, bookmark);
  return call(method, path, { headers: { authorization: header }, bookmark });
}

function ok(res, status, what) {
  assert.equal(res.status, status, `${what}: ${res.status} ${JSON.stringify(res.json)?.slice(0, 300)}`);
  return res;
}

/** A sealed bookmark: base64url, no D1 bookmark in sight (D1's read `00000001-00000002-…`). */
function sealed(b, what) {
  assert.ok(b, `${what}: the answer carries ${HEADER}`);
  assert.match(b, /^[A-Za-z0-9_-]{40,380}$/, `${what}: ${b}`);
  assert.doesNotMatch(b, /[0-9a-f]{8}-[0-9a-f]{8}-/, `${what}: the database's bookmark shows through`);
  return b;
}

let failed = false;
try {
  await steps.step('start a.test under wrangler dev', async () => {
    buildWorkerAndCli();
    writeFileSync(join(state, 'hosts.json'), JSON.stringify({ 'a.test': { url: a.url } }));
    await a.migrate();
    await a.start();
  });

  let first;
  await steps.step('a stale-tolerant route answers with a sealed bookmark', async () => {
    const r = ok(await call('GET', '/agents'), 200, 'GET /agents');
    first = sealed(r.bookmark, 'GET /agents');
    assert.equal(r.expose, HEADER, 'browsers may read it');
    const again = ok(await call('GET', '/agents'), 200, 'GET /agents again');
    assert.notEqual(sealed(again.bookmark, 'GET /agents again'), first, 'sealed afresh each answer');
    for (const path of ['/', '/.well-known/agent-card.json']) sealed(ok(await call('GET', path), 200, path).bookmark, path);
  });

  await steps.step('a request echoing it is served, and answered with one', async () => {
    const r = ok(await call('GET', '/agents', { bookmark: first }), 200, 'GET /agents with the bookmark');
    sealed(r.bookmark, 'echoed');
  });

  await steps.step('a malformed bookmark is 400 bad_bookmark; a foreign one is ignored', async () => {
    for (const bad of ['not a bookmark!', '00000001-00000002-00004e2f-0a83ea2fceebc654de0640c422be4653,x', 'A'.repeat(381)]) {
      const r = await call('GET', '/agents', { bookmark: bad });
      assert.equal(r.status, 400, `${bad.slice(0, 40)}: ${r.status}`);
      assert.equal(r.json.error, 'bad_bookmark');
      assert.match(r.json.reason, /nyx5-bookmark/);
    }
    // Well formed, sealed by no key of this house (another house's, or this one's before its
    // domain key changed): read as no bookmark, and the answer hands out one that opens.
    const foreign = b64u(random(12 + 59 + 16));
    const r = ok(await call('GET', '/agents', { bookmark: foreign }), 200, 'a foreign bookmark');
    sealed(r.bookmark, 'after a foreign one');
  });

  await steps.step('a write answers with a bookmark, and a read with it sees the write', async () => {
    const ana = { local: 'ana', address: 'ana@a.test', keys: await newAgentKeys() };
    const reg = ok(
      await post('/agents', { local: 'ana', sig: ana.keys.sig, enc: ana.keys.enc }, { authorization: `Bearer ${admin}` }),
      201,
      'register ana',
    );
    const registered = sealed(reg.bookmark, 'POST /agents');
    const card = ok(await call('GET', '/agents/ana', { bookmark: registered }), 200, 'GET /agents/ana with the bookmark');
    assert.equal(card.json.address, ana.address);
    const env = await signEnvelope(draftEnvelope(ana.address, [ana.address], { media: 'text/plain', body: 'to myself' }), ana.keys);
    const sent = ok(await as(ana, 'POST', '/outbound', { body: env, bookmark: card.bookmark }), 202, 'POST /outbound');
    const after = sealed(sent.bookmark, 'POST /outbound');
    const outbox = ok(await as(ana, 'GET', '/outbox/ana', { bookmark: after }), 200, 'GET /outbox/ana with the bookmark');
    assert.ok(
      outbox.json.envelopes.some((e) => e.id === env.id),
      `the outbox lists the envelope just sent: ${JSON.stringify(outbox.json).slice(0, 300)}`,
    );
    sealed(outbox.bookmark, 'GET /outbox');
    // The send-to-self reaches the mailbox with the delivery kick; the page, read with the
    // newest bookmark, shows it.
    let page;
    let mark = outbox.bookmark;
    for (let i = 0; i < 50; i++) {
      page = ok(await as(ana, 'GET', '/mailbox/ana', { bookmark: mark }), 200, 'GET /mailbox/ana');
      mark = sealed(page.bookmark, 'GET /mailbox');
      if (page.json.envelopes.some((e) => e.envelope.id === env.id)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(page.json.envelopes.some((e) => e.envelope.id === env.id), 'the mailbox page shows the envelope');
  });

  await steps.step('nyx5 send, then nyx5 outbox (two processes): the outbox shows the send', async () => {
    const invite = await post('/invitations', {}, { authorization: `Bearer ${admin}` });
    ok(invite, 201, 'an invitation');
    nyx5(['init', 'cli@a.test', '--house', a.url]);
    nyx5(['register', '--as', 'cli@a.test', '--invite', invite.json.invitation.code]);
    const sent = nyx5(['send', 'cli@a.test', '--body', 'a note to myself', '--as', 'cli@a.test']);
    // The write's bookmark is kept beside the profile, for this house only, sealed.
    const file = `${PROFILE}.bookmarks`;
    assert.ok(existsSync(file), 'the bookmark file beside the profile');
    const kept = JSON.parse(readFileSync(file, 'utf8'));
    assert.equal(kept.kind, 'bookmarks');
    sealed(kept.bookmarks[a.host], 'the kept bookmark');
    const outbox = nyx5(['outbox', '--as', 'cli@a.test']);
    assert.ok(outbox.envelopes.some((e) => e.id === sent.id), `the outbox lists ${sent.id}: ${JSON.stringify(outbox).slice(0, 300)}`);
  });
} catch (e) {
  failed = true;
  console.error(`bookmarks: ${e.stack ?? e}\n--- a.test\n${a.tail()}`);
} finally {
  await a.stop();
}
if (failed) process.exit(1);
rmSync(state, { recursive: true, force: true });
console.log(`bookmarks: ${steps.count} steps passed`);
