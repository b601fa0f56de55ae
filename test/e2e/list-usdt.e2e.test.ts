// `upscope list --usdt`: the probes of a file as `readelf -n` shows them, and with -p where
// they are in the process (as /proc/PID/maps places the file).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { runCli } from '../helpers/run-cli.js';
import { compileUsdtTarget, requireSdt } from '../helpers/usdt.js';

interface ReadelfProbe {
  provider: string;
  name: string;
  location: bigint;
  semaphore: bigint;
  args: string;
}

function readelfProbes(path: string): ReadelfProbe[] {
  const text = execFileSync('readelf', ['-n', path], { encoding: 'utf8' });
  const probes: ReadelfProbe[] = [];
  const re =
    /Provider: (\S+)\n\s+Name: (\S+)\n\s+Location: (0x[0-9a-f]+), Base: 0x[0-9a-f]+, Semaphore: (0x[0-9a-f]+)\n\s+Arguments: ?(.*)/g;
  for (const m of text.matchAll(re)) {
    probes.push({
      provider: m[1]!,
      name: m[2]!,
      location: BigInt(m[3]!),
      semaphore: BigInt(m[4]!),
      args: m[5]!,
    });
  }
  return probes;
}

interface JsonProbe {
  provider: string;
  name: string;
  vaddr: string;
  semaphore?: string;
  args: string;
  runtimeAddress?: string;
}

function listed(stdout: string): { displayPath: string; probes: JsonProbe[] }[] {
  return JSON.parse(stdout).objects;
}

function sameAsReadelf(probes: JsonProbe[], truth: ReadelfProbe[]): void {
  const key = (p: { provider: string; name: string }) => `${p.provider}:${p.name}`;
  const ours = probes.map((p) => ({
    probe: key(p),
    vaddr: BigInt(p.vaddr),
    semaphore: p.semaphore === undefined ? 0n : BigInt(p.semaphore),
    args: p.args,
  }));
  const theirs = truth.map((p) => ({
    probe: key(p),
    vaddr: p.location,
    semaphore: p.semaphore,
    args: p.args,
  }));
  const order = (a: { probe: string; vaddr: bigint }, b: { probe: string; vaddr: bigint }) =>
    a.probe.localeCompare(b.probe) || Number(a.vaddr - b.vaddr);
  assert.deepEqual(ours.sort(order), theirs.sort(order));
}

test('list --usdt shows each probe as readelf -n does', (t) => {
  if (!requireSdt(t)) return;
  for (const opt of ['-O0', '-O2'] as const) {
    const app = compileUsdtTarget(opt);
    const result = runCli(['list', '--usdt', '--json', app]);
    assert.equal(result.status, 0, result.stderr);
    const [object, ...others] = listed(result.stdout);
    assert.equal(others.length, 0);
    sameAsReadelf(object!.probes, readelfProbes(app));
    const text = runCli(['list', '--usdt', app, 'usdt:g*']);
    assert.equal(text.status, 0, text.stderr);
    const gated = readelfProbes(app).find((p) => p.name === 'gated')!;
    assert.equal(
      text.stdout,
      [
        'PROVIDER  NAME   VADDR   SEMAPHORE  ARGUMENTS',
        `usdt      gated  0x${gated.location.toString(16).padEnd(6)}0x${gated.semaphore.toString(16).padEnd(9)}${gated.args}`,
        `1 USDT probe in ${app}`,
        '',
      ].join('\n'),
    );
  }
});

test('list --usdt -p: the probes of every mapped object, at their runtime addresses', async (t) => {
  if (!requireSdt(t)) return;
  const app = compileUsdtTarget('-O2');
  // Long enough to outlive a loaded machine's start of upscope (killed at the end).
  const child = spawn(app, ['100000', '50'], { stdio: 'ignore' });
  try {
    // Until the program runs with its libraries mapped (a loaded machine may take a while).
    const mapped = () => {
      try {
        const maps = readFileSync(`/proc/${child.pid}/maps`, 'utf8');
        return maps.includes(app) && /libc\.so/.test(maps);
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 200 && !mapped(); i++) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 100));
    const result = runCli(['list', '--usdt', '--json', '-p', String(child.pid)]);
    assert.equal(result.status, 0, result.stderr);
    const objects = listed(result.stdout);
    const ours = objects.find((o) => o.displayPath === app);
    assert.ok(ours, `${app} in ${objects.map((o) => o.displayPath)}`);
    sameAsReadelf(ours.probes, readelfProbes(app));
    // Every other object listed is one the process maps, with the probes readelf shows.
    const maps = readFileSync(`/proc/${child.pid}/maps`, 'utf8');
    for (const other of objects) {
      assert.ok(maps.includes(other.displayPath), other.displayPath);
      if (other !== ours) sameAsReadelf(other.probes, readelfProbes(other.displayPath));
    }
    // A PIE: loaded at the start of its mapping of file offset 0.
    const first = maps
      .split('\n')
      .find((l) => l.endsWith(app) && / 00000000 /.test(l))!
      .split('-')[0]!;
    const bias = BigInt(`0x${first}`);
    for (const probe of ours.probes) {
      assert.equal(BigInt(probe.runtimeAddress!), BigInt(probe.vaddr) + bias);
    }
  } finally {
    child.kill('SIGKILL');
    await once(child, 'exit');
  }
});

test('list --usdt: no probes is status 1, no target and no pid a usage error', (t) => {
  if (!requireSdt(t)) return;
  const none = runCli(['list', '--usdt', '/bin/true']);
  assert.equal(none.status, 1);
  assert.equal(none.stdout, 'No USDT probes\n');
  const usage = runCli(['list', '--usdt']);
  assert.equal(usage.status, 2);
  assert.match(
    usage.stderr,
    /^error\[ERR_USAGE\]: Cannot list USDT probes: name a TARGET, or give -p PID\n/,
  );
});
