// Forking servers under every command and engine: a small C server that forks a child per
// connection, and Debian's nginx (a master and its workers) on a loopback port. With -p on the
// parent (and --children where the workers exist already) and with -c, every request sent is
// counted, timed, histogrammed and traced, on tracefs (trace), bpf and ptrace; a -c server is
// ended as a user would end it (its SIGTERM handler runs) and nothing of it is left.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { groupMembers } from '../../src/host/index.js';
import { compileProgram } from '../helpers/compile.js';
import { leftovers } from '../helpers/leftovers.js';
import { requireHost } from '../helpers/require-host.js';
import { runCli } from '../helpers/run-cli.js';
import { ended, type Spawned, spawnUpscope, waitFor } from '../helpers/spawned.js';
import { tracedChildren } from '../helpers/tracees.js';

const NGINX = '/usr/sbin/nginx';
const REQUESTS = 10;

afterEach(() => {
  assert.deepEqual(leftovers(), [], 'nothing of upscope is left in tracefs');
  assert.deepEqual(tracedChildren(), [], 'no process is left traced');
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A free TCP port on the loopback. */
async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as net.AddressInfo).port;
  server.close();
  await once(server, 'close');
  return port;
}

/** One request on a connection of its own; resolves with the reply. */
function request(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write('GET / HTTP/1.0\r\n\r\n'));
    let reply = '';
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString();
    });
    socket.on('end', () => resolve(reply));
    socket.on('error', reject);
  });
}

/** Wait until the server says it listens. */
async function listening(server: Server, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!server.ready()) {
    if (Date.now() > deadline) throw new Error(`${server.name} did not start`);
    await sleep(20);
  }
}

/** Send `n` requests one after the other; each must be answered. */
async function send(port: number, n: number, answer: RegExp): Promise<void> {
  for (let i = 0; i < n; i++) assert.match(await request(port), answer);
}

/** A server the test runs: how to start it, what to probe, and how it says it was ended. */
interface Server {
  readonly name: string;
  readonly probe: string;
  /** The command line (for -c, and started by the test for -p). */
  readonly command: string;
  readonly port: number;
  readonly answer: RegExp;
  /** With -p: the workers exist before the run, so --children takes them. */
  readonly workers: boolean;
  /** Clear the server's log before a run. */
  reset(): void;
  /**
   * Whether its log says it listens (a connection made to find out would be a request to
   * the forking server: it forks a child that serves it).
   */
  ready(): boolean;
  /** After a -c run: the pid of the process started (its process group), from its log. */
  leader(): number;
  /** After a -c run: whether its log says its SIGTERM handler ran. */
  terminated(): boolean;
}

function forkServer(dir: string, port: number): Server {
  const app = compileProgram('fork-server', { flags: ['-O2'] });
  const log = join(dir, 'fork-server.log');
  const text = () => (existsSync(log) ? readFileSync(log, 'utf8') : '');
  return {
    name: 'the forking C server',
    probe: `${app}:handle_request`,
    command: `${app} ${port} ${log}`,
    port,
    answer: /^ok \d+$/m,
    workers: false,
    reset: () => writeFileSync(log, ''),
    ready: () => /^listening pid=\d+$/m.test(text()),
    leader: () => Number(/^listening pid=(\d+)$/m.exec(text())?.[1]),
    terminated: () => /^SIGTERM handled: served \d+$/m.test(text()),
  };
}

function nginx(dir: string, port: number): Server {
  for (const sub of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) {
    mkdirSync(join(dir, sub), { recursive: true });
  }
  const log = join(dir, 'error.log');
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `daemon off;
master_process on;
worker_processes 2;
pid ${dir}/nginx.pid;
error_log ${log} notice;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  server { listen 127.0.0.1:${port}; location / { return 200 "ok\\n"; } }
}
`,
  );
  const text = () => (existsSync(log) ? readFileSync(log, 'utf8') : '');
  return {
    name: 'nginx',
    // Called once per request, when its header has been read.
    probe: `${NGINX}:ngx_http_process_request`,
    command: `${NGINX} -p ${dir} -c ${conf}`,
    port,
    answer: /^HTTP\/1\.1 200 OK/,
    workers: true,
    reset: () => writeFileSync(log, ''),
    // The master listens before it starts its workers; connections wait for them.
    ready: () => /start worker processes/.test(text()),
    leader: () => Number(/\[notice\] (\d+)#\d+: start worker processes/.exec(text())?.[1]),
    terminated: () => /\[notice\] \d+#\d+: signal 15 \(SIGTERM\) received/.test(text()),
  };
}

type Command = 'count' | 'latency' | 'hist' | 'trace' | 'record';

/** The recording the last `record` of COMMANDS made (read, then removed, by its seen()). */
let recording: string | undefined;

/** What each command is run with, and how many hits its output says it saw. */
const COMMANDS: Record<
  Command,
  { args: (probe: string) => string[]; seen: (out: string) => number }
> = {
  count: {
    args: (probe) => ['count', '--json', probe],
    seen: (out) => jsonRows(out).reduce((n, row) => n + row.count, 0),
  },
  latency: {
    args: (probe) => ['latency', '--json', probe],
    seen: (out) => jsonRows(out).reduce((n, row) => n + row.count, 0),
  },
  hist: {
    args: (probe) => ['hist', '--json', probe, 'arg0'],
    seen: (out) => jsonRows(out).reduce((n, row) => n + row.count, 0),
  },
  trace: {
    args: (probe) => ['trace', '--json', probe],
    seen: (out) => out.split('\n').filter((line) => line.startsWith('{"timeNs"')).length,
  },
  // The calls of the probed function in the recording, as report says them.
  record: {
    args: (probe) => {
      recording = join(mkdtempSync(join(tmpdir(), 'upscope-servers-rec-')), 'rec');
      return ['record', '-o', recording, probe];
    },
    seen: () => {
      const dir = recording!;
      const report = runCli(['report', '--json', dir]);
      rmSync(dirname(dir), { recursive: true, force: true });
      assert.equal(report.status, 0, report.stderr);
      const rows = JSON.parse(report.stdout) as { calls: number }[];
      return rows.reduce((n, row) => n + row.calls, 0);
    },
  },
};

function jsonRows(stdout: string): { count: number }[] {
  const line = stdout
    .split('\n')
    .filter((l) => l.startsWith('['))
    .at(-1);
  return line === undefined ? [] : (JSON.parse(line) as { count: number }[]);
}

const STARTED = /^(Counting|Timing|Histogram of|Tracing|Recording) \d+ /m;

/** Run upscope until its probes are in, send the requests, end it (Ctrl-C or --duration). */
async function measure(
  server: Server,
  args: string[],
  end: 'ctrl-c' | 'duration',
): Promise<Spawned> {
  const running = spawnUpscope(args);
  try {
    await waitFor(running, STARTED, 'stderr', 60_000);
    await listening(server);
    await send(server.port, REQUESTS, server.answer);
    // A child's hit on the bpf engine is counted in the kernel at once; a ptrace one once
    // the tracer has served it: let the last one come before the run ends.
    await sleep(300);
    if (end === 'ctrl-c') running.child.kill('SIGINT');
    await ended(running, 120_000);
  } finally {
    running.child.kill('SIGKILL');
  }
  return running;
}

/** Start the server as the test's child (for -p), once it listens. */
async function startServer(server: Server): Promise<ChildProcess> {
  server.reset();
  const child = spawn('sh', ['-c', `exec ${server.command}`], { stdio: 'ignore' });
  await listening(server);
  if (server.workers) {
    // The master forks its workers right after it listens.
    const deadline = Date.now() + 30_000;
    while (workersOf(child.pid!) < 2 && Date.now() < deadline) await sleep(20);
  }
  return child;
}

function workersOf(pid: number): number {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean).length;
  } catch {
    return 0;
  }
}

async function stopServer(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await once(child, 'exit');
}

const ENGINES: Record<Command, readonly string[]> = {
  count: ['bpf', 'ptrace'],
  latency: ['bpf', 'ptrace'],
  hist: ['bpf', 'ptrace'],
  trace: ['tracefs', 'bpf', 'ptrace'],
  record: ['bpf', 'ptrace'],
};

for (const make of [forkServer, nginx]) {
  describe(`servers: ${make.name === 'nginx' ? 'nginx (a master and 2 workers)' : 'a C server forking a child per connection'}`, () => {
    test('-p on the parent: every request is seen by count, latency, hist and trace on every engine', async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      if (make === nginx && !existsSync(NGINX)) {
        if (!requireHost(t, { commands: ['nginx'] })) return;
      }
      const dir = mkdtempSync(join(tmpdir(), 'upscope-servers-'));
      const server = make(dir, await freePort());
      const child = await startServer(server);
      try {
        const pid = String(child.pid);
        for (const command of Object.keys(COMMANDS) as Command[]) {
          for (const engine of ENGINES[command]) {
            const children = server.workers ? ['--children'] : [];
            const args = ['--engine', engine, '-p', pid, ...children];
            const run = await measure(
              server,
              [...COMMANDS[command].args(server.probe), ...args],
              'ctrl-c',
            );
            const what = `${command} --engine ${engine} -p ${children.join(' ')}`;
            assert.equal(run.child.exitCode, 0, `${what}\n${run.stderr}`);
            assert.equal(COMMANDS[command].seen(run.stdout), REQUESTS, `${what}\n${run.stdout}`);
            assert.doesNotMatch(run.stderr, /not covered/, what);
            assert.equal(child.exitCode, null, `${what}: the server runs on`);
          }
        }
        if (server.workers) {
          // Without --children the workers that serve are not covered, and one line says so.
          const runs = [
            ...['tracefs', 'bpf', 'ptrace'].map((engine) => ({
              command: 'trace' as const,
              engine,
            })),
            ...['bpf', 'ptrace'].map((engine) => ({ command: 'count' as const, engine })),
            ...['bpf', 'ptrace'].map((engine) => ({ command: 'record' as const, engine })),
          ];
          for (const { command, engine } of runs) {
            const run = await measure(
              server,
              [...COMMANDS[command].args(server.probe), '--engine', engine, '-p', pid],
              'ctrl-c',
            );
            assert.equal(run.child.exitCode, 0, run.stderr);
            assert.match(
              run.stderr,
              new RegExp(
                `^upscope: process ${pid} has 2 child processes started before this run \\(\\d+, \\d+\\), not covered: add --children to take them too$`,
                'm',
              ),
              `${command} --engine ${engine}`,
            );
            assert.equal(COMMANDS[command].seen(run.stdout), 0, `${engine}\n${run.stdout}`);
          }
        }
      } finally {
        await stopServer(child);
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test('-c: every request is seen; at --duration or Ctrl-C the server gets SIGTERM, its handler runs, nothing of it is left', async (t) => {
      if (!requireHost(t, { root: true, commands: ['gcc'] })) return;
      if (make === nginx && !existsSync(NGINX)) {
        if (!requireHost(t, { commands: ['nginx'] })) return;
      }
      const dir = mkdtempSync(join(tmpdir(), 'upscope-servers-'));
      const server = make(dir, await freePort());
      try {
        for (const command of Object.keys(COMMANDS) as Command[]) {
          for (const engine of ENGINES[command]) {
            server.reset();
            // count ends at --duration (long enough for the requests on a loaded machine),
            // the others at Ctrl-C.
            const end = command === 'count' ? 'duration' : 'ctrl-c';
            const args = [
              ...COMMANDS[command].args(server.probe),
              '--engine',
              engine,
              '-c',
              server.command,
              '--kill-after',
              '10',
              ...(end === 'duration' ? ['--duration', '4'] : []),
            ];
            const what = `${command} --engine ${engine} -c (${end})`;
            const run = await measure(server, args, end);
            assert.equal(run.child.exitCode, 0, `${what}\n${run.stderr}`);
            assert.equal(COMMANDS[command].seen(run.stdout), REQUESTS, `${what}\n${run.stdout}`);
            assert.ok(server.terminated(), `${what}: the server's SIGTERM handler ran`);
            const leader = server.leader();
            assert.ok(leader > 0, what);
            assert.deepEqual(groupMembers(leader), [], `${what}: no process of it is left`);
          }
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}
