// trace --max-events N prints N events and says so: the summary tells the N printed from the
// events delivered with them (read in the same pages of the ring buffer, or not at all on
// ptrace), on every engine; a trace that ends first says only what was delivered.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'no upscope probes left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no traced or zombie children');
});

describe('trace --max-events', () => {
  for (const engine of ['tracefs', 'bpf', 'ptrace'] as const) {
    test(`--engine ${engine}: N events printed, and the summary says N printed of how many`, (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
      const app = compileProgram('split-names', { flags: ['-O2'] });
      const result = runCli([
        'trace',
        '--engine',
        engine,
        '--max-events',
        '7',
        '-c',
        `${app} 2000`,
        `${app}:leaf_work`,
      ]);
      const events = result.stdout.split('\n').filter((l) => / leaf_work$/.test(l));
      assert.equal(events.length, 7, result.stdout);
      const m =
        /^upscope: 7 events printed \(--max-events 7\) of (\d+) delivered, (\d+) lost, (\d+) missed$/m.exec(
          result.stderr,
        );
      assert.ok(m, result.stderr);
      assert.ok(Number(m[1]) >= 7, result.stderr);
      // Fewer events than the limit: the summary of any trace.
      const short = runCli([
        'trace',
        '--engine',
        engine,
        '--max-events',
        '7',
        '-c',
        `${app} 3`,
        `${app}:leaf_work`,
      ]);
      assert.equal(short.status, 0, short.stderr);
      assert.match(short.stderr, /^upscope: 3 events delivered, 0 lost, 0 missed$/m);
    });
  }
});
