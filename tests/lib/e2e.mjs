// What the end-to-end scripts share: numbered, timed steps, and one request to a house.

import { performance } from 'node:perf_hooks';

import { bodyBytes } from './nyx5.mjs';

/** Seconds, two decimals: `1.23s`. */
export const secs = (ms) => `${(ms / 1000).toFixed(2)}s`;

/** Numbered steps timed from `t0`: `await steps.step(title, fn)` prints the step and its time
 * (and what `fn` answers, if anything); `steps.count` is how many ran. */
export function makeSteps(t0) {
  const steps = {
    count: 0,
    async step(title, fn) {
      steps.count += 1;
      const t = performance.now();
      process.stdout.write(`[${secs(t - t0).padStart(7)}] ${String(steps.count).padStart(2)}. ${title} ... `);
      const note = await fn();
      console.log(`ok (${secs(performance.now() - t)})${note ? `\n            ${note}` : ''}`);
    },
  };
  return steps;
}

/** One request to a house (anything with a `url`): `{status, type, text, json}`. Objects are
 * sent as canonical JSON. */
export async function call(house, method, path, { body, headers = {} } = {}) {
  const init = { method, headers: { ...headers } };
  if (body !== undefined) {
    init.body = bodyBytes(body);
    init.headers['content-type'] ??= 'application/json';
  }
  const r = await fetch(house.url + path, init);
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, type: r.headers.get('content-type'), text, json };
}
