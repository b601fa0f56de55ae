import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProbeError } from '../errors/index.js';
import { type DoctorCheck, runDoctor } from './doctor.js';
import {
  type FakeMachine,
  fakeHost,
  mountinfoLine,
  ROOT_STATUS,
  USER_STATUS,
} from './fake-host.test.js';

const EPERM = -1;

/** A well set up machine, as seen by root. */
function rootMachine(extra: Partial<FakeMachine> = {}): FakeMachine {
  return {
    uid: 0,
    files: {
      '/proc/self/status': ROOT_STATUS,
      '/proc/self/mountinfo': `${mountinfoLine('/sys/kernel/tracing', 'tracefs')}\n`,
      '/sys/kernel/tracing/uprobe_events': '',
      '/sys/kernel/btf/vmlinux': '',
      '/sys/bus/event_source/devices/uprobe/type': '8\n',
      '/proc/sys/kernel/perf_event_paranoid': '2\n',
      '/proc/sys/kernel/unprivileged_bpf_disabled': '2\n',
      '/sys/kernel/security/lockdown': '[none] integrity confidentiality\n',
      ...extra.files,
    },
    writable: ['/sys/kernel/tracing/uprobe_events'],
    ...Object.fromEntries(Object.entries(extra).filter(([key]) => key !== 'files')),
  };
}

async function checks(machine: FakeMachine, mount?: boolean): Promise<Map<string, DoctorCheck>> {
  const report = await runDoctor({ host: fakeHost(machine), mount });
  return new Map(report.checks.map((c) => [c.id, c]));
}

test('runDoctor() reports every check in order, all ok on a well set up machine as root', async () => {
  const report = await runDoctor({ host: fakeHost(rootMachine()) });
  assert.deepEqual(
    report.checks.map((c) => c.id),
    [
      'user',
      'capabilities',
      'kernel',
      'tracefs',
      'uprobe-events',
      'bpf',
      'btf',
      'uprobe-pmu',
      'perf-event-paranoid',
      'ptrace',
      'lockdown',
    ],
  );
  for (const c of report.checks) assert.notEqual(c.status, 'fail', `${c.id}: ${c.detail}`);
  const byId = new Map(report.checks.map((c) => [c.id, c]));
  assert.equal(byId.get('user')!.detail, 'root (uid 0, euid 0)');
  assert.equal(byId.get('kernel')!.detail, '6.18.44-fc-v669 (6.18)');
  assert.equal(byId.get('tracefs')!.detail, 'mounted at /sys/kernel/tracing');
  assert.equal(byId.get('bpf')!.status, 'ok');
  assert.equal(byId.get('lockdown')!.detail, 'none');
});

test('runDoctor() tells a user without privileges what to run as root', async () => {
  const host = fakeHost({
    uid: 1000,
    files: {
      '/proc/self/status': USER_STATUS,
      '/proc/self/mountinfo': '',
      '/proc/sys/kernel/unprivileged_bpf_disabled': '2\n',
    },
    bpf: EPERM,
  });
  const byId = new Map((await runDoctor({ host })).checks.map((c) => [c.id, c]));
  assert.deepEqual(host.mounts, [], 'never mounts as a user');
  const tracefs = byId.get('tracefs')!;
  assert.equal(tracefs.status, 'fail');
  assert.equal(tracefs.fix, 'As root: mount -t tracefs nodev /sys/kernel/tracing');
  assert.equal(byId.get('uprobe-events')!.status, 'fail');
  const bpf = byId.get('bpf')!;
  assert.equal(bpf.status, 'fail');
  assert.match(bpf.detail, /EPERM/);
  assert.match(bpf.detail, /CAP_BPF or root/);
  assert.match(
    bpf.detail,
    /unprivileged_bpf_disabled = 2 \(unprivileged BPF is disabled; root can re-enable it\)/,
  );
  assert.ok(bpf.fix !== undefined);
  const caps = byId.get('capabilities')!;
  assert.equal(caps.status, 'warn');
  assert.match(caps.detail, /missing CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE/);
  assert.ok(caps.fix !== undefined);
  assert.equal(byId.get('user')!.detail, 'alice (uid 1000, euid 1000)');
});

test('runDoctor() mounts a missing tracefs as root and says so', async () => {
  const machine = rootMachine({ files: { '/proc/self/mountinfo': '' } });
  delete machine.files!['/sys/kernel/tracing/uprobe_events'];
  machine.files!['/sys/kernel/tracing/README'] = ''; // tracefs itself is there
  const host = fakeHost(machine);
  const byId = new Map((await runDoctor({ host })).checks.map((c) => [c.id, c]));
  assert.deepEqual(host.mounts, ['/sys/kernel/tracing']);
  assert.equal(byId.get('tracefs')!.status, 'ok');
  assert.equal(byId.get('tracefs')!.detail, 'was not mounted: mounted it at /sys/kernel/tracing');
  assert.equal(byId.get('uprobe-events')!.status, 'ok');
});

test('runDoctor({ mount: false }) leaves a missing tracefs alone, even as root', async () => {
  const host = fakeHost(rootMachine({ files: { '/proc/self/mountinfo': '' } }));
  const byId = new Map((await runDoctor({ host, mount: false })).checks.map((c) => [c.id, c]));
  assert.deepEqual(host.mounts, []);
  assert.equal(byId.get('tracefs')!.status, 'fail');
  assert.equal(byId.get('tracefs')!.fix, 'mount -t tracefs nodev /sys/kernel/tracing');
});

test('runDoctor() reports a failed mount instead of throwing', async () => {
  const machine = rootMachine({ files: { '/proc/self/mountinfo': '' } });
  machine.mount = () => {
    throw new ProbeError(
      'ERR_TRACEFS_NOT_MOUNTED',
      'Cannot mount tracefs at "/sys/kernel/tracing": permission denied',
    );
  };
  const byId = await checks(machine);
  assert.equal(byId.get('tracefs')!.status, 'fail');
  assert.match(byId.get('tracefs')!.detail, /permission denied/);
});

test('runDoctor() checks that uprobe_events exists and is writable, without writing it', async () => {
  const notWritable = await checks({ ...rootMachine(), writable: [] });
  assert.equal(notWritable.get('uprobe-events')!.status, 'fail');
  assert.match(notWritable.get('uprobe-events')!.detail, /not writable by uid 0/);
  const machine = rootMachine();
  delete machine.files!['/sys/kernel/tracing/uprobe_events'];
  machine.files!['/sys/kernel/tracing/README'] = ''; // tracefs itself is there
  const missing = await checks(machine);
  assert.match(missing.get('uprobe-events')!.detail, /CONFIG_UPROBE_EVENTS/);
});

test('runDoctor() tells an unreadable tracefs (mode 0700, another user) from a missing file', async () => {
  const hidden = await checks({
    ...rootMachine(),
    uid: 1000,
    unreadable: ['/sys/kernel/tracing'],
  });
  const check = hidden.get('uprobe-events')!;
  assert.equal(check.status, 'fail');
  assert.match(check.detail, /\/sys\/kernel\/tracing is not readable by uid 1000/);
  assert.doesNotMatch(check.detail, /CONFIG_UPROBE_EVENTS/);
  assert.match(check.fix!, /mode=755/);
});

test('runDoctor() explains BPF failures by errno', async () => {
  const oldKernel = await checks(rootMachine({ release: '5.10.0-28-amd64', bpf: EPERM }));
  assert.match(oldKernel.get('bpf')!.detail, /RLIMIT_MEMLOCK/);
  assert.equal(oldKernel.get('bpf')!.fix, 'Raise the locked-memory limit: ulimit -l unlimited');
  const noSyscall = await checks(rootMachine({ bpf: -38 }));
  assert.match(noSyscall.get('bpf')!.detail, /CONFIG_BPF_SYSCALL/);
  const native = await checks(
    rootMachine({
      bpf: new ProbeError(
        'ERR_NATIVE_UNAVAILABLE',
        'Cannot load the native syscall layer: koffi: missing',
        { hints: ['reinstall'] },
      ),
    }),
  );
  assert.equal(native.get('bpf')!.status, 'warn');
  assert.match(native.get('bpf')!.detail, /^cannot check: Cannot load the native syscall layer/);
  assert.equal(native.get('bpf')!.fix, 'reinstall');
});

test('runDoctor() reports BTF and the perf uprobe PMU when missing', async () => {
  const machine = rootMachine();
  delete machine.files!['/sys/kernel/btf/vmlinux'];
  delete machine.files!['/sys/bus/event_source/devices/uprobe/type'];
  const byId = await checks(machine);
  assert.equal(byId.get('btf')!.status, 'warn');
  assert.match(byId.get('btf')!.fix!, /CONFIG_DEBUG_INFO_BTF/);
  assert.equal(byId.get('uprobe-pmu')!.status, 'warn');
  assert.match(byId.get('uprobe-pmu')!.detail, /perf_event_open cannot create uprobes/);
});

test('runDoctor() explains perf_event_paranoid values', async () => {
  const user = { uid: 1000, files: { '/proc/self/status': USER_STATUS } };
  for (const [value, status, meaning] of [
    ['-1', 'info', /no restrictions/],
    ['2', 'info', /only user space/],
    ['3', 'warn', /may not use perf_event_open at all/],
    ['4', 'warn', /may not use perf_event_open at all/],
  ] as const) {
    const machine = {
      ...user,
      files: { ...user.files, '/proc/sys/kernel/perf_event_paranoid': `${value}\n` },
    };
    const c = (await checks(machine)).get('perf-event-paranoid')!;
    assert.equal(c.status, status, value);
    assert.match(c.detail, meaning);
  }
});

test('runDoctor() explains the Yama ptrace scope', async () => {
  const user = { uid: 1000, files: { '/proc/self/status': USER_STATUS } };
  const scope = async (value: string | undefined, status = USER_STATUS) => {
    const files: Record<string, string> = { '/proc/self/status': status };
    if (value !== undefined) files['/proc/sys/kernel/yama/ptrace_scope'] = `${value}\n`;
    return (await checks({ ...user, files })).get('ptrace')!;
  };
  assert.equal((await scope(undefined)).status, 'ok');
  assert.equal((await scope('0')).status, 'ok');
  const one = await scope('1');
  assert.equal(one.status, 'warn');
  assert.match(one.detail, /only descendants/);
  assert.match(one.fix!, /ptrace_scope=0/);
  assert.equal((await scope('1', 'CapEff:\t0000000000080000\n')).status, 'ok', 'CAP_SYS_PTRACE');
  assert.equal((await scope('2')).status, 'warn');
  assert.equal((await scope('3')).status, 'fail');
});

test('runDoctor() reads the lockdown mode', async () => {
  const mode = async (text: string | undefined) => {
    const machine = rootMachine();
    if (text === undefined) delete machine.files!['/sys/kernel/security/lockdown'];
    else machine.files!['/sys/kernel/security/lockdown'] = text;
    return (await checks(machine)).get('lockdown')!;
  };
  assert.equal((await mode('[none] integrity confidentiality\n')).status, 'ok');
  assert.match((await mode('none [integrity] confidentiality\n')).detail, /^integrity/);
  const locked = await mode('none integrity [confidentiality]\n');
  assert.equal(locked.status, 'fail');
  assert.ok(locked.fix !== undefined);
  assert.match((await mode(undefined)).detail, /no lockdown LSM/);
});

test('runDoctor() turns an unexpected error in one check into a failed check', async () => {
  const byId = await checks(rootMachine({ release: 'weird' }));
  assert.equal(byId.get('kernel')!.status, 'fail');
  assert.match(byId.get('kernel')!.detail, /^cannot check: /);
  assert.equal(byId.get('tracefs')!.status, 'ok', 'the other checks still run');
});

test('runDoctor() warns about kernels too old for some engines', async () => {
  const byId = await checks(rootMachine({ release: '4.19.0-27-amd64' }));
  assert.equal(byId.get('kernel')!.status, 'warn');
  assert.match(byId.get('kernel')!.detail, /ring buffer/);
});

test("runDoctor() with the bpf engine's feature checks: each tried only when BPF works, each missing one explained", async () => {
  const tried: string[] = [];
  const features =
    (program: number, ringBuffer: number, uprobeMulti: number, uprobeSession = uprobeMulti) =>
    () => {
      tried.push('tried');
      return { program, ringBuffer, uprobeMulti, uprobeSession };
    };
  const run = async (machine: FakeMachine, probe: ReturnType<typeof features>) =>
    new Map(
      (await runDoctor({ host: fakeHost(machine), bpfFeatures: probe })).checks.map((c) => [
        c.id,
        c,
      ]),
    );
  const all = await run(rootMachine(), features(0, 0, 0));
  assert.deepEqual(
    ['bpf-program', 'bpf-ring-buffer', 'uprobe-multi', 'uprobe-session'].map(
      (id) => all.get(id)!.status,
    ),
    ['ok', 'ok', 'ok', 'ok'],
  );
  const old = await run(rootMachine(), features(0, -22, -22));
  assert.equal(old.get('bpf-ring-buffer')!.status, 'warn');
  assert.match(old.get('bpf-ring-buffer')!.detail, /EINVAL.*5\.8.*cannot stream/);
  assert.equal(old.get('uprobe-multi')!.status, 'warn');
  assert.match(old.get('uprobe-multi')!.detail, /6\.6.*one perf event per probe/);
  assert.equal(old.get('uprobe-session')!.status, 'info');
  assert.match(old.get('uprobe-session')!.detail, /EINVAL.*6\.13.*a link each/);
  const refused = await run(rootMachine(), features(EPERM, EPERM, EPERM));
  assert.equal(refused.get('bpf-program')!.status, 'fail');
  assert.match(refused.get('bpf-program')!.fix!, /CAP_BPF.*--engine tracefs or ptrace/);
  tried.length = 0;
  const user = await run(
    {
      uid: 1000,
      files: { '/proc/self/status': USER_STATUS, '/proc/self/mountinfo': '' },
      bpf: EPERM,
    },
    features(0, 0, 0),
  );
  assert.deepEqual(tried, [], 'nothing more is tried when BPF itself is refused');
  assert.equal(user.get('uprobe-multi')!.status, 'info');
  assert.match(user.get('uprobe-multi')!.detail, /not checked: BPF is not usable/);
});
