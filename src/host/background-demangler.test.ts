import assert from 'node:assert/strict';
import { test } from 'node:test';
import { demangleNames, openElf } from '../symbols/index.js';
import { backgroundDemangler } from './background-demangler.js';
import './demangler.js';

test("backgroundDemangler(): another thread names node's C++ functions as demangleNames() does here", () => {
  const elf = openElf(process.execPath);
  try {
    const columns = elf.functionColumns('symtab');
    const rows = Array.from({ length: Math.min(columns.count, 20_000) }, (_, i) => i);
    const starts = Uint32Array.from(rows, (r) => columns.nameStart[r]!);
    const ends = Uint32Array.from(rows, (r) => columns.nameEnd[r]!);
    const job = backgroundDemangler(columns.strings, starts, ends);
    assert.ok(job !== undefined, 'the thread started');
    const theirs = job.wait();
    assert.ok(theirs !== undefined, 'it answered');
    assert.deepEqual(job.poll(), theirs, 'and the answer stays');
    const ours = demangleNames(columns.strings, starts, ends);
    const named = (d: typeof ours, i: number) =>
      d.start[i]! < 0 ? null : d.bytes.toString('utf8', d.start[i]!, d.end[i]!);
    let cxx = 0;
    for (let i = 0; i < rows.length; i++) {
      assert.equal(named(theirs, i), named(ours, i), `name ${i}`);
      if (named(ours, i) !== null) cxx++;
    }
    assert.ok(cxx > 5000, `${cxx} C++ names among them`);
  } finally {
    elf.close();
  }
});
