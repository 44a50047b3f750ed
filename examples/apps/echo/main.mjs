// echo: a tiny Nyx5 app. It says who it is, sends one message, reads its inbox, and exits.
// Usage (under `nyx5 app run DIR -- …`): main.mjs whoami | send TO TEXT | inbox | env | raw METHOD [JSON] [TOKEN]
import net from 'node:net';

// The SDK: one connection to the run's broker, one JSON line per request.
class App {
  constructor() {
    this.token = process.env.NYX5_APP_TOKEN;
    this.sock = net.createConnection(process.env.NYX5_BROKER);
    this.waiting = new Map();
    this.next = 1;
    let buf = '';
    this.sock.on('data', (d) => {
      buf += d;
      for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) {
        const a = JSON.parse(buf.slice(0, i));
        const w = this.waiting.get(a.id);
        if (w) { this.waiting.delete(a.id); w(a); }
      }
    });
  }
  raw(method, params = {}, token = this.token) {
    const id = this.next++;
    this.sock.write(JSON.stringify({ token, id, method, params }) + '\n');
    return new Promise((resolve) => this.waiting.set(id, resolve));
  }
  async call(method, params) {
    const a = await this.raw(method, params);
    if (!a.ok) throw Object.assign(new Error(`${a.error}: ${a.message}`), { code: a.error });
    return JSON.parse(a.text);
  }
  whoami() { return this.call('whoami'); }
  send_message(to, text) { return this.call('send_message', { to, text }); }
  read_inbox(after) { return this.call('read_inbox', after === undefined ? {} : { after }); }
  close() { this.sock.end(); }
}

const app = new App();
const [verb, ...args] = process.argv.slice(2);
try {
  if (verb === 'whoami') console.log((await app.whoami()).address);
  else if (verb === 'send') console.log(JSON.stringify(await app.send_message(args[0], args.slice(1).join(' ') || 'echo')));
  else if (verb === 'inbox') console.log(JSON.stringify(await app.read_inbox()));
  // What the app was given of its environment: names only.
  else if (verb === 'env') console.log(Object.keys(process.env).sort().join(' '));
  // For tests of the broker: any method, any token; prints the broker's answer as it came.
  else if (verb === 'raw') console.log(JSON.stringify(await app.raw(args[0], JSON.parse(args[1] || '{}'), args[2] ?? app.token)));
  else { console.error('usage: whoami | send TO TEXT | inbox | env | raw METHOD [PARAMS] [TOKEN]'); process.exitCode = 2; }
} catch (e) {
  console.error(e.message);
  process.exitCode = 1;
} finally {
  app.close();
}
