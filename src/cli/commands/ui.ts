import type { Command } from '@commander-js/extra-typings';
import { ProbeError } from '../../errors/index.js';
import { type ListenAddress, parseListenAddress } from '../../exporters/index.js';
import type { Io } from '../io.js';
import type { CommandResult } from '../main.js';
import { UiServer } from '../ui/ui-server.js';

function parsePort(value: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) {
    throw new ProbeError('ERR_USAGE', `Cannot use --port "${value}": give a port, 0 to 65535`);
  }
  return Number(value);
}

export function registerUi(program: Command, io: Io, result: CommandResult): void {
  program
    .command('ui')
    .summary('a web page to pick a process, find a function and measure it with a click')
    .description(
      'Serve a local web page (built into upscope: no network needed) on 127.0.0.1 at a free ' +
        'port (--port to choose it) and print its URL, which holds a random token: open it in ' +
        'a browser. The page lists processes and what this machine allows, searches the ' +
        "functions and USDT probes of a process's files, shows resolve's details and source " +
        'lines, and with a click counts calls, keeps a live latency histogram (p50/p90/p99), ' +
        'traces events with fetched values, or draws a flame graph of the stacks that reach a ' +
        'function; it exports flame graph SVG, Chrome trace and JSON. It records the calls of ' +
        'a process or command (upscope record) or opens a recording directory, and shows its ' +
        'call tree, functions and flame graph, with the exports of upscope graph and replay. ' +
        'Its Stop, closing the ' +
        'page, or stopping upscope ui (Ctrl-C) removes every probe. Requests without the ' +
        "token, from another site's page (Origin) or by another host name (Host) are refused. " +
        'The page can probe any process this user can: it listens on loopback only unless ' +
        '--listen names another address. Over ssh: ssh -L PORT:127.0.0.1:PORT HOST, then open ' +
        'the URL on your machine.',
    )
    .option('--port <port>', 'listen on this port of 127.0.0.1 (default: a free one)', parsePort)
    .option(
      '--listen <addr>',
      'listen on HOST:PORT instead, e.g. 0.0.0.0:8080 (anyone who can reach it and has the URL can probe processes as this user)',
    )
    .action(async (options) => {
      if (options.port !== undefined && options.listen !== undefined) {
        throw new ProbeError('ERR_USAGE', 'Cannot use --port with --listen: give one', {
          hints: ['--port N is --listen 127.0.0.1:N'],
        });
      }
      const address: ListenAddress =
        options.listen !== undefined
          ? parseListenAddress(options.listen, '--listen')
          : { host: '127.0.0.1', port: options.port ?? 0 };
      const server = await UiServer.start({
        address,
        option: options.listen !== undefined ? '--listen' : '--port',
        onNotice: (text) => io.err(`upscope: ${text}\n`),
      });
      const user = `${process.getuid?.() === 0 ? 'root' : `uid ${process.getuid?.()}`}`;
      if (!server.loopbackOnly) {
        io.err(
          `upscope: WARNING: listening on ${options.listen}, not only on this machine's loopback: ` +
            `whoever reaches this address with the URL below can attach probes to any process, as ${user}\n`,
        );
      }
      io.err(
        `upscope: the page can probe processes as ${user}: keep its URL (its token) to yourself\n`,
      );
      io.out(`${server.url}\n`);
      io.err('upscope: Ctrl-C stops the server and removes every probe\n');
      const onExit = () => server.closeSync();
      process.on('exit', onExit);
      const signal = await new Promise<NodeJS.Signals>((resolve) => {
        for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.once(s, () => resolve(s));
      });
      // A second signal while the probes come off: remove them at once, and end.
      const force = (s: NodeJS.Signals) => {
        server.closeSync();
        process.exit(s === 'SIGINT' ? 130 : 143);
      };
      for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(s, force);
      const running = server.running;
      await server.close();
      process.off('exit', onExit);
      io.err(
        `upscope: ${signal}: server stopped${running > 0 ? `, ${running} measurements stopped and detached` : ''}\n`,
      );
      result.status = 0;
    });
}
