#!/usr/bin/env node
// Build: `tsc` type-checks and emits dist/ (the library, imported as `upscope`), then esbuild
// bundles the command line into one file, dist/cli.cjs, and V8's code cache of it is made
// (bin/load-bundle.js). Measured: loading the 76 modules of dist/ one by one took about 75 ms
// of every `upscope` run; the bundle loads in about 25 ms from its cache.
// The page of `upscope ui` is bundled too (below), into dist/page/.
// esbuild runs as its command-line program (waited for), not through its JavaScript API, whose
// service process outlives the build and is left for PID 1 to reap.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';

const root = new URL('..', import.meta.url).pathname;
function run(script, args) {
  try {
    execFileSync(process.execPath, [`${root}node_modules/${script}`, ...args], {
      stdio: 'inherit',
    });
  } catch (err) {
    // The tool has printed its own errors; end with its status, without a stack trace.
    process.exit(typeof err.status === 'number' ? err.status : 1);
  }
}

run('typescript/bin/tsc', ['-p', `${root}tsconfig.json`]);
run('typescript/bin/tsc', ['-p', `${root}tsconfig.page.json`]);
run('esbuild/bin/esbuild', [
  `${root}src/cli/main.ts`,
  `--outfile=${root}dist/cli.cjs`,
  '--bundle',
  '--platform=node',
  // CommonJS, compiled by bin/load-bundle.js with a code cache (Node.js 20 keeps none of an
  // ES module's); import.meta.url is the bundle's own URL.
  '--format=cjs',
  '--target=node20',
  // Loaded lazily at run time (WebAssembly, native code): never bundled.
  '--external:iced-x86',
  '--external:koffi',
  // Loaded only when --prometheus, --otlp or serve's YAML config asks for them.
  '--external:@opentelemetry/*',
  '--external:prom-client',
  '--external:yaml',
  '--define:import.meta.url=upscopeBundleUrl',
  // Its import() of what it loads only when asked (above) made a require(): a script's
  // import() needs a loader that Node.js 20 has only as an experimental feature.
  '--supported:dynamic-import=false',
  // NO_STATIC_PRIVATE: Node.js 20's V8 compiles a class with a `static #` member wrongly from
  // a code cache (its instances then fail their own private methods' checks, "Receiver must
  // be class #arm", or the process dies of SIGSEGV): the sources have none, and one added is
  // lowered by esbuild rather than left to V8.
  '--supported:class-private-static-method=false',
  '--supported:class-private-static-field=false',
  '--supported:class-private-static-accessor=false',
  "--banner:js=const upscopeBundleUrl = require('node:url').pathToFileURL(__filename).href;",
  '--log-level=warning',
]);
rmSync(`${root}dist/cli.mjs`, { force: true });
execFileSync(
  process.execPath,
  ['--input-type=module', '-e', "(await import('./bin/load-bundle.js')).writeCodeCache()"],
  { cwd: root, stdio: 'inherit' },
);
// The worker that finds a large pattern's returns while the command plans its entries
// (src/plan/return-scan.ts), beside the bundle that starts it.
run('esbuild/bin/esbuild', [
  `${root}src/plan/return-scan-worker.ts`,
  `--outfile=${root}dist/return-scan-worker.js`,
  '--bundle',
  '--platform=node',
  '--format=esm',
  '--target=node20',
  '--external:iced-x86',
  '--log-level=warning',
]);
// The page of `upscope ui` (src/ui-page: preact, uPlot), served by upscope from dist/page/:
// one script and one style sheet, minified, nothing fetched from elsewhere.
run('esbuild/bin/esbuild', [
  `${root}src/ui-page/main.tsx`,
  `--outfile=${root}dist/page/app.js`,
  '--bundle',
  '--minify',
  '--format=esm',
  '--target=es2020',
  '--jsx=automatic',
  '--jsx-import-source=preact',
  '--legal-comments=none',
  '--log-level=warning',
]);
mkdirSync(`${root}dist/page`, { recursive: true });
for (const file of ['index.html', 'favicon.svg']) {
  copyFileSync(`${root}src/ui-page/${file}`, `${root}dist/page/${file}`);
}
