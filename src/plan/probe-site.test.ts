import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type ProbeSite, qualifyNames, type TargetFile } from './probe-site.js';

const file: TargetFile = {
  path: '/bin/app',
  displayPath: '/bin/app',
  dev: 1n,
  inode: 2n,
  buildId: undefined,
  elfType: 'dyn',
};

/**
 * A site of `name`: an entry probed at `at` (past the function's first instruction when the
 * kernel would single-step it), or a return of the function at `start` whose calls begin at
 * `at`.
 */
function site(kind: 'entry' | 'return', name: string, start: bigint, at: bigint): ProbeSite {
  const handling = { strategy: 'emulate', what: 'jne' } as const;
  return {
    spec: `${kind === 'return' ? 'r:' : ''}/bin/app:*`,
    kind,
    target: file,
    symbol: name,
    demangled: undefined,
    aliases: [],
    symbolOffset: 0n,
    vaddr: kind === 'entry' ? at : start,
    fileOffset: kind === 'entry' ? at : start,
    usdt: undefined,
    instructions: [],
    handling,
    fetches: [],
    runtimeAddress: undefined,
    returns:
      kind === 'entry'
        ? undefined
        : {
            mode: 'sites',
            why: 'an unwinder can pass through it',
            frames: 'thread',
            entry: { vaddr: at, fileOffset: at },
            sites: [
              { vaddr: start + 9n, fileOffset: start + 9n, kind: 'ret', text: 'ret', handling },
            ],
          },
  };
}

test("qualifyNames gives a function's entry and return one name, though the other function of its name has no return probed", () => {
  const sites = qualifyNames([
    site('entry', 'twin', 0x100n, 0x102n),
    site('entry', 'twin', 0x200n, 0x200n),
    site('entry', 'only', 0x300n, 0x304n),
    site('return', 'twin', 0x100n, 0x102n),
    site('return', 'only', 0x300n, 0x304n),
  ]);
  assert.deepEqual(
    sites.map((s) => `${s.kind} ${s.symbol} ${s.nameQualifier ?? '-'}`),
    ['entry twin 0x102', 'entry twin 0x200', 'entry only -', 'return twin 0x102', 'return only -'],
  );
});
