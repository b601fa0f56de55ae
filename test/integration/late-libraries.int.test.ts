// Probes on a library a process loads later with dlopen(), with -p (attached before the load)
// and -c, on every engine: the hits counted must be the calls the library itself counted,
// also across dlclose() and a second dlopen(), and in a forked child; the target must exit
// normally and nothing may be left behind.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  realpathSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, describe, test } from 'node:test';
import { countHits, Tracer } from '../../src/api/index.js';
import { findLoaderRendezvous } from '../../src/api/loader-rendezvous.js';
import { ProcessProbes } from '../../src/engines/index.js';
import { parseRDebug, R_DEBUG_BYTES, walkLinkMap } from '../../src/symbols/index.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers, ownBpfFds, ownLeftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { tool } from '../helpers/tools.js';
import { tracedChildren } from '../helpers/tracees.js';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;
const ENGINES = ['tracefs', 'bpf', 'ptrace'] as const;
const CALLS = 40;

const scratch = mkdtempSync(join(tmpdir(), 'upscope-late-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The target, and its library copied to liblate.so in a directory of its own. */
function build(): { app: string; lib: string; dir: string } {
  const app = compileProgram('late-target', { flags: ['-O2'], link: ['-ldl'] });
  const built = compileProgram('late-lib', { flags: ['-shared', '-fPIC', '-O2'], suffix: '.so' });
  const lib = join(scratch, 'liblate.so');
  copyFileSync(built, lib);
  return { app, lib, dir: scratch };
}

/** What the library counted, summed over the rounds and processes (the target's last line). */
function counted(stdout: string): { add: number; mul: number } {
  const m = /^total add=(\d+) mul=(\d+)$/m.exec(stdout);
  assert.ok(m, `the target printed its totals: ${stdout}`);
  return { add: Number(m[1]), mul: Number(m[2]) };
}

interface Run {
  readonly child: ChildProcess;
  readonly stdout: Promise<string>;
  stderr(): string;
  readonly exit: Promise<number | null>;
}

function run(command: string, args: readonly string[], env = process.env): Run {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  let out = '';
  let err = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, stdout: exit.then(() => out), stderr: () => err, exit };
}

/** Wait until `read()` matches, at most 20 s. */
async function until(read: () => string, pattern: RegExp, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!pattern.test(read())) {
    assert.ok(Date.now() < deadline, `${what}: ${read()}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Hits per probe name (return probes as r:name) in `trace --json` output. */
function hits(stdout: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{') || line.startsWith('{"command"')) continue;
    const event = JSON.parse(line) as { probe: string; kind: string };
    const name = event.kind === 'return' ? `r:${event.probe}` : event.probe;
    out[name] = (out[name] ?? 0) + 1;
  }
  return out;
}

const started: ChildProcess[] = [];
afterEach(() => {
  for (const child of started.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  assert.deepEqual(leftovers(), [], 'no uprobe events or instances of a gone upscope');
  assert.deepEqual(ownLeftovers(), []);
  assert.deepEqual(ownBpfFds(), []);
});

/**
 * `upscope ARGS -p PID` on a target started first: upscope attaches, says the library is not
 * loaded yet, then the target is told to go on and load it `rounds` times.
 */
async function withProcess(
  upscopeArgs: (pid: number) => string[],
  targetArgs: readonly string[],
  env = process.env,
  app = build().app,
): Promise<{ cli: string; cliErr: string; target: string; targetPid: number }> {
  const go = join(scratch, `go-${Math.random().toString(36).slice(2)}`);
  const target = run(app, [go, ...targetArgs], env);
  started.push(target.child);
  const pid = target.child.pid!;
  let targetOut = '';
  target.child.stdout!.on('data', (chunk: Buffer) => {
    targetOut += chunk.toString();
  });
  await until(() => targetOut, /^ready \d+$/m, 'the target started');
  const cli = run(process.execPath, [BIN, ...upscopeArgs(pid)]);
  started.push(cli.child);
  await until(cli.stderr, /^(Tracing|Counting) /m, 'upscope attached');
  writeFileSync(go, '');
  assert.equal(await target.exit, 0, 'the target exits normally');
  assert.equal(await cli.exit, 0, cli.stderr());
  assert.deepEqual(tracedChildren([pid]), []);
  return {
    cli: await cli.stdout,
    cliErr: cli.stderr(),
    target: await target.stdout,
    targetPid: pid,
  };
}

describe('trace -p: a library loaded after upscope attached', () => {
  for (const engine of ENGINES) {
    test(`${engine}: every call, over two dlopen()s with a dlclose() between`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { lib } = build();
      const out = await withProcess(
        (pid) => [
          'trace',
          '--engine',
          engine,
          '--json',
          '-p',
          String(pid),
          `${lib}:late_add`,
          `r:${lib}:late_mul`,
        ],
        [lib, String(CALLS), '2'],
      );
      const truth = counted(out.target);
      assert.deepEqual(truth, { add: 2 * CALLS, mul: CALLS });
      assert.deepEqual(hits(out.cli), { late_add: truth.add, 'r:late_mul': truth.mul });
      const notes = out.cliErr.match(/is not loaded in process \d+ yet/g) ?? [];
      assert.equal(notes.length, 1, out.cliErr);
      assert.match(
        out.cliErr,
        new RegExp(
          `^upscope: ${lib} is not loaded in process ${out.targetPid} yet; its probes attach when it is loaded$`,
          'm',
        ),
      );
    });
  }

  for (const engine of ['tracefs', 'ptrace'] as const) {
    test(`${engine}: the library loaded by a forked child, found by name through its LD_LIBRARY_PATH`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { dir } = build();
      const out = await withProcess(
        (pid) => ['trace', '--engine', engine, '--json', '-p', String(pid), 'liblate:late_add'],
        ['liblate.so', String(CALLS), '2', 'fork'],
        { ...process.env, LD_LIBRARY_PATH: dir },
      );
      assert.deepEqual(hits(out.cli), { late_add: counted(out.target).add });
      assert.match(out.cliErr, new RegExp(`${join(dir, 'liblate.so')} is not loaded in process`));
    });
  }
});

describe('trace -c: a library the command loads with dlopen()', () => {
  for (const engine of ENGINES) {
    test(`${engine}: every call, over two dlopen()s, also in a forked child or one that exec'd`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { app, lib, dir } = build();
      const line = (...more: string[]) =>
        [app, '-', 'liblate.so', String(CALLS), '2', ...more].join(' ');
      // The program itself; loading in a child it forks; run by a shell's child (fork + exec).
      for (const command of [line(), line('fork'), `sh -c '${line()}; true'`]) {
        // By name: the library is only in the command's LD_LIBRARY_PATH.
        const cli = run(
          process.execPath,
          [
            BIN,
            'trace',
            '--engine',
            engine,
            '--json',
            '--command-output',
            'inherit',
            '-c',
            command,
            'liblate:late_add',
            `r:${lib}:late_mul`,
          ],
          { ...process.env, LD_LIBRARY_PATH: dir },
        );
        started.push(cli.child);
        assert.equal(await cli.exit, 0, cli.stderr());
        const stdout = await cli.stdout;
        const truth = counted(stdout);
        assert.deepEqual(truth, { add: 2 * CALLS, mul: CALLS });
        assert.deepEqual(hits(stdout), { late_add: truth.add, 'r:late_mul': truth.mul }, command);
        assert.doesNotMatch(cli.stderr(), /is not loaded/);
      }
    });
  }
});

describe('count: a library loaded later', () => {
  for (const engine of ['bpf', 'ptrace'] as const) {
    test(`${engine} -p: the counts the library kept`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      const { lib } = build();
      const out = await withProcess(
        (pid) => [
          'count',
          '--engine',
          engine,
          '--json',
          '-p',
          String(pid),
          `${lib}:late_add`,
          `${lib}:late_mul`,
        ],
        [lib, String(CALLS), '3'],
      );
      const rows: { probe: string; count: number }[] = JSON.parse(
        out.cli.trim().split('\n').at(-1)!,
      );
      const truth = counted(out.target);
      assert.deepEqual(truth, { add: 3 * CALLS, mul: (3 * CALLS) / 2 });
      assert.deepEqual(Object.fromEntries(rows.map((r) => [r.probe, r.count])), {
        late_add: truth.add,
        late_mul: truth.mul,
      });
      assert.match(out.cliErr, /is not loaded in process \d+ yet/);
    });
  }
});

/**
 * The library built twice (-O2 and -O0: its functions at other offsets), the -O2 one at
 * liblate.so in a directory of its own; `replace()` renames a copy of the other over it (a
 * new file at the path, as a rebuild or an upgrade leaves it).
 */
function twoBuilds(): { lib: string; other: string; replace(): void } {
  const dir = mkdtempSync(join(scratch, 'replaced-'));
  const lib = join(dir, 'liblate.so');
  copyFileSync(
    compileProgram('late-lib', { flags: ['-shared', '-fPIC', '-O2'], suffix: '.so' }),
    lib,
  );
  const other = compileProgram('late-lib', { flags: ['-shared', '-fPIC', '-O0'], suffix: '.so' });
  const offset = (file: string) => /^([0-9a-f]+) T late_add$/m.exec(tool('nm', [file]))![1];
  assert.notEqual(offset(lib), offset(other), 'the two builds place late_add apart');
  return {
    lib,
    other,
    replace: () => {
      copyFileSync(other, `${lib}.tmp`);
      renameSync(`${lib}.tmp`, lib);
    },
  };
}

describe('a library replaced on disk between dlclose() and dlopen()', () => {
  const cases = [
    { engine: 'tracefs', command: 'trace' },
    { engine: 'bpf', command: 'trace' },
    { engine: 'bpf', command: 'count' },
    { engine: 'ptrace', command: 'count' },
    { engine: 'ptrace', command: 'trace' },
  ] as const;
  for (const { engine, command } of cases) {
    test(`${engine} ${command} -p: every call, in the old file and in the new one`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'nm'] })) return;
      const app = compileProgram('late-target', { flags: ['-O2'], link: ['-ldl'] });
      const { lib, replace } = twoBuilds();
      const go = join(scratch, `go-${Math.random().toString(36).slice(2)}`);
      const target = run(app, [go, lib, String(CALLS), '2', 'each']);
      started.push(target.child);
      let targetOut = '';
      target.child.stdout!.on('data', (chunk: Buffer) => {
        targetOut += chunk.toString();
      });
      await until(() => targetOut, /^ready \d+$/m, 'the target started');
      const pid = target.child.pid!;
      const cli = run(process.execPath, [
        BIN,
        command,
        '--engine',
        engine,
        '--json',
        '-p',
        String(pid),
        `${lib}:late_add`,
      ]);
      started.push(cli.child);
      await until(cli.stderr, /^(Tracing|Counting) /m, 'upscope attached');
      writeFileSync(go, '');
      await until(() => targetOut, /^closed 1$/m, 'the first round ended');
      replace();
      // The kernel engines see the new file when it is renamed in, and say so; the ptrace
      // engine when the process maps it.
      if (engine !== 'ptrace') {
        await until(
          cli.stderr,
          new RegExp(
            `^upscope: ${lib} was replaced on disk: 1 probe placed in the new file too$`,
            'm',
          ),
          'upscope probed the new file',
        );
      }
      writeFileSync(`${go}.2`, '');
      assert.equal(await target.exit, 0, 'the target exits normally');
      assert.equal(await cli.exit, 0, cli.stderr());
      const truth = counted(await target.stdout);
      assert.deepEqual(truth, { add: 2 * CALLS, mul: CALLS });
      const out = await cli.stdout;
      const seen =
        command === 'trace'
          ? (hits(out)['late_add'] ?? 0)
          : (JSON.parse(out.trim().split('\n').at(-1)!) as { probe: string; count: number }[])
              .filter((row) => row.probe === 'late_add')
              .reduce((sum, row) => sum + row.count, 0);
      assert.equal(seen, truth.add, cli.stderr());
      assert.doesNotMatch(cli.stderr(), /not counted|not probed/);
      assert.deepEqual(tracedChildren([pid]), []);
    });
  }

  for (const engine of ['bpf', 'tracefs'] as const) {
    test(`${engine}: a new file loaded before upscope could probe it is said, with what was not counted`, async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc', 'nm'] })) return;
      const app = compileProgram('late-target', { flags: ['-O2'], link: ['-ldl'] });
      const { lib, replace } = twoBuilds();
      const go = join(scratch, `go-${Math.random().toString(36).slice(2)}`);
      const target = run(app, [go, lib, String(CALLS), '2', 'each', 'hold']);
      started.push(target.child);
      let targetOut = '';
      target.child.stdout!.on('data', (chunk: Buffer) => {
        targetOut += chunk.toString();
      });
      await until(() => targetOut, /^ready \d+$/m, 'the target started');
      const pid = target.child.pid!;
      const verb = engine === 'bpf' ? 'count' : 'trace';
      const cli = run(process.execPath, [
        BIN,
        verb,
        '--engine',
        engine,
        '--json',
        '-p',
        String(pid),
        `${lib}:late_add`,
      ]);
      started.push(cli.child);
      await until(cli.stderr, /^(Tracing|Counting) /m, 'upscope attached');
      writeFileSync(go, '');
      await until(() => targetOut, /^opened 1$/m, 'the first round made its calls');
      writeFileSync(`${go}.close.1`, '');
      await until(() => targetOut, /^closed 1$/m, 'the first round ended');
      // upscope cannot see the new file before the target has loaded it and called it.
      cli.child.kill('SIGSTOP');
      try {
        replace();
        writeFileSync(`${go}.2`, '');
        await until(() => targetOut, /^opened 2$/m, 'the second round made its calls');
      } finally {
        cli.child.kill('SIGCONT');
      }
      await until(
        cli.stderr,
        new RegExp(
          `^upscope: process ${pid} had loaded the new ${lib} before its probes were placed: its calls there until now are not counted$`,
          'm',
        ),
        'upscope said what it missed',
      );
      writeFileSync(`${go}.close.2`, '');
      assert.equal(await target.exit, 0, 'the target exits normally');
      assert.equal(await cli.exit, 0, cli.stderr());
      const truth = counted(await target.stdout);
      assert.deepEqual(truth, { add: 2 * CALLS, mul: CALLS });
      const out = await cli.stdout;
      const seen =
        verb === 'trace'
          ? (hits(out)['late_add'] ?? 0)
          : (JSON.parse(out.trim().split('\n').at(-1)!) as { probe: string; count: number }[])
              .filter((row) => row.probe === 'late_add')
              .reduce((sum, row) => sum + row.count, 0);
      assert.equal(seen, CALLS, 'the first file was counted, the calls said missed were not');
    });
  }
});

describe('the library API with pid: a library loaded later', () => {
  test('Tracer.attach() (bpf) and countHits() see the calls and leave no descriptor', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const { app, lib } = build();
    const go = join(scratch, 'go-api');
    const target = run(app, [go, lib, String(CALLS), '2']);
    started.push(target.child);
    const pid = target.child.pid!;
    const attachment = await new Tracer().attach(`${lib}:late_add`, { pid, engine: 'bpf' });
    const counts = await countHits(`${lib}:late_mul`, { pid });
    assert.equal(attachment.sites[0]!.runtimeAddress, undefined, 'not mapped when attached');
    let seen = 0;
    attachment.on('*', () => {
      seen++;
    });
    writeFileSync(go, '');
    await Promise.all([attachment.ended, counts.ended]);
    const truth = counted(await target.stdout);
    assert.deepEqual(truth, { add: 2 * CALLS, mul: CALLS });
    assert.equal(seen, truth.add);
    assert.equal(Number(counts.read()[0]!.count), truth.mul);
    counts.close();
  });
});

describe('resolve -p: a library the process has not loaded yet', () => {
  test('resolves from disk, without a runtime address, and says so once', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'nm'] })) return;
    const { app, lib } = build();
    const target = run(app, [join(scratch, 'never'), lib, '1']);
    started.push(target.child);
    let out = '';
    target.child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    await until(() => out, /^ready/m, 'the target started');
    const pid = target.child.pid!;
    const specs = [`${lib}:late_add`, `${lib}:late_mul`];
    const text = runCli(['resolve', '-p', String(pid), ...specs]);
    assert.equal(text.status, 0, text.stderr);
    assert.equal(
      text.stderr,
      `upscope: ${lib} is not loaded in process ${pid} yet; its probes attach when it is loaded\n`,
    );
    assert.doesNotMatch(text.stdout, /runtime/);
    const json = JSON.parse(runCli(['resolve', '--json', '-p', String(pid), ...specs]).stdout);
    assert.deepEqual(json.notes, [
      `${lib} is not loaded in process ${pid} yet; its probes attach when it is loaded`,
    ]);
    // The functions' addresses in the file, as nm gives them.
    const nm = tool('nm', [lib]);
    const symbol = (name: string) =>
      BigInt(`0x${new RegExp(`^([0-9a-f]+) T ${name}$`, 'm').exec(nm)![1]}`);
    assert.deepEqual(
      json.sites.map((site: { vaddr: string }) => BigInt(site.vaddr)),
      [symbol('late_add'), symbol('late_mul')],
    );
    target.child.kill('SIGKILL');
    await target.exit;
  });
});

describe('finding the dynamic linker’s rendezvous', () => {
  test('through DT_DEBUG in a running process, and through ld.so’s symbols at its exec', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'nm'] })) return;
    const { app, lib } = build();
    // ld.so as the process maps it, and its symbols as nm -D reads them.
    const target = run(app, [join(scratch, 'never'), lib, '1']);
    started.push(target.child);
    const pid = target.child.pid!;
    let out = '';
    target.child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    await until(() => out, /^ready/m, 'the target started');
    const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
    const ldso = /^([0-9a-f]+)-\S+ \S+ 0+ \S+ \d+\s+(\S*\/ld-linux-x86-64\.so\.2)$/m.exec(maps);
    assert.ok(ldso, maps);
    const base = BigInt(`0x${ldso[1]}`);
    const nm = tool('nm', ['-D', ldso[2]!]);
    const value = (name: string) =>
      BigInt(`0x${new RegExp(`^([0-9a-f]+) \\S ${name}@`, 'm').exec(nm)![1]}`);
    const read = (vaddr: bigint, length: number) => readMemory(pid, vaddr, length);
    const running = findLoaderRendezvous(pid, read);
    assert.deepEqual(running, {
      brk: base + value('_dl_debug_state'),
      rDebug: base + value('_r_debug'),
      how: 'dt-debug',
    });
    // Its link map names the libraries the kernel shows mapped.
    const rDebug = parseRDebug(read(running.rDebug!, R_DEBUG_BYTES));
    assert.equal(rDebug.state, 'consistent');
    const names = walkLinkMap(read, rDebug.map)
      .map((entry) => readCString(read, entry.name))
      // The executable's entry has no name, the vDSO's no path.
      .filter((name) => name.startsWith('/'));
    const mapped = new Set([...maps.matchAll(/\s(\/\S+\.so[.\d]*)$/gm)].map((m) => m[1]));
    assert.ok(names.length >= 2, names.join());
    for (const name of names) assert.ok(mapped.has(name) || mapped.has(realpathSync(name)), name);
    target.child.kill('SIGKILL');
    // Reaped by Node first: the tracer's own waits must not see it.
    await target.exit;

    // At the exec stop, before ld.so has run, DT_DEBUG is still 0: ld.so's symbols tell.
    const probes = ProcessProbes.spawn([app, '-', lib, '1'], { stdio: [0, 2, 2] });
    try {
      const early = findLoaderRendezvous(probes.pid, (v, l) => probes.tracee.read(v, l));
      const earlyBase = BigInt(
        `0x${/^([0-9a-f]+)-\S+ \S+ 0+ \S+ \d+\s+\S*\/ld-linux-x86-64\.so\.2$/m.exec(readFileSync(`/proc/${probes.pid}/maps`, 'utf8'))![1]}`,
      );
      assert.deepEqual(early, {
        brk: earlyBase + value('_dl_debug_state'),
        rDebug: earlyBase + value('_r_debug'),
        how: 'symbols',
      });
    } finally {
      probes.kill();
    }
    assert.deepEqual(tracedChildren([probes.pid, pid]), []);
  });
});

/** Bytes of a process's memory, through /proc/PID/mem. */
function readMemory(pid: number, vaddr: bigint, length: number): Uint8Array {
  const fd = openSync(`/proc/${pid}/mem`, 'r');
  try {
    const bytes = new Uint8Array(length);
    readSync(fd, bytes, 0, length, Number(vaddr));
    return bytes;
  } finally {
    closeSync(fd);
  }
}

function readCString(read: (vaddr: bigint, length: number) => Uint8Array, vaddr: bigint): string {
  const bytes = read(vaddr, 512);
  const end = bytes.indexOf(0);
  return Buffer.from(bytes.subarray(0, end < 0 ? bytes.length : end)).toString('utf8');
}
