import { constants } from 'node:os';
import type { Command } from '@commander-js/extra-typings';
import { type LeakSnapshot, leaks } from '../../api/index.js';
import { ProbeError } from '../../errors/index.js';
import {
  type Format,
  isStackFormat,
  parseFormat,
  renderLeaksJson,
  renderLeaksText,
} from '../../output/index.js';
import { type Io, withOutput } from '../io.js';
import { leakTitle, renderLeakStacks } from '../leak-documents.js';
import type { CommandResult } from '../main.js';
import {
  childrenOption,
  commandEnd,
  commandOutputOption,
  debugDirOption,
  killAfterOption,
  outputOption,
  parsePid,
  positive,
  startLine,
} from '../options.js';
import { checkTerminal } from '../outputs.js';
import { helperSignal } from '../ptrace-helper.js';
import { onEngine } from './aggregate.js';

interface LeaksCliOptions {
  pid?: number;
  command?: string;
  children?: true;
  killAfter?: number;
  lib?: string;
  mmap?: true;
  interval?: number;
  top?: number;
  olderThan?: number;
  duration?: number;
  json?: true;
  format?: string;
  output?: string;
  engine?: 'bpf' | 'ptrace';
  maxAllocations?: number;
  inlines?: true;
  debugDir?: string[];
  commandOutput?: string;
  commandStdout?: number | undefined;
}

const UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** `10s`, `500ms`, `2m`, `1h`, or a number of seconds: milliseconds. */
export function parseDurationMs(value: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(value);
  if (m === null) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --older-than "${value}": give a duration such as 10s, 500ms, 2m or 1h`,
    );
  }
  return Number(m[1]) * UNITS[m[2] ?? 's']!;
}

function parseEngine(value: string): 'bpf' | 'ptrace' {
  if (value === 'bpf' || value === 'ptrace') return value;
  throw new ProbeError('ERR_USAGE', `Cannot use engine "${value}" here: give bpf or ptrace`);
}

const FORMATS_HELP =
  'text (default), json (a line per report; the last has the growth of each stack), folded, flamegraph, pprof (sample type bytes) or speedscope, weighed by bytes (written at the end; give -o FILE for pprof)';

/** The writer of each report in the format asked for. */
function reportWriter(options: LeaksCliOptions, io: Io, title: string) {
  if (options.json === true && options.format !== undefined && options.format !== 'json') {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --json with --format ${options.format}: --json is --format json; give one`,
    );
  }
  const name = options.format ?? (options.json === true ? 'json' : 'text');
  if (name === 'text' || name === 'json') {
    return {
      write: (snapshot: LeakSnapshot) =>
        io.out(
          name === 'json'
            ? `${renderLeaksJson(snapshot)}\n`
            : `${stamp(snapshot)}${renderLeaksText(snapshot)}`,
        ),
      end: () => {},
    };
  }
  let format: Format | undefined;
  try {
    format = parseFormat('bytes', name);
  } catch {
    format = undefined;
  }
  if (format === undefined || !isStackFormat(format)) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use --format "${name}" with leaks: give text, json, folded, flamegraph, pprof or speedscope`,
    );
  }
  checkTerminal(format, options.output !== undefined);
  const stacks = format;
  let last: LeakSnapshot | undefined;
  return {
    write: (snapshot: LeakSnapshot) => {
      last = snapshot;
    },
    end: () => io.out(renderLeakStacks(last, stacks, title)),
  };
}

function stamp(snapshot: LeakSnapshot): string {
  return snapshot.final ? '' : `${new Date().toISOString().slice(11, 19)}\n`;
}

export function registerLeaks(program: Command, io: Io, result: CommandResult): void {
  program
    .command('leaks')
    .summary('memory allocated and not freed, by call stack (paired in the kernel)')
    .description(
      "Probe the allocator of one process (-p) or command (-c): the C library's malloc, " +
        'calloc, realloc, reallocarray, free, posix_memalign, aligned_alloc, memalign, valloc ' +
        'and pvalloc (--mmap: also mmap and munmap; --lib: another allocator, e.g. jemalloc ' +
        'or tcmalloc, found by its symbols; a static program is searched itself). C++ new ' +
        'and delete reach malloc and free. Each block is paired with its free in the kernel ' +
        "(an eBPF hash of address -> size, time and stack); realloc moves a block's record; " +
        'a free of an address never seen is counted. Every --interval and at the end, the ' +
        'stacks holding the most bytes are printed (--top) with their blocks, bytes and the ' +
        'age of the oldest, frames named, demangled, with file:line where debug info has ' +
        'them. With -c, the last report is what the command had not freed when it exited. ' +
        'An exec releases what the program it replaces had not freed: those blocks are ' +
        'left out and counted (a wrapper script that execs the program shows its blocks ' +
        'alone). ' +
        'Needs root or CAP_BPF and CAP_PERFMON; without them it runs on the ptrace engine ' +
        '(said on stderr; far slower per call).',
    )
    .option(
      '-p, --pid <pid>',
      'this process (all its threads) and the children it forks from now on',
      parsePid,
    )
    .option(...childrenOption)
    .option('-c, --command <command>', "start this command and find its leaks, e.g. -c './app 5'")
    .option(...killAfterOption)
    .option('--lib <lib>', 'the allocator to probe: a library or program, by path or name')
    .option('--mmap', 'also count mmap and munmap')
    .option(
      '--interval <seconds>',
      'print a report every this many seconds (default 5)',
      positive('--interval'),
    )
    .option('--top <n>', 'the N stacks with the most bytes (default 10)', positive('--top'))
    .option(
      '--older-than <duration>',
      'only blocks allocated at least this long ago, e.g. 10s, 500ms, 2m',
      parseDurationMs,
    )
    .option('--duration <seconds>', 'stop after this many seconds', positive('--duration'))
    .option('--json', 'print JSON instead of text (--format json)')
    .option('--format <format>', `how to write the reports: ${FORMATS_HELP}`)
    .option(...outputOption)
    .option(
      '--max-allocations <n>',
      'blocks kept at once in the kernel (default 1048576); more are counted and said',
      positive('--max-allocations'),
    )
    .option('--inlines', 'show functions inlined at each frame as frames of their own')
    .option(...debugDirOption)
    .option(...commandOutputOption)
    .option(
      '--engine <engine>',
      'bpf (in the kernel; root or CAP_BPF and CAP_PERFMON) or ptrace (in user space, far ' +
        'slower per call); by default bpf, or ptrace where BPF is not allowed',
      parseEngine,
    )
    .action((options: LeaksCliOptions) =>
      withOutput(io, options.output, async (io) => {
        if ((options.pid === undefined) === (options.command === undefined)) {
          throw new ProbeError(
            'ERR_USAGE',
            'Cannot find leaks: give one process, -p PID or -c COMMAND',
            { hints: ["For example: upscope leaks -c './app 5'"] },
          );
        }
        const writer = reportWriter(options, io, leakTitle(options));
        await onEngine(options, io, result, async (engine) => {
          await runLeaks(options, engine, io, result, writer);
        });
      }),
    );
}

async function runLeaks(
  options: LeaksCliOptions,
  engine: 'bpf' | 'ptrace',
  io: Io,
  result: CommandResult,
  writer: ReturnType<typeof reportWriter>,
): Promise<void> {
  const found = await leaks({
    engine,
    pid: options.pid,
    command: options.command,
    children: options.children,
    killAfterMs: options.killAfter === undefined ? undefined : options.killAfter * 1000,
    commandStdout: options.commandStdout,
    lib: options.lib,
    mmap: options.mmap,
    intervalMs: (options.interval ?? 5) * 1000,
    top: options.top,
    olderThanMs: options.olderThan,
    maxAllocations: options.maxAllocations,
    inlines: options.inlines,
    debugDirs: options.debugDir,
    onNotice: (text) => io.err(`upscope: ${text}\n`),
  });
  const aggregate = found.aggregate;
  const report = aggregate.attachReport;
  const how =
    engine === 'ptrace'
      ? `process ${aggregate.commandPid ?? options.pid}`
      : report.perf === 0
        ? 'uprobe_multi'
        : report.multi === 0
          ? 'perf events'
          : `${report.multi} uprobe_multi, ${report.perf} perf events`;
  for (const note of aggregate.notes) io.err(`upscope: ${note}\n`);
  io.err(
    startLine(
      `Finding leaks in ${found.allocator.path}:`,
      aggregate.sites.length,
      'function',
      `${engine}, ${how}, attached in ${report.milliseconds.toFixed(1)} ms`,
      aggregate.skipped,
      engine,
      aggregate.warnings,
    ),
  );
  let signal: NodeJS.Signals | undefined;
  const onSignal = (received: NodeJS.Signals) => {
    if (signal !== undefined) {
      found.close();
      process.exit(128 + constants.signals[received]);
    }
    signal = received;
    found.stop();
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  for (const s of signals) process.on(s, onSignal);
  const early = helperSignal();
  if (early !== undefined) onSignal(early);
  const onExit = () => found.close();
  process.on('exit', onExit);
  const timer =
    options.duration === undefined
      ? undefined
      : setTimeout(() => found.stop(), options.duration * 1000);
  const onClosed = () => found.stop();
  io.outputClosed?.addEventListener('abort', onClosed, { once: true });
  try {
    let last: LeakSnapshot | undefined;
    for await (const snapshot of found) {
      if (aggregate.error !== undefined) throw aggregate.error;
      if (snapshot.final && aggregate.targetExited)
        io.err(`upscope: process ${options.pid} exited\n`);
      writer.write(snapshot);
      last = snapshot;
    }
    writer.end();
    if (last !== undefined) io.err(`upscope: ${countersLine(last)}\n`);
  } finally {
    io.outputClosed?.removeEventListener('abort', onClosed);
    clearTimeout(timer);
    process.off('exit', onExit);
    found.close();
    for (const s of signals) process.off(s, onSignal);
  }
  if (aggregate.exit !== undefined) io.err(`upscope: ${commandEnd(aggregate.exit)}\n`);
  result.status = 0;
}

/** What the handlers counted, and what did not fit (never a silent undercount). */
function countersLine(snapshot: LeakSnapshot): string {
  const c = snapshot.counters;
  const parts = [
    `${c.allocations} allocations and ${c.frees} frees seen`,
    `${c.unknownFrees} frees of addresses not seen allocated`,
  ];
  if (c.failed > 0n) parts.push(`${c.failed} failed allocations`);
  if (c.dropped > 0n) {
    parts.push(
      `${c.dropped} allocations NOT tracked: the map of blocks was full (raise --max-allocations)`,
    );
  }
  if (c.stacksFull > 0n)
    parts.push(`${c.stacksFull} allocations kept without their stack (the map of stacks was full)`);
  if (c.pendingFull > 0n) parts.push(`${c.pendingFull} calls not followed (too many threads)`);
  if (c.faults > 0n) parts.push(`${c.faults} posix_memalign results that could not be read`);
  if (c.releasedByExec > 0n) {
    parts.push(
      `${c.releasedByExec} blocks not shown: an exec released them (the program it replaced had not freed them)`,
    );
  }
  return parts.join(', ');
}
