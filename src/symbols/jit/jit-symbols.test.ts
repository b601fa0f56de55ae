import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { JitSymbols, parseJitDump, parsePerfMap } from './jit-symbols.js';

describe('perf maps', () => {
  test('complete lines are read, a line still being written is left for the next read', () => {
    const first = parsePerfMap('7f0a827c5b80 248 JS:*hot /tmp/hot.js:1:13\n7f0a827c6600 13');
    assert.deepEqual(first.entries, [
      { start: 0x7f0a827c5b80n, size: 0x248n, name: 'JS:*hot /tmp/hot.js:1:13' },
    ]);
    assert.equal(first.consumed, '7f0a827c5b80 248 JS:*hot /tmp/hot.js:1:13\n'.length);
    // The next read starts with what was left: '7f0a827c6600 13', then the rest of its line.
    const second = parsePerfMap('7f0a827c6600 138 JS:^hot /tmp/hot.js:1:13\nnot a line\n');
    assert.deepEqual(second.entries, [
      { start: 0x7f0a827c6600n, size: 0x138n, name: 'JS:^hot /tmp/hot.js:1:13' },
    ]);
  });

  test('the newest entry covering an address names it (code freed and its memory reused)', () => {
    const jit = new JitSymbols();
    jit.add([
      { start: 0x1000n, size: 0x100n, name: 'old' },
      { start: 0x2000n, size: 0x10n, name: 'other' },
    ]);
    assert.deepEqual(jit.lookup(0x1010n), { name: 'old', offset: 0x10n });
    jit.add([{ start: 0x1008n, size: 0x20n, name: 'new' }]);
    assert.deepEqual(jit.lookup(0x1010n), { name: 'new', offset: 0x8n });
    assert.deepEqual(jit.lookup(0x1080n), { name: 'old', offset: 0x80n });
    assert.equal(jit.lookup(0x3000n), undefined);
  });
});

/** A jitdump file as perf's jitdump.h lays it out: header, then records. */
function jitdump(records: Uint8Array[]): Uint8Array {
  const header = new Uint8Array(40);
  const view = new DataView(header.buffer);
  view.setUint32(0, 0x4a695444, true); // 'JiTD'
  view.setUint32(4, 1, true);
  view.setUint32(8, 40, true);
  view.setUint32(12, 62, true); // EM_X86_64
  view.setUint32(20, 1234, true);
  const parts = [header, ...records];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function codeLoad(address: bigint, size: bigint, name: string): Uint8Array {
  const nameBytes = new TextEncoder().encode(`${name}\0`);
  const total = 16 + 40 + nameBytes.length + Number(size);
  const record = new Uint8Array(total);
  const view = new DataView(record.buffer);
  view.setUint32(0, 0, true); // JIT_CODE_LOAD
  view.setUint32(4, total, true);
  view.setBigUint64(16 + 8, address, true); // vma
  view.setBigUint64(16 + 16, address, true); // code_addr
  view.setBigUint64(16 + 24, size, true);
  record.set(nameBytes, 16 + 40);
  return record;
}

function codeMove(from: bigint, to: bigint, size: bigint): Uint8Array {
  const record = new Uint8Array(16 + 48);
  const view = new DataView(record.buffer);
  view.setUint32(0, 1, true); // JIT_CODE_MOVE
  view.setUint32(4, record.length, true);
  view.setBigUint64(16 + 16, from, true);
  view.setBigUint64(16 + 24, to, true);
  view.setBigUint64(16 + 32, size, true);
  return record;
}

describe('jitdump files', () => {
  test('code loads and moves name code; a record not complete yet is left for the next read', () => {
    const bytes = jitdump([
      codeLoad(0x5000n, 16n, 'JS:*hot'),
      codeMove(0x5000n, 0x6000n, 16n),
      codeLoad(0x7000n, 32n, 'JS:~cold'),
    ]);
    const cut = bytes.length - 10;
    const named = new Map<bigint, string>();
    const first = parseJitDump(bytes.subarray(0, cut), true, named);
    assert.ok(first !== undefined);
    assert.deepEqual(
      first.entries.map((e) => [e.start, e.size, e.name]),
      [
        [0x5000n, 16n, 'JS:*hot'],
        [0x6000n, 16n, 'JS:*hot'],
      ],
    );
    const second = parseJitDump(bytes.subarray(first.consumed), false, named);
    assert.deepEqual(
      second?.entries.map((e) => e.name),
      ['JS:~cold'],
    );
    assert.equal(parseJitDump(new Uint8Array(64), true), undefined, 'not a jitdump file');
  });
});
