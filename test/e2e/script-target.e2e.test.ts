// A script given as a target (a pyenv shim on PATH, a wrapper, a Python script) is refused
// with what it is and what runs it: its interpreter as its #! line names it, the version
// manager whose shim it is, and the programs of its name on PATH that are ELF files.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), 'upscope-scripts-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function upscope(args: string[], path: string) {
  const result = spawnSync(process.execPath, [BIN, ...args], {
    encoding: 'utf8',
    env: { ...process.env, PATH: path, NO_COLOR: '1' },
  });
  return { status: result.status, stderr: result.stderr };
}

function script(dir: string, name: string, text: string): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  writeFileSync(path, text);
  chmodSync(path, 0o755);
  return path;
}

describe('a script as a target', () => {
  test('a shim on PATH: a script, run by bash, whose manager and other programs are named', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'bash'] })) return;
    // A program of the same name later on PATH, and a pyenv-style shim before it.
    const app = compileProgram('split-names', { flags: ['-O2'] });
    const real = join(scratch, 'real');
    mkdirSync(real, { recursive: true });
    symlinkSync(app, join(real, 'myprog'));
    const shims = join(scratch, 'shims');
    script(
      shims,
      'myprog',
      '#!/usr/bin/env bash\nset -e\nexec "/opt/pyenv/libexec/pyenv" exec "$program" "$@"\n',
    );
    const path = `${shims}:${real}:/usr/bin:/bin`;
    for (const args of [
      ['list', 'myprog'],
      ['resolve', 'myprog:leaf_work'],
    ]) {
      const result = upscope(args, path);
      assert.equal(result.status, 4, result.stderr);
      const lines = result.stderr.split('\n');
      assert.equal(
        lines[0],
        `error[ERR_SCRIPT_TARGET]: Cannot read ELF file "${join(shims, 'myprog')}": it is a script run by bash ("#!/usr/bin/env bash"), not an ELF file`,
      );
      assert.ok(
        lines.includes(
          `  hint: Other myprog programs on PATH, after it: ${join(real, 'myprog')} (e.g. upscope list ${join(real, 'myprog')})`,
        ),
        result.stderr,
      );
      assert.ok(
        lines.some((l) => l.startsWith('  hint: It is a pyenv shim: ')),
        result.stderr,
      );
      assert.doesNotMatch(result.stderr, /ERR_ELF_INVALID| {4}at /);
    }
  });

  test('a script by its path: named with the interpreter its #! line gives', (t) => {
    const py = script(join(scratch, 'py'), 'tool', '#!/usr/bin/python3 -u\nprint(1)\n');
    const result = upscope(['resolve', `${py}:main`], '/usr/bin:/bin');
    assert.equal(result.status, 4, result.stderr);
    assert.match(
      result.stderr,
      /^error\[ERR_SCRIPT_TARGET\]: .*it is a script run by python3 \("#!\/usr\/bin\/python3 -u"\), not an ELF file$/m,
    );
    assert.match(
      result.stderr,
      /hint: .*the interpreter \(e\.g\. upscope list \/usr\/bin\/python3\)/,
    );
    void t;
  });
});
