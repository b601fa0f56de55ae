/**
 * The syscalls Node lacks, as plain functions over numbers and bytes: no policy, no
 * ProbeErrors (those are made by callers, through errno.ts). Every call returns what the
 * kernel returned: a result >= 0, or `-errno`.
 */
export interface NativeBinding {
  /** bpf(2): `cmd` from BPF_CMD, `attr` the bytes of the union bpf_attr for that command. */
  bpf(cmd: number, attr: Uint8Array): number;
  /** close(2). */
  close(fd: number): number;
  /** mount(2). */
  mount(source: string, target: string, fstype: string, flags: number, data: string | null): number;
  /** ptrace(2) with a number or address as `data` (CONT's signal, SEIZE's options...). */
  ptrace(request: number, pid: number, addr: bigint, data: bigint): number;
  /** ptrace(2) with a buffer as `data` (GETREGS, SETREGS, GETEVENTMSG, GETSIGINFO). */
  ptraceBuffer(request: number, pid: number, addr: bigint, data: Uint8Array): number;
  /** waitpid(2): the pid, with the status in `status[0]`; 0 with WNOHANG and nothing to report. */
  waitpid(pid: number, status: Int32Array, options: number): number;
  /**
   * posix_spawnp(3) of `argv` (argv[0] looked up on PATH) with `env`; the child's stdin,
   * stdout and stderr are `stdio`'s descriptors (this process's own by default: Node marks
   * them close-on-exec, so they are dup2'ed explicitly). Returns the child's pid, or -errno.
   * The child is not Node's: libuv never waits for it. With `newSession`, it leads a session
   * and process group of its own (POSIX_SPAWN_SETSID).
   */
  spawn(
    argv: readonly string[],
    env: readonly string[],
    stdio?: readonly number[],
    newSession?: boolean,
  ): number;
  /** sched_getaffinity(2) of a thread (0: the calling one): the CPU mask's bytes, or -errno. */
  getAffinity(tid: number): Uint8Array | number;
  /** sched_setaffinity(2) of a thread (0: the calling one). */
  setAffinity(tid: number, mask: Uint8Array): number;
  /** The CPU the calling thread runs on now. */
  currentCpu(): number;
  /**
   * Make a signal's handler interrupt blocking system calls (clear SA_RESTART on the handler
   * installed now, such as libuv's): a waitpid() then fails with EINTR when it arrives.
   */
  interruptOnSignal(signal: number): number;
  /**
   * Install a handler for `signal` that does nothing and does not restart system calls, and
   * unblock it in the calling thread: sent to that thread with tgkill(), it ends a blocking
   * waitpid() there with EINTR.
   */
  wakeOnSignal(signal: number): number;
  /**
   * prctl(2) with one integer argument (PR_SET_PDEATHSIG and the like; see PRCTL in
   * constants.ts).
   */
  prctl(option: number, arg: number): number;
  /**
   * dlsym(RTLD_DEFAULT, name): where `name` is in this process, undefined when no loaded
   * object defines it. For an IFUNC, the implementation its resolver picks here (dlsym runs
   * it, as the dynamic linker does).
   */
  symbolAddress(name: string): bigint | undefined;
  /** gettid(2): the calling thread's id. */
  threadId(): number;
  /** alarm(2): SIGALRM to this process in `seconds` (0 cancels). */
  alarm(seconds: number): number;
  /** setitimer(2) ITIMER_REAL: SIGALRM to this process every `seconds` from now (0 stops it). */
  alarmEvery(seconds: number): number;
  /** tgkill(2): a signal to one thread. */
  tgkill(tgid: number, tid: number, signal: number): number;
  /** The calling thread's errno as the C library left it after the last native call. */
  getErrno(): number;
  /**
   * syscall(2) with six integer arguments (addresses of `alloc()`ed memory as bigints), for
   * calls whose arguments hold pointers (perf_event_open, ioctl, bpf commands that point at
   * buffers).
   */
  syscall(number: number, a1: bigint, a2: bigint, a3: bigint, a4: bigint, a5: bigint): number;
  /**
   * syscall() on a thread of libuv's pool, for a call that keeps the kernel busy for a while
   * (a link of tens of thousands of uprobes): this thread runs on meanwhile. The memory its
   * arguments point at must live until the promise settles. A failure is made again here, in
   * this thread, for its errno (which the pool's thread does not hand back).
   */
  syscallAsync(
    number: number,
    a1: bigint,
    a2: bigint,
    a3: bigint,
    a4: bigint,
    a5: bigint,
  ): Promise<number>;
  /**
   * `bytes` of zeroed memory outside the JavaScript heap, at an address that does not move
   * (for pointers inside syscall arguments). Its `bytes` view must not be used after free().
   */
  alloc(bytes: number): NativeMemory;
  /** mmap(2) of `fd` (shared); free() unmaps it. The mapping, or -errno. */
  mmap(length: number, prot: number, fd: number, offset: number): NativeMemory | number;
  /**
   * The processor's time-stamp counter (rdtsc), read in this process: what the `inject`
   * engine's trampolines record, turned into CLOCK_MONOTONIC by pairing it with the clock.
   */
  readTsc(): bigint;
  /**
   * libstdc++'s `__cxa_demangle` (libiberty's demangler: what c++filt, gdb and perf show) of
   * the NUL-terminated name at the start of `mangled`; undefined when it is not a C++ name it
   * demangles, or there is no libstdc++ to load.
   */
  cxaDemangle(mangled: Uint8Array): string | undefined;
}

/** Memory at a fixed address, seen from JavaScript without copies. */
export interface NativeMemory {
  readonly address: bigint;
  readonly bytes: Uint8Array;
  /** Give it back (free or munmap); calling it again does nothing. */
  free(): void;
}
