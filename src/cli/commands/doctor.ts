import type { Command } from '@commander-js/extra-typings';
import { runDoctor } from '../../api/index.js';
import { renderJson } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import { debugDirOption } from '../options.js';

const MARK = { ok: 'ok  ', warn: 'warn', fail: 'FAIL', info: 'info' } as const;

export function registerDoctor(program: Command, io: Io, result: CommandResult): void {
  program
    .command('doctor')
    .summary('report what this machine allows upscope to do, and how to fix what is missing')
    .description(
      'Check the user and capabilities, tracefs (mounting it when root and absent), uprobe_events, ' +
        'BPF and BTF, the perf uprobe PMU, perf_event_paranoid, ptrace permission, lockdown and the ' +
        'kernel version; with TARGET, where its debug info is. Each missing thing is printed with the command or setting that fixes it. ' +
        'Exits 1 when something upscope needs is missing.',
    )
    .argument(
      '[target]',
      'also report where the debug info of this file is (for probes by source line, FILE:LINE)',
    )
    .option('--no-mount', 'do not mount tracefs even when root and it is missing')
    .option('--json', 'print JSON instead of text')
    .option(...debugDirOption)
    .action(async (target, options) => {
      const report = await runDoctor({
        mount: options.mount,
        target,
        debugDirs: options.debugDir,
      });
      if (options.json === true) {
        io.out(`${renderJson(report)}\n`);
      } else {
        const width = Math.max(...report.checks.map((check) => check.title.length));
        const lines = report.checks.map((check) => {
          const head = `${MARK[check.status]}  ${check.title.padEnd(width)}  ${check.detail}`;
          return check.fix === undefined
            ? head
            : `${head}\n${' '.repeat(width + 8)}fix: ${check.fix}`;
        });
        io.out(`${lines.join('\n')}\n`);
      }
      if (report.checks.some((check) => check.status === 'fail')) result.status = 1;
    });
}
