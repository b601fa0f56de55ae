import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type BpfProbe, pairSessions } from './session.js';
import { sessionCookie } from './stream-programs.js';

const probe = (
  kind: BpfProbe['kind'],
  offset: number,
  cookie: number,
  more: Partial<BpfProbe> = {},
): BpfProbe => ({ path: '/bin/app', offset: BigInt(offset), kind, cookie, ...more });

test('pairSessions() makes one session of an entry and a return at one place, in the return’s place', () => {
  const entry = probe('entry', 0x1000, 0);
  const other = probe('entry', 0x2000, 1);
  const ret = probe('return', 0x1000, 2 ** 32 + 2, { early: true });
  const paired = pairSessions([entry, other, ret]);
  assert.deepEqual(paired, [
    other,
    {
      path: '/bin/app',
      offset: 0x1000n,
      kind: 'session',
      cookie: sessionCookie(0, 2 ** 32 + 2),
      parts: [entry, ret],
    },
  ]);
  // entry 0 (layout 0), return 2 (layout 1).
  assert.equal(paired[1]!.cookie, (2n << 24n) | (1n << 56n));
});

test('pairSessions() leaves apart what one uprobe cannot serve', () => {
  const cases: [string, BpfProbe[]][] = [
    ['a return alone', [probe('return', 0x1000, 0)]],
    ['at another offset', [probe('entry', 0x1000, 0), probe('return', 0x1008, 1)]],
    [
      'in another file',
      [probe('entry', 0x1000, 0), probe('return', 0x1000, 1, { path: '/lib/other.so' })],
    ],
    [
      // A return caught at an exit is an entry probe: no call begins there.
      'an exit probe',
      [probe('entry', 0x1000, 0, { early: true }), probe('return', 0x1000, 1)],
    ],
    [
      'two entries at one place',
      [probe('entry', 0x1000, 0), probe('entry', 0x1000, 1), probe('return', 0x1000, 2)],
    ],
    [
      'a semaphore (USDT)',
      [probe('entry', 0x1000, 0, { refCtrOffset: 0x40n }), probe('return', 0x1000, 1)],
    ],
    ['a probe index past 24 bits', [probe('entry', 0x1000, 2 ** 24), probe('return', 0x1000, 1)]],
    ['a layout past 8 bits', [probe('entry', 0x1000, 0), probe('return', 0x1000, 2 ** 40 + 1)]],
  ];
  for (const [what, probes] of cases) assert.deepEqual(pairSessions(probes), probes, what);
});
