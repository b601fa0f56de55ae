import type { Command } from '@commander-js/extra-typings';
import { cleanStale } from '../../api/index.js';
import { renderJson } from '../../output/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';

export function registerClean(program: Command, io: Io, result: CommandResult): void {
  program
    .command('clean')
    .summary('remove probes and tracefs instances left by an upscope that was killed')
    .description(
      'Remove every upscope event group (upscope_PID in uprobe_events) and tracefs instance ' +
        'whose owner process is gone, as happens when upscope is killed with SIGKILL. Groups of ' +
        'running upscope sessions and events of other tools are never touched. Needs root.',
    )
    .option('--json', 'print JSON instead of text')
    .action((options) => {
      const cleaned = cleanStale({ notice: (text) => io.err(`upscope: ${text}\n`) });
      if (options.json === true) {
        io.out(`${renderJson(cleaned)}\n`);
      } else {
        const lines = [
          ...cleaned.removedInstances.map((name) => `removed stale instance ${name}`),
          ...cleaned.removedGroups.map((name) => `removed stale event group ${name}`),
        ];
        if (lines.length === 0)
          lines.push('nothing to clean: no upscope group or instance has lost its owner');
        io.out(`${lines.join('\n')}\n`);
        for (const failure of cleaned.failures) io.err(`warning: cannot remove ${failure}\n`);
      }
      if (cleaned.failures.length > 0) result.status = 1;
    });
}
