import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { afterEach, describe, test } from 'node:test';
import { compileGo, findGo } from '../helpers/go.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

const ENGINES = ['tracefs', 'bpf', 'ptrace'] as const;
type Engine = (typeof ENGINES)[number];

interface JsonEvent {
  probe: string;
  kind: string;
  pid: number;
  tid: number;
  fields: Record<string, number | string | null>;
  latencyNs?: string;
  unwound?: boolean;
}

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

function target(t: Parameters<typeof requireHost>[0]): string | undefined {
  const go = findGo();
  if (!requireHost(t, { root: true, commands: go === undefined ? ['go'] : [] })) return undefined;
  return compileGo(go!, 'go-returns');
}

/** The program's own output, run without any probe. */
function unprobed(app: string, mode: string, n: number): string {
  return execFileSync(app, [mode, String(n)], { encoding: 'utf8' });
}

/** The program's lines (they start with its mode's word) and upscope's JSON lines. */
function split(stdout: string, mode: string): { program: string; events: JsonEvent[] } {
  const lines = stdout.split('\n');
  return {
    program: lines
      .filter((l) => l.startsWith(`${mode} `) || l.startsWith('classify '))
      .map((l) => `${l}\n`)
      .join(''),
    events: lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as JsonEvent),
  };
}

/** `trace --json` of the command on one engine. */
function trace(engine: Engine, command: string, specs: string[]) {
  const result = runCli(['trace', '--engine', engine, '--json', '-c', command, ...specs], {
    timeoutMs: 600_000,
  });
  assert.equal(result.status, 0, result.stderr);
  return result;
}

describe('Go programs: entry probes', () => {
  for (const engine of ENGINES) {
    test(`${engine}: a call whose goroutine stack grows is seen once; arg0..arg2 are what it passed`, (t) => {
      const app = target(t);
      if (app === undefined) return;
      const rounds = engine === 'ptrace' ? 3 : 20;
      const result = trace(engine, `${app} deep ${rounds}`, [`${app}:main.deep n=arg0 seed=arg1`]);
      const { program, events } = split(result.stdout, 'deep');
      assert.equal(program, unprobed(app, 'deep', rounds), 'the output is unchanged');
      const calls = Number(/calls=(\d+)/.exec(program)?.[1]);
      assert.equal(events.length, calls, 'one event per call');
      // Goroutine g calls deep(20 + g, i), which recurses down to deep(0, ...).
      const depths = new Map<number, number>();
      for (const e of events) {
        const n = Number(e.fields['n']);
        depths.set(n, (depths.get(n) ?? 0) + 1);
      }
      for (let n = 0; n <= 27; n++) {
        assert.equal(depths.get(n), rounds * Math.min(8, 28 - n), `calls with n=${n}`);
      }

      const paths = trace(engine, `${app} paths 40`, [`${app}:main.classify a=arg0 b=arg1 c=arg2`]);
      const out = split(paths.stdout, 'classify');
      assert.equal(out.program, unprobed(app, 'paths', 40));
      const passed = out.program
        .trim()
        .split('\n')
        .map((l) => l.split(' ').slice(1, 4).join(' '));
      assert.deepEqual(
        out.events.map((e) => `${e.fields['a']} ${e.fields['b']} ${e.fields['c']}`),
        passed,
      );
    });
  }

  test('bpf count: an entry probe counts every call of a function whose stack grows', (t) => {
    const app = target(t);
    if (app === undefined) return;
    const result = runCli(['count', '--json', '-c', `${app} deep 200`, `${app}:main.deep`]);
    assert.equal(result.status, 0, result.stderr);
    const calls = Number(/deep calls=(\d+)/.exec(result.stdout)?.[1]);
    const rows: { probe: string; count: number }[] = JSON.parse(
      result.stdout.trim().split('\n').at(-1)!,
    );
    assert.deepEqual(rows, [{ probe: 'main.deep', count: calls }]);
  });
});
