// End-to-end: the A2A gateway (issue 39, docs/SPEC.md "A2A gateway") with the official A2A SDKs as
// clients, against a house under `wrangler dev` (workerd, local D1) and a `nyx5 serve` house.
//
// On each house, ana is a listed agent that is offline (nobody reads her mailbox) and bo a Nyx5
// agent with money. For each runtime:
//   1. Both SDKs resolve ana's A2A card and verify its JWS with their own verifiers (JavaScript:
//      `verifyAgentCardSignature` over `jose`; Python: `create_signature_verifier` over PyJWT)
//      against the key set the card's `jku` names.
//   2. Each SDK sends ana a message while she is away: a task in SUBMITTED. She then reads it
//      with `nyx5 inbox` and answers with `nyx5 send a2a@… --plain --type result`; the SDK sees
//      the task COMPLETED with her answer as its artifact.
//   3. A caller that leaves a webhook (A2A push notification config) hears of the task there
//      when it ends, through the house's outbound policy (the operators name the webhook's
//      loopback origin in their hosts files).
//   4. bo pays: ana quotes an escrow arbitrated by `a2a@`, bo accepts it, proves himself with
//      `nyx5 a2a-proof --contract`, and calls through the JavaScript SDK: ana's answer completes
//      the task and releases the escrow to her. Again through the Python SDK with another escrow:
//      ana answers `failed` and bo's money comes back.
//
//   node tests/e2e/a2a.mjs        (scripts/test runs it; needs target/a2a-venv, made there)
//
// Ports: free ones, found at start. Prints each step with its timing; exits 1 on the first failure
// (logs and state kept), 0 when all passed.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { ClientFactory } from '@a2a-js/sdk/client';
import { GetTaskRequest, SendMessageRequest, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent, verifyAgentCardSignature } from '@a2a-js/sdk';

import { b64u, random } from '../lib/nyx5.mjs';
import { makeSteps, secs } from '../lib/e2e.mjs';
import { ENV, House, ROOT, buildWorkerAndCli, portsFor } from '../lib/wrangler.mjs';

const T0 = performance.now();
const PORT = await portsFor('NYX5_A2A_PORT', [0, 1, 2, 442]);
const state = mkdtempSync(join(tmpdir(), 'nyx5-a2a-'));
const urlOf = (port) => `http://127.0.0.1:${port}`;
const PYTHON = process.env.NYX5_A2A_PYTHON ?? join(ROOT, 'target/a2a-venv/bin/python');
const steps = makeSteps(T0);
// The callers' webhook for A2A push notifications: on loopback, so the operators name its origin
// (the outbound policy lets a house reach a private address only then).
const HOOK = urlOf(PORT(2));
const hooked = [];
const hook = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    hooked.push({ token: req.headers['x-a2a-notification-token'], body: JSON.parse(body) });
    res.writeHead(200).end();
  });
});
await new Promise((r) => hook.listen(PORT(2), '127.0.0.1', r));
const step = (title, fn) => steps.step(title, fn);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const worker = {
  domain: 'w.test',
  token: b64u(random(24)),
  url: urlOf(PORT(0)),
};
worker.house = new House({
  domain: worker.domain,
  port: PORT(0),
  inspectorPort: PORT(442),
  stateDir: state,
  vars: {
    NYX5_REGISTRATION: 'admin',
    NYX5_ADMIN_TOKEN: worker.token,
    NYX5_HOSTS: JSON.stringify({ 'hooks.test': { url: `http://127.0.0.1:${PORT(2)}` } }),
  },
});
const serve = { domain: 's.test', token: b64u(random(24)), url: urlOf(PORT(1)) };
writeFileSync(
  join(state, 'hosts.json'),
  JSON.stringify({ [worker.domain]: { url: worker.url }, [serve.domain]: { url: serve.url }, 'hooks.test': { url: HOOK } }),
);

/** `nyx5 ARGS --json` with the houses in its hosts file and no DNS; answers the parsed output. */
function nyx5(args, env = {}) {
  const r = spawnSync(join(ROOT, 'target/debug/nyx5'), [...args, '--json'], {
    encoding: 'utf8',
    env: { ...ENV, NYX5_AGENT: join(state, 'profile.json'), NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off', ...env },
  });
  assert.equal(r.status, 0, `nyx5 ${args.join(' ')} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** The Python SDK's client (tests/e2e/a2a_client.py): one call, its JSON answer. */
function python(args) {
  const r = spawnSync(PYTHON, [join(ROOT, 'tests/e2e/a2a_client.py'), ...args], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, `a2a_client.py ${args.join(' ')} exited ${r.status}: ${r.stdout}${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

/** A key from the house's key set, for the JavaScript SDK's verifier. */
async function keyFrom(kid, jku) {
  const set = await (await fetch(jku)).json();
  const jwk = set.keys.find((k) => k.kid === kid);
  assert.ok(jwk, `no key ${kid} at ${jku}`);
  return globalThis.crypto.subtle.importKey('jwk', jwk, { name: 'Ed25519' }, true, ['verify']);
}

/** The JavaScript SDK's client for `local` at house `h`, from its card. */
async function jsClient(h, local) {
  return new ClientFactory().createFromUrl(`${h.url}/agents/${local}/agent-card.json`, '');
}

/** The state of a task the JavaScript SDK read (TASK_STATE_…). */
const jsState = (task) => Task.toJSON(task).status.state;

/** ana's task envelope for task `id`, read with `nyx5 inbox` as she would. */
function envelopeOf(h, id) {
  const inbox = nyx5(['inbox', '--as', `ana@${h.domain}`]).envelopes;
  const item = inbox.find((e) => e.from === `a2a@${h.domain}` && e.content?.body?.task === id);
  assert.ok(item, `no envelope for task ${id} in ${JSON.stringify(inbox).slice(0, 600)}`);
  assert.equal(item.trust, 'unverified', 'the house wrote it: it is unsigned');
  return item;
}

/** ana answers task `id` with `nyx5 send` (a plain `result` to a2a@), as text or as JSON. */
function answer(h, id, { text, json }) {
  const env = envelopeOf(h, id);
  const args = ['send', `a2a@${h.domain}`, '--plain', '--type', 'result', '--in-reply-to', env.id, '--as', `ana@${h.domain}`];
  if (json) args.push('--media', 'application/a2a-result+json', '--body', JSON.stringify(json));
  else args.push('--body', text);
  nyx5(args);
}

/** Waits until `read()` answers a task in `want`, ticking the Worker meanwhile. */
async function until(h, read, want) {
  let last;
  for (let i = 0; i < 100; i++) {
    last = await read();
    if (last === want) return;
    if (h.house) await h.house.scheduled();
    await sleep(100);
  }
  assert.fail(`the task stayed ${last}, never ${want}`);
}

const balance = (h, who) => nyx5(['balance', '--as', `${who}@${h.domain}`]).balance;

/** ana's escrow for bo at `price`, arbitrated by a2a@, accepted by bo: its id. */
async function escrow(h, price) {
  const q = nyx5([
    'quote', `bo@${h.domain}`, '--price', String(price), '--concept', 'translation', '--contract', 'escrow',
    '--arbiter', `a2a@${h.domain}`, '--as', `ana@${h.domain}`,
  ]);
  nyx5(['accept', JSON.stringify(q.quote), '--as', `bo@${h.domain}`]);
  for (let i = 0; i < 100; i++) {
    if (h.house) await h.house.scheduled();
    const c = spawnSync(join(ROOT, 'target/debug/nyx5'), ['contract', q.quote_id, '--as', `bo@${h.domain}`, '--json'], {
      encoding: 'utf8',
      env: { ...ENV, NYX5_AGENT: join(state, 'profile.json'), NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off' },
    });
    if (c.status === 0 && JSON.parse(c.stdout).state === 'held') return q.quote_id;
    await sleep(100);
  }
  assert.fail(`escrow ${q.quote_id} was never held`);
}

/** bo's A2A message to ana, proved with `nyx5 a2a-proof`, paying with `contract`. */
function provenMessage(h, text, contract) {
  const message = { role: 'ROLE_USER', messageId: `bo-${b64u(random(8))}`, parts: [{ text }] };
  const metadata = nyx5([
    'a2a-proof', `ana@${h.domain}`, '--message', JSON.stringify(message), '--contract', contract, '--as', `bo@${h.domain}`,
  ]);
  return { ...message, metadata };
}

async function flows(h, name) {
  await step(`${name}: ana and bo join; bo gets 100 tokens`, async () => {
    for (const who of ['ana', 'bo']) {
      nyx5(['init', `${who}@${h.domain}`, '--house', h.url]);
      const extra = who === 'ana' ? ['--listed', '--description', 'Translates'] : [];
      nyx5(['register', '--as', `${who}@${h.domain}`, '--admin-token', h.token, ...extra]);
    }
    nyx5(['topup', `bo@${h.domain}`, '100', '--admin-token', h.token, '--as', `bo@${h.domain}`]);
  });

  await step(`${name}: both SDKs verify ana's card (JWS, EdDSA by the domain key)`, async () => {
    const card = await (await fetch(`${h.url}/agents/ana/agent-card.json`)).json();
    await verifyAgentCardSignature(keyFrom)(card);
    const tampered = { ...card, description: 'Not what the house signed' };
    // The SDK logs each signature it rejects: expected here, and kept off the test's output.
    const log = console.debug;
    console.debug = () => {};
    try {
      await assert.rejects(verifyAgentCardSignature(keyFrom)(tampered), 'a changed card does not verify');
    } finally {
      console.debug = log;
    }
    const py = python(['card', h.url, 'ana']);
    assert.equal(py.verified, true);
    assert.equal(py.card.supportedInterfaces[0].protocolBinding, 'JSONRPC');
    return `interface ${card.supportedInterfaces[0].url}`;
  });

  await step(`${name}: the JavaScript SDK calls ana while she is offline; she answers with nyx5`, async () => {
    const client = await jsClient(h, 'ana');
    const sent = await client.sendMessage(
      SendMessageRequest.fromJSON({ message: { role: 'ROLE_USER', messageId: `js-${b64u(random(8))}`, parts: [{ text: 'hola' }] } }),
    );
    const task = Task.toJSON(sent);
    assert.equal(task.status.state, 'TASK_STATE_SUBMITTED');
    answer(h, task.id, { text: 'hello' });
    await until(h, async () => jsState(await client.getTask(GetTaskRequest.fromJSON({ id: task.id }))), 'TASK_STATE_COMPLETED');
    const done = Task.toJSON(await client.getTask(GetTaskRequest.fromJSON({ id: task.id })));
    assert.equal(done.artifacts[0].parts[0].text, 'hello');
    return `task ${task.id} completed`;
  });

  await step(`${name}: both SDKs stream a task (SendStreamingMessage, SSE) until ana completes it`, async () => {
    const client = await jsClient(h, 'ana');
    const message = { role: 'ROLE_USER', messageId: `js-${b64u(random(8))}`, parts: [{ text: 'stream me' }] };
    const events = client.sendMessageStream(SendMessageRequest.fromJSON({ message }))[Symbol.asyncIterator]();
    const first = (await events.next()).value.payload;
    assert.equal(first.$case, 'task');
    const task = Task.toJSON(first.value);
    assert.equal(task.status.state, 'TASK_STATE_SUBMITTED');
    const answered = performance.now();
    answer(h, task.id, { text: 'streamed' });
    if (h.house) await h.house.scheduled();
    const rest = [];
    for (let e = await events.next(); !e.done; e = await events.next()) rest.push(e.value.payload);
    const heard = performance.now() - answered;
    assert.deepEqual(rest.map((e) => e.$case), ['artifactUpdate', 'statusUpdate']);
    const artifact = TaskArtifactUpdateEvent.toJSON(rest[0].value);
    assert.equal(artifact.taskId, task.id);
    assert.equal(artifact.artifact.parts[0].text, 'streamed');
    assert.equal(TaskStatusUpdateEvent.toJSON(rest[1].value).status.state, 'TASK_STATE_COMPLETED');

    // The Python SDK: its stream runs while ana answers; one line per event.
    const py = spawn(PYTHON, [join(ROOT, 'tests/e2e/a2a_client.py'), 'stream', h.url, 'ana', 'stream me too'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    py.stderr.on('data', (d) => (err += d));
    const ended = new Promise((r) => py.on('exit', r));
    const lines = () => out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    const gotFirst = new Promise((resolve, reject) => {
      py.stdout.on('data', (d) => {
        out += d;
        if (out.includes('\n')) resolve();
      });
      py.on('exit', () => reject(new Error(`a2a_client.py stream ended early: ${out}${err}`)));
    });
    await gotFirst;
    const pyTask = lines()[0].task;
    assert.equal(pyTask.status.state, 'TASK_STATE_SUBMITTED');
    answer(h, pyTask.id, { text: 'streamed again' });
    if (h.house) await h.house.scheduled();
    assert.equal(await ended, 0, `a2a_client.py stream: ${out}${err}`);
    const pyEvents = lines();
    assert.deepEqual(pyEvents.map((e) => Object.keys(e)[0]), ['task', 'artifactUpdate', 'statusUpdate']);
    assert.equal(pyEvents[1].artifactUpdate.artifact.parts[0].text, 'streamed again');
    assert.equal(pyEvents[2].statusUpdate.status.state, 'TASK_STATE_COMPLETED');
    return `the JavaScript stream told completion ${Math.round(heard)} ms after ana's answer was sent`;
  });

  await step(`${name}: a caller that left a webhook hears of its task there (A2A push)`, async () => {
    const client = await jsClient(h, 'ana');
    const token = `tok-${b64u(random(6))}`;
    const message = { role: 'ROLE_USER', messageId: `js-${b64u(random(8))}`, parts: [{ text: 'tell me' }] };
    const configuration = { taskPushNotificationConfig: { url: `${HOOK}/a2a`, token } };
    const task = Task.toJSON(await client.sendMessage(SendMessageRequest.fromJSON({ message, configuration })));
    answer(h, task.id, { text: 'told' });
    for (let i = 0; !hooked.some((p) => p.token === token); i++) {
      assert.ok(i < 100, 'the webhook never heard of the task');
      if (h.house) await h.house.scheduled();
      await sleep(100);
    }
    const pushed = hooked.find((p) => p.token === token).body.task;
    assert.equal(pushed.id, task.id);
    assert.equal(pushed.status.state, 'TASK_STATE_COMPLETED');
    assert.equal(pushed.artifacts[0].parts[0].text, 'told');
  });

  await step(`${name}: the Python SDK does the same`, async () => {
    const task = python(['send', h.url, 'ana', 'bonjour']);
    assert.equal(task.status.state, 'TASK_STATE_SUBMITTED');
    answer(h, task.id, { text: 'hello again' });
    await until(h, async () => python(['get', h.url, 'ana', task.id]).status.state, 'TASK_STATE_COMPLETED');
    const done = python(['get', h.url, 'ana', task.id]);
    assert.equal(done.artifacts[0].parts[0].text, 'hello again');
  });

  await step(`${name}: a paid task (JavaScript SDK) releases the escrow when ana completes it`, async () => {
    const contract = await escrow(h, 30);
    assert.equal(balance(h, 'bo'), 70);
    const client = await jsClient(h, 'ana');
    const sent = Task.toJSON(await client.sendMessage(SendMessageRequest.fromJSON({ message: provenMessage(h, 'paid work', contract) })));
    assert.equal(sent.status.state, 'TASK_STATE_SUBMITTED');
    const env = envelopeOf(h, sent.id);
    assert.equal(env.content.body.message.parts[0].text, 'paid work');
    answer(h, sent.id, { text: 'paid answer' });
    await until(h, async () => jsState(await client.getTask(GetTaskRequest.fromJSON({ id: sent.id }))), 'TASK_STATE_COMPLETED');
    for (let i = 0; balance(h, 'ana') === 0; i++) {
      assert.ok(i < 50, 'ana was never paid');
      if (h.house) await h.house.scheduled();
      await sleep(100);
    }
    assert.equal(balance(h, 'ana'), 27, '30 less the house fee');
    return `escrow ${contract} released`;
  });

  await step(`${name}: a paid task (Python SDK) that ana fails refunds bo`, async () => {
    const contract = await escrow(h, 20);
    assert.equal(balance(h, 'bo'), 50);
    const message = provenMessage(h, 'impossible work', contract);
    const sent = python(['send', h.url, 'ana', 'impossible work', JSON.stringify({ messageId: message.messageId, metadata: message.metadata })]);
    answer(h, sent.id, { json: { state: 'failed', text: 'cannot do it' } });
    await until(h, async () => python(['get', h.url, 'ana', sent.id]).status.state, 'TASK_STATE_FAILED');
    for (let i = 0; balance(h, 'bo') !== 70; i++) {
      assert.ok(i < 50, `bo was never refunded (${balance(h, 'bo')})`);
      if (h.house) await h.house.scheduled();
      await sleep(100);
    }
    return `escrow ${contract} refunded`;
  });
}

let failed = false;
let serveChild;
let serveLog = '';
try {
  await step('build the Worker and the CLI', async () => {
    buildWorkerAndCli();
  });
  await step('start w.test under wrangler dev and s.test under nyx5 serve', async () => {
    await worker.house.migrate();
    await worker.house.start();
    const args = ['serve', '--domain', serve.domain, '--db', join(state, 's.db'), '--listen', `127.0.0.1:${PORT(1)}`];
    args.push('--public-url', serve.url, '--registration', 'admin', '--tick-ms', '200', '--hosts', join(state, 'hosts.json'));
    serveChild = spawn(join(ROOT, 'target/debug/nyx5'), args, { env: { ...ENV, NYX5_ADMIN_TOKEN: serve.token }, stdio: ['ignore', 'pipe', 'pipe'] });
    serveChild.stdout.on('data', (d) => (serveLog += d));
    serveChild.stderr.on('data', (d) => (serveLog += d));
    for (let i = 0; !serveLog.includes(`nyx5 serve: ${serve.domain} at`); i++) {
      assert.ok(i < 300, `nyx5 serve never got ready:\n${serveLog}`);
      await sleep(50);
    }
  });
  await flows(worker, 'Worker');
  await flows(serve, 'serve');
} catch (e) {
  failed = true;
  console.log('FAIL');
  console.error(`\n${e.stack ?? e}`);
  console.error(`\n--- last lines of ${worker.house.log}\n${worker.house.tail(40)}`);
  console.error(`\n--- nyx5 serve\n${serveLog.split('\n').slice(-40).join('\n')}`);
} finally {
  await worker.house.stop();
  serveChild?.kill('SIGTERM');
  hook.close();
}

const total = secs(performance.now() - T0);
if (failed) {
  console.error(`\nnyx5 a2a e2e: FAILED after ${total}; logs and state kept in ${state}`);
  process.exit(1);
}
rmSync(state, { recursive: true, force: true });
console.log(`\nnyx5 a2a e2e: all ${steps.count} steps passed in ${total} (wall time)`);
