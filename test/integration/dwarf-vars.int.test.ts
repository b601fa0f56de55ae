// Fetching variables by name: the values each engine reads through DWARF must be the values
// test/programs/dwarf-vars.c prints just before each call.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';

const CALLS = 4;
const SEED = 6;

/** Each fetch and the name the target prints its value under. */
const FETCHES: readonly (readonly [fetch: string, field: string, printed: string])[] = [
  ['n', 'n', 'n'],
  ['size', 'size', 'size'],
  ['label:string', 'label', 'label'],
  ['req->id', 'req_id', 'id'],
  ['req->hdr.kind', 'req_hdr_kind', 'kind'],
  ['req->hdr.len', 'req_hdr_len', 'len'],
  ['req->name:string', 'req_name', 'name'],
  ['req->vals[2]', 'req_vals_2', 'vals2'],
  ['req->matrix[1][2]', 'req_matrix_1_2', 'm12'],
  ['c', 'c', 'c'],
  ['flag', 'flag', 'flag'],
  ['counter_global', 'counter_global', 'counter'],
];

const BUILDS: Record<string, string[]> = {
  '-O0': ['-O0'],
  '-O2': ['-O2'],
  '-O2 -gdwarf-4': ['-O2', '-gdwarf-4'],
  '-O2 -no-pie': ['-O2', '-no-pie'],
};

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
});

describe('trace with variables by name', () => {
  for (const engine of ['tracefs', 'ptrace', 'bpf'] as const) {
    for (const [label, flags] of Object.entries(BUILDS)) {
      test(`${engine}, ${label}: every fetched value is what the target passed`, (t) => {
        if (!requireHost(t, { root: engine !== 'ptrace', commands: ['gcc'] })) return;
        const app = compileProgram('dwarf-vars', { flags });
        const spec = `${app}:handle ${FETCHES.map(([fetch]) => fetch).join(' ')}`;
        const result = runCli([
          'trace',
          '--engine',
          engine,
          '--json',
          '--command-output',
          'inherit',
          '-c',
          `${app} ${CALLS} ${SEED}`,
          spec,
        ]);
        assert.equal(result.status, 0, result.stderr);
        const lines = result.stdout.split('\n');
        const printed = lines
          .filter((l) => l.startsWith('call '))
          .map((l) => new Map([...l.slice(5).matchAll(/(\w+)=(\S*)/g)].map((m) => [m[1]!, m[2]!])));
        const events = lines
          .filter((l) => l.startsWith('{') && !l.startsWith('{"command"'))
          .map((l) => JSON.parse(l) as { fields: Record<string, unknown> });
        assert.equal(printed.length, CALLS, result.stdout);
        assert.equal(events.length, CALLS, result.stdout);
        for (let i = 0; i < CALLS; i++) {
          for (const [fetch, field, name] of FETCHES) {
            assert.equal(
              String(events[i]!.fields[field]),
              printed[i]!.get(name),
              `call ${i}: ${fetch}`,
            );
          }
        }
      });
    }
  }
});
