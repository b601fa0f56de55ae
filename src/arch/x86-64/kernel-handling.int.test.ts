// analyzeKernelHandling() against the running kernel. For each site of arch-insns.c, a real
// uprobe is placed through tracefs on a process stopped before the site, then the site runs:
// - the kernel refused the probe when enabling it fails (ENOTSUPP);
// - it single-stepped the instruction when the process gained the kernel's "[uprobes]" page
//   (the XOL area, mapped on the first out-of-line step);
// - it emulated the instruction when the probe hit without that page;
// - an "unsafe" instruction is emulated, and the program's result shows it never ran.
import assert from 'node:assert/strict';
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { readelfFileOffset, tool } from '../../../test/helpers/tools.js';
import { ensureTracefs, kernelVersion } from '../../host/index.js';
import { decodeInstructions } from './decode.js';
import { analyzeKernelHandling, type KernelHandling } from './kernel-handling.js';

const GROUP = `upscope_archtest_${process.pid}`;
/** Sites whose result shows whether the probed instruction ran. */
const OBSERVABLE_WHEN_SKIPPED = new Set([
  'vpcmpeqb',
  'vmovdqu_store',
  'vmovd',
  'vpor',
  'vpsubsb',
  'xchg_r8',
]);
const NEEDS_AVX = new Set(['vpcmpeqb', 'vmovdqu_store', 'vmovd', 'vpor', 'vpsubsb', 'vzeroupper']);
/** Sites in refused_sites(): probed but never run (the kernel refuses most of them). */
const NEVER_RUN = new Set([
  'int3',
  'hlt',
  'in_port',
  'mov_ss',
  'lock_cmpxchg',
  'notrack_jmp',
  'cs_nopw',
  'vmovdqu_load',
  'vpxor',
  'call_0x66',
  'ud2',
]);

interface Observation {
  /** `accepted`: enabled, but not run (a site of refused_sites() the kernel accepts). */
  readonly outcome: 'refused' | 'accepted' | 'emulated' | 'single-stepped';
  readonly trampoline: boolean;
  readonly hits: number;
  readonly output: string;
}

class Target {
  private buffered = '';
  private waiters: (() => void)[] = [];
  readonly child: ChildProcessWithoutNullStreams;

  constructor(path: string, site: string) {
    this.child = spawn(path, [site], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (chunk: string) => {
      this.buffered += chunk;
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.child.on('exit', () => {
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  /** Wait until the output holds `count` lines. */
  async lines(count: number): Promise<string[]> {
    const deadline = Date.now() + 5000;
    for (;;) {
      const lines = this.buffered.split('\n').slice(0, -1);
      if (lines.length >= count || this.child.exitCode !== null) return lines;
      if (Date.now() > deadline)
        throw new Error(`timed out waiting for ${count} lines: ${JSON.stringify(this.buffered)}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 100);
      });
    }
  }

  next(): void {
    this.child.stdin.write('x');
  }

  kill(): void {
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}

function hitsOf(tracefs: string, path: string, event: string): number {
  const profile = readFileSync(`${tracefs}/uprobe_profile`, 'utf8');
  for (const line of profile.split('\n')) {
    const [file, name, hits] = line.trim().split(/\s+/);
    if (file === path && name === event) return Number(hits);
  }
  return 0;
}

async function observe(
  tracefs: string,
  path: string,
  site: string,
  fileOffset: bigint,
  run: boolean,
): Promise<Observation> {
  const target = new Target(path, site);
  const event = `${GROUP}/${site}`;
  let added = false;
  let enabled = false;
  try {
    assert.deepEqual(await target.lines(1), ['ready']);
    appendFileSync(`${tracefs}/uprobe_events`, `p:${event} ${path}:0x${fileOffset.toString(16)}\n`);
    added = true;
    try {
      writeFileSync(`${tracefs}/events/${event}/enable`, '1');
      enabled = true;
    } catch {
      return { outcome: 'refused', trampoline: false, hits: 0, output: '' };
    }
    if (!run) return { outcome: 'accepted', trampoline: false, hits: 0, output: '' };
    target.next();
    const output = (await target.lines(2))[1] ?? '';
    const maps = readFileSync(`/proc/${target.child.pid}/maps`, 'utf8');
    const hits = hitsOf(tracefs, path, site);
    return {
      outcome: maps.includes('[uprobes]') ? 'single-stepped' : 'emulated',
      trampoline: maps.includes('[uprobes-trampoline]'),
      hits,
      output,
    };
  } finally {
    target.kill();
    if (enabled) writeFileSync(`${tracefs}/events/${event}/enable`, '0');
    if (added) appendFileSync(`${tracefs}/uprobe_events`, `-:${event}\n`);
  }
}

function expectedOutcome(handling: KernelHandling): Observation['outcome'] {
  if (handling.strategy === 'refuse') return 'refused';
  if (handling.strategy === 'single-step') return 'single-stepped';
  return 'emulated';
}

test('analyzeKernelHandling() predicts how this kernel handles a probe on each kind of instruction', async (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf'] })) return;
  const tracefs = ensureTracefs();
  const kernel = kernelVersion();
  const path = compileProgram('arch-insns', { flags: ['-O0'] });
  const file = readFileSync(path);
  const avx = /^flags\s*:.*\bavx\b/m.test(readFileSync('/proc/cpuinfo', 'utf8'));
  const labels = tool('nm', [path])
    .split('\n')
    .map((line) => /^([0-9a-f]+) T L_(\w+)$/.exec(line))
    .filter((m) => m !== null)
    .map((m) => ({ site: m[2]!, vaddr: BigInt(`0x${m[1]}`) }));
  assert.ok(labels.length >= 45, `found ${labels.length} sites`);
  const mismatches: string[] = [];
  try {
    for (const { site, vaddr } of labels) {
      if (NEEDS_AVX.has(site) && !avx) continue;
      const fileOffset = readelfFileOffset(path, vaddr);
      const offset = Number(fileOffset);
      const [instruction] = decodeInstructions(file.subarray(offset, offset + 15), vaddr, {
        maxCount: 1,
      });
      const handling = analyzeKernelHandling(instruction!, { kernel });
      const seen = await observe(tracefs, path, site, fileOffset, !NEVER_RUN.has(site));
      const label = `${site} "${instruction!.text}": predicted ${JSON.stringify(handling)}, kernel ${seen.outcome}`;
      t.diagnostic(label);
      const expected = expectedOutcome(handling);
      const agrees =
        seen.outcome === 'accepted' ? expected !== 'refused' : seen.outcome === expected;
      if (!agrees) {
        mismatches.push(label);
        continue;
      }
      if (seen.outcome === 'refused' || seen.outcome === 'accepted') continue;
      assert.equal(seen.hits, 1, `${site}: one hit`);
      const baseline = spawnSync(path, [site], { input: 'xx', encoding: 'utf8' }).stdout.split(
        '\n',
      )[1];
      if (handling.strategy === 'unsafe') {
        if (OBSERVABLE_WHEN_SKIPPED.has(site)) {
          assert.notEqual(
            seen.output,
            baseline,
            `${site}: the kernel skipped it, so the result differs`,
          );
        }
      } else {
        assert.equal(seen.output, baseline, `${site}: the probe must not change the result`);
      }
      if (handling.strategy === 'emulate') {
        assert.equal(seen.trampoline, handling.what.includes('trampoline'), `${site}: trampoline`);
      }
    }
  } finally {
    const left = readFileSync(`${tracefs}/uprobe_events`, 'utf8');
    assert.ok(!left.includes(GROUP), `uprobe events left behind: ${left}`);
  }
  assert.deepEqual(mismatches, []);
});
