// Writes the `web_item` target's fixed agent (fuzz/fuzz_targets/web_item_keys.json, test keys)
// and its seeds: a sealed and a clear envelope from that agent to itself, as mailbox items, and a
// profile file holding it. Run once: node fuzz/seeds/make_web_item.mjs
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { draftEnvelope, newAgentKeys, sealEnvelope, signEnvelope } from '../../tests/lib/nyx5.mjs';

const here = new URL('.', import.meta.url).pathname;
const keys = await newAgentKeys();
const key = { sig: keys.sig, enc: keys.enc, sig_secret: keys.sigSecret, enc_secret: keys.encSecret };
writeFileSync(join(here, '../fuzz_targets/web_item_keys.json'), `${JSON.stringify(key)}\n`);
const me = 'al@a.example';
const created = '2027-01-15T08:00:00.000Z';
const clear = await signEnvelope(draftEnvelope(me, [me], { media: 'text/plain', body: 'hello' }, { created }), keys);
const sealed = await signEnvelope(await sealEnvelope(draftEnvelope(me, [me], { media: 'text/plain', body: 'sealed' }, { created }), [{ address: me, enc: keys.enc }]), keys);
const item = (envelope, seq) => JSON.stringify({ envelope, received: created, seq });
writeFileSync(join(here, 'web_item/clear.json'), item(clear, 1));
writeFileSync(join(here, 'web_item/sealed.json'), item(sealed, 2));
const profile = { nyx5: '1', kind: 'agent-profile', agents: [{ address: me, house: 'https://a.example', ...key, pending: {}, sent: {} }], pins: {} };
writeFileSync(join(here, 'web_item/profile.json'), `${JSON.stringify(profile)}\n`);
