#!/usr/bin/env node
// The other way to unwind without frame pointers, measured for the stack benchmark: copy the
// registers and COPY_BYTES of the user stack into a BPF ring buffer at each hit (as
// `perf record --call-graph dwarf` copies 8 KiB per sample), and unwind each copy here, in
// JavaScript, with the same unwind tables and walker as the ptrace engine. Runs `BIN N DEPTH`
// with a probe on hot_leaf, reads the ring buffer while it runs, and prints the target's
// `calls=N ns_per_call=F` line, then `copied=C lost=L short=S unwound=U us_per_stack=T
// frames=F`. Usage: node bench/stack-copy.mjs BIN N DEPTH COPY_BYTES  (after npm run build).
import { spawn } from 'node:child_process';

const root = new URL('..', import.meta.url).pathname;
const [bin, n, depth, copyText] = process.argv.slice(2);
const COPY = Number(copyText ?? 8192);
const { resolveProbes } = await import(`${root}dist/api/index.js`);
const { StackFiles } = await import(`${root}dist/api/stack-files.js`);
const { BpfSession } = await import(`${root}dist/engines/bpf/session.js`);
const { RingBuffer } = await import(`${root}dist/engines/bpf/ring-buffer.js`);
const { Asm } = await import(`${root}dist/engines/bpf/asm.js`);
const { KernelBtf } = await import(`${root}dist/engines/bpf/btf.js`);
const insn = await import(`${root}dist/engines/bpf/insn.js`);
const { BPF_FUNC, USER_REGS } = await import(`${root}dist/native/index.js`);
const { unwindStack } = await import(`${root}dist/arch/index.js`);
const { findMapping, isFileMapping, parseProcMaps } = await import(`${root}dist/symbols/index.js`);
const { readFileSync } = await import('node:fs');

const HEADER = 32;
const plan = await resolveProbes([`${bin}:hot_leaf`]);
const site = plan.sites[0];
const session = new BpfSession();
const ring = RingBuffer.create('stack_copy', 64 * 1024 * 1024);
const lost = session.map({
  kind: 'percpu-array',
  name: 'lost',
  keyBytes: 4,
  valueBytes: 8,
  maxEntries: 1,
});

// The handler: a record of rip, rsp, rbp, the copy's status, then the stack from rsp.
const { alu64Imm, alu64Reg, call, ldMapFd, ldx, mov64Imm, mov64Reg, st, stx, atomicAdd } = insn;
const a = new Asm();
a.emit(mov64Reg(6, 1), ldMapFd(1, ring.map.fd), mov64Imm(2, HEADER + COPY), mov64Imm(3, 0));
a.emit(call(BPF_FUNC.ringbuf_reserve));
a.jmpImm('JEQ', 0, 0, 'full');
a.emit(mov64Reg(7, 0));
for (const [at, reg] of [
  [0, 'rip'],
  [8, 'rsp'],
  [16, 'rbp'],
]) {
  a.emit(ldx('DW', 1, 6, USER_REGS[reg]), stx('DW', 7, at, 1));
}
// As perf does, no more than what lies between rsp and the stack's top (the main thread's
// start_stack, read from the kernel): a copy past the stack's end would fail altogether.
const btf = KernelBtf.vmlinux();
a.emit(call(BPF_FUNC.get_current_task), mov64Reg(3, 0));
a.emit(alu64Imm('ADD', 3, btf.offsetOf('task_struct', 'mm')));
a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, -8), mov64Imm(2, 8), call(BPF_FUNC.probe_read_kernel));
a.emit(ldx('DW', 3, 10, -8), alu64Imm('ADD', 3, btf.offsetOf('mm_struct', 'start_stack')));
a.emit(mov64Reg(1, 10), alu64Imm('ADD', 1, -8), mov64Imm(2, 8), call(BPF_FUNC.probe_read_kernel));
a.emit(mov64Imm(2, COPY), ldx('DW', 1, 10, -8), ldx('DW', 3, 6, USER_REGS.rsp));
a.jmpReg('JLE', 1, 3, 'sized');
a.emit(alu64Reg('SUB', 1, 3));
a.jmpImm('JGE', 1, COPY, 'sized');
a.emit(mov64Reg(2, 1));
a.label('sized');
a.emit(alu64Imm('AND', 2, COPY * 2 - 1));
a.jmpImm('JEQ', 2, 0, 'empty');
a.jmpImm('JGT', 2, COPY, 'empty');
a.emit(stx('DW', 7, 24, 2), mov64Reg(1, 7), alu64Imm('ADD', 1, HEADER));
a.emit(call(BPF_FUNC.probe_read_user));
a.jmpImm('JEQ', 0, 0, 'submit');
a.label('empty');
a.emit(st('DW', 7, 24, 0));
a.label('submit');
a.emit(mov64Reg(1, 7), mov64Imm(2, 0), call(BPF_FUNC.ringbuf_submit));
a.returnZero();
a.label('full');
a.emit(st('W', 10, -4, 0), ldMapFd(1, lost.fd), mov64Reg(2, 10), alu64Imm('ADD', 2, -4));
a.emit(call(BPF_FUNC.map_lookup_elem));
a.jmpImm('JEQ', 0, 0, 'out');
a.emit(mov64Imm(1, 1), atomicAdd('DW', 0, 0, 1));
a.label('out');
a.returnZero();
const program = a.finish();

const files = new StackFiles();
let maps;
let childPid;
const fileOf = new Map();
let copied = 0;
let short = 0;
let unwound = 0;
let frames = 0;
let unwindMs = 0;

function locate(pc) {
  const entry = findMapping(maps, pc);
  if (entry === undefined || !entry.executable) return undefined;
  if (!isFileMapping(entry)) return { kind: 'anonymous' };
  let file = fileOf.get(entry);
  if (file === undefined) {
    file = files.fromProcess(childPid, entry);
    fileOf.set(entry, file);
  }
  if (file === undefined) return undefined;
  return { kind: 'file', file, fileOffset: pc - entry.start + entry.offset, table: file.table() };
}

function drain() {
  ring.read((view, start) => {
    copied++;
    const bytes = Number(view.getBigUint64(start + 24, true));
    if (bytes === 0) {
      short++;
      return;
    }
    if (maps === undefined) maps = parseProcMaps(readFileSync(`/proc/${childPid}/maps`, 'utf8'));
    const sp = view.getBigUint64(start + 8, true);
    const began = performance.now();
    const stack = unwindStack(
      { pc: view.getBigUint64(start, true), sp, bp: view.getBigUint64(start + 16, true) },
      {
        maxFrames: 127,
        locate,
        read64: (address) => {
          const at = address - sp;
          if (at < 0n || at + 8n > BigInt(bytes)) return undefined;
          return view.getBigUint64(start + HEADER + Number(at), true);
        },
      },
    );
    unwindMs += performance.now() - began;
    unwound++;
    frames += stack.frames.length;
  });
}

try {
  session.attach(
    [{ path: site.target.path, offset: site.fileOffset, kind: 'entry', cookie: 0 }],
    { entry: () => program, return: undefined },
    { purpose: 'copying stacks' },
  );
  const child = spawn(bin, [n, depth], { stdio: ['ignore', 'ignore', 'pipe'] });
  childPid = child.pid;
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const done = new Promise((resolve) => child.once('close', resolve));
  let running = true;
  done.then(() => {
    running = false;
  });
  while (running) {
    drain();
    await new Promise((resolve) => setImmediate(resolve));
  }
  drain();
  process.stderr.write(stderr);
  const dropped = lost.lookupSum(new Uint8Array(4));
  console.error(
    `copied=${copied} lost=${dropped} short=${short} unwound=${unwound} us_per_stack=${((unwindMs * 1000) / Math.max(unwound, 1)).toFixed(2)} frames=${(frames / Math.max(unwound, 1)).toFixed(1)}`,
  );
} finally {
  session.close();
  ring.close();
  files.close();
}
