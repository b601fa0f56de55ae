#!/usr/bin/env node
// The floor of any in-kernel handler: a uprobe whose BPF program does nothing (r0 = 0; exit),
// attached by upscope's own session code, while `bin N` runs. Prints the target's stderr
// (`calls=N ns_per_call=F`). Usage: node bench/bpf-floor.mjs BIN N  (after npm run build).
import { spawnSync } from 'node:child_process';

const root = new URL('..', import.meta.url).pathname;
const [bin, n] = process.argv.slice(2);
const { resolveProbes } = await import(`${root}dist/api/index.js`);
const { BpfSession } = await import(`${root}dist/engines/bpf/session.js`);
const { exit, mov64Imm } = await import(`${root}dist/engines/bpf/insn.js`);
const plan = await resolveProbes([`${bin}:hot_function`]);
const site = plan.sites[0];
const session = new BpfSession();
try {
  session.attach(
    [{ path: site.target.path, offset: site.fileOffset, kind: 'entry', cookie: 0 }],
    { entry: () => [mov64Imm(0, 0), exit()], return: undefined },
    { purpose: 'the empty handler' },
  );
  const result = spawnSync(bin, [n], { stdio: ['ignore', 'ignore', 'pipe'] });
  process.stderr.write(result.stderr);
} finally {
  session.close();
}
