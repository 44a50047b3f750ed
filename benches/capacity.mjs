// README's "What a house carries", derived from the measured figures (issue 36: "let README's
// capacity table come from the measured numbers"). tests/e2e/d1_rows.mjs measures the rows each
// operation reads and writes under `wrangler dev` and keeps them in benches/budgets.json ("d1");
// this writes the table and the sentences that follow from them between README's markers, and
// checks that what README says is what the figures give.
//
//   node benches/capacity.mjs            check README against budgets.json (a step of scripts/test)
//   node benches/capacity.mjs --write    rewrite README's part from budgets.json (d1_rows.mjs --write
//                                        does it too)

import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const BEGIN = '<!-- capacity: written by benches/capacity.mjs from benches/budgets.json; do not edit -->';
const END = '<!-- capacity: end -->';

/** Envelopes in a page and in an acknowledgment, as d1_rows.mjs measures them. */
export const PAGE = 50;
/** D1's allowances: the Free plan's a day; the Paid plan's included a month, as a day. */
const FREE_WRITTEN = 100_000;
const FREE_READ = 5_000_000;
const PAID_WRITTEN = 50_000_000 / 30;
/** Dropping a body 7 days after its acknowledgment rewrites its row: not measurable under
 * `wrangler dev`, whose clock cannot be moved a week (benches/README.md, "D1 rows"). */
const BODY_DROP = 1;

const round = (n, to) => Math.round(n / to) * to;
/** `text` in lines of at most `width` characters, broken between words. */
const wrap = (text, width = 100) =>
  text.split(' ').reduce((lines, word) => {
    const last = lines.length - 1;
    if (last >= 0 && lines[last].length + 1 + word.length <= width) lines[last] += ` ${word}`;
    else lines.push(word);
    return lines;
  }, []);
const fmt = (n) => n.toLocaleString('en-US');
const fix = (n) => (Number.isInteger(n) ? String(n) : n.toFixed(2));

/** The README text the figures of `d1` (budgets.json's "d1") give. */
export function capacity(d1) {
  const w = d1.rows_written;
  const r = d1.rows_read;
  const life = w.inbound_accept + (w.mailbox_page_50 + w.mailbox_ack_50) / PAGE;
  const lifeRead = r.inbound_accept + (r.mailbox_page_50 + r.mailbox_ack_50) / PAGE;
  const outbound = w.outbound_accept + w.tick_deliver_one;
  const lines = [
    '| an inbound envelope | rows written | rows read |',
    '|---|---:|---:|',
    `| accepted (\`POST /inbound\`) | ${w.inbound_accept} | ${r.inbound_accept} |`,
    `| read, in a page of ${PAGE} (${w.mailbox_page_50} and ${r.mailbox_page_50} a page) | ${fix(w.mailbox_page_50 / PAGE)} | ${fix(r.mailbox_page_50 / PAGE)} |`,
    `| acknowledged, ${PAGE} at once (${w.mailbox_ack_50} and ${r.mailbox_ack_50} an ack) | ${fix(w.mailbox_ack_50 / PAGE)} | ${fix(r.mailbox_ack_50 / PAGE)} |`,
    `| **accepted, read and acknowledged** | **${fix(life)}** | **${fix(lifeRead)}** |`,
    `| its body dropped 7 days after the ack (by the schema; not measured) | ~${BODY_DROP} | ~1 |`,
    '',
    ...wrap(
      `So a Free-plan house takes ${fmt(FREE_WRITTEN)} / ${fix(life)} ≈ **${fmt(round(FREE_WRITTEN / life, 100))}** inbound ` +
      `envelopes a day read and acknowledged, ~${fmt(round(FREE_WRITTEN / (life + BODY_DROP), 100))} counting the body ` +
      `drop a week later; writes bind (reads would allow ${fmt(FREE_READ / 1_000_000)} M / ${Math.round(lifeRead)} ≈ ` +
      `${fmt(round(FREE_READ / lifeRead, 1000))}). An outbound envelope writes ${w.outbound_accept} rows to accept and ` +
      `${w.tick_deliver_one} to deliver (${outbound} in all: ~${fmt(round(FREE_WRITTEN / outbound, 100))} a day on ` +
      `their own), and a Libro operation (a spot \`accept\`) ${w.libro_accept_spot}, from the same allowance. ` +
      `A Paid house's ~${fmt(round(PAID_WRITTEN, 10_000))} rows written ` +
      `a day included (50 M a month) carry ~${fmt(round(PAID_WRITTEN / life, 1000))} inbound envelopes a day read and ` +
      `acknowledged (~${fmt(round(PAID_WRITTEN / (life + BODY_DROP), 1000))} with the body drop).`,
    ),
  ];
  return lines.join('\n');
}

/** README's text with its capacity part replaced by `text`; throws without the markers. */
export function withCapacity(readme, text) {
  const a = readme.indexOf(BEGIN);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) throw new Error(`README.md has no "${BEGIN}" … "${END}" part`);
  return `${readme.slice(0, a + BEGIN.length)}\n${text}\n${readme.slice(b)}`;
}

/** Rewrites README's part from budgets.json. */
export function writeReadme() {
  const path = join(ROOT, 'README.md');
  const budgets = JSON.parse(readFileSync(join(ROOT, 'benches/budgets.json'), 'utf8'));
  writeFileSync(path, withCapacity(readFileSync(path, 'utf8'), capacity(budgets.d1)));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const budgets = JSON.parse(readFileSync(join(ROOT, 'benches/budgets.json'), 'utf8'));
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  if (process.argv.includes('--write')) {
    writeReadme();
    console.log('capacity: README.md rewritten from benches/budgets.json');
  } else {
    const want = withCapacity(readme, capacity(budgets.d1));
    if (want !== readme) {
      console.error('capacity: README.md\'s "What a house carries" is not what benches/budgets.json gives; run node benches/capacity.mjs --write');
      process.exit(1);
    }
    console.log('capacity: README.md says what benches/budgets.json gives');
  }
}
