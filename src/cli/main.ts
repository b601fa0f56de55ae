import { Command, CommanderError } from '@commander-js/extra-typings';
import { setRemovalNotice, setUnseenChildNotice } from '../engines/index.js';
import {
  exitStatusOf,
  InternalError,
  isProbeError,
  ProbeError,
  renderError,
} from '../errors/index.js';
import { registerAggregate } from './commands/aggregate.js';
import { registerCalls } from './commands/calls.js';
import { registerClean } from './commands/clean.js';
import { registerDoctor } from './commands/doctor.js';
import { registerLeaks } from './commands/leaks.js';
import { registerList } from './commands/list.js';
import { registerResolve } from './commands/resolve.js';
import { registerServe } from './commands/serve.js';
import { registerTop } from './commands/top.js';
import { registerTrace } from './commands/trace.js';
import { registerUi } from './commands/ui.js';
import { type Io, processIo } from './io.js';
import { setUpPtraceHelper } from './ptrace-helper.js';

const VERSION = '0.1.0';

/** Status a command sets when it finishes; commander actions cannot return one. */
export interface CommandResult {
  status: number;
}

function buildProgram(io: Io, result: CommandResult, errors: string[]): Command {
  const program = new Command('upscope')
    .description(
      'Linux user-space probes: trace any function, return or instruction of an ELF file with ' +
        'kernel uprobes (root) or from user space over ptrace (one process, no root), resolve ' +
        'what a probe spec means, and check what this machine allows.',
    )
    .version(VERSION, '-V, --version')
    .showSuggestionAfterError(true)
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.out(text),
      // Kept, not printed: usage errors are re-rendered in our format by main() below, and
      // only help asked for by an incomplete command line is printed as it is.
      writeErr: (text) => errors.push(text),
    })
    .addHelpText(
      'after',
      '\nProbe specs: [p|r|u:]TARGET:LOCATION [NAME=FETCH[:TYPE] ...]\n' +
        '  libc:malloc size=arg0:u64     r:libc:malloc ret=retval:x64\n' +
        '  ./app:parse_request+0x1a      ./app:0x401136      ./app:@0x1136\n' +
        '  u:python3:python:function__entry\n',
    );
  registerList(program, io, result);
  registerResolve(program, io, result);
  registerTrace(program, io, result);
  registerAggregate(program, io, result);
  registerCalls(program, io, result);
  registerLeaks(program, io, result);
  registerServe(program, io, result);
  registerTop(program, io, result);
  registerUi(program, io, result);
  registerDoctor(program, io, result);
  registerClean(program, io, result);
  return program;
}

function usageError(err: CommanderError): ProbeError {
  const message = err.message.replace(/^error: /, '');
  return new ProbeError('ERR_USAGE', `Cannot run command: ${message}`, {
    hints: ['Run "upscope --help" or "upscope COMMAND --help" for usage'],
  });
}

/** Runs the CLI and returns the exit status; never throws and never prints a stack trace. */
/**
 * What a removal of probes that has stopped going on for 3 s says (see watchRemoval()): the
 * kernel waits, and neither Ctrl-C nor SIGKILL ends the wait.
 */
const REMOVAL_NOTICE = {
  fd: 2,
  afterMs: 3000,
  text: "upscope: still removing the probes after 3 s: the kernel waits while a thread that has not returned from a call under a return probe goes on calling functions with return probes (tracefs events, or another tool's); it ends once that thread stops calling them or its process ends. --return-probes sites sets no trampoline\n",
};

export async function main(argv: readonly string[], given?: Io): Promise<number> {
  setUpPtraceHelper(argv, given === undefined);
  // Said on stderr by a thread of its own while the main one waits in the kernel.
  if (given === undefined) setRemovalNotice(REMOVAL_NOTICE);
  if (given === undefined) setUnseenChildNotice((text) => process.stderr.write(`${text}\n`));
  const io = given ?? processIo();
  const result: CommandResult = { status: 0 };
  const errors: string[] = [];
  const program = buildProgram(io, result, errors);
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return result.status;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end through exitOverride with status 0.
      if (err.exitCode === 0) return 0;
      if (err.code === 'commander.help') {
        // `upscope` alone, or a command group without its subcommand: show the usage.
        io.err(errors.join(''));
        return exitStatusOf(usageError(err));
      }
      io.err(`${renderError(usageError(err))}\n`);
      return exitStatusOf(usageError(err));
    }
    const probeError = isProbeError(err) ? err : new InternalError(describe(err), err);
    io.err(`${renderError(probeError)}\n`);
    if (process.env['UPSCOPE_DEBUG'] === '1') {
      const log = isProbeError(err) ? err.details['verifierLog'] : undefined;
      if (typeof log === 'string') io.err(`The verifier's log:\n${log}\n`);
      if (err instanceof Error) io.err(`${err.stack}\n`);
    }
    return exitStatusOf(probeError);
  }
}

function describe(err: unknown): string {
  return `Unexpected failure: ${err instanceof Error ? err.message : String(err)}`;
}
