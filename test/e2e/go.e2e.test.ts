import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileGo, findGo } from '../helpers/go.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

interface JsonSite {
  kind: string;
  vaddr: string;
  symbolOffset: string;
  uprobeEvent: string | null;
  uprobeEvents?: string[];
  fetches: { name: string; fetch: string }[];
  convention?: { kind: string; why: string };
  afterStackCheck?: string;
  returns?: {
    mode: string;
    frames: string;
    entry: { vaddr: string };
    sites: { vaddr: string; kind: string; text: string }[];
  };
}

function resolveJson(args: string[]): {
  sites: JsonSite[];
  errors: { code: string; message: string }[];
} {
  const result = runCli(['resolve', '--json', ...args]);
  return JSON.parse(result.stdout);
}

function goTarget(t: Parameters<typeof requireHost>[0], name = 'go-returns', cgo = false) {
  const go = findGo();
  if (!requireHost(t, { commands: go === undefined ? ['go'] : ['gcc', 'objdump'] }))
    return undefined;
  return compileGo(go!, name, { cgo });
}

/** objdump's instructions of one function: address and text. */
function disassemble(path: string, name: string): { vaddr: bigint; text: string }[] {
  const out = tool('objdump', ['-d', '--no-show-raw-insn', path]);
  const start = out.indexOf(`<${name}>:\n`);
  assert.ok(start >= 0, `objdump has no ${name}`);
  const body = out.slice(start, out.indexOf('\n\n', start));
  return [...body.matchAll(/^\s+([0-9a-f]+):\s+(.*)$/gm)].map((m) => ({
    vaddr: BigInt(`0x${m[1]}`),
    text: m[2]!.trim(),
  }));
}

describe('upscope resolve on Go programs', () => {
  test("argN and retvalN of a Go function read Go's registers; a cgo C function keeps the C ABI", (t) => {
    const app = goTarget(t, 'go-cgo', true);
    if (app === undefined) return;
    const { sites, errors } = resolveJson([
      `${app}:main.goAdd3 a=arg0 b=arg1 c=arg2`,
      `r:${app}:main.goAdd3 r=retval second=retval1`,
      `${app}:c_add3 a=arg0 b=arg1 c=arg2`,
      `r:${app}:c_add3 r=retval second=retval1`,
    ]);
    assert.deepEqual(errors, []);
    const [goEntry, goReturn, cEntry, cReturn] = sites;
    assert.equal(goEntry!.convention?.kind, 'go-register');
    assert.match(goEntry!.convention!.why, /go1\.\d+/);
    assert.deepEqual(
      goEntry!.fetches.map((f) => f.fetch),
      ['%rax', '%rbx', '%rcx'],
    );
    assert.deepEqual(
      goReturn!.fetches.map((f) => f.fetch),
      ['retval', '%rbx'],
    );
    assert.equal(cEntry!.convention?.kind, 'sysv');
    assert.deepEqual(
      cEntry!.fetches.map((f) => f.fetch),
      ['arg0', 'arg1', 'arg2'],
    );
    assert.match(cEntry!.uprobeEvent!, / a=%di b=%si c=%dx$/);
    assert.deepEqual(
      cReturn!.fetches.map((f) => f.fetch),
      ['retval', '%rdx'],
    );
  });

  test('the version resolve names is the one `go version` reads from the file', (t) => {
    const app = goTarget(t);
    if (app === undefined) return;
    const version = /: (go[0-9.]+)/.exec(tool(findGo()!, ['version', app]))?.[1];
    assert.ok(version);
    const result = runCli(['resolve', `${app}:main.classify`]);
    assert.equal(result.status, 0, result.stderr);
    assert.match(
      result.stdout,
      new RegExp(
        `abi +Go's register ABI: a Go function of a Go program \\(${version.replace(/\./g, '\\.')}\\)`,
      ),
    );
  });

  test("a Go function's entry probe goes after its stack check, which objdump shows jumping to runtime.morestack", (t) => {
    const app = goTarget(t);
    if (app === undefined) return;
    const code = disassemble(app, 'main.deep');
    const more = code.find((i) => /call.*<runtime\.morestack/.test(i.text));
    assert.ok(more, 'main.deep has a morestack call');
    // The last jump into the morestack block among the first instructions.
    const checks = code
      .slice(0, 8)
      .map((insn, k) => ({ insn, k }))
      .filter(({ insn }) => /^j(b|be) /.test(insn.text));
    assert.ok(checks.length > 0);
    const after = code[checks.at(-1)!.k + 1]!.vaddr;
    const { sites } = resolveJson([`${app}:main.deep`, `${app}:main.classify`]);
    assert.equal(BigInt(sites[0]!.vaddr), after);
    assert.equal(sites[0]!.kind, 'entry');
    assert.equal(BigInt(sites[0]!.symbolOffset), 0n);
    assert.equal(BigInt(sites[0]!.afterStackCheck!), after - code[0]!.vaddr);
    // A leaf without a stack check is probed at its first instruction.
    const leaf = disassemble(app, 'main.classify');
    assert.equal(BigInt(sites[1]!.vaddr), leaf[0]!.vaddr);
    assert.equal(sites[1]!.afterStackCheck, undefined);
  });

  test('retval past what the convention returns in registers is refused in one line', (t) => {
    const app = goTarget(t, 'go-cgo', true);
    if (app === undefined) return;
    const result = runCli(['resolve', `r:${app}:c_add3 x=retval2`]);
    assert.equal(result.status, 2);
    assert.match(result.stderr, /Cannot fetch retval2: the C ABI returns at most two registers/);
    assert.doesNotMatch(result.stderr, /\n\s+at /);
  });

  test('a Go assembly function (.abi0) takes its arguments on the stack, after the return address', (t) => {
    const app = goTarget(t);
    if (app === undefined) return;
    const abi0 = tool('readelf', ['-sW', app])
      .split('\n')
      .map((l) => l.trim().split(/\s+/)[7])
      .find((name) => name?.startsWith('runtime.') && name.endsWith('.abi0'));
    assert.ok(abi0, 'the runtime has ABI0 assembly functions');
    const { sites, errors } = resolveJson([`${app}:${abi0} a=arg0 b=arg1`]);
    assert.deepEqual(errors, []);
    assert.equal(sites[0]!.convention?.kind, 'go-stack');
    assert.deepEqual(
      sites[0]!.fetches.map((f) => f.fetch),
      ['+8(sp)', '+16(sp)'],
    );
  });
});
