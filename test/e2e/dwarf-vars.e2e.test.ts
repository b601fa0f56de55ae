import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

const SOURCE = new URL('../programs/dwarf-vars.c', import.meta.url).pathname;

/** `handle`'s parameters as the source declares them (`bool` is `_Bool` in C's own words). */
function sourceParameters(): string[] {
  const text = readFileSync(SOURCE, 'utf8');
  const m = /long handle\(([^)]*)\)/.exec(text);
  assert.ok(m !== null, 'the source declares handle');
  return m[1]!.split(',').map((p) =>
    p
      .replace(/\s+/g, ' ')
      .trim()
      .replace(/^bool /, '_Bool '),
  );
}

/** Formal parameter names readelf lists under the subprogram `handle`. */
function readelfParameters(path: string): string[] {
  const names: string[] = [];
  let inHandle = false;
  let depth = -1;
  let pending: number | undefined;
  for (const line of tool('readelf', ['--debug-dump=info', path]).split('\n')) {
    const head = /^\s*<(\d+)><[0-9a-f]+>: Abbrev Number: \d+ \((DW_TAG_\w+)\)/.exec(line);
    if (head !== null) {
      const d = Number(head[1]);
      if (inHandle && d <= depth) inHandle = false;
      pending = head[2] === 'DW_TAG_subprogram' ? d : undefined;
      if (inHandle && d === depth + 1 && head[2] === 'DW_TAG_formal_parameter') names.push('');
      continue;
    }
    const name = /DW_AT_name\s*:\s*(?:\(.*\):\s*)?(\S+)\s*$/.exec(line);
    if (name === null) continue;
    if (pending !== undefined && name[1] === 'handle' && !inHandle && names.length === 0) {
      inHandle = true;
      depth = pending;
    } else if (inHandle && names[names.length - 1] === '') {
      names[names.length - 1] = name[1]!;
    }
  }
  return names;
}

interface Listing {
  instances: {
    name: string;
    inlined: boolean;
    variables: { name: string; kind: string; declaration: string; location?: string }[];
  }[];
}

describe('upscope list --vars', () => {
  for (const flags of [['-O0'], ['-O2'], ['-O2', '-gdwarf-4']]) {
    test(`lists the parameters of handle with their C declarations (${flags.join(' ')})`, (t) => {
      if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
      const app = compileProgram('dwarf-vars', { flags });
      const result = runCli(['list', app, '--vars', 'handle', '--json']);
      assert.equal(result.status, 0, result.stderr);
      const listing = JSON.parse(result.stdout) as Listing;
      const [instance] = listing.instances.filter((i) => !i.inlined);
      assert.ok(instance !== undefined);
      const params = instance.variables.filter((v) => v.kind === 'parameter');
      assert.deepEqual(
        params.map((v) => v.name),
        readelfParameters(app),
      );
      assert.deepEqual(
        params.map((v) => v.declaration),
        sourceParameters(),
      );
      if (flags.includes('-O2')) {
        // At the entry of optimized code the arguments are where the SysV ABI passes them.
        assert.deepEqual(
          params.map((v) => v.location),
          ['%rdi', '%rsi', '%rdx', '%rcx', '%r8', '%r9'],
        );
      } else {
        for (const v of params) assert.match(v.location ?? '', /\(%rbp\)$/, v.name);
      }
      const text = runCli(['list', app, '--vars', 'handle']);
      assert.equal(text.status, 0, text.stderr);
      assert.match(text.stdout, /struct request \*req/);
    });
  }
});

describe('variables by name: clear refusals', () => {
  const cases: readonly (readonly [
    label: string,
    spec: (app: string) => string,
    pattern: RegExp,
  ])[] = [
    ['a misspelled variable', (app) => `${app}:handle sise`, /Did you mean "size"/],
    ['"." on a pointer', (app) => `${app}:handle req.id`, /Use "->" through a pointer: req->id/],
    [
      '"->" on a struct',
      (app) => `${app}:handle req->hdr->len`,
      /Use "\." on a struct: req->hdr\.len/,
    ],
    ['an unknown member', (app) => `${app}:handle req->lenn`, /has no member "lenn"/],
    ['a struct value', (app) => `${app}:handle req->hdr`, /req->hdr\.kind, req->hdr\.len/],
    ['an index out of bounds', (app) => `${app}:handle req->vals[4]`, /index 4 is out of bounds/],
    [
      'a local at a return probe',
      (app) => `r:${app}:handle n`,
      /gone when the function has returned/,
    ],
    ['a string from an int', (app) => `${app}:handle n:string`, /not a char pointer or array/],
  ];
  for (const [label, spec, pattern] of cases) {
    test(`refuses ${label} with one clear error`, (t) => {
      if (!requireHost(t, { commands: ['gcc'] })) return;
      const app = compileProgram('dwarf-vars', { flags: ['-O2'] });
      const result = runCli(['resolve', spec(app)]);
      assert.notEqual(result.status, 0);
      assert.match(result.stderr, pattern);
      assert.doesNotMatch(result.stderr, /\n\s+at /, 'no stack trace');
    });
  }

  test('says the file has no debug info, and how to get it', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'strip'] })) return;
    const app = compileProgram('dwarf-vars', { flags: ['-O2'], strip: 'debug' });
    const result = runCli(['resolve', `${app}:handle size`]);
    assert.equal(result.status, 3);
    assert.match(
      result.stderr,
      /Cannot fetch "size": ".*dwarf-vars-\w+" has no debug info\n(.|\n)*build it with -g/i,
    );
    const listing = runCli(['list', app, '--vars', 'handle']);
    assert.equal(listing.status, 3);
    assert.match(listing.stderr, /has no debug info/);
  });

  test('reports damaged debug info as an error of the file, not a crash', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const app = compileProgram('dwarf-vars', { flags: ['-O2'] });
    // The unit length of the first unit in .debug_info, where readelf says the section is.
    const sections = tool('readelf', ['-SW', app]);
    const m = /\.debug_info\s+PROGBITS\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)/.exec(sections);
    assert.ok(m !== null, 'readelf shows .debug_info');
    const bytes = readFileSync(app);
    bytes.writeUInt32LE(Number.parseInt(m[2]!, 16) + 64, Number.parseInt(m[1]!, 16));
    const dir = mkdtempSync(join(tmpdir(), 'upscope-dwarf-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const damaged = join(dir, 'dwarf-vars-lying');
    writeFileSync(damaged, bytes, { mode: 0o755 });
    const result = runCli(['resolve', `${damaged}:handle size`]);
    // A fault of the file (category target), as trace exits for it.
    assert.equal(result.status, 4, result.stderr);
    // A unit claiming 64 bytes more than the section: the reader says so with readelf's sizes.
    const size = Number.parseInt(m[2]!, 16);
    assert.ok(result.stderr.startsWith('error[ERR_DWARF_INVALID]: Cannot read the debug info of'));
    assert.ok(
      result.stderr.includes(`.debug_info at 0x4: needs ${size + 64} bytes, ${size - 4} left`),
      result.stderr,
    );
    assert.doesNotMatch(result.stderr, /\n\s+at /, 'no stack trace');
  });
});
