import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  realpathSync,
  rmSync,
  statSync,
  unlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { compileProgram } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { readelfFileOffset, tool } from '../../../test/helpers/tools.js';
import { ProbeError } from '../../errors/index.js';
import {
  fileOffsetToRuntime,
  mappedObjects,
  runtimeToFileOffset,
} from '../../symbols/maps/index.js';
import {
  commandSearchOptions,
  processComm,
  processObjects,
  readProcessMaps,
  resolveTarget,
  sameMountNamespace,
} from './index.js';

interface Running {
  readonly child: ChildProcess;
  readonly pid: number;
  /** The runtime address of tgt_marker() the program printed. */
  readonly marker: bigint;
}

const running = new Set<ChildProcess>();

/** Start a tgt-sleeper build (or a command that execs one) and wait for its first line. */
async function start(
  command: string,
  args: readonly string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<Running> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  running.add(child);
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(
      () => reject(new Error(`${command} printed nothing in 10 s: ${err}`)),
      10_000,
    );
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(out.slice(0, nl));
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited (${code ?? signal}) before printing: ${err}`));
    });
  });
  const [address, pid] = line.split(' ');
  assert.equal(Number(pid), child.pid, 'the program printed its pid, which must be the child');
  return { child, pid: child.pid!, marker: BigInt(address!) };
}

/** Kill a started program and wait until it is reaped, so no zombie is left. */
async function stop(child: ChildProcess): Promise<void> {
  running.delete(child);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  await exited;
}

after(async () => {
  for (const child of [...running]) await stop(child);
});

const scratch = mkdtempSync(join(tmpdir(), 'upscope-proc-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function readHead(path: string, length: number): Buffer {
  const fd = openSync(path, 'r');
  try {
    const buffer = Buffer.alloc(length);
    const n = readSync(fd, buffer, 0, length, 0);
    return buffer.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

/** nm's value for a symbol: its virtual address in the file. */
function nmValue(file: string, symbol: string): bigint {
  const m = new RegExp(`^([0-9a-f]+) [Tt] ${symbol}$`, 'm').exec(tool('nm', [file]));
  assert.ok(m, `nm finds no ${symbol} in ${file}`);
  return BigInt(`0x${m[1]}`);
}

function assertProbeError(fn: () => unknown, code: string, message: RegExp): ProbeError {
  let caught: ProbeError | undefined;
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ProbeError, `expected a ProbeError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.match(err.message, message);
    caught = err;
    return true;
  });
  return caught!;
}

describe('resolveTarget() with a process', () => {
  it('finds libc through the maps of a running program', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const program = compileProgram('tgt-sleeper');
    const { child, pid } = await start(program);
    try {
      const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
      const libcPath = /\s(\/\S*\/libc\.so\.6)$/m.exec(maps)?.[1];
      assert.ok(libcPath, 'the kernel shows libc.so.6 in the maps');
      const target = resolveTarget('libc', { pid });
      assert.equal(target.how, 'process-map');
      assert.equal(target.displayPath, libcPath);
      assert.equal(target.path, libcPath);
      assert.equal(target.mappedObject?.path, libcPath);
      assert.equal(target.inode, statSync(libcPath, { bigint: true }).ino);
      // The program itself by its file name, and by path.
      const self = resolveTarget(basename(program), { pid });
      assert.deepEqual([self.how, self.path], ['process-map', program]);
      const byPath = resolveTarget(program, { pid });
      assert.deepEqual(
        [byPath.how, byPath.path, byPath.mappedObject?.path],
        ['path', program, program],
      );
      // A library the process has not loaded is still found on disk, without a mapping.
      const libm = resolveTarget('libm', { pid });
      assert.equal(libm.how, 'ld-cache');
      assert.equal(libm.mappedObject, undefined);
    } finally {
      await stop(child);
    }
  });

  it('takes a path the process has not mapped (yet) from disk, without a mapping', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const { child, pid } = await start(compileProgram('tgt-sleeper'));
    try {
      const target = resolveTarget('/bin/sh', { pid });
      assert.deepEqual(
        [target.how, target.path, target.displayPath],
        ['path', '/bin/sh', '/bin/sh'],
      );
      assert.equal(target.mappedObject, undefined);
      assert.equal(target.inode, statSync('/bin/sh', { bigint: true }).ino);
      assertProbeError(
        () => resolveTarget(join(scratch, 'no-such-lib.so'), { pid }),
        'ERR_TARGET_NOT_FOUND',
        /: no such file$/,
      );
    } finally {
      await stop(child);
    }
  });

  it('searches a library it has not loaded as its dynamic linker would: RUNPATH, LD_LIBRARY_PATH', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'readelf'] })) return;
    const lib = compileProgram('tgt-lib', { flags: ['-shared', '-fPIC'], suffix: '.so' });
    const home = join(scratch, 'search');
    for (const dir of ['app/rdir', 'env', 'env2']) mkdirSync(join(home, dir), { recursive: true });
    // Only these directories hold these names: a library found is found through them.
    copyFileSync(lib, join(home, 'app/rdir/libtgtrunpath.so'));
    copyFileSync(lib, join(home, 'env/libtgtenv.so.1'));
    copyFileSync(lib, join(home, 'env2/libtgtenv.so.1'));
    const program = join(home, 'app/sleeper');
    copyFileSync(
      compileProgram('tgt-sleeper', {
        flags: ['-Wl,--enable-new-dtags', '-Wl,-rpath,$ORIGIN/rdir'],
      }),
      program,
    );
    assert.match(tool('readelf', ['-dW', program]), /\(RUNPATH\).*\[\$ORIGIN\/rdir\]/);
    const libraryPath = `${join(home, 'env')}:${join(home, 'env2')}`;
    const { child, pid } = await start(program, [], {
      ...process.env,
      LD_LIBRARY_PATH: libraryPath,
    });
    try {
      const fromEnv = resolveTarget('libtgtenv', { pid });
      assert.deepEqual(
        [fromEnv.how, fromEnv.path, fromEnv.mappedObject],
        ['ld-library-path', join(home, 'env/libtgtenv.so.1'), undefined],
      );
      const fromRunpath = resolveTarget('libtgtrunpath', { pid });
      assert.deepEqual(
        [fromRunpath.how, fromRunpath.path],
        ['runpath', join(home, 'app/rdir/libtgtrunpath.so')],
      );
      // Without the process: the same from the program and the variable given.
      assert.equal(
        resolveTarget('libtgtenv', { libraryPath }).path,
        join(home, 'env/libtgtenv.so.1'),
      );
      assert.equal(
        resolveTarget('libtgtrunpath', { executable: program }).path,
        join(home, 'app/rdir/libtgtrunpath.so'),
      );
      assert.deepEqual(commandSearchOptions(`${program} 5`, { LD_LIBRARY_PATH: libraryPath }), {
        libraryPath,
        executable: program,
      });
      assertProbeError(
        () => resolveTarget('libtgtenv', {}),
        'ERR_TARGET_NOT_FOUND',
        /^Cannot find target "libtgtenv"/,
      );
    } finally {
      await stop(child);
    }
  });

  it('names the process when it has not mapped a name', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const { child, pid } = await start(compileProgram('tgt-sleeper'));
    try {
      const missing = assertProbeError(
        () => resolveTarget('libdoesnotexist', { pid }),
        'ERR_TARGET_NOT_FOUND',
        new RegExp(`^Cannot find target "libdoesnotexist": not mapped in process ${pid} `),
      );
      assert.ok(missing.hints.some((h) => h.includes(`upscope list -p ${pid}`)));
    } finally {
      await stop(child);
    }
  });

  it('opens a deleted program through /proc/PID/map_files', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const original = compileProgram('tgt-sleeper');
    const copy = join(scratch, 'tgt-sleeper-deleted');
    copyFileSync(original, copy);
    const { child, pid } = await start(copy);
    try {
      unlinkSync(copy);
      const target = resolveTarget('tgt-sleeper-deleted', { pid });
      assert.equal(target.how, 'process-map');
      assert.match(target.path, new RegExp(`^/proc/${pid}/map_files/[0-9a-f]+-[0-9a-f]+$`));
      assert.equal(target.displayPath, copy);
      assert.equal(target.mappedObject?.deleted, true);
      assert.deepEqual(readHead(target.path, 4), Buffer.from('\x7fELF', 'latin1'));
      assert.deepEqual(readFileSync(target.path), readFileSync(original));
      // Naming the (now missing) path finds the same mapping.
      const byPath = resolveTarget(copy, { pid });
      assert.equal(byPath.path, target.path);
    } finally {
      await stop(child);
    }
  });

  it('opens files of a process in another mount namespace through /proc/PID/root', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc', 'unshare'] })) return;
    const program = compileProgram('tgt-sleeper');
    const dir = join(scratch, 'ns');
    mkdirSync(dir);
    // Here, dir/prog is another file; in the new namespace a tmpfs over dir holds the program.
    copyFileSync(
      compileProgram('tgt-lib', { flags: ['-shared', '-fPIC'], suffix: '.so' }),
      join(dir, 'prog'),
    );
    // The namespace also has a library its program has not loaded, found by path and by name
    // through its LD_LIBRARY_PATH.
    const lib = compileProgram('tgt-lib', { flags: ['-shared', '-fPIC'], suffix: '.so' });
    const script =
      'mount -t tmpfs tmpfs "$0" && cp "$1" "$0/prog" && cp "$2" "$0/libnslate.so" && LD_LIBRARY_PATH="$0" exec "$0/prog"';
    const { child, pid } = await start('unshare', [
      '-m',
      '--propagation',
      'private',
      'sh',
      '-c',
      script,
      dir,
      program,
      lib,
    ]);
    try {
      assert.equal(sameMountNamespace(pid), false);
      const target = resolveTarget('prog', { pid });
      assert.equal(target.how, 'process-map');
      assert.equal(target.path, `/proc/${pid}/root${dir}/prog`);
      assert.equal(target.displayPath, `${dir}/prog`);
      assert.deepEqual(readFileSync(target.path), readFileSync(program));
      assert.notEqual(target.inode, statSync(join(dir, 'prog'), { bigint: true }).ino);
      const byPath = resolveTarget(join(dir, 'prog'), { pid });
      assert.equal(byPath.path, target.path);
      assert.equal(byPath.inode, target.inode);
      for (const name of [join(dir, 'libnslate.so'), 'libnslate']) {
        const late = resolveTarget(name, { pid });
        assert.equal(late.path, `/proc/${pid}/root${dir}/libnslate.so`, name);
        assert.equal(late.displayPath, `${dir}/libnslate.so`, name);
        assert.equal(late.mappedObject, undefined, name);
      }
    } finally {
      await stop(child);
    }
  });

  it('reads paths with spaces and parentheses as the kernel shows them', async (t) => {
    if (!requireHost(t, { commands: ['gcc'] })) return;
    const dir = join(scratch, 'dir with spaces');
    mkdirSync(dir);
    const odd = join(dir, 'my prog (1)');
    copyFileSync(compileProgram('tgt-sleeper'), odd);
    const { child, pid } = await start(odd);
    try {
      const objects = processObjects(pid);
      assert.ok(objects.some((o) => o.path === odd && !o.deleted));
      const target = resolveTarget('my prog (1)', { pid });
      assert.equal(target.path, odd);
    } finally {
      await stop(child);
    }
  });
});

describe('process readers', () => {
  it('runtimeToFileOffset() maps a function address to its offset from nm and readelf', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
    for (const flags of [[], ['-no-pie']]) {
      const program = compileProgram('tgt-sleeper', { flags });
      const { child, pid, marker } = await start(program);
      try {
        const entries = readProcessMaps(pid);
        const hit = runtimeToFileOffset(entries, marker);
        assert.ok(hit, `0x${marker.toString(16)} is in a file mapping`);
        assert.equal(hit.entry.path, program);
        assert.equal(hit.entry.executable, true);
        const expected = readelfFileOffset(program, nmValue(program, 'tgt_marker'));
        assert.equal(hit.fileOffset, expected, `flags ${flags.join(' ')}`);
        const object = mappedObjects(entries).find((o) => o.path === program)!;
        assert.equal(fileOffsetToRuntime(object, expected), marker);
      } finally {
        await stop(child);
      }
    }
  });

  it('processComm() gives the name ps shows', async (t) => {
    if (!requireHost(t, { commands: ['gcc', 'ps'] })) return;
    const { child, pid } = await start(compileProgram('tgt-sleeper'));
    try {
      assert.equal(processComm(pid), tool('ps', ['-o', 'comm=', '-p', String(pid)]).trim());
    } finally {
      await stop(child);
    }
  });

  it('reports a process that does not exist', () => {
    const pidMax = Number(readFileSync('/proc/sys/kernel/pid_max', 'utf8'));
    for (const read of [readProcessMaps, processObjects, processComm]) {
      const err = assertProbeError(
        () => read(pidMax + 1),
        'ERR_PROCESS_NOT_FOUND',
        new RegExp(`^Cannot find process ${pidMax + 1}: no such process$`),
      );
      assert.equal(err.category, 'resolution');
    }
    assertProbeError(
      () => resolveTarget('libc', { pid: pidMax + 1 }),
      'ERR_PROCESS_NOT_FOUND',
      /no such process/,
    );
    assertProbeError(() => readProcessMaps(-3), 'ERR_USAGE', /a PID is a positive integer/);
  });

  it("reports permission denied for another user's process, with hints", async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const { child, pid } = await start(compileProgram('tgt-sleeper'));
    try {
      // Read the root-owned program's maps from a child running as nobody.
      const here = new URL('./index.ts', import.meta.url).pathname;
      const code = `
        const { readProcessMaps } = await import(${JSON.stringify(here)});
        try { readProcessMaps(${pid}); console.log('no error'); }
        catch (err) { console.log(JSON.stringify({ code: err.code, message: err.message, hints: err.hints })); }`;
      const result = spawnSync(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', code],
        {
          uid: 65534,
          gid: 65534,
          encoding: 'utf8',
          cwd: new URL('../../..', import.meta.url).pathname,
          env: { ...process.env, HOME: '/nonexistent', TSX_DISABLE_CACHE: '1' },
        },
      );
      const report = JSON.parse(result.stdout.trim().split('\n').at(-1) ?? '""') as {
        code: string;
        message: string;
        hints: string[];
      };
      assert.equal(report.code, 'ERR_PROCESS_ACCESS', result.stderr);
      assert.match(
        report.message,
        new RegExp(`^Cannot read the memory map of process ${pid} \\("tgt-sleeper-`),
      );
      assert.match(report.message, /permission denied \(running as uid 65534\)$/);
      assert.ok(report.hints.some((h) => h.includes('CAP_SYS_PTRACE')));
      assert.ok(report.hints.some((h) => h.includes('instead of -p')));
    } finally {
      await stop(child);
    }
  });
});

describe('resolving the same file two ways', () => {
  it('gives the same device and inode through the path and through map_files', async (t) => {
    if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
    const program = compileProgram('tgt-sleeper');
    const { child, pid } = await start(program);
    try {
      const object = processObjects(pid).find((o) => o.path === realpathSync(program))!;
      const first = object.mappings[0]!;
      const viaMapFiles = statSync(
        `/proc/${pid}/map_files/${first.start.toString(16)}-${first.end.toString(16)}`,
        {
          bigint: true,
        },
      );
      const target = resolveTarget(program, { pid });
      assert.deepEqual([target.dev, target.inode], [viaMapFiles.dev, viaMapFiles.ino]);
      assert.deepEqual([object.dev, object.inode], [viaMapFiles.dev, viaMapFiles.ino]);
    } finally {
      await stop(child);
    }
  });
});
