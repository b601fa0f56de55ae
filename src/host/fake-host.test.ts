// Not a test: the fake Host for host/ unit tests (named .test.ts to stay out of dist/).
// A machine described by a few files, for host/ unit tests (the Host boundary is the only
// thing faked; the code under test is real).
import { ProbeError } from '../errors/index.js';
import type { Host } from './host.js';

export interface FakeMachine {
  files?: Record<string, string>;
  writable?: string[];
  uid?: number;
  euid?: number;
  userName?: string;
  release?: string;
  /** tryBpfMapCreate result (0 or -errno), or an error to throw. */
  bpf?: number | ProbeError;
  /** Directories this user cannot look into (mode 0700 of another user): their files seem absent. */
  unreadable?: string[];
  /** What mounting does: by default, add a tracefs line to mountinfo. */
  mount?: (target: string, machine: FakeHost) => void;
}

export interface FakeHost extends Host {
  readonly files: Record<string, string>;
  readonly mounts: string[];
  bpfCalls: number;
}

export const ROOT_STATUS = 'Name:\tnode\nCapEff:\t000001ffffffffff\n';
export const USER_STATUS = 'Name:\tnode\nCapEff:\t0000000000000000\n';

export function mountinfoLine(mountPoint: string, fsType: string, source = 'nodev'): string {
  return `36 25 0:12 / ${mountPoint} rw,nosuid,nodev,noexec,relatime shared:9 - ${fsType} ${source} rw`;
}

export function fakeHost(machine: FakeMachine = {}): FakeHost {
  const files: Record<string, string> = { ...machine.files };
  const writable = new Set(machine.writable ?? []);
  const host: FakeHost = {
    files,
    mounts: [],
    bpfCalls: 0,
    fs: {
      readFile: (path) => files[path],
      exists: (path) =>
        !(machine.unreadable ?? []).some((dir) => path.startsWith(`${dir}/`)) &&
        (path in files || Object.keys(files).some((f) => f.startsWith(`${path}/`))),
      access: (path, mode) =>
        !(machine.unreadable ?? []).some((dir) => path === dir || path.startsWith(`${dir}/`)) &&
        (path in files || Object.keys(files).some((f) => f.startsWith(`${path}/`))) &&
        (mode === 'read' || writable.has(path)),
    },
    uid: () => machine.uid ?? 0,
    euid: () => machine.euid ?? machine.uid ?? 0,
    userName: () =>
      machine.userName ?? ((machine.euid ?? machine.uid ?? 0) === 0 ? 'root' : 'alice'),
    kernelRelease: () => machine.release ?? '6.18.44-fc-v669',
    mountTracefs(target) {
      host.mounts.push(target);
      if (machine.mount !== undefined) {
        machine.mount(target, host);
        return;
      }
      files['/proc/self/mountinfo'] =
        `${files['/proc/self/mountinfo'] ?? ''}${mountinfoLine(target, 'tracefs')}\n`;
      files[`${target}/uprobe_events`] = '';
      writable.add(`${target}/uprobe_events`);
    },
    tryBpfMapCreate() {
      host.bpfCalls++;
      if (machine.bpf instanceof ProbeError) throw machine.bpf;
      return machine.bpf ?? 0;
    },
  };
  return host;
}
