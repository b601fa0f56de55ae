// The ptrace engine against real processes: breakpoints counted against the target's own
// count, threads, a handler that changes a return value, and a detach that leaves the text as
// the file has it. No root needed: the tracer traces its own children.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { test } from 'node:test';
import { capture } from '../../../test/helpers/capture.js';
import { compileProgram, compileTraceTarget } from '../../../test/helpers/compile.js';
import { requireHost } from '../../../test/helpers/require-host.js';
import { runNode } from '../../../test/helpers/run-cli.js';
import { readelfFileOffset, tool } from '../../../test/helpers/tools.js';
import { loadNative, WAIT } from '../../native/index.js';
import { ProcessProbes } from './process-probes.js';

/** A symbol's address in the file, from nm. */
function symbolVaddr(path: string, name: string): bigint {
  const line = tool('nm', [path])
    .split('\n')
    .find((l) => l.endsWith(` ${name}`));
  assert.ok(line, `nm finds ${name}`);
  return BigInt(`0x${line.split(' ')[0]}`);
}

/** Where a file offset of `path` is mapped in process `pid`, from /proc/PID/maps. */
function runtimeAddress(pid: number, path: string, fileOffset: bigint): bigint {
  for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
    const fields = line.split(/\s+/);
    if (fields[5] !== path) continue;
    const [start, end] = fields[0]!.split('-').map((h) => BigInt(`0x${h}`));
    const offset = BigInt(`0x${fields[2]}`);
    if (fileOffset >= offset && fileOffset < offset + (end! - start!)) {
      return start! + fileOffset - offset;
    }
  }
  throw new Error(`offset 0x${fileOffset.toString(16)} of ${path} is not mapped in ${pid}`);
}

function noZombies(pid: number): void {
  let state = '';
  try {
    state = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return; // gone and reaped
  }
  assert.fail(`process ${pid} is still there: ${state.slice(0, 80)}`);
}

test('every hit of a breakpoint in 4 threads is counted, and the output is as without probes', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const calls = 2500;
  const bare = execFileSync(app, [String(calls)], { encoding: 'utf8' });
  const out = capture();
  const probes = ProcessProbes.spawn([app, String(calls)], { stdio: [0, out.fd, 2] });
  const pid = probes.pid;
  const offset = readelfFileOffset(app, symbolVaddr(app, 'probed_add'));
  const where = runtimeAddress(pid, app, offset);
  let hits = 0;
  const threads = new Set<number>();
  probes.register({
    id: 'add',
    event: 'breakpoint',
    where,
    handler: (hit) => {
      hits++;
      threads.add(hit.tid);
      assert.equal(hit.regs.rip, where);
    },
  });
  let exit: number | undefined;
  probes.register({ id: 'exit', event: 'exit' });
  for (;;) {
    const event = probes.poll();
    if (event === null) break;
    if (event.event === 'exit') exit = event.detail;
  }
  const printed = out.text();
  assert.equal(printed, bare, 'the program prints what it prints untraced');
  assert.equal(hits, 4 * calls, printed);
  assert.equal(threads.size, 4);
  assert.equal(exit, 0);
  assert.equal(probes.exitCode, 0);
  noZombies(pid);
});

test('poll() returns each hit of a breakpoint without a handler, n registrations n times', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const out = capture();
  const probes = ProcessProbes.spawn([app, '5'], { stdio: [0, out.fd, 2] });
  const where = runtimeAddress(
    probes.pid,
    app,
    readelfFileOffset(app, symbolVaddr(app, 'probed_add')),
  );
  probes.register({ id: 'one', event: 'breakpoint', where });
  probes.register({ id: 'two', event: 'breakpoint', where });
  const seen: string[] = [];
  for (;;) {
    const event = probes.poll(10_000);
    if (event === null) break;
    seen.push(event.id);
    // The thread waits for both: 'one' then 'two' for every hit.
    if (seen.length % 2 === 0) assert.deepEqual(seen.slice(-2), ['one', 'two']);
  }
  assert.equal(seen.length, 2 * 4 * 5);
  assert.match(out.text(), /^calls=20 /);
});

test('a return handler that changes the return value changes what the program does', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  for (const force of [false, true]) {
    const out = capture();
    const probes = ProcessProbes.spawn([app, 'gate'], { stdio: [0, out.fd, 2] });
    const where = runtimeAddress(
      probes.pid,
      app,
      readelfFileOffset(app, symbolVaddr(app, 'check_gate')),
    );
    let key = '';
    let returned: bigint | undefined;
    probes.register({
      id: 'gate',
      event: 'return',
      where,
      handler: (hit) => {
        key = hit.readCString(hit.entry!.get('rdi'));
        returned = hit.retval;
        if (force) hit.retval = 1n;
      },
    });
    while (probes.poll() !== null) {
      // every event has a handler
    }
    assert.equal(key, 'guess', 'the entry registers hold the argument');
    assert.equal(returned, 0n);
    assert.equal(out.text(), force ? 'open\n' : 'closed\n');
  }
});

test('detach() puts every byte back: the text in memory equals the file, and the process runs on', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const cpus = (pid: number | 'self') =>
    /^Cpus_allowed_list:\s+(\S+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  const ownCpus = cpus('self');
  const out = capture();
  // Enough calls to still be running when detached.
  const probes = ProcessProbes.spawn([app, '3000000'], { stdio: [0, out.fd, 2] });
  const pid = probes.pid;
  const fileOffset = readelfFileOffset(app, symbolVaddr(app, 'probed_add'));
  const where = runtimeAddress(pid, app, fileOffset);
  let hits = 0;
  probes.register({ id: 'add', event: 'breakpoint', where, handler: () => void hits++ });
  probes.register({ id: 'ret', event: 'return', where, handler: () => {} });
  const started = performance.now();
  while (hits < 20_000 && performance.now() - started < 20_000) probes.poll(50);
  probes.detach();
  // The probed function's bytes in the process, against the file's.
  const fromFile = Buffer.alloc(64);
  const fd = openSync(app, 'r');
  readSync(fd, fromFile, 0, 64, Number(fileOffset));
  closeSync(fd);
  const mem = openSync(`/proc/${pid}/mem`, 'r');
  const inMemory = Buffer.alloc(64);
  readSync(mem, inMemory, 0, 64, Number(where));
  closeSync(mem);
  assert.deepEqual(inMemory, fromFile);
  // No out-of-line page is left: every mapping is one the program made.
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8');
  assert.doesNotMatch(maps, /^[0-9a-f]+-[0-9a-f]+ r-xp 00000000 00:00 0 +$/m, maps);
  // The CPU masks pinning changed are back: the process's and the tracer's own.
  assert.equal(cpus(pid), ownCpus);
  assert.equal(cpus('self'), ownCpus);
  // Untraced now (TracerPid 0), it finishes on its own with the right count.
  assert.match(readFileSync(`/proc/${pid}/status`, 'utf8'), /^TracerPid:\s+0$/m);
  // It is still this process's child: reap it.
  const end = probes.tracee.waitChild(pid);
  assert.deepEqual(end, { kind: 'exited', tid: pid, code: 0 });
  assert.match(out.text(), /^calls=12000000 /);
  noZombies(pid);
});

test('instructions run out of line (relocated or emulated) compute what they compute in place', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  for (const flags of [['-O2'], ['-O2', '-no-pie']]) {
    const app = compileProgram('xol-insns', { flags });
    const inPlace = execFileSync(app, { encoding: 'utf8' });
    const labels = tool('nm', [app])
      .split('\n')
      .map((l) => l.split(' '))
      .filter((f) => /^xol_i\d+$/.test(f[2] ?? ''));
    assert.equal(labels.length, 16, 'nm finds every labelled instruction');
    const out = capture();
    const probes = ProcessProbes.spawn([app], { stdio: [0, out.fd, 2] });
    const hits = new Map<string, number>();
    for (const [vaddr, , name] of labels) {
      const where = runtimeAddress(probes.pid, app, readelfFileOffset(app, BigInt(`0x${vaddr}`)));
      probes.register({
        id: name!,
        event: 'breakpoint',
        where,
        handler: (hit) => hits.set(hit.id, (hits.get(hit.id) ?? 0) + 1),
      });
    }
    while (probes.poll() !== null) {
      // every event has a handler
    }
    assert.equal(out.text(), inPlace, `${flags.join(' ')}: the same results`);
    assert.equal(probes.exitCode, 0);
    assert.deepEqual(
      [...hits.keys()].sort(),
      labels.map((l) => l[2]).sort(),
      'every instruction was hit',
    );
    assert.ok([...hits.values()].every((n) => n === 1));
  }
});

test('an unprivileged user traces its own child, no root needed', (t) => {
  if (!requireHost(t, { root: true, commands: ['gcc', 'nm', 'readelf', 'setpriv'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const fileOffset = readelfFileOffset(app, symbolVaddr(app, 'probed_add'));
  const library = new URL('../../../dist/engines/ptrace/process-probes.js', import.meta.url)
    .pathname;
  // Runs as nobody: spawn the target, probe it, count the hits, print the count and output.
  const script = `
    import { ProcessProbes } from ${JSON.stringify(library)};
    import { readFileSync } from 'node:fs';
    const app = ${JSON.stringify(app)};
    const probes = ProcessProbes.spawn([app, '100'], { stdio: [0, 2, 2] });
    let where;
    for (const line of readFileSync('/proc/' + probes.pid + '/maps', 'utf8').split('\\n')) {
      const f = line.split(/\\s+/);
      if (f[5] !== app) continue;
      const [start, end] = f[0].split('-').map((h) => BigInt('0x' + h));
      const off = BigInt('0x' + f[2]);
      const want = ${fileOffset}n;
      if (want >= off && want < off + end - start) where = start + want - off;
    }
    let hits = 0;
    probes.register({ id: 'add', event: 'breakpoint', where, handler: () => void hits++ });
    while (probes.poll() !== null) {}
    console.log(JSON.stringify({ uid: process.getuid(), hits, exit: probes.exitCode }));
  `;
  const result = runNode(['--input-type=module', '-e', script], { asNobody: true });
  assert.equal(result.status, 0, result.stderr);
  assert.deepEqual(JSON.parse(result.stdout), { uid: 65534, hits: 400, exit: 0 });
  assert.match(result.stderr, /^calls=400 /m, 'the target counted 400 calls');
});

test('a forked child runs free of the breakpoints; clone and fork are events; threads inherit probes', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const { app } = compileTraceTarget();
  const calls = 40;
  const out = capture();
  const probes = ProcessProbes.spawn([app, String(calls)], { stdio: [0, out.fd, 2] });
  const where = runtimeAddress(probes.pid, app, readelfFileOffset(app, symbolVaddr(app, 'f_ints')));
  const hitsByTid = new Map<number, number>();
  probes.register({
    id: 'f_ints',
    event: 'breakpoint',
    where,
    handler: (hit) => hitsByTid.set(hit.tid, (hitsByTid.get(hit.tid) ?? 0) + 1),
  });
  const events: string[] = [];
  probes.register({ id: 'clone', event: 'clone', handler: () => void events.push('clone') });
  probes.register({ id: 'fork', event: 'fork', handler: () => void events.push('fork') });
  while (probes.poll() !== null) {
    // every event has a handler
  }
  const printed = out.text();
  const report = (who: string) => {
    const m = new RegExp(`^${who} pid=(\\d+) f_ints=(\\d+)`, 'm').exec(printed);
    assert.ok(m, `${who} line in ${printed}`);
    return { pid: Number(m[1]), calls: Number(m[2]) };
  };
  assert.equal(report('main').calls, 4 * calls);
  // The child and its exec ran their calls untraced and unharmed.
  assert.equal(report('fork').calls, 10);
  assert.equal(report('exec').calls, 5);
  assert.equal(probes.exitCode, 0);
  // Every hit came from one of the 4 threads the main process made.
  assert.equal(hitsByTid.size, 4);
  assert.equal(
    [...hitsByTid.values()].reduce((a, b) => a + b, 0),
    4 * calls,
  );
  assert.deepEqual(events, ['clone', 'clone', 'clone', 'clone', 'fork']);
});

test('followForks: a forked child is traced too, with the probes of its parent, until it execs', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const { app } = compileTraceTarget();
  const calls = 40;
  const out = capture();
  const probes = ProcessProbes.spawn([app, String(calls)], {
    stdio: [0, out.fd, 2],
    followForks: true,
  });
  const where = runtimeAddress(probes.pid, app, readelfFileOffset(app, symbolVaddr(app, 'f_ints')));
  const count = (map: Map<number, number>, pid: number) => map.set(pid, (map.get(pid) ?? 0) + 1);
  const hits = new Map<number, number>();
  const returns = new Map<number, number>();
  probes.register({ id: 'in', event: 'breakpoint', where, handler: (hit) => count(hits, hit.pid) });
  probes.register({ id: 'out', event: 'return', where, handler: (hit) => count(returns, hit.pid) });
  const events: string[] = [];
  for (const event of ['fork', 'exec', 'exit'] as const) {
    probes.register({
      id: event,
      event,
      handler: (hit) =>
        void events.push(
          `${event} ${hit.pid === probes.pid ? 'main' : 'child'} ${hit.detail ?? ''}`,
        ),
    });
  }
  while (probes.poll() !== null) {
    // every event has a handler
  }
  const printed = out.text();
  const report = (who: string) => {
    const m = new RegExp(`^${who} pid=(\\d+) f_ints=(\\d+)`, 'm').exec(printed);
    assert.ok(m, `${who} line in ${printed}`);
    return { pid: Number(m[1]), calls: Number(m[2]) };
  };
  const child = report('fork').pid;
  assert.equal(report('main').calls, 4 * calls);
  assert.equal(report('fork').calls, 10);
  assert.equal(report('exec').calls, 5, 'the exec ran untraced and unharmed');
  assert.deepEqual(Object.fromEntries(hits), { [probes.pid]: 4 * calls, [child]: 10 });
  assert.deepEqual(Object.fromEntries(returns), { [probes.pid]: 4 * calls, [child]: 10 });
  assert.deepEqual(events, [`fork main ${child}`, 'exec child ', 'exit child 0', 'exit main 0']);
  assert.equal(probes.exitCode, 0);
  noZombies(child);
});

test('return probes pair each return with its call through recursion and longjmp', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = compileProgram('ptrace-returns', { flags: ['-O2'] });
  const untraced = execFileSync(app, { encoding: 'utf8' });
  const out = capture();
  const probes = ProcessProbes.spawn([app], { stdio: [0, out.fd, 2] });
  const at = (name: string) =>
    runtimeAddress(probes.pid, app, readelfFileOffset(app, symbolVaddr(app, name)));
  const factorial = (n: bigint): bigint => (n <= 1n ? 1n : n * factorial(n - 1n));
  let returns = 0;
  let mismatched = 0;
  probes.register({
    id: 'fact',
    event: 'return',
    where: at('fact'),
    handler: (hit) => {
      returns++;
      if (hit.retval !== factorial(hit.entry!.get('rdi'))) mismatched++;
    },
  });
  let diveReturns = 0;
  probes.register({
    id: 'dive',
    event: 'return',
    where: at('dive'),
    handler: () => void diveReturns++,
  });
  while (probes.poll() !== null) {
    // every event has a handler
  }
  const printed = out.text();
  assert.equal(printed, untraced);
  const calls = Number(/fact_calls=(\d+)/.exec(printed)?.[1]);
  assert.equal(calls, 100 * 10 + 100 * 5, 'fact() recursed: one call per level');
  assert.equal(returns, calls, 'one return event per call of fact()');
  assert.equal(mismatched, 0, 'each return value is the factorial of its own call’s argument');
  assert.equal(diveReturns, 0, 'dive() never returns: longjmp leaves it');
  assert.equal(probes.exitCode, 0);
});

test('an exec of the traced process is an event, drops the old image’s probes, and runs on', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm', 'readelf'] })) return;
  const app = compileProgram('ptrace-target', { flags: ['-O2'], link: ['-lpthread'] });
  const untraced = execFileSync(app, ['exec'], { encoding: 'utf8' });
  const out = capture();
  const probes = ProcessProbes.spawn([app, 'exec'], { stdio: [0, out.fd, 2] });
  const where = runtimeAddress(
    probes.pid,
    app,
    readelfFileOffset(app, symbolVaddr(app, 'probed_add')),
  );
  let hits = 0;
  probes.register({ id: 'add', event: 'breakpoint', where, handler: () => void hits++ });
  const events: string[] = [];
  probes.register({ id: 'exec', event: 'exec' });
  for (;;) {
    const event = probes.poll(20_000);
    if (event === null) break;
    events.push(event.event);
  }
  assert.deepEqual(events, ['exec']);
  assert.equal(hits, 3, 'the old image’s 3 calls; the new image has no probes');
  assert.equal(out.text(), untraced);
  assert.match(untraced, /^before exec calls=3\ncalls=8 /);
  assert.equal(probes.exitCode, 0);
});

test('SIGSTOP sent to a traced process stops it as it would untraced, until SIGCONT', (t) => {
  if (!requireHost(t, { commands: ['sh', 'sleep'] })) return;
  const out = capture();
  const probes = ProcessProbes.spawn(
    ['/bin/sh', '-c', 'i=0; while [ $i -lt 10 ]; do i=$((i+1)); sleep 0.05; done; echo done'],
    { stdio: [0, out.fd, 2] },
  );
  const state = () =>
    /^State:\s+(\S)/m.exec(readFileSync(`/proc/${probes.pid}/status`, 'utf8'))?.[1];
  const started = performance.now();
  const states: string[] = [];
  let phase: 'run' | 'stopped' | 'continued' = 'run';
  while (!probes.ended) {
    probes.poll(50);
    const ms = performance.now() - started;
    if (phase === 'run' && ms > 150) {
      process.kill(probes.pid, 'SIGSTOP');
      phase = 'stopped';
    } else if (phase === 'stopped' && ms > 700) {
      // Stopped for over half a second: still there, in a stop, not running its loop.
      states.push(state() ?? '?');
      process.kill(probes.pid, 'SIGCONT');
      phase = 'continued';
    }
  }
  assert.deepEqual(states, ['t']);
  assert.equal(out.text(), 'done\n');
  assert.equal(probes.exitCode, 0);
});

test('a signal pending while the tracer runs a system call in the process: no hang, delivered after', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm'] })) return;
  // Not PIE: nm's address is the address in the process.
  const app = compileProgram('fault-target', { flags: ['-O1', '-no-pie'] });
  const where = symbolVaddr(app, 'fault_tock');
  const dist = new URL('../../../dist/', import.meta.url).pathname;
  // The target runs until SIGUSR1, then prints its count and exits. It is held at a hit when
  // SIGUSR1 comes; detach() then unmaps the out-of-line page through a munmap run by that
  // thread, which the signal would stop before its single step (the tracer waited forever).
  const script = `
    import { ProcessProbes } from ${JSON.stringify(`${dist}engines/ptrace/process-probes.js`)};
    import { loadNative } from ${JSON.stringify(`${dist}native/index.js`)};
    const probes = ProcessProbes.spawn([${JSON.stringify(app)}, '0', '2000'], { stdio: [0, 2, 2] });
    probes.register({ id: 'tock', event: 'breakpoint', where: ${where}n });
    let hits = 0;
    while (hits < 3 && probes.poll(5000) !== null) hits++;
    process.kill(probes.pid, 'SIGUSR1');
    probes.detach();
    const status = new Int32Array(1);
    loadNative().waitpid(probes.pid, status, 0);
    console.log(JSON.stringify({ hits, status: status[0] }));
  `;
  const result = runNode(['--input-type=module', '-e', script], { timeoutMs: 30_000 });
  assert.equal(result.status, 0, `the tracer ended (no hang): ${result.stderr}`);
  // Exit status 0 (no SIGTRAP from a step left on, no int3 left): the wait status is 0.
  assert.deepEqual(JSON.parse(result.stdout), { hits: 3, status: 0 });
  // The program saw SIGUSR1 (it only ends its loop on it), and every call ran right.
  const m = /^calls=(\d+) sum=(\d+) tocks=(\d+)$/m.exec(result.stderr);
  assert.ok(m, result.stderr);
  assert.ok(Number(m[3]) >= 3, 'at least the 3 calls traced');
  assert.equal(BigInt(m[2]!), BigInt(m[1]!) ** 2n);
});

test('attached again and again in the middle of forks: each attach returns, no child is left traced', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'ps'] })) return;
  const app = compileProgram('fork-loop');
  const dist = new URL('../../../dist/', import.meta.url).pathname;
  // An attach whose interrupt was answered by a fork event (or a signal) waited for a stop
  // that never came, and the child forked meanwhile stayed traced and stopped (its parent
  // then waited for it forever). Up to 500 attaches (at least 100; a loaded machine stops at
  // 30 s past those), each followed by a detach and a look at the target's children (ps):
  // none in a tracing stop.
  const script = `
    import { spawn, spawnSync } from 'node:child_process';
    import { readFileSync } from 'node:fs';
    import { ProcessProbes } from ${JSON.stringify(`${dist}engines/ptrace/process-probes.js`)};
    const target = spawn(${JSON.stringify(app)}, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    target.stdout.on('data', (d) => { out += d; });
    while (!out.includes('pid=')) await new Promise((r) => setTimeout(r, 10));
    const pid = target.pid;
    let stuck = '';
    let rounds = 0;
    const deadline = performance.now() + 30_000;
    for (; rounds < 500 && stuck === '' && (rounds < 100 || performance.now() < deadline); rounds++) {
      ProcessProbes.attach(pid, { pin: false }).detach();
      const ps = spawnSync('ps', ['-o', 'pid=,stat=', '--ppid', String(pid)], { encoding: 'utf8' });
      if (/ t/.test(ps.stdout)) stuck = ps.stdout.trim();
    }
    const tracer = /^TracerPid:\\s+(\\d+)/m.exec(readFileSync('/proc/' + pid + '/status', 'utf8'))[1];
    // A child left stopped would keep its parent from ever seeing SIGUSR1's end.
    if (stuck !== '') spawnSync('kill', ['-KILL', stuck.split(' ')[0]]);
    target.kill('SIGUSR1');
    const [code] = await new Promise((r) => target.on('close', (...a) => r(a)));
    console.log(JSON.stringify({ rounds, stuck, tracer, code, out: out.split('\\n')[1] }));
  `;
  const result = runNode(['--input-type=module', '-e', script], { timeoutMs: 180_000 });
  assert.equal(result.status, 0, `every attach returned: ${result.stderr}`);
  const report = JSON.parse(result.stdout) as Record<string, unknown>;
  assert.equal(report['stuck'], '', 'no forked child left in a tracing stop');
  assert.ok(Number(report['rounds']) >= 100, `${report['rounds']} attaches`);
  assert.equal(report['tracer'], '0', 'nothing traces the target after the last detach');
  assert.equal(report['code'], 0);
  // Every child the target forked ended as it should (status 7, no SIGTRAP, not stopped).
  assert.match(String(report['out']), /^forks=[1-9]\d* bad=0$/);
});

test('a wait for a stop that cannot come gives up at the next signal, and the process is let go', (t) => {
  if (!requireHost(t, { commands: ['sh', 'sleep'] })) return;
  const dist = new URL('../../../dist/', import.meta.url).pathname;
  // The process is held at its exec, that stop already taken: a blocking wait (as one that
  // lost a stop would) can never end. SIGALRM (as SIGTERM would) interrupts it: it sees every
  // thread in a ptrace-stop, nothing left to report, and throws instead of waiting again.
  const script = `
    import { Tracee } from ${JSON.stringify(`${dist}engines/ptrace/tracee.js`)};
    import { alarmIn, interruptWaitsOn } from ${JSON.stringify(`${dist}engines/ptrace/signals.js`)};
    const tracee = Tracee.spawn(['sleep', '0.2']);
    process.on('SIGALRM', () => {});
    interruptWaitsOn(['SIGALRM']);
    alarmIn(1);
    const started = performance.now();
    let code;
    try {
      tracee.wait(true);
    } catch (err) {
      code = err.code;
    }
    const ms = Math.round(performance.now() - started);
    tracee.cont(tracee.pid);
    let ended;
    for (let report = tracee.wait(true); report !== undefined; report = tracee.wait(true)) {
      if (report.kind === 'exited') ended = report.code;
      else if (report.kind === 'stopped') tracee.cont(report.tid);
      if (tracee.threads.size === 0) break;
    }
    console.log(JSON.stringify({ code, ms, ended }));
  `;
  const result = runNode(['--input-type=module', '-e', script], { timeoutMs: 30_000 });
  assert.equal(result.status, 0, `the wait ended: ${result.stderr}`);
  const report = JSON.parse(result.stdout) as { code: string; ms: number; ended: number };
  assert.equal(report.code, 'ERR_INTERNAL');
  assert.ok(report.ms >= 500 && report.ms < 5000, `gave up at the alarm: ${report.ms} ms`);
  // Still intact: let go, it runs to its end (sleep's exit status 0).
  assert.equal(report.ended, 0);
});

test('a SIGALRM that comes before a wait blocks is followed by the next one, which ends the wait (alarmEvery)', (t) => {
  if (!requireHost(t, { commands: ['sleep'] })) return;
  const dist = new URL('../../../dist/', import.meta.url).pathname;
  // As a loaded machine can: the first alarm comes while this process is busy, not yet in
  // its wait (with a one-shot alarm the wait would then last until the tracee stops again,
  // here never). The wait is interruptible (a tracer's poll()): it returns at the next one.
  const script = `
    import { Tracee } from ${JSON.stringify(`${dist}engines/ptrace/tracee.js`)};
    import { alarmEvery, interruptWaitsOn } from ${JSON.stringify(`${dist}engines/ptrace/signals.js`)};
    const tracee = Tracee.spawn(['sleep', '30']);
    process.on('SIGALRM', () => {});
    interruptWaitsOn(['SIGALRM']);
    alarmEvery(1);
    const busyUntil = performance.now() + 1500;
    while (performance.now() < busyUntil) {}
    const started = performance.now();
    const report = tracee.wait(true, true);
    const ms = Math.round(performance.now() - started);
    alarmEvery(0);
    tracee.kill();
    console.log(JSON.stringify({ report: report === undefined ? 'none' : report.kind, ms }));
  `;
  const result = runNode(['--input-type=module', '-e', script], { timeoutMs: 20_000 });
  assert.equal(result.status, 0, `the wait ended: ${result.stderr}`);
  const report = JSON.parse(result.stdout) as { report: string; ms: number };
  assert.equal(report.report, 'none', 'the wait was ended by the signal, not by a stop');
  assert.ok(report.ms < 1500, `ended at the next alarm: ${report.ms} ms`);
});

test('a signal that stops a thread just before detach() is delivered by the detach, not dropped', (t) => {
  if (!requireHost(t, { commands: ['gcc', 'nm'] })) return;
  const app = compileProgram('fault-target', { flags: ['-O1', '-no-pie'] });
  const out = capture();
  // Runs until SIGUSR1, then prints its count and exits 0.
  const probes = ProcessProbes.spawn([app, '0', '2000'], { stdio: [0, out.fd, 2] });
  const pid = probes.pid;
  probes.register({ id: 'tock', event: 'breakpoint', where: symbolVaddr(app, 'fault_tock') });
  let hits = 0;
  while (hits < 3 && probes.poll(5000) !== null) hits++;
  // The thread runs on (poll() lets it go), stops for SIGUSR1, and nothing collects that stop
  // before detach() does.
  probes.poll(0);
  process.kill(pid, 'SIGUSR1');
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  Atomics.wait(sleeper, 0, 0, 200);
  probes.detach();
  const native = loadNative();
  const status = new Int32Array(1);
  let got = 0;
  for (let i = 0; i < 100 && got === 0; i++) {
    got = native.waitpid(pid, status, WAIT.WNOHANG);
    if (got === 0) Atomics.wait(sleeper, 0, 0, 50);
  }
  if (got === 0) {
    process.kill(pid, 'SIGKILL');
    native.waitpid(pid, status, 0);
  }
  const printed = out.text();
  assert.equal(got, pid, `the program ended by itself on SIGUSR1: ${printed}`);
  assert.equal(status[0], 0, 'exit status 0');
  const m = /^calls=(\d+) sum=(\d+) tocks=(\d+)$/m.exec(printed);
  assert.ok(m, printed);
  assert.equal(BigInt(m[2]!), BigInt(m[1]!) ** 2n);
  assert.equal(hits, 3);
});
