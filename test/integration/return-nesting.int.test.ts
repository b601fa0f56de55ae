// Calls nested deeper than the kernel sets return trampolines for: it keeps at most 64 of a
// thread's uretprobe returns pending (MAX_URETPROBE_DEPTH) and sets none for a call made
// while 64 are (dmesg: "omit uretprobe due to nestedness limit"). latency counted such a
// call's entry and waited for its return for ever: after 16 of them on a thread the function
// was not timed again there, and a recursion deeper than 64 was not timed at all; record
// paired the returns of a recursion's outer calls with its innermost calls, and said the
// outermost "not returned", and trace timed a return from the entry of another call. The
// kernel also drops the trampolines a longjmp left when it sets the next one, by the stack
// pointer, which the entries of such functions now fetch. Calls
// are now paired by frame in latency and as the kernel does in a recording and a trace, and
// the calls whose return the kernel left out are said. The program says how many calls it
// made, and the kernel's timestamps when; its 64 is the only number taken from elsewhere.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { compileProgram } from '../helpers/compile.js';
import { leftovers, ownBpfFds } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tracedChildren } from '../helpers/tracees.js';

/** The kernel's MAX_URETPROBE_DEPTH (kernel/events/uprobes.c). */
const KERNEL_LIMIT = 64;
/** Functions in the program's chain, and calls of the chain. */
const CHAIN = 100;
const TIMES = 5;
/** The recursion's depth, and its calls. */
const DEPTH = 100;
/** Calls of one function kept open at once by latency, the rest counted as nested too deep. */
const KEPT = 16;

const work = mkdtempSync(join(tmpdir(), 'upscope-nesting-'));
after(() => rmSync(work, { recursive: true, force: true }));

function app(): string {
  return compileProgram('nested', { flags: ['-O1'] });
}

interface Timed {
  readonly probe: string;
  readonly count: number;
}

function latency(command: string, spec: string, options: string[] = []) {
  const result = runCli(['latency', '--json', ...options, '-c', command, spec]);
  assert.equal(result.status, 0, result.stderr);
  const counts = new Map((JSON.parse(result.stdout) as Timed[]).map((t) => [t.probe, t.count]));
  return { counts, stderr: result.stderr };
}

interface ReportRow {
  readonly function: string;
  readonly calls: number;
  readonly unwound: number;
  readonly notReturned: number;
  readonly unreported: number;
}

function report(command: string, spec: string, engine: string): Map<string, ReportRow> {
  const dir = join(work, `rec-${engine}-${spec.replace(/\W/g, '')}`);
  const recorded = runCli(['record', '--engine', engine, '-c', command, '-o', dir, spec]);
  assert.equal(recorded.status, 0, recorded.stderr);
  assert.match(recorded.stderr, /, 0 lost\n/);
  const result = runCli(['report', dir, '--json']);
  assert.equal(result.status, 0, result.stderr);
  return new Map((JSON.parse(result.stdout) as ReportRow[]).map((r) => [r.function, r]));
}

describe('calls nested deeper than the kernel sets return trampolines for', () => {
  afterEach(() => {
    assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
    assert.deepEqual(ownBpfFds(), [], 'no BPF map, program, link or perf event is left open');
    assert.deepEqual(tracedChildren(), [], 'no process is left traced');
  });

  test('latency of a chain of 100 functions: the 64 outermost timed every call, the rest said as left out by the kernel; --return-probes sites times them all', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const command = `${app()} chain ${TIMES}`;
    const { counts, stderr } = latency(command, `${app()}:chain_*`);
    assert.match(stderr, new RegExp(`^calls=${CHAIN * TIMES}$`, 'm'));
    for (let i = 0; i < CHAIN; i++) {
      const expected = i < KERNEL_LIMIT ? TIMES : 0;
      assert.equal(counts.get(`chain_${i}`), expected, `chain_${i}: ${stderr}`);
    }
    const left = (CHAIN - KERNEL_LIMIT) * TIMES;
    assert.match(
      stderr,
      new RegExp(
        `^upscope: ${left} calls whose return the kernel did not report \\(it leaves out the return probes of calls nested over 64 deep in a thread, and a longjmp skips them\\), not timed; --return-probes sites catches every return$`,
        'm',
      ),
    );
    const sites = latency(command, `${app()}:chain_*`, ['--return-probes', 'sites']);
    for (let i = 0; i < CHAIN; i++) assert.equal(sites.counts.get(`chain_${i}`), TIMES);
    assert.doesNotMatch(sites.stderr, /did not report/);
  });

  test('latency of a recursion 100 deep: the 16 outermost calls timed each time, the rest said', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const { counts, stderr } = latency(`${app()} recurse ${DEPTH} ${TIMES}`, `${app()}:recurse`);
    const calls = (DEPTH + 1) * TIMES;
    assert.match(stderr, new RegExp(`^calls=${calls}$`, 'm'));
    assert.equal(counts.get('recurse'), KEPT * TIMES, stderr);
    const deep = (KERNEL_LIMIT - KEPT) * TIMES;
    const left = (DEPTH + 1 - KERNEL_LIMIT) * TIMES;
    assert.match(stderr, new RegExp(`upscope: ${deep} calls nested over 16 deep, not timed, `));
    assert.match(stderr, new RegExp(`, ${left} calls whose return the kernel did not report `));
    assert.equal(KEPT * TIMES + deep + left, calls);
  });

  test('count and hist of the returns of a recursion 100 deep: the 64 outermost counted, the calls the kernel left out said (they were counted as never made); --return-probes sites counts them all', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const command = `${app()} recurse ${DEPTH} ${TIMES}`;
    const calls = (DEPTH + 1) * TIMES;
    const left = (DEPTH + 1 - KERNEL_LIMIT) * TIMES;
    const said = new RegExp(
      `^upscope: ${left} calls whose return the kernel did not report \\(it leaves out the return probes of calls nested over 64 deep in a thread, and a longjmp skips them\\), not counted; --return-probes sites catches every return$`,
      'm',
    );
    const counted = runCli(['count', '--json', '-c', command, `r:${app()}:recurse`]);
    assert.equal(counted.status, 0, counted.stderr);
    assert.match(counted.stderr, new RegExp(`^calls=${calls}$`, 'm'));
    // One row: the calls left out are not unwinds.
    assert.deepEqual(JSON.parse(counted.stdout), [
      { probe: 'r:recurse', count: KERNEL_LIMIT * TIMES },
    ]);
    assert.match(counted.stderr, said);
    // recurse(n) returns n: the 64 outermost calls return DEPTH down to DEPTH - 63.
    const hist = runCli(['hist', '--json', '-c', command, `r:${app()}:recurse`, 'retval']);
    assert.equal(hist.status, 0, hist.stderr);
    const [values] = JSON.parse(hist.stdout) as { count: number; min: number; max: number }[];
    assert.deepEqual(
      { count: values!.count, min: values!.min, max: values!.max },
      { count: KERNEL_LIMIT * TIMES, min: DEPTH - KERNEL_LIMIT + 1, max: DEPTH },
    );
    assert.match(hist.stderr, said);
    const every = runCli([
      'count',
      '--json',
      '--return-probes',
      'sites',
      '-c',
      command,
      `r:${app()}:recurse`,
    ]);
    assert.equal(every.status, 0, every.stderr);
    assert.deepEqual(JSON.parse(every.stdout), [{ probe: 'r:recurse', count: calls }]);
    assert.doesNotMatch(every.stderr, /did not report/);
    // 30 deep: every return comes, nothing is said.
    const shallow = runCli([
      'count',
      '--json',
      '-c',
      `${app()} recurse 30 ${TIMES}`,
      `r:${app()}:recurse`,
    ]);
    assert.equal(shallow.status, 0, shallow.stderr);
    assert.deepEqual(JSON.parse(shallow.stdout), [{ probe: 'r:recurse', count: 31 * TIMES }]);
    assert.doesNotMatch(shallow.stderr, /did not report/);
  });

  test('count of the returns of calls a longjmp leaves: none counted, each said', (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const depth = 10;
    const counted = runCli([
      'count',
      '--json',
      '-c',
      `${app()} jump ${depth} ${TIMES}`,
      `r:${app()}:dive`,
    ]);
    assert.equal(counted.status, 0, counted.stderr);
    assert.match(counted.stderr, new RegExp(`^calls=${(depth + 1 + 11) * TIMES}$`, 'm'));
    assert.deepEqual(JSON.parse(counted.stdout), [{ probe: 'r:dive', count: 0 }]);
    assert.match(
      counted.stderr,
      new RegExp(
        `^upscope: ${(depth + 1) * TIMES} calls whose return the kernel did not report `,
        'm',
      ),
    );
  });

  for (const engine of ['tracefs', 'bpf']) {
    test(`trace --engine ${engine} of a recursion 100 deep: each return is timed from its own call's entry, the returns left out said`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const times = 2;
      const result = runCli([
        'trace',
        '--json',
        '--engine',
        engine,
        '-c',
        `${app()} recurse ${DEPTH} ${times}`,
        `${app()}:recurse`,
        `r:${app()}:recurse`,
      ]);
      assert.equal(result.status, 0, result.stderr);
      const events = result.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { kind: string; timeNs: string; latencyNs?: string })
        .filter((e) => e.kind === 'entry' || e.kind === 'return');
      // Each outer call: its 101 entries, then the returns of the 64 outermost, innermost
      // first; the k-th return ends the call entered 65 - k deep.
      const each = DEPTH + 1 + KERNEL_LIMIT;
      assert.equal(events.length, each * times, result.stderr);
      for (let call = 0; call < times; call++) {
        const own = events.slice(call * each, (call + 1) * each);
        const entries = own.slice(0, DEPTH + 1);
        const returns = own.slice(DEPTH + 1);
        assert.ok(entries.every((e) => e.kind === 'entry'));
        returns.forEach((ret, k) => {
          assert.equal(ret.kind, 'return');
          const entered = BigInt(entries[KERNEL_LIMIT - 1 - k]!.timeNs);
          assert.equal(BigInt(ret.latencyNs!), BigInt(ret.timeNs) - entered, `return ${k}`);
        });
      }
      const left = (DEPTH + 1 - KERNEL_LIMIT) * times;
      assert.match(
        result.stderr,
        new RegExp(`^upscope: the kernel did not report the returns of ${left} calls `, 'm'),
      );
    });
  }

  for (const engine of ['bpf', 'tracefs']) {
    test(`record --engine ${engine}: the calls whose return the kernel left out are said, every other call paired with its own return`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const chain = report(`${app()} chain ${TIMES}`, `${app()}:chain_*`, engine);
      for (let i = 0; i < CHAIN; i++) {
        const row = chain.get(`chain_${i}`)!;
        assert.equal(row.calls, TIMES, `chain_${i}`);
        assert.equal(row.unreported, i < KERNEL_LIMIT ? 0 : TIMES, `chain_${i}`);
        assert.equal(row.unwound + row.notReturned, 0, `chain_${i}`);
      }
      const recursion = report(`${app()} recurse ${DEPTH} ${TIMES}`, `${app()}:recurse`, engine);
      const row = recursion.get('recurse')!;
      assert.equal(row.calls, (DEPTH + 1) * TIMES);
      assert.equal(row.unreported, (DEPTH + 1 - KERNEL_LIMIT) * TIMES);
      // The outermost calls end with their own returns (they were said not returned).
      assert.equal(row.unwound + row.notReturned, 0);
    });

    test(`record --engine ${engine} of a recursion through a tail call: each function of the chain holds one of the 64, none taken for unwound`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      // hop jumps to rec_hop: at rec_hop's entry its return address is hop's trampoline
      // already, and the kernel sets one more, chained (both return at once): 2 a level,
      // 32 levels of the 40 set, the returns of the 9 calls of rec_hop and 8 of hop below
      // them left out. Taken as dropping hop's, the tracer thought 41 set where the kernel
      // had 64, waited for the returns of calls it set none for, and said them unwound.
      const depth = 40;
      const recorded = report(`${app()} hops ${depth} ${TIMES}`, `${app()}:*hop`, engine);
      const levels = KERNEL_LIMIT / 2;
      for (const [name, calls] of [
        ['rec_hop', depth + 1],
        ['hop', depth],
      ] as const) {
        const row = recorded.get(name)!;
        assert.equal(row.calls, calls * TIMES, name);
        assert.equal(row.unreported, (calls - levels) * TIMES, name);
        assert.equal(row.unwound + row.notReturned, 0, name);
      }
    });

    test(`record --engine ${engine} of calls a longjmp left: the returns of later calls as the kernel reports them`, (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      // dive() 30 deep: the kernel drops the trampolines the longjmp left when it sets the
      // next; 80 deep: 64 are left set, and the kernel sets none on that thread again.
      for (const depth of [30, KERNEL_LIMIT + 16]) {
        const command = `${app()} jump ${depth} ${TIMES}`;
        const specs = [`${app()}:dive`, `${app()}:recurse`];
        // The probes the recording places: the entries and returns of both.
        const probes = [...specs, ...specs.map((spec) => `r:${spec}`)];
        const counted = runCli(['count', '--json', '-c', command, ...probes]);
        assert.equal(counted.status, 0, counted.stderr);
        const returns = (JSON.parse(counted.stdout) as Timed[]).find(
          (c) => c.probe === 'r:recurse',
        )!.count;
        const dir = join(work, `jump-${engine}-${depth}`);
        const recorded = runCli(['record', '--engine', engine, '-c', command, '-o', dir, ...specs]);
        assert.equal(recorded.status, 0, recorded.stderr);
        const report = runCli(['report', dir, '--json']);
        const rows = new Map(
          (JSON.parse(report.stdout) as ReportRow[]).map((r) => [r.function, r]),
        );
        const row = rows.get('recurse')!;
        assert.equal(row.calls, 11 * TIMES, `${depth} deep`);
        assert.equal(row.calls - row.unreported, returns, `${depth} deep: ${report.stdout}`);
        assert.equal(row.unwound + row.notReturned, 0, `${depth} deep`);
      }
    });
  }
});
