// The browser client's shell. Everything the protocol does — keys, tokens, cards, sealing,
// opening, signatures — is `nyx5-web`, the project's Rust compiled to WebAssembly (./pkg). This
// file only fetches, stores and draws. Keys never leave the page: they are kept in IndexedDB,
// encrypted with AES-GCM under a key derived from the passphrase (PBKDF2-SHA256, 600,000
// rounds, WebCrypto; the derived key is not extractable), and exported only when asked to.
// The mail the page opened or sent is kept in IndexedDB too, sealed under a key that lives in
// the locked profile, for threads and search (see "Kept mail" below).

import init, * as nyx5 from './pkg/nyx5_web.js';

const $ = (id) => document.getElementById(id);
const PBKDF2_ROUNDS = 600000;
const enc = new TextEncoder();

let wasmReady = null;
/** What is unlocked: the profile, the key that locks it again, and the house's verified card. */
const state = { profile: null, lock: null, house: null, mail: null };

// ---------------------------------------------------------------------------------------------
// Small helpers.

function say(text, kind = '') {
  const s = $('status');
  s.textContent = text;
  s.className = `status ${kind}`;
}

function show(section) {
  for (const id of ['unlock', 'join', 'agent']) $(id).hidden = id !== section;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

/** Runs a button's work with the button disabled and any failure said in the status line. */
function guarded(fn) {
  return async (event) => {
    event?.preventDefault?.();
    const b = event?.submitter ?? event?.currentTarget;
    if (b && 'disabled' in b) b.disabled = true;
    try {
      await fn(event);
    } catch (e) {
      say(e.message ?? String(e), 'bad');
    } finally {
      if (b && 'disabled' in b) b.disabled = false;
    }
  };
}

// ---------------------------------------------------------------------------------------------
// The locked profile in IndexedDB.

function idb() {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open('nyx5', 3);
    r.onupgradeneeded = (event) => {
      const db = r.result;
      if (!db.objectStoreNames.contains('profile')) db.createObjectStore('profile');
      // Kept mail: `k` a keyed hash of the message's direction and id, `a` of the agent, and
      // the sealed record. Version 2's store (hashes of every word, in clear) is dropped.
      if (event.oldVersion === 2 && db.objectStoreNames.contains('mail')) db.deleteObjectStore('mail');
      if (!db.objectStoreNames.contains('mail')) db.createObjectStore('mail', { keyPath: 'k' }).createIndex('agent', 'a');
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

async function idbDo(mode, fn, store = 'profile') {
  const db = await idb();
  return new Promise((resolve, reject) => {
    const tx = db.transaction(store, mode);
    const req = fn(tx.objectStore(store));
    tx.oncomplete = () => resolve(req?.result);
    tx.onerror = () => reject(tx.error);
  });
}

const stored = () => idbDo('readonly', (s) => s.get('current'));

async function lockKey(passphrase, salt) {
  const base = await crypto.subtle.importKey('raw', enc.encode(passphrase), 'PBKDF2', false, ['deriveKey']);
  return crypto.subtle.deriveKey(
    { name: 'PBKDF2', salt, iterations: PBKDF2_ROUNDS, hash: 'SHA-256' },
    base,
    { name: 'AES-GCM', length: 256 },
    false,
    ['encrypt', 'decrypt'],
  );
}

/** Writes the unlocked profile back, encrypted under the key it was unlocked with. */
async function save() {
  const { profile, lock } = state;
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const data = await crypto.subtle.encrypt({ name: 'AES-GCM', iv }, lock.key, enc.encode(JSON.stringify(profile)));
  const record = { v: 1, address: profile.agents[0].address, salt: lock.salt, iv, data };
  await idbDo('readwrite', (s) => s.put(record, 'current'));
}

async function newLock(passphrase) {
  const salt = crypto.getRandomValues(new Uint8Array(16));
  return { salt, key: await lockKey(passphrase, salt) };
}

async function unlock(passphrase) {
  const record = await stored();
  const key = await lockKey(passphrase, record.salt);
  let plain;
  try {
    plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: record.iv }, key, record.data);
  } catch {
    throw new Error('That passphrase does not open this profile.');
  }
  state.profile = JSON.parse(new TextDecoder().decode(plain));
  state.lock = { salt: record.salt, key };
}

// ---------------------------------------------------------------------------------------------
// The house, over HTTP.

const me = () => state.profile.agents[0];
const keysOf = (a) => JSON.stringify(a.keys);

async function answerOf(resp, what) {
  const text = await resp.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {}
  if (!resp.ok) {
    // The refusal's stable name (`error`) is kept, in the message and as `e.error` with the
    // code as `e.code`, for code that branches on it; the reason is for the person reading.
    const why = body?.reason ? `${body.error ?? resp.status}: ${body.reason}` : `HTTP ${resp.status}`;
    const name = typeof body?.error === 'string' && /^[a-z0-9_]{1,64}$/.test(body.error) ? body.error : undefined;
    throw Object.assign(new Error(`${what}: ${why}`), { code: resp.status, error: name });
  }
  return { text, body };
}

/** A request to this house signed with the agent's token (spec §8), or with the operator's
 * token when one is given (registration only). */
async function call(method, path, { query = '', body = '', what = `${method} ${path}`, operator = '', signal } = {}) {
  const a = me();
  const bytes = enc.encode(body);
  const auth = operator ? `Bearer ${operator}` : nyx5.token(keysOf(a), a.address, method, path, query, location.host, bytes, Date.now());
  const headers = { authorization: auth };
  if (body) headers['content-type'] = 'application/json';
  const resp = await fetch(path + (query ? `?${query}` : ''), { method, headers, body: body || undefined, signal });
  return answerOf(resp, what);
}

/** How long another house has to answer, and the most of its answer that is read. */
const FOREIGN_TIMEOUT_MS = 8000;
const FOREIGN_MAX_BYTES = 256 * 1024;
const MAX_PINS = 256;

/** A card from another house: a deadline and a size cap, so a slow or huge answer from a
 * stranger's house cannot hold the page. */
async function foreign(url, what) {
  const resp = await fetch(url, { signal: AbortSignal.timeout(FOREIGN_TIMEOUT_MS), referrerPolicy: 'no-referrer' });
  const reader = resp.body.getReader();
  const parts = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > FOREIGN_MAX_BYTES) {
      await reader.cancel();
      throw new Error(`${what}: the answer is over ${FOREIGN_MAX_BYTES} bytes`);
    }
    parts.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return answerOf(new Response(bytes, { status: resp.status }), what);
}

/** A domain as cards and pins name it: lower case, no final dot. */
const domainName = (d) => d.trim().toLowerCase().replace(/\.$/, '');

/** A domain card, verified against the pin this profile keeps for it (trust on first use). The
 * page trusts its own house anyway: that house serves this very script. */
async function domainCard(name) {
  const domain = domainName(name);
  const own = !state.house || state.house.domain === domain;
  const { text } = own
    ? await answerOf(await fetch('/.well-known/nyx5.json'), `the card of ${domain}`)
    : await foreign(`https://${domain}/.well-known/nyx5.json`, `the card of ${domain}`);
  const pins = state.profile?.pins ?? {};
  const v = JSON.parse(nyx5.verify_domain(text, domain, pins[domain] ?? '', Date.now()));
  if (state.profile && pins[v.domain] !== v.pin) {
    const next = { ...pins, [v.domain]: v.pin };
    const names = Object.keys(next);
    // A bounded set: the oldest pin of another house goes first (never the page's own).
    while (names.length > MAX_PINS) delete next[names.splice(names.findIndex((n) => n !== state.house?.domain), 1)[0]];
    state.profile.pins = next;
    await save();
  }
  return { domain: v.domain, text, card: v.card, estafeta: v.card.estafeta, pin: v.pin };
}

const cards = new Map();
/** How deep a delegation is followed, as the house's resolver follows it. */
const MAX_DELEGATION = 8;

/** The card of `address` as its house serves it (text), unverified. */
async function cardText(address, house) {
  const local = address.slice(0, address.lastIndexOf('@'));
  const path = `/agents/${encodeURIComponent(local)}`;
  const what = `the card of ${address}`;
  return (house === state.house ? await answerOf(await fetch(path), what) : await foreign(house.estafeta + path, what)).text;
}

/** An agent's card and its house's card, both as text, verified together; a subagent's
 * (`name.parent@house`) with the cards of its delegation, nearest first. */
async function agentCard(address) {
  if (cards.has(address)) return cards.get(address);
  const at = address.lastIndexOf('@');
  const [local, domain] = [address.slice(0, at), domainName(address.slice(at + 1))];
  const house = domain === state.house.domain ? state.house : await domainCard(domain);
  const text = await cardText(`${local}@${domain}`, house);
  const parents = [];
  for (let l = local; l.includes('.') && parents.length < MAX_DELEGATION; ) {
    l = l.slice(l.indexOf('.') + 1);
    parents.push(JSON.parse(await cardText(`${l}@${domain}`, house)));
  }
  const v = JSON.parse(nyx5.verify_agent(text, house.text, parents.length ? JSON.stringify(parents) : '', Date.now()));
  const found = { card: text, domain: house.text, parents, verified: v };
  cards.set(address, found);
  return found;
}

// ---------------------------------------------------------------------------------------------
// Joining, unlocking, importing and exporting.

async function join() {
  const name = $('join-name').value.trim();
  const invite = $('join-invite').value.trim();
  const operator = $('join-operator').value.trim();
  $('join-operator').value = '';
  const passphrase = $('join-pass').value;
  $('join-pass').value = '';
  const address = `${name}@${state.house.domain}`;
  say(`Making keys for ${address}…`);
  const keys = JSON.parse(nyx5.new_keys());
  state.profile = { agents: [{ address, house: location.origin, keys, previous: [] }], pins: { [state.house.domain]: state.house.pin } };
  state.lock = await newLock(passphrase);
  const extra = { capabilities: { listed: $('join-listed').checked }, inbox: { policy: 'open' } };
  if (invite) extra.invite = invite;
  const body = nyx5.registration_body(JSON.stringify(keys), name, JSON.stringify(extra), Date.now());
  try {
    const { body: answer } = await call('POST', '/agents', { body, operator, what: `registering ${address}` });
    const card = JSON.parse(nyx5.verify_agent(JSON.stringify(answer.card), state.house.text, '', Date.now()));
    if (card.address !== address || card.sig !== keys.sig) throw new Error('The house certified another address or key.');
  } catch (e) {
    state.profile = null;
    throw e;
  }
  await save();
  say(`Joined as ${address}. Your keys are locked in this browser.`, 'ok');
  await enter();
}

async function importProfile() {
  const file = $('import-file').files[0];
  const parsed = JSON.parse(nyx5.profile_import(await file.text()));
  const agent = parsed.agents.find((a) => new URL(a.house).origin === location.origin);
  if (!agent) {
    const where = parsed.agents.map((a) => a.house).join(', ') || 'nowhere';
    throw new Error(`No agent of this profile lives at ${location.origin} (it has agents at ${where}).`);
  }
  state.profile = { agents: [agent], pins: parsed.pins ?? {} };
  state.lock = await newLock($('import-pass').value);
  $('import-pass').value = '';
  await save();
  say(`Imported ${agent.address}.`, 'ok');
  await enter();
}

function exportProfile() {
  const text = nyx5.profile_export(JSON.stringify(state.profile.agents), JSON.stringify(state.profile.pins ?? {}));
  const url = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  const a = el('a', { href: url, download: 'agents.json' });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  say('Exported: keep the file as you would the keys themselves (nyx5 --agent agents.json …).', 'ok');
}

async function enter() {
  // The house again, now against the pin this profile keeps for it.
  state.house = await domainCard(state.house.domain);
  $('me').textContent = me().address;
  show('agent');
  await refresh();
  // Locked or forgotten while the mailbox was read: nothing to follow.
  if (state.profile) watch().catch((e) => console.warn(`live updates: ${e.message ?? e}`));
}

// ---------------------------------------------------------------------------------------------
// The live inbox (issue 38 §5; docs/SPEC.md §8, `wait`): the page asks its house to hold an empty
// read of the mailbox open until mail arrives, and shows the mailbox again when some does. One
// watch per signed-in agent: a lock, a forget or a newer watch ends it once its read answers.

/** Seconds the house holds an empty read open (it allows up to 25; 20 keeps its rechecks short). */
const LIVE_WAIT_S = 20;
/** A read answered sooner than this with nothing new was not held open: pause before the next,
 * from LIVE_PAUSE_MS doubling up to LIVE_PAUSE_MAX_MS; so does a tenth read in a row answered at
 * once with new mail (the rule of `nyx5_client::inbox::follow_pause`). */
const LIVE_HELD_MS = 1000;
const LIVE_PAUSE_MS = 2000;
const LIVE_PAUSE_MAX_MS = 30000;
const LIVE_QUICK_MAX = 10;
let watching = 0;
/** The watch's read in flight, cancelled by a lock or a forget. */
let watchAbort = null;

function stopWatching() {
  watching += 1;
  watchAbort?.abort();
  watchAbort = null;
}

async function watch() {
  stopWatching();
  if (!state.profile) return;
  const mine = watching;
  const abort = new AbortController();
  watchAbort = abort;
  const address = me().address;
  const still = () => mine === watching && state.profile && me().address === address;
  let after = null;
  let pause = 0;
  let quick = 0;
  // The first reads walk past the mail already shown (no wait); then each read waits.
  let primed = false;
  const next = (p) => Math.min(Math.max(p * 2, LIVE_PAUSE_MS), LIVE_PAUSE_MAX_MS);
  while (still()) {
    const asked = Date.now();
    const before = after;
    const waited = primed;
    try {
      const q = [`limit=200`, after === null ? '' : `after=${after}`, primed ? `wait=${LIVE_WAIT_S}` : ''].filter(Boolean).join('&');
      const { body } = await call('GET', `/mailbox/${localOf(address)}`, { query: q, what: 'waiting for mail', signal: abort.signal });
      if (!still()) return;
      const seqs = (body.envelopes ?? []).map((e) => e.seq).filter(Number.isSafeInteger);
      if (seqs.length) after = Math.max(after ?? 0, ...seqs);
      const more = body.next !== null && body.next !== undefined && after !== before;
      $('live').textContent = 'Live: new mail shows as it arrives.';
      if (primed && after !== before && !more) await refresh({ quiet: true });
      if (!still()) return;
      if (!more) primed = true;
      const held = !waited || Date.now() - asked >= LIVE_HELD_MS;
      const advanced = after !== before;
      pause = (advanced && quick < LIVE_QUICK_MAX) || (held && !advanced) ? 0 : next(pause);
      quick = Date.now() - asked < LIVE_HELD_MS ? quick + 1 : 0;
    } catch (e) {
      if (!still()) return;
      $('live').textContent = `Live updates paused (${e.message ?? e}); retrying.`;
      pause = next(pause);
    }
    if (pause) await new Promise((r) => setTimeout(r, pause));
  }
}

// ---------------------------------------------------------------------------------------------
// Kept mail (issue 38 §1; docs/SPEC.md, "Kept mail"): every message the page opened or sent,
// kept for threads and search as `nyx5` keeps it. What a message keeps, which keys join its
// conversation and with whom is `nyx5.kept_record`, the rules the command's store follows. In
// IndexedDB a message is one row `{k, a, iv, data}`: `data` is the whole record, sealed
// (AES-GCM, the row's `k` bound in, padded to whole kibibytes) under a key derived from
// `mail_key`, a random key inside the locked profile; `k` and `a` are keyed hashes of the
// message's direction and id and of the agent. Nothing in a row can be compared with another's
// (the hostile review of kept mail: per-word hashes told a sender which of their words other
// mail held), so a search or a thread opens the agent's rows and looks in memory; a browser's
// store is a page's mail, not a server's. Words are split and folded as the command's index does
// (letters and digits, case and diacritics folded).

const THREAD_MAX = 1000;
const FOUND_MAX = 50;
const PAD = 1024;

function b64uOf(bytes) {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function bytesOf(b64u) {
  const s = atob(b64u.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

/** The keys of the kept mail, from the profile's `mail_key` (made on first use), for the
 * profile they were made from. */
async function mailKeys() {
  const profile = state.profile;
  if (state.mail?.profile === profile) return state.mail;
  if (!profile.mail_key) {
    profile.mail_key = b64uOf(crypto.getRandomValues(new Uint8Array(32)));
    await save();
  }
  const base = await crypto.subtle.importKey('raw', bytesOf(profile.mail_key), 'HKDF', false, ['deriveKey']);
  const derive = (info, alg, uses) =>
    crypto.subtle.deriveKey({ name: 'HKDF', hash: 'SHA-256', salt: new Uint8Array(0), info: enc.encode(info) }, base, alg, false, uses);
  const keys = {
    profile,
    seal: await derive('nyx5 kept mail: seal', { name: 'AES-GCM', length: 256 }, ['encrypt', 'decrypt']),
    index: await derive('nyx5 kept mail: index', { name: 'HMAC', hash: 'SHA-256', length: 256 }, ['sign']),
  };
  // Locked (or another profile entered) meanwhile: these keys are not the page's.
  if (state.profile !== profile) throw new Error('The profile was locked.');
  state.mail = keys;
  return keys;
}

/** A keyed hash of `text` for the acting agent (16 bytes, base64url). */
async function blind(text) {
  const { index } = await mailKeys();
  const mac = await crypto.subtle.sign('HMAC', index, enc.encode(`${me().address}\n${text}`));
  return b64uOf(new Uint8Array(mac).slice(0, 16));
}

/** Words as the full-text index takes them: letters and digits, case and diacritics folded. */
function terms(text) {
  const folded = String(text ?? '').normalize('NFKD').replace(/\p{M}+/gu, '').toLowerCase();
  return [...new Set(folded.split(/[^\p{L}\p{N}]+/u).filter(Boolean))];
}

async function sealRecord(k, record) {
  const { seal } = await mailKeys();
  let text = JSON.stringify(record);
  text += ' '.repeat((PAD - (enc.encode(text).length % PAD)) % PAD);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const data = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: enc.encode(k) }, seal, enc.encode(text));
  return { iv, data };
}

/** Keeps message views the page read (`dir` "in") or sent ("out"); one kept already stays. */
async function keep(views, dir) {
  const a = await blind('');
  const rows = [];
  for (const v of views) {
    const r = JSON.parse(nyx5.kept_record(JSON.stringify(v), dir, Date.now()));
    if (!r) continue;
    r.unread = dir === 'in';
    const k = await blind(`${dir}\n${r.id}`);
    rows.push({ k, a, ...(await sealRecord(k, r)) });
  }
  if (!rows.length) return;
  const db = await idb();
  await new Promise((resolve, reject) => {
    const tx = db.transaction('mail', 'readwrite');
    const store = tx.objectStore('mail');
    for (const row of rows) {
      const got = store.getKey(row.k);
      got.onsuccess = () => {
        if (got.result === undefined) store.put(row);
      };
    }
    tx.oncomplete = resolve;
    tx.onerror = () => reject(tx.error);
  });
}

/** Every message kept for the acting agent, opened: its records, each with `row` (its key). */
async function allKept() {
  const { seal } = await mailKeys();
  const a = await blind('');
  const rows = await idb().then((db) => new Promise((resolve, reject) => {
    const req = db.transaction('mail', 'readonly').objectStore('mail').index('agent').getAll(a);
    req.onsuccess = () => resolve(req.result ?? []);
    req.onerror = () => reject(req.error);
  }));
  return Promise.all(rows.map(async (row) => {
    const plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: row.iv, additionalData: enc.encode(row.k) }, seal, row.data);
    const r = JSON.parse(new TextDecoder().decode(plain));
    r.view.unread = r.unread;
    r.row = row.k;
    return r;
  }));
}

/** Kept messages with all of `words` (none: all), newest first, at most FOUND_MAX. */
async function find(words) {
  const wanted = terms(words);
  const matching = (await allKept())
    .filter((r) => {
      if (!wanted.length) return true;
      // As the command's index: at most 64 KiB of each.
      const have = new Set(terms(`${r.subject.slice(0, 65536)} ${r.body.slice(0, 65536)} ${r.sender}`));
      return wanted.every((t) => have.has(t));
    })
    .sort((x, y) => y.at - x.at);
  return { found: matching.slice(0, FOUND_MAX), more: matching.length > FOUND_MAX };
}

/** The rules' test of two messages that share a key (`nyx5_client::kept::linked`): each one's
 * sender a party of the other, and a party in common besides the agent. */
function linked(x, y) {
  const agent = me().address.toLowerCase();
  return x.parties.includes(y.sender) && y.parties.includes(x.sender) && x.parties.some((p) => p !== agent && y.parties.includes(p));
}

/** The conversation kept message `id` is in, oldest first (at most THREAD_MAX, the newest). */
async function thread(id) {
  const all = (await allKept()).sort((x, y) => y.at - x.at);
  const byKey = new Map();
  for (const r of all) for (const key of r.keys) byKey.set(key, [...(byKey.get(key) ?? []), r]);
  // One message to start from, the agent's own first; the other direction only if linked.
  const starts = all.filter((r) => r.id === id).sort((x, y) => (y.dir === 'out') - (x.dir === 'out'));
  const members = new Set(starts.filter((r, i) => i === 0 || linked(starts[0], r)));
  const queue = [...members];
  while (queue.length && members.size < THREAD_MAX) {
    const x = queue.shift();
    for (const key of x.keys) {
      for (const y of byKey.get(key) ?? []) {
        if (members.has(y) || members.size >= THREAD_MAX || !linked(x, y)) continue;
        members.add(y);
        queue.push(y);
      }
    }
  }
  const list = [...members];
  // The rules' order: time, the house's sequence, the id.
  const seqOf = (r) => (Number.isSafeInteger(r.seq) ? r.seq : Number.MAX_SAFE_INTEGER);
  list.sort((x, y) => x.at - y.at || seqOf(x) - seqOf(y) || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
  return list;
}

/** Marks kept message `id` read (acknowledged on the house): it stays kept. One row opened. */
async function markRead(id) {
  const { seal } = await mailKeys();
  const k = await blind(`in\n${id}`);
  const found = await idbDo('readonly', (s) => s.get(k), 'mail');
  if (!found) return;
  const plain = await crypto.subtle.decrypt({ name: 'AES-GCM', iv: found.iv, additionalData: enc.encode(k) }, seal, found.data);
  const record = JSON.parse(new TextDecoder().decode(plain));
  record.unread = false;
  const row = { k, a: await blind(''), ...(await sealRecord(k, record)) };
  await idbDo('readwrite', (s) => s.put(row), 'mail');
}

/** Draws kept messages (a search's or a thread's) under `title`. */
function showKept(title, list, more = false) {
  const box = $('kept');
  box.replaceChildren(el('h4', {}, title));
  if (!list.length) box.append(el('p', { class: 'muted' }, 'Nothing kept matches.'));
  for (const r of list) {
    const m = r.view;
    box.append(
      el(
        'article',
        { class: 'kept', 'aria-label': `${r.dir === 'out' ? 'Sent to' : 'Message from'} ${r.dir === 'out' ? (m.to ?? []).join(', ') : m.from}`, 'data-id': r.id },
        el(
          'header',
          {},
          el('p', {}, r.dir === 'out' ? el('strong', {}, `You, to ${(m.to ?? []).join(', ')}`) : el('strong', {}, m.from ?? '?'), ' · ',
            r.dir === 'out' ? 'sent' : el('span', { class: m.trust === 'verified' ? 'ok' : 'bad' }, describeTrust(m)), ' · ', when(m.received ?? m.created),
            m.unread && r.dir === 'in' ? ' · unread' : ''),
        ),
        contentView(m, true),
        el('div', { class: 'row' },
          el('button', { type: 'button', class: 'secondary', onclick: guarded(() => openThread(r.id)) }, 'Thread'),
          el('button', { type: 'button', class: 'secondary', onclick: guarded(() => forgetKept(r)) }, 'Forget')),
      ),
    );
  }
  if (more) box.append(el('p', { class: 'muted' }, `Only the newest ${FOUND_MAX}: add words to narrow it.`));
}

async function search() {
  const words = $('search-words').value;
  const profile = state.profile;
  const { found, more } = await find(words);
  // Locked or forgotten meanwhile: nothing of it is drawn.
  if (state.profile !== profile) return;
  showKept(words.trim() ? `Kept mail with “${words.trim()}”` : 'Kept mail, newest first', found, more);
  say(`${found.length}${more ? '+' : ''} kept message${found.length === 1 ? '' : 's'} found.`, 'ok');
}

async function openThread(id) {
  const profile = state.profile;
  const list = await thread(id);
  if (state.profile !== profile) return;
  showKept(`Conversation (${list.length} message${list.length === 1 ? '' : 's'})`, list);
  say('Thread shown, oldest first.', 'ok');
}

async function forgetKept(r) {
  await idbDo('readwrite', (s) => s.delete(r.row), 'mail');
  document.querySelector(`#kept article[data-id="${CSS.escape(r.id)}"]`)?.remove();
  say('Forgotten: no longer kept in this browser.', 'ok');
}

// ---------------------------------------------------------------------------------------------
// Mail, the outbox and the account.

function describeTrust(m) {
  const words = {
    verified: 'signature verified',
    unverified: 'not signed (came by email)',
    invalid: 'signature invalid',
    unchecked: "sender's card unavailable",
  };
  return words[m.trust] ?? m.trust;
}

/** A message's content; `kept`: drawn from the kept store, where nothing is offered to act on. */
function contentView(m, kept = false) {
  const c = m.content;
  if (!c) return el('p', { class: 'bad' }, `Could not open: ${m.open_error ?? 'no content'}`);
  const media = (c.media ?? '').split(';')[0].trim();
  if (media.startsWith('text/') && typeof c.body === 'string') return el('pre', {}, c.body);
  // A quote is offered for acceptance only in mail its seller verifiably signed (the Libro checks
  // the quote's own signature again before any money moves).
  if (!kept && media === 'application/nyx5.cotizacion+json' && c.body && m.trust === 'verified' && c.body.seller === m.from) {
    const q = c.body;
    return el(
      'div',
      { class: 'quote' },
      el('p', {}, `Quote from ${m.from}: ${q.concept ?? ''} — ${q.price} ${q.currency ?? 'tok'} (${q.contract})`),
      el('div', { class: 'row' }, el('button', { type: 'button', onclick: guarded(() => accept(q, m)) }, 'Accept quote')),
    );
  }
  // The Libro's receipts and notices, and anything else structured: a line, the document folded.
  const labels = {
    'application/nyx5.recibo+json': 'Receipt from the Libro',
    'application/nyx5.aviso+json': 'Notice from the Libro',
    'application/nyx5.notice+json': 'Delivery notice',
    'application/nyx5.veredicto+json': 'Verdict',
  };
  const b = c.body && typeof c.body === 'object' ? c.body : {};
  // A receipt's status comes second: only `done` means the movement happened.
  const what = [b.op, b.status, b.contract, b.state, b.code, b.reason].filter((x) => typeof x === 'string' || typeof x === 'number').join(' · ');
  return el(
    'details',
    {},
    el('summary', {}, `${labels[media] ?? media}${what ? `: ${what}` : ''}`),
    el('pre', {}, JSON.stringify(c.body, null, 2)),
  );
}

async function openItems(items) {
  const keys = JSON.stringify([me().keys, ...(me().previous ?? [])]);
  // Side by side: one slow house delays only its own senders' mail.
  return Promise.all(items.map(async (item) => {
    const itemText = JSON.stringify(item);
    const peek = JSON.parse(nyx5.peek(itemText));
    let card = '';
    let domain = '';
    if (peek.signed) {
      try {
        if (peek.notice) {
          const d = peek.from.slice(peek.from.lastIndexOf('@') + 1);
          domain = (d === state.house.domain ? state.house : await domainCard(d)).text;
        } else {
          const found = await agentCard(peek.from);
          card = found.parents.length ? JSON.stringify({ card: JSON.parse(found.card), parent: found.parents }) : found.card;
          domain = found.domain;
        }
      } catch {
        // Left empty: the message is shown as "unchecked", never as verified.
      }
    }
    return JSON.parse(nyx5.open_item(keys, me().address, itemText, card, domain, Date.now()));
  }));
}

/** Reads and shows the mailbox (and the outbox, account and drafts beside it). `quiet` (the live
 * watch's) leaves the status line to whatever the person did last. */
async function refresh({ quiet = false } = {}) {
  const a = me();
  const local = a.address.slice(0, a.address.lastIndexOf('@'));
  const { body } = await call('GET', `/mailbox/${local}`, { query: 'limit=50', what: 'reading the mailbox' });
  const messages = await openItems(body.envelopes ?? []);
  // Locked, forgotten or switched meanwhile: nothing of this agent goes on the page.
  if (state.profile?.agents?.[0] !== a) return;
  // Kept in this browser as they are shown (threads, search); a failure here leaves the read.
  await keep(messages, 'in').catch((e) => console.warn(`kept mail: ${e.message ?? e}`));
  const box = $('inbox');
  box.replaceChildren();
  if (!messages.length) box.append(el('p', { class: 'muted' }, 'No mail waiting.'));
  for (const m of messages) {
    const trustClass = m.trust === 'verified' ? 'ok' : 'bad';
    box.append(
      el(
        'article',
        { class: 'message', 'aria-label': `Message from ${m.from}`, 'data-id': m.id },
        el(
          'header',
          {},
          el('p', {}, el('strong', {}, m.from ?? '?'), ' · ', el('span', { class: trustClass }, describeTrust(m)), ' · ', when(m.created), m.sealed ? ' · sealed' : ''),
        ),
        m.email ? el('p', { class: 'muted' }, `By email from ${m.email.from ?? '?'}${m.email.subject ? `: “${m.email.subject}”` : ''} (the mail system's word, not a signature)`) : '',
        contentView(m),
        el(
          'div',
          { class: 'row' },
          el('button', { type: 'button', class: 'secondary', onclick: () => replyTo(m) }, 'Reply'),
          el('button', { type: 'button', class: 'secondary', onclick: guarded(() => openThread(m.id)) }, 'Thread'),
          el('button', { type: 'button', onclick: guarded(() => ack(m.id)) }, 'Acknowledge'),
        ),
      ),
    );
  }
  await Promise.all([outbox(local), account(), drafts(local)]);
  if (!quiet) say(`${messages.length} message${messages.length === 1 ? '' : 's'} waiting.`, 'ok');
}

/** A time as the reader's own clock shows it, the exact instant kept in `datetime`. */
function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : el('time', { datetime: iso }, d.toLocaleString());
}

function replyTo(m) {
  $('compose-to').value = m.from;
  $('compose-reply').value = m.id ?? '';
  $('compose-body').focus();
}

async function ack(id) {
  const local = me().address.slice(0, me().address.lastIndexOf('@'));
  await call('POST', `/mailbox/${local}/ack`, { body: JSON.stringify({ ids: [id] }), what: 'acknowledging' });
  await markRead(id).catch((e) => console.warn(`kept mail: ${e.message ?? e}`));
  await refresh();
  say('Acknowledged: the house has dropped it (it stays kept in this browser).', 'ok');
}

/** An agent's card as the wasm functions take a recipient (or an approver): checked cards. */
async function cardArg(address) {
  const found = await agentCard(address);
  const r = { card: JSON.parse(found.card), domain: JSON.parse(found.domain) };
  if (found.parents.length) r.parent = found.parents;
  return r;
}

const localOf = (address) => address.slice(0, address.lastIndexOf('@'));
const allKeys = () => JSON.stringify([me().keys, ...(me().previous ?? [])]);

/** The `readers` a held send carries (docs/SPEC.md §7c): the envelope's key, from this agent's
 * own copy, wrapped for each approver of the holds over it. */
async function readersFor(envelope) {
  const { body } = await call('GET', `/agents/${localOf(me().address)}/hold`, { what: 'reading the holds over you' });
  const approvers = [];
  for (const a of new Set((body.holds ?? []).map((h) => h.approver))) approvers.push(await cardArg(a));
  return JSON.parse(nyx5.readers_for(allKeys(), me().address, JSON.stringify(envelope), JSON.stringify(approvers), Date.now())).readers;
}

async function send() {
  const to = $('compose-to').value.split(',').map((s) => s.trim().toLowerCase().replace(/\.$/, '')).filter(Boolean);
  const recipients = [];
  for (const t of to) recipients.push(await cardArg(t));
  const reply = $('compose-reply').value;
  const built = JSON.parse(
    nyx5.seal_message(keysOf(me()), me().address, JSON.stringify(recipients), $('compose-body').value, '', 'message', '', reply, Date.now()),
  );
  let answer;
  try {
    ({ body: answer } = await call('POST', '/outbound', { body: built.text, what: 'sending' }));
  } catch (e) {
    // Held for a person: the same envelope again, with the key wrapped for each approver.
    if (e.error !== 'approver_cannot_read') throw e;
    const readers = await readersFor(built.envelope);
    ({ body: answer } = await call('POST', '/outbound', { query: `readers=${readers}`, body: built.text, what: 'sending' }));
  }
  await keep([JSON.parse(nyx5.own_view(allKeys(), me().address, built.text))], 'out').catch((e) => console.warn(`kept mail: ${e.message ?? e}`));
  $('compose-body').value = '';
  $('compose-reply').value = '';
  if (answer?.draft) say(`Held at your house until ${(answer.draft.asks ?? []).join(', ')} approve it.`, 'ok');
  else say(`Sent, sealed to ${to.join(', ')}.`, 'ok');
  await Promise.all([outbox(localOf(me().address)), drafts(localOf(me().address))]);
}

/** Mail waiting for a person (docs/SPEC.md §7c): drafts this agent is asked to decide, opened
 * with the key their sender wrapped for it, and its own that wait. */
async function drafts(local) {
  const { body } = await call('GET', `/drafts/${local}`, { what: 'reading drafts' });
  const box = $('drafts');
  box.replaceChildren();
  const [asked, sent] = [body.asked ?? [], body.sent ?? []];
  if (!asked.length && !sent.length) return box.append(el('p', { class: 'muted' }, 'Nothing waits for approval.'));
  for (const listed of asked) {
    // A list carries no envelopes: each waiting one is read alone, with the key for this agent.
    const d = listed.state === 'pending'
      ? (await call('GET', `/drafts/${local}/${encodeURIComponent(listed.id)}`, { what: 'reading a draft' })).body.draft
      : listed;
    const opened = d.envelope ? JSON.parse(nyx5.open_draft(allKeys(), me().address, JSON.stringify(d))) : {};
    const actions = el('div', { class: 'row' });
    if (d.state === 'pending') {
      // What cannot be read is never approved here: decline it.
      if (opened.content) actions.append(el('button', { type: 'button', onclick: guarded(() => decideDraft(d.id, 'approve')) }, 'Approve'));
      actions.append(el('button', { type: 'button', class: 'secondary', onclick: guarded(() => decideDraft(d.id, 'decline')) }, 'Decline'));
    }
    box.append(
      el(
        'article',
        { class: 'message', 'aria-label': `Draft from ${d.sender}`, 'data-id': d.id },
        el('header', {}, el('p', {}, el('strong', {}, d.sender ?? '?'), ` to ${(d.to ?? []).join(', ')} · `, el('span', { class: 'state' }, d.state ?? ''), ' · until ', when(d.expires))),
        opened.content
          ? contentView({ content: opened.content }, true)
          : el('p', { class: opened.unreadable ? 'bad' : 'muted' }, opened.unreadable ? `Cannot be read: ${opened.unreadable}` : 'Decided.'),
        // Everything that would leave, not only the body: what it carries beside it leaves too.
        opened.carries ? el('details', { open: '' }, el('summary', {}, 'Everything it carries'), el('pre', {}, JSON.stringify(opened.carries, null, 2))) : '',
        actions,
      ),
    );
  }
  if (sent.length) {
    const ul = el('ul', { 'aria-label': 'Your drafts' });
    for (const d of sent) ul.append(el('li', { 'data-id': d.id }, el('code', {}, d.id), ` · ${d.state} · asks ${(d.asks ?? []).join(', ')}`));
    box.append(ul);
  }
}

async function decideDraft(id, verb) {
  await call('POST', `/drafts/${localOf(me().address)}/${encodeURIComponent(id)}/${verb}`, { body: '{}', what: `${verb} the draft` });
  say(verb === 'approve' ? 'Approved: it leaves once every approver said yes.' : 'Declined: it will never leave.', 'ok');
  await drafts(localOf(me().address));
}

async function operate(op, what) {
  const built = JSON.parse(nyx5.libro_op(keysOf(me()), me().address, op.house ?? state.house.domain, JSON.stringify(op.body), Date.now()));
  await call('POST', '/outbound', { body: built.text, what });
}

async function accept(quote) {
  await operate({ house: quote.house, body: { op: 'accept', quote } }, 'accepting the quote');
  say('Accepted: the Libro answers with a receipt in your mailbox.', 'ok');
  await account();
}

async function release(id) {
  await operate({ body: { op: 'release', contract: id } }, 'releasing the escrow');
  say('Released: the Libro answers with a receipt in your mailbox.', 'ok');
  await account();
}

async function outbox(local) {
  const { body } = await call('GET', `/outbox/${local}`, { query: 'limit=20', what: 'reading the outbox' });
  const list = $('outbox');
  list.replaceChildren();
  if (!body.envelopes?.length) return list.append(el('p', { class: 'muted' }, 'Nothing sent yet.'));
  const ul = el('ul');
  for (const e of body.envelopes) {
    const jobs = (e.jobs ?? []).map((j) => `${j.domain ?? ''} ${j.state ?? ''}`.trim()).join(', ');
    ul.append(el('li', { 'data-id': e.id }, el('code', {}, e.id), ' · ', when(e.queued), ` · ${jobs || 'delivered here'}`));
  }
  list.append(ul);
}

async function account() {
  const a = me().address;
  const { body } = await call('GET', `/libro/cuenta/${encodeURIComponent(a)}`, { what: 'reading the account' });
  $('balance').textContent = String(body.balance ?? 0);
  const box = $('contracts');
  box.replaceChildren();
  if (!body.contracts?.length) return box.append(el('p', { class: 'muted' }, 'No contracts yet.'));
  const table = el('table', {}, el('caption', {}, 'Contracts'), el('tr', {}, ...['Contract', 'Concept', 'Price', 'Other party', 'State', ''].map((h) => el('th', { scope: 'col' }, h))));
  for (const c of body.contracts) {
    const other = c.buyer === a ? c.seller : c.buyer;
    const action = el('td');
    if (c.buyer === a && (c.kind ?? c.contract) === 'escrow' && ['held', 'delivered'].includes(c.state)) {
      action.append(el('button', { type: 'button', onclick: guarded(() => release(c.id)) }, 'Release escrow'));
    }
    table.append(el('tr', { 'data-id': c.id }, el('td', {}, el('code', {}, c.id)), el('td', {}, c.concept ?? ''), el('td', {}, String(c.price ?? '')), el('td', {}, other ?? ''), el('td', { class: 'state' }, c.state ?? ''), action));
  }
  box.append(el('div', { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': 'Contracts' }, table));
}

// ---------------------------------------------------------------------------------------------
// Start.

async function start() {
  wasmReady = init();
  await wasmReady;
  state.house = await domainCard(JSON.parse(await (await fetch('/.well-known/nyx5.json')).text()).domain);
  const mode = state.house.card.policy?.registration ?? 'invite';
  $('join-preview').textContent = `name@${state.house.domain}`;
  $('join-name').addEventListener('input', () => {
    $('join-preview').textContent = `${$('join-name').value || 'name'}@${state.house.domain}`;
  });
  if (mode === 'admin') $('join-invite').placeholder = 'this house registers agents through its operator';
  $('join-form').addEventListener('submit', guarded(join));
  $('import-form').addEventListener('submit', guarded(importProfile));
  $('unlock-form').addEventListener('submit', guarded(async () => {
    await unlock($('unlock-pass').value);
    $('unlock-pass').value = '';
    await enter();
  }));
  $('forget').addEventListener('click', guarded(async () => {
    if (!confirm('Forget this agent in this browser? Without an exported profile its keys are gone.')) return;
    await idbDo('readwrite', (s) => s.delete('current'));
    await idbDo('readwrite', (s) => s.clear(), 'mail');
    // As a lock does, and more: nothing of this agent stays on the page.
    stopWatching();
    state.profile = null;
    state.lock = null;
    state.mail = null;
    cards.clear();
    for (const id of ['inbox', 'kept', 'outbox', 'contracts']) $(id).replaceChildren();
    $('search-words').value = '';
    show('join');
  }));
  $('refresh').addEventListener('click', guarded(() => refresh()));
  $('export').addEventListener('click', guarded(exportProfile));
  $('lock').addEventListener('click', () => {
    stopWatching();
    state.profile = null;
    state.lock = null;
    state.mail = null;
    cards.clear();
    $('inbox').replaceChildren();
    $('kept').replaceChildren();
    show('unlock');
    say('Locked.');
  });
  $('compose-form').addEventListener('submit', guarded(send));
  $('search-form').addEventListener('submit', guarded(search));
  const record = await stored();
  if (record) {
    $('unlock-address').textContent = record.address;
    show('unlock');
  } else {
    show('join');
  }
  say(`Ready: ${state.house.domain}, version ${nyx5.version()}.`);
}

start().catch((e) => say(`The client could not start: ${e.message ?? e}`, 'bad'));
