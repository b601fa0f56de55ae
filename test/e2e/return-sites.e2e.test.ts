import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';

interface JsonSite {
  uprobeEvent: string | null;
  uprobeEvents?: string[];
  returns?: {
    mode: string;
    why: string;
    frames: string;
    entry: { vaddr: string };
    sites: { vaddr: string; kind: string; text: string }[];
  };
}

function resolve(args: string[]): { sites: JsonSite[]; errors: { message: string }[] } {
  const result = runCli(['resolve', '--json', ...args]);
  return JSON.parse(result.stdout);
}

/**
 * The ways out of a function by objdump: each ret, and each direct jmp to an address outside
 * the function's bytes (its size from readelf) and those of its cold part (`NAME.cold`, where
 * gcc moves code run only by exceptions), as "0xADDR ret|tail-call".
 */
function objdumpExits(path: string, name: string): string[] {
  const symbols = tool('readelf', ['-sW', path]).split('\n');
  const range = (symbol: string) => {
    const line = symbols.find((l) => l.trim().split(/\s+/)[7] === symbol && l.includes('FUNC'));
    if (line === undefined) return undefined;
    const [, value, size] = line.trim().split(/\s+/);
    const start = BigInt(`0x${value}`);
    return { start, end: start + BigInt(size!) };
  };
  const parts = [range(name), range(`${name}.cold`)].filter((r) => r !== undefined);
  assert.ok(parts.length > 0, `readelf has no FUNC ${name}`);
  const inside = (at: bigint) => parts.some((r) => at >= r.start && at < r.end);
  const exits: string[] = [];
  for (const { start, end } of parts) {
    const out = tool('objdump', [
      '-d',
      '--no-show-raw-insn',
      `--start-address=0x${start.toString(16)}`,
      `--stop-address=0x${end.toString(16)}`,
      path,
    ]);
    for (const m of out.matchAll(/^\s+([0-9a-f]+):\s+(\S+)\s*([0-9a-f]*)/gm)) {
      const at = BigInt(`0x${m[1]}`);
      if (m[2] === 'ret') exits.push(`0x${at.toString(16)} ret`);
      if (m[2] === 'jmp' && m[3] !== '' && !inside(BigInt(`0x${m[3]}`))) {
        exits.push(`0x${at.toString(16)} tail-call`);
      }
    }
  }
  return exits;
}

describe('upscope resolve: how a return probe catches returns', () => {
  test('a C program that links no unwinder keeps the trampoline; sites, when asked for, are every ret and jump out that objdump shows', (t) => {
    if (!requireHost(t, { commands: ['gcc', 'objdump', 'readelf'] })) return;
    const app = compileProgram('exits', { flags: ['-O2'] });
    const names = ['exits_tail', 'exits_switch', 'exits_loop'];
    const auto = resolve(names.map((n) => `r:${app}:${n}`));
    assert.deepEqual(auto.errors, []);
    for (const site of auto.sites) {
      assert.equal(site.returns?.mode, 'trampoline');
      assert.match(site.returns!.why, /no unwinder can pass through it: the program links none/);
      assert.match(site.uprobeEvent!, /^r:/);
    }
    const sites = resolve([
      '--return-probes',
      'sites',
      ...names.map((n) => `r:${app}:${n} r=retval`),
    ]);
    assert.deepEqual(sites.errors, []);
    sites.sites.forEach((site, i) => {
      const returns = site.returns!;
      assert.equal(returns.mode, 'sites');
      assert.equal(returns.frames, 'thread');
      assert.deepEqual(
        returns.sites.map((s) => `0x${BigInt(s.vaddr).toString(16)} ${s.kind}`),
        objdumpExits(app, names[i]!),
        names[i],
      );
      // One p: line per exit (the result from %ax at a ret, none at a tail call), and one at
      // the entry that opens the call's frame.
      const lines = site.uprobeEvents!;
      assert.equal(lines.length, returns.sites.length + 1);
      returns.sites.forEach((exit, k) => {
        assert.match(lines[k]!, exit.kind === 'ret' ? /^p:\S+ \S+ r=%ax$/ : /^p:\S+ \S+$/);
      });
    });
    // The tail call, the switch's jump through its table (not an exit), the loop: as objdump.
    assert.ok(sites.sites[0]!.returns!.sites.some((s) => s.kind === 'tail-call'));
  });

  test('a C++ program links an unwinder: its functions with unwind information are probed at their exits', (t) => {
    if (!requireHost(t, { commands: ['g++', 'objdump', 'readelf'] })) return;
    const app = compileProgram('cxx-unwind', { flags: ['-O2'], link: ['-lpthread'] });
    const { sites, errors } = resolve([`r:${app}:level2`]);
    assert.deepEqual(errors, []);
    const returns = sites[0]!.returns!;
    assert.equal(returns.mode, 'sites');
    assert.match(
      returns.why,
      /an exception or a forced unwind \(pthread_cancel\) can pass through it: it has unwind information and .* links libstdc\+\+\.so/,
    );
    assert.deepEqual(
      returns.sites.map((s) => `0x${BigInt(s.vaddr).toString(16)} ${s.kind}`),
      objdumpExits(app, '_Z6level2l'),
    );
    // Asked for, the trampoline is still given (a throw through it would end the program).
    const forced = resolve(['--return-probes', 'trampoline', `r:${app}:level2`]);
    assert.equal(forced.sites[0]!.returns!.mode, 'trampoline');
    const text = runCli(['resolve', `r:${app}:level2`]);
    assert.match(text.stdout, /returns +at its \d+ exits?, return address left alone: /);
  });

  test('a function whose exits cannot all be found is refused in one line, not given a trampoline behind the back', (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const app = compileProgram('exits', { flags: ['-O2'] });
    const result = runCli(['resolve', '--return-probes', 'sites', `r:${app}:exits_conditional`]);
    assert.equal(result.status, 3);
    const [first, ...rest] = result.stderr.trim().split('\n');
    assert.match(
      first!,
      /^error\[ERR_RETURNS_NOT_FOUND\]: Cannot place a return probe on "exits_conditional" in ".*": its returns cannot be found safely: it leaves by a conditional jump to another function \("jne 0x[0-9a-f]+"/,
    );
    assert.ok(
      rest.every((line) => !/^\s+at /.test(line)),
      'no stack trace',
    );
  });
});
