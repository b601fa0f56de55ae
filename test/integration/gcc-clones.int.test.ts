// Probes on the copies GCC makes of functions, placed by the names of the functions: every
// engine counts each call the target counts itself, a .cold part named by its function is left
// out, and named itself it counts each time its code runs (a C++ throw, a C error path).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { eventsPerProbe, runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const ROUNDS = 6;
const C_SOURCE = new URL('../programs/gcc-clones.c', import.meta.url).pathname;

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'no upscope probes left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no traced or zombie children');
});

function ownCounts(stdout: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    const m = /^(\S+) (\d+)$/.exec(line);
    if (m !== null) counts[m[1]!] = Number(m[2]);
  }
  return counts;
}

/** Events per probe of `trace --json`, and the target's own counts from the same run. */
function traced(engine: string, command: string, specs: string[]) {
  const result = runCli([
    'trace',
    '--engine',
    engine,
    '--json',
    '--command-output',
    'inherit',
    '-c',
    command,
    ...specs,
  ]);
  assert.equal(result.status, 0, result.stderr);
  return { seen: eventsPerProbe(result.stdout), own: ownCounts(result.stdout) };
}

for (const engine of ['tracefs', 'bpf', 'ptrace'] as const) {
  describe(`GCC clones on the ${engine} engine`, () => {
    test("C++: the clones counted by their functions' names, the .cold part by its own", (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['g++'] })) return;
      const app = compileProgram('gcc-clones', { flags: ['-O2'] });
      const alone = ownCounts(execFileSync(app, [String(ROUNDS), 'throw'], { encoding: 'utf8' }));
      assert.equal(alone['check'], ROUNDS + 1, 'the target counts its calls');
      const { seen, own } = traced(engine, `${app} ${ROUNDS} throw`, [
        `${app}:app::Calc::add`,
        `${app}:'app::Box<*>::get'`,
        `${app}:app::scale`,
        `${app}:app::work`,
        `${app}:app::check`,
        `${app}:'app::check(long) [clone .cold]'`,
      ]);
      assert.deepEqual(own, alone, 'the traced run counted the same');
      assert.deepEqual(seen, {
        'app::Calc::add(app::Big const&, long) [clone .isra.0]': own['add'],
        'app::Box<int>::get(app::Box<int> const&, app::Big const&) [clone .isra.0]':
          own['box_get_int'],
        'app::Box<long>::get(app::Box<long> const&, app::Big const&) [clone .isra.0]':
          own['box_get_long'],
        'app::scale(long, long) [clone .constprop.0]': own['scale'],
        'app::work(long) [clone .part.0]': own['work_slow'],
        'app::check(long)': own['check'],
        // The one throw runs the cold part once.
        'app::check(long) [clone .cold]': 1,
      });
    });

    test('C: add, scale, work counted at their clones, check.cold when its path runs', (t) => {
      if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
      const app = compileProgram(C_SOURCE, { flags: ['-O2'] });
      const { seen, own } = traced(engine, `${app} ${ROUNDS} bad`, [
        `${app}:add`,
        `${app}:scale`,
        `${app}:work`,
        `${app}:check`,
        `${app}:check.cold`,
      ]);
      assert.equal(own['check_bad'], 1);
      const clone = (name: string) => Object.keys(seen).find((k) => k.startsWith(`${name}.`))!;
      assert.deepEqual(seen, {
        [clone('add')]: own['add'],
        [clone('scale')]: own['scale'],
        [clone('work')]: own['work_slow'],
        check: own['check'],
        'check.cold': own['check_bad'],
      });
      assert.match(clone('add'), /^add\.(constprop\.\d+\.)?isra\.\d+$/);
    });
  });
}
