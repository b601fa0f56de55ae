// Two functions with one name (Rust's twice::<u32> and twice::<u64>, whose legacy-mangled
// names demangle alike) are two probes with two names on every engine, each with its address
// (gdb's `info address`), each counted as often as the target calls it.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { eventsPerProbe, runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tool } from '../helpers/tools.js';
import { tracedChildren } from '../helpers/tracees.js';

const ROUNDS = 5;

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'no upscope probes left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no traced or zombie children');
});

function gdbAddress(app: string, name: string): string {
  const out = tool('gdb', ['-batch', '-nx', '-ex', `info address ${name}`, app]);
  const m = /is a function at address (0x[0-9a-f]+)/.exec(out);
  assert.ok(m, out);
  return `0x${BigInt(m[1]!).toString(16)}`;
}

function target(t: { skip(reason: string): void }): string | undefined {
  const rustc = findRustc();
  if (rustc === undefined) {
    if (STRICT) throw new Error('Cannot run test under CI: needs rustc');
    t.skip('rustc is not installed (looked on PATH and in ~/.cargo/bin)');
    return undefined;
  }
  return compileRust(rustc, 'rust-vars', ['-C', 'opt-level=1']);
}

/** The two functions' names as upscope gives them: qualified by gdb's addresses. */
function twiceNames(app: string): { u32: string; u64: string } {
  return {
    u32: `rust_vars::twice (${gdbAddress(app, 'rust_vars::twice<u32>')})`,
    u64: `rust_vars::twice (${gdbAddress(app, 'rust_vars::twice<u64>')})`,
  };
}

/**
 * `trace --json` of the target with `args` (engine, specs): its events by kind and probe, a
 * return without its time marked `untimed`.
 */
function tracedTwice(app: string, args: readonly string[]): Record<string, number> {
  const result = runCli([
    'trace',
    '--json',
    '--command-output',
    'inherit',
    ...args,
    '-c',
    `${app} ${ROUNDS}`,
  ]);
  assert.equal(result.status, 0, result.stderr);
  return eventsPerProbe(
    result.stdout,
    (e) =>
      `${e.kind} ${e.probe}${e.kind === 'return' && e.latencyNs === undefined ? ' untimed' : ''}`,
  );
}

describe('functions that share a demangled name', () => {
  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`count --engine ${engine}: a row per function, named with its address`, (t) => {
      if (!requireHost(t, { root: engine === 'bpf', commands: ['gdb'] })) return;
      const app = target(t);
      if (app === undefined) return;
      const u32 = gdbAddress(app, 'rust_vars::twice<u32>');
      const u64 = gdbAddress(app, 'rust_vars::twice<u64>');
      // One spec matching both, and each named by its mangled name: the same two rows.
      const mangled = tool('nm', [app])
        .split('\n')
        .filter((l) => l.includes('9rust_vars5twice'))
        .map((l) => `${app}:${l.split(' ')[2]}`);
      assert.equal(mangled.length, 2);
      for (const specs of [[`${app}:rust_vars::twice`], mangled]) {
        const result = runCli([
          'count',
          '--engine',
          engine,
          '--json',
          '--command-output',
          'inherit',
          '-c',
          `${app} ${ROUNDS}`,
          ...specs,
        ]);
        assert.equal(result.status, 0, result.stderr);
        const json = result.stdout.split('\n').filter((l) => l.startsWith('['));
        const rows: { probe: string; count: number }[] = JSON.parse(json.at(-1)!);
        assert.deepEqual(Object.fromEntries(rows.map((r) => [r.probe, r.count])), {
          [`rust_vars::twice (${u32})`]: ROUNDS,
          [`rust_vars::twice (${u64})`]: 2 * ROUNDS,
        });
      }
    });
  }

  // The bpf engine names its probes while the kernel attaches them (Tracer.attach()): the
  // entries, and the returns caught at each exit of the Rust functions, named as tracefs's.
  for (const engine of ['tracefs', 'bpf'] as const) {
    test(`trace --engine ${engine}: entries and returns named with the address of their function`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gdb'] })) return;
      const app = target(t);
      if (app === undefined) return;
      const { u32, u64 } = twiceNames(app);
      assert.deepEqual(
        tracedTwice(app, [
          '--engine',
          engine,
          `${app}:rust_vars::twice`,
          `r:${app}:rust_vars::twice`,
        ]),
        {
          [`entry ${u32}`]: ROUNDS,
          [`entry ${u64}`]: 2 * ROUNDS,
          [`return ${u32}`]: ROUNDS,
          [`return ${u64}`]: 2 * ROUNDS,
        },
      );
    });
  }

  // Returns alone: timed from a hidden entry each (opening the frames of returns caught at
  // exits, or timing those through the kernel's trampoline), named while the kernel attaches
  // them; none of those entries shows.
  for (const mode of ['sites', 'trampoline'] as const) {
    test(`trace --engine bpf --return-probes ${mode} of returns alone: named with the address of their function`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gdb'] })) return;
      const app = target(t);
      if (app === undefined) return;
      const { u32, u64 } = twiceNames(app);
      const args = ['--engine', 'bpf', '--return-probes', mode, `r:${app}:rust_vars::twice`];
      assert.deepEqual(tracedTwice(app, args), {
        [`return ${u32}`]: ROUNDS,
        [`return ${u64}`]: 2 * ROUNDS,
      });
    });
  }

  // A recording's bpf engine plans each function's returns with its entry and names both
  // while the kernel attaches them: each function's calls paired under its own name.
  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`record --engine ${engine}: a row per function, named with its address, every call returned`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gdb'] })) return;
      const app = target(t);
      if (app === undefined) return;
      const dir = mkdtempSync(join(tmpdir(), 'upscope-same-names-'));
      try {
        const out = join(dir, 'rec');
        const recorded = runCli([
          'record',
          '--engine',
          engine,
          '-c',
          `${app} ${ROUNDS}`,
          `${app}:rust_vars::twice`,
          '-o',
          out,
        ]);
        assert.equal(recorded.status, 0, recorded.stderr);
        const report = runCli(['report', '--json', out]);
        assert.equal(report.status, 0, report.stderr);
        const rows: { function: string; calls: number; notReturned: number; untimed: number }[] =
          JSON.parse(report.stdout);
        // Calls, those not returned, those without a return probed (timed by none).
        const { u32, u64 } = twiceNames(app);
        assert.deepEqual(
          Object.fromEntries(rows.map((r) => [r.function, [r.calls, r.notReturned, r.untimed]])),
          { [u32]: [ROUNDS, 0, 0], [u64]: [2 * ROUNDS, 0, 0] },
        );
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
