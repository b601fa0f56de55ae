import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { requireHost } from '../../test/helpers/require-host.js';
import { demangle, openElf, SymbolIndex } from '../symbols/index.js';
import { hostCxxDemangler } from './index.js';

/**
 * Whether c++filt's name is upscope's, in the form upscope shows: the return type of a
 * function template's specialization left out, and the standard library's types named as
 * either spells them (libstdc++'s demangler, as gdb, writes `std::ostream` where c++filt
 * writes `std::basic_ostream<char, std::char_traits<char> >`).
 */
function sameName(cxxfilt: string, ours: string): boolean {
  const short = (name: string) =>
    name
      .replace(
        /std::basic_string<char, std::char_traits<char>, std::allocator<char> >/g,
        'std::string',
      )
      .replace(/std::basic_(i|o|io)stream<char, std::char_traits<char> >/g, 'std::$1stream');
  return short(cxxfilt) === short(ours) || short(cxxfilt).endsWith(` ${short(ours)}`);
}

test('with the host demangler, every C++ function of node reads as c++filt reads it', (t) => {
  if (!requireHost(t, { commands: ['c++filt'] })) return;
  assert.ok(hostCxxDemangler() !== undefined, 'libstdc++ is loaded through the native layer');
  const elf = openElf(process.execPath);
  try {
    const index = new SymbolIndex(elf);
    index.demangleAll();
    const names: string[] = [];
    const ours: string[] = [];
    for (let k = 0; k < index.length; k++) {
      const fn = index.function(k);
      if (!fn.name.startsWith('_Z') || fn.demangled === undefined) continue;
      names.push(fn.name);
      ours.push(fn.demangled);
    }
    assert.ok(names.length > 10_000, `${names.length} C++ functions`);
    const theirs = execFileSync('c++filt', {
      input: `${names.join('\n')}\n`,
      encoding: 'utf8',
      maxBuffer: 1 << 30,
    }).split('\n');
    const differ = names.flatMap((name, i) =>
      theirs[i] === name || sameName(theirs[i]!, ours[i]!)
        ? []
        : [`${name}\n  upscope: ${ours[i]}\n  c++filt: ${theirs[i]}`],
    );
    assert.deepEqual(differ.slice(0, 5), [], `${differ.length} names differ`);
    // One by one, as in bulk (the WebAssembly demangler wrote `node::SPrintF<unsigned long>
    // (char const*, unsigned long)` for this one, a parameter's type lost).
    const sprintf = names.find((n) => /^_ZN4node7SPrintFIJmEE/.test(n));
    if (sprintf !== undefined) {
      assert.equal(demangle(sprintf), 'node::SPrintF<unsigned long>(char const*, unsigned long&&)');
    }
  } finally {
    elf.close();
  }
});
