import type { Command } from '@commander-js/extra-typings';
import {
  attachPoints,
  injectHookOf,
  notLoadedNotes,
  type ProbeSite,
  printFetchExpr,
  resolveProbes,
  type SkippedSite,
  type SourceSite,
  type Symbolized,
  skipCounts,
  symbolizeAddress,
} from '../../api/index.js';
import { eventName, uprobeEventLine } from '../../engines/index.js';
import { exitStatusOf, ProbeError, renderError, renderWarning } from '../../errors/index.js';
import { grouped } from '../../internal/index.js';
import { hex, renderJson } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import {
  debugDirOption,
  formatDev,
  parsePid,
  parseTraceEngine,
  returnProbesOption,
  strictOption,
} from '../options.js';

export function registerResolve(program: Command, io: Io, result: CommandResult): void {
  program
    .command('resolve')
    .summary('show exactly where probe specs would attach, without attaching')
    .description(
      'Resolve each SPEC to its probe sites and show, for each: the file, device:inode, build-id, ' +
        "virtual address, file offset, the line the kernel's uprobe_events would take, how the " +
        'kernel will run the probed instruction, and the first instructions at the site; the ' +
        'calling convention argN and retvalN read (C, or Go); for a return probe, whether its ' +
        'returns are caught by a trampoline or at each instruction the function leaves by, ' +
        'and why. Functions a pattern matches that cannot be probed (the kernel refuses their ' +
        'first instruction) are listed as skipped, with the reason; the commands that probe ' +
        'skip them too (--strict makes that an error). ' +
        'With -p PID, a bare address (0x7f...) is symbolized: object, file offset, symbol+offset.',
    )
    .argument('<spec...>', "probe specs, e.g. libc:malloc 'r:./app:parse_*' ./app:main+0x8")
    .option('-p, --pid <pid>', 'resolve targets as process PID sees them', parsePid)
    .option('--unsafe', 'allow raw addresses no symbol covers (instruction boundary unchecked)')
    .option(...strictOption)
    .option(
      '--engine <engine>',
      'whose rules decide what can be probed: tracefs and bpf (the kernel: the default), ptrace, ' +
        'or inject (as ptrace, and says per site whether an inline hook serves it or an int3, and why)',
      parseTraceEngine,
    )
    .option('--json', 'print JSON instead of text')
    .option(
      '--no-demangle',
      'show C++ and Rust function names as stored (mangled); specs still match demangled names',
    )
    .option(...debugDirOption)
    .option(...returnProbesOption)
    .action(async (specs, options) => {
      const addresses = specs.filter((spec) => /^0x[0-9a-f]+$/i.test(spec));
      if (addresses.length > 0 && options.pid === undefined) {
        throw new ProbeError(
          'ERR_USAGE',
          `Cannot resolve ${addresses[0]}: a bare address needs -p PID`,
          {
            hints: ['Give the process with -p PID, or name the file: TARGET:0xADDRESS'],
          },
        );
      }
      const symbolized = addresses.map((address) =>
        symbolizeAddress(options.pid!, BigInt(address)),
      );
      const plan = await resolveProbes(
        specs.filter((spec) => !addresses.includes(spec)),
        {
          pid: options.pid,
          unsafe: options.unsafe,
          strict: options.strict,
          engine: options.engine === 'ptrace' || options.engine === 'inject' ? 'ptrace' : 'tracefs',
          demangle: options.demangle,
          debugDirs: options.debugDir,
          returnProbes: options.returnProbes,
        },
      );
      const group = `upscope_${process.pid}`;
      const inject = options.engine === 'inject';
      const notes = options.pid === undefined ? [] : notLoadedNotes(plan.sites, options.pid);
      if (options.json === true) {
        io.out(
          `${renderJson({
            sites: plan.sites.map((site) => ({
              ...siteJson(site, group),
              ...(inject ? { inject: injectHookOf(site) } : {}),
            })),
            skipped: plan.skipped.map(skippedJson),
            notes,
            addresses: symbolized.map((s) =>
              options.demangle ? s : { ...s, demangled: undefined },
            ),
            errors: plan.errors.map(errorJson),
            warnings: plan.warnings.map(errorJson),
          })}\n`,
        );
      } else {
        const blocks = [
          ...plan.sites.map((site) => renderSite(site, group, inject)),
          ...plan.skipped.map(renderSkipped),
          ...symbolized.map((s) => renderSymbolized(s, options.demangle)),
        ];
        if (blocks.length > 0) io.out(`${blocks.join('\n')}\n`);
        if (plan.skipped.length > 0) {
          const total = plan.sites.length + plan.skipped.length;
          io.err(
            `upscope: ${plan.skipped.length} of ${grouped(total)} sites skipped: ${skipCounts(plan.skipped)}\n`,
          );
        }
        for (const note of notes) io.err(`upscope: ${note}\n`);
        for (const warning of plan.warnings) io.err(`${renderWarning(warning)}\n`);
        for (const error of plan.errors) io.err(`${renderError(error)}\n`);
      }
      // Every spec failed: the first error's status, as trace and list give for it; some: 1.
      if (plan.errors.length > 0) {
        result.status = plan.errors.length === specs.length ? exitStatusOf(plan.errors[0]) : 1;
      }
    });
}

/** A site as JSON: addresses as hex strings, the device as major:minor, bytes as hex. */
function siteJson(site: ProbeSite, group: string) {
  return {
    spec: site.spec,
    kind: site.kind,
    target: {
      path: site.target.path,
      displayPath: site.target.displayPath,
      dev: formatDev(site.target.dev),
      inode: Number(site.target.inode),
      buildId: site.target.buildId,
      elfType: site.target.elfType,
    },
    symbol: site.symbol,
    demangled: site.demangled,
    aliases: site.aliases,
    symbolFile: site.symbolFile,
    symbolOffset: site.symbolOffset,
    vaddr: site.vaddr,
    fileOffset: site.fileOffset,
    runtimeAddress: site.runtimeAddress,
    usdt: site.usdt,
    source: site.source,
    ...eventLineOf(site, group),
    ...(site.returns?.mode === 'sites' ? { uprobeEvents: eventLinesOf(site, group) } : {}),
    handling: site.handling,
    convention: site.convention,
    afterStackCheck: site.afterStackCheck,
    // Written out: the instructions passed may be spelled by a getter.
    pastFirst:
      site.pastFirst === undefined
        ? undefined
        : {
            offset: site.pastFirst.offset,
            instruction: site.pastFirst.instruction,
            reason: site.pastFirst.reason,
            changes: site.pastFirst.changes,
          },
    returns: site.returns,
    instructions: site.instructions.map((insn) => ({
      vaddr: insn.vaddr,
      length: insn.length,
      bytes: hexBytes(insn.bytes),
      text: insn.text,
    })),
    fetches: site.fetches.map((fetch) => ({
      name: fetch.name,
      fetch: printFetchExpr(fetch.expr),
      type: fetch.type,
    })),
  };
}

/**
 * The uprobe_events lines of a return probe caught at its exits: one per exit (retval read
 * from %ax), then the entry that opens its frame.
 */
function eventLinesOf(site: ProbeSite, group: string): string[] {
  const base = eventName(site.symbol, site.symbolOffset, site.vaddr);
  return attachPoints(site).map((point, i) =>
    uprobeEventLine(
      { ...site, kind: 'entry', fileOffset: point.fileOffset, fetches: point.fetches },
      group,
      point.role === 'frame-entry' ? `${base}_entry` : `${base}_ret${i + 1}`,
    ),
  );
}

/**
 * The site's uprobe_events line, or why the kernel's fetch-args cannot express it (a USDT
 * argument at base + index * scale): the other engines can still run the site.
 */
function eventLineOf(
  site: ProbeSite,
  group: string,
): { uprobeEvent: string | null; uprobeEventError?: string } {
  try {
    const event = eventName(site.symbol, site.symbolOffset, site.vaddr);
    return { uprobeEvent: uprobeEventLine(site, group, event) };
  } catch (err) {
    if (!(err instanceof ProbeError) || err.category !== 'not-supported') throw err;
    return { uprobeEvent: null, uprobeEventError: err.message };
  }
}

/** A skipped site as JSON: where, the reason in a few words, and the error it would give. */
function skippedJson(site: SkippedSite) {
  return {
    spec: site.spec,
    target: site.target,
    symbol: site.symbol,
    vaddr: site.vaddr,
    reason: site.reason,
    error: errorJson(site.error),
  };
}

export function renderSkipped(site: SkippedSite): string {
  const where = site.symbol ?? hex(site.vaddr);
  return [
    `${site.spec}  ->  ${where} (skipped: ${site.reason})`,
    `  file       ${site.target}`,
    `  address    vaddr ${hex(site.vaddr)}`,
    `  why        ${site.error.message}`,
    ...site.error.hints.map((hint) => `  hint       ${hint}`),
  ].join('\n');
}

function hexBytes(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ');
}

function errorJson(err: ProbeError) {
  return {
    code: err.code,
    message: err.message,
    hints: err.hints,
    spec: err.source?.text,
    span: err.source?.span,
  };
}

const KIND_TEXT: Record<ProbeSite['kind'], string> = {
  entry: 'function entry',
  return: 'function return',
  instruction: 'instruction',
  usdt: 'USDT probe',
};

export function renderSite(site: ProbeSite, group: string, inject = false): string {
  const field = (name: string, value: string) => `  ${name.padEnd(10)} ${value}`;
  const name = site.demangled ?? site.symbol;
  const where =
    name === undefined
      ? hex(site.vaddr)
      : `${name}${site.symbolOffset === 0n ? '' : `+${hex(site.symbolOffset)}`}`;
  const lines = [`${site.spec}  ->  ${where} (${KIND_TEXT[site.kind]})`];
  const shown =
    site.target.displayPath === site.target.path
      ? site.target.path
      : `${site.target.displayPath} (read through ${site.target.path})`;
  lines.push(field('file', shown));
  lines.push(field('inode', `dev ${formatDev(site.target.dev)}, inode ${site.target.inode}`));
  lines.push(field('build-id', site.target.buildId ?? '(none)'));
  lines.push(
    field(
      'address',
      `vaddr ${hex(site.vaddr)}, file offset ${hex(site.fileOffset)}${site.runtimeAddress === undefined ? '' : `, runtime ${hex(site.runtimeAddress)}`}`,
    ),
  );
  if (site.demangled !== undefined && site.symbol !== undefined) {
    lines.push(field('symbol', site.symbol));
  }
  if (site.aliases.length > 0) lines.push(field('aliases', site.aliases.join(', ')));
  if (site.symbolFile !== undefined) {
    lines.push(field('symbols', `.symtab of its debug file ${site.symbolFile}`));
  }
  if (site.source !== undefined) lines.push(field('line', sourceText(site.source)));
  if (site.usdt !== undefined) {
    lines.push(
      field(
        'usdt',
        `${site.usdt.provider}:${site.usdt.name} args "${site.usdt.args}"${site.usdt.semaphoreFileOffset === undefined ? '' : `, semaphore at file offset ${hex(site.usdt.semaphoreFileOffset)}`}`,
      ),
    );
  }
  if (site.convention !== undefined && site.kind !== 'usdt') {
    lines.push(field('abi', site.convention.why));
  }
  if (site.afterStackCheck !== undefined) {
    lines.push(
      field(
        'entry',
        `probed at +${hex(site.afterStackCheck)}, after the Go stack check: a call whose stack grows runs the function's start twice, this once`,
      ),
    );
  }
  if (site.pastFirst !== undefined) {
    const past = site.pastFirst;
    lines.push(
      field(
        'entry',
        `probed at +${hex(past.offset)}, past "${past.instruction}" (${past.reason}), which ${past.instruction.includes('; ') ? 'change' : 'changes'} ${past.changes ?? 'no general register, the stack or memory'}: arguments are as at the entry`,
      ),
    );
  }
  const returns = site.returns;
  if (returns?.mode === 'sites') {
    const count = returns.sites.length;
    lines.push(
      field(
        'returns',
        `at its ${count} exit${count === 1 ? '' : 's'}, return address left alone: ${returns.why}`,
      ),
    );
    lines.push(
      field(
        '',
        `calls paired by ${returns.frames === 'goroutine' ? 'goroutine (%r14) and depth in its stack' : 'thread and stack pointer'}; a frame an unwind or longjmp leaves is closed as unwound`,
      ),
    );
    if (returns.loopsAtEntry === true) {
      lines.push(
        field(
          '',
          'it jumps back to its entry (a loop there): an entry at the stack pointer of its open call goes on with that call',
        ),
      );
    }
    for (const exit of returns.sites) {
      const how = exit.kind === 'tail-call' ? 'tail call: no result yet' : 'ret';
      lines.push(
        field(
          '',
          `${hex(exit.vaddr)}  ${exit.text.padEnd(24)} ${how}; ${handlingWords(exit.handling)}`,
        ),
      );
    }
    eventLinesOf(site, group).forEach((line, i) => {
      lines.push(field(i === 0 ? 'uprobe' : '', line));
    });
  } else {
    if (returns !== undefined && site.kind === 'return') {
      lines.push(
        field('returns', `by a return trampoline (the return address is replaced): ${returns.why}`),
      );
    }
    const event = eventLineOf(site, group);
    lines.push(field('uprobe', event.uprobeEvent ?? `(none: ${event.uprobeEventError})`));
  }
  // A return probe caught at its exits has nothing at the function's start but the entry.
  const atStart = returns?.mode !== 'sites';
  if (inject) {
    const hook = injectHookOf(site);
    lines.push(field('inject', `${hook.hook === 'inline' ? 'inline hook' : 'int3'}: ${hook.why}`));
  }
  if (atStart) lines.push(field('kernel', handlingText(site)));
  site.instructions.forEach((insn, i) => {
    const bytes = hexBytes(insn.bytes);
    lines.push(
      field(
        i === 0 ? 'code' : '',
        `${hex(insn.vaddr)}  ${bytes.padEnd(24)} ${insn.text}${i === 0 && atStart ? '   <- probe' : ''}`,
      ),
    );
  });
  return lines.join('\n');
}

const DEBUG_HOW: Record<SourceSite['debugFile']['how'], string> = {
  embedded: 'in the file itself',
  'build-id': 'by build-id',
  debuglink: 'by .gnu_debuglink',
};

function sourceText(source: SourceSite): string {
  const column = source.column === 0 ? '' : `:${source.column}`;
  return `${source.file}:${source.line}${column} (debug info: ${source.debugFile.path}, ${DEBUG_HOW[source.debugFile.how]})`;
}

/** How the kernel runs a probe on an instruction, briefly. */
function handlingWords(h: ProbeSite['handling']): string {
  switch (h.strategy) {
    case 'emulate':
      return 'the kernel emulates it';
    case 'single-step':
      return 'the kernel single-steps it (a trap more per hit)';
    case 'refuse':
      return `the kernel refuses it: ${h.reason}`;
    case 'unsafe':
      return `the kernel mishandles it: ${h.reason}`;
  }
}

function handlingText(site: ProbeSite): string {
  const h = site.handling;
  switch (h.strategy) {
    case 'emulate':
      return `emulates "${h.what}" (no single-step: the cheapest kind of probe)`;
    case 'single-step':
      return `single-steps "${h.what}" out of line${h.ripRelative ? ' with a RIP-relative fixup' : ''} (a trap more per hit than an emulated instruction)`;
    case 'refuse':
      return `refuses this instruction: ${h.reason}`;
    case 'unsafe':
      return `accepts but mishandles "${h.what}": ${h.reason} (placed only because of --unsafe)`;
  }
}

function renderSymbolized(s: Symbolized, demangle: boolean): string {
  const name = (demangle ? s.demangled : undefined) ?? s.symbol;
  const where = name === undefined ? '(no symbol)' : `${name}+${hex(s.symbolOffset)}`;
  if (s.fileOffset === undefined) {
    return [
      `${hex(s.address)}  ->  ${where}`,
      `  object     JIT code, named by ${s.jit ?? 'the runtime'}`,
    ].join('\n');
  }
  return [
    `${hex(s.address)}  ->  ${where}`,
    `  object     ${s.object}`,
    `  address    file offset ${hex(s.fileOffset)}${s.vaddr === undefined ? '' : `, vaddr ${hex(s.vaddr)}`}`,
    ...(demangle && s.demangled !== undefined ? [`  symbol     ${s.symbol}`] : []),
  ].join('\n');
}
