// The command's bundle (dist/cli.cjs, made by scripts/build.mjs), compiled with V8's code cache
// of it (dist/cli.cjs.cache, made by the build): parsing and compiling 1.6 MB of JavaScript was
// most of the time an `upscope` run takes to start (about 80 ms of a 150 ms `upscope --version`;
// with the cache about 25 ms). A cache V8 refuses (another Node.js, other V8 flags, a bundle
// built again without its cache) only costs the compile it would have saved.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { Script } from 'node:vm';

const BUNDLE = new URL('../dist/cli.cjs', import.meta.url).pathname;
const CACHE = `${BUNDLE}.cache`;

/** The bundle compiled (from the cache when there is one V8 takes) and run: its exports. */
export function loadBundle() {
  return run(compileBundle());
}

/** The bundle compiled, from its cache when there is one (cachedDataRejected says if taken). */
export function compileBundle() {
  return compile(cacheOf());
}

/** Writes the bundle's code cache, made after its module ran (what a start always compiles). */
export function writeCodeCache() {
  const script = compile(undefined);
  run(script);
  writeFileSync(CACHE, script.createCachedData());
}

function cacheOf() {
  try {
    return readFileSync(CACHE);
  } catch {
    return undefined;
  }
}

function compile(cachedData) {
  let source;
  try {
    source = readFileSync(BUNDLE, 'utf8');
  } catch {
    process.stderr.write(
      `error: cannot start upscope: ${BUNDLE} is not there; build it with: npm ci (or npm run build)\n`,
    );
    process.exit(1);
  }
  return new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, {
    filename: BUNDLE,
    cachedData,
  });
}

function run(script) {
  const module = { exports: {} };
  script
    .runInThisContext()
    .call(module.exports, module.exports, createRequire(BUNDLE), module, BUNDLE, dirname(BUNDLE));
  return module.exports;
}
