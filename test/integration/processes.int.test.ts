// Which calls and processes a run covers: a filter decided at each call's entry.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

function target(): string {
  return compileProgram('procs-target', { flags: ['-O2'] });
}

/** The JSON array upscope printed last (count, hist and latency --json). */
function lastJson<T>(stdout: string): T {
  const line = stdout
    .split('\n')
    .filter((l) => l.startsWith('['))
    .at(-1);
  assert.ok(line !== undefined, `no JSON in:\n${stdout}`);
  return JSON.parse(line) as T;
}

describe('latency --filter is decided at each call', () => {
  for (const engine of ['bpf', 'ptrace'] as const) {
    // Returns caught through the trampoline, or at the function's exits (frames paired by
    // stack pointer): the decision is carried either way.
    for (const returns of ['trampoline', 'sites'] as const) {
      test(`latency --filter (${engine}, returns at ${returns}): on an argument, decided at the entry; on the return value, at the return`, (t) => {
        if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
        const app = target();
        // procs_work(200001) returns 3 * (200001 + 7): the same calls, picked either way.
        for (const filter of ['arg0 == 200001', 'retval == 600024']) {
          const run = runCli([
            'latency',
            '--engine',
            engine,
            '--return-probes',
            returns,
            '--json',
            '-c',
            `${app} args 900`,
            `${app}:procs_work`,
            '--filter',
            filter,
          ]);
          assert.equal(run.status, 0, run.stderr);
          const wanted = Number(/^calls=900 wanted=(\d+)$/m.exec(run.stdout)?.[1]);
          assert.equal(wanted, 300, run.stdout);
          const [timed] = lastJson<{ count: number }[]>(run.stdout);
          assert.equal(timed?.count, wanted, `${filter}\n${run.stdout}`);
        }
      });
    }
  }
});
