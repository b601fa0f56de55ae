import { randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import { userInfo } from 'node:os';
import {
  type DoctorView,
  type FunctionsView,
  functionDisplayName,
  type LeaksRequest,
  listFunctions,
  listObjects,
  listProcesses,
  listSourceLines,
  listUsdtProbes,
  type MeasureKind,
  type MeasureRequest,
  type OpenRequest,
  ProbeError,
  type ProcessRow,
  parseSpec,
  type RecordingTreeView,
  type RecordRequest,
  type ResolveView,
  resolveProbes,
  runDoctor,
  type StreamMessage,
  TOKEN_HEADER,
  type ValidateView,
} from '../../api/index.js';
import { InternalError, renderError } from '../../errors/index.js';
import { formatAddress, HttpEndpoint, type ListenAddress } from '../../exporters/index.js';
import { hex } from '../../output/index.js';
import { renderSite, renderSkipped } from '../commands/resolve.js';
import { LeakResult } from './leak-result.js';
import { errorText, Measurement, uiEngines } from './measurement.js';
import { RecordingResult } from './recording-result.js';

/** How often the page is sent its measurements. */
const TICK_MS = 1000;
const KINDS: readonly MeasureKind[] = ['count', 'latency', 'trace', 'stacks'];
const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '[::1]']);

/** Where the page's files are: beside the CLI bundle, beside tsc's output, or from src/. */
function pageDir(): string {
  for (const relative of ['./page/', '../../page/', '../../../dist/page/']) {
    const dir = new URL(relative, import.meta.url).pathname;
    if (existsSync(`${dir}index.html`)) return dir;
  }
  throw new InternalError('Cannot find the page of upscope ui: dist/page/ is missing', undefined);
}

const STATIC: Readonly<Record<string, string>> = {
  '/app.js': 'text/javascript; charset=utf-8',
  '/app.css': 'text/css; charset=utf-8',
  '/favicon.svg': 'image/svg+xml',
};

/** What a page started or opened: a measurement, a recording of calls, a leak report. */
type Result = Measurement | RecordingResult | LeakResult;

/** A page connected to the event stream; its measurements and recordings end when it goes. */
interface Client {
  readonly id: string;
  readonly res: ServerResponse;
  readonly results: Map<string, Result>;
}

export interface UiServerOptions {
  readonly address: ListenAddress;
  /** The option that gave the address, for errors (`--port`, `--listen`). */
  readonly option: string;
  /** Told of what happens (a page connected, went away, detached). */
  readonly onNotice?: ((text: string) => void) | undefined;
}

/**
 * `upscope ui`'s server: the page, a JSON API over the library, and one event stream per page
 * with its measurements every second. Every request must carry the token of the URL it
 * prints; a Host header that is not this server's address or a loopback name (DNS rebinding),
 * and an Origin that is not the page's own (another site in the same browser), are refused
 * with 403 before anything else is looked at. A page's measurements end when its stream
 * closes; close() ends them all.
 */
export class UiServer {
  readonly #endpoint: HttpEndpoint;
  readonly #token: string;
  readonly #clients = new Map<string, Client>();
  readonly #notice: (text: string) => void;
  readonly #ticker: NodeJS.Timeout;
  readonly #pageDir: string;
  #nextId = 1;
  #closed = false;

  private constructor(
    endpoint: HttpEndpoint,
    token: string,
    options: UiServerOptions,
    dir: string,
  ) {
    this.#endpoint = endpoint;
    this.#token = token;
    this.#pageDir = dir;
    this.#notice = options.onNotice ?? (() => {});
    this.#ticker = setInterval(() => this.#tick(), TICK_MS);
  }

  static async start(options: UiServerOptions): Promise<UiServer> {
    const dir = pageDir();
    const token = randomBytes(24).toString('base64url');
    let server: UiServer | undefined;
    const endpoint = await HttpEndpoint.serve(options.address, options.option, (req, res) => {
      if (server === undefined) {
        res.writeHead(503).end();
        return;
      }
      server.#handle(req, res);
    });
    server = new UiServer(endpoint, token, options, dir);
    return server;
  }

  /** The address it listens on. */
  get address(): ListenAddress {
    return this.#endpoint.address;
  }

  /** The page's URL, with its token. */
  get url(): string {
    const address = this.address;
    const host =
      address.host === '0.0.0.0' || address.host === '::'
        ? { ...address, host: '127.0.0.1' }
        : address;
    return `http://${formatAddress(host)}/?token=${this.#token}`;
  }

  /** Whether a loopback address was bound (the default), rather than one others reach. */
  get loopbackOnly(): boolean {
    const host = this.address.host;
    return host === 'localhost' || host === '::1' || /^127\./.test(host);
  }

  /** Measurements and recordings running now, over every page. */
  get running(): number {
    let n = 0;
    for (const client of this.#clients.values()) {
      for (const r of client.results.values()) if (r.running) n++;
    }
    return n;
  }

  /** End every measurement (probes removed, commands ended), every stream, and listening. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#ticker);
    const clients = [...this.#clients.values()];
    this.#clients.clear();
    await Promise.all(clients.map((client) => this.#endClient(client)));
    await this.#endpoint.close();
  }

  /** At exit: remove every probe now, without waiting. */
  closeSync(): void {
    for (const client of this.#clients.values()) {
      for (const r of client.results.values()) {
        r.closeSync();
        r.dispose();
      }
    }
  }

  async #endClient(client: Client): Promise<void> {
    const results = [...client.results.values()];
    const running = results.filter((r) => r.running);
    await Promise.all(results.map((r) => r.stop().catch(() => {})));
    for (const r of results) r.dispose();
    client.results.clear();
    if (running.length > 0) {
      this.#notice(`page ${client.id} gone: ${running.length} measurements stopped, detached`);
    }
    client.res.end();
  }

  /** Whether the Host header names this server: its address, or a loopback name. */
  #hostAllowed(host: string | undefined): boolean {
    if (host === undefined) return false;
    const m = /^(\[[0-9a-fA-F:.]+\]|[^:]+)(?::(\d+))?$/.exec(host);
    if (m === null) return false;
    const name = m[1]!.toLowerCase();
    if (LOOPBACK_NAMES.has(name) || /^127\.\d+\.\d+\.\d+$/.test(name)) return true;
    // Asked to listen elsewhere: that address, as an IP literal (a name could be rebound).
    const own = this.address.host.includes(':') ? `[${this.address.host}]` : this.address.host;
    const literal = isIP(name.replace(/^\[|\]$/g, '')) !== 0;
    return literal && (name === own || own === '0.0.0.0' || own === '[::]');
  }

  #tokenOf(req: IncomingMessage, url: URL): string | undefined {
    const header = req.headers[TOKEN_HEADER];
    if (typeof header === 'string') return header;
    return url.searchParams.get('token') ?? undefined;
  }

  #tokenGood(given: string | undefined): boolean {
    if (given === undefined) return false;
    const a = Buffer.from(given);
    const b = Buffer.from(this.#token);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://upscope.invalid');
    const host = req.headers.host;
    const origin = req.headers.origin;
    // A browser sends Origin on cross-site requests (and on every POST): it must be the page's
    // own. A request without one (a navigation, curl) is judged by its token and Host alone.
    const originGood = origin === undefined || origin === `http://${host}`;
    if (!this.#hostAllowed(host) || !originGood || !this.#tokenGood(this.#tokenOf(req, url))) {
      res.writeHead(403, { 'content-type': 'text/plain; charset=utf-8' }).end('Forbidden\n');
      return;
    }
    // Nothing of the page may be framed, cached, or sent elsewhere.
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader('cache-control', 'no-store');
    res.setHeader('referrer-policy', 'no-referrer');
    const path = url.pathname;
    if (req.method === 'GET' || req.method === 'HEAD') {
      if (path === '/') {
        this.#page(res);
        return;
      }
      const type = STATIC[path];
      if (type !== undefined) {
        res.writeHead(200, { 'content-type': type });
        res.end(readFileSync(`${this.#pageDir}${path.slice(1)}`));
        return;
      }
      if (path === '/api/events') {
        this.#stream(req, res);
        return;
      }
      const get = this.#gets[path];
      if (get !== undefined) {
        this.#answer(res, () => get(url.searchParams));
        return;
      }
      const exported = /^\/api\/export\/([^/]+)\/([a-z]+)$/.exec(path);
      if (exported !== null) {
        this.#export(res, exported[1]!, exported[2]!);
        return;
      }
    } else if (req.method === 'POST') {
      const post = this.#posts[path];
      if (post !== undefined) {
        if (!/^application\/json\b/.test(req.headers['content-type'] ?? '')) {
          res.writeHead(415, { 'content-type': 'text/plain; charset=utf-8' }).end('JSON only\n');
          return;
        }
        readBody(req).then(
          (body) => this.#answer(res, () => post(body)),
          () => res.writeHead(400).end(),
        );
        return;
      }
    }
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found\n');
  }

  #page(res: ServerResponse): void {
    const html = readFileSync(`${this.#pageDir}index.html`, 'utf8');
    res.writeHead(200, {
      'content-type': 'text/html; charset=utf-8',
      // Only its own script and style; nothing from elsewhere, no inline script.
      'content-security-policy':
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    });
    res.end(html.replaceAll('%TOKEN%', this.#token));
  }

  #answer(res: ServerResponse, body: () => unknown): void {
    Promise.resolve()
      .then(body)
      .then(
        (value) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? hex(v) : v)));
        },
        (err: unknown) => {
          res.writeHead(err instanceof ProbeError && err.category !== 'internal' ? 400 : 500, {
            'content-type': 'application/json',
          });
          res.end(JSON.stringify({ error: errorText(err) }));
        },
      );
  }

  #stream(req: IncomingMessage, res: ServerResponse): void {
    const client: Client = { id: `p${this.#nextId++}`, res, results: new Map() };
    this.#clients.set(client.id, client);
    res.writeHead(200, {
      'content-type': 'text/event-stream',
      'cache-control': 'no-store',
      connection: 'keep-alive',
    });
    send(res, { type: 'hello', client: client.id });
    this.#notice(`page ${client.id} connected`);
    req.socket.setKeepAlive(true);
    res.on('close', () => {
      if (this.#clients.delete(client.id)) void this.#endClient(client);
    });
  }

  #tick(): void {
    for (const client of this.#clients.values()) {
      if (client.results.size === 0) {
        client.res.write(': idle\n\n'); // keeps proxies (ssh's too) from closing it
        continue;
      }
      this.#sendResults(client);
    }
  }

  #sendResults(client: Client): void {
    send(client.res, {
      type: 'results',
      results: [...client.results.values()].map((r) => r.view()),
    });
  }

  #export(res: ServerResponse, id: string, format: string): void {
    for (const client of this.#clients.values()) {
      const file = client.results.get(id)?.exportFile(format);
      if (file === undefined) continue;
      res.writeHead(200, {
        'content-type': file.type,
        'content-disposition': `attachment; filename="${file.name}"`,
      });
      res.end(file.body);
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('No such export\n');
  }

  /** A result of any page, by its id. */
  #result(id: string): Result | undefined {
    for (const client of this.#clients.values()) {
      const result = client.results.get(id);
      if (result !== undefined) return result;
    }
    return undefined;
  }

  /** The page whose event stream has this id: what it starts is its own. */
  #client(body: unknown): Client {
    const client = this.#clients.get(String((body as { client?: unknown }).client));
    if (client === undefined) {
      throw usage('Cannot start: this page has no open event stream', ['Reload the page']);
    }
    return client;
  }

  /**
   * Adds a page's result; the page is sent the results at once when it changes by itself, and
   * the steps of its start as they come.
   */
  #add(client: Client, result: Result): { id: string } {
    client.results.set(result.id, result);
    result.onEnd = () => this.#tick();
    if (!(result instanceof LeakResult)) {
      result.onProgress = (progress, fraction) =>
        send(client.res, { type: 'progress', id: result.id, progress, fraction });
    }
    // Its card now, not at the next tick: a start's steps are shown on its card, and a start
    // quicker than a tick (libc's 3,706 functions plan in under a second) would show none.
    this.#sendResults(client);
    return { id: result.id };
  }

  readonly #gets: Readonly<Record<string, (query: URLSearchParams) => unknown>> = {
    '/api/recording': (query): RecordingTreeView => {
      const result = this.#result(required(query, 'id'));
      const tree = result instanceof RecordingResult ? result.tree() : undefined;
      if (tree === undefined) {
        throw usage('Cannot show the recording: it is not read yet, or was closed');
      }
      return tree;
    },
    '/api/processes': (): ProcessRow[] =>
      listProcesses().map((p) => ({ ...p, exe: p.exe ?? null })),
    '/api/doctor': async (): Promise<DoctorView> => {
      const report = await runDoctor({ mount: false });
      const engines = uiEngines();
      return {
        checks: report.checks,
        engines,
        why:
          engines.aggregate === null
            ? 'BPF is not allowed for this user: count, latency and flame graphs need root or CAP_BPF and CAP_PERFMON'
            : null,
        user: `${userInfo().username} (uid ${process.getuid?.()})`,
      };
    },
    '/api/functions': async (query): Promise<FunctionsView> => {
      const target = required(query, 'target');
      const pid = pidOf(query);
      const listing = await listFunctions(target, { pid });
      let usdt: FunctionsView['usdt'] = [];
      try {
        const found = await listUsdtProbes(listing.target.path, { pid });
        usdt = found.objects.flatMap((o) =>
          o.probes.map((p) => ({
            provider: p.provider,
            name: p.name,
            args: p.args,
            vaddr: hex(p.vaddr),
          })),
        );
      } catch {
        usdt = []; // a file without notes, or unreadable ones: no USDT probes to offer
      }
      return {
        path: listing.target.path,
        displayPath: listing.target.displayPath,
        stripped: listing.stripped,
        debugFile: listing.debugFile ?? null,
        functions: listing.functions.map((fn) => ({
          name: functionDisplayName(fn),
          symbol: fn.name,
          vaddr: hex(fn.vaddr),
          fileOffset: fn.fileOffset === undefined ? null : hex(fn.fileOffset),
          size: Number(fn.sizeBytes),
        })),
        usdt,
        objects: pid === undefined ? [] : elfObjects(pid),
      };
    },
  };

  readonly #posts: Readonly<Record<string, (body: unknown) => unknown>> = {
    '/api/validate': (body): ValidateView => {
      const specs = stringList(body, 'specs');
      return {
        errors: specs.map((text) =>
          parseSpec(text)
            .diagnostics.filter((d) => d.severity === 'error')
            .map((d) =>
              renderError(
                new ProbeError(d.code, d.message, {
                  source: { text, span: d.span },
                  hints: d.hints,
                }),
              ),
            ),
        ),
      };
    },
    '/api/resolve': async (body): Promise<ResolveView> => {
      const spec = stringList(body, 'specs')[0];
      if (spec === undefined) throw usage('Cannot resolve: give a spec');
      const pid = optionalPid(body);
      const plan = await resolveProbes([spec], { pid });
      const group = `upscope_${process.pid}`;
      const text = [
        ...plan.sites.map((site) => renderSite(site, group)),
        ...plan.skipped.map(renderSkipped),
      ].join('\n');
      let source: ResolveView['source'] = null;
      let sourceWhy: string | null = null;
      const fn = (body as { function?: unknown }).function;
      const target = (body as { target?: unknown }).target;
      if (typeof fn === 'string' && typeof target === 'string') {
        try {
          const listing = listSourceLines(target, fn, { pid });
          source = {
            file: listing.file,
            lines: listing.lines.map((l) => ({
              line: l.line,
              text: l.text ?? null,
              probe: l.probe,
            })),
          };
        } catch (err) {
          sourceWhy = errorText(err);
        }
      }
      return { text, errors: plan.errors.map((e) => renderError(e)), source, sourceWhy };
    },
    '/api/measure': async (body): Promise<{ id: string }> => {
      const request = body as Partial<MeasureRequest>;
      const client = this.#clients.get(String(request.client));
      if (client === undefined) {
        throw usage('Cannot start a measurement: this page has no open event stream', [
          'Reload the page',
        ]);
      }
      if (!KINDS.includes(request.kind as MeasureKind)) {
        throw usage(`Cannot measure "${request.kind}": give count, latency, trace or stacks`);
      }
      const specs = stringList(body, 'specs');
      if (specs.length === 0) throw usage('Cannot start a measurement: give at least one spec');
      const pid = optionalPid(body);
      const command = typeof request.command === 'string' ? request.command : undefined;
      const measurement = new Measurement(`m${this.#nextId++}`, request.kind!, specs, {
        pid,
        command,
      });
      this.#add(client, measurement);
      await measurement.start();
      this.#notice(
        `${measurement.kind} ${specs.join(' ')}: ${measurement.state === 'failed' ? 'failed' : 'attached'}`,
      );
      return { id: measurement.id };
    },
    '/api/leaks': async (body): Promise<{ id: string }> => {
      const client = this.#client(body);
      const request = body as Partial<LeaksRequest>;
      const pid = optionalPid(body);
      const command =
        typeof request.command === 'string' && request.command.trim() !== ''
          ? request.command.trim()
          : undefined;
      if ((pid === undefined) === (command === undefined)) {
        throw usage('Cannot find leaks: give a process or a command, one of them', [
          'Pick a process, or a command to start, in Targets',
        ]);
      }
      const top = request.top;
      if (top !== undefined && (typeof top !== 'number' || !Number.isInteger(top) || top <= 0)) {
        throw usage(`Cannot show the top "${String(top)}" stacks: give a positive whole number`);
      }
      const older = request.olderThanMs;
      if (older !== undefined && (typeof older !== 'number' || !(older >= 0))) {
        throw usage(`Cannot use older than "${String(older)}" ms: give a duration of 0 or more`);
      }
      const found = new LeakResult(`l${this.#nextId++}`, {
        pid,
        command,
        top,
        olderThanMs: older,
        mmap: request.mmap === true,
      });
      this.#add(client, found);
      await found.start();
      this.#notice(
        `leaks of ${command ?? `process ${pid}`}: ${found.state === 'failed' ? 'failed' : 'attached'}`,
      );
      return { id: found.id };
    },
    '/api/record': (body): { id: string } => {
      const client = this.#client(body);
      const request = body as Partial<RecordRequest>;
      const pid = optionalPid(body);
      const command =
        typeof request.command === 'string' && request.command.trim() !== ''
          ? request.command.trim()
          : undefined;
      if ((pid === undefined) === (command === undefined)) {
        throw usage('Cannot record calls: give a process or a command, one of them', [
          'Pick a process, or a command to start, in Targets',
        ]);
      }
      const dir =
        typeof request.dir === 'string' && request.dir.trim() !== '' ? request.dir : undefined;
      const recording = RecordingResult.record(`r${this.#nextId++}`, {
        pid,
        command,
        targets: stringList(body, 'targets'),
        exclude: request.exclude === undefined ? undefined : stringList(body, 'exclude'),
        dir: dir?.trim(),
      });
      this.#notice(`record ${recording.view().target}: attaching`);
      return this.#add(client, recording);
    },
    '/api/open': (body): { id: string } => {
      const client = this.#client(body);
      const path = (body as Partial<OpenRequest>).path;
      if (typeof path !== 'string' || path.trim() === '' || path.includes('\0')) {
        throw usage('Cannot open a recording: give the path of its directory', [
          'A directory made by: upscope record -o DIR',
        ]);
      }
      return this.#add(client, RecordingResult.open(`r${this.#nextId++}`, path.trim()));
    },
    '/api/stop': async (body): Promise<{ stopped: number }> => {
      const { client: clientId, id } = body as { client?: unknown; id?: unknown };
      const client = this.#clients.get(String(clientId));
      if (client === undefined) return { stopped: 0 };
      const chosen = [...client.results.values()].filter((r) => id === undefined || r.id === id);
      await Promise.all(chosen.map((m) => m.stop()));
      this.#tick();
      return { stopped: chosen.length };
    },
    '/api/forget': (body): { forgotten: boolean } => {
      const { client: clientId, id } = body as { client?: unknown; id?: unknown };
      const client = this.#clients.get(String(clientId));
      const r = client?.results.get(String(id));
      if (r === undefined || r.running) return { forgotten: false };
      client!.results.delete(r.id);
      r.dispose();
      return { forgotten: true };
    },
  };
}

function send(res: ServerResponse, message: StreamMessage): void {
  res.write(`data: ${JSON.stringify(message)}\n\n`);
}

const MAX_BODY = 1 << 20;

function readBody(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      text += chunk;
      if (text.length > MAX_BODY) req.destroy();
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(text));
      } catch (err) {
        reject(err);
      }
    });
    req.on('error', reject);
  });
}

function usage(message: string, hints: string[] = []): ProbeError {
  return new ProbeError('ERR_USAGE', message, { hints });
}

function required(query: URLSearchParams, name: string): string {
  const value = query.get(name);
  if (value === null || value === '') throw usage(`Cannot answer: give ${name}`);
  return value;
}

function pidOf(query: URLSearchParams): number | undefined {
  const value = query.get('pid');
  if (value === null || value === '') return undefined;
  if (!/^\d+$/.test(value)) throw usage(`Cannot use pid "${value}": give a process id`);
  return Number(value);
}

function optionalPid(body: unknown): number | undefined {
  const pid = (body as { pid?: unknown }).pid;
  if (pid === undefined || pid === null) return undefined;
  if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) {
    throw usage(`Cannot use pid "${String(pid)}": give a process id`);
  }
  return pid;
}

function stringList(body: unknown, name: string): string[] {
  const value = (body as Record<string, unknown> | null)?.[name];
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) {
    throw usage(`Cannot answer: give ${name} as a list of strings`);
  }
  return value.map((v: string) => v.trim()).filter((v) => v !== '');
}

/** The ELF files a process maps (its program first), for the Functions view's file picker. */
function elfObjects(pid: number): string[] {
  try {
    return listObjects(pid)
      .objects.filter((o) => !o.deleted && /\.so(\.|$)|\/[^/.]+$/.test(o.path))
      .map((o) => o.path);
  } catch {
    return [];
  }
}
