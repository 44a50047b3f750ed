// End-to-end in a real browser (issue 14): a person with only Chromium joins a house under
// `wrangler dev`, talks to an agent the `nyx5` command runs, and sees a deal through, while the
// page's protocol code is the project's Rust compiled to wasm (crates/web, scripts/build-app).
//
//   1. `/` (the engine's home page), then its "Join in the browser" link to `/app`;
//   2. join with an invitation the operator made (keys made in the page, kept in IndexedDB
//      under a passphrase);
//   3. a file bot sends itself with `nyx5 send --attach` (sealed, its parts in R2) and saves with
//      `nyx5 inbox --save`; a sealed message to bot@web.test, which `nyx5 inbox` opens and verifies (and which bot's
//      `nyx5 inbox --follow` prints and its `nyx5 mcp` notifies as it arrives), and bot's
//      reply shown live (no click), verified and acknowledged in the page (the mailbox row gone
//      from D1); mail
//      from a subagent of bot verified through its delegation, and answered sealed to it; a
//      sealed draft of that subagent, held for ana, read and approved in the page;
//   4. a quote from bot accepted in the page, delivered by bot with `nyx5 deliver`, released in
//      the page: the contract's state and both balances checked in the Libro;
//   5. the profile exported from the page works with `nyx5` as it is, and imports back into a
//      fresh browser; the operator registers an agent from the page with its token;
//   6. axe-core over `/` and `/app` (joined and not): no serious or critical violation;
//   7. the same database under `nyx5 serve`: `/`, `/spec`, `/llms.txt`, `/style.css`, the
//      domain card and the A2A cards are the Worker's bytes, and HEAD and OPTIONS answer; the
//      client's files under `nyx5 serve --app` are the Worker's assets, under the same policy.
//
// Every step writes a screenshot to tests/e2e/screens/. The test fails if the page logs an
// error, throws, or a request fails or answers an error status.
//
//   node tests/e2e/browser.mjs        (scripts/test runs it; Chromium is Debian's `chromium`)
//
// Ports: free ones, found at start, for the Worker, nyx5 serve and the inspector (NYX5_BROWSER_PORT=N
// fixes them at N, N + 1, N + 443).

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { b64u, random } from '../lib/nyx5.mjs';
import { call, makeSteps } from '../lib/e2e.mjs';
import { ENV, House, ROOT, WRANGLER, portsFor } from '../lib/wrangler.mjs';

const T0 = performance.now();
const PORT = await portsFor('NYX5_BROWSER_PORT', [0, 1, 443]);
const SERVE_PORT = PORT(1);
const CHROMIUM = process.env.NYX5_CHROMIUM ?? '/usr/bin/chromium';
const SCREENS = join(ROOT, 'tests/e2e/screens');
const state = mkdtempSync(join(tmpdir(), 'nyx5-browser-'));
const token = b64u(random(24));
const DOMAIN = 'web.test';
const PASS = 'correct horse battery';
const house = new House({
  domain: DOMAIN,
  port: PORT(0),
  inspectorPort: PORT(443),
  stateDir: state,
  vars: { NYX5_REGISTRATION: 'invite', NYX5_ADMIN_TOKEN: token },
});
const admin = { authorization: `Bearer ${token}` };
const steps = makeSteps(T0);
const step = (title, fn) => steps.step(title, fn);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function expectStatus(res, status, what) {
  assert.equal(res.status, status, `${what}: expected ${status}, got ${res.status} ${res.text.slice(0, 300)}`);
  return res.json;
}

/** `nyx5 ARGS --json` as bot (or another profile), no DNS; answers the parsed output. */
function nyx5(args, { profile = join(state, 'bot.json') } = {}) {
  const r = spawnSync(join(ROOT, 'target/debug/nyx5'), [...args, '--json'], {
    encoding: 'utf8',
    env: { ...ENV, NYX5_AGENT: profile, NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off' },
  });
  assert.equal(r.status, 0, `nyx5 ${args.join(' ')} exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

/** `nyx5 ARGS` for bot left running (a follower, an MCP server): its output's JSON lines as they
 * come, `line(pred)` to wait for one, `say(obj)` to write one to it, `stop()` to end it. */
function running(args) {
  const child = spawn(join(ROOT, 'target/debug/nyx5'), args, {
    env: { ...ENV, NYX5_AGENT: join(state, 'bot.json'), NYX5_HOSTS: join(state, 'hosts.json'), NYX5_DOH: 'off' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const lines = [];
  let rest = '';
  child.stdout.on('data', (d) => {
    rest += d;
    for (let i = rest.indexOf('\n'); i >= 0; i = rest.indexOf('\n')) {
      lines.push({ at: Date.now(), doc: JSON.parse(rest.slice(0, i)) });
      rest = rest.slice(i + 1);
    }
  });
  return {
    line: (what, pred) => until(what, async () => lines.find((l) => pred(l.doc)) ?? (await sleep(20), null)),
    say: (obj) => child.stdin.write(`${JSON.stringify(obj)}\n`),
    stop: () => child.kill('SIGTERM'),
  };
}

/** Polls `fn` until it answers something truthy. No cron here: mail to this house's own agents
 * is delivered by the kick after each answer. */
async function until(what, fn, { timeoutMs = 20_000 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(300);
  }
}

/** The browser's problems: console errors, page errors, failed requests, error statuses. */
const problems = [];
function watch(page) {
  page.on('console', (m) => {
    // The browser's own line for the watch's 503 above.
    if (m.type() !== 'error' || (/status of 503/.test(m.text()) && /\/mailbox\/[^/?]+\?limit=200/.test(m.location()?.url ?? ''))) return;
    problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}${e.stack ? `\n${e.stack}` : ''}`));
  page.on('requestfailed', (r) => {
    // The live watch's read (held open for mail, or reading past what is shown: `limit=200`)
    // that a lock cancels is the page doing its job.
    if (r.failure()?.errorText === 'net::ERR_ABORTED' && /\/mailbox\/[^/?]+\?limit=200/.test(r.url())) return;
    problems.push(`request failed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.status() < 400) return;
    // The live watch's read (`limit=200`) answered 503 when this script's own `wrangler d1
    // execute` holds local D1's file (SQLITE_BUSY): the watch pauses and reads again, by design.
    if (r.status() === 503 && /\/mailbox\/[^/?]+\?limit=200/.test(r.url())) return;
    problems.push(`answer ${r.status()}: ${r.request().method()} ${r.url()}`);
  });
}

let shot = 0;
async function screen(page, name) {
  shot += 1;
  await page.screenshot({ path: join(SCREENS, `${String(shot).padStart(2, '0')}-${name}.png`), fullPage: true });
}

/** axe-core in the page: the serious and critical violations (none is the pass). */
async function axe(page, what) {
  // Evaluated through the DevTools protocol, which the page's policy does not govern: the page
  // itself still allows no inline script.
  await page.evaluate(readFileSync(join(ROOT, 'node_modules/axe-core/axe.min.js'), 'utf8'));
  const result = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.length, help: v.help }));
  });
  const bad = result.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad, [], `${what}: axe found ${JSON.stringify(bad)}`);
  return `${what}: ${result.length} minor or moderate findings, none serious`;
}

const status = (page) => page.locator('#status').innerText();

let failed = false;
let browser = null;
let serveChild = null;
try {
  console.log(`nyx5 browser e2e: ${DOMAIN} under wrangler dev, Chromium ${CHROMIUM}; state in ${state}`);
  rmSync(SCREENS, { recursive: true, force: true });
  mkdirSync(SCREENS, { recursive: true });

  await step('toolchain: Chromium, playwright-core, the built Worker and client, the nyx5 command', async () => {
    assert.ok(existsSync(CHROMIUM), `no Chromium at ${CHROMIUM}: apt-get install chromium (scripts/setup does)`);
    assert.ok(existsSync(WRANGLER), `wrangler is missing (${WRANGLER}): run ./scripts/setup`);
    const build = spawnSync(join(ROOT, 'scripts/build-worker'), { cwd: ROOT, encoding: 'utf8', env: ENV });
    assert.equal(build.status, 0, `scripts/build-worker failed:\n${build.stdout}\n${build.stderr}`);
    const cli = spawnSync('cargo', ['build', '--locked', '-p', 'nyx5-cli', '--bin', 'nyx5'], { cwd: ROOT, encoding: 'utf8' });
    assert.equal(cli.status, 0, `cargo build nyx5 failed:\n${cli.stderr}`);
    writeFileSync(join(state, 'hosts.json'), JSON.stringify({ [DOMAIN]: { url: house.url } }));
    const sizes = readdirSync(join(ROOT, 'build/site/app/pkg')).filter((f) => f.endsWith('.wasm'));
    assert.deepEqual(sizes, ['nyx5_web_bg.wasm']);
  });

  await step('start the house; bot@web.test registers with nyx5; the operator makes an invitation', async () => {
    await house.migrate();
    await house.start();
    nyx5(['init', `bot@${DOMAIN}`, '--house', house.url]);
    nyx5(['register', '--admin-token', token, '--listed', '--description', 'Answers and sells translations']);
    const inv = expectStatus(await call(house, 'POST', '/invitations', { body: {}, headers: admin }), 201, 'POST /invitations');
    house.invite = inv.invitation.code;
  });

  const { chromium } = await import('playwright-core');
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 420, height: 900 } });
  const page = await context.newPage();
  watch(page);

  await step('the home page names the house and bot, and its join link opens the client', async () => {
    await page.goto(`${house.url}/`);
    assert.equal(await page.locator('h1').innerText(), DOMAIN);
    assert.ok((await page.locator('main').innerText()).includes(`bot@${DOMAIN}`));
    await screen(page, 'home');
    const note = await axe(page, '/');
    await page.getByRole('link', { name: 'Join in the browser' }).click();
    await page.locator('#join').waitFor({ state: 'visible' });
    assert.match(await status(page), /Ready: web\.test/);
    await screen(page, 'join');
    return note;
  });

  await step('join with the invitation: keys made in the page, the card certified by the house', async () => {
    const note = await axe(page, '/app (not joined)');
    const form = page.locator('#join-form');
    await form.getByLabel('Name').fill('ana');
    await form.getByLabel('Invitation code').fill(house.invite);
    await form.getByLabel('Passphrase').fill(PASS);
    await page.getByRole('button', { name: 'Make keys and join' }).click();
    await page.locator('#agent').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#me').innerText(), `ana@${DOMAIN}`);
    const card = expectStatus(await call(house, 'GET', '/agents/ana'), 200, 'GET /agents/ana');
    const [rows] = await house.d1(`SELECT used FROM invitations WHERE code = '${house.invite}'`);
    assert.equal(rows[0].used, 1, 'the invitation was used once');
    assert.ok(card.sig && card.enc, 'ana has keys of her own');
    await screen(page, 'joined');
    return note;
  });

  let sent = null;
  await step('bot sends itself a sealed file: nyx5 send --attach keeps it in R2, nyx5 inbox --save opens it', async () => {
    const file = join(state, 'numbers.bin');
    const bytes = Buffer.concat([Buffer.from('QUARTERLY '), Buffer.alloc(1024 * 1024 + 3000).map((_, i) => (i * 7) % 251)]);
    writeFileSync(file, bytes);
    const sent = nyx5(['send', `bot@${DOMAIN}`, '--body', 'the numbers', '--attach', file]);
    const dir = join(state, 'saved');
    const read = await until('the file in bot’s mailbox', async () =>
      nyx5(['inbox', '--save', dir]).envelopes?.find((m) => m.id === sent.id && m.saved?.length === 1),
    );
    assert.deepEqual(readFileSync(join(dir, 'numbers.bin')), bytes, 'the very bytes, through R2 and back');
    assert.equal(read.content.attachments.length, 1);
    // D1 keeps what the house knows of it: the sealed size (the file and its tag), both parts stored.
    const [rows] = await house.d1(`SELECT bytes, parts, got FROM attachments WHERE owner = 'bot'`);
    assert.deepEqual(rows.map((r) => [r.bytes, r.parts, r.got]), [[bytes.length + 16, 2, 3]]);
    nyx5(['ack', sent.id]);
    return `${bytes.length} bytes in 2 parts, sealed and read back (Worker, R2 under wrangler dev)`;
  });

  await step('ana sends bot a sealed message; nyx5 inbox --follow shows it, verified, and nyx5 mcp tells its subscriber', async () => {
    // bot follows its mailbox, and an MCP client of bot's subscribes to its inbox: both wait.
    const follower = running(['inbox', '--follow', '--json']);
    const mcp = running(['mcp']);
    mcp.say({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'e2e', version: '1' } } });
    await mcp.line('the MCP server initialized', (d) => d.id === 1);
    mcp.say({ jsonrpc: '2.0', id: 2, method: 'resources/subscribe', params: { uri: 'nyx5://inbox' } });
    await mcp.line('the inbox subscribed', (d) => d.id === 2 && d.result);
    await sleep(1000);
    await page.getByLabel('To', { exact: true }).fill(`bot@${DOMAIN}`);
    await page.getByLabel('Message', { exact: true }).fill('Hola bot, ¿traduces esto?');
    await page.getByRole('button', { name: 'Seal and send' }).click();
    await until('the send', async () => /Sent, sealed/.test(await status(page)));
    const msg = await until('the message in bot’s mailbox', async () => {
      const box = nyx5(['inbox']);
      return box.envelopes?.find((m) => m.from === `ana@${DOMAIN}`);
    });
    assert.equal(msg.trust, 'verified');
    assert.equal(msg.sealed, true);
    assert.equal(msg.content.body, 'Hola bot, ¿traduces esto?');
    sent = msg;
    const followed = await follower.line('the message printed by the follower', (d) => d.id === msg.id);
    assert.equal(followed.doc.trust, 'verified');
    assert.equal(followed.doc.content.body, 'Hola bot, ¿traduces esto?');
    const told = await mcp.line('the MCP notification', (d) => d.method === 'notifications/resources/updated');
    assert.equal(told.doc.params.uri, 'nyx5://inbox');
    follower.stop();
    mcp.stop();
    await screen(page, 'sent');
    const received = Date.parse(msg.received);
    return `arrival → follower printed ${followed.at - received} ms, → MCP notified ${told.at - received} ms (Worker under wrangler dev)`;
  });

  await step('bot replies; the page shows it as it arrives (live, no click), verified; ana acknowledges it', async () => {
    await until('the page following its mailbox', async () => /^Live:/.test(await page.locator('#live').innerText()));
    nyx5(['send', `ana@${DOMAIN}`, '--body', 'Sí: send me the text.', '--in-reply-to', sent.id]);
    const sentAt = Date.now();
    nyx5(['ack', sent.id]);
    // Nobody clicks "Check mail": the page's read held open at the house answers with the reply.
    await page.locator('article.message').waitFor({ timeout: 20_000 });
    const live = Date.now() - sentAt;
    assert.equal(await page.locator('article.message').count(), 1);
    const article = page.locator('article.message');
    assert.match(await article.innerText(), /Sí: send me the text\./);
    assert.match(await article.innerText(), /signature verified/);
    await screen(page, 'reply');
    await article.getByRole('button', { name: 'Acknowledge' }).click();
    await until('the mailbox empty', async () => /No mail waiting/.test(await page.locator('#inbox').innerText()));
    // Waiting: above zero and above the mailbox's watermark (migration 0020).
    const [rows] = await house.d1(
      "SELECT count(*) AS n FROM mailbox WHERE local = 'ana' AND seq > 0 AND seq & 1073741823 > " +
        "coalesce((SELECT u.acked_through FROM mailbox_usage AS u WHERE u.local = 'ana'), 0)",
    );
    assert.equal(rows[0].n, 0, 'the acknowledged envelope left the mailbox');
    return `the reply showed ${live} ms after \`nyx5 send\` returned (Worker under wrangler dev, Chromium)`;
  });

  await step('kept mail: ana searches and threads what she sent and read, sealed in IndexedDB, kept past a lock', async () => {
    const kept = page.locator('#kept article.kept');
    const search = async (words, n) => {
      await page.getByLabel('Search your mail', { exact: true }).fill(words);
      await page.getByRole('button', { name: 'Search', exact: true }).click();
      await until(`the search for ${words}`, async () => (await kept.count()) === n && /found/.test(await status(page)));
    };
    // Folded as the command's index folds: case and accents.
    await search('TRADUCES', 1);
    assert.match(await kept.innerText(), /¿traduces esto\?/);
    assert.match(await kept.innerText(), /You, to bot@/);
    await kept.getByRole('button', { name: 'Thread' }).click();
    await until('the thread', async () => (await kept.count()) === 2);
    const [first, second] = await kept.allInnerTexts();
    assert.match(first, /traduces/, 'hers first');
    assert.match(second, /Sí: send me the text\./);
    assert.match(second, /signature verified/);
    await screen(page, 'kept-thread');
    // What IndexedDB holds: per message a keyed hash of its id, one of the agent, and the sealed
    // record; no word of the mail or its people, and nothing one row shares with another but
    // the agent (the hostile review of kept mail: hashes of words compared across rows).
    const raw = await page.evaluate(async () => {
      const db = await new Promise((ok, no) => {
        const r = indexedDB.open('nyx5');
        r.onsuccess = () => ok(r.result);
        r.onerror = () => no(r.error);
      });
      const rows = await new Promise((ok, no) => {
        const r = db.transaction('mail').objectStore('mail').getAll();
        r.onsuccess = () => ok(r.result);
        r.onerror = () => no(r.error);
      });
      const latin1 = (b) => new TextDecoder('latin1').decode(b);
      return JSON.stringify(rows.map((row) => ({ ...row, iv: latin1(row.iv), data: latin1(row.data), size: row.data.byteLength })));
    });
    const rows = JSON.parse(raw);
    assert.equal(rows.length, 2, 'her message and the reply');
    for (const row of rows) {
      assert.deepEqual(Object.keys(row).sort(), ['a', 'data', 'iv', 'k', 'size']);
      assert.equal((row.size - 16) % 1024, 0, 'padded to whole kibibytes');
    }
    assert.equal(rows[0].a, rows[1].a);
    assert.notEqual(rows[0].k, rows[1].k);
    assert.doesNotMatch(raw, /traduces|send me the text|bot@|ana@|web\.test/i);
    // Kept past a lock: unlocked again, the same search finds it; the empty search lists all.
    await page.getByRole('button', { name: 'Lock' }).click();
    await page.locator('#unlock-form').getByLabel('Passphrase').fill(PASS);
    await page.getByRole('button', { name: 'Unlock' }).click();
    await until('unlocked', async () => page.locator('#agent').isVisible());
    await search('traduces', 1);
    await search('', 2);
    // Forgotten: gone from the browser's store.
    await kept.filter({ hasText: 'Sí: send me the text' }).getByRole('button', { name: 'Forget' }).click();
    await until('forgotten', async () => /Forgotten/.test(await status(page)));
    await search('', 1);
  });

  await step('a subagent of bot writes; the page verifies it through its delegation and seals the answer to it', async () => {
    nyx5(['subagent', 'desk']);
    const sub = `desk.bot@${DOMAIN}`;
    nyx5(['send', `ana@${DOMAIN}`, '--body', 'From bot’s desk.', '--as', sub]);
    await until('the subagent’s mail in the page', async () => {
      await page.getByRole('button', { name: 'Check mail' }).click();
      await sleep(200);
      return (await page.locator('article.message').count()) === 1;
    });
    const article = page.locator('article.message');
    assert.match(await article.innerText(), new RegExp(`${sub.replace('.', '\\.')}[^]*signature verified`));
    await screen(page, 'subagent');
    await article.getByRole('button', { name: 'Reply' }).click();
    await page.getByLabel('Message', { exact: true }).fill('Thanks, desk.');
    await page.getByRole('button', { name: 'Seal and send' }).click();
    await until('the send', async () => /Sent, sealed/.test(await status(page)));
    const got = await until('ana’s answer in the subagent’s mailbox', async () =>
      nyx5(['inbox', '--as', sub]).envelopes?.find((m) => m.from === `ana@${DOMAIN}`),
    );
    assert.equal(got.trust, 'verified');
    assert.equal(got.content.body, 'Thanks, desk.');
    await article.getByRole('button', { name: 'Acknowledge' }).click();
    await until('the mailbox empty again', async () => /No mail waiting/.test(await page.locator('#inbox').innerText()));
  });

  await step('bot holds its desk for ana; ana reads the sealed draft in the page and lets it leave', async () => {
    const sub = `desk.bot@${DOMAIN}`;
    // The operator's hold: ana is not above the desk, and only the operator names her unasked.
    nyx5(['hold', 'set', '--for', 'desk.bot', '--approver', `ana@${DOMAIN}`, '--all', '--admin-token', token]);
    const held = nyx5(['send', `bot@${DOMAIN}`, '--body', 'Only with ana’s yes.', '--as', sub]);
    assert.equal(held.status, 'held', 'the house keeps it; nyx5 wrapped its key for ana');
    const draft = page.locator('#drafts article.message');
    await until('the draft in the page', async () => {
      await page.getByRole('button', { name: 'Check mail' }).click();
      await sleep(200);
      return (await draft.count()) === 1;
    });
    assert.match(await draft.innerText(), /Only with ana’s yes\./, 'opened in the page with the key wrapped for ana');
    assert.match(await draft.innerText(), /pending/);
    assert.equal(nyx5(['inbox']).envelopes?.some((m) => m.id === held.id), false, 'nothing reached bot yet');
    await screen(page, 'draft');
    await draft.getByRole('button', { name: 'Approve' }).click();
    await until('approved', async () => /Approved/.test(await status(page)));
    const got = await until('the approved mail in bot’s mailbox', async () =>
      nyx5(['inbox']).envelopes?.find((m) => m.id === held.id),
    );
    assert.equal(got.content.body, 'Only with ana’s yes.');
    assert.equal(got.from, sub);
    nyx5(['ack', held.id]);
    nyx5(['hold', 'lift', '--for', 'desk.bot', '--admin-token', token]);
  });

  let contract = null;
  await step('bot quotes an escrow; ana accepts it in the page and the Libro holds her tokens', async () => {
    expectStatus(await call(house, 'POST', '/libro/topup', { body: { address: `ana@${DOMAIN}`, amount: 100 }, headers: admin }), 200, 'topup');
    const q = nyx5(['quote', `ana@${DOMAIN}`, '--price', '30', '--concept', 'a translation', '--contract', 'escrow']);
    contract = q.quote?.id ?? q.id;
    await until('the quote in the page', async () => {
      await page.getByRole('button', { name: 'Check mail' }).click();
      await sleep(200);
      return (await page.getByRole('button', { name: 'Accept quote' }).count()) === 1;
    });
    await screen(page, 'quote');
    await page.getByRole('button', { name: 'Accept quote' }).click();
    await until('the contract held', async () => nyx5(['contract', contract]).state === 'held');
    await page.getByRole('button', { name: 'Check mail' }).click();
    await until('the contract in the page', async () => /held/.test(await page.locator('#contracts').innerText()));
    assert.equal(await page.locator('#balance').innerText(), '70');
    await screen(page, 'held');
  });

  await step('bot delivers with nyx5; ana releases the escrow in the page; the Libro pays bot', async () => {
    nyx5(['deliver', contract, '--evidence-sha256', 'ab'.repeat(32), '--note', 'done']);
    await until('the delivery in the page', async () => {
      await page.getByRole('button', { name: 'Check mail' }).click();
      await sleep(200);
      return /delivered/.test(await page.locator('#contracts').innerText());
    });
    await page.getByRole('button', { name: 'Release escrow' }).click();
    await until('the release', async () => nyx5(['contract', contract]).state === 'released');
    await page.getByRole('button', { name: 'Check mail' }).click();
    await until('released in the page', async () => /released/.test(await page.locator('#contracts').innerText()));
    const bot = nyx5(['balance']);
    assert.ok(bot.balance > 0 && bot.balance < 30, `bot is paid less the house's fee: ${JSON.stringify(bot)}`);
    await screen(page, 'released');
    return `bot's balance ${bot.balance}`;
  });

  await step('axe-core over the joined client: no serious violation', async () => axe(page, '/app (joined)'));

  await step('the exported profile works with nyx5 and imports into a fresh browser', async () => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export profile' }).click()]);
    const file = join(state, 'ana.json');
    await download.saveAs(file);
    // nyx5 signs with the exported keys: the house answers ana's own mailbox, and the Libro's
    // receipts in it open and verify.
    const box = nyx5(['inbox'], { profile: file });
    assert.equal(box.agent, `ana@${DOMAIN}`);
    assert.ok(box.envelopes.length > 0 && box.envelopes.every((e) => e.trust === 'verified'), JSON.stringify(box).slice(0, 400));
    const fresh = await browser.newContext();
    const p2 = await fresh.newPage();
    watch(p2);
    await p2.goto(`${house.url}/app/`);
    await p2.locator('#join').waitFor({ state: 'visible' });
    await p2.getByLabel('Profile file (agents.json)').setInputFiles(file);
    await p2.getByLabel('New passphrase for this browser').fill('another passphrase');
    await p2.getByRole('button', { name: 'Import' }).click();
    await p2.locator('#agent').waitFor({ state: 'visible' });
    assert.equal(await p2.locator('#me').innerText(), `ana@${DOMAIN}`);
    await screen(p2, 'imported');
    // Locked and unlocked again from IndexedDB with the new passphrase.
    await p2.getByRole('button', { name: 'Lock' }).click();
    await p2.locator('#unlock-form').getByLabel('Passphrase').fill('another passphrase');
    await p2.getByRole('button', { name: 'Unlock' }).click();
    await p2.locator('#agent').waitFor({ state: 'visible' });
    await fresh.close();
  });

  await step('the operator joins an agent from the browser with its token, no invitation needed', async () => {
    const ctx = await browser.newContext();
    const p3 = await ctx.newPage();
    watch(p3);
    await p3.goto(`${house.url}/app/`);
    await p3.locator('#join').waitFor({ state: 'visible' });
    const form = p3.locator('#join-form');
    await form.getByLabel('Name').fill('desk');
    await form.getByText('I run this house').click();
    await form.getByLabel('Operator token').fill(token);
    await form.getByLabel('Passphrase').fill(PASS);
    await form.getByRole('button', { name: 'Make keys and join' }).click();
    await p3.locator('#agent').waitFor({ state: 'visible' });
    assert.equal(await p3.locator('#me').innerText(), `desk@${DOMAIN}`);
    await screen(p3, 'operator');
    assert.equal(await form.getByLabel('Operator token').inputValue(), '', 'the token is not kept in the page');
    expectStatus(await call(house, 'GET', '/agents/desk'), 200, 'GET /agents/desk');
    const [rows] = await house.d1(`SELECT used FROM invitations WHERE code = '${house.invite}'`);
    assert.equal(rows[0].used, 1, 'no invitation was spent');
    await ctx.close();
  });

  await step('no console error, page error, failed request or error answer in the whole run', async () => {
    assert.deepEqual(problems, []);
    return `${shot} screenshots in tests/e2e/screens`;
  });

  const paths = ['/', '/style.css', '/favicon.svg', '/.well-known/nyx5.json', '/.well-known/agent-card.json', '/agents/bot/agent-card.json'];
  const worker = {};
  // The client's files: static assets on the Worker, `--app` on nyx5 serve.
  const APP = ['/app/', '/app/app.js', '/app/pkg/nyx5_web.js', '/app/pkg/nyx5_web_bg.wasm'];
  // The protocol pages: static assets on the Worker (tagged by the platform), the engine's own
  // under nyx5 serve; the same bytes under the same headers, each runtime with its own tag.
  const DOCS = ['/spec', '/llms.txt'];
  const DOC_HEADERS = ['content-type', 'content-security-policy', 'referrer-policy', 'cache-control', 'access-control-allow-origin', 'x-content-type-options'];
  const docHeaders = (r) => DOC_HEADERS.map((h) => `${h}: ${r.headers.get(h)}`).join('\n');
  await step('the Worker: pages, HEAD and a preflight', async () => {
    for (const p of paths) {
      const r = await fetch(house.url + p);
      assert.equal(r.status, 200, p);
      worker[p] = { bytes: Buffer.from(await r.arrayBuffer()), type: r.headers.get('content-type'), etag: r.headers.get('etag') };
      const h = await fetch(house.url + p, { method: 'HEAD' });
      assert.equal(h.status, 200, `HEAD ${p}`);
      assert.equal((await h.arrayBuffer()).byteLength, 0);
    }
    const o = await fetch(`${house.url}/outbound`, { method: 'OPTIONS', headers: { origin: 'https://elsewhere.test', 'access-control-request-method': 'POST' } });
    assert.equal(o.status, 204);
    assert.equal(o.headers.get('access-control-allow-origin'), '*');
    for (const p of DOCS) {
      const r = await fetch(house.url + p);
      assert.equal(r.status, 200, p);
      worker[p] = { bytes: Buffer.from(await r.arrayBuffer()), headers: docHeaders(r) };
      const again = await fetch(house.url + p, { headers: { 'if-none-match': r.headers.get('etag') } });
      assert.equal(again.status, 304, `${p} with its tag`);
    }
    for (const p of APP) {
      const r = await fetch(house.url + p);
      assert.equal(r.status, 200, p);
      assert.match(r.headers.get('content-security-policy') ?? '', /script-src 'self' 'wasm-unsafe-eval'/, p);
      worker[p] = { bytes: Buffer.from(await r.arrayBuffer()), csp: r.headers.get('content-security-policy') };
    }
  });

  await step('the same D1 database under nyx5 serve answers the same bytes', async () => {
    await house.stop();
    const dir = join(house.persist, 'v3/d1/miniflare-D1DatabaseObject');
    const db = readdirSync(dir).filter((f) => f.endsWith('.sqlite') && f !== 'metadata.sqlite');
    assert.equal(db.length, 1, `one D1 database in ${dir}`);
    serveChild = spawn(
      join(ROOT, 'target/debug/nyx5'),
      ['serve', '--domain', DOMAIN, '--db', join(dir, db[0]), '--listen', `127.0.0.1:${SERVE_PORT}`, '--public-url', house.url, '--registration', 'invite', '--app', join(ROOT, 'build/site')],
      { env: { ...ENV, NYX5_ADMIN_TOKEN: token }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let log = '';
    serveChild.stdout.on('data', (d) => (log += d));
    serveChild.stderr.on('data', (d) => (log += d));
    const served = { url: `http://127.0.0.1:${SERVE_PORT}` };
    await until('nyx5 serve', async () => (await call(served, 'GET', '/health').catch(() => ({}))).status === 200, { timeoutMs: 10_000 }).catch((e) => {
      throw new Error(`${e.message}\n${log}`);
    });
    const differ = [];
    for (const p of paths) {
      const r = await fetch(served.url + p);
      const bytes = Buffer.from(await r.arrayBuffer());
      if (r.status !== 200 || !bytes.equals(worker[p].bytes) || r.headers.get('content-type') !== worker[p].type || r.headers.get('etag') !== worker[p].etag) {
        differ.push(`${p}: ${r.status} ${bytes.length} bytes against the Worker's ${worker[p].bytes.length}`);
      }
    }
    for (const p of DOCS) {
      const r = await fetch(served.url + p);
      const bytes = Buffer.from(await r.arrayBuffer());
      if (r.status !== 200 || !bytes.equals(worker[p].bytes) || docHeaders(r) !== worker[p].headers) {
        differ.push(`${p}: ${r.status} ${bytes.length} bytes against the Worker's ${worker[p].bytes.length}, headers\n${docHeaders(r)}\nagainst\n${worker[p].headers}`);
      }
    }
    for (const p of APP) {
      const r = await fetch(served.url + p);
      const bytes = Buffer.from(await r.arrayBuffer());
      if (r.status !== 200 || !bytes.equals(worker[p].bytes) || r.headers.get('content-security-policy') !== worker[p].csp) {
        differ.push(`${p}: ${r.status} ${bytes.length} bytes, policy ${r.headers.get('content-security-policy')}`);
      }
    }
    assert.deepEqual(differ, []);
    return `${paths.length} documents byte for byte and tag for tag, the ${DOCS.length} protocol pages byte for byte and header for header, and the client's ${APP.length} files under one policy`;
  });
} catch (e) {
  failed = true;
  console.log(`FAILED\n${e.stack ?? e}`);
  console.log(`--- ${DOMAIN} log (last lines) ---\n${house.tail(40)}`);
  if (problems.length) console.log(`--- browser problems ---\n${problems.join('\n')}`);
} finally {
  await browser?.close().catch(() => {});
  serveChild?.kill('SIGTERM');
  await house.stop().catch(() => {});
}
console.log(failed ? `\nbrowser e2e: FAILED after ${steps.count} steps (state kept in ${state})` : `\nbrowser e2e: ${steps.count} steps passed`);
if (!failed) rmSync(state, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
