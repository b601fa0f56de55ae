import { spawnSync } from 'node:child_process';

const BIN = new URL('../../bin/upscope.js', import.meta.url).pathname;

export interface CliResult {
  readonly status: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunOptions {
  readonly cwd?: string;
  /** Run as user and group 65534 (nobody), without supplementary groups (needs root). */
  readonly asNobody?: boolean;
  /**
   * With asNobody: capabilities the process keeps across the exec (inheritable and ambient),
   * e.g. ['bpf', 'perfmon']; none by default.
   */
  readonly caps?: readonly string[];
  /** Kill the process (SIGTERM) after this long; 120 s by default. */
  readonly timeoutMs?: number;
  /** Variables set (or, undefined, unset) over this process's environment. */
  readonly env?: NodeJS.ProcessEnv;
}

/** Run the built CLI (dist/, built by `npm test` before the tests) as a user would. */
export function runCli(args: readonly string[], options: RunOptions = {}): CliResult {
  return runNode([BIN, ...args], options);
}

/** Run node with these arguments, as runCli() runs the CLI. */
export function runNode(args: readonly string[], options: RunOptions = {}): CliResult {
  const command = [process.execPath, ...args];
  if (options.asNobody === true) {
    const caps = (options.caps ?? []).map((c) => `+${c}`).join(',');
    command.unshift(
      'setpriv',
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      ...(caps === '' ? [] : [`--inh-caps=${caps}`, `--ambient-caps=${caps}`]),
    );
  }
  const result = spawnSync(command[0]!, command.slice(1), {
    encoding: 'utf8',
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: '1', ...options.env },
    maxBuffer: 256 * 1024 * 1024,
    timeout: options.timeoutMs ?? 120_000,
  });
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/** An event of `trace --json`, as far as the tests read it. */
export interface TracedEvent {
  readonly probe: string;
  readonly kind: string;
  readonly latencyNs?: string | undefined;
}

/**
 * Events per probe in the output of `trace --json` (each event line; the command's status
 * line and anything the command printed are left out), or per `keyOf` of each event.
 */
export function eventsPerProbe(
  stdout: string,
  keyOf: (event: TracedEvent) => string = (event) => event.probe,
): Record<string, number> {
  const seen: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{') || line.startsWith('{"command"')) continue;
    const key = keyOf(JSON.parse(line) as TracedEvent);
    seen[key] = (seen[key] ?? 0) + 1;
  }
  return seen;
}
