/**
 * `upscope doctor`: what this machine lets upscope do, each item with the command or setting
 * that fixes it when it is missing. Everything is read through a `Host`; the only actions are
 * mounting tracefs (as root, unless asked not to) and creating then closing a BPF map.
 */
import { ProbeError } from '../errors/index.js';
import { describeErrno, errnoNumber } from '../native/index.js';
import { type Host, systemHost } from './host.js';
import { effectiveCapabilities, isRoot, kernelVersion, TRACING_CAPABILITIES } from './identity.js';
import { ensureTracefs, findTracefs, TRACEFS_MOUNT_COMMAND } from './tracefs.js';

export type DoctorStatus = 'ok' | 'warn' | 'fail' | 'info';

export interface DoctorCheck {
  readonly id: string;
  readonly title: string;
  readonly status: DoctorStatus;
  readonly detail: string;
  /** What to do about a warning or failure. */
  readonly fix?: string;
}

export interface DoctorReport {
  readonly checks: readonly DoctorCheck[];
}

export interface DoctorOptions {
  /** Mount tracefs when it is missing and we are root (default true). */
  readonly mount?: boolean;
  /** The machine to examine (default: this one). */
  readonly host?: Host;
  /**
   * Try what the bpf engine uses (a uprobe handler, a ring buffer, a uprobe_multi link): each
   * 0 when it worked, else `-errno`. Given by the API (the engine knows how); without it those
   * checks are left out.
   */
  readonly bpfFeatures?: (() => BpfFeatureResults) | undefined;
}

export interface BpfFeatureResults {
  readonly program: number;
  readonly ringBuffer: number;
  readonly uprobeMulti: number;
  readonly uprobeSession: number;
}

const ROOT_FIX = 'Run upscope as root (sudo)';

function check(
  id: string,
  title: string,
  status: DoctorStatus,
  detail: string,
  fix?: string,
): DoctorCheck {
  return fix === undefined ? { id, title, status, detail } : { id, title, status, detail, fix };
}

function userCheck(host: Host): DoctorCheck {
  const uid = host.uid();
  const euid = host.euid();
  const name = host.userName() ?? 'unknown user';
  return check('user', 'User', 'info', `${name} (uid ${uid}, euid ${euid})`);
}

function capabilitiesCheck(host: Host): DoctorCheck {
  const caps = effectiveCapabilities(host);
  const present = TRACING_CAPABILITIES.filter((cap) => caps.has(cap));
  const missing = TRACING_CAPABILITIES.filter((cap) => !caps.has(cap));
  const parts = [];
  if (present.length > 0) parts.push(present.join(', '));
  if (missing.length > 0) parts.push(`missing ${missing.join(', ')}`);
  const detail = `${parts.join('; ')} (${caps.size} effective capabilities in all)`;
  const enough = caps.has('CAP_SYS_ADMIN') || (caps.has('CAP_BPF') && caps.has('CAP_PERFMON'));
  if (enough) return check('capabilities', 'Capabilities', 'ok', detail);
  return check(
    'capabilities',
    'Capabilities',
    'warn',
    detail,
    `${ROOT_FIX}; kernel probes need CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON. Without them only --engine=ptrace works, on your own processes`,
  );
}

function kernelCheck(host: Host): DoctorCheck {
  const v = kernelVersion(host);
  const version = v.major * 1000 + v.minor;
  const detail = `${v.release} (${v.major}.${v.minor})`;
  if (version >= 5008) return check('kernel', 'Kernel', 'ok', detail);
  const lacking =
    version < 3005
      ? 'uprobes need Linux 3.5'
      : version < 4017
        ? 'the perf uprobe PMU (bpf engine) needs Linux 4.17 and the BPF ring buffer 5.8'
        : 'the BPF ring buffer (bpf engine) needs Linux 5.8';
  return check(
    'kernel',
    'Kernel',
    version < 3005 ? 'fail' : 'warn',
    `${detail}: ${lacking}`,
    'Use a newer kernel, or the engines this one supports',
  );
}

function tracefsCheck(host: Host, mount: boolean): { check: DoctorCheck; path?: string } {
  const found = findTracefs(host);
  if (found !== undefined) {
    return { check: check('tracefs', 'tracefs', 'ok', `mounted at ${found}`), path: found };
  }
  if (!isRoot(host)) {
    return {
      check: check(
        'tracefs',
        'tracefs',
        'fail',
        'not mounted',
        `As root: ${TRACEFS_MOUNT_COMMAND}`,
      ),
    };
  }
  if (!mount) {
    return {
      check: check(
        'tracefs',
        'tracefs',
        'fail',
        'not mounted (not mounting it: asked not to)',
        TRACEFS_MOUNT_COMMAND,
      ),
    };
  }
  try {
    const path = ensureTracefs(host);
    return {
      check: check('tracefs', 'tracefs', 'ok', `was not mounted: mounted it at ${path}`),
      path,
    };
  } catch (err) {
    const detail = err instanceof Error ? err.message : String(err);
    return { check: check('tracefs', 'tracefs', 'fail', detail, TRACEFS_MOUNT_COMMAND) };
  }
}

function uprobeEventsCheck(host: Host, tracefs: string | undefined): DoctorCheck {
  const title = 'uprobe_events';
  if (tracefs === undefined) {
    return check(
      'uprobe-events',
      title,
      'fail',
      'cannot check: tracefs is not mounted',
      `As root: ${TRACEFS_MOUNT_COMMAND}`,
    );
  }
  const path = `${tracefs}/uprobe_events`;
  if (!host.fs.exists(path) && !host.fs.access(tracefs, 'read')) {
    // tracefs is mode 0700 by default: other users cannot even see what is inside.
    return check(
      'uprobe-events',
      title,
      'fail',
      `${tracefs} is not readable by uid ${host.euid()}, so ${path} cannot be used`,
      `${ROOT_FIX}, or remount tracefs with access for this user (mount -o remount,mode=755 ${tracefs}, then give it write access to uprobe_events)`,
    );
  }
  if (!host.fs.exists(path)) {
    return check(
      'uprobe-events',
      title,
      'fail',
      `${path} is missing: the kernel was built without CONFIG_UPROBE_EVENTS`,
      'Use a kernel built with CONFIG_UPROBE_EVENTS=y',
    );
  }
  if (host.fs.access(path, 'write')) {
    return check('uprobe-events', title, 'ok', `${path} is writable`);
  }
  return check(
    'uprobe-events',
    title,
    'fail',
    `${path} is not writable by uid ${host.euid()}`,
    `${ROOT_FIX}, or give this user write access to ${tracefs}`,
  );
}

const UNPRIVILEGED_BPF: Readonly<Record<string, string>> = {
  '0': 'unprivileged users may use BPF',
  '1': 'unprivileged BPF is disabled until reboot',
  '2': 'unprivileged BPF is disabled; root can re-enable it',
};

function bpfCheck(host: Host): DoctorCheck {
  let result: number;
  try {
    result = host.tryBpfMapCreate();
  } catch (err) {
    const detail = err instanceof Error ? err.message : String(err);
    const fix = err instanceof ProbeError ? err.hints[0] : undefined;
    return check('bpf', 'BPF', 'warn', `cannot check: ${detail}`, fix);
  }
  if (result >= 0) return check('bpf', 'BPF', 'ok', 'created and closed a BPF array map');
  const sysctl = host.fs.readFile('/proc/sys/kernel/unprivileged_bpf_disabled')?.trim();
  const setting =
    sysctl === undefined
      ? ''
      : `; kernel.unprivileged_bpf_disabled = ${sysctl} (${UNPRIVILEGED_BPF[sysctl] ?? 'unknown value'})`;
  if (result === -(errnoNumber('EPERM') ?? 1)) {
    const v = kernelVersion(host);
    if (isRoot(host) && v.major * 1000 + v.minor < 5011) {
      return check(
        'bpf',
        'BPF',
        'fail',
        `bpf(BPF_MAP_CREATE) failed with ${describeErrno(result)} as root: before Linux 5.11 BPF maps count against RLIMIT_MEMLOCK${setting}`,
        'Raise the locked-memory limit: ulimit -l unlimited',
      );
    }
    return check(
      'bpf',
      'BPF',
      'fail',
      `bpf(BPF_MAP_CREATE) failed with ${describeErrno(result)}: BPF needs CAP_BPF or root${setting}`,
      `${ROOT_FIX}, or grant CAP_BPF and CAP_PERFMON`,
    );
  }
  if (result === -(errnoNumber('ENOSYS') ?? 38)) {
    return check(
      'bpf',
      'BPF',
      'fail',
      'the bpf() syscall is missing: the kernel was built without CONFIG_BPF_SYSCALL',
      'Use a kernel built with CONFIG_BPF_SYSCALL=y, or another engine',
    );
  }
  return check(
    'bpf',
    'BPF',
    'fail',
    `bpf(BPF_MAP_CREATE) failed with ${describeErrno(result)}${setting}`,
  );
}

function btfCheck(host: Host): DoctorCheck {
  const path = '/sys/kernel/btf/vmlinux';
  if (host.fs.exists(path)) return check('btf', 'BTF', 'ok', `${path} is present`);
  return check(
    'btf',
    'BTF',
    'warn',
    `${path} is missing: BPF programs cannot use the kernel's type information`,
    'Use a kernel built with CONFIG_DEBUG_INFO_BTF=y',
  );
}

function uprobePmuCheck(host: Host): DoctorCheck {
  const path = '/sys/bus/event_source/devices/uprobe/type';
  const type = host.fs.readFile(path)?.trim();
  if (type !== undefined && /^\d+$/.test(type)) {
    return check('uprobe-pmu', 'perf uprobe PMU', 'ok', `perf event type ${type} (${path})`);
  }
  return check(
    'uprobe-pmu',
    'perf uprobe PMU',
    'warn',
    `${path} is missing: perf_event_open cannot create uprobes, so the bpf engine cannot attach`,
    'Use Linux 4.17 or later built with CONFIG_UPROBE_EVENTS=y, or the tracefs engine',
  );
}

const PARANOID: Readonly<Record<string, string>> = {
  '-1': 'no restrictions on perf_event_open',
  '0': 'unprivileged users may not read raw tracepoints',
  '1': 'unprivileged users may not monitor CPUs',
  '2': 'unprivileged users may profile only user space',
};

function paranoidCheck(host: Host): DoctorCheck {
  const path = '/proc/sys/kernel/perf_event_paranoid';
  const value = host.fs.readFile(path)?.trim();
  const title = 'perf_event_paranoid';
  if (value === undefined) {
    return check(
      'perf-event-paranoid',
      title,
      'warn',
      `${path} is missing: the kernel has no perf events`,
      'Use a kernel built with CONFIG_PERF_EVENTS=y',
    );
  }
  const n = Number(value);
  const meaning =
    PARANOID[value] ??
    (n >= 3 ? 'unprivileged users may not use perf_event_open at all' : 'unknown value');
  const privileged =
    effectiveCapabilities(host).has('CAP_PERFMON') ||
    effectiveCapabilities(host).has('CAP_SYS_ADMIN');
  const detail = `${value}: ${meaning}${privileged ? ' (does not apply: CAP_PERFMON)' : ''}; uprobes through perf need CAP_PERFMON whatever the value`;
  if (privileged || n <= 2) return check('perf-event-paranoid', title, 'info', detail);
  return check(
    'perf-event-paranoid',
    title,
    'warn',
    detail,
    'As root: sysctl kernel.perf_event_paranoid=2 (or run upscope as root)',
  );
}

function ptraceCheck(host: Host): DoctorCheck {
  const path = '/proc/sys/kernel/yama/ptrace_scope';
  const value = host.fs.readFile(path)?.trim();
  const capable = effectiveCapabilities(host).has('CAP_SYS_PTRACE');
  const title = 'ptrace';
  const withCap = capable ? '; CAP_SYS_PTRACE allows tracing any process' : '';
  if (value === undefined) {
    return check(
      'ptrace',
      title,
      'ok',
      `no Yama ptrace_scope: processes of the same user may be traced${withCap}`,
    );
  }
  switch (value) {
    case '0':
      return check(
        'ptrace',
        title,
        'ok',
        `ptrace_scope 0: processes of the same user may be traced${withCap}`,
      );
    case '1':
      return capable
        ? check(
            'ptrace',
            title,
            'ok',
            `ptrace_scope 1: only descendants, but CAP_SYS_PTRACE allows any process`,
          )
        : check(
            'ptrace',
            title,
            'warn',
            'ptrace_scope 1: only descendants may be traced (programs upscope starts itself); attaching to a running process (-p) needs CAP_SYS_PTRACE',
            `${ROOT_FIX}, or as root: sysctl kernel.yama.ptrace_scope=0`,
          );
    case '2':
      return capable
        ? check(
            'ptrace',
            title,
            'ok',
            'ptrace_scope 2: only with CAP_SYS_PTRACE, which this process has',
          )
        : check(
            'ptrace',
            title,
            'warn',
            'ptrace_scope 2: only processes with CAP_SYS_PTRACE may trace',
            `${ROOT_FIX}, or as root: sysctl kernel.yama.ptrace_scope=1`,
          );
    case '3':
      return check(
        'ptrace',
        title,
        'fail',
        'ptrace_scope 3: no process may be traced, even by root, until reboot',
        'Reboot without setting kernel.yama.ptrace_scope=3; use the tracefs or bpf engine',
      );
    default:
      return check('ptrace', title, 'info', `ptrace_scope ${value}: unknown value${withCap}`);
  }
}

function lockdownCheck(host: Host): DoctorCheck {
  const path = '/sys/kernel/security/lockdown';
  const text = host.fs.readFile(path);
  const title = 'Kernel lockdown';
  if (text === undefined) {
    const why = host.fs.exists(path) ? `${path} is not readable` : 'no lockdown LSM';
    return check('lockdown', title, 'info', `${why}: not locked down as far as upscope can tell`);
  }
  const mode = /\[(\w+)\]/.exec(text)?.[1] ?? text.trim();
  switch (mode) {
    case 'none':
      return check('lockdown', title, 'ok', 'none');
    case 'integrity':
      return check(
        'lockdown',
        title,
        'info',
        'integrity: debugfs is locked, so tracefs must be used at /sys/kernel/tracing',
      );
    case 'confidentiality':
      return check(
        'lockdown',
        title,
        'fail',
        'confidentiality: tracefs, perf and BPF reads of kernel memory are locked',
        'Boot with lockdown=none (Secure Boot may impose lockdown); only --engine=ptrace works',
      );
    default:
      return check('lockdown', title, 'info', mode);
  }
}

/** The bpf engine's own needs, tried for real once BPF itself works. */
function bpfFeatureChecks(bpf: DoctorCheck, probe: () => BpfFeatureResults): DoctorCheck[] {
  const ids = [
    ['bpf-program', 'BPF uprobe handler'],
    ['bpf-ring-buffer', 'BPF ring buffer'],
    ['uprobe-multi', 'uprobe_multi links'],
    ['uprobe-session', 'uprobe session links'],
  ] as const;
  if (bpf.status !== 'ok') {
    return ids.map(([id, title]) => check(id, title, 'info', 'not checked: BPF is not usable'));
  }
  const found = probe();
  const failed = (errno: number) => `failed with ${describeErrno(errno)}`;
  return [
    found.program === 0
      ? check('bpf-program', ids[0][1], 'ok', 'loaded and closed a uprobe handler')
      : check(
          'bpf-program',
          ids[0][1],
          'fail',
          `loading a uprobe handler ${failed(found.program)}: the bpf engine (count, hist, latency, trace --engine bpf) cannot run`,
          `${ROOT_FIX}, or grant CAP_BPF and CAP_PERFMON; otherwise use --engine tracefs or ptrace`,
        ),
    found.ringBuffer === 0
      ? check('bpf-ring-buffer', ids[1][1], 'ok', 'created and closed a ring buffer map')
      : check(
          'bpf-ring-buffer',
          ids[1][1],
          'warn',
          `creating a ring buffer map ${failed(found.ringBuffer)} (Linux 5.8 has them): trace --engine bpf cannot stream`,
          'Use trace --engine tracefs',
        ),
    found.uprobeMulti === 0
      ? check(
          'uprobe-multi',
          ids[2][1],
          'ok',
          'the kernel takes many probes of a file in one link (fast attach and detach)',
        )
      : check(
          'uprobe-multi',
          ids[2][1],
          'warn',
          `a uprobe_multi link ${failed(found.uprobeMulti)} (Linux 6.6 has them): the bpf engine attaches one perf event per probe, slowly for thousands`,
          'Use Linux 6.6 or newer to attach many probes at once',
        ),
    found.uprobeSession === 0
      ? check(
          'uprobe-session',
          ids[3][1],
          'ok',
          "one uprobe serves a call's entry and its return (record and trace pair them: one link, not two)",
        )
      : check(
          'uprobe-session',
          ids[3][1],
          'info',
          `a uprobe session link ${failed(found.uprobeSession)} (Linux 6.13 has them): an entry and its return through the trampoline take a link each`,
        ),
  ];
}

/** Guard one check: an unexpected error becomes a failed check, never a crash. */
function guarded(id: string, title: string, run: () => DoctorCheck): DoctorCheck {
  try {
    return run();
  } catch (err) {
    return check(
      id,
      title,
      'fail',
      `cannot check: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

/**
 * Examine the machine: user and capabilities, kernel version, tracefs (mounted at
 * /sys/kernel/tracing when it is missing and we are root, unless `options.mount` is false),
 * uprobe_events (writable; never written), BPF (a map is really created and closed), BTF,
 * the perf uprobe PMU, perf_event_paranoid, ptrace permission and kernel lockdown.
 */
export async function runDoctor(options: DoctorOptions = {}): Promise<DoctorReport> {
  const host = options.host ?? systemHost();
  const checks: DoctorCheck[] = [];
  checks.push(guarded('user', 'User', () => userCheck(host)));
  checks.push(guarded('capabilities', 'Capabilities', () => capabilitiesCheck(host)));
  checks.push(guarded('kernel', 'Kernel', () => kernelCheck(host)));
  let tracefs: string | undefined;
  checks.push(
    guarded('tracefs', 'tracefs', () => {
      const result = tracefsCheck(host, options.mount !== false);
      tracefs = result.path;
      return result.check;
    }),
  );
  checks.push(guarded('uprobe-events', 'uprobe_events', () => uprobeEventsCheck(host, tracefs)));
  const bpf = guarded('bpf', 'BPF', () => bpfCheck(host));
  checks.push(bpf);
  checks.push(guarded('btf', 'BTF', () => btfCheck(host)));
  checks.push(guarded('uprobe-pmu', 'perf uprobe PMU', () => uprobePmuCheck(host)));
  const features = options.bpfFeatures;
  if (features !== undefined) {
    try {
      checks.push(...bpfFeatureChecks(bpf, features));
    } catch (err) {
      const detail = `cannot check: ${err instanceof Error ? err.message : String(err)}`;
      checks.push(check('bpf-program', 'BPF uprobe handler', 'fail', detail));
    }
  }
  checks.push(guarded('perf-event-paranoid', 'perf_event_paranoid', () => paranoidCheck(host)));
  checks.push(guarded('ptrace', 'ptrace', () => ptraceCheck(host)));
  checks.push(guarded('lockdown', 'Kernel lockdown', () => lockdownCheck(host)));
  return { checks };
}
