// Probes on lock-prefixed instructions, which the kernel's uprobes refuse: the kernel engines
// say so before anything is attached and name the ptrace engine, which probes them exactly
// (each hit once, the instruction run once per call with its lock) on C, C++ and Rust targets.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost, STRICT } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { compileRust, findRustc } from '../helpers/rustc.js';
import { tracedChildren } from '../helpers/tracees.js';

const PROGRAMS = new URL('../programs/', import.meta.url).pathname;
const CALLS = 1000;

interface Target {
  readonly app: string;
  /** Specs whose site is a lock-prefixed instruction. */
  readonly specs: readonly string[];
  /** What the target prints at the end when each of its 2 threads made CALLS calls. */
  readonly expected: RegExp;
}

/** The first instruction at each spec's site, as objdump disassembles it. */
function siteInstructions(app: string, specs: readonly string[]): string[] {
  const result = runCli(['resolve', '--engine', 'ptrace', '--json', ...specs]);
  assert.equal(result.status, 0, result.stderr);
  const sites: { vaddr: string }[] = JSON.parse(result.stdout).sites;
  return sites.map((site) => {
    const start = BigInt(site.vaddr);
    const text = execFileSync(
      'objdump',
      [
        '-d',
        '--no-show-raw-insn',
        `--start-address=0x${start.toString(16)}`,
        `--stop-address=0x${(start + 15n).toString(16)}`,
        app,
      ],
      { encoding: 'utf8' },
    );
    return /^\s*[0-9a-f]+:\s+(.*)$/m.exec(text)?.[1] ?? '';
  });
}

function targets(t: import('node:test').TestContext): Target[] {
  const found: Target[] = [];
  const c = compileProgram('lock-insns', { flags: ['-O2'], link: ['-lpthread'] });
  const source = readFileSync(`${PROGRAMS}lock-insns.c`, 'utf8').split('\n');
  const line = source.findIndex((l) => l.includes('/* LOCK-LINE */')) + 1;
  found.push({
    app: c,
    specs: [`${c}:locked_add`, `${c}:lock-insns.c:${line}`],
    expected: new RegExp(`^calls=${2 * CALLS} added=${4 * CALLS} counted=${2 * CALLS}$`, 'm'),
  });
  const cxx = compileProgram('lock-insns-cxx', { flags: ['-O2'], link: ['-lpthread'] });
  found.push({
    app: cxx,
    specs: [`${cxx}:ns::Counter::add`],
    expected: new RegExp(`^calls=${2 * CALLS} added=${4 * CALLS}$`, 'm'),
  });
  const rustc = findRustc();
  if (rustc === undefined) {
    const reason = 'rustc is not installed (looked on PATH and in ~/.cargo/bin)';
    if (STRICT) throw new Error(`Cannot run test under CI: ${reason}`);
    console.log(`# "${t.name}" leaves out Rust: ${reason}`);
  } else {
    const rust = compileRust(rustc, 'lock-insns', ['-C', 'opt-level=2']);
    found.push({
      app: rust,
      specs: [`${rust}:lock_insns::locked_add`],
      expected: new RegExp(`^calls=${2 * CALLS} added=${4 * CALLS}$`, 'm'),
    });
  }
  for (const target of found) {
    for (const insn of siteInstructions(target.app, target.specs)) {
      assert.match(insn, /^lock /, `${target.app}: the site is a lock-prefixed instruction`);
    }
  }
  return found;
}

describe('probes on lock-prefixed instructions', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  for (const engine of ['tracefs', 'bpf'] as const) {
    test(`${engine}: refused before anything is attached, with a hint to use the ptrace engine`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'g++', 'objdump'] })) return;
      for (const target of targets(t)) {
        for (const spec of target.specs) {
          const result = runCli(['trace', '--engine', engine, '-c', `${target.app} 1`, spec]);
          assert.equal(result.status, 3, result.stderr);
          assert.doesNotMatch(result.stdout, /calls=/, 'the command was not started');
          assert.match(
            result.stderr,
            /^error\[ERR_UNPROBEABLE_INSTRUCTION\]: Cannot place probe at 0x[0-9a-f]+ in ".*": the kernel refuses uprobes on "lock [^"]+": the kernel refuses instructions with a lock prefix \(0xf0\)\n/,
          );
          assert.match(result.stderr, /\n\s+hint: Probe a neighbouring instruction instead/);
          assert.match(
            result.stderr,
            /\n\s+hint: Or probe it with --engine ptrace \(with -p PID or -c COMMAND\), which runs the instruction itself\n/,
          );
        }
      }
    });
  }

  test('ptrace: every call hits once, and the locked instruction runs once per call', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'g++', 'objdump'] })) return;
    for (const target of targets(t)) {
      for (const command of ['trace', 'count'] as const) {
        const result = runCli([
          command,
          '--engine',
          'ptrace',
          '--json',
          '--command-output',
          'inherit',
          '-c',
          `${target.app} ${CALLS}`,
          ...target.specs,
        ]);
        assert.equal(result.status, 0, result.stderr);
        // The target's own count of its calls, and what its atomic adds kept.
        assert.match(result.stdout, target.expected, `${command} ${target.specs.join(' ')}`);
        const lines = result.stdout.split('\n');
        if (command === 'trace') {
          const events = lines
            .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
            .map((l) => JSON.parse(l) as { probe: string });
          const hits = new Map<string, number>();
          for (const e of events) hits.set(e.probe, (hits.get(e.probe) ?? 0) + 1);
          assert.deepEqual(
            [...hits.values()],
            target.specs.map(() => 2 * CALLS),
            `hits per probe: ${[...hits].join(' ')}`,
          );
        } else {
          const counts = JSON.parse(lines.find((l) => l.startsWith('['))!) as {
            count: number;
          }[];
          assert.deepEqual(
            counts.map((c) => c.count),
            target.specs.map(() => 2 * CALLS),
          );
        }
      }
    }
  });
});
