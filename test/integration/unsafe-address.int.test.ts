// A raw address no symbol covers is refused without --unsafe by every command that takes
// specs, on every engine, before anything is attached or started.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

test('a raw address outside every symbol needs --unsafe in resolve, trace, count, hist and latency, on each engine', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'readelf'] })) return;
  const app = compileProgram('tfs-counter');
  // The start of .plt, from readelf: stubs with no symbol around them.
  const plt = tool('readelf', ['-SW', app])
    .split('\n')
    .find((l) => /\s\.plt\s/.test(l));
  assert.ok(plt, 'readelf shows .plt');
  const spec = `${app}:0x${plt.trim().split(/\s+/)[3]!.replace(/^0+/, '')}`;
  const command = ['-c', `${app} 3`];
  const runs: string[][] = [
    ['resolve', spec],
    ...['tracefs', 'bpf', 'ptrace'].map((engine) => [
      'trace',
      '--engine',
      engine,
      ...command,
      spec,
    ]),
    ...['count', 'latency'].flatMap((verb) =>
      ['bpf', 'ptrace'].map((engine) => [verb, '--engine', engine, ...command, spec]),
    ),
    ...['bpf', 'ptrace'].map((engine) => ['hist', '--engine', engine, ...command, spec, 'arg0']),
  ];
  for (const args of runs) {
    const what = `upscope ${args.join(' ')}`;
    const run = runCli(args);
    assert.equal(run.status, 3, `${what}\n${run.stderr}`);
    assert.match(
      run.stderr,
      /^error\[ERR_UNSAFE_ADDRESS\]: Cannot place probe at 0x[0-9a-f]+ in ".*": no function symbol covers that address/,
      what,
    );
    assert.match(
      run.stderr,
      /hint: Pass --unsafe if you know the address starts an instruction/,
      what,
    );
    // Refused before the command ran: the program's own line never printed.
    assert.doesNotMatch(run.stdout, /tfs_add \d+/, `${what}: the command was not started`);
  }
  // The same spec with --unsafe gets past the check (resolve only: nothing is placed).
  const allowed = runCli(['resolve', '--unsafe', spec]);
  assert.equal(allowed.status, 0, allowed.stderr);
  assert.deepEqual(leftovers(), []);
});
