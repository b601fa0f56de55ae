import { ProbeError } from '../errors/index.js';

/** Where an endpoint listens. */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * An endpoint's address: `PORT` or `:PORT` listen on loopback (127.0.0.1), as the safe
 * default for what exposes a process's function calls; another host is given explicitly:
 * `0.0.0.0:9464`, `10.0.0.5:9464`, `[::]:9464`, `localhost:9464`.
 */
export function parseListenAddress(value: string, option: string): ListenAddress {
  const m = /^(?:(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)?:)?([0-9]{1,5})$/.exec(value.trim());
  const port = m === null ? Number.NaN : Number(m[2]);
  if (m === null || !(port >= 0 && port <= 65535)) {
    throw new ProbeError(
      'ERR_USAGE',
      `Cannot use ${option} "${value}": give PORT (on 127.0.0.1) or HOST:PORT, e.g. ${option} 9464 or ${option} 0.0.0.0:9464`,
    );
  }
  const host = m[1] === undefined || m[1] === '' ? '127.0.0.1' : m[1].replace(/^\[|\]$/g, '');
  return { host, port };
}

/** `host:port` as a URL's authority (`[::1]:9464` for IPv6). */
export function formatAddress(address: ListenAddress): string {
  return address.host.includes(':')
    ? `[${address.host}]:${address.port}`
    : `${address.host}:${address.port}`;
}
