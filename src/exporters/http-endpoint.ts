import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { ProbeError } from '../errors/index.js';
import { formatAddress, type ListenAddress } from './address.js';

/** A request's handler, for endpoints that answer more than GET on fixed paths. */
export type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** A path's handler: the status, content type and body of the answer. */
export type Route = () =>
  | Promise<{ status: number; type: string; body: string }>
  | { status: number; type: string; body: string };

const WORDS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'the port is in use by another program',
  EACCES: 'permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE)',
  EADDRNOTAVAIL: 'no interface of this machine has that address',
  ENOTFOUND: 'the host name is not known',
  EAI_AGAIN: 'the host name cannot be resolved now',
};

/**
 * A small HTTP endpoint serving GET on a few paths (`/metrics`, `/ready`...), listening before
 * anything is attached so that a port in use is said at once, in one line. close() stops it
 * and ends open connections (a scraper's keep-alive ones too).
 */
export class HttpEndpoint {
  readonly #server: Server;
  readonly address: ListenAddress;

  private constructor(server: Server, address: ListenAddress) {
    this.#server = server;
    this.address = address;
  }

  /** Listen at `address` (`option` names it in errors) with these routes. */
  static listen(
    address: ListenAddress,
    option: string,
    routes: Readonly<Record<string, Route>>,
  ): Promise<HttpEndpoint> {
    return HttpEndpoint.serve(address, option, (req, res) => {
      const path = (req.url ?? '/').split('?')[0]!;
      const route = routes[path];
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD' }).end();
        return;
      }
      if (route === undefined) {
        res
          .writeHead(404, { 'content-type': 'text/plain; charset=utf-8' })
          .end(`upscope serves ${Object.keys(routes).join(', ')}\n`);
        return;
      }
      Promise.resolve()
        .then(route)
        .then(
          ({ status, type, body }) => res.writeHead(status, { 'content-type': type }).end(body),
          (err: unknown) =>
            res
              .writeHead(500, { 'content-type': 'text/plain; charset=utf-8' })
              .end(`${err instanceof Error ? err.message : String(err)}\n`),
        );
    });
  }

  /**
   * Listen at `address` (`option` names it in errors), every request going to `handler`
   * (which answers it whole: methods, paths, streams).
   */
  static async serve(
    address: ListenAddress,
    option: string,
    handler: Handler,
  ): Promise<HttpEndpoint> {
    const server = createServer(handler);
    server.keepAliveTimeout = 5000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err: NodeJS.ErrnoException) => {
        const code = err.code ?? 'EIO';
        reject(
          new ProbeError(
            'ERR_LISTEN',
            `Cannot listen on ${formatAddress(address)} for ${option}: ${WORDS[code] ?? err.message} (${code})`,
            {
              hints:
                code === 'EADDRINUSE'
                  ? [`Give ${option} another port, or stop what listens there (ss -ltnp)`]
                  : [],
              cause: err,
            },
          ),
        );
      });
      server.listen(address.port, address.host, () => resolve());
    });
    // The port actually bound (PORT 0 asks for any free one).
    const bound = server.address();
    const port = typeof bound === 'object' && bound !== null ? bound.port : address.port;
    server.unref();
    return new HttpEndpoint(server, { host: address.host, port });
  }

  /** Stop listening and end every connection. Idempotent. */
  async close(): Promise<void> {
    if (!this.#server.listening) return;
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.#server.closeAllConnections();
    await closed;
  }
}
