// The hostile-input sweep (issue 12 §3): every route of a running house, driven with requests
// that must all be refused — JSONTestSuite's `n_` files and the big list of naughty strings in
// every string member, path segment and query parameter, wrong types in every member, oversize
// and deeply nested bodies, invalid UTF-8, truncated and slow bodies, duplicate and conflicting
// framing headers, and tokens replayed or aimed at other paths, methods, hosts and agents.
//
// One case generator serves both runtimes: `nyx5 serve` (started here on a SQLite file) and the
// built Worker under `wrangler dev` (local D1). Every answer must be a 4xx in the one JSON error
// shape (`{ok:false, code, error, reason}`, the code as the status), within a deadline: a 5xx, a
// hang or a success fails the sweep. Every table of the database is dumped (all rows, with
// `sqlite3 .dump`) before and after and must be equal, except for one write that is right: the
// `nonces` row of each token the sweep signed validly (an authenticated request spends its
// token before its body is judged, so the same token cannot be tried again); only rows whose
// nonce the sweep made are allowed, any other change fails.
//
// Valid requests are not part of the sweep: a request carrying a hostile value is kept refused by
// a "poison" the route checks after the value (another owner's resource, an id already used for
// other content, an unsigned registration, a bad envelope signature, an invalid sibling
// parameter), so the value is parsed and judged before the refusal.
//
// The route table below is checked against `crates/house/src/router.rs` (and the Worker's own
// routes in `src/adapter/mod.rs`): a route added there without a sweep entry fails the sweep.
//
//   node tests/e2e/sweep.mjs [serve|worker|all]     (default all; scripts/test runs it)
//   NYX5_SWEEP_ONLY='\[framing\] bad chunk' node tests/e2e/sweep.mjs worker   (a subset, to replay)
//
// `nyx5 serve` is `$NYX5_BIN`, else `${CARGO_TARGET_DIR:-target}/debug/nyx5`; the Worker is
// `build/` (scripts/build-worker). `sqlite3` (the command-line shell) reads the databases.
// Prints the cases per route and family for each runtime; exits 1 on the first runtime whose
// sweep fails, listing the failures.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { authHeader, b64u, canon, draftEnvelope, newAgentKeys, random, registrationBody, signEnvelope } from '../lib/nyx5.mjs';
import { House as WranglerHouse, ROOT, freePorts } from '../lib/wrangler.mjs';

const T0 = performance.now();
const secs = (ms) => `${(ms / 1000).toFixed(1)}s`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Every request's deadline: no answer by then is a hang, and a failure. */
const DEADLINE_MS = 15_000;
/** Requests in flight at once. */
const PARALLEL = 6;
/** Naughty strings per string member, parameter or segment (the list is covered across them). */
const NAUGHTY_PER_FIELD = 12;
/** The Worker's and serve's cap on a request body (2 × MAX_ENVELOPE_BYTES), and a document's. */
const MAX_REQUEST_BYTES = 2 * 1024 * 1024;
const MAX_DOCUMENT_BYTES = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// Vectors.

const VECTORS = join(ROOT, 'tests/vectors/json');
const N_DIR = join(VECTORS, 'JSONTestSuite/test_parsing');
const N_FILES = readdirSync(N_DIR)
  .filter((f) => f.startsWith('n_') && f.endsWith('.json'))
  .sort()
  .map((f) => ({ name: f, bytes: readFileSync(join(N_DIR, f)) }));
const NAUGHTY = JSON.parse(readFileSync(join(VECTORS, 'big-list-of-naughty-strings/blns.json'), 'utf8'));
if (N_FILES.length !== 188) throw new Error(`expected 188 JSONTestSuite n_ files, found ${N_FILES.length}`);
if (NAUGHTY.length !== 515) throw new Error(`expected 515 naughty strings, found ${NAUGHTY.length}`);

let naughtySlot = 0;
/** The next NAUGHTY_PER_FIELD naughty strings: consecutive slots walk the whole list. */
function naughtySample() {
  const out = [];
  for (let i = 0; i < NAUGHTY_PER_FIELD; i++) out.push(NAUGHTY[(naughtySlot * NAUGHTY_PER_FIELD + i) % NAUGHTY.length]);
  naughtySlot += 1;
  return out;
}
const naughtyUsed = new Set();

/** JSON values of every type, for members of another type. */
const WRONG = [null, true, false, 0, -1, 1.5, 2 ** 53, -(2 ** 63), 1e300, '', 'x', [], ['x'], [1], {}, { a: 1 }];
/** What `nyx5_proto::address::check_id` accepts. */
const WELL_FORMED_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);

// ---------------------------------------------------------------------------------------------
// The routes. Each entry names what makes its requests refused (`poison`) and where hostile
// values go: `strings` (members of `body`, a path as `a.b.0`, or several paths set together),
// `members` (wrong types), `segments` (path parameters), `queries` (with the poison that keeps
// each refused). `auth`: 'agent' (a valid token by ana for the exact request), 'admin' (the
// operator's bearer token) or 'none'. `optional` members take null as "absent", so null is no
// wrong type for them.

const HOUSE = 'sweep.test';
/** Routes that speak JSON-RPC (the A2A gateway): their refusals carry the error shape inside. */
const RPC_ROUTES = new Set(['POST /agents/:local/a2a']);
const ids = {
  topup: '6f1f2c8a-1c7e-4d6b-9d3e-0a1b2c3d4e5f',
  email: '0b7e6d1c-2a3b-4c5d-8e9f-1a2b3c4d5e6f',
  contract: '9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d',
  envelope: '1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f',
  task: 'sweep-task',
};
/** The test of the setup's task (`POST /tareas`). */
const TASK_VERIFY = [{ type: 'sha256', url: 'https://work.example/{contract}', expect: '0'.repeat(64) }];
// The example App Card with its name changed after signing: a card no catalogue lists, whatever
// else a request says.
const FORGED_CARD = { ...JSON.parse(readFileSync(join(ROOT, 'examples/apps/echo/app.json'), 'utf8')), name: 'Not the echo' };

function routes(ctx) {
  const { ana, bo, stranger } = ctx;
  const future = new Date(Date.now() + 30 * 86_400_000).toISOString();
  return [
    { m: 'GET', p: '/.well-known/nyx5.json', auth: 'none', poison: { method: 'PUT' } },
    { m: 'GET', p: '/health', auth: 'none', poison: { method: 'DELETE' } },
    {
      m: 'GET',
      p: '/agents',
      auth: 'none',
      poison: { query: { offset: '-1' } },
      queries: [
        ['limit', { offset: '-1' }],
        ['offset', { limit: '-1' }],
        ['q', { offset: '-1' }],
        ['accepts', { limit: '101' }],
        ['capability', { offset: 'x' }],
      ],
    },
    {
      // Ana's own card, with her token, but unsigned: 403 after every member is read.
      m: 'POST',
      p: '/agents',
      auth: 'agent',
      // A spent owner token is answered as for anyone else's: the name is taken.
      replayExpect: 409,
      body: {
        local: 'ana',
        sig: stranger.sig,
        enc: stranger.enc,
        capabilities: { description: 'x', listed: true },
        inbox: { policy: 'open' },
        valid_until: future,
        webhook: 'https://hooks.example/x',
        invite: 'deadbeef',
        drop_previous: [bo.keys.sig],
        reset: false,
      },
      optional: ['enc', 'capabilities', 'inbox', 'valid_until', 'webhook', 'invite', 'drop_previous'],
      strings: ['local', 'sig', 'enc', 'valid_until', 'webhook', 'invite', 'drop_previous.0', 'capabilities.description', 'inbox.policy'],
      extraStrings: ['signature', 'ts'],
    },
    { m: 'GET', p: '/agents/:local', fill: { local: 'nobody' }, auth: 'none', segments: ['local'] },
    { m: 'GET', p: '/agents/:local/settings', fill: { local: 'bo' }, auth: 'agent', segments: ['local'] },
    { m: 'GET', p: '/agents/:local/historial', fill: { local: 'nobody' }, auth: 'none', segments: ['local'] },
    // Holds (docs/SPEC.md §7c): ana acting on bo's, who is neither she nor below her: 403 once
    // the request is read.
    { m: 'GET', p: '/agents/:local/hold', fill: { local: 'bo' }, auth: 'agent', segments: ['local'] },
    {
      m: 'PUT',
      p: '/agents/:local/hold',
      fill: { local: 'bo' },
      auth: 'agent',
      segments: ['local'],
      body: { approver: `ana@${HOUSE}`, rule: { all: true, domains: ['x.example'], types: ['task'] } },
      optional: ['rule.domains', 'rule.types'],
      strings: ['approver', 'rule.domains.0', 'rule.types.0'],
    },
    { m: 'DELETE', p: '/agents/:local/hold', fill: { local: 'bo' }, auth: 'agent', segments: ['local'] },
    // Drafts: bo's are not ana's (403); ana's own draft of that id does not exist (404), after
    // the body is read.
    { m: 'GET', p: '/drafts/:local', fill: { local: 'bo' }, auth: 'agent', segments: ['local'] },
    { m: 'GET', p: '/drafts/:local/:id', fill: { local: 'bo', id: ids.envelope }, auth: 'agent', segments: ['local', 'id'] },
    {
      m: 'POST',
      p: '/drafts/:local/:id/approve',
      fill: { local: 'bo', id: ids.envelope },
      auth: 'agent',
      segments: ['local', 'id'],
      body: {},
      anyObjectValid: true,
    },
    {
      m: 'POST',
      p: '/drafts/:local/:id/decline',
      fill: { local: 'ana', id: ids.envelope },
      auth: 'agent',
      segments: ['local', 'id'],
      body: { note: 'no' },
      optional: ['note'],
      anyObjectValid: true,
      strings: ['note'],
    },
    // Attachments (docs/SPEC.md §8e): one that ends in the past is refused after every member is
    // read; an attachment nobody made is 404 to anyone, whatever part is asked.
    {
      m: 'POST',
      p: '/attachments',
      auth: 'agent',
      body: { bytes: 100, sha256: 'ab'.repeat(32), to: [`ana@${HOUSE}`], expires: '2000-01-01T00:00:00Z' },
      strings: ['sha256', 'to.0', 'expires'],
    },
    { m: 'GET', p: '/attachments/:id', fill: { id: ids.envelope }, auth: 'agent', segments: ['id'] },
    { m: 'DELETE', p: '/attachments/:id', fill: { id: ids.envelope }, auth: 'agent', segments: ['id'] },
    { m: 'GET', p: '/attachments/:id/:n', fill: { id: ids.envelope, n: '0' }, auth: 'agent', segments: ['id', 'n'] },
    {
      m: 'PUT',
      p: '/attachments/:id/:n',
      fill: { id: ids.envelope, n: '0' },
      auth: 'agent',
      segments: ['id', 'n'],
      body: {},
      anyObjectValid: true,
    },
    { m: 'GET', p: '/invitations', auth: 'none' },
    {
      // `welcome` is refused after `uses` and `expires` are read; `note` is free text read last,
      // so no naughty note is refused (left out, see tests/README.md).
      m: 'POST',
      p: '/invitations',
      auth: 'admin',
      body: { uses: 2, expires: future, welcome: -1, note: 'x' },
      optional: ['uses', 'expires', 'welcome', 'note'],
      anyObjectValid: true,
      strings: ['expires'],
    },
    {
      m: 'GET',
      p: '/mailbox/:local',
      fill: { local: 'bo' },
      auth: 'agent',
      segments: ['local'],
      // Ana reading bo's mailbox is refused before the nonce is spent (it is spent beside the
      // page): a replay is refused as the first use was. A replayed read that was answered is 401
      // (crates/house/tests/attacks/auth.rs).
      replayExpect: 'same',
      queries: [
        ['after', { limit: '-1' }, { local: 'ana' }],
        ['limit', { after: '-1' }, { local: 'ana' }],
      ],
    },
    {
      // Refused before the batch that would spend its token: a replay is refused as the first
      // use was; a replayed ack that took effect is 401 (crates/house/tests/attacks/auth.rs).
      m: 'POST',
      p: '/mailbox/:local/ack',
      fill: { local: 'ana' },
      auth: 'agent',
      segments: ['local'],
      replayExpect: 'same',
      body: { ids: [ids.envelope, 5] },
      poisonPaths: ['ids.1'],
      strings: ['ids.0'],
    },
    {
      // A well-signed envelope between two agents of this house, without the relay header
      // `--require-relay` asks for: 403 once it is read.
      m: 'POST',
      p: '/inbound',
      auth: 'none',
      body: ctx.inboundEnvelope,
      optional: ['expires', 'deliver_after', 'thread', 'in_reply_to'],
      strings: envelopeStrings,
    },
    { m: 'GET', p: '/lists/:local', fill: { local: 'bo' }, auth: 'agent', segments: ['local'] },
    {
      m: 'POST',
      p: '/lists/:local',
      fill: { local: 'ana' },
      auth: 'agent',
      segments: ['local'],
      body: {
        allow: { add: ['friend.example'], remove: ['friend.example'] },
        block: { add: ['spam.example'], remove: ['spam.example'] },
      },
      optional: ['allow', 'block', 'allow.add', 'allow.remove', 'block.add', 'block.remove'],
      anyObjectValid: true,
      strings: [
        ['allow.add.0', 'allow.remove.0'],
        ['block.add.0', 'block.remove.0'],
      ],
    },
    { m: 'GET', p: '/pins', auth: 'none' },
    {
      m: 'POST',
      p: '/pins/:domain/confirm',
      fill: { domain: 'nowhere.example' },
      auth: 'admin',
      segments: ['domain'],
      body: { sig: stranger.sig },
      strings: ['sig'],
    },
    {
      // The operator moves a mailbox to another database: this house has one, so `to` names
      // none, and every case is refused (400) after every member is read; nothing moves.
      m: 'POST',
      p: '/shards/move',
      auth: 'admin',
      body: { local: 'ana', to: 9 },
      strings: ['local'],
    },
    {
      m: 'POST',
      p: '/email/in',
      auth: 'admin',
      raw: true,
      body: Buffer.from('From: someone@example.com\r\nTo: nobody@sweep.test\r\nSubject: hi\r\n\r\nhello\r\n'),
      poison: { query: { to: `nobody@${HOUSE}`, from: 'someone@example.com' } },
      queries: [
        ['to', { from: 'someone@example.com' }],
        ['from', { to: `nobody@${HOUSE}` }],
      ],
    },
    {
      // The id of ana's email sent during setup, with other content: 409 after every member.
      m: 'POST',
      p: '/email/out',
      auth: 'agent',
      body: { to: 'someone@example.com', subject: 's', body: 'b', id: ids.email },
      optional: ['subject', 'id'],
      strings: ['to', 'subject', 'body', 'id', 'in_reply_to'],
      idFields: ['id'],
    },
    { m: 'GET', p: '/libro/cuenta/:address', fill: { address: `bo@${HOUSE}` }, auth: 'agent', segments: ['address'] },
    { m: 'GET', p: '/libro/contrato/:id', fill: { id: ids.contract }, auth: 'admin', segments: ['id'] },
    {
      // The id of the setup's top-up, another amount: 409 after every member.
      m: 'POST',
      p: '/libro/topup',
      auth: 'admin',
      body: { address: `ana@${HOUSE}`, amount: 7, id: ids.topup, note: 'x' },
      optional: ['id', 'note'],
      strings: ['address', 'id', 'note'],
      idFields: ['id'],
    },
    {
      // The index runs on the sweep's houses. A name that is no public house is refused before
      // anything is fetched, so every variation stays refused and the index table stays empty.
      m: 'POST',
      p: '/index/houses',
      auth: 'none',
      body: { domain: 'localhost' },
    },
    {
      m: 'GET',
      p: '/index/houses',
      auth: 'none',
      poison: { query: { limit: '-1' } },
      queries: [
        ['limit', { offset: '-1' }],
        ['offset', { limit: '-1' }],
      ],
    },
    {
      m: 'GET',
      p: '/index/agents',
      auth: 'none',
      poison: { query: { limit: '-1' } },
      queries: [
        ['q', { limit: '-1' }],
        ['capability', { offset: '-1' }],
        ['accepts', { limit: '101' }],
        ['house', { offset: 'x' }],
        ['limit', { offset: '-1' }],
        ['offset', { limit: '-1' }],
      ],
    },
    {
      // Without the operator's token, `all=1` is refused.
      m: 'GET',
      p: '/tareas',
      auth: 'none',
      poison: { query: { all: '1' } },
    },
    {
      // The id of the setup's task, another price: 409 after every member.
      m: 'POST',
      p: '/tareas',
      auth: 'admin',
      body: { id: ids.task, price: 3, statement: 'x', verify: [{ type: 'http_status', url: 'https://example.com/{contract}' }], terms: {} },
      optional: ['id', 'terms'],
      strings: ['id', 'statement', 'verify.0.url', 'verify.0.type'],
      idFields: ['id'],
    },
    {
      m: 'POST',
      p: '/tareas/:id/retire',
      fill: { id: 'no-such-task' },
      auth: 'admin',
      segments: ['id'],
    },
    // The app catalogue (docs/SPEC.md "Apps — Pinned"): public reads, the operator's removal.
    { m: 'GET', p: '/apps', auth: 'none', poison: { method: 'PUT' } },
    { m: 'GET', p: '/apps/:id', fill: { id: 'no-such-app' }, auth: 'none', segments: ['id'] },
    { m: 'DELETE', p: '/apps/:id', fill: { id: 'no-such-app' }, auth: 'admin', segments: ['id'] },
    {
      // A card whose signature does not verify: refused after every member, and nothing listed.
      m: 'POST',
      p: '/apps',
      auth: 'admin',
      body: { card: FORGED_CARD, url: 'https://apps.example/echo/app.json' },
      optional: ['url'],
      strings: ['url', 'card.name', 'card.id', 'card.version', 'card.sig'],
    },
    {
      m: 'GET',
      p: '/libro/diario',
      auth: 'admin',
      poison: { query: { limit: '-1' } },
      queries: [
        ['after', { limit: '-1' }],
        ['limit', { after: '-1' }],
      ],
    },
    {
      // Ana's envelope whose signature is another envelope's: 403 once it is read. Its token is
      // spent only by a send that takes effect (docs/SPEC.md §8), so a replay of a refused one is
      // refused as the first use was; a replayed send that was queued is 401
      // (crates/house/tests/attacks/auth.rs, tests/e2e/two_houses.mjs).
      m: 'POST',
      p: '/outbound',
      auth: 'agent',
      replayExpect: 'same',
      body: ctx.outboundEnvelope,
      optional: ['expires', 'deliver_after', 'thread', 'in_reply_to'],
      strings: envelopeStrings,
    },
    {
      m: 'GET',
      p: '/outbox/:local',
      fill: { local: 'bo' },
      auth: 'agent',
      segments: ['local'],
      queries: [
        ['before', { limit: '-1' }, { local: 'ana' }],
        ['limit', { before: '-1' }, { local: 'ana' }],
      ],
    },
    // The house's pages (issue 14): GET and HEAD only, any other method 405.
    { m: 'GET', p: '/', auth: 'none', poison: { method: 'POST' } },
    // `assetOnWorker`: on the Worker the protocol pages are static assets (scripts/build-app),
    // answered by the platform before the Worker runs, as /app/* is (another method gets the
    // platform's bodiless 405, and nothing reaches the engine or D1), so they are swept on serve.
    { m: 'GET', p: '/spec', auth: 'none', poison: { method: 'POST' }, assetOnWorker: true },
    { m: 'GET', p: '/llms.txt', auth: 'none', poison: { method: 'PATCH' }, assetOnWorker: true },
    { m: 'GET', p: '/style.css', auth: 'none', poison: { method: 'DELETE' } },
    { m: 'GET', p: '/favicon.svg', auth: 'none', poison: { method: 'POST' } },
    { m: 'GET', p: '/.well-known/agent-card.json', auth: 'none', poison: { method: 'PUT' } },
    { m: 'GET', p: '/agents/:local/agent-card.json', fill: { local: 'nobody' }, auth: 'none', segments: ['local'] },
    { m: 'GET', p: '/.well-known/jwks.json', auth: 'none', poison: { method: 'PUT' } },
    // The A2A gateway (issue 39): JSON-RPC, so a refusal is JSON-RPC's error object carrying the
    // house's shape in `error.data` (RPC_ROUTES). To an agent that is not there, every call is 404.
    {
      m: 'POST',
      p: '/agents/:local/a2a',
      fill: { local: 'nobody' },
      auth: 'none',
      segments: ['local'],
      body: {
        jsonrpc: '2.0',
        id: 1,
        method: 'SendMessage',
        params: { message: { role: 'ROLE_USER', messageId: 'm-1', parts: [{ text: 'hello' }] } },
      },
      strings: ['method', 'params.message.role', 'params.message.messageId', 'params.message.parts.0.text'],
    },
  ];
}
const envelopeStrings = [
  'nyx5',
  'id',
  'from',
  'to.0',
  'created',
  'type',
  'thread',
  'in_reply_to',
  'expires',
  'content.text',
  'signature.alg',
  'signature.kid',
  'signature.value',
];

/** The routes `router.rs` and the Worker adapter serve, read from their source. */
function servedRoutes() {
  const router = readFileSync(join(ROOT, 'crates/house/src/router.rs'), 'utf8');
  const out = [];
  for (const m of router.matchAll(/\("(GET|POST|PUT|DELETE|PATCH)", \[([^\]]*)\]\)/g)) {
    const segs = m[2].split(',').map((s) => s.trim()).filter(Boolean);
    out.push(`${m[1]} /${segs.map((s) => (s.startsWith('"') ? JSON.parse(s) : `:${s}`)).join('/')}`);
  }
  const adapter = readFileSync(join(ROOT, 'src/adapter/mod.rs'), 'utf8');
  const worker = [...adapter.matchAll(/^\s*"(\/[^"]*)" => return Response::/gm)].map((m) => `GET ${m[1]}`);
  if (out.length < 20) throw new Error('could not read the routes from router.rs and src/adapter/mod.rs');
  return { house: out, worker };
}

// ---------------------------------------------------------------------------------------------
// HTTP over raw sockets: every request on its own connection, written byte for byte as the case
// says (bodies on GET, duplicate headers, invalid bytes, half-closes, slow writes).

/** Sends `head` (string or bytes) then `body` pieces, and reads the answer within the deadline.
 * Answers `{status, headers, body}`, `{closed: true}` when the server closed without answering,
 * or `{hang: true}`. */
function exchange(port, head, pieces = [], { gapMs = 0, halfClose = false, deadlineMs = DEADLINE_MS } = {}) {
  return new Promise((resolveExchange) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    const chunks = [];
    let done = false;
    const finish = (v) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolveExchange(v);
    };
    const timer = setTimeout(() => finish({ hang: true }), deadlineMs);
    sock.on('error', () => {
      const parsed = parseAnswer(Buffer.concat(chunks));
      finish(parsed ?? { closed: true });
    });
    sock.on('data', (d) => {
      chunks.push(d);
      const parsed = parseAnswer(Buffer.concat(chunks));
      if (parsed) finish(parsed);
    });
    sock.on('end', () => finish(parseAnswer(Buffer.concat(chunks), true) ?? { closed: true }));
    sock.on('connect', async () => {
      try {
        sock.write(head);
        for (const p of pieces) {
          if (gapMs) await sleep(gapMs);
          if (done) return;
          sock.write(p);
        }
        if (halfClose) sock.end();
      } catch {}
    });
  });
}

/** A complete HTTP/1.1 answer in `buf`, or null while incomplete. */
function parseAnswer(buf, ended = false) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0])?.[1] ?? NaN);
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  let rest = buf.subarray(end + 4);
  // No body follows a 204 or a 304, whatever the headers say (RFC 9112 §6.3).
  if (status === 204 || status === 304) return { status, headers, body: Buffer.alloc(0) };
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    if (rest.length < n) return null;
    return { status, headers, body: rest.subarray(0, n) };
  }
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const parts = [];
    for (;;) {
      const eol = rest.indexOf('\r\n');
      if (eol < 0) return null;
      const size = parseInt(rest.subarray(0, eol).toString('latin1'), 16);
      if (Number.isNaN(size)) return { status, headers, body: Buffer.concat(parts) };
      if (size === 0) return { status, headers, body: Buffer.concat(parts) };
      if (rest.length < eol + 2 + size + 2) return null;
      parts.push(rest.subarray(eol + 2, eol + 2 + size));
      rest = rest.subarray(eol + 2 + size + 2);
    }
  }
  return ended ? { status, headers, body: rest } : null;
}

/** The request head: `headers` is a list of [name, value] (values may be Buffers). */
function headBytes(method, target, headers) {
  const parts = [Buffer.from(`${method} ${typeof target === 'string' ? target : ''}`, 'latin1')];
  if (typeof target !== 'string') parts.push(target);
  parts.push(Buffer.from(' HTTP/1.1\r\n'));
  for (const [k, v] of headers) parts.push(Buffer.from(`${k}: `), Buffer.isBuffer(v) ? v : Buffer.from(String(v), 'latin1'), Buffer.from('\r\n'));
  parts.push(Buffer.from('\r\n'));
  return Buffer.concat(parts);
}

// ---------------------------------------------------------------------------------------------
// Cases.

/**
 * The Worker's expectation where workerd answers before any Worker code runs: two different
 * `Content-Length`s, `Transfer-Encoding: gzip, chunked` and two Host fields are refused by
 * workerd's HTTP layer (its log: `invalid Content-Length header value`, `unknown transfer
 * encoding`, `invalid hostname when stringifying URL`) with its own page — 500, the body
 * `Internal Server Error`, no content-type — and the Worker is never invoked (a Worker that
 * answers 200 to everything gets the same page, tests/README.md). Nothing in the adapter can
 * change that answer; the sweep holds workerd to exactly that page (anything else fails), and
 * the database to no change. `nyx5 serve` answers these 400 in the error shape.
 */
const WORKERD_REFUSES = { workerd: { status: 500, body: 'Internal Server Error' } };
/** An HTTP/1.1 request without Host: workerd's own `400 Bad Request` page, the same way. */
const WORKERD_REFUSES_NO_HOST = { workerd: { status: 400, body: 'Bad Request' } };

/**
 * The Worker's expectation for a body that breaks off (a bad chunk size; a body cut short and
 * half-closed). Under `wrangler dev` two dev-only workers stand before ours: wrangler's
 * ProxyWorker and miniflare's entry worker. When the client's body fails, their own forwarding
 * fails with it, and they answer whatever our Worker does (it reads the failure and refuses
 * with a 400, src/adapter): wrangler's `503 Your worker restarted mid-request` (any method but
 * GET/HEAD), miniflare's `500 TypeError: Cannot reconstruct a Request with a used body`, or, for
 * a GET or HEAD, nothing at all — the ProxyWorker queues it for a retry that never comes. A
 * Worker that answers 200 to everything gets the same three, and so does `GET /spec`, which
 * never reads a body (tests/README.md). Production has neither worker in front. So on the
 * Worker these cases accept exactly those three dev answers, a close, or the error shape; a
 * success, any other answer, or a changed database (the invitation the empty body once made)
 * fails. `deadlineMs` only bounds the wait for the GET that is never answered.
 */
const DEV_PROXY_ON_BROKEN_BODY = { devProxy: true, allowClosed: true, deadlineMs: 5_000 };
/**
 * The same for a body the Worker refuses (413) before it is all sent: the dev workers' forwarding
 * of the unread rest fails as above, and their answer (or none, for a GET) may come instead of
 * the Worker's 413. When the Worker's answer gets through it must be the 413 in the error shape.
 */
const DEV_PROXY_ON_UNREAD_BODY = { ...DEV_PROXY_ON_BROKEN_BODY, allowClosed: false };
const DEV_PROXY_ANSWERS = [
  { status: 503, type: /^text\/plain/, body: /^Your worker restarted mid-request\./ },
  { status: 500, type: /^text\/plain/, body: /^TypeError: Cannot reconstruct a Request with a used body\./ },
  // miniflare's entry worker when its forwarding of the broken body fails: seen for `POST /` only.
  { status: 500, type: /^text\/plain/, body: /^Error: Network connection lost\./ },
];

/** A path with its parameters filled (percent-encoded) from `fill`. */
function pathOf(route, fill = {}) {
  return route.p.replace(/:(\w+)/g, (_, name) => {
    const v = fill[name] ?? route.fill?.[name];
    if (v === undefined) throw new Error(`${route.p}: no value for :${name}`);
    return encodeSegment(v);
  });
}
function encodeSegment(v) {
  try {
    return encodeURIComponent(v);
  } catch {
    return Buffer.from(v).toString('hex');
  }
}
function queryOf(q) {
  const entries = Object.entries(q ?? {});
  if (!entries.length) return '';
  return `?${entries.map(([k, v]) => `${k}=${encodeSegment(v)}`).join('&')}`;
}

function setPath(obj, path, value) {
  const keys = path.split('.');
  let o = obj;
  for (const k of keys.slice(0, -1)) o = o[k];
  o[keys.at(-1)] = value;
}
function getPath(obj, path) {
  return path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);
}
/** Every member path of `obj` (objects and arrays inside, the signature's members too); a
 * member whose name holds a dot (an App Card's file names) has no path, and is left as it is. */
function memberPaths(obj, prefix = '') {
  const out = [];
  for (const [k, v] of Object.entries(obj)) {
    if (k.includes('.')) continue;
    const p = prefix ? `${prefix}.${k}` : k;
    out.push(p);
    if (v !== null && typeof v === 'object') out.push(...memberPaths(v, p));
  }
  return out;
}
const clone = (v) => JSON.parse(JSON.stringify(v));

/**
 * The cases of one route: `{route, family, what, send(sweep)}`, each refused. `expect` narrows
 * the answer where it is known exactly (a status), `allowClosed` lets the server close without
 * answering (a body cut short by the client's half-close).
 */
function casesFor(route, table) {
  const out = [];
  const add = (family, what, req) => out.push({ route: `${route.m} ${route.p}`, family, what, ...req });
  const base = {
    method: route.poison?.method ?? route.m,
    fill: {},
    query: route.poison?.query,
  };
  const hasJson = route.body !== undefined && !route.raw;

  // Other methods: 405 (or 404 for the Worker's own pages, which the house does not know).
  // Methods another route serves on the same path are that route's business. OPTIONS is a CORS
  // preflight on every route (204, nothing written), HEAD is GET without the body.
  const served = table.filter((r) => r.p === route.p).map((r) => r.m);
  const methods = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'].filter((m) => !served.includes(m));
  for (const m of methods) {
    add('method', m, { method: m, fill: {}, auth: 'none', body: route.body, expect: route.only ? 404 : 405 });
  }
  if (!route.only) add('method', 'OPTIONS', { method: 'OPTIONS', fill: {}, auth: 'none', preflight: true });

  // JSONTestSuite's n_ files as the body, with the route's own authentication, so the body is
  // what is judged (routes without a body carry them as well, refused by their poison).
  for (const f of N_FILES) {
    // No body at all is an empty object where every member is optional.
    if (route.anyObjectValid && f.bytes.length === 0) continue;
    add('n_json', f.name, { ...base, auth: route.auth, body: f.bytes });
  }

  // Naughty strings in every string member.
  if (route.body !== undefined && hasJson) {
    const fields = [...(route.strings ?? []), ...(route.extraStrings ?? [])];
    for (const f of fields) {
      const paths = Array.isArray(f) ? f : [f];
      for (const s of naughtySample()) {
        naughtyUsed.add(s);
        // A naughty string that is a well-formed id (`check_id`) is a new id: a valid request.
        if (paths.some((p) => route.idFields?.includes(p)) && WELL_FORMED_ID.test(s)) continue;
        const body = clone(route.body);
        for (const p of paths) setPath(body, p, s);
        add('naughty', `${paths.join('+')}`, { ...base, auth: route.auth, body });
      }
    }
    // Wrong types in every member.
    for (const p of memberPaths(route.body)) {
      const have = typeOf(getPath(route.body, p));
      const optional = (route.optional ?? []).includes(p);
      if (route.poisonPaths?.includes(p)) continue;
      for (const w of WRONG) {
        if (typeOf(w) === have || (w === null && optional)) continue;
        const body = clone(route.body);
        setPath(body, p, w);
        add('wrong_type', `${p}=${JSON.stringify(w)}`, { ...base, auth: route.auth, body });
      }
    }
    // The body as a whole of another type.
    for (const w of WRONG) {
      if (route.anyObjectValid && typeOf(w) === 'object') continue;
      add('wrong_type', `body=${JSON.stringify(w)}`, { ...base, auth: route.auth, body: w });
    }
  }
  if (route.raw) {
    for (const s of naughtySample()) {
      naughtyUsed.add(s);
      add('naughty', 'body', { ...base, auth: route.auth, body: Buffer.from(s) });
    }
  }

  // Naughty strings in path segments and query parameters.
  for (const name of route.segments ?? []) {
    for (const s of naughtySample()) {
      naughtyUsed.add(s);
      add('naughty', `:${name}`, { ...base, fill: { [name]: s }, auth: route.auth, body: route.body });
    }
  }
  for (const [name, poison, fill] of route.queries ?? []) {
    for (const s of naughtySample()) {
      naughtyUsed.add(s);
      add('naughty', `?${name}`, { ...base, fill: fill ?? {}, query: { ...poison, [name]: s }, auth: route.auth, body: route.body });
    }
    for (const v of ['', '-0', '1e2', '0x10', '99999999999999999999', '1.5', ' 1', '１']) {
      add('wrong_type', `?${name}=${v}`, { ...base, fill: fill ?? {}, query: { ...poison, [name]: v }, auth: route.auth, body: route.body });
    }
  }

  // Oversize and deep bodies, invalid UTF-8.
  const template = route.body === undefined ? Buffer.from('{}') : route.raw ? route.body : Buffer.from(canon(route.body));
  // The Worker answers these 413 before the body is all read (the cap is for that); under
  // `wrangler dev` that can fail the dev proxy's forwarding of the rest (DEV_PROXY_ON_UNREAD_BODY).
  add('oversize', `${MAX_REQUEST_BYTES + 1} bytes`, { ...base, auth: route.auth, body: Buffer.alloc(MAX_REQUEST_BYTES + 1, 0x20), expect: 413, worker: DEV_PROXY_ON_UNREAD_BODY });
  add('oversize', `${MAX_DOCUMENT_BYTES + 1}-byte string`, {
    ...base,
    auth: route.auth,
    body: Buffer.from(`{"x":"${'a'.repeat(MAX_DOCUMENT_BYTES)}"}`),
  });
  add('oversize', 'chunked past the cap', { ...base, auth: route.auth, chunkedBytes: MAX_REQUEST_BYTES + 65_536, expect: 413, worker: DEV_PROXY_ON_UNREAD_BODY });
  for (const depth of [33, 1000, 100_000]) {
    add('deep', `[ x${depth}`, { ...base, auth: route.auth, body: Buffer.from('['.repeat(depth) + ']'.repeat(depth)) });
    add('deep', `{"a": x${depth}`, { ...base, auth: route.auth, body: Buffer.from('{"a":'.repeat(depth) + '1' + '}'.repeat(depth)) });
  }
  for (const bad of [[0xff], [0xc3, 0x28], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82]]) {
    const text = template.toString('latin1');
    const at = text.indexOf('"', text.indexOf(':') + 1);
    const body = at > 0 ? Buffer.concat([template.subarray(0, at + 1), Buffer.from(bad), template.subarray(at + 1)]) : Buffer.concat([template, Buffer.from(bad)]);
    add('utf8', `body ${Buffer.from(bad).toString('hex')}`, { ...base, auth: route.auth, body });
  }

  // Framing: cut short, slow, duplicate and conflicting lengths and encodings, bad bytes in the
  // head. Each on the route's refused request. On the Worker, workerd refuses some of them before
  // any Worker code runs (WORKERD_REFUSES), and reads Content-Length with chunked as chunked.
  const b = template;
  // On `POST /` alone this case takes wrangler's dev stack down (miniflare's entry worker loses
  // the connection, wrangler reports an internal error and its dev server stops answering), so
  // the Worker half leaves it out there: the Worker reads every body before it routes, so `/`
  // meets it exactly as `/spec` does, which the Worker half still sends it.
  add('framing', 'body cut short, half-closed', { ...base, auth: route.auth, body: b, lengthDelta: 50, halfClose: true, allowClosed: true, worker: DEV_PROXY_ON_BROKEN_BODY, skipOn: route.p === '/' ? 'worker' : undefined });
  add('framing', 'slow body (6 pieces, 150 ms apart)', { ...base, auth: route.auth, body: b, slow: 6 });
  add('framing', 'two Content-Length values', { ...base, auth: route.auth, body: b, extraHeaders: [['content-length', b.length + 1]], expect: 400, worker: WORKERD_REFUSES });
  // RFC 9112 §6.3: a server may read chunked and drop the length (workerd does; the route's own
  // refusal comes back) or refuse the request (nyx5 serve does, 400).
  add('framing', 'Content-Length and chunked', { ...base, auth: route.auth, body: b, chunked: true, keepLength: true, expect: 400, worker: { expect: undefined } });
  add('framing', 'Transfer-Encoding: gzip, chunked', { ...base, auth: route.auth, body: b, chunked: 'gzip, chunked', worker: WORKERD_REFUSES });
  add('framing', 'Transfer-Encoding: chunked twice', { ...base, auth: route.auth, body: b, chunked: true, extraHeaders: [['transfer-encoding', 'chunked']] });
  // A first chunk `{` before the bad size: should a layer end the body quietly where it breaks
  // (wrangler dev's does, tests/README.md), what is left is no valid request either.
  add('framing', 'bad chunk size', { ...base, auth: route.auth, rawBody: Buffer.from('1\r\n{\r\nzz\r\nabc\r\n0\r\n\r\n'), chunked: true, worker: DEV_PROXY_ON_BROKEN_BODY });
  add('framing', 'invalid UTF-8 in Authorization', { ...base, auth: 'none', extraHeaders: [['authorization', Buffer.from([0x4e, 0x79, 0x78, 0x35, 0x20, 0xff, 0xfe, 0x2e, 0xc0])]], body: b });
  add('framing', 'invalid UTF-8 in the path', { ...base, auth: 'none', rawPathSuffix: Buffer.from([0xff, 0xc3, 0x28]), body: b });
  add('framing', 'a 40 KiB header', { ...base, auth: route.auth, extraHeaders: [['x-pad', 'a'.repeat(40 * 1024)]], body: b });
  add('framing', 'duplicate Authorization', { ...base, auth: route.auth, extraHeaders: [['authorization', 'Nyx5 junk.junk']], body: b });

  // Tokens: only for routes that take ana's token.
  if (route.auth === 'agent') {
    add('token', 'replayed', { ...base, auth: 'agent', body: b, replay: true });
    add('token', 'aimed at another path', { ...base, auth: 'agent', body: b, tokenFor: { path: '/health' } });
    add('token', 'aimed at another method', { ...base, auth: 'agent', body: b, tokenFor: { method: base.method === 'GET' ? 'POST' : 'GET' } });
    add('token', 'aimed at another host', { ...base, auth: 'agent', body: b, tokenFor: { host: 'evil.example' } });
    add('token', 'aimed at another port', { ...base, auth: 'agent', body: b, tokenFor: { host: '127.0.0.1:1' } });
    add('token', 'for another body', { ...base, auth: 'agent', body: b, tokenFor: { body: Buffer.from('{}') } });
    add('token', 'for another query', { ...base, auth: 'agent', body: b, tokenFor: { query: 'limit=1' } });
    add('token', 'ten minutes old', { ...base, auth: 'agent', body: b, tokenFor: { ts: new Date(Date.now() - 600_000).toISOString() } });
    add('token', 'ten minutes ahead', { ...base, auth: 'agent', body: b, tokenFor: { ts: new Date(Date.now() + 600_000).toISOString() } });
    add('token', "signed by bo's key as ana", { ...base, auth: 'agent', body: b, tokenFor: { signer: 'bo' } });
    add('token', 'as the Bearer scheme', { ...base, auth: 'agent', body: b, tokenFor: { scheme: 'Bearer' } });
    add('token', 'the operator token as Nyx5', { ...base, auth: 'none', body: b, extraHeaders: [['authorization', 'Nyx5 OPERATOR']] });
    // A foreign agent's token would be resolved over the network by the Libro's reads and an
    // attachment's (`authenticate_any`); the sweep stays on loopback.
    const foreignReads = route.p.startsWith('/libro/') || (route.m === 'GET' && route.p.startsWith('/attachments/'));
    if (!foreignReads) {
      add('token', 'for an agent of another house', { ...base, auth: 'agent', body: b, tokenFor: { address: `ana@elsewhere.example` } });
    }
  }
  if (route.auth === 'admin') {
    add('token', 'operator token off by one byte', { ...base, auth: 'none', body: b, extraHeaders: [['authorization', 'Bearer OPERATOR-']] });
    add('token', 'operator token in lower-case scheme', { ...base, auth: 'none', body: b, extraHeaders: [['authorization', 'bearer OPERATOR']] });
    add('token', "ana's token instead", { ...base, auth: 'agent', body: b });
  }
  return out;
}

/** Header-level cases that concern the house as a whole, sent on GET /health (which would
 * otherwise answer 200) and on ana's own settings (which her token would otherwise open). */
function globalCases() {
  const out = [];
  const add = (route, what, req) => out.push({ route, family: 'headers', what, ...req });
  add('GET /health', 'two Host headers', { method: 'GET', path: '/health', hostHeaders: ['HOST', 'evil.example'], expect: 400, worker: WORKERD_REFUSES });
  add('GET /health', 'two equal Host headers', { method: 'GET', path: '/health', hostHeaders: ['HOST', 'HOST'], expect: 400, worker: WORKERD_REFUSES });
  add('GET /health', 'no Host header', { method: 'GET', path: '/health', hostHeaders: [], expect: 400, worker: WORKERD_REFUSES_NO_HOST });
  add('GET /agents/:local/settings', 'a valid token and a second Authorization', {
    method: 'GET',
    path: '/agents/ana/settings',
    auth: 'agent',
    extraHeaders: [['authorization', 'Nyx5 junk.junk']],
  });
  add('GET /agents/:local/settings', 'a second Authorization before a valid token', {
    method: 'GET',
    path: '/agents/ana/settings',
    auth: 'agent',
    authFirst: ['authorization', 'Nyx5 junk.junk'],
  });
  add('GET /agents/:local/settings', 'the same valid token twice', {
    method: 'GET',
    path: '/agents/ana/settings',
    auth: 'agent',
    sameTwice: true,
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Running one case.

class Sweep {
  constructor({ runtime, port, dbPath, adminToken, ctx }) {
    Object.assign(this, { runtime, port, dbPath, adminToken, ctx });
    this.host = `127.0.0.1:${port}`;
    this.nonces = new Set();
    this.failures = [];
    this.counts = new Map();
    this.statuses = new Map();
    this.notes = new Map();
  }

  async token(method, path, query, body, over = {}) {
    const signer = over.signer === 'bo' ? this.ctx.bo : this.ctx.ana;
    const nonce = b64u(random(16));
    this.nonces.add(nonce);
    const q = over.query ?? query;
    const { header } = await authHeader(signer.keys, {
      address: over.address ?? this.ctx.ana.address,
      method: over.method ?? method,
      path: (over.path ?? path) + (q ? `?${q}` : ''),
      host: over.host ?? this.host,
      body: over.body ?? body,
      ts: over.ts,
      nonce,
    });
    return over.scheme ? header.replace(/^Nyx5 /, `${over.scheme} `) : header;
  }

  bodyOf(c) {
    if (c.rawBody) return c.rawBody;
    if (c.body === undefined) return Buffer.alloc(0);
    if (Buffer.isBuffer(c.body)) return c.body;
    return Buffer.from(canon(c.body), 'utf8');
  }

  /** Sends case `c` (once, or twice for a replay) and answers the last answer. */
  async send(c0, routeOf) {
    // A case may expect something else of one runtime (`worker: {...}`, see WORKERD_REFUSES).
    const c = c0[this.runtime] ? { ...c0, ...c0[this.runtime] } : c0;
    const route = routeOf(c.route);
    const path = c.path ?? pathOf(route, c.fill);
    const query = c.path ? '' : queryOf(c.query).slice(1);
    const body = c.chunkedBytes ? Buffer.alloc(0) : this.bodyOf(c);
    const headers = [];
    const hosts = c.hostHeaders ?? ['HOST'];
    for (const h of hosts) headers.push(['Host', h === 'HOST' ? this.host : h]);
    if (c.authFirst) headers.push(c.authFirst);
    let auth;
    if (c.auth === 'agent') auth = await this.token(c.method, path, query, body, c.tokenFor ?? {});
    if (c.auth === 'admin') auth = `Bearer ${this.adminToken}`;
    if (auth) headers.push(['Authorization', auth]);
    if (c.sameTwice) headers.push(['Authorization', auth]);
    for (const [k, v] of c.extraHeaders ?? []) {
      headers.push([k, typeof v === 'string' ? v.replace('OPERATOR', this.adminToken) : v]);
    }
    headers.push(['Connection', 'close']);
    const target = Buffer.concat([Buffer.from(path + (query ? `?${query}` : ''), 'latin1'), c.rawPathSuffix ?? Buffer.alloc(0)]);
    let pieces = [];
    const opts = {};
    if (c.chunkedBytes) {
      headers.push(['Transfer-Encoding', 'chunked']);
      const chunk = Buffer.alloc(65_536, 0x20);
      const frame = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]);
      pieces = Array.from({ length: Math.ceil(c.chunkedBytes / chunk.length) }, () => frame);
      pieces.push(Buffer.from('0\r\n\r\n'));
    } else if (c.chunked) {
      if (c.keepLength) headers.push(['Content-Length', body.length]);
      headers.push(['Transfer-Encoding', c.chunked === true ? 'chunked' : c.chunked]);
      pieces = c.rawBody ? [c.rawBody] : [Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')];
    } else {
      if (body.length || c.method !== 'GET') headers.push(['Content-Length', body.length + (c.lengthDelta ?? 0)]);
      if (c.slow) {
        const n = c.slow;
        const size = Math.ceil(body.length / n) || 1;
        for (let i = 0; i < body.length; i += size) pieces.push(body.subarray(i, i + size));
        opts.gapMs = 150;
      } else if (body.length) pieces = [body];
    }
    if (c.halfClose) opts.halfClose = true;
    if (c.deadlineMs) opts.deadlineMs = c.deadlineMs;
    const head = headBytes(c.method, target, headers);
    const once = () => exchange(this.port, head, pieces, opts);
    if (c.replay) {
      const first = await once();
      this.judge(c, first, 'first use');
      const second = await once();
      // `same`: a route whose token is spent only by a request that takes effect answers a
      // replay of a refused one as it answered the first use.
      const replayed = route.replayExpect === 'same' ? first.status : route.replayExpect ?? 401;
      return this.judge({ ...c, expect: replayed }, second, 'replay');
    }
    return this.judge(c, await once());
  }

  judge(c, a, phase = '') {
    const key = `${c.route}\t${c.family}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    const label = `${c.route} [${c.family}] ${c.what}${phase ? ` (${phase})` : ''}`;
    const fail = (why) => this.failures.push(`${label}: ${why}`);
    if (c.workerd) {
      // Refused by workerd itself before the Worker runs (see WORKERD_REFUSES): exactly its page.
      this.count(a.hang ? 'hang' : a.closed ? 'closed' : `${a.status} (workerd)`);
      const text = a.body?.toString('utf8');
      const { status, body } = c.workerd;
      // workerd closes the connection instead now and then (never the Worker: it is not invoked).
      if (a.closed) return;
      if (!(a.status === status && text === body && a.headers['content-type'] === undefined)) {
        fail(`expected workerd's own ${status} page, got ${a.hang ? 'no answer' : a.closed ? 'a close' : `${a.status} ${a.headers['content-type']}: ${text.slice(0, 200)}`}`);
      }
      return;
    }
    if (c.devProxy) {
      if (a.hang) return this.count('hang (dev proxy)');
      const dev = !a.closed && DEV_PROXY_ANSWERS.find((d) => d.status === a.status && d.type.test(a.headers['content-type'] ?? '') && d.body.test(a.body.toString('utf8')));
      if (dev) return this.count(`${a.status} (dev proxy)`);
    }
    if (a.hang) return fail(`no answer within ${c.deadlineMs ?? DEADLINE_MS} ms`);
    if (a.closed) {
      this.count('closed');
      if (!c.allowClosed) fail('closed without an answer');
      return;
    }
    this.count(a.status);
    const text = a.body.toString('utf8');
    if (c.preflight) {
      if (a.status !== 204 || a.body.length || a.headers['access-control-allow-origin'] !== '*' || !/authorization/.test(a.headers['access-control-allow-headers'] ?? '')) {
        fail(`a preflight answered ${a.status} ${JSON.stringify(a.headers)}: ${text.slice(0, 120)}`);
      }
      return;
    }
    if (!(a.status >= 400 && a.status < 500)) return fail(`answered ${a.status}: ${text.slice(0, 200)}`);
    if (c.expect && a.status !== c.expect) return fail(`expected ${c.expect}, got ${a.status}: ${text.slice(0, 200)}`);
    if (!/^application\/json/.test(a.headers['content-type'] ?? '')) {
      return fail(`${a.status} with content-type ${a.headers['content-type']}: ${text.slice(0, 120)}`);
    }
    let j;
    try {
      j = JSON.parse(text);
    } catch {
      return fail(`${a.status} body is not JSON: ${text.slice(0, 120)}`);
    }
    // A JSON-RPC route answers JSON-RPC's error object, the house's shape in `error.data`.
    const shape = RPC_ROUTES.has(c.route) && j && j.jsonrpc === '2.0' && j.error && typeof j.error.code === 'number' ? j.error.data : j;
    if (!(shape && shape.ok === false && shape.code === a.status && typeof shape.error === 'string' && typeof shape.reason === 'string' && shape.reason)) {
      fail(`${a.status} is not the error shape: ${text.slice(0, 200)}`);
    }
  }

  count(status) {
    this.statuses.set(String(status), (this.statuses.get(String(status)) ?? 0) + 1);
  }
}

/** Waits until GET /health is answered 200 (a few tries, each bounded). */
async function settled(port) {
  const head = headBytes('GET', '/health', [['Host', `127.0.0.1:${port}`], ['Connection', 'close']]);
  for (let i = 0; i < 10; i++) {
    const a = await exchange(port, head, [], { deadlineMs: 3_000 });
    if (a.status === 200) return;
  }
  throw new Error('the house did not answer GET /health again');
}

/** Runs `fns` with at most PARALLEL at once. */
async function pool(items, fn) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: PARALLEL }, worker));
}

// ---------------------------------------------------------------------------------------------
// Databases: every table, every row, before and after.

function dump(dbPath) {
  const r = spawnSync('sqlite3', ['-readonly', dbPath, '.dump'], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`sqlite3 .dump ${dbPath}: ${r.stderr}`);
  // `_cf_METADATA` is workerd's own row in the SQLite file behind local D1 (no migration of ours
  // makes it); its value moves during Worker runs in which no table of ours changes.
  return r.stdout.split('\n').filter((l) => !l.startsWith('INSERT INTO _cf_METADATA VALUES('));
}

/** The lines of `after` not in `before` and of `before` not in `after`, as multisets. */
function difference(before, after) {
  const count = new Map();
  for (const l of before) count.set(l, (count.get(l) ?? 0) + 1);
  const added = [];
  for (const l of after) {
    const n = count.get(l) ?? 0;
    if (n > 0) count.set(l, n - 1);
    else added.push(l);
  }
  const removed = [];
  for (const [l, n] of count) for (let i = 0; i < n; i++) removed.push(l);
  return { added, removed };
}

// ---------------------------------------------------------------------------------------------
// The two runtimes.

const freePort = async () => (await freePorts(1))[0];

async function http(port, method, path, { headers = {}, body } = {}) {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : Buffer.isBuffer(body) ? body : canon(body),
    signal: AbortSignal.timeout(DEADLINE_MS),
  });
  const text = await r.text();
  return { status: r.status, text };
}

/** Registers ana and bo, tops ana up and sends one email as her: what the poisons refer to. */
async function setup(port, adminToken) {
  const host = `127.0.0.1:${port}`;
  const agent = async (local) => {
    const keys = await newAgentKeys();
    const body = await registrationBody(local, keys);
    const r = await http(port, 'POST', '/agents', { headers: { authorization: `Bearer ${adminToken}` }, body });
    if (r.status !== 201 && r.status !== 200) throw new Error(`registering ${local}: ${r.status} ${r.text}`);
    return { local, keys, address: `${local}@${HOUSE}` };
  };
  const ana = await agent('ana');
  const bo = await agent('bo');
  const stranger = await newAgentKeys();
  const topup = await http(port, 'POST', '/libro/topup', {
    headers: { authorization: `Bearer ${adminToken}` },
    body: { address: ana.address, amount: 5, id: ids.topup, note: 'setup' },
  });
  if (topup.status >= 300) throw new Error(`top-up: ${topup.status} ${topup.text}`);
  const task = await http(port, 'POST', '/tareas', {
    headers: { authorization: `Bearer ${adminToken}` },
    body: { id: ids.task, price: 2, statement: 'setup', verify: TASK_VERIFY },
  });
  if (task.status >= 300) throw new Error(`task: ${task.status} ${task.text}`);
  const emailBody = { to: 'someone@example.com', subject: 'setup', body: 'setup body', id: ids.email };
  const { header } = await authHeader(ana.keys, { address: ana.address, method: 'POST', path: '/email/out', host, body: emailBody });
  const email = await http(port, 'POST', '/email/out', { headers: { authorization: header }, body: emailBody });
  if (email.status !== 202) throw new Error(`email out: ${email.status} ${email.text}`);
  const inbound = await signEnvelope(draftEnvelope(ana.address, [bo.address], { text: 'hello' }, { thread: ids.envelope, in_reply_to: ids.envelope, expires: new Date(Date.now() + 86_400_000).toISOString() }), ana.keys);
  const other = await signEnvelope(draftEnvelope(ana.address, [bo.address], { text: 'other' }), ana.keys);
  const outbound = { ...(await signEnvelope(draftEnvelope(ana.address, [bo.address], { text: 'hello' }, { thread: ids.envelope, in_reply_to: ids.envelope, expires: new Date(Date.now() + 86_400_000).toISOString() }), ana.keys)) };
  outbound.signature = { ...outbound.signature, value: other.signature.value };
  return { ana, bo, stranger, inboundEnvelope: inbound, outboundEnvelope: outbound };
}

async function runSweep(runtime, port, dbPath, adminToken) {
  const t = performance.now();
  const ctx = await setup(port, adminToken);
  // Whatever the setup's answers started (the email's kick) settles first.
  await sleep(1500);
  const before = dump(dbPath);

  naughtySlot = 0;
  naughtyUsed.clear();
  const table = routes(ctx).filter((r) => (!r.only || r.only === runtime) && !(r.assetOnWorker && runtime === 'worker'));
  const byName = new Map(table.map((r) => [`${r.m} ${r.p}`, r]));
  const all = table.flatMap((r) => casesFor(r, table)).concat(globalCases());
  // NYX5_SWEEP_ONLY=<regex> keeps the cases whose `route [family] what` matches (to replay a few).
  const only = process.env.NYX5_SWEEP_ONLY ? new RegExp(process.env.NYX5_SWEEP_ONLY) : null;
  const kept = all.filter((c) => c.skipOn !== runtime);
  if (kept.length < all.length) console.log(`${runtime}: ${all.length - kept.length} case(s) left out on this runtime (see casesFor)`);
  const cases = only ? kept.filter((c) => only.test(`${c.route} [${c.family}] ${c.what}`)) : kept;
  if (only) console.log(`${runtime}: NYX5_SWEEP_ONLY keeps ${cases.length} of ${kept.length} cases`);
  const sweep = new Sweep({ runtime, port, dbPath, adminToken, ctx });
  const run = (c) =>
    sweep.send(c, (name) => byName.get(name) ?? byName.get('GET /health')).catch((e) => sweep.failures.push(`${c.route} [${c.family}] ${c.what}: ${e.stack}`));
  // What workerd or the dev proxy answers itself, and the 413s given before a body is all read,
  // go last and one at a time: under `wrangler dev` each of them fails the dev proxy's own
  // forwarding (`Uncaught exception`, `Network connection lost`), and wrangler's ProxyWorker
  // then fails the requests in flight beside it too (503 `restarted mid-request`, 500 `Cannot
  // reconstruct a Request with a used body`, hangs), which production has no part in.
  // Each waits until the house answers GET /health again, so the dev proxy's trouble with one
  // (it pauses and replays what was in flight) is over before the next.
  const alone = (c) => Boolean(c.worker?.workerd || c.worker?.devProxy);
  await pool(cases.filter((c) => !alone(c)), run);
  for (const c of cases.filter(alone)) {
    await run(c);
    await settled(port);
  }

  await sleep(500);
  const after = dump(dbPath);
  const { added, removed } = difference(before, after);
  const spent = added.filter((l) => {
    const m = /^INSERT INTO nonces VALUES\('[^']*','([^']*)',/.exec(l);
    return m && sweep.nonces.has(m[1]);
  });
  const changed = added.filter((l) => !spent.includes(l)).concat(removed.map((l) => `(removed) ${l}`));
  for (const l of changed) sweep.failures.push(`database changed: ${l.slice(0, 300)}`);

  // The counts.
  const families = ['method', 'n_json', 'naughty', 'wrong_type', 'oversize', 'deep', 'utf8', 'framing', 'token', 'headers'];
  const routesSeen = [...new Set([...sweep.counts.keys()].map((k) => k.split('\t')[0]))];
  console.log(`\n${runtime}: ${cases.length} cases, answers by status ${JSON.stringify(Object.fromEntries(sweep.statuses))}`);
  console.log(`${'route'.padEnd(34)}${families.map((f) => f.padStart(11)).join('')}      total`);
  let total = 0;
  for (const r of routesSeen) {
    const row = families.map((f) => sweep.counts.get(`${r}\t${f}`) ?? 0);
    const sum = row.reduce((a, b) => a + b, 0);
    total += sum;
    console.log(`${r.padEnd(34)}${row.map((n) => String(n).padStart(11)).join('')}${String(sum).padStart(11)}`);
  }
  console.log(
    `${runtime}: ${total} requests in ${secs(performance.now() - t)}; naughty strings used ${naughtyUsed.size}/${NAUGHTY.length}; ` +
      `database rows changed: ${changed.length} (nonces spent by the sweep's valid tokens: ${spent.length})`,
  );
  if (naughtyUsed.size !== new Set(NAUGHTY).size) sweep.failures.push(`only ${naughtyUsed.size} naughty strings were used`);
  return sweep.failures;
}

async function serveRuntime() {
  const bin = process.env.NYX5_BIN ?? join(process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target'), 'debug/nyx5');
  if (!existsSync(bin)) throw new Error(`no nyx5 binary at ${bin} (cargo build -p nyx5-cli, or set NYX5_BIN)`);
  const dir = mkdtempSync(join(tmpdir(), 'nyx5-sweep-serve-'));
  const port = await freePort();
  const adminToken = b64u(random(24));
  const dbPath = join(dir, 'house.db');
  const child = spawn(
    bin,
    ['serve', '--domain', HOUSE, '--db', dbPath, '--listen', `127.0.0.1:${port}`, '--registration', 'invite', '--tick-ms', '3600000', '--index', '--verifica', '--tareas'],
    { env: { ...process.env, NYX5_ADMIN_TOKEN: adminToken }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  child.stdout.on('data', (d) => (log += d));
  child.stderr.on('data', (d) => (log += d));
  const exited = new Promise((r) => child.on('exit', (code, signal) => r({ code, signal })));
  try {
    const deadline = Date.now() + 30_000;
    while (!log.includes('nyx5 serve:')) {
      if (Date.now() > deadline) throw new Error(`nyx5 serve was not ready:\n${log}`);
      await sleep(50);
    }
    const failures = await runSweep('serve', port, dbPath, adminToken);
    if (/panicked/.test(log)) failures.push(`nyx5 serve panicked:\n${log}`);
    return failures;
  } finally {
    child.kill('SIGTERM');
    const ended = await Promise.race([exited, sleep(10_000).then(() => null)]);
    if (!ended) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

async function workerRuntime() {
  if (!existsSync(join(ROOT, 'build/index.js'))) throw new Error('no Worker build in build/ (scripts/build-worker)');
  const state = mkdtempSync(join(tmpdir(), 'nyx5-sweep-worker-'));
  const port = Number(process.env.NYX5_SWEEP_PORT ?? (await freePort()));
  const adminToken = b64u(random(24));
  const house = new WranglerHouse({
    domain: HOUSE,
    port,
    inspectorPort: await freePort(),
    stateDir: state,
    vars: { NYX5_REGISTRATION: 'invite', NYX5_ADMIN_TOKEN: adminToken, NYX5_INDEX: 'on', NYX5_VERIFICA: 'on', NYX5_TAREAS: 'on' },
  });
  let ok = false;
  try {
    await house.migrate();
    await house.start();
    const d1 = join(house.persist, 'v3/d1/miniflare-D1DatabaseObject');
    const files = readdirSync(d1).filter((f) => f.endsWith('.sqlite') && f !== 'metadata.sqlite');
    if (files.length !== 1) throw new Error(`expected one D1 file in ${d1}, found ${files.join(', ')}`);
    const failures = await runSweep('worker', port, join(d1, files[0]), adminToken);
    const log = house.tail(100_000);
    if (/panicked|RuntimeError: unreachable/.test(log)) failures.push(`the Worker panicked:\n${house.tail(60)}`);
    ok = failures.length === 0;
    return failures;
  } finally {
    await house.stop();
    if (ok) rmSync(state, { recursive: true, force: true });
    else console.log(`worker state and log kept in ${state}`);
  }
}

// ---------------------------------------------------------------------------------------------

const which = process.argv[2] ?? 'all';
if (!['serve', 'worker', 'all'].includes(which)) {
  console.error('usage: node tests/e2e/sweep.mjs [serve|worker|all]');
  process.exit(2);
}
if (spawnSync('sqlite3', ['-version']).status !== 0) {
  console.error('sweep: the sqlite3 command-line shell is required');
  process.exit(1);
}

// Every route the house and the Worker serve has an entry here, and every entry is served.
{
  const served = servedRoutes();
  const dummy = { ana: { keys: {} }, bo: { keys: {} }, stranger: {}, inboundEnvelope: {}, outboundEnvelope: {} };
  const table = routes(dummy);
  const mine = new Set(table.filter((r) => !r.only).map((r) => `${r.m} ${r.p}`));
  const mineWorker = new Set(table.filter((r) => r.only === 'worker').map((r) => `${r.m} ${r.p}`));
  const norm = (s) => s.replace(/:\w+/g, ':_');
  const missing = served.house.filter((r) => ![...mine].some((m) => norm(m) === norm(r)));
  const stale = [...mine].filter((m) => !served.house.some((r) => norm(m) === norm(r)));
  const missingWorker = served.worker.filter((r) => !mineWorker.has(r));
  if (missing.length || stale.length || missingWorker.length) {
    console.error(`sweep: the route table and the router disagree: not swept ${[...missing, ...missingWorker].join(', ') || '-'}; not served ${stale.join(', ') || '-'}`);
    process.exit(1);
  }
  console.log(`sweep: ${served.house.length} house routes and ${served.worker.length} Worker pages, all in the route table`);
}

let failed = false;
for (const runtime of which === 'all' ? ['serve', 'worker'] : [which]) {
  const failures = await (runtime === 'serve' ? serveRuntime() : workerRuntime());
  if (failures.length) {
    failed = true;
    console.log(`\n${runtime}: ${failures.length} failures`);
    for (const f of failures.slice(0, 200)) console.log(`  ${f}`);
    if (failures.length > 200) console.log(`  … and ${failures.length - 200} more`);
  } else {
    console.log(`${runtime}: every request refused in the error shape, no table changed`);
  }
}
console.log(`\nsweep: ${failed ? 'FAILED' : 'passed'} in ${secs(performance.now() - T0)}`);
process.exit(failed ? 1 : 0);
