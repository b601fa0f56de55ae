/**
 * The only loader of native code. koffi (an FFI whose prebuilt binary ships inside its npm
 * package) is loaded lazily, through `createRequire`, on the first call to `loadNative()`:
 * about 8 ms here, paid only by commands that make syscalls Node lacks.
 */
import { createRequire } from 'node:module';
import type * as KoffiModule from 'koffi';
import { ProbeError } from '../errors/index.js';
import type { NativeBinding, NativeMemory } from './binding.js';
import { SYSCALL } from './constants.js';

type Koffi = typeof KoffiModule;

/** What loading depends on; tests pass their own. */
export interface NativeEnvironment {
  readonly platform: string;
  readonly arch: string;
  /** Loads a package by name (koffi). */
  readonly require: (id: string) => unknown;
  /** C libraries to try, in order (glibc, then musl). */
  readonly libraries: readonly string[];
}

const LIBRARIES = ['libc.so.6', 'libc.musl-x86_64.so.1'];

let binding: NativeBinding | undefined;
let failure: ProbeError | undefined;

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function bind(koffi: Koffi, library: string): NativeBinding {
  const lib = koffi.load(library);
  // glibc's and musl's syscall() are variadic, but both move their arguments straight into
  // registers without va_arg, so a fixed prototype (no per-call type parsing) is safe.
  const syscall3 = lib.func('long syscall(long number, long a1, void *a2, unsigned long a3)');
  const close = lib.func('int close(int fd)');
  const mount = lib.func(
    'int mount(const char *source, const char *target, const char *fstype, unsigned long flags, const char *data)',
  );
  const syscall4 = lib.func(
    'long syscall(long number, long a1, long a2, uintptr_t a3, uintptr_t a4)',
  );
  const syscall4Buffer = lib.func(
    'long syscall(long number, long a1, long a2, uintptr_t a3, void *a4)',
  );
  const waitpid = lib.func('int waitpid(int pid, void *status, int options)');
  const spawnp = lib.func(
    'int posix_spawnp(_Out_ int *pid, const char *file, void *actions, void *attr, const char **argv, const char **envp)',
  );
  const actionsInit = lib.func('int posix_spawn_file_actions_init(void *actions)');
  const actionsDup2 = lib.func(
    'int posix_spawn_file_actions_adddup2(void *actions, int fd, int to)',
  );
  const actionsDestroy = lib.func('int posix_spawn_file_actions_destroy(void *actions)');
  const attrInit = lib.func('int posix_spawnattr_init(void *attr)');
  const attrSetFlags = lib.func('int posix_spawnattr_setflags(void *attr, short flags)');
  const attrDestroy = lib.func('int posix_spawnattr_destroy(void *attr)');
  const getAffinity = lib.func('int sched_getaffinity(int pid, size_t size, void *mask)');
  const setAffinity = lib.func('int sched_setaffinity(int pid, size_t size, void *mask)');
  const getCpu = lib.func('int sched_getcpu(void)');
  const sigaction = lib.func('int sigaction(int signum, void *act, void *oldact)');
  const alarm = lib.func('unsigned int alarm(unsigned int seconds)');
  const setitimer = lib.func('int setitimer(int which, void *value, void *old)');
  const prctl = lib.func(
    'int prctl(int option, unsigned long a2, unsigned long a3, unsigned long a4, unsigned long a5)',
  );
  const dlsym = lib.func('void *dlsym(void *handle, const char *name)');
  const sigmask = lib.func('int pthread_sigmask(int how, void *set, void *oldset)');
  const syscall6 = lib.func(
    'long syscall(long number, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t a4, uintptr_t a5)',
  );
  const mmap = lib.func(
    'void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset)',
  );
  const munmap = lib.func('int munmap(void *addr, size_t length)');
  const MAP_SHARED = 0x01;
  // rdtsc; shl rdx,32; or rax,rdx; ret: run from a page of this process made for it.
  const TSC_CODE = [0x0f, 0x31, 0x48, 0xc1, 0xe2, 0x20, 0x48, 0x09, 0xd0, 0xc3];
  let tscCall: (() => bigint) | undefined;
  const tsc = (): bigint => {
    if (tscCall === undefined) {
      const PROT_RWX = 7;
      const MAP_PRIVATE_ANONYMOUS = 0x22;
      const page = mmap(null, 4096, PROT_RWX, MAP_PRIVATE_ANONYMOUS, -1, 0);
      if (koffi.address(page) === MAP_FAILED) {
        throw new ProbeError(
          'ERR_NATIVE_UNAVAILABLE',
          `Cannot read the time-stamp counter: mmap of an executable page failed (errno ${koffi.errno()})`,
        );
      }
      new Uint8Array(koffi.view(page, TSC_CODE.length)).set(TSC_CODE);
      const proto = koffi.proto('uint64_t upscope_rdtsc(void)');
      tscCall = () => BigInt(koffi.call(page, proto) as number | bigint);
    }
    return tscCall();
  };
  const MAP_FAILED = (1n << 64n) - 1n;
  const memory = (pointer: unknown, length: number, release: () => void): NativeMemory => {
    let freed = false;
    return {
      address: koffi.address(pointer),
      bytes: new Uint8Array(koffi.view(pointer, length)),
      free: () => {
        if (freed) return;
        freed = true;
        release();
      },
    };
  };
  const result = (value: unknown): number => {
    const n = Number(value);
    return n < 0 ? -koffi.errno() : n;
  };
  const SIGACTION_BYTES = 152;
  const SIGACTION_FLAGS = 136;
  const SA_RESTART = 0x10000000;
  // posix_spawn_file_actions_t is 80 bytes in glibc and smaller in musl; posix_spawnattr_t
  // 336 in glibc.
  const ACTIONS_BYTES = 256;
  const ATTR_BYTES = 512;
  // POSIX_SPAWN_SETSID (glibc 2.26+ and musl 1.1.24+ agree on the value).
  const POSIX_SPAWN_SETSID = 0x80;
  return {
    bpf: (cmd, attr) => result(syscall3(SYSCALL.bpf, cmd, attr, attr.length)),
    close: (fd) => result(close(fd)),
    mount: (source, target, fstype, flags, data) =>
      result(mount(source, target, fstype, flags, data)),
    ptrace: (request, pid, addr, data) =>
      result(syscall4(SYSCALL.ptrace, request, pid, addr, data)),
    ptraceBuffer: (request, pid, addr, data) =>
      result(syscall4Buffer(SYSCALL.ptrace, request, pid, addr, data)),
    waitpid: (pid, status, options) => result(waitpid(pid, status, options)),
    spawn: (argv, env, stdio = [0, 1, 2], newSession = false) => {
      const actions = new Uint8Array(ACTIONS_BYTES);
      const attr = new Uint8Array(ATTR_BYTES);
      let status = actionsInit(actions) as number;
      if (status !== 0) return -status;
      status = attrInit(attr) as number;
      if (status !== 0) {
        actionsDestroy(actions);
        return -status;
      }
      try {
        for (const [to, fd] of stdio.entries()) {
          status = actionsDup2(actions, fd, to) as number;
          if (status !== 0) return -status;
        }
        if (newSession) {
          status = attrSetFlags(attr, POSIX_SPAWN_SETSID) as number;
          if (status !== 0) return -status;
        }
        const pid = [0];
        // posix_spawn returns the error number itself rather than setting errno.
        status = spawnp(pid, argv[0], actions, attr, [...argv, null], [...env, null]) as number;
        return status === 0 ? pid[0]! : -status;
      } finally {
        actionsDestroy(actions);
        attrDestroy(attr);
      }
    },
    getAffinity: (tid) => {
      // 1024 CPUs, as glibc's cpu_set_t.
      const mask = new Uint8Array(128);
      const status = result(getAffinity(tid, mask.length, mask));
      return status < 0 ? status : mask;
    },
    setAffinity: (tid, mask) => result(setAffinity(tid, mask.length, mask)),
    currentCpu: () => result(getCpu()),
    interruptOnSignal: (signal) => {
      // glibc's struct sigaction on x86-64: handler (8), mask (128), flags (int) at 136, ...
      const action = new Uint8Array(SIGACTION_BYTES);
      let status = result(sigaction(signal, null, action));
      if (status < 0) return status;
      const view = new DataView(action.buffer);
      view.setInt32(SIGACTION_FLAGS, view.getInt32(SIGACTION_FLAGS, true) & ~SA_RESTART, true);
      status = result(sigaction(signal, action, null));
      return status;
    },
    wakeOnSignal: (signal) => {
      // A handler that does nothing, in C, so that no JavaScript runs in signal context:
      // __errno_location ignores its argument and only returns an address (glibc and musl).
      // Not sched_yield: a busy thread on the same CPU then keeps the woken one from running.
      // RTLD_DEFAULT is NULL.
      const handler = dlsym(null, '__errno_location');
      if (handler === null) return -38; // ENOSYS
      const action = new Uint8Array(SIGACTION_BYTES);
      new DataView(action.buffer).setBigUint64(0, BigInt(koffi.address(handler)), true);
      const status = result(sigaction(signal, action, null));
      if (status < 0) return status;
      // Node starts its worker threads with every signal blocked: let this one in here.
      const set = new Uint8Array(128);
      set[(signal - 1) >> 3] = 1 << ((signal - 1) & 7);
      const SIG_UNBLOCK = 1;
      // pthread_sigmask returns the error number itself.
      return -Number(sigmask(SIG_UNBLOCK, set, null));
    },
    prctl: (option, arg) => result(prctl(option, arg, 0, 0, 0)),
    symbolAddress: (name) => {
      const found = dlsym(null, name);
      return found === null ? undefined : BigInt(koffi.address(found));
    },
    threadId: () => result(syscall4(SYSCALL.gettid, 0, 0, 0n, 0n)),
    alarm: (seconds) => Number(alarm(seconds)),
    alarmEvery: (seconds) => {
      // struct itimerval: it_interval then it_value, each a timeval (tv_sec, tv_usec).
      const whole = BigInt(Math.floor(seconds));
      const micros = BigInt(Math.round((seconds % 1) * 1e6));
      const ITIMER_REAL = 0;
      return result(
        setitimer(ITIMER_REAL, new BigInt64Array([whole, micros, whole, micros]), null),
      );
    },
    tgkill: (tgid, tid, signal) => result(syscall4(SYSCALL.tgkill, tgid, tid, BigInt(signal), 0n)),
    getErrno: () => koffi.errno(),
    syscall: (number, a1, a2, a3, a4, a5) => result(syscall6(number, a1, a2, a3, a4, a5)),
    syscallAsync: (number, a1, a2, a3, a4, a5) =>
      new Promise<number>((resolve, reject) => {
        syscall6.async(number, a1, a2, a3, a4, a5, (err: unknown, value: unknown) => {
          if (err !== null && err !== undefined) reject(err);
          else if (Number(value) >= 0) resolve(Number(value));
          else resolve(result(syscall6(number, a1, a2, a3, a4, a5)));
        });
      }),
    alloc: (bytes) => {
      const pointer = koffi.alloc('uint8_t', Math.max(bytes, 1));
      const block = memory(pointer, bytes, () => koffi.free(pointer));
      block.bytes.fill(0);
      return block;
    },
    mmap: (length, prot, fd, offset) => {
      const pointer = mmap(null, length, prot, MAP_SHARED, fd, offset);
      if (koffi.address(pointer) === MAP_FAILED) return -koffi.errno();
      return memory(pointer, length, () => munmap(pointer, length));
    },
    readTsc: tsc,
    cxaDemangle: (mangled) => {
      demangler ??= cxaDemangler(koffi, lib);
      return demangler === null ? undefined : demangler(mangled);
    },
  };
}

/** libstdc++'s demangler, loaded on first use; null where there is no libstdc++. */
let demangler: ((mangled: Uint8Array) => string | undefined) | null | undefined;

function cxaDemangler(
  koffi: Koffi,
  libc: KoffiModule.LibraryHandle,
): ((mangled: Uint8Array) => string | undefined) | null {
  let cxa: ReturnType<KoffiModule.LibraryHandle['func']>;
  try {
    cxa = koffi
      .load('libstdc++.so.6')
      .func(
        'void *__cxa_demangle(const uint8_t *mangled, void *buffer, void *length, int *status)',
      );
  } catch {
    return null;
  }
  const free = libc.func('void free(void *pointer)');
  // Written in place by the demangler (an array given as _Out_ was copied back each call).
  const status = new Int32Array(1);
  return (mangled) => {
    status[0] = -1;
    const out = cxa(mangled, null, null, status);
    if (out === null || status[0] !== 0) return undefined;
    try {
      return koffi.decode(out, 'char', -1) as string;
    } finally {
      free(out);
    }
  };
}

/** Load the binding for an environment; throws ProbeError listing everything that failed. */
export function loadNativeWith(env: NativeEnvironment): NativeBinding {
  if (env.platform !== 'linux' || env.arch !== 'x64') {
    throw new ProbeError(
      'ERR_NOT_SUPPORTED_ON_OS',
      `Cannot load the native syscall layer: upscope runs on Linux x86-64, not ${env.platform}/${env.arch}`,
      { details: { platform: env.platform, arch: env.arch } },
    );
  }
  const failures: string[] = [];
  let koffi: Koffi | undefined;
  try {
    koffi = env.require('koffi') as Koffi;
  } catch (err) {
    failures.push(`koffi: ${message(err)}`);
  }
  if (koffi !== undefined) {
    for (const library of env.libraries) {
      try {
        return bind(koffi, library);
      } catch (err) {
        failures.push(`${library}: ${message(err)}`);
      }
    }
  }
  throw new ProbeError(
    'ERR_NATIVE_UNAVAILABLE',
    `Cannot load the native syscall layer: ${failures.join('; ')}`,
    {
      details: { tried: failures },
      hints: [
        'upscope needs the npm package "koffi" with its prebuilt binary for linux-x64 (reinstall upscope)',
        'Commands that only read files (list, resolve, report) work without it',
      ],
    },
  );
}

/**
 * The native binding, loaded on first use and cached (a failure is cached too). Throws
 * ProbeError `ERR_NATIVE_UNAVAILABLE` (listing what failed) or `ERR_NOT_SUPPORTED_ON_OS`.
 */
export function loadNative(): NativeBinding {
  if (binding !== undefined) return binding;
  if (failure !== undefined) throw failure;
  try {
    binding = loadNativeWith({
      platform: process.platform,
      arch: process.arch,
      require: createRequire(import.meta.url),
      libraries: LIBRARIES,
    });
    return binding;
  } catch (err) {
    failure =
      err instanceof ProbeError ? err : new ProbeError('ERR_NATIVE_UNAVAILABLE', message(err));
    throw failure;
  }
}

/** True once the native layer has been loaded (tests check that loading stays lazy). */
export function isNativeLoaded(): boolean {
  return binding !== undefined;
}
