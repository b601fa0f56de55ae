import { spawnSync } from 'node:child_process';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

export interface CliResult {
  readonly status: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Run the built CLI (dist/, built by `npm test` before the tests) as a user would. */
export function runCli(args: readonly string[], options: { cwd?: string } = {}): CliResult {
  const result = spawnSync(process.execPath, [BIN, ...args], {
    encoding: 'utf8',
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: '1' },
    maxBuffer: 256 * 1024 * 1024,
  });
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}
