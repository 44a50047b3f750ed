// Houses under `wrangler dev` (workerd, local D1) for end-to-end tests: migrations, start with
// per-house `--var`s, readiness, cron and email triggers, `wrangler d1 execute`, and stopping.
// Each house runs in its own process group (spawned detached) so stopping it ends workerd too.
// Everything listens on and talks to 127.0.0.1 only.

import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join, resolve } from 'node:path';

export const ROOT = resolve(new URL('../..', import.meta.url).pathname);
export const WRANGLER = join(ROOT, 'node_modules/.bin/wrangler');

/** The environment every wrangler child gets: nothing reaches outside. */
export const ENV = {
  ...process.env,
  CI: '1',
  WRANGLER_SEND_METRICS: 'false',
  CLOUDFLARE_CF_FETCH_ENABLED: 'false',
  // The banner runs an npm update check; hide it.
  WRANGLER_HIDE_BANNER: 'true',
  NO_COLOR: '1',
  FORCE_COLOR: '0',
};

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** What a Worker end-to-end script needs before its first house: wrangler installed, the Worker
 * built (scripts/build-worker) and the `nyx5` command built. Throws with the build's output. */
export function buildWorkerAndCli() {
  if (!existsSync(WRANGLER)) throw new Error(`wrangler is missing (${WRANGLER}): run ./scripts/setup`);
  const build = spawnSync(join(ROOT, 'scripts/build-worker'), { cwd: ROOT, encoding: 'utf8', env: ENV });
  if (build.status !== 0) throw new Error(`scripts/build-worker failed:\n${build.stdout}\n${build.stderr}`);
  const cli = spawnSync('cargo', ['build', '--locked', '-p', 'nyx5-cli', '--bin', 'nyx5'], { cwd: ROOT, encoding: 'utf8' });
  if (cli.status !== 0) throw new Error(`cargo build nyx5 failed:\n${cli.stderr}`);
}

/** Runs wrangler to completion; answers stdout, throws with the output on a non-zero exit. */
export function wrangler(args, { timeoutMs = 120_000 } = {}) {
  return new Promise((resolveRun, reject) => {
    const child = spawn(WRANGLER, args, { cwd: ROOT, env: ENV, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
      reject(new Error(`wrangler ${args.slice(0, 3).join(' ')} timed out after ${timeoutMs} ms\n${out}\n${err}`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolveRun(out);
      else reject(new Error(`wrangler ${args.slice(0, 3).join(' ')} exited ${code ?? signal}\n${out}\n${err}`));
    });
  });
}

/** Binds 127.0.0.1:port, answering the server or null when the port is taken. */
function tryListen(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(null));
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

/** The first port of the kernel's ephemeral range (Linux; its default elsewhere). */
function ephemeralLow() {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
}

let nextPort = 0;

/**
 * `n` distinct loopback ports, each free a moment ago. They are taken below the kernel's
 * ephemeral range, never by listening on port 0: the kernel draws `:0` ports from the range it
 * also gives every outgoing connection, so between this answer and the house's own bind any
 * client socket on the machine could take the port. Below the range only an explicit bind can
 * collide; each process starts at its own offset (from its pid) and a port in use is skipped.
 */
export async function freePorts(n) {
  const first = 10000;
  const span = Math.max(1024, ephemeralLow() - first);
  const start = (process.pid * 7919) % span;
  const held = [];
  for (let tries = 0; held.length < n && tries < span; tries++) {
    const s = await tryListen(first + ((start + nextPort++) % span));
    if (s) held.push(s);
  }
  const ports = held.map((s) => s.address().port);
  await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
  if (ports.length < n) throw new Error(`freePorts: only ${ports.length} of ${n} loopback ports are free`);
  return ports;
}

/**
 * Loopback ports for one test, found free rather than fixed: a machine that already runs
 * something on a given port must not fail the suite. `offsets` name the ports a test needs
 * (its old fixed layout: 0, 1, 442 for an inspector, …); the answer maps each to a port that
 * was free a moment ago, all distinct (see `freePorts`). `env`, when set, moves the block to
 * fixed ports from it (base + offset), for reproducing a run by hand.
 */
export async function portsFor(envName, offsets) {
  const base = process.env[envName];
  if (base) return (k) => Number(base) + k;
  const found = await freePorts(offsets.length);
  const ports = new Map(offsets.map((o, i) => [o, found[i]]));
  return (k) => {
    const port = ports.get(k);
    if (port === undefined) throw new Error(`portsFor(${envName}): no port asked for offset ${k}`);
    return port;
  };
}

/** Whether something accepts TCP connections on 127.0.0.1:port. */
export function listening(port) {
  return new Promise((r) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      r(true);
    });
    s.once('error', () => r(false));
  });
}

const live = new Set();

/** Kills every house still running, at once (for exit paths). */
export function killAll(signal = 'SIGKILL') {
  for (const h of live) h.kill(signal);
}
process.on('exit', () => killAll());

/** One house: a domain served by `wrangler dev` on 127.0.0.1:port with its own state dir. */
export class House {
  /** `env`: more of wrangler's environment (e.g. `NODE_EXTRA_CA_CERTS`, which it hands to workerd). */
  constructor({ domain, port, inspectorPort, stateDir, vars = {}, env = {} }) {
    Object.assign(this, { domain, port, inspectorPort, vars, env });
    // wrangler.toml itself, static assets included: the Worker reads the Public Suffix List
    // from them at its first event, as it does deployed.
    this.config = join(ROOT, 'wrangler.toml');
    this.url = `http://127.0.0.1:${port}`;
    this.host = `127.0.0.1:${port}`;
    this.persist = join(stateDir, domain);
    this.log = join(stateDir, `${domain}.log`);
    // An empty env file stops wrangler from reading the repository's .dev.vars or .env.
    this.envFile = join(stateDir, `${domain}.env`);
    mkdirSync(this.persist, { recursive: true });
    writeFileSync(this.envFile, '');
    this.child = null;
    this.exited = null;
  }

  /** `wrangler d1 migrations apply DB --local` into this house's state. */
  migrate() {
    return wrangler(['d1', 'migrations', 'apply', 'DB', '--local', '--persist-to', this.persist]);
  }

  /** Starts `wrangler dev` and waits until GET /health names this house. */
  async start({ timeoutMs = 240_000 } = {}) {
    if (this.child) throw new Error(`${this.domain} is already running`);
    if (await listening(this.port)) throw new Error(`port ${this.port} is taken: something else listens on it`);
    if (await listening(this.inspectorPort)) throw new Error(`inspector port ${this.inspectorPort} is taken`);
    const args = [
      'dev',
      '--config',
      this.config,
      '--local',
      '--ip',
      '127.0.0.1',
      '--port',
      String(this.port),
      '--inspector-port',
      String(this.inspectorPort),
      '--persist-to',
      this.persist,
      '--env-file',
      this.envFile,
      '--show-interactive-dev-session=false',
      // `/__scheduled` (see `scheduled`).
      '--test-scheduled',
      '--var',
      `NYX5_DOMAIN:${this.domain}`,
      '--var',
      `NYX5_PUBLIC_URL:${this.url}`,
      ...Object.entries(this.vars).flatMap(([k, v]) => ['--var', `${k}:${v}`]),
    ];
    const logStream = createWriteStream(this.log, { flags: 'a' });
    logStream.write(`\n===== wrangler ${args.join(' ')}\n`);
    const child = spawn(WRANGLER, args, { cwd: ROOT, env: { ...ENV, ...this.env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    child.stdout.pipe(logStream, { end: false });
    child.stderr.pipe(logStream, { end: false });
    this.child = child;
    live.add(this);
    this.exited = new Promise((r) =>
      child.on('exit', (code, signal) => {
        live.delete(this);
        r({ code, signal });
      }),
    );
    let gone = null;
    this.exited.then((e) => (gone = e));
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (gone) {
        throw new Error(`wrangler dev for ${this.domain} exited (${gone.code ?? gone.signal}) before it was ready`);
      }
      try {
        const r = await fetch(`${this.url}/health`, { signal: AbortSignal.timeout(2_000) });
        if (r.status === 200 && (await r.json()).house === this.domain) return;
      } catch {}
      await sleep(150);
    }
    throw new Error(`${this.domain} was not ready on ${this.url} within ${timeoutMs} ms`);
  }

  kill(signal) {
    if (!this.child) return;
    try {
      process.kill(-this.child.pid, signal);
    } catch {}
  }

  /** Stops the whole process group (wrangler and workerd) and waits until the port is free. */
  async stop() {
    if (!this.child) return;
    this.kill('SIGTERM');
    const ended = await Promise.race([this.exited, sleep(5_000).then(() => null)]);
    if (!ended) this.kill('SIGKILL');
    await this.exited;
    // workerd children of the group may outlive wrangler by a moment.
    this.kill('SIGKILL');
    for (let i = 0; i < 100 && (await listening(this.port)); i++) await sleep(50);
    if (await listening(this.port)) throw new Error(`${this.domain}: port ${this.port} still answers after stop`);
    this.child = null;
  }

  /** The last `lines` lines of this house's log. */
  tail(lines = 40) {
    if (!existsSync(this.log)) return '';
    return readFileSync(this.log, 'utf8').split('\n').slice(-lines).join('\n');
  }

  /** Runs the scheduled handler once (what the cron trigger does), through `--test-scheduled`'s
   * `/__scheduled`, which wrangler's middleware answers inside the Worker. Not miniflare's
   * `/cdn-cgi/handler/scheduled`: with static assets it goes through the assets' RPC proxy, whose
   * proxied `scheduled` is called on the wrong `this` and always answers 500 (miniflare 4 as
   * wrangler 4.86 ships it; a deployed Worker's cron calls the Worker itself). */
  async scheduled() {
    const r = await fetch(`${this.url}/__scheduled?cron=${encodeURIComponent('* * * * *')}`);
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`scheduled handler on ${this.domain} answered ${r.status}`);
  }

  /** `wrangler d1 execute DB --local --json --command <sql>`: the rows of each statement.
   *
   * This runs a second workerd on the running house's SQLite file, so the two can meet on its
   * lock: a busy file (SQLITE_BUSY, "database is locked") means nothing ran, and the statement
   * is tried again, up to 10 times over about 14 s. Any other failure throws at once. */
  async d1(sql) {
    const args = ['d1', 'execute', 'DB', '--local', '--persist-to', this.persist, '--json', '--command', sql];
    let out;
    for (let attempt = 1; ; attempt++) {
      try {
        out = await wrangler(args);
        break;
      } catch (e) {
        const busy = /SQLITE_BUSY|database is locked/.test(String(e.message));
        if (!busy || attempt >= 10) throw e;
        await sleep(250 * attempt);
      }
    }
    const parsed = JSON.parse(out);
    for (const r of parsed) if (!r.success) throw new Error(`d1 ${sql}: ${JSON.stringify(r)}`);
    return parsed.map((r) => r.results);
  }
}
