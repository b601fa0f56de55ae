#!/usr/bin/env node
// The `upscope` command. The TypeScript sources are compiled and bundled into dist/cli.cjs by
// `npm ci` (prepare), with V8's code cache of it (see load-bundle.js).
import { loadBundle } from './load-bundle.js';

loadBundle()
  .main(process.argv.slice(2))
  .then((status) => {
    process.exitCode = status;
  });
