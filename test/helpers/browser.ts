import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

/** Debian's chromium: the browser the tests open pages in (never a downloaded one). */
export const CHROMIUM = '/usr/bin/chromium';

export interface Browser {
  readonly context: BrowserContext;
  close(): Promise<void>;
}

/**
 * Headless Debian chromium, driven by playwright-core, with a fresh profile directory of its
 * own (removed by close()) and nothing that reaches the network on its own.
 */
export async function openBrowser(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'upscope-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    close: async () => {
      try {
        await context.close();
      } finally {
        rmSync(profile, { recursive: true, force: true });
      }
    },
  };
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.json': 'application/json',
  '.svg': 'image/svg+xml',
  '.wasm': 'application/wasm',
  '.woff2': 'font/woff2',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

export interface StaticServer {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serve a directory, and `files` (path -> content) beside it, on a loopback port chosen by the
 * kernel: for pages that fetch what they open (speedscope's #profileURL=).
 */
export async function serveStatic(
  root: string,
  files: Readonly<Record<string, string | Uint8Array>> = {},
): Promise<StaticServer> {
  const server: Server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    const extra = files[path];
    let body: string | Uint8Array | undefined = extra;
    if (body === undefined) {
      const file = normalize(join(root, path === '/' ? 'index.html' : path));
      if (file.startsWith(root)) {
        try {
          body = readFileSync(file);
        } catch {
          body = undefined;
        }
      }
    }
    if (body === undefined) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(path)] ?? 'application/octet-stream' });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The part of a page's DOM that pixelsOf() uses (the tests are type-checked without the DOM). */
interface PageDom {
  Image: new () => { src: string; width: number; height: number; decode(): Promise<void> };
  document: {
    createElement(tag: 'canvas'): {
      width: number;
      height: number;
      getContext(kind: '2d'): {
        drawImage(image: unknown, x: number, y: number): void;
        getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray };
      };
    };
  };
}

/**
 * The colour of the pixels of a PNG screenshot at points (CSS pixels at scale 1), decoded by
 * the browser itself: `rgb(r,g,b)` each.
 */
export async function pixelsOf(
  context: BrowserContext,
  png: Uint8Array,
  points: readonly { x: number; y: number }[],
): Promise<string[]> {
  const page = await context.newPage();
  try {
    return await page.evaluate(
      async ({ data, points }) => {
        // Run in the page: its DOM, typed here as far as it is used.
        const dom = globalThis as unknown as PageDom;
        const image = new dom.Image();
        image.src = `data:image/png;base64,${data}`;
        await image.decode();
        const canvas = dom.document.createElement('canvas');
        canvas.width = image.width;
        canvas.height = image.height;
        const g = canvas.getContext('2d');
        g.drawImage(image, 0, 0);
        return points.map(({ x, y }) => {
          const [r, gr, b] = g.getImageData(Math.round(x), Math.round(y), 1, 1).data;
          return `rgb(${r},${gr},${b})`;
        });
      },
      { data: Buffer.from(png).toString('base64'), points },
    );
  } finally {
    await page.close();
  }
}
